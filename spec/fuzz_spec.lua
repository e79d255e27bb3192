-- Differential fuzzing (spec/fuzz.lua): random step functions in a tree against
-- the same functions run eagerly, with returned, kept and fed-back
-- intermediates and staged inputs.  Fixed seeds here; scripts/fuzz.sh runs more.
local F = require "spec.fuzz"

describe("trees against eager runs (fuzz)", function()
  it("agree on 60 random step functions over 10 calls each, counting every visit once", function()
    local bad = {}
    for seed = 1, 60 do
      local msg = F.check(seed, 10)
      if msg then bad[#bad + 1] = msg end
    end
    assert.are.same({}, bad)
  end)
end)

describe("trees against eager runs, many seeds (fuzz) #slow", function()
  it("agree on 2000 random step functions over 16 calls each", function()
    local bad = {}
    for seed = 61, 2060 do
      local msg = F.check(seed, 16)
      if msg then bad[#bad + 1] = msg end
      if seed % 8 == 0 then collectgarbage() end
    end
    assert.are.same({}, bad)
  end)
end)
