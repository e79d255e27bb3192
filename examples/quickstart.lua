-- quickstart.lua: a small model with a branch and a custom kernel, run in a graph
-- tree; prints the tree and what replaying it saved against running eagerly.
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
local function pct(t, e)
  local p = 100 * (1 - t / e)
  return math.abs(p) < 1 and "the same" or ("%s %.0f%%"):format(p > 0 and "saved" or "cost", math.abs(p))
end
print(("replay vs eager, measured: %.0f vs %.0f us to issue a step (%s), %.0f vs %.0f us per step done (%s)")
  :format(t_issue * 1e6, e_issue * 1e6, pct(t_issue, e_issue), t_step * 1e6, e_step * 1e6, pct(t_step, e_step)))
if dev.backend == "cpu" then
  print("  (cpu backend: kernels run on host threads as they are issued and dominate both; on a GPU replay")
  print("  issues a step in a fraction of eager's time: README.md, Numbers)")
end
local me, i = "gtlua", -1                        -- how gtlua was started (build/gtlua under make run)
while arg and arg[i] do me, i = arg[i], i - 1 end
if #me > 24 then me = "gtlua" end                  -- a long path would not fit the screen
print(("next: %s --report=q.html examples/quickstart.lua (an HTML report), --stats (every tree at exit),"):format(me))
print("      examples/branchy.lua (data-dependent branches), examples/custom_kernel.lua (gt.load, :config),")
print("      examples/dynamic_batch.lua (buckets); README.md: the API, and gtlua --busted for your own specs")
