-- The replay lane (gt.h's gt_lane): a replayed gt.ops.linear tested and
-- counted from Lua, queued by the core when it next looks.  Whatever mixes
-- with it (other ops, reads, releases, errors, a branch that turns) gives
-- the eager results and the errors a call without it gives.
local gt = require "gt"
require "gt.busted"

local ops = gt.ops
local I = require "gt.internal"
local C, rt = I.C, I.rt
local lane = C.gt_lane_of(rt)

local maxdiff = require("spec.support").maxdiff

local function fails_with(pat, f)
  local ok, err = pcall(f)
  assert.is_false(ok)
  assert.is_truthy(tostring(err):find(pat), tostring(err))
end

local H = 8
local Ws = {}
for i = 1, 6 do Ws[i] = gt.randn({ H, H }, { seed = i, scale = 0.4 }):static() end
local bias = gt.randn({ H }, { seed = 99, scale = 0.1 }):static()

local function chain(v, n, from)
  for i = from or 1, n do v = ops.linear(v, Ws[i], bias, "tanh") end
  return v
end

describe("the replay lane", function()
  it("carries a replayed chain of linears, with the eager results", function()
    local seen = 0
    local step = gt.tree(function(x)
      local h = chain(x, 6)
      seen = math.max(seen, lane.lazy)      -- launches the lane holds that the core has not queued yet
      return h
    end, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 3 })
    local want = chain(x, 6)
    for _ = 1, 6 do assert.is_true(maxdiff(step(x), want) < 1e-5) end
    assert.is_true(seen >= 4, "the lane replayed " .. seen .. " launches")
    assert.is_true(step:stats().replays >= 4)
  end)

  it("gives way to the core at a read, another op and a release in the middle of a step", function()
    local reads = {}
    local step = gt.tree(function(x)
      local h = chain(x, 3)
      reads[#reads + 1] = h:tolist()[1][1]   -- a read: the segment ends there
      h = ops.add(chain(h, 5, 4), 1)          -- an op of another launcher after lane launches
      local t = ops.linear(h, Ws[1], bias)
      t:free()                               -- a release after a lane launch
      return ops.linear(h, Ws[2], bias, "relu")
    end, { warn_shapes = false })
    local function eager(x)
      local h = ops.add(chain(chain(x, 3), 5, 4), 1)
      return ops.linear(h, Ws[2], bias, "relu"), chain(x, 3):tolist()[1][1]
    end
    for i = 1, 6 do
      local x = gt.randn({ 4, H }, { seed = 10 + (i % 2) })
      local want, r = eager(x)
      assert.is_true(maxdiff(step(x), want) < 1e-5)
      assert.is_true(math.abs(reads[#reads] - r) < 1e-5)
    end
  end)

  it("follows a branch that turns after lane launches", function()
    local step = gt.tree(function(x, route)
      local h = chain(x, 3)
      if route == 1 then h = chain(h, 6, 4) else h = ops.linear(h, Ws[6], bias, "relu") end
      return h
    end, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 4 })
    local function eager(route)
      local h = chain(x, 3)
      if route == 1 then return chain(h, 6, 4) end
      return ops.linear(h, Ws[6], bias, "relu")
    end
    for _, route in ipairs({ 1, 1, 1, 2, 2, 1, 2, 1, 1, 2, 2, 2, 1 }) do
      assert.is_true(maxdiff(step(x, route), eager(route)) < 1e-5, "route " .. route)
    end
  end)

  it("predicts alternating branches, so the lane carries a suffix from its first op", function()
    local seen = {}
    local step = gt.tree(function(x, route)
      local h = chain(x, 2)
      gt.cut()
      for i = 1, 3 do h = ops.linear(h, Ws[route == 1 and i or 7 - i], bias) end
      seen[route] = lane.lazy
      return h
    end, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 12 })
    for i = 1, 12 do step(x, i % 2 + 1) end
    assert.equals(3, seen[1])
    assert.equals(3, seen[2])
  end)

  it("refuses a stale tensor and a released one as the core does, and goes on", function()
    local keep
    local step = gt.tree(function(x, use_old, release)
      local h = chain(x, 2)
      if use_old then h = ops.linear(keep, Ws[3], bias) end
      if release then h:free(); h = ops.linear(h, Ws[3], bias) end
      keep = h
      return chain(h, 5, 4)
    end, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 5 })
    for _ = 1, 4 do step(x) end
    fails_with("overwritten by a later call", function() step(x, true) end)
    fails_with("released by :free%(%)", function() step(x, false, true) end)
    for _ = 1, 3 do assert.is_true(maxdiff(step(x), chain(chain(x, 2), 5, 4)) < 1e-5) end
  end)

  it("closes when a static weight is freed in the middle of a call", function()
    local W = gt.randn({ H, H }, { seed = 42, scale = 0.4 }):static()
    local function f(x, Wt) return ops.linear(ops.linear(chain(x, 2), Wt, bias), Ws[3], bias) end
    local step = gt.tree(function(x, Wt, drop)
      local h = chain(x, 2)
      if drop then drop:free() end
      return ops.linear(ops.linear(h, Wt, bias), Ws[3], bias)
    end, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 6 })
    for _ = 1, 4 do assert.is_true(maxdiff(step(x, W), f(x, W)) < 1e-5) end
    local spare = gt.randn({ H, H }, { seed = 43 }):static()
    assert.is_true(maxdiff(step(x, W, spare), f(x, W)) < 1e-5)
    fails_with("released by :free%(%)", function() step(x, spare) end)
    for _ = 1, 2 do assert.is_true(maxdiff(step(x, W), f(x, W)) < 1e-5) end
  end)

  it("opens again after a static tensor elsewhere was freed between calls", function()
    local seen
    local step = gt.tree(function(x)
      local h = chain(x, 6)
      seen = lane.lazy
      return h
    end, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 9 })
    for _ = 1, 4 do step(x) end
    assert.is_true(seen >= 4)
    do local s = gt.randn({ H }, { seed = 1 }):static(); s:free() end
    collectgarbage(); collectgarbage()      -- its struct goes: statics are no longer known kept
    step(x)                                 -- tested the long way (and found kept)
    step(x)
    assert.is_true(seen >= 4, "the lane replayed " .. seen .. " launches")
    assert.is_true(maxdiff(step(x), chain(x, 6)) < 1e-5)
  end)

  it("drops its launches with a Lua error in the middle of a call", function()
    local step = gt.tree(function(x, boom)
      local h = chain(x, 4)
      if boom then error("boom") end
      return chain(h, 6, 5)
    end, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 7 })
    for _ = 1, 4 do step(x) end
    assert.has_error(function() step(x, true) end, "boom")
    assert.equals(0, lane.n)
    for _ = 1, 3 do assert.is_true(maxdiff(step(x), chain(x, 6)) < 1e-5) end
  end)

  it("replays every lean op with the eager results, over shapes that change between calls", function()
    local g = gt.randn({ H }, { seed = 20, scale = 0.2 }):static()
    local M2 = gt.randn({ H, 5 }, { seed = 21, scale = 0.3 }):static()
    local function f(x)
      local h = ops.linear(x, Ws[1], bias, "gelu")
      h = ops.layernorm(ops.add(h, bias), g, bias)
      h = ops.rmsnorm(ops.mul(ops.sigmoid(h), bias), g, 1e-5)
      h = ops.softmax(ops.mul(h, ops.relu(x)))
      local m = ops.matmul(h, M2)
      return ops.sum(m), ops.max(ops.tanh(m)), ops.argmax(h)
    end
    local step = gt.tree(f, { warn_shapes = false })
    local xs = {}
    for i, B in ipairs({ 1, 3, 4, 7 }) do xs[i] = gt.randn({ B, H }, { seed = 30 + i }) end
    for i = 1, 24 do
      local x = xs[(i * 7) % #xs + 1]
      local s1, m1, a1 = step(x)
      local s2, m2, a2 = f(x)
      assert.is_true(maxdiff(s1, s2) < 1e-4 and maxdiff(m1, m2) < 1e-5, "call " .. i)
      assert.same(a2:tolist(), a1:tolist())
    end
    assert.is_true(step:stats().replays >= 10)
  end)

  it("carries a user kernel's bound launches, and leaves one whose scalar changed to the core", function()
    local K = gt.compile [[
      __global__ void scale_add(float *y, const float *x, int n, float s, float t) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = x[i] * s + t;
      }
    ]]
    local f = K.scale_add:config({ 1, 1, 1 }, { 64, 1, 1 })
    local n = 4 * H
    local seen = 0
    local function body(x, t)
      local h = x
      for i = 1, 5 do
        local y = gt.tensor({ 4, H })
        f(y, h, n, 0.5 + i / 8, i == 3 and t or 0.25)
        h = y
      end
      seen = math.max(seen, lane.lazy)
      return h
    end
    local step = gt.tree(body, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 13 })
    local function eager(t)
      local h = x:tolist()
      for i = 1, 5 do
        for r = 1, 4 do for c = 1, H do h[r][c] = h[r][c] * (0.5 + i / 8) + (i == 3 and t or 0.25) end end
      end
      return h
    end
    for k, t in ipairs({ 1, 1, 1, 1, 2, 2, 1, 3, 3, 3 }) do
      local got, want = step(x, t):tolist(), eager(t)
      for r = 1, 4 do for c = 1, H do
        assert.is_true(math.abs(got[r][c] - want[r][c]) < 1e-4, ("call %d, [%d][%d]"):format(k, r, c))
      end end
    end
    assert.is_true(seen >= 4, "the lane replayed " .. seen .. " launches")
  end)

  -- A bound launcher of more than four tensors (examples/gpt.lua's fused
  -- linear has seven): the lane tests its handles' fields where they are.
  local K7 = gt.compile [[
    __global__ void mix7(float *y, const float *a, const float *b, const float *c, const float *d,
                         const float *e, const float *g, int n, float s) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) y[i] = s * a[i] + b[i] - c[i] * d[i] + e[i] * g[i];
    }
  ]]
  local f7 = K7.mix7:config({ 1, 1, 1 }, { 64, 1, 1 })
  local S = {}
  for i = 1, 4 do S[i] = gt.randn({ 4, H }, { seed = 40 + i, scale = 0.5 }):static() end
  local function mix7_eager(a, b, s)
    local A, B, P = a:tolist(), b:tolist(), {}
    for i = 1, 4 do P[i] = S[i]:tolist() end
    local y = {}
    for r = 1, 4 do
      y[r] = {}
      for c = 1, H do
        y[r][c] = s * A[r][c] + B[r][c] - P[1][r][c] * P[2][r][c] + P[3][r][c] * P[4][r][c]
      end
    end
    return y
  end
  local function close(got, want, what)
    for r = 1, 4 do for c = 1, H do
      assert.is_true(math.abs(got[r][c] - want[r][c]) < 1e-4, ("%s [%d][%d]: %g vs %g"):format(what, r, c, got[r][c], want[r][c]))
    end end
  end

  it("carries a bound launcher of seven tensors, and leaves a changed scalar to the core", function()
    local seen = 0
    local function body(x, s)
      local u = gt.tensor({ 4, H })
      f7(u, x, x, S[1], S[2], S[3], S[4], 4 * H, 0.5)
      local h = u
      for i = 1, 4 do
        local y = gt.tensor({ 4, H })
        f7(y, h, u, S[1], S[2], S[3], S[4], 4 * H, i == 2 and s or 0.25)
        h = y
      end
      seen = math.max(seen, lane.lazy)
      return h
    end
    local step = gt.tree(body, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 17, scale = 0.5 })
    local function eager(s)
      local u = gt.from(mix7_eager(x, x, 0.5))
      local h = u
      for i = 1, 4 do h = gt.from(mix7_eager(h, u, i == 2 and s or 0.25)) end
      return h:tolist()
    end
    for k, s in ipairs({ 1, 1, 1, 1, 2, 2, 1, 3 }) do close(step(x, s):tolist(), eager(s), "call " .. k) end
    assert.is_true(seen >= 3, "the lane replayed " .. seen .. " launches")
    assert.is_true(step:stats().replays >= 5)
  end)

  it("gives a wide launch's stale, strided or wrong-dtype tensor at a replay the eager error, and goes on", function()
    local arg
    local step = gt.tree(function(x)
      local u = gt.tensor({ 4, H })
      f7(u, x, x, S[1], S[2], S[3], S[4], 4 * H, 1)
      local y = gt.tensor({ 4, H })
      f7(y, u, arg or u, S[1], S[2], S[3], S[4], 4 * H, 1)
      return y, u
    end, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 24 })
    for _ = 1, 4 do step(x) end
    assert.is_true(step:stats().replays >= 2)
    arg = select(2, step(x))    -- overwritten by the next call: the buffer struct this call's u gets
    fails_with("overwritten by a later call", function() step(x) end)
    arg = gt.randn({ 4, 2 * H }, { seed = 25 }):narrow(2, 1, H)
    fails_with("non%-contiguous", function() step(x) end)
    arg = gt.zeros({ 4, H }, "i32")
    fails_with("expects f32", function() step(x) end)
    arg = nil
    local u = gt.from(mix7_eager(x, x, 1))
    close(step(x):tolist(), mix7_eager(u, u, 1), "after the errors")
  end)

  it("carries an op on the call's input, the same tensor each call, and sees it change in place", function()
    local first = {}
    local step = gt.tree(function(x)
      local h = ops.linear(x, Ws[1], bias, "tanh")
      first[#first + 1] = lane.lazy           -- 1: the input's op came through the lane
      return chain(h, 6, 2)
    end, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 50 })
    for i = 1, 8 do
      x:copy(gt.randn({ 4, H }, { seed = 50 + i }))   -- new values at the same address
      assert.is_true(maxdiff(step(x), chain(x, 6)) < 1e-5, "call " .. i)
    end
    assert.equals(1, first[#first])
  end)

  it("numbers a call's inputs as the core does: another aliasing than the recording's is another node", function()
    local step = gt.tree(function(a, b)
      local h = ops.linear(a, Ws[1], bias)
      return ops.add(h, ops.linear(b, Ws[2], bias))
    end, { warn_shapes = false })
    local function eager(a, b) return ops.add(ops.linear(a, Ws[1], bias), ops.linear(b, Ws[2], bias)) end
    local a, b = gt.randn({ 4, H }, { seed = 51 }), gt.randn({ 4, H }, { seed = 52 })
    for _ = 1, 4 do assert.is_true(maxdiff(step(a, b), eager(a, b)) < 1e-5) end
    local nodes = step:stats().nodes
    -- b's first op goes to the core (not the struct recorded there) and b is
    -- the segment's first input; its second op comes through the lane (the
    -- struct recorded there) where the recording had a second input
    for _ = 1, 4 do assert.is_true(maxdiff(step(b, b), eager(b, b)) < 1e-5) end
    assert.equals(nodes + 1, step:stats().nodes)
    for _ = 1, 3 do
      assert.is_true(maxdiff(step(a, b), eager(a, b)) < 1e-5)
      assert.is_true(maxdiff(step(b, b), eager(b, b)) < 1e-5)
    end
    assert.equals(nodes + 1, step:stats().nodes)
  end)

  -- (an input whose struct now holds other memory, patched: key.c's C test "test_lane")
  it("patches an input from another tree whose output moved: its struct the same, its address another", function()
    local W2 = gt.randn({ H, 64 }, { seed = 80, scale = 0.3 }):static()
    local W3 = gt.randn({ 64, H }, { seed = 81, scale = 0.3 }):static()
    -- A's first output is the call's second buffer on either route, after h,
    -- which it returns too (so h stays live): where it lies follows h's size
    local A = gt.tree(function(x, r)
      local h = r == 1 and ops.linear(x, Ws[1], bias) or ops.linear(x, W2)
      gt.cut()
      return (r == 1 and ops.linear(h, Ws[2], bias) or ops.linear(h, W3, bias)), h
    end, { warn_shapes = false })
    local function a_eager(x, r)
      if r == 1 then return ops.linear(ops.linear(x, Ws[1], bias), Ws[2], bias) end
      return ops.linear(ops.linear(x, W2), W3, bias)
    end
    local first = {}
    for _, release in ipairs({ false, true }) do
      -- (release: a tensor freed after the lane took y's op, and before y's
      -- next one: the lane's launches go to the queue in the middle)
      local B = gt.tree(function(y)
        local h = ops.linear(y, Ws[3], bias, "tanh")
        first[#first + 1] = lane.lazy
        if release then ops.linear(h, Ws[5], bias):free() end
        return ops.add(chain(h, 3, 4), y)
      end, { warn_shapes = false })
      local x = gt.randn({ 4, H }, { seed = 82 })
      local addr = {}
      for i, r in ipairs({ 1, 1, 1, 1, 2, 2, 1, 2, 1, 1, 2 }) do
        local y = A(x, r)
        addr[r] = tonumber(y._b.addr)
        local want = ops.add(chain(ops.linear(a_eager(x, r), Ws[3], bias, "tanh"), 3, 4), a_eager(x, r))
        assert.is_true(maxdiff(B(y), want) < 1e-5, ("call %d, route %d, release %s"):format(i, r, tostring(release)))
        if i == 4 then assert.equals(1, first[#first]) end   -- (the lane took y's op)
      end
      assert.are_not.equal(addr[1], addr[2])
    end
  end)

  it("carries a kernel that writes into the call's input, and the write reaches the caller", function()
    local K = gt.compile [[
      __global__ void bump(float *y, const float *w, int n, float s) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = y[i] * s + w[i];
      }
    ]]
    local f = K.bump:config({ 1, 1, 1 }, { 64, 1, 1 })
    local w = gt.randn({ 4, H }, { seed = 70, scale = 0.1 }):static()
    for _, copy in ipairs({ false, true }) do
      local first = {}
      local step = gt.tree(function(x)
        f(x, w, 4 * H, 0.5)                       -- in place, into the input (or its staged copy)
        first[#first + 1] = lane.lazy
        return chain(x, 3)
      end, { warn_shapes = false, copy_inputs = copy })
      local x = gt.randn({ 4, H }, { seed = 71 })
      local want = x:tolist()
      local W = w:tolist()
      for call = 1, 7 do
        local got = step(x)
        for r = 1, 4 do for c = 1, H do want[r][c] = want[r][c] * 0.5 + W[r][c] end end
        local now = x:tolist()
        for r = 1, 4 do for c = 1, H do
          assert.is_true(math.abs(now[r][c] - want[r][c]) < 1e-5, ("copy %s, call %d [%d][%d]"):format(tostring(copy), call, r, c))
        end end
        assert.is_true(maxdiff(got, chain(x, 3)) < 1e-5)
      end
      if not copy then assert.equals(1, first[#first]) end
    end
  end)

  it("keeps its launches lazy across a gt.scope's end, and the call replays its one node", function()
    local seen = {}
    local function f(x, note)
      for i = 1, 3 do
        x = gt.scope(function(h) return ops.linear(ops.linear(h, Ws[i], bias, "tanh"), Ws[i + 1], bias) end, x)
        if note then seen[i] = lane.lazy end  -- (a scope's end notes its releases; nothing reads the queue)
      end
      return x
    end
    local step = gt.tree(function(x) return f(x, true) end, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 90 })
    for _ = 1, 6 do assert.is_true(maxdiff(step(x), f(x)) < 1e-5) end
    assert.are.same({ 2, 4, 6 }, seen)
    local s = step:stats()
    assert.equals(1, s.nodes)
    assert.is_true(s.replays >= 4)
  end)

  it("is closed outside a tree call", function()
    local step = gt.tree(function(x) return chain(x, 3) end, { warn_shapes = false })
    local x = gt.randn({ 4, H }, { seed = 8 })
    for _ = 1, 4 do step(x) end
    assert.equals(0, lane.n)
    assert.equals(0, lane.lazy)
    assert.is_true(maxdiff(chain(x, 3), step(x)) < 1e-5)
  end)
end)
