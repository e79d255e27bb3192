-- Keyed calls that are never wrong (DESIGN section 5): `patch` numbers are
-- traced, not matched by value; every buffer a hit reads is guarded by its
-- path.  Each case: the keyed tree gives what the body gives eagerly, or the
-- eager error.
local gt = require "gt"
require "gt.busted"

local ops = gt.ops

local K = gt.compile [[
__global__ void addf(float *y, const float *x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] + s; }
__global__ void axpb(float *y, const float *x, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + b; }
__global__ void divf(float *y, const float *x, float d, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] / d; }
__global__ void seti(float *y, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = (float)v; }
__global__ void setu(float *y, unsigned v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = (float)v; }
]]

-- step(...) against body(...) run eagerly, call by call: each call gives
-- the same first element, or both raise.
local function same_as_eager(step, body, calls)
  for _, args in ipairs(calls) do
    local ok1, r1 = pcall(body, unpack(args))
    local ok2, r2 = pcall(step, unpack(args))
    assert.are.equal(ok1, ok2, ("call (%s): eager %s, tree %s"):format(table.concat(args, ", ", 2),
      ok1 and "returned" or ("raised " .. tostring(r1)), ok2 and "returned" or ("raised " .. tostring(r2))))
    if ok1 then
      local a, b = r1:tolist()[1], r2:tolist()[1]
      assert.is_true(a == b or (a ~= a and b ~= b), ("call (%s): eager %s, tree %s"):format(
        table.concat(args, ", ", 2), tostring(a), tostring(b)))
      if a == 0 then assert.are.equal(1 / a, 1 / b, "the sign of a zero") end
    else
      assert.matches("expects an integer", tostring(r2))
    end
  end
end

