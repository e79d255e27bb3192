#!/bin/sh
# soak.sh [REPLAYS [TREES]]: a leak soak.  Replays one small tree REPLAYS times
# (default 10^6), then creates, calls and drops TREES trees (default 10^4),
# printing the process's RSS, ordinary memory in use and tree pool bytes at the
# start and the end of each phase, and the process's address space (VmSize:
# the cpu backend's reservations; a cuda device's are not in it); they should
# stay flat.  In the trees phase "tree pool" is the pool memory of trees still
# alive (none once they are dropped).
#   GTLUA_BACKEND=cpu|cuda picks the backend (auto by default);
#   GTLUA_BIN_UNDER_TEST names the binary (default build/gtlua).
# Exits 1 when RSS grew by more than SOAK_RSS_SLACK_KB (default 32768), the
# address space by more than SOAK_VM_SLACK_KB (default 1048576: a tree that
# kept its reservation would add 65536) or the memory counters did not come
# back to their start values.  The default run takes seconds on the cpu backend.
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${GTLUA_BIN_UNDER_TEST:-build/gtlua}
exec "$BIN" - "${1:-1000000}" "${2:-10000}" "${SOAK_RSS_SLACK_KB:-32768}" "${SOAK_VM_SLACK_KB:-1048576}" <<'EOF'
local replays, ntrees, slack, vm_slack = tonumber(arg[1]), tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])

local function status_kb(field)
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local kb = f:read("*a"):match(field .. ":%s*(%d+)")
  f:close()
  return tonumber(kb) or 0
end
local function rss_kb() return status_kb("VmRSS") end

local K = gt.compile([[
__global__ void axpb(float *y, const float *x, int n, float a, float b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}
__global__ void add(float *y, const float *a, const float *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
}
]], { name = "soak.cu" })

local N = 256
local function body(x, a)
  local h = gt.tensor({ N })
  K.axpb(1, N, h, x, N, a, 1)
  local y = gt.tensor({ N })
  K.add(1, N, y, h, x, N)
  return y
end

local failed = false
local function settle() collectgarbage() collectgarbage() end
local function snap(what, pool)
  settle()
  local s = { rss = rss_kb(), mem = gt.memory(), pool = pool(), vm = status_kb("VmSize") }
  print(("%-22s RSS %8d KiB   ordinary memory %10d B   tree pool in use %10d B   address space %10d KiB"):format(
    what, s.rss, s.mem, s.pool, s.vm))
  io.stdout:flush()
  return s
end
local function compare(a, b, what)
  local grew = b.rss - a.rss
  local ok = grew <= slack and b.vm - a.vm <= vm_slack and b.mem == a.mem and b.pool == a.pool
  print(("%-22s RSS %+d KiB, ordinary memory %+d B, pool %+d B, address space %+d KiB: %s"):format(what, grew,
    b.mem - a.mem, b.pool - a.pool, b.vm - a.vm, ok and "flat" or "GROWS"))
  failed = failed or not ok
end

print(("soak: backend %s, %d replays of one tree, %d trees created and dropped"):format(gt.backend(), replays, ntrees))
local x = gt.randn({ N }, { seed = 1 })

-- phase 1: one tree, replayed
local step = gt.tree(body, { name = "soak" })
for _ = 1, 100 do step(x, 2) end   -- warm up, record, settle the allocator
local function pool() return step:stats().pool.in_use end
local t0, a = gt.clock(), snap("replays: start", pool)
local every = math.max(1, math.floor(replays / 10))
for i = 1, replays do
  step(x, i % 7)   -- a scalar that changes: patched, same graph
  if i % every == 0 then
    io.write(("  %8d replays  RSS %d KiB  %.1f s\n"):format(i, rss_kb(), gt.clock() - t0))
    io.stdout:flush()
  end
end
local b = snap("replays: end", pool)
local st = step:stats()
print(("  %.2f us per call; %d replays, %d graphs recorded"):format((gt.clock() - t0) / math.max(replays, 1) * 1e6,
  st.replays, st.recorded))
compare(a, b, "replays")

-- phase 2: trees made, called (warmup, record, replay) and dropped; the pool
-- bytes of the trees still alive (gt.internal's trees holds them weakly)
local function live_pools()
  local n = 0
  for _, t in pairs(require("gt.internal").trees) do if t.name == "soak_drop" then n = n + t:stats().pool.reserved end end
  return n
end
local function make_and_drop()
  local t = gt.tree(body, { name = "soak_drop" })
  for _ = 1, 3 do t(x, 3) end
end
for _ = 1, 100 do make_and_drop() end
t0, a = gt.clock(), snap("trees: start", live_pools)
every = math.max(1, math.floor(ntrees / 10))
for i = 1, ntrees do
  make_and_drop()
  if i % 200 == 0 then collectgarbage() end
  if i % every == 0 then
    io.write(("  %8d trees  RSS %d KiB  %.1f s\n"):format(i, rss_kb(), gt.clock() - t0))
    io.stdout:flush()
  end
end
b = snap("trees: end", live_pools)
compare(a, b, "trees")
print(failed and "soak: memory grows" or "soak: flat")
os.exit(failed and 1 or 0, true)   -- close the state: finalizers free every tree
EOF
