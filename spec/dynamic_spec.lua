-- Dynamic shapes: buckets with padding, recording limits, skips with reasons, in-place updates, trim.
local gt = require "gt"
require "gt.busted"

local K = gt.compile([[
__global__ void affine(float *y, const float *x, long long n, float a, float b) {
  for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}
__global__ void rowsum(float *y, const float *x, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) { float s = 0; for (int c = 0; c < cols; c++) s += x[r * cols + c]; y[r] = s; }
}
__global__ void mulw(float *y, const float *x, const float *w, long long n) {
  for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] = x[i] * w[i];
}
]], { name = "dynamic_spec.cu" })
local E = gt.compile([[
__global__ void host_only(float *y, const float *x, long long n) {
  for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] = x[i] + 10;
}
]], { name = "eager_only.cu", graph = false })

local function affine(x, a, b, k)
  local y = gt.tensor(x.shape)
  ;(k or K.affine)(4, 64, y, x, x.numel, a, b)
  return y
end
local function rows(n, cols, f)
  local t = {}
  for i = 1, n do t[i] = {} for j = 1, cols do t[i][j] = f(i, j) end end
  return t
end

local function capture_warnings()
  local seen, old = {}, gt.on_warning
  gt.on_warning = function(m) seen[#seen + 1] = m end
  return seen, function() gt.on_warning = old end
end

describe("dynamic shapes", function()
  it("pads sizes 1..9 into buckets {2, 5, 7}: 3 recordings, real-size outputs, 8 and 9 eager", function()
    local step = gt.tree(function(x)
      local s = gt.tensor{ x.shape[1] }
      K.rowsum(1, 64, s, affine(x, 2, 1), x.shape[1], x.shape[2])
      return s
    end, { buckets = { dim = 1, sizes = { 2, 5, 7 } } })
    for _ = 1, 3 do
      for n = 1, 9 do
        local x = gt.from(rows(n, 4, function(i, j) return i + j end))
        local y = step(x)
        assert.are.same({ n }, y.shape)
        assert.tensor_near(rows(n, 1, function(i) return 2 * (4 * i + 10) + 4 end), y:view{ n, 1 })
      end
    end
    local s = step:stats()
    assert.are.same(3, s.recorded)
    assert.are.same(3, s.nodes)
    assert.are.same(6, s.skips["beyond buckets"])
  end)

  it("offers bucket size helpers", function()
    assert.are.same({ 1, 2, 4, 8, 16, 32, 64 }, gt.buckets.pow2(64))
    assert.are.same({ 1, 2, 4, 6 }, gt.buckets.pow2(6))
    assert.are.same({ 8, 16, 24, 30 }, gt.buckets.linear(8, 30))
    assert.has_error(function() gt.tree(function() end, { buckets = { dim = 1, sizes = { 4, 2 } } }) end,
      "gt.tree: option buckets.sizes[2] must be increasing whole numbers >= 1 (the size before it is 4), got 2")
  end)

  it("pads along a later dimension and narrows the outputs back (views, no copy)", function()
    local step = gt.tree(function(x) return affine(x, 1, 1) end, { buckets = { dim = 2, sizes = { 4, 8 } } })
    for _ = 1, 3 do
      for n = 3, 6 do
        local y = step(gt.from(rows(2, n, function(i, j) return 10 * i + j end)))
        assert.are.same({ 2, n }, y.shape)
        assert.are.same(rows(2, n, function(i, j) return 10 * i + j + 1 end), y:tolist())
      end
    end
    assert.recorded(step, 2)
  end)

  it("writes the real part of a padded input written inside the call back to the caller's tensor (any dim, keyed too)", function()
    -- x := 2x + 1 in place; the result reads it (as without buckets: eager, exact sizes and padded ones alike)
    local function f(x)
      K.affine(4, 64, x, x, x.numel, 2, 1)
      return affine(x, 1, 0)
    end
    for _, opts in ipairs { { buckets = { dim = 1, sizes = { 2, 4 } } }, { buckets = { dim = 2, sizes = { 4, 8 } } },
                            { buckets = { dim = 1, sizes = { 2, 4 } }, key = function() return 1 end } } do
      local step = gt.tree(f, opts)
      for round = 1, 4 do
        for n = 1, 4 do
          local x = gt.from(rows(n, 3, function(i, j) return round * 10 + i + j end))
          local want = rows(n, 3, function(i, j) return 2 * (round * 10 + i + j) + 1 end)
          assert.are.same(want, step(x):tolist())
          assert.are.same(want, x:tolist())
        end
      end
      -- a path that writes nothing leaves the caller's tensor alone
      local g = gt.tree(function(x) return affine(x, 3, 0) end, opts)
      for _ = 1, 3 do
        local x = gt.from(rows(3, 3, function(i, j) return i + j end))
        g(x)
        assert.are.same(rows(3, 3, function(i, j) return i + j end), x:tolist())
      end
    end
  end)

  it("pads one copy for every handle of a padded input, and gives arguments that view it the same view of the copy", function()
    local function body(a, b)                          -- a write through a, read through b
      K.affine(1, 32, a, a, a.numel, 1, 100)
      return affine(type(b) == "table" and b[1] or b, 1, 0)
    end
    local step = gt.tree(body, { buckets = { dim = 1, sizes = { 4, 8 }, narrow = { 1 } } })
    local keyed = gt.tree(body, { buckets = { dim = 1, sizes = { 4, 8 }, narrow = { 1 } }, key = function() return 1 end })
    local warned, restore = capture_warnings()
    for _, t in ipairs { step, keyed } do
      for _ = 1, 4 do
        for _, other in ipairs { function(x) return x:view { 3 } end, function(x) return { x } end,
                                 function(x) return x:narrow(1, 2, 2) end } do
          local x = gt.from { 1, 2, 3 }
          local y = t(x, other(x))
          local e = gt.from { 1, 2, 3 }
          local want = body(e, other(e))
          assert.are.same(want:tolist(), y:tolist())
          assert.are.same({ 101, 102, 103 }, x:tolist())
        end
      end
    end
    restore()
    -- the keyed tree runs its body for a table argument and for two arguments over one memory, saying so once each
    assert.are.equal(2, #warned, table.concat(warned, "\n"))
    assert.matches("a keyed call's path cannot be replayed without its body: a table argument", warned[1], 1, true)
    assert.matches("two tensor arguments share memory", warned[2], 1, true)
    -- two padded views over overlapping memory cannot share a copy: refused, naming the line
    local base = gt.from { 1, 2, 3, 4 }
    local ok, err = pcall(step, base:narrow(1, 1, 3), base:narrow(1, 2, 3))
    assert.is_false(ok)
    assert.matches("dynamic_spec%.lua:%d+: buckets: argument 2 views the memory of bucketed argument 1", err)
    assert.are.same({ 7 }, step(gt.from { 1, 2, 3 }, gt.from { 7 }):tolist())   -- (the tree goes on)
  end)

  it("buckets tensors in a table argument, one level deep, when no tensor argument is there", function()
    local step = gt.tree(function(t) return affine(t.x, 2, 1) end, { buckets = { dim = 1, sizes = { 4, 8 } } })
    for n = 1, 6 do
      local x = gt.from(rows(n, 2, function(i, j) return i + j end))
      assert.tensor_near(rows(n, 2, function(i, j) return 2 * (i + j) + 1 end), step({ x = x }))
    end
    assert.are.equal(2, step:stats().recorded)
  end)

  it("holds at most max_recordings graphs: the rest run eagerly, with one warning", function()
    local seen, restore = capture_warnings()
    local step = gt.tree(function(x) return affine(x, 3, 0) end, { warmup = 0, max_recordings = 2, warn_shapes = false })
    for n = 1, 5 do
      local y = step(gt.from(rows(n, 2, function(i, j) return i * j end)))
      assert.tensor_near(rows(n, 2, function(i, j) return 3 * i * j end), y)
    end
    restore()
    local s = step:stats()
    assert.are.same({ 2, 3, 3 }, { s.recorded, s.eager, s.skips.max_recordings })
    assert.is_false(s.node[2].recorded)            -- the third shape's node, eager: its reason
    assert.are.equal("max_recordings", s.node[2].skip)
    assert.are.same(1, #seen)
    assert.matches("max_recordings", seen[1])
    local strict = gt.tree(function(x) return affine(x, 3, 0) end, { warmup = 0, max_recordings = 1, on_limit = "error" })
    strict(gt.zeros{ 1 })
    assert.has_error(function() strict(gt.zeros{ 2 }) end, "tree 'strict' (" .. strict.where .. "): a new path needs a " ..
      "recording but max_recordings = 1 are held; raise max_recordings, use buckets, or set on_limit = \"eager\"")
    local ok, msg = pcall(strict, gt.zeros{ 3 })
    assert.is_false(ok)
    assert.matches("max_recordings", msg)
    assert.matches("strict", msg)
    assert.tensor_near({ 0 }, strict(gt.zeros{ 1 }))      -- still usable
  end)

  it("counts every visit of a new path past max_recordings as eager, its later segments and first visit too", function()
    local seen, restore = capture_warnings()
    local step = gt.tree(function(x, r)
      local a = r == 1 and gt.ops.relu(x) or gt.ops.tanh(x)     -- other kernels: another path
      gt.cut()
      return affine(a, 1, 1)
    end, { max_recordings = 2 })
    local x = gt.from { 1, 2 }
    for _ = 1, 3 do assert.tensor_near({ 2, 3 }, step(x, 1)) end       -- two segments, both recorded
    for _ = 1, 5 do                                                     -- past the limit: eager throughout
      assert.tensor_near({ math.tanh(1) + 1, math.tanh(2) + 1 }, step(x, 2))
    end
    restore()
    local s = step:stats()
    assert.are.same({ 2, 2, 10, 10 }, { s.recorded, s.warmups, s.eager, s.skips.max_recordings })
    assert.are.same(1, #seen)
  end)

  it("updates a node in place when a static weight moves, and uses the new weight", function()
    local W = gt.full({ 16 }, 2):static()
    local step = gt.tree(function(x)
      local h = affine(x, 1, 0)
      gt.cut()
      local y = gt.tensor(x.shape)
      K.mulw(1, 32, y, h, W, x.numel)
      return y
    end)
    local x = gt.from(rows(1, 16, function(_, j) return j end)[1])
    for _ = 1, 3 do assert.tensor_near(rows(1, 16, function(_, j) return 2 * j end)[1], step(x)) end
    for k = 3, 6 do
      W = gt.full({ 16 }, k):static()
      for _ = 1, 2 do assert.tensor_near(rows(1, 16, function(_, j) return k * j end)[1], step(x)) end
    end
    local s = step:stats()
    assert.are.same({ 2, 2, 4 }, { s.nodes, s.recorded, s.updates })
  end)

  it("updates a node in place when the same kernels run with a new grid", function()
    local grid = 1
    local step = gt.tree(function(x)
      local y = gt.tensor(x.shape)
      K.affine(grid, 32, y, x, x.numel, 2, 1)             -- grid-stride: any grid gives the same result
      return y
    end)
    local x = gt.from(rows(1, 64, function(_, j) return j end)[1])
    for _, g in ipairs { 1, 1, 1, 2, 2, 4, 1 } do
      grid = g
      assert.tensor_near(rows(1, 64, function(_, j) return 2 * j + 1 end)[1], step(x))
    end
    local s = step:stats()
    -- (back to grid 1, a key an update replaced: a node of its own, warming up)
    assert.are.same({ 2, 1, 2 }, { s.nodes, s.recorded, s.updates })
    assert.are.same(2, s.replays)
  end)

  it("runs a segment with a non-graphable kernel eagerly, with its reason; the others replay", function()
    local step = gt.tree(function(x)
      local h = affine(x, 2, 0)
      gt.cut()
      local e = gt.tensor(x.shape)
      E.host_only(1, 32, e, h, x.numel)
      gt.cut()
      return affine(e, 1, 1)
    end)
    local x = gt.from{ 1, 2, 3 }
    for _ = 1, 5 do assert.tensor_near({ 13, 15, 17 }, step(x)) end
    local s = step:stats()
    local reason = "kernel 'host_only' is not graphable"
    assert.are.same(4, s.skips[reason])
    assert.are.same(3, s.nodes)
    assert.are.same(reason, s.node[1].skip)
    assert.are.same({ 3, 3 }, { s.node[0].replays, s.node[2].replays })
    assert.is_false(s.node[1].recorded)
  end)

  it("trims graphs and memory; trimmed paths record again when visited", function()
    local step = gt.tree(function(x) return affine(affine(x, 1, 1), 1, 1) end, { warn_shapes = false })
    local big = {}
    for n = 1, 3 do big[n] = gt.zeros{ n * 65536 } end
    for _ = 1, 2 do for n = 1, 3 do step(big[n]) end end
    local before = step:stats()
    assert.are.same(3, before.recorded)
    assert.are.same(3, step:trim(0))
    local after = step:stats()
    assert.are.same(0, after.recorded)
    assert.is_true(after.pool.reserved < before.pool.reserved)
    for _ = 1, 2 do assert.tensor_near({ 2, 2, 2 }, step(big[1]):narrow(1, 1, 3)) end
    assert.recorded(step, 1)
    step(big[2]); step(big[3])
    assert.are.same(2, step:trim(1))
    local s = step:stats()
    assert.are.same(1, s.recorded)
    assert.is_true(s.node[2].recorded, "the most recently used one stays")
    -- a two-segment path: dropping the first drops the second (its plan began at the first's end); both counted
    local two = gt.tree(function(x) local y = affine(x, 1, 1); gt.cut(); return affine(y, 1, 1) end)
    for _ = 1, 3 do two(big[1]) end
    assert.are.same(2, two:stats().recorded)
    assert.are.same(2, two:trim(0))
    for _, bad in ipairs { "x", -1, 1.5 } do
      local ok, err = pcall(two.trim, two, bad)
      assert.is_false(ok)
      assert.matches("dynamic_spec%.lua:%d+: tree:trim%(keep%): keep must be a whole number", err)
    end
  end)

  it("keeps the last call's outputs through a trim that keeps its path's graphs, and says so when one does not", function()
    local step = gt.tree(function(x) return affine(x, 1, 1) end)
    local h = gt.zeros{ 4 }
    for _ = 1, 4 do h = step(h) end                       -- replays: h lies in the path's planned memory
    step:trim(1)                                          -- the path stays
    assert.is_false(h:is_stale())
    h = step(h)
    assert.tensor_near({ 5, 5, 5, 5 }, h)
    step:trim(0)                                          -- the path's graph and memory go
    assert.is_true(h:is_stale())
    assert.has_error(function() step(h) end, "tensor f32 4 returned by tree 'step' (spec/dynamic_spec.lua:" ..
      debug.getinfo(1, "l").currentline - 10 .. ") lost its memory to tree:trim(); :clone() it before the trim to keep it")
    -- a warmup call's outputs lie outside any plan: a trim ends them too
    local w = gt.tree(function(x) return affine(x, 1, 1) end, { warmup = 1 })
    local y = w(gt.zeros{ 4 })
    w:trim(5)
    assert.is_true(y:is_stale())
  end)

  it("warns once past warn_shapes distinct input shapes, suggesting buckets", function()
    local seen, restore = capture_warnings()
    local step = gt.tree(function(x) return affine(x, 1, 0) end, { warn_shapes = 3 })
    for n = 1, 5 do step(gt.zeros{ n }) step(gt.zeros{ n }) end
    restore()
    assert.are.same(1, #seen)
    assert.matches("4 input shapes", seen[1])
    assert.matches("buckets", seen[1])
    assert.matches("f32 2", seen[1])
  end)

  it("narrows every padded input's results with a list of bucket specs, and tables of results two deep", function()
    local O = gt.ops
    local function f(x, y) return O.relu(x), { b = O.add(y, 1), more = { c = O.tanh(x) } } end
    local step = gt.tree(f, { buckets = { { dim = 1, sizes = { 4, 8 }, arg = 1 }, { dim = 1, sizes = { 4, 8 }, arg = 2 } } })
    for i = 1, 4 do
      local x, y = gt.randn({ 3, 2 }, { seed = i }), gt.randn({ 5, 2 }, { seed = 10 + i })
      local a, r = step(x, y)
      local ea, er = f(x, y)
      assert.tensor_near(ea:tolist(), a)
      assert.tensor_near(er.b:tolist(), r.b)
      assert.tensor_near(er.more.c:tolist(), r.more.c)
    end
    local g = function(x, y) return O.relu(x), O.tanh(y) end
    local two = gt.tree(g, { buckets = { { dim = 1, sizes = { 4 }, arg = 1 }, { dim = 2, sizes = { 8 }, arg = 2 } } })
    for i = 1, 3 do
      local x, y = gt.randn({ 3, 4 }, { seed = i }), gt.randn({ 3, 5 }, { seed = i + 5 })
      local _, b = two(x, y)
      assert.are.same({ 3, 5 }, b.shape)
      assert.tensor_near(g(x, y):tolist() and O.tanh(y):tolist(), b)
    end
    -- the second spec's input beyond its last bucket: the call runs eagerly, as one beyond the buckets
    local a, b = two(gt.randn { 3, 4 }, gt.randn { 3, 9 })
    assert.are.same({ 3, 9 }, b.shape)
    assert.are.equal(1, two:stats().skips["beyond buckets"])
  end)

  it("alternating two weights (or two shapes of one byte count) makes two nodes, not an update every call", function()
    local W1 = gt.full({ 4, 4 }, 1):static()
    local W2 = gt.full({ 4, 4 }, 2):static()
    local step = gt.tree(function(x, W) return gt.ops.linear(x, W) end, { warmup = 0 })
    local x = gt.ones { 2, 4 }
    for i = 1, 12 do
      local W = i % 2 == 1 and W1 or W2
      assert.tensor_near({ { 4 * (2 - i % 2), 4 * (2 - i % 2), 4 * (2 - i % 2), 4 * (2 - i % 2) },
        { 4 * (2 - i % 2), 4 * (2 - i % 2), 4 * (2 - i % 2), 4 * (2 - i % 2) } }, step(x, W))
    end
    local s = step:stats()
    assert.are.equal(2, s.nodes)
    assert.is_true(s.updates <= 1, "updates " .. s.updates)
    assert.is_true(s.replays >= 9, "replays " .. s.replays)
  end)

  it("refuses to guess which real size a result padded by two inputs into one bucket has", function()
    local step = gt.tree(function(x, y) return gt.ops.relu(x), gt.ops.tanh(y) end,
      { buckets = { { dim = 1, sizes = { 4, 8 }, arg = 1 }, { dim = 1, sizes = { 4, 8 }, arg = 2 } } })
    local ok, err = pcall(step, gt.randn { 3, 2 }, gt.randn { 2, 2 })
    assert.is_false(ok)
    assert.matches("inputs of 3 and 2 were padded", err)
    local a, b = step(gt.randn { 3, 2 }, gt.randn { 5, 2 })     -- buckets 4 and 8: each result its own size
    assert.are.same({ 3, 2 }, a.shape)
    assert.are.same({ 5, 2 }, b.shape)
  end)

  it("makes a node per weight for three weights in rotation, not an update every call", function()
    local Ws = { gt.full({ 4, 4 }, 1):static(), gt.full({ 4, 4 }, 2):static(), gt.full({ 4, 4 }, 3):static() }
    local step = gt.tree(function(x, W) return gt.ops.linear(x, W) end, { warmup = 0 })
    for i = 1, 30 do
      local k = (i - 1) % 3 + 1
      assert.tensor_near({ { 4 * k, 4 * k, 4 * k, 4 * k } }, step(gt.ones { 1, 4 }, Ws[k]))
    end
    local s = step:stats()
    assert.are.equal(3, s.nodes)
    assert.is_true(s.updates <= 2, "updates " .. s.updates)
  end)
end)