local function quiet(f)
  local old, warned = gt.on_warning, {}
  gt.on_warning = function(m) warned[#warned + 1] = m end
  local ok, err = pcall(f, warned)
  gt.on_warning = old
  if not ok then error(err, 0) end
  return warned
end

describe("keyed calls are never wrong #keyed", function()
  it("case 1: a patch number through arithmetic is traced: eager results, no body run after memoizing", function()
    local runs = 0
    local function body(x, pos)
      local y = gt.tensor(x.shape)
      K.axpb(1, 32, y, x, pos * 2, -pos + 1 - (pos % 3) / 4 + math.floor(pos / 5) + 2 ^ 2, x.numel)
      return y
    end
    local step = gt.tree(function(x, pos) runs = runs + 1; return body(x, pos) end,
      { key = function() return 1 end, patch = { 2 } })
    local x = gt.full({ 4 }, 1)
    local calls = {}
    for pos = 1, 24 do calls[#calls + 1] = { x, pos } end
    same_as_eager(step, body, calls)
    -- warmup, record, the replay that memoizes (traced, then as usual), the first call with another number (confirming)
    assert.are.equal(5, runs)
    assert.are.equal(20, step:stats().keyed.hits)
  end)

  it("case 1: a patch number through a branch: every result is eager's, hits where the branch repeats", function()
    local runs = 0
    local function body(x, pos)
      local y = gt.tensor(x.shape)
      K.addf(1, 32, y, x, pos % 2 == 0 and 100 or pos, x.numel)
      return y
    end
    local step = gt.tree(function(x, pos) runs = runs + 1; return body(x, pos) end,
      { key = function() return 1 end, patch = { 2 } })
    local x = gt.zeros { 4 }
    local calls = {}
    for pos = 1, 12 do calls[#calls + 1] = { x, pos } end
    for pos = 1, 12 do calls[#calls + 1] = { x, 2 * pos } end     -- one side of the branch: hits
    same_as_eager(step, body, calls)
    assert.is_true(step:stats().keyed.hits >= 10, "hits " .. step:stats().keyed.hits)
  end)

  it("case 1: a comparison that always answers the same (a range check) keeps the path keyed", function()
    local runs = 0
    local step = gt.tree(function(x, pos)
      runs = runs + 1
      if pos < 0 or pos >= 64 then error("position out of range") end
      local y = gt.tensor(x.shape)
      K.addf(1, 32, y, x, pos, x.numel)
      return y
    end, { key = function() return 1 end, patch = { 2 } })
    local x = gt.zeros { 4 }
    for pos = 1, 20 do assert.are.equal(pos, step(x, pos):tolist()[1]) end
    assert.are.equal(5, runs)
    assert.has_error(function() step(x, 70) end, "position out of range")   -- the guard fails: the body runs, raising
    assert.are.equal(21, step(x, 21):tolist()[1])
  end)

  it("case 1: a use the trace cannot follow (tostring) refuses the path with one warning naming the argument and line", function()
    local warned = quiet(function()
      local names = {}
      local step = gt.tree(function(x, pos)
        names[tostring(pos)] = true
        local y = gt.tensor(x.shape)
        K.addf(1, 32, y, x, pos, x.numel)
        return y
      end, { key = function() return 1 end, patch = { 2 } })
      for pos = 1, 8 do assert.are.equal(pos, step(gt.zeros { 4 }, pos):tolist()[1]) end
      for pos = 1, 8 do assert.is_true(names[tostring(pos)]) end
      assert.are.equal(0, step:stats().keyed.hits)
    end)
    assert.are.equal(1, #warned)
    assert.matches("argument #2 %(a `patch` number%) is turned into a string at keyed_sound_spec.lua:%d+", warned[1])
  end)

  it("case 1: a use that raises on a traced number (a for limit) runs the call again with plain numbers", function()
    local sums = {}
    local warned = quiet(function()
      local step = gt.tree(function(x, pos)
        local s = 0
        for i = 1, pos do s = s + i end
        sums[#sums + 1] = s
        local y = gt.tensor(x.shape)
        K.addf(1, 32, y, x, s, x.numel)
        return y
      end, { key = function() return 1 end, patch = { 2 } })
      for pos = 1, 8 do assert.are.equal(pos * (pos + 1) / 2, step(gt.zeros { 4 }, pos):tolist()[1]) end
    end)
    assert.are.equal(1, #warned)
    assert.matches("cannot take a traced `patch` number", warned[1])
    assert.are.equal(8, #sums)                    -- (the traced try raised at the for, before it)
  end)

  it("case 2: two patch numbers equal on the memoizing calls are traced apart", function()
    local function body(x, s, u)
      local y = gt.tensor(x.shape)
      K.axpb(1, 32, y, x, s, u, x.numel)
      return y
    end
    local step = gt.tree(body, { key = function() return 1 end, patch = { 2, 3 } })
    local x = gt.full({ 4 }, 1)
    same_as_eager(step, body, { { x, 2, 2 }, { x, 2, 2 }, { x, 2, 2 }, { x, 3, 7 }, { x, 7, 3 }, { x, 5, 5 }, { x, 1, 9 } })
    assert.is_true(step:stats().keyed.hits >= 3)
  end)

  it("case 3: a patch number into an int or unsigned parameter is checked as a launch checks it", function()
    for _, kern in ipairs { "seti", "setu" } do
      local function body(x, v)
        local y = gt.tensor(x.shape)
        K[kern](1, 32, y, v, x.numel)
        return y
      end
      local step = gt.tree(body, { key = function() return 1 end, patch = { 2 } })
      local x = gt.zeros { 4 }
      same_as_eager(step, body, { { x, 1 }, { x, 2 }, { x, 3 }, { x, 4 }, { x, 5.5 }, { x, 2 ^ 31 }, { x, -1 },
                                  { x, 0 / 0 }, { x, 2 ^ 32 }, { x, 7 }, { x, 1e300 }, { x, 8 } })
      assert.is_true(step:stats().keyed.hits >= 3)
    end
  end)

  local function divide(x, d)
    local y = gt.tensor(x.shape)
    K.divf(1, 32, y, x, d, x.numel)
    return y
  end

  it("case 4: -0.0 and 0.0 are two keys (numbers key by their bits)", function()
    local body = divide
    local step = gt.tree(body, { key = function(_, d) return d end })
    local x = gt.full({ 4 }, 1)
    same_as_eager(step, body, { { x, 0.0 }, { x, 0.0 }, { x, 0.0 }, { x, 0.0 }, { x, -0.0 }, { x, -0.0 }, { x, 0.0 }, { x, -0.0 } })
    local nan1, nan2 = 0 / 0, -(0 / 0)
    local keyed = gt.tree(function(x, k) return ops.add(x, 1) end, { key = function(_, k) return k end })
    for _ = 1, 4 do keyed(x, nan1); keyed(x, nan2) end   -- (NaNs key too)
  end)

  it("case 4: -0.0 as a patch number reaches the kernel with its sign", function()
    local body = divide
    local step = gt.tree(body, { key = function() return 1 end, patch = { 2 } })
    local x = gt.full({ 4 }, 1)
    same_as_eager(step, body, { { x, 1 }, { x, 2 }, { x, 3 }, { x, -0.0 }, { x, 0.0 }, { x, -0.0 } })
  end)

  it("case 5: a captured tensor that is not static refuses the path: replaced and collected, results stay eager's", function()
    local warned = quiet(function()
      local B = gt.full({ 4 }, 1)
      local step = gt.tree(function(x) return ops.add(x, B) end, { key = function() return 1 end })
      local x = gt.full({ 4 }, 1)
      for _ = 1, 4 do assert.are.equal(2, step(x):tolist()[1]) end
      B = gt.full({ 4 }, 100)
      collectgarbage(); collectgarbage()
      local junk = gt.full({ 4 }, 50)
      for _ = 1, 3 do assert.are.equal(101, step(x):tolist()[1]) end
      B = gt.full({ 4 }, 1)
      assert.are.equal(2, step(x):tolist()[1])
      assert.are.equal(0, step:stats().keyed.hits)
      local _ = junk
    end)
    assert.are.equal(1, #warned)
    assert.matches("not an argument of the call, not made in it and not static", warned[1])
  end)

  it("case 5: another tree's output captured and overwritten by its next call raises as eager code", function()
    quiet(function()
      local x = gt.full({ 4 }, 1)
      local other = gt.tree(function(a) return ops.mul(a, 2) end)
      local h = other(x)
      local step = gt.tree(function(a) return ops.add(a, h) end, { key = function() return 1 end })
      for _ = 1, 4 do assert.are.equal(3, step(x):tolist()[1]) end
      other(x)                                        -- h is stale now
      assert.has_error(function() step(x) end)
      assert.has_error(function() ops.add(x, h) end)  -- (eager raises too)
    end)
  end)

  it("case 6: copy_inputs with a static weight argument, outputs fed back under another key: eager results", function()
    local W1 = gt.full({ 4, 4 }, 0.5):static()
    local W2 = gt.full({ 4, 4 }, 0.25):static()
    local function body(x, W, k) local h = ops.linear(x, W); if k == 2 then h = ops.add(h, 1) end; return h end
    local step = gt.tree(body, { key = function(_, _, k) return k end, copy_inputs = true })
    local ex, tr = gt.full({ 2, 4 }, 1), gt.full({ 2, 4 }, 1)
    for i = 1, 16 do
      local W, k = (i % 3 == 0) and W2 or W1, (i % 2) + 1
      local e = body(ex, W, k)
      local t = step(tr, W, k)
      assert.tensor_near(e:tolist(), t, 1e-6)
      ex, tr = e, t
    end
  end)

  it("case 7: verify does not blame the key for a path the runtime keyed anew (a static weight swapped and back)", function()
    local W1 = gt.full({ 4, 4 }, 0.5):static()
    local W2 = gt.full({ 4, 4 }, 0.25):static()
    local step = gt.tree(function(x, W) return ops.linear(x, W) end, { key = function() return 1 end, verify = 1 })
    local x = gt.full({ 2, 4 }, 1)
    for _, W in ipairs { W1, W1, W1, W1, W2, W2, W2, W2, W1, W1, W1, W1, W2, W2, W1, W1 } do
      assert.tensor_near(ops.linear(x, W):tolist(), step(x, W), 1e-6)
    end
  end)

  it("case 7: verify does not blame the key when two rows of one buffer, then one row twice, are passed", function()
    local buf = gt.from { { 1, 2 }, { 3, 4 } }
    local step = gt.tree(function(a, b) return ops.add(a, b) end, { key = function() return 1 end, verify = 1 })
    for i = 1, 8 do
      local a, b = buf:narrow(1, 1, 1), (i % 3 == 0) and buf:narrow(1, 1, 1) or buf:narrow(1, 2, 1)
      assert.tensor_near(ops.add(a, b):tolist(), step(a, b), 1e-6)
    end
  end)

  it("case 7: verify still catches a key that does not decide the path", function()
    local route = 1
    local step = gt.tree(function(x) if route == 1 then return ops.relu(x) end; return ops.tanh(x) end,
      { key = function() return 1 end, verify = 1 })
    local x = gt.full({ 4 }, -1)
    for _ = 1, 4 do step(x) end
    route = 2
    local ok, err = pcall(step, x)
    assert.is_false(ok)
    assert.matches("took another path than the memoized one", err)
  end)

  it("case 13: freeing a static buffer the path does not read costs it no hit", function()
    local W = gt.full({ 4, 4 }, 0.5):static()
    local runs = 0
    local step = gt.tree(function(x) runs = runs + 1; return ops.linear(x, W) end, { key = function() return 1 end })
    local x = gt.full({ 2, 4 }, 1)
    for _ = 1, 4 do step(x) end
    local before = runs
    for i = 1, 10 do
      local junk = gt.full({ 8 }, i):static()
      junk = nil
      collectgarbage(); collectgarbage()              -- (its buffer is freed with its last handle)
      assert.tensor_near({ { 2, 2, 2, 2 }, { 2, 2, 2, 2 } }, step(x))
      local _ = junk
    end
    assert.are.equal(before, runs)
  end)

  it("case 13: freeing a static buffer the path reads runs the body (a weight swapped and collected)", function()
    local W = gt.full({ 2, 2 }, 1):static()
    local runs = 0
    local step = gt.tree(function(x) runs = runs + 1; return ops.linear(x, W) end, { key = function() return 1 end })
    local x = gt.ones { 1, 2 }
    for _ = 1, 4 do assert.tensor_near({ { 2, 2 } }, step(x)) end
    local before = runs
    W = gt.full({ 2, 2 }, 3):static()
    collectgarbage(); collectgarbage()
    assert.tensor_near({ { 6, 6 } }, step(x))
    assert.are.equal(before + 1, runs)
  end)

  it("a captured tensor that is also passed in is not taken for the argument: the key is refused, every result eager's", function()
    local U = gt.ones { 4 }
    local V = gt.full({ 4 }, 10)
    local warned = quiet(function()
      local step = gt.tree(function(x, p)
        local y = gt.tensor { 4 }
        K.addf(1, 32, y, x, p, 4)
        local z = gt.tensor { 4 }
        K.addf(1, 32, z, U, 0, 4)                     -- (U captured: the call's argument on the first calls)
        return ops.add(y, z)
      end, { key = function() return 1 end, patch = { 2 } })
      for i = 1, 8 do
        local x = i <= 4 and U or V
        assert.are.equal(x:tolist()[1] + i + 1, step(x, i):tolist()[1], "call " .. i)
      end
    end)
    assert.is_true(#warned >= 1)
    assert.matches("captured tensor", warned[1])
  end)

  it("copy_inputs: a tensor passed in and also captured is the copy the body works on, in plain and keyed trees", function()
    for _, opts in ipairs { { copy_inputs = true }, { copy_inputs = true, key = function() return 1 end, patch = { 2 } } } do
      local U = gt.ones { 4 }
      local function body(x, p)
        K.addf(1, 32, x, x, p, 4)                        -- (a write into the argument)
        local y = gt.tensor { 4 }
        K.addf(1, 32, y, U, 0, 4)                        -- (read through the captured handle: sees it)
        return y
      end
      local step = gt.tree(body, opts)
      local want = 1
      quiet(function()
        for i = 1, 8 do
          local x = i <= 5 and U or gt.full({ 4 }, 10)
          local before = x:tolist()[1]
          local got = step(x, i):tolist()[1]
          local w = (i <= 5 and before + i) or want
          assert.are.equal(w, got, "call " .. i)
          assert.are.equal(before + i, x:tolist()[1], "the argument after call " .. i)
          if i <= 5 then want = U:tolist()[1] end
        end
      end)
    end
  end)

  it("copy_inputs without patch numbers: a captured tensor also passed in refuses the key, every result eager's", function()
    local U = gt.ones { 4 }
    local V = gt.full({ 4 }, 10)
    local warned = quiet(function()
      local step = gt.tree(function(x) return ops.add(x, U) end, { copy_inputs = true, key = function() return 1 end })
      for i = 1, 8 do
        local x = i <= 4 and U or V
        assert.are.equal(x:tolist()[1] + 1, step(x):tolist()[1], "call " .. i)
      end
    end)
    assert.is_true(#warned >= 1)
    assert.matches("a captured tensor", warned[1], 1, true)
  end)
end)
