-- gt.kernel: compiling kernel sources and launching their __global__ functions.
local ffi = require "ffi"

local gt = require "gt"
local I = require "gt.internal"
local C, rt = I.C, I.rt
local floor = require("gt.host_policy").original.floor   -- (not the wrapper for traced numbers)
local PTR_IN, PTR_OUT = C.GT_P_IN, C.GT_P_OUT        -- gt.h's parameter kinds (GT_P_*)
local SCALAR = { [C.GT_P_I32] = "i32", [C.GT_P_U32] = "u32", [C.GT_P_I64] = "i64", [C.GT_P_U64] = "u64",
                 [C.GT_P_F32] = "f32", [C.GT_P_F64] = "f64", [C.GT_P_BOOL] = "bool" }
-- The scalar kinds a gt_arg holds in 32 bits (the lane compares v.u32), the others in 64 (v.u64).
local NARROW = { [C.GT_P_I32] = true, [C.GT_P_U32] = true, [C.GT_P_F32] = true }
local INTEGER = { i32 = true, u32 = true, i64 = true, u64 = true }
local FIELD = { i32 = "i32", u32 = "u32", i64 = "i64", u64 = "u64", f32 = "f32", f64 = "f64" }

local Kernel = {}
Kernel.__index = Kernel
gt.Kernel = Kernel

local error = I.error   -- every error names the user's file:line (init.lua)

-- Grid and block sizes: integers in 1..2^31-1 (the device checks its own
-- smaller limits); anything else raises saying which component is wrong.
local DIM_MAX = 2 ^ 31 - 1
local function dim_problem(v)
  if type(v) ~= "number" then return "is a " .. type(v) end
  if v ~= v or v ~= math.floor(v) or v == math.huge or v == -math.huge then return "is " .. tostring(v) .. ", not an integer" end
  if v < 1 or v > DIM_MAX then return ("is %.17g, outside 1..%d"):format(v, DIM_MAX) end
end
local function dims(x, what, name, level)
  local why
  if type(x) == "number" then
    why = dim_problem(x)
    if not why then return x, 1, 1 end
    why = what .. " " .. why
  elseif type(x) == "table" then
    local c = { x[1] or x.x or 1, x[2] or x.y or 1, x[3] or x.z or 1 }
    for i = 1, 3 do
      local w = dim_problem(c[i])
      if w and not why then why = what .. "[" .. i .. "] " .. w end
    end
    if not why then return c[1], c[2], c[3] end
  else
    why = what .. " is a " .. type(x)
  end
  error("kernel '" .. name .. "': " .. what .. " must be a positive integer or {x, y, z} of them (each in 1.." ..
    DIM_MAX .. "): " .. why, level + 1)
end

-- Integer scalar ranges; a value outside them would wrap or truncate silently.
-- { lowest, first value above, as said in messages }
local RANGE = { i32 = { -2 ^ 31, 2 ^ 31, "-2147483648..2147483647" }, u32 = { 0, 2 ^ 32, "0..4294967295" },
                i64 = { -2 ^ 63, 2 ^ 63, "-2^63..2^63-1" }, u64 = { 0, 2 ^ 64, "0..2^64-1" } }

-- The slow path of a failed argument check: says exactly what is wrong.
local function arg_error(k, i, v, level)
  local name, pname, ptext = ffi.string(k.name), ffi.string(k.pname[i - 1]), ffi.string(k.ptext[i - 1])
  local where = "kernel '" .. name .. "': argument #" .. i .. " ('" .. pname .. "', " .. ptext .. ")"
  local pt = k.ptype[i - 1]
  if pt == PTR_IN or pt == PTR_OUT then
    if not gt.is_tensor(v) then error(where .. " expects a tensor, got " .. I.show(v), level + 1) end
    if v:is_stale() then I.stale_error(v, level + 1) end
    if v._strides then error(where .. ": the tensor is a non-contiguous view; :clone() it first", level + 1) end
    local want = I.dtype_of_code[k.pdtype[i - 1]]
    error(where .. " expects " .. tostring(want) .. ", got a " .. v.dtype .. " tensor", level + 1)
  end
  local st = SCALAR[pt]
  if st == "bool" then error(where .. " expects a boolean or number, got " .. I.show(v), level + 1) end
  if type(v) ~= "number" then error(where .. " expects a number, got " .. I.show(v), level + 1) end
  local r = RANGE[st]
  error(("%s expects an integer in %s, got %s"):format(where, r[3], tostring(v)), level + 1)
