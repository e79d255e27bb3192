-- Device-side branches: gt.cond and gt.loop (DESIGN.md section 8).
local gt = require "gt"
require "gt.busted"
local S = require "spec.support"

local K = gt.compile([[
__global__ void axpb(float *y, const float *x, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}
__global__ void positive(int *p, const float *x, int n) {      // p = sum(x) > 0
  if (blockIdx.x == 0 && threadIdx.x == 0) { float s = 0; for (int i = 0; i < n; i++) s += x[i]; p[0] = s > 0; }
}
__global__ void above(float *p, const float *x, float t) { if (threadIdx.x == 0) p[0] = x[0] > t ? 1.0f : 0.0f; }
__global__ void halve(float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] *= 0.5f;
}
__global__ void big(unsigned char *p, const float *x, int n, float tol) {   // p = max |x| > tol
  if (blockIdx.x == 0 && threadIdx.x == 0) { float m = 0; for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i])); p[0] = m > tol; }
}
__global__ void count(int *c) { if (threadIdx.x == 0) c[0] += 1; }
__global__ void setv(int *p, int v) { if (threadIdx.x == 0) p[0] = v; }
]], { name = "cond_spec.cu" })

local N = 64
local function axpb(y, x, a, b) K.axpb(2, 32, y, x, x.numel, a, b) end
local function host_branch(x)          -- the same model, branched on the host
  local y = gt.tensor(x.shape)
  local s = 0
  for _, v in ipairs(x:tolist()) do s = s + v end
  if s > 0 then axpb(y, x, 2, 1) else axpb(y, x, -1, 3) end
  return y
end
local function device_branch(x)
  local p = gt.tensor({ 1 }, "i32")
  K.positive(1, 1, p, x, x.numel)
  local y = gt.tensor(x.shape)
  gt.cond(p, function() axpb(y, x, 2, 1) end, function() axpb(y, x, -1, 3) end)
  return y
end

describe("gt.cond", function()
  it("gives the host branch's results over random inputs, outside a tree and in warmup, record and replay", function()
    local step = gt.tree(device_branch)
    for seed = 1, 12 do
      local x = gt.randn({ N }, { seed = seed })
      local want = host_branch(x):tolist()
      assert.tensor_near(want, device_branch(x), 1e-6)
      assert.tensor_near(want, step(x), 1e-6)
    end
  end)

  it("is one node in a tree (no cut: both bodies are recorded once), which replays whichever way p goes", function()
    local step = gt.tree(device_branch)
    for seed = 1, 8 do step(gt.randn({ N }, { seed = seed })) end
    assert.nodes(step, 1)
    assert.recorded(step, 1)
    local s = step:stats()
    assert.are.same({ 8, 1, 6 }, { s.calls, s.warmups, s.replays })
    assert.truthy(s.node[0].label:find("if", 1, true) and s.node[0].label:find("else", 1, true), s.node[0].label)
  end)

  it("runs without an else body, and with an f32 or u8 condition (nonzero is true)", function()
    local step = gt.tree(function(x, t)
      local p = gt.tensor({ 1 }, "f32")
      K.above(1, 1, p, x, t)
      local y = x:clone()
      gt.cond(p, function() K.halve(2, 32, y, y.numel) end)
      return y
    end)
    local x = gt.from({ 4, 8 })
    for i = 1, 6 do
      local t = i % 2 == 0 and 1 or 10
      assert.tensor_near(t == 1 and { 2, 4 } or { 4, 8 }, step(x, t))
    end
    assert.nodes(step, 1)
    local b = gt.from({ 0 }, "u8")
    local ran = false
    gt.cond(b, function() ran = true end)
    assert.is_false(ran)
  end)

  it("nests: a cond inside a cond body is recorded into the same node", function()
    local function model(x, a, b)
      local p, q = gt.tensor({ 1 }, "i32"), gt.tensor({ 1 }, "i32")
      K.setv(1, 1, p, a)
      K.setv(1, 1, q, b)
      local y = gt.zeros(x.shape)
      gt.cond(p, function()
        axpb(y, x, 1, 10)
        gt.cond(q, function() axpb(y, y, 1, 100) end, function() axpb(y, y, 1, 1000) end)
      end, function()
        gt.cond(q, function() axpb(y, x, 1, 20) end)
      end)
      return y
    end
    local step = gt.tree(model)
    local x = gt.from({ 1, 2 })
    local want = { [11] = 111, [10] = 1011, [01] = 21, [00] = 0 }
    for round = 1, 3 do
      for _, ab in ipairs { 11, 10, 1, 0 } do
        local a, b = math.floor(ab / 10), ab % 10
        local w = want[ab]
        assert.tensor_near({ w == 0 and 0 or w, w == 0 and 0 or w + 1 }, step(x, a, b))
        assert.tensor_near({ w == 0 and 0 or w, w == 0 and 0 or w + 1 }, model(x, a, b))
      end
    end
    assert.nodes(step, 1)
    assert.truthy(step:stats().replays >= 8)
  end)
end)

