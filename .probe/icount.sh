#!/bin/sh
# icount.sh N [MODE]: instructions per replayed call and op in the main thread (callgrind, difference of two runs)
N=${1:-128}; M=${2:-tree}
ir() {
  rm -f /tmp/cgi.out*
  REPS=$1 GTLUA_CPU_THREADS=1 MLP=$MLP SHAPES=$SHAPES GTLUA_CPU_NOEXEC=1 GTLUA_BACKEND=cpu valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file=/tmp/cgi.out build/gtlua .probe/cpuop.lua $N $M >/dev/null 2>&1
  awk '/^summary:/ {print $2}' /tmp/cgi.out-01
}
a=$(ir 1000); b=$(ir 3000)
echo "$N $M: $(( (b - a) / 2000 )) instr/call, $(( (b - a) / 2000 / N )) instr/op (main thread)"
