-- gt.shapes: interned shapes and strides.  A gt_tensor holds the ids of its
-- shape and strides; the tables themselves live here, shared by every tensor
-- of that shape (an op that passes its input's shape on builds no table).
local I = require "gt.internal"
local error = I.error   -- every error names the user's file:line (init.lua)
local original = require("gt.host_policy").original   -- (not the wrappers for traced numbers)
local floor, concat, type = original.floor, original.concat, type

local function shape_str(shape) return #shape == 0 and "scalar" or concat(shape, "x") end
I.shape_str = shape_str

-- Whether shapes a and b have the same sizes.
local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end
I.same_shape = same_shape

-- -- Interned shapes and strides -----------------------------------------

-- SHAPES[sid] is a shape table shared by every tensor of that shape (never
-- change it); NUMEL[sid] its element count.  A trie over the sizes finds a
-- shape's id by value; interned tables themselves are found in one lookup.
local SHAPES, NUMEL, nshapes = {}, {}, 0
local trie, sid_of = {}, {}
local SID = -1                              -- the trie's key for "a shape ends here" (sizes are >= 0)
local MAX_BYTES = 2 ^ 53                    -- beyond this, byte counts are not exact numbers
I.shapes, I.numel = SHAPES, NUMEL

local function intern_new(node, shape, n)
  nshapes = nshapes + 1
  local s = {}
  for i = 1, #shape do s[i] = shape[i] end
  SHAPES[nshapes], NUMEL[nshapes] = s, n
  node[SID] = nshapes
  sid_of[s] = nshapes
  return nshapes
end

-- A fresh copy of shape table s (what t.shape and gt.shape give: the
-- interned tables are shared by every tensor of a shape, and a caller's
-- write into one would change them all).
local function shape_copy(s)
  local c = {}
  for i = 1, #s do c[i] = s[i] end
  return c
end

local function size_ok(d) return type(d) == "number" and d >= 0 and d == floor(d) and d < MAX_BYTES end

-- The id of a shape (a table of sizes, or one number); raises on a bad one.
local function shape_id_slow(shape, level)
  if type(shape) ~= "table" or getmetatable(shape) ~= nil then
    if type(shape) == "number" then shape = { shape }
    else error("a shape is a table of sizes, e.g. {8, 256}, got " .. I.show(shape), level + 1) end
  end
  local node, n = trie, 1
  for i = 1, #shape do
    local d = shape[i]
    if type(d) ~= "number" or d < 0 or d ~= floor(d) or d >= MAX_BYTES then
      error("bad shape: dimension " .. i .. " is " .. I.show(d) .. ", not a size: each dimension is a whole " ..
        "number, 0 or more (e.g. {8, 256})", level + 1)
    end
    n = n * d
    local nx = node[d]
    if not nx then nx = {}; node[d] = nx end
    node = nx
  end
  if n >= MAX_BYTES then
    error("bad shape: " .. shape_str(shape) .. " has " .. ("%.17g"):format(n) .. " elements, more than any memory holds", level + 1)
  end
  return node[SID] or intern_new(node, shape, n)
end

-- The same, without a loop for shapes of up to three sizes already seen (a
-- loop here would be unrolled into the trace of every op that makes a tensor).
local function shape_id(shape, level)
  local id = sid_of[shape]
  if id then return id end
  if type(shape) == "table" then
    local n, a, b, c = #shape, shape[1], shape[2], shape[3]
    local node
    if n == 2 then
      if size_ok(a) and size_ok(b) then node = trie[a]; node = node and node[b] end
    elseif n == 1 then
      if size_ok(a) then node = trie[a] end
    elseif n == 3 then
      if size_ok(a) and size_ok(b) and size_ok(c) then node = trie[a]; node = node and node[b]; node = node and node[c] end
    end
    id = node and node[SID]
    if id then return id end
  end
  return shape_id_slow(shape, level + 1)
end
I.shape_id = shape_id

-- Strides of non-contiguous views, interned the same way (in elements).
local STRIDES, vtrie, nstrides = { [0] = false }, {}, 0
local function strides_id(st)
  local node = vtrie
  for i = 1, #st do
    local nx = node[st[i]]
    if not nx then nx = {}; node[st[i]] = nx end
    node = nx
  end
  local id = node[SID]
  if not id then
    nstrides = nstrides + 1
    local s = {}
    for i = 1, #st do s[i] = st[i] end
    STRIDES[nstrides], node[SID], id = s, nstrides, nstrides
  end
  return id
end

return { shape_str = shape_str, shape_copy = shape_copy, shape_id = shape_id, strides_id = strides_id,
         SHAPES = SHAPES, NUMEL = NUMEL, STRIDES = STRIDES }
