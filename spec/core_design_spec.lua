-- An independent conformance audit of DESIGN.md sections 2-7 (backends,
-- kernels, tensors, trees, the pool and lifetimes, dynamic shapes): each spec
-- checks one statement of the design, read literally, that no other spec pins.
local gt = require "gt"
require "gt.busted"

local S = require "spec.support"
local ops = gt.ops

local K = gt.compile([[
__device__ float twice_of(float v) { return 2 * v; }
__global__ void axpb(float *y, const float *x, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}
__global__ void mulw(float *y, const float *x, const float *w, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i] * w[i];
}
__global__ void smem_twice(float *y, const float *x, int n) {
  extern __shared__ float buf[];
  int i = threadIdx.x;
  if (i < n) buf[i] = x[i];
  __syncthreads();
  if (i < n) y[i] = twice_of(buf[i]);
}
__global__ void colsum(float *y, const float *x, int rows, int cols) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < cols) { float s = 0; for (int r = 0; r < rows; r++) s += x[r * cols + c]; y[c] = s; }
}
]], { name = "core_design_spec.cu" })

local E = gt.compile([[
__global__ void plus10(float *y, const float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i] + 10;
}
]], { name = "design_a_eager.cu", graph = false })

local function axpb(x, a, b)
  local y = gt.tensor(x.shape)
  K.axpb(1, 32, y, x, x.numel, a, b)
  return y
end
local function seq(n, f) local t = {} for i = 1, n do t[i] = f(i) end return t end

