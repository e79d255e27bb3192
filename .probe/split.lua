-- split a replayed call: t0 call -> tb body end -> t1 return
local gt = require "gt"
local N = tonumber(arg[1]) or 128
local H = 16
local W, B = {}, {}
for i = 1, 32 do W[i] = gt.randn({H, H}, {seed = i}):static(); B[i] = gt.randn({H}, {seed = 100 + i}):static() end
local lin = gt.ops.linear
local clock = gt.clock
local tb, ts = 0, 0
local function chain(x)
  ts = clock()
  for i = 1, N do local k = (i - 1) % 32 + 1; x = lin(x, W[k], B[k], "relu") end
  tb = clock()
  return x
end
local x = gt.randn({8, H}, {seed = 7})
local step = gt.tree(chain)
for i = 1, 400 do step(x); gt.sync() end
local reps = 3000
local a, b, c = {}, {}, {}
for r = 1, reps do
  local t0 = clock()
  step(x)
  local t1 = clock()
  gt.sync()
  a[r] = (ts - t0) * 1e6; b[r] = (tb - ts) * 1e6; c[r] = (t1 - tb) * 1e6
end
for _, v in ipairs{a, b, c} do table.sort(v) end
local h = reps / 2
print(string.format("N=%d  enter %.2f  body %.2f (%.1f ns/op)  leave %.2f us", N, a[h], b[h], b[h] * 1e3 / N, c[h]))
