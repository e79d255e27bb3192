-- advise_spec.lua: tree:advise() and gtlua --advise answer the three questions with numbers and one recommendation each.
local gt = require "gt"
require "gt.busted"
local advise = require "gt.advise"
local S = require "spec.support"

local K = gt.compile([[
__global__ void twice(float *y, const float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = 2 * x[i];
}
]], { name = "advise_spec.cu" })
local E = gt.compile([[
__global__ void host_side(float *y, const float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i] + 1;
}
]], { name = "advise_eager.cu", graph = false })

local function twice(x, k)
  local y = gt.tensor(x.shape)
  ;(k or K.twice)(2, 32, y, x, x.numel)
  return y
end

local function finding(a, pat)
  for _, f in ipairs(a.findings) do if (f.title .. " " .. f.text):find(pat) then return f end end
end

describe("the advisor", function()
  it("picks bucket sizes from the observed histogram: fewest that pad least", function()
    assert.are.same({ 4, 8 }, advise._best_buckets({ 1, 2, 3, 4, 7, 8 }, { 1, 1, 1, 10, 1, 10 }, 2))
    assert.are.same({ 8 }, advise._best_buckets({ 2, 8 }, { 5, 5 }, 1))
    assert.are.same({ { name = "x", dims = { 8, 256 }, dtype = "f32" }, { name = "m.ids", dims = { 8 }, dtype = "i32" } },
      advise._parse_inputs("x 8x256 f32, m.ids 8 i32 -> 8x8 f32"))
  end)

  it("answers all three questions with numbers, one recommendation each", function()
    local t = gt.tree(function(x) return twice(twice(x)) end)
    local x = gt.zeros({ 64 })
    for _ = 1, 8 do t(x) end
    local quick = t:advise()                              -- not relaunched: the run's own sampled launches
    assert.is_number(quick.launch.device_us)
    assert.matches("sampled", quick.launch.device_how)
    assert.is_falsy(quick.findings[1].text:find("Not enough to tell", 1, true))
    local a = t:advise { measure = true }
    assert.are.same({ 1, 2, 3 }, { a.findings[1].q, a.findings[2].q, a.findings[3].q })
    for _, f in ipairs(a.findings) do
      assert.is_string(f.title); assert.is_string(f.text); assert.is_string(f.advice)
    end
    local l = a.launch
    assert.is_number(l.device_us); assert.is_number(l.eager_us)
    assert.are.equal(2, l.launches)
    if gt.backend() == "cpu" then                        -- judged on a GPU: no verdict, no replay issue time
      assert.is_nil(l.bound); assert.is_nil(l.replay_us); assert.is_number(l.replay_step)
    else
      assert.is_boolean(l.bound); assert.is_number(l.replay_us)
    end
    assert.truthy(a.findings[1].text:find("µs", 1, true))
    assert.truthy(a.findings[2].advice:find("no buckets needed", 1, true))
    assert.truthy(finding(a, "no sync points"))
  end)

  it("recommends buckets for many sizes, with the padding they cost", function()
    local t = gt.tree(function(x) return twice(x) end, { warn_shapes = false })
    for _, n in ipairs { 1, 2, 3, 5, 6, 7, 9, 12, 15, 16, 16, 16 } do t(gt.zeros({ n, 4 })) end
    local a = t:advise()
    local f = a.findings[2]
    assert.are.equal("warn", f.level)
    assert.truthy(f.text:find("x dim 1 takes 10 sizes", 1, true), f.text)
    assert.truthy(f.text:find("fixed: x dim 2 = 4", 1, true), f.text)
    local sizes = f.advice:match("buckets = { dim = 1, sizes = { ([%d, ]+) } }")
    assert.truthy(sizes, f.advice)
    assert.truthy(sizes:match("16$"))
    assert.truthy(f.advice:find("%d+%.%d%% padding"), f.advice)
    assert.truthy(a.shapes.padding <= 0.10)
  end)

  it("suggests gt.cond where an item() picks a branch, and names non-graphable kernels and gt.scope savings", function()
    local t = gt.tree(function(x)
      local h = twice(x)
      local keep = twice(h)                     -- held to the end: a gt.scope would free it
      local e = twice(keep, E.host_side)
      if gt.ops.sum(e):item() > 0 then return twice(e) end
      return e
    end)
    for i = 1, 6 do t(gt.full({ 4 }, i % 2 == 0 and 1 or -1)) end
    local a = t:advise()
    local cut = finding(a, "item")
    assert.truthy(cut, "an item cut finding")
    assert.truthy(cut.advice:find("gt.cond", 1, true), cut.advice)
    local eager = finding(a, "not graphable")
    assert.truthy(eager and eager.advice, "a non-graphable finding")
    local mem = finding(a, "gt.scope would give back")
    assert.truthy(mem, "a memory finding")
    assert.truthy(mem.text:find("%d+ B") or mem.text:find("KiB"), mem.text)
  end)

  it("lists each cut site after the same launches with its own count and its own advice", function()
    local l = {}
    local t = gt.tree(function(x, k)
      local h = twice(x)
      if k == 1 then l[1] = debug.getinfo(1, "l").currentline; h:item()
      elseif k == 2 then l[2] = debug.getinfo(1, "l").currentline; gt.sync()
      else l[3] = debug.getinfo(1, "l").currentline; gt.cut() end
      return twice(h)
    end)
    for i = 1, 10 do t(gt.ones { 1 }, i <= 5 and 1 or i <= 8 and 2 or 3) end
    local a = t:advise()
    local item = finding(a, "advise_spec%.lua:" .. l[1] .. " item")
    local sync = finding(a, "advise_spec%.lua:" .. l[2] .. " gt%.sync")
    local cut = finding(a, "gt%.cut at advise_spec%.lua:" .. l[3])
    assert.truthy(item and sync and cut, "three sites")
    assert.truthy(item.text:find("5 visits", 1, true), item.text)
    assert.truthy(sync.text:find("3 visits", 1, true), sync.text)
    assert.truthy(cut.text:find("2 visits", 1, true), cut.text)
    assert.truthy(sync.advice:find("Remove gt.sync", 1, true), sync.advice)
    assert.truthy(cut.advice:find("split", 1, true), cut.advice)
    assert.are.same({ 5, 3, 2 }, { a.breaks.sites[1].visits, a.breaks.sites[2].visits, a.breaks.sites[3].visits })
  end)

  it("prints the findings of every tree at exit: gtlua --advise", function()
    if not S.BIN then return pending("GTLUA_BIN is not set (run inside gtlua)") end
    local status, out, err = S.gtlua("--advise examples/branchy.lua")
    assert.are.equal(0, status, err)
    local at = out:find("gtlua --advise: 1 graph tree", 1, true)
    assert.truthy(at, out)
    local text = out:sub(at)
    for n = 1, 3 do assert.truthy(text:find("%] " .. n .. "%. "), text) end
    assert.truthy(text:find("Launch-bound? ", 1, true))
    assert.truthy(text:find("µs", 1, true))
    assert.truthy(text:find("gt.cond", 1, true))
    assert.is_true(select(2, text:gsub("\n       %-> ", "")) >= 3)
    local plain = os.tmpname()
    S.spit(plain, "local x = gt.zeros { 2 }\n")
    status, out = S.gtlua("--advise " .. S.shq(plain))
    os.remove(plain)
    assert.are.equal(0, status)
    assert.truthy(out:find("No graph trees were made", 1, true), out)
  end)

  -- issue 43, point 3: every figure is a number or says why it is missing; the cpu backend does not judge
  it("never prints a placeholder: a figure it cannot measure is named, with why", function()
    local t = gt.tree(function(x) return twice(twice(x)) end, { warmup = 3 })
    local x = gt.zeros({ 64 })
    for _ = 1, 4 do t(x) end                      -- calls 2 and 3 eager, 4 records: no call replayed yet
    for _, a in ipairs { t:advise(), t:advise { measure = true } } do
      for _, f in ipairs(a.findings) do
        local body = f.text .. " " .. f.advice
        assert.falsy(body:find("?", 1, true), body)
        assert.falsy(f.title:gsub("%?$", ""):find("?", 1, true), f.title)
      end
      local one = a.findings[1].text
      assert.truthy(one:find("not measured: no call of this run replayed all of its segments", 1, true), one)
      assert.falsy(one:find("1.0x", 1, true), one)
    end
    -- without a device time either (no sampled launch, no relaunch): said, with why
    local r = advise.launch(t, { nodes = 0, node = {}, calls = 4 }, false)
    assert.truthy(r.missing.device:find("relaunched to time them only at exit", 1, true), r.missing.device)
  end)

  it("on the cpu backend says plainly that launch-boundness is judged on a GPU, and gives no verdict", function()
    local t = gt.tree(function(x) return twice(twice(x)) end)
    local x = gt.zeros({ 64 })
    for _ = 1, 8 do t(x) end
    local f = t:advise { measure = true }.findings[1]
    local all = f.text .. " " .. f.advice
    if gt.backend() == "cpu" then
      assert.truthy(f.text:find("^Judged on a GPU: on the cpu backend kernels run on the host as they are launched"), f.text)
      assert.truthy(f.advice:find("Judge launch-boundness on a GPU", 1, true), f.advice)
      for _, verdict in ipairs { "Yes, launch-bound", "No, device-bound", "A tree is optional", "Keep the tree on",
                                 "faster here", "Replay issues it in" } do
        assert.falsy(all:find(verdict, 1, true), verdict .. " in: " .. all)
      end
      assert.are.equal("info", f.level)
    else
      assert.truthy(f.text:find("^Yes, launch%-bound") or f.text:find("^No, device%-bound"), f.text)
      assert.falsy(all:find("Judged on a GPU", 1, true), all)
    end
  end)

  it("numbers its findings once, in the text and in the HTML report", function()
    local t = gt.tree(function(x)
      local h = twice(x)
      local keep = twice(h)
      if gt.ops.sum(keep):item() > 0 then gt.cut() end
      return twice(keep)
    end)
    for i = 1, 6 do t(gt.full({ 4 }, i % 2 == 0 and 1 or -1)) end
    local a = t:advise()
    local qs = {}
    for i, f in ipairs(a.findings) do
      assert.are.equal(i, f.n)
      qs[f.q] = (qs[f.q] or 0) + 1
    end
    assert.is_true(#a.findings >= 4 and qs[3] >= 2, "several findings answer question 3")
    local text = tostring(a)
    for i = 1, #a.findings do
      local _, c = text:gsub("\n%[..%] " .. i .. "%. ", "")
      assert.are.equal(1, c, text)
    end
    assert.falsy(text:find("%] Q%d"), text)
    local html = t:report()
    for i = 1, #a.findings do assert.truthy(html:find('<b class="q">' .. i .. '.</b>', 1, true), "finding " .. i) end
    assert.falsy(html:find('<b class="q">Q', 1, true))
  end)

  -- issue 43, point 7: sibling paths that record the same leading launches want a gt.cut() where they part
  it("advises gt.cut() where a host branch without one parts: sibling roots that record the same launches", function()
    local relu = gt.compile([[
__global__ void relu_k(float *y, const float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i] > 0 ? x[i] : 0;
}]], { name = "advise_relu.cu" }).relu_k
    local function body(x, route)
      local h = twice(twice(x))
      if route == "a" then h = twice(h, relu) end             -- a branch on the host, no gt.cut() before it
      return twice(h)
    end
    local t = gt.tree(body)
    local x = gt.ones({ 64 })
    for i = 1, 8 do t(x, i % 2 == 0 and "a" or "b") end
    local s = t:stats()
    assert.are.equal(2, #s.roots)
    local a = t:advise()
    local f = finding(a, "recorded twice")
    assert.truthy(f, tostring(a))
    assert.are.equal("warn", f.level)
    assert.truthy(f.text:find("begin with the same 2 leading launches (twice twice) and part after them", 1, true), f.text)
    assert.truthy(f.advice:find("Add gt.cut() where the paths part (after the code that launches twice, before the " ..
      "branch that picks", 1, true), f.advice)
    assert.falsy(tostring(a):find("Nothing to change", 1, true), tostring(a))
    -- with the cut, one shared node and no such finding
    local cut = gt.tree(function(y, route)
      local h = twice(twice(y))
      gt.cut()
      if route == "a" then h = twice(h, relu) end
      return twice(h)
    end)
    for i = 1, 8 do cut(x, i % 2 == 0 and "a" or "b") end
    assert.are.equal(1, #cut:stats().roots)
    assert.is_nil(finding(cut:advise(), "recorded twice"))
    -- siblings under a shared node are found the same way
    local deep = gt.tree(function(y, route)
      local h = twice(y)
      gt.cut()
      return body(h, route)
    end)
    for i = 1, 8 do deep(x, i % 2 == 0 and "a" or "b") end
    local g = finding(deep:advise(), "recorded twice")
    assert.truthy(g and g.text:find(", siblings,", 1, true), g and g.text)
  end)
end)