-- Runs f with gt.on_warning collecting the warnings; returns them.
local function warnings_of(f)
  local seen, old = {}, gt.on_warning
  gt.on_warning = function(m) seen[#seen + 1] = m end
  local ok, err = pcall(f)
  gt.on_warning = old
  assert(ok, err)
  return seen
end

-- The kinds of every call of a tree, one string a call: w(armup) r(ecord) p (replay) u(pdate) e(ager).
local function kinds(tree)
  local out = {}
  for i, c in ipairs(tree:history()) do
    out[i] = ("w"):rep(c.warmups) .. ("r"):rep(c.records) .. ("p"):rep(c.replays) ..
             ("u"):rep(c.updates) .. ("e"):rep(c.eager)
  end
  return out
end

local function line() return debug.getinfo(2, "l").currentline end

describe("DESIGN 2-4: backends, kernels, tensors #design", function()
  it("2 backends: gt.backend() names the active one; GTLUA_BACKEND and --backend choose it, auto picks cuda or cpu", function()
    local b = gt.backend()
    assert.is_true(b == "cpu" or b == "cuda", "gt.backend() = " .. tostring(b))
    local env = os.getenv("GTLUA_BACKEND")
    if env == "cpu" or env == "cuda" then assert.are.equal(env, b) end
    local st, out = S.gtlua("-e 'print(gt.backend())'", { env = "GTLUA_BACKEND=cpu" })
    assert.are.equal(0, st)
    assert.are.equal("cpu\n", out)
    st, out = S.gtlua("--backend=cpu -e 'print(gt.backend())'", { env = "GTLUA_BACKEND=" .. b })
    assert.are.equal(0, st)
    assert.are.equal("cpu\n", out)
    st, out = S.gtlua("--backend=auto -e 'print(gt.backend())'")
    assert.are.equal(0, st)
    assert.is_true(out == "cpu\n" or out == "cuda\n", out)
  end)

  it("3 kernels: one kernel object per __global__ function (a __device__ helper is none); a bad launch in a tree call raises before anything is queued", function()
    local names = {}
    for name in pairs(K) do names[#names + 1] = name end
    table.sort(names)
    assert.are.same({ "axpb", "colsum", "mulw", "smem_twice" }, names)
    assert.is_false(pcall(function() return K.twice_of end))
    local bad = false
    local step = gt.tree(function(x)
      local y = gt.zeros(x.shape)
      if bad then
        local ok, err = pcall(K.axpb, 1, 32, y, x, x.numel, 5)          -- one argument short
        assert.is_false(ok)
        assert.matches("axpb", err)
        ok = pcall(K.axpb, 1, 32, y, x, "n", 5, 5)                      -- a string for int n
        assert.is_false(ok)
      end
      K.axpb(1, 32, y, x, x.numel, 2, 1)
      return y
    end)
    local x = gt.from { 1, 2, 3 }
    for i = 1, 6 do
      bad = i >= 4
      assert.tensor_near({ 3, 5, 7 }, step(x))
    end
    local s = step:stats()
    assert.are.same({ 1, 1, 4 }, { s.nodes, s.recorded, s.replays })   -- the refused launches queued nothing
  end)

  it("4 tensors: dtype defaults to f32; tensor/zeros/ones/full/from take f32, i32, i64, u8; shape, dtype, numel", function()
    for _, dt in ipairs { "f32", "i32", "i64", "u8" } do
      local t = gt.from({ { 1, 2, 3 }, { 4, 5, 6 } }, dt)
      assert.are.same({ dt, { 2, 3 }, 6 }, { t.dtype, t.shape, t.numel })
      assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, t:tolist())
      assert.are.equal(dt, gt.tensor({ 4 }, dt).dtype)
      assert.are.same({ 0, 0 }, gt.zeros({ 2 }, dt):tolist())
      assert.are.same({ 1, 1 }, gt.ones({ 2 }, dt):tolist())
      assert.are.same({ { 7, 7 } }, gt.full({ 1, 2 }, 7, dt):tolist())
    end
    for _, t in ipairs { gt.tensor { 2 }, gt.zeros { 2 }, gt.ones { 2 }, gt.full({ 2 }, 1), gt.from { 1, 2 }, gt.randn { 2 } } do
      assert.are.equal("f32", t.dtype)
    end
    assert.are.same({ 2, 3, 4 }, gt.zeros { 2, 3, 4 }.shape)
    assert.are.equal(24, gt.zeros { 2, 3, 4 }.numel)
  end)

  it("4 tensors: randn with {seed=} gives the same values for one seed, others for another, and takes dtype", function()
    local a, b, c = gt.randn({ 64 }, { seed = 5 }), gt.randn({ 64 }, { seed = 5 }), gt.randn({ 64 }, { seed = 6 })
    assert.are.same(a:tolist(), b:tolist())
    assert.are_not.same(a:tolist(), c:tolist())
    assert.are.equal("f32", gt.randn({ 2 }, { seed = 1, dtype = "f32" }).dtype)
    local mean = 0
    for _, v in ipairs(a:tolist()) do mean = mean + v / 64 end
    assert.is_true(math.abs(mean) < 0.6, "mean " .. mean)
  end)

  it("4 tensors: tolist is nested like the shape, item, narrow (1-based, any dim) and view share the buffer", function()
    local t = gt.from { { { 1, 2 }, { 3, 4 } }, { { 5, 6 }, { 7, 8 } } }
    assert.are.same({ { { 1, 2 }, { 3, 4 } }, { { 5, 6 }, { 7, 8 } } }, t:tolist())
    assert.are.equal(5, gt.from { 5 }:item())
    local m = gt.from { { 1, 2, 3 }, { 4, 5, 6 } }
    local n = m:narrow(2, 2, 2)
    assert.are.same({ 2, 2 }, n.shape)
    assert.are.same({ { 2, 3 }, { 5, 6 } }, n:tolist())
    assert.are.same({ { 4, 5, 6 } }, m:narrow(1, 2, 1):tolist())
    assert.are.same({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, m:view { 3, 2 }:tolist())
    m:view { 6 }:narrow(1, 6, 1):fill(60)                         -- a write through a view reaches the base
    assert.are.equal(60, m:tolist()[2][3])
  end)

  it("4 tensors: fill, copy from a tensor and from a table, clone is a copy, static() returns t itself, tostring's last line", function()
    local a = gt.tensor { 3 }
    a:fill(2.5)
    assert.are.same({ 2.5, 2.5, 2.5 }, a:tolist())
    local c = a:clone()
    a:copy(gt.from { 1, 2, 3 })
    assert.are.same({ 1, 2, 3 }, a:tolist())
    assert.are.same({ 2.5, 2.5, 2.5 }, c:tolist())
    a:copy { 7, 8, 9 }
    assert.are.same({ 7, 8, 9 }, a:tolist())
    local w = gt.from { 1, 2 }
    assert.is_true(rawequal(w, w:static()))
    local s = tostring(gt.from { { 1, 2, 3 }, { 4, 5, 6 } })
    assert.matches("4", s)
    assert.is_truthy(s:find("[gt.f32 2x3 " .. gt.backend() .. "]", 1, true), s)
    assert.matches("%[gt%.f32 2x3 " .. gt.backend() .. "%]%s*$", s)
    assert.matches("%[gt%.i32 4 " .. gt.backend() .. "%]%s*$", tostring(gt.from({ 1, 2, 3, 4 }, "i32")))
  end)
end)

describe("DESIGN 5: trees #design", function()
  it("5 key: two Lua branches launching one kernel on the same shapes with other scalars are one node, each branch's values right", function()
    local step = gt.tree(function(x, route)
      if route == "a" then return axpb(x, 2, 1) end
      return axpb(x, 3, 5)
    end)
    local x = gt.from { 1, 2, 3 }
    for i = 1, 10 do
      local r = i % 2 == 0 and "a" or "b"
      assert.tensor_near(r == "a" and { 3, 5, 7 } or { 8, 11, 14 }, step(x, r))
    end
    local s = step:stats()
    assert.are.same({ 1, 1, 1, 8 }, { s.nodes, s.recorded, s.warmups, s.replays })
  end)

  it("5 key: a tensor argument's role is in the key: the same launches with a static and an external tensor are two nodes", function()
    local W = gt.from { 1, 2, 3 }:static()
    local step = gt.tree(function(x, w) local y = gt.tensor(x.shape); K.mulw(1, 32, y, x, w, x.numel); return y end)
    local x = gt.from { 2, 2, 2 }
    for i = 1, 4 do
      assert.tensor_near({ 2, 4, 6 }, step(x, W))
      assert.tensor_near({ 2 * i, 2 * i, 2 * i }, step(x, gt.from { i, i, i }))   -- external: patched, any address
    end
    local s = step:stats()
    assert.are.same({ 2, 2, 0, 4 }, { s.nodes, s.recorded, s.updates, s.replays })
  end)

  it("5 roles: a path tensor (made by an earlier node) and an external tensor in one launch are two children, each right", function()
    local ext = gt.from { 10, 20, 30 }
    local step = gt.tree(function(x, use_ext)
      local h = axpb(x, 2, 0)
      gt.cut()
      return axpb(use_ext and ext or h, 1, 1)
    end)
    local x = gt.from { 1, 2, 3 }
    for i = 1, 8 do
      local u = i % 2 == 0
      assert.tensor_near(u and { 11, 21, 31 } or { 3, 5, 7 }, step(x, u))
    end
    local s = step:stats()
    assert.are.same({ 3, 2, 3 }, { s.nodes, #s.node[0].children, s.recorded })
    assert.are.equal(2 * 8 - 3 - 3, s.replays)                      -- root: 1 warmup, 1 record; children: w, r each
  end)

  it("5 key: dynamic shared bytes are in the key: another size is another node, each replays right", function()
    local smem = 64
    local step = gt.tree(function(x)
      local y = gt.tensor(x.shape)
      K.smem_twice:config(1, 32, smem)(y, x, x.numel)
      return y
    end)
    local x = gt.from { 1, 2, 3 }
    for i = 1, 8 do
      smem = i % 2 == 0 and 64 or 128
      assert.tensor_near({ 2, 4, 6 }, step(x))
    end
    local s = step:stats()
    assert.are.same({ 2, 2, 4 }, { s.nodes, s.recorded, s.replays })
  end)

  it("5 lifecycle: warmup = 3: every node warms up three visits, records on the fourth, replays after", function()
    local step = gt.tree(function(x) local h = axpb(x, 2, 0); gt.cut(); return axpb(h, 1, 1) end, { warmup = 3 })
    local x = gt.from { 1, 2 }
    for _ = 1, 6 do assert.tensor_near({ 3, 5 }, step(x)) end
    assert.are.same({ "ww", "ww", "ww", "rr", "pp", "pp" }, kinds(step))
    local n = step:stats().node[1]
    assert.are.same({ 6, 3, true, 2 }, { n.visits, n.warmups, n.recorded, n.replays })
  end)

  it("5 lifecycle: a child records once its parent is recorded or replayed, or is a skipped segment on planned memory (as built)", function()
    -- DESIGN 5: "A node records only when its parent was recorded or replayed in the
    -- same call (a warmed-up parent leaves its tensors at unplanned addresses)".
    -- DESIGN 7, Skips: a segment that cannot be graphed
    -- runs eagerly at its planned addresses once its own parent is planned, so its
    -- child records (one kernel kept out of graphs does not keep the rest of the
    -- path out); after a warmed-up parent the child warms up again.
    local step = gt.tree(function(x)
      local h = axpb(x, 2, 0)
      gt.cut()
      local e = gt.tensor(x.shape)
      E.plus10(1, 32, e, h, x.numel)                 -- the parent: eager on every visit
      gt.cut()
      return axpb(e, 1, 1)                           -- the child
    end)
    local x = gt.from { 1, 2, 3 }
    for _ = 1, 5 do assert.tensor_near({ 13, 15, 17 }, step(x)) end
    local s = step:stats()
    assert.are.same(3, s.nodes)
    assert.is_false(s.node[1].recorded)
    assert.are.same({ 0, 1, 4 }, { s.node[1].replays, s.node[1].warmups, s.node[1].eager })
    local child = s.node[2]
    assert.are.same(1, child.parent)
    assert.are.same({ 1, true, 3 }, { child.warmups, child.recorded, child.replays })
    -- a warmed-up parent (warmup = 2 on every node): its child warms up in the same calls
    local w = gt.tree(function(x) local h = axpb(x, 2, 0); gt.cut(); return axpb(h, 1, 1) end, { warmup = 2 })
    for _ = 1, 4 do assert.tensor_near({ 3, 5, 7 }, w(x)) end
    assert.are.same({ "ww", "ww", "rr", "pp" }, kinds(w))
  end)

  it("5 counting: every visit of every node is exactly one of warmup, record, replay, eager (skips and limits included); totals are the sums", function()
    local step = gt.tree(function(x, r)
      local h = axpb(x, 2, 0)
      gt.cut()
      if r == 1 then
        local e = gt.tensor(x.shape)
        E.plus10(1, 32, e, h, x.numel)
        h = e
      elseif r == 2 then
        h = ops.relu(h)
      else
        h = ops.tanh(h)                              -- a third path: past max_recordings, eager
      end
      gt.cut()
      return axpb(h, 1, 1)
    end, { max_recordings = 4 })
    local x = gt.from { 1, 2, 3 }
    local seen = warnings_of(function()
      for i = 1, 24 do step(x, i % 3 + 1) end
    end)
    assert.are.equal(1, #seen)
    local s = step:stats()
    local sum = { visits = 0, warmups = 0, replays = 0, eager = 0, recorded = 0 }
    for id = 0, s.nodes - 1 do
      local n = s.node[id]
      local rec = n.recorded and 1 or 0
      assert.are.equal(0, n.updates)
      assert.are.equal(n.visits, n.warmups + rec + n.replays + n.eager, "node " .. id)
      sum.visits, sum.warmups, sum.replays = sum.visits + n.visits, sum.warmups + n.warmups, sum.replays + n.replays
      sum.eager, sum.recorded = sum.eager + n.eager, sum.recorded + rec
    end
    assert.are.same({ sum.warmups, sum.replays, sum.eager, sum.recorded }, { s.warmups, s.replays, s.eager, s.recorded })
    assert.are.equal(3 * s.calls, sum.visits)
    assert.are.equal(24, s.calls)
    assert.is_true(s.recorded <= 4)
    for _, k in ipairs(kinds(step)) do assert.are.equal(3, #k) end   -- each call: one kind per segment
  end)

  it("5 calls feeding calls: h = step({h = h}) (a tensor in a table argument, one level deep) stays one node deep", function()
    local step = gt.tree(function(t) return { h = axpb(t.h, 1, 1) } end)
    local h = { h = gt.zeros { 8 } }
    for _ = 1, 50 do h = step(h) end
    assert.tensor_near(seq(8, function() return 50 end), h.h)
    local s = step:stats()
    assert.are.same({ 1, 1, 48 }, { s.nodes, s.recorded, s.replays })
  end)

  it("5 calls feeding calls: an output fed back and written in place by the call gives eager results, one node", function()
    local function body(h)
      K.axpb(1, 32, h, h, h.numel, 2, 0)               -- the call overwrites its input
      return axpb(h, 1, 1), h
    end
    local step = gt.tree(body)
    local h, e = gt.from { 1, 2 }, gt.from { 1, 2 }
    for _ = 1, 8 do
      local y, ey
      y, h = step(h)
      ey, e = body(e)
      assert.tensor_near(ey:tolist(), y)
      assert.tensor_near(e:tolist(), h)
    end
    assert.are.equal(1, step:stats().nodes)
  end)

  it("5 keyed: a hit counts as a replay of each node of its path", function()
    local step = gt.tree(function(x) local y = ops.relu(x); gt.cut(); return ops.add(y, 1) end,
      { key = function() return 1 end })
    local x = gt.from { -1, 2 }
    for _ = 1, 3 do step(x) end                                     -- warmup, record, replay: memoized
    local before = step:stats()
    for _ = 1, 5 do assert.tensor_near({ 1, 3 }, step(x)) end
    local s = step:stats()
    assert.are.equal(5, s.keyed.hits - before.keyed.hits)
    assert.are.equal(10, s.replays - before.replays)
    assert.are.same({ 6, 6 }, { s.node[0].replays, s.node[1].replays })
    assert.are.same({ 8, 8 }, { s.node[0].visits, s.node[1].visits })
  end)

  it("5 keyed: stats().keyed is { hits, misses, verified, refused }; the body's side effects happen only on calls that run it", function()
    local runs = 0
    local step = gt.tree(function(x, r) runs = runs + 1; return ops.add(ops.relu(x), r) end,
      { key = function(_, r) return r end, verify = 4 })
    local x = gt.from { -1, 2 }
    for i = 1, 40 do
      local r = i <= 20 and 1 or 2
      assert.tensor_near({ r, 2 + r }, step(x, r))
    end
    local k = step:stats().keyed
    assert.are.equal("number", type(k.hits))
    assert.are.equal("number", type(k.misses))
    assert.are.equal("number", type(k.verified))
    assert.are.same({}, k.refused)
    assert.are.equal(40, k.hits + k.misses + k.verified)
    assert.are.equal(runs, k.misses + k.verified)                 -- the body ran on misses and verified calls only
    assert.is_true(k.hits >= 20, "hits " .. k.hits)
    assert.is_true(k.verified >= 5, "verified " .. k.verified)
  end)

  it("5 keyed: verify = 3 runs the body on every 3rd keyed call of a memoized path", function()
    local runs = 0
    local step = gt.tree(function(x) runs = runs + 1; return ops.relu(x) end, { key = function() return 1 end, verify = 3 })
    local x = gt.from { -1, 2 }
    for _ = 1, 3 do step(x) end                                     -- warmup, record, replay: memoized
    assert.are.equal(3, runs)
    local ran = {}
    for i = 1, 30 do
      local before = runs
      assert.tensor_near({ 0, 2 }, step(x))
      ran[#ran + 1] = runs > before and 1 or 0
    end
    assert.are.equal(10, runs - 3)
    assert.are.equal(10, step:stats().keyed.verified)
    for i = 1, 28 do assert.are.equal(1, ran[i] + ran[i + 1] + ran[i + 2], "calls " .. i .. ".." .. i + 2) end
  end)

  it("5 keyed: a number argument not listed in patch is part of the key: each new value runs the body, a value seen again hits", function()
    local runs = 0
    local keyed = gt.tree(function(x, s) runs = runs + 1; return ops.mul(x, s) end, { key = function() return 1 end })
    local x = gt.from { 1, 2 }
    for i = 1, 6 do assert.tensor_near({ i, 2 * i }, keyed(x, i)) end       -- a new value: the body runs
    assert.are.same({ 6, 0 }, { runs, keyed:stats().keyed.hits })
    for _ = 1, 3 do assert.tensor_near({ 6, 12 }, keyed(x, 6)) end           -- a value seen: hits
    assert.are.equal(6, runs)
  end)

  it("5 keyed: a number listed in patch is patched on hits: once the path was recorded and replayed, new values never run the body", function()
    local runs, ran = 0, {}
    local patched = gt.tree(function(x, s) runs = runs + 1; ran[#ran + 1] = s; return ops.mul(x, s) end,
      { key = function() return 1 end, patch = { 2 } })
    local x = gt.from { 1, 2 }
    for i = 1, 12 do assert.tensor_near({ i, 2 * i }, patched(x, i)) end
    -- calls 1-3: warmup, record, replay (the path memoized: the body traced, then run as usual); 4: the
    -- first other number confirms the trace; 5-12: hits
    assert.are.equal("1,2,3,3,4", table.concat(ran, ","))
    assert.are.equal(8, patched:stats().keyed.hits)
  end)

  it("5 keyed: a path with tolist or a host copy is refused: one warning naming the reason and file:line, counted, the body runs", function()
    local x = gt.from { -1, 2 }
    local runs = 0
    local read_line, copy_line
    local reader = gt.tree(function(v)
      runs = runs + 1
      local y = ops.relu(v)
      read_line = line(); local l = y:tolist()
      return ops.add(y, l[2])
    end, { key = function() return 1 end })
    local copier = gt.tree(function(v)
      runs = runs + 1
      local y = ops.relu(v)
      copy_line = line(); y:copy { 5, 6 }
      return ops.add(y, 1)
    end, { key = function() return 1 end })
    local seen = warnings_of(function()
      for _ = 1, 6 do
        assert.tensor_near({ 2, 4 }, reader(x))
        assert.tensor_near({ 6, 7 }, copier(x))
      end
    end)
    assert.are.equal(12, runs)
    assert.are.equal(2, #seen)
    local kr, kc = reader:stats().keyed, copier:stats().keyed
    assert.are.same({ 0, 0 }, { kr.hits, kc.hits })
    assert.are.same({ ["tolist at core_design_spec.lua:" .. read_line] = 6 }, kr.refused)
    local reason, n = next(kc.refused)
    assert.are.equal(6, n)
    assert.matches("host copy at core_design_spec%.lua:" .. copy_line .. "$", reason)
    assert.is_truthy(seen[1]:find("tolist at core_design_spec.lua:" .. read_line, 1, true), seen[1])
    assert.is_truthy(seen[2]:find("host copy at core_design_spec.lua:" .. copy_line, 1, true), seen[2])
  end)

  it("5 keyed: a key whose path also depends on a shape: another shape under the same key runs the body, not the memoized graphs", function()
    local runs = 0
    local step = gt.tree(function(x) runs = runs + 1; return ops.relu(x) end, { key = function() return "k" end, warn_shapes = false })
    for _ = 1, 4 do assert.tensor_near({ 0, 2 }, step(gt.from { -1, 2 })) end
    local r = runs
    assert.tensor_near({ 0, 2, 3 }, step(gt.from { -1, 2, 3 }))
    assert.are.equal(r + 1, runs)
    assert.are.same({ 3 }, step(gt.from { -1, 2, 3 }).shape)
  end)
end)

describe("DESIGN 6: the pool, lifetimes, liveness #design", function()
  it("6 scope: a tensor in a returned table counts as returned one level deep only; two levels deep it is released", function()
    local function body(x)
      local deep, flat
      local r = gt.scope(function()
        flat = axpb(x, 2, 0)
        deep = axpb(x, 3, 0)
        return { flat, nested = { deep } }
      end)
      local ok_flat = pcall(flat.tolist, flat)
      local ok_deep = pcall(deep.tolist, deep)
      return axpb(r[1], 1, 0), ok_flat, ok_deep
    end
    warnings_of(function()                                          -- (the keyed tree's path reads the host: refused)
      for _, f in ipairs { body, gt.tree(body), gt.tree(body, { key = function() return 1 end }) } do
        for _ = 1, 4 do
          local y, ok_flat, ok_deep = f(gt.from { 1, 2 })
          assert.tensor_near({ 2, 4 }, y)
          assert.is_true(ok_flat)
          assert.is_false(ok_deep)
        end
      end
    end)
  end)

  it("6 free: t:free() releases every view of its buffer at once, outside a tree and in every tree call", function()
    local function body(x)
      local a = axpb(x, 2, 0)
      local v, w = a:narrow(1, 2, 1), a:view { 3 }
      a:free()
      local ok_v, err = pcall(ops.relu, v)
      local ok_w = pcall(w.tolist, w)
      return axpb(x, 1, 1), ok_v, ok_w, err
    end
    for _, f in ipairs { body, gt.tree(body) } do
      for _ = 1, 4 do
        local y, ok_v, ok_w, err = f(gt.from { 1, 2, 3 })
        assert.tensor_near({ 2, 3, 4 }, y)
        assert.is_false(ok_v)
        assert.is_false(ok_w)
        assert.matches("was released by :free%(%) at [^;]*core_design_spec%.lua:%d+", err)
      end
    end
  end)

  it("6 lifetimes: the released-tensor error names the tensor, where the scope released it, and what to do", function()
    -- DESIGN: `tensor f32 8x256 (model.lua:12) was released by gt.scope at
    -- model.lua:20; return it from the scope or :clone() it`.  As built
    -- (docs/DESIGN.md section 6) the message does not name where the tensor was
    -- made (a replayed op makes its handle without looking up its line; a tensor
    -- a scope released was made inside that scope): it names the scope's line.
    local kept, released
    local step = gt.tree(function(x)
      released = line(); local y = gt.scope(function()
        kept = gt.zeros { 2, 3 }
        return ops.add(x, 1)
      end)
      return y
    end)
    step(gt.zeros { 2, 3 })
    local ok, err = pcall(kept.tolist, kept)
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("tensor f32 2x3 was released by gt.scope at " ..
      "spec/core_design_spec.lua:" .. released .. "; return it from the scope or :clone() it", 1, true), err)
  end)

  it("6 planning: reusable_bytes is what releasing dead temporaries would give back: one tensor for a 3-chain, 0 when they are freed", function()
    local n = 1024
    local plain = gt.tree(function(x) local t = axpb(x, 1, 1); local u = axpb(t, 1, 1); return axpb(u, 1, 1) end)
    local freed = gt.tree(function(x)
      local t = axpb(x, 1, 1)
      local u = axpb(t, 1, 1)
      t:free()
      local v = axpb(u, 1, 1)
      u:free()
      return v
    end)
    local x = gt.zeros { n }
    for _ = 1, 3 do
      assert.tensor_near(seq(n, function() return 3 end), plain(x))
      assert.tensor_near(seq(n, function() return 3 end), freed(x))
    end
    assert.are.equal(n * 4, plain:stats().node[0].reusable_bytes)
    assert.are.equal(0, freed:stats().node[0].reusable_bytes)
  end)

  it("6 liveness: a tensor made in a call and kept (not returned) goes stale at the next call, in warmup, record and replay", function()
    local kept = {}
    local step = gt.tree(function(x) local t = ops.relu(x); kept[#kept + 1] = t; return ops.add(t, 1) end)
    local x = gt.from { -1, 2 }
    for i = 1, 5 do
      step(x)
      assert.tensor_near({ 0, 2 }, kept[i])                        -- valid until the next call
      if i > 1 then assert.stale(kept[i - 1]) end
    end
  end)

  it("6 liveness: every use of a stale output raises the overwritten error: item, clone, copy (either way), fill, view, a kernel", function()
    local step = gt.tree(function(x) return ops.relu(x) end)
    local x = gt.from { -1, 2 }
    for call = 1, 4 do                                              -- the output of a warmup, record, replay call
      local y = step(x)
      step(x)
      local uses = {
        function() return y:item() end, function() return y:clone() end, function() return y:copy(x) end,
        function() return x:clone():copy(y) end, function() return y:fill(1) end, function() return y:view { 2 } end,
        function() return ops.add(y, 1) end, function() return axpb(y, 1, 1) end, function() return y:tolist() end,
      }
      for i, use in ipairs(uses) do
        local ok, err = pcall(use)
        assert.is_false(ok, "use " .. i .. " of call " .. call)
        assert.is_truthy(tostring(err):find("tensor f32 2 returned by tree 'step' (" .. step.where ..
          ") was overwritten by a later call; :clone() it to keep it", 1, true), err)
      end
    end
  end)
end)

describe("DESIGN 7: dynamic shapes, limits, skips #design", function()
  it("7 buckets: padding is zero-filled staging every call: a shorter call after a longer one in one bucket sums no old rows", function()
    local function body(x)
      local y = gt.tensor { x.shape[2] }
      K.colsum(1, 32, y, x, x.shape[1], x.shape[2])
      return y
    end
    local step = gt.tree(body, { buckets = { dim = 1, sizes = { 4, 8 } } })
    for round = 1, 3 do
      for n = 4, 1, -1 do                                         -- 4 rows, then 3, 2, 1 into the same bucket
        local x = gt.from(seq(n, function(i) return { 100 * i + round, i } end))
        local want = body(x):tolist()
        assert.are.same(want, step(x):tolist(), ("round %d, %d rows"):format(round, n))
      end
    end
    assert.are.equal(1, step:stats().recorded)
  end)

  it("7 limits: max_recordings defaults to 64 (on_limit eager): more paths run eagerly, one warning per tree", function()
    local trees = {
      gt.tree(function(x) return axpb(x, 2, 0) end, { warmup = 0, warn_shapes = false }),
      gt.tree(function(x) return axpb(x, 3, 0) end, { warmup = 0, warn_shapes = false }),
    }
    local seen = warnings_of(function()
      for n = 1, 70 do
        for t, step in ipairs(trees) do
          assert.tensor_near(seq(n, function(i) return (t + 1) * i end), step(gt.from(seq(n, function(i) return i end))))
        end
      end
    end)
    for _, step in ipairs(trees) do
      local s = step:stats()
      assert.are.same({ 70, 64, 6, 6 }, { s.calls, s.recorded, s.eager, s.skips.max_recordings })
    end
    assert.are.equal(2, #seen)
    assert.matches("max_recordings", seen[1])
    assert.matches("max_recordings", seen[2])
  end)

  it("7 beyond buckets: a call past the last bucket is counted in calls and eager with its reason, keyed too, and its outputs go stale", function()
    local runs = 0
    local step = gt.tree(function(x) runs = runs + 1; return axpb(x, 2, 0) end,
      { buckets = { dim = 1, sizes = { 2, 4 } }, key = function() return 1 end })
    local small = gt.from { 1, 2, 3 }
    for _ = 1, 4 do step(small) end
    local before = step:stats()
    local big = gt.from { 1, 2, 3, 4, 5 }
    local y = step(big)
    assert.tensor_near({ 2, 4, 6, 8, 10 }, y)
    local s = step:stats()
    assert.are.equal(before.calls + 1, s.calls)
    assert.are.equal(before.eager + 1, s.eager)
    assert.are.equal(1, s.skips["beyond buckets"])
    assert.are.equal(before.recorded, s.recorded)
    assert.tensor_near({ 2, 4, 6 }, step(small))
    assert.stale(y)
  end)

  it("7 updates: a moved static weight is one update per move (a visit of its own, not a replay), results use the new weight", function()
    local W = gt.full({ 4 }, 2):static()
    local step = gt.tree(function(x) local y = gt.tensor(x.shape); K.mulw(1, 32, y, x, W, x.numel); return y end)
    local x = gt.from { 1, 2, 3, 4 }
    for _ = 1, 3 do assert.tensor_near({ 2, 4, 6, 8 }, step(x)) end
    local Ws = { W }
    for k = 3, 5 do
      W = gt.full({ 4 }, k):static()
      Ws[#Ws + 1] = W                                              -- kept alive: addresses stay distinct
      assert.tensor_near({ k, 2 * k, 3 * k, 4 * k }, step(x))
      assert.tensor_near({ k, 2 * k, 3 * k, 4 * k }, step(x))
    end
    local s = step:stats()
    assert.are.same({ 1, 1, 3, 4 }, { s.nodes, s.recorded, s.updates, s.replays })
    assert.are.same({ "w", "r", "p", "u", "p", "u", "p", "u", "p" }, kinds(step))
  end)
end)
