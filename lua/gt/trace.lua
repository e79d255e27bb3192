-- gt.trace: `patch` numbers traced on the calls that memoize a keyed path.
--
-- On such a call the body gets each `patch` number as a traced number
-- (gt.h's gt_traced: its value and the index of its expression in the
-- call's trace).  Arithmetic on it (+ - * / % ^, unary minus, math.floor,
-- math.ceil, math.abs, math.sqrt) gives traced numbers, each a step of the
-- trace; a kernel launcher that receives one passes its value on and notes
-- which scalar of which launch the step reached (M.slot).  A hit of the
-- path evaluates the steps with its own numbers (keyed.c) and patches those
-- scalars; every other scalar is the path's, so no number that could differ
-- on a later hit is baked in.  A comparison is a guard: its answer is kept
-- with the path, and a hit whose numbers answer otherwise runs the body.  A
-- use the trace cannot follow (tostring, concatenation, a function of gt
-- that fixes the number in a plan) gives the value as a number would and
-- refuses the path (naming the argument and the user's file:line).  The
-- traced body runs in a call that runs nothing on the device and is dropped
-- at its end; the call then runs as usual with plain numbers, and a use that
-- raised on a traced number (a `for` limit, string.format, a function of gt
-- that wants a number) refuses the path (keyed.lua's traced_run).
local ffi = require "ffi"
local gt = require "gt"
local I = require "gt.internal"
local C = I.C

local M = {}
local TR = ffi.typeof("gt_traced")
local istype, type, tostring, getinfo = ffi.istype, type, tostring, debug.getinfo
local original = require("gt.host_policy").original   -- (the library's own, not the wrappers)
local floor, ceil, abs, sqrt = original.floor, original.ceil, original.abs, original.sqrt

-- The trace being taken (nil: none).  serial tells a traced number of this
-- trace from one that outlived an earlier one (it acts as its value).
local cur, serial = nil, 0

local function user_site()
  local lv = 3
  while true do
    local info = getinfo(lv, "Sl")
    if not info then return "?" end
    if info.what ~= "C" and not info.short_src:match("gt[/\\][%w_]+%.lua$") then
      return info.short_src:match("[^/\\]*$") .. ":" .. (info.currentline or 0)
    end
    lv = lv + 1
  end
end

-- The argument (1-based) a step depends on first.
local function arg_of(e) return cur.arg[e + 1] end

-- Refuses the path: x's use at the user's line cannot be followed.
local function refuse(x, what)
  if cur and not cur.refused then
    cur.refused = ("argument #%d (a `patch` number) is %s at %s; add it to key, or pass it to kernels directly")
      :format(arg_of(x.e), what, user_site())
  end
end

local function step(op, a, b, c, arg)
  local t = cur
  local e = t.n
  t.n = e + 1
  t.op[e + 1], t.a[e + 1], t.b[e + 1], t.c[e + 1], t.arg[e + 1] = op, a, b, c, arg
  return e
end

-- x as a step of the current trace (a number becomes a constant) and its value;
-- nil when x is a traced number of another trace (it acts as its value).
local function operand(x)
  if type(x) == "number" then return step(C.GT_TX_CONST, 0, 0, x, nil), x end
  if istype(TR, x) then
    if x.call == serial and cur then return x.e, x.v end
    return nil, x.v
  end
  local v = tonumber(x)                    -- (a string Lua's arithmetic would coerce)
  if v == nil then error("attempt to perform arithmetic on a " .. type(x) .. " value", 3) end
  return step(C.GT_TX_CONST, 0, 0, v, nil), v
end

local function live(x) return istype(TR, x) and x.call == serial and cur ~= nil end

local function binary(op, f)
  return function(x, y)
    if not (live(x) or live(y)) then
      return f(istype(TR, x) and x.v or x, istype(TR, y) and y.v or y)
    end
    local ex, vx = operand(x)
    local ey, vy = operand(y)
    local v = f(vx, vy)
    if not ex or not ey then             -- (with a traced number of an earlier call: a plain number)
      refuse(live(x) and x or y, "combined with a `patch` number kept from an earlier call")
      return v
    end
    return TR(v, step(op, ex, ey, 0, (live(x) and arg_of(x.e)) or arg_of(y.e)), serial)
  end
end

local function unary(op, f)
  return function(x)
    if not live(x) then return f(istype(TR, x) and x.v or x) end
    return TR(f(x.v), step(op, x.e, 0, 0, arg_of(x.e)), serial)
  end
end

local function value(x) if istype(TR, x) then return x.v end return x end

-- A comparison: the values compared as numbers, and its answer a guard of
-- the path (a hit whose numbers answer otherwise runs the body).  A
-- comparison with nil or a non-number tells nothing of the value.
local function compare(what, op, f)
  return function(x, y)
    local vx, vy = value(x), value(y)
    if type(vx) ~= "number" or type(vy) ~= "number" then
      if what == "==" then return false end
      error("attempt to compare " .. type(vx) .. " with " .. type(vy), 2)
    end
    local r = f(vx, vy)
    if live(x) or live(y) then
      local ex = operand(x)
      local ey = operand(y)
      if not ex or not ey then
        refuse(live(x) and x or y, "compared with a `patch` number kept from an earlier call")
      else
        local s = cur.slots
        s[#s + 1] = { -1, 0, r and 1 or 0, step(op, ex, ey, 0, (live(x) and arg_of(x.e)) or arg_of(y.e)) }
      end
    end
    return r
  end
end

local mt = {
  __add = binary(C.GT_TX_ADD, function(a, b) return a + b end),
  __sub = binary(C.GT_TX_SUB, function(a, b) return a - b end),
  __mul = binary(C.GT_TX_MUL, function(a, b) return a * b end),
  __div = binary(C.GT_TX_DIV, function(a, b) return a / b end),
  __mod = binary(C.GT_TX_MOD, function(a, b) return a % b end),
  __pow = binary(C.GT_TX_POW, function(a, b) return a ^ b end),
  __unm = unary(C.GT_TX_UNM, function(a) return -a end),
  __eq = compare("==", C.GT_TX_EQ, function(a, b) return a == b end),
  __lt = compare("<", C.GT_TX_LT, function(a, b) return a < b end),
  __le = compare("<=", C.GT_TX_LE, function(a, b) return a <= b end),
  __tostring = function(x)
    if live(x) then refuse(x, "turned into a string") end
    return tostring(x.v)
  end,
  __concat = function(x, y)
    if live(x) then refuse(x, "concatenated") elseif live(y) then refuse(y, "concatenated") end
    return tostring(value(x)) .. tostring(value(y))
  end,
  __index = function(x) error("attempt to index a number value", 2) end,
  __newindex = function() error("attempt to index a number value", 2) end,
  __call = function() error("attempt to call a number value", 2) end,
  __len = function() error("attempt to get length of a number value", 2) end,
}
ffi.metatype(TR, mt)

-- math.floor, ceil, abs and sqrt of a traced number, traced (gt.host_policy
-- wraps the library's functions with these).
M.math = { floor = unary(C.GT_TX_FLOOR, floor), ceil = unary(C.GT_TX_CEIL, ceil),
           abs = unary(C.GT_TX_ABS, abs), sqrt = unary(C.GT_TX_SQRT, sqrt) }

function M.any_traced(...)
  for i = 1, select("#", ...) do
    local x = select(i, ...)
    if type(x) == "cdata" and istype(TR, x) then return true end
  end
  return false
end

--- Begins a trace: returns the traced number of argument i (1-based) with value v via M.arg.
function M.begin()
  serial = serial + 1
  cur = { n = 0, op = {}, a = {}, b = {}, c = {}, arg = {}, slots = {}, refused = false }
  return cur
end

function M.arg(i, v) return TR(v, step(C.GT_TX_ARG, i - 1, 0, 0, i), serial) end

-- Ends the trace (its table stays the caller's).
function M.finish() cur = nil end

-- The argument (1-based) traced number x is, unchanged; nil for a computed one.
function M.arg_index(t, x)
  local e = x.e + 1
  if t.op[e] == C.GT_TX_ARG then return t.a[e] + 1 end
end

-- The metatable of the error a traced body run raises when its call was
-- dropped before anything ran (tree.lua's end_body; keyed.lua runs it again).
M.DISCARDED = {}

function M.is_traced(x) return type(x) == "cdata" and istype(TR, x) end
function M.value(x) return value(x) end

-- A launcher received traced number x for parameter i (1-based) of kernel k:
-- the launch about to be queued reads it there.  Returns its value.
function M.slot(i, x)
  if x.call ~= serial or not cur then return x.v end
  local launch, seg = 0, ffi.new("int32_t[1]")
  launch = C.gt_tree_next_launch(I.rt, seg)
  if seg[0] < 0 then return x.v end
  local s = cur.slots
  s[#s + 1] = { seg[0], launch, i - 1, x.e }
  return x.v
end

-- Traced number x reached something that takes a plain number (an op's
-- state, a shape): its value, and the path refused.
function M.concrete(x, what)
  if live(x) then refuse(x, what) end
  return x.v
end

-- The trace's steps and slots as the core takes them (gt_tree_keyed_save):
-- ex, nex, sl, nsl.
function M.arrays(t)
  local nex, nsl = t.n, #t.slots
  local ex = ffi.new("gt_texpr[?]", math.max(nex, 1))
  for i = 1, nex do
    local e = ex[i - 1]
    e.op, e.a, e.b, e.c = t.op[i], t.a[i], t.b[i], t.c[i]
  end
  local sl = ffi.new("gt_tslot[?]", math.max(nsl, 1))
  for i = 1, nsl do
    local s, x = t.slots[i], sl[i - 1]
    x.seg, x.launch, x.param, x.expr = s[1], s[2], s[3], s[4]
  end
  return ex, nex, sl, nsl
end

return M
