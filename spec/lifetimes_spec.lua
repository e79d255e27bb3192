-- Lifetimes (DESIGN section 6): tensors of a tree call keep their memory until
-- the next call unless released explicitly (gt.scope, t:free()); no garbage
-- collector decides what a graph overwrites.  The same in every mode.
local gt = require "gt"
require "gt.busted"

local ops = gt.ops
local K = gt.compile([[
__global__ void axpb(float *y, const float *x, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}
]], { name = "lifetimes_spec.cu" })

local function axpb(x, a, b)
  local y = gt.tensor(x.shape)
  K.axpb(1, 32, y, x, x.numel, a, b)
  return y
end

local function tanh_list(v) local r = {} for i, x in ipairs(v) do r[i] = math.tanh(x) end return r end

describe("lifetimes", function()
  it("keeps a tensor the recording call dropped when a later call returns it", function()
    local step = gt.tree(function(x, keep)
      local t = ops.tanh(x)
      local w = ops.add(ops.relu(t), 100)
      if keep then return w, t end
      return w
    end)
    local x = gt.from { 0.5, -0.5 }
    for _ = 1, 3 do step(x, false) end
    local w, t = step(x, true)
    assert.tensor_near(tanh_list { 0.5, -0.5 }, t, 1e-5)
    assert.tensor_near({ 100 + math.tanh(0.5), 100 }, w, 1e-4)
    local s = step:stats()
    assert.are.same(1, s.nodes)                 -- the same launches: one node, replayed
    assert.are.same(2, s.replays)
  end)

  it("keeps a tensor the recording call dropped when a later call stores it in a table", function()
    local holder = {}
    local step = gt.tree(function(x, keep)
      local t = ops.tanh(x)
      local w = ops.add(ops.relu(t), 100)
      if keep then holder.t = t end
      return w
    end)
    local x = gt.from { 0.5, -0.5 }
    for _ = 1, 3 do step(x, false) end
    step(x, true)
    assert.tensor_near(tanh_list { 0.5, -0.5 }, holder.t, 1e-5)
  end)

  it("keeps a staged input that is returned unchanged and fed back", function()
    local step = gt.tree(function(h, c, upd)
      if upd then c = ops.add(c, 1) end
      return ops.tanh(h), c
    end)
    local h, c = gt.zeros { 2 }, gt.zeros { 2 }
    h, c = step(h, c, true); h = gt.zeros { 2 }
    for _ = 1, 6 do
      h, c = step(h, c, false)
      assert.tensor_near({ 1, 1 }, c)
      assert.tensor_near({ 0, 0 }, h)
    end
  end)

  it("keeps every fed-back staged input of a call apart, in any argument order", function()
    for _, opts in ipairs { {}, { copy_inputs = true }, { copy_inputs = true, key = function() return 1 end },
                            { key = function() return 1 end } } do
      local step = gt.tree(function(a, b, c) return b, c, ops.add(a, 1) end, opts)
      local a, b, c = gt.from { 1 }, gt.from { 2 }, gt.from { 3 }
      local va, vb, vc = 1, 2, 3
      for _ = 1, 8 do
        a, b, c = step(a, b, c)
        va, vb, vc = vb, vc, va + 1
        assert.tensor_near({ va }, a); assert.tensor_near({ vb }, b); assert.tensor_near({ vc }, c)
      end
    end
  end)

  it("returns the caller's own tensor for an input returned through a copy (copy_inputs, buckets, keyed)", function()
    local W = gt.randn({ 2, 2 }, { seed = 3 }):static()
    local function body(x, w) return x, x:narrow(1, 2, 1), ops.relu(x), w end
    local modes = {
      { copy_inputs = true }, { buckets = { dim = 1, sizes = { 4, 8 } } },
      { copy_inputs = true, key = function() return 1 end },
      { buckets = { dim = 1, sizes = { 4, 8 } }, key = function() return 1 end },
    }
    for m, opts in ipairs(modes) do
      local step = gt.tree(body, opts)
      for _ = 1, 4 do
        local x = gt.from { { 1, -2 }, { 3, -4 }, { 5, -6 } }
        local y, row, r, w = step(x, W)
        step(gt.from { { 0, 0 }, { 0, 0 }, { 0, 0 } }, W)          -- a later call
        assert.is_true(rawequal(y, x), "mode " .. m)                 -- as without a tree: x itself, valid
        assert.tensor_near({ { 3, -4 } }, row)                       -- a view of x, not of the tree's copy
        x:copy(gt.from { { 7, 7 }, { 8, 8 }, { 9, 9 } })
        assert.tensor_near({ { 8, 8 } }, row)
        assert.stale(r)                                              -- the tree's own output goes stale
        assert.is_true(rawequal(w, W))                               -- a static argument returned: itself,
        assert.are.same({ 2, 2 }, w.shape)                           -- neither padded nor narrowed
      end
    end
  end)

  it("keeps a view of an output, and an output tables deep, valid when the tree and the output are collected", function()
    -- in a process of its own: in this one, traces may hold the trees as constants
    local S = require "spec.support"
    local script = os.tmpname()
    S.spit(script, [[
      local K = gt.compile("__global__ void axpb(float *y, const float *x, int n, float a) {" ..
        " for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = a * x[i]; }")
      local function made(shape_of)
        local step = gt.tree(function(x) local y = gt.tensor(x.shape); K.axpb(1, 32, y, x, 4, 3); return shape_of(y) end)
        local x = gt.from { 1, 2, 3, 4 }
        step(x)
        return step(x)
      end
      local view = made(function(y) return y end):narrow(1, 2, 2)   -- the output and the tree dropped
      local deep = made(function(y) return { a = { b = { y } } } end).a.b[1]
      local fed = gt.tree(function(x) local y = gt.tensor(x.shape); K.axpb(1, 32, y, x, 4, 3); return x, y end)
      local _, y = fed(gt.from { 1, 2, 3, 4 })
      local staged = fed(y):narrow(1, 1, 2)      -- the tree's output fed back and returned: its staged copy
      fed, y = nil, nil
      collectgarbage(); collectgarbage()
      print(table.concat(view:tolist(), " "), table.concat(deep:tolist(), " "), table.concat(staged:tolist(), " "))
    ]])
    local st, out = S.gtlua(S.shq(script))
    os.remove(script)
    assert.are.equal(0, st, out)
    assert.matches("^6 9\t3 6 9 12\t3 6", out)
  end)

  it("runs what a body launched before it raised, as eager code does: its writes reach the inputs", function()
    local K2 = gt.compile("__global__ void inc(float *x, int n) { for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] += 1; }",
      { name = "inc.cu" })
    for _, cut in ipairs { true, false } do              -- the write in an ended segment, or in the one that raised
      local function body(x, boom)
        K2.inc(1, 32, x, x.numel)                         -- into the caller's tensor
        if cut then gt.cut() end
        local y = axpb(x, 2, 0)
        K2.inc(1, 32, x, x.numel)
        if boom then error("boom") end
        return y
      end
      for _, opts in ipairs { {}, { copy_inputs = true }, { buckets = { dim = 1, sizes = { 16 } } },
                              { buckets = { dim = 1, sizes = { 4 } } },          -- (10 rows: beyond the buckets)
                              { key = function() return 1 end } } do
        local step = gt.tree(body, opts)
        for call = 1, 6 do
          local boom = call == 1 or call >= 5             -- a warmup and replays that raise
          local x, e = gt.ones { 10 }, gt.ones { 10 }
          local ok = pcall(step, x, boom)
          assert.are.equal(not boom, ok)
          pcall(body, e, boom)
          assert.are.same(e:tolist(), x:tolist())
          assert.are.equal(3, x:tolist()[1])
        end
      end
    end
  end)

  it("copies a write into a copied input back when the call fails at its last segment's end", function()
    local function f(x, r)
      ops.axpby(1, x, 1, x)                       -- x = 2x in place, in the first segment
      gt.cut()
      if r == 1 then return ops.relu(x) end       -- a new path past max_recordings: the return raises
      return ops.tanh(x)
    end
    for _, o in ipairs { {}, { copy_inputs = true }, { buckets = { dim = 1, sizes = { 4 } } } } do
      o.max_recordings, o.on_limit, o.warmup = 2, "error", 0
      local step = gt.tree(f, o)
      for i, r in ipairs { 0, 0, 1 } do
        local x = gt.from { 1, 2 }
        local ok, err = pcall(step, x, r)
        assert.are.equal(i < 3, ok)
        if not ok then assert.matches("max_recordings", err) end
        assert.tensor_near({ 2, 4 }, x)
      end
    end
  end)

  it("returns a fed-back input of a keyed call with copied inputs as the body run did, fresh inputs in between", function()
    local step = gt.tree(function(a, b) return b, ops.add(a, 1) end,
      { copy_inputs = true, key = function() return 1 end })
    local a, b = gt.from { 1 }, gt.from { 2 }
    local va, vb = 1, 2
    for i = 1, 12 do
      if i % 3 == 0 then a, b = gt.from { va }, gt.from { vb } end   -- the caller's own tensors again
      a, b = step(a, b)
      va, vb = vb, va + 1
      assert.tensor_near({ va }, a); assert.tensor_near({ vb }, b)
    end
    assert.truthy(step:stats().keyed.hits > 0)
  end)

  it("stages a non-contiguous view: with copy_inputs, and a view of the last call's output fed back", function()
    local base = gt.from { { 1, -2, 3, -4 }, { 5, -6, 7, -8 } }
    local function body(h) return ops.relu(h:contiguous()), ops.mul(base, 2) end
    local warned, old = {}, gt.on_warning
    gt.on_warning = function(m) warned[#warned + 1] = m end
    for _, opts in ipairs { {}, { copy_inputs = true }, { copy_inputs = true, key = function() return 1 end } } do
      local step = gt.tree(body, opts)
      local _, w = step(base:narrow(2, 2, 2))
      for _ = 1, 4 do
        local v = w:narrow(2, 2, 2)                        -- this tree's last output, seen through a view
        local y
        y, w = step(v)
        assert.tensor_near({ { 0, 6 }, { 0, 14 } }, y)
        y = step(base:narrow(2, 1, 2))                     -- a view of the caller's tensor
        assert.tensor_near({ { 1, 0 }, { 5, 0 } }, y)
        _, w = step(base:narrow(2, 3, 2))
      end
    end
    gt.on_warning = old
    -- the keyed tree runs its body for the view, saying so once
    assert.are.equal(1, #warned, table.concat(warned, "\n"))
    assert.matches("a keyed call's path cannot be replayed without its body: a non-contiguous tensor argument", warned[1], 1, true)
  end)

  it("raises the same error for a released tensor on calls 1..4 and outside any tree", function()
    local kept
    local function body(x)
      return gt.scope(function()
        local a = ops.relu(x)
        kept = a
        return ops.tanh(a)
      end)
    end
    local step = gt.tree(body)
    local x = gt.from { 1, 2 }
    local msgs = {}
    for call = 1, 4 do
      step(x)
      local ok, err = pcall(function() return kept:tolist() end)
      assert.is_false(ok)
      msgs[call] = tostring(err):gsub("^[^:]*:%d+: ", "")
    end
    body(x)
    local ok, err = pcall(function() return kept:tolist() end)
    assert.is_false(ok)
    msgs[5] = tostring(err):gsub("^[^:]*:%d+: ", "")
    for i = 2, 5 do assert.are.equal(msgs[1], msgs[i]) end
    assert.matches("tensor f32 2 was released by gt.scope at .*lifetimes_spec.lua:%d+; return it from the scope or :clone%(%) it", msgs[1])
    assert.is_true(kept:is_stale())
  end)

  it("raises inside the call too, when a released tensor is passed to a kernel", function()
    local step = gt.tree(function(x)
      local a = ops.relu(x)
      a:free()
      return ops.tanh(a)
    end)
    local x = gt.from { 1, 2 }
    for _ = 1, 3 do
      assert.error_matches(function() step(x) end, "^tensor f32 2 was released by :free%(%) at [^;]+; :clone%(%) it " ..
        "before releasing it to keep the values %(in gt.ops.tanh, reached by a tail call")
      local ok, err = pcall(step, x)
      assert.is_false(ok)
      assert.matches("was released by :free%(%) at .*lifetimes_spec.lua:%d+", err)
    end
    local a = gt.from { 1 }
    a:free()
    local ok, err = pcall(function() return ops.tanh(a) end)
    assert.is_false(ok)
    assert.matches("was released by :free%(%) at", err)
    ok, err = pcall(function() a:free() end)
    assert.is_false(ok)
    assert.matches("released", err)
  end)

  it("lets launches queued before a free use the tensor (queue order), and reuses its memory after", function()
    local step = gt.tree(function(x)
      local a = axpb(x, 2, 0)
      local b = axpb(a, 1, 1)                  -- queued before the free: reads a
      a:free()
      local c = axpb(x, 10, 0)                 -- may take a's memory
      return ops.add(b, c)
    end, { warmup = 0 })
    local x = gt.from { 1, 2, 3 }
    for _ = 1, 4 do assert.tensor_near({ 13, 25, 37 }, step(x)) end
  end)

  it("releases a view's whole buffer, and keeps a scope's results in a returned table", function()
    local step = gt.tree(function(x)
      local r = gt.scope(function()
        local a = axpb(x, 2, 0)
        local v = a:view { 3 }
        local tmp = axpb(x, 5, 0)
        return { a = v, n = 1 }, tmp:view { 3 }
      end)
      return r.a
    end)
    local x = gt.from { 1, 2, 3 }
    for _ = 1, 3 do assert.tensor_near({ 2, 4, 6 }, step(x)) end
    local base = gt.from { 1, 2, 3, 4 }
    local v = base:narrow(1, 2, 2)
    v:free()
    assert.is_true(base:is_stale())
  end)

  it("nests scopes: an inner scope's result belongs to the outer one", function()
    local inner_kept
    local step = gt.tree(function(x)
      return gt.scope(function()
        local h = gt.scope(function()
          local t = axpb(x, 3, 0)
          inner_kept = t
          return axpb(t, 1, 1)
        end)
        return axpb(h, 2, 0)
      end)
    end)
    local x = gt.from { 1, 2 }
    for _ = 1, 3 do
      assert.tensor_near({ 8, 14 }, step(x))
      assert.stale(inner_kept)
    end
  end)

  it("releases at the outer scope's end a tensor that an inner scope returned but did not make", function()
    local kept
    local function body(x)
      gt.scope(function()
        local t = axpb(x, 2, 0)                          -- the outer scope's
        assert.are.equal(t, gt.scope(function() return t end))
        kept = t
      end)
      return axpb(x, 1, 0)
    end
    local step = gt.tree(body)
    local x = gt.from { 1, 2 }
    body(x)
    assert.has_error(function() kept:tolist() end)       -- outside any tree
    for _ = 1, 3 do
      step(x)
      assert.has_error(function() kept:tolist() end)
    end
  end)

  it("passes a released tensor argument to the body as eager code does: it raises where it is used", function()
    local function body(x, unused)
      local ok = pcall(ops.relu, unused)           -- the use raises, and is caught
      return axpb(x, 2, 0), ok
    end
    local modes = { body, gt.tree(body), gt.tree(body, { copy_inputs = true }),
      gt.tree(body, { key = function() return 1 end }), gt.tree(body, { buckets = { dim = 1, sizes = { 2, 8 } } }) }
    for _, f in ipairs(modes) do
      for i = 1, 4 do
        local dead = gt.from { 1, 2, 3 }
        dead:free()
        local y, used = f(gt.from { i, 1, 2 }, dead)
        assert.tensor_near({ 2 * i, 2, 4 }, y)
        assert.is_false(used)
      end
    end
  end)

  it("releases the caller's tensor when the body frees its input, in every mode", function()
    local function body(x) local y = axpb(x, 2, 0); x:free(); return y end
    local old = gt.on_warning
    gt.on_warning = function() end
    local modes = { body, gt.tree(body), gt.tree(body, { copy_inputs = true }),
      gt.tree(body, { key = function() return 1 end }), gt.tree(body, { buckets = { dim = 1, sizes = { 2, 8 } } }) }
    for _, f in ipairs(modes) do
      for i = 1, 5 do
        local x = gt.from { i, 1, 2 }
        assert.tensor_near({ 2 * i, 2, 4 }, f(x))
        assert.matches("was released by :free%(%) at [^;]*lifetimes_spec.lua", select(2, pcall(x.tolist, x)))
      end
    end
    gt.on_warning = old
  end)

  it("raises for a tree's own output fed back after it was freed or went stale, in every mode, keyed too", function()
    for _, o in ipairs { {}, { key = function() return 1 end }, { key = function() return 1 end, copy_inputs = true } } do
      local step = gt.tree(function(x) return axpb(x, 1, 1) end, o)
      local h = gt.from { 0, 0 }
      for _ = 1, 6 do h = step(h) end
      assert.tensor_near({ 6, 6 }, h)
      h:free()
      assert.matches("was released by :free%(%) at [^;]*lifetimes_spec.lua", select(2, pcall(step, h)))
      local a = step(gt.from { 10, 10 })
      step(a)
      assert.matches("overwritten by a later call", select(2, pcall(step, a)))
    end
  end)

  it("keeps a tree output a scope returns when the call's results hold its buffer twice, buckets' narrowing included", function()
    local both = gt.tree(function(x) local y = axpb(x, 2, 0); return y, y:narrow(1, 1, 1) end)
    local padded = gt.tree(function(x) return axpb(x, 2, 0) end, { buckets = { dim = 1, sizes = { 4, 8 } } })
    for _ = 1, 3 do
      local y = gt.scope(function() local a = both(gt.from { 1, 2 }); return a end)
      assert.tensor_near({ 2, 4 }, y)
      local z = gt.scope(function() return padded(gt.from { 1, 2, 3 }) end)
      assert.tensor_near({ 2, 4, 6 }, z)
      local t = gt.scope(function() return { padded(gt.from { 1, 2, 3 }) } end)
      assert.tensor_near({ 2, 4, 6 }, t[1])
    end
  end)

  it("names the scope that released a tensor however the collector runs", function()
    local leak
    local step = gt.tree(function(x)
      local y = gt.scope(function() leak = axpb(x, 2, 0); return axpb(x, 1, 0) end)
      collectgarbage(); collectgarbage()            -- (the scope's closure is garbage now)
      local ok, err = pcall(leak.tolist, leak)
      assert.is_false(ok)
      assert.matches("released by gt.scope at [^;]*lifetimes_spec.lua:%d+; return it from the scope", err)
      return y
    end)
    for _ = 1, 3 do step(gt.from { 1, 2 }) end
  end)

  it("names an eager scope's and a tree call's scope site after the collector ran, and after the call", function()
    local leak, inner
    local function body(x)
      return gt.scope(function() leak = axpb(x, 2, 0); return axpb(x, 1, 0) end)
    end
    local step = gt.tree(body)
    for _, f in ipairs { body, step, step, step } do
      f(gt.from { 1, 2 })
      collectgarbage(); collectgarbage()            -- (the scope's closure is garbage now, the call is over)
      local ok, err = pcall(leak.tolist, leak)
      assert.is_false(ok)
      assert.matches("released by gt.scope at [^;]*lifetimes_spec.lua:%d+; return it from the scope", err)
    end
    inner = gt.from { 1 }
    inner:free()
    collectgarbage()
    assert.matches("released by :free%(%) at [^;]*lifetimes_spec.lua:%d+; :clone%(%) it", select(2, pcall(inner.tolist, inner)))
  end)

  it("holds no scope's closure past its call: dropped trees are collected, eager scopes do not grow memory", function()
    -- a closure per step (the README's idiom) capturing 2 KB: released_by held each closure by buffer address
    local W, b = gt.randn({ 16, 16 }, { seed = 1 }):static(), gt.zeros { 16 }:static()
    local h = gt.randn { 4, 16 }
    local function steps(n)
      for _ = 1, n do
        local big = {}
        for k = 1, 256 do big[k] = k end
        h = gt.scope(function() local _ = big; return ops.gelu(ops.linear(h, W, b)) end)
      end
    end
    steps(200)
    collectgarbage(); collectgarbage()
    local before = collectgarbage("count")
    steps(3000)
    collectgarbage(); collectgarbage()
    assert.is_true(collectgarbage("count") - before < 256, collectgarbage("count") - before)   -- (KiB; was +4 MiB)
    -- trees made and dropped, each released by a scope that captured it: eager, and inside a tree call
    local alive = setmetatable({}, { __mode = "k" })
    local outer = gt.tree(function(x, t) return gt.scope(function() local _ = t; return ops.relu(axpb(x, 1, 0)) end) end)
    for i = 1, 200 do
      local t = gt.tree(function(x) return ops.relu(x) end)
      alive[t] = true
      gt.scope(function() local a = t(h); return ops.relu(ops.relu(a)) end)
      if i % 2 == 0 then outer(h, { t }) end
    end
    outer(h, {})
    collectgarbage(); collectgarbage(); collectgarbage()
    local n = 0
    for _ in pairs(alive) do n = n + 1 end
    assert.are.equal(0, n)
  end)

  it("gives what a failed inner scope made to the scope around it, in eager code as in a tree call", function()
    local leak
    local function body(x)
      local y = gt.scope(function()
        pcall(gt.scope, function() leak = axpb(x, 3, 0); error("inner") end)
        return axpb(x, 2, 0)
      end)
      return y
    end
    local step = gt.tree(body)
    local x = gt.from { 1, 2 }
    for _, f in ipairs { body, step, step, step } do
      assert.tensor_near({ 2, 4 }, f(x))
      assert.matches("released by gt.scope", select(2, pcall(leak.tolist, leak)))
    end
  end)

  it("releases a tree call's outputs at the end of a scope around the call, as a plain function's", function()
    local function body(x) return axpb(x, 2, 0), axpb(x, 1, 1) end
    for _, f in ipairs { body, gt.tree(body), gt.tree(body, { key = function() return 0 end }) } do
      for _ = 1, 4 do
        local y, h
        local r = gt.scope(function()
          y, h = f(gt.from { 1, 2 })
          return axpb(y, 1, 0)
        end)
        assert.tensor_near({ 2, 4 }, r)
        assert.matches("released by gt.scope", select(2, pcall(y.tolist, y)))
        assert.matches("released by gt.scope", select(2, pcall(h.tolist, h)))
        local kept = gt.scope(function() local a = f(gt.from { 1, 2 }); return a end)
        assert.tensor_near({ 2, 4 }, kept)
      end
    end
  end)

  it("returns every result of a scope in a tree call, keeps its tensors among them, and recovers from its error", function()
    local dropped, fail = nil, false
    local step = gt.tree(function(x)
      local a, b, n, none, c = gt.scope(function()
        local t = axpb(x, 3, 0)
        dropped = t
        if fail then error("scope failed") end
        return axpb(t, 1, 1), axpb(t, 2, 0), 7, nil, axpb(x, 1, 0)
      end)
      assert.equals(7, n)
      assert.is_nil(none)
      assert.equals(0, select("#", gt.scope(function() end)))
      return a, b, c
    end)
    local x = gt.from { 1, 2 }
    for i = 1, 6 do
      fail = i == 4
      if fail then
        local ok, err = pcall(step, x)
        assert.is_false(ok)
        assert.is_truthy(tostring(err):find("scope failed", 1, true))
      else
        local a, b, c = step(x)
        assert.tensor_near({ 4, 7 }, a)
        assert.tensor_near({ 6, 12 }, b)
        assert.tensor_near({ 1, 2 }, c)
        assert.stale(dropped)
      end
    end
    assert.is_true(step:stats().replays >= 2)
  end)

  it("frees ordinary memory at the end of a scope outside trees", function()
    -- earlier specs' tensors still waiting for the collector would free their
    -- memory in the middle of this one: collect them first
    collectgarbage()
    collectgarbage()
    local before = gt.memory()
    local y = gt.scope(function()
      local a = gt.zeros { 1024 * 1024 }
      local b = gt.zeros { 1024 * 1024 }
      return ops.add(a, b)
    end)
    assert.are.equal(before + 4 * 1024 * 1024, gt.memory())
    assert.tensor_near({ 0, 0 }, y:narrow(1, 1, 2))
    y:free()
    assert.are.equal(before, gt.memory())
    -- an error inside the scope releases nothing and leaves scopes usable
    assert.has_error(function() gt.scope(function() error("boom") end) end, "boom")
    local z = gt.scope(function() return gt.ones { 2 } end)
    assert.tensor_near({ 1, 1 }, z)
  end)

  -- Scoped: a layer's temporary goes at the scope's end, and its input once
  -- the layer has read it (queue order makes the free safe right away).
  local function chain(x, W, scoped)
    local h = x
    for i = 1, 16 do
      if scoped then
        local nh = gt.scope(function(v) return ops.tanh(ops.linear(v, W)) end, h)
        if i > 1 then h:free() end
        h = nh
      else
        h = ops.tanh(ops.linear(h, W))
      end
    end
    return h
  end

  it("keeps a 16-layer chain's high water to a few layer outputs when layers are scoped", function()
    local W = gt.randn({ 64, 64 }, { seed = 3, scale = 0.1 }):static()
    local x = gt.randn({ 16, 64 }, { seed = 4 })
    local layer = 16 * 64 * 4
    local plain = gt.tree(function(v) return chain(v, W, false) end)
    local scoped = gt.tree(function(v) return chain(v, W, true) end)
    for _ = 1, 3 do assert.tensor_near(plain(x):tolist(), scoped(x), 1e-5) end
    local sp, ss = plain:stats(), scoped:stats()
    assert.is_true(sp.pool.high_water >= 32 * layer, "unscoped high water " .. sp.pool.high_water)
    assert.is_true(ss.pool.high_water <= 4 * layer, "scoped high water " .. ss.pool.high_water)
    assert.is_true(sp.node[0].reusable_bytes >= 28 * layer, "unscoped reusable " .. sp.node[0].reusable_bytes)
    assert.is_true(ss.node[0].reusable_bytes <= layer, "scoped reusable " .. ss.node[0].reusable_bytes)
  end)

  it("makes the releases part of the key: the same launches released otherwise are another node", function()
    local step = gt.tree(function(x, rel)
      local a = axpb(x, 2, 0)
      local b = axpb(a, 1, 1)
      if rel then a:free() end
      return b
    end)
    local x = gt.from { 1, 2 }
    for _ = 1, 3 do step(x, false); step(x, true) end
    assert.are.same(2, step:stats().nodes)
  end)

  it("does not run the garbage collector to record a path", function()
    local step = gt.tree(function(x) return axpb(axpb(x, 2, 0), 1, 1) end)
    local x = gt.from { 1, 2 }
    step(x)
    collectgarbage("collect")
    collectgarbage("stop")
    for _ = 1, 20000 do local _ = { 1, 2, 3 } end      -- garbage a full collection would free
    local before = collectgarbage("count")
    step(x)                                           -- records
    local after = collectgarbage("count")
    collectgarbage("restart")
    assert.are.same(1, step:stats().recorded)
    assert.is_true(after >= before, ("the heap shrank from %.0f to %.0f KiB"):format(before, after))
  end)

  it("counts every visit of a node exactly once: a whole-graph update is not also a replay", function()
    local x1, x2 = gt.from { 1, 2 }, gt.from { 3, 4 }
    local step = gt.tree(function(x)
      local y = gt.tensor { 2 }
      y:copy(x)                                       -- a copy node: a moved source updates the graph
      return axpb(y, 2, 0)
    end)
    for i = 1, 12 do
      local x = i % 2 == 0 and x1 or x2
      assert.tensor_near({ 2 * x:tolist()[1], 2 * x:tolist()[2] }, step(x))
    end
    for _, n in pairs(step:stats().node) do
      assert.are.equal(n.visits, n.warmups + n.records + n.replays + n.updates + n.eager)
    end
  end)

  it("counts a call beyond the last bucket as a call of the tree whose outputs go stale", function()
    local step = gt.tree(function(x) return axpb(x, 2, 0) end, { buckets = { dim = 1, sizes = { 2, 4 } } })
    local y = step(gt.from { 1, 2, 3, 4, 5 })
    assert.tensor_near({ 2, 4, 6, 8, 10 }, y)
    step(gt.from { 1 })
    assert.stale(y)
    local s = step:stats()
    assert.are.same(2, s.calls)
    assert.are.same(1, s.eager)
    assert.are.same(1, s.skips["beyond buckets"])
    -- a call of three segments: three eager visits, each with its skip reason
    local three = gt.tree(function(x)
      local a = axpb(x, 2, 0); gt.cut(); local b = axpb(a, 1, 1); gt.cut(); return axpb(b, 1, 0)
    end, { buckets = { dim = 1, sizes = { 2 } } })
    assert.tensor_near({ 3, 5, 7 }, three(gt.from { 1, 2, 3 }))
    s = three:stats()
    assert.are.same(1, s.calls)
    assert.are.same(3, s.eager)
    assert.are.same(3, s.skips["beyond buckets"])
  end)
end)

-- A release takes effect in queue order everywhere: memory that a tree call's
-- queued launches (or its replayed segments not launched yet) read is given
-- back once they have run, whoever releases it during the call.
describe("releases in queue order", function()
  local N = 4096                      -- (16 KiB a tensor: more than a granule of the pool)
  local function ones() return gt.full({ N }, 1) end
  local function all(t, v)
    local l = t:tolist()
    for i = 1, #l, 511 do if l[i] ~= v then return false end end
    return l[#l] == v
  end

  it("B:trim() inside tree A's call: A's launches queued before it read B's output as it was", function()
    local B = gt.tree(function(x) return axpb(x, 2, 0) end, { name = "B" })
    local A = gt.tree(function(y, x)
      local z = ops.add(y, y)           -- queued (and on replays: a graph not launched yet)
      gt.cut()
      local w = axpb(x, 1, 0)
      B:trim(0)                         -- B's pool goes: y with it, once z is computed
      return ops.add(z, w)
    end, { name = "A" })
    local x = ones()
    for call = 1, 5 do
      local yb = B(x)
      local r = A(yb, x)
      assert.is_true(all(r, 5), "call " .. call)
      assert.matches("lost its memory to tree:trim%(%)", select(2, pcall(yb.tolist, yb)))
    end
    assert.is_true(A:stats().replays > 0)
    -- read after the trim in eager order: it raises there, as eager code would
    local late = gt.tree(function(y) B:trim(0); return ops.add(y, y) end, { name = "late" })
    local yb = B(x)
    assert.error_matches(function() late(yb) end, "lost its memory to tree:trim%(%)")
  end)

  it("a tree collected during another tree's call keeps its memory until that call's launches have run", function()
    local holder = {}
    local function fresh_output(x)      -- B is garbage once its output is
      local B = gt.tree(function(v) return axpb(v, 2, 0) end)
      return B(x)
    end
    local A = gt.tree(function(x)
      local z = ops.add(holder.y, x)    -- queued: reads B's output
      holder.y = nil
      collectgarbage(); collectgarbage(); collectgarbage()   -- B's finalizer runs inside the call
      return ops.mul(z, 1)
    end)
    local x = ones()
    for call = 1, 4 do
      holder.y = fresh_output(x)
      assert.is_true(all(A(x), 3), "call " .. call)
    end
  end)

  it("an ordinary tensor whose last handle goes during a segment that follows a replayed one", function()
    local holder = {}
    local step = gt.tree(function(x, branch)
      local a = axpb(x, 1, 0)
      gt.cut()                          -- the first segment replays: its graph launches at the next segment's end
      local b = ops.add(a, holder.w)    -- queued: reads w
      if branch then b = axpb(b, 1, 0) end   -- a new node the first time: not a replay
      holder.w = nil
      collectgarbage(); collectgarbage()   -- w's struct goes only once b's launch has run
      return b
    end)
    local x = ones()
    for call = 1, 6 do
      holder.w = gt.full({ N }, call)
      assert.is_true(all(step(x, call >= 4), 1 + call), "call " .. call)
    end
  end)
end)
