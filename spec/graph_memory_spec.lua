-- Graph memory: what each node's graph holds, budgets that drop and re-instantiate graphs,
-- a bound on a segment graph's width.
local gt = require "gt"
require "gt.busted"

local ops = gt.ops
local maxdiff = require("spec.support").maxdiff

local K = gt.compile([[
__global__ void axpb(float *y, const float *x, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}
]], { name = "graph_memory_spec.cu" })

local N = 64
local function axpb(x, a, b)
  local y = gt.tensor(x.shape)
  K.axpb(2, 32, y, x, x.numel, a, b)
  return y
end
-- A chain of k launches: y = x*1+1, then each adds 1 (so the result is x + k).
local function chain(x, k)
  local y = x
  for _ = 1, k do y = axpb(y, 1, 1) end
  return y
end
-- k independent launches of x (a fan: none waits for another), summed by a chain after them.
local function fan(x, k)
  local ys = {}
  for i = 1, k do ys[i] = axpb(x, i, 0) end
  local s = ys[1]
  for i = 2, k do s = ops.add(s, ys[i]) end
  return s
end
local function seq(n, f) local t = {} for i = 1, n do t[i] = f(i) end return t end

local function node_of(s, kernels)
  for id = 0, s.nodes - 1 do if s.node[id].kernels == kernels then return s.node[id] end end
end

local function sum_nodes(s, field)
  local t = 0
  for id = 0, s.nodes - 1 do t = t + (s.node[id][field] or 0) end
  return t
end

