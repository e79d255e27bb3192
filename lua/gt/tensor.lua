-- gt.tensor: device tensors as views (offset, shape) onto core buffers.
--
-- A tensor is a gt_tensor (src/gt.h): an FFI struct of 40 bytes, the only
-- object a replayed op allocates.  Its shape and strides are interned
-- (gt.shapes; the struct holds their ids), so that an op that passes its
-- input's shape on builds no table; `shape`, `numel` and `dtype` read through
-- the interned tables.  gt.scope and release sites are gt.scopes.  This file
-- is the one place that makes tensors (I.view).
local ffi = require "ffi"
local bit = require "bit"

local gt = require "gt"
local I = require "gt.internal"
local C, rt = I.C, I.rt
local error = I.error   -- every error names the user's file:line (init.lua)
local original = require("gt.host_policy").original   -- (not the wrappers for traced numbers)
local floor, concat, type = original.floor, original.concat, type
local istype = ffi.istype

local DT = {
  f32 = { code = C.GT_F32, size = 4, ct = ffi.typeof("float[?]"), int = false },
  i32 = { code = C.GT_I32, size = 4, ct = ffi.typeof("int32_t[?]"), int = true },
  i64 = { code = C.GT_I64, size = 8, ct = ffi.typeof("int64_t[?]"), int = true },
  u8  = { code = C.GT_U8, size = 1, ct = ffi.typeof("uint8_t[?]"), int = true },
  -- half precision: held as their bits (ct), read and written on the host
  -- as floats converted by half.c (round to nearest even)
  f16 = { code = C.GT_F16, size = 2, ct = ffi.typeof("uint16_t[?]"), int = false, half = true },
  bf16 = { code = C.GT_BF16, size = 2, ct = ffi.typeof("uint16_t[?]"), int = false, half = true },
}
local BY_CODE = { [C.GT_F32] = "f32", [C.GT_I32] = "i32", [C.GT_I64] = "i64", [C.GT_U8] = "u8",
                  [C.GT_F64] = "f64", [C.GT_U32] = "u32", [C.GT_U64] = "u64", [C.GT_F16] = "f16",
                  [C.GT_BF16] = "bf16" }
local DT_OF = {}       -- code -> DT entry
for name, d in pairs(DT) do d.name = name; DT_OF[d.code] = d end
I.dtypes, I.dtype_of_code = DT, BY_CODE

local Tensor = {}      -- the methods
gt.Tensor = Tensor
local TT = ffi.typeof("gt_tensor")
-- (Not tail calls, here and in index: LuaJIT counts every tail call a trace
-- makes, fast functions too, against its loop unroll limit, and aborts it
-- past 15.)
local function is_tensor(x)
  local r = istype(TT, x)
  return r
end
gt.is_tensor = is_tensor

local function dtype_of(dtype, level)
  local d = DT[dtype or "f32"]
  if not d then if type(dtype) ~= "string" then
    error("dtype must be a string (f32, f16, bf16, i32, i64 or u8), got " .. I.show(dtype), level + 1)
  end
  error("unknown dtype '" .. dtype .. "': use f32, f16, bf16, i32, i64 or u8", level + 1) end
  return d
end


local S = require "gt.shapes"
local shape_str, shape_copy, shape_id, strides_id = S.shape_str, S.shape_copy, S.shape_id, S.strides_id
local SHAPES, NUMEL, STRIDES = S.SHAPES, S.NUMEL, S.STRIDES
local scopes = require "gt.scopes"
local text_id, lasting, site_text, plain_note = scopes.text_id, scopes.lasting, scopes.site_text, scopes.plain_note
local RELEASED = C.GT_BUF_RELEASED

-- -- Handles ---------------------------------------------------------------

local SLAB = C.GT_BUF_SLAB
local band, bor, bnot = bit.band, bit.bor, bit.bnot
local gc, retain = ffi.gc, C.gt_buf_retain
local function drop(t) C.gt_buf_release(t._b) end

