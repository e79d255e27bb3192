-- op_probe.lua [N] [MODE]: the host time of a replayed call of N gt.ops.linear
-- ops (hidden H, default 16), median over REPS calls (default 3000) with a sync
-- between calls; MODE tree (default), keyed or floor.  SHAPES=1: seven batch
-- sizes in turn; MLP=1: up and down projections in turn; PROF=mode and
-- PROFOUT=file: jit.p's profile; EVICT=MB: before each call, a write to every
-- cache line of an MB-sized buffer (the host's caches cold, as a long step or
-- other work leaves them); NW=n: n distinct weights (default 32); SYNC=k: a
-- sync after every k-th call only (default 1: the host's caches as a synced
-- step leaves them; a larger k, as back-to-back calls leave them).  scripts/bench/probes/icount.sh counts its instructions.
local gt = require "gt"
local N = tonumber(arg[1]) or 128
local mode = arg[2] or "tree"
local H = tonumber(os.getenv("H") or "") or 16
local W, B = {}, {}
local NW = tonumber(os.getenv("NW") or "") or 32  -- distinct weights (the ops cycle through them)
for i = 1, NW do
  W[i] = gt.randn({H, H}, {seed = i}):static(); B[i] = gt.randn({H}, {seed = 100 + i}):static()
end
local lin = gt.ops.linear
local function chain(x)
  for i = 1, N do local k = (i - 1) % NW + 1; x = lin(x, W[k], B[k], "relu") end
  return x
end
if os.getenv("MLP") == "1" then
  local U, D, BU = {}, {}, {}
  for i = 1, 16 do U[i] = gt.randn({H, 4 * H}, {seed = i}):static(); D[i] = gt.randn({4 * H, H}, {seed = 50 + i}):static()
    BU[i] = gt.randn({4 * H}, {seed = 80 + i}):static() end
  chain = function(x)
    for i = 1, N / 2 do local k = (i - 1) % 16 + 1; x = lin(x, U[k], BU[k], "gelu"); x = lin(x, D[k], B[k]) end
    return x
  end
end
local x = gt.randn({8, H}, {seed = 7})
local xs = {}
for i, b in ipairs{1, 2, 4, 8, 16, 32, 64} do xs[i] = gt.randn({b, H}, {seed = 100 + b}) end
local cyc = 0
local shapes = os.getenv("SHAPES") == "1"
local function arg_x()
  if not shapes then return x end
  cyc = cyc % 7 + 1
  return xs[cyc]
end
local step
if mode == "keyed" then step = gt.tree(chain, {key = function() return 0 end})
else step = gt.tree(chain) end
for i = 1, 400 do step(arg_x()); gt.sync() end
local clock = gt.clock
local prof = os.getenv("PROF")
if prof then require("jit.p").start(prof, os.getenv("PROFOUT")) end
if os.getenv("NOGC") then collectgarbage("stop") end
local m0 = collectgarbage("count")
local res = {}
local reps = tonumber(os.getenv("REPS") or "") or 3000
local evict = tonumber(os.getenv("EVICT") or "")
local every = tonumber(os.getenv("SYNC") or "") or 1
local ffi = require "ffi"
local ebuf = evict and ffi.new("uint8_t[?]", evict * 2 ^ 20)
for r = 1, reps do
  if ebuf then ffi.fill(ebuf, evict * 2 ^ 20, r % 256) end
  local t0 = clock()
  local floor_us
  if mode == "floor" then floor_us = step:floor(every, every == 1) else step(arg_x()) end   -- (SYNC=k: k launches a sample)
  local t1 = clock()
  if r % every == 0 and mode ~= "floor" then gt.sync() end
  res[r] = floor_us or (t1 - t0) * 1e6
end
if prof then require("jit.p").stop() end
local m1 = collectgarbage("count")
if os.getenv("ICOUNT") then return end   -- icount.sh: only the calls, not the summary
table.sort(res)
io.write(string.format("[%.1f B/call] ", (m1 - m0) * 1024 / reps))
print(string.format("%s %-5s N=%-4d %7.2f us/call (p10 %.2f p90 %.2f)  %6.1f ns/op", gt.backend(), mode, N, res[reps/2], res[reps/10], res[reps*9/10], res[reps/2] * 1e3 / N))