-- A tree's typical graph: the median of its nodes' graph_bytes (on cuda one graph may be measured
-- in MiB, the driver taking memory then, while the rest are estimated in KB).
local function typical(s)
  local v = {}
  for id = 0, s.nodes - 1 do if s.node[id].graph_bytes > 0 then v[#v + 1] = s.node[id].graph_bytes end end
  table.sort(v)
  return v[math.floor((#v + 1) / 2)]
end

local function quiet(f)
  local warned, old = {}, gt.on_warning
  gt.on_warning = function(m) warned[#warned + 1] = m end
  local ok, err = pcall(f, warned)
  gt.on_warning = old
  if not ok then error(err, 0) end
  return warned
end

describe("graph memory", function()
  it("counts each node's graph bytes, their sum per tree and in gt.memory(), as node counts predict", function()
    local step = gt.tree(function(x, k) return chain(x, k) end, { warmup = 0 })
    local x = gt.from(seq(N, function(i) return i end))
    for k = 1, 4 do
      for _ = 1, 2 do assert.tensor_near(seq(N, function(i) return i + k end), step(x, k)) end
    end
    local s = step:stats()
    assert.are.equal(4, s.nodes)
    assert.are.equal(sum_nodes(s, "graph_bytes"), s.graph_bytes)
    local b = {}
    for k = 1, 4 do
      local n = node_of(s, k)
      assert.is_true(n.recorded and n.graph_bytes > 0, "node of " .. k .. " kernels holds " .. n.graph_bytes)
      assert.are.equal(1, n.width)                          -- a chain: one launch waits for nothing
      b[k] = n
    end
    -- unmeasured (every cpu graph is exact; a cuda graph under the 2 MiB step of cuMemGetInfo is
    -- estimated from its node count): the same kernel once more costs the same bytes again
    local exact = true
    for k = 1, 4 do exact = exact and (b[k].graph_measured == (gt.backend() == "cpu")) end
    if exact then
      local per = b[2].graph_bytes - b[1].graph_bytes
      assert.is_true(per > 0)
      for k = 2, 4 do assert.are.equal(per, b[k].graph_bytes - b[k - 1].graph_bytes) end
    end
    local total, parts = gt.memory()
    assert.is_true(parts.graphs >= s.graph_bytes)
    assert.are.equal(parts.ordinary + parts.graphs + parts.path_graphs, total)
    -- a trim gives the dropped graphs' bytes back
    step:trim(1)
    local t = step:stats()
    assert.are.equal(1, t.recorded)
    assert.are.equal(sum_nodes(t, "graph_bytes"), t.graph_bytes)
    assert.is_true(t.graph_bytes < s.graph_bytes)
    assert.are.equal(parts.graphs - (s.graph_bytes - t.graph_bytes), select(2, gt.memory()).graphs)
  end)

  it("counts a path launched as one graph apart, in gt.memory() too", function()
    collectgarbage("stop")                                 -- (earlier trees collected meanwhile would give graphs back)
    local step = gt.tree(function(x)
      local h = chain(x, 2)
      gt.cut()
      return chain(h, 2)
    end, { warmup = 0 })
    local x = gt.ones { N }
    local _, before = gt.memory()
    for _ = 1, 20 do assert.tensor_near(seq(N, function() return 5 end), step(x)) end
    local s = step:stats()
    assert.is_true(s.fused > 0, "the path never launched as one graph")
    assert.is_true(s.path_graph_bytes > 0)
    local total, now = gt.memory()
    assert.are.equal(before.graphs + s.graph_bytes, now.graphs)
    assert.are.equal(before.path_graphs + s.path_graph_bytes, now.path_graphs)
    assert.are.equal(now.ordinary + now.graphs + now.path_graphs, total)
    step:trim(0)                                           -- (its one graph goes with its segments')
    assert.are.equal(0, step:stats().path_graph_bytes)
    assert.are.equal(before.path_graphs, select(2, gt.memory()).path_graphs)
    collectgarbage("restart")
  end)

  it("shows graph memory in the drawing, DOT, JSON and the HTML report", function()
    local step = gt.tree(function(x) return chain(x, 3) end, { warmup = 0, name = "drawn" })
    local x = gt.ones { N }
    step(x); step(x)
    local s = step:stats()
    local units = require "gt.units"
    assert.truthy(tostring(step):find("\ngraph memory " .. units.bytes(s.graph_bytes) .. " (", 1, true))
    assert.truthy(step:dot():find("graph " .. units.bytes(s.node[0].graph_bytes), 1, true))
    local j = require("gt.json").decode(gt.report.json(step))
    assert.are.equal(s.graph_bytes, j.graph_bytes)
    assert.are.equal(s.node[0].graph_bytes, j.node[1].graph_bytes)
    local path = os.tmpname()
    gt.report.html({ step }, path)
    local f = io.open(path)
    local html = f:read("*a")
    f:close()
    os.remove(path)
    assert.truthy(html:find("graph memory", 1, true))
  end)
end)

describe("a graph-memory budget", function()
  it("keeps every result right while the least recently visited graphs are dropped and instantiated again", function()
    local warned = quiet(function()
      local probe = gt.tree(function(x, k) return chain(x, k) end, { warmup = 0 })
      local x = gt.from(seq(N, function(i) return i end))
      for k = 1, 6 do probe(x, k) end
      local ps = probe:stats()
      local budget = 3 * typical(ps)                     -- about half the six shapes' graphs
      local step = gt.tree(function(x2, k)
        local h = chain(x2, k)
        gt.cut()                                           -- two segments a call: a child below each shape
        return axpb(h, 2, 0)
      end, { warmup = 0, graph_memory = budget })
      for round = 1, 4 do
        for k = 1, 6 do
          assert.tensor_near(seq(N, function(i) return 2 * (i + k) end), step(x, k))
          local s = step:stats()
          local largest = 0
          for id = 0, s.nodes - 1 do largest = math.max(largest, s.node[id].graph_bytes) end
          assert.is_true(s.graph_bytes <= budget + 2 * largest, round .. "/" .. k .. ": " .. s.graph_bytes .. " held")
        end
      end
      local s = step:stats()
      assert.are.equal(12, s.nodes)                      -- plans and keys kept: no node is made twice
      assert.is_true(s.budget_drops > 0 and s.reinstantiations > 0, s.budget_drops .. " drops")
      assert.are.equal(s.reinstantiations, sum_nodes(s, "reinstantiations"))
      assert.are.equal(12, sum_nodes(s, "records"))      -- each node recorded once; the rest are instantiations again
      assert.are.equal(sum_nodes(s, "graph_bytes"), s.graph_bytes)
    end)
    assert.are.equal(1, #warned, table.concat(warned, "\n"))
    assert.matches("graph memory over its graph_memory = .* instantiated again on their next visit", warned[1])
  end)

  it("never launches a dropped graph from a keyed path: it instantiates again or runs the body", function()
    local W = gt.randn({ 8, 8 }, { seed = 3, scale = 0.3 }):static()
    local function model(x, route, s)
      local h = ops.linear(x, W)
      for _ = 1, route do h = ops.tanh(h) end
      gt.cut()
      return ops.add(h, s)
    end
    quiet(function()
      local probe = gt.tree(function(x, route, s) return model(x, route, s) end, { warmup = 0 })
      local x = gt.randn({ 4, 8 }, { seed = 2 })
      for r = 1, 4 do probe(x, r, 1) end
      local budget = 3 * typical(probe:stats())          -- about three of the eight segments' graphs
      local step = gt.tree(function(x2, route, s) return model(x2, route, s) end,
        { key = function(_, route) return route end, patch = { 3 }, graph_memory = budget })
      local seed = 11
      local function rnd(n) seed = (seed * 1103515245 + 12345) % 2147483648; return math.floor(seed / 65536) % n + 1 end
      for _ = 1, 120 do
        local route, s = rnd(4), rnd(50) * 0.5
        assert.is_true(maxdiff(step(x, route, s), model(x, route, s)) < 1e-5)
      end
      local st = step:stats()
      assert.is_true(st.budget_drops > 0, "no drops")
      assert.is_true(st.keyed.hits > 0, "no keyed hits")
    end)
  end)

  it("process-wide (gt.graph_memory): the tree called least recently gives its graphs first", function()
    local x = gt.from(seq(N, function(i) return i end))
    quiet(function()
      local a = gt.tree(function(y, k) return chain(y, k) end, { warmup = 0, name = "a" })
      local b = gt.tree(function(y, k) return chain(y, k) end, { warmup = 0, name = "b" })
      for k = 1, 3 do a(x, k) end
      for k = 1, 3 do b(x, k) end
      local held = select(2, gt.memory()).graphs
      assert.are.equal(false, gt.graph_memory(held - 1))   -- (applied at once: one graph of a tree called before b goes)
      assert.are.equal(held - 1, gt.graph_memory())
      assert.are.equal(0, b:stats().budget_drops)
      assert.is_true(select(2, gt.memory()).graphs <= held - 1)
      gt.graph_memory(1)                                   -- every graph a call may lose: b's last call keeps its own
      for k = 1, 3 do assert.tensor_near(seq(N, function(i) return i + k end), b(x, k)) end
      local sa, sb = a:stats(), b:stats()
      assert.are.equal(0, sa.recorded)
      assert.are.equal(3, sa.budget_drops)
      assert.are.equal(1, sb.recorded)
      assert.are.equal(sb.graph_bytes, select(2, gt.memory()).graphs)
      for k = 1, 3 do assert.tensor_near(seq(N, function(i) return i + k end), a(x, k)) end
      assert.are.equal(3, a:stats().reinstantiations)
      assert.are.equal(0, b:stats().recorded)
      assert.are.equal(1, gt.graph_memory(false))
      assert.are.equal(false, gt.graph_memory())
    end)
  end)

  it("refuses a budget or a width that is not a whole number >= 1, naming the option", function()
    local f = function(x) return x end
    assert.error_matches(function() gt.tree(f, { graph_memory = 0 }) end, "option graph_memory must be a whole number of bytes >= 1")
    assert.error_matches(function() gt.tree(f, { graph_width = 1.5 }) end, "option graph_width must be a whole number in 1")
    assert.error_matches(function() gt.graph_memory("1 GiB") end, "gt.graph_memory%(limit%): limit must be a whole number of bytes")
  end)
end)

describe("the advisor's shape question", function()
  it("reports the graph memory each extra shape costs and what buckets would save of it", function()
    local units = require "gt.units"
    quiet(function()
      local t = gt.tree(function(x) return chain(x, 2) end, { warmup = 0, warn_shapes = false })
      for n = 1, 10 do t(gt.ones { n * 8 }) end
      local s = t:stats()
      local f = t:advise().findings[2]
      assert.truthy(f.text:find("Graph memory: " .. units.bytes(s.graph_bytes) .. " in all", 1, true), f.text)
      assert.truthy(f.text:find("paths hold about " .. units.bytes(s.graph_bytes / 10) .. " of graphs", 1, true), f.text)
      local k = #t:advise().shapes.bucket_sizes
      assert.truthy(f.text:find(("Buckets would hold about %s less graph memory (%d paths instead of 10)"):format(
        units.bytes((10 - k) * s.graph_bytes / 10), k), 1, true), f.text)
      local b = gt.tree(function(x) return chain(x, 2) end, { warmup = 0, warn_shapes = false, graph_memory = 3 * typical(s) })
      for _ = 1, 2 do for n = 1, 10 do b(gt.ones { n * 8 }) end end
      local fb = b:advise().findings[2]
      assert.truthy(fb.text:find("The graph%-memory budget dropped %d+ graphs? and instantiated %d+ again"), fb.text)
    end)
  end)
end)

describe("a bounded graph width (graph_width)", function()
  it("gives the same results with the fan in that many lanes, and states the width", function()
    local x = gt.from(seq(N, function(i) return i end))
    local wide = gt.tree(function(y) return fan(y, 8) end, { warmup = 0 })
    local lanes = gt.tree(function(y) return fan(y, 8) end, { warmup = 0, graph_width = 2 })
    for _ = 1, 3 do
      local a, b = wide(x), lanes(x)
      assert.tensor_near(seq(N, function(i) return 36 * i end), a)
      assert.are.same(a:tolist(), b:tolist())
    end
    assert.are.equal(8, wide:stats().node[0].width)     -- eight launches wait for nothing
    assert.are.equal(2, lanes:stats().node[0].width)    -- two lanes: the other six wait for the one two before
    assert.are.equal(2, lanes:stats().replays)
  end)

  it("has a bench scenario that compares the bounded and the unbounded fan in fresh processes", function()
    local status, out, err = require("spec.support").gtlua("scripts/bench/graph_width.lua 16 2 5")
    assert.are.equal(0, status, err)
    assert.truthy(out:find("variant lanes=0 launches=16 graph_bytes=%d+ measured=%a+ width=16 step_us="), out)
    assert.truthy(out:find("variant lanes=2 launches=16 graph_bytes=%d+ measured=%a+ width=2 step_us="), out)
    assert.truthy(out:find("bounded / unbounded: memory [%d.]+, step time [%d.]+"), out)
  end)
end)
