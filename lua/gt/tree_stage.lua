-- gt.tree_stage: a tree call's inputs staged (its own pool's, or all with copy_inputs),
-- and what the call wrote into staged copies written back to the caller's tensors.
local ffi = require "ffi"
local bit = require "bit"

local gt = require "gt"
local I = require "gt.internal"
local C, rt, is_tensor = I.C, I.rt, gt.is_tensor
local tonumber = require("gt.host_policy").original.tonumber
local STAGING, RELEASED = C.GT_BUF_STAGING, C.GT_BUF_RELEASED
local getmetatable, type, pairs = getmetatable, type, pairs
local packed = I.packed   -- (tree.lua's, set before it loads this module)

local M = {}

-- A tensor input that lives in this tree's pool (an output of its previous
-- call) or any tensor input with copy_inputs is copied to staging first.
-- An input must be live; an output of this tree's previous call (one
-- generation back) is too: it is copied before this call reuses its memory.
-- Returns whether x lives in this tree's pool.
-- Whether input x belongs to this tree, and whether it is live (a tensor
-- released or gone stale is passed to the body as it is, not staged: the
-- body raises where it uses it, as eager code does, and not if it does not).
local function check_input(self, x)
  local b = x._b
  local own = b.tree == self._t
  local g, now = x._gen, b.gen_now[0]
  return own, g == now or (own and now == self._gen and g == C.gt_tree_prev_gen(self._t))
end
I.check_input = check_input

-- An input that is not live, as the body gets it: itself, or for this tree's
-- own output released by the caller a handle that raises as it does (the
-- call's first buffers reuse its struct: tensor.lua's _dead_copy).
function I.unstaged(x, own)
  local b = x._b
  if own and bit.band(b.flags, RELEASED) ~= 0 and b.gen == x._gen then return I.dead_copy(x) end
  return x
end

-- The bytes [lo, hi) of its buffer that tensor x spans (a non-contiguous
-- view: from its first element to its last).
local function span(x)
  local st = x._strides
  if not st then return x._off, x._off + x._nb end
  local last, shape = 0, x._shape
  for i = 1, #shape do last = last + (shape[i] - 1) * st[i] end
  return x._off, x._off + (last + 1) * I.dtypes[x.dtype].size
end
I.span = span

-- The key of x's buffer among a call's inputs.
local function buf_key(x) return tonumber(ffi.cast("intptr_t", x._b)) end

