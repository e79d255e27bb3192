-- arity_spec: a tree call passes its arguments and results through exactly,
-- whatever their number (none to more than four, nils and a trailing nil
-- included), for every kind of call: plain, inputs copied, keyed (its hits
-- rebuild the results without the body), bucketed (padded, results narrowed
-- back) and keyed with buckets.  (tree.lua carries up to four arguments
-- without a vararg function, more in a table: both ways are covered.)
local gt = require "gt"
local ops = gt.ops

-- relu(x), how many more arguments, x itself, then those arguments as given
local function body(x, ...)
  return ops.relu(x), select("#", ...), x, ...
end

local function count_key(_, ...) return select("#", ...) end
local function pack(...) return { n = select("#", ...), ... } end

local KINDS = {
  { "plain", {} },
  { "copied inputs", { copy_inputs = true } },
  { "keyed", { key = count_key } },
  { "bucketed", { buckets = { dim = 1, sizes = { 4 } } } },
  { "keyed, bucketed", { key = count_key, buckets = { dim = 1, sizes = { 4 } } } },
}
local MORE, NMORE = { 1, nil, "s", false, 2.5, nil }, 6   -- the arguments after x, holes included

describe("a tree call's arity", function()
  for _, kind in ipairs(KINDS) do
    local name, opts = kind[1], kind[2]
    it(name .. ": passes 1 to 7 arguments and 3 to 9 results through, nils included, on every visit", function()
      local step = gt.tree(body, opts)
      local x = gt.randn({ 3, 4 }, { seed = 3 })
      local want = ops.relu(x):tolist()
      for visit = 1, 5 do                       -- warm-up, record, replays (keyed: hits)
        for n = 0, NMORE do
          local r = pack(step(x, unpack(MORE, 1, n)))
          local where = ("%s, visit %d, %d more arguments"):format(name, visit, n)
          assert.are.equal(3 + n, r.n, where)
          assert.are.same(want, r[1]:tolist(), where)
          assert.are.equal(n, r[2], where)
          assert.are.same(x:tolist(), r[3]:tolist(), where)
          for i = 1, n do assert.are.equal(MORE[i], r[3 + i], where .. ", argument " .. (i + 1)) end
        end
      end
      if opts.key then
        local ks = step:stats().keyed
        assert.is_true(ks.hits >= 7, name .. ": keyed hits " .. ks.hits)
      end
    end)
  end

  it("calls the key function with exactly the call's arguments", function()
    local seen = {}
    local step = gt.tree(body, { key = function(...) seen[#seen + 1] = select("#", ...) return 1 end })
    local x = gt.randn({ 2, 4 }, { seed = 4 })
    for n = 0, NMORE do step(x, unpack(MORE, 1, n)) end
    assert.are.same({ 1, 2, 3, 4, 5, 6, 7 }, seen)
  end)
end)
