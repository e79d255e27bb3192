-- quickstart.lua: a small MLP run eagerly with gt.ops: the backend, the output, and the time per step.
--
--   gtlua examples/quickstart.lua            (what `make run` shows)
--   GTLUA_BACKEND=cpu gtlua examples/quickstart.lua
local gt = require "gt"
local ops = gt.ops

local batch, d_in, hidden, d_out = 8, 64, 256, 10

-- A linear layer's weights: W {k, n} scaled by 1/sqrt(k), b zeros; both
-- marked static (weights keep their address, which graph trees rely on).
local seed = 0
local function layer(k, n)
  seed = seed + 1
  local W = ops.mul(gt.randn({ k, n }, { seed = seed }), 1 / math.sqrt(k)):static()
  local b = gt.zeros({ n }):static()
  return W, b
end

local W1, b1 = layer(d_in, hidden)
local W2, b2 = layer(hidden, hidden)
local W3, b3 = layer(hidden, d_out)

-- One step: three linear layers (the first two fused with gelu), then softmax.
local function mlp(x)
  local h = ops.linear(x, W1, b1, "gelu")
  h = ops.linear(h, W2, b2, "gelu")
  return ops.softmax(ops.linear(h, W3, b3))
end

-- Wall-clock seconds (os.clock would count the cpu backend's worker threads too).
local clock = gt.clock
if not clock then
  local ffi = require "ffi"
  pcall(ffi.cdef, "typedef struct { long sec, nsec; } gt_quickstart_ts; int clock_gettime(int, gt_quickstart_ts *);")
  local ts = ffi.new("gt_quickstart_ts")
  clock = function() ffi.C.clock_gettime(1, ts); return tonumber(ts.sec) + tonumber(ts.nsec) * 1e-9 end
end
local function fmt_row(t)
  local r = {}
  for i, v in ipairs(t) do r[i] = string.format("%.4f", v) end
  return table.concat(r, " ")
end

local ok, dev = pcall(gt.device)
local devname = ok and type(dev) == "table" and dev.name or nil
print(string.format("gtlua quickstart: backend %s%s", gt.backend(), devname and (" (" .. devname .. ")") or ""))
print(string.format("MLP %d -> %d -> %d -> %d (gelu), batch %d; softmax of the output:", d_in, hidden, hidden, d_out, batch))

local x = gt.randn({ batch, d_in }, { seed = 42 })
local t0 = clock()
local y = mlp(x)
local probs = y:tolist()                 -- a sync point: waits for the device
local first = clock() - t0

print(y)
local total = 0
for _, p in ipairs(probs[1]) do total = total + p end
print(string.format("row 1: %s (sums to %.6f)", fmt_row(probs[1]), total))
print("argmax per row: " .. table.concat(ops.argmax(y):tolist(), " "))

-- Time the steady state: as many steps as fit in about half a second.
local steps, elapsed = 0, 0
gt.sync()
t0 = clock()
repeat
  for _ = 1, 10 do y = mlp(x) end
  gt.sync()
  steps = steps + 10
  elapsed = clock() - t0
until elapsed > 0.5 or steps >= 2000
print(string.format("first step %.1f ms (kernels compile on first use, cached after); then %.3f ms per step (4 kernels) over %d steps",
  first * 1e3, elapsed * 1e3 / steps, steps))
