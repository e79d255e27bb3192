-- gt.cond, gt.loop: device-side branches (DESIGN.md section 8).
-- In a tree call both bodies are queued between cond entries (IF p, then,
-- ELSE, else, END; WHILE p, body, END) and recorded once into a conditional
-- node: no cut, no host sync, whichever way it goes.  Outside a tree call
-- (and in warmups, whose launches run one by one) p is read on the host and
-- one body runs: the same results.
local ffi = require "ffi"
local bit = require "bit"

local gt = require "gt"
local I = require "gt.internal"
local C, rt = I.C, I.rt
local error = I.error   -- every error names the user's file:line (init.lua)
local type, pcall = type, pcall
local IF, ELSE, WHILE, END = C.GT_COND_IF, C.GT_COND_ELSE, C.GT_COND_WHILE, C.GT_COND_END
local NODES, ELSE_NODES = C.GT_COND_NODES, C.GT_COND_ELSE_NODES
local CODE = { f32 = C.GT_F32, i32 = C.GT_I32, i64 = C.GT_I64, u8 = C.GT_U8 }
local SIZE = { f32 = 4, i32 = 4, i64 = 8, u8 = 1 }
local HOST = { f32 = ffi.typeof("float[1]"), i32 = ffi.typeof("int32_t[1]"), i64 = ffi.typeof("int64_t[1]"),
               u8 = ffi.typeof("uint8_t[1]") }

-- -- Bodies: no host syncs inside ---------------------------------------

local depth, sites = 0, {}      -- bodies running now, and where each cond is

