-- Pools shared between trees (gt.tree(fn, {pool = other})): one pool for trees whose calls never
-- overlap; an output of one stays valid until the next call of any tree sharing the pool.
local gt = require "gt"
require "gt.busted"

local ops = gt.ops

local N = 4096
local function seq(n, f) local t = {} for i = 1, n do t[i] = f(i) end return t end
-- big: four live temporaries of N floats; small: one.
local function big(x)
  local a = ops.mul(x, 2)
  local b = ops.add(a, x)
  local c = ops.mul(b, a)
  return ops.add(c, b)                                   -- (2x+x)*(2x) + 3x = 6x^2 + 3x
end
local function small(x) return ops.add(x, 1) end
local function big_ref(v) return seq(#v, function(i) return 6 * v[i] * v[i] + 3 * v[i] end) end
local function small_ref(v) return seq(#v, function(i) return v[i] + 1 end) end

local function run(t, x, n) local y for _ = 1, n do y = t(x) end return y end

describe("a pool shared between trees", function()
  local x, xv
  before_each(function()
    xv = seq(N, function(i) return (i % 7) * 0.5 end)
    x = gt.from(xv)
  end)

  it("holds the larger of the two trees' high water, and the second tree costs no new memory", function()
    local a1, b1 = gt.tree(big), gt.tree(small)
    run(a1, x, 3); run(b1, x, 3)
    local pa, pb = a1:stats().pool, b1:stats().pool
    assert.is_true(pa.high_water > pb.high_water)
    local a2 = gt.tree(big, { name = "a2" })
    local b2 = gt.tree(small, { name = "b2", pool = a2 })
    for _ = 1, 4 do
      assert.tensor_near(small_ref(xv), b2(x))
      assert.tensor_near(big_ref(xv), a2(x))
    end
    local sa, sb = a2:stats().pool, b2:stats().pool
    assert.are.equal(math.max(pa.high_water, pb.high_water), sa.high_water)
    assert.are.same({ sa.reserved, sa.high_water }, { sb.reserved, sb.high_water })   -- one pool, seen from either tree
    assert.are.equal(math.max(pa.reserved, pb.reserved), sa.reserved)
    assert.are.equal(2, a2:stats().replays)               -- (a warmup, a record, then replays: in turn, each tree's graphs hold)
    assert.are.equal(2, b2:stats().replays)
  end)

  it("makes an output stale at the next call of any tree sharing the pool, naming the tree that overwrote it", function()
    local a = gt.tree(big, { name = "prefill" })
    local b = gt.tree(small, { name = "decode", pool = a })
    for _ = 1, 3 do
      local ya = a(x)
      local keep = ya:clone()
      assert.tensor_near(big_ref(xv), ya)
      local yb = b(x)
      assert.error_matches(function() ya:tolist() end,
        "returned by tree 'prefill' %(.-%) was overwritten by a later call of tree 'decode' %(.-%), which shares its pool")
      assert.tensor_near(small_ref(xv), yb)
      assert.tensor_near(big_ref(xv), keep)                -- a clone is ordinary memory
      a(x)
      assert.error_matches(function() yb:tolist() end, "returned by tree 'decode' .* later call of tree 'prefill'")
    end
    -- a tree that joins the pool after the owner's call makes that call's outputs stale too
    local first = gt.tree(big, { name = "first" })
    local y1 = first(x)
    local joined = gt.tree(small, { name = "joined", pool = first })
    joined(x)
    assert.error_matches(function() y1:tolist() end, "later call of tree 'joined'")
    -- an output of one passed to the other is stale once the other's call begins: an error, not a wrong number
    local ya = a(x)
    assert.error_matches(function() b(ya) end, "returned by tree 'prefill' .* overwritten by a later call of tree 'decode'")
    assert.tensor_near(small_ref(xv), b(x))                -- and both trees still work
    assert.tensor_near(big_ref(xv), a(x))
  end)

  it("keeps the other tree right when one is trimmed or freed", function()
    local a = gt.tree(big, { name = "a" })
    local b = gt.tree(small, { name = "b", pool = a })
    run(a, x, 3); run(b, x, 3)
    local yb = b(x)
    a:trim(0)                                             -- b's graphs and its last outputs stay
    assert.tensor_near(small_ref(xv), yb)
    assert.tensor_near(small_ref(xv), b(x))
    assert.tensor_near(big_ref(xv), a(x))
    b:trim(0)
    assert.tensor_near(big_ref(xv), a(x))
    assert.tensor_near(small_ref(xv), run(b, x, 3))
    assert.tensor_near(big_ref(xv), run(a, x, 3))
    a = nil                                               -- the owner collected: the pool stays for b
    collectgarbage(); collectgarbage()
    local c = gt.tree(big, { name = "c", pool = b })     -- (a third tree joins the same pool)
    for _ = 1, 3 do
      assert.tensor_near(small_ref(xv), b(x))
      assert.tensor_near(big_ref(xv), c(x))
    end
    assert.is_true(b:stats().pool.reserved > 0)
    assert.are.equal(b:stats().pool.reserved, c:stats().pool.reserved)
  end)

  it("serves keyed trees too", function()
    local a = gt.tree(function(y, s) return ops.add(big(y), s) end,
      { name = "ka", key = function() return 1 end, patch = { 2 } })
    local b = gt.tree(function(y, s) return ops.mul(small(y), s) end, { name = "kb", key = function() return 1 end,
      patch = { 2 }, pool = a })
    for i = 1, 12 do
      local ra = a(x, i)
      assert.tensor_near(seq(N, function(k) return 6 * xv[k] * xv[k] + 3 * xv[k] + i end), ra)
      local rb = b(x, i)
      assert.tensor_near(seq(N, function(k) return (xv[k] + 1) * i end), rb)
      assert.error_matches(function() ra:tolist() end, "later call of tree 'kb'")
    end
    assert.is_true(a:stats().keyed.hits > 0 and b:stats().keyed.hits > 0)
  end)
end)
