-- gt.cond's results (as torch.cond returns its branches'), gt.loop's bodies
-- returning nothing, and errors raised in a body that a pcall inside the
-- tree's body catches (the call goes on as eager code does).
local gt = require "gt"
require "gt.busted"
local S = require "spec.support"
local ops = gt.ops

local K = gt.compile([[
__global__ void setv(int *p, int v) { if (threadIdx.x == 0) p[0] = v; }
__global__ void halve(float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] *= 0.5f;
}
__global__ void bump(float *x) { if (threadIdx.x == 0) x[0] += 1.0f; }
__global__ void dec(int *p) { if (threadIdx.x == 0) p[0] -= 1; }
]], { name = "cond_values_spec.cu" })

local function flag(v)
  local p = gt.tensor({ 1 }, "i32")
  K.setv(1, 1, p, v)
  return p
end

-- The same step eagerly and through a tree, over calls that warm up, record
-- and replay, each way of p in turn: the results' values must agree.
local function same_as_eager(body, calls)
  local step = gt.tree(body)
  for i = 1, calls or 8 do
    local v = i % 3 == 0 and 0 or 1
    local want = { body(gt.from { 4, 8, -2 }, v) }
    local got = { step(gt.from { 4, 8, -2 }, v) }
    assert.are.equal(#want, #got)
    for k = 1, #want do
      if gt.is_tensor(want[k]) then assert.are.same(want[k]:tolist(), got[k]:tolist())
      else assert.are.same(want[k], got[k]) end
    end
  end
  return step
end

describe("gt.cond returns its bodies' results", function()
  it("the taken body's tensors, outside a tree and in a tree (warmup, record, replay), whichever way p goes", function()
    local step = same_as_eager(function(x, v)
      local y, z = gt.cond(flag(v), function() return ops.mul(x, 2), ops.relu(x) end,
                                    function() return ops.add(x, 1), ops.mul(x, -1) end)
      return ops.add(y, z)
    end, 9)
    assert.nodes(step, 1)                              -- one conditional node: no cut, no host branch
    assert.replayed(step, 7)
    local x = gt.from { 1, 2 }
    local y = gt.cond(flag(1), function() return ops.mul(x, 3) end, function() return gt.zeros { 2 } end)
    assert.are.same({ 3, 6 }, y:tolist())
  end)

  it("gives new tensors: a body that returns an input returns a copy of it, in every mode", function()
    local function body(x, v)
      local y = gt.cond(flag(v), function() return x end, function() return ops.mul(x, 2) end)
      K.halve(1, 32, y, y.numel)                     -- a write into the result does not reach x
      return y, x
    end
    same_as_eager(body, 6)
    local x = gt.from { 2, 4 }
    local y = body(x, 1)
    assert.are_not.equal(x, y)
    assert.are.same({ 2, 4 }, x:tolist())
    assert.are.same({ 1, 2 }, y:tolist())
  end)

  it("nests: a cond returning values inside a body of a cond returning values", function()
    same_as_eager(function(x, v)
      return gt.cond(flag(v), function()
        local inner = gt.cond(flag(1 - v), function() return ops.mul(x, 10) end, function() return ops.mul(x, 3) end)
        return ops.add(inner, 1)
      end, function() return ops.mul(x, 0) end)
    end, 7)
  end)

  it("in a keyed tree too: a hit returns the values the device's way wrote", function()
    local function body(x, p)
      return gt.cond(p, function() return ops.mul(x, 2) end, function() return ops.add(x, 100) end)
    end
    local step = gt.tree(body, { key = function() return 1 end })
    local x = gt.from { 1, 2 }
    local p1, p0 = gt.from({ 1 }, "i32"), gt.from({ 0 }, "i32")
    for i = 1, 8 do
      local p = i % 2 == 0 and p0 or p1
      assert.are.same(body(x, p):tolist(), step(x, p):tolist())
    end
    assert.truthy(step:stats().keyed.hits >= 4)
  end)

  it("raises when the bodies' results differ in number, shape or dtype, naming them; the tree goes on", function()
    local cases = {
      { function(x) return x, x end, function(x) return x end, "then_fn returns 2 tensors and else_fn 1" },
      { function(x) return x end, function() end, "then_fn returns 1 tensor and else_fn 0" },
      { function() end, function(x) return x end, "then_fn returns 0 tensors and else_fn 1" },
      { function(x) return x end, function() return gt.zeros { 2 } end, "result 1 is a f32 3 tensor from then_fn but a f32 2 tensor from else_fn" },
      { function(x) return x end, function() return gt.zeros({ 3 }, "i32") end, "result 1 is a f32 3 tensor from then_fn but a i32 3 tensor from else_fn" },
    }
    for _, c in ipairs(cases) do
      local step = gt.tree(function(x, v)
        return gt.cond(flag(v), function() return c[1](x) end, function() return c[2](x) end)
      end)
      for _ = 1, 3 do
        local ok, err = pcall(step, gt.from { 1, 2, 3 }, 1)
        assert.is_false(ok)
        assert.truthy(tostring(err):find(c[3], 1, true), tostring(err))
        assert.truthy(tostring(err):find("cond_values_spec.lua:%d+: gt.cond"), tostring(err))
      end
    end
    local fine = gt.tree(function(x, v) return gt.cond(flag(v), function() return x end, function() return ops.mul(x, 2) end) end)
    for _ = 1, 3 do assert.are.same({ 2, 4 }, fine(gt.from { 1, 2 }, 0):tolist()) end
  end)

  it("raises for values returned by a cond with one body (p false runs none), outside a tree and in one", function()
    local function body(x, v) return gt.cond(flag(v), function() return ops.mul(x, 2) end) end
    local ok, err = pcall(body, gt.from { 1 }, 1)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("then_fn returns 1 value but there is no else_fn", 1, true), tostring(err))
    local step = gt.tree(body)
    for v = 0, 1 do
      for _ = 1, 3 do
        ok, err = pcall(step, gt.from { 1 }, v)     -- (in a tree both bodies' Lua runs, whatever p is)
        assert.is_false(ok)
        assert.truthy(tostring(err):find("there is no else_fn", 1, true), tostring(err))
      end
    end
    assert.are.same({ 1, 2 }, gt.tree(function(x, v)       -- returning nothing is as before
      local y = x:clone()
      gt.cond(flag(v), function() K.halve(1, 32, y, y.numel) end)
      return y
    end)(gt.from { 2, 4 }, 1):tolist())
  end)

  it("raises for a result that is not a tensor, or a non-contiguous view", function()
    for _, mode in ipairs { "eager", "tree" } do
      for _, c in ipairs {
        { function() return 3 end, "then_fn's result 1 is a number" },
        { function(x) return x, {} end, "then_fn's result 2 is a table" },
        { function(x) return x:view { 2, 2 }:narrow(2, 1, 1) end, "then_fn's result 1 is a non-contiguous view" },
      } do
        local function body(x)
          return gt.cond(flag(1), function() return c[1](x) end, function() return c[1](x) end)
        end
        local f = mode == "tree" and gt.tree(body) or body
        local ok, err = pcall(f, gt.from { 1, 2, 3, 4 })
        assert.is_false(ok)
        assert.truthy(tostring(err):find(c[2], 1, true), mode .. ": " .. tostring(err))
      end
    end
  end)
end)

describe("gt.loop's body returns nothing", function()
  it("raises when it returns values, outside a tree and in one", function()
    local function body(x)
      local p = flag(2)
      gt.loop(p, function() K.dec(1, 1, p); return ops.mul(x, 2) end)
      return x
    end
    local ok, err = pcall(body, gt.from { 1 })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("gt.loop: body_fn returns 1 value; a loop's body returns nothing", 1, true), tostring(err))
    local step = gt.tree(body)
    for _ = 1, 3 do
      ok, err = pcall(step, gt.from { 1 })
      assert.is_false(ok)
      assert.truthy(tostring(err):find("a loop's body returns nothing", 1, true), tostring(err))
    end
  end)
end)