-- Input x (the caller's tensor) of this call is worked on through its staged
-- copy px (outer chunks of chunk bytes, each padded to padded bytes in px):
-- after the call, what the call wrote into px goes back into x (write_back).
-- swap: px lays x's bytes out as x does (copy_inputs): apply_swaps may swap.
local function note_copy(self, x, px, outer, chunk, padded, swap)
  local wb = self._wb
  if not wb then wb = {}; self._wb = wb end
  wb[#wb + 1] = { x = x, px = px, outer = outer, chunk = chunk, padded = padded, swap = swap or false,
                  b = false, off = 0, gen = 0 }
end
I.note_copy = note_copy

-- With copy_inputs the body works on a copy px of each input x; the body
-- may reach x another way too (captured: the same tensor passed in and kept
-- in an upvalue).  For the call, x's handle is px's view (its buffer, offset
-- and generation; once every input is staged), so that the same object,
-- captured or passed, reaches the copy, as it reaches one memory outside a
-- tree; unswap puts it back, first thing at the call's end (write_back) and
-- wherever a call ends without one.  (Another view of x's memory, captured,
-- still reaches x's memory itself.)
local function apply_swaps(self)
  local wb = self._wb
  if not wb or self._swapped then return end
  self._swapped = true
  for k = 1, #wb do
    local w = wb[k]
    if w.swap then
      local x, px = w.x, w.px
      w.b, w.off, w.gen = x._b, x._off, x._gen
      x._b, x._off, x._gen = px._b, px._off, px._gen
    end
  end
end
I.apply_swaps = apply_swaps
local function unswap(self)
  if not self._swapped then return end
  self._swapped = false
  local wb = self._wb
  for k = #wb, 1, -1 do
    local w = wb[k]
    if w.swap then w.x._b, w.x._off, w.x._gen = w.b, w.off, w.gen end
  end
end
I.unswap = unswap

-- After a call: each staged copy of a caller's tensor that the call wrote
-- into is copied back into it, so a write into an input reaches the caller
-- as without a tree (copy_inputs, buckets' padding).  An input of this
-- tree's own pool (the last call's output) is stale by now: nothing to do.
local function write_back(self)
  unswap(self)
  local wb, t = self._wb, self._t
  self._wb, self._wbl = nil, wb
  for k = 1, #wb do
    local w = wb[k]
    local x, px = w.x, w.px
    local pb = px._b
    if bit.band(pb.flags, RELEASED) ~= 0 and pb.gen == px._gen and x._b.tree ~= t then
      I.release_as(x, px)                 -- the body freed its copy: the caller's tensor, as eager code frees it
    elseif px._b.wgen == self._gen and x._b.tree ~= t and not x:is_stale() and   -- (the call wrote it: wgen; after an error too)
       C.gt_unstage(rt, px._b, px._off, x._b, x._off, w.outer, w.chunk, w.padded) ~= 0 then
      error(I.errmsg(), 4)
    end
  end
end
I.write_back = write_back

-- A result on the staged copy of a caller's tensor (wbl: write_back's list)
-- as the caller's own: x itself, or the same view of it, as without a tree
-- (a staged copy is the tree's and goes stale with the next call).  Only
-- where the copy lays its bytes out as x does (all of them with
-- copy_inputs; with buckets' padding, when the padded dim is the first).
local function unstage_one(wbl, y)
  if not is_tensor(y) then return y end
  local b = y._b
  for k = 1, #wbl do
    local w = wbl[k]
    local px = w.px
    if px._b == b and w.outer == 1 then
      local lo, hi = span(y)
      local rel = lo - px._off
      if rel >= 0 and hi - px._off <= w.chunk then
        local x = w.x
        if rel == 0 and y._sid == x._sid and y._dt == x._dt and y._vid == x._vid then return x end
        return I.view(x._b, x._off + rel, y._sid, y._dt, x._gen, y._vid)
      end
    end
  end
  return y
end
local function unstage_res(wbl, y, depth)
  if type(y) == "table" and getmetatable(y) == nil then   -- (tables in tables too, as anchor_deep)
    depth = depth or 1
    if depth <= 8 then for k, v in pairs(y) do y[k] = unstage_res(wbl, v, depth + 1) end end
    return y
  end
  return unstage_one(wbl, y)
end
I.unstage_res = unstage_res

-- x staged into slot `slot` (returns x itself when it needs no staging) and
-- the next free slot.  shared (from shared_inputs, or nil): the buffers that
-- several staged inputs of this call view; those share one staged copy of
-- the bytes they span, so that a write through one input is seen through
-- the other, as outside a tree (`step(h, h)`).
local function stage(self, x, slot, shared)
  local b = x._b
  local own, live = check_input(self, x)
  if not live then return I.unstaged(x, own), slot end
  if not own and not self._copy then return x, slot end
  local g = shared and shared[buf_key(x)]
  local px, lo, hi = nil, span(x)            -- (a non-contiguous view: the bytes it spans, and the same view of them)
  if g and g.n > 1 then                      -- (the same tensor twice: the same staged tensor twice)
    if g[x] then return g[x], slot end
    local new = not g.sb
    if new then
      if C.gt_tree_stage(rt, slot, b, g.lo, 1, g.hi - g.lo, g.hi - g.lo, self._out) ~= 0 then I.error(I.errmsg()) end
      g.sb, slot = self._out[0], slot + 1
    end
    px = I.view(g.sb, x._off - g.lo, x._sid, x._dt, g.sb.gen, x._vid, new)
    g[x] = px
  else
    if C.gt_tree_stage(rt, slot, b, lo, 1, hi - lo, hi - lo, self._out) ~= 0 then I.error(I.errmsg()) end
    local sb = self._out[0]
    px, slot = I.view(sb, x._off - lo, x._sid, x._dt, sb.gen, x._vid, true), slot + 1
  end
  if not own then note_copy(self, x, px, 1, hi - lo, hi - lo, true) end
  return px, slot
end

local function needs_stage(self, x)
  if not is_tensor(x) then return false end
  return self._copy or x._b.tree == self._t
end

-- x (a tensor, or tensors in a plain table) must be staged.
local function arg_needs_stage(self, x)
  if needs_stage(self, x) then return true end
  if type(x) == "table" and getmetatable(x) == nil then
    for _, v in pairs(x) do if needs_stage(self, v) then return true end end
  end
  return false
end

-- A previous call's staged tensor fed back in keeps its slot for this call.
local function pin(self, x)
  if is_tensor(x) then
    local b = x._b
    if b.tree == self._t and bit.band(b.flags, STAGING) ~= 0 then C.gt_tree_stage_pin(rt, b) end
  end
end

-- Before anything is staged: pins the slots that inputs of this call live in.
local function pin_inputs(self, args, n)
  for i = 1, n do
    local x = args[i]
    if type(x) == "table" and getmetatable(x) == nil then
      for _, v in pairs(x) do pin(self, v) end
    else pin(self, x) end
  end
end
I.pin_inputs = pin_inputs

-- (groups by buf_key: one more input x viewing its buffer)
local function add_input(groups, x)
  local k, lo, hi = buf_key(x), span(x)
  local g = groups[k]
  if g then g.n, g.lo, g.hi = g.n + 1, math.min(g.lo, lo), math.max(g.hi, hi)
  else groups[k] = { n = 1, lo = lo, hi = hi } end
end

-- (one: the first input to stage, kept until a second one makes groups)
local function note_input(x, one, groups)
  if not one then return x, nil end          -- the first one: nothing to share yet
  if not groups then groups = {}; add_input(groups, one) end
  add_input(groups, x)
  return one, groups
end

-- The buffers of the call's inputs to stage (args[1..n], and tensors in
-- plain tables among them), by buf_key: { n = inputs viewing it, lo, hi =
-- the bytes they span }; nil when fewer than two inputs are staged (no
-- buffer can be shared).
local function shared_inputs(self, args, n)
  local one, groups = nil, nil
  for i = 1, n do
    local x = args[i]
    if needs_stage(self, x) then one, groups = note_input(x, one, groups)
    elseif type(x) == "table" and getmetatable(x) == nil then
      for _, v in pairs(x) do if needs_stage(self, v) then one, groups = note_input(v, one, groups) end end
    end
  end
  return groups
end
I.shared_inputs = shared_inputs

-- Argument x staged (a tensor, or a plain table whose tensors need staging:
-- a copy of it holding their staged views) and the next free slot.
local function stage_arg(self, x, slot, shared)
  if is_tensor(x) then return stage(self, x, slot, shared) end
  if type(x) ~= "table" or getmetatable(x) ~= nil then return x, slot end
  local copy
  for k, v in pairs(x) do
    if needs_stage(self, v) then
      copy = copy or {}
      copy[k], slot = stage(self, v, slot, shared)
    end
  end
  if not copy then return x, slot end
  for k, v in pairs(x) do if copy[k] == nil then copy[k] = v end end
  return copy, slot
end

local function stage_args(self, n, a1, a2, a3, a4, rest)
  local args, slot = packed(n, a1, a2, a3, a4, rest), 0
  pin_inputs(self, args, n)
  local shared = shared_inputs(self, args, n)
  for i = 1, n do args[i], slot = stage_arg(self, args[i], slot, shared) end
  apply_swaps(self)
  return args
end
I.stage_arg = stage_arg   -- buckets stage their non-bucketed inputs the same way

M.arg_needs_stage, M.stage_args, M.write_back, M.unstage_res = arg_needs_stage, stage_args, write_back, unstage_res
return M
