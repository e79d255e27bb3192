-- spec/harness/fuzz_keyed.lua: differential fuzzing of keyed trees against
-- eager runs.  A seed makes two random step functions, written out as Lua
-- source (M.program's description is that source and the trees' options):
-- A(x, y, w, p, q, k) under gt.tree(A, {key = k, patch = ..., verify = ...,
-- copy_inputs = ...}) and B(x, p, k), a second keyed tree that feeds A and
-- is fed by it.  The bodies launch small user kernels (compiled once per
-- process) whose float, double, int, unsigned, long long and bool scalars
-- are the patch numbers used raw, through arithmetic (+ - * / % ^, unary
-- minus, math.floor/min/max/abs), through branches and comparisons, through
-- tostring, tonumber, type checks, table keys, a Lua function and a string
-- round trip; two patch numbers that are equal on some calls; numbers an
-- int slot refuses (5.5, 2^31, -1, NaN, inf); keys of signed zeros (1 / k),
-- strings and booleans.  The numbers also reach gt.ops (add, mul, axpby),
-- gt.full, gt.cond and gt.loop bodies and a loop's max, and come back as
-- results (a number computed from them, or one returned as is).  The
-- bodies read tensors from arguments
-- (fresh, fed back, two rows of one buffer, one row twice, the other
-- tree's output), a static weight argument swapped W1 -> W2 -> W1 (and
-- freed and made again), a captured static weight changed in place, and
-- captured non-static tensors: an upvalue replaced, collected, freed or
-- written, and the other tree's output that its next call overwrites.
-- Between calls: trims and floors of either tree, and A's body may trim B.
--
-- The same source runs in the trees and outside any tree (the eager
-- world); after every call each result, the inputs and the captured
-- tensors must agree exactly (NaN with NaN, -0 apart from 0), and where
-- eager raises the tree must raise too.  A tensor that goes stale in the
-- trees' world (a tree's next call, a trim) is matched in the eager world
-- by a released copy, so a later use raises on both sides.
-- Used by spec/fuzz_keyed_spec.lua (fixed seeds) and scripts/fuzz.sh keyedfuzz.
local gt = require "gt"