-- The one tensor constructor: a view of buffer b at byte offset off, shape
-- sid, dtype code dt, made in generation gen (vid: strides, 0 contiguous).
-- A view of ordinary memory holds a reference on it (new: the buffer's
-- first reference is the caller's, taken over by this handle).
local function view(b, off, sid, dt, gen, vid, new)
  local t = TT(b, off, NUMEL[sid] * DT_OF[dt].size, gen, sid, dt, vid or 0)
  if band(b.flags, SLAB) ~= 0 then return t end
  if not new then retain(b) end
  t = gc(t, drop)          -- (not a tail call: a trace that began in view aborts when it returns to a
  return t                 -- lower frame straight from a fast function with side effects)
end
I.view = view

-- A view the caller makes (t:view, t:narrow) of a tree's output, its pool or
-- its staging, outside the tree's calls: noted with the output, so that it
-- keeps the tree's memory as the output does (tree.lua's held lists).  (Not
-- in view itself: a replayed op's handle would pay the test.)
local function user_view(b, off, sid, dt, gen, vid)
  local t = view(b, off, sid, dt, gen, vid)
  if b.tree ~= nil and not I.active then I.anchor_view(t, b) end
  return t
end

local GET = {
  shape = function(t) return shape_copy(SHAPES[t._sid]) end,   -- a copy: see shape_copy
  _shape = function(t) return SHAPES[t._sid] end,              -- gt's own reads: the interned table
  numel = function(t) return NUMEL[t._sid] end,
  dtype = function(t) return BY_CODE[t._dt] end,
  _strides = function(t) return STRIDES[t._vid] or nil end,
}
local function index(t, k)
  local g = GET[k]
  if g then
    local v = g(t)
    return v
  end
  return Tensor[k]
end

-- The replay lane (gt_internal.h's gt_lane): while it is open, the call's next
-- buffer struct (index j, its room checked by the caller) is made here, every field as
-- gt_slab_buf_init (core.h) writes it, for a buffer of bytes made after the
-- lane's li-th launch; the core need not be called.
local LANE = C.gt_lane_of(rt)
local SLAB_BITS = C.GT_SLAB_BITS
local SLAB_MASK = 2 ^ SLAB_BITS - 1
local TREE_SLAB = bor(C.GT_BUF_TREE, C.GT_BUF_SLAB)
-- The shape id and dtype code of the last tensor a tree call made (an FFI
-- array: two plain stores an op, where a table's fields cost a write barrier).
local LAST = ffi.new("int32_t[2]")
I.last_made = LAST

local function lane_buf(j, bytes, li)
  local L = LANE
  local s0 = L.segstart
  local y = L.slab[bit.rshift(j, SLAB_BITS)] + band(j, SLAB_MASK)
  y.addr = 0; y.bytes = bytes; y.gen = L.gen; y.gen_now = L.gen_now; y.flags = TREE_SLAB; y.refs = 0
  y.tree = L.tree; y.seg = L.depth; y.idx = j - s0; y.block = 0; y.qpos = li; y.kmark = 0; y.kord = 0
  y.ci = j; y.relseg = -1; y.rel = 0; y.site = 0
  L.bufs[j] = y
  L.nbufs[0] = j + 1
  return y
end
I.lane_buf = lane_buf
-- (the fields above are all of them: a field added to gt_buf needs its store here)
assert(ffi.sizeof("gt_buf") == 96, "gt_buf changed: update lane_buf (tensor.lua) as gt_slab_buf_init (core.h)")

-- A new tensor of shape id sid over a new buffer: in a tree call the
-- buffer belongs to the call (no finalizer: its memory is the call's until
-- the call ends or it is released), else ordinary memory (freed when
-- released or when its last handle is collected).
local function new_sid(sid, d, level)
  local nb = NUMEL[sid] * d.size
  local tree = I.active
  if tree then
    local L, b = LANE, nil
    if L.n > 0 and L.nbufs[0] < L.room then b = lane_buf(L.nbufs[0], nb, L.qn[0] + L.lazy)
    else b = C.gt_tree_buf_new(rt, nb) end
    if b == nil then error(I.errmsg(), level + 1) end
    local t = TT(b, 0, nb, tree._gen, sid, d.code, 0)
    LAST[0], LAST[1] = sid, d.code                       -- a new node's shapes name its last tensor (explain.lua)
    return t
  end
  local b = C.gt_buf_new(rt, nb)
  if b == nil then error(I.errmsg(), level + 1) end
  local t = gc(TT(b, 0, nb, 0, sid, d.code, 0), drop)
  plain_note(t)
  return t
end
I.new_sid = new_sid

local function new(shape, dtype, level)
  local d = DT[dtype or "f32"] or dtype_of(dtype, level + 1)
  return new_sid(shape_id(shape, level + 1), d, level + 1)
end

-- Staleness: one integer compare.
local function stale_error(t, level)
  local b = t._b
  local what = "tensor " .. t.dtype .. " " .. shape_str(t._shape)
  if band(b.flags, RELEASED) ~= 0 and b.gen == t._gen then
    local by, advice = site_text(b.site)
    error(what .. " was released by " .. by .. "; " .. advice, level + 1)
  end
  if b.tree ~= nil then
    local name, where = ffi.string(C.gt_tree_name(b.tree)), ffi.string(C.gt_tree_where(b.tree))
    if t._gen == C.gt_tree_failed_gen(b.tree) then
      error(what .. " was made by tree '" .. name .. "' (" .. where .. ") in a call that failed; it has no valid memory", level + 1)
    end
    if t._gen == C.gt_tree_trimmed_gen(b.tree) then
      error(what .. " returned by tree '" .. name .. "' (" .. where .. ") lost its memory to tree:trim(); " ..
            ":clone() it before the trim to keep it", level + 1)
    end
    error(what .. " returned by tree '" .. name .. "' (" .. where ..
          ") was overwritten by a later call; :clone() it to keep it", level + 1)
  end
  if t._gen ~= 0 then
    error(what .. " is no longer valid: the tree that made it was garbage-collected; keep the tree while " ..
          "you use its tensors, or :clone() them", level + 1)
  end
  error(what .. " is no longer valid", level + 1)
end
I.stale_error = stale_error

-- A handle that raises as released tensor x does, over a buffer struct of
-- its own: a tree call passes it for x, its own last output released by the
-- caller, whose struct the call's first buffers reuse (the use would then
-- read "overwritten by a later call").
local DEAD_GEN = ffi.new("int32_t[1]", -1)
local dead_of = setmetatable({}, { __mode = "k" })   -- handle -> its struct (kept while the handle lives)
function I.dead_copy(x)
  local b = x._b
  local a = ffi.new("gt_buf[1]")
  local d = a + 0
  d.flags, d.gen, d.gen_now, d.site, d.bytes = RELEASED, x._gen, DEAD_GEN, lasting(b.site), b.bytes
  local y = TT(d, x._off, x._nb, x._gen, x._sid, x._dt, x._vid)
  dead_of[y] = a
  return y
end

-- A method's receiver that is not a tensor (`t.view(s)`, a dot for the colon).
local function not_tensor(t, level)
  local name = debug.getinfo(level, "n")
  name = name and name.name or "method"
  error("t:" .. name .. "(...): call it with a colon on a tensor (t:" .. name .. "(...)), got " ..
    I.show(t) .. " for the tensor", level + 1)
end

local function live(t, level)
  if not istype(TT, t) then not_tensor(t, level + 1) end
  local b = t._b
  if t._gen ~= b.gen_now[0] then stale_error(t, level + 1) end
  return b
end

--- t:is_stale() -> true when a later tree call has reused its memory
function Tensor:is_stale() if not istype(TT, self) then not_tensor(self, 2) end return self._gen ~= self._b.gen_now[0] end

-- A sync point: in a tree call, the segment ends first.  what: the host
-- read or write it is (a keyed tree cannot replay a path holding one).
local CUT = { item = C.GT_CUT_ITEM, tolist = C.GT_CUT_TOLIST }   -- (what ended a segment, gt.h; else GT_CUT_HOST)
local CUT_HOST = C.GT_CUT_HOST
local function sync_point(level, what)
  if I.in_body then I.in_body(what, level + 1) end   -- inside a gt.cond/gt.loop body: an error (cond.lua)
  if C.gt_tree_active(rt) ~= nil then
    I.note_sync(what, level + 1)
    I.flush(level + 1, nil, CUT[what] or CUT_HOST)
  end
end

-- -- Creation -------------------------------------------------------------

--- gt.shape(shape) -> that shape checked, as a new table (t.shape is one too)
function gt.shape(shape) return shape_copy(SHAPES[shape_id(shape, 2)]) end

--- gt.tensor(shape [, dtype]) -> uninitialised tensor
function gt.tensor(shape, dtype) return new(shape, dtype, 2) end

--- gt.zeros(shape [, dtype])
function gt.zeros(shape, dtype)
  local t = new(shape, dtype, 2)
  if C.gt_buf_memset(rt, t._b, 0, 0, t._nb) ~= 0 then I.fail() end
  return t
end

-- A fill value must be a number: else an error naming what (the call) and what it got.
local function fill_value(v, what)
  if type(v) ~= "number" then
    error(what .. ": the fill value " .. (v == nil and "is missing: pass a number" or "must be a number") ..
      ", got " .. I.show(v))
  end
end

-- The half-precision kernel library (kernels/half.cu) for dtype "f16" or
-- "bf16", loaded on first use (gt.ops uses it too).
local half_modules = {}
function I.half_kernels(dtype)
  local K = half_modules[dtype]
  if not K then
    K = gt.load("kernels/half.cu", dtype == "bf16" and { options = "-DGT_BF16" } or nil)
    half_modules[dtype] = K
  end
  return K
end

local fillk
local function fill(t, v, level)
  if v == 0 then
    if C.gt_buf_memset(rt, t._b, t._off, 0, t._nb) ~= 0 then I.fail(level + 1) end
    return t
  end
  if not fillk then fillk = gt.load("kernels/elementwise.cu") end
  local n = t.numel
  if n == 0 then return t end
  local g = math.min(math.ceil(n / 256), 4096)
  local k = DT[t.dtype].half and I.half_kernels(t.dtype).fill or fillk["fill_" .. t.dtype]
  if t.dtype == "u8" then v = bit.band(v, 255) end
  k(g, 256, t, n, v)
  return t
end

--- gt.full(shape, value [, dtype]), gt.ones(shape [, dtype])
function gt.full(shape, v, dtype)
  fill_value(v, "gt.full(shape, value [, dtype])")
  return fill(new(shape, dtype, 2), v, 2)
end
function gt.ones(shape, dtype) return fill(new(shape, dtype, 2), 1, 2) end

-- Shape and flat values of a nested table.
local function flatten(tbl, level)
  local shape, vals = {}, {}
  local x = tbl
  while type(x) == "table" do shape[#shape + 1] = #x; x = x[1] end
  local function walk(v, dim)
    if dim > #shape then
      if type(v) ~= "number" and type(v) ~= "boolean" then error("gt.from: " .. type(v) .. " where a number belongs", level + 3) end
      vals[#vals + 1] = v == true and 1 or v == false and 0 or v
      return
    end
    if type(v) ~= "table" or #v ~= shape[dim] then
      error("gt.from: ragged nesting at depth " .. dim .. " (expected " .. shape[dim] .. " entries)", level + 3)
    end
    for i = 1, #v do walk(v[i], dim + 1) end
  end
  walk(tbl, 1)
  return shape, vals
end

local F64S = ffi.typeof("double[?]")
local function write_values(t, vals, level)
  local d = DT[t.dtype]
  local n = #vals
  local host = d.ct(n)
  if d.half then
    local v = F64S(math.max(n, 1))
    for i = 1, n do v[i - 1] = vals[i] end
    C.gt_convert(host, d.code, v, C.GT_F64, n)
  else
    for i = 1, n do host[i - 1] = vals[i] end
  end
  sync_point(level + 1, "a host copy")
  if C.gt_buf_write(rt, t._b, t._off, host, n * d.size) ~= 0 then I.fail(level + 1) end
end

--- gt.from(nested_table_or_number [, dtype])
function gt.from(tbl, dtype)
  if type(tbl) == "number" then tbl = { tbl } end
  if type(tbl) ~= "table" or getmetatable(tbl) ~= nil then
    error("gt.from expects a (nested) table of numbers, got " .. I.show(tbl), 2)
  end
  local shape, vals = flatten(tbl, 1)
  local t = new(shape, dtype, 2)
  write_values(t, vals, 2)
  return t
end

-- A small deterministic generator (xorshift64*), Box-Muller normals.
local state = ffi.new("uint64_t[1]", 0x9E3779B97F4A7C15ULL)
local function next_u01(s)
  local x = s[0]
  x = bit.bxor(x, bit.rshift(x, 12)); x = bit.bxor(x, bit.lshift(x, 25)); x = bit.bxor(x, bit.rshift(x, 27))
  s[0] = x
  local r = bit.rshift(x * 0x2545F4914F6CDD1DULL, 11)
  return (tonumber(r) + 0.5) / 9007199254740992
end

--- gt.randn(shape [, {seed=, dtype=, scale=}]): normal values, deterministic per seed
local RANDN_OPTS = { seed = "number", scale = "number", dtype = "string" }
function gt.randn(shape, opts)
  opts = I.opts(opts, "gt.randn(shape [, {seed=, dtype=, scale=}])")
  for k, v in pairs(opts) do
    local want = RANDN_OPTS[k]
    if not want then
      error("gt.randn(shape [, opts]): unknown option " .. (type(k) == "string" and ("'" .. k .. "'") or I.show(k)) ..
        ": the options are seed (a number), dtype (a string) and scale (a number)")
    elseif type(v) ~= want then
      error("gt.randn(shape [, opts]): option " .. k .. " must be a " .. want .. ", got " .. I.show(v))
    end
  end
  local t = new(shape, opts.dtype, 2)
  local s = state
  if opts.seed then s = ffi.new("uint64_t[1]", 0x9E3779B97F4A7C15ULL + opts.seed * 0x100000001B3ULL) end
  local n, scale = t.numel, opts.scale or 1
  local d = DT[t.dtype]
  local okh, host = pcall(d.half and F64S or d.ct, math.max(n, 1))
  if not okh then error("gt.randn: " .. n .. " values do not fit in host memory (they are made on the host first)", 2) end
  for i = 0, n - 1, 2 do
    local u1, u2 = next_u01(s), next_u01(s)
    local r = math.sqrt(-2 * math.log(u1))
    host[i] = r * math.cos(2 * math.pi * u2) * scale
    if i + 1 < n then host[i + 1] = r * math.sin(2 * math.pi * u2) * scale end
  end
  if d.half then
    local bits = d.ct(math.max(n, 1))
    C.gt_convert(bits, d.code, host, C.GT_F64, n)
    host = bits
  end
  sync_point(2, "a host copy")
  if C.gt_buf_write(rt, t._b, 0, host, t._nb) ~= 0 then I.fail() end
  return t
end

-- -- Reading ------------------------------------------------------------

-- Flat host array of the view's values in row-major order, and its length.
local function read_flat(t, level, what)
  local b = live(t, level + 1)
  sync_point(level + 1, what or "a host read")
  local d = DT[t.dtype]
  if not t._strides then
    local host = d.ct(math.max(t.numel, 1))
    if C.gt_buf_read(rt, b, t._off, host, t._nb) ~= 0 then I.fail(level + 1) end
    return host, t.numel
  end
  -- a strided view: read the span it covers, then gather
  local shape, st = t._shape, t._strides
  local span = 1
  for i = 1, #shape do span = span + (shape[i] - 1) * st[i] end
  local raw = d.ct(span)
  if C.gt_buf_read(rt, b, t._off, raw, span * d.size) ~= 0 then I.fail(level + 1) end
  local out, k = d.ct(math.max(t.numel, 1)), 0
  local function walk(dim, base)
    if dim > #shape then out[k] = raw[base]; k = k + 1; return end
    for i = 0, shape[dim] - 1 do walk(dim + 1, base + i * st[dim]) end
  end
  if t.numel > 0 then walk(1, 0) end
  return out, t.numel
end

-- The values of read_flat's array as numbers: half precision's bits widened
-- to floats (exactly), the others as they are.
local F32S = ffi.typeof("float[?]")
local function read_values(t, level, what)
  local flat, n = read_flat(t, level + 1, what)
  local d = DT[t.dtype]
  if not d.half then return flat, n end
  local f = F32S(math.max(n, 1))
  C.gt_convert(f, C.GT_F32, flat, d.code, n)
  return f, n
end

local function num(d, v) return d.int and tonumber(v) or v end

-- t's elements as stored (half precision: bits), a host array, and their
-- count (gt.safetensors.save).
function I.read_raw(t, level) return read_flat(t, level + 1, "a host read") end

--- t:tolist() -> nested table like the shape
function Tensor:tolist()
  local flat = read_values(self, 2, "tolist")
  local d, shape, k = DT[self.dtype], self._shape, 0
  if #shape == 0 then return num(d, flat[0]) end
  local function build(dim)
    local r = {}
    if dim == #shape then
      for i = 1, shape[dim] do r[i] = num(d, flat[k]); k = k + 1 end
    else
      for i = 1, shape[dim] do r[i] = build(dim + 1) end
    end
    return r
  end
  return build(1)
end

--- t:item() -> the one value of a one-element tensor
function Tensor:item()
  live(self, 2)
  if self.numel ~= 1 then error("item() needs a tensor with one element, this one is " .. shape_str(self._shape), 2) end
  local flat = read_values(self, 2, "item")
  return num(DT[self.dtype], flat[0])
end

-- -- Copies and views ---------------------------------------------------

--- t:clone() -> a copy (out of any tree pool when called outside a tree call)
function Tensor:clone()
  local b = live(self, 2)
  local d = DT[self.dtype]
  local c = new(self._shape, self.dtype, 2)
  if self._strides then
    local flat, n = read_flat(self, 2)
    sync_point(2, "a host copy")
    if C.gt_buf_write(rt, c._b, 0, flat, n * d.size) ~= 0 then I.fail() end
  elseif C.gt_buf_copy(rt, c._b, 0, b, self._off, self._nb) ~= 0 then I.fail() end
  return c
end

--- t:copy(src): src a tensor of the same size and dtype, or a (nested) table
function Tensor:copy(src)
  local b = live(self, 2)
  if self._strides then error("copy into a non-contiguous view is not supported; copy into the base tensor", 2) end
  if is_tensor(src) then
    local sb = live(src, 2)
    if src.numel ~= self.numel or src.dtype ~= self.dtype then
      error("copy: source is " .. src.dtype .. " " .. shape_str(src._shape) .. ", destination " ..
            self.dtype .. " " .. shape_str(self._shape), 2)
    end
    if src._strides then src = src:clone(); sb = src._b end
    if C.gt_buf_copy(rt, b, self._off, sb, src._off, self._nb) ~= 0 then I.fail() end
    return self
  end
  if type(src) ~= "table" then error("copy expects a tensor or a table of numbers", 2) end
  local _, vals = flatten(src, 1)
  if #vals ~= self.numel then error("copy: " .. #vals .. " values for a tensor of " .. self.numel, 2) end
  write_values(self, vals, 2)
  return self
end

--- t:fill(v)
function Tensor:fill(v)
  live(self, 2)
  if self._strides then error("fill of a non-contiguous view is not supported", 2) end
  fill_value(v, "t:fill(value)")
  return fill(self, v, 2)
end

--- t:view(shape): same memory, another shape (one size may be -1)
function Tensor:view(shape)
  live(self, 2)
  if self._strides then error("view of a non-contiguous tensor: :clone() it first", 2) end
  if type(shape) ~= "table" then error("view expects a shape table", 2) end
  local s, known, hole = {}, 1, nil
  for i = 1, #shape do
    if type(shape[i]) ~= "number" then error("view: size " .. i .. " is " .. I.show(shape[i]) .. ", not a number", 2) end
    if shape[i] == -1 then
      if hole then error("view: only one size may be -1", 2) end
      hole = i
    else known = known * shape[i] end
    s[i] = shape[i]
  end
  if hole then s[hole] = known > 0 and self.numel / known or 0 end
  local sid = shape_id(s, 2)
  if NUMEL[sid] ~= self.numel then
    error("view: " .. shape_str(s) .. " has " .. NUMEL[sid] .. " elements, the tensor " .. self.numel, 2)
  end
  return user_view(self._b, self._off, sid, self._dt, self._gen)
end

--- t:narrow(dim, start, len): a view of len entries of dim from start (1-based)
function Tensor:narrow(dim, start, len)
  live(self, 2)
  local shape = self._shape
  if type(dim) ~= "number" or dim ~= floor(dim) or dim < 1 or dim > #shape then error("narrow: dim " .. I.show(dim) .. " out of 1.." .. #shape, 2) end
  if type(start) ~= "number" or type(len) ~= "number" or start ~= floor(start) or len ~= floor(len) or
     start < 1 or len < 0 or start + len - 1 > shape[dim] then
    error("narrow: start " .. I.show(start) .. ", len " .. I.show(len) .. " outside dim " .. dim .. " of size " ..
      shape[dim] .. " (start: a whole number from 1, len: a whole number >= 0, start + len - 1 <= the size)", 2)
  end
  local d = DT_OF[self._dt]
  local st = self._strides
  if not st then
    st = {}
    local s = 1
    for i = #shape, 1, -1 do st[i] = s; s = s * shape[i] end
  end
  local ns = {}
  for i = 1, #shape do ns[i] = i == dim and len or shape[i] end
  local contiguous = not self._strides
  if contiguous then for i = 1, dim - 1 do if shape[i] ~= 1 then contiguous = false end end end
  local off = self._off + (start - 1) * st[dim] * d.size
  return user_view(self._b, off, shape_id(ns, 2), self._dt, self._gen, (not contiguous) and strides_id(st) or 0)
end

--- t:contiguous() -> t itself when contiguous, else a contiguous copy
function Tensor:contiguous() if not istype(TT, self) then not_tensor(self, 2) end if self._strides then return self:clone() end return self end
function Tensor:is_contiguous() if not istype(TT, self) then not_tensor(self, 2) end return self._strides == nil end

--- t:t() -> the transpose of a 2-D f32 tensor, a new tensor (gt.ops.transpose(t))
function Tensor:t()
  if not istype(TT, self) then not_tensor(self, 2) end
  local n = #SHAPES[self._sid]
  if n ~= 2 then
    error("t:t(): the tensor must be 2-D (a matrix), got " .. I.show(self) .. (n > 2 and "; :view() it as 2-D first" or ""), 2)
  end
  return gt.ops.transpose(self)
end

--- t:to(dtype) -> t in dtype: f32, f16 or bf16, a copy made by a kernel
--- (rounding to nearest even; also recorded in trees); t itself when it has that dtype
local FLOATS = { f32 = true, f16 = true, bf16 = true }
function Tensor:to(dtype)
  live(self, 2)
  if dtype == nil then error("t:to(dtype): give the dtype (\"f32\", \"f16\" or \"bf16\")", 2) end
  local d, from = dtype_of(dtype, 2), self.dtype
  if d.name == from then return self end
  if not FLOATS[from] or not FLOATS[d.name] then
    error("t:to(dtype): casts go between f32, f16 and bf16; this tensor is " .. from .. ", asked for " .. d.name, 2)
  end
  if self._strides then error("t:to(dtype): a non-contiguous view: :clone() it first", 2) end
  local y = new_sid(self._sid, d, 2)
  local n = NUMEL[self._sid]
  if n == 0 then return y end
  local g = math.min(math.ceil(n / 256), 4096)
  if not d.half then I.half_kernels(from).to_f32(g, 256, y, self, n)
  elseif from == "f32" then I.half_kernels(d.name).from_f32(g, 256, y, self, n)
  else I.half_kernels(d.name).from_half(g, 256, y, self, n, from == "bf16" and 1 or 0) end
  return y
end

--- t:static() marks a weight: keyed by address in trees; returns t
function Tensor:static()
  local b = live(self, 2)
  b.flags = bit.bor(b.flags, C.GT_BUF_STATIC)
  return self
end

-- -- Releasing ----------------------------------------------------------

--- t:free(): releases t's memory now (and every view of its buffer); using
--- it afterwards raises.  In a tree call, launches queued before the free
--- still read it; only later ones may reuse the memory.
function Tensor:free()
  local b = live(self, 2)
  if C.gt_buf_free(rt, b) ~= 0 then I.fail(2) end
  local i = debug.getinfo(2, "Sl")
  b.site = text_id(":free() at " .. (i and (i.short_src .. ":" .. (i.currentline or 0)) or "?"))
end

function Tensor:dim() if not istype(TT, self) then not_tensor(self, 2) end return #SHAPES[self._sid] end
function Tensor:size(d)
  if not istype(TT, self) then not_tensor(self, 2) end
  if d ~= nil then
    local n = #SHAPES[self._sid]
    if type(d) ~= "number" or d ~= floor(d) or d < 1 or d > n then
      error("t:size([d]): d must be a dimension in 1.." .. n .. " of this " .. shape_str(self._shape) ..
        " tensor, got " .. I.show(d), 2)
    end
    return self._shape[d]
  end local s = {} for i, v in ipairs(self._shape) do s[i] = v end return s end

-- -- Printing -------------------------------------------------------------

local function fmt(d, v)
  if d.int then return tostring(tonumber(v)) end
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
  return string.format("%.4g", v)
end

-- values shown like a tensor library: at most 6 per dim, "..." between
function Tensor:__tostring()
  if not istype(TT, self) then not_tensor(self, 2) end
  local tail = "[gt." .. self.dtype .. " " .. shape_str(self._shape) .. " " .. gt.backend()
  if self:is_stale() then return tail .. ", stale]" end
  local ok, flat = pcall(read_values, self, 1)
  if not ok then return tail .. "]" end
  local d, shape = DT[self.dtype], self._shape
  if #shape == 0 then return fmt(d, flat[0]) .. "\n" .. tail .. "]" end
  local strides, s = {}, 1
  for i = #shape, 1, -1 do strides[i] = s; s = s * shape[i] end
  local function idx(n) if n <= 6 then local r = {} for i = 1, n do r[i] = i end return r end return { 1, 2, 3, false, n - 2, n - 1, n } end
  local function render(dim, base, indent)
    local parts = {}
    for _, i in ipairs(idx(shape[dim])) do
      if not i then parts[#parts + 1] = "..."
      elseif dim == #shape then parts[#parts + 1] = fmt(d, flat[base + (i - 1) * strides[dim]])
      else parts[#parts + 1] = render(dim + 1, base + (i - 1) * strides[dim], indent .. " ") end
    end
    if dim == #shape then return "[" .. concat(parts, ", ") .. "]" end
    return "[" .. concat(parts, ",\n" .. indent .. " ") .. "]"
  end
  return render(1, 0, "") .. "\n" .. tail .. "]"
end

-- -- Operators ------------------------------------------------------------
-- Tensors have no arithmetic operators (an op allocates and launches: it is
-- written as a call).  x + y and the like raise saying which gt.ops call does
-- it, instead of LuaJIT's "attempt to perform arithmetic on 'struct gt_tensor'".
local OPERATORS = {
  __add = { "x + y", "gt.ops.add(x, y) (y a tensor of x's shape, a vector of its last dimension, or a number)" },
  __sub = { "x - y", "gt.ops.add(x, -y) for a number y, gt.ops.add(x, gt.ops.mul(y, -1)) for a tensor y" },
  __mul = { "x * y", "gt.ops.mul(x, y) elementwise, gt.ops.matmul(x, y) or gt.ops.linear(x, W) for a matrix product" },
  __div = { "x / y", "gt.ops.mul(x, 1 / y) for a number y; a kernel of your own (gt.compile) for a tensor y" },
  __mod = { "x % y", "a kernel of your own (gt.compile)" },
  __pow = { "x ^ y", "a kernel of your own (gt.compile)" },
  __unm = { "-x", "gt.ops.mul(x, -1)" },
  __concat = { "x .. y", "tostring(x) .. y (a tensor prints its values)" },
  __lt = { "x < y", "t:item() or t:tolist() to compare on the host, or gt.cond with a one-element tensor a kernel writes" },
  __le = { "x <= y", "t:item() or t:tolist() to compare on the host, or gt.cond with a one-element tensor a kernel writes" },
  __len = { "#x", "x.numel (the elements) or x.shape[1] (the first dimension)" },
}
local MT = { __index = index, __tostring = function(t) return Tensor.__tostring(t) end }
for mm, say in pairs(OPERATORS) do
  MT[mm] = function(a, b)
    local what = (mm == "__unm" or mm == "__len") and I.show(a) or (I.show(a) .. " and " .. I.show(b))
    I.error(say[1] .. " on " .. what .. ": gtlua tensors have no operators; write " .. say[2])
  end
end

ffi.metatype(TT, { __index = MT.__index, __tostring = MT.__tostring, __add = MT.__add, __sub = MT.__sub,
                   __mul = MT.__mul, __div = MT.__div, __mod = MT.__mod, __pow = MT.__pow, __unm = MT.__unm,
                   __concat = MT.__concat, __lt = MT.__lt, __le = MT.__le, __len = MT.__len,
                   __newindex = function(t, k)
                     error("a tensor has no field '" .. tostring(k) .. "' to set (tensors are views: shape, dtype, " ..
                           "numel are read-only)", 2)
                   end })
