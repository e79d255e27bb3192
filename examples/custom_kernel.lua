-- custom_kernel.lua: your own kernels, from a .cu file (gt.load) and from a
-- string (gt.compile), launched directly, through a bound launcher (:config)
-- and inside a graph tree.
--
--   gtlua examples/custom_kernel.lua
local gt = require "gt"
local ops = gt.ops

-- gt.load: a file, relative to the working directory or else to $GTLUA_HOME.
local K = gt.load("examples/kernels/swish.cu")
print(K.swish)                                     -- its signature, as parsed
print(K.rowmax_scale)

-- gt.compile: source in the script (any number of __global__ functions).
local M = gt.compile [[
__global__ void add_bias(float *y, const float *x, const float *b, int m, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m * n) y[i] = x[i] + b[i % n];
}]]

local m, n = 4, 48
local x = gt.randn({ m, n }, { seed = 1 })

-- A direct launch: K.name(grid, block, arguments...), checked against the signature.
local y = gt.tensor { m, n }
K.swish(4, 128, y, x, 1.0, m * n)
local want = ops.mul(x, ops.sigmoid(x))           -- the same with gt.ops: swish(x) = x * sigmoid(x)
local worst = 0
for i, v in ipairs(ops.add(y, ops.mul(want, -1)):view { m * n }:tolist()) do worst = math.max(worst, math.abs(v)) end
print(("swish vs x * sigmoid(x): largest difference %.2g"):format(worst))

-- A bound launcher: grid and block fixed once, cheaper per call (what gt.ops uses).
local scale_rows = K.rowmax_scale:config(m, 64)   -- one block per row, 64 threads
local W = gt.randn({ n, n }, { seed = 2, scale = 1 / math.sqrt(n) }):static()
local b = gt.full({ n }, 0.1):static()

-- In a tree: custom kernels are recorded and replayed like gt.ops.
local step = gt.tree(function(x)
  local h = ops.linear(x, W)                       -- x @ W: W is {in, out}
  local hb = gt.tensor(h.shape)
  M.add_bias(math.ceil(m * n / 128), 128, hb, h, b, m, n)
  local s = gt.tensor(h.shape)
  K.swish(4, 128, s, hb, 1.0, m * n)
  local out = gt.tensor(h.shape)
  scale_rows(out, s, m, n)
  return out
end)
local out
for _ = 1, 4 do out = step(x) end
print(step)
local peaks = {}
for i, v in ipairs(ops.max(out):tolist()) do peaks[i] = ("%.3f"):format(v) end   -- ops.max: of each row
print("each row's largest value after rowmax_scale: " .. table.concat(peaks, " "))

-- Mistakes are reported at your line, with what the kernel expected:
print(select(2, pcall(function() K.swish(4, 128, y, x, 1.0) end)))
print(select(2, pcall(function() K.swsh(4, 128, y, x, 1.0, m * n) end)))
