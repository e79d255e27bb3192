-- spec/harness/fuzz_wide.lua: differential fuzzing of trees against eager runs over
-- more of the API than spec/harness/fuzz.lua.  The programs use views and row
-- slices, in-place writes (into intermediates and into the call's own
-- inputs), host reads that branch (item), device-side branches (gt.cond,
-- gt.loop), syncs, clones and fills inside a call, norms, row reductions,
-- i32 ids, matmul, gt.scope and free, host copies into tensors and
-- t:copy, user kernels (direct and bound launches).  Each seed calls its
-- tree one way:
-- inputs fed back, fresh tensors every call, the same tensors refilled
-- between calls, inputs in a table, one tensor as both inputs, copied
-- inputs, a swapped static weight, buckets over a changing row count, keyed
-- calls (with buckets, with copied inputs too), a low recording limit, two
-- trees in a row, row counts that change without buckets, the same inputs
-- every call with no host reads (paths launched as one graph); trims
-- between calls.
-- The same function runs in the tree and outside any tree; every output
-- and the inputs after the call must agree.  Used by spec/fuzz_spec.lua
-- (fixed seeds) and scripts/fuzz.sh wide.
local gt = require "gt"
local ops = gt.ops

local M = {}

local ROWS, COLS = 4, 8

local function rng(seed) return require("spec.harness.fuzz").rng(seed, true) end

local UNARY = { "relu", "tanh", "sigmoid", "gelu" }

-- User kernels (gt.compile): launched directly and through bound launchers,
-- the generic launch path beside gt.ops's lean one.  In place on y too.
local K = gt.compile([[
__global__ void fz_axpb(float *y, const float *x, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}
__global__ void fz_mix(float *y, const float *a, const float *b, const float *c, int n, float s) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a[i] * s + b[i] - c[i] * 0.5f;
}
__global__ void fz_wide(float *y, const float *a, const float *b, const float *c, const float *d, const float *e,
                        int n, float s) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = tanhf(a[i] * s + b[i] * c[i] - d[i] * 0.25f + e[i] * 0.5f);
}
]], { name = "fuzz_wide.cu" })
local mix_bound = K.fz_mix:config(2, 32)
local wide_bound = K.fz_wide:config(2, 32)         -- six tensors: the replay lane's wide test