-- A host sync inside a body (tensor.lua's sync points, gt.cut, gt.sync):
-- the device decides the branch, so the host has nothing to wait for there.
local function body_sync(what, level)
  error(("%s inside the body of %s: a body must stay on the device (no item, tolist, host copies, gt.cut " ..
    "or gt.sync); compute the value with kernels, or read it after the %s"):format(what, sites[depth],
    sites[depth]:match("^gt%.%a+")), level + 1)
end

local flush = I.flush
I.flush = function(level, reason, cut)
  if depth > 0 then body_sync("a segment end (gt.cut, gt.sync or a host read)", level + 1) end
  return flush(level + 1, reason, cut)
end
local sync, cut = gt.sync, gt.cut
function gt.sync()
  if depth > 0 then body_sync("gt.sync", 2) end
  return sync()
end
function gt.cut()
  if depth > 0 then body_sync("gt.cut", 2) end
  return cut()
end

local function enter(site)
  depth = depth + 1
  sites[depth] = site
  I.in_body = body_sync
end
-- A body runs in a pcall made from C (gt.host.run, as a tree's body does):
-- LuaJIT cannot compile a return across the frame of its own pcall (the
-- trace aborts, "return to lower frame"), and after a few aborts the end of
-- the body ran in the interpreter on every call.  dev: a device-side body (ndev counts them).
local spill = {}        -- (gt.host.run's results past the second)
local ndev = 0          -- device-side bodies being queued (their nesting)
local function body_end(dev, ok, _, err)
  if dev then ndev = ndev - 1 end
  sites[depth] = nil
  depth = depth - 1
  if depth == 0 then I.in_body = nil end
  if not ok then error(err, 0) end
end
local hrun = require("gt.host").run
-- fn run as a body: ok, n, r1, r2 (results past the second in spill; with
-- an error false, 1, the error).
local function run_in(site, fn, dev)
  if dev then ndev = ndev + 1 end
  enter(site)
  return hrun(spill, body_end, dev, fn)
end

-- A body's n results (r1, r2, the rest in spill) in a list of their own.
local function collect(n, r1, r2)
  local r = { n = n, r1, r2 }
  for i = 3, n do r[i] = spill[i - 2]; spill[i - 2] = nil end
  return r
end

-- -- Checks ------------------------------------------------------------------

local function site_of(name, level)
  local info = debug.getinfo(level + 1, "Sl")
  return name .. " at " .. (info and (info.short_src .. ":" .. (info.currentline or 0)) or "?")
end

-- A site's id for the core's messages (gt_cond_site: registered once).
local site_ids = {}
local function site_id(site)
  local id = site_ids[site]
  if not id then
    id = C.gt_cond_site(rt, site)
    if id < 0 then error(I.errmsg(), 3) end
    site_ids[site] = id
  end
  return id
end

-- p: a live one-element tensor of f32, i32, i64 or u8.
local function check_p(name, p, level)
  if not gt.is_tensor(p) then
    error(name .. ": p must be a one-element tensor (f32, i32, i64 or u8) that the device writes, got a " ..
      type(p) .. (type(p) == "boolean" and "; a Lua value is decided on the host: use if" or ""), level + 1)
  end
  if p._gen ~= p._b.gen_now[0] then I.stale_error(p, level + 1) end
  if p.numel ~= 1 or not CODE[p.dtype] then
    error(("%s: p must be a one-element tensor (f32, i32, i64 or u8; nonzero is true), got a %s %s tensor"):format(
      name, p.dtype, I.shape_str(p._shape)), level + 1)
  end
  if p._strides then error(name .. ": p is a non-contiguous view; :clone() it", level + 1) end
end

local function check_fn(name, what, f, level)
  if type(f) ~= "function" then error(("%s: %s must be a function, got a %s"):format(name, what, type(f)), level + 1) end
end

-- p's value on the host (a sync on cuda), without the body check.
local function read(p, level)
  local h = HOST[p.dtype]()
  if C.gt_buf_read(rt, p._b, p._off, h, SIZE[p.dtype]) ~= 0 then error(I.errmsg(), level + 1) end
  return tonumber(h[0]) ~= 0
end

-- The backend's conditional nodes (asked once).
local bits
local function has_nodes(need_else)
  if not bits then bits = C.gt_cond_support(rt) end
  return bit.band(bits, NODES) ~= 0 and (not need_else or bit.band(bits, ELSE_NODES) ~= 0)
end

-- In a tree call: true when this cond becomes a conditional node; else
-- it branches on the host (said once).
local warned = false
local function device(need_else, level)
  if has_nodes(need_else) then return true end
  if ndev > 0 then
    error("gt.cond with an else body inside the body of a device-side cond needs conditional IF/ELSE nodes " ..
      "(CUDA 12.8), which this driver lacks: write it as two gt.cond, the second on a negated p", level + 1)
  end
  if not warned then
    warned = true
    local why = bits == 0 and I.errmsg() or "an else body needs CUDA 12.8 conditional nodes"
    gt.on_warning("gt.cond and gt.loop branch on the host in tree calls (" .. why .. "): each way is its own " ..
      "child node, and reading p is a sync")
  end
  return false
end

-- The host's branch inside a tree call: the segment ends here, p is read.
local function host_point(level)
  I.note_sync("gt.cond (host branch)", level + 1)
  flush(level + 1, nil, C.GT_CUT_HOST)
end

-- -- Results -------------------------------------------------------------
-- gt.cond returns what its bodies return, as torch.cond does: tensors, the
-- same number from both bodies with the same shapes and dtypes.  They are
-- new tensors in every mode: outside a tree the taken body's results are
-- cloned; in a tree both bodies copy theirs into the same result tensors
-- (made in the then body, after its launches), so the device's way fills them.

local function plural(n, what) return n .. " " .. what .. (n == 1 and "" or "s") end

local function describe(x) return "a " .. x.dtype .. " " .. I.shape_str(x._shape) .. " tensor" end

-- Results r of body `which` must be tensors that can be copied on the
-- device: nil, or what is wrong.
local function bad_results(which, r)
  for i = 1, r.n do
    local x = r[i]
    if not gt.is_tensor(x) then
      return ("gt.cond: %s's result %d is %s; a body returns tensors (gt.cond returns the taken body's, as " ..
        "torch.cond does) or nothing"):format(which, i, x == nil and "nil" or "a " .. type(x))
    end
    if x._strides then
      return ("gt.cond: %s's result %d is a non-contiguous view (%s); return a contiguous tensor (gt.cond copies " ..
        "each result on the device, and a view along a later dimension is copied through the host)"):format(
        which, i, describe(x))
    end
  end
end

-- A body that may not run (no else_fn; a loop's) returned n values.
local function returns_none(which, n)
  if which == "body_fn" then
    return ("gt.loop: body_fn returns %s; a loop's body returns nothing (gt.loop returns nothing): write what " ..
      "the passes compute into tensors made before the loop (z:copy(ops.add(z, 1)))"):format(plural(n, "value"))
  end
  return ("gt.cond: then_fn returns %s but there is no else_fn: when p is false no body runs, so gt.cond with " ..
    "one body returns nothing; give an else_fn that returns tensors of the same shapes and dtypes, or write " ..
    "into a tensor made before the gt.cond (y:copy(...)) and return nothing"):format(plural(n, "value"))
end

-- Both bodies' results: the same count, shapes and dtypes (nil), or what differs.
local function differ(a, b)
  if a.n ~= b.n then
    return ("gt.cond: then_fn returns %s and else_fn %d: both bodies return the same number of tensors, with the " ..
      "same shapes and dtypes (gt.cond returns the taken body's)"):format(plural(a.n, "tensor"), b.n)
  end
  for i = 1, a.n do
    local x, y = a[i], b[i]
    if x.dtype ~= y.dtype or I.shape_str(x._shape) ~= I.shape_str(y._shape) then
      return ("gt.cond: result %d is %s from then_fn but %s from else_fn: both bodies return tensors of the " ..
        "same shapes and dtypes"):format(i, describe(x), describe(y))
    end
  end
end

local NONE = { n = 0 }

-- A device-side body's results r copied into out (made here when nil: the
-- then body's), queued inside the body (its copies run only on its way).
-- ok, out; or false and the error.
local function copy_results(site, r, out)
  local ok, _, err = run_in(site, function()
    if not out then
      out = { n = r.n }
      for i = 1, r.n do out[i] = gt.tensor(r[i]._shape, r[i].dtype) end
    end
    for i = 1, r.n do out[i]:copy(r[i]) end
  end, true)
  if not ok then return false, err end
  return true, out
end

-- The cond's entries from at closed, then err raised (level: 0 for a body's
-- own error, as it is; else at gt.cond's caller).
local function close_raise(at, err, level)
  C.gt_cond_close(rt, at)
  error(err, level == 0 and 0 or level + 1)
end

-- -- gt.cond ---------------------------------------------------------------

--- gt.cond(p, then_fn [, else_fn]) -> the taken body's results: runs then_fn
--- when the one-element tensor p is nonzero, else else_fn; in a tree call both
--- are recorded into one conditional node and the device decides (no cut, no
--- sync).  Bodies return tensors (the same number, shapes and dtypes) or nothing.
local nconds = 0   -- gt.cond calls so far (a loop pass that ran one may write p in a branch it did not take)
function gt.cond(p, then_fn, else_fn)
  nconds = nconds + 1
  check_p("gt.cond", p, 2)
  check_fn("gt.cond", "then_fn", then_fn, 2)
  if else_fn ~= nil then check_fn("gt.cond", "else_fn", else_fn, 2) end
  local site = site_of("gt.cond", 2)
  if not I.active or not device(else_fn ~= nil, 2) then
    if I.active then host_point(2) end
    local yes = read(p, 2)
    local f = yes and then_fn or else_fn
    if not f then return end
    local ok, n, r1, r2 = run_in(site, f, false)
    if not ok then error(r1, 0) end
    if n == 0 then return end
    local r = collect(n, r1, r2)
    local which = yes and "then_fn" or "else_fn"
    local bad = not else_fn and returns_none(which, n) or bad_results(which, r)
    if bad then error(bad, 2) end
    for i = 1, n do r[i] = r[i]:clone() end
    return unpack(r, 1, n)
  end
  local code = CODE[p.dtype]
  local at = C.gt_cond_mark(rt, IF, p._b, p._off, code, 0, site_id(site))
  if at < 0 then error(I.errmsg(), 2) end
  -- (from here an error closes the cond's entries before it is raised: when
  -- the user's pcall catches it, the call goes on as eager code does)
  local ok, n, r1, r2 = run_in(site, then_fn, true)
  if not ok then close_raise(at, r1, 0) end
  local out, a
  if n > 0 then
    a = collect(n, r1, r2)
    local bad = not else_fn and returns_none("then_fn", n) or bad_results("then_fn", a)
    if bad then close_raise(at, bad, 2) end
    ok, out = copy_results(site, a, nil)
    if not ok then close_raise(at, out, 0) end
  end
  if else_fn then
    if C.gt_cond_mark(rt, ELSE, nil, 0, 0, 0, 0) < 0 then close_raise(at, I.errmsg(), 2) end
    ok, n, r1, r2 = run_in(site, else_fn, true)
    if not ok then close_raise(at, r1, 0) end
    if n > 0 or out then
      local b = n > 0 and collect(n, r1, r2) or NONE
      local bad = bad_results("else_fn", b) or differ(a or NONE, b)
      if bad then close_raise(at, bad, 2) end
      if out then
        local err
        ok, err = copy_results(site, b, out)
        if not ok then close_raise(at, err, 0) end
      end
    end
  end
  if C.gt_cond_mark(rt, END, nil, 0, 0, 0, 0) < 0 then close_raise(at, I.errmsg(), 2) end
  if out then return unpack(out, 1, out.n) end
end

-- -- gt.loop ---------------------------------------------------------------

local function never_writes(site, level)
  error(site .. ": the body never writes p, so the loop would not end; write p in the body (a kernel that " ..
    "computes the condition) or bound the loop with {max = n}", level + 1)
end

local nwatch = 0   -- eager loops running (each watches its p)

-- One pass of a loop run on the host: a body returns nothing.
local function run_loop_body(site, body, level)
  local ok, n, err = run_in(site, body, false)
  if not ok then error(err, 0) end
  if n > 0 then
    for i = 1, n - 2 do spill[i] = nil end
    error(returns_none("body_fn", n), level + 1)
  end
end

-- Outside a tree: p is read before each pass; without max, a pass that
-- did not write p raises (the loop could not end), unless it ran a gt.cond:
-- a branch it did not take may write p on a later pass, as the device
-- loop's body, recorded with both branches, does (the same loop in a tree).
local function eager_loop(p, body, max, site)
  local slot = nwatch
  local function watch(on) return C.gt_cond_watch(rt, slot, on and p._b or nil, p._off, SIZE[p.dtype]) ~= 0 end
  if not max then nwatch = nwatch + 1; watch(true) end
  local ok, err = pcall(function()
    local i = 0
    while (not max or i < max) and read(p, 4) do
      local c0 = nconds
      run_loop_body(site, body, 5)
      i = i + 1
      if not max and not watch(true) and nconds == c0 then never_writes(site, 4) end
    end
  end)
  if not max then watch(false); nwatch = nwatch - 1 end
  if not ok then error(err, 0) end
end

-- A tree call on a backend without WHILE nodes: one segment per pass.
-- (A pass that ran a gt.cond is not checked, as outside a tree: its
-- branches end segments, and one not taken may write p on a later pass.)
local function host_loop(p, body, max, site)
  local i = 0
  while true do
    host_point(3)
    if (max and i >= max) or not read(p, 3) then return end
    local c0 = nconds
    run_loop_body(site, body, 3)
    if not max and nconds == c0 and C.gt_cond_writes(rt, 0, p._b, p._off, SIZE[p.dtype]) == 0 then never_writes(site, 3) end
    i = i + 1
  end
end

--- gt.loop(p, body_fn [, {max = n}]): runs body_fn while the one-element
--- tensor p is nonzero (at most n times); the body must write p unless max
--- is given.  In a tree call the loop is one conditional WHILE node.
function gt.loop(p, body, opts)
  check_p("gt.loop", p, 2)
  check_fn("gt.loop", "body_fn", body, 2)
  if opts ~= nil and type(opts) ~= "table" then error("gt.loop: options must be a table such as {max = 8}", 2) end
  local max = opts and opts.max
  if max ~= nil and (type(max) ~= "number" or max < 1 or max ~= math.floor(max) or max >= 2 ^ 31) then
    error("gt.loop: max must be a whole number of passes, at least 1, got " .. tostring(max), 2)
  end
  local site = site_of("gt.loop", 2)
  if not I.active then return eager_loop(p, body, max, site) end
  if not device(false, 2) then return host_loop(p, body, max, site) end
  local code = CODE[p.dtype]
  local at = C.gt_cond_mark(rt, WHILE, p._b, p._off, code, max or 0, site_id(site))
  if at < 0 then error(I.errmsg(), 2) end
  -- (an error from here closes the loop's entries first, bounded to the one
  -- pass: eager code's loop stops at the pass that raised)
  local ok, n, err = run_in(site, body, true)
  if not ok then close_raise(at, err, 0) end
  if n > 0 then
    for i = 1, n - 2 do spill[i] = nil end
    close_raise(at, returns_none("body_fn", n), 2)
  end
  if not max and C.gt_cond_writes(rt, at + 1, p._b, p._off, SIZE[p.dtype]) == 0 then
    C.gt_cond_close(rt, at)
    never_writes(site, 2)
  end
  if C.gt_cond_mark(rt, END, p._b, p._off, code, max or 0, 0) < 0 then close_raise(at, I.errmsg(), 2) end
end

--- gt.cond_nodes() -> true when tree calls record gt.cond/gt.loop as conditional nodes
--- (false: they branch on the host; the reason as a second value)
function gt.cond_nodes()
  local ok = has_nodes(true)
  return ok, not ok and (has_nodes(false) and "an else body needs CUDA 12.8 conditional nodes" or I.errmsg()) or nil
end
