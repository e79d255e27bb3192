#!/bin/sh
# ab.sh: host cost of two builds side by side, in alternating processes on the same cores.
#   sh scripts/bench/ab.sh OLD_HOME [SCENARIOS] [N]
# OLD_HOME: another checkout, built (its build/gtlua, lua/ and kernels/); this
# checkout's build/gtlua is the new one.  Both run this checkout's
# gtlua_bench.lua (--only SCENARIOS, default chain,grow-128,grow-512) N times
# (default 6), old and new in turn, so a slow spell of the machine falls on
# both; then per scenario and mode the median cpu_us of each and new/old.
# Both are pinned to the quickest cores (cpus.sh), or BENCH_CPUS=1,2;
# BENCH_CPUS=all pins nothing.  On the H200's host, whose speed moves by 2x
# from one minute to the next, this is how a change's effect is seen.
set -u
cd "$(dirname "$0")/../.." || exit 1
old=${1:?usage: sh scripts/bench/ab.sh OLD_HOME [SCENARIOS] [N]}
only=${2:-chain,grow-128,grow-512}
n=${3:-6}
dir=$(mktemp -d)
pin= cpus=${BENCH_CPUS:-}
[ -z "$cpus" ] && cpus=$(sh scripts/bench/cpus.sh "$dir/cpus.cal")
[ -n "$cpus" ] && [ "$cpus" != all ] && command -v taskset >/dev/null 2>&1 && pin="taskset -c $cpus"
echo "ab.sh: cpus ${cpus:-all}"
i=1
while [ "$i" -le "$n" ]; do
  # shellcheck disable=SC2086
  GTLUA_HOME="$old" $pin "$old/build/gtlua" scripts/bench/gtlua_bench.lua --only "$only" --json "$dir/old.$i.json" >/dev/null 2>&1 \
    || echo "ab.sh: old run $i failed"
  # shellcheck disable=SC2086
  $pin build/gtlua scripts/bench/gtlua_bench.lua --only "$only" --json "$dir/new.$i.json" >/dev/null 2>&1 \
    || echo "ab.sh: new run $i failed"
  i=$((i + 1))
done
build/gtlua - "$dir" "$n" <<'LUA'
local json = require "gt.json"
local med = dofile("scripts/bench/gtlua_bench.lua").median
local dir, n = arg[1], tonumber(arg[2])
local vals, order = {}, {}
for _, side in ipairs { "old", "new" } do
  for i = 1, n do
    local f = io.open(("%s/%s.%d.json"):format(dir, side, i))
    if f then
      local r = json.decode(f:read("*a")); f:close()
      for _, sc in ipairs(r.scenarios or {}) do
        for mode, m in pairs(sc.modes or {}) do
          local k = sc.name .. " " .. mode
          if not vals[k] then vals[k] = { old = {}, new = {}, rold = {}, rnew = {} }; order[#order + 1] = k end
          if m.cpu_us then table.insert(vals[k][side], m.cpu_us) end
          if m.vs_floor_cpu then table.insert(vals[k]["r" .. side], m.vs_floor_cpu) end
        end
      end
    end
  end
end
table.sort(order)
-- /floor: the mode's cpu_us over its own process's floor, paired block by
-- block (gtlua_bench.lua's vs_floor_cpu): the host's speed, which moved the
-- floor itself 0.4-1.4x between the sides of one run, cancels out of it.
print(("%-22s %10s %10s %9s %10s %10s %9s   (medians of %d processes each)"):format(
  "scenario mode", "old", "new", "new/old", "old/floor", "new/floor", "new/old", n))
for _, k in ipairs(order) do
  local v = vals[k]
  local o, w = med(v.old), med(v.new)
  local line = ("%-22s %10.2f %10.2f %8.2fx"):format(k, o, w, w / o)
  if #v.rold > 0 and #v.rnew > 0 then
    local ro, rw = med(v.rold), med(v.rnew)
    line = line .. ("%11.2f %10.2f %8.2fx"):format(ro, rw, rw / ro)
  end
  print(line)
end
LUA
rm -rf "$dir"
