-- dynamic_batch.lua: a decode-like loop over random batch sizes 1..64, with and
-- without power-of-two buckets: recordings, hit rate (replays / visits), pool memory
-- and wall-clock time (gt.clock; os.clock would add up the cpu backend's worker threads).
-- The time includes recording each new shape: few recordings is what makes buckets fast.
--   gtlua examples/dynamic_batch.lua [steps]
local steps = tonumber(arg and arg[1]) or 200
local H, L = 128, 4
local W, B = {}, {}
for i = 1, L do
  W[i] = gt.randn({ H, H }, { seed = i, scale = 1 / math.sqrt(H) }):static()
  B[i] = gt.zeros{ H }:static()
end

local function model(x)
  for i = 1, L do x = gt.ops.linear(x, W[i], B[i], "relu") end
  return x
end

local function kib(n) return string.format("%.1f KiB", n / 1024) end

local function run(label, opts)
  local quiet = gt.on_warning
  gt.on_warning = function() end
  local step = gt.tree(model, opts)
  local rnd, t0 = 7, gt.clock()
  local last
  for _ = 1, steps do
    rnd = (rnd * 1103515245 + 12345) % 2147483648
    local batch = 1 + math.floor(rnd / 65536) % 64
    local y = step(gt.zeros{ batch, H })
    assert(y.shape[1] == batch, "outputs keep the real batch size")
    last = y
  end
  gt.sync()
  local dt = gt.clock() - t0
  gt.on_warning = quiet
  local s = step:stats()
  local visits = s.warmups + s.replays + s.eager + s.recorded
  print(string.format("%-16s recordings %3d  nodes %3d  hit rate %5.1f%%  eager %3d  pool %9s  (high water %s)  %.2f s wall",
    label, s.recorded, s.nodes, 100 * s.replays / math.max(visits, 1), s.eager,
    kib(s.pool.reserved), kib(s.pool.high_water), dt))
  return last
end

print(("backend %s, %d steps, batch sizes 1..64, %d layers of %d"):format(gt.backend(), steps, L, H))
run("no buckets", { name = "plain" })
run("pow2 buckets", { name = "bucketed", buckets = { dim = 1, sizes = gt.buckets.pow2(64), narrow = { 1 } } })
