-- ops_spec.lua: every gt.ops op against a plain-Lua reference on random inputs, and its argument errors.
local gt = require "gt"
local ops = gt.ops

-- -- Helpers ------------------------------------------------------------------

-- Flat Lua array of a tensor's values (row-major).
local function flat(t) return require("gt.busted").flat(t:tolist()) end

-- Relative error max|a - e| / (max|e| + 1e-6) of tensor t against a flat
-- table; fails naming the worst element.  gt.busted's assert.tensor_near
-- does the same when it is there.
local has_tensor_near = pcall(require, "gt.busted") and assert.tensor_near ~= nil
local function near(expected, t, tol, what)
  if has_tensor_near then return assert.tensor_near(expected, t, tol) end
  local got = flat(t)
  assert.are.equal(#expected, #got, (what or "tensor") .. ": element count")
  local maxdiff, maxref, worst = 0, 0, 1
  for i = 1, #expected do
    local d = math.abs(got[i] - expected[i])
    if d ~= d then d = math.huge end          -- NaN
    if d > maxdiff then maxdiff, worst = d, i end
    maxref = math.max(maxref, math.abs(expected[i]))
  end
  local rel = maxdiff / (maxref + 1e-6)
  assert(rel < tol, string.format("%s: relative error %.3g >= %g (element %d: got %.7g, expected %.7g)",
    what or "tensor", rel, tol, worst, got[worst] or 0 / 0, expected[worst] or 0 / 0))
end

local function equal_list(expected, t, what)
  local got = flat(t)
  assert.are.equal(#expected, #got, (what or "tensor") .. ": element count")
  for i = 1, #expected do
    assert(got[i] == expected[i], string.format("%s: element %d is %s, expected %s",
      what or "tensor", i, tostring(got[i]), tostring(expected[i])))
  end
end

local seed = 0
local function randn(shape, scale)
  seed = seed + 1
  local t = gt.randn(shape, { seed = seed })
  if scale then t = ops.mul(t, scale) end
  return t, flat(t)
end

-- The error message of f(...), which must fail.
local function error_of(f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error")
  return tostring(err)
end

local function map(a, f)
  local r = {}
  for i = 1, #a do r[i] = f(a[i], i) end
  return r
end

-- -- References ----------------------------------------------------------------

local function gelu(v) return 0.5 * v * (1 + math.tanh(0.7978845608028654 * (v + 0.044715 * v ^ 3))) end
local function sigmoid(v) return 1 / (1 + math.exp(-v)) end
local ACT = { relu = function(v) return math.max(v, 0) end, gelu = gelu, tanh = math.tanh }

local function ref_matmul(x, w, b, M, K, N, act)
  local y = {}
  for i = 0, M - 1 do
    for j = 0, N - 1 do
      local s = b and b[j + 1] or 0
      for k = 0, K - 1 do s = s + x[i * K + k + 1] * w[k * N + j + 1] end
      y[i * N + j + 1] = act and ACT[act](s) or s
    end
  end
  return y
end

-- f(row) -> list of outputs for each row of an M x N flat array.
local function per_row(x, M, N, f)
  local y = {}
  for i = 0, M - 1 do
    local row = {}
    for j = 1, N do row[j] = x[i * N + j] end
    for _, v in ipairs(f(row)) do y[#y + 1] = v end
  end
  return y
end

-- -- Elementwise -----------------------------------------------------------------

describe("gt.shape", function()
  it("checks a shape and gives it as a table, equal to a tensor's .shape", function()
    local s = gt.shape { 3, 5 }
    assert.are.same(s, gt.tensor({ 3, 5 }).shape)
    assert.are.same({ 3, 5 }, s)
    local t = gt.tensor(s, "i32")
    assert.are.same({ 3, 5 }, t.shape)
    assert.are.equal("i32", t.dtype)
    assert.are.same({ 7 }, gt.shape(7))
    assert.matches("bad shape: dimension 2 is %-1, not a size", select(2, pcall(gt.shape, { 2, -1 })))
  end)

  it("gives t.shape and gt.shape as new tables: writing one changes no tensor", function()
    local x = gt.zeros { 2, 3 }
    local s = x.shape
    s[1] = 5
    gt.shape { 2, 3 }[2] = 7
    local y = gt.ones { 2, 3 }
    assert.are.same({ 2, 3 }, x.shape)
    assert.are.same({ 2, 3 }, y.shape)
    assert.are.equal(2, #y:tolist())
    assert.are.equal(3, y:size(2))
    assert.are.equal(2, y:dim())
    assert.are_not.equal(x.shape, x.shape)
  end)
end)

describe("gt.ops elementwise", function()
  for _, shape in ipairs { { 1 }, { 7, 13 }, { 3, 1000 } } do
    local label = table.concat(shape, "x")

    it("add and mul match Lua on " .. label, function()
      local a, af = randn(shape)
      local b, bf = randn(shape)
      near(map(af, function(v, i) return v + bf[i] end), ops.add(a, b), 1e-6, "add")
      near(map(af, function(v, i) return v * bf[i] end), ops.mul(a, b), 1e-6, "mul")
    end)

    it("add and mul take a number on " .. label, function()
      local a, af = randn(shape)
      near(map(af, function(v) return v + 2.5 end), ops.add(a, 2.5), 1e-6, "add number")
      near(map(af, function(v) return v * -3 end), ops.mul(a, -3), 1e-6, "mul number")
      near(map(af, function(v) return v * 0.5 end), ops.mul(0.5, a), 1e-6, "number mul")
    end)

    it("add and mul broadcast a row vector on " .. label, function()
      local a, af = randn(shape)
      local n = shape[#shape]
      local b, bf = randn { n }
      near(map(af, function(v, i) return v + bf[(i - 1) % n + 1] end), ops.add(a, b), 1e-6, "add rows")
      near(map(af, function(v, i) return v * bf[(i - 1) % n + 1] end), ops.mul(a, b), 1e-6, "mul rows")
    end)

    it("activations match Lua on " .. label, function()
      local x, xf = randn(shape, 3)
      near(map(xf, ACT.relu), ops.relu(x), 1e-6, "relu")
      near(map(xf, gelu), ops.gelu(x), 1e-5, "gelu")
      near(map(xf, math.tanh), ops.tanh(x), 1e-5, "tanh")
      near(map(xf, sigmoid), ops.sigmoid(x), 1e-5, "sigmoid")
    end)

    it("axpby updates y in place on " .. label, function()
      local x, xf = randn(shape)
      local y, yf = randn(shape)
      local r = ops.axpby(2, x, -0.5, y)
      assert.are.equal(y, r)
      near(map(xf, function(v, i) return 2 * v - 0.5 * yf[i] end), y, 1e-6, "axpby")
    end)

    it("copy copies on " .. label, function()
      local x, xf = randn(shape)
      local y = gt.zeros(shape)
      assert.are.equal(y, ops.copy(y, x))
      equal_list(xf, y, "copy")
    end)
  end

  it("keeps the input's shape", function()
    local x = randn { 2, 3, 5 }
    assert.are.same({ 2, 3, 5 }, ops.relu(x).shape)
    assert.are.same({ 2, 3, 5 }, ops.add(x, x).shape)
    assert.are.equal("f32", ops.gelu(x).dtype)
  end)

  it("reads and writes views at an offset (narrow along the first dimension)", function()
    local x, xf = randn { 5, 7 }
    local y = gt.zeros { 5, 7 }
    local v = x:narrow(1, 2, 3)
    near(map({ unpack(xf, 8, 28) }, ACT.relu), ops.relu(v), 1e-6, "relu of a view")
    ops.copy(y:narrow(1, 4, 2), x:narrow(1, 1, 2))
    local expected = {}
    for i = 1, 35 do expected[i] = i > 21 and xf[i - 21] or 0 end
    equal_list(expected, y, "copy into a view")
  end)

  it("covers more elements than the largest grid (grid-stride loops)", function()
    local n = 4096 * 256 + 77
    local x = gt.full({ n }, 2)
    local y = ops.add(x, 1)
    local l = flat(ops.sum(y:view { 1, n }))
    assert.are.equal(3 * n, l[1])
  end)
end)

-- -- Matrix products -----------------------------------------------------------------

describe("gt.ops.linear", function()
  -- {M, K, N}: odd sizes, sizes below a tile, and the quickstart's
  for _, s in ipairs { { 1, 1, 1 }, { 5, 7, 3 }, { 17, 33, 19 }, { 8, 128, 256 }, { 33, 16, 16 } } do
    local M, K, N = s[1], s[2], s[3]
    local label = ("%dx%d @ %dx%d"):format(M, K, K, N)
    it("matches Lua with a bias on " .. label, function()
      local x, xf = randn { M, K }
      local w, wf = randn { K, N }
      local b, bf = randn { N }
      local y = ops.linear(x, w, b)
      assert.are.same({ M, N }, y.shape)
      near(ref_matmul(xf, wf, bf, M, K, N), y, 1e-5, "linear")
    end)
    it("matches Lua without a bias on " .. label, function()
      local x, xf = randn { M, K }
      local w, wf = randn { K, N }
      near(ref_matmul(xf, wf, nil, M, K, N), ops.linear(x, w), 1e-5, "linear")
      near(ref_matmul(xf, wf, nil, M, K, N), ops.matmul(x, w), 1e-5, "matmul")
    end)
  end

  for _, act in ipairs { "relu", "gelu", "tanh" } do
    it("applies act = " .. act, function()
      local M, K, N = 9, 20, 31
      local x, xf = randn { M, K }
      local w, wf = randn { K, N }
      local b, bf = randn { N }
      near(ref_matmul(xf, wf, bf, M, K, N, act), ops.linear(x, w, b, act), 1e-5, "linear " .. act)
      near(ref_matmul(xf, wf, nil, M, K, N, act), ops.linear(x, w, act), 1e-5, "linear no bias " .. act)
    end)
  end

  it("treats leading dimensions as rows", function()
    local x, xf = randn { 2, 3, 10 }
    local w, wf = randn { 10, 4 }
    local y = ops.linear(x, w)
    assert.are.same({ 2, 3, 4 }, y.shape)
    near(ref_matmul(xf, wf, nil, 6, 10, 4), y, 1e-5, "linear 3-D")
  end)
end)

-- PyTorch weights: nn.Linear keeps W {out, in} (y = x @ W^T); gt.ops.linear takes {in, out}.
describe("gt.ops.transpose and PyTorch's weight layout", function()
  local function ref_t(xf, R, C)
    local y = {}
    for r = 0, R - 1 do for c = 0, C - 1 do y[c * R + r + 1] = xf[r * C + c + 1] end end
    return y
  end

  -- sizes below a tile, across tiles, one row or column, and empty
  for _, s in ipairs { { 1, 1 }, { 1, 5 }, { 7, 1 }, { 16, 16 }, { 37, 21 }, { 3, 100 }, { 0, 4 } } do
    it(("transposes %dx%d, and t:t() is the same"):format(s[1], s[2]), function()
      local x, xf = randn { s[1], s[2] }
      local y = ops.transpose(x)
      assert.are.same({ s[2], s[1] }, y.shape)
      equal_list(ref_t(xf, s[1], s[2]), y, "transpose")
      equal_list(ref_t(xf, s[1], s[2]), x:t(), "t:t()")
      equal_list(xf, y:t(), "transposed twice")
    end)
  end

  it("takes a PyTorch nn.Linear weight {out, in} through W:t(), and hints at the layout when it is passed as is", function()
    local M, K, N = 5, 37, 10                        -- batch, in, out
    local x, xf = randn { M, K }
    local Wt, wtf = randn { N, K }                   -- PyTorch's {out, in}
    local b, bf = randn { N }
    near(ref_matmul(xf, ref_t(wtf, N, K), bf, M, K, N), ops.linear(x, Wt:t():static(), b), 1e-5, "linear with W:t()")
    local err = error_of(ops.linear, x, Wt, b)
    assert.truthy(err:find("gt.ops.linear: x is 5x37 but W is 10x37: inner dimensions differ; W is {in, out} " ..
      "(y = x @ W), and this W looks like PyTorch's nn.Linear {out, in} layout (its last dimension is x's): pass " ..
      "gt.ops.transpose(W) (or W:t()), once, outside the step", 1, true), err)
    local other = error_of(ops.linear, x, gt.zeros { 4, 9 })
    assert.truthy(other:find("W is {in, out} (y = x @ W) (a PyTorch nn.Linear weight, {out, in}, goes in as " ..
      "gt.ops.transpose(W) or W:t())", 1, true), other)
  end)

  it("runs in a tree: recorded once, replayed, the same values as eagerly", function()
    local step = gt.tree(function(w, x) return ops.linear(x, ops.transpose(w)) end)
    local w, x = randn { 6, 19 }, randn { 3, 19 }
    local want = flat(ops.linear(x, w:t()))
    for _ = 1, 5 do equal_list(want, step(w, x), "tree") end
    assert.are.equal(1, step:stats().recorded)
    assert.is_true(step:stats().replays >= 3)
  end)

  it("refuses what is not a 2-D f32 tensor, naming it", function()
    assert.matches("gt.ops.transpose: x must be 2-D {R, C} (a matrix), got 2x3x4 (3-D): :view() it as 2-D first",
      error_of(ops.transpose, gt.zeros { 2, 3, 4 }), 1, true)
    assert.matches("gt.ops.transpose: x must be f32, got i32 2x2", error_of(ops.transpose, gt.zeros({ 2, 2 }, "i32")), 1, true)
    assert.matches("t:t(): the tensor must be 2-D (a matrix), got a tensor 4 f32", error_of(function() return gt.zeros { 4 }:t() end), 1, true)
  end)
end)

-- -- Rows ----------------------------------------------------------------------------------

describe("gt.ops row ops", function()
  for _, s in ipairs { { 1, 1 }, { 5, 3 }, { 7, 33 }, { 4, 300 }, { 70, 64 } } do
    local M, N = s[1], s[2]
    local label = M .. "x" .. N

    it("softmax matches Lua on " .. label, function()
      local x, xf = randn({ M, N }, 4)
      near(per_row(xf, M, N, function(r)
        local m = math.max(unpack(r))
        local e = map(r, function(v) return math.exp(v - m) end)
        local sum = 0
        for _, v in ipairs(e) do sum = sum + v end
        return map(e, function(v) return v / sum end)
      end), ops.softmax(x), 1e-5, "softmax")
    end)

    it("layernorm matches Lua on " .. label, function()
      local x, xf = randn({ M, N }, 2)
      local g, gf = randn { N }
      local b, bf = randn { N }
      local function ref(eps)
        return per_row(xf, M, N, function(r)
          local mean, var = 0, 0
          for _, v in ipairs(r) do mean = mean + v end
          mean = mean / N
          for _, v in ipairs(r) do var = var + (v - mean) ^ 2 end
          var = var / N
          return map(r, function(v, j) return (v - mean) / math.sqrt(var + eps) * gf[j] + bf[j] end)
        end)
      end
      near(ref(1e-5), ops.layernorm(x, g, b), 1e-4, "layernorm")
      near(ref(0.1), ops.layernorm(x, g, b, 0.1), 1e-4, "layernorm eps=0.1")
    end)

    it("rmsnorm matches Lua on " .. label, function()
      local x, xf = randn({ M, N }, 2)
      local w, wf = randn { N }
      local function ref(eps)
        return per_row(xf, M, N, function(r)
          local ms = 0
          for _, v in ipairs(r) do ms = ms + v * v end
          local rs = 1 / math.sqrt(ms / N + eps)
          return map(r, function(v, j) return v * rs * wf[j] end)
        end)
      end
      near(ref(1e-6), ops.rmsnorm(x, w), 1e-4, "rmsnorm")
      near(ref(0.5), ops.rmsnorm(x, w, 0.5), 1e-4, "rmsnorm eps=0.5")
    end)

    it("sum, max and argmax match Lua on " .. label, function()
      local x, xf = randn { M, N }
      local sums, maxs, args = {}, {}, {}
      for i = 0, M - 1 do
        local s, m, a = 0, -math.huge, 0
        for j = 1, N do
          local v = xf[i * N + j]
          s = s + v
          if v > m then m, a = v, j - 1 end
        end
        sums[i + 1], maxs[i + 1], args[i + 1] = s, m, a
      end
      local ys, ym, ya = ops.sum(x), ops.max(x), ops.argmax(x)
      assert.are.same({ M }, ys.shape)
      assert.are.equal("i32", ya.dtype)
      near(sums, ys, 1e-5, "sum")
      equal_list(maxs, ym, "max")
      equal_list(args, ya, "argmax")
    end)
  end

  it("sums empty rows to zero and keeps empty shapes", function()
    equal_list({ 0, 0, 0 }, ops.sum(gt.zeros { 3, 0 }), "sum of empty rows")
    assert.are.same({ 3, 0 }, ops.softmax(gt.zeros { 3, 0 }).shape)
    assert.are.same({ 0, 4 }, ops.relu(gt.zeros { 0, 4 }).shape)
    equal_list({ 1, 2, 1, 2 }, ops.linear(gt.zeros { 2, 0 }, gt.zeros { 0, 2 }, gt.from { 1, 2 }), "linear with K = 0")
  end)

  it("softmax rows sum to one and survive large inputs", function()
    local x = ops.mul(randn { 3, 50 }, 1000)
    local s = flat(ops.sum(ops.softmax(x)))
    for i = 1, 3 do assert(math.abs(s[i] - 1) < 1e-5, "row " .. i .. " sums to " .. s[i]) end
  end)

  it("argmax takes the first of equal maxima (0-based)", function()
    local x = gt.from({ { 1, 5, 5, 2 }, { 7, 7, 7, 7 }, { -3, -1, -2, -1 } })
    equal_list({ 1, 0, 1 }, ops.argmax(x), "argmax")
  end)

  it("row ops drop the last dimension of N-D inputs", function()
    local x = randn { 2, 3, 4 }
    assert.are.same({ 2, 3 }, ops.sum(x).shape)
    assert.are.same({ 2, 3, 4 }, ops.softmax(x).shape)
    assert.are.same({ 1 }, ops.max(randn { 5 }).shape)
  end)

  -- gt.ops fits the block to the backend (32 threads per row on the cpu);
  -- the kernels themselves must give the same answer at any multi-warp width.
  it("reduce.cu kernels agree at every block width", function()
    local R = gt.load("kernels/reduce.cu")
    local M, N = 5, 700
    local x = randn({ M, N }, 3)
    local g, b = randn { N }, randn { N }
    local want = {
      softmax = flat(ops.softmax(x)), layernorm = flat(ops.layernorm(x, g, b)),
      rmsnorm = flat(ops.rmsnorm(x, g)), sum = flat(ops.sum(x)), max = flat(ops.max(x)),
      argmax = flat(ops.argmax(x)),
    }
    for _, bs in ipairs { 32, 96, 256, 1024 } do
      for _, grid in ipairs { 1, 2, M } do
        local y, r, ri = gt.tensor { M, N }, gt.tensor { M }, gt.tensor({ M }, "i32")
        local w = " (block " .. bs .. ", grid " .. grid .. ")"
        R.softmax_f32(grid, bs, y, x, M, N)
        near(want.softmax, y, 1e-5, "softmax" .. w)
        R.layernorm_f32(grid, bs, y, x, g, b, M, N, 1e-5)
        near(want.layernorm, y, 1e-5, "layernorm" .. w)
        R.rmsnorm_f32(grid, bs, y, x, g, M, N, 1e-6)
        near(want.rmsnorm, y, 1e-5, "rmsnorm" .. w)
        R.rowsum_f32(grid, bs, r, x, M, N)
        near(want.sum, r, 1e-5, "sum" .. w)
        R.rowmax_f32(grid, bs, r, x, M, N)
        equal_list(want.max, r, "max" .. w)
        R.argmax_f32(grid, bs, ri, x, M, N)
        equal_list(want.argmax, ri, "argmax" .. w)
      end
    end
  end)

  it("linear.cu covers every tile with a grid smaller than the output", function()
    local L = gt.load("kernels/linear.cu")
    local M, K, N = 40, 24, 50
    local x, xf = randn { M, K }
    local w, wf = randn { K, N }
    local b, bf = randn { N }
    local y = gt.tensor { M, N }
    L.linear_f32({ 2, 1 }, { 16, 16 }, y, x, w, b, M, N, K, 1, 1)
    near(ref_matmul(xf, wf, bf, M, K, N, "relu"), y, 1e-5, "linear small grid")
    L.matmul_f32({ 1, 2 }, { 16, 16 }, y, x, w, M, N, K)
    near(ref_matmul(xf, wf, nil, M, K, N), y, 1e-5, "matmul small grid")
  end)
end)

-- -- Embedding -------------------------------------------------------------------------------

describe("gt.ops.embedding", function()
  it("gathers rows of the table", function()
    local V, D = 11, 37
    local tbl, tf = randn { V, D }
    local idl = { 0, 10, 3, 3, 7 }
    local ids = gt.from(idl, "i32")
    local y = ops.embedding(ids, tbl)
    assert.are.same({ 5, D }, y.shape)
    local expected = {}
    for _, id in ipairs(idl) do
      for d = 1, D do expected[#expected + 1] = tf[id * D + d] end
    end
    equal_list(expected, y, "embedding")
  end)

  it("keeps the ids' shape and feeds argmax back in", function()
    local tbl = randn { 6, 4 }
    local ids = gt.from({ { 1, 2 }, { 5, 0 } }, "i32")
    assert.are.same({ 2, 2, 4 }, ops.embedding(ids, tbl).shape)
    local next_ids = ops.argmax(randn { 3, 6 })
    assert.are.same({ 3, 4 }, ops.embedding(next_ids, tbl).shape)
  end)

  it("gives zeros for ids outside the table", function()
    local tbl = gt.ones { 3, 2 }
    equal_list({ 0, 0, 1, 1, 0, 0 }, ops.embedding(gt.from({ -1, 2, 3 }, "i32"), tbl), "embedding")
  end)
end)

-- -- Errors ------------------------------------------------------------------------------------

describe("gt.ops argument errors", function()
  it("name the op and both shapes when linear's inner dimensions differ", function()
    local err = error_of(ops.linear, gt.zeros { 8, 128 }, gt.zeros { 256, 256 })
    assert.matches("gt.ops.linear: x is 8x128 but W is 256x256: inner dimensions differ", err, 1, true)
  end)

  it("point at the caller's line (not a tail call)", function()
    local ok, err = pcall(function() local y = ops.relu(42); return y end)
    assert.is_false(ok)
    assert.matches("ops_spec.lua:%d+: gt.ops.relu: x must be a f32 tensor, got a number", err)
    ok, err = pcall(function() local y = ops.add(gt.zeros { 2 }, gt.zeros { 3 }); return y end)
    assert.matches("ops_spec.lua:%d+: gt.ops.add", err)
    ok, err = pcall(function() local y = ops.layernorm(gt.zeros { 2, 4 }, gt.ones { 4 }, gt.ones { 3 }); return y end)
    assert.matches("ops_spec.lua:%d+: gt.ops.layernorm", err)
  end)

  it("reject wrong dtypes, naming the argument", function()
    local i = gt.zeros({ 4 }, "i32")
    assert.matches("gt.ops.relu: x must be f32, got i32 4", error_of(ops.relu, i), 1, true)
    assert.matches("gt.ops.add: b must be f32, got i32 4", error_of(ops.add, gt.zeros { 4 }, i), 1, true)
    assert.matches("gt.ops.embedding: ids must be i32, got f32 3",
      error_of(ops.embedding, gt.zeros { 3 }, gt.zeros { 4, 2 }), 1, true)
  end)

  it("reject non-tensors", function()
    assert.matches("gt.ops.softmax: x must be a f32 tensor, got nil", error_of(ops.softmax), 1, true)
    assert.matches("gt.ops.matmul: b must be a f32 tensor, got a table",
      error_of(ops.matmul, gt.zeros { 2, 2 }, { 1, 2 }), 1, true)
    assert.matches("gt.ops.axpby: a must be a number", error_of(ops.axpby, gt.zeros { 2 }, gt.zeros { 2 }, 1, gt.zeros { 2 }), 1, true)
  end)

  it("reject mismatched shapes", function()
    assert.matches("gt.ops.add: a is 2x3 but b is 3x2: shapes differ",
      error_of(ops.add, gt.zeros { 2, 3 }, gt.zeros { 3, 2 }), 1, true)
    assert.matches("gt.ops.axpby: x is 4 but y is 5: shapes differ",
      error_of(ops.axpby, 1, gt.zeros { 4 }, 1, gt.zeros { 5 }), 1, true)
    assert.matches("gt.ops.linear: b is 3 but W is 4x5: b must be a vector of 5",
      error_of(ops.linear, gt.zeros { 2, 4 }, gt.zeros { 4, 5 }, gt.zeros { 3 }), 1, true)
    assert.matches("gt.ops.linear: W must be 2-D {K, N}, got 4",
      error_of(ops.linear, gt.zeros { 2, 4 }, gt.zeros { 4 }), 1, true)
    assert.matches("gt.ops.matmul: a is 2x3 but b is 4x5: inner dimensions differ",
      error_of(ops.matmul, gt.zeros { 2, 3 }, gt.zeros { 4, 5 }), 1, true)
    assert.matches("gt.ops.matmul: a must be 2-D {M, K}, got 2x3x4",
      error_of(ops.matmul, gt.zeros { 2, 3, 4 }, gt.zeros { 4, 5 }), 1, true)
    assert.matches("gt.ops.layernorm: x is 2x4 but beta is 3: beta must be a vector of 4",
      error_of(ops.layernorm, gt.zeros { 2, 4 }, gt.ones { 4 }, gt.ones { 3 }), 1, true)
    assert.matches("gt.ops.rmsnorm: x is 2x4 but w is 2x4: w must be a vector of 4",
      error_of(ops.rmsnorm, gt.zeros { 2, 4 }, gt.ones { 2, 4 }), 1, true)
    assert.matches("gt.ops.embedding: table must be 2-D {V, D}, got 6",
      error_of(ops.embedding, gt.zeros({ 2 }, "i32"), gt.zeros { 6 }), 1, true)
  end)

  it("reject a non-contiguous view", function()
    local v = gt.zeros({ 4, 6 }):narrow(2, 2, 3)
    assert.matches("gt.ops.relu: x is a non-contiguous view; :clone() it first", error_of(ops.relu, v), 1, true)
  end)

  it("reject an unknown activation and a bad eps", function()
    assert.matches('gt.ops.linear: act must be "relu", "gelu", "tanh" or nil, got "swish"',
      error_of(ops.linear, gt.zeros { 2, 4 }, gt.zeros { 4, 5 }, nil, "swish"), 1, true)
    assert.matches("gt.ops.rmsnorm: eps must be a number, got a string",
      error_of(ops.rmsnorm, gt.zeros { 2, 4 }, gt.ones { 4 }, "x"), 1, true)
  end)
end)
