#!/bin/sh
# coldlines.sh [N] [MODE] [TOP]: what a replayed call of N gt.ops.linear ops
# (scripts/bench/probes/op_probe.lua, cpu backend, kernels off) costs when the
# host's caches are cold, as after a long step: 2 MB written before each call
# (op_probe's EVICT), callgrind simulating a 1 MB last-level cache; the
# difference of a run of 700 calls and one of 200, per call: instructions and
# lines fetched from memory (the eviction's own excluded), and the TOP
# functions by lines.  Unlike a clock it repeats, to a few lines as LuaJIT's
# traces form differently from one process to the next.  MODE: tree
# (default), keyed or floor; SHAPES=1 as op_probe.  Needs valgrind.
set -eu
cd "$(dirname "$0")/../../.."
N=${1:-32}; M=${2:-tree}; TOP=${3:-15}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for R in 200 700; do
  EVICT=2 ICOUNT=1 REPS=$R GTLUA_CPU_THREADS=1 GTLUA_CPU_NOEXEC=1 GTLUA_BACKEND=cpu valgrind --tool=callgrind \
    --cache-sim=yes --D1=32768,8,64 --LL=1048576,16,64 --separate-threads=yes \
    --callgrind-out-file="$out/cg$R" build/gtlua scripts/bench/probes/op_probe.lua "$N" "$M" >/dev/null 2>&1
  callgrind_annotate --inclusive=no --show=Ir,DLmr,DLmw --threshold=100 "$out/cg$R-01" > "$out/a$R.txt" 2>/dev/null
done
build/gtlua scripts/bench/probes/coldlines.lua "$out/a200.txt" "$out/a700.txt" "$TOP"
