-- examples_spec.lua - the examples run, use only the public API, and `make run`
-- (examples/quickstart.lua) shows a tree and what replay saved within one screen.
local S = require "spec.support"
local gtlua, slurp = S.gtlua, S.slurp

local function lines(s)
  local t = {}
  for l in s:gmatch("([^\n]*)\n") do t[#t + 1] = l end
  return t
end

describe("examples", function()
  it("quickstart: a model with a branch, its tree drawn, the measured saving and where to go next, in one screen", function()
    local status, out, err = gtlua("examples/quickstart.lua", { env = "-u GTLUA_NO_GT" })
    assert.equal(0, status, err)
    local l = lines(out)
    assert.truthy(#l <= 24, out)
    for _, line in ipairs(l) do assert.truthy(#line <= 120, line) end
    assert.truthy(out:find("tree 'step' (examples/quickstart.lua:", 1, true), out)
    assert.truthy(out:find("├─ [1]", 1, true) and out:find("└─ [2]", 1, true), out)   -- the branch: two children
    assert.truthy(out:find("scale_shift", 1, true), out)                               -- the custom kernel, in a node
    assert.matches("replay vs eager, measured: %d+ vs %d+ us to issue a step %([^)]+%), %d+ vs %d+ us per step done", out)
    assert.truthy(out:find("--report=", 1, true) and out:find("--stats", 1, true), out)
    assert.truthy(out:find("examples/", 1, true), out)
    assert.falsy(out:find("compile on first use", 1, true), out)
  end)

  it("custom_kernel: gt.load and gt.compile, launched directly, bound and in a tree", function()
    local status, out, err = gtlua("examples/custom_kernel.lua", { env = "-u GTLUA_NO_GT" })
    assert.equal(0, status, err)
    assert.truthy(out:find("kernel swish(float * y, const float * x, float beta, int n)", 1, true), out)
    assert.truthy(out:find("add_bias", 1, true), out)
    assert.truthy(out:find("1.000 1.000 1.000 1.000", 1, true), out)
    assert.truthy(out:find("examples/custom_kernel.lua:%d+: no kernel 'swsh'"), out)
  end)

  it("branchy and dynamic_batch run", function()
    local status, out, err = gtlua("examples/branchy.lua", { env = "-u GTLUA_NO_GT" })
    assert.equal(0, status, err)
    assert.truthy(out:find("KiB reserved", 1, true), out)
    status, out, err = gtlua("examples/dynamic_batch.lua 12", { env = "-u GTLUA_NO_GT" })
    assert.equal(0, status, err)
    assert.truthy(out:find("pow2 buckets", 1, true), out)
    assert.truthy(out:find("s wall", 1, true), out)
  end)

  it("early_exit and refine: device-side branches give the host's answers, each tree one node", function()
    local status, out, err = gtlua("examples/early_exit.lua", { env = "-u GTLUA_NO_GT" })
    assert.equal(0, status, err)
    local n = 0
    for le, lt in out:gmatch("(%d+) of %d+ layers ran %(tree: (%d+)%); max difference 0\n") do
      assert.equal(le, lt)
      n = n + 1
    end
    assert.equal(6, n, out)
    assert.truthy(out:find("6 calls, 1 node, 1 recorded", 1, true), out)
    status, out, err = gtlua("examples/refine.lua", { env = "-u GTLUA_NO_GT" })
    assert.equal(0, status, err)
    n = 0
    for d, h in out:gmatch("(%d+) sweeps on the device, +(%d+) on the host; max difference 0\n") do
      assert.equal(d, h)
      n = n + 1
    end
    assert.equal(5, n, out)
    assert.truthy(out:find("5 calls, 1 node, 1 recorded", 1, true), out)
  end)

  it("use only the public API (no gt._ names) and say gt.compile or gt.load somewhere", function()
    local any_compile = false
    for _, name in ipairs { "quickstart", "branchy", "dynamic_batch", "custom_kernel", "early_exit", "refine" } do
      local src = slurp("examples/" .. name .. ".lua", true)
      assert.falsy(src:find("gt%._"), name)
      assert.falsy(src:find("os%.clock%(%)"), name)
      any_compile = any_compile or src:find("gt%.compile") ~= nil and src:find("gt%.load") ~= nil
    end
    assert.truthy(any_compile)
  end)
end)
