-- gt.safetensors: tensors from and to safetensors files (Hugging Face's checkpoint format).
--
-- A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON
-- (an object: name -> {dtype, shape, data_offsets = {begin, end}}, and an
-- optional "__metadata__" object of strings), then the data buffer, offsets
-- relative to its start, little-endian, row-major.  load checks a file as the
-- reference reader does (huggingface/safetensors, safetensors/src/tensor.rs):
-- N <= 100 MB, the header is UTF-8 starting with '{', every tensor's bytes
-- are numel x its dtype's size, the tensors sorted by offset tile the buffer
-- from 0 with no hole or overlap, and 8 + N + the buffer is the file's size.
-- The file is mapped (mapfile.c), never read past its end; a tensor whose
-- offset is not aligned for its dtype is copied before it is converted.
local ffi = require "ffi"

local gt = require "gt"
local I = require "gt.internal"
local json = require "gt.json"
local C, rt = I.C, I.rt

local M = {}
gt.safetensors = M

local MAX_HEADER = 100000000

-- The file's dtypes: size in bytes, and gtlua's dtype (nil: gtlua has no
-- tensors of it).  F64 is read as f32 (converted), BOOL as u8.
local FILE_DT = {
  F32 = { 4, "f32" }, F16 = { 2, "f16" }, BF16 = { 2, "bf16" }, I32 = { 4, "i32" }, I64 = { 8, "i64" },
  U8 = { 1, "u8" }, BOOL = { 1, "u8" }, F64 = { 8, "f32", C.GT_F64 },
  I8 = { 1 }, I16 = { 2 }, U16 = { 2 }, U32 = { 4 }, U64 = { 8 }, C64 = { 8 },
  F8_E5M2 = { 1 }, F8_E4M3 = { 1 }, F8_E8M0 = { 1 }, F8_E4M3FNUZ = { 1 }, F8_E5M2FNUZ = { 1 },
}
local TO_FILE = { f32 = "F32", f16 = "F16", bf16 = "BF16", i32 = "I32", i64 = "I64", u8 = "U8" }
local FLOAT = { f32 = true, f16 = true, bf16 = true }

-- -- Reading the header -------------------------------------------------------

-- Raises "gt.safetensors.load: <path>: <what>" at the user's line.
local function bad(path, fmt, ...) I.error("gt.safetensors.load: " .. path .. ": " .. fmt:format(...)) end

-- The byte offset of the first byte of s that does not begin a valid UTF-8
-- sequence, or nil.
local function utf8_error(s)
  local i, n, byte = 1, #s, string.byte
  while i <= n do
    local c = byte(s, i)
    local len = c < 0x80 and 1 or (c >= 0xc2 and c <= 0xdf) and 2 or (c >= 0xe0 and c <= 0xef) and 3 or
      (c >= 0xf0 and c <= 0xf4) and 4 or nil
    if not len or i + len - 1 > n then return i end
    for k = i + 1, i + len - 1 do
      local d = byte(s, k)
      if d < 0x80 or d > 0xbf then return i end
    end
    if len == 3 then
      local d = byte(s, i + 1)
      if (c == 0xe0 and d < 0xa0) or (c == 0xed and d > 0x9f) then return i end   -- overlong, surrogates
    elseif len == 4 then
      local d = byte(s, i + 1)
      if (c == 0xf0 and d < 0x90) or (c == 0xf4 and d > 0x8f) then return i end
    end
    i = i + len
  end
end

local function whole(v) return type(v) == "number" and v >= 0 and v == math.floor(v) and v < 2 ^ 53 end

-- One entry of the header checked: { name, dtype (file's), shape, b, e, numel }.
local function entry(path, name, v)
  if type(v) ~= "table" then bad(path, "tensor '%s': its entry is %s, not an object", name, I.show(v)) end
  local dt, shape, off = v.dtype, v.shape, v.data_offsets
  if type(dt) ~= "string" then bad(path, "tensor '%s': dtype is %s, not a string", name, I.show(dt)) end
  if not FILE_DT[dt] then
    bad(path, "tensor '%s': unknown dtype %q (safetensors has F32, F16, BF16, F64, I8..I64, U8..U64, BOOL, F8_*)", name, dt)
  end
  if type(shape) ~= "table" then bad(path, "tensor '%s': shape is %s, not an array", name, I.show(shape)) end
  local numel = 1
  for i = 1, #shape do
    if not whole(shape[i]) then bad(path, "tensor '%s': shape[%d] is %s, not a size", name, i, I.show(shape[i])) end
    numel = numel * shape[i]
  end
  if type(off) ~= "table" or #off ~= 2 or not whole(off[1]) or not whole(off[2]) or off[2] < off[1] then
    local got = {}
    if type(off) == "table" then for i = 1, #off do got[i] = tostring(off[i]) end end
    bad(path, "tensor '%s': data_offsets must be [begin, end] with 0 <= begin <= end, got %s", name,
      type(off) == "table" and ("[" .. table.concat(got, ", ") .. "]") or I.show(off))
  end
  local want = numel * FILE_DT[dt][1]
  if off[2] - off[1] ~= want then
    bad(path, "tensor '%s': %s %s takes %.0f bytes but data_offsets [%.0f, %.0f] hold %.0f", name, dt,
      #shape == 0 and "scalar" or table.concat(shape, "x"), want, off[1], off[2], off[2] - off[1])
  end
  local plain = {}                  -- (a plain table: dkjson's arrays carry a metatable)
  for i = 1, #shape do plain[i] = shape[i] end
  return { name = name, dtype = dt, shape = plain, b = off[1], e = off[2], numel = numel }
end

-- The header of mapped file m: its entries (sorted by offset), metadata and
-- the data buffer's start in the file.
local function header(path, m)
  local size = tonumber(m.size)
  if size < 8 then bad(path, "%d bytes: too short for a safetensors file (8 bytes of header length first)", size) end
  local n = 0
  for i = 7, 0, -1 do n = n * 256 + m.data[i] end
  if n > MAX_HEADER then
    bad(path, "the header length (the first 8 bytes, little-endian) says %.0f bytes, more than the 100 MB a " ..
      "safetensors header may have: not a safetensors file, or a damaged one", n)
  end
  if 8 + n > size then bad(path, "the header length says %.0f bytes but the file has %d after the first 8", n, size - 8) end
  local text = ffi.string(m.data + 8, n)
  local u = utf8_error(text)
  if u then bad(path, "the header is not UTF-8 (byte %d of it)", u) end
  if text:sub(1, 1) ~= "{" then bad(path, "the header does not start with '{' (a JSON object)") end
  local ok, h, pos = pcall(json.decode, text)
  if not ok then bad(path, "the header is not valid JSON: %s", tostring(h):gsub("^bad JSON: ", "")) end
  if type(h) ~= "table" or (#h > 0) then bad(path, "the header is JSON but not an object of tensors") end
  if text:sub(pos):find("[^ \t\r\n]") then bad(path, "the header has text after its JSON object") end
  local meta, list = {}, {}
  for k, v in pairs(h) do
    if type(k) ~= "string" then bad(path, "the header is JSON but not an object of tensors") end
    if k == "__metadata__" then
      if type(v) ~= "table" then bad(path, "__metadata__ is %s, not an object of strings", I.show(v)) end
      for mk, mv in pairs(v) do
        if type(mk) ~= "string" or type(mv) ~= "string" then
          bad(path, "__metadata__ must map strings to strings; %s is %s", tostring(mk), I.show(mv))
        end
        meta[mk] = mv
      end
    else list[#list + 1] = entry(path, k, v) end
  end
  table.sort(list, function(a, b) if a.b ~= b.b then return a.b < b.b end return a.e < b.e end)
  local at = 0
  for _, t in ipairs(list) do
    if t.b ~= at then
      bad(path, "tensor '%s' starts at byte %.0f of the data but the tensors before it end at %.0f: %s", t.name, t.b, at,
        t.b > at and "a hole in the buffer" or "tensors overlap")
    end
    at = t.e
  end
  if 8 + n + at ~= size then
    bad(path, "the tensors end at byte %.0f of the data but the file holds %.0f bytes of data%s", at, size - 8 - n,
      8 + n + at > size and " (offsets past the end: a truncated file?)" or " (bytes after the last tensor)")
  end
  return list, meta, 8 + n
end

-- -- Loading -----------------------------------------------------------------------

-- Which names opts.names selects: all (nil), a list, a set or a function;
-- and the set of names that must be there (a list's or a set's).
local function selector(names)
  if names == nil then return function() return true end end
  if type(names) == "function" then return names end
  if type(names) ~= "table" then
    I.error("gt.safetensors.load(path, {names=}): names is a list of names, a set {name = true} or a function, got " .. I.show(names))
  end
  local set = {}
  for k, v in pairs(names) do if type(k) == "number" then set[v] = true elseif v then set[k] = true end end
  return function(n) return set[n] == true end, set
end

-- Tensor t (gtlua dtype d) from the file's bytes at p (file dtype fd).
local function fill_from(path, t, e, p, fd, d)
  local fsize, fcode = FILE_DT[fd][1], FILE_DT[fd][3] or I.dtypes[FILE_DT[fd][2]].code
  local bytes = e.e - e.b
  if bytes == 0 then return end
  if fcode == d.code then
    if C.gt_buf_write(rt, t._b, t._off, p, bytes) ~= 0 then I.fail() end
    return
  end
  local src = p
  if tonumber(ffi.cast("uintptr_t", p)) % fsize ~= 0 then     -- an unaligned offset: copied, then converted
    src = ffi.new("uint8_t[?]", bytes)
    ffi.copy(src, p, bytes)
  end
  local host = d.ct(e.numel)
  if C.gt_convert(host, d.code, src, fcode, e.numel) ~= 0 then bad(path, "tensor '%s': cannot convert %s to %s", e.name, fd, d.name) end
  if C.gt_buf_write(rt, t._b, t._off, host, e.numel * d.size) ~= 0 then I.fail() end
end

local function load_mapped(path, m, opts)
  local list, meta, start = header(path, m)
  local want, must = selector(opts.names)
  local cast, out = opts.dtype, { __metadata__ = meta }
  for _, e in ipairs(list) do
    if want(e.name) then
      local to = FILE_DT[e.dtype][2]
      if not to then
        bad(path, "tensor '%s' is %s, which gtlua has no tensors of (f32, f16, bf16, i32, i64, u8); leave it out " ..
          "with {names = ...}", e.name, e.dtype)
      end
      if cast and FLOAT[to] then to = cast end
      local t = gt.tensor(e.shape, to)
      fill_from(path, t, e, m.data + start + e.b, e.dtype, I.dtypes[to])
      out[e.name] = t
    end
  end
  for n in pairs(must or {}) do
    if not out[n] then bad(path, "no tensor named %s in the file (names = ... asked for it)", I.show(n)) end
  end
  return out
end

--- gt.safetensors.load(path [, {dtype=, names=}]) -> { name = tensor, ..., __metadata__ = {...} }:
--- the file's tensors (dtype: "f32", "f16" or "bf16" converts every floating one;
--- names: a list, a set or a function choosing which to load)
function M.load(path, opts)
  if type(path) ~= "string" then I.error("gt.safetensors.load(path [, opts]): path must be a string, got " .. I.show(path)) end
  opts = I.opts(opts, "gt.safetensors.load(path [, {dtype=, names=}])")
  for k in pairs(opts) do
    if k ~= "dtype" and k ~= "names" then
      I.error("gt.safetensors.load(path [, opts]): unknown option " .. I.show(k) .. ": the options are dtype and names")
    end
  end
  if opts.dtype ~= nil and not FLOAT[opts.dtype] then
    I.error("gt.safetensors.load(path, {dtype=}): dtype must be \"f32\", \"f16\" or \"bf16\", got " .. I.show(opts.dtype))
  end
  if I.active then I.error("gt.safetensors.load inside a tree call: load weights once, before the step") end
  local m, err = ffi.new("gt_mapped[1]"), ffi.new("char[256]")
  if C.gt_map_file(path, m, err) ~= 0 then I.error("gt.safetensors.load: cannot open " .. path .. ": " .. ffi.string(err)) end
  local ok, r = pcall(load_mapped, path, m[0], opts)
  C.gt_unmap(m)
  if not ok then error(r, 0) end
  return r
end

-- -- Saving -----------------------------------------------------------------------

local function save_fail(fmt, ...) I.error("gt.safetensors.save: " .. fmt:format(...)) end

-- The names in the reference writer's order: larger elements first (every
-- tensor then starts aligned for its dtype), then by name.
local function save_order(tensors)
  local names = {}
  for k, v in pairs(tensors) do
    if k ~= "__metadata__" then
      if type(k) ~= "string" then save_fail("tensor names must be strings, got %s", I.show(k)) end
      if not gt.is_tensor(v) then save_fail("'%s' is %s, not a tensor", k, I.show(v)) end
      if not TO_FILE[v.dtype] then save_fail("'%s' is %s, which safetensors files do not hold", k, v.dtype) end
      names[#names + 1] = k
    end
  end
  table.sort(names, function(a, b)
    local sa, sb = I.dtypes[tensors[a].dtype].size, I.dtypes[tensors[b].dtype].size
    if sa ~= sb then return sa > sb end
    return a < b
  end)
  return names
end

local function le64(n)
  local b = {}
  for i = 1, 8 do b[i] = string.char(n % 256); n = math.floor(n / 256) end
  return table.concat(b)
end

--- gt.safetensors.save(path, tensors [, metadata]): writes {name = tensor} (and metadata,
--- strings to strings) as a safetensors file that Hugging Face's library reads
function M.save(path, tensors, metadata)
  if type(path) ~= "string" then save_fail("path must be a string, got %s", I.show(path)) end
  if type(tensors) ~= "table" then save_fail("tensors must be a table {name = tensor}, got %s", I.show(tensors)) end
  metadata = metadata or tensors.__metadata__
  if metadata ~= nil and type(metadata) ~= "table" then save_fail("metadata must be a table of strings, got %s", I.show(metadata)) end
  local names, head, at = save_order(tensors), {}, 0
  for _, k in ipairs(names) do
    local t = tensors[k]
    local nb = t.numel * I.dtypes[t.dtype].size
    head[k] = { dtype = TO_FILE[t.dtype], shape = json.array(t.shape), data_offsets = json.array({ at, at + nb }) }
    at = at + nb
  end
  if metadata and next(metadata) ~= nil then
    for mk, mv in pairs(metadata) do
      if type(mk) ~= "string" or type(mv) ~= "string" then save_fail("metadata maps strings to strings; %s is %s", tostring(mk), I.show(mv)) end
    end
    head.__metadata__ = metadata
  end
  local text = json.encode(head, { "__metadata__" }):gsub("\n%s*", "")
  text = text .. string.rep(" ", (8 - #text % 8) % 8)
  local tmp = path .. ".tmp"
  local f, err = io.open(tmp, "wb")
  if not f then save_fail("cannot write %s: %s", path, tostring(err)) end
  local ok, werr = pcall(function()
    assert(f:write(le64(#text), text))
    for _, k in ipairs(names) do
      local t = tensors[k]
      local host, n = I.read_raw(t, 3)
      assert(f:write(ffi.string(host, n * I.dtypes[t.dtype].size)))
    end
    assert(f:close())
  end)
  if not ok then pcall(f.close, f); os.remove(tmp); save_fail("cannot write %s: %s", path, tostring(werr)) end
  local rok, rerr = os.rename(tmp, path)
  if not rok then os.remove(tmp); save_fail("cannot write %s: %s", path, tostring(rerr)) end
end

return M
