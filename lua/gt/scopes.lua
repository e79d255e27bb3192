-- gt.scopes: gt.scope (releasing what a function made and did not return),
-- in tree calls and outside them, and the sites of releases (what a use of a
-- released tensor names).
local ffi = require "ffi"
local bit = require "bit"

local gt = require "gt"
local I = require "gt.internal"
local C, rt = I.C, I.rt
local error = I.error   -- every error names the user's file:line (init.lua)
local type = type
local istype = ffi.istype
local TT = ffi.typeof("gt_tensor")
local band, bor, bnot = bit.band, bit.bor, bit.bnot

-- Scopes outside tree calls: per nesting level, the tensors made in it.
local plain, nplain = {}, 0

-- Where each released buffer was released: its struct's site (b.site),
--   > 0  a gt.scope of a tree call, by its function: SITES[id] (weak both
--        ways; the tree holds the functions of its latest call's scopes,
--        tree._scopes, for as long as that call's buffers can be read);
--   < 0  a text, TEXTS[-id]: "gt.scope at a.lua:12" for a scope outside
--        tree calls, ":free() at a.lua:30" (interned: one entry per place in
--        the source, however many buffers or closures released there);
--   0    another release.
-- Nothing holds a scope's closure past the call it ran in: a closure made
-- per step (gt.scope(function() ... end)) and what it captures (a tree, a
-- weight) are collected as they would be without gt.scope.
local SITES, SITE_OF, nsites = setmetatable({}, { __mode = "v" }), setmetatable({}, { __mode = "k" }), 0
local function site_id(fn)
  local id = SITE_OF[fn]
  if id then return id end
  nsites = nsites < 2 ^ 31 - 1 and nsites + 1 or 1
  SITES[nsites], SITE_OF[fn] = fn, nsites
  return nsites
end

local TEXTS, TEXT_ID, ntexts = {}, {}, 0
local function text_id(text)
  local id = TEXT_ID[text]
  if id then return id end
  ntexts = ntexts + 1
  TEXTS[ntexts], TEXT_ID[text] = text, -ntexts
  return -ntexts
end

local function scope_text(fn)
  local i = debug.getinfo(fn, "S")
  return "gt.scope at " .. i.short_src .. ":" .. i.linedefined
end

-- The site of an eager scope's releases (its text, once per function).
local EAGER_SITE = setmetatable({}, { __mode = "k" })
local function eager_site(fn)
  local id = EAGER_SITE[fn]
  if not id then id = text_id(scope_text(fn)); EAGER_SITE[fn] = id end
  return id
end

-- A site that stays readable after its call's scopes are gone (a buffer that
-- outlives the call: the caller's tensor released as its staged copy was).
local function lasting(site)
  if site <= 0 then return site end
  local fn = SITES[site]
  return text_id(fn and scope_text(fn) or "a gt.scope")
end

local RELEASED, KEEP = C.GT_BUF_RELEASED, C.GT_BUF_KEEP

-- The message's "released by ..." and what to do, for a site.
local function site_text(site)
  local by
  if site > 0 then by = SITES[site] and scope_text(SITES[site]) or "a gt.scope"
  elseif site < 0 then by = TEXTS[-site] end
  if by and by:find("gt.scope", 1, true) then return by, "return it from the scope or :clone() it" end
  return by or "a release", ":clone() it before releasing it to keep the values"
end

-- x released as y was (the caller's tensor whose staged copy y the body
-- freed: tree.lua's write_back), with y's site in its message.
function I.release_as(x, y)
  local b = x._b
  if band(b.flags, RELEASED) ~= 0 or x._gen ~= b.gen_now[0] then return end
  if C.gt_buf_free(rt, b) ~= 0 then return end
  b.site = lasting(y._b.site)
end

-- Marks x (a tensor, or tensors in a plain table) as returned from a
-- scope outside tree calls (on), or not (after the scope: a result the
-- scope did not make keeps no mark for the scope around it, which may
-- release it).
local function keep(x, on)
  if istype(TT, x) then
    local b = x._b
    if not on then b.flags = band(b.flags, bnot(KEEP))
    elseif x._gen == b.gen_now[0] then b.flags = bor(b.flags, KEEP) end
  elseif type(x) == "table" and getmetatable(x) == nil then
    for _, v in pairs(x) do if istype(TT, v) then keep(v, on) end end
  end
end

-- The same in a tree call (t, the scope's first buffer): only the call's
-- buffers from the scope's first on are marked, those the core releases (and
-- unmarks) at the scope's end.
local function keep_in(x, t, first)
  if istype(TT, x) then
    local b = x._b
    if b.tree == t and b.ci >= first and x._gen == b.gen_now[0] then b.flags = bor(b.flags, KEEP) end
  elseif type(x) == "table" and getmetatable(x) == nil then
    for _, v in pairs(x) do if istype(TT, v) then keep_in(v, t, first) end end
  end
end

-- Releases buffer b at a scope's end unless it was returned (KEEP).
-- (The keep mark stays until keep_results clears it after the loop: two
-- handles of one buffer in the list, a tree's output and its narrowed view,
-- are both kept.)
local function settle(b, fn)
  local f = b.flags
  if band(f, KEEP) ~= 0 then return true end
  if band(f, RELEASED) == 0 then
    C.gt_buf_free(rt, b)
    b.site = eager_site(fn)
  end
  return false
end

-- A scope's body runs in a pcall made from C (gt.host.call in a tree call,
-- gt.host.run outside one, as a tree's body does); then its tensors are
-- settled.  The C call ends the trace of the caller's loop there (LuaJIT
-- stitches a new one after it) and the body's code forms traces of its own.
-- Recorded inline instead, a loop over layers (x = gt.scope(block, x, ...))
-- made one trace of every launch of a block: examples/gpt.lua's decode step
-- aborted with "too many spill slots" and, once its loop was blacklisted, ran
-- the loop, gt.scope and the launchers' FFI calls in the interpreter (with
-- the wide launches through the lane: "trace too long", 40% slower).
-- LuaJIT cannot compile a return across the frame of its own pcall ("return
-- to lower frame"), hence the C one.  In a tree call the settling runs after
-- gt.host.call returns, in the stitched trace (a finish called from C, as
-- gt.host.run does, cost a second pcall and an exit from its own trace:
-- ~150 -> ~90 ns a scope, cpu backend): the call's buffers from the scope's
-- first on are the scope's, and the core releases those not returned (in
-- queue order).
local host = require "gt.host"
local hrun, hcall = host.run, host.call
local spill = {}                               -- results past the second (gt.host.run's extra)

-- Marks a scope's n results (r1, r2, then spill's) kept (on), or not.
local function keep_results(n, r1, r2, on)
  if n >= 1 then keep(r1, on) end
  if n >= 2 then keep(r2, on) end
  for i = 1, n - 2 do keep(spill[i], on) end
