#!/bin/sh
# cgdiff.sh N [MODE]: exclusive instructions per call by function (callgrind, difference of two runs)
N=${1:-1}; M=${2:-tree}
for R in 10000 20000; do
  REPS=$R GTLUA_CPU_THREADS=1 SHAPES=$SHAPES GTLUA_CPU_NOEXEC=1 GTLUA_BACKEND=cpu valgrind --tool=callgrind --callgrind-out-file=/tmp/cg$R.out build/gtlua .probe/cpuop.lua $N $M >/dev/null 2>&1
  callgrind_annotate --threshold=100 /tmp/cg$R.out 2>/dev/null | sed -n 's/^ *\([0-9,]*\) ([ 0-9.]*%)  \(.*\)$/\1\t\2/p' | tr -d ',' > /tmp/f$R.txt
done
awk -F'\t' 'NR==FNR {a[$2]=$1; next} {d=($1-a[$2])/10000; if (d>=5) printf "%8.0f  %s\n", d, $2}' /tmp/f10000.txt /tmp/f20000.txt | sort -rn | head -${TOP:-40}
