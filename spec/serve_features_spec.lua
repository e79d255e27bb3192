-- What a serving loop needs of trees (DESIGN 7): count buckets (a number
-- argument bucketed: batch and chunk both padded, a path per pair of
-- buckets), named specs (gt.bucket(name)), keyed calls keyed by the buckets
-- with the real counts patched, tree:warm (paths recorded ahead of time,
-- largest first) and on_limit = "evict" (a path past max_recordings runs
-- eagerly, then records; the others replay on).
local gt = require "gt"
require "gt.busted"

local K = gt.compile([[
// y[0..p) = v for the first n slots, -1 for the pad slots; y[p] = n (the real count seen).
__global__ void slots(float *y, int n, int p, float v) {
  for (int i = threadIdx.x; i < p; i += blockDim.x) y[i] = i < n ? v : -1.0f;
  if (threadIdx.x == 0) y[p] = (float)n;
}
// out[i] = x[i] * 2 + 1 for the first n rows of m floats; pad rows untouched.
__global__ void rows2(float *out, const float *x, int n, int m) {
  for (int i = threadIdx.x; i < n * m; i += blockDim.x) out[i] = x[i] * 2.0f + 1.0f;
}
]], { name = "serve_features_spec.cu" })

local DEC, CH = { 0, 1, 2, 4 }, { 0, 8, 16 }

-- A step over a decode count and a chunk count: one tensor of both padded
-- regions and a last slot holding the real total, filled with v.
local function step_body(nd, nc, v)
  local d, dp = gt.bucket("decode")
  local c, cp = gt.bucket("chunk")
  d, dp, c, cp = d or nd, dp or nd, c or nc, cp or nc     -- (eagerly: no buckets, the counts themselves)
  local y = gt.tensor { dp + cp + 1 }
  K.slots(1, 32, y, d + c, dp + cp, v)
  return y
end

local BUCKETS = { { count = 1, sizes = DEC, name = "decode" }, { count = 2, sizes = CH, name = "chunk" } }

local function fit(sizes, n) return gt.buckets.fit(sizes, n) end

-- What step_body gives for (nd, nc, v) at the buckets' padded sizes.
local function expected(nd, nc, v)
  local p = fit(DEC, nd) + fit(CH, nc)
  local r = {}
  for i = 1, p do r[i] = i <= nd + nc and v or -1 end
  r[p + 1] = nd + nc
  return r
end

local function calls(n)                     -- (nd, nc) pairs over every bucket pair, in an order that mixes them
  local r = {}
  for i = 1, n do r[i] = { i % 5, (i * 7) % 17 } end
  return r
end

