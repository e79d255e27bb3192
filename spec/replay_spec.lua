-- replay_spec: what a replayed step costs in Lua memory (DESIGN section 5.2,
-- the replay cursor: no allocation per op beyond the fresh handle each op returns).
local gt = require "gt"

-- The least Lua memory one call of step(x) allocates, in bytes, over 1000
-- calls with the collector stopped.  LuaJIT forms traces differently from one
-- warm-up to the next (a collection during a recording aborts it; an aborted
-- trace waits before it is tried again), and code off-trace boxes what the
-- FFI returns: up to 3 warm-ups, fresh traces each, the best one counts
-- (enough: at most bytes).
local function bytes_per_call(step, x, enough)
  local best = math.huge
  for _ = 1, 3 do
    if jit then jit.flush() end                       -- fresh traces, whatever ran before in this process
    for _ = 1, 300 do step(x) end                     -- warm: recorded, replayed, traces formed
    collectgarbage()
    collectgarbage("stop")
    local before = collectgarbage("count")
    for _ = 1, 1000 do step(x) end
    best = math.min(best, (collectgarbage("count") - before) * 1024 / 1000)
    collectgarbage("restart")
    if best <= enough then break end
  end
  return best
end

-- A tree of a 32-op chain of gt.ops.linear.
local function chain32()
  local W = gt.randn({ 4, 4 }, { seed = 1 }):static()
  local b = gt.randn({ 4 }, { seed = 2 }):static()
  local linear = gt.ops.linear
  return gt.tree(function(x)
    for _ = 1, 32 do x = linear(x, W, b, "relu") end
    return x
  end), gt.randn({ 1, 4 }, { seed = 3 })
end

