-- quickstart.lua: a small model with a branch and a custom kernel, run in a graph
-- tree; prints the tree, checks its results against eager code and shows what
-- replaying saves: measured on a GPU; on the cpu backend (kernels run on the
-- host, so there is no launch saving to measure) the host work a replay replaces, counted.
--
--   gtlua examples/quickstart.lua                     (what `make run` shows)
--   gtlua --report=quickstart.html examples/quickstart.lua   ... and an HTML report
local gt = require "gt"
local ops = gt.ops

local batch, d, steps = 4, 32, 40

-- A custom kernel: CUDA C++ compiled at run time (NVRTC on a GPU, the host C++
-- compiler on the cpu backend).  `const float *` is read, `float *` written.
local K = gt.compile [[
__global__ void scale_shift(float *y, const float *x, float a, float b, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = a * x[i] + b;
}]]

-- Weights are static (their address never changes, which recorded graphs rely
-- on).  linear's W is {in, out}: y = x @ W + b (PyTorch's nn.Linear stores {out, in}:
-- gt.ops.transpose(W), or W:t(), gives linear's layout).
local function weight(seed, k, n) return gt.randn({ k, n }, { seed = seed, scale = 1 / math.sqrt(k) }):static() end
local W1, Wa, Wb, W2 = weight(1, d, d), weight(2, d, d), weight(3, d, d), weight(4, d, 10)
local b1, b2 = gt.zeros({ d }):static(), gt.zeros({ 10 }):static()

-- One step: a shared layer, then a branch on the host (the step's mode), then a head.
local function model(x, mode)
  local h = ops.linear(x, W1, b1, "relu")
  gt.cut()                                        -- a segment ends: what follows is a child node
  if mode == "wide" then
    h = ops.linear(h, Wa, nil, "gelu")
  else
    local y = gt.tensor(h.shape)
    K.scale_shift(4, 256, y, h, 0.5, 0.1, h.numel)  -- the custom kernel: grid, block, then its arguments
    h = ops.linear(y, Wb, nil, "tanh")
  end
  local out = ops.softmax(ops.linear(h, W2, b2))
  return out
end

local step = gt.tree(model)                       -- records each path as CUDA graphs, then replays them
local x = gt.randn({ batch, d }, { seed = 42 })
local function mode(i) return i % 3 == 0 and "wide" or "narrow" end

local dev = gt.device()
print(("gtlua quickstart: backend %s (%s)"):format(dev.backend, dev.name))
print(("model (batch %d, width %d): linear+relu, then a branch on the step's mode (wide: linear+gelu;"):format(batch, d))
print("  narrow: the custom kernel, linear+tanh), then a softmax head")

-- Replay against eager (the same function called outside a tree), the same
-- steps: host time to issue a step (what graphs save: one launch per segment
-- instead of one per kernel) and time per step with the device's work done.
-- The best of 5 rounds each, interleaved (a busy machine slows both alike).
for i = 1, 6 do step(x, mode(i)) end               -- the first visits: warmup, then recording
local function round(f)
  gt.sync()
  local t0 = gt.clock()
  for i = 1, steps do f(x, mode(i)) end
  local issued = gt.clock()
  gt.sync()
  return (issued - t0) / steps, (gt.clock() - t0) / steps
end
local t_issue, t_step, e_issue, e_step = math.huge, math.huge, math.huge, math.huge
for _ = 1, 5 do
  local a, b = round(step)
  t_issue, t_step = math.min(t_issue, a), math.min(t_step, b)
  a, b = round(model)
  e_issue, e_step = math.min(e_issue, a), math.min(e_step, b)
end

print(("print(step) after %d calls: one node per segment, a child per branch taken"):format(step:stats().calls))
print(step)
local c, hits = gt.compile_counts()
if c then print(("kernels: %d compiled by NVRTC, %d from the CUBIN cache"):format(c, hits)) end

-- The tree gives what eager code gives: both modes, value by value.
local worst = 0
for _, m in ipairs { "narrow", "wide" } do
  local a, b = step(x, m):tolist(), model(x, m):tolist()
  for r = 1, #a do for j = 1, #a[r] do worst = math.max(worst, math.abs(a[r][j] - b[r][j])) end end
end
print(("replayed results against eager: largest difference %g (both modes)"):format(worst))

-- The last step's path: its launches and segments (one graph launch each in replay).
local s, launches, segments = step:stats(), 0, 0
for id = 0, s.nodes - 1 do
  local n = s.node[id]
  if n.last_call == s.calls then launches, segments = launches + n.kernels, segments + 1 end
end
if dev.backend == "cpu" then
  -- Kernels run on the host as they are launched: eager and replay run the same kernels, and
  -- what replay saves a GPU (the driver's launch per kernel, while the device runs) is not
  -- there to measure.  What is real here: the host's per-launch work a replay replaces, counted.
  local tiny, t = gt.zeros({ 1 }), {}
  for k = 1, 128 do
    local t0 = gt.clock()
    ops.mul(tiny, 1)
    t[k] = (gt.clock() - t0) * 1e6
  end
  table.sort(t)
  local per = t[32]                                 -- (the lower quartile: a busy host's hiccups are not the op's)
  print("cpu backend: kernels run on the host as they are launched, so eager and replayed steps run the same")
  print(("  kernels: %.0f us eager, %.0f us replayed per step here (what differs is host bookkeeping, a few us,")
    :format(e_step * 1e6, t_step * 1e6))
  print("  and this machine's noise)")
  print(("  what a replay replaces, counted: %d launches a step, each checked and dispatched by the host (%.2f us")
    :format(launches, per))
  print(("  each, %.1f us a step), by %d graph launch%s; the saving on a GPU, where the host issues while the device")
    :format(launches * per, segments, segments == 1 and "" or "es"))
  print("  runs, shows only there: README.md, Numbers")
else
  local function pct(tt, e)
    local p = 100 * (1 - tt / e)
    return math.abs(p) < 1 and "the same" or ("%s %.0f%%"):format(p > 0 and "saved" or "cost", math.abs(p))
  end
  print(("replay vs eager, measured: %.0f vs %.0f us to issue a step (%s), %.0f vs %.0f us per step done (%s)")
    :format(t_issue * 1e6, e_issue * 1e6, pct(t_issue, e_issue), t_step * 1e6, e_step * 1e6, pct(t_step, e_step)))
  print(("  (%d launches a step eagerly, %d graph launch%s by replay)"):format(launches, segments, segments == 1 and "" or "es"))
end
local me, i = "gtlua", -1                        -- how gtlua was started (build/gtlua under make run)
while arg and arg[i] do me, i = arg[i], i - 1 end
if #me > 24 then me = "gtlua" end                  -- a long path would not fit the screen
print(("next: %s --report=q.html examples/quickstart.lua (an HTML report), --stats (every tree at exit),"):format(me))
print("      examples/branchy.lua (data-dependent branches), examples/custom_kernel.lua (gt.load, :config),")
print("      examples/dynamic_batch.lua (buckets); README.md: the API, and gtlua --busted for your own specs")
