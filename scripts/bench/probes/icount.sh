#!/bin/sh
# icount.sh [N] [MODE]: the host work of a replayed call of N gt.ops.linear
# ops (scripts/bench/probes/op_probe.lua, cpu backend, kernels off) in instructions,
# counted by callgrind in the main thread: the difference of a run of 12000
# calls and one of 2000, per call and per op.  Unlike a clock on a shared
# host it repeats to a few percent, but LuaJIT's traces form differently from
# one process to the next: run it a few times.  SHAPES=1: the batch size
# changes every call (seven sizes); MLP=1: layers alternate up and down
# projections.  MODE: tree (default) or keyed.  Needs valgrind.
set -eu
cd "$(dirname "$0")/../../.."
N=${1:-128}; M=${2:-tree}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ir() {
  ICOUNT=1 REPS=$1 GTLUA_CPU_THREADS=1 GTLUA_CPU_NOEXEC=1 GTLUA_BACKEND=cpu valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file="$out/cg" build/gtlua scripts/bench/probes/op_probe.lua "$N" "$M" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out/cg-01"
  rm -f "$out"/cg*
}
a=$(ir 2000); b=$(ir 12000)
echo "$N $M${SHAPES:+ SHAPES}${MLP:+ MLP}: $(( (b - a) / 10000 )) instructions a call, $(( (b - a) / 10000 / N )) an op (main thread)"
