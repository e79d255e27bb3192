#!/bin/sh
# sanitize.sh TOOL: the spec suite on the cuda backend under NVIDIA compute-sanitizer
# (TOOL: memcheck, racecheck, synccheck or initcheck), one spec file per process, so
# that a process the tool or the program ends (a signal, a timeout) costs one file,
# not the run.  Meant for the GPU machine (scripts/device-test.sh TOOL prints the
# command); prints a line per spec file and a summary, and exits 1 when a spec
# failed, the tool found errors (exit 86) or a process died.
#   SPECS="spec/a_spec.lua ..."   the files to run (default: every spec/*_spec.lua)
#   SANITIZE_DEADLINE=580         seconds for the whole run (the device command's
#                                 limit is 600 s): a file is cut at the deadline, and
#                                 none starts in its last 30 s; the rest are listed
#   SANITIZE_FILE_TIMEOUT=300     seconds for one file at most
#   SANITIZER_OPTS="..."          more compute-sanitizer options; one of ours given here
#                                 replaces ours (e.g. "--show-backtrace yes")
#   SANITIZE_CHILDREN=1           check the gtlua processes specs start, too
#   SANITIZE_JIT=off              run the specs with LuaJIT's compiler off
#   COMPUTE_SANITIZER=path        default /usr/local/cuda/bin/compute-sanitizer
#   SANITIZE_BACKEND=cuda         (cpu only to try this script without a GPU, with a
#                                 stand-in for the tool, as spec/hardening_spec.lua does)
# Logs: $OUT/sanitize-TOOL/<spec>.log (the program) and <spec>.<pid>.cs.log (the tool).
#
# The options and why (compute-sanitizer's manual, "Command Line Options"):
#   --show-backtrace device     no host backtraces: the tool saves one by unwinding the
#                               host stack, which runs through LuaJIT's interpreter and
#                               JIT-compiled traces (no unwind tables for traces); a
#                               walk that goes wrong there can end the process
#                               (the suspected SIGABRT of the tree/dynamic/report specs)
#   --report-api-errors no      (memcheck) the specs make CUDA calls fail on purpose
#                               (cuGraphExecUpdate refusing an update, probes of optional
#                               driver entry points): each report would save a host
#                               backtrace; gtlua raises its own error for every failed
#                               call that matters, so nothing is lost
#   --target-processes application-only   the gtlua running Busted only: specs start
#                               gtlua, sh, python and timeout processes by the hundred
#   --require-cuda-init no      a file whose specs are all pending on cuda is no error
#   --launch-timeout 0          no limit on the target's connection to the tool (a slow
#                               first kernel compile under the tool is not a failure)
#   --error-exitcode 86         errors the tool found are told apart from failed specs
#   --check-api-memory-access yes (memcheck) copies and fills are checked against mapped
#                               memory (the default, stated)
# What memcheck cannot see: a tree pool and ordinary memory are a few large mapped
# ranges (cuMemMap), carved into tensors by gtlua, so an overrun from one tensor into
# a neighbour in the same range is not reported; one past a range's mapped end is.
set -u
cd "$(dirname "$0")/.." || exit 1
tool=${1:-}
case "$tool" in
  memcheck|racecheck|synccheck|initcheck) ;;
  *) echo "usage: sh scripts/sanitize.sh memcheck|racecheck|synccheck|initcheck" >&2; exit 2 ;;
esac
cs=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
[ -x "$cs" ] || cs=$(command -v compute-sanitizer || true)
[ -n "$cs" ] && [ -x "$cs" ] || { echo "sanitize.sh: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 2; }
BIN=${GTLUA_BIN_UNDER_TEST:-build/gtlua}
BUSTED=${BUSTED:-$(command -v busted || echo /usr/bin/busted)}
out=${OUT:-.devout}/sanitize-$tool
mkdir -p "$out"
export GTLUA_BACKEND="${SANITIZE_BACKEND:-cuda}" GTLUA_BIN_UNDER_TEST="$BIN"

# ours, except those SANITIZER_OPTS gives itself (the tool may refuse an option twice)
extra=" ${SANITIZER_OPTS:-} " opts="--tool $tool"
add() { case "$extra" in *" $1 "*|*" $1="*) ;; *) opts="$opts $1 $2" ;; esac; }
add --show-backtrace device
add --require-cuda-init no
add --launch-timeout 0
add --error-exitcode 86
if [ "${SANITIZE_CHILDREN:-0}" = 1 ]; then add --target-processes all; else add --target-processes application-only; fi
[ "$tool" = memcheck ] && add --report-api-errors no && add --check-api-memory-access yes
opts="$opts ${SANITIZER_OPTS:-}"
jit=""
[ "${SANITIZE_JIT:-on}" = off ] && jit="-e jit.off()"
# timing specs cannot hold under a tool that serializes kernels; browser specs need Chromium;
# slow ones (the big fuzz) would not fit the deadline
tags="browser,slow,timing"

echo "sanitize: $($cs --version 2>/dev/null | tail -1)"
echo "sanitize: $cs $opts"
deadline=${SANITIZE_DEADLINE:-580} per=${SANITIZE_FILE_TIMEOUT:-300}
start=$(date +%s) bad=0 ran=0 left=""
for f in ${SPECS:-spec/*_spec.lua}; do
  name=$(basename "$f" .lua)
  t0=$(date +%s)
  limit=$((deadline - (t0 - start)))
  if [ "$limit" -lt 30 ]; then left="$left $f"; continue; fi
  [ "$limit" -gt "$per" ] && limit=$per
  rm -f "$out/$name".*
  # shellcheck disable=SC2086
  timeout -k 5 "$limit" "$cs" $opts --log-file "$out/$name.%p.cs.log" \
    "$BIN" $jit "$BUSTED" --run=gpu --exclude-tags="$tags" "$f" > "$out/$name.log" 2>&1
  rc=$?
  ran=$((ran + 1))
  summary=$(grep -E '[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors?' "$out/$name.log" | tail -1)
  found=$(cat "$out/$name".*.cs.log 2>/dev/null | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' | tail -1)
  case $rc in
    0) verdict=ok ;;
    86) verdict="tool found errors" ;;
    124|137) verdict="timed out after ${limit}s" ;;
    *) if [ "$rc" -gt 128 ]; then verdict="died of signal $((rc - 128))"; else verdict="exit $rc"; fi ;;
  esac
  [ "$rc" = 0 ] || bad=$((bad + 1))
  printf '%-24s %-22s %4ss  %s  %s\n' "$name" "$verdict" $(( $(date +%s) - t0 )) "${summary:-(no Busted summary)}" "$found"
  if [ "$rc" != 0 ] && [ "$rc" != 86 ]; then
    tail -n 15 "$out/$name.log" | sed 's/^/    | /'      # glibc, LuaJIT or C++ runtime's last words
  fi
done
echo "sanitize $tool: $ran files run, $bad not clean; logs in $out"
[ -z "$left" ] || echo "sanitize $tool: not run within ${deadline}s; send again with SPECS=\"${left# }\""
[ "$bad" = 0 ] && [ -z "$left" ]