describe("gt.loop", function()
  local function refine(x, tol, max)     -- halve x until max |x| <= tol
    local p = gt.tensor({ 1 }, "u8")
    local y = gt.tensor(x.shape)
    axpb(y, x, 1, 0)                     -- a kernel, not a copy node: an input at a new address is patched
    K.big(1, 1, p, y, y.numel, tol)
    gt.loop(p, function()
      K.halve(2, 32, y, y.numel)
      K.big(1, 1, p, y, y.numel, tol)
    end, max and { max = max } or nil)
    return y
  end
  local function host_refine(v, tol, max)
    local n = 0
    local function m() local r = 0 for _, e in ipairs(v) do r = math.max(r, math.abs(e)) end return r end
    while m() > tol and (not max or n < max) do
      for i = 1, #v do v[i] = v[i] * 0.5 end
      n = n + 1
    end
    return v
  end

  it("runs its body while p is nonzero, as the host loop does, in a tree as one node", function()
    local step = gt.tree(refine)
    for seed = 1, 8 do
      local x = gt.randn({ 16 }, { seed = seed, scale = 2 ^ (seed % 5) })
      local want = host_refine(x:tolist(), 0.25)
      assert.tensor_near(want, refine(x, 0.25), 1e-6)
      assert.tensor_near(want, step(x, 0.25), 1e-6)
    end
    assert.nodes(step, 1)
    assert.truthy(step:stats().replays >= 6)
  end)

  it("stops after max passes when max is given", function()
    local step = gt.tree(refine)
    local x = gt.from({ 64, -32 })
    for _ = 1, 4 do
      assert.tensor_near({ 8, -4 }, step(x, 0.001, 3))
      assert.tensor_near({ 8, -4 }, refine(x, 0.001, 3))
    end
    local c = gt.zeros({ 1 }, "i32")
    local forever = gt.from({ 1 }, "i32")
    gt.loop(forever, function() K.count(1, 1, c) end, { max = 5 })    -- p never changes: max ends it
    assert.equal(5, c:item())
    local s = gt.tree(function(c)
      local one = gt.tensor({ 1 }, "i32")
      K.setv(1, 1, one, 1)
      gt.loop(one, function() K.count(1, 1, c) end, { max = 7 })
    end)
    for _ = 1, 4 do s(c) end
    assert.equal(5 + 28, c:item())
    assert.nodes(s, 1)
  end)

  it("runs nested in a cond, and a cond nests in its body", function()
    local step = gt.tree(function(x, go)
      local p = gt.tensor({ 1 }, "i32")
      K.setv(1, 1, p, go)
      local y = x:clone()
      gt.cond(p, function()
        local q = gt.tensor({ 1 }, "u8")
        K.big(1, 1, q, y, y.numel, 1)
        gt.loop(q, function()
          gt.cond(p, function() K.halve(2, 32, y, y.numel) end)
          K.big(1, 1, q, y, y.numel, 1)
        end)
      end)
      return y
    end)
    local x = gt.from({ 16, 3 })
    for i = 1, 6 do assert.tensor_near(i % 2 == 1 and { 1, 0.1875 } or { 16, 3 }, step(x, i % 2)) end
    assert.nodes(step, 1)
  end)
end)

