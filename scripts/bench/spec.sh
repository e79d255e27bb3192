#!/bin/sh
# spec.sh: the speculative scenario: gtlua's spec_bench.lua, PyTorch's spec_twin.py, then one markdown table.
#   sh scripts/bench/spec.sh                  # on the GPU machine: results in $OUT (else build/bench)
#   sh scripts/bench/spec.sh gtlua            # only the gtlua stage (then: torch 1, torch 8, each a run of its own)
#   sh scripts/bench/spec.sh torch 1 8        # only PyTorch's twin, a process (and time limit) per batch
#   BENCH_QUICK=1 sh scripts/bench/spec.sh    # CI sizes (on the cpu backend; the twin notes a missing torch)
# Builds nothing: build/gtlua must exist (make).  Writes spec_gtlua.json,
# spec_torch.B.json, their logs and spec.md (the table of spec_bench.lua
# --table, from whatever JSON files $OUT holds) into $OUT.  Each stage has a
# time limit: T_GTLUA=180, T_TORCH=420 a batch (reduce-overhead compiles
# four graphs of GPT-2 small a batch).  Pins as run.sh does when BENCH_CPUS
# is given (BENCH_MAIN_CPU: its first core unless set).  Exits non-zero
# when the gtlua stage failed (a speculative mode's tokens differing from
# plain greedy decoding fails it).
set -u
cd "$(dirname "$0")/../.." || exit 1
dir=${OUT:-build/bench}
BIN=${GTLUA_BIN:-build/gtlua}
quick=
[ -n "${BENCH_QUICK:-}" ] && quick=--quick
T_GTLUA=${T_GTLUA:-180} T_TORCH=${T_TORCH:-420}
mkdir -p "$dir"
start=$(date +%s)
say() { printf '[spec %4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }
if [ ! -x "$BIN" ]; then echo "spec.sh: $BIN is not built (run make first)"; exit 1; fi

pin=
if [ -n "${BENCH_CPUS:-}" ] && [ "${BENCH_CPUS}" != all ] && command -v taskset >/dev/null 2>&1; then
  pin="taskset -c $BENCH_CPUS"
  BENCH_MAIN_CPU=${BENCH_MAIN_CPU:-${BENCH_CPUS%%,*}}
  export BENCH_MAIN_CPU
  say "pinned to cpus $BENCH_CPUS, the main thread on cpu $BENCH_MAIN_CPU"
fi

stage=all
[ $# -gt 0 ] && { stage=$1; shift; }
rc=0
if [ "$stage" = all ] || [ "$stage" = gtlua ]; then
  say "gtlua: scripts/bench/spec_bench.lua (limit ${T_GTLUA} s)"
  # shellcheck disable=SC2086
  timeout -k 10 "$T_GTLUA" $pin "$BIN" scripts/bench/spec_bench.lua $quick --json "$dir/spec_gtlua.json" \
    > "$dir/spec_gtlua.log" 2>&1 || { rc=$?; say "gtlua stage failed (status $rc)"; }
  cat "$dir/spec_gtlua.log"
fi
if [ "$stage" = all ] || [ "$stage" = torch ]; then
  batches=$*
  [ -z "$batches" ] && { if [ -n "$quick" ]; then batches="1 2"; else batches="1 8"; fi; }
  if command -v python3 >/dev/null 2>&1; then
    for b in $batches; do
      say "PyTorch twin at batch $b (limit ${T_TORCH} s)"
      # shellcheck disable=SC2086
      timeout -k 10 "$T_TORCH" $pin python3 scripts/bench/spec_twin.py $quick --batches "$b" \
        --budget "$(( T_TORCH - 30 ))" --json "$dir/spec_torch.$b.json" > "$dir/spec_torch.$b.log" 2>&1 \
        || say "torch stage at batch $b failed (soft)"
      cat "$dir/spec_torch.$b.log"
    done
  else
    say "skipped: no python3"
  fi
fi
if [ -s "$dir/spec_gtlua.json" ]; then
  # shellcheck disable=SC2046
  "$BIN" scripts/bench/spec_bench.lua --table "$dir/spec_gtlua.json" $(ls "$dir"/spec_torch.*.json 2>/dev/null) \
    --out "$dir/spec.md" > /dev/null && say "wrote $dir/spec.md" && cat "$dir/spec.md"
fi
exit "$rc"
