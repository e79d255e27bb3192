-- dynamic_batch.lua: a decode-like loop over random batch sizes 1..64, with and
-- without power-of-two buckets: recordings, hit rate (replays / visits), pool memory,
-- the rows computed (padding adds some), the time spent recording and wall-clock time
-- (gt.clock; os.clock would add up the cpu backend's worker threads).  On a GPU each
-- recording instantiates graphs and padded rows cost little device time, so few
-- recordings make buckets fast; on the cpu backend kernels run on the host, so the
-- padded rows cost host time too: the example says so there, with what it measured.
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
  local last, rows, padded = nil, 0, 0
  for _ = 1, steps do
    rnd = (rnd * 1103515245 + 12345) % 2147483648
    local batch = 1 + math.floor(rnd / 65536) % 64
    local y = step(gt.zeros{ batch, H })
    assert(y.shape[1] == batch, "outputs keep the real batch size")
    last, rows = y, rows + batch
    local b = batch                                -- the rows the kernels computed: the bucket's
    if opts.buckets then for _, size in ipairs(opts.buckets.sizes) do if size >= batch then b = size break end end end
    padded = padded + b
  end
  gt.sync()
  local dt = gt.clock() - t0
  gt.on_warning = quiet
  local s = step:stats()
  local visits = s.warmups + s.replays + s.eager + s.recorded
  local rec = 0
  for id = 0, s.nodes - 1 do rec = rec + s.node[id].record_us end
  print(string.format("%-16s recordings %3d  hit rate %5.1f%%  pool %9s  rows %6d (%+5.1f%%)  recording %6.1f ms  %.2f s wall",
    label, s.recorded, 100 * s.replays / math.max(visits, 1), kib(s.pool.reserved), padded,
    100 * (padded / rows - 1), rec / 1e3, dt))
  return { recorded = s.recorded, rec_ms = rec / 1e3, pad = padded / rows - 1, wall = dt }
end

print(("backend %s, %d steps, batch sizes 1..64, %d layers of %d"):format(gt.backend(), steps, L, H))
local plain = run("no buckets", { name = "plain" })
local pow2 = run("pow2 buckets", { name = "bucketed", buckets = { dim = 1, sizes = gt.buckets.pow2(64), narrow = { 1 } } })
if gt.backend() == "cpu" then
  print(("cpu backend: kernels run on the host, so the %.0f%% more rows that buckets pad to cost host time, while")
    :format(100 * pow2.pad))
  print(("  they cut the recordings (%d -> %d: %.1f -> %.1f ms recording, each recording a run of the kernels too);")
    :format(plain.recorded, pow2.recorded, plain.rec_ms, pow2.rec_ms))
  print(("  the wall time moves by the difference (%.2f -> %.2f s). On a GPU padded rows cost little device time")
    :format(plain.wall, pow2.wall))
  print("  and recordings instantiate graphs, which is when buckets pay: README.md, Numbers")
end