local M = { trace = os.getenv("KEYEDFUZZ_TRACE") == "1", skip = {} }
-- M.skip[word]: leave out a feature, to tell one mismatch class from another
-- (KEYEDFUZZ_SKIP="floor,trim" say; words: floor, trim, trimB, U, Uarg (a
-- captured tensor, U or O, also passed as an argument), Ulimit (Uarg only
-- where a tree can tell: a keyed tree with `patch` numbers or copy_inputs; the known
-- limit is docs/DESIGN.md section 5's), O, verify,
-- copy, special, retnum, cond, W2, rows, patch (no patch numbers), zero (no
-- -0.0 key or number), arith (numbers into kernels as they are), equal (p ~= q))
for w in (os.getenv("KEYEDFUZZ_SKIP") or ""):gmatch("[%a%d]+") do M.skip[w] = true end

local N = 8                                   -- every data tensor is {N} f32

local function rng(seed) return require("spec.harness.fuzz").rng(seed, true) end

-- The kernels (one compile per process: gt.compile caches by source).  Grid-
-- stride loops, so one launch shape fits every n.
local SRC = [[
#define FOR_I for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
__global__ void kz_f(float *y, const float *x, float s, int n) { FOR_I y[i] = x[i] * 0.5f + s; }
__global__ void kz_d(float *y, const float *x, double s, int n) { FOR_I y[i] = x[i] + (float)(s * 0.25); }
__global__ void kz_i(float *y, const float *x, int s, int n) { FOR_I y[i] = x[i] + (float)(s % 977) - (float)(s / 977) * 0.001f; }
__global__ void kz_u(float *y, const float *x, unsigned s, int n) { FOR_I y[i] = x[i] + (float)(s % 977u) + (float)(s / 977u) * 0.001f; }
__global__ void kz_l(float *y, const float *x, long long s, int n) { FOR_I y[i] = x[i] - (float)(s % 977) + (float)(s / 977) * 0.001f; }
__global__ void kz_b(float *y, const float *x, bool s, int n) { FOR_I y[i] = s ? x[i] + 1.0f : -x[i]; }
__global__ void kz_rep(float *y, const float *x, int reps, int n) {
  int m = reps < 0 ? 0 : reps > 6 ? 6 : reps;
  FOR_I { float v = x[i]; for (int r = 0; r < m; r++) v = v * 0.5f + 1.0f; y[i] = v; }
}
__global__ void kz_2(float *y, const float *x, float a, float b, int n) { FOR_I y[i] = x[i] * a + b; }
__global__ void kz_w(float *y, const float *x, const float *w, float s, int n) { FOR_I y[i] = x[i] + w[i] * s; }
__global__ void kz_in(float *y, const float *x, float s, int n) { FOR_I y[i] = y[i] * 0.5f + x[i] * s; }
]]
local K = gt.compile(SRC, { name = "fuzz_keyed.cu" })
local KB = {}                                 -- bound launchers: the other launch path
for _, name in ipairs({ "kz_f", "kz_d", "kz_i", "kz_u", "kz_l", "kz_b", "kz_rep" }) do KB[name] = K[name]:config(1, 32) end

-- The one-scalar kernels (int and float twice: the slots a patch number most often reaches).
local KS = { "kz_f", "kz_d", "kz_i", "kz_u", "kz_l", "kz_b", "kz_rep", "kz_i", "kz_f" }

-- Numbers for p and q: the program's pool, and now and then one of these.
local SPECIAL = { 5.5, 2 ^ 31, -1, 0 / 0, 0.0, -0.0, 2 ^ 32, -2 ^ 31, 2 ^ 31 - 1, 1 / 0, -1 / 0, 0.25, 1e10,
                  4294967295, -2.5, 8, 100 }
local POOLS = { { 0, 1, 2, 3 }, { 1, 2 }, { 1, 2, 3, 8, 100, 0.5 }, { 0, -1, 2, 0.5 }, { 3 } }
local KEYS = { { 1 }, { 0.0, -0.0 }, { 1, 2, 0.0, -0.0 }, { "a", "b" }, { true, false }, { 1, "a", true },
               { 0 / 0, 1 } }
local CONSTS = { "0", "1", "2", "3", "0.5", "8", "-1", "100" }
local CMPS = { "<", "<=", "==", "~=", ">", ">=" }

-- A number expression over the names in `vars` (d: depth left).
local function expr(r, d, P, vars)
  local c = r(d <= 0 and 4 or 28)
  if M.skip.arith then c = 1 end
  if P.follow and c > 13 and c ~= 22 then c = r(13) end   -- (arithmetic only: what a trace follows)
  if c <= 3 then return vars[r(#vars)] end
  if c == 4 then return CONSTS[r(#CONSTS)] end
  local function e() return expr(r, d - 1, P, vars) end
  if c <= 6 then return "(" .. e() .. " + " .. e() .. ")"
  elseif c == 7 then return "(" .. e() .. " - " .. e() .. ")"
  elseif c <= 9 then return "(" .. e() .. " * " .. e() .. ")"
  elseif c == 10 then return "(" .. e() .. " / " .. e() .. ")"
  elseif c == 11 then return "(" .. e() .. " % " .. e() .. ")"
  elseif c == 12 then return "(" .. e() .. " ^ 2)"
  elseif c == 13 then return "(- " .. e() .. ")"
  elseif c == 14 then return "math.floor(" .. e() .. ")"
  elseif c == 15 then return "math.min(" .. e() .. ", " .. e() .. ")"
  elseif c == 16 then return "math.max(" .. e() .. ", " .. e() .. ")"
  elseif c == 17 then return "math.abs(" .. e() .. ")"
  elseif c == 18 then return "((" .. e() .. " " .. CMPS[r(#CMPS)] .. " " .. e() .. ") and " .. e() .. " or " .. e() .. ")"
  elseif c == 19 then local v = vars[r(#vars)]; return "(" .. v .. " % 2 == 0 and 100 or " .. v .. ")"
  elseif c == 20 then return "tonumber(tostring(" .. e() .. "))"
  elseif c == 21 then return "(T[" .. e() .. "] or " .. e() .. ")"     -- a table key
  elseif c == 22 then return "env.f(" .. e() .. ")"                     -- a Lua function of it
  elseif c == 23 and P.numkey then return "(type(k) == 'number' and k or 1)"
  elseif c == 24 then local v = vars[r(#vars)]; return "(type(" .. v .. ") == 'number' and " .. v .. " or 7)"  -- a check
  elseif c == 25 then return "tonumber(" .. e() .. ")"
  elseif c == 26 then return "env.g(" .. e() .. ")"                     -- a Lua loop comparing it
  elseif c == 27 then return "(((" .. e() .. ") .. '') + 0)"              -- a string and back
  end
  return vars[r(#vars)] .. " + 1"
end

-- A statement that assigns register dst (a new tensor, or an input written
-- in place) from the registers regs (d: how deep branches may nest).
local function stmt(r, d, P, regs, dst, vars, who)
  local function src() return regs[#regs - r(math.min(#regs, 3)) + 1] end
  local function e() return expr(r, r(3), P, vars) end
  -- (inside gt.cond and gt.loop bodies: arithmetic only, which raises nothing.  A tree queues
  -- both bodies of a cond and a loop's body once, eager code runs the one taken, or none)
  local safe = setmetatable({ follow = true }, { __index = P })
  local function es() return expr(r, r(3), safe, vars) end
  local c = r(d <= 0 and 11 or 16)
  if (c == 10 or c == 11) and M.skip.cond then c = 1 end
  if P.follow and c >= 14 then c = 12 end                   -- (branches on the key only)
  if c <= 3 then                                                       -- a one-scalar kernel
    local kn, x = KS[r(#KS)], src()
    if r(3) == 1 then return ("%s = gt.tensor(%s.shape); KB.%s(%s, %s, %s, %s.numel)"):format(dst, x, kn, dst, x, e(), x) end
    return ("%s = gt.tensor(%s.shape); K.%s(1, 32, %s, %s, %s, %s.numel)"):format(dst, x, kn, dst, x, e(), x)
  elseif c == 4 then                                                   -- two scalars (often the two patch numbers)
    local x = src()
    local a, b = vars[1], vars[#vars]
    if r(2) == 1 then a, b = e(), e() end
    return ("%s = gt.tensor(%s.shape); K.kz_2(1, 32, %s, %s, %s, %s, %s.numel)"):format(dst, x, dst, x, a, b, x)
  elseif c == 5 then                                                   -- a weight read beside x
    local x, w = src(), P.wsrc[who][r(#P.wsrc[who])]
    return ("%s = gt.tensor(%s.shape); K.kz_w(1, 32, %s, %s, %s, %s, %s.numel)"):format(dst, x, dst, x, w, e(), x)
  elseif c == 6 then                                                   -- ops with a number (or a host fill of it)
    if r(4) == 1 then local x = src(); return ("%s = gt.ops.add(%s, gt.full(%s.shape, %s))"):format(dst, x, x, e()) end
    return ("%s = gt.ops.%s(%s, %s)"):format(dst, r(2) == 1 and "add" or "mul", src(), e())
  elseif c == 7 then                                                   -- axpby's two numbers
    return ("%s = gt.ops.mul(%s, 1); gt.ops.axpby(%s, %s, %s, %s)"):format(dst, src(), e(), src(), e(), dst)
  elseif c == 8 then                                                   -- in place into an input (or the captured U)
    local t = P.inplace[who][r(#P.inplace[who])]
    return ("K.kz_in(1, 32, %s, %s, %s, %s.numel); %s = %s"):format(t, src(), e(), t, dst, t)
  elseif c == 9 then                                                   -- the key's number: 1 / -0 is -inf
    if P.numkey then return ("%s = gt.ops.mul(%s, type(k) == 'number' and 1 / k or 3)"):format(dst, src()) end
    return ("%s = gt.ops.add(%s, %s)"):format(dst, src(), P.wsrc[who][r(#P.wsrc[who])])
  elseif c == 10 then                                                  -- gt.cond on a number the device computes from them
    local x = src()
    return ("%s = gt.ops.mul(%s, 0); local f = gt.tensor({ 1 }); K.kz_f(1, 32, f, %s, %s, 1); " ..
      "gt.cond(f, function() K.kz_f(1, 32, %s, %s, %s, %s.numel) end, function() K.kz_in(1, 32, %s, %s, %s, %s.numel) end)")
      :format(dst, x, x, e(), dst, x, es(), x, dst, x, es(), x)
  elseif c == 11 then                                                  -- gt.loop, its count from them (max: maybe too)
    local x = src()
    local max = r(4) == 1 and "(" .. e() .. ") % 5" or tostring(r(4))   -- (0, NaN, a fraction: eager raises)
    return ("%s = gt.ops.mul(%s, 1); local left = gt.tensor({ 1 }); K.kz_f(1, 32, left, %s, %s, 1); " ..
      "gt.loop(left, function() K.kz_in(1, 32, %s, %s, %s, %s.numel); K.kz_f(1, 32, left, left, -1, 1) end, { max = %s })")
      :format(dst, x, x, e(), dst, x, es(), x, max)
  elseif c <= 13 then                                                  -- a branch on the key
    local kv = P.keys[r(#P.keys)]
    local kt = type(kv) == "string" and ("%q"):format(kv) or kv ~= kv and "k ~= k" or tostring(kv)
    local test = kv ~= kv and "k ~= k" or "k == " .. kt
    return ("if %s then %s else %s end"):format(test, stmt(r, d - 1, P, regs, dst, vars, who),
      stmt(r, d - 1, P, regs, dst, vars, who))
  else                                                                 -- a branch on the numbers
    return ("if %s %s %s then %s else %s end"):format(e(), CMPS[r(#CMPS)], e(),
      stmt(r, d - 1, P, regs, dst, vars, who), stmt(r, d - 1, P, regs, dst, vars, who))
  end
end

-- A body: its source lines, registers t1..tn.
local function body(r, P, who, args, vars, len)
  local lines, regs = {}, {}
  for _, a in ipairs(args) do regs[#regs + 1] = a end
  local n = 0
  for _ = 1, len do
    local c = r(12)
    if c == 1 then lines[#lines + 1] = "gt.cut()"
    elseif c == 2 and who == "A" and P.trimB then lines[#lines + 1] = "env.trimB()"
    else
      n = n + 1
      local dst = "t" .. n
      lines[#lines + 1] = "local " .. dst .. "; " .. stmt(r, 1, P, regs, dst, vars, who)
      regs[#regs + 1] = dst
    end
  end
  if n == 0 then
    n = 1
    lines[#lines + 1] = ("local t1 = gt.ops.add(%s, %s)"):format(args[1], vars[1])
  end
  -- the results: a tensor made, and maybe another, an input as is, a number of the patch numbers
  local ret = "t" .. n
  local c = r(8)
  if c <= 2 then ret = ret .. ", t" .. r(n)
  elseif c == 3 then ret = ret .. ", " .. args[1]
  elseif c == 4 and P.retnum then ret = ret .. ", " .. expr(r, 1, P, vars)
  elseif c == 5 then ret = ret .. ", " .. vars[1] end
  lines[#lines + 1] = "return " .. ret
  return lines
end

-- A description of seed's program (its source and options) and the program.
function M.program(seed)
  local r = rng(seed)
  local P = { seed = seed }
  P.keys = KEYS[r(#KEYS)]
  for _, k in ipairs(P.keys) do if type(k) == "number" then P.numkey = true end end
  P.pool = POOLS[r(#POOLS)]
  P.special = ({ 0, 5, 15, 30 })[r(4)]                    -- percent of numbers drawn from SPECIAL
  P.patchA = ({ { 4, 5 }, { 4, 5 }, { 4 }, { 5 }, {} })[r(5)]
  P.patchB = ({ { 2 }, { 2 }, {} })[r(3)]
  P.verifyA = ({ false, false, 1, 2, 3 })[r(5)]
  P.verifyB = ({ false, false, false, 2 })[r(4)]
  P.copy = r(3) == 1
  P.warmupA, P.warmupB = r(3) - 1, r(2) - 1
  P.useU, P.useO, P.trimB, P.writeU = r(2) == 1, r(2) == 1, r(4) == 1, r(3) == 1
  local skip = M.skip
  if skip.U then P.useU = false end
  if skip.O then P.useO = false end
  if skip.trimB then P.trimB = false end
  P.noUarg = skip.Uarg or (skip.Ulimit and #P.patchA == 0 and not P.copy) or false
  if skip.verify then P.verifyA, P.verifyB = false, false end
  if skip.copy then P.copy = false end
  if skip.special then P.special = 0 end
  if skip.patch then P.patchA, P.patchB = {}, {} end
  if skip.zero then                                       -- no -0.0 key (nor number)
    local k = {}
    for _, v in ipairs(P.keys) do if not (v == 0 and 1 / v < 0) then k[#k + 1] = v end end
    P.keys = k
  end
  P.steady = r(2) == 1
  P.follow = r(2) == 1                                    -- the numbers only through arithmetic
  P.retnum = r(3) == 1 and not M.skip.retnum                                   -- a number result computed from the patch numbers
  P.wsrc = { A = { "w", "env.S", "y" }, B = { "env.S", "x" } }
  P.inplace = { A = { "x", "y" }, B = { "x" } }
  if P.useU then
    table.insert(P.wsrc.A, "env.U"); table.insert(P.wsrc.A, "env.U"); table.insert(P.wsrc.B, "env.U")
    if P.writeU then table.insert(P.inplace.A, "env.U") end
  end
  if P.useO then table.insert(P.wsrc.A, "env.O"); table.insert(P.wsrc.A, "env.O") end
  local a = body(r, P, "A", { "x", "y" }, { "p", "q" }, 2 + r(6))
  local b = body(r, P, "B", { "x" }, { "p" }, 1 + r(3))
  local function show(v) return type(v) == "string" and ("%q"):format(v) or tostring(v) end
  local keys = {}
  for i, k in ipairs(P.keys) do keys[i] = show(k) end
  local function opts(patch, verify, warmup, copy)
    local s = ("key = function(...) return (select(%s, ...)) end, patch = {%s}, warmup = %d"):format("%d",
      table.concat(patch, ", "), warmup)
    if verify then s = s .. ", verify = " .. verify end
    if copy then s = s .. ", copy_inputs = true" end
    return s
  end
  P.source = table.concat({
    "local gt, K, KB, env = ...",
    "local T = { [0] = 10, [1] = 20, [2] = 30, [3] = 40 }",
    "local function A(x, y, w, p, q, k)",
    "  env.enter(\"A\", x, y)",
    "  " .. table.concat(a, "\n  "),
    "end",
    "local function B(x, p, k)",
    "  env.enter(\"B\", x)",
    "  " .. table.concat(b, "\n  "),
    "end",
    "return A, B" }, "\n")
  local desc = table.concat({
    ("-- keyedfuzz seed %d%s%s: keys {%s}; numbers {%s}, %d%% special; U %s, O %s"):format(seed,
      P.follow and ", arithmetic only" or "", P.steady and ", steady calls" or "", table.concat(keys, ", "),
      table.concat(P.pool, ", "), P.special, P.useU and (P.writeU and "read and written" or "read") or "unused",
      P.useO and "read" or "unused"),
    "-- A = gt.tree(A, {" .. opts(P.patchA, P.verifyA, P.warmupA, P.copy):format(6) .. "})",
    "-- B = gt.tree(B, {" .. opts(P.patchB, P.verifyB, P.warmupB, false):format(3) .. "})",
    "-- env.S: a static weight (changed in place), env.U: a captured tensor, env.O: B's output kept,",
    "-- env.f = function(v) return v * 2 + 1 end, env.trimB = function() B:trim(0) end,",
    "-- env.g = function(v) local n = 0; for i = 1, 3 do if i <= v then n = n + 1 end end; return n end,",
    "-- env.enter counts the body's runs (a call that does not run it is a hit) and keeps its tensors",
    P.source }, "\n")
  return desc, P
end

-- Exact agreement of two numbers: NaN with NaN, -0 apart from 0.
local function same(u, v)
  if u ~= u then return v ~= v end
  return u == v and (u ~= 0 or 1 / u == 1 / v)
end

-- nil when tree tensor t holds what eager tensor e holds, else why not.
local function differ(t, e, what)
  if t:is_stale() or e:is_stale() then     -- (stale in the trees' world, released in the eager one: both raise)
    if t:is_stale() and e:is_stale() then return nil end
    return what .. (t:is_stale() and " is stale in the tree, not eager" or " is released eagerly, not in the tree")
  end
  local ok, tv = pcall(t.tolist, t)
  if not ok then return what .. ": " .. tostring(tv) end
  local ev = e:tolist()
  if #tv ~= #ev then return ("%s: %d elements in the tree, %d eager"):format(what, #tv, #ev) end
  for i = 1, #ev do
    if not same(tv[i], ev[i]) then return ("%s[%d]: tree %.9g, eager %.9g"):format(what, i, tv[i], ev[i]) end
  end
  return nil
end

local function show(v)
  if type(v) == "number" then
    if v ~= v then return "0/0" end
    if v == 0 and 1 / v < 0 then return "-0.0" end
    if v == 1 / 0 then return "1/0" elseif v == -1 / 0 then return "-1/0" end
    return ("%.17g"):format(v)
  end
  return type(v) == "string" and ("%q"):format(v) or tostring(v)
end

-- nil when the results of both worlds agree (tensors by value), else why not.
local function results_differ(tr, er, who)
  if tr.n ~= er.n then return ("%s returned %d results in the tree, %d eager"):format(who, tr.n, er.n) end
  for i = 1, er.n do
    local t, e = tr[i], er[i]
    local what = ("%s's result %d"):format(who, i)
    if gt.is_tensor(e) then
      if not gt.is_tensor(t) then return ("%s: tree %s, eager a tensor"):format(what, show(t)) end
      local d = differ(t, e, what)
      if d then return d end
    elseif gt.is_tensor(t) then return what .. ": a tensor in the tree, eager " .. show(e)
    elseif type(e) == "number" then
      if type(t) ~= "number" or not same(t, e) then return ("%s: tree %s, eager %s"):format(what, show(t), show(e)) end
    elseif t ~= e then return ("%s: tree %s, eager %s"):format(what, show(t), show(e)) end
  end
  return nil
end

local function pack(ok, ...) return ok, { n = select("#", ...), ... } end

local function check(seed, calls, st)
  local desc, P = M.program(seed)
  local r = rng(seed * 7 + 13)
  local warned = {}
  gt.on_warning = function(m) st.warnings = st.warnings + 1; warned[m] = true end
  local W1 = gt.randn({ N }, { seed = seed + 1 }):static()
  local W2 = gt.randn({ N }, { seed = seed + 2 }):static()
  local S = gt.randn({ N }, { seed = seed + 3 }):static()
  local fresh_n = 0
  local function fresh()
    fresh_n = fresh_n + 1
    local t = gt.randn({ N }, { seed = seed * 131 + fresh_n })
    return { t = t, e = t:clone() }
  end
  -- the slots of tensors both worlds hold: pairs {t = trees' world, e = eager world}
  local slot = { U = fresh(), O = fresh() }
  local envT = { S = S, runs = { A = 0, B = 0 }, f = function(v) return v * 2 + 1 end }
  envT.g = function(v) local n = 0; for i = 1, 3 do if i <= v then n = n + 1 end end; return n end
  local envE = { S = S, runs = { A = 0, B = 0 }, f = envT.f, g = envT.g }
  -- (the tensors the body got: the caller's, or their copies)
  envT.enter = function(who, ...) envT.runs[who] = envT.runs[who] + 1; envT.args = { ... } end
  envE.enter = function() end
  local A, B
  -- B:trim inside A's body: each trim's list of the pairs (slots and the
  -- call's arguments) it left stale, for the eager body's trim at the same place
  local trims, eargs, etrim
  envT.trimB = function()
    local was = {}
    for _, s in pairs(slot) do was[s.t] = s.t:is_stale() end
    local got = envT.args
    for _, a in pairs(got) do was[a] = a:is_stale() end
    B:trim(0)
    local l = {}
    for _, s in pairs(slot) do if s.t:is_stale() and not was[s.t] then l[#l + 1] = s end end
    for i, a in pairs(got) do if a:is_stale() and not was[a] then l[#l + 1] = i end end
    trims[#trims + 1] = l
  end
  local function bind() envT.U, envE.U, envT.O, envE.O = slot.U.t, slot.U.e, slot.O.t, slot.O.e end
  -- a tensor stale in the trees' world is a released one in the eager world
  -- (a released copy: its eager tensor may be another slot's too)
  local function mirror()
    for _, s in pairs(slot) do
      if s.t:is_stale() and not s.e:is_stale() then local c = s.e:clone(); c:free(); s.e = c end
    end
    bind()
  end
  envE.trimB = function()
    etrim = etrim + 1
    for _, s in ipairs(trims[etrim] or {}) do
      if type(s) == "number" then                 -- an argument: released, unless a live slot holds it
        local e, held = eargs[s], false
        for _, o in pairs(slot) do if o.e == e and not o.t:is_stale() then held = true end end
        if not held and not e:is_stale() then e:free() end
      elseif not s.e:is_stale() then
        local c = s.e:clone(); c:free(); s.e = c
      end
    end
    bind()
  end
  bind()
  local chunk = assert(loadstring(P.source, "=keyedfuzz" .. seed))
  -- (the bodies run interpreted in both worlds: LuaJIT's compiled math.min
  -- and math.max give another signed zero, or another operand for a NaN,
  -- than its interpreter, and one world's body could be compiled, the other's not)
  jit.off(chunk, true)
  local fa, fb = chunk(gt, K, KB, envT)
  local ea, eb = chunk(gt, K, KB, envE)
  local function keyf(i) return function(...) return (select(i, ...)) end end
  A = gt.tree(fa, { name = "kfA" .. seed, key = keyf(6), patch = P.patchA, verify = P.verifyA or nil,
                    copy_inputs = P.copy or nil, warmup = P.warmupA, warn_shapes = false })
  B = gt.tree(fb, { name = "kfB" .. seed, key = keyf(3), patch = P.patchB, verify = P.verifyB or nil,
                    warmup = P.warmupB, warn_shapes = false })
  M.last = { A = A, B = B }                     -- (the last program's trees, for a look after a run)
  local log = setmetatable({}, { __newindex = function(t, i, v)
    if M.trace then io.stderr:write(v, "\n") end     -- (M.trace: each step as it starts, for a crash)
    rawset(t, i, v)
  end })
  local function num()
    local v = r(100) <= P.special and SPECIAL[r(#SPECIAL)] or P.pool[r(#P.pool)]
    if M.skip.zero and v == 0 then v = 0 end
    return v
  end
  -- (a steady program draws its first key, W1, fresh or fed-back inputs and few events mostly: more hits)
  local steady = P.steady
  local function key() return P.keys[steady and r(10) <= 9 and 1 or r(#P.keys)] end
  local function fail(step, msg)
    local from = math.max(1, #log - 15)
    local w = {}
    for m in pairs(warned) do w[#w + 1] = "  warned: " .. m end
    return ("keyedfuzz seed %d step %d: %s\n  steps%s: %s%s"):format(seed, step, msg,
      from > 1 and (" " .. from .. "..") or "", table.concat(log, "; ", from), #w > 0 and "\n" .. table.concat(w, "\n") or "")
  end
  -- after a call that raised on both sides, the tensors it took may differ (writes before the error)
  local function forget(used)
    for name, s in pairs(slot) do
      for _, u in ipairs(used) do if s == u then slot[name] = nil end end
    end
    if not slot.U or P.writeU then slot.U = fresh() end
    if not slot.O then slot.O = fresh() end
    bind()
  end
  -- a call of tree `tree` (body `body` in the eager world) with arguments given as pairs or values
  local function call(step, who, tree, ebody, runs, args, argn, used)
    local ta, ea2 = {}, {}
    for i = 1, argn do
      local a = args[i]
      if type(a) == "table" then ta[i], ea2[i] = a.t, a.e else ta[i], ea2[i] = a, a end
    end
    trims, eargs, etrim = {}, ea2, 0
    local stale_arg = false                     -- (a tree raises for a stale argument it would not read)
    for i = 1, argn do if gt.is_tensor(ta[i]) and ta[i]:is_stale() then stale_arg = true end end
    -- (a tree's call makes its last outputs stale as it begins: a captured one raises in the tree only)
    local live = { U = not slot.U.t:is_stale(), O = not slot.O.t:is_stale() }
    local before = envT.runs[who]
    local okT, tr = pack(pcall(tree, unpack(ta, 1, argn)))
    local env_stale = live.U and slot.U.t:is_stale() or live.O and slot.O.t:is_stale()
    local ran = envT.runs[who] ~= before
    local okE, er = pack(pcall(ebody, unpack(ea2, 1, argn)))
    local trimmed = #trims > 0
    mirror()
    st.calls = st.calls + 1
    if okT and not ran then st.hits = st.hits + 1 end
    log[#log] = log[#log] .. (okT and "" or " raised") .. (ran and "" or " (hit)")
    if okE ~= okT then
      local why = not okT and tostring(tr[1])
      local stale_error = why and (why:find("overwritten by a later call") or why:find("released by") or
        why:find("lost its memory"))
      if why and ((trimmed and why:find("trim")) or ((stale_arg or env_stale) and stale_error)) then
        st.allowed = st.allowed + 1; forget(used); return nil
      end
      return fail(step, okT and ("eager raised (%s) but the tree returned"):format(tostring(er[1]))
        or ("the tree raised (%s) but eager returned"):format(tostring(tr[1])))
    end
    if not okT then st.raised = st.raised + 1; forget(used); return nil end
    local d = results_differ(tr, er, who)
    if d then return fail(step, d) end
    for i = 1, argn do
      local a = args[i]
      if type(a) == "table" and not a.t:is_stale() then
        d = differ(a.t, a.e, ("%s's argument %d after the call"):format(who, i))
        if d then return fail(step, d) end
      end
    end
    if P.writeU and not slot.U.t:is_stale() then
      d = differ(slot.U.t, slot.U.e, "the captured U after the call")
      if d then return fail(step, d) end
    end
    return nil, tr, er
  end
  -- (a slot whose tensor is the captured U or O, or a view of it: a captured tensor as an argument)
  local function captured(v)
    local b = v and gt.is_tensor(v.t) and v.t._b
    return b and ((slot.U and slot.U.t._b == b) or (slot.O and gt.is_tensor(slot.O.t) and slot.O.t._b == b)) or false
  end
  for step = 1, calls do
    local c = r(20)
    if steady and c > 14 and r(3) > 1 then c = r(14) end
    if c <= 11 then                                              -- A
      local x, y, what
      local xs = r(10)
      if steady then xs = xs <= 7 and 1 or 4 end
      if xs <= 3 or (xs <= 6 and not slot.A1) or (xs <= 8 and not slot.BO) then x = fresh(); what = "fresh"
      elseif xs <= 6 and P.noUarg and captured(slot.A1) then x = fresh(); what = "fresh"   -- (A returned U: Uarg)
      elseif xs <= 6 then x = slot.A1; what = "A's"
      elseif xs <= 8 and P.noUarg and slot.BO == slot.O then x = fresh(); what = "fresh"   -- (the captured O as an argument: Uarg)
      elseif xs <= 8 then x = slot.BO; what = "B's"
      elseif xs == 9 and not M.skip.rows then what = "rows"
      elseif xs == 10 and not P.noUarg then x = slot.U; what = "U"
      else x = fresh(); what = "fresh" end
      local ys, ywhat = r(6), nil
      if steady then ys = r(7) == 1 and 3 or 1 end
      if what == "rows" then
        local buf = gt.randn({ 2 * N }, { seed = seed * 977 + step })
        local ebuf = buf:clone()
        x = { t = buf:narrow(1, 1, N), e = ebuf:narrow(1, 1, N) }
        if ys <= 3 then y = { t = buf:narrow(1, N + 1, N), e = ebuf:narrow(1, N + 1, N) }; ywhat = "its other row"
        else y = x; ywhat = "x" end
      elseif ys <= 2 then y = fresh(); ywhat = "fresh"
      elseif ys <= 4 then y = x; ywhat = "x"
      elseif ys == 5 and slot.A2 and not (P.noUarg and captured(slot.A2)) then y = slot.A2; ywhat = "A's 2nd"
      else y = fresh(); ywhat = "fresh" end
      local w = r(steady and 10 or 2) == 1 and W2 or W1
      local p = num()
      local q = r(3) == 1 and p or num()
      if M.skip.equal then for _ = 1, 20 do if q ~= p then break end; q = num() end end
      local k = key()
      log[#log + 1] = ("%d A(%s, %s, %s, %s, %s, %s)"):format(step, what, ywhat, w == W1 and "W1" or "W2", show(p), show(q), show(k))
      local msg, tr, er = call(step, "A", A, ea, envT.runs, { x, y, w, p, q, k }, 6, { x, y })
      if msg then return msg end
      if tr then
        slot.A1, slot.A2 = nil, nil
        if gt.is_tensor(tr[1]) then slot.A1 = { t = tr[1], e = er[1] } end
        if gt.is_tensor(tr[2]) then slot.A2 = { t = tr[2], e = er[2] } end
        slot.XA, slot.YA = x, y                  -- (a floor must leave them as they are too)
      end
    elseif c <= 14 then                                          -- B
      local x, what
      local xs = r(4)
      if xs == 1 and slot.A1 then x, what = slot.A1, "A's"
      elseif xs == 2 and slot.BO then x, what = slot.BO, "B's"
      else x, what = fresh(), "fresh" end
      local p, k = num(), key()
      log[#log + 1] = ("%d B(%s, %s, %s)"):format(step, what, show(p), show(k))
      local msg, tr, er = call(step, "B", B, eb, envT.runs, { x, p, k }, 3, { x })
      if msg then return msg end
      if tr then slot.BO = gt.is_tensor(tr[1]) and { t = tr[1], e = er[1] } or nil end
    else                                                         -- between calls
      local e = r(12)
      if (e <= 4 and M.skip.trim and e <= 2) or (e <= 4 and e > 2 and M.skip.floor) or (e == 9 and M.skip.W2) then
        log[#log + 1] = step .. " (skipped)"
      elseif e <= 2 then
        local tree, keep = e == 1 and A or B, r(2) - 1
        log[#log + 1] = ("%d %s:trim(%d)"):format(step, e == 1 and "A" or "B", keep)
        tree:trim(keep); st.trims = st.trims + 1
      elseif e <= 4 then                                         -- the floor must leave every live output as it was
        local tree, iters = e == 3 and A or B, r(2)
        log[#log + 1] = ("%d %s:floor(%d)"):format(step, e == 3 and "A" or "B", iters)
        local ok, err = pcall(tree.floor, tree, iters)
        if not ok then log[#log] = log[#log] .. " raised" end
        st.floors = st.floors + 1
        for _, name in ipairs({ "A1", "A2", "BO", "U", "XA", "YA" }) do
          local s = slot[name]
          if s and not s.t:is_stale() and not s.e:is_stale() then
            local d = differ(s.t, s.e, ("%s after the floor%s"):format(name, ok and "" or (" (it raised: " .. tostring(err) .. ")")))
            if d then return fail(step, d) end
          end
        end
      elseif e == 5 and P.useU then                              -- a new captured tensor; the old one collected
        slot.U = fresh(); bind(); collectgarbage()
        log[#log + 1] = step .. " U = new"
      elseif e == 6 and P.useU then
        local v = gt.randn({ N }, { seed = seed * 17 + step })
        if slot.U.t:is_stale() or slot.U.e:is_stale() then log[#log + 1] = step .. " (U released)"
        else slot.U.t:copy(v); slot.U.e:copy(v); log[#log + 1] = step .. " U:copy(new values)" end
      elseif e == 7 and P.useU and r(3) == 1 then
        if not slot.U.t:is_stale() then slot.U.t:free() end
        if not slot.U.e:is_stale() then slot.U.e:free() end
        log[#log + 1] = step .. " U:free()"
      elseif e == 8 and P.useO and slot.BO then
        slot.O = slot.BO; bind()
        log[#log + 1] = step .. " O = B's output"
      elseif e == 9 then                                         -- W2 made again (maybe at W2's address)
        W2:free(); collectgarbage()
        W2 = gt.randn({ N }, { seed = seed * 19 + step }):static()
        log[#log + 1] = step .. " W2 = new static"
      elseif e == 10 then
        S:copy(gt.randn({ N }, { seed = seed * 23 + step }))
        log[#log + 1] = step .. " S:copy(new values)"
      elseif e == 11 then
        log[#log + 1] = step .. " collectgarbage()"
        collectgarbage()
      else
        log[#log + 1] = step .. " (nothing)"
      end
      mirror()
    end
  end
  local F = require "spec.harness.fuzz"
  return F.counted(A, "keyedfuzz seed " .. seed .. " A") or F.counted(B, "keyedfuzz seed " .. seed .. " B")
end

--- M.check(seed, calls) -> nil or a message, and counts: runs seed's program
--- for `calls` steps (calls of A or B, and events between them) in the trees
--- and eagerly; the message names the first mismatch and the steps before it.
--- counts: calls, hits (calls that did not run the body), raised (calls that
--- raised on both sides), allowed (the tree's clear errors where eager went
--- on: a stale argument it did not read, a trim during its call), warnings,
--- trims, floors.
function M.check(seed, calls)
  local st = { calls = 0, hits = 0, raised = 0, warnings = 0, floors = 0, trims = 0, allowed = 0 }
  local warn = gt.on_warning
  local ok, msg = pcall(check, seed, calls, st)
  gt.on_warning = warn
  if not ok then msg = ("keyedfuzz seed %d: the harness got an error: %s"):format(seed, tostring(msg)) end
  return msg, st
end

--- M.run(first, seeds, calls [, out]) -> mismatches, totals: seeds first..first+seeds-1
--- for `calls` steps each; prints each mismatch to out (io.stdout) as it is
--- found and a closing line of counts.  With KEYEDFUZZ_AT set, the seed being
--- run is written to that file (a crash's seed).
function M.run(first, seeds, calls, out)
  out = out or io.stdout
  local at = os.getenv("KEYEDFUZZ_AT")
  local tot = { programs = 0, calls = 0, hits = 0, raised = 0, allowed = 0, warnings = 0, trims = 0, floors = 0 }
  local bad = {}
  local t0 = gt.clock()
  for seed = first, first + seeds - 1 do
    if at then local f = io.open(at, "w"); if f then f:write(seed, "\n"); f:close() end end
    local msg, st = M.check(seed, calls)
    tot.programs = tot.programs + 1
    for k, v in pairs(st) do tot[k] = tot[k] + v end
    if msg then bad[#bad + 1] = msg; out:write(msg, "\n"); out:flush() end
    if seed % 8 == 0 then collectgarbage() end
  end
  tot.seconds = gt.clock() - t0
  out:write(("keyedfuzz: %d programs (seeds %d..%d, %d steps each): %d calls, %d hits, %d raised on both sides, " ..
    "%d clear tree errors, %d trims, %d floors, %d warnings; %d mismatches (%s backend, %.1f s)\n"):format(tot.programs,
    first, first + seeds - 1, calls, tot.calls, tot.hits, tot.raised, tot.allowed, tot.trims, tot.floors, tot.warnings,
    #bad, gt.backend(), tot.seconds))
  return bad, tot
end

return M