end

-- Outside a tree call the tensors made in the scope are listed in
-- plain[nplain]; plain_end releases those not returned.
local function plain_end(fn, ok, n, r1, r2)
  local list = plain[nplain]
  nplain = nplain - 1
  if ok then
    keep_results(n, r1, r2, true)
    local outer = plain[nplain]
    for i = 1, #list do
      local t = list[i]
      local b = t._b        -- (a tree's output: only while live, its buffer struct is the next call's after)
      if (b.tree == nil or t._gen == b.gen_now[0]) and settle(b, fn) and outer then outer[#outer + 1] = t end
    end
    keep_results(n, r1, r2, false)
  else                        -- a failed scope released nothing: what it made is the enclosing scope's (as in a tree call)
    local outer = plain[nplain]
    if outer then for i = 1, #list do outer[#outer + 1] = list[i] end end
  end
  for i = #list, 1, -1 do list[i] = nil end
  if not ok then error(r1, 0) end
end

-- The results of gt.host.run(extra, ...): up to two without a vararg, more
-- from extra (emptied; also after an error).  Tree calls use it too.
local function host_results(extra, ok, n, r1, r2)
  if not ok then
    for i in pairs(extra) do extra[i] = nil end
    error(r1, 0)
  end
  if n <= 2 then
    if n == 2 then return r1, r2 elseif n == 1 then return r1 end
    return
  end
  local more = { unpack(extra, 1, n - 2) }
  for i = 1, n - 2 do extra[i] = nil end
  return r1, r2, unpack(more, 1, n - 2)
end
I.host_results = host_results

--- gt.scope(fn, ...) -> fn(...): when fn returns, every tensor made inside
--- it that is not among its results (or in a table it returns, one level
--- deep) is released: its memory can be reused, and using it raises.  The
--- same in tree calls (in queue order) and outside them.
-- (No tail call returns its results: a trace that begins after gt.host.run
-- returns may return from this vararg function, not tail-call out of it.)
-- A tree call's output made inside scopes outside tree calls (tree.lua's
-- anchor): the innermost one releases it unless it returns it, as it does
-- what a plain function called there makes.
function I.plain_note(t)
  if nplain > 0 then local l = plain[nplain]; l[#l + 1] = t end
end

function gt.scope(fn, ...)
  if type(fn) ~= "function" then error("gt.scope(fn, ...): fn must be a function, got " .. type(fn), 2) end
  local tree = I.active
  local ok, n, r1, r2
  if tree then
    local first = C.gt_tree_nbufs(tree._t)
    ok, n, r1, r2 = hcall(spill, fn, ...)
    if ok then
      local t = tree._t
      if n >= 1 then keep_in(r1, t, first) end
      if n >= 2 then keep_in(r2, t, first) end
      for i = 1, n - 2 do keep_in(spill[i], t, first) end
      local sc = tree._scopes                -- (the call's scope functions, held while its buffers are: SITES)
      if sc.gen ~= tree._gen then            -- (a new call: the last one's go; a long list is dropped whole)
        if sc.n > 64 then sc = {}; tree._scopes = sc end
        sc.gen, sc.n = tree._gen, 0
      end
      if sc[sc.n] ~= fn then sc.n = sc.n + 1; sc[sc.n] = fn end
      if C.gt_tree_scope_end(rt, first, site_id(fn)) ~= 0 then ok, n, r1 = false, 1, I.errmsg() end
    end
  else
    nplain = nplain + 1
    plain[nplain] = plain[nplain] or {}
    ok, n, r1, r2 = hrun(spill, plain_end, fn, fn, ...)
  end
  if ok and n <= 2 then
    if n == 1 then return r1 elseif n == 2 then return r1, r2 end
    return
  end
  return host_results(spill, ok, n, r1, r2)   -- an error, or more than two results
end

return { text_id = text_id, lasting = lasting, site_text = site_text, plain_note = I.plain_note }
