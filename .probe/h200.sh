#!/bin/sh
# per-op host cost on the device host: cpu backend (no kernels run) vs cuda
d=$PWD/.devlua; export LUA_PATH="$d/share/?.lua;$d/share/?/init.lua;;" LUA_CPATH="$d/lib/?.so;;"
CPU=${CPU:-14}
nproc; lscpu | grep -i "model name\|mhz" | head -3
for N in 32 128 512; do
  for r in 1 2 3; do
    GTLUA_CPU_NOEXEC=1 GTLUA_BACKEND=cpu taskset -c $CPU build/gtlua .probe/cpuop.lua $N tree
    for m in tree keyed floor; do GTLUA_BACKEND=cuda taskset -c $CPU build/gtlua .probe/cpuop.lua $N $m; done
  done
done
for N in 128 512; do
GTLUA_BACKEND=cuda REPS=100000 PROF=Fl PROFOUT=$OUT/prof-cuda-$N.txt taskset -c $CPU build/gtlua .probe/cpuop.lua $N tree
GTLUA_CPU_NOEXEC=1 GTLUA_BACKEND=cpu REPS=200000 PROF=Fl PROFOUT=$OUT/prof-cpu-$N.txt taskset -c $CPU build/gtlua .probe/cpuop.lua $N tree
done
which perf gdb valgrind 2>&1 | head