describe("a replayed op", function()
  it("allocates at most one small object: <= 64 bytes of Lua memory per op over 1000 replays of a 32-op step", function()
    local step, x = chain32()
    local per_op = bytes_per_call(step, x, 64 * 32) / 32
    assert.are.equal(1, step:stats().recorded)
    assert.is_true(per_op <= 64, ("%.1f bytes of Lua memory per replayed op (at most 64)"):format(per_op))
    assert.are.equal(0, step:stats().calls % 1300)
  end)

  -- gt.ops.linear passes its tensors to the core by value and builds its
  -- result's handle after the launch, so LuaJIT keeps a handle that the next
  -- op consumes in registers (launcher.lua's make_lean).  A handle that must
  -- exist in memory (a comparison with nil, a pointer passed to C, a store
  -- into a table) makes every op allocate again: 48 bytes an op.
  it("allocates no handle for a result the next op consumes: a 32-op chain's call allocates < 8 bytes an op", function()
    local step, x = chain32()
    local per_call = bytes_per_call(step, x, 8 * 32)
    assert.is_true(per_call < 8 * 32, ("%.1f bytes of Lua memory per call of 32 ops (under 256)"):format(per_call))
    assert.are.same(step(x):tolist(), step(x):tolist())
  end)

  -- Trees that run one body share its traces, and what a trace saw when it
  -- formed is what it guards.  Twice a trace formed under another tree left
  -- the plain tree's replays at every op for a side trace that allocated the
  -- op's handle (1.8 kB a 32-op call; in the bench a third of a shapes
  -- step's host time went to the collector): a keyed tree's table had more
  -- fields than a plain tree's (another hash layout, and the trace guards
  -- where the active tree's fields sit), and ops.linear's two-plan cache kept
  -- a plan that a bucketed tree's padded calls put first (a hit moved
  -- nothing, so the plain tree's ops hit the second place ever after).
  -- (each in a process of its own, spec/fixtures/shared_body.lua: what
  -- formed the traces before decides whether the fault shows)
  local function per_call_after(what)
    local bin = os.getenv("GTLUA_BIN")
    if not bin then return nil, "GTLUA_BIN is not set (run inside gtlua)" end
    local p = io.popen(("'%s' spec/fixtures/shared_body.lua %s 2>&1"):format(bin, what))
    local out = p:read("*a")
    p:close()
    local n = tonumber(out:match("^%s*([%d.]+)%s*$"))
    assert(n, "shared_body.lua " .. what .. ": " .. out)
    return n
  end

  -- A user kernel of more than four tensors goes through its bound
  -- launcher, which stores the handles in an array for the core: before the
  -- lane's test, every result made by gt.tensor went to memory (examples/
  -- gpt.lua's decode step: 3.5 kB a step, one handle per launch).  Stored
  -- only when the core is called, a result the next launch consumes stays in
  -- registers.  (The tree is made in a function that has returned, as
  -- chain32's: a loop reading the open upvalues of a running function reads
  -- them again each pass, and keeps no handle in registers.)
  local function wide32()
    local K = gt.compile [[
      __global__ void mix5(float *y, const float *a, const float *b, const float *c, const float *d, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = 0.5f * a[i] + 0.25f * b[i] - c[i] * d[i];
      }
    ]]
    local f = K.mix5:config(1, 32)
    local c = gt.randn({ 2, 4 }, { seed = 8, scale = 0.5 }):static()
    local d = gt.randn({ 2, 4 }, { seed = 9, scale = 0.5 }):static()
    local shape = gt.shape { 2, 4 }
    local tensor = gt.tensor
    return gt.tree(function(x)
      for _ = 1, 32 do
        local y = tensor(shape)
        f(y, x, c, c, d, 8)
        x = y
      end
      return x
    end), gt.randn({ 2, 4 }, { seed = 10 }), c:tolist(), d:tolist()
  end

  it("allocates no handle for a gt.tensor result that a wide user kernel fills and the next one consumes", function()
    local step, x, C, D = wide32()
    local per_call = bytes_per_call(step, x, 8 * 32)
    assert.is_true(per_call < 8 * 32, ("%.1f bytes of Lua memory per call of 32 launches (under 256)"):format(per_call))
    local want = x:tolist()
    for _ = 1, 32 do
      for r = 1, 2 do for k = 1, 4 do want[r][k] = 0.5 * want[r][k] + 0.25 * C[r][k] - C[r][k] * D[r][k] end end
    end
    local got = step(x):tolist()
    for r = 1, 2 do for k = 1, 4 do assert.is_true(math.abs(got[r][k] - want[r][k]) < 1e-4) end end
  end)

  for _, what in ipairs { "keyed", "buckets" } do
    it(("allocates no handle per op either after a %s tree over its body formed the traces"):format(what), function()
      local per_call, why = per_call_after(what)
      if not per_call then return pending(why) end
      assert.is_true(per_call < 8 * 32, ("%.1f bytes of Lua memory per call of 32 ops (under 256)"):format(per_call))
    end)
  end

  it("returns a fresh handle each call: a kept output goes stale, the new one is live", function()
    local step = gt.tree(function(x) return gt.ops.relu(x) end)
    local x = gt.from({ -1, 2 })
    local a = step(x)
    local b = step(x)
    assert.are_not.equal(a, b)
    assert.is_true(a:is_stale())
    assert.is_false(b:is_stale())
    assert.are.same({ 0, 2 }, b:tolist())
    assert.has_error(function() a:tolist() end,
      ("tensor f32 2 returned by tree 'step' (%s) was overwritten by a later call; :clone() it to keep it"):format(step.where))
  end)

  it("keeps an output valid while the tensor lives, though its tree is garbage", function()
    local y = gt.tree(function(x) return gt.ops.mul(x, 2) end)(gt.from({ 1, 2, 3 }))
    collectgarbage()
    collectgarbage()
    assert.are.same({ 2, 4, 6 }, y:tolist())
  end)

  it("keeps the latest call's outputs valid once its tree is dropped (keyed hits too), earlier ones stale", function()
    for _, opts in ipairs { {}, { key = function() return 0 end } } do
      local t = gt.tree(function(x) return gt.ops.mul(x, 2), gt.ops.mul(x, 3), gt.ops.mul(x, 4) end, opts)
      local x = gt.from({ 1, 2 })
      local old = t(x)
      local a, b, c
      for _ = 1, 5 do a, b, c = t(x) end
      if opts.key then assert.is_true(t:stats().keyed.hits >= 3) end
      t = nil   -- luacheck: ignore
      for _ = 1, 4 do collectgarbage() end
      assert.are.same({ { 2, 4 }, { 3, 6 }, { 4, 8 } }, { a:tolist(), b:tolist(), c:tolist() })
      assert.stale(old)
      -- a view made of an output after the tree was dropped keeps the memory as the output does
      -- (as an eager tensor's view does)
      local v = a:narrow(1, 1, 1)
      assert.are.same({ 2 }, v:tolist())
      a, b, c = nil, nil, nil   -- luacheck: ignore
      for _ = 1, 4 do collectgarbage() end
      assert.are.same({ 2 }, v:tolist())
    end
  end)

  it("passes any number of arguments and results through a call, nils included, and an error with its value", function()
    local mul = gt.ops.mul
    local t = gt.tree(function(a, b, c, d, e, f)
      if f == "boom" then error({ code = 7 }) end
      return mul(a, b), nil, mul(a, c), d, e, f
    end)
    local x = gt.from({ 1, 2 })
    for _ = 1, 4 do
      local r = table.pack(t(x, 2, 3, nil, "e", 6))
      assert.are.equal(6, r.n)
      assert.are.same({ 2, 4 }, r[1]:tolist())
      assert.is_nil(r[2])
      assert.are.same({ 3, 6 }, r[3]:tolist())
      assert.are.same({ nil, "e", 6 }, { r[4], r[5], r[6] })
    end
    local ok, err = pcall(t, x, 2, 3, nil, "e", "boom")
    assert.is_false(ok)
    assert.are.same({ code = 7 }, err)
    assert.are.same({ 2, 4 }, t(x, 2, 3):tolist())                  -- and the tree goes on
    local t0 = gt.tree(function() end)
    assert.are.equal(0, select("#", t0()))
  end)

  it("follows the branch a call takes: the cursor switches to the sibling that matches, results stay right", function()
    local W = gt.randn({ 4, 4 }, { seed = 5 }):static()
    local step = gt.tree(function(x, r)
      x = gt.ops.linear(x, W)
      if r == 1 then x = gt.ops.relu(x) elseif r == 2 then x = gt.ops.tanh(x) else x = gt.ops.mul(x, 3) end
      return gt.ops.linear(x, W)
    end)
    local x = gt.randn({ 2, 4 }, { seed = 6 })
    local want = {}
    for r = 1, 3 do
      local h = gt.ops.linear(x, W)
      h = r == 1 and gt.ops.relu(h) or r == 2 and gt.ops.tanh(h) or gt.ops.mul(h, 3)
      want[r] = gt.ops.linear(h, W):tolist()
    end
    for i = 1, 30 do
      local r = (i * 7) % 3 + 1
      local got = step(x, r):tolist()
      for a = 1, 2 do for c = 1, 4 do assert.is_true(math.abs(got[a][c] - want[r][a][c]) < 1e-5) end end
    end
    local s = step:stats()
    assert.are.equal(3, s.nodes)
    assert.is_true(s.replays >= 24)
  end)

  -- The trace aborts during fn() whose message matches one of patterns (by
  -- default "return to lower frame"), as {"where: message", ...}.  (The
  -- watcher allocates nothing and is not compiled: a vmevent handler that
  -- allocates or runs traces during a recording can corrupt it in the
  -- LuaJIT of Debian 12, fixed upstream in 2023 and 2026.)
  local function trace_aborts(fn, patterns)
    local traceerr, funcinfo = require("jit.vmdef").traceerr, require("jit.util").funcinfo
    local codes, found = { -1, -1, -1, -1 }, 0
    for code, msg in pairs(traceerr) do
      for _, p in ipairs(patterns or { "return to lower frame" }) do
        if msg:match(p) then found = found + 1; codes[found] = code end
      end
    end
    assert(found == #(patterns or { 1 }), "jit.vmdef lacks one of the trace errors looked for")
    local c1, c2, c3, c4 = codes[1], codes[2], codes[3], codes[4]
    local funcs, pcs, errs, n = { false, false, false, false, false, false, false, false },
      { 0, 0, 0, 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0, 0, 0, 0 }, 0
    local function watch(what, _, func, pc, code)
      if what == "abort" and (code == c1 or code == c2 or code == c3 or code == c4) and n < 8 then
        n = n + 1; funcs[n], pcs[n], errs[n] = func, pc, code
      end
    end
    jit.off(watch)
    jit.flush()
    jit.attach(watch, "trace")
    local ok, err = pcall(fn)
    jit.attach(watch)                                      -- (detaches it)
    assert(ok, err)
    local where = {}
    for i = 1, n do where[i] = tostring(funcinfo(funcs[i], pcs[i]).loc) .. ": " .. traceerr[errs[i]] end
    return where
  end
  local function lower_frame_aborts(fn) return trace_aborts(fn) end

  it("runs the end of a body compiled: no trace aborts returning from it (the tree's pcalls are made from C)", function()
    -- a layer loop with its own trace, then an op after it: the side trace from
    -- the loop's exit reaches the body's return.  Across the frame of Lua's
    -- pcall LuaJIT cannot return (the abort "return to lower frame"), and after a
    -- few aborts the end of every step ran in the interpreter.
    local W = gt.randn({ 8, 8 }, { seed = 1, scale = 0.3 }):static()
    local step = gt.tree(function(x)
      for _ = 1, 6 do x = gt.ops.linear(x, W) end
      return gt.ops.relu(x)
    end)
    local x = gt.randn({ 2, 8 }, { seed = 2 })
    assert.are.same({}, lower_frame_aborts(function() for _ = 1, 400 do step(x) end end))
    assert.is_true(step:stats().replays >= 390)
  end)

  it("passes a call on to its body and a keyed hit on to its outputs without a vararg function traces abort in", function()
    -- a side trace entering a vararg function from below cannot leave it (LuaJIT:
    -- the abort "return to lower frame"): keyed calls that alternate keys, trees of
    -- one to six arguments called in turn, a bucketed call padded and
    -- narrowed back, device-side gt.cond bodies, all without such aborts
    local W = gt.randn({ 8, 8 }, { seed = 1, scale = 0.3 }):static()
    local keyed = gt.tree(function(x, mode)
      for _ = 1, 6 do x = gt.ops.linear(x, W) end
      if mode == 1 then x = gt.ops.relu(x) end
      return x
    end, { key = function(_, mode) return mode end })
    local plain = {}
    for n = 1, 6 do
      plain[n] = gt.tree(function(x, ...)
        local y = gt.ops.linear(x, W)
        if select("#", ...) >= 2 then y = gt.ops.relu(y) end
        return y, ...
      end)
    end
    local padded = gt.tree(function(x) return gt.ops.relu(x), 1, gt.ops.linear(x, W) end,
      { buckets = { dim = 1, sizes = { 4 } } })
    local live = gt.ones({ 1 }, "i32")
    local conds = gt.tree(function(x)
      local h = gt.ops.mul(x, 1)
      for _ = 1, 4 do
        gt.cond(live, function() h:copy(gt.ops.add(h, gt.ops.linear(h, W, nil, "tanh"))) end)
      end
      return h
    end)
    local x = gt.randn({ 2, 8 }, { seed = 2 })
    local rest = { 1, 2, 3, 4, 5 }
    local last, rows = {}, nil
    assert.are.same({}, lower_frame_aborts(function()
      for i = 1, 3000 do
        keyed(x, i % 3 == 0 and 1 or 0)
        local n = i % 6 + 1
        last[n] = select("#", plain[n](x, unpack(rest, 1, n - 1)))
        if i % 2 == 0 then rows = padded(x).shape[1] + select(3, padded(x)).shape[1] end
        if i % 3 == 0 then conds(x) end
      end
    end))
    for n = 1, 6 do assert.are.equal(n, last[n]) end
    assert.are.equal(4, rows)
    local ks = keyed:stats().keyed
    assert.is_true(ks.hits >= 2900, "keyed hits: " .. tostring(ks.hits))
  end)

  it("compiles a loop of gt.scope blocks in a tree call (the scope's body runs in a pcall made from C)", function()
    -- examples/gpt.lua's decode step: x = gt.scope(block, x, ...) over the
    -- layers, a block of five launches of many arguments.  Recorded as one
    -- trace with the loop, the blocks ran out of spill slots; the loop was
    -- blacklisted and ran in the interpreter, unrolled into the traces of
    -- its callers up to their unroll limit.
    local K = gt.compile([[
extern "C" __global__ void mix(float *y, const float *a, const float *b, const float *c, const float *d,
                               int n, int m, int k, int s, int mode, float f, float g) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = f * a[i] + g * b[i % m] - c[i % k] * d[i % s] * (mode ? 1.0f : 0.5f);
}]])
    local N = 32
    local P = { shape = gt.shape { N } }
    for j = 1, 5 do P[j] = { f = K.mix:config(1, N), m = N - j, k = N - 2 * j, s = N - 3 * j, mode = j % 2 } end
    local layers = {}
    for l = 1, 12 do
      local L = {}
      for j = 1, 6 do L[j] = gt.randn({ N }, { seed = 10 * l + j, scale = 0.1 }):static() end
      layers[l] = L
    end
    local tensor = gt.tensor
    local function op(p, x, a, b, c)
      local y = tensor(P.shape)
      p.f(y, x, a, b, c, N, p.m, p.k, p.s, p.mode, 0.5, 0.25)
      return y
    end
    local function block(x, L, Q)
      local h = op(Q[1], x, L[1], L[2], L[3])
      local u = op(Q[2], h, x, L[4], L[5])
      h = op(Q[3], u, h, L[6], x)
      u = op(Q[4], h, u, L[1], L[3])
      return op(Q[5], u, h, L[2], L[4])
    end
    local step = gt.tree(function(x)
      for l = 1, #layers do x = gt.scope(block, x, layers[l], P) end
      return x
    end)
    local x = gt.randn({ N }, { seed = 3 })
    local eager = step.fn(x):tolist()
    local out
    assert.are.same({}, trace_aborts(function()
      for _ = 1, 1500 do out = step(x) end
    end, { "spill slots", "loop unroll limit", "return to lower frame" }))
    assert.are.same(eager, out:tolist())
    assert.is_true(step:stats().replays >= 1490)
  end)
end)

describe("tree:floor", function()
  it("launches the last call's graphs, and with patch repeats the kernel-node patches that call made", function()
    local W = gt.randn({ 8, 8 }, { seed = 1, scale = 0.3 }):static()
    local function f(x, s) return gt.ops.add(gt.ops.linear(x, W), s) end
    local step = gt.tree(f)
    local x = gt.randn({ 2, 8 }, { seed = 2 })
    for _ = 1, 3 do step(x, 1) end                         -- warmup, record, replay: the graph holds s = 1
    local y = step(x, 2)                                   -- a replay that patches s (one kernel node)
    assert.are.equal(1, step:stats().recorded)
    local cpu, stepus, np = step:floor(5, true, true)
    assert.is_true(cpu > 0 and stepus > 0)
    assert.are.equal(1, np)
    assert.are.equal(0, select(3, step:floor(5, true)))   -- without patch: none
    assert.are.same(f(x, 2):tolist(), y:tolist())          -- the last call's output, as before the floors
    step(x, 2)                                             -- the graph holds 2 already: nothing patched
    assert.are.equal(0, select(3, step:floor(5, false, true)))
    -- a keyed hit's patches count the same way
    local kt = gt.tree(f, { key = function() return 0 end, patch = { 2 } })
    for _ = 1, 4 do kt(x, 1) end
    local z = kt(x, 3)
    assert.are.equal(1, select(3, kt:floor(5, true, true)))
    assert.are.same(f(x, 3):tolist(), z:tolist())
  end)

  it("launches several calls' paths in turn, each with its patches; the graphs hold the last step's values", function()
    local W = gt.randn({ 8, 8 }, { seed = 1, scale = 0.3 }):static()
    local function f(x, s) return gt.ops.add(gt.ops.linear(x, W), s) end
    local seen = gt.zeros({ 2, 8 })                        -- each launch also copies its result here
    local step = gt.tree(function(x, s) local y = f(x, s); gt.ops.copy(seen, y); return y end)
    local x = gt.randn({ 2, 8 }, { seed = 2 })
    for _ = 1, 3 do step(x, 1) end
    -- two marks of one node, s = 2 then s = 1; 5 steps end on the first (s = 2)
    local cpu, stepus, np = step:floor(5, true, true, { { x, 2 }, { x, 1 } })
    assert.is_true(cpu > 0 and stepus > 0)
    assert.are.equal(1, np)
    assert.are.same(f(x, 1):tolist(), seen:tolist())       -- what the steps wrote is put back: the last call's
    assert.are.same(f(x, 1):tolist(), step(x, 1):tolist())   -- the replay patches back to 1
    assert.are.same(f(x, 2):tolist(), step(x, 2):tolist())
    -- two routes: two paths, nothing patched
    local route = gt.tree(function(v, r)
      local h = gt.ops.linear(v, W)
      gt.cut()
      if r == 1 then return gt.ops.relu(h) end
      return gt.ops.tanh(h)
    end)
    for i = 1, 6 do route(x, i % 2 + 1) end
    local c2, s2, n2 = route:floor(4, false, true, { { x, 1 }, { x, 2 } })
    assert.is_true(c2 > 0 and s2 > 0)
    assert.are.equal(0, n2)
    assert.are.equal(3, route:stats().nodes)
    assert.has_error(function() route:floor(4, true, false, {}) end,
      "tree:floor: calls must be a list of argument lists")
  end)

  it("changes nothing anyone can read: outputs, tensors kept from the call, inputs and statics its kernels write", function()
    local K = gt.compile([[
__global__ void shift(float *y, const float *x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] + s; }
__global__ void bump(float *acc, float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { acc[i] += x[i]; x[i] += 1; } }]], { name = "floor_keeps.cu" })
    local acc = gt.zeros { 4 }:static()                    -- a step's state, as a KV cache is
    local kept = {}
    local function body(x, v, s)
      local y = gt.tensor(x.shape)
      K.shift(1, 32, y, x, s, x.numel)
      kept.t = gt.ops.mul(y, 10)                           -- made by the call, not returned
      K.bump(1, 32, acc, v, v.numel)                       -- writes a static and an input
      return y
    end
    for _, opts in ipairs { {}, { key = function() return 0 end, patch = { 3 } } } do
      local step = gt.tree(body, opts)
      local x, v = gt.zeros { 4 }, gt.zeros { 4 }
      local y
      for i = 1, 5 do y = step(x, v, i == 5 and 2 or 20) end
      assert.are.same({ 2, 2, 2, 2 }, y:tolist())
      x:fill(18)                                           -- the input changed since: a relaunch would write 20
      -- (a keyed hit runs no body: what the body kept is from its last run, stale by now)
      local function kept_now() return kept.t:is_stale() and "stale" or kept.t:tolist() end
      local before = { acc:tolist(), v:tolist(), kept_now() }
      step:floor(7)
      step:floor(3, false, true)
      assert.is_false(y:is_stale())
      assert.are.same({ 2, 2, 2, 2 }, y:tolist())
      assert.are.same(before, { acc:tolist(), v:tolist(), kept_now() })
      assert.are.same({ 18, 18, 18, 18 }, x:tolist())
      assert.are.same({ 21, 21, 21, 21 }, step(x, v, 3):tolist())   -- and the next call is right
    end
  end)

  it("refuses to run inside a tree call", function()
    local inner = gt.tree(function(x) return gt.ops.relu(x) end)
    local x = gt.zeros { 4 }
    for _ = 1, 3 do inner(x) end
    local outer = gt.tree(function(v) local y = gt.ops.relu(v); inner:floor(2); return y end)
    assert.error_matches(function() outer(x) end,
      "tree 'inner': tree:floor inside a call of tree 'outer'; measure the floor outside tree calls")
  end)
end)

describe("tree:floor after another tree gave its memory back #floor", function()
  it("refuses when its last call read a tensor in memory a trim gave back, and runs once the tree is called again", function()
    local ops = gt.ops
    local B = gt.tree(function(x) return ops.mul(x, 2) end)
    local A = gt.tree(function(x) return ops.add(x, 1) end)
    local x = gt.full({ 8 }, 1)
    for _ = 1, 4 do A(B(x)) end
    B:trim(0)                                             -- B's output, A's last input, lay in memory given back
    assert.error_matches(function() A:floor(2) end, "an input of its last call lay in memory a tree's pool gave back")
    A(B(x))
    local cpu = A:floor(2)
    assert.is_true(cpu >= 0)
  end)
end)
