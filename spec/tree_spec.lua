-- Graph trees: segments, keys, warmup/record/replay, pool checkpoints, liveness.
local gt = require "gt"
require "gt.busted"

local K = gt.compile([[
__global__ void axpb(float *y, const float *x, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}
__global__ void axpb_b(float *y, const float *x, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] - b;
}
__global__ void add(float *y, const float *a, const float *b, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a[i] + b[i];
}
__global__ void scale_by(float *y, const float *x, const float *w, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i] * w[i];
}
__global__ void total(float *out, const float *x, int n) {
  if (blockIdx.x == 0 && threadIdx.x == 0) { float s = 0; for (int i = 0; i < n; i++) s += x[i]; out[0] = s; }
}
]], { name = "tree_spec.cu" })

local N = 64
local function axpb(x, a, b, k)
  local y = gt.tensor(x.shape)
  ;(k or K.axpb)(2, 32, y, x, x.numel, a, b)
  return y
end
local function add(a, b) local y = gt.tensor(a.shape); K.add(2, 32, y, a, b, a.numel); return y end
local function total(x) local y = gt.tensor{ 1 }; K.total(1, 1, y, x, x.numel); return y end
local function seq(n, f) local t = {} for i = 1, n do t[i] = f(i) end return t end
local function ref_axpb(v, a, b) return seq(#v, function(i) return a * v[i] + b end) end

describe("a tree", function()
  it("warms up, records once, then replays (one path)", function()
    local step = gt.tree(function(x) return axpb(axpb(x, 2, 1), 3, 0) end)
    local x = gt.from(seq(N, function(i) return i end))
    for call = 1, 5 do
      local y = step(x)
      assert.tensor_near(seq(N, function(i) return 3 * (2 * i + 1) end), y)
      local s = step:stats()
      assert.are.same({ call, math.min(call, 1), call >= 2 and 1 or 0, math.max(call - 2, 0) },
                      { s.calls, s.warmups, s.recorded, s.replays })
    end
    assert.nodes(step, 1)
    local n = step:stats().node[0]
    assert.are.same({ 5, 1, 3, true, 2 }, { n.visits, n.warmups, n.replays, n.recorded, n.kernels })
    assert.is_nil(n.parent)
  end)

  it("prints a tensor's values inside a call as outside (a host read: the segment ends there)", function()
    local shown = {}
    local function body(x)
      local y = gt.ops.add(x, 1)
      shown[#shown + 1] = tostring(y):match("^[^\n]*")
      return gt.ops.relu(y)
    end
    local step = gt.tree(body)
    for i = 1, 4 do
      local x = gt.from { i, -i }
      body(x)
      step(x)
      assert.are.equal(shown[#shown - 1], shown[#shown])
      assert.are.equal(("[%d, %d]"):format(i + 1, 1 - i), shown[#shown])
    end
  end)

  it("keeps one node for a window sliding over a buffer, and keys two views of one buffer by how they lie", function()
    local K = gt.compile([[__global__ void add2(float *y, const float *a, const float *b, int n) {
      for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = a[i] + 2 * b[i]; }]], { name = "add2.cu" })
    local function body(a, b)
      local y = gt.tensor(a.shape)
      K.add2(1, 32, y, a, b, a.numel)
      return y
    end
    local step = gt.tree(body)
    local buf = gt.from { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }
    for t = 1, 7 do                                   -- one window, at every offset
      local w = buf:narrow(1, t, 3)
      assert.are.same(body(w, w):tolist(), step(w, w):tolist())
    end
    assert.are.equal(1, step:stats().nodes)
    for t = 1, 6 do                                   -- two windows one apart: how they lie is the same
      local a, b = buf:narrow(1, t, 3), buf:narrow(1, t + 1, 3)
      assert.are.same(body(a, b):tolist(), step(a, b):tolist())
    end
    assert.are.equal(2, step:stats().nodes)
  end)

  it("records with warmup = 0 on the first visit; the record launch is not a replay", function()
    local step = gt.tree(function(x) return axpb(x, 1, 1) end, { warmup = 0 })
    local y = step(gt.from{ 1, 2 })
    assert.tensor_near({ 2, 3 }, y)
    local s = step:stats()
    assert.are.same({ 0, 1, 0 }, { s.warmups, s.recorded, s.replays })
  end)

  it("keys branches by their launches, not by scalars: a changed scalar is patched", function()
    local step = gt.tree(function(x, b) return axpb(x, 2, b) end)
    local x = gt.from{ 1, 2, 3 }
    for i = 1, 6 do assert.tensor_near({ 2 + i, 4 + i, 6 + i }, step(x, i)) end
    assert.nodes(step, 1)
    assert.replayed(step, 4)
  end)

  it("records a host branch after replays from the parent's checkpoint; A/B alternate as replays", function()
    local step = gt.tree(function(x, route)
      local h = axpb(x, 2, 0)
      gt.cut()
      if route == "a" then return axpb(h, 1, 1) end
      return axpb(h, 1, 1, K.axpb_b)
    end)
    local x = gt.from(seq(N, function(i) return i end))
    for _ = 1, 3 do step(x, "a") end                     -- warmup, record, replay
    local routes = { "b", "b", "a", "b", "a", "b", "a", "b" }
    for _, r in ipairs(routes) do
      local y = step(x, r)
      assert.tensor_near(seq(N, function(i) return 2 * i + (r == "a" and 1 or -1) end), y)
    end
    local s = step:stats()
    assert.nodes(step, 3)
    assert.are.same(1, #s.roots)
    local root = s.node[s.roots[1]]
    assert.are.same(2, #root.children)
    assert.are.same(11, root.visits)
    assert.are.same(3, s.recorded)
    local b = s.node[root.children[2]]
    assert.are.same({ 5, 1, 3 }, { b.visits, b.warmups, b.replays })
  end)

  it("follows a data-dependent branch through :item()", function()
    local step = gt.tree(function(x)
      local s = total(x):item()
      if s > 0 then return axpb(x, 1, 100) end
      return axpb(x, -1, 0, K.axpb_b)
    end)
    for i = 1, 8 do
      local sign = (i % 3 == 0) and -1 or 1
      local v = seq(N, function(j) return sign * j end)
      local y = step(gt.from(v))
      assert.tensor_near(sign > 0 and ref_axpb(v, 1, 100) or ref_axpb(v, -1, -0), y)
    end
    local s = step:stats()
    assert.are.same(3, s.nodes)                        -- total, then one child per branch
    assert.are.same(2, #s.node[s.roots[1]].children)
  end)

  it("makes two distinct nodes when one segment function is reached twice in a call", function()
    local function seg(x) local y = axpb(x, 2, 0); gt.cut(); return y end
    local step = gt.tree(function(x) return seg(seg(x)) end)
    local x = gt.from{ 1, 2 }
    for _ = 1, 4 do assert.tensor_near({ 4, 8 }, step(x)) end
    local s = step:stats()
    assert.are.same(2, s.nodes)
    assert.are.same({ 0, 1 }, { s.node[0].depth, s.node[1].depth })
    assert.are.same(0, s.node[1].parent)
    assert.are.same(2, s.recorded)
  end)

  it("makes outputs stale at the next call in warmup, record and replay alike; clone() survives", function()
    local step = gt.tree(function(x) return axpb(x, 1, 1) end)
    local x = gt.from{ 1, 2 }
    local y1 = step(x)                                  -- warmup
    local kept = y1:clone()
    local y2 = step(x)                                  -- record
    assert.stale(y1)
    local y3 = step(x)                                  -- replay
    assert.stale(y2)
    assert.has_error(function() y2:tolist() end, "tensor f32 2 returned by tree 'step' (" .. step.where ..
      ") was overwritten by a later call; :clone() it to keep it")
    assert.has_error(function() axpb(y2, 1, 1) end, "tensor f32 2 returned by tree 'step' (" .. step.where ..
      ") was overwritten by a later call; :clone() it to keep it")
    local y4 = step(x)
    assert.stale(y3)
    assert.tensor_near({ 2, 3 }, y4)
    assert.tensor_near({ 2, 3 }, kept)
  end)

  it("keeps h = step(h) one node deep for 100 steps, with correct values", function()
    local step = gt.tree(function(h) return axpb(h, 1, 1) end)
    local h = gt.zeros{ N }
    for _ = 1, 100 do h = step(h) end
    assert.tensor_near(seq(N, function() return 100 end), h)
    assert.nodes(step, 1)
    assert.replayed(step, 98)
  end)

  it("feeds the outputs of one tree to another", function()
    local t1 = gt.tree(function(x) return axpb(x, 2, 0) end)
    local t2 = gt.tree(function(x) return axpb(x, 1, 3) end)
    for i = 1, 5 do
      local x = gt.from{ i, -i }
      assert.tensor_near({ 2 * i + 3, -2 * i + 3 }, t2(t1(x)))
    end
    assert.replayed(t1, 3)
    assert.replayed(t2, 3)
  end)

  it("patches external inputs at new addresses without re-recording", function()
    local step = gt.tree(function(x) return axpb(x, 3, 0) end)
    local keep = {}
    for i = 1, 8 do
      local x = gt.from(seq(N, function(j) return i * j end))
      keep[i] = x                                       -- distinct live tensors, distinct addresses
      assert.tensor_near(seq(N, function(j) return 3 * i * j end), step(x))
    end
    assert.recorded(step, 1)
    assert.nodes(step, 1)
    assert.replayed(step, 6)
  end)

  it("uses a swapped static weight: the node is updated in place, not recorded again", function()
    local W = gt.from(seq(N, function() return 2 end)):static()
    local step = gt.tree(function(x) local y = gt.tensor(x.shape); K.scale_by(2, 32, y, x, W, x.numel); return y end)
    local x = gt.from(seq(N, function(j) return j end))
    for _ = 1, 3 do assert.tensor_near(seq(N, function(j) return 2 * j end), step(x)) end
    W = gt.from(seq(N, function() return 5 end)):static()
    for _ = 1, 3 do assert.tensor_near(seq(N, function(j) return 5 * j end), step(x)) end
    local s = step:stats()
    assert.are.same({ 1, 1, 1 }, { s.nodes, s.recorded, s.updates })
  end)

  it("frees a released tensor at the checkpoint; keeps a live one safe from a sibling branch", function()
    local kept = {}
    local step = gt.tree(function(x, route)
      local a = axpb(x, 2, 0)
      local tmp = axpb(x, 3, 0)
      local b = add(a, tmp)
      kept.a = a
      tmp:free()
      gt.cut()
      local k = route == "a" and K.axpb or K.axpb_b
      local t1 = axpb(b, 7, 7, k)
      local t2 = axpb(t1, 7, 7, k)
      local t3 = axpb(t2, 7, 7, k)
      return axpb(b, 1, 1, k), t3
    end)
    local x = gt.from(seq(N, function(j) return j end))
    for _, r in ipairs { "a", "a", "a", "b", "b", "a", "b", "a" } do
      local y = step(x, r)
      assert.tensor_near(seq(N, function(j) return 2 * j end), kept.a)
      assert.tensor_near(seq(N, function(j) return 5 * j + (r == "a" and 1 or -1) end), y)
    end
    local root = step:stats().node[0]
    assert.are.same(2 * N * 4, root.checkpoint_bytes)   -- a and b live on; tmp was freed
  end)

  it("shares memory between sibling branches: high water is the largest path, not the sum", function()
    local big = 64 * 1024
    local step = gt.tree(function(x, route)
      local h = axpb(x, 1, 0)
      gt.cut()
      local k = route == "a" and K.axpb or K.axpb_b
      local keep = {}
      for i = 1, 4 do keep[i] = gt.zeros{ big } end      -- a branch's working set, all alive at its end
      return axpb(h, 1, 1, k), keep
    end)
    local x = gt.zeros{ N }
    for _, r in ipairs { "a", "a", "a", "b", "b", "b", "a", "b" } do step(x, r) end
    local s = step:stats()
    local branch = 4 * big * 4
    assert.are.same(3, s.recorded)
    assert.is_true(s.pool.high_water <= branch + 64 * 1024, "high water " .. s.pool.high_water)
    assert.is_true(s.pool.high_water < 2 * branch)
  end)

  it("leaves no half node after a Lua error mid-call, and keeps working", function()
    local step = gt.tree(function(x, fail)
      local h = axpb(x, 2, 0)
      gt.cut()
      local y = axpb(h, 1, 1)
      if fail then error("boom in the model") end
      return y
    end)
    local x = gt.from{ 1, 2 }
    for _ = 1, 3 do step(x, false) end
    local before = step:stats()
    assert.has_error(function() step(x, true) end, "boom in the model")
    local after = step:stats()
    assert.are.same(before.nodes, after.nodes)
    for id = 0, after.nodes - 1 do assert.is_true(after.node[id].visits > 0) end
    assert.tensor_near({ 3, 5 }, step(x, false))
    assert.tensor_near({ 3, 5 }, step(x, false))
    -- an error before any segment ended
    local t2 = gt.tree(function(x2) axpb(x2, 1, 1); error("early") end)
    assert.has_error(function() t2(x) end, "early")
    assert.nodes(t2, 0)
  end)

  it("agrees with a Lua reference over 200 random branch sequences of a 3-level tree", function()
    local step = gt.tree(function(x, r1, r2, r3)
      local h = axpb(x, 1, r1 == 1 and 1 or 2, r1 == 1 and K.axpb or K.axpb_b)
      gt.cut()
      h = axpb(h, r2 == 1 and 2 or 3, 0)
      if r2 == 2 then h = add(h, h) end
      gt.cut()
      if r3 == 1 then h = axpb(h, 1, 5) else h = axpb(axpb(h, -1, 0), 1, 5) end
      return h
    end)
    local rnd = 12345
    local function rand2() rnd = (rnd * 1103515245 + 12345) % 2147483648; return (math.floor(rnd / 65536) % 2) + 1 end
    local v = seq(16, function(i) return i / 4 end)
    local x = gt.from(v)
    for _ = 1, 200 do
      local r1, r2, r3 = rand2(), rand2(), rand2()
      local e = {}
      for i, xi in ipairs(v) do
        local h = r1 == 1 and xi + 1 or xi - 2
        h = h * (r2 == 1 and 2 or 3)
        if r2 == 2 then h = h + h end
        if r3 == 2 then h = -h end
        e[i] = h + 5
      end
      assert.tensor_near(e, step(x, r1, r2, r3))
    end
    local s = step:stats()
    assert.is_true(s.replays > 400)
    assert.are.same(s.calls * 3, s.warmups + s.replays + s.eager + (function()
      local r = 0 for _, n in pairs(s.node) do if n.recorded then r = r + 1 end end return r end)())
  end)

  it("copies every tensor input to staging with copy_inputs; a write inside reaches the caller's tensor after the call", function()
    local step = gt.tree(function(x)
      K.axpb(2, 32, x, x, x.numel, 10, 0)               -- in place on the input
      return axpb(x, 1, 1)
    end, { copy_inputs = true })
    local x = gt.from{ 1, 2 }
    local want = { 1, 2 }
    for _ = 1, 4 do
      want = { want[1] * 10, want[2] * 10 }
      assert.tensor_near({ want[1] + 1, want[2] + 1 }, step(x))
      assert.tensor_near(want, x)                       -- as without copy_inputs, and outside a tree
    end
    assert.nodes(step, 1)
    assert.replayed(step, 2)
    -- a host copy into the input (a sync point inside the call) reaches the caller too, padded or copied
    for _, opts in ipairs { { copy_inputs = true }, { buckets = { dim = 1, sizes = { 4 } } } } do
      local set = gt.tree(function(y) y:narrow(1, 1, 3):copy({ 7, 8, 9 }); return axpb(y, 2, 0) end, opts)
      for _ = 1, 3 do
        local y = gt.zeros{ 3 }
        assert.tensor_near({ 14, 16, 18 }, set(y))
        assert.tensor_near({ 7, 8, 9 }, y)
      end
    end
    -- a call that writes no input leaves the caller's tensor alone, keyed too
    for _, opts in ipairs { { copy_inputs = true }, { copy_inputs = true, key = function() return 1 end } } do
      local read = gt.tree(function(y) return axpb(y, 3, 0) end, opts)
      local y = gt.from{ 1, 2 }
      for _ = 1, 4 do assert.tensor_near({ 3, 6 }, read(y)); assert.tensor_near({ 1, 2 }, y) end
    end
  end)

  it("stages one copy of an output fed back as two inputs: a write through one is read through the other", function()
    local ops, maxdiff = gt.ops, require("spec.support").maxdiff
    local function f(a, b)
      ops.axpby(0.5, ops.relu(a), 2, b)                  -- in place on b, then a read of a
      return ops.add(a, b), a == b
    end
    for _, opts in ipairs { {}, { warmup = 0 }, { buckets = { dim = 1, sizes = { 4 } } } } do
      local step = gt.tree(f, opts)
      local h = gt.randn({ 4, 8 }, { seed = 1 })
      local e = h:clone()
      for _ = 1, 5 do
        local y, same = step(h, h)
        local ey = f(e, e)
        assert.is_true(same, "the same tensor passed twice is one tensor inside the call")
        assert.is_true(maxdiff(y, ey) < 1e-5 * (1 + maxdiff(ey, gt.zeros(ey.shape))))
        h, e = y, ey
      end
    end
  end)

  it("stages last call's output in a table argument of a bucketed tree", function()
    local ops, maxdiff = gt.ops, require("spec.support").maxdiff
    local function f(x, t) return ops.add(ops.relu(x), t[1]:view({ 8 })), ops.tanh(t[1]) end
    local step = gt.tree(f, { buckets = { dim = 1, sizes = { 4 }, arg = 1 } })
    local x = gt.randn({ 3, 8 }, { seed = 2 })
    local h = gt.randn({ 1, 8 }, { seed = 3 })
    local e = h:clone()
    for _ = 1, 5 do
      local y, h2 = step(x, { h })
      local ey, e2 = f(x, { e })
      assert.is_true(maxdiff(y, ey) < 1e-5 and maxdiff(h2, e2) < 1e-5)
      h, e = h2, e2
    end
  end)

  it("launches a replayed path of several segments as one graph, and gives way on any change", function()
    local ops, maxdiff = gt.ops, require("spec.support").maxdiff
    local W = gt.randn({ 8, 8 }, { seed = 7, scale = 0.3 }):static()
    local function f(x, r)
      local h = ops.relu(ops.linear(x, W))
      gt.cut()                                          -- no sync: the first graph may wait for the second
      h = r == 1 and ops.tanh(h) or ops.sigmoid(h)
      gt.cut()
      return ops.mul(h, 2)
    end
    local step = gt.tree(f)
    local xs = { gt.randn({ 4, 8 }, { seed = 1 }), gt.randn({ 4, 8 }, { seed = 2 }) }
    for i = 1, 40 do
      local x, r = xs[1], i % 2
      assert.is_true(maxdiff(step(x, r), f(x, r)) < 1e-6)
    end
    local fused = step:stats().fused
    assert.is_true(fused > 0, "no call launched its path as one graph")
    -- another input (patched into the first graph): the segments, then one graph again
    for i = 1, 30 do
      local x, r = xs[i % 3 == 0 and 2 or 1], i % 2
      assert.is_true(maxdiff(step(x, r), f(x, r)) < 1e-6)
    end
    -- what the host reads mid-call sees every segment before it, deferred or not
    local seen = {}
    local g = gt.tree(function(x)
      local h = ops.relu(ops.linear(x, W))
      gt.cut()
      h = ops.tanh(h)
      gt.cut()
      seen[#seen + 1] = h:view({ h.numel }):narrow(1, 3, 1):item()
      gt.sync()
      return ops.mul(h, 2), h:tolist()
    end)
    for i = 1, 20 do
      local x = xs[i % 2 + 1]
      local want = ops.tanh(ops.relu(ops.linear(x, W)))
      local y, list = g(x)
      assert.are.near(want:tolist()[1][3], seen[#seen], 1e-6)
      assert.are.same(want:tolist(), list)
      assert.is_true(maxdiff(y, ops.mul(want, 2)) < 1e-6)
    end
    -- a trim drops the one graphs with the graphs they were built from; profiled calls launch graph by graph
    step:trim(0)
    for i = 1, 20 do assert.is_true(maxdiff(step(xs[1], 1), f(xs[1], 1)) < 1e-6) end
    gt.profile(true)
    local before = step:stats().fused
    for i = 1, 5 do assert.is_true(maxdiff(step(xs[1], 1), f(xs[1], 1)) < 1e-6) end
    gt.profile(false)
    assert.are.equal(before, step:stats().fused)
  end)

  it("ends segments at gt.sync() and at host copies into a device tensor", function()
    local step = gt.tree(function(x, v)
      local h = axpb(x, 2, 0)
      gt.sync()
      local c = gt.tensor(x.shape)
      c:copy(v)                                         -- a host copy: a sync point
      return add(h, c)
    end)
    local x = gt.from{ 1, 2 }
    for i = 1, 4 do assert.tensor_near({ 2 + i, 4 + i }, step(x, { i, i })) end
    local s = step:stats()
    assert.are.same(3, s.nodes)                         -- axpb | (c made) | add
    assert.are.same(3 * 2, s.replays)
  end)

  it("rejects nested tree calls with a clear error", function()
    local inner = gt.tree(function(x) return axpb(x, 1, 1) end)
    local outer = gt.tree(function(x) return inner(x) end)
    assert.has_error(function() outer(gt.from{ 1 }) end,
      "tree 'inner' was called inside a call of tree 'outer': tree calls cannot nest. In a call of 'outer', call the " ..
      "plain function that 'inner' wraps (its kernels then join the graphs of 'outer'), or call 'inner' before or after 'outer'")
    assert.tensor_near({ 2 }, inner(gt.from{ 1 }))
  end)

  it("draws itself with per-node counts", function()
    local step = gt.tree(function(x) return axpb(x, 1, 1) end)
    for _ = 1, 3 do step(gt.from{ 1 }) end
    local s = tostring(step)
    assert.matches("tree 'step'", s)
    assert.matches("axpb", s)
    assert.matches("%[0%] axpb%s+3%s+1%s+1", s)
  end)
end)
