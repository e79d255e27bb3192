-- Keyed calls (DESIGN section 5): a known path replayed without running the Lua body.
local gt = require "gt"
require "gt.busted"

local ops = gt.ops

local maxdiff = require("spec.support").maxdiff

local W = gt.randn({ 8, 8 }, { seed = 1, scale = 0.3 }):static()
local W2 = gt.randn({ 8, 8 }, { seed = 5, scale = 0.3 }):static()

local function model(x, route, s, Wt)
  local h = ops.linear(x, Wt or W)
  if route == 1 then h = ops.tanh(h) elseif route == 2 then h = ops.relu(h) else h = ops.sigmoid(h) end
  gt.cut()
  if route ~= 2 then h = ops.mul(h, 2) end
  return ops.add(h, s)
end

-- After n calls of a keyed tree whose every call ran its body (runs): no
-- hit, one reason (matching why) counted n times, one warning naming it.
local function assert_refused(step, n, runs, why, warned)
  assert.are.equal(n, runs)
  local k = step:stats().keyed
  assert.are.equal(0, k.hits)
  local reason, count = next(k.refused)
  assert.matches("^" .. why .. "$", reason)
  assert.are.equal(n, count)
  assert.are.equal(1, #warned)
  assert.matches(why, warned[1])
end

-- Four calls of step(x), then lie (what decides the launches changes, the
-- key does not), then calls until one raises (verify): pcall's answer.
local function caught_lying(step, x, lie)
  for _ = 1, 4 do step(x) end
  lie()
  local ok, err
  for _ = 1, 4 do
    ok, err = pcall(step, x)
    if not ok then break end
  end
  return ok, err
end

describe("keyed calls", function()
  it("equal eager results over a long random route sequence, and stop running the body", function()
    local runs = 0
    local step = gt.tree(function(x, route, s) runs = runs + 1; return model(x, route, s) end,
      { key = function(_, route) return route end, patch = { 3 } })
    local x = gt.randn({ 4, 8 }, { seed = 2 })
    local seed = 7
    local function rnd(n) seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n + 1 end
    for _ = 1, 200 do
      local route, s = rnd(3), rnd(100) * 0.25
      assert.is_true(maxdiff(step(x, route, s), model(x, route, s)) < 1e-5)
    end
    local k = step:stats().keyed
    assert.is_true(runs <= 3 * 6, "the body ran " .. runs .. " times")
    assert.are.equal(200 - runs + 3, k.hits)             -- (each route's memoizing call runs it twice: traced, then as usual)
    assert.are.same({}, k.refused)
    -- hits are replays of the path's nodes
    local s = step:stats()
    assert.are.equal(s.replays + s.warmups + s.eager + s.updates, 2 * 200 - (s.recorded))
  end)

  it("launches a path of several segments as one graph while its hits patch nothing, and gives way on any change", function()
    local runs = 0
    local step = gt.tree(function(x, route, s) runs = runs + 1; return model(x, route, s) end,
      { key = function(_, route) return route end, patch = { 3 } })
    local xs = { gt.randn({ 4, 8 }, { seed = 2 }), gt.randn({ 4, 8 }, { seed = 4 }) }
    local x, s = xs[1], 0.5
    for _ = 1, 20 do assert.is_true(maxdiff(step(x, 1, s), model(x, 1, s)) < 1e-5) end
    local fused = step:stats().keyed.fused
    assert.is_true(fused > 0, "no hit launched the path as one graph")
    -- a new scalar: this hit patches the segments; the next ones must not launch the old one graph
    s = 1.75
    for _ = 1, 3 do assert.is_true(maxdiff(step(x, 1, s), model(x, 1, s)) < 1e-5) end
    assert.are.equal(fused, step:stats().keyed.fused)
    -- a body's replay of the path with another input (verify) patches too; then a trim drops the graphs
    local seed = 11
    local function rnd(n) seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n + 1 end
    for i = 1, 300 do
      local r = rnd(20)
      if r == 1 then s = rnd(8) * 0.25 elseif r == 2 then x = xs[rnd(2)] elseif r == 3 then step:trim(0) end
      local route = rnd(3) == 1 and 2 or 1
      assert.is_true(maxdiff(step(x, route, s), model(x, route, s)) < 1e-5, "call " .. i)
    end
    assert.is_true(step:stats().keyed.fused > fused + 20)
    -- with verify the body runs every 4th call and replays the same graphs
    local vstep = gt.tree(function(y, route, t) return model(y, route, t) end,
      { key = function(_, route) return route end, patch = { 3 }, verify = 4 })
    for i = 1, 120 do
      local t = math.floor(i / 30) % 2 == 0 and 0.25 or 0.75
      local y = xs[math.floor(i / 45) % 2 + 1]
      assert.is_true(maxdiff(vstep(y, 1, t), model(y, 1, t)) < 1e-5, "verified call " .. i)
    end
    assert.is_true(vstep:stats().keyed.fused > 0)
  end)

  it("honours new input addresses, new shapes, static weights passed as arguments and patched scalars", function()
    local runs = 0
    local step = gt.tree(function(x, route, s, Wt) runs = runs + 1; return model(x, route, s, Wt) end,
      { key = function(_, route) return route end, patch = { 3 } })
    for i = 1, 30 do
      local rows = i % 3 == 0 and 2 or 4
      local x = gt.randn({ rows, 8 }, { seed = 10 + i })                -- a new address every call
      local Wt = i % 4 < 2 and W or W2                                   -- swapped static weight
      local y = step(x, 1, i * 0.1, Wt)
      assert.are.same({ rows, 8 }, y.shape)
      assert.is_true(maxdiff(y, model(x, 1, i * 0.1, Wt)) < 1e-5)
    end
    assert.is_true(step:stats().keyed.hits >= 10)
  end)

  it("keeps h = step(h) right under a key (staged inputs)", function()
    local step = gt.tree(function(h, c) return ops.tanh(ops.linear(h, W)), c end, { key = function() return 0 end })
    local h, c = gt.randn({ 4, 8 }, { seed = 3 }), gt.ones { 2 }
    local he = h:clone()
    for _ = 1, 12 do
      h, c = step(h, c)
      he = ops.tanh(ops.linear(he, W))
      assert.is_true(maxdiff(h, he) < 1e-5)
      assert.tensor_near({ 1, 1 }, c)
    end
    assert.is_true(step:stats().keyed.hits >= 8)
    assert.is_true(step:stats().node[0].keyed)
    assert.matches("keyed", tostring(step))                        -- the drawing says which paths are keyed
    assert.matches("keyed %(replayed without the body%)", gt.report.html(step))
  end)

  it("makes the outputs of a keyed hit stale at the next call, like any output", function()
    local step = gt.tree(function(x) return ops.relu(x) end, { key = function() return 1 end })
    local x = gt.from { -1, 2 }
    for _ = 1, 5 do step(x) end
    local y = step(x)
    assert.tensor_near({ 0, 2 }, y)
    step(x)
    assert.stale(y)
    assert.are.equal(4, step:stats().keyed.hits)
  end)

  it("returns an input given back as is, whether the key's first calls staged it or not", function()
    -- h = step(h) stages h (the tree's own output) and returns the staged view;
    -- a later call with an outside tensor stages nothing and must return that tensor
    local step = gt.tree(function(x) return x, ops.linear(x, W) end, { key = function() return 0 end })
    local _, y = step(gt.randn({ 2, 8 }, { seed = 3 }))
    for _ = 1, 4 do
      local was = y:tolist()
      local a
      a, y = step(y)
      assert.is_false(a:is_stale())                                  -- the staged copy of the last y
      assert.are.same(was, a:tolist())
    end
    local x = gt.randn({ 2, 8 }, { seed = 4 })
    for _ = 1, 3 do
      local a2, y2 = step(x)
      assert.are.equal(x, a2)
      assert.is_true(maxdiff(y2, ops.linear(x, W)) < 1e-5)
    end
    assert.is_true(step:stats().keyed.hits >= 4)
  end)

  it("returns a view of this call's input where the body returns a view of its input", function()
    local step = gt.tree(function(x) return x:view({ x.numel }), ops.relu(x) end, { key = function() return 0 end })
    for i = 1, 8 do
      local x = gt.randn({ 2, 4 }, { seed = 40 + i })
      local v, y = step(x)
      assert.are.same({ 8 }, v.shape)
      assert.are.same(x:view({ 8 }):tolist(), v:tolist())          -- not the first call's input
      assert.is_true(maxdiff(y, ops.relu(x)) < 1e-6)
    end
    assert.is_true(step:stats().keyed.hits >= 4)
    -- a narrow view into a bigger input, at another offset each call
    local big = gt.randn({ 6, 4 }, { seed = 50 })
    local rows = gt.tree(function(x) return x:narrow(1, 2, 1) end, { key = function() return 0 end })
    for i = 1, 6 do
      local x = big:narrow(1, i % 3 + 1, 3)
      assert.are.same(x:narrow(1, 2, 1):tolist(), rows(x):tolist())
    end
  end)

  it("keeps one tensor passed as two arguments apart from two tensors (another path)", function()
    local warned, old = {}, gt.on_warning
    gt.on_warning = function(m) warned[#warned + 1] = m end
    local step = gt.tree(function(a, b)
      ops.axpby(1, a, 2, b)                                           -- b = a + 2b, in place
      return ops.add(a, b)
    end, { key = function() return 0 end })
    local function eager(a, b) ops.axpby(1, a, 2, b); return ops.add(a, b) end
    for i = 1, 12 do
      local a = gt.randn({ 4 }, { seed = 60 + i })
      local b = i % 3 == 0 and a or gt.randn({ 4 }, { seed = 80 + i })
      local ea = a:clone()
      local eb = b == a and ea or b:clone()
      assert.is_true(maxdiff(step(a, b), eager(ea, eb)) < 1e-5)
      assert.is_true(maxdiff(b, eb) < 1e-5)
    end
    assert.is_true(step:stats().keyed.hits >= 4)
    -- verified on every call: the shared pair is not the pair's memoized path (its graph's
    -- edges assumed two buffers), so it must not be taken for it
    local v = gt.tree(function(a, b) ops.axpby(1, a, 2, b); return ops.add(a, b) end,
      { key = function() return 0 end, verify = 1 })
    for i = 1, 8 do
      local a = gt.randn({ 4 }, { seed = 90 + i })
      assert.has_no.errors(function() v(a, i > 4 and a or gt.randn({ 4 }, { seed = 99 + i })) end)
    end
    gt.on_warning = old
    -- each tree says once that the shared pair runs the body
    assert.are.equal(2, #warned, table.concat(warned, "\n"))
    assert.matches("tree 'step' .*two tensor arguments share memory; the body runs", warned[1])
    assert.matches("tree 'v' .*two tensor arguments share memory; the body runs", warned[2])
  end)

  it("raises for a released or overwritten tensor argument on a hit, as any call does, and goes on", function()
    local step = gt.tree(function(x) return ops.linear(x, W) end, { key = function() return 0 end })
    local other = gt.tree(function(x) return ops.relu(x) end)
    local x = gt.randn({ 2, 8 }, { seed = 6 })
    for _ = 1, 8 do step(x) end
    local hits = step:stats().keyed.hits
    assert.is_true(hits >= 4)
    local gone = x:clone()
    gone:free()
    local ok, err = pcall(step, gone)
    assert.is_false(ok)
    assert.matches("was released by :free%(%) at", err)
    local old = other(x)
    other(x)                                                       -- old is overwritten now
    ok, err = pcall(step, old)
    assert.is_false(ok)
    assert.matches("was overwritten by a later call", err)
    assert.is_true(maxdiff(step(x), ops.linear(x, W)) < 1e-5)     -- and the tree goes on
    assert.are.equal(hits + 1, step:stats().keyed.hits)
  end)

  it("times a keyed hit one call in 16 after the first 64, and leaves the others' cpu_us nil", function()
    local step = gt.tree(function(x) return ops.relu(x) end, { key = function() return 1 end })
    local x = gt.from { -1, 2 }
    for _ = 1, 100 do step(x) end
    local h = step:history()
    assert.are.equal(100, #h)
    for _, c in ipairs(h) do
      local timed = c.call <= 64 or c.call % 16 == 0
      assert.are.equal(timed, c.cpu_us ~= nil, "call " .. c.call)
      if timed then assert.is_true(c.cpu_us > 0) end
    end
    assert.is_true(step:stats().keyed.hits >= 95)
    assert.matches("Host time per call", gt.report.html(step))
    local tree = gt.tree(function(v) return ops.relu(v) end)            -- a call that runs its body is always timed
    for _ = 1, 100 do tree(x) end
    for _, c in ipairs(tree:history()) do assert.is_true(c.cpu_us > 0) end
  end)

  it("leaves the runtime usable after a keyed call refused inside another tree's call", function()
    local inner = gt.tree(function(x) return ops.relu(x) end, { key = function() return 1 end })
    local x = gt.from { -1, 2 }
    for _ = 1, 4 do inner(x) end
    local hits = inner:stats().keyed.hits
    local outer = gt.tree(function(v) return inner(v) end)
    assert.has_error(function() outer(x) end, nil)
    local ok, err = pcall(outer, x)
    assert.is_false(ok)
    assert.matches("cannot nest", tostring(err))
    assert.tensor_near({ 0, 2 }, inner(x))
    assert.are.equal(hits + 1, inner:stats().keyed.hits)
  end)

  it("refuses a path that reads the device mid-call, naming the reason and its line, and runs the body", function()
    local warned = {}
    local old = gt.on_warning
    gt.on_warning = function(m) warned[#warned + 1] = m end
    local runs = 0
    local step = gt.tree(function(x)
      runs = runs + 1
      local t = ops.sum(ops.sum(x)):item()
      return ops.mul(x, t > 0 and 1 or -1)
    end, { key = function() return 1 end })
    local x = gt.from { { 1, 2 } }
    for _ = 1, 6 do assert.tensor_near({ { 1, 2 } }, step(x)) end
    gt.on_warning = old
    assert_refused(step, 6, runs, "item at .*keyed_spec.lua:%d+", warned)
  end)

  it("refuses a path with a kernel kept out of graphs, warning once however many key values take it", function()
    local K = gt.compile([[
      __global__ void twice(float *y, const float *x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2 * x[i]; }
    ]], { graph = false, name = "twice.cu" })
    local warned = {}
    local old = gt.on_warning
    gt.on_warning = function(m) warned[#warned + 1] = m end
    local runs = 0
    local step = gt.tree(function(x, id)
      runs = runs + 1
      local y = gt.tensor(x.shape)
      K.twice(1, 32, y, x, x.numel)
      return ops.add(y, 1)
    end, { key = function(_, id) return id end })
    local x = gt.from { 1, 2 }
    for i = 1, 8 do assert.tensor_near({ 3, 5 }, step(x, i % 4)) end
    gt.on_warning = old
    assert_refused(step, 8, runs, "kernel 'twice' is not graphable %(graph = false%) at .*keyed_spec.lua:%d+", warned)
  end)

  it("replays each key's own scalars, unpatched numbers and tensors when keys share nodes", function()
    -- the keys' paths are the same nodes (the same kernels on the same shapes): a body run of
    -- one key patches its values into the graphs, and a hit of another must put its own back
    local A, B = gt.full({ 2, 4 }, 1):static(), gt.full({ 2, 4 }, 10):static()   -- (a captured tensor must be static)
    local function body(x, route, s)
      local a = route == 1 and 2 or route == 2 and 3 or 0.5
      return ops.add(ops.mul(x, a * s), route == 2 and B or A)
    end
    local runs = 0
    local step = gt.tree(function(x, route, s) runs = runs + 1; return body(x, route, s) end,
      { key = function(_, route) return route end })       -- s is not in patch: its values are keyed too
    local x = gt.randn({ 2, 4 }, { seed = 3 })
    local seed = 11
    local function rnd(n) seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n + 1 end
    for _ = 1, 120 do
      local route, s = rnd(3), rnd(2)
      assert.is_true(maxdiff(step(x, route, s), body(x, route, s)) < 1e-6)
    end
    assert.are.equal(120 - runs, step:stats().keyed.hits)
    assert.is_true(step:stats().keyed.hits > 60)
    local nodes = 0
    for _ in pairs(step:stats().node) do nodes = nodes + 1 end
    assert.are.equal(2, nodes)                              -- one node for every key but route 2's (B: another static)
  end)

  it("catches with verify a key that does not decide a scalar, naming the launch", function()
    local scale = 2                                  -- decides a kernel's scalar, but the key does not say so
    local step = gt.tree(function(x) return ops.mul(x, scale) end,
      { key = function() return "always the same" end, verify = 2 })
    local x = gt.randn({ 4, 8 }, { seed = 4 })
    local ok, err = caught_lying(step, x, function() scale = 3 end)
    assert.is_false(ok)
    assert.matches("keyed call with key %(always the same%) launched other values than the memoized path: " ..
      "segment 1, launch 1 %([%w_]+%): argument %d+ is 3 where the memoized path has 2", err)
    -- the memo goes with the lie: the next calls run the body and give the new scale
    for _ = 1, 6 do assert.is_true(maxdiff(step(x), ops.mul(x, 3)) < 1e-6) end
  end)

  it("catches a lying key with verify, naming the key", function()
    local route = 1                                  -- decides the path, but the key does not say so
    local step = gt.tree(function(x) return model(x, route, 0) end,
      { key = function() return "always the same" end, verify = 2 })
    local x = gt.randn({ 4, 8 }, { seed = 4 })
    local ok, err = caught_lying(step, x, function() route = 2 end)
    assert.is_false(ok)
    assert.matches("keyed call with key %(always the same%) took another path than the memoized one", err)
  end)

  it("verifies every keyed call with GTLUA_VERIFY_KEYS=1", function()
    local S = require "spec.support"
    local script = os.tmpname()
    S.spit(script, [[
      local route = 1
      local step = gt.tree(function(x) if route == 1 then return gt.ops.relu(x) end return gt.ops.tanh(x) end,
        { key = function() return 1 end })
      local x = gt.from { 1, 2 }
      for _ = 1, 5 do step(x) end
      route = 2
      local ok, err = pcall(step, x)
      print(ok, step:stats().keyed.verified)
    ]])
    local st, out = S.gtlua(S.shq(script), { env = "GTLUA_VERIFY_KEYS=1" })
    os.remove(script)
    assert.are.equal(0, st)
    assert.matches("^false\t2", out)
  end)

  it("works with buckets: padded sizes and exact ones equal eager, h = step(h) included, and the body stops running", function()
    local runs = 0
    local b = gt.randn({ 8 }, { seed = 9 }):static()
    local function f(x, s) local h = ops.linear(x, W, b, "relu"); return ops.add(h, s), h end
    local step = gt.tree(function(x, s) runs = runs + 1; return f(x, s) end,
      { key = function() return 0 end, patch = { 2 }, buckets = { dim = 1, sizes = { 2, 4, 8 } }, warn_shapes = false })
    local seed = 3
    for i = 1, 120 do
      seed = (seed * 1103515245 + 12345) % 2147483648
      local n = math.floor(seed / 65536) % 8 + 1
      local x = gt.randn({ n, 8 }, { seed = 20 + i })
      local y, h = step(x, i * 0.25)
      local ey, eh = f(x, i * 0.25)
      assert.are.same({ n, 8 }, y.shape)
      assert.are.same({ n, 8 }, h.shape)
      assert.is_true(maxdiff(y, ey) < 1e-5 and maxdiff(h, eh) < 1e-5)
      if i % 10 == 0 then                                 -- an output fed back (staged, padded when short)
        local y2 = step(y, 1)
        assert.is_true(maxdiff(y2, f(ey, 1)) < 1e-5)
      end
    end
    local k = step:stats().keyed
    assert.is_true(runs <= 50, "the body ran " .. runs .. " times")
    assert.is_true(k.hits >= 90, "hits " .. k.hits)
    assert.are.same({}, k.refused)
  end)

  it("refuses table arguments and rejects bad options with clear errors", function()
    assert.has_error(function() gt.tree(function() end, { key = 3 }) end,
      "gt.tree: option key must be a function of the call's arguments returning the values that decide its path, got 3")
    assert.has_error(function() gt.tree(function() end, { key = function() end, patch = { 0 } }) end,
      "gt.tree: option patch[1] must be an argument position: a whole number >= 1, got 0")
    local old = gt.on_warning
    gt.on_warning = function() end
    local step = gt.tree(function(t) return ops.relu(t.x) end, { key = function() return 1 end })
    local x = gt.from { -1, 1 }
    for _ = 1, 4 do assert.tensor_near({ 0, 1 }, step { x = x }) end
    gt.on_warning = old
    assert.are.equal(4, step:stats().keyed.refused["a table argument"])
  end)

  it("never returns a tensor the body released as live: such a path runs its body, raising as eager code", function()
    local ops = gt.ops
    local function body(x)
      local y = ops.relu(x)
      y:free()
      local w = ops.mul(x, 100)
      return y, w
    end
    local old, warned = gt.on_warning, 0
    gt.on_warning = function() warned = warned + 1 end
    local step = gt.tree(body, { key = function() return 1 end })
    for i = 1, 6 do
      local y, w = step(gt.from { i, -i })
      assert.tensor_near({ 100 * i, -100 * i }, w)
      assert.matches("was released by :free%(%)", select(2, pcall(y.tolist, y)))
    end
    gt.on_warning = old
    assert.are.equal(0, step:stats().keyed.hits)
    assert.are.equal(6, step:stats().keyed.refused["it returns a tensor it released"])
    assert.are.equal(1, warned)
  end)

  it("returns a patched number argument returned as is with this call's value", function()
    local step = gt.tree(function(x, pos) return gt.ops.mul(x, pos), pos end, { key = function() return 0 end, patch = { 2 } })
    local x = gt.from { 1, 2 }
    for pos = 1, 8 do
      local y, p = step(x, pos)
      assert.tensor_near({ pos, 2 * pos }, y)
      assert.are.equal(pos, p)
    end
    assert.is_true(step:stats().keyed.hits >= 4)
  end)

  it("stops running the body after record and one replay when a patch number changes every call, a constant beside it kept", function()
    local runs = 0
    local step = gt.tree(function(x, s) runs = runs + 1; return gt.ops.mul(gt.ops.mul(x, 3), s) end,
      { key = function() return 0 end, patch = { 2 } })
    local x = gt.from { 1, 2 }
    for _, s in ipairs { 1, 2, 3, 4, 5, 3, 6, 2, 7 } do   -- (3: the constant's value, on the saving call)
      assert.tensor_near({ 3 * s, 6 * s }, step(x, s))
    end
    assert.are.equal(5, runs)                              -- warmup, record, replay (traced, then as usual), confirming
    assert.are.equal(5, step:stats().keyed.hits)
    -- a number unchanged from the recording call to the saving one: the trace tells the constant from it all the same
    runs = 0
    local same = gt.tree(function(x, s) runs = runs + 1; return gt.ops.mul(gt.ops.mul(x, 3), s) end,
      { key = function() return 0 end, patch = { 2 } })
    for _, s in ipairs { 3, 3, 3, 3, 4, 5, 3 } do assert.tensor_near({ 3 * s, 6 * s }, same(x, s)) end
    assert.are.equal(5, runs)
  end)

  it("never launches a freed static weight's address: a weight captured as an upvalue, swapped and collected", function()
    local W = gt.full({ 2, 2 }, 1):static()
    local step = gt.tree(function(x) return gt.ops.linear(x, W) end, { key = function() return 1 end })
    local x = gt.ones { 1, 2 }
    for _ = 1, 4 do assert.tensor_near({ { 2, 2 } }, step(x)) end
    W = gt.full({ 2, 2 }, 5):static()
    collectgarbage(); collectgarbage()
    local junk = {}
    for i = 1, 20 do junk[i] = gt.full({ 2, 2 }, 100 + i) end
    for _ = 1, 4 do assert.tensor_near({ { 10, 10 } }, step(x)) end
    assert.is_true(step:stats().keyed.hits >= 2)
  end)

  it("copies a fresh input each hit: the copy's graph is rebuilt at its new address (an update), the body stops", function()
    local runs = 0
    local function body(x)
      runs = runs + 1
      local y = gt.zeros { 4, 8 }
      y:copy(x)                                     -- a copy node reading the input, not a kernel
      return ops.linear(y, W)
    end
    local step = gt.tree(body, { key = function() return 0 end })
    for i = 1, 30 do
      local x = gt.randn({ 4, 8 }, { seed = 100 + i })   -- a fresh input every call
      assert.is_true(maxdiff(step(x), ops.linear(x, W)) < 1e-6, "call " .. i)
    end
    local k, s = step:stats().keyed, step:stats()
    assert.is_true(runs <= 4, "the body ran " .. runs .. " times")
    assert.are.equal(30 - runs, k.hits)
    assert.is_true(s.updates >= k.hits, "a hit that moves a copy is an update of its node")
    local x = gt.randn({ 4, 8 }, { seed = 7 })
    for _ = 1, 3 do assert.is_true(maxdiff(step(x), ops.linear(x, W)) < 1e-6) end   -- the same input again: replays
  end)
end)