describe("count buckets", function()
  it("pad two counts to their buckets: one path per pair of buckets, pad slots told apart by the real counts", function()
    local step = gt.tree(step_body, { buckets = BUCKETS, warn_shapes = false })
    local pairs_seen = {}
    for i, c in ipairs(calls(60)) do
      local y = step(c[1], c[2], i)
      assert.are.same(expected(c[1], c[2], i), y:tolist())
      pairs_seen[fit(DEC, c[1]) .. "x" .. fit(CH, c[2])] = true
    end
    local n = 0
    for _ in pairs(pairs_seen) do n = n + 1 end
    assert.are.equal(n, step:stats().nodes)          -- (a node per bucket pair, whatever the real counts)
    assert.is_true(step:stats().replays > 30)
  end)

  it("give gt.bucket(name) the count and its bucket, nil outside a call, and run beyond the last bucket eagerly", function()
    local seen = {}
    local step = gt.tree(function(nd, nc)
      seen[#seen + 1] = { gt.bucket("decode") }
      seen[#seen + 1] = { gt.bucket("chunk") }
      return step_body(nd, nc, 1)
    end, { buckets = BUCKETS })
    step(3, 9)
    assert.are.same({ { 3, 4 }, { 9, 16 } }, seen)
    assert.is_nil(gt.bucket("decode"))
    seen = {}
    local y = step(5, 0)                               -- 5 decodes: beyond {0, 1, 2, 4}
    assert.are.same({ { 5, 5 }, { 0, 0 } }, seen)
    assert.are.same({ 1, 1, 1, 1, 1, 5 }, y:tolist())     -- (eagerly at the real counts)
    assert.are.equal(1, step:stats().skips["beyond buckets"])
  end)

  it("raise naming the spec when gt.bucket asks for a name the tree has not, or a count is not a number", function()
    local step = gt.tree(function(nd) return gt.bucket("batch") end, { buckets = { count = 1, sizes = { 1, 2 }, name = "rows" } })
    local ok, err = pcall(step, 1)
    assert.is_false(ok)
    assert.matches("gt.bucket%('batch'%): tree 'step' buckets 'rows', not 'batch'", err)
    local t2 = gt.tree(function(x) return x end, { buckets = { count = 1, sizes = { 1, 2 } } })
    ok, err = pcall(t2, "two")
    assert.is_false(ok)
    assert.matches("count = 1 names argument 1, which is \"two\"", err)
    assert.are.equal(2, t2(2))                        -- (the runtime stays usable)
  end)

  it("verify every n-th call against the body run at the real counts (gt.bucket gives them twice there)", function()
    local seen = {}
    local step = gt.tree(function(nd, nc, v)
      seen[#seen + 1] = select(2, gt.bucket("decode"))
      return step_body(nd, nc, v)
    end, { buckets = { BUCKETS[1], BUCKETS[2], verify = 1, narrow = {} } })
    local ok, err = pcall(step, 3, 0, 1)         -- the padded call gives 4 + 1 slots, the eager run 3 + 1
    assert.is_false(ok)
    assert.matches("buckets verify: result 1 is a f32 4 tensor unpadded but a f32 5 tensor from the padded call " ..
      "%(narrowed by the rule, or left as it is%) %(count 'decode': 3 in a bucket of 4%)", err)
    assert.are.same({ 3, 4 }, seen)              -- the eager run at the real count, then the call's bucket
    assert.are.same({ 4, 4, 4, 4, 4 }, step(4, 0, 4):tolist())    -- (at the bucket's sizes: the same results)
    assert.are.equal(1, step:stats().buckets.verified)          -- (a call at its buckets is not verified)
  end)

  it("are checked as options: count with dim, a bad name, sizes below 0", function()
    local function opt_err(b)
      local ok, err = pcall(gt.tree, function() end, { buckets = b })
      assert.is_false(ok)
      return err
    end
    assert.matches("has both count and dim", opt_err { count = 1, dim = 1, sizes = { 1 } })
    assert.matches("buckets.name must be a non%-empty string", opt_err { count = 1, sizes = { 1 }, name = 3 })
    assert.matches("sizes%[1%] must be increasing whole numbers >= 0", opt_err { count = 1, sizes = { -1 } })
    assert.matches("sizes%[1%] must be increasing whole numbers >= 1", opt_err { dim = 1, sizes = { 0 } })
  end)

  it("name tensor specs too: two inputs padded along dim 1 told apart by name", function()
    local step = gt.tree(function(a, b)
      local n = gt.bucket("a")
      local m = gt.bucket("b")
      local ya, yb = gt.zeros(a.shape), gt.zeros(b.shape)
      K.rows2(1, 64, ya, a, n, 2)
      K.rows2(1, 64, yb, b, m, 3)
      return ya, yb
    end, { buckets = { { dim = 1, sizes = { 2, 4 }, arg = 1, name = "a" }, { dim = 1, sizes = { 4, 8 }, arg = 2, name = "b" },
                       narrow = { 1, 2 } } })
    for i = 1, 6 do
      local a, b = gt.full({ (i % 4) + 1, 2 }, i), gt.full({ (i % 7) + 1, 3 }, -i)
      local ya, yb = step(a, b)
      assert.are.same(gt.full(a.shape, 2 * i + 1):tolist(), ya:tolist())
      assert.are.same(gt.full(b.shape, -2 * i + 1):tolist(), yb:tolist())
    end
  end)
end)

describe("count and tensor buckets in one tree", function()
  it("pad the tensor, bucket the count and give eager code's values, plain and keyed", function()
    local body = function(x, c)
      local n, p = gt.bucket("rows")
      n, p = n or x:size(1), p or x:size(1)
      local y = gt.tensor { p, 2 }
      K.rows2(1, 64, y, x, n, 2)                      -- (pad rows untouched: narrowed away)
      local z = gt.tensor { 1 }
      K.slots(1, 32, z, c, 0, 0)                       -- z[0] = the real count
      return y, z
    end
    for _, keyed in ipairs { false, true } do
      local step = gt.tree(body, { buckets = { { dim = 1, sizes = { 2, 4, 8 }, arg = 1, name = "rows" },
                                               { count = 2, sizes = { 0, 4, 16 }, name = "c" }, narrow = { 1 } },
                                   key = keyed and function() return 0 end or nil, warn_shapes = false })
      for i = 1, 30 do
        local n, c = (i % 7) + 1, (i * 5) % 17
        local y, z = step(gt.full({ n, 2 }, i), c)
        assert.are.same(gt.full({ n, 2 }, 2 * i + 1):tolist(), y:tolist())
        assert.are.same({ c }, z:tolist())
      end
      if keyed then assert.is_true(step:stats().keyed.hits > 0) end
    end
  end)
end)

describe("keyed calls with count buckets", function()
  it("key the path by the buckets and patch the real counts: hits give each call's own counts", function()
    local runs = 0
    local step = gt.tree(function(nd, nc, v) runs = runs + 1; return step_body(nd, nc, v) end,
      { buckets = BUCKETS, key = function(_, nc) return nc > 0 end, patch = { 3 }, warn_shapes = false })
    for i, c in ipairs(calls(120)) do
      assert.are.same(expected(c[1], c[2], i), step(c[1], c[2], i):tolist())
    end
    local k = step:stats().keyed
    assert.is_true(k.hits > 60, "hits " .. k.hits)       -- (each real count of a bucket pair shares its memoized path)
    assert.is_true(runs < 60, "body runs " .. runs)
    assert.are.same({}, k.refused)
  end)

  it("run the body again when the real count breaks a guard the memoizing call's comparison set", function()
    local step = gt.tree(function(nd, nc)
      local d, dp = gt.bucket("decode")
      local y = gt.tensor { dp + 1 }
      local v = 1
      if d > 3 then v = 2 end                            -- a comparison on a patched count: a guard
      K.slots(1, 32, y, d, dp, v)
      return y
    end, { buckets = BUCKETS, key = function() return 0 end, warn_shapes = false })
    for _ = 1, 6 do assert.are.same({ 1, 1, 1, -1, 3 }, step(3, 0):tolist()) end   -- (bucket 4, memoized at 3)
    for _ = 1, 6 do assert.are.same({ 2, 2, 2, 2, 4 }, step(4, 0):tolist()) end     -- (bucket 4: the guard answers otherwise)
    for _ = 1, 3 do assert.are.same({ 1, 1, 1, -1, 3 }, step(3, 0):tolist()) end
    assert.is_true(step:stats().keyed.hits > 0)
  end)
end)

describe("tree:warm", function()
  it("records every path ahead of time, the largest first, so that later calls only replay", function()
    local order = {}
    local step = gt.tree(function(nd, nc, v)
      local _, dp = gt.bucket("decode")
      local _, cp = gt.bucket("chunk")
      if #order == 0 or order[#order] ~= dp * 100 + cp then order[#order + 1] = dp * 100 + cp end
      return step_body(nd, nc, v)
    end, { buckets = BUCKETS, key = function(_, nc) return nc > 0 end, patch = { 3 }, warn_shapes = false })
    local list = {}
    for _, d in ipairs(DEC) do for _, c in ipairs(CH) do list[#list + 1] = { d, c, 0 } end end
    local w = step:warm(list)
    assert.are.equal(12, w.paths)
    assert.are.equal(12, w.settled)
    assert.are.equal(416, order[1])                        -- (4 x 16 first: the largest)
    assert.are.equal(0, order[#order])                     -- (0 x 0 last)
    local s0 = step:stats()
    for i, c in ipairs(calls(50)) do assert.are.same(expected(c[1], c[2], i), step(c[1], c[2], i):tolist()) end
    local s1 = step:stats()
    assert.are.equal(s0.recorded, s1.recorded)             -- nothing new recorded
    assert.are.equal(s0.warmups, s1.warmups)
  end)

  it("raises on a list that is not one of argument lists", function()
    local step = gt.tree(step_body, { buckets = BUCKETS })
    assert.has_error(function() step:warm({}) end)
    local ok, err = pcall(step.warm, step, { 1, 2 })
    assert.is_false(ok)
    assert.matches("calls%[1%] must be an argument list", err)
  end)
end)

describe("on_limit = \"evict\"", function()
  it("runs a path past max_recordings eagerly once, drops the least recently used recording, then records it", function()
    local step = gt.tree(step_body, { buckets = BUCKETS, max_recordings = 2, on_limit = "evict", warn_shapes = false })
    for _ = 1, 3 do step(1, 0, 1) end                      -- path A: warmup, record, replay
    for _ = 1, 3 do step(2, 0, 1) end                      -- path B
    local s = step:stats()
    assert.are.equal(2, s.recorded)
    local said, old = {}, gt.on_warning
    gt.on_warning = function(m) said[#said + 1] = m end
    for i = 1, 4 do assert.are.same(expected(4, 0, i), step(4, 0, i):tolist()) end   -- C: eager, warmup, record, replay
    gt.on_warning = old
    assert.are.equal(1, #said)
    assert.matches('the least recently used recording is dropped so that it records %(on_limit = "evict"', said[1])
    s = step:stats()
    assert.are.equal(1, s.evictions)
    assert.are.equal(1, s.skips.max_recordings)
    assert.are.equal(2, s.recorded)
    assert.are.same(expected(2, 0, 9), step(2, 0, 9):tolist())   -- B still replays (the recent ones stay)
    local r0 = step:stats().replays
    step(2, 0, 9)
    assert.are.equal(r0 + 1, step:stats().replays)
  end)

  it("is an allowed on_limit; others still raise naming the choices", function()
    local ok, err = pcall(gt.tree, function() end, { on_limit = "drop" })
    assert.is_false(ok)
    assert.matches('"evict"', err)
  end)
end)

describe("tree:counts", function()
  it("gives the counters tree:stats() gives, as numbers", function()
    local step = gt.tree(step_body, { buckets = BUCKETS, key = function() return 0 end, patch = { 3 }, warn_shapes = false })
    for i = 1, 8 do step(2, 3, i) end
    local calls, recorded, warmups, replays, eager, hits = step:counts()
    local s = step:stats()
    assert.are.same({ s.calls, s.recorded, s.warmups, s.replays, s.eager, s.keyed.hits },
                    { calls, recorded, warmups, replays, eager, hits })
    assert.is_true(hits > 0)
  end)
end)

describe("gt.buckets.fit", function()
  it("gives the bucket a count pads to, nil beyond the last", function()
    assert.are.equal(8, gt.buckets.fit({ 0, 8, 16 }, 3))
    assert.are.equal(0, gt.buckets.fit({ 0, 8, 16 }, 0))
    assert.is_nil(gt.buckets.fit({ 0, 8, 16 }, 17))
  end)
end)
