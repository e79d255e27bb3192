-- spec/harness/fuzz.lua: differential fuzzing of trees against eager runs.
-- A seed makes a random step function: ops over a register file, some of them
-- only on some routes, gt.cut()s, gt.scope()s, frees, tensors kept in a
-- table past the call, and outputs (intermediates or inputs unchanged) that
-- the next call takes as its inputs (a third of the linear layers run in
-- bf16).  The same function runs in a tree and outside any tree on the same
-- routes; every output and kept tensor must agree after every call.  Used by
-- spec/fuzz_spec.lua (fixed seeds) and scripts/fuzz.sh (a longer run).  Not
-- a spec itself.
local gt = require "gt"
local ops = gt.ops

local M = {}

local ROWS, COLS = 4, 8

-- A small deterministic generator (the program must not depend on math.random's state):
-- r(n) is in 1..n.  high: from the state's high bits (the low ones of this
-- generator cycle short; this file's seeds were chosen with the low ones).
local function rng(seed, high)
  local s = seed * 2654435761 % 4294967296 + 1
  return function(n)
    s = (s * 1103515245 + 12345) % 2147483648
    return (high and math.floor(s / 65536) or s) % n + 1
  end
end
M.rng = rng

local UNARY = { "relu", "tanh", "sigmoid", "gelu" }

-- A program: a list of instructions; each one fills the next register (nil
-- for cut, free and keep; a scope's body fills its own, then its result
-- one).  Registers 1 and 2 are the inputs.
local function gen_block(r, nreg, depth, len, in_scope)
  local prog = {}
  for _ = 1, len do
    local kind = r(10)
    local cond = r(3) == 1 and r(2) or nil           -- only on calls whose route bit `cond` is set
    local ins
    if kind <= 3 then ins = { "un", UNARY[r(#UNARY)], r(nreg) }
    elseif kind == 4 then ins = { "add", r(nreg), r(nreg) }
    elseif kind == 5 then ins = { "axpb", r(nreg) }   -- a scalar from the call's arguments
    elseif kind == 6 then ins = { "linear", r(nreg) }
    elseif kind == 7 and not in_scope then ins = { "cut" }
    elseif kind == 8 and depth < 2 then
      local body
      body, nreg = gen_block(r, nreg, depth + 1, r(4), true)
      ins = { "scope", body }
    elseif kind == 9 then ins = { "free", r(nreg) }
    elseif not in_scope then ins = { "keep", r(nreg) }
    else ins = { "un", "relu", r(nreg) } end
    ins.cond = cond
    prog[#prog + 1] = ins
    nreg = nreg + 1
  end
  return prog, nreg
end

function M.program(seed)
  local r = rng(seed)
  local prog, nreg = gen_block(r, 2, 0, 6 + r(10), false)
  -- a third of the programs return an input unchanged: fed back, it is a
  -- staged tensor that the next call must not stage another input over
  local out = { r(nreg), r(3) == 1 and r(2) or r(nreg) }
  return { prog = prog, out = out, seed = seed }
end

local function count(prog)
  local n = 0
  for _, ins in ipairs(prog) do n = n + 1 + (ins[1] == "scope" and count(ins[2]) or 0) end
  return n
end

-- Runs a block over registers regs (nil: not made on this route; false: freed
-- or released); n: the last register filled so far.
local function run_block(prog, regs, n, env)
  for _, ins in ipairs(prog) do
    local op, live = ins[1], not ins.cond or env.route[ins.cond]
    local res
    if op == "scope" then
      local first, size = n + 1, count(ins[2])
      if live then
        res = gt.scope(function()
          run_block(ins[2], regs, n, env)
          return regs[n + size] or nil
        end)
      end
      for k = first, first + size - 1 do if regs[k] then regs[k] = false end end  -- released by the scope
      n = n + size
    elseif live then
      if op == "un" then local x = regs[ins[3]]; if x then res = ops[ins[2]](x) end
      elseif op == "add" then
        local a, b = regs[ins[2]], regs[ins[3]]
        if a and b then res = ops.add(a, b) end
      elseif op == "axpb" then local x = regs[ins[2]]; if x then res = ops.axpby(1, x, env.scale, ops.mul(x, 0.5)) end
      elseif op == "linear" then
        local x = regs[ins[2]]
        if x and ins[2] % 3 == 0 then         -- (every third register: in bf16, through t:to)
          res = ops.tanh(ops.linear(x:to("bf16"), env.Wh, env.bh)):to("f32")
        elseif x then res = ops.tanh(ops.linear(x, env.W, env.b)) end
      elseif op == "cut" then gt.cut()
      elseif op == "free" then
        local k = ins[2]
        if k > 2 and regs[k] and not env.kept[regs[k]] then regs[k]:free(); regs[k] = false end
      elseif op == "keep" then
        local x = regs[ins[2]]
        if x then env.keep[#env.keep + 1] = x; env.kept[x] = true end
      end
    end
    n = n + 1
    regs[n] = res or nil
  end
  return n
end

local function body(p, env, a, b)
  local regs = { a, b }
  run_block(p.prog, regs, 2, env)
  local o1, o2 = regs[p.out[1]] or a, regs[p.out[2]] or b
  return o1, o2
end

local function values(t) return t:tolist() end

local function close(x, y, what)
  for i = 1, #x do
    for j = 1, #x[i] do
      local u, v = x[i][j], y[i][j]
      if math.abs(u - v) > 1e-4 * (1 + math.abs(u)) then
        return false, ("%s[%d][%d]: tree %.6g, eager %.6g"):format(what, i, j, u, v)
      end
    end
  end
  return true
end

-- Runs program `seed` for `calls` calls in a tree and eagerly; returns nil, or
-- a message naming the first mismatch.
function M.check(seed, calls)
  local p = M.program(seed)
  local r = rng(seed + 7919)
  local W = gt.randn({ COLS, COLS }, { seed = seed, scale = 0.3 }):static()
  local bias = gt.randn({ COLS }, { seed = seed + 1, scale = 0.1 }):static()
  local Wh, bh = W:to("bf16"):static(), bias:to("bf16"):static()
  local tenv = { W = W, b = bias, Wh = Wh, bh = bh }
  local step = gt.tree(function(a, b, route, scale)
    tenv.route, tenv.scale, tenv.keep, tenv.kept = route, scale, {}, {}
    return body(p, tenv, a, b)
  end, { warmup = r(2) - 1, name = "fuzz" .. seed })
  local ta = gt.randn({ ROWS, COLS }, { seed = seed + 2 })
  local tb = gt.randn({ ROWS, COLS }, { seed = seed + 3 })
  local ea, eb = ta:clone(), tb:clone()
  for call = 1, calls do
    local route, scale = { r(2) == 1, r(2) == 1 }, (r(5) - 3) * 0.25
    local na, nb = step(ta, tb, route, scale)
    local eenv = { W = W, b = bias, Wh = Wh, bh = bh, route = route, scale = scale, keep = {}, kept = {} }
    local ma, mb = body(p, eenv, ea, eb)
    local ok, msg = close(values(na), values(ma), "output 1")
    if ok then ok, msg = close(values(nb), values(mb), "output 2") end
    for k = 1, #tenv.keep do
      if ok then ok, msg = close(values(tenv.keep[k]), values(eenv.keep[k]), "kept " .. k) end
    end
    if not ok then return ("seed %d call %d: %s"):format(seed, call, msg) end
    ta, tb, ea, eb = na, nb, ma, mb
  end
  return M.counted(step, "seed " .. seed)
end

-- nil and the tree's stats when every node's visits are each counted once
-- (warmup, record, replay, update or eager), else a message (what: the program).
function M.counted(step, what)
  local s = step:stats()
  for id, n in pairs(s.node) do
    if n.visits ~= n.warmups + n.records + n.replays + n.updates + n.eager then
      return ("%s: node %d has %d visits but %d+%d+%d+%d+%d counted"):format(what, id, n.visits,
        n.warmups, n.records, n.replays, n.updates, n.eager)
    end
  end
  return nil, s
end

return M
