#!/bin/sh
# fuzz.sh [seeds] [calls] [first]: differential fuzzing of trees against eager
# runs (spec/fuzz.lua) over more seeds than `make test` runs; prints each
# mismatch and a closing count.  GTLUA_BACKEND picks the backend.
set -eu
cd "$(dirname "$0")/.."
BIN=${GTLUA_BIN_UNDER_TEST:-build/gtlua}
exec "$BIN" -e "
package.path = './?.lua;' .. package.path
local F = require 'spec.fuzz'
local seeds, calls, first = ${1:-1000}, ${2:-16}, ${3:-1}
local bad = 0
for seed = first, first + seeds - 1 do
  local ok, msg = pcall(F.check, seed, calls)
  if not ok or msg then bad = bad + 1; print(ok and msg or ('seed ' .. seed .. ': error: ' .. tostring(msg))) end
  if seed % 8 == 0 then collectgarbage() end
end
print(('%d programs, %d calls each, %d mismatches (%s backend)'):format(seeds, calls, bad, gt.backend()))
os.exit(bad == 0 and 0 or 1)"
