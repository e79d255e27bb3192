#!/bin/sh
d=$PWD/.devlua; export LUA_PATH="$d/share/?.lua;$d/share/?/init.lua;;" LUA_CPATH="$d/lib/?.so;;"
export BENCH_MAIN_CPU=${CPU:-3}
for r in 1 2; do
  for v in "6 2" "1 2" "6 10"; do taskset -c 2,3 build/gtlua .probe/benchvar.lua $v grow-512; done
  taskset -c 2,3 build/gtlua .probe/benchvar.lua 6 2 chain
done
for r in 1 2; do H=256 GTLUA_BACKEND=cuda taskset -c 3 build/gtlua .probe/cpuop.lua 512 tree; done
