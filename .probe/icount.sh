#!/bin/sh
# icount.sh N: instructions per replayed op (callgrind, difference of two runs)
N=${1:-128}; M=${2:-tree}
ir() { REPS=$1 GTLUA_CPU_THREADS=1 MLP=$MLP GTLUA_CPU_NOEXEC=1 GTLUA_BACKEND=cpu valgrind --tool=callgrind --callgrind-out-file=/dev/null build/gtlua .probe/cpuop.lua $N $M 2>&1 | awk '/Collected/ {print $4}'; }
a=$(ir 1000); b=$(ir 3000)
echo "$N $M: $(( (b - a) / 2000 )) instr/call, $(( (b - a) / 2000 / N )) instr/op"
