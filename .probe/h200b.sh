#!/bin/sh
d=$PWD/.devlua; export LUA_PATH="$d/share/?.lua;$d/share/?/init.lua;;" LUA_CPATH="$d/lib/?.so;;"
CPU=${CPU:-3}
for H in 16 256; do for N in 32 512; do for r in 1 2 3; do
  for m in tree keyed floor; do H=$H GTLUA_BACKEND=cuda taskset -c $CPU build/gtlua .probe/cpuop.lua $N $m | sed "s/^/H=$H /"; done
done; done; done
for r in 1 2; do taskset -c $CPU build/gtlua scripts/bench/gtlua_bench.lua --only chain,grow-512 2>&1 | grep -A3 -E "^(chain|grow-512) " | head -8 ; done
