-- Differential fuzzing (spec/harness/fuzz.lua): random step functions in a tree against
-- the same functions run eagerly, with returned, kept and fed-back
-- intermediates and staged inputs.  Fixed seeds here; scripts/fuzz.sh runs more.
local gt = require "gt"
local F = require "spec.harness.fuzz"
local FW = require "spec.harness.fuzz_wide"

-- The mismatches of seeds first..last over `calls` calls each (a collection every gc_every seeds).
local function mismatches(first, last, calls, gc_every, fuzzer)
  local bad = {}
  for seed = first, last do
    local msg = (fuzzer or F).check(seed, calls)
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

-- (the keyed refusals and recording limits the wide programs meet warn: expected)
local function quiet()
  local warn
  before_each(function() warn = gt.on_warning; gt.on_warning = function() end end)
  after_each(function() gt.on_warning = warn end)
end

describe("trees against eager runs over more of the API (fuzz_wide)", function()
  -- views, row slices, in-place writes (into the inputs too), item() branches,
  -- gt.cond/gt.loop, syncs, clones, fills, norms, reductions, i32 ids; inputs
  -- fed back, fresh, refilled, in a table, one tensor as both, copied; swapped
  -- weights, buckets, keys, a low limit, two trees in a row, trims
  quiet()
  it("agree on 120 random step functions over 12 calls each, each mode among them", function()
    local modes = {}
    for seed = 1, 120 do local _, mode = FW.program(seed); modes[mode] = true end
    for _, m in ipairs(FW.MODES) do assert.is_true(modes[m], "no seed of mode " .. m) end
    assert.are.same({}, mismatches(1, 120, 12, 8, FW))
  end)
end)

describe("trees against eager runs, paths launched as one graph (fuzz_wide, steady)", function()
  quiet()
  it("agree on the steady programs of 400 seeds over 40 calls each, some calls launching their path as one graph", function()
    local bad, fused, n = {}, 0, 0
    for seed = 1, 400 do
      local _, mode = FW.program(seed)
      if mode == "steady" then
        n = n + 1
        local msg, s = FW.check(seed, 40)
        if msg then bad[#bad + 1] = msg else fused = fused + s.fused end
      end
    end
    assert.are.same({}, bad)
    assert.is_true(n >= 10, "only " .. n .. " steady seeds")
    assert.is_true(fused > 0, "no call launched its path as one graph")
  end)
end)

describe("trees against eager runs over more of the API, many seeds (fuzz_wide) #slow", function()
  quiet()
  it("agree on 1500 random step functions over 12 calls each", function()
    assert.are.same({}, mismatches(121, 1620, 12, 8, FW))
  end)
end)
