-- gt.ops in half precision: the ops of ops.lua for f16 and bf16 tensors,
-- over kernels/half.cu (elements stored in the dtype, arithmetic in f32, one
-- rounding to nearest even per result; the matrix products on the tensor
-- cores of a GPU).  ops.lua sends a call here when one of its tensors is
-- half precision; every tensor of a call then has that dtype (ids and
-- argmax's result are i32), or the call raises naming both dtypes.
local gt = require "gt"
local I = require "gt.internal"

local original = require("gt.host_policy").original
local type, error, format, concat = original.type, I.error, string.format, original.concat
local ceil, min, max = math.ceil, math.min, math.max
local is_tensor = gt.is_tensor
local DT, SHAPES, NUMEL, shape_id, new_sid = I.dtypes, I.shapes, I.numel, I.shape_id, I.new_sid

local H = {}

-- -- Checks ------------------------------------------------------------------

local function fail(level, op, fmt, ...) error("gt.ops." .. op .. ": " .. format(fmt, ...), level + 1) end
local function shape_str(s) return #s == 0 and "a scalar" or concat(s, "x") end

-- 1 when t is a half-precision tensor.
function H.is_half(t) return is_tensor(t) and DT[t.dtype].half == true end

-- The dtype of the call's tensors (names[i] names the i-th): the first
-- half-precision one's; any other float tensor of another dtype raises.
local function dtype_of(op, level, names, ...)
  local want, wname
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if is_tensor(t) and DT[t.dtype].half then want, wname = t.dtype, names[i]; break end
  end
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if is_tensor(t) and t.dtype ~= want then
      fail(level + 1, op, "%s is %s but %s is %s: an op's tensors have one dtype; convert one with :to(\"%s\") " ..
        "(or :to(\"%s\"))", wname, want, names[i], t.dtype, want, t.dtype)
    end
  end
  return want
end

-- A contiguous tensor (dtype checked by dtype_of); its shape.
local function check(op, name, t, level)
  if not is_tensor(t) then fail(level + 1, op, "%s must be a tensor, got %s", name, I.show(t)) end
  if t._vid ~= 0 then fail(level + 1, op, "%s is a non-contiguous view; :clone() it first", name) end
  return SHAPES[t._sid]
end

local same_shape = I.same_shape

local function rows(s, numel)
  local n = s[#s] or 1
  if n ~= 0 then return numel / n, n end
  local m = 1
  for i = 1, #s - 1 do m = m * s[i] end
  return m, n
end

-- -- Launch geometry -------------------------------------------------------------

local ROW_BLOCK = gt.backend() == "cpu" and 32 or 256
local function elem_grid(n) return max(1, min(ceil(n / 256), 4096)) end
local function row_grid(m, n)
  return max(1, min(m, 65535)), n >= ROW_BLOCK and ROW_BLOCK or max(32, ceil(n / 32) * 32)
end
local K = I.half_kernels

-- -- Elementwise -------------------------------------------------------------------

local ACT = { relu = 1, gelu = 2, tanh = 3, sigmoid = 4 }

-- a + b, a * b: b a tensor of a's shape, a vector of a's last size, or a number.
function H.binary(op, a, b, isnum)
  if isnum(a) then a, b = b, a end
  local dt = dtype_of(op, 3, { "a", "b" }, a, b)
  local as = check(op, "a", a, 3)
  local n = NUMEL[a._sid]
  local y = new_sid(a._sid, DT[dt], 3)
  local g = elem_grid(n)
  if isnum(b) then
    if op == "mul" then K(dt).affine(g, 256, y, a, n, b, 0) else K(dt).affine(g, 256, y, a, n, 1, b) end
    return y
  end
  local bs = check(op, "b", b, 3)
  if same_shape(as, bs) then K(dt)[op](g, 256, y, a, b, n)
  elseif #bs == 1 and bs[1] == as[#as] and bs[1] > 0 then K(dt)[op .. "_rows"](g, 256, y, a, b, n, bs[1])
  else
    fail(3, op, "a is %s but b is %s: shapes differ (b may be a's shape, a vector of %d, or a number)",
      shape_str(as), shape_str(bs), as[#as] or 1)
  end
  return y
end

function H.activate(name, x)
  local dt = dtype_of(name, 2, { "x" }, x)
  check(name, "x", x, 2)
  local n = NUMEL[x._sid]
  local y = new_sid(x._sid, DT[dt], 2)
  K(dt).activate(elem_grid(n), 256, y, x, n, ACT[name])
  return y
end

function H.copy(dst, src)
  local dt = dtype_of("copy", 2, { "dst", "src" }, dst, src)
  local ds, ss = check("copy", "dst", dst, 2), check("copy", "src", src, 2)
  if not same_shape(ds, ss) then fail(2, "copy", "dst is %s but src is %s: shapes differ", shape_str(ds), shape_str(ss)) end
  local n = NUMEL[dst._sid]
  K(dt).copy(elem_grid(n), 256, dst, src, n)
  return dst
end

-- -- Matrix products ------------------------------------------------------------------

-- y {..., N} = act(x {..., K} @ W {K, N} + b): a block of 4 warps per 64x64 tile.
function H.linear(x, W, b, act, op)
  op = op or "linear"
  local dt = dtype_of(op, 3, { op == "matmul" and "a" or "x", op == "matmul" and "b" or "W", "b" }, x, W, b)
  local xs, ws = check(op, "x", x, 3), check(op, "W", W, 3)
  if #ws ~= 2 then fail(3, op, "W must be 2-D {K, N}, got %s", shape_str(ws)) end
  local Kd, N = ws[1], ws[2]
  if xs[#xs] ~= Kd then
    fail(3, op, "x is %s but W is %s: inner dimensions differ; W is {in, out} (y = x @ W)", shape_str(xs), shape_str(ws))
  end
  if b ~= nil then
    local bs = check(op, "b", b, 3)
    if #bs ~= 1 or bs[1] ~= N then fail(3, op, "b is %s but W is %s: b must be a vector of %d", shape_str(bs), shape_str(ws), N) end
  end
  local a = act == nil and 0 or ACT[act]
  if not a or a == 4 then fail(3, op, "act must be \"relu\", \"gelu\", \"tanh\" or nil, got %s", I.show(act)) end
  local M = rows(xs, NUMEL[x._sid])
  if M > 64 * 65535 then fail(3, op, "x has %d rows; half-precision products take at most %d", M, 64 * 65535) end
  local ys = {}
  for i = 1, #xs do ys[i] = xs[i] end
  ys[#ys] = N
  local y = new_sid(shape_id(ys, 3), DT[dt], 3)
  if M * N == 0 then return y end
  K(dt).linear({ max(1, ceil(N / 64)), max(1, ceil(M / 64)), 1 }, 128, y, x, W, b or W, M, N, Kd, b and 1 or 0, a)
  return y
end

function H.matmul(a, b)
  local as, bs = check("matmul", "a", a, 2), check("matmul", "b", b, 2)
  if #as ~= 2 then fail(2, "matmul", "a must be 2-D {M, K}, got %s", shape_str(as)) end
  if #bs ~= 2 then fail(2, "matmul", "b must be 2-D {K, N}, got %s", shape_str(bs)) end
  if bs[1] ~= as[2] then fail(2, "matmul", "a is %s but b is %s: inner dimensions differ", shape_str(as), shape_str(bs)) end
  local y = H.linear(a, b, nil, nil, "matmul")
  return y
end

function H.transpose(x)
  local dt = dtype_of("transpose", 2, { "x" }, x)
  local xs = check("transpose", "x", x, 2)
  if #xs ~= 2 then fail(2, "transpose", "x must be 2-D {R, C} (a matrix), got %s", shape_str(xs)) end
  local y = new_sid(shape_id({ xs[2], xs[1] }, 2), DT[dt], 2)
  local n = NUMEL[x._sid]
  if n > 0 then K(dt).transpose(elem_grid(n), 256, y, x, xs[1], xs[2]) end
  return y
end

-- -- Rows -------------------------------------------------------------------------------

local function row_vec(op, name, v, n, xs)
  local vs = check(op, name, v, 3)
  if #vs ~= 1 or vs[1] ~= n then
    fail(3, op, "x is %s but %s is %s: %s must be a vector of %d", shape_str(xs), name, shape_str(vs), name, n)
  end
end

function H.softmax(x)
  local dt = dtype_of("softmax", 2, { "x" }, x)
  local xs = check("softmax", "x", x, 2)
  local m, n = rows(xs, NUMEL[x._sid])
  local y = new_sid(x._sid, DT[dt], 2)
  local g, bl = row_grid(m, n)
  if m > 0 then K(dt).softmax(g, bl, y, x, m, n) end
  return y
end

-- layernorm (v1 gamma, v2 beta) or rmsnorm (v1 w).
function H.norm(op, x, v1, v2, eps)
  local dt = dtype_of(op, 3, { "x", op == "layernorm" and "gamma" or "w", "beta" }, x, v1, v2)
  local xs = check(op, "x", x, 3)
  local m, n = rows(xs, NUMEL[x._sid])
  row_vec(op, op == "layernorm" and "gamma" or "w", v1, n, xs)
  if op == "layernorm" then row_vec(op, "beta", v2, n, xs) end
  local y = new_sid(x._sid, DT[dt], 3)
  local g, bl = row_grid(m, n)
  if m == 0 then return y end
  if op == "layernorm" then K(dt).layernorm(g, bl, y, x, v1, v2, m, n, eps)
  else K(dt).rmsnorm(g, bl, y, x, v1, m, n, eps) end
  return y
end

-- sum, max (in x's dtype), argmax (i32) per row.
local REDUCE = { sum = "rowsum", max = "rowmax", argmax = "argmax" }
function H.reduce(name, x)
  local dt = dtype_of(name, 3, { "x" }, x)
  local xs = check(name, "x", x, 3)
  if name ~= "sum" and (xs[#xs] or 1) == 0 then fail(3, name, "x is %s: rows are empty", shape_str(xs)) end
  local m, n = rows(xs, NUMEL[x._sid])
  local rs = { 1 }
  if #xs > 1 then rs = {} for i = 1, #xs - 1 do rs[i] = xs[i] end end
  local y = new_sid(shape_id(rs, 3), name == "argmax" and DT.i32 or DT[dt], 3)
  local g, bl = row_grid(m, n)
  if m > 0 then K(dt)[REDUCE[name]](g, bl, y, x, m, n) end
  return y
end

function H.embedding(ids, tbl)
  local dt = tbl.dtype
  local is, ts = check("embedding", "ids", ids, 3), check("embedding", "table", tbl, 3)
  if ids.dtype ~= "i32" then fail(3, "embedding", "ids must be i32, got %s %s", ids.dtype, shape_str(is)) end
  if #ts ~= 2 then fail(3, "embedding", "table must be 2-D {V, D}, got %s", shape_str(ts)) end
  local V, D = ts[1], ts[2]
  local n = NUMEL[ids._sid]
  local ys = {}
  for i = 1, #is do ys[i] = is[i] end
  ys[#ys + 1] = D
  local y = new_sid(shape_id(ys, 3), DT[dt], 3)
  if n * D > 0 then K(dt).embedding(elem_grid(n * D), 256, y, ids, tbl, n, D, V) end
  return y
end

return H
