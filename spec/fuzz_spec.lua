-- Differential fuzzing (spec/fuzz.lua): random step functions in a tree against
-- the same functions run eagerly, with returned, kept and fed-back
-- intermediates and staged inputs.  Fixed seeds here; scripts/fuzz.sh runs more.
local F = require "spec.fuzz"

-- The mismatches of seeds first..last over `calls` calls each (a collection every gc_every seeds).
local function mismatches(first, last, calls, gc_every)
  local bad = {}
  for seed = first, last do
    local msg = F.check(seed, calls)
    if msg then bad[#bad + 1] = msg end
    if gc_every and seed % gc_every == 0 then collectgarbage() end
  end
  return bad
end

describe("trees against eager runs (fuzz)", function()
  it("agree on 60 random step functions over 10 calls each, counting every visit once", function()
    assert.are.same({}, mismatches(1, 60, 10))
  end)
end)

describe("trees against eager runs, many seeds (fuzz) #slow", function()
  it("agree on 2000 random step functions over 16 calls each", function()
    assert.are.same({}, mismatches(61, 2060, 16, 8))
  end)
end)
