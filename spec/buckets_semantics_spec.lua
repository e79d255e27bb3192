-- Buckets with stated, checkable semantics: the body asks for the real size
-- (gt.bucket), the pad value is an option, results are narrowed by a rule the
-- user controls (by size with a warning when none is given), and verify runs
-- every n-th padded call also unpadded, eagerly, and raises when they differ.
local gt = require "gt"
require "gt.busted"
local ops = gt.ops

local K = gt.compile([[
__global__ void colmean(float *y, const float *x, int rows, int cols) {   // y[j] = mean of x[0..rows)[j]
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float s = 0; for (int i = 0; i < rows; i++) s += x[i * cols + j]; y[j] = s / rows;
  }
}
__global__ void colmax(float *y, const float *x, int rows, int cols) {
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float m = x[j]; for (int i = 1; i < rows; i++) m = fmaxf(m, x[i * cols + j]); y[j] = m;
  }
}
__global__ void imax(int *y, const int *x, int n) { if (threadIdx.x == 0) { int m = x[0]; for (int i = 1; i < n; i++) m = max(m, x[i]); y[0] = m; } }
__global__ void halve(float *x, int n) { for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] *= 0.5f; }
]], { name = "buckets_semantics_spec.cu" })

local W = gt.randn({ 8, 8 }, { seed = 4, scale = 0.3 }):static()

-- Rows 1..n of a {n, 8} input: row i, column j holds (i * 8 + j) / 10 - 2 (negative and positive).
local function rows(n)
  local t = {}
  for i = 1, n do
    t[i] = {}
    for j = 1, 8 do t[i][j] = ((i - 1) * 8 + j) / 10 - 2 end
  end
  return gt.from(t)
end

-- The column mean over the batch, as a kernel given the real batch size.
local function mean_rows(x)
  local n = gt.bucket() or x.shape[1]                -- eagerly no bucket: the input's own size
  local y = gt.tensor { 8 }
  K.colmean(1, 32, y, x, n, 8)
  return y
end

