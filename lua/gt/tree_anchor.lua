-- gt.tree_anchor: how long a tree's outputs keep its memory (held lists, anchors, the tree's finalizer).
local ffi = require "ffi"

local gt = require "gt"
local I = require "gt.internal"
local C, is_tensor = I.C, gt.is_tensor
local tonumber = require("gt.host_policy").original.tonumber
local getmetatable, type, pairs = getmetatable, type, pairs

local M = {}

-- A tensor a call returns keeps its tree's memory valid for as long as the
-- tensor lives, whether the tree is dropped or not.  Only the latest call's
-- outputs need it: at a tree's next call every tensor of its pool from
-- before goes stale (a stale tensor needs no memory).  While the tree lives
-- there is nothing to hold: a call only notes its outputs in the tree's
-- weak-valued list `held` (array stores; an entry per output in a weak-keyed
-- table cost a hash insert per call, and a rehash every few).  When the
-- tree's C handle is collected, its finalizer anchors the noted outputs
-- still alive (output -> handle, weak-keyed: the handle, not the Lua tree,
-- as LuaJIT's weak keys are not ephemerons) and waits: it runs again once
-- they are gone, and frees the tree then.
local WEAK_VALUES = { __mode = "v" }
local anchors = setmetatable({}, { __mode = "k" })
local function finalizer(held)
  local fin
  fin = function(tc)
    local live = false
    if not gt._closing then                      -- (at exit everything goes)
      for i = 1, held.n do
        local y = held[i]
        if y ~= nil then anchors[y] = tc; live = true end
        held[i] = nil
      end
      held.n = 0
    end
    held.tc = live and tc or nil                 -- (a view made of an anchored output from now on: _anchor_view)
    if live then ffi.gc(tc, fin) else C.gt_tree_free(tc) end
  end
  return fin
end
local plain_note = I.plain_note
local function anchor_one(self, x, gen)
  plain_note(x)                                          -- (a scope around the call releases it: tensor.lua)
  local held = self._held
  local n = held.n + 1
  if gen ~= self._ang then self._ang = gen; n = 1 end   -- a newer call's first output
  held[n], held.n = x, n
end

-- Each tree's held list by its C handle's address: a view made outside the
-- tree's calls of one of its latest outputs is noted there too (tensor.lua's
-- user_view), so that it keeps the memory valid as the output does, however
-- the collector runs (out:narrow(...) kept, out dropped).
local held_of = setmetatable({}, WEAK_VALUES)
local function held_key(t) return tonumber(ffi.cast("intptr_t", t)) end
function I.anchor_view(y, b)
  local held = held_of[held_key(b.tree)]
  if not held or y._gen ~= b.gen_now[0] then return end   -- (a live tensor: of the tree's latest call)
  if held.tc then anchors[y] = held.tc                   -- the tree was collected: its outputs are anchored
  elseif held.n > 0 then
    local n = held.n + 1
    held[n], held.n = y, n
  end
end

-- anchor(self, x [, gen]): x (a tensor, or tensors in a plain table) returned
-- by the call of generation gen (default: the call self runs now)
local function anchor_deep(self, x, gen, depth)           -- (tables in a returned table: rare, not on the hot path)
  for _, v in pairs(x) do
    if is_tensor(v) then
      if v._b.tree == self._t then anchor_one(self, v, gen) end
    elseif depth < 8 and type(v) == "table" and getmetatable(v) == nil then
      anchor_deep(self, v, gen, depth + 1)
    end
  end
end
local function anchor(self, x, gen)
  if is_tensor(x) then
    if x._b.tree == self._t then anchor_one(self, x, gen or self._gen) end
  elseif type(x) == "table" and getmetatable(x) == nil then
    anchor_deep(self, x, gen or self._gen, 1)
  end
  return x
end
I.anchor = anchor

-- A new tree's C handle t: t with the finalizer, and the tree's held list.
function M.track(t)
  local held = setmetatable({ n = 0 }, WEAK_VALUES)
  held_of[held_key(t)] = held
  return ffi.gc(t, finalizer(held)), held
end

M.anchor, M.WEAK_VALUES = anchor, WEAK_VALUES
return M
