#!/bin/sh
# traces.sh: LuaJIT's trace aborts on the bench scenarios (issue: a replayed
# step should run compiled; an abort on the op path means the interpreter).
#   sh scripts/bench/probes/traces.sh [SCENARIOS]     # default chain,branch,grow-128; also decode-1, decode-8
# Runs gtlua_bench.lua's full-size scenarios (on the cpu backend the graphs do
# not run their kernels, GTLUA_CPU_NOEXEC=1, so that only host work is timed
# and traced) under jit.v, then prints each abort reason with its count, the
# most frequent first, and the traces that fell back to the interpreter.
set -u
cd "$(dirname "$0")/../../.." || exit 1
BIN=${GTLUA_BIN:-build/gtlua}
only=${1:-chain,branch,grow-128}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
GTLUA_CPU_NOEXEC=1 timeout 600 "$BIN" -e "require('jit.v').start('$log')" - "$only" <<'LUA' || exit 1
local B = dofile("scripts/bench/gtlua_bench.lua")
local cfg = {}
for k, v in pairs(B.FULL) do cfg[k] = v end
if gt.backend() == "cpu" then cfg.hidden = 16 end      -- the cpu backend's eager kernels are slow
-- decode-1 and decode-8 with the tiny model on the cpu backend (the same Lua
-- path as GPT-2 small: its weights would take minutes to make there)
cfg.decode = { model = gt.backend() == "cpu" and "TINY" or "FULL", batches = { 1, 8 }, ctx = 256 }
cfg.heap_grow = -1
local res = B.run(cfg, arg[1])
for _, r in ipairs(res.scenarios) do
  local m = r.modes
  print(("%-10s host us per step: tree %.2f  keyed %s  floor %.2f"):format(r.name, m.tree.cpu_us,
    m.keyed and ("%.2f"):format(m.keyed.cpu_us) or "-", m.floor.cpu_us))
end
LUA
echo "trace aborts (count, where, why):"
grep -- '--- ' "$log" | sed 's/^\[TRACE --- //; s/\]$//' | sort | uniq -c | sort -rn | head -${TRACES_TOP:-25}
echo "fell back to the interpreter:"
grep 'fallback to interpreter' "$log" | sed 's/^\[TRACE *//; s/\]$//' | sort | uniq -c | sort -rn | head -10