end

-- A traced `patch` number v (gt.trace) for scalar parameter i of kernel k:
-- its value, checked as a number would be (eager's error when it does not
-- fit), noted as the scalar the launch about to be queued reads (a lean
-- state's is fixed for its op: the path is refused instead).
local trace = require "gt.trace"
local is_traced = trace.is_traced
local function traced_arg(k, i, v, lean)
  local x = trace.value(v)
  local st = SCALAR[k.ptype[i - 1]]
  local r = RANGE[st]
  if not st then arg_error(k, i, v, 4) end               -- (a tensor parameter)
  if r and (x ~= floor(x) or x < r[1] or x >= r[2]) then arg_error(k, i, x, 4) end
  if lean then return trace.concrete(v, "given to kernel '" .. ffi.string(k.name) .. "' through an op") end
  return trace.slot(i, v)
end

-- The Lua source that checks argument i of kernel k and stores it: a tensor
-- as its handle in tensors[i-1] (the core checks that it is live, contiguous
-- and of the dtype; later: only checked, the caller stores it), a scalar in
-- the argument array (s: "args[i-1]").
local function arg_code(k, i, s, later)
  local pt = k.ptype[i - 1]
  if pt == PTR_IN or pt == PTR_OUT then
    return ("if not istype(T, a%d) then fail(%d, a%d) end"):format(i, i, i) ..
      (later and "" or ("; tensors[%d] = a%d"):format(i - 1, i))
  end
  local st = SCALAR[pt]
  if st == "bool" then
    return ("do local v = a%d; if v == true then v = 1 elseif v == false or v == nil then v = 0 " ..
      "elseif type(v) ~= 'number' then v = fail(%d, v) end; %s.v.u64 = v ~= 0 and 1 or 0 end"):format(i, i, s)
  elseif st == "i32" or st == "u32" then   -- an integer in range: one guard
    return ("do local v = a%d; if type(v) ~= 'number' or tobit(v)%s ~= v then v = fail(%d, v) end; %s.v.%s = v end")
      :format(i, st == "u32" and " % 4294967296" or "", i, s, FIELD[st])
  elseif INTEGER[st] then
    local r = RANGE[st]
    -- (a 64-bit one also takes LuaJIT's 64-bit integers, 3LL or 3ULL, exactly)
    local wide = FIELD[st] == "i64" or FIELD[st] == "u64"
    return ("do local v = a%d; if %stype(v) ~= 'number' or v ~= floor(v) or v < %.17g or v >= %.17g " ..
      "then v = fail(%d, v) end; %s.v.%s = v end"):format(i,
      wide and ("type(v) == 'cdata' and (ffi.istype('int64_t', v) or ffi.istype('uint64_t', v))%s then %s.v.%s = v elseif ")
        :format(FIELD[st] == "u64" and " and not (ffi.istype('int64_t', v) and v < 0)" or "", s, FIELD[st]) or "",
      r[1], r[2], i, s, FIELD[st])
  end
  return ("do local v = a%d; if type(v) ~= 'number' then v = fail(%d, v) end; %s.v.%s = v end"):format(i, i, s, FIELD[st])
end

-- Arguments past a kernel's parameters that a launcher takes in, to count
-- them in its error (more are counted as "more than").
local EXTRA = 8

-- The error of a launch with a wrong number of arguments: extras (a table of
-- the EXTRA arguments past the parameters) and the arguments.
local function count_error_of(k)
  local n = k.nparams
  return function(extras, ...)
    local p = {}
    for i = 0, n - 1 do p[#p + 1] = ffi.string(k.ptext[i]) .. " " .. ffi.string(k.pname[i]) end
    local sig = ffi.string(k.name) .. "(" .. table.concat(p, ", ") .. ")"
    local more = 0
    for i = 1, EXTRA do if extras[i] ~= nil then more = i end end
    if more > 0 then
      error(("kernel %s takes %d arguments, got %s%d"):format(sig, n, more == EXTRA and "at least " or "", n + more), 3)
    end
    local given = { ... }
    local miss = 1
    while given[miss] ~= nil do miss = miss + 1 end
    error(("kernel %s takes %d arguments: argument #%d ('%s', %s) is missing"):format(
      sig, n, miss, ffi.string(k.pname[miss - 1]), ffi.string(k.ptext[miss - 1])), 3)
  end
end

-- The code of a launch's end: the core's answer is 0, GT_ERR (its message),
-- or i + 1 for a tensor argument i it refused (value: the code of that
-- argument's value, nil with no tensor argument).
local function answer_code(value)
  return "local r = launch(rt, cfg, tensors, args)\nif r ~= 0 then " ..
    (value and ("if r > 0 then fail(r, " .. value .. ") end ") or "") .. "raise() end\n"
end

local LANE = C.gt_lane_of(rt)

-- The code of a replay through the lane (gt.h's gt_lane): when the cursor's
-- predicted launch is this lean state's (cfg) with these very tensors (the
-- same buffer structs, views and bytes, each live; the one made: nil here,
-- NULL there), the launch is counted (the core queues it when it next
-- looks) and the output's buffer struct of the call made here (tensor.lua's
-- lane_buf); returns it, or b1 when nothing is
-- made.  Anything else falls through to the core.  nt: the tensors b1...;
-- li, the launch's index, and the configuration's match were tested first.
-- scalars: a bound launcher's tests of its scalars (its args against the
-- recording's, r.qa: a lean state's are fixed by its configuration); such a
-- launcher makes no output and returns nothing.
local function lane_code(nt, scalars)
  local same, live = {}, {}
  for t = 1, nt do
    -- the output the call makes (b nil) where the recording made it: its
    -- offset (0) and bytes (the state's, which its configuration id names)
    -- need no test; in a trace b's nil-ness is known, and one test remains
    same[t] = ("(b%d == nil and r.made == %d or b%d == r.t[%d].b and o%d == r.t[%d].o and n%d == r.t[%d].n)")
      :format(t, t, t, t - 1, t, t - 1, t, t - 1)
    live[t] = ("(b%d == nil or g%d == b%d.gen_now[0])"):format(t, t, t)
  end
  local test = table.concat(same, " and ") .. " and " .. table.concat(live, " and ")
  if scalars then
    return table.concat({
      "do",
      "  local r = L.rec[li]",
      "  local q = r.qa",
      "  if " .. test .. (#scalars > 0 and " and " .. table.concat(scalars, " and ") or "") ..
        " and r.made == 0 then L.lazy = L.lazy + 1; return end",
      "end",
    }, "\n") .. "\n"
  end
  return table.concat({
    "do",
    "  local r = L.rec[li]",
    "  if " .. test .. " then",
    "    if r.made == 0 then L.lazy = L.lazy + 1; return b1 end",
    "    local j = L.nbufs[0]",
    "    if j < L.room and j - L.segstart == r.midx then",
    "      local y = lane_buf(j, st.nb, li)",
    "      L.lazy = L.lazy + 1",
    "      return y",
    "    end",
    "  end",
    "end",
  }, "\n") .. "\n"
end

-- Compiles the code src of a launcher generator for kernel k (chunk name
-- name) and returns what it returns.  src sees rt, args and tensors (the
-- kernel's argument arrays), T, fail, raise, count_error, launch, the checks'
-- helpers (floor, istype, type, tobit, select), ffi, n (the arrays' size),
-- extra (compile_launcher's fourth argument) and lean, lean_status
-- (gt_launch_lean and gt_lean_status).
local function compile_launcher(k, name, src, extra, lean)
  local n = math.max(k.nparams, 1)
  local args, tensors = ffi.new("gt_arg[?]", n), ffi.new("const gt_tensor *[?]", n)
  local function fail(i, v)
    if is_traced(v) then return traced_arg(k, i, v, lean) end
    arg_error(k, i, v, 3)
  end
  local function raise() error(I.errmsg(), 3) end
  local head = "local rt, args, tensors, T, fail, floor, istype, type, raise, count_error, launch, tobit, select, " ..
    "ffi, n, extra, lean, lean_status, L, lane_buf = ...\n"
  local f = assert(loadstring(head .. src, name))
  return f(rt, args, tensors, ffi.typeof("gt_tensor"), fail, floor, ffi.istype, type, raise, count_error_of(k),
           C.gt_launch_tensors, bit.tobit, select, ffi, n, extra, C.gt_launch_lean, C.gt_lean_status, LANE,
           I.lane_buf)
end

-- The code of a launch that passes kernel k's tensor parameters to the core
-- by value (gt_launch_lean: one to four of them; nil for other kernels),
-- tensor parameter i being the local a<i>: checked (a tensor; with checks,
-- also contiguous and of the parameter's dtype), its fields read, then one
-- call with the configuration cfg and the scalars args (expressions); bad:
-- the expression of the argument a refused parameter r names.  made: the
-- expression of the bytes of an output whose handle is nil (the tree call
-- makes its buffer).  The code leaves the buffer bound to that output (else
-- the first tensor's) in b.
--
-- By value, not as handles, so that a handle is only read: one passed to C
-- must exist in memory, one only read (and built from b after the call)
-- may stay in LuaJIT's registers, so an op's result that the next op
-- consumes allocates nothing (allocation sinking).  For that the code reads
-- every field before the call (a load after a C call cannot be forwarded
-- from the store that made the handle) and never compares a handle with
-- nil (that compares its address).
local function byvalue_code(k, cfg, args, bad, checks, made)
  local code, vals, scalars = {}, {}, {}
  for i = 1, k.nparams do
    local pt = k.ptype[i - 1]
    if pt == PTR_IN or pt == PTR_OUT then
      local t = #vals + 1
      if t > 4 then return nil end
      local c = ("if not istype(T, a%d) then fail(%d, a%d) end"):format(i, i, i)
      local pd = k.pdtype[i - 1]
      if checks then c = c .. (" if a%d._vid ~= 0%s then fail(%d, a%d) end"):format(i,
        pd ~= 0 and (" or a%d._dt ~= %d"):format(i, pd) or "", i, i) end
      local read = ("%s b%d, o%d, n%d, g%d = a%d._b, a%d._off, a%d._nb, a%d._gen"):format(c, t, t, t, t, i, i, i, i)
      if made then
        code[#code + 1] = ("local b%d, o%d, n%d, g%d = nil, 0, %s, 0\nif a%d then %s end"):format(t, t, t, t, made, i, read)
      else
        code[#code + 1] = ("local b%d, o%d, n%d, g%d\n%s"):format(t, t, t, t, read)
      end
      vals[t] = ("b%d, o%d, n%d, g%d"):format(t, t, t, t)
    else                                -- (the bound launcher's test: the same width as stored)
      local f = NARROW[pt] and "u32" or "u64"
      scalars[#scalars + 1] = ("%s[%d].v.%s == q[%d].v.%s"):format(args, i - 1, f, i - 1, f)
    end
  end
  if #vals == 0 then return nil end
  local nt = #vals
  for t = nt + 1, 4 do vals[t] = "nil, 0, 0, 0" end
  local reads = table.concat(code, "\n")
  local call = "\nlocal b = lean(rt, " .. cfg .. ", " .. args .. ", " .. table.concat(vals, ", ") ..
    ")\nif b == nil then local r = lean_status(rt); if r > 0 then fail(r, " .. bad .. ") end; raise() end\n"
  -- the lane's test first, before the handles' fields are read: a side
  -- trace that leaves there inherits few values (LuaJIT refuses one whose
  -- registers it cannot shuffle: "register coalescing too complex")
  return "local li = L.qn[0] + L.lazy\nif li < L.n and L.rec[li].cfg == " .. cfg .. ".id then\n" ..
    reads .. "\n" .. lane_code(nt, not made and scalars or nil) .. call .. (made and "return b\n" or "return\n") ..
    "end\n" .. reads .. call
end

-- The lane's test of a bound launcher of kernel k with more than four
-- tensors (five to eight; nil for others), after the arguments' checks and
-- stores (tensors' handles in memory, passed to gt_launch_tensors when the
-- test fails): as lane_code's, reading each handle's fields as it compares
-- them (with 28 fields read first a trace through a GPT block ran out of
-- spill slots), and also that each is contiguous and of its dtype (the core
-- checks those on the other path).
local function lane_handles_code(k)
  if k.ntensors <= 4 or k.ntensors > 8 then return nil end
  local test, scalars, t = {}, {}, 0
  for i = 1, k.nparams do
    local pt = k.ptype[i - 1]
    if pt == PTR_IN or pt == PTR_OUT then
      local pd = k.pdtype[i - 1]
      test[#test + 1] = ("a%d._b == r.t[%d].b and a%d._off == r.t[%d].o and a%d._nb == r.t[%d].n and " ..
        "a%d._vid == 0%s and a%d._gen == a%d._b.gen_now[0]"):format(i, t, i, t, i, t, i,
        pd ~= 0 and (" and a%d._dt == %d"):format(i, pd) or "", i, i)
      t = t + 1
    else
      local f = NARROW[pt] and "u32" or "u64"
      scalars[#scalars + 1] = ("args[%d].v.%s == q[%d].v.%s"):format(i - 1, f, i - 1, f)
    end
  end
  for _, c in ipairs(scalars) do test[#test + 1] = c end
  return "do\nlocal li = L.qn[0] + L.lazy\nif li < L.n then\nlocal r = L.rec[li]\nlocal q = r.qa\n" ..
    "if r.cfg == cfg.id and r.made == 0 and " .. table.concat(test, " and ") ..
    " then L.lazy = L.lazy + 1; return end\nend\nend\n"
end

-- Generates a launcher with fixed arity for kernel k: the checks inline,
-- then one call into the core.  Keeping this small keeps every step cheap.
-- Returns factory(cfg): the bound launcher of one checked configuration.
local function make_launcher(k)
  local n = k.nparams
  local params, code, extras = {}, {}, {}
  -- (with the lane's test of handles, the tensors are stored for the core
  -- after it: a handle the lane takes is only read, so that LuaJIT may sink
  -- the op's result, made by gt.tensor just before, into registers)
  local lane = lane_handles_code(k)
  local later, stores = lane ~= nil, {}
  for i = 1, n do
    params[i] = "a" .. i
    code[i] = arg_code(k, i, "args[" .. (i - 1) .. "]", later)
    local pt = k.ptype[i - 1]
    if later and (pt == PTR_IN or pt == PTR_OUT) then stores[#stores + 1] = ("tensors[%d] = a%d"):format(i - 1, i) end
  end
  for i = 1, EXTRA do extras[i] = "e" .. i end
  local plist, elist = table.concat(params, ", "), table.concat(extras, ", ")
  -- too few arguments leave the last one nil; too many arrive in e1.. (no
  -- varargs: a vararg function cannot start a trace of its own)
  local count = "if e1 ~= nil " .. (n > 0 and ("or a" .. n .. " == nil ") or "") ..
    "then count_error({" .. elist .. "}" .. (n > 0 and ", " .. plist or "") .. ") end\n"
  local bad = n > 0 and "(select(r, " .. plist .. "))" or nil
  local scalars = {}
  for i = 1, n do
    local pt = k.ptype[i - 1]
    if pt ~= PTR_IN and pt ~= PTR_OUT then scalars[#scalars + 1] = code[i] end
  end
  local byvalue = byvalue_code(k, "cfg", "args", bad, true)
  local launch = byvalue and table.concat(scalars, "\n") .. "\n" .. byvalue or
    table.concat(code, "\n") .. "\n" .. (lane or "") .. table.concat(stores, "\n") .. "\n" .. answer_code(bad)
  return compile_launcher(k, "=gt.kernel." .. ffi.string(k.name),
    "return function(cfg) return function(" .. plist .. (n > 0 and ", " or "") .. elist .. ")\n" .. count ..
    launch .. "end end")
end

-- The lean launcher of kernel k (gt.ops's, through Kernel:_lean): one
-- runner for the kernel, run(st, tensors...), and states, one a
-- configuration: state(all arguments, tensors nil) -> st, its scalars checked
-- then (as the launcher checks them) into st's own argument array; st.cfg
-- is left for gt_launch_config.  One runner for every state: LuaJIT
-- specializes a call to the closure it saw, so a call site that met a
-- closure per configuration left its trace for a side trace whenever the
-- configuration changed (the shapes scenario: every op).  st.nb, st.sid and
-- st.dt are the caller's (gt.ops: its result's bytes, shape id and dtype
-- code); the caller
-- has checked the tensors' dtypes and contiguity.
--
-- A kernel of one to four tensor parameters passes them by value
-- (byvalue_code): run(st, t1, ...) takes the tensor parameters' handles in
-- order, nil for an output the tree call makes (st.nb bytes), and returns
-- the buffer bound to it, from which the caller builds the result's handle.
-- Other kernels store the handles in st and call gt_launch_tensors.
local function make_lean(k)
  local n = k.nparams
  local params, fixed, tlist, store, which = {}, {}, {}, {}, {}
  for i = 1, n do
    params[i] = "a" .. i
    local pt = k.ptype[i - 1]
    if pt == PTR_IN or pt == PTR_OUT then
      tlist[#tlist + 1] = "a" .. i
      store[#store + 1] = arg_code(k, i)      -- the launcher's check and store of a tensor
      which[#which + 1] = ("r == %d and a%d"):format(i, i)
    else
      fixed[#fixed + 1] = arg_code(k, i, "args[" .. (i - 1) .. "]")
    end
  end
  -- (the sizes written into the declaration: busted memoizes ffi.typeof by
  -- its first argument, and a "$" parameter would give every kernel the first one's)
  -- (what a replayed op reads, cfg.id and nb, sid, dt, in one cache line)
  local S = ffi.typeof(("struct { gt_launchcfg cfg; double nb; int32_t sid, dt; gt_arg args[%d]; " ..
    "const gt_tensor *tensors[%d]; }"):format(math.max(n, 1), math.max(n, 1)))
  local bad = #which > 0 and table.concat(which, " or ") or nil
  local body = byvalue_code(k, "st.cfg", "st.args", bad, false, "st.nb")
  body = body and body .. "return b\n" or
    "local cfg, args, tensors = st.cfg, st.args, st.tensors\n" .. table.concat(store, "\n") .. "\n" .. answer_code(bad)
  return compile_launcher(k, "=gt.kernel." .. ffi.string(k.name) .. ".lean",
    "local S = extra\n" ..
    "local function run(st" .. (#tlist > 0 and ", " or "") .. table.concat(tlist, ", ") .. ")\n" ..
    body .. "end\n" ..
    "local function state(" .. table.concat(params, ", ") .. ")\n" ..
    "local st = S()\nlocal args = st.args\n" .. table.concat(fixed, "\n") .. "\nreturn st end\n" ..
    "return run, state", S, true)
end

local CFG = ffi.typeof("gt_launchcfg")

-- The bound launcher of kernel k for a checked configuration (raises at the
-- caller's caller).
local function bound(k, factory, gx, gy, gz, bx, by, bz, smem)
  local cfg = CFG()
  if C.gt_launch_config(rt, k, gx, gy, gz, bx, by, bz, smem, cfg) ~= 0 then error(I.errmsg(), 3) end
  local f = factory(cfg)
  if k.graphable ~= 0 then return f end
  -- a kernel kept out of graphs: a keyed tree cannot replay a path with it (its file:line is the reason)
  local what = "kernel '" .. ffi.string(k.name) .. "' is not graphable (graph = false)"
  return function(...)
    if I.active then I.note_sync(what, 1) end
    return f(...)
  end
end

local function new_kernel(k, module)
  local factory = make_launcher(k)
  local name = ffi.string(k.name)
  local params = {}
  for i = 0, k.nparams - 1 do params[i + 1] = { name = ffi.string(k.pname[i]), type = ffi.string(k.ptext[i]) } end
  return setmetatable({ name = name, params = params, graphable = k.graphable ~= 0,
                        _k = k, _factory = factory, _module = module }, Kernel)
end

--- K.name(grid, block, args...): launch (queued inside a tree call)
-- The bound launcher of the last grid and block is kept: a kernel launched
-- again with the same sizes makes no new configuration.
local MODULE = {}   -- the key marking a kernel table's metatable (compile)
function Kernel:__call(grid, block, ...)
  if type(grid) == "table" then
    local mt = getmetatable(grid)
    if mt and rawget(mt, MODULE) then     -- K:name(...): the colon passed the kernel table as the grid
      error("kernel '" .. self.name .. "' was called with a colon (K:" .. self.name .. "(...)), which passes the " ..
        "kernel table as the grid: call it with a dot, K." .. self.name .. "(grid, block, args...)", 2)
    end
  end
  local gx, gy, gz = dims(grid, "grid", self.name, 2)
  local bx, by, bz = dims(block, "block", self.name, 2)
  local l = self._last
  if not (l and l[1] == gx and l[2] == gy and l[3] == gz and l[4] == bx and l[5] == by and l[6] == bz) then
    l = { gx, gy, gz, bx, by, bz, f = bound(self._k, self._factory, gx, gy, gz, bx, by, bz, 0) }
    self._last = l
  end
  l.f(...)
end

--- K.name:config(grid, block [, smem_bytes]) -> f(args...), a cheap bound launcher
function Kernel:config(grid, block, smem)
  if getmetatable(self) ~= Kernel then
    I.error("K.name:config(grid, block [, smem]): call it with a colon on a kernel (K.name:config(...)), got " ..
      I.show(self) .. " for the kernel")
  end
  local gx, gy, gz = dims(grid, "grid", self.name, 2)
  local bx, by, bz = dims(block, "block", self.name, 2)
  smem = smem or 0
  if type(smem) ~= "number" or smem < 0 or smem > 2 ^ 32 - 1 or smem ~= math.floor(smem) then
    error("kernel '" .. self.name .. "': shared memory must be a whole number of bytes in 0..4294967295 " ..
      "(the device allows far less), got " .. I.show(smem), 2)
  end
  return bound(self._k, self._factory, gx, gy, gz, bx, by, bz, smem)
end

-- K.name:_lean(grid, block, smem, args...) -> st, run: a state of this
-- configuration with the scalar arguments fixed (args: all of them, in
-- order, nil for the tensors) and the kernel's lean runner; run(st,
-- tensors...) launches with the tensor arguments alone.  gt.ops's ops make a
-- state per plan (their scalars follow from the shapes).
function Kernel:_lean(grid, block, smem, ...)
  local gx, gy, gz = dims(grid, "grid", self.name, 2)
  local bx, by, bz = dims(block, "block", self.name, 2)
  if not self._leanrun then self._leanrun, self._leanstate = make_lean(self._k) end
  local st = self._leanstate(...)
  if C.gt_launch_config(rt, self._k, gx, gy, gz, bx, by, bz, smem, st.cfg) ~= 0 then error(I.errmsg(), 2) end
  return st, self._leanrun
end

function Kernel:__tostring()
  local p = {}
  for i, q in ipairs(self.params) do p[i] = q.type .. " " .. q.name end
  return "kernel " .. self.name .. "(" .. table.concat(p, ", ") .. ")" .. (self.graphable and "" or " [not graphable]")
end

-- Compiles src (named chunk in messages) into a table of kernels; errors at level 3.
local function compile(src, opts, chunk)
  local m = C.gt_compile(rt, src, opts.options, chunk, opts.graph == false and 0 or 1)
  local w = C.gt_take_warning()   -- e.g. the kernel cache refused: shown once
  if w ~= nil then gt.on_warning(ffi.string(w)) end
  if m == nil then
    local msg = I.errmsg()
    if opts.at then          -- a source string named by its gt.compile's file:line: its own lines said as such
      local esc = chunk:gsub("%p", "%%%0")
      msg = msg:gsub(esc .. ":(%d+):(%d+):", chunk .. ": kernel source line %1:%2:")
               :gsub(esc .. ":(%d+):", chunk .. ": kernel source line %1:")
               :gsub(esc .. "%((%d+)%)", chunk .. ": kernel source line %1")        -- (NVRTC's form)
      -- (the message is raised at that same file:line: "chunk: " leading it would say it twice)
      if msg:sub(1, #chunk + 2) == chunk .. ": " then msg = msg:sub(#chunk + 3) end
    end
    error(msg, 3)
  end
  local K, names = {}, {}
  for i = 0, C.gt_module_count(m) - 1 do
    local k = C.gt_module_kernel(m, i)
    K[ffi.string(k.name)] = new_kernel(k, m)
    names[#names + 1] = ffi.string(k.name)
  end
  table.sort(names)
  -- K.misspelt: an error listing the kernels there are, not "attempt to call a nil value"
  return setmetatable(K, { [MODULE] = true, __index = function(_, key)
    if type(key) ~= "string" or key:sub(1, 2) == "__" then return nil end
    error("no kernel '" .. key .. "' in " .. chunk .. "; its kernels: " ..
      (#names > 0 and table.concat(names, ", ") or "none (no __global__ function)"), 2)
  end })
end

-- The same source compiled again with the same options and name (by
-- default its call's file:line: a gt.compile in a loop, or in a tree's body)
-- gives the same kernels: kernels made anew each call would be new launches
-- to the tree's keys, a new node every call.
-- The options of gt.compile and gt.load, checked: a table (or nil) of name (a
-- string), graph (a boolean) and options (compiler flags, a string); what: the call.
local COMPILE_OPTS = { name = "string", graph = "boolean", options = "string" }
local function compile_opts(opts, what, names)
  opts = I.opts(opts, what)
  for k, v in pairs(opts) do
    local want = COMPILE_OPTS[k]
    if not want or (k == "name" and not names) then
      error(what .. ": unknown option " .. (type(k) == "string" and ("'" .. k .. "'") or I.show(k)) ..
        ": the options are " .. (names and "name (a string), " or "") ..
        "graph (true or false) and options (compiler flags, a string)")
    end
    if type(v) ~= want then
      error(what .. ": option " .. k .. " must be " .. (want == "boolean" and "true or false" or "a string") ..
        ", got " .. I.show(v))
    end
  end
  return opts
end

local compiled = {}
--- gt.compile(src [, {name=, graph=, options=}]) -> { name = kernel, ... }
function gt.compile(src, opts)
  if type(src) ~= "string" then error("gt.compile expects kernel source text, got " .. I.show(src), 2) end
  opts = compile_opts(opts, "gt.compile(src [, opts])", true)
  local chunk = opts.name
  if not chunk then                          -- the caller's file:line (past pcall and other C frames)
    local lv, info = 2, nil
    repeat info = debug.getinfo(lv, "Sl"); lv = lv + 1 until not info or info.what ~= "C"
    chunk = info and (info.short_src .. ":" .. info.currentline) or "kernel.cu"
    opts = setmetatable({ at = true }, { __index = opts })
  end
  local key = chunk .. "\0" .. tostring(opts.options) .. "\0" .. tostring(opts.graph) .. "\0" .. src
  local K = compiled[key]
  if not K then K = compile(src, opts, chunk); compiled[key] = K end
  return K
end

local expand_includes
local function find_file(path)
  local f = io.open(path, "rb")
  if f then return f, path end
  if path:sub(1, 1) ~= "/" then
    local p2 = gt.home() .. "/" .. path
    f = io.open(p2, "rb")
    if f then return f, p2 end
  end
  return nil
end

-- `#include "name"` of a file beside the .cu is inlined (NVRTC is given no
-- include path, and the cpu backend compiles the text alone), with #line
-- directives so that messages name the right file and line.
local function line_name(p) return (p:gsub('[\\"]', "\\%0")) end
function expand_includes(src, full, shown)
  if not src:find("#include", 1, true) then return src end
  local dir = full:match("^(.*)/") or "."
  local out, n = {}, 0
  for line in (src .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local name = line:match('^%s*#%s*include%s*"([^"]+)"')
    local f = name and io.open(dir .. "/" .. name, "rb")
    if f then
      local inc = f:read("*a")
      f:close()
      out[#out + 1] = ('#line 1 "%s"'):format(line_name(name))
      out[#out + 1] = expand_includes(inc, dir .. "/" .. name, name)
      out[#out + 1] = ('#line %d "%s"'):format(n + 1, line_name(shown))
    else
      out[#out + 1] = line
    end
  end
  return table.concat(out, "\n")
end

local loaded = {}
--- gt.load(path [, opts]) -> kernels of a .cu file (relative to the cwd, else to GTLUA_HOME); cached
function gt.load(path, opts)
  if type(path) ~= "string" then error("gt.load expects a file path, got " .. I.show(path), 2) end
  opts = compile_opts(opts, "gt.load(path [, opts])", false)
  local f, full = find_file(path)
  if not f then error("gt.load: cannot open '" .. path .. "' (looked here and under " .. gt.home() .. ")", 2) end
  local src = expand_includes(f:read("*a"), full, path)
  f:close()
  local key = full .. "\0" .. tostring(opts.options) .. "\0" .. tostring(opts.graph) .. "\0" .. src
  if not loaded[key] then loaded[key] = compile(src, opts, path) end
  return loaded[key]
end
