#!/bin/sh
# fuzz.sh [wide|MODE] [seeds] [calls] [first]: differential fuzzing of trees
# against eager runs (spec/harness/fuzz.lua; with wide, spec/harness/fuzz_wide.lua: views,
# in-place writes, item branches, buckets, keys, ...; with a word of a mode
# of fuzz_wide, e.g. keyed or steady, only its seeds of such modes) over more
# seeds than `make test` runs; prints each mismatch and a closing count.
# GTLUA_BACKEND picks the backend.  (steady programs fuse their paths after
# 8 calls of one: give them 40 calls.)
# fuzz.sh keyedfuzz [seeds [steps [first]]]: keyed trees against eager runs
# (spec/harness/fuzz_keyed.lua; default 2500 seeds of 60 steps, about 10^5
# calls); the closing line counts calls, hits and mismatches, and a crash
# names its seed (rerun it with KEYEDFUZZ_TRACE=1 to see each step).
set -eu
cd "$(dirname "$0")/.."
BIN=${GTLUA_BIN_UNDER_TEST:-build/gtlua}
if [ "${1:-}" = keyedfuzz ]; then
  shift
  at=$(mktemp)
  trap 'rm -f "$at"' EXIT
  status=0
  KEYEDFUZZ_AT=$at "$BIN" -e "
package.path = './?.lua;' .. package.path
local bad = require('spec.harness.fuzz_keyed').run(${3:-1}, ${1:-2500}, ${2:-60})
os.exit(#bad == 0 and 0 or 1, true)" || status=$?
  if [ "$status" -gt 128 ]; then
    echo "keyedfuzz: gtlua died of signal $((status - 128)) in seed $(cat "$at") (KEYEDFUZZ_TRACE=1 $0 keyedfuzz 1 ${2:-60} $(cat "$at"))"
  fi
  exit "$status"
fi
fuzzer=spec.harness.fuzz only=
case "${1:-}" in
  wide) fuzzer=spec.harness.fuzz_wide; shift ;;
  [a-z]*) fuzzer=spec.harness.fuzz_wide; only=$1; shift ;;
esac
exec "$BIN" -e "
package.path = './?.lua;' .. package.path
gt.on_warning = function() end   -- (keyed refusals, recording limits: expected)
local F = require '$fuzzer'
local seeds, calls, first = ${1:-1000}, ${2:-16}, ${3:-1}
local bad = 0
local only, ran = '$only', 0
for seed = first, first + seeds - 1 do
  local ok, msg = true, nil
  if only == '' or select(2, F.program(seed)):find(only, 1, true) then ok, msg = pcall(F.check, seed, calls); ran = ran + 1 end
  if not ok or msg then bad = bad + 1; print(ok and msg or ('seed ' .. seed .. ': error: ' .. tostring(msg))) end
  if seed % 8 == 0 then collectgarbage() end
end
print(('%d programs, %d calls each, %d mismatches (%s backend)'):format(ran, calls, bad, gt.backend()))
os.exit(bad == 0 and 0 or 1, true)   -- (closing the state: no handles left for a leak check)"
