-- tp_bench: the tp scenario: tensor-parallel decode (examples/tp_decode.lua)
-- and one all-reduce of [B, 768] f32, recorded in a tree against eager.
--
--   gtlua --nproc N scripts/bench/tp_bench.lua [--quick] [--batch B]
--   (world size 1 on one GPU runs over NCCL too: gtlua --nproc 1 ...)
--
-- Figures are medians in µs over the timed steps (rank 0 prints them):
--   cpu_us   wall time around one step call, no sync (the host's cost to issue)
--   step_us  the same step followed by gt.sync() (issue + device time)
-- allreduce: y = x * 1 then all_reduce(y) of [B, 768], eager (two launches a
-- step) and in a tree (one graph holding the kernel and the collective);
-- decode: one greedy step of the TP GPT-2 (full size on cuda, tiny on cpu), eager and in a tree.
local gt = require "gt"
local dist = gt.dist
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local tp = dofile(here .. "../../examples/tp_decode.lua")
local gpt = tp.gpt

local quick = false
local B = 1
for i, a in ipairs(arg) do
  if a == "--quick" then quick = true elseif a == "--batch" then B = tonumber(arg[i + 1]) end
end
local rank, world = dist.init()
local N = quick and 20 or 200

local function median(t)
  table.sort(t)
  return t[math.floor((#t + 1) / 2)]
end

-- cpu_us and step_us of f() (after warmup calls).
local function time(f)
  for _ = 1, 5 do f() end
  gt.sync()
  local cpu, step = {}, {}
  for i = 1, N do
    local t0 = gt.clock()
    f()
    cpu[i] = (gt.clock() - t0) * 1e6
    gt.sync()
    step[i] = (gt.clock() - t0) * 1e6
  end
  dist.barrier()
  return median(cpu), median(step)
end

local function report(name, cpu, step)
  if rank == 0 then print(string.format("%-28s cpu_us %9.1f   step_us %9.1f", name, cpu, step)) end
end

-- one all-reduce of [B, 768]
local x = gt.randn({ B, 768 }, { seed = 1 })
local function ar(v) return dist.all_reduce(gt.ops.mul(v, 1)) end
local tar = gt.tree(ar, { name = "tp_allreduce" })
report(("allreduce [%d,768] eager"):format(B), time(function() ar(x) end))
report(("allreduce [%d,768] tree"):format(B), time(function() tar(x) end))

-- the TP decode step
local cfg = gpt.config((gt.backend() == "cpu" or quick) and gpt.TINY or gpt.FULL)
local m = tp.new_model(cfg, gpt.random_weights(cfg, 1), rank, world)
local ids = gt.from((function() local t = {} for b = 1, B do t[b] = b end return t end)(), "i32")
local step = gt.tree(m.step, { name = "tp_decode", buckets = { dim = 1, sizes = cfg.buckets, narrow = { 1, 2 } },
                               warn_shapes = false })
local pos = 0
local function advance(f) return function() f(ids, pos, 1); pos = (pos + 1) % (cfg.ctx - 1) end end
report(("tp decode B=%d eager (%d ranks)"):format(B, world), time(advance(m.step)))
report(("tp decode B=%d tree (%d ranks)"):format(B, world), time(advance(step)))
if rank == 0 then print(step) end
