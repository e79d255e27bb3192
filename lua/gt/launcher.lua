-- gt.launcher: the launchers of a kernel, generated as Lua source with its
-- arity fixed: the argument checks inline, the replay lane's test, then one
-- call into the core (gt_launch_tensors, or gt_launch_lean for gt.ops's lean
-- states).  kernel.lua makes a kernel's launchers with make_launcher and
-- make_lean.  Keep the generated code small and trace-friendly: no varargs,
-- no tail calls, every handle field read before the C call (see byvalue_code).
local ffi = require "ffi"

local gt = require "gt"
local I = require "gt.internal"
local C, rt = I.C, I.rt
local floor = require("gt.host_policy").original.floor   -- (not the wrappers for traced numbers)
local type = require("gt.host_policy").original.type
local PTR_IN, PTR_OUT = C.GT_P_IN, C.GT_P_OUT        -- gt.h's parameter kinds (GT_P_*)
local SCALAR = { [C.GT_P_I32] = "i32", [C.GT_P_U32] = "u32", [C.GT_P_I64] = "i64", [C.GT_P_U64] = "u64",
                 [C.GT_P_F32] = "f32", [C.GT_P_F64] = "f64", [C.GT_P_BOOL] = "bool" }
-- The scalar kinds a gt_arg holds in 32 bits (the lane compares v.u32), the others in 64 (v.u64).
local NARROW = { [C.GT_P_I32] = true, [C.GT_P_U32] = true, [C.GT_P_F32] = true }
local INTEGER = { i32 = true, u32 = true, i64 = true, u64 = true }
local FIELD = { i32 = "i32", u32 = "u32", i64 = "i64", u64 = "u64", f32 = "f32", f64 = "f64" }

local error = I.error   -- every error names the user's file:line (init.lua)

local M = {}

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
-- GTLUA_VERIFY_LANE=1: the lane's test notes what it saw of each launch it
-- takes (gt_lane.seen), which the core compares in full (predict.c)
local VERIFY = C.gt_lane_verifying() ~= 0

-- The code of that note (nothing without GTLUA_VERIFY_LANE) for kernel k:
-- tensors 1..nt with their buffer, offset and bytes given by field(t), the
-- scalars in the gt_arg array args.
local function verify_code(k, nt, field, args)
  if not VERIFY then return "" end
  local c = { "local e = L.seen[li]" }
  for t = 1, nt do c[#c + 1] = ("e.b[%d], e.o[%d], e.n[%d] = %s, %s, %s"):format(t - 1, t - 1, t - 1, field(t)) end
  for i = 0, k.nparams - 1 do
    if k.ptype[i] ~= PTR_IN and k.ptype[i] ~= PTR_OUT then c[#c + 1] = ("e.s[%d] = %s[%d].v.u64"):format(i, args, i) end
  end
  c[#c + 1] = "e.seen = 1 "
  return table.concat(c, "; ")
end

-- The code of a replay through the lane (gt_internal.h's gt_lane): when the cursor's
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
local function lane_code(k, nt, scalars, args)
  local verify = verify_code(k, nt, function(t) return "b" .. t, "o" .. t, "n" .. t end, args)
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
        " and r.made == 0 then " .. verify .. "L.lazy = L.lazy + 1; return end",
      "end",
    }, "\n") .. "\n"
  end
  return table.concat({
    "do",
    "  local r = L.rec[li]",
    "  if " .. test .. " then " .. verify,
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
    reads .. "\n" .. lane_code(k, nt, not made and scalars or nil, args) .. call .. (made and "return b\n" or "return\n") ..
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
  local ts = {}
  for i = 1, k.nparams do if k.ptype[i - 1] == PTR_IN or k.ptype[i - 1] == PTR_OUT then ts[#ts + 1] = i end end
  local verify = verify_code(k, t, function(j) local i = ts[j]; return ("a%d._b"):format(i), ("a%d._off"):format(i),
    ("a%d._nb"):format(i) end, "args")
  return "do\nlocal li = L.qn[0] + L.lazy\nif li < L.n then\nlocal r = L.rec[li]\nlocal q = r.qa\n" ..
    "if r.cfg == cfg.id and r.made == 0 and " .. table.concat(test, " and ") ..
    " then " .. verify .. "L.lazy = L.lazy + 1; return end\nend\nend\n"
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

M.make_launcher, M.make_lean = make_launcher, make_lean
return M