-- How a seed calls its tree (MODES[r(#MODES)]).
M.MODES = { "feed", "fresh", "refill", "table", "copy", "swap", "buckets", "keyed", "limit", "alias", "pair",
            "keyed+buckets", "keyed+copy", "shapes", "steady" }

-- Every instruction fills the next register with a {rows, COLS} tensor or
-- nothing; registers 1 and 2 are the inputs.
local function gen(r, mode)
  local prog, nreg = {}, 2
  for _ = 1, 6 + r(12) do
    local k, ins = r(30), nil
    if k <= 2 then ins = { "un", UNARY[r(#UNARY)], r(nreg) }
    elseif k == 3 then ins = { "add", r(nreg), r(nreg) }
    elseif k == 4 then ins = { "axpb", r(nreg) }
    elseif k == 5 then ins = { "linear", r(nreg) }
    elseif k == 6 then ins = { "view", UNARY[r(#UNARY)], r(nreg) }              -- an op on a 1-D view, viewed back
    elseif k == 7 then ins = { "rows", r(nreg), r(nreg) }                       -- dst's first row := tanh(src's first row)
    elseif k == 8 then ins = { "inplace", r(nreg), r(nreg) }                    -- axpby into a register
    elseif k == 9 then ins = { "item", r(nreg), r(nreg), r(COLS) }              -- a host read that picks the next op
    elseif k == 10 then ins = { ({ "sync", "cut" })[r(2)] }
    elseif k == 11 then ins = { "clone", r(nreg) }
    elseif k == 12 then ins = { "fill", r(nreg) }                               -- an intermediate refilled from the host
    elseif k == 13 then ins = { "softmax", r(nreg) }
    elseif k == 14 then ins = { "cond", r(nreg), r(nreg), r(COLS) }             -- gt.cond on an element's sign
    elseif k == 15 then ins = { "loop", r(nreg), r(3) - 1 }                     -- gt.loop, 0..2 turns
    elseif k == 16 then ins = { "alias", r(nreg) }                              -- another handle on the same memory
    elseif k == 17 then ins = { "norm", ({ "layernorm", "rmsnorm" })[r(2)], r(nreg) }
    elseif k == 18 then ins = { "reduce", ({ "sum", "max" })[r(2)], r(nreg) }   -- a row reduction, back to {rows, COLS}
    elseif k == 19 then ins = { "embed", r(nreg) }                              -- argmax's i32 ids through an embedding
    elseif k == 20 then ins = { "matmul", r(nreg) }
    elseif k == 21 then ins = { "addrow", r(nreg) }                             -- a vector added to every row
    elseif k == 22 then ins = { "scope", r(nreg) }                              -- temporaries released by gt.scope
    elseif k == 23 then ins = { "freed", r(nreg) }                              -- a temporary freed, then more made
    elseif k == 24 then ins = { "hostrow", r(nreg), r(5) }                      -- a host copy into a register's first row
    elseif k == 25 then ins = { "tcopy", r(nreg), r(nreg) }                     -- t:copy(src) between registers
    elseif k == 26 then ins = { "kern", r(nreg), r(2) == 1 }                    -- a user kernel, into a new tensor or in place
    elseif k == 27 then ins = { "kmix", r(nreg), r(nreg), r(nreg) }             -- a bound user kernel of three inputs
    elseif k == 28 then ins = { "kscal", r(nreg) }                              -- a user kernel whose scalar is the call's
    elseif k == 30 then ins = { "kwide", r(nreg), r(nreg), r(nreg), r(nreg), r(nreg) }   -- a bound user kernel of five inputs
    else ins = { "mulv", r(nreg), r(nreg) } end
    if ins[1] == "fill" and ins[2] <= 2 then ins[1] = "clone" end
    if mode == "steady" and (ins[1] == "item" or ins[1] == "sync" or ins[1] == "hostrow") then
      ins = { "cut" }                      -- (steady: no host reads or writes, so whole paths replay and fuse)
    end
    ins.cond = r(4) == 1 and r(2) or nil     -- only on calls whose route bit is set
    prog[#prog + 1] = ins
    nreg = nreg + 1
  end
  if mode == "alias" then table.insert(prog, r(2), { "rows", 2, 1 }); nreg = nreg + 1 end   -- a write through one input, read through the other
  return { prog = prog, out = { r(nreg), r(3) == 1 and r(2) or r(nreg) } }
end

-- Runs the program over inputs a, b; env: W, b (weights), route, scale.
local function body(p, env, a, b)
  local regs = { a, b }
  for n, ins in ipairs(p.prog) do
    local op, res = ins[1], nil
    local x = regs[ins[2]]
    if ins.cond and not env.route[ins.cond] then x = nil; op = "none" end
    if op == "un" then x = regs[ins[3]]; res = x and ops[ins[2]](x)
    elseif op == "add" then local y = regs[ins[3]]; res = x and y and ops.add(x, y)
    elseif op == "mulv" then local y = regs[ins[3]]; res = x and y and ops.mul(x, y)
    elseif op == "axpb" then res = x and ops.axpby(1, x, env.scale, ops.mul(x, 0.5))
    elseif op == "linear" then res = x and ops.tanh(ops.linear(x, env.W, env.b))
    elseif op == "softmax" then res = x and ops.softmax(x)
    elseif op == "view" then
      x = regs[ins[3]]
      if x then res = ops[ins[2]](x:view({ x.numel })):view(x.shape) end
    elseif op == "rows" then
      local y = regs[ins[3]]
      if x and y then ops.copy(x:narrow(1, 1, 1), ops.tanh(y:narrow(1, 1, 1))) end
    elseif op == "inplace" then
      local y = regs[ins[3]]
      if x and y then ops.axpby(0.5, y, 0.75, x) end
    elseif op == "item" then
      local y = regs[ins[3]]
      if x and y then
        local v = x:view({ x.numel }):narrow(1, ins[4], 1):item()
        res = v > 0 and ops.relu(y) or ops.mul(y, -1)
      end
    elseif op == "cond" then
      local y = regs[ins[3]]
      if x and y then
        local flag = ops.relu(x:view({ x.numel }):narrow(1, ins[4], 1))   -- > 0 where the element is
        local dst = ops.mul(y, 0)
        gt.cond(flag, function() ops.copy(dst, ops.tanh(y)) end, function() ops.axpby(2, y, 0, dst) end)
        res = dst
      end
    elseif op == "loop" then
      if x then
        local left, one = gt.full({ 1 }, ins[3]), gt.ones({ 1 })
        local acc = ops.mul(x, 1)
        gt.loop(left, function() ops.axpby(0.5, x, 0.5, acc); ops.axpby(-1, one, 1, left) end, { max = 4 })
        res = acc
      end
    elseif op == "alias" then res = x and x:view({ x.numel }):view(x.shape)
    elseif op == "hostrow" then
      if x then
        local v = {}
        for j = 1, COLS do v[j] = (j - ins[3]) * 0.25 end
        x:narrow(1, 1, 1):copy({ v })
      end
    elseif op == "tcopy" then
      local y = regs[ins[3]]
      if x and y then x:copy(y) end
    elseif op == "kern" then
      if x then
        local y = ins[3] and x or gt.tensor(x.shape)
        K.fz_axpb(2, 64, y, x, x.numel, 0.75, 0.125)
        res = y
      end
    elseif op == "kmix" then
      local y, z = regs[ins[3]], regs[ins[4]]
      if x and y and z then
        res = gt.tensor(x.shape)
        mix_bound(res, x, y, z, x.numel, 1.5)
      end
    elseif op == "kwide" then
      local b1, b2, b3, b4 = regs[ins[3]], regs[ins[4]], regs[ins[5]], regs[ins[6]]
      if x and b1 and b2 and b3 and b4 then
        res = gt.tensor(x.shape)
        wide_bound(res, x, b1, b2, b3, b4, x.numel, 0.75)
      end
    elseif op == "kscal" then
      if x then
        res = gt.tensor(x.shape)
        K.fz_axpb(1, 128, res, x, x.numel, env.scale, 1)
      end
    elseif op == "scope" then
      res = x and gt.scope(function()
        local t = ops.tanh(ops.linear(x, env.W, env.b))
        return ops.add(ops.mul(t, 0.5), x)
      end)
    elseif op == "freed" then
      if x then
        local t = ops.sigmoid(x)
        local u = ops.mul(t, t)
        t:free()
        res = ops.add(u, ops.relu(x))
      end
    elseif op == "norm" then
      x = regs[ins[3]]
      if x then res = ins[2] == "layernorm" and ops.layernorm(x, env.g, env.b) or ops.rmsnorm(x, env.g) end
    elseif op == "reduce" then
      x = regs[ins[3]]
      if x then res = ops.linear(ops[ins[2]](x):view({ x.shape[1], 1 }), env.Wrow) end
    elseif op == "embed" then res = x and ops.embedding(ops.argmax(x), env.E)
    elseif op == "matmul" then res = x and ops.matmul(x, env.W)
    elseif op == "addrow" then res = x and ops.add(x, env.b)
    elseif op == "sync" then gt.sync()
    elseif op == "cut" then gt.cut()
    elseif op == "clone" then res = x and x:clone()
    elseif op == "fill" then if x then x:fill(0.25) end
    end
    regs[n + 2] = res or nil
  end
  return regs[p.out[1]] or a, regs[p.out[2]] or b
end

local function close(x, y, what)
  local function walk(u, v, at)
    if type(u) == "table" then
      if type(v) ~= "table" or #u ~= #v then return false, what .. at .. ": shapes differ" end
      for i = 1, #u do
        local ok, msg = walk(u[i], v[i], at .. "[" .. i .. "]")
        if not ok then return false, msg end
      end
      return true
    end
    if math.abs(u - v) > 1e-4 * (1 + math.abs(u)) then
      return false, ("%s%s: tree %.6g, eager %.6g"):format(what, at, u, v)
    end
    return true
  end
  return walk(x:tolist(), y:tolist(), "")
end

-- Seed's generator (its state after the program), mode and program.
function M.program(seed)
  local r = rng(seed)
  local mode = M.MODES[r(#M.MODES)]
  return r, mode, gen(r, mode)
end

-- The program as text (for a failing seed's report).
function M.dump(seed)
  local _, mode, p = M.program(seed)
  local lines = { "mode " .. mode }
  for n, ins in ipairs(p.prog) do
    local parts = {}
    for _, v in ipairs(ins) do parts[#parts + 1] = tostring(v) end
    lines[#lines + 1] = ("r%d = %s%s"):format(n + 2, table.concat(parts, " "), ins.cond and (" if route " .. ins.cond) or "")
  end
  lines[#lines + 1] = ("return r%d, r%d"):format(p.out[1], p.out[2])
  return table.concat(lines, "\n")
end

-- Runs seed's program for `calls` calls in a tree (called as its mode says)
-- and eagerly; returns nil, or a message naming the mode and the first mismatch.
function M.check(seed, calls)
  local r, mode, p = M.program(seed)
  local W = gt.randn({ COLS, COLS }, { seed = seed, scale = 0.3 }):static()
  local W2 = gt.randn({ COLS, COLS }, { seed = seed + 5, scale = 0.3 }):static()
  local bias = gt.randn({ COLS }, { seed = seed + 1, scale = 0.1 }):static()
  local extra = { g = gt.randn({ COLS }, { seed = seed + 7, scale = 0.5 }):static(),
                  Wrow = gt.randn({ 1, COLS }, { seed = seed + 8, scale = 0.2 }):static(),
                  E = gt.randn({ COLS, COLS }, { seed = seed + 9 }):static() }
  local tenv = { W = W, b = bias, g = extra.g, Wrow = extra.Wrow, E = extra.E }
  local opts = { warmup = r(3) - 1, name = "wide" .. seed, warn_shapes = false }
  local fn = function(a, b, route, scale)
    tenv.route, tenv.scale = route, scale
    return body(p, tenv, a, b)
  end
  if mode == "table" then fn = function(t, route, scale) return body(p, (function() tenv.route, tenv.scale = route, scale; return tenv end)(), t[1], t[2]) end end
  local keyed, bucketed = mode:find("keyed") ~= nil, mode:find("buckets") ~= nil
  if mode:find("copy") then opts.copy_inputs = true end
  if bucketed then opts.buckets = { dim = 1, sizes = { 2, 4 } } end
  if keyed then                -- the route as two booleans (a table argument is never keyed), the scale patched
    fn = function(a, b, r1, r2, scale)
      tenv.route, tenv.scale = { r1, r2 }, scale
      return body(p, tenv, a, b)
    end
    opts.key = function(_, _, r1, r2) return r1, r2 end
    opts.patch = { 5 }
    opts.verify = r(3) == 1 and 3 or nil
  end
  if mode == "limit" then opts.max_recordings = r(3) - 1; opts.on_limit = "eager" end
  local step = gt.tree(fn, opts)
  local second = mode == "pair" and gt.tree(fn, { warmup = r(2) - 1, name = "wide" .. seed .. "b" })
  local rows = ROWS
  local function input(s) return gt.randn({ rows, COLS }, { seed = s }) end
  local ta, tb = input(seed + 2), input(seed + 3)
  if mode == "alias" then tb = ta end
  local ea, eb = ta:clone(), nil
  eb = mode == "alias" and ea or tb:clone()
  local log = {}
  for call = 1, calls do
    local route, scale = { r(2) == 1, r(2) == 1 }, (r(5) - 3) * 0.25
    if mode == "steady" then route[1], scale = true, 0.25 end   -- (two paths, no scalar to patch)
    if mode == "swap" and r(3) == 1 then tenv.W = tenv.W == W and W2 or W end
    if bucketed or mode == "shapes" then   -- (shapes: each row count its own recordings)
      rows = r(4)
      ta, tb = input(seed * 31 + call), input(seed * 37 + call)
      ea, eb = ta:clone(), tb:clone()
    elseif mode == "fresh" or mode == "copy" or (keyed and r(2) == 1) then
      ta, tb = input(seed * 31 + call), input(seed * 37 + call)
      ea, eb = ta:clone(), tb:clone()
    elseif mode == "refill" then
      if call == 1 then ta, tb = ta:clone(), tb:clone() end
      ta:copy(input(seed * 31 + call)); tb:copy(input(seed * 37 + call))
      ea, eb = ta:clone(), tb:clone()
    end
    log[#log + 1] = (route[1] and "1" or "0") .. (route[2] and "1" or "0")
    if r(mode == "steady" and 40 or 10) == 1 then   -- a trim may take the last outputs' memory: then they are stale, and fresh copies go in
      step:trim(r(2) - 1); log[#log + 1] = "trim"
      if ta:is_stale() or tb:is_stale() then   -- (both sides lose any sharing between the two inputs alike)
        local same = ea == eb
        ea = ea:clone(); eb = same and ea or eb:clone()
        ta = ea:clone(); tb = same and ta or eb:clone()
      end
    end
    local na, nb
    if mode == "table" then na, nb = step({ ta, tb }, route, scale)
    elseif keyed then na, nb = step(ta, tb, route[1], route[2], scale)
    else na, nb = step(ta, tb, route, scale) end
    local eenv = { W = tenv.W, b = bias, route = route, scale = scale, g = extra.g, Wrow = extra.Wrow, E = extra.E }
    local ma, mb = body(p, eenv, ea, eb)
    if mode == "pair" then               -- a second tree takes the first one's outputs (another tree's pool: external)
      na, nb = second(na, nb, route, scale)
      ma, mb = body(p, eenv, ma, mb)
    end
    local ok, msg = close(na, ma, "output 1")
    if ok then ok, msg = close(nb, mb, "output 2") end
    -- the inputs after the call (in-place writes reach them unless copied), while they are not stale
    if ok and not ta:is_stale() then ok, msg = close(ta, ea, "input 1 after the call") end
    if ok and not tb:is_stale() then ok, msg = close(tb, eb, "input 2 after the call") end
    if not ok then
      return ("seed %d (%s) call %d: %s; routes %s"):format(seed, mode, call, msg, table.concat(log, " "))
    end
    if mode == "feed" or mode == "table" or mode == "swap" or mode == "limit" or mode == "pair" or keyed and not bucketed then
      ta, tb, ea, eb = na, nb, ma, mb
    elseif mode == "alias" then           -- one tensor as both inputs: a fresh one, or the last output fed back
      if r(2) == 1 then ta, ea = input(seed * 31 + call), nil; ea = ta:clone() else ta, ea = na, ma end
      tb, eb = ta, ea
    end
  end
  return require("spec.harness.fuzz").counted(step, ("seed %d (%s)"):format(seed, mode))
end

return M
