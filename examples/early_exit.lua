-- early_exit.lua: an early-exit network; the exit is decided on the device (gt.cond), not after :item().
--
--   gtlua examples/early_exit.lua        prints how many layers ran per input and the tree (one node)
--
-- A stack of residual tanh layers with a classifier head.  After each layer a
-- kernel computes the head's confidence (the smallest, over the batch, of the
-- largest softmax probability) and clears the flag `live` once it passes a
-- threshold; every later layer runs inside gt.cond(live, ...).  In a tree the
-- whole stack is one graph with a conditional node per layer: no host sync,
-- one launch, however early it exits.  Bodies write into tensors made before
-- the cond (h:copy), so h is valid whichever way each cond went.
local gt = require "gt"
local ops = gt.ops

local K = gt.compile([[
// live = 0 once every row's largest probability reaches thr; layers counts the layers run
__global__ void confident(int *live, int *layers, const float *probs, int B, int C, float thr) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float worst = 1.0f;
  for (int b = 0; b < B; b++) {
    float m = 0.0f;
    for (int c = 0; c < C; c++) m = fmaxf(m, probs[b * C + c]);
    worst = fminf(worst, m);
  }
  layers[0] += 1;
  if (worst >= thr) live[0] = 0;
}
]], { name = "early_exit.cu" })

local on_gpu = gt.backend() == "cuda"
local B, D, C, L = 4, on_gpu and 256 or 32, 10, on_gpu and 24 or 8
local thr = 0.8

local Ws, bs = {}, {}
for l = 1, L do
  Ws[l] = ops.mul(gt.randn({ D, D }, { seed = l }), 0.5 / math.sqrt(D)):static()
  bs[l] = gt.zeros({ D }):static()
end
local Wh, bh = ops.mul(gt.randn({ D, C }, { seed = 99 }), 2 / math.sqrt(D)):static(), gt.zeros({ C }):static()

local function forward(x)
  local h = ops.mul(x, 1)                            -- a kernel: a new input is patched, not copied
  local live, layers = gt.ones({ 1 }, "i32"), gt.zeros({ 1 }, "i32")
  for l = 1, L do
    gt.cond(live, function()
      gt.scope(function()
        h:copy(ops.add(h, ops.linear(h, Ws[l], bs[l], "tanh")))   -- residual layer, written into h
        K.confident(1, 1, live, layers, ops.softmax(ops.linear(h, Wh, bh)), B, C, thr)
      end)
    end)
  end
  return ops.softmax(ops.linear(h, Wh, bh)), layers
end

local step = gt.tree(forward)
for i = 1, 6 do
  local x = gt.randn({ B, D }, { seed = 100 + i, scale = i })
  local ye, le = forward(x)                          -- outside the tree: p read on the host each layer
  local yt, lt = step(x)                             -- in the tree: the device decides
  local diff = 0
  for r, row in ipairs(ye:tolist()) do
    for c, v in ipairs(row) do diff = math.max(diff, math.abs(v - yt:tolist()[r][c])) end
  end
  print(string.format("input %d: %2d of %d layers ran (tree: %d); max difference %.2g", i, le:item(), L, lt:item(), diff))
end
print(step)