local function capture()
  local seen, old = {}, gt.on_warning
  gt.on_warning = function(m) seen[#seen + 1] = m end
  return seen, function() gt.on_warning = old end
end

describe("gt.bucket", function()
  it("gives the real and padded sizes in a bucketed call, the real size twice when nothing is padded, nil outside", function()
    local seen = {}
    local step = gt.tree(function(x)
      local n, p = gt.bucket()
      seen[#seen + 1] = { n, p, x.shape[1] }
      return ops.relu(x)
    end, { buckets = { dim = 1, sizes = { 4, 8 }, narrow = { 1 } } })
    step(rows(3)); step(rows(8)); step(rows(10))
    assert.are.same({ { 3, 4, 4 }, { 8, 8, 8 }, { 10, 10, 10 } }, seen)   -- padded; at a bucket's size; beyond the last
    assert.is_nil(gt.bucket())
    assert.is_nil(gt.tree(function() return gt.bucket() end)())                 -- a tree without buckets
    local ok, err = pcall(gt.bucket, 1.5)
    assert.is_false(ok)
    assert.truthy(err:find("buckets_semantics_spec.lua:%d+: gt.bucket%(%[dim%]%): dim must be"), err)
  end)

  it("answers per bucketed dimension with a list of specs, and names the dims it has for another", function()
    local got
    local step = gt.tree(function(x, m)
      got = { { gt.bucket(1) }, { gt.bucket(2) } }
      local ok, err = pcall(gt.bucket, 3)
      got.err = not ok and err
      return ops.relu(x), ops.relu(m)
    end, { buckets = { { dim = 1, sizes = { 4 } }, { dim = 2, sizes = { 8 } }, narrow = { 1, 2 } } })
    step(rows(3), gt.zeros { 2, 5 })
    assert.are.same({ 3, 4 }, got[1])
    assert.are.same({ 5, 8 }, got[2])
    assert.truthy(got.err:find("gt.bucket(3): tree 'step' buckets dim 1, 2, not 3", 1, true), got.err)
  end)

  it("lets a kernel reduce over the real batch: the tree gives eager's mean at every size, one node a bucket", function()
    local step = gt.tree(mean_rows, { buckets = { dim = 1, sizes = { 4, 8 }, narrow = {} } })
    for _, n in ipairs { 3, 5, 6, 7, 3, 4, 5, 8, 2 } do
      assert.tensor_near(mean_rows(rows(n)):tolist(), step(rows(n)), 1e-6)
    end
    assert.nodes(step, 2)                             -- the real size is a patched scalar: the path stays
    assert.truthy(step:stats().replays >= 5)
  end)

  it("gives a keyed tree's hits the real size its key memoized (the key holds the arguments' real shapes)", function()
    local step = gt.tree(mean_rows, { key = function() return 1 end, buckets = { dim = 1, sizes = { 4, 8 }, narrow = {} } })
    for _ = 1, 4 do
      for _, n in ipairs { 3, 5, 6, 2 } do assert.tensor_near(mean_rows(rows(n)):tolist(), step(rows(n)), 1e-6) end
    end
    assert.truthy(step:stats().keyed.hits >= 4)
  end)
end)

describe("buckets' pad value", function()
  local function max_rows(x) local y = gt.tensor { 8 }; K.colmax(1, 32, y, x, x.shape[1], 8); return y end

  it("is zero by default, and what pad says: -inf leaves a max over the padded rows as eager code's", function()
    local zero = gt.tree(max_rows, { buckets = { dim = 1, sizes = { 8 }, narrow = {} } })
    local inf = gt.tree(max_rows, { buckets = { dim = 1, sizes = { 8 }, pad = -math.huge, narrow = {} } })
    local x = ops.add(rows(3), -10)                   -- every value negative
    local want = max_rows(x):tolist()
    for _ = 1, 3 do
      assert.are.same({ 0, 0, 0, 0, 0, 0, 0, 0 }, zero(x):tolist())   -- the zero rows win the max
      assert.tensor_near(want, inf(x), 1e-6)
    end
  end)

  it("fills integer inputs with a whole value they can hold, and refuses one they cannot, naming the argument", function()
    local function body(x) local y = gt.tensor({ 1 }, "i32"); K.imax(1, 1, y, x, x.shape[1]); return y end
    local step = gt.tree(body, { buckets = { dim = 1, sizes = { 4 }, pad = -1000, narrow = {} } })
    assert.are.same({ -5 }, step(gt.from({ -7, -5, -9 }, "i32")):tolist())
    local bad = gt.tree(body, { buckets = { dim = 1, sizes = { 4 }, pad = -math.huge, narrow = {} } })
    local ok, err = pcall(bad, gt.from({ 1, 2 }, "i32"))
    assert.is_false(ok)
    assert.truthy(err:find("buckets_semantics_spec.lua:%d+: buckets: pad = %-inf cannot be held by the i32 elements of argument 1"), err)
    ok, err = pcall(gt.tree, body, { buckets = { dim = 1, sizes = { 4 }, pad = "x" } })
    assert.is_false(ok)
    assert.truthy(err:find("option buckets.pad must be a number", 1, true), err)
  end)
end)

describe("buckets' narrowing rule", function()
  -- A batched result and a per-feature one as long as the bucket (8).
  local function body(x) return ops.relu(x), mean_rows(x) end

  it("by default narrows every result with the bucket's size, and says so once, naming each", function()
    local seen, restore = capture()
    local step = gt.tree(body, { buckets = { dim = 1, sizes = { 8 } } })
    local y, m = step(rows(5))
    step(rows(5))
    restore()
    assert.are.same({ 5, 8 }, y.shape)
    assert.are.same({ 5 }, m.shape)                   -- the coincidence: narrowed, and not silently
    assert.are.equal(1, #seen)
    assert.truthy(seen[1]:find("result 1 (a f32 8x8 tensor, narrowed to 5x8), result 2 (a f32 8 tensor, narrowed to 5)", 1, true), seen[1])
    assert.truthy(seen[1]:find("narrow = {1, ...}", 1, true), seen[1])
  end)

  it("narrows only the results listed, or those a function picks (result i, tensor t, key k), without a warning", function()
    local seen, restore = capture()
    local listed = gt.tree(body, { buckets = { dim = 1, sizes = { 8 }, narrow = { 1 } } })
    local asked = {}
    local picked = gt.tree(function(x) return { y = ops.relu(x), m = mean_rows(x) } end,
      { buckets = { dim = 1, sizes = { 8 }, narrow = function(i, t, k) asked[#asked + 1] = { i, t.shape[1], k }; return k == "y" end } })
    local none = gt.tree(body, { buckets = { dim = 1, sizes = { 8 }, narrow = {} } })
    for _ = 1, 3 do
      local y, m = listed(rows(5))
      assert.are.same({ { 5, 8 }, { 8 } }, { y.shape, m.shape })
      assert.tensor_near(mean_rows(rows(5)):tolist(), m, 1e-6)
      local r = picked(rows(5))
      assert.are.same({ { 5, 8 }, { 8 } }, { r.y.shape, r.m.shape })
      y, m = none(rows(5))
      assert.are.same({ { 8, 8 }, { 8 } }, { y.shape, m.shape })
    end
    restore()
    assert.are.same({}, seen)
    local keys = {}
    for _, a in ipairs(asked) do keys[#keys + 1] = a[1] .. " " .. a[2] .. " " .. a[3] end
    table.sort(keys)
    assert.are.same({ "1 8 m", "1 8 m", "1 8 m", "1 8 y", "1 8 y", "1 8 y" }, keys)   -- each call asks for both
  end)

  it("checks the options: narrow a list of positions or a function, verify a count, on the buckets table", function()
    for _, c in ipairs {
      { { dim = 1, sizes = { 4 }, narrow = "all" }, "option buckets.narrow must be a list of result positions" },
      { { dim = 1, sizes = { 4 }, narrow = { 0 } }, "option buckets.narrow must be a list of result positions" },
      { { dim = 1, sizes = { 4 }, verify = 0 }, "option buckets.verify must be a whole number >= 1" },
      { { { dim = 1, sizes = { 4 }, verify = 2 } }, "option buckets[1] has the key \"verify\" (a string), which belongs to the buckets table" },
      { { { dim = 1, sizes = { 4 } }, narrow = 3 }, "option buckets.narrow must be a list" },
    } do
      local ok, err = pcall(gt.tree, body, { buckets = c[1] })
      assert.is_false(ok)
      assert.truthy(err:find(c[2], 1, true), err)
      assert.truthy(err:find("buckets_semantics_spec.lua:%d+:"), err)
    end
    assert.truthy(gt.tree(body, { buckets = { { dim = 1, sizes = { 4 } }, narrow = { 1 }, verify = 3 } }))
  end)
end)

describe("buckets' verify", function()
  it("finds a model whose results depend on the padding, naming the result and the sizes", function()
    -- the mean over x.shape[1] rows: the padded count, zero rows included
    local function padded_mean(x) local y = gt.tensor { 8 }; K.colmean(1, 32, y, x, x.shape[1], 8); return ops.relu(x), y end
    local step = gt.tree(padded_mean, { buckets = { dim = 1, sizes = { 4, 8 }, narrow = { 1 }, verify = 2 } })
    assert.truthy(pcall(step, rows(3)))               -- the first padded call is not verified
    local ok, err = pcall(step, rows(3))
    assert.is_false(ok)
    assert.truthy(err:find("buckets_semantics_spec.lua:%d+: tree 'step' %(.-%): buckets verify: result 2's element %[1%] is %-1%.1 unpadded but %-0%.825 from the padded call %(dim 1: 3 padded to 4%)"), err)
    assert.truthy(err:find("gt.bucket()", 1, true), err)
    -- a result narrowed by coincidence differs in shape: verify names it too
    local wrong = gt.tree(function(x) return ops.relu(x), mean_rows(x) end, { buckets = { dim = 1, sizes = { 8 }, verify = 1 } })
    local seen, restore = capture()
    ok, err = pcall(wrong, rows(5))
    restore()
    assert.is_false(ok)
    assert.truthy(err:find("result 2 is a f32 8 tensor unpadded but a f32 5 tensor from the padded call", 1, true), err)
    assert.are.equal(1, #seen)
  end)

  it("passes a row-independent model (and one given the real size), running the body twice on verified calls", function()
    local runs = 0
    local function body(x) runs = runs + 1; return ops.relu(ops.matmul(x, W)), mean_rows(x) end
    local step = gt.tree(body, { buckets = { dim = 1, sizes = { 4, 8 }, narrow = { 1 }, verify = 1 } })
    local max = gt.tree(function(x) local y = gt.tensor { 8 }; K.colmax(1, 32, y, x, x.shape[1], 8); return y end,
      { buckets = { dim = 1, sizes = { 8 }, pad = -math.huge, narrow = {}, verify = 1 } })
    for _, n in ipairs { 3, 5, 7, 4, 2, 6 } do
      local y, m = step(rows(n))
      assert.are.same({ n, 8 }, y.shape)
      assert.tensor_near(mean_rows(rows(n)):tolist(), m, 1e-6)
      max(ops.add(rows(n), -10))
    end
    assert.are.equal(5, step:stats().buckets.verified)   -- every padded call (4 is a bucket's size: not padded)
    assert.are.equal(6 + 5, runs)                        -- each verified call runs the body twice
    assert.are.equal(6, max:stats().buckets.verified)
  end)

  it("undoes the eager run's writes into the inputs: a body writing into its input writes once", function()
    local step = gt.tree(function(x) K.halve(1, 32, x, x.numel); return ops.mul(x, 2) end,
      { buckets = { dim = 1, sizes = { 4 }, narrow = { 1 }, verify = 1 } })
    for _ = 1, 3 do
      local x = rows(3)
      local y = step(x)
      assert.tensor_near(rows(3):tolist(), y, 1e-6)
      assert.tensor_near(ops.mul(rows(3), 0.5):tolist(), x, 1e-6)
    end
    assert.are.equal(3, step:stats().buckets.verified)
  end)

  it("verifies keyed calls too: a hit's results are compared with the eager run's", function()
    local step = gt.tree(function(x) return ops.relu(ops.matmul(x, W)) end,
      { key = function() return 1 end, buckets = { dim = 1, sizes = { 4 }, narrow = { 1 }, verify = 1 } })
    for _ = 1, 5 do assert.are.same({ 3, 8 }, step(rows(3)).shape) end
    local s = step:stats()
    assert.are.equal(5, s.buckets.verified)
    assert.truthy(s.keyed.hits >= 1, "keyed hits: " .. s.keyed.hits)
  end)
end)
