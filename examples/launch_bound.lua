-- launch_bound.lua: the advisor's two poles: a chain of many small kernels (launch-bound in eager)
-- and a few large matmuls (device-bound: a tree gains little).  The verdict is a GPU's: on the
-- cpu backend kernels run on the host as they are launched, and the advisor says so, with what
-- it measures there (the kernels' time, an eager launch's host cost, the steps).
--
--   gtlua --advise examples/launch_bound.lua       the verdict, with numbers, per tree
--   gtlua --report=lb.html examples/launch_bound.lua
local gt = require "gt"
local ops = gt.ops

local cuda = gt.backend() == "cuda"
local warmup = 3               -- calls 2 and 3 run eagerly: the advisor measures eager host time on them

-- 1. 256 elementwise ops on 1024 floats: microseconds of work, one launch each.
local v = gt.randn({ 1024 }, { seed = 1 })
local chain = gt.tree(function(x)
  for i = 1, 128 do x = ops.add(ops.mul(x, 0.999), v) end
  return x
end, { name = "chain", warmup = warmup })

-- 2. Three matmuls of n x n (4096 on a GPU, 128 on the cpu backend): milliseconds of work, three launches.
local n = cuda and 4096 or 128
local A = gt.randn({ n, n }, { seed = 2, scale = 1 / math.sqrt(n) }):static()
local B = gt.randn({ n, n }, { seed = 3, scale = 1 / math.sqrt(n) }):static()
local matmuls = gt.tree(function(x)
  return ops.matmul(ops.matmul(ops.matmul(x, A), B), A)
end, { name = "matmuls", warmup = warmup })

local x = gt.randn({ 1024 }, { seed = 4 })
local m = gt.randn({ n, n }, { seed = 5 })
for _ = 1, 20 do chain(x) end
for _ = 1, 8 do matmuls(m) end
gt.sync()
print(chain)
print(matmuls)
if not cuda then
  print("cpu backend: which tree is launch-bound shows on a GPU (kernels run here as they are launched);")
  print("  gtlua --advise examples/launch_bound.lua says what this backend measures")
end
