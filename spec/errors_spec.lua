-- errors_spec.lua - every error raised by gt.ops, kernels and tensors names the
-- user's file:line (I.where in init.lua), also through a tail call.
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

-- ---------------------------------------------------------------------------
-- Every argument error says what was expected and what was given, names the
-- caller's line in this file (not lua/gt/*.lua), and leaves gt usable.
describe("argument errors name the caller", function()
  -- err_of(fn) raised at this file's line `line`, and contains each of ...
  local function at_line(line, err, ...)
    assert.matches("^spec/errors_spec%.lua:" .. line .. ": ", err)
    assert.falsy(err:find("lua/gt/", 1, true), err)
    assert.falsy(err:find("bad argument #", 1, true), err)
    assert.falsy(err:find("attempt to ", 1, true), err)
    for _, s in ipairs { ... } do assert.truthy(err:find(s, 1, true), "'" .. s .. "' in: " .. err) end
  end

  local function a_tree()
    local t = gt.tree(function(x) return ops.relu(x) end, { name = "errs" })
    for _ = 1, 3 do t(gt.ones { 2 }) end
    return t
  end

  it("tree:dot, tree:json and tree:report refuse a path that is not a string", function()
    local t = a_tree()
    local line, err = here(), err_of(function() local r = t:dot({}) return r end)
    at_line(line, err, "tree:dot([path]): path must be a file name (a string), or nil for the text only, got a table")
    line, err = here(), err_of(function() local r = t:json(true) return r end)
    at_line(line, err, "tree:json([path]): path must be a file name (a string)", "got true")
    line, err = here(), err_of(function() local r = t:report({}) return r end)
    at_line(line, err, "tree:report([path]): path must be a file name (a string)", "got a table")
    line, err = here(), err_of(function() local r = t:dot(5) return r end)
    at_line(line, err, "tree:dot([path]): path must be a file name", "got 5")
    line, err = here(), err_of(function() local r = gt.report.json(t, 5) return r end)
    at_line(line, err, "gt.report.json(tree [, path]): path must be a file name", "got 5")
    assert.is_nil(io.open("5", "rb"), "no file named 5 was written")
    assert.truthy(t:dot():find("^digraph"))
    assert.truthy(t:json():find("gtlua.tree/1", 1, true))
    assert.truthy(t:report():find("<html", 1, true))
  end)

  it("tree:dot, tree:json and tree:report to a path that cannot be written name it, the reason and the caller", function()
    local t = a_tree()
    for _, m in ipairs { "dot", "json", "report" } do
      local path = "/nonexistent_dir_errs/x." .. m
      local line, err = here(), err_of(function() local r = t[m](t, path) return r end)
      at_line(line, err, "tree:" .. m .. "([path]): cannot write " .. path, "No such file or directory")
    end
    assert.truthy(t:dot():find("^digraph"))
  end)

  it("tree:advise with options that are not a table, or an unknown option", function()
    local t = a_tree()
    local line, err = here(), err_of(function() local r = t:advise(5) return r end)
    at_line(line, err, "tree:advise([opts]): options must be a table such as {measure = true}, or nil, got 5")
    line, err = here(), err_of(function() local r = t:advise({ mesure = true }) return r end)
    at_line(line, err, "tree:advise([opts]): unknown option 'mesure'")
    line, err = here(), err_of(function() local r = t:advise({ measure = "yes" }) return r end)
    at_line(line, err, "option measure must be true or false, got \"yes\"")
    assert.is_table(t:advise().findings)
    assert.is_table(t:advise({ measure = false }).findings)
  end)

  it("gt.compile, gt.load and gt.randn with options that are not a table", function()
    local src = "__global__ void k23(float *y) { y[0] = 1; }"
    local line, err = here(), err_of(function() local K = gt.compile(src, 5) return K end)
    at_line(line, err, "gt.compile(src [, opts]): options must be a table (or nil), got 5")
    line, err = here(), err_of(function() local K = gt.compile(src, { graf = false }) return K end)
    at_line(line, err, "gt.compile(src [, opts]): unknown option 'graf'")
    line, err = here(), err_of(function() local K = gt.compile(src, { name = 7 }) return K end)
    at_line(line, err, "option name must be a string, got 7")
    line, err = here(), err_of(function() local K = gt.load("kernels/elementwise.cu", "fast") return K end)
    at_line(line, err, "gt.load(path [, opts]): options must be a table (or nil), got \"fast\"")
    line, err = here(), err_of(function() local x = gt.randn({ 2 }, 5) return x end)
    at_line(line, err, "gt.randn(shape [, {seed=, dtype=, scale=}]): options must be a table (or nil), got 5")
    line, err = here(), err_of(function() local x = gt.randn({ 2 }, { seed = "a" }) return x end)
    at_line(line, err, "option seed must be a number, got \"a\"")
    line, err = here(), err_of(function() local x = gt.zeros({ 2 }, {}) return x end)
    at_line(line, err, "dtype must be a string (f32, f16, bf16, i32, i64 or u8), got a table")
    assert.is_truthy(gt.compile(src, { name = "k23.cu", graph = true }).k23)
    assert.are.equal(2, gt.randn({ 2 }, { seed = 3 }).numel)
    assert.are.equal(2, gt.randn({ 2 }).numel)
  end)

  it("tree:floor with iters that is not a whole number >= 1", function()
    local t = a_tree()
    local line, err = here(), err_of(function() local c = t:floor("x") return c end)
    at_line(line, err, "tree:floor(iters [, sync_each [, patch [, calls]]]): iters must be a whole number of steps, " ..
      "1 or more, got \"x\"")
    line, err = here(), err_of(function() local c = t:floor(0) return c end)
    at_line(line, err, "iters must be a whole number of steps, 1 or more, got 0")
    line, err = here(), err_of(function() local c = t:floor(3, "no") return c end)
    at_line(line, err, "sync_each must be true or false, got \"no\"")
    local cpu, step = t:floor(3)
    assert.is_true(cpu >= 0 and step >= 0)
  end)

  it("gt.buckets.pow2 and gt.buckets.linear with a size that is not a number", function()
    local line, err = here(), err_of(function() local b = gt.buckets.pow2("a") return b end)
    at_line(line, err, "gt.buckets.pow2(max): max must be a number >= 1 (the largest bucket), got \"a\"")
    line, err = here(), err_of(function() local b = gt.buckets.pow2(0) return b end)
    at_line(line, err, "max must be a number >= 1", "got 0")
    line, err = here(), err_of(function() local b = gt.buckets.linear(4, 2) return b end)
    at_line(line, err, "gt.buckets.linear(step, max): max must be a number >= step (4), got 2")
    assert.are.same({ 1, 2, 4, 8 }, gt.buckets.pow2(8))
    assert.are.same({ 4, 8 }, gt.buckets.linear(4, 8))
  end)

  it("gt.full without a value, and t:fill with one that is not a number", function()
    local line, err = here(), err_of(function() local x = gt.full({ 2 }) return x end)
    at_line(line, err, "gt.full(shape, value [, dtype]): the fill value is missing: pass a number, got nil")
    assert.falsy(err:find("fill_f32", 1, true), err)
    line, err = here(), err_of(function() local x = gt.full({ 2 }, "1") return x end)
    at_line(line, err, "the fill value must be a number, got \"1\"")
    local x = gt.zeros { 2 }
    line, err = here(), err_of(function() x:fill({}) end)
    at_line(line, err, "t:fill(value): the fill value must be a number, got a table")
    assert.are.same({ 3, 3 }, gt.full({ 2 }, 3):tolist())
    assert.are.same({ 5, 5 }, x:fill(5):tolist())
  end)
end)
