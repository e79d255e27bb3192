-- errors_spec.lua - every error raised by gt.ops, kernels and tensors names the
-- user's file:line (gt._where in init.lua), also through a tail call.
local gt = require "gt"
local ops = gt.ops

-- The error of fn (which must fail) and the line it was called on.
local function err_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

local function here() return debug.getinfo(2, "l").currentline end

describe("errors at the user's line", function()
  local W, b = gt.randn({ 8, 4 }, { seed = 1 }):static(), gt.zeros { 4 }:static()

  it("names the line that called a gt.ops function with a bad shape", function()
    local line, err = here(), err_of(function() return (ops.linear(gt.zeros { 2, 3 }, W, b)) end)
    assert.matches("^spec/errors_spec%.lua:" .. line .. ": gt%.ops%.linear: ", err)
  end)

  it("names the user's line, not lua/gt/, for a tensor error raised inside an op", function()
    local step = gt.tree(function(x) return ops.relu(x) end, { name = "stale_src" })
    local x = gt.randn { 2, 8 }
    local y = step(x)
    step(x)                                 -- y is overwritten now
    local line, err = here(), err_of(function() local z = ops.add(y, 1) return z end)
    assert.matches("^spec/errors_spec%.lua:" .. line .. ": tensor f32 2x8 returned by tree 'stale_src'", err)
    assert.falsy(err:find("lua/gt/", 1, true), err)
  end)

  it("names the nearest caller through a tail call, and says so", function()
    local function head(h) return ops.linear(h, W, b) end      -- a tail call: head's line is gone
    local line, err = here(), err_of(function() local y = head(gt.zeros { 2, 3 }) return y end)
    assert.matches("^spec/errors_spec%.lua:" .. line .. ": gt%.ops%.linear: ", err)
    assert.truthy(err:find("tail call", 1, true), err)
  end)

  it("through a tail call in a tree's function, names the tree call and the tree", function()
    local step = gt.tree(function(x)
      local h = ops.relu(x)
      return ops.linear(h, W, b)            -- the README's pattern
    end, { name = "tail_step" })
    local line, err = here(), err_of(function() local y = step(gt.zeros { 2, 3 }) return y end)
    assert.matches("^spec/errors_spec%.lua:" .. line .. ": gt%.ops%.linear: ", err)
    assert.truthy(err:find("tree 'tail_step' (spec/errors_spec.lua:", 1, true), err)
  end)

  it("names the line of a tree call whose input cannot be staged, plain or keyed; the tree works after", function()
    for _, opts in ipairs({ { copy_inputs = true }, { copy_inputs = true, key = function() return 1 end } }) do
      local step = gt.tree(function(x) return ops.relu(x) end, opts)
      local x = gt.randn({ 4, 4 }, { seed = 2 })
      for _ = 1, 4 do step(x) end                 -- (a keyed call's path is known by now)
      local z = gt.ones { 4, 4 }
      z:free()
      local line, err = here(), err_of(function() local y = step(z) return y end)
      assert.matches("^spec/errors_spec%.lua:" .. line .. ": tensor f32 4x4 was released by :free%(%) at", err)
      assert.are.same(gt.ops.relu(x):tolist(), step(x):tolist())
    end
  end)

  it("names the user's line for tensor methods", function()
    local line, err = here(), err_of(function() local v = gt.zeros { 2 }:view { 3 } return v end)
    assert.matches("^spec/errors_spec%.lua:" .. line .. ": view: ", err)
  end)

  describe("kernels", function()
    local K = gt.compile([[__global__ void scale(float *y, const float *x, float a, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i]; }]], { name = "scale.cu" })
    local x, y = gt.ones { 4 }, gt.zeros { 4 }

    it("a misspelt kernel name lists the kernels there are", function()
      local line, err = here(), err_of(function() K.scal(1, 4, y, x, 2, 4) end)
      assert.equal("spec/errors_spec.lua:" .. line .. ": no kernel 'scal' in scale.cu; its kernels: scale", err)
    end)

    it("a grid of non-integers says which dimension is wrong", function()
      local line, err = here(), err_of(function() K.scale({ 2.5, 1 }, 4, y, x, 2, 4) end)
      assert.equal("spec/errors_spec.lua:" .. line .. ": kernel 'scale': grid must be a positive integer or {x, y, z} "
        .. "of them (each in 1..2147483647): grid[1] is 2.5, not an integer", err)
      assert.falsy(err:find("0x", 1, true), err)
    end)

    it("a bad argument names the parameter and the user's line", function()
      local line, err = here(), err_of(function() K.scale(1, 4, y, x, "two", 4) end)
      assert.matches("^spec/errors_spec%.lua:" .. line .. ": kernel 'scale': argument #3 %('a', float%) expects a number", err)
    end)

    it("a stale tensor passed to a kernel names the user's line", function()
      local step = gt.tree(function(v) return ops.relu(v) end, { name = "stale_k" })
      local old = step(x)
      step(x)
      local line, err = here(), err_of(function() K.scale(1, 4, y, old, 2, 4) end)
      assert.matches("^spec/errors_spec%.lua:" .. line .. ": tensor f32 4 returned by tree 'stale_k'", err)
    end)
  end)
end)
