-- gt.buckets: pad inputs of a tree to a few fixed sizes so that few recordings serve many shapes.
local gt = require "gt"
local type = require("gt.host_policy").original.type   -- (not the wrapper for traced numbers)
local I = require "gt.internal"
local ffi = require "ffi"
local C, rt, is_tensor, SHAPES = I.C, I.rt, gt.is_tensor, I.shapes
local band, STATIC = require("bit").band, C.GT_BUF_STATIC

-- A tensor argument buckets may pad: an external input, not a static tensor
-- (a weight passed as an argument is not batched).
local function paddable(x) return is_tensor(x) and band(x._b.flags, STATIC) == 0 end

local M = {}

--- gt.buckets.pow2(max) -> {1, 2, 4, ..., max}
function M.pow2(max)
  if type(max) ~= "number" or max ~= max or max < 1 or max == math.huge then
    I.error("gt.buckets.pow2(max): max must be a number >= 1 (the largest bucket), got " .. I.show(max))
  end
  local r, s = {}, 1
  while s < max do r[#r + 1] = s; s = s * 2 end
  r[#r + 1] = max
  return r
end

--- gt.buckets.linear(step, max) -> {step, 2*step, ..., max}
function M.linear(step, max)
  if type(step) ~= "number" or step ~= step or step < 1 or step == math.huge then
    I.error("gt.buckets.linear(step, max): step must be a number >= 1, got " .. I.show(step))
  end
  if type(max) ~= "number" or max ~= max or max < step or max == math.huge then
    I.error("gt.buckets.linear(step, max): max must be a number >= step (" .. I.show(step) .. "), got " .. I.show(max))
  end
  if max / step > 2 ^ 20 then
    I.error("gt.buckets.linear(step, max): " .. I.show(max) .. " / " .. I.show(step) ..
      " is more than 2^20 buckets (each is its own recording): use a larger step or gt.buckets.pow2(max)")
  end
  local r, s = {}, step
  while s < max do r[#r + 1] = s; s = s + step end
  r[#r + 1] = max
  return r
end

--- gt.buckets.fit(sizes, n) -> the smallest size >= n in sizes (a list of
--- increasing sizes), or nil beyond the last: the bucket a call of n pads to
function M.fit(sizes, n)
  local ok = type(sizes) == "table" and getmetatable(sizes) == nil and type(n) == "number" and n == n
  for _, s in ipairs(ok and sizes or {}) do ok = ok and type(s) == "number" end
  if not ok then
    I.error("gt.buckets.fit(sizes, n): sizes must be a list of increasing sizes and n a number, got " ..
      I.show(sizes) .. " and " .. I.show(n))
  end
  for _, s in ipairs(sizes) do if s >= n then return s end end
  return nil
end

local function check_spec(b, i)
  local where = "gt.tree: buckets" .. (i and ("[" .. i .. "]") or "")
  if type(b) ~= "table" or type(b.sizes) ~= "table" or #b.sizes == 0 then
    error(where .. " needs sizes = {...} (e.g. gt.buckets.pow2(64))", 4)
  end
  local dim = b.dim or 1
  if type(dim) ~= "number" or dim < 1 or dim ~= math.floor(dim) then error(where .. ".dim must be a dimension (1-based)", 4) end
  local sizes, least = {}, b.count and 0 or 1      -- (a count may be 0: a bucket of its own)
  for k, v in ipairs(b.sizes) do
    if type(v) ~= "number" or v < least or v ~= math.floor(v) or (k > 1 and v <= sizes[k - 1]) then
      error(where .. ".sizes must be increasing " .. (b.count and "whole numbers >= 0" or "positive integers"), 4)
    end
    sizes[k] = v
  end
  -- (count: the position of a number argument this spec buckets; name: gt.bucket(name))
  return { dim = dim, sizes = sizes, arg = b.arg or (not b.count and i) or nil, of = {}, pad = b.pad or 0, fills = {},
           count = b.count or false, name = b.name or false,
           n = false, p = false }          -- (n, p: this call's real and padded sizes, for gt.bucket)
end

local function bucket_of(sizes, n)
  for _, s in ipairs(sizes) do if s >= n then return s end end
end

-- The pad value of spec sp for input x (argument i) as one element of x's
-- dtype (cached per dtype), or nil for zeros; an error when x's dtype cannot hold it.
local LIMITS = { i32 = { -2 ^ 31, 2 ^ 31 - 1 }, i64 = { -2 ^ 63, 2 ^ 63 - 1024 }, u8 = { 0, 255 } }
local function pad_fill(sp, x, i)
  local v, dt = sp.pad, x.dtype
  if v == 0 and 1 / v > 0 then return nil end      -- (+0: zeros; -0.0 has a bit of its own)
  local h = sp.fills[dt]
  if h then return h end
  local lim = LIMITS[dt]
  if lim and (v ~= math.floor(v) or v < lim[1] or v > lim[2]) then
    I.error(("buckets: pad = %s cannot be held by the %s elements of argument %d; give that input a bucket " ..
      "spec of its own (arg = %d) with a pad it can hold"):format(I.show(v), dt, i, i))
  end
  if lim and v == 0 then return nil end
  local d = I.dtypes[dt]
  h = d.ct(1)
  if d.half then h[0] = C.gt_half_bits(v, d.code) else h[0] = v end   -- (half precision: its bits)
  sp.fills[dt] = h
  return h
end

-- Pads tensor x (argument i) along dim to p entries into staging slot `slot`
-- (filled with spec sp's pad value).
local function pad(self, x, sp, i, p, slot)
  local b, dim = x._b, sp.dim
  if x._strides then I.error("a non-contiguous view as a bucketed input: :clone() it first") end
  local shape, esz = x._shape, I.dtypes[x.dtype].size
  local outer, inner = 1, esz
  for d = 1, dim - 1 do outer = outer * shape[d] end
  for d = dim + 1, #shape do inner = inner * shape[d] end
  local fill = pad_fill(sp, x, i)
  if C.gt_tree_stage_pad(rt, slot, b, x._off, outer, shape[dim] * inner, p * inner, fill, esz, self._out) ~= 0 then
    I.error(I.errmsg())
  end
  local s = {}
  for i = 1, #shape do s[i] = shape[i] end
  s[dim] = p
  local sb = self._out[0]
  local px = I.view(sb, 0, I.shape_id(s, 5), x._dt, sb.gen, 0, true)
  -- a write into the padded copy goes back into x after the call (tree.lua's write_back)
  if b.tree ~= self._t then I.note_copy(self, x, px, outer, shape[dim] * inner, p * inner) end
  return px
end

-- Which view of which memory x is (one key for every handle of it).
local function view_key(x)
  return ("%s:%d:%d:%d:%d"):format(tostring(ffi.cast("uintptr_t", x._b)), x._off, x._sid, x._dt, x._vid)
end

local span = I.span   -- (the bytes [lo, hi) of its buffer a tensor spans)

-- Tensor v (argument i) as the call sees it when it views the memory of a
-- padded input (pads: {x, px, lo, hi}): the same view of the padded copy,
-- where the copy lays those bytes out as x does (its rows up to the real size,
-- padding along the first dim); nil when it views none.  Else an error: a
-- write through one would not reach the other.
local function alias_of(pads, v, i)
  if not pads or not is_tensor(v) then return nil end
  local lo, hi = span(v)
  for _, p in ipairs(pads) do
    if p.x._b == v._b and lo < p.hi and p.lo < hi then
      if p.outer == 1 and lo >= p.lo and hi <= p.hi then
        return I.view(p.px._b, p.px._off + (lo - p.lo), v._sid, v._dt, p.px._gen, v._vid)
      end
      I.error(("buckets: argument %d views the memory of bucketed argument %d, which the call pads into a copy of " ..
        "its own: a write through one would not reach the other; pass one tensor, or a clone"):format(i, p.i))
    end
  end
end

-- The spec that pads tensor x, argument i (or a tensor in table argument i), or nil.
local function spec_of(specs, real, x, i)
  if not is_tensor(x) then return nil end
  for _, sp in ipairs(specs) do
    if sp.arg == i or (sp.arg == nil and paddable(x) and #x._shape >= sp.dim and x._shape[sp.dim] == real) then return sp end
  end
end

-- The run's argument preparation: bucketed inputs padded (tensors in a table
-- argument too, one level deep), others staged as usual; an argument (or a
-- tensor in a table argument) that views a padded input's memory is the same
-- view of its padded copy.
-- Notes that the call padded dim from n to p (the results are narrowed
-- back along it: narrow_one); one entry per dim and padded size.
local function note_padded(bn, dim, p, n)
  for i = 1, #bn do
    local c = bn[i]
    if c.dim == dim and c.p == p then
      if c.n ~= n then c.other = n end      -- two real sizes in one bucket: a result of that size is ambiguous
      return
    end
  end
  bn[#bn + 1] = { dim = dim, p = p, n = n }
end

local function prep(self, n, a1, a2, a3, a4, rest)
  local args, slot = I.packed(n, a1, a2, a3, a4, rest), 0
  local specs = self._buckets
  local real = specs.real[1]
  I.pin_inputs(self, args, n)
  -- (padded[view]: a view passed twice, by one handle or two, is padded once)
  local shared, padded, pads = I.shared_inputs(self, args, n), {}, {}
  local function padded_of(x, sp, i)
    local vkey = view_key(x)
    if padded[vkey] then return padded[vkey] end
    local own, live = I.check_input(self, x)
    if not live then return I.unstaged(x, own) end   -- (released or stale: the body raises where it uses it)
    alias_of(pads, x, i)                      -- (two padded inputs over one memory: refused)
    local m = x._shape[sp.dim]
    local p = bucket_of(sp.sizes, m)
    local px = pad(self, x, sp, i, p, slot)
    note_padded(self._buckets.bn, sp.dim, p, m)
    slot = slot + 1
    padded[vkey] = px
    local outer = 1
    for d = 1, sp.dim - 1 do outer = outer * x._shape[d] end
    local lo, hi = span(x)
    pads[#pads + 1] = { x = x, px = px, lo = lo, hi = hi, outer = outer, i = i }
    return px
  end
  local out = {}                              -- the padded, first: then the others can view them
  for i = 1, n do
    local x = args[i]
    local sp = spec_of(specs, real, x, i)
    if sp then out[i] = padded_of(x, sp, i)
    elseif type(x) == "table" and getmetatable(x) == nil then
      for k, t in pairs(x) do
        local tsp = spec_of(specs, real, t, i)
        if tsp then out[i] = out[i] or {}; out[i][k] = padded_of(t, tsp, i) end
      end
    end
  end
  for i = 1, n do
    local x = args[i]
    if is_tensor(x) then
      if not out[i] then out[i] = alias_of(pads, x, i) end
      if not out[i] then out[i], slot = I.stage_arg(self, x, slot, shared) end
    elseif type(x) == "table" and getmetatable(x) == nil and (out[i] or pads[1]) then
      local copy = out[i] or {}
      for k, t in pairs(x) do
        if copy[k] == nil then
          copy[k] = alias_of(pads, t, i)
          if copy[k] == nil then copy[k], slot = I.stage_arg(self, t, slot, shared) end
        end
      end
      out[i] = copy
    else
      out[i], slot = I.stage_arg(self, x, slot, shared)
    end
  end
  for i = 1, n do args[i] = out[i] end
  I.apply_swaps(self)
  return args
end

local unstage_res = I.unstage_res

-- -- Narrowing the results back ---------------------------------------------
-- Only the call's own tensors are narrowed (a static or outside tensor
-- returned is the caller's as it is), along each padded dimension (self._buckets.bn:
-- {dim, p, n} per spec that padded this call) where the result has the
-- padded size, and only those the rule covers (specs.narrow): result
-- positions (a set), a function(i, t, k), or nil: every such result, with
-- one warning per tree naming them (a result can have the bucket's size by
-- coincidence, and the tree cannot tell it from a batched one).

local function describe(x) return "a " .. x.dtype .. " " .. I.shape_str(x._shape) .. " tensor" end

-- Whether result i (k: its key in a table result) x, padded along a dim, is narrowed.
local function covered(specs, i, x, k)
  local rule = specs.narrow
  if rule == nil then return true end
  if type(rule) == "table" then return rule[i] == true end
  return rule(i, x, k) and true or false
end

local function narrow_one(self, x, i, k)
  if is_tensor(x) and x._b.tree == self._t and not x:is_stale() then
    local specs, y = self._buckets, x
    local bn = specs.bn
    local decided = nil
    for j = 1, #bn do
      local c = bn[j]
      local s = y._shape
      if #s >= c.dim and s[c.dim] == c.p and c.p ~= c.n then
        if decided == nil then decided = covered(specs, i, x, k) end
        if not decided then break end
        if c.other then
          I.error(("buckets: a result has the padded size %d along dim %d, to which inputs of %d and %d were padded " ..
            "in this call: which size it has cannot be told; give those inputs buckets of their own sizes, or " ..
            "return results that keep their size along dim %d"):format(c.p, c.dim, c.n, c.other, c.dim))
        end
        y = y:narrow(c.dim, 1, c.n)
      end
    end
    if y ~= x then
      if specs.narrow == nil and not specs.warned then      -- (the default rule: noted for the warning)
        local noted = specs.noted or {}
        specs.noted = noted
        noted[#noted + 1] = ("result %d%s (%s, narrowed to %s)"):format(i, k ~= nil and ("[" .. I.show(k) .. "]") or "",
          describe(x), I.shape_str(y._shape))
      end
      return I.anchor(self, y)
    end
  end
  return x
end

-- Result i, x, narrowed back (a tensor, or tensors in plain tables); one on
-- the padded copy of an input is then the caller's tensor (tree.lua's unstage_res).
local function narrow_deep(self, x, i, depth)
  local c = {}
  for k, v in pairs(x) do
    if depth < 8 and type(v) == "table" and getmetatable(v) == nil then c[k] = narrow_deep(self, v, i, depth + 1)
    else c[k] = narrow_one(self, v, i, k) end
  end
  return c
end
local function narrow_res(self, x, i)
  local wbl = self._wbl
  if type(x) == "table" and getmetatable(x) == nil then
    local c = narrow_deep(self, x, i, 1)
    if wbl then unstage_res(wbl, c) end
    return c
  end
  local y = narrow_one(self, x, i, nil)
  if wbl then y = unstage_res(wbl, y) end
  return y
end

-- The default rule narrowed results by size: said once per tree.
local function warn_default(self)
  local specs = self._buckets
  local noted = specs.noted
  specs.noted, specs.warned = nil, true
  gt.on_warning(("tree '%s' (%s): buckets narrowed %s back to the call's real size, because each has a " ..
    "bucket's padded size along a padded dim; a result that has that size by coincidence (a per-feature " ..
    "vector as long as the bucket) would be narrowed too. Say which results are batched with buckets = " ..
    "{..., narrow = {1, ...}} (result positions) or narrow = function(i, t, k) ... end, which also ends this " ..
    "warning (given once)"):format(self.name, self.where, table.concat(noted, ", ")))
end

-- A padded call's nres results (r1, r2, or all of them in rest) narrowed back.
local function narrow_results(self, nres, r1, r2, rest)
  if nres == 0 then return end
  local specs = self._buckets
  if not rest then
    if nres == 1 then
      local y = narrow_res(self, r1, 1)
      if specs.noted then warn_default(self) end
      return y
    end
    local y1, y2 = narrow_res(self, r1, 1), narrow_res(self, r2, 2)
    if specs.noted then warn_default(self) end
    return y1, y2
  end
  for i = 1, nres do rest[i] = narrow_res(self, rest[i], i) end
  if specs.noted then warn_default(self) end
  return unpack(rest, 1, nres)
end

-- (A vararg function that does nothing a trace could start in: see tree.lua's spread.)
local function narrow_all(self, ...)
  local nres = select("#", ...)
  if nres <= 2 then return narrow_results(self, nres, ...) end
  return narrow_results(self, nres, nil, nil, { ... })
end

-- The first bucketed input's size along its dim (spec: the first bucket
-- spec): a tensor argument, else a tensor in a table argument.
local function real_size(spec, n, a1, a2, a3, a4, rest)
  local function size_of(x, i)
    if is_tensor(x) and (spec.arg == i or (spec.arg == nil and paddable(x))) and #x._shape >= spec.dim then
      return x._shape[spec.dim]
    end
  end
  for i = 1, n do
    local r = size_of(I.arg_at(i, a1, a2, a3, a4, rest), i)
    if r then return r end
  end
  for i = 1, n do
    local x = I.arg_at(i, a1, a2, a3, a4, rest)
    if type(x) == "table" and getmetatable(x) == nil then
      for _, t in pairs(x) do
        local r = size_of(t, i)
        if r then return r end
      end
    end
  end
end

-- Whether tensor t, spec sp's input, is larger than its last bucket.
local function beyond_spec(sp, t)
  return paddable(t) and #t._shape >= sp.dim and not bucket_of(sp.sizes, t._shape[sp.dim])
end

-- Whether an input of a spec after the first (each names its argument)
-- is larger than that spec's last bucket: the call runs as one beyond the buckets.
local function beyond_other(self, na, a1, a2, a3, a4, rest)
  local specs = self._buckets
  for k = 2, #specs do
    local sp = specs[k]
    local x = sp.arg and sp.arg <= na and I.arg_at(sp.arg, a1, a2, a3, a4, rest)
    if is_tensor(x) then
      if beyond_spec(sp, x) then return true end
    elseif type(x) == "table" and getmetatable(x) == nil then
      for _, t in pairs(x) do if is_tensor(t) and beyond_spec(sp, t) then return true end end
    end
  end
  return false
end

-- The sizes of the specs after the first for this call (sp.n, sp.p: real
-- and padded; nil n when the spec's argument has no tensor to pad).
local function other_sizes(specs, na, a1, a2, a3, a4, rest)
  for k = 2, #specs do
    local sp = specs[k]
    local x = sp.arg and sp.arg <= na and I.arg_at(sp.arg, a1, a2, a3, a4, rest)
    local m
    if is_tensor(x) then
      if #x._shape >= sp.dim then m = x._shape[sp.dim] end
    elseif type(x) == "table" and getmetatable(x) == nil then
      for _, t in pairs(x) do
        if is_tensor(t) and paddable(t) and #t._shape >= sp.dim then m = t._shape[sp.dim] break end
      end
    end
    sp.n, sp.p = m or false, m and (bucket_of(sp.sizes, m) or m) or false
  end
end

-- -- gt.bucket -------------------------------------------------------------

local verifying = false   -- while verify runs the body eagerly: {dim, n} per spec (gt.bucket gives n, n)

-- The spec of dim (nil: the first; a string: the spec of that name) among
-- specs (a list of {dim, ...}, count specs in specs.counts), or an error.
local function spec_for(specs, dim, name)
  local counts = specs.counts or {}
  if dim == nil then return specs[1] or counts[1] end
  if type(dim) == "string" then
    for k = 1, #specs do if specs[k].name == dim then return specs[k] end end
    for k = 1, #counts do if counts[k].name == dim then return counts[k] end end
  else
    for k = 1, #specs do if specs[k].dim == dim then return specs[k] end end
  end
  local have, dims = {}, {}
  for k = 1, #specs do dims[#dims + 1] = tostring(specs[k].dim) end
  if #dims > 0 then have[1] = "dim " .. table.concat(dims, ", ") end
  for k = 1, #specs do if specs[k].name then have[#have + 1] = "'" .. specs[k].name .. "'" end end
  for k = 1, #counts do have[#have + 1] = counts[k].name and ("'" .. counts[k].name .. "'") or ("count " .. counts[k].count) end
  local asked = type(dim) == "string" and ("'" .. dim .. "'") or tostring(dim)
  I.error(("gt.bucket(%s): tree '%s' buckets %s, not %s; ask for one of those (gt.bucket() is the first; a spec's " ..
    "name = ... names it)"):format(asked, name, table.concat(have, ", "), asked), 3)
end

--- (gt.bucket's answer, tree.lua) -> real, padded along dim (or of the spec
--- named dim) in the bucketed call now running, or nil
function M._sizes(dim)
  local a = I.active
  local specs = a and a._buckets
  if specs then
    local sp = spec_for(specs, dim, a.name)
    if not sp.n then return nil end
    local K = sp.count and a._keyed
    if K and K.tracing then return require("gt.trace").arg(sp.count, sp.n), sp.p end   -- (patched on hits)
    return sp.n, sp.p
  end
  if verifying then
    local sp = spec_for(verifying, dim, verifying.name)
    if not sp.n then return nil end
    return sp.n, sp.n
  end
  return nil
end

-- -- verify: every n-th padded call also runs the body unpadded, eagerly ------

-- The bytes of every live tensor argument (and tensor in a table argument),
-- per buffer: what the eager run writes into them is undone before the
-- padded call runs on them.
local function snapshot(args, na)
  local by, list = {}, {}
  local function note(x)
    if not is_tensor(x) or x._gen ~= x._b.gen_now[0] then return end
    local lo, hi = span(x)
    local key = tostring(ffi.cast("uintptr_t", x._b))
    local e = by[key]
    if e then e.lo, e.hi = math.min(e.lo, lo), math.max(e.hi, hi)
    else e = { b = x._b, lo = lo, hi = hi, x = x }; by[key] = e; list[#list + 1] = e end
  end
  for i = 1, na do
    local x = args[i]
    if type(x) == "table" and getmetatable(x) == nil then for _, t in pairs(x) do note(t) end else note(x) end
  end
  for _, e in ipairs(list) do
    if e.hi > e.lo then
      e.copy = gt.tensor({ e.hi - e.lo }, "u8")
      if C.gt_buf_copy(rt, e.copy._b, 0, e.b, e.lo, e.hi - e.lo) ~= 0 then I.error(I.errmsg()) end
    end
  end
  return list
end
local function restore(list)
  for _, e in ipairs(list) do
    if e.copy and C.gt_buf_copy(rt, e.b, e.lo, e.copy._b, 0, e.hi - e.lo) ~= 0 then I.error(I.errmsg()) end
  end
end

-- A result as values that outlive the inputs' restore: tensors cloned
-- (UNREAD with the reason when one cannot be read), tables copied.
local UNREAD = {}
local function kept(x, depth)
  if is_tensor(x) then
    local ok, c = pcall(x.clone, x)
    if ok then return c end
    return { [UNREAD] = tostring(c) }
  end
  if type(x) == "table" and getmetatable(x) == nil and depth < 8 then
    local c = {}
    for k, v in pairs(x) do c[k] = kept(v, depth + 1) end
    return c
  end
  return x
end
local function kept_all(...)
  local r = { n = select("#", ...), ... }
  for i = 1, r.n do r[i] = kept(r[i], 1) end
  return r
end

local function flat(t)
  local out = {}
  local function walk(v) if type(v) == "table" then for _, w in ipairs(v) do walk(w) end else out[#out + 1] = tonumber(v) end end
  walk(t:tolist())
  return out
end

-- Element j (1-based, row-major) of shape as "[i1, i2, ...]".
local function index_of(shape, j)
  local idx, r = {}, j - 1
  for d = #shape, 1, -1 do
    local s = shape[d]
    idx[d] = s > 0 and (r % s) + 1 or 1
    r = s > 0 and math.floor(r / s) or 0
  end
  return "[" .. table.concat(idx, ", ") .. "]"
end

local TOL = 1e-5   -- f32 results: equal within TOL * max(1, |a|, |b|)

-- An element of a dtype for a message: an f32 with the fewest digits that
-- give it back.
local F32 = ffi.new("float[1]")
local function show_elem(v, int)
  if int or v ~= v or v == math.huge or v == -math.huge then return I.show(v) end
  for digits = 6, 9 do
    local s = ("%." .. digits .. "g"):format(v)
    F32[0] = tonumber(s)
    if F32[0] == v then return s end
  end
  return I.show(v)
end

-- What differs between the unpadded eager value a and the padded call's b
-- (what: "result 1", "result 1.key"), or nil.
local function differs(what, a, b, depth)
  if type(a) == "table" and a[UNREAD] then return nil end          -- (eager code could not read it either)
  if is_tensor(a) ~= is_tensor(b) or (not is_tensor(a) and type(a) ~= type(b)) then
    return ("%s is %s unpadded but %s from the padded call"):format(what, is_tensor(a) and describe(a) or I.show(a),
      is_tensor(b) and describe(b) or I.show(b))
  end
  if is_tensor(a) then
    if a.dtype ~= b.dtype or I.shape_str(a._shape) ~= I.shape_str(b._shape) then
      return ("%s is %s unpadded but %s from the padded call (narrowed by the rule, or left as it is)"):format(
        what, describe(a), describe(b))
    end
    local ok, vb = pcall(flat, b)
    if not ok then return ("%s cannot be read from the padded call: %s"):format(what, tostring(vb)) end
    local va, int = flat(a), I.dtypes[a.dtype].int
    for j = 1, #va do
      local x, y = va[j], vb[j]
      local same = x == y or (x ~= x and y ~= y) or
        (not int and math.abs(x - y) <= TOL * math.max(1, math.abs(x), math.abs(y)))
      if not same then
        return ("%s's element %s is %s unpadded but %s from the padded call"):format(what, index_of(a._shape, j),
          show_elem(x, int), show_elem(y, int))
      end
    end
    return nil
  end
  if type(a) == "table" and getmetatable(a) == nil and depth < 8 then
    for k, v in pairs(a) do
      local d = differs(what .. "[" .. I.show(k) .. "]", v, b[k], depth + 1)
      if d then return d end
    end
    for k, v in pairs(b) do
      if a[k] == nil then return differs(what .. "[" .. I.show(k) .. "]", nil, v, depth + 1) end
    end
    return nil
  end
  if type(a) == "number" then
    if a == b or (a ~= a and b ~= b) then return nil end
    return ("%s is %s unpadded but %s from the padded call"):format(what, I.show(a), I.show(b))
  end
  if type(a) == "string" or type(a) == "boolean" then
    if a == b then return nil end
    return ("%s is %s unpadded but %s from the padded call"):format(what, I.show(a), I.show(b))
  end
  return nil                                    -- (functions, userdata: made anew by each run)
end

-- Raises when the padded call's results (got) differ from the eager run's (want).
local function compare(self, want, got)
  local d
  if want.n ~= got.n then
    d = ("the body returned %d results unpadded but %d from the padded call"):format(want.n, got.n)
  end
  for i = 1, want.n do
    if d then break end
    d = differs("result " .. i, want[i], got[i], 1)
  end
  if not d then return end
  local pads = {}
  for _, c in ipairs(self._buckets.bn) do
    if c.p ~= c.n then pads[#pads + 1] = ("dim %d: %d padded to %d"):format(c.dim, c.n, c.p) end
  end
  for _, c in ipairs(self._buckets.counts) do
    if c.p ~= c.n then
      pads[#pads + 1] = ("count %s: %d in a bucket of %d"):format(c.name and ("'" .. c.name .. "'") or c.count, c.n, c.p)
    end
  end
  I.error(("tree '%s' (%s): buckets verify: %s (%s): the results depend on the padding. Give kernels the real " ..
    "size (local n = gt.bucket()), pad with a value that leaves them unchanged (buckets = {..., pad = -math.huge} " ..
    "before a max), or narrow only the batched results (narrow = {...})"):format(self.name, self.where, d,
    table.concat(pads, "; ")))
end

local function packed_results(...) return { n = select("#", ...), ... } end

-- A verified call: the body eagerly on the real inputs (their bytes
-- restored after it), then the padded call; its results are returned
-- when they match (compare), each narrowed as the rule says.
local function verified(self, padded_call, na, a1, a2, a3, a4, rest)
  local specs = self._buckets
  local args = I.packed(na, a1, a2, a3, a4, rest)
  local list = snapshot(args, na)
  local sizes = { name = self.name, counts = {} }
  for k = 1, #specs do sizes[k] = { dim = specs[k].dim, name = specs[k].name, n = specs[k].n } end
  for k, c in ipairs(specs.counts) do sizes.counts[k] = { count = c.count, name = c.name, n = c.n } end
  local before = verifying
  verifying = sizes
  local ok, want = pcall(function() return kept_all(self.fn(unpack(args, 1, na))) end)
  verifying = before
  restore(list)
  if not ok then error(want, 0) end
  local got = packed_results(padded_call(self, na, a1, a2, a3, a4, rest))
  specs.verified = specs.verified + 1
  compare(self, want, got)
  return unpack(got, 1, got.n)
end

-- -- Calls -----------------------------------------------------------------

local function padded_plain(self, na, a1, a2, a3, a4, rest)
  return narrow_all(self, self._run(self, nil, na, a1, a2, a3, a4, rest))
end
local function padded_keyed(self, na, a1, a2, a3, a4, rest)
  return narrow_all(self, self._keyed.call(self, true, na, a1, a2, a3, a4, rest))
end

-- The count specs' sizes in this call (sp.n, sp.p: the number argument and
-- its bucket); false when one is beyond its last bucket (sp.p is then sp.n).
local function count_sizes(self, counts, na, a1, a2, a3, a4, rest)
  local within = true
  for k = 1, #counts do
    local cs = counts[k]
    local x = cs.count <= na and I.arg_at(cs.count, a1, a2, a3, a4, rest)
    if type(x) ~= "number" or x < 0 or x ~= math.floor(x) or x >= 2 ^ 31 then
      I.error(("tree '%s': buckets' count = %d names argument %d, which is %s: a count bucket pads a whole number " ..
        ">= 0 (a count of rows, tokens, ...)"):format(self.name, cs.count, cs.count, I.show(x)))
    end
    local p = cs.of[x]
    if p == nil then p = bucket_of(cs.sizes, x) or false; cs.of[x] = p end
    cs.n, cs.p = x, p or x
    if not p then within = false end
  end
  return within
end

local function exact_plain(self, na, a1, a2, a3, a4, rest) return self._run(self, false, na, a1, a2, a3, a4, rest) end
local function exact_keyed(self, na, a1, a2, a3, a4, rest)
  return self._keyed.call(self, false, na, a1, a2, a3, a4, rest)
end

-- A call of a tree whose buckets are all counts: nothing to pad; its path is
-- the counts' buckets' (the body sizes its tensors by gt.bucket(name)).
local function counts_call(self, na, a1, a2, a3, a4, rest)
  local specs = self._buckets
  if not count_sizes(self, specs.counts, na, a1, a2, a3, a4, rest) then
    return self._run(self, "beyond buckets", na, a1, a2, a3, a4, rest)
  end
  local exact = self._keyed and exact_keyed or exact_plain
  local padded = false
  for k = 1, #specs.counts do padded = padded or specs.counts[k].p ~= specs.counts[k].n end
  if specs.verify and padded then                  -- (every verify-th call whose counts are not at their buckets)
    local c = specs.calls + 1
    specs.calls = c
    if c % specs.verify == 0 then return verified(self, exact, na, a1, a2, a3, a4, rest) end
  end
  return exact(self, na, a1, a2, a3, a4, rest)
end

-- A call (its arguments: n, a1..a4, rest, as tree.lua's spread takes them).
local function bucket_call(self, na, a1, a2, a3, a4, rest)
  -- the real size: the first bucketed input's size along its dim
  local specs = self._buckets
  local first = specs[1]
  if specs.counts[1] then
    if not first then return counts_call(self, na, a1, a2, a3, a4, rest) end
    if not count_sizes(self, specs.counts, na, a1, a2, a3, a4, rest) then
      for k = 1, #specs do specs[k].n = false end                     -- (gt.bucket(dim): nil, as eagerly)
      return self._run(self, "beyond buckets", na, a1, a2, a3, a4, rest)
    end
  end
  local n
  if is_tensor(a1) and (first.arg == 1 or (first.arg == nil and band(a1._b.flags, STATIC) == 0)) then
    n = SHAPES[a1._sid][first.dim]                                    -- the usual case, without a loop
  end
  if not n then n = real_size(first, na, a1, a2, a3, a4, rest) end
  if not n then I.error("tree '" .. self.name .. "': no tensor input to bucket along dim " .. first.dim) end
  -- the bucket of n, remembered (a loop on every call would stop the caller's trace)
  local p = first.of[n]
  if p == nil then p = bucket_of(first.sizes, n) or false; first.of[n] = p end
  first.n, first.p = n, p or n                                        -- (gt.bucket's answer in this call)
  local several = #specs > 1
  if several then other_sizes(specs, na, a1, a2, a3, a4, rest) end
  if not p then return self._run(self, "beyond buckets", na, a1, a2, a3, a4, rest) end   -- a call of the tree all the same, run eagerly
  specs.real[1], specs.pad = n, p
  if several and beyond_other(self, na, a1, a2, a3, a4, rest) then
    for k = 1, #specs do specs[k].p = specs[k].n end                  -- (nothing is padded)
    return self._run(self, "beyond buckets", na, a1, a2, a3, a4, rest)
  end
  local bn = specs.bn                    -- (the dims this call pads: prep notes them)
  for i = #bn, 1, -1 do bn[i] = nil end
  -- already at the bucket's size: nothing to pad or to narrow (the inputs are
  -- used where they are, as in a tree without buckets)
  local exact = p == n and not several
  if specs.verify and not exact then     -- every verify-th call that pads
    local c = specs.calls + 1
    specs.calls = c
    if c % specs.verify == 0 then
      return verified(self, self._keyed and padded_keyed or padded_plain, na, a1, a2, a3, a4, rest)
    end
  end
  if self._keyed then                    -- a keyed call of the bucket's path (keyed.lua pads with prep)
    if exact then return self._keyed.call(self, false, na, a1, a2, a3, a4, rest) end
    return narrow_all(self, self._keyed.call(self, true, na, a1, a2, a3, a4, rest))
  end
  if exact then return self._run(self, false, na, a1, a2, a3, a4, rest) end
  return narrow_all(self, self._run(self, nil, na, a1, a2, a3, a4, rest))
end

-- Called by gt.tree when opts.buckets is given (checked by gt.treeopts).
function M._attach(tree, spec, _)
  local specs, counts = {}, {}
  local function add(b, i)
    local sp = check_spec(b, i)
    if sp.count then counts[#counts + 1] = sp else specs[#specs + 1] = sp end
  end
  if spec.sizes then add(spec, nil)
  else for i, b in ipairs(spec) do add(b, i) end end
  if #specs == 0 and #counts == 0 then error("gt.tree: buckets is empty", 3) end
  specs.counts = counts
  local K = tree._keyed
  if K and #counts > 0 then                -- keyed: a count's bucket is in the key, the count itself patched
    K.counts = {}
    for _, cs in ipairs(counts) do K.patch[cs.count], K.counts[cs.count] = true, cs end
  end
  local rule = spec.narrow
  if type(rule) == "table" then
    local set = {}
    for _, i in ipairs(rule) do set[i] = true end
    rule = set
  end
  -- (narrow: nil, a set of result positions or a function; verify: every
  -- how many padded calls; calls: padded calls so far; noted, warned: the
  -- default rule's warning)
  specs.narrow, specs.verify, specs.calls, specs.verified = rule, spec.verify, 0, 0
  specs.noted, specs.warned = nil, false
  -- (the tree's bucket state, its one field tree._buckets: prep stages a
  -- padded call's inputs, for tree.lua's run and keyed.lua; real[1], pad: the
  -- call's real and padded size; bn: the dims it pads; call: a call's entry)
  specs.prep, specs.real, specs.pad, specs.bn, specs.call = prep, {}, false, {}, bucket_call
  tree._buckets = specs
end

return M
