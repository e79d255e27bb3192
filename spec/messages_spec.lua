-- messages_spec.lua - a newcomer's mistakes get a message that says what went wrong, where
-- (the user's file:line, once) and what to do: a pcall'd call, a source without a kernel, a
-- kernel called with a colon, a tensor for a number, arithmetic on tensors, a string size,
-- out of memory, nested trees, a tensor a one-body gt.cond may leave unwritten, a cpu fault.
local gt = require "gt"
local I = require "gt.internal"
local ops = gt.ops

local function here() return debug.getinfo(2, "l").currentline end
local function count(s, plain)
  local n, at = 0, 1
  while true do
    local i = s:find(plain, at, true)
    if not i then return n end
    n, at = n + 1, i + #plain
  end
end

describe("messages", function()
  it("a gt function called by pcall itself names the pcall's line, with no tail-call note", function()
    local line, ok, err = here(), pcall(gt.zeros, { -1 })
    assert.is_false(ok)
    assert.matches("^spec/messages_spec%.lua:" .. line .. ": bad shape: dimension 1 is %-1, not a size", err)
    assert.falsy(err:find("tail call", 1, true), err)
    -- a real tail call in a tree's function still says so
    local step = gt.tree(function(x) return ops.linear(x, x) end, { name = "tails" })
    local err2 = select(2, pcall(step, gt.zeros { 2, 3 }))
    assert.truthy(err2:find("reached by a tail call `return gt.ops.linear(...)` in the function of tree 'tails'", 1, true), err2)
  end)

  it("a source without a __global__ function: the line once, and what makes a kernel", function()
    local line, ok, err = here(), pcall(gt.compile, "__device__ float twice(float v) { return 2 * v; }")
    assert.is_false(ok)
    assert.matches("^spec/messages_spec%.lua:" .. line .. ": no __global__ function found: ", err)
    assert.are.equal(1, count(err, "messages_spec.lua:"), err)
    assert.truthy(err:find("mark the kernels __global__", 1, true), err)
  end)

  it("a kernel called with a colon says to use a dot", function()
    local K = gt.compile [[__global__ void scale(float *y, float a, int n) { int i = threadIdx.x; if (i < n) y[i] *= a; }]]
    local y = gt.ones { 4 }
    local line, ok, err = here(), pcall(function() K:scale(1, 4, y, 2, 4) end)
    assert.is_false(ok)
    assert.matches("^spec/messages_spec%.lua:" .. line .. ": kernel 'scale' was called with a colon %(K:scale%(%.%.%.%)%)", err)
    assert.truthy(err:find("call it with a dot, K.scale(grid, block, args...)", 1, true), err)
    assert.falsy(err:find("no kernel 'x'", 1, true), err)
    K.scale(1, 4, y, 2, 4)                                   -- (the dot works)
    assert.are.same({ 2, 2, 2, 2 }, y:tolist())
  end)

  it("a tensor passed for a number is shown as a tensor", function()
    local K = gt.compile [[__global__ void scale2(float *y, float a, int n) { int i = threadIdx.x; if (i < n) y[i] *= a; }]]
    local y = gt.ones { 4, 4 }
    local line, ok, err = here(), pcall(function() K.scale2(1, 16, y, y, 16) end)
    assert.is_false(ok)
    assert.matches("^spec/messages_spec%.lua:" .. line .. ": kernel 'scale2': argument #2 %('a', float%) expects a " ..
      "number, got a tensor 4x4 f32$", err)
    assert.are.equal("a tensor 4x4 f32", I.show(y))
    assert.are.equal("a scalar tensor i32", I.show(gt.zeros({}, "i32")))
  end)

  it("arithmetic on tensors names the gt.ops call that does it", function()
    local x = gt.ones { 4, 4 }
    for _, c in ipairs {
      { function() return x + x end, "x + y on a tensor 4x4 f32 and a tensor 4x4 f32", "gt.ops.add(x, y)" },
      { function() return x - 1 end, "x - y on a tensor 4x4 f32 and 1", "gt.ops.add(x, -y)" },
      { function() return 2 * x end, "x * y on 2 and a tensor 4x4 f32", "gt.ops.mul(x, y)" },
      { function() return -x end, "-x on a tensor 4x4 f32", "gt.ops.mul(x, -1)" },
      { function() return #x end, "#x on a tensor 4x4 f32", "x.numel" },
      { function() return x < x end, "x < y on", "t:item()" },
    } do
      local line, ok, err = here(), pcall(c[1])
      assert.is_false(ok)
      assert.matches("^spec/messages_spec%.lua:%d+: ", err)
      assert.truthy(err:find(c[2], 1, true), err)
      assert.truthy(err:find("gtlua tensors have no operators; write " .. c[3], 1, true), err)
      assert.falsy(err:find("attempt to", 1, true), err)
      assert.is_number(line)
    end
    assert.is_true(x == x)                                   -- (identity still compares)
  end)

  it("a string for a size is quoted, and the message says what a size is", function()
    local ok, err = pcall(gt.zeros, { "4" })
    assert.is_false(ok)
    assert.truthy(err:find('bad shape: dimension 1 is "4" (a string), not a size: each dimension is a whole number, ' ..
      "0 or more", 1, true), err)
  end)

  it("out of memory gives its sizes in units", function()
    local line, ok, err = here(), pcall(gt.tensor, { 2 ^ 40 })     -- 4 TiB of f32
    assert.is_false(ok)
    assert.matches("^spec/messages_spec%.lua:" .. line .. ": out of memory allocating 4%.0 TiB: [%d.]+ [KMGT]?i?B in use", err)
    assert.falsy(err:find("%d%d%d%d%d%d"), err)               -- no raw byte counts
  end)

  it("a tree called inside another says what to do instead", function()
    local inner = gt.tree(function(x) return ops.relu(x) end, { name = "inner" })
    local outer = gt.tree(function(x) return inner(x) end, { name = "outer" })
    local ok, err = pcall(outer, gt.ones { 2 })
    assert.is_false(ok)
    assert.truthy(err:find("tree calls cannot nest. In a call of 'outer', call the plain function that 'inner' wraps", 1, true), err)
    assert.truthy(err:find("or call 'inner' before or after 'outer'", 1, true), err)
  end)

  it("a tensor made in gt.cond's only body and read after it: no double negative, and what to do", function()
    local step = gt.tree(function(x)
      local y
      gt.cond(ops.sum(ops.sum(x)), function() y = ops.relu(x) end)
      return ops.add(y, 1)
    end)
    local ok, err = pcall(step, gt.ones { 1, 4 })
    assert.is_false(ok)
    assert.truthy(err:find("but the cond has no else body to write it: when the device takes the other way it holds " ..
      "nothing. Make the tensor before gt.cond and write into it in the body", 1, true), err)
    assert.falsy(err:find("no else body that does not", 1, true), err)
  end)

  it("a cpu kernel's fault names the thread that faulted", function()
    if gt.backend() ~= "cpu" then return pending("the cpu backend's fault report (a GPU fault ends the context)") end
    local F = gt.compile [[__global__ void far(float *y) { y[threadIdx.x * 100000000] = 1; }]]
    for _, block in ipairs { 2, 32 } do
      local ok, err = pcall(F.far, 1, block, gt.zeros { 32 })
      assert.is_false(ok)
      assert.truthy(err:find("in block (0, 0, 0) thread (1, 0, 0)", 1, true), err)
    end
  end)
end)
