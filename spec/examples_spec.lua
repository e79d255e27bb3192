-- examples_spec.lua - the examples run, use only the public API, and `make run`
-- (examples/quickstart.lua) shows a tree and what replay saves within one screen: measured on a
-- GPU; on the cpu backend, which has no launch saving to measure, the host work a replay replaces.
local S = require "spec.support"
local gtlua, slurp = S.gtlua, S.slurp
local BACKEND = require("gt").backend()          -- (the examples run as subprocesses on the same backend)

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
    assert.truthy(out:find("replayed results against eager: largest difference 0 (both modes)", 1, true), out)
    if BACKEND == "cpu" then
      -- no measured "saving" that is noise, no "cost 15%": what the backend can and cannot show
      assert.truthy(out:find("cpu backend: kernels run on the host as they are launched, so eager and replayed " ..
        "steps run the same", 1, true), out)
      assert.matches("what a replay replaces, counted: %d+ launches a step, each checked and dispatched by the host " ..
        "%([%d.]+ us\n  each, [%d.]+ us a step%), by 2 graph launches; the saving on a GPU", out)
      assert.truthy(out:find("shows only there: README.md, Numbers", 1, true), out)
      assert.falsy(out:find("saved %d+%%") or out:find("cost %d+%%"), out)
      assert.falsy(out:find("replay vs eager, measured", 1, true), out)
    else
      assert.matches("replay vs eager, measured: %d+ vs %d+ us to issue a step %([^)]+%), %d+ vs %d+ us per step done", out)
    end
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
    assert.matches("pow2 buckets +recordings +%d+ +hit rate +[%d.]+%% +pool +[%d.]+ KiB +rows +%d+ %(%+[%d.]+%%%) +recording", out)
    if BACKEND == "cpu" then                            -- why buckets need not be faster here, said with its numbers
      assert.matches("cpu backend: kernels run on the host, so the %d+%% more rows that buckets pad to cost host time", out)
      assert.truthy(out:find("On a GPU padded rows cost little device time", 1, true), out)
    else
      assert.falsy(out:find("cpu backend:", 1, true), out)
    end
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