describe("an error in a gt.cond or gt.loop body caught by a pcall in the tree's body", function()
  -- Each step catches the error and launches more after it: the tree gives
  -- what eager code gives on every call, and the tree replays.
  it("in a then body: the launches before the error run when p is true, as eager code ran them", function()
    local step = same_as_eager(function(x, v)
      local ok = pcall(gt.cond, flag(v), function() K.halve(1, 32, x, x.numel); error("in the body") end)
      assert(not ok or v == 0)
      K.bump(1, 1, x)
      return x
    end, 9)
    assert.replayed(step, 7)
  end)

  it("in an else body, in an inner cond caught inside the outer body, and in a body's host sync", function()
    same_as_eager(function(x, v)
      pcall(gt.cond, flag(v), function() K.bump(1, 1, x) end, function() K.halve(1, 32, x, x.numel); error("else") end)
      gt.cond(flag(1), function()
        pcall(gt.cond, flag(v), function() K.bump(1, 1, x); error("inner") end)
        K.halve(1, 32, x, x.numel)
      end)
      pcall(gt.cond, flag(v), function() K.bump(1, 1, x); x:item() end)   -- (a host sync in a body raises in every mode)
      K.bump(1, 1, x)
      return x
    end, 9)
  end)

  it("in a loop's body: the loop stops at the pass that raised, as eager code's does", function()
    same_as_eager(function(x, v)
      local p = flag(v * 3)
      pcall(gt.loop, p, function() K.halve(1, 32, x, x.numel); K.dec(1, 1, p); error("pass") end)
      local q = flag(v)                               -- a loop that never writes p raises after its first pass
      pcall(gt.loop, q, function() K.bump(1, 1, x) end)
      K.bump(1, 1, x)
      return x
    end, 9)
  end)

  it("in a cond's result check: one body returning values, caught, and the call goes on", function()
    same_as_eager(function(x, v)
      pcall(gt.cond, flag(v), function() K.halve(1, 32, x, x.numel); return x end)
      K.bump(1, 1, x)
      return x
    end, 6)
  end)
end)

describe("gt.cond's results without conditional nodes (GTLUA_NO_COND=1)", function()
  it("are the taken body's, branched on the host in a tree", function()
    local script = os.tmpname() .. ".lua"
    S.spit(script, [[
local K = gt.compile("__global__ void setv(int *p, int v) { if (threadIdx.x == 0) p[0] = v; }")
local step = gt.tree(function(v)
  local p = gt.tensor({1}, "i32"); K.setv(1, 1, p, v)
  return gt.cond(p, function() return gt.full({1}, 7) end, function() return gt.full({1}, 9) end)
end)
local out = {}
for i = 1, 6 do out[#out + 1] = step(i % 2):item() end
print(table.concat(out, " "))
]])
    local status, out, err = S.gtlua(S.shq(script), { env = "GTLUA_NO_COND=1" })
    os.remove(script)
    assert.equal(0, status, err)
    assert.truthy(out:find("7 9 7 9 7 9", 1, true), out)
  end)
end)