describe("gt.cond and gt.loop refuse", function()
  local p = gt.from({ 1 }, "i32")

  it("an error in a body: what was launched before the cond runs, as outside a tree (a write into an input stays)", function()
    local function body(x)
      K.halve(1, 32, x, x.numel)                       -- into the caller's tensor, before the cond
      local q = gt.tensor({ 1 }, "i32")
      K.setv(1, 1, q, 1)
      gt.cond(q, function() error("in the body") end)
      return x
    end
    local step = gt.tree(body)
    for _ = 1, 3 do
      local x, e = gt.from { 4, 8 }, gt.from { 4, 8 }
      assert.is_false((pcall(step, x)))
      assert.is_false((pcall(body, e)))
      assert.are.same(e:tolist(), x:tolist())
      assert.are.same({ 2, 4 }, x:tolist())
    end
  end)

  it("a tensor made in a body and read where that body may not have run, in every tree call; the tree goes on", function()
    if not gt.cond_nodes() then return end          -- (the host-branch fallback runs one body, as eager code)
    local ops = gt.ops
    local function flag(x) local q = gt.tensor({ 1 }, "i32"); K.positive(1, 1, q, x, x.numel); return q end
    local x = gt.from { 1, 2, 3 }
    local rebound = gt.tree(function(v)               -- each body makes its own y: the last one made wins in Lua
      local y
      gt.cond(flag(v), function() y = ops.mul(v, 2) end, function() y = ops.mul(v, 3) end)
      return ops.add(y, 1)
    end)
    local only_then = gt.tree(function(v)
      local y
      gt.cond(flag(v), function() y = ops.mul(v, 2) end)
      return ops.add(y, 1)
    end)
    local loop = gt.tree(function(v)
      local c = gt.tensor({ 1 }, "i32")
      K.setv(1, 1, c, 1)
      local z = v
      gt.loop(c, function() z = ops.add(z, 1); K.setv(1, 1, c, 0) end, { max = 4 })
      return ops.mul(z, 1)
    end)
    for _ = 1, 3 do                                    -- warmup, then what would record
      local ok, err = pcall(rebound, x)
      assert.is_false(ok)
      assert.matches("a tensor made in the else body of gt%.cond at .*cond_spec%.lua:%d+ is read after it by " ..
        "[%w_]+ %(launch %d+%), but the then body does not write it", err)
      ok, err = pcall(only_then, x)
      assert.matches("made in the then body of gt%.cond at .*cond_spec%.lua:%d+ is read after it .* the cond has no else " ..
        "body to write it: .* Make the tensor before gt%.cond and write into it in the body", err)
      ok, err = pcall(loop, x)
      assert.matches("a tensor made in the body of gt%.loop at .*cond_spec%.lua:%d+ is read after the loop", err)
    end
    -- made in one body, written by both: valid; and the written-into forms give eager results
    local both = gt.tree(function(v)
      local y
      gt.cond(flag(v), function() y = ops.mul(v, 2) end, function() y:copy(ops.mul(v, 3)) end)
      return ops.add(y, 1)
    end)
    local fixed = gt.tree(function(v)
      local y = gt.tensor(v.shape)
      gt.cond(flag(v), function() y:copy(ops.mul(v, 2)) end, function() y:copy(ops.mul(v, 3)) end)
      local c, z = gt.tensor({ 1 }, "i32"), v:clone()
      K.setv(1, 1, c, 1)
      gt.loop(c, function() z:copy(ops.add(z, 1)); K.setv(1, 1, c, 0) end, { max = 4 })
      return ops.add(y, z)
    end)
    for _, v in ipairs { { 1, 2, 3 }, { -1, -2, -3 }, { 1, 2, 3 }, { -1, -2, -3 }, { 4, 5, 6 } } do
      local xv = gt.from(v)
      local k = v[1] > 0 and 2 or 3
      assert.tensor_near({ k * v[1] + 1, k * v[2] + 1, k * v[3] + 1 }, both(xv))
      assert.tensor_near({ (k + 1) * v[1] + 1, (k + 1) * v[2] + 1, (k + 1) * v[3] + 1 }, fixed(xv))
    end
    assert.nodes(fixed, 1)
  end)

  it("a p that is not a one-element tensor of f32, i32, i64 or u8", function()
    assert.has_error(function() gt.cond(true, function() end) end)
    local ok, err = pcall(function() gt.cond(gt.zeros{ 2 }, function() end) end)
    assert.is_false(ok)
    assert.truthy(err:find("cond_spec.lua:%d+: gt.cond: p must be a one%-element tensor"), err)
    assert.truthy(err:find("f32 2 tensor", 1, true), err)
    ok, err = pcall(function() gt.loop(1, function() end) end)
    assert.truthy(err:find("gt.loop: p must be a one-element tensor", 1, true), err)
    ok, err = pcall(function() gt.cond(p, "then") end)
    assert.truthy(err:find("then_fn must be a function", 1, true), err)
    ok, err = pcall(function() gt.loop(p, function() end, { max = 0 }) end)
    assert.truthy(err:find("max must be a whole number", 1, true), err)
  end)

  it("a body that syncs the host (item), inside a tree and outside, and the tree still works", function()
    local ok, err = pcall(function() gt.cond(p, function() p:item() end) end)
    assert.is_false(ok)
    assert.truthy(err:find("cond_spec.lua:%d+: item inside the body of gt.cond at .*cond_spec.lua:%d+"), err)
    local bad = true
    local step = gt.tree(function(x)
      local q = gt.tensor({ 1 }, "i32")
      K.setv(1, 1, q, 1)
      local y = gt.tensor(x.shape)
      gt.cond(q, function() axpb(y, x, 1, 1); if bad then y:tolist() end end)
      return y
    end)
    local x = gt.from({ 1, 2 })
    ok, err = pcall(step, x)
    assert.is_false(ok)
    assert.truthy(err:find("tolist inside the body of gt.cond", 1, true), err)
    ok, err = pcall(function() gt.cond(p, function() gt.cut() end) end)
    assert.truthy(err:find("gt.cut inside the body", 1, true), err)
    bad = false
    for _ = 1, 3 do assert.tensor_near({ 2, 3 }, step(x)) end
    assert.nodes(step, 1)
  end)

  it("patches a condition tensor at a new address on replay, as any input: replays, no updates", function()
    local step = gt.tree(function(a, p)
      local y = gt.zeros { 2, 4 }
      gt.cond(p, function() y:copy(gt.ops.relu(a)) end, function() y:copy(gt.ops.mul(a, 2)) end)
      return y
    end)
    local x = gt.from { { 1, -1, 2, -2 }, { 3, -3, 4, -4 } }
    for i = 1, 8 do
      local y = step(x, gt.from({ i % 2 }, "i32"))
      if i % 2 == 1 then assert.tensor_near({ { 1, 0, 2, 0 }, { 3, 0, 4, 0 } }, y)
      else assert.tensor_near({ { 2, -2, 4, -4 }, { 6, -6, 8, -8 } }, y) end
    end
    local s = step:stats()
    if gt.cond_nodes() then
      assert.are.equal(0, s.updates)
      assert.are.equal(6, s.replays)
    end
  end)

  it("patches a condition tensor at a new address on a keyed hit too: the body stops running, each flag decides", function()
    local runs = 0
    local function body(a, p)
      runs = runs + 1
      local y = gt.zeros { 2, 4 }
      gt.cond(p, function() y:copy(gt.ops.relu(a)) end, function() y:copy(gt.ops.mul(a, 2)) end)
      return y
    end
    local step = gt.tree(body, { key = function() return 0 end })
    local x = gt.from { { 1, -1, 2, -2 }, { 3, -3, 4, -4 } }
    local flags = { 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 0 }
    for rep = 1, 3 do
      for i, f in ipairs(flags) do
        local y = step(x, gt.from({ f }, "i32"))          -- a fresh flag every call
        if f == 1 then assert.tensor_near({ { 1, 0, 2, 0 }, { 3, 0, 4, 0 } }, y, 0, rep .. ":" .. i)
        else assert.tensor_near({ { 2, -2, 4, -4 }, { 6, -6, 8, -8 } }, y, 0, rep .. ":" .. i) end
      end
    end
    local k = step:stats().keyed
    if gt.cond_nodes() then
      assert.is_true(runs <= 4, "the body ran " .. runs .. " times")
      assert.are.equal(3 * #flags - runs, k.hits)
      assert.are.same({}, k.refused)
    end
    local f1 = gt.from({ 1 }, "i32")                      -- the flag of the memoized path, its value changed
    for i = 1, 4 do
      f1:fill(i % 2)
      assert.tensor_near(i % 2 == 1 and { { 1, 0, 2, 0 }, { 3, 0, 4, 0 } } or { { 2, -2, 4, -4 }, { 6, -6, 8, -8 } }, step(x, f1))
    end
  end)

  it("a loop whose body writes p only in a nested gt.cond taken on a later pass ends, outside a tree and in one", function()
    local KK = gt.compile([[
__global__ void inc_flag(float *acc, unsigned char *flag) { if (threadIdx.x == 0) { acc[0] += 1; flag[0] = acc[0] >= 3; } }
__global__ void clear_i32(int *c) { if (threadIdx.x == 0) c[0] = 0; }
]], { name = "cond_spec_nested.cu" })
    local function f()
      local c, acc, flag = gt.full({ 1 }, 1, "i32"), gt.zeros { 1 }, gt.zeros({ 1 }, "u8")
      gt.loop(c, function()
        KK.inc_flag(1, 1, acc, flag)
        gt.cond(flag, function() KK.clear_i32(1, 1, c) end)
      end)
      return acc
    end
    assert.are.equal(3, f():item())
    local step = gt.tree(f)
    for _ = 1, 4 do assert.are.equal(3, step():item()) end
  end)

  it("a loop without max whose body never writes p, inside a tree (whatever p is) and outside", function()
    local step = gt.tree(function(x, v)
      local q = gt.tensor({ 1 }, "i32")
      K.setv(1, 1, q, v)
      gt.loop(q, function() K.halve(2, 32, x, x.numel) end)
    end)
    for _, v in ipairs { 0, 1 } do
      local ok, err = pcall(step, gt.from({ 1 }), v)
      assert.is_false(ok)
      assert.truthy(err:find("cond_spec.lua:%d+: gt.loop at .*: the body never writes p"), err)
    end
    local ok, err = pcall(function() gt.loop(gt.from({ 1 }, "i32"), function() K.halve(1, 1, gt.zeros{ 1 }, 1) end) end)
    assert.is_false(ok)
    assert.truthy(err:find("the body never writes p", 1, true), err)
    local c = gt.zeros({ 1 }, "i32")
    step = gt.tree(function(x)                  -- with max it may leave p alone
      local q = gt.tensor({ 1 }, "i32")
      K.setv(1, 1, q, 1)
      gt.loop(q, function() K.count(1, 1, c) end, { max = 2 })
      return x
    end)
    step(gt.from{ 1 })
    assert.equal(2, c:item())
  end)
end)

describe("gt.cond without conditional nodes (GTLUA_NO_COND=1)", function()
  it("branches on the host in a tree: a child per way, one warning, the same results", function()
    local script = os.tmpname() .. ".lua"
    S.spit(script, [[
local K = gt.compile("__global__ void setv(int *p, int v) { if (threadIdx.x == 0) p[0] = v; }\n" ..
  "__global__ void add(float *y, float c) { if (threadIdx.x == 0) y[0] += c; }")
local step = gt.tree(function(v)
  local p = gt.tensor({1}, "i32"); K.setv(1, 1, p, v)
  local y = gt.zeros({1})
  gt.cond(p, function() K.add(1, 1, y, 1) end, function() K.add(1, 1, y, 1); K.add(1, 1, y, 1) end)
  return y
end)
local out = {}
for i = 1, 6 do out[#out + 1] = step(i % 2):item() end
print(table.concat(out, " "), step:stats().nodes, gt.cond_nodes())
]])
    local status, out, err = S.gtlua(S.shq(script), { env = "GTLUA_NO_COND=1" })
    os.remove(script)
    assert.equal(0, status, err)
    assert.truthy(out:find("1 2 1 2 1 2\t3\tfalse", 1, true), out)
    local _, nwarn = err:gsub("branch on the host", "")
    assert.equal(1, nwarn, err)
    assert.truthy(err:find("GTLUA_NO_COND", 1, true), err)
  end)
end)

describe("gt.cond on cuda #gpu", function()
  it("builds conditional nodes (IF/ELSE and WHILE) on the H200's driver", function()
    local ok, why = gt.cond_nodes()
    assert.is_true(ok, why)
  end)
end)

describe("the cond bench", function()
  it("runs quick: item, gt.cond and the floor, gt.cond one node, the same outputs", function()
    local status, out, err = S.gtlua("scripts/bench/cond_bench.lua --quick")
    assert.equal(0, status, err)
    for _, mode in ipairs { "eager", "item", "cond", "floor" } do assert.truthy(out:find(" " .. mode .. " ", 1, true), out) end
    assert.truthy(out:find("cond: 1 node(s) (item: 3)", 1, true), out)
    assert.truthy(out:find("max |diff| 0;", 1, true), out)
  end)
end)
