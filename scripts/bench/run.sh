#!/bin/sh
# run.sh: the one bench command (make bench): gtlua scenarios, PyTorch twins, raw launch floor, then RESULTS.md.
#   sh scripts/bench/run.sh            # on the GPU machine: results in $OUT (else build/bench)
#   BENCH_QUICK=1 sh scripts/bench/run.sh   # CI sizes, for trying the pipeline on the cpu backend
#   BENCH_ONLY=decode sh scripts/bench/run.sh   # only these scenarios (--only of both tools; nothing copied)
# Builds nothing: build/gtlua must exist (make).  Each stage has a time limit
# (T_GTLUA, T_TORCH, ... below) so that the whole run stays under ~8 minutes;
# a stage that fails or runs out of time leaves a note, and the report says
# what is missing.  RESULTS.md and steps.svg are copied into scripts/bench/
# only from a full run on the cuda backend.  Exits non-zero only when the
# gtlua stage or the report failed.
set -u
cd "$(dirname "$0")/../.." || exit 1
dir=${OUT:-build/bench}
BIN=${GTLUA_BIN:-build/gtlua}
quick=
[ -n "${BENCH_QUICK:-}" ] && quick=--quick
only=
[ -n "${BENCH_ONLY:-}" ] && only="--only $BENCH_ONLY"
T_GTLUA=${T_GTLUA:-120} T_TORCH=${T_TORCH:-270} T_NVCC=${T_NVCC:-60} T_FLOOR=${T_FLOOR:-45} T_REPORT=${T_REPORT:-15}
mkdir -p "$dir"
start=$(date +%s)
say() { printf '[bench %4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

# stage LOG LIMIT CMD...: runs CMD under timeout, output to the terminal and LOG; returns its status.
stage() {
  log=$1 limit=$2
  shift 2
  rcf=$(mktemp)
  { timeout -k 10 "$limit" "$@"; echo $? > "$rcf"; } 2>&1 | tee "$log"
  rc=$(cat "$rcf")
  rm -f "$rcf"
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && say "stopped at the ${limit} s limit"
  return "$rc"
}

if [ ! -x "$BIN" ]; then echo "run.sh: $BIN is not built (run make first)"; exit 1; fi
backend=$("$BIN" -e 'io.write(gt.backend())' 2>/dev/null || echo '?')
say "results in $dir; backend $backend"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$dir/nvidia-smi.txt" 2>/dev/null \
    || rm -f "$dir/nvidia-smi.txt"
fi

# Cores: every measured process (gtlua, PyTorch, the raw floor) runs on the
# same quickest quarter of the cores (cpus.sh: each core's graph launch
# timed in cpus.cal, the choice in cpus.txt), as the medians otherwise
# followed where the scheduler put each process.  BENCH_CPUS=0,3 picks them;
# BENCH_CPUS=all pins nothing; below four cores nothing is pinned.
# Within them, each measured program's main thread (the one that issues the
# steps) runs on the quickest core alone (BENCH_MAIN_CPU, the first of
# BENCH_CPUS when that is given), once its set-up is done; its other
# threads (the driver's, PyTorch's compile workers) keep the quarter: a
# thread that moves between cores finds their caches cold, and a replay's
# host time and its spread grow with it.
pin=
if [ "${BENCH_CPUS:-}" != all ] && command -v taskset >/dev/null 2>&1; then
  cpus=${BENCH_CPUS:-}
  [ -z "$cpus" ] && cpus=$(GTLUA_BIN="$BIN" sh scripts/bench/cpus.sh "$dir/cpus.cal")
  if [ -n "$cpus" ]; then
    pin="taskset -c $cpus"
    if [ -z "${BENCH_MAIN_CPU:-}" ]; then
      if [ -z "${BENCH_CPUS:-}" ] && [ -s "$dir/cpus.cal" ]; then
        BENCH_MAIN_CPU=$(sort -n "$dir/cpus.cal" | head -n 1 | awk '{ print $2 }')
      else
        BENCH_MAIN_CPU=${cpus%%,*}
      fi
    fi
    export BENCH_MAIN_CPU
    echo "$cpus main $BENCH_MAIN_CPU" > "$dir/cpus.txt"
    say "every measured process runs on cpus $cpus (BENCH_CPUS), its main thread on cpu $BENCH_MAIN_CPU (BENCH_MAIN_CPU)"
  fi
fi

# 5 by default: on the H200's host a process now and then runs everything
# (the pure-C floor included) two to four times slower, and with 3 processes
# two such were enough to move a median.
RUNS=${BENCH_RUNS:-5}
say "1/4 gtlua scenarios, $RUNS processes (limit ${T_GTLUA} s each), then the cond scenario"
# LuaJIT's traces form differently in each process: every figure is the median
# over RUNS processes, with their spread (gtlua_bench.lua --merge).  Each
# process runs every scenario (not --each: a fresh process measures slower on
# the H200 for its first seconds, see gtlua_bench.lua's prime).
gtlua_rc=0
k=1
while [ "$k" -le "$RUNS" ]; do
  # shellcheck disable=SC2086
  stage "$dir/gtlua.$k.log" "$T_GTLUA" $pin "$BIN" scripts/bench/gtlua_bench.lua $quick $only --json "$dir/gtlua.$k.json" \
    || { gtlua_rc=$?; say "gtlua run $k failed (status $gtlua_rc)"; }
  k=$((k + 1))
done
# shellcheck disable=SC2086
"$BIN" scripts/bench/gtlua_bench.lua --merge $(ls "$dir"/gtlua.[0-9]*.json 2>/dev/null) --json "$dir/gtlua.json" \
  || { gtlua_rc=1; say "merging the gtlua runs failed"; }
if [ -z "$only" ] || echo ",$BENCH_ONLY," | grep -q ",cond,"; then
  # the cond scenario in RUNS processes too, merged the same way
  k=1
  while [ "$k" -le "$RUNS" ]; do
    # shellcheck disable=SC2086
    stage "$dir/cond.$k.log" "$T_GTLUA" $pin "$BIN" scripts/bench/cond_bench.lua $quick --json "$dir/cond.$k.json" \
      || say "cond run $k failed (soft)"
    k=$((k + 1))
  done
  # shellcheck disable=SC2086
  "$BIN" scripts/bench/gtlua_bench.lua --merge $(ls "$dir"/cond.[0-9]*.json 2>/dev/null) --json "$dir/cond.json" \
    || say "merging the cond runs failed (soft)"
fi

say "2/4 PyTorch twins (limit ${T_TORCH} s)"
if command -v python3 >/dev/null 2>&1 && python3 -c 'import torch' >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  stage "$dir/torch.log" "$T_TORCH" $pin python3 scripts/bench/torch_twins.py $quick $only \
    --budget "$(( T_TORCH - 30 ))" --json "$dir/torch.json" || say "torch stage failed (soft)"
else
  say "skipped: no python3 with torch here"
fi

if [ -z "$quick" ] && [ -z "$only" ] && command -v python3 >/dev/null 2>&1 && python3 -c 'import torch' >/dev/null 2>&1; then
  say "2b/4 GPT decoder against PyTorch (scripts/bench/gpt_check.py)"
  stage "$dir/gpt_check.txt" "${T_GPT:-150}" python3 scripts/bench/gpt_check.py --bin "$BIN" || say "gpt_check failed (soft)"
fi

say "3/4 raw launch floor"
if [ ! -x .anchors/launch_floor ] && [ -f .anchors/launch_floor.cu ] && command -v nvcc >/dev/null 2>&1; then
  say "compiling .anchors/launch_floor.cu"
  stage "$dir/nvcc.log" "$T_NVCC" nvcc -O2 -arch=sm_90 -o .anchors/launch_floor .anchors/launch_floor.cu -lcuda \
    || say "nvcc failed (soft)"
fi
if [ -x .anchors/launch_floor ]; then
  # (a program of one thread and the driver's: pinned to the main core as a whole)
  fpin=$pin
  [ -n "$pin" ] && [ -n "${BENCH_MAIN_CPU:-}" ] && fpin="taskset -c $BENCH_MAIN_CPU"
  stage "$dir/launch_floor.txt" "$T_FLOOR" $fpin .anchors/launch_floor || say "launch_floor failed (soft)"
else
  say "skipped: no .anchors/launch_floor (carry it, see scripts/bench/README.md)"
fi
# what a graph launch costs against its kernels' length, and launched from
# the device (launch_probe.c: built with nvcc when no build/launch_probe came)
if [ -z "$quick" ] && [ -z "$only" ]; then
  if [ ! -x build/launch_probe ] && command -v nvcc >/dev/null 2>&1; then
    stage "$dir/nvcc-probe.log" "$T_NVCC" nvcc -O2 -o build/launch_probe scripts/bench/probes/launch_probe.c -lcuda -lnvrtc \
      || say "nvcc failed for launch_probe.c (soft)"
  fi
  if [ -x build/launch_probe ]; then
    stage "$dir/launch_probe.txt" "$T_FLOOR" ${fpin:-} build/launch_probe || say "launch_probe failed (soft)"
  fi
fi

say "4/4 report"
stage "$dir/report.log" "$T_REPORT" "$BIN" scripts/bench/report.lua "$dir" --out "$dir/RESULTS.md" --svg "$dir/steps.svg"
report_rc=$?
# only a full run on a GPU becomes the repository's RESULTS.md
if [ "$report_rc" = 0 ] && [ "$backend" = cuda ] && [ -z "$quick" ] && [ -z "$only" ] &&
   [ "$(cd "$dir" && pwd)" != "$(pwd)/scripts/bench" ]; then
  cp "$dir/RESULTS.md" "$dir/steps.svg" scripts/bench/ && say "copied RESULTS.md and steps.svg to scripts/bench/"
fi
say "done"
[ "$gtlua_rc" = 0 ] && [ "$report_rc" = 0 ]
