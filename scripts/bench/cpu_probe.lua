-- cpu_probe.lua: the host time of one graph launch from this cpu (run.sh
-- times each core with it and pins the bench to the quickest).  Prints ns:
-- the median of tree:floor over a small tree's graph, each launch synced.
local gt = require "gt"
local W = gt.randn({ 64, 64 }, { seed = 1, scale = 0.1 }):static()
local x = gt.randn({ 8, 64 }, { seed = 2 })
local step = gt.tree(function(v)
  for _ = 1, 8 do v = gt.ops.linear(v, W) end
  return v
end, { warn_shapes = false })
for _ = 1, 4 do step(x) end
io.write(string.format("%.0f", step:floor(tonumber(arg[1]) or 400, true) * 1000))
