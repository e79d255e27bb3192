-- gt.host_policy: everything gt changes for the whole process, each with its reason.
--
-- gt runs inside gtlua (main.c embeds LuaJIT, and gt.host is its C module);
-- the process is gt's own, so gt sets LuaJIT's parameters and wraps a few
-- global functions.  Each change is made here and nowhere else: init.lua
-- calls jit() first, exit() as gt's table exists, and coroutines() and
-- traced_numbers() once gt.tree and gt.trace are loaded.  gt's own modules
-- that must not see a wrapper use P.original.
-- One table per process (the registry, as gt's): loaded again, this module
-- would take the wrappers for the originals.
local reg = debug.getregistry()
if reg["gtlua.host_policy"] then return reg["gtlua.host_policy"] end

local P = {}
reg["gtlua.host_policy"] = P

-- The library functions as the process started with them.
P.original = {
  floor = math.floor, ceil = math.ceil, abs = math.abs, sqrt = math.sqrt,
  tonumber = tonumber, concat = table.concat, write = io.write, exit = os.exit, type = type,
  yield = coroutine.yield, resume = coroutine.resume, create = coroutine.create,
}

-- -- LuaJIT's parameters --------------------------------------------------

-- LuaJIT's loop optimisation (hoisting what does not change across a loop's
-- iterations) stays on: a layer loop's replayed ops cost about a fifth less
-- host time with it (32- to 512-op chains, cpu backend, kernels off); without
-- it decode at batch 8 is quicker, and a layer loop can run out of spill
-- slots.  GTLUA_JIT_LOOP=0 turns it off.
-- Room for machine code: LuaJIT's default of 512 KiB holds the traces of one
-- model's step, not always those of a GPT decode step with its side traces.
-- When it is full LuaJIT flushes every trace and records them again; where
-- traces form larger it fills again within a few calls, and a replayed step
-- costs milliseconds instead of microseconds.  16 MiB, and room for as many
-- traces.
function P.jit()
  if not jit then return end
  if os.getenv("GTLUA_JIT_LOOP") == "0" then jit.opt.start("-loop") end
  jit.opt.start("maxmcode=16384", "maxtrace=8000")
end

local HOTLOOP = P.original.tonumber(os.getenv("GTLUA_JIT_HOTLOOP")) or 56   -- LuaJIT's default
-- A tree's first replays through the replay lane (gt_tree_return says so,
-- at most GT_JIT_FLUSHES times a tree): the traces formed on the recording's
-- path are flushed, and the hot counters reset (setting hotloop does that),
-- so that the model's loops, which count twice as fast as calls, become
-- traces before the ops' functions: a side trace of a function's trace
-- cannot link back into the caller's loop, unrolls it and is blacklisted.
function P.retrace()
  jit.flush()
  jit.opt.start("hotloop=" .. HOTLOOP)
end

-- -- os.exit --------------------------------------------------------------

-- At exit a dropped tree's finalizer frees it, whatever outputs it left
-- (tree.lua: else it would wait for them, and the state's close calls each
-- finalizer once).  The host says so before it closes the state (main.c
-- sets gt._closing), and os.exit(code, true) closes it from here.
function P.exit(gt)
  local exit = P.original.exit
  os.exit = function(code, close)   -- luacheck: ignore 122
    if close then gt._closing = true end
    return exit(code, close)
  end
end

-- -- Coroutines -----------------------------------------------------------

-- A tree call runs to its end in one go: a coroutine that yielded inside
-- the body would leave the runtime inside the call (tensors made outside
-- would become the tree's, other trees would refuse to run).  A coroutine
-- resumed from the body may yield back to it: resumes during a call are
-- counted on the active tree (tree._resumes; a call sets it to 0).
-- I: gt.internal (its active tree and error, read at each call).
function P.coroutines(I)
  local yield, resume, create = P.original.yield, P.original.resume, P.original.create
  coroutine.yield = function(...)
    local a = I.active
    if a and a._resumes == 0 then
      I.error(("coroutine.yield inside a call of tree '%s' (%s): a tree call must run to its end without " ..
        "yielding; yield before or after calling the tree"):format(a.name, a.where), 2)
    end
    return yield(...)
  end
  local function resumed(a, ...)
    a._resumes = a._resumes - 1
    return ...
  end
  coroutine.resume = function(co, ...)
    local a = I.active
    if not a then return resume(co, ...) end
    a._resumes = a._resumes + 1
    return resumed(a, resume(co, ...))
  end
  local function unwrap(ok, ...)
    if not ok then error((...), 0) end
    return ...
  end
  coroutine.wrap = function(f)
    local co = create(f)
    return function(...) return unwrap(coroutine.resume(co, ...)) end
  end
end

-- -- Traced numbers in library functions ----------------------------------

-- A keyed tree's memoizing call gives its body traced numbers (gt.trace).
-- The body calls math.floor or table.concat as the user's code does, and a
-- traced number must not make them raise, in the call or after it (kept in
-- a table the body filled): math.floor, ceil, abs and sqrt of a traced
-- number are traced (trace.math); type says "number"; tonumber gives its value, table.concat and
-- io.write take it as its value (trace.concrete: refusing the path while it
-- is live).  A plain call goes straight to the original.  Other functions
-- that want a number raise on a traced one (in the traced call: the call
-- runs again with plain numbers, keyed.lua).
-- trace: gt.trace.
function P.traced_numbers(trace)
  local ffi = require "ffi"
  local TR, istype, o = ffi.typeof("gt_traced"), ffi.istype, P.original
  local type = o.type                  -- (the wrappers below ask the builtin)
  for name, traced in pairs(trace.math) do
    local f = o[name]
    math[name] = function(x)
      if type(x) == "cdata" and istype(TR, x) then return traced(x) end
      return f(x)
    end
  end
  local tonumber0, concat0, write0, type0, concrete = o.tonumber, o.concat, o.write, o.type, trace.concrete
  _G.type = function(x)
    local t = type0(x)
    if t == "cdata" and istype(TR, x) then return "number" end   -- (as of the number it stands for)
    return t
  end
  tonumber = function(x, base)   -- luacheck: ignore 121
    if type(x) == "cdata" and istype(TR, x) then return concrete(x, "given to tonumber") end
    return tonumber0(x, base)
  end
  table.concat = function(t, sep, i, j)
    local ok, r = pcall(concat0, t, sep, i, j)
    if ok then return r end
    if type(t) == "table" then
      local c, any = {}, false
      for k, v in pairs(t) do
        if type(v) == "cdata" and istype(TR, v) then v, any = tostring(concrete(v, "concatenated")), true end
        c[k] = v
      end
      if any then return concat0(c, sep, i, j) end
    end
    error(r, 2)
  end
  -- (the arguments, each traced number as its value)
  local function plain_args(...)
    local n, r = select("#", ...), { ... }
    for i = 1, n do
      local x = r[i]
      if type(x) == "cdata" and istype(TR, x) then r[i] = concrete(x, "written") end
    end
    return unpack(r, 1, n)
  end
  io.write = function(...)
    if not trace.any_traced(...) then return write0(...) end
    return write0(plain_args(...))
  end
end

return P
