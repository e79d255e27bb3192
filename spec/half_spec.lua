-- half_spec.lua: f16 and bf16 end to end: conversions, user kernels, every op against f32,
-- half tensors in trees, and safetensors files (round trips and malformed ones).
local gt = require "gt"
local ffi = require "ffi"
local ops = gt.ops
local C = ffi.C
local flat = require("gt.busted").flat

local HALF = { "bf16", "f16" }
local CODE = { bf16 = C.GT_BF16, f16 = C.GT_F16 }
-- Tolerances against the f32 op on the same (rounded) inputs: one rounding of
-- the result (2^-8 for bf16, 2^-11 for f16 relative) and a margin for a
-- different f32 summation order.
local TOL = { bf16 = 1e-2, f16 = 1.5e-3 }

local function f32(x) return tonumber(ffi.new("float", x)) end          -- x rounded to f32 (nearest even)
local function rounded(x, dt) return C.gt_half_value(C.gt_half_bits(x, CODE[dt]), CODE[dt]) end
local function same(a, b) return a == b and (a ~= 0 or 1 / a == 1 / b) or (a ~= a and b ~= b) end

local function values(t) return flat(t:tolist()) end

-- |got - want| <= tol * |want| + abs for each element, else fails naming the first.
local function near(want, got, tol, abs, what)
  local w, g = values(want), values(got)
  assert.are.equal(#w, #g, what .. ": element count")
  for i = 1, #w do
    local d = math.abs(g[i] - w[i])
    assert(d <= tol * math.abs(w[i]) + abs, ("%s: element %d is %.8g, the f32 op gives %.8g (tolerance %g)"):format(
      what, i, g[i], w[i], tol))
  end
end

local function raises(pattern, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.truthy(tostring(err):find(pattern, 1, true), tostring(err))
end

-- -- Conversions -----------------------------------------------------------------

describe("half precision conversions", function()
  -- value -> what it becomes in each dtype
  local EDGE = {
    { 1, 1, 1 }, { -2.5, -2.5, -2.5 }, { 0, 0, 0 }, { -0.0, -0.0, -0.0 },
    { math.huge, math.huge, math.huge }, { -math.huge, -math.huge, -math.huge },
    { 65504, 65536, 65504 },                                -- f16's largest finite
    { 65519.99, 65536, 65504 }, { 65520, 65536, math.huge },  -- f16 rounds to inf from 65520
    { 1 + 2 ^ -11, 1, 1 }, { 1 + 3 * 2 ^ -11, 1, 1 + 2 ^ -9 },  -- f16 ties to even
    { 1 + 2 ^ -8, 1, 1 + 2 ^ -8 }, { 1 + 3 * 2 ^ -8, 1 + 2 ^ -6, 1 + 3 * 2 ^ -8 },   -- bf16 ties to even
    { 2 ^ -24, 2 ^ -24, 2 ^ -24 }, { 2 ^ -25, 2 ^ -25, 0 }, { 3 * 2 ^ -25, 3 * 2 ^ -25, 2 ^ -23 },  -- f16 subnormals
    { 2 ^ -14, 2 ^ -14, 2 ^ -14 }, { 1e-8, "rounded", 0 },
    { 3.3895313892515355e38, 3.3895313892515355e38, math.huge },   -- bf16's largest finite
    { 2 ^ -133, 2 ^ -133, 0 }, { 1e-40, "rounded", 0 },            -- bf16 subnormals
  }

  for col, dt in ipairs(HALF) do
    it("rounds to nearest even in " .. dt .. " (ties, subnormals, +-0, +-inf, NaN, the largest finite), on the host and by t:to", function()
      local vals, want = {}, {}
      for i, e in ipairs(EDGE) do vals[i], want[i] = e[1], e[col + 1] == "rounded" and rounded(e[1], dt) or e[col + 1] end
      vals[#vals + 1], want[#want + 1] = 0 / 0, 0 / 0
      local host = values(gt.from(vals, dt))
      local dev = values(gt.from(vals):to(dt))
      for i = 1, #vals do
        local w = want[i]
        assert(same(host[i], w), ("%s: %.17g became %.17g, expected %.17g"):format(dt, vals[i], host[i], w))
        assert(same(dev[i], host[i]), ("%s: t:to gives %.17g for %.17g, the host %.17g"):format(dt, dev[i], vals[i], host[i]))
      end
      local wide = values(gt.from(vals, dt):to("f32"))                  -- widening is exact
      for i = 1, #vals do assert(same(host[i], wide[i]), ("%s: %.17g widened to %.17g"):format(dt, host[i], wide[i])) end
    end)
  end

  it("casts between f16 and bf16 through f32, and t:to refuses other dtypes by name", function()
    local x = gt.from({ 1 / 3, 70000, 1e-6, -2 ^ -20 }, "bf16")
    local want = {}
    for i, v in ipairs(values(x)) do want[i] = rounded(v, "f16") end
    assert.are.same(want, values(x:to("f16")))
    assert.are.equal(x, x:to("bf16"))
    raises("casts go between f32, f16 and bf16; this tensor is i32", function() return gt.zeros({ 2 }, "i32"):to("bf16") end)
    raises("unknown dtype 'f8'", function() return x:to("f8") end)
    raises("give the dtype", function() return x:to() end)
  end)

  it("makes half tensors by every constructor, and prints them", function()
    for _, dt in ipairs(HALF) do
      assert.are.same({ 0, 0 }, gt.zeros({ 2 }, dt):tolist())
      assert.are.same({ 1, 1 }, gt.ones({ 2 }, dt):tolist())
      assert.are.same({ rounded(0.1, dt) }, gt.full({ 1 }, 0.1, dt):tolist())
      assert.are.equal(rounded(0.1, dt), gt.full({ 1 }, 0.1, dt):item())
      local r = gt.randn({ 5 }, { seed = 4, dtype = dt })
      local w = {}
      for i, v in ipairs(gt.randn({ 5 }, { seed = 4 }):tolist()) do w[i] = rounded(v, dt) end
      assert.are.same(w, r:tolist())
      assert.truthy(tostring(r):find("[gt." .. dt .. " 5 ", 1, true))
      local t = gt.tensor({ 2, 3 }, dt)
      t:copy({ { 1, 2, 3 }, { 4, 5, 6 } })
      assert.are.same({ { 2, 3 } }, t:narrow(2, 2, 2):narrow(1, 1, 1):tolist())
      assert.are.same({ { 2, 3 }, { 5, 6 } }, t:narrow(2, 2, 2):clone():tolist())
      assert.are.same({ 1, 2, 3, 4, 5, 6 }, t:view({ 6 }):tolist())
      assert.are.same({ 4, 5, 6 }, t:narrow(1, 2, 1):view({ 3 }):tolist())
      t:fill(2.5)
      assert.are.same({ 2.5, 2.5, 2.5 }, t:narrow(1, 1, 1):view({ 3 }):tolist())
    end
  end)
end)

-- -- User kernels --------------------------------------------------------------------

describe("kernels on half tensors", function()
  local K = gt.compile([[
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__global__ void scale(__nv_bfloat16 *yb, __half *yh, const nv_bfloat16 *xb, const half *xh, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    yb[i] = __float2bfloat16_rn(__bfloat162float(xb[i]) * s);
    yh[i] = __float2half(__half2float(xh[i]) * s);
  }
}
__global__ void arith(__half *y, const __half *a, const __half *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __hadd_rn(__hmul_rn(a[i], b[i]), __hsub_rn(a[i], b[i]));   // (_rn: no contraction into an fma)
}
__global__ void pairs(__nv_bfloat16 *y, const __nv_bfloat16 *a, int n) {   // n even
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (2 * i < n) {
    __nv_bfloat162 p = __halves2bfloat162(a[2 * i], a[2 * i + 1]);
    __nv_bfloat162 q = __hmul2(p, p);
    y[2 * i] = __low2bfloat16(q);
    y[2 * i + 1] = __hmax(__high2bfloat16(q), __float2bfloat16(0.5f));
  }
}]], { name = "half_user.cu" })

  it("maps __nv_bfloat16 / nv_bfloat16 / __half / half pointers to bf16 and f16, with the bits of the C conversion", function()
    local vals = { 1, -3.25, 1 / 3, 1e-3, 300.7, 2 ^ -20, 65000, -7e-6 }
    local n, s = #vals, f32(3.7)
    local xb, xh = gt.from(vals, "bf16"), gt.from(vals, "f16")
    local yb, yh = gt.tensor({ n }, "bf16"), gt.tensor({ n }, "f16")
    K.scale(1, 32, yb, yh, xb, xh, 3.7, n)
    local gb, gh, vb, vh = values(yb), values(yh), values(xb), values(xh)
    for i = 1, n do
      assert.are.equal(rounded(f32(vb[i] * s), "bf16"), gb[i])    -- (a product of two floats is exact in a double)
      assert.are.equal(rounded(f32(vh[i] * s), "f16"), gh[i])
    end
    raises("expects f16, got a bf16 tensor", K.scale, 1, 32, yb, xb, xb, xh, 1, n)
    raises("expects bf16, got a f32 tensor", K.scale, 1, 32, gt.zeros({ n }), yh, xb, xh, 1, n)
  end)

  it("has the half intrinsics and __nv_bfloat162 on both backends, rounding each result once", function()
    local a = gt.from({ 1.5, -2.25, 100, 1 / 3, 1e-4, 7 }, "f16")
    local b = gt.from({ 3, 0.125, -99.5, 3, 1e-4, 1 / 7 }, "f16")
    local y = gt.tensor({ 6 }, "f16")
    K.arith(1, 32, y, a, b, 6)
    local va, vb, got = values(a), values(b), values(y)
    for i = 1, 6 do
      local p, d = rounded(f32(va[i] * vb[i]), "f16"), rounded(f32(va[i] - vb[i]), "f16")
      assert.are.equal(rounded(f32(p + d), "f16"), got[i])
    end
    local x = gt.from({ 1.5, -0.25, 3, 0.5 }, "bf16")
    local z = gt.tensor({ 4 }, "bf16")
    K.pairs(1, 32, z, x, 4)
    assert.are.same({ 2.25, 0.5, 9, 0.5 }, z:tolist())
  end)
end)

-- -- Ops -------------------------------------------------------------------------------

describe("gt.ops in half precision", function()
  for _, dt in ipairs(HALF) do
    local tol = TOL[dt]
    -- inputs in dt, and the same values in f32
    local function pair(shape, seed, scale)
      local h = gt.randn(shape, { seed = seed, scale = scale }):to(dt)
      return h, h:to("f32")
    end

    it("linear and matmul in " .. dt .. " (f32 accumulation) match the f32 ops", function()
      for _, s in ipairs { { 1, 8, 8 }, { 37, 70, 45 }, { 3, 768, 40 }, { 64, 33, 96 } } do
        local M, Kd, N = s[1], s[2], s[3]
        local x, xf = pair({ M, Kd }, 1, 1)
        local W, Wf = pair({ Kd, N }, 2, 1 / math.sqrt(Kd))
        local b, bf = pair({ N }, 3, 1)
        local what = dt .. " " .. M .. "x" .. Kd .. "x" .. N
        near(ops.matmul(xf, Wf), ops.matmul(x, W), tol, 1e-3, "matmul " .. what)
        for _, act in ipairs { false, "relu", "gelu", "tanh" } do
          near(ops.linear(xf, Wf, bf, act or nil), ops.linear(x, W, b, act or nil), tol, 1e-3, "linear " .. tostring(act) .. " " .. what)
        end
        near(ops.linear(xf, Wf), ops.linear(x, W), tol, 1e-3, "linear without bias " .. what)
        assert.are.equal(dt, ops.linear(x, W, b).dtype)
      end
      local x3, x3f = pair({ 2, 3, 16 }, 4, 1)
      local W, Wf = pair({ 16, 8 }, 5, 0.25)
      near(ops.linear(x3f, Wf), ops.linear(x3, W), tol, 1e-3, "linear 3-d")
      assert.are.same({ 2, 3, 8 }, ops.linear(x3, W).shape)
    end)

    it("elementwise ops in " .. dt .. " match the f32 ops", function()
      local a, af = pair({ 9, 40 }, 6, 2)
      local b, bf = pair({ 9, 40 }, 7, 2)
      local v, vf = pair({ 40 }, 8, 2)
      near(ops.add(af, bf), ops.add(a, b), tol, 1e-6, "add")
      near(ops.mul(af, bf), ops.mul(a, b), tol, 1e-6, "mul")
      near(ops.add(af, vf), ops.add(a, v), tol, 1e-6, "add rows")
      near(ops.mul(af, vf), ops.mul(a, v), tol, 1e-6, "mul rows")
      near(ops.add(af, 0.5), ops.add(a, 0.5), tol, 1e-6, "add number")
      near(ops.mul(af, -3), ops.mul(3 and -3, a), tol, 1e-6, "mul number")
      for _, f in ipairs { "relu", "gelu", "tanh", "sigmoid" } do near(ops[f](af), ops[f](a), tol, 1e-6, f) end
      assert.are.same(values(ops.transpose(af)), values(ops.transpose(a)))
      local c = gt.tensor({ 9, 40 }, dt)
      assert.are.same(values(a), values(ops.copy(c, a)))
    end)

    it("row ops in " .. dt .. " match the f32 ops", function()
      local x, xf = pair({ 7, 300 }, 9, 3)
      local g, gf = pair({ 300 }, 10, 1)
      local be, bef = pair({ 300 }, 11, 1)
      near(ops.softmax(xf), ops.softmax(x), tol, 1e-6, "softmax")
      near(ops.layernorm(xf, gf, bef), ops.layernorm(x, g, be), tol, 1e-3, "layernorm")
      near(ops.rmsnorm(xf, gf, 1e-5), ops.rmsnorm(x, g, 1e-5), tol, 1e-3, "rmsnorm")
      near(ops.sum(xf), ops.sum(x), tol, 1e-3, "sum")
      assert.are.same(values(ops.max(xf)), values(ops.max(x)))
      assert.are.same(ops.argmax(xf):tolist(), ops.argmax(x):tolist())
      assert.are.equal("i32", ops.argmax(x).dtype)
      assert.are.equal(dt, ops.sum(x).dtype)
      local ids = gt.from({ { 0, 6 }, { 3, 9 } }, "i32")        -- 9: outside, a row of zeros
      local tbl, tblf = pair({ 7, 5 }, 12, 1)
      assert.are.same(values(ops.embedding(ids, tblf)), values(ops.embedding(ids, tbl)))
      assert.are.same({ 2, 2, 5 }, ops.embedding(ids, tbl).shape)
    end)
  end

  it("raises naming both dtypes when an op's tensors differ", function()
    local b, h, f = gt.zeros({ 4, 4 }, "bf16"), gt.zeros({ 4, 4 }, "f16"), gt.zeros({ 4, 4 })
    raises("gt.ops.add: a is bf16 but b is f32", ops.add, b, f)
    raises("gt.ops.add: b is bf16 but a is f32", ops.add, f, b)
    raises("gt.ops.linear: x is bf16 but W is f16", ops.linear, b, h)
    raises("gt.ops.linear: b is f16 but x is f32", ops.linear, f, f, gt.zeros({ 4 }, "f16"))
    raises("gt.ops.matmul: a is f16 but b is bf16", ops.matmul, h, b)
    raises("gt.ops.layernorm: x is bf16 but gamma is f32", ops.layernorm, b, gt.ones({ 4 }), gt.zeros({ 4 }))
    raises("gt.ops.embedding: ids must be i32", ops.embedding, b, b)
  end)
end)

-- -- Trees -----------------------------------------------------------------------------

describe("half tensors in trees", function()
  for _, dt in ipairs(HALF) do
    local W = gt.randn({ 32, 16 }, { seed = 20, scale = 0.2 }):to(dt):static()
    local bias = gt.randn({ 16 }, { seed = 21 }):to(dt):static()
    local function body(x, scale)
      local h = ops.linear(x:to(dt), W, bias, "gelu")
      gt.cut()
      return ops.softmax(ops.mul(h, scale)):to("f32")
    end

    it("record and replay as eager code runs (" .. dt .. ")", function()
      local step = gt.tree(body, { name = "half_" .. dt })
      local x = gt.randn({ 4, 32 }, { seed = 22 })
      local want = values(body(x, 2))
      for _ = 1, 4 do assert.are.same(want, values(step(x, 2))) end
      assert.recorded(step, 2)
      assert.replayed(step, 4)
    end)

    it("replay keyed calls with patched numbers as f32 ones do (" .. dt .. ")", function()
      local Wf, bf = W:to("f32"):static(), bias:to("f32"):static()
      local function body32(x, scale)
        local h = ops.linear(x, Wf, bf, "gelu")
        gt.cut()
        return ops.softmax(ops.mul(h, scale))
      end
      local step = gt.tree(body, { name = "half_keyed_" .. dt, key = function() return 1 end, patch = { 2 } })
      local step32 = gt.tree(body32, { name = "half_keyed_f32_" .. dt, key = function() return 1 end, patch = { 2 } })
      local x = gt.randn({ 4, 32 }, { seed = 23 })
      for i = 1, 8 do
        assert.are.same(values(body(x, i / 2)), values(step(x, i / 2)))
        step32(x, i / 2)
      end
      local k, k32 = step:stats().keyed, step32:stats().keyed
      assert.truthy(k.hits >= 4, "keyed hits: " .. k.hits)
      assert.are.same({ k32.hits, k32.misses }, { k.hits, k.misses })
    end)

    it("pad half inputs in buckets, with -inf as a pad value (" .. dt .. ")", function()
      local function rowmax(x) return ops.max(ops.transpose(x)) end
      local step = gt.tree(rowmax, { name = "half_buckets_" .. dt, buckets = { dim = 1, sizes = { 4, 8 }, pad = -math.huge, narrow = {} } })
      for _, n in ipairs { 3, 5, 3, 6 } do
        local x = ops.add(gt.randn({ n, 8 }, { seed = n }):to(dt), -10)
        assert.are.same(values(rowmax(x)), values(step(x)))
      end
      local s = tostring(step)
      assert.truthy(s:find(dt, 1, true), s)                          -- the picture names the dtype
    end)
  end
end)

-- -- safetensors -----------------------------------------------------------------------

local function le64(n)
  local b = {}
  for i = 1, 8 do b[i] = string.char(n % 256); n = math.floor(n / 256) end
  return table.concat(b)
end
local function write(path, bytes) local f = assert(io.open(path, "wb")); f:write(bytes); f:close() end
local function file_of(header, data) return le64(#header) .. header .. (data or "") end
local tmp = os.tmpname()

describe("gt.safetensors", function()
  after_each(function() os.remove(tmp) end)

  it("saves and loads every dtype, scalars, empty tensors and metadata; converts on request", function()
    local w = {
      ["h.0.w"] = gt.randn({ 3, 4 }, { seed = 30 }), b16 = gt.randn({ 5 }, { seed = 31, dtype = "bf16" }),
      h16 = gt.from({ 1.5, -2, 65504 }, "f16"), ids = gt.from({ 1, -2, 3 }, "i32"), big = gt.from({ 2 ^ 40, -5 }, "i64"),
      byte = gt.from(7, "u8"):view({}), empty = gt.zeros({ 0, 3 }, "f16"),
    }
    gt.safetensors.save(tmp, w, { format = "pt", note = "x" })
    local r = gt.safetensors.load(tmp)
    for k, t in pairs(w) do
      assert.are.equal(t.dtype, r[k].dtype, k)
      assert.are.same(t.shape, r[k].shape, k)
      assert.are.same(t:tolist(), r[k]:tolist(), k)
    end
    assert.are.same({ format = "pt", note = "x" }, r.__metadata__)
    local c = gt.safetensors.load(tmp, { dtype = "bf16", names = { "h.0.w", "h16", "ids" } })
    assert.are.same({ "__metadata__", "h.0.w", "h16", "ids" }, (function() local k = {} for n in pairs(c) do k[#k + 1] = n end table.sort(k) return k end)())
    assert.are.equal("bf16", c["h.0.w"].dtype)
    assert.are.same(values(w["h.0.w"]:to("bf16")), values(c["h.0.w"]))
    assert.are.equal("i32", c.ids.dtype)
    local f = io.open(tmp, "rb")
    local bytes = f:read("*a")
    f:close()
    local n = 0
    for i = 8, 1, -1 do n = n * 256 + bytes:byte(i) end
    assert.are.equal(0, (8 + n) % 8)                               -- the data starts 8-aligned
    assert.truthy(bytes:sub(9, 8 + n):find('^{"__metadata__":{'))
    local pos = {}
    for name, at in bytes:sub(9, 8 + n):gmatch('"([%w%.]+)":{"data_offsets":%[(%d+)') do pos[#pos + 1] = { name, tonumber(at) } end
    table.sort(pos, function(a, b) return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1]) end)
    for i, p in ipairs(pos) do pos[i] = p[1] end
    assert.are.same({ "big", "h.0.w", "ids", "b16", "empty", "h16", "byte" }, pos)   -- larger elements first, then names
  end)

  it("copies a tensor at an unaligned offset, and reads F64 and BOOL as f32 and u8", function()
    local h = '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]},' ..
      '"c":{"dtype":"F64","shape":[1],"data_offsets":[9,17]},"d":{"dtype":"BOOL","shape":[2],"data_offsets":[17,19]}}'
    local f32s = ffi.new("float[2]", 1.5, -3.25)
    local f64 = ffi.new("double[1]", 1 / 3)
    write(tmp, file_of(h, "\7" .. ffi.string(f32s, 8) .. ffi.string(f64, 8) .. "\1\0"))
    local r = gt.safetensors.load(tmp)
    assert.are.same({ 1.5, -3.25 }, r.b:tolist())
    assert.are.same({ f32(1 / 3) }, r.c:tolist())
    assert.are.same({ 1, 0 }, r.d:tolist())
    assert.are.same({ 1.5, -3.25 }, gt.safetensors.load(tmp, { dtype = "f16" }).b:tolist())
  end)

  local T = '{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
  local D8 = string.rep("\0", 8)
  local MALFORMED = {
    { "short", "\1\0\0", "too short for a safetensors file" },
    { "huge header length", le64(2 ^ 62) .. "{}", "more than the 100 MB a safetensors header may have" },
    { "header past the end", le64(1000) .. "{}", "the header length says 1000 bytes but the file has 2" },
    { "not UTF-8", file_of('{"\255":1}'), "the header is not UTF-8 (byte 3 of it)" },
    { "not an object", file_of("[1, 2]"), "does not start with '{'" },
    { "bad JSON", file_of('{"t": {'), "the header is not valid JSON" },
    { "entry not an object", file_of('{"t": 5}'), "tensor 't': its entry is 5" },
    { "unknown dtype", file_of('{"t":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}}', "x"), "unknown dtype \"F7\"" },
    { "bad shape", file_of('{"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}', "xxxx"), "shape[1] is -1" },
    { "bad offsets", file_of('{"t":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}', "xxxx"), "data_offsets must be [begin, end]" },
    { "size mismatch", file_of('{"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', D8), "F32 3 takes 12 bytes but data_offsets [0, 8] hold 8" },
    { "hole", file_of('{"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', D8), "a hole in the buffer" },
    { "overlap", file_of('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', D8), "tensors overlap" },
    { "offsets past the end", file_of(T, "\0\0\0\0"), "offsets past the end" },
    { "bytes after", file_of(T, D8 .. "zz"), "bytes after the last tensor" },
    { "metadata", file_of('{"__metadata__":{"a":1}}'), "__metadata__ must map strings to strings" },
    { "unsupported dtype", file_of('{"t":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}}', "\0\0"), "tensor 't' is I16, which gtlua has no tensors of" },
    { "text after", file_of('{} x'), "the header has text after its JSON object" },
  }
  for _, m in ipairs(MALFORMED) do
    it("refuses a malformed file (" .. m[1] .. ") naming the file and what is wrong", function()
      write(tmp, m[2])
      local ok, err = pcall(gt.safetensors.load, tmp)
      assert.is_false(ok)
      assert.truthy(err:find("half_spec.lua:%d+: gt.safetensors.load: " .. tmp:gsub("%p", "%%%0") .. ": "), err)
      assert.truthy(err:find(m[3], 1, true), err)
    end)
  end

  it("refuses a missing file, a directory, bad options and names not in the file; skips what names leaves out", function()
    raises("cannot open /nonexistent/x.safetensors: No such file or directory", gt.safetensors.load, "/nonexistent/x.safetensors")
    raises("cannot open /tmp: it is a directory", gt.safetensors.load, "/tmp")
    raises("dtype must be \"f32\", \"f16\" or \"bf16\", got \"i32\"", gt.safetensors.load, tmp, { dtype = "i32" })
    raises("unknown option \"shape\"", gt.safetensors.load, tmp, { shape = 1 })
    write(tmp, file_of('{"t":{"dtype":"I16","shape":[1],"data_offsets":[0,2]},"u":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}', "\0\0\9"))
    assert.are.same({ 9 }, gt.safetensors.load(tmp, { names = { u = true } }).u:tolist())
    assert.are.same({ 9 }, gt.safetensors.load(tmp, { names = function(n) return n == "u" end }).u:tolist())
    raises("no tensor named \"v\" (a string) in the file", gt.safetensors.load, tmp, { names = { "u", "v" } })
    raises("'x' is 5, not a tensor", gt.safetensors.save, tmp, { x = 5 })
  end)
end)

-- -- GPT-2 from a Hugging Face checkpoint ------------------------------------------------

describe("examples/gpt.lua from a Hugging Face GPT-2 checkpoint", function()
  local gpt = dofile("examples/gpt.lua")
  local HF = { ln1_g = "ln_1.weight", ln1_b = "ln_1.bias", wqkv = "attn.c_attn.weight", bqkv = "attn.c_attn.bias",
               wproj = "attn.c_proj.weight", bproj = "attn.c_proj.bias", ln2_g = "ln_2.weight", ln2_b = "ln_2.bias",
               wfc = "mlp.c_fc.weight", bfc = "mlp.c_fc.bias", wout = "mlp.c_proj.weight", bout = "mlp.c_proj.bias" }
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. dir)
  local path = dir .. "/model.safetensors"
  local cfg = gpt.config(gpt.TINY, { layers = 3 })
  local w = gpt.random_weights(cfg, 7)
  -- the checkpoint as save_pretrained writes one: a transformer. prefix, Conv1D {in, out}, a tied
  -- lm_head.weight, causal-mask buffers
  local out = { ["transformer.wte.weight"] = w.wte, ["transformer.wpe.weight"] = w.wpe, ["lm_head.weight"] = w.wte,
                ["transformer.ln_f.weight"] = w.lnf_g, ["transformer.ln_f.bias"] = w.lnf_b }
  for l = 1, cfg.layers do
    out["transformer.h." .. (l - 1) .. ".attn.bias"] = gt.ones({ 1, 1, 8, 8 }, "u8")
    for k, name in pairs(HF) do
      local v = w.layers[l][k]
      out["transformer.h." .. (l - 1) .. "." .. name] = v:dim() == 2 and ops.transpose(v) or v
    end
  end
  gt.safetensors.save(path, out, { format = "pt" })
  local f = assert(io.open(dir .. "/config.json", "w"))
  f:write('{"n_head": 4, "eos_token_id": 96, "n_layer": 3}')
  f:close()
  local prompt = gpt.random_prompt(cfg, 3, 4, 5)
  teardown(function() os.remove(path); os.remove(dir .. "/config.json"); os.remove(dir) end)

  local function run(m, tree)
    local logits = {}
    local r = gpt.generate(m, tree and gt.tree(m.step, { buckets = { dim = 1, sizes = m.cfg.buckets, narrow = { 1, 2 } } })
      or m.step, prompt, 8, { all = true, on_step = function(i, _, l) logits[i] = l:tolist() end })
    r.logits = logits
    return r
  end

  it("loads names, layouts and sizes from the file and decodes as the same weights built in Lua (f32)", function()
    local c, wf = gpt.load_hf(path)
    assert.are.same({ 3, 32, 4, 97, 64, 96, "f32" }, { c.layers, c.hidden, c.heads, c.vocab, c.ctx, c.eot, c.dtype })
    local want, got = run(gpt.new(cfg, w)), run(gpt.new(c, wf), true)
    assert.are.same(want.tokens, got.tokens)
    assert.are.same(want.logits, got.logits)
  end)

  for _, dt in ipairs(HALF) do
    it("decodes with " .. dt .. " weights exactly as f32 kernels on the rounded weights", function()
      local c, wh = gpt.load_hf(path, { dtype = dt })
      assert.are.equal(dt, wh.wte.dtype)
      assert.are.equal(dt, wh.layers[1].wqkv.dtype)
      assert.are.equal("f32", wh.layers[1].bqkv.dtype)
      local c32, wr = gpt.load_hf(path)
      for k, t in pairs(wr) do
        if type(k) == "string" and wh[k] and wh[k].dtype == dt then wr[k] = t:to(dt):to("f32"):static() end
      end
      for l = 1, c32.layers do
        for k, t in pairs(wr.layers[l]) do if t.dtype == "f32" and wh.layers[l][k].dtype == dt then wr.layers[l][k] = wr["h" .. l .. "." .. k] end end
      end
      wr.lm = wr.wte
      local want, got = run(gpt.new(c32, wr)), run(gpt.new(c, wh), true)
      assert.are.same(want.tokens, got.tokens)
      assert.are.same(want.logits, got.logits)
    end)
  end

  it("says which tensor a file lacks", function()
    gt.safetensors.save(tmp, { ["wte.weight"] = gt.zeros({ 97, 32 }) })
    raises("has no tensor wpe.weight (a GPT-2 checkpoint?)", gpt.load_hf, tmp)
    os.remove(tmp)
  end)
end)
