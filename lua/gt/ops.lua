-- gt.ops: tensor operations over the kernel library (kernels/*.cu), each allocating its output.
--
-- Every op checks shapes and dtypes (errors name the op and the argument and
-- point at the caller's line), allocates its result with gt.tensor and
-- launches one kernel through a bound launcher (K.name:config) cached per
-- grid, so a call in a model's step costs a few table lookups and one launch.
-- Tensors are f32 unless said otherwise (f16 and bf16 ones go to
-- ops_half.lua, axpby excepted); "rows" means the last dimension, any
-- leading dimensions flattened (x {B, T, D} has B*T rows of D).
local gt = require "gt"
local I = require "gt.internal"

local ceil, max = math.ceil, math.max
local bor, bxor = bit.bor, bit.bxor
local original = require("gt.host_policy").original   -- (not the wrappers for traced numbers)
local type, error, format, concat = original.type, I.error, string.format, original.concat   -- errors name the user's line

local ops = {}
local H = require "gt.ops_half"      -- f16 and bf16 tensors go there
local is_half = H.is_half

-- -- Kernels and launchers ---------------------------------------------------

local modules = {}   -- file name -> kernel table, loaded on first use

local function kernel(file, name)
  local K = modules[file]
  if not K then
    K = gt.load("kernels/" .. file .. ".cu")
    modules[file] = K
  end
  return K[name]
end

local ELEM_BLOCK = 256
local ELEM_MAX_GRID = 4096     -- grid-stride loops cover the rest
local ROW_MAX_GRID = 65535
-- Threads per row: 256 on a GPU; 32 on the cpu backend, whose threads are
-- fibers switched at every barrier and shuffle (10x faster there at N = 1024).
local ROW_MAX_BLOCK = gt.backend() == "cpu" and 32 or 256
local TILE = 16                -- linear.cu's GT_TILE

-- A launcher's bound configurations, one per grid and block:
-- key -> K.name:config({gx, gy, 1}, {bx, by, 1}).
local function configs(file, name)
  local cache = {}
  return function(key, gx, gy, bx, by)
    local f = cache[key]
    if f then return f end
    f = kernel(file, name):config({ gx, gy, 1 }, { bx, by, 1 })
    cache[key] = f
    return f
  end
end

-- Grids: n elements in 256-thread blocks; m rows of n (a block a row, its
-- width fitted to short rows).
local function elem_grid(n)
  local g = ceil(n / ELEM_BLOCK)
  if g > ELEM_MAX_GRID then g = ELEM_MAX_GRID elseif g < 1 then g = 1 end
  return g
end
local function row_grid(m, n)
  local b = n >= ROW_MAX_BLOCK and ROW_MAX_BLOCK or max(32, ceil(n / 32) * 32)
  local g = m > ROW_MAX_GRID and ROW_MAX_GRID or (m < 1 and 1 or m)
  return g, b
end

-- Launcher over n elements: a 1-D grid of 256-thread blocks.
local function elementwise(file, name)
  local config = configs(file, name)
  return function(n)
    local g = elem_grid(n)
    return config(g, g, 1, ELEM_BLOCK, 1)
  end
end

-- The grid of an m x n output of 16x16 tiles.
local function tile_grid(m, n)
  local gx, gy = ceil(n / TILE), ceil(m / TILE)
  if gx > 65535 then gx = 65535 elseif gx < 1 then gx = 1 end
  if gy > 65535 then gy = 65535 elseif gy < 1 then gy = 1 end
  return gx, gy
end

-- -- Argument checks -----------------------------------------------------------

local function shape_str(s)
  return #s == 0 and "a scalar" or concat(s, "x")
end

local is_tensor = gt.is_tensor

local function describe(v)
  if is_tensor(v) then return format("a %s %s tensor", v.dtype, shape_str(v._shape)) end
  if v == nil then return "nil" end
  return "a " .. type(v)
end

-- Raises "gt.ops.<op>: <msg>" at the user's line: level 1 = the function
-- that calls fail, so an op body passes 2 and a helper an op calls passes 3.
local function fail(level, op, fmt, ...)
  error("gt.ops." .. op .. ": " .. format(fmt, ...), level + 1)
end

local DT = I.dtypes
local table_new = require "table.new"
local F32 = DT.f32
local SHAPES, NUMEL, shape_id, new_sid = I.shapes, I.numel, I.shape_id, I.new_sid

-- The slow path of check: says what is wrong with t.
local function check_failed(op, name, t, dtype, level)
  if not is_tensor(t) then
    fail(level + 1, op, "%s must be a %s tensor, got %s", name, dtype, describe(t))
  end
  if t.dtype ~= dtype then
    fail(level + 1, op, "%s must be %s, got %s %s", name, dtype, t.dtype, shape_str(t._shape))
  end
  -- a strided view (gt.tensor's narrow of an inner dimension)
  fail(level + 1, op, "%s is a non-contiguous view; :clone() it first", name)
end

-- A contiguous tensor of the given dtype (default f32); returns its shape.
-- level: as fail's, counted from check's caller (default 2: an op body).
local function check(op, name, t, dtype, level)
  local d = dtype and DT[dtype] or F32
  if not is_tensor(t) or t._dt ~= d.code or t._vid ~= 0 then check_failed(op, name, t, d.name, (level or 2) + 1) end
  return SHAPES[t._sid]
end

local same_shape = I.same_shape

local function copy_shape(s)
  local r = {}
  for i = 1, #s do r[i] = s[i] end
  return r
end

-- Shapes derived from an input's shape, by shape id (gt.tensor interns
-- shapes): a model's step finds the few it uses in one lookup each and
-- builds no table.
local last_cache, rows_cache = {}, {}

-- The id of shape sid with its last size replaced by n.
local function with_last(sid, n)
  local c = last_cache[sid]
  local r = c and c[n]
  if r then return r end
  local s = copy_shape(SHAPES[sid])
  s[#s] = n
  r = shape_id(s, 1)
  c = c or {}
  last_cache[sid], c[n] = c, r
  return r
end

-- Rows m and row length n of a tensor with shape s (rows = last dimension).
local function rows(s, numel)
  local n = s[#s] or 1
  if n ~= 0 then return numel / n, n end
  local m = 1                             -- empty rows: count them from the shape
  for i = 1, #s - 1 do m = m * s[i] end
  return m, n
end

-- The id of shape sid with the last dimension dropped ({M} for {M, N}, {1} for {N}).
local function row_shape(sid)
  local r = rows_cache[sid]
  if r then return r end
  local s = SHAPES[sid]
  local t = { 1 }
  if #s > 1 then t = {} for i = 1, #s - 1 do t[i] = s[i] end end
  r = shape_id(t, 1)
  rows_cache[sid] = r
  return r
end

-- -- Lean launches ---------------------------------------------------------------

-- An op whose scalars follow from its shapes launches through a lean state
-- per plan (Kernel:_lean): the result is the kernel's first parameter, and
-- in a tree call its buffer is made by the launch, so that a replayed launch
-- goes through the replay lane (launcher.lua) without calling the core.
local TT = require("ffi").typeof("gt_tensor")
local LAST = I.last_made            -- (tensor.lua: the last tensor a tree call made)
local DTC = {}                       -- dtype code -> its entry in I.dtypes
for _, d in pairs(DT) do DTC[d.code] = d end

-- The lean state of kernel file:name over grid gx x gy of blocks bx x by
-- with the kernel's arguments (nil for the tensors), whose result has shape
-- id sid and dtype d; and the kernel's lean runner.
local function lean_state(file, name, gx, gy, bx, by, sid, d, ...)
  local st, run = kernel(file, name):_lean({ gx, gy, 1 }, { bx, by, 1 }, 0, ...)
  st.nb, st.sid, st.dt = NUMEL[sid] * d.size, sid, d.code
  return st, run
end

-- The result of state st (runner run) on the tensors a2, a3, a4.
local function lean_go(run, st, a2, a3, a4)
  local tree = I.active
  if tree then
    local buf = run(st, nil, a2, a3, a4)
    local sid, dt = st.sid, st.dt
    LAST[0], LAST[1] = sid, dt             -- a new node's shapes name its last tensor (explain.lua)
    return TT(buf, 0, st.nb, tree._gen, sid, dt, 0)
  end
  local y = new_sid(st.sid, DTC[st.dt], 3)
  run(st, y, a2, a3, a4)
  return y
end

-- States by shape id (an array part: a replayed op finds its state in one lookup).
local function by_sid() return table_new(256, 0) end

-- -- Elementwise ---------------------------------------------------------------

-- f(a, b) -> y: the lean launch of kernel name(y, a, b, n [, d]) over a's
-- shape (rows: with b a vector of a's last size d, repeated over the rows).
local function lean_binary(name, rows_of)
  local states, run = by_sid(), nil
  return function(a, b)
    local sid = a._sid
    local st = states[sid]
    if not st then
      local n = NUMEL[sid]
      local sh = SHAPES[sid]
      st, run = lean_state("elementwise", name, elem_grid(n), 1, ELEM_BLOCK, 1, sid, F32, nil, nil, nil, n,
        rows_of and sh[#sh] or nil)
      states[sid] = st
    end
    local y = lean_go(run, st, a, b)
    return y
  end
end
local launch_add, launch_mul = lean_binary("add_f32"), lean_binary("mul_f32")
local launch_add_rows, launch_mul_rows = lean_binary("add_rows_f32", true), lean_binary("mul_rows_f32", true)
local launch_affine = elementwise("elementwise", "affine_f32")
local launch_axpby = elementwise("elementwise", "axpby_f32")
local launch_copy = elementwise("elementwise", "copy_f32")

-- a + b or a * b: b a tensor of a's shape, a tensor of a's last dimension
-- (repeated over the rows, as a bias), or a number.
-- (a number: a `patch` number traced by a keyed call too, gt.trace)
local is_traced = require("gt.trace").is_traced
local function isnum(x) return type(x) == "number" or is_traced(x) end
local function binary(op, a, b, launch_same, launch_rows)
  if isnum(a) then a, b = b, a end
  local as = check(op, "a", a, "f32", 3)
  if isnum(b) then
    local n = NUMEL[a._sid]
    local y = new_sid(a._sid, F32, 3)
    local s, t = 1, b                     -- add: x + b
    if op == "mul" then s, t = b, 0 end
    launch_affine(n)(y, a, n, s, t)
    return y
  end
  local bs = check(op, "b", b, "f32", 3)
  if same_shape(as, bs) then
    return launch_same(a, b)
  elseif #bs == 1 and bs[1] == as[#as] and bs[1] > 0 then
    return launch_rows(a, b)
  else
    fail(3, op, "a is %s but b is %s: shapes differ (b may be a's shape, a vector of %d, or a number)",
      shape_str(as), shape_str(bs), as[#as] or 1)
  end
  return y
end

--- ops.add(a, b) -> a + b.  b: same shape, a vector of a's last dimension, or a number.
function ops.add(a, b)
  if is_half(a) or is_half(b) then local y = H.binary("add", a, b, isnum); return y end
  local y = binary("add", a, b, launch_add, launch_add_rows)
  return y
end

--- ops.mul(a, b) -> a * b (elementwise).  b as for add.
function ops.mul(a, b)
  if is_half(a) or is_half(b) then local y = H.binary("mul", a, b, isnum); return y end
  local y = binary("mul", a, b, launch_mul, launch_mul_rows)
  return y
end

--- ops.axpby(a, x, b, y) -> y, after y = a*x + b*y in place.
function ops.axpby(a, x, b, y)
  if not isnum(a) then fail(2, "axpby", "a must be a number, got %s", describe(a)) end
  if not isnum(b) then fail(2, "axpby", "b must be a number, got %s", describe(b)) end
  local xs, ys = check("axpby", "x", x), check("axpby", "y", y)
  if not same_shape(xs, ys) then
    fail(2, "axpby", "x is %s but y is %s: shapes differ", shape_str(xs), shape_str(ys))
  end
  local n = NUMEL[y._sid]
  launch_axpby(n)(y, x, n, a, b)
  return y
end

--- ops.copy(dst, src) -> dst, after copying src (same shape) into it.
function ops.copy(dst, src)
  if is_half(dst) or is_half(src) then local y = H.copy(dst, src); return y end
  local ds, ss = check("copy", "dst", dst), check("copy", "src", src)
  if not same_shape(ds, ss) then
    fail(2, "copy", "dst is %s but src is %s: shapes differ", shape_str(ds), shape_str(ss))
  end
  local n = NUMEL[dst._sid]
  launch_copy(n)(dst, src, n)
  return dst
end

-- relu, gelu (tanh approximation), tanh, sigmoid: y = f(x), x's shape.
for _, name in ipairs { "relu", "gelu", "tanh", "sigmoid" } do
  local states, run = by_sid(), nil
  ops[name] = function(x)
    if is_half(x) then local y = H.activate(name, x); return y end
    check(name, "x", x)
    local sid = x._sid
    local st = states[sid]
    if not st then
      local n = NUMEL[sid]
      st, run = lean_state("elementwise", name .. "_f32", elem_grid(n), 1, ELEM_BLOCK, 1, sid, F32, nil, nil, n)
      states[sid] = st
    end
    local y = lean_go(run, st, x)
    return y
  end
end

-- -- Matrix products -------------------------------------------------------------

local ACT = { relu = 1, gelu = 2, tanh = 3, none = 0 }

-- The checks of ops.linear: its plan for these shapes ({ y = result shape
-- id, nb = its bytes, M, N, K }; one per x shape, W shape and bias shape)
-- and the activation's code.
local function linear_checked(x, W, b, act)
  local xs, ws = check("linear", "x", x, nil, 3), check("linear", "W", W, nil, 3)
  if #ws ~= 2 then fail(3, "linear", "W must be 2-D {K, N}, got %s", shape_str(ws)) end
  local K, N = ws[1], ws[2]
  if xs[#xs] ~= K then
    fail(3, "linear", "x is %s but W is %s: inner dimensions differ; W is {in, out} (y = x @ W)%s", shape_str(xs),
      shape_str(ws), N == xs[#xs] and format(", and this W looks like PyTorch's nn.Linear {out, in} layout (its last " ..
        "dimension is x's): pass gt.ops.transpose(W) (or W:t()), once, outside the step") or
        " (a PyTorch nn.Linear weight, {out, in}, goes in as gt.ops.transpose(W) or W:t())")
  end
  if b ~= nil then
    local bs = check("linear", "b", b, nil, 3)
    if #bs ~= 1 or bs[1] ~= N then
      fail(3, "linear", "b is %s but W is %s: b must be a vector of %d", shape_str(bs), shape_str(ws), N)
    end
  end
  local a = 0
  if act ~= nil then
    a = ACT[act]
    if not a then
      fail(3, "linear", "act must be \"relu\", \"gelu\", \"tanh\" or nil, got %s",
        type(act) == "string" and format("%q", act) or describe(act))
    end
  end
  local M = rows(xs, NUMEL[x._sid])
  local y = with_last(x._sid, N)
  local p = table_new(4, 8)          -- p[a + 1]: its state with activation a (linear_state)
  p.y, p.nb, p.M, p.N, p.K = y, NUMEL[y] * F32.size, M, N, K
  return p, a
end

-- Plans of checked calls: [x shape id][W shape id][bias shape id or 0]
-- (array parts: a hashed number key would cost a replayed op a hash walk).
local linear_plans = table_new(4096, 0)
-- ops.linear's last two plans' states (c1 the newer)
local c1_xs, c1_ws, c1_bs, c1_act, c1_st = -1, -1, -1, false, nil
local c2_xs, c2_ws, c2_bs, c2_act, c2_st = -1, -1, -1, false, nil
local F32C = F32.code

-- A tree call begins: ops.linear's two places empty (see the note there).
function I.ops_new_call()
  c1_xs, c1_ws, c2_xs, c2_ws = -1, -1, -1, -1
end

-- The state of plan p with activation a (bias: 1 with one): linear_f32's
-- lean state (the scalars fixed) with the result's bytes and shape id.
local linear_run    -- linear_f32's lean runner: one function for every plan
local function linear_state(p, a, bias)
  local gx, gy = tile_grid(p.M, p.N)
  local st, run = lean_state("linear", "linear_f32", gx, gy, TILE, TILE, p.y, F32,
    nil, nil, nil, nil, p.M, p.N, p.K, bias, a)
  linear_run = run
  return st
end

-- The plans of x shape id xs and W shape id ws, by bias shape id (made on first use).
local function plans_of(xs, ws)
  local byx = linear_plans[xs]
  if not byx then byx = table_new(64, 0); linear_plans[xs] = byx end
  local byw = byx[ws]
  if not byw then byw = table_new(64, 0); byx[ws] = byw end
  return byw
end

--- ops.linear(x, W [, b] [, act]) -> act(x @ W + b).
-- x {..., K} (leading dims are rows), W {K, N}, b {N} or nil,
-- act "relu" | "gelu" | "tanh" | nil.  The result is {..., N}.
function ops.linear(x, W, b, act)
  if type(b) == "string" and act == nil then b, act = nil, b end
  local bsid = 0
  if b ~= nil then bsid = is_tensor(b) and b._dt == F32C and b._vid == 0 and b._sid or -1 end
  -- shapes seen before: three lookups instead of the checks (the core still
  -- checks that every tensor is live, contiguous and f32)
  if is_tensor(x) and is_tensor(W) and bor(bxor(x._dt, F32C), x._vid, bxor(W._dt, F32C), W._vid) == 0 then
    local xs, ws = x._sid, W._sid
    -- the last two plans' states first (a stack of layers of one shape, or
    -- of two alternating, as an MLP's up and down, hits them: four compares
    -- against values a loop's trace keeps in registers, instead of five
    -- lookups).  A miss takes the first place and a hit moves nothing, and
    -- every tree call starts with both empty (I.ops_new_call), so each op of a
    -- step meets the same outcome on every call, whatever ran before it: a
    -- side trace for a changed outcome costs an allocation per op (the
    -- loop's handle is no longer sunk).  (Without the emptying, a plan that
    -- another tree's padded calls left first stayed there: a plain tree's
    -- replays then missed it at every op of a loop traced while it hit,
    -- 1.8 kB of garbage a 32-op call.)
    if xs == c1_xs and ws == c1_ws and bsid == c1_bs and act == c1_act then
      local y = lean_go(linear_run, c1_st, x, W, b or W)
      return y
    end
    if xs == c2_xs and ws == c2_ws and bsid == c2_bs and act == c2_act then
      local y = lean_go(linear_run, c2_st, x, W, b or W)
      return y
    end
    local byx = linear_plans[xs]
    local byw = byx and byx[ws]
    local p = byw and byw[bsid]
    local a = act == nil and 0 or ACT[act]
    local st = p and a and p[a + 1]
    if st then                           -- (a miss goes first, the first second: see the note above)
      c1_xs, c1_ws, c1_bs, c1_act, c1_st, c2_xs, c2_ws, c2_bs, c2_act, c2_st =
        xs, ws, bsid, act, st, c1_xs, c1_ws, c1_bs, c1_act, c1_st
      local y = lean_go(linear_run, st, x, W, b or W)
      return y
    end
  end
  if is_half(x) or is_half(W) or is_half(b) then local y = H.linear(x, W, b, act); return y end
  local p, a = linear_checked(x, W, b, act)
  local byw = plans_of(x._sid, W._sid)
  p = byw[bsid] or p
  byw[bsid] = p
  p[a + 1] = p[a + 1] or linear_state(p, a, bsid ~= 0 and 1 or 0)
  local y = lean_go(linear_run, p[a + 1], x, W, b or W)
  return y
end

local matmul_states = by_sid()     -- [a's shape id][b's shape id]
local matmul_run

--- ops.matmul(a, b) -> a @ b for a {M, K}, b {K, N}.
function ops.matmul(a, b)
  if is_half(a) or is_half(b) then local y = H.matmul(a, b); return y end
  local as, bs = check("matmul", "a", a), check("matmul", "b", b)
  if #as ~= 2 then fail(2, "matmul", "a must be 2-D {M, K}, got %s", shape_str(as)) end
  if #bs ~= 2 then fail(2, "matmul", "b must be 2-D {K, N}, got %s", shape_str(bs)) end
  local M, K, N = as[1], as[2], bs[2]
  if bs[1] ~= K then
    fail(2, "matmul", "a is %s but b is %s: inner dimensions differ", shape_str(as), shape_str(bs))
  end
  local bya = matmul_states[a._sid]
  if not bya then bya = by_sid(); matmul_states[a._sid] = bya end
  local st = bya[b._sid]
  if not st then
    local gx, gy = tile_grid(M, N)
    st, matmul_run = lean_state("linear", "matmul_f32", gx, gy, TILE, TILE, shape_id({ M, N }, 2), F32,
      nil, nil, nil, M, N, K)
    bya[b._sid] = st
  end
  local y = lean_go(matmul_run, st, a, b)
  return y
end

local transpose_states = by_sid()     -- [x's shape id]
local transpose_run

--- ops.transpose(x) -> x^T for a 2-D x {R, C}: a new {C, R} tensor (one kernel; a PyTorch
--- nn.Linear weight {out, in} becomes linear's {in, out})
function ops.transpose(x)
  if is_half(x) then local y = H.transpose(x); return y end
  local xs = check("transpose", "x", x)
  if #xs ~= 2 then
    fail(2, "transpose", "x must be 2-D {R, C} (a matrix), got %s%s", #xs == 0 and "a scalar" or shape_str(xs),
      #xs == 0 and "" or format(" (%d-D): :view() it as 2-D first", #xs))
  end
  local st = transpose_states[x._sid]
  if not st then
    local R, C = xs[1], xs[2]
    local gx, gy = tile_grid(R, C)
    st, transpose_run = lean_state("linear", "transpose_f32", gx, gy, TILE, TILE, shape_id({ C, R }, 2), F32,
      nil, nil, R, C)
    transpose_states[x._sid] = st
  end
  local y = lean_go(transpose_run, st, x)
  return y
end

-- -- Row reductions and normalisations -------------------------------------------

-- f(x, ...) -> y: the lean launch of reduce.cu's kernel name(y, x, [vectors,] m, n [, eps])
-- over x's rows, its result of shape id res(x's shape id) and dtype d.
-- vectors: the per-column parameters' count; eps: whether it takes one
-- (states by x's shape id, then by eps).
local function lean_rows(name, d, res, vectors, eps)
  local states, run = by_sid(), nil
  return function(x, v1, v2, e)
    local sid = x._sid
    local st = states[sid]
    if eps then st = st and st[e] end
    if not st then
      local m, n = rows(SHAPES[sid], NUMEL[sid])
      local g, b = row_grid(m, n)
      local y = res and res(sid) or sid
      if vectors == 0 then st, run = lean_state("reduce", name, g, 1, b, 1, y, d, nil, nil, m, n)
      elseif vectors == 1 then st, run = lean_state("reduce", name, g, 1, b, 1, y, d, nil, nil, nil, m, n, e)
      else st, run = lean_state("reduce", name, g, 1, b, 1, y, d, nil, nil, nil, nil, m, n, e) end
      if eps then
        local byeps = states[sid] or {}
        byeps[e], states[sid] = st, byeps
      else
        states[sid] = st
      end
    end
    local y = lean_go(run, st, x, v1, v2)
    return y
  end
end

local launch_softmax = lean_rows("softmax_f32", F32, nil, 0)

--- ops.softmax(x) -> softmax over the last dimension.
function ops.softmax(x)
  if is_half(x) then local y = H.softmax(x); return y end
  check("softmax", "x", x)
  return launch_softmax(x)
end

-- A per-column parameter: a vector of the rows' length n.
local function check_vec(op, name, v, n, xs)
  local vs = check(op, name, v, "f32", 3)
  if #vs ~= 1 or vs[1] ~= n then
    fail(3, op, "x is %s but %s is %s: %s must be a vector of %d",
      shape_str(xs), name, shape_str(vs), name, n)
  end
end

local function check_eps(op, eps, default)
  if eps == nil then return default end
  if type(eps) ~= "number" or eps ~= eps then fail(3, op, "eps must be a number, got %s", eps ~= eps and "nan" or describe(eps)) end
  return eps
end

local launch_layernorm = lean_rows("layernorm_f32", F32, nil, 2, true)

--- ops.layernorm(x, gamma, beta [, eps = 1e-5]) over the last dimension.
function ops.layernorm(x, gamma, beta, eps)
  if is_half(x) or is_half(gamma) or is_half(beta) then
    local y = H.norm("layernorm", x, gamma, beta, check_eps("layernorm", eps, 1e-5)); return y
  end
  local xs = check("layernorm", "x", x)
  local m, n = rows(xs, NUMEL[x._sid])
  check_vec("layernorm", "gamma", gamma, n, xs)
  check_vec("layernorm", "beta", beta, n, xs)
  eps = check_eps("layernorm", eps, 1e-5)
  return launch_layernorm(x, gamma, beta, eps)
end

local launch_rmsnorm = lean_rows("rmsnorm_f32", F32, nil, 1, true)

--- ops.rmsnorm(x, w [, eps = 1e-6]) = x / sqrt(mean(x^2) + eps) * w over the last dimension.
function ops.rmsnorm(x, w, eps)
  if is_half(x) or is_half(w) then local y = H.norm("rmsnorm", x, w, nil, check_eps("rmsnorm", eps, 1e-6)); return y end
  local xs = check("rmsnorm", "x", x)
  local m, n = rows(xs, NUMEL[x._sid])
  check_vec("rmsnorm", "w", w, n, xs)
  eps = check_eps("rmsnorm", eps, 1e-6)
  return launch_rmsnorm(x, w, nil, eps)
end

-- sum, max: f32 per row; argmax: i32 per row (0-based index of the first maximum).
for name, spec in pairs { sum = { "rowsum_f32", "f32" }, max = { "rowmax_f32", "f32" },
                          argmax = { "argmax_f32", "i32" } } do
  local launch = lean_rows(spec[1], DT[spec[2]], row_shape, 0)
  ops[name] = function(x)
    if is_half(x) then local y = H.reduce(name, x); return y end
    local xs = check(name, "x", x)
    if name ~= "sum" and (xs[#xs] or 1) == 0 then fail(2, name, "x is %s: rows are empty", shape_str(xs)) end
    return launch(x)
  end
end

-- -- Embedding ---------------------------------------------------------------------

local launch_embedding = elementwise("embedding", "embedding_f32")

--- ops.embedding(ids, table) -> rows of table: ids i32 (any shape), table {V, D}; result {ids..., D}.
-- An id outside [0, V) gives a row of zeros.
function ops.embedding(ids, tbl)
  if is_half(tbl) then local y = H.embedding(ids, tbl); return y end
  local is = check("embedding", "ids", ids, "i32")
  local ts = check("embedding", "table", tbl)
  if #ts ~= 2 then fail(2, "embedding", "table must be 2-D {V, D}, got %s", shape_str(ts)) end
  local V, D = ts[1], ts[2]
  local n = ids.numel
  local ys = copy_shape(is)
  ys[#ys + 1] = D
  local y = gt.tensor(ys)
  launch_embedding(n * D)(y, ids, tbl, n, D, V)
  return y
end

return ops
