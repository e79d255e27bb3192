-- branchy.lua: a small model whose graph tree branches twice: on the host (the step's parity) and on data (:item()).
--
--   gtlua examples/branchy.lua                       prints the tree and a few statistics
--   gtlua --stats examples/branchy.lua               ... and every tree's summary at exit
--   gtlua --report=branchy.html examples/branchy.lua an HTML report of the tree
--
-- Each call: a shared first layer (node 0), then a layer chosen by the step's
-- parity (a host branch: two children), then the sign of the activations'
-- total decides on the host, after :item(), whether the head ends in a
-- softmax (a data-dependent branch: two children under each parity). Every
-- layer is an odd function of x (no biases), so negating x flips the total.
local gt = require "gt"
local ops = gt.ops

local batch, d_in, hidden, d_out, steps = 4, 32, 64, 8, 20

local seed = 0
local function layer(k, n)
  seed = seed + 1
  local W = ops.mul(gt.randn({ k, n }, { seed = seed }), 1 / math.sqrt(k)):static()
  return W, gt.zeros({ n }):static()
end

local W1, b1 = layer(d_in, hidden)
local Wa, ba = layer(hidden, hidden)
local Wb, bb = layer(hidden, hidden)
local W2, b2 = layer(hidden, d_out)
local g = gt.ones({ hidden }):static()

local step = gt.tree(function(x, i)
  local h = ops.linear(x, W1, b1, "tanh")
  gt.cut()                                             -- end the shared segment
  if i % 2 == 0 then                                   -- host branch
    h = ops.linear(h, Wa, ba, "tanh")
  else                                                 -- the scope releases the linear's output
    h = gt.scope(function() return ops.rmsnorm(ops.linear(h, Wb, bb), g) end)
  end
  local total = ops.sum(ops.sum(h)):item()             -- a sync point: the segment ends here
  local y = ops.linear(h, W2, b2)
  if total > 0 then y = ops.softmax(y) end             -- data-dependent branch
  return y, total
end)

local positive = 0
for i = 1, steps do
  -- the inputs' sign alternates every third step, so both data branches occur
  local x = ops.mul(gt.randn({ batch, d_in }, { seed = 100 + i }), (i % 3 == 0) and -1 or 1)
  local _, total = step(x, i)
  if total > 0 then positive = positive + 1 end
end

print(step)
local s = step:stats()
print(string.format("%d steps: %d with a positive total; %d replays, %d recordings, %d warmups, %d eager visits",
  steps, positive, s.replays, s.recorded, s.warmups, s.eager))
local function kib(n) return string.format("%.1f KiB", n / 1024) end
print(string.format("%d levels, pool %s reserved (high water %s)", s.depth, kib(s.pool.reserved), kib(s.pool.high_water)))
