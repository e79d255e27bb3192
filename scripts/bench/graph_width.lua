-- graph_width.lua: a wide segment (W independent launches: the edgeless fan gtlua's edges give
-- independent kernels) recorded as it is and with graph_width = L (L lanes of chains), side by
-- side: the graph's device memory (graph_bytes, measured or estimated) and the synced step time.
--
--   build/gtlua scripts/bench/graph_width.lua [W [L [STEPS]]]     (defaults 512 4 200)
--
-- Each variant runs in a fresh process (the driver keeps a destroyed graph's memory for later
-- graphs, so a second measurement in one process would read less); a variant alone:
--   build/gtlua scripts/bench/graph_width.lua --one W L STEPS       (L = 0: no bound)
-- Prints one line per variant (`variant lanes=... graph_bytes=... measured=... width=...
-- step_us=...`) and, from the parent, the table of both with their ratio.
local gt = require "gt"

local K = gt.compile([[
__global__ void scale(float *y, const float *x, int n, float a) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i];
}
]], { name = "graph_width.cu" })

local N = 256                                      -- floats a launch writes: launch-bound work

local function median(v)
  table.sort(v)
  return v[math.floor((#v + 1) / 2)]
end

-- One variant: the tree recorded, then STEPS synced steps timed one by one.
local function one(w, lanes, steps)
  local step = gt.tree(function(x)
    local last
    for i = 1, w do
      local y = gt.tensor { N }
      K.scale(1, 256, y, x, N, i)
      last = y
    end
    return last
  end, { name = "wide", warmup = 1, graph_width = lanes > 0 and lanes or nil })
  local x = gt.ones { N }
  for _ = 1, 3 do step(x) end                      -- warmup, record, a replay
  gt.sync()
  local t = {}
  for i = 1, steps do
    local t0 = gt.clock()
    step(x)
    gt.sync()
    t[i] = gt.clock() - t0
  end
  local s = step:stats()
  local n = s.node[0]
  assert(n and n.recorded, "the wide segment holds no graph")
  local y = step(x):tolist()
  assert(y[1] == w, "wrong result: " .. tostring(y[1]))
  print(string.format("variant lanes=%d launches=%d graph_bytes=%d measured=%s width=%d step_us=%.2f backend=%s",
    lanes, w, n.graph_bytes, tostring(n.graph_measured), n.width, median(t) * 1e6, gt.backend()))
end

local function parse(line)
  local r = {}
  for k, v in line:gmatch("([%w_]+)=(%S+)") do r[k] = tonumber(v) or v end
  return r
end

local function parent(w, lanes, steps)
  local bin = os.getenv("GTLUA_BIN") or (arg and arg[-1]) or "gtlua"
  local script = (arg and arg[0]) or "scripts/bench/graph_width.lua"
  local rows = {}
  for _, l in ipairs { 0, lanes } do
    local p = assert(io.popen(string.format("%s %s --one %d %d %d", bin, script, w, l, steps)))
    local out = p:read("*a")
    p:close()
    local line = out:match("(variant [^\n]*)")
    assert(line, "the variant printed no result:\n" .. out)
    print(line)
    rows[#rows + 1] = parse(line)
  end
  local a, b = rows[1], rows[2]
  print(string.format("\n%d independent launches, %s backend\n\n| bound | graph bytes | per launch | measured | width | synced step us |\n|---|---|---|---|---|---|",
    w, a.backend))
  for _, r in ipairs(rows) do
    print(string.format("| %s | %d | %.0f | %s | %d | %.1f |", r.lanes == 0 and "none" or ("graph_width = " .. r.lanes),
      r.graph_bytes, r.graph_bytes / w, r.measured, r.width, r.step_us))
  end
  print(string.format("bounded / unbounded: memory %.3f, step time %.3f", b.graph_bytes / a.graph_bytes, b.step_us / a.step_us))
end

local a1 = ...
if a1 == "--one" then
  local _, w, l, s = ...
  one(tonumber(w), tonumber(l), tonumber(s))
else
  local w, l, s = ...
  parent(tonumber(w) or 512, tonumber(l) or 4, tonumber(s) or 200)
end
