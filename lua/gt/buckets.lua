-- gt.buckets: pad inputs of a tree to a few fixed sizes so that few recordings serve many shapes.
local gt = require "gt"
local ffi = require "ffi"
local C, rt, is_tensor, SHAPES = gt._C, gt._rt, gt.is_tensor, gt._shapes
local band, STATIC = require("bit").band, C.GT_BUF_STATIC

-- A tensor argument buckets may pad: an external input, not a static tensor
-- (a weight passed as an argument is not batched).
local function paddable(x) return is_tensor(x) and band(x._b.flags, STATIC) == 0 end

local M = {}

--- gt.buckets.pow2(max) -> {1, 2, 4, ..., max}
function M.pow2(max)
  if type(max) ~= "number" or max ~= max or max < 1 or max == math.huge then
    gt._error("gt.buckets.pow2(max): max must be a number >= 1 (the largest bucket), got " .. gt._show(max))
  end
  local r, s = {}, 1
  while s < max do r[#r + 1] = s; s = s * 2 end
  r[#r + 1] = max
  return r
end

--- gt.buckets.linear(step, max) -> {step, 2*step, ..., max}
function M.linear(step, max)
  if type(step) ~= "number" or step ~= step or step < 1 or step == math.huge then
    gt._error("gt.buckets.linear(step, max): step must be a number >= 1, got " .. gt._show(step))
  end
  if type(max) ~= "number" or max ~= max or max < step or max == math.huge then
    gt._error("gt.buckets.linear(step, max): max must be a number >= step (" .. gt._show(step) .. "), got " .. gt._show(max))
  end
  if max / step > 2 ^ 20 then
    gt._error("gt.buckets.linear(step, max): " .. gt._show(max) .. " / " .. gt._show(step) ..
      " is more than 2^20 buckets (each is its own recording): use a larger step or gt.buckets.pow2(max)")
  end
  local r, s = {}, step
  while s < max do r[#r + 1] = s; s = s + step end
  r[#r + 1] = max
  return r
end

local function check_spec(b, i)
  local where = "gt.tree: buckets" .. (i and ("[" .. i .. "]") or "")
  if type(b) ~= "table" or type(b.sizes) ~= "table" or #b.sizes == 0 then
    error(where .. " needs sizes = {...} (e.g. gt.buckets.pow2(64))", 4)
  end
  local dim = b.dim or 1
  if type(dim) ~= "number" or dim < 1 or dim ~= math.floor(dim) then error(where .. ".dim must be a dimension (1-based)", 4) end
  local sizes = {}
  for k, v in ipairs(b.sizes) do
    if type(v) ~= "number" or v < 1 or v ~= math.floor(v) or (k > 1 and v <= sizes[k - 1]) then
      error(where .. ".sizes must be increasing positive integers", 4)
    end
    sizes[k] = v
  end
  return { dim = dim, sizes = sizes, arg = b.arg or i, of = {} }
end

local function bucket_of(sizes, n)
  for _, s in ipairs(sizes) do if s >= n then return s end end
end

-- Pads tensor x along dim to p entries into staging slot `slot` (zero-filled).
local function pad(self, x, dim, p, slot)
  local b = x._b
  if x._strides then gt._error("a non-contiguous view as a bucketed input: :clone() it first") end
  local shape, esz = x._shape, gt._dtypes[x.dtype].size
  local outer, inner = 1, esz
  for i = 1, dim - 1 do outer = outer * shape[i] end
  for i = dim + 1, #shape do inner = inner * shape[i] end
  if C.gt_tree_stage(rt, slot, b, x._off, outer, shape[dim] * inner, p * inner, self._out) ~= 0 then gt._error(gt._errmsg()) end
  local s = {}
  for i = 1, #shape do s[i] = shape[i] end
  s[dim] = p
  local sb = self._out[0]
  local px = gt._view(sb, 0, gt._shape_id(s, 5), x._dt, sb.gen, 0, true)
  -- a write into the padded copy goes back into x after the call (tree.lua's write_back)
  if b.tree ~= self._t then gt._note_copy(self, x, px, outer, shape[dim] * inner, p * inner) end
  return px
end

-- Which view of which memory x is (one key for every handle of it).
local function view_key(x)
  return ("%s:%d:%d:%d:%d"):format(tostring(ffi.cast("uintptr_t", x._b)), x._off, x._sid, x._dt, x._vid)
end

local span = gt._span   -- (the bytes [lo, hi) of its buffer a tensor spans)

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
        return gt._view(p.px._b, p.px._off + (lo - p.lo), v._sid, v._dt, p.px._gen, v._vid)
      end
      gt._error(("buckets: argument %d views the memory of bucketed argument %d, which the call pads into a copy of " ..
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
  local args, slot = gt._packed(n, a1, a2, a3, a4, rest), 0
  local specs, real = self._buckets, self._breal[1]
  gt._pin_inputs(self, args, n)
  -- (padded[view]: a view passed twice, by one handle or two, is padded once)
  local shared, padded, pads = gt._shared_inputs(self, args, n), {}, {}
  local function padded_of(x, sp, i)
    local vkey = view_key(x)
    if padded[vkey] then return padded[vkey] end
    local own, live = gt._check_input(self, x)
    if not live then return gt._unstaged(x, own) end   -- (released or stale: the body raises where it uses it)
    alias_of(pads, x, i)                      -- (two padded inputs over one memory: refused)
    local m = x._shape[sp.dim]
    local p = bucket_of(sp.sizes, m)
    local px = pad(self, x, sp.dim, p, slot)
    note_padded(self._bn, sp.dim, p, m)
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
      if not out[i] then out[i], slot = gt._stage_arg(self, x, slot, shared) end
    elseif type(x) == "table" and getmetatable(x) == nil and (out[i] or pads[1]) then
      local copy = out[i] or {}
      for k, t in pairs(x) do
        if copy[k] == nil then
          copy[k] = alias_of(pads, t, i)
          if copy[k] == nil then copy[k], slot = gt._stage_arg(self, t, slot, shared) end
        end
      end
      out[i] = copy
    else
      out[i], slot = gt._stage_arg(self, x, slot, shared)
    end
  end
  for i = 1, n do args[i] = out[i] end
  return args
end

local unstage_res = gt._unstage_res

-- (only the call's own tensors: a static or outside tensor returned is the
-- caller's as it is).  Each padded dimension (self._bn: {dim, p, n} per
-- spec that padded this call) is narrowed back where the result has the
-- padded size along it.
local function narrow_one(self, x)
  if is_tensor(x) and x._b.tree == self._t and not x:is_stale() then
    local bn, y = self._bn, x
    for i = 1, #bn do
      local c = bn[i]
      local s = y._shape
      if #s >= c.dim and s[c.dim] == c.p and c.p ~= c.n then
        if c.other then
          gt._error(("buckets: a result has the padded size %d along dim %d, to which inputs of %d and %d were padded " ..
            "in this call: which size it has cannot be told; give those inputs buckets of their own sizes, or " ..
            "return results that keep their size along dim %d"):format(c.p, c.dim, c.n, c.other, c.dim))
        end
        y = y:narrow(c.dim, 1, c.n)
      end
    end
    if y ~= x then return gt._anchor(self, y) end
  end
  return x
end

-- Result x narrowed back (a tensor, or tensors in plain tables); one on
-- the padded copy of an input is then the caller's tensor (tree.lua's unstage_res).
local function narrow_deep(self, x, depth)
  if type(x) == "table" and getmetatable(x) == nil then
    local c = {}
    for k, v in pairs(x) do c[k] = depth < 8 and narrow_deep(self, v, depth + 1) or v end
    return c
  end
  return narrow_one(self, x)
end
local function narrow_res(self, x)
  local wbl = self._wbl
  if type(x) == "table" and getmetatable(x) == nil then
    local c = narrow_deep(self, x, 1)
    if wbl then unstage_res(wbl, c) end
    return c
  end
  local y = narrow_one(self, x)
  if wbl then y = unstage_res(wbl, y) end
  return y
end

-- A padded call's nres results (r1, r2, or all of them in rest) narrowed back.
local function narrow_results(self, nres, r1, r2, rest)
  if nres == 0 then return end
  if not rest then
    if nres == 1 then
      local y = narrow_res(self, r1)
      return y
    end
    return narrow_res(self, r1), narrow_res(self, r2)
  end
  for i = 1, nres do rest[i] = narrow_res(self, rest[i]) end
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
    local r = size_of(gt._arg_at(i, a1, a2, a3, a4, rest), i)
    if r then return r end
  end
  for i = 1, n do
    local x = gt._arg_at(i, a1, a2, a3, a4, rest)
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
    local x = sp.arg and sp.arg <= na and gt._arg_at(sp.arg, a1, a2, a3, a4, rest)
    if is_tensor(x) then
      if beyond_spec(sp, x) then return true end
    elseif type(x) == "table" and getmetatable(x) == nil then
      for _, t in pairs(x) do if is_tensor(t) and beyond_spec(sp, t) then return true end end
    end
  end
  return false
end

-- A call (its arguments: n, a1..a4, rest, as tree.lua's spread takes them).
local function bucket_call(self, na, a1, a2, a3, a4, rest)
  -- the real size: the first bucketed input's size along its dim
  local first = self._buckets[1]
  local n
  if is_tensor(a1) and (first.arg == 1 or (first.arg == nil and band(a1._b.flags, STATIC) == 0)) then
    n = SHAPES[a1._sid][first.dim]                                    -- the usual case, without a loop
  end
  if not n then n = real_size(first, na, a1, a2, a3, a4, rest) end
  if not n then gt._error("tree '" .. self.name .. "': no tensor input to bucket along dim " .. first.dim) end
  -- the bucket of n, remembered (a loop on every call would stop the caller's trace)
  local p = first.of[n]
  if p == nil then p = bucket_of(first.sizes, n) or false; first.of[n] = p end
  if not p then return self._run(self, "beyond buckets", na, a1, a2, a3, a4, rest) end   -- a call of the tree all the same, run eagerly
  self._breal[1], self._bpad = n, p
  if #self._buckets > 1 and beyond_other(self, na, a1, a2, a3, a4, rest) then
    return self._run(self, "beyond buckets", na, a1, a2, a3, a4, rest)
  end
  local bn = self._bn                    -- (the dims this call pads: prep notes them)
  for i = #bn, 1, -1 do bn[i] = nil end
  -- already at the bucket's size: nothing to pad or to narrow (the inputs are
  -- used where they are, as in a tree without buckets)
  local exact = p == n and #self._buckets == 1
  if self._keyed then                    -- a keyed call of the bucket's path (keyed.lua pads with prep)
    if exact then return self:_keyed_call(false, na, a1, a2, a3, a4, rest) end
    return narrow_all(self, self:_keyed_call(true, na, a1, a2, a3, a4, rest))
  end
  if exact then return self._run(self, false, na, a1, a2, a3, a4, rest) end
  return narrow_all(self, self._run(self, nil, na, a1, a2, a3, a4, rest))
end

-- Called by gt.tree when opts.buckets is given.
function M._attach(tree, spec, _)
  local specs = {}
  if spec.sizes then specs[1] = check_spec(spec, nil)
  else for i, b in ipairs(spec) do specs[i] = check_spec(b, i) end end
  if #specs == 0 then error("gt.tree: buckets is empty", 3) end
  tree._buckets, tree._prep, tree._breal, tree._bn = specs, prep, {}, {}
  tree._bucket_call = bucket_call
end

return M
