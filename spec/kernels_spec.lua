-- kernels_spec.lua: user kernels through gt.compile / gt.load: barriers, shuffles, dynamic shared memory, 2-D grids, errors.
local gt = require "gt"
local ffi = require "ffi"

local function flat(t) return require("gt.busted").flat(t:tolist()) end

local function error_of(f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error")
  return tostring(err)
end

local function lua_sum(a, i, j)
  local s = 0
  for k = i or 1, j or #a do s = s + a[k] end
  return s
end

local function assert_close(expected, got, tol, what)
  local d = math.abs(expected - got) / (math.abs(expected) + 1e-6)
  assert(d < tol, string.format("%s: got %.7g, expected %.7g", what or "value", got, expected))
end

describe("gt.compile kernels", function()
  it("gives the same kernels for the same source compiled at the same place: one node in a tree", function()
    local src = "__global__ void inc(float *y, const float *x, int n) {" ..
      " for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] + 1; }"
    local step = gt.tree(function(x)
      local K = gt.compile(src)                        -- in the body: every call
      local y = gt.tensor(x.shape)
      K.inc(1, 32, y, x, x.numel)
      return y
    end)
    local x = gt.from { 1, 2 }
    for _ = 1, 6 do assert.are.same({ 2, 3 }, step(x):tolist()) end
    assert.are.equal(1, step:stats().nodes)
    assert.are.equal(4, step:stats().replays)
    local here = gt.compile(src)
    assert.are_not.equal(here, gt.compile(src))            -- two places: two modules
  end)

  it("compiles kernels with short names (c, a, E) on every backend", function()
    for _, name in ipairs { "c", "a", "E" } do
      local K = gt.compile("__global__ void " .. name .. "(float *y) { y[0] = 7; }", { name = name .. ".cu" })
      local y = gt.zeros { 1 }
      K[name](1, 1, y)
      assert.are.same({ 7 }, y:tolist())
    end
  end)

  it("reduces a block through __shared__ memory and __syncthreads", function()
    local K = gt.compile [[
      __global__ void block_sum(float *out, const float *x, int n) {
        __shared__ float s[256];
        float v = 0.0f;
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += x[i];
        s[threadIdx.x] = v;
        __syncthreads();
        for (int st = blockDim.x / 2; st > 0; st >>= 1) {
          if (threadIdx.x < st) s[threadIdx.x] += s[threadIdx.x + st];
          __syncthreads();
        }
        if (threadIdx.x == 0) out[blockIdx.x] = s[0];
      }
    ]]
    local n = 5000
    local x = gt.randn({ n }, { seed = 11 })
    local out = gt.zeros { 4 }
    K.block_sum(4, 256, out, x, n)
    local xs, got = flat(x), flat(out)
    assert_close(lua_sum(xs), lua_sum(got), 1e-4, "block sum")
  end)

  it("reduces each warp with __shfl_down_sync", function()
    local K = gt.compile [[
      __global__ void warp_sums(float *out, const float *x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        float v = i < n ? x[i] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
        if ((threadIdx.x & 31) == 0) out[i / 32] = v;
      }
    ]]
    local n = 200                                -- 7 warps, the last one partly empty
    local x = gt.randn({ n }, { seed = 12 })
    local out = gt.zeros { 8 }
    K.warp_sums:config(2, 128)(out, x, n)
    local xs, got = flat(x), flat(out)
    for w = 1, 7 do
      assert_close(lua_sum(xs, (w - 1) * 32 + 1, math.min(w * 32, n)), got[w], 1e-5, "warp " .. w)
    end
    assert.are.equal(0, got[8])
  end)

  it("sizes extern __shared__ memory from :config's third argument", function()
    local K = gt.compile [[
      __global__ void reverse(float *y, const float *x, int n) {
        extern __shared__ float buf[];
        int t = threadIdx.x;
        if (t < n) buf[t] = x[t];
        __syncthreads();
        if (t < n) y[t] = buf[n - 1 - t];
      }
    ]]
    for _, n in ipairs { 1, 100, 512 } do
      local x = gt.randn({ n }, { seed = n })
      local y = gt.zeros { n }
      K.reverse:config(1, n, n * 4)(y, x, n)
      local xs, ys = flat(x), flat(y)
      for i = 1, n do assert.are.equal(xs[n + 1 - i], ys[i]) end
    end
  end)

  it("runs a 2-D grid of 2-D blocks", function()
    local K = gt.compile [[
      __global__ void coords(int *y, int W, int H) {
        int c = blockIdx.x * blockDim.x + threadIdx.x;
        int r = blockIdx.y * blockDim.y + threadIdx.y;
        if (r < H && c < W) y[r * W + c] = r * 1000 + c;
      }
    ]]
    local W, H = 21, 10
    local y = gt.zeros({ H, W }, "i32")
    K.coords({ math.ceil(W / 8), math.ceil(H / 4) }, { 8, 4 }, y, W, H)
    local l = y:tolist()
    for r = 1, H do
      for c = 1, W do assert.are.equal((r - 1) * 1000 + (c - 1), l[r][c]) end
    end
  end)

  it("adds from many blocks with atomicAdd", function()
    local K = gt.compile [[
      __global__ void count(int *c, long long n) {
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x)
          atomicAdd(c, 1);
      }
    ]]
    local c = gt.zeros({ 1 }, "i32")
    K.count(8, 64, c, 10000)
    assert.are.equal(10000, c:item())
  end)

  it("passes every scalar type", function()
    local K = gt.compile [[
      __global__ void scalars(long long *yi, float *yf, int a, unsigned b, long long c, int64_t d,
                              size_t e, float f, double g, bool h) {
        if (threadIdx.x == 0 && blockIdx.x == 0) {
          yi[0] = a; yi[1] = b; yi[2] = c; yi[3] = d; yi[4] = (long long)e; yi[5] = h ? 1 : 0;
          yf[0] = f; yf[1] = (float)(g * 3.0);
        }
      }
    ]]
    local yi, yf = gt.zeros({ 6 }, "i64"), gt.zeros { 2 }
    K.scalars(1, 1, yi, yf, -3, 7, -2 ^ 40, 2 ^ 40, 12345, 0.5, 1 / 3, true)
    local l = yi:tolist()
    for i = 1, 6 do l[i] = tonumber(l[i]) end
    assert.are.same({ -3, 7, -2 ^ 40, 2 ^ 40, 12345, 1 }, l)
    assert.are.same({ 0.5, 1 }, yf:tolist())
  end)

  it("finds a kernel declared extern \"C\"", function()
    local K = gt.compile [[
      extern "C" __global__ void scale_c(float *y, const float *x, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i];
      }
    ]]
    assert.is_not_nil(K.scale_c)
    local x = gt.from { 1, 2, 3 }
    local y = gt.zeros { 3 }
    K.scale_c(1, 32, y, x, 2, 3)
    assert.are.same({ 2, 4, 6 }, y:tolist())
  end)

  it("finds every kernel of a source, skipping device helpers", function()
    local K = gt.compile [[
      __device__ float twice(float v) { return 2.0f * v; }
      __global__ void k_one(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] = twice(1.0f); }
      __global__ void k_two(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] = twice(2.0f); }
    ]]
    assert.is_not_nil(K.k_one)
    assert.is_not_nil(K.k_two)
    assert.is_nil(rawget(K, "twice"))
    -- a name that is not a kernel raises, listing the kernels there are
    local ok, err = pcall(function() return K.twice end)
    assert.is_false(ok)
    assert.matches("kernels_spec.lua:%d+: no kernel 'twice' in .*; its kernels: k_one, k_two", err)
    local y = gt.zeros { 2 }
    K.k_two(1, 2, y, 2)
    assert.are.same({ 4, 4 }, y:tolist())
  end)

  it("gives each kernel's lean launcher (gt.ops's) arrays of its own parameter count", function()
    -- busted memoizes ffi.typeof by its first argument: a "$" size parameter
    -- would hand the second kernel the first one's argument arrays
    local K = gt.compile [[
      __global__ void lean_two(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.0f; }
      __global__ void lean_six(float *y, const float *x, int n, float a, float b, float c) {
        if (threadIdx.x < n) y[threadIdx.x] = a * x[threadIdx.x] + b + c;
      }
    ]]
    local st2, run2 = K.lean_two:_lean(1, 32, 0, nil, 3)
    local st6, run6 = K.lean_six:_lean(1, 32, 0, nil, nil, 3, 2, 1, 0.5)
    assert.is_true(ffi.sizeof(st6) > ffi.sizeof(st2))
    local x, y2, y6 = gt.from { 1, 2, 3 }, gt.zeros { 3 }, gt.zeros { 3 }
    run2(st2, y2)
    run6(st6, y6, x)
    assert.are.same({ 1, 1, 1 }, y2:tolist())
    assert.are.same({ 3.5, 5.5, 7.5 }, y6:tolist())
  end)
end)

describe("gt.load", function()
  it("loads the kernel library relative to the working directory or $GTLUA_HOME", function()
    local K = gt.load("kernels/elementwise.cu")
    for _, name in ipairs { "fill_f32", "fill_i32", "fill_i64", "fill_u8", "add_f32", "relu_f32", "copy_f32" } do
      assert.is_not_nil(K[name], name)
    end
    local y = gt.zeros({ 5 }, "i32")
    K.fill_i32(1, 256, y, 5, 9)
    assert.are.same({ 9, 9, 9, 9, 9 }, y:tolist())
  end)

  it("inlines #include \"file\" of a file beside the .cu; messages name the header's lines", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p '" .. dir .. "'")
    local function spit(name, text) local f = assert(io.open(dir .. "/" .. name, "w")); f:write(text); f:close() end
    spit("twice.cuh", "__device__ float twice(float v) { return 2 * v; }\n")
    spit("main.cu", '#include "twice.cuh"\n__global__ void k(float *y) { y[0] = twice(3); }\n')
    spit("bad.cuh", "// line 1\n__device__ float bad(float v) { return v + undefined_y; }\n")
    spit("bad.cu", '#include "bad.cuh"\n__global__ void k(float *y) { y[0] = 1; }\n')
    local y = gt.zeros({ 1 })
    gt.load(dir .. "/main.cu").k(1, 1, y)
    local ok, err = pcall(gt.load, dir .. "/bad.cu")
    os.execute("rm -rf '" .. dir .. "'")
    assert.are.same({ 6 }, y:tolist())
    assert.is_false(ok)
    assert.truthy(err:find("bad.cuh:2", 1, true) or err:find("bad.cuh(2)", 1, true), err)
  end)
end)

-- The cpu backend compiles with the host's C++ compiler, NVRTC with no include path and no C++
-- standard library: what one refuses the other must refuse too, and what device code has works on both.
describe("kernel sources NVRTC compiles", function()
  local NVRTC = "NVRTC (the compiler of the cuda backend) has no C++ standard library"

  it("refuses host-only headers and std:: names on every backend, naming the line and what device code has", function()
    for _, c in ipairs {
      { "#include <vector>\n__global__ void k(float *y) { y[0] = 1; }", 1, "#include <vector>: " },
      { "// a kernel\n#include <iostream>\n__global__ void k(float *y) { y[0] = 1; }", 2, "#include <iostream>: " },
      { "#include <string>\n__global__ void k(float *y) { y[0] = 1; }", 1, "#include <string>: " },
      { "__global__ void k(float *y) {\n  std::vector<float> v(3, 2.0f); y[0] = v[1];\n}", 2, "std::vector: " },
      { "__global__ void k(float *y) { std::string s(\"ab\"); y[0] = s.size(); }", 1, "std::string: " },
      { "__global__ void k(float *y) { std::map<int, float> m; y[0] = m.size(); }", 1, "std::map: " },
      { "__global__ void k(float *y) { y[0] = std :: min(y[1], y[2]); }", 1, "std::min: " },
    } do
      local line = debug.getinfo(1, "l").currentline + 1
      local ok, err = pcall(gt.compile, c[1])
      assert.is_false(ok, c[1])
      assert.truthy(err:find("^spec/kernels_spec%.lua:" .. line .. ": kernel source line " .. c[2] .. ": "), err)
      assert.truthy(err:find(c[3] .. NVRTC, 1, true), err)
      assert.truthy(err:find("so a GPU would refuse this kernel, and gtlua refuses it on every backend", 1, true), err)
      assert.truthy(err:find("int32_t", 1, true), err)                   -- what to write instead
      assert.are.equal(1, select(2, err:gsub("kernels_spec%.lua:", "")), err)
    end
  end)

  it("compiles and runs what CUDA device code has: <cstdint>, <cmath>-style math, limits, templates, printf", function()
    local K = gt.compile [[
// std::vector in a comment, and "std::string" in a string, are not code
#include <cstdint>
#include <cmath>
#include <math.h>
#include <climits>
#include <cfloat>
#include <cstdio>
template <class T> __device__ T sq(T v) { return v * v; }
__global__ void k(float *y, const char *tag, int n) {
  int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  uint64_t big = UINT64_MAX;
  if (i < n) y[i] = sq(sqrtf((float)i)) + fminf(expf(0.0f), 2.0f) + (INT_MAX > 0) + (big > 0) + FLT_EPSILON * 0;
  if (n < 0) printf("never %s\n", "std::string");
}]]
    local y = gt.zeros { 5 }
    K.k(1, 32, y, gt.zeros({ 1 }, "u8"), 5)
    assert.are.same({ 3, 4, 5, 6, 7 }, y:tolist())
  end)

  it("names an inlined header's own line, and leaves CUDA's headers to the compilers", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p '" .. dir .. "'")
    local function spit(name, text) local f = assert(io.open(dir .. "/" .. name, "w")); f:write(text); f:close() end
    spit("host.cuh", "// line 1\n// line 2\n#include <algorithm>\n")
    spit("main.cu", '#include "host.cuh"\n__global__ void k(float *y) { y[0] = 1; }\n')
    local ok, err = pcall(gt.load, dir .. "/main.cu")
    os.execute("rm -rf '" .. dir .. "'")
    assert.is_false(ok)
    assert.truthy(err:find("host.cuh:3: #include <algorithm>: " .. NVRTC, 1, true), err)
    local ok2, err2 = pcall(gt.compile, "#include <cuda_fp16.h>\n__global__ void k(float *y) { y[0] = 1; }")
    if not ok2 then assert.falsy(err2:find(NVRTC, 1, true), err2) end   -- (not refused here: the compilers decide)
  end)
end)

describe("kernel errors", function()
  local K = gt.compile [[
    __global__ void saxpy(float *y, const float *x, float a, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) y[i] += a * x[i];
    }
  ]]

  it("raise a compile error with the compiler's message and the file name", function()
    local path = os.tmpname() .. "_broken_kernel.cu"
    local f = assert(io.open(path, "w"))
    f:write("__global__ void broken(float *y) {\n  y[0] = undefined_thing_42;\n}\n")
    f:close()
    local err = error_of(gt.load, path)
    os.remove(path)
    assert.matches("broken_kernel.cu", err, 1, true)
    assert.matches("undefined_thing_42", err, 1, true)
  end)

  it("raise a compile error from gt.compile with the compiler's message", function()
    local err = error_of(gt.compile, "__global__ void oops(float *y) { y[0] = 1.0f }\n")
    assert.is_true(#err > 0)
    assert.matches("expected", err, 1, true)       -- "expected ';'" from g++, clang and NVRTC alike
    -- the source named by the gt.compile's file:line (past pcall), its lines as the source's own
    assert.matches("kernels_spec%.lua:%d+: kernel source line 1", err)
  end)

  it("name the kernel on a wrong argument count", function()
    local y, x = gt.zeros { 4 }, gt.zeros { 4 }
    local err = error_of(K.saxpy, 1, 32, y, x, 2.0)
    assert.matches("saxpy", err, 1, true)
    assert.matches("'n'", err, 1, true)
  end)

  it("name the kernel when given too many arguments", function()
    local y, x = gt.zeros { 4 }, gt.zeros { 4 }
    assert.matches("saxpy", error_of(K.saxpy, 1, 32, y, x, 2.0, 4, 5), 1, true)
    assert.matches("saxpy", error_of(K.saxpy:config(1, 32), y, x, 2.0, 4, 5), 1, true)
  end)

  it("name the kernel and the parameter on a wrong dtype", function()
    local y, xi = gt.zeros { 4 }, gt.zeros({ 4 }, "i32")
    local err = error_of(K.saxpy, 1, 32, y, xi, 2.0, 4)
    assert.matches("saxpy", err, 1, true)
    assert.matches("'x'", err, 1, true)
  end)

  it("name the kernel and the parameter when a pointer gets a non-tensor", function()
    local x = gt.zeros { 4 }
    local err = error_of(K.saxpy, 1, 32, 3.5, x, 2.0, 4)
    assert.matches("saxpy", err, 1, true)
    assert.matches("'y'", err, 1, true)
    err = error_of(K.saxpy:config(1, 32), x, { 1, 2 }, 2.0, 4)
    assert.matches("'x'", err, 1, true)
  end)

  it("name the parameter when a scalar gets a tensor", function()
    local x = gt.zeros { 4 }
    local err = error_of(K.saxpy, 1, 32, x, x, x, 4)
    assert.matches("saxpy", err, 1, true)
    assert.matches("'a'", err, 1, true)
  end)

  it("leave the output untouched when the arguments are rejected", function()
    local y = gt.full({ 4 }, 7)
    pcall(K.saxpy, 1, 32, y, gt.zeros({ 4 }, "i32"), 2.0, 4)
    assert.are.same({ 7, 7, 7, 7 }, y:tolist())
  end)

  it("takes LuaJIT's 64-bit integers (3LL, 4ULL) for 64-bit integer parameters, exactly", function()
    local K = gt.compile([[
__global__ void s64(long long *y, long long a, size_t b) { y[0] = a; y[1] = (long long)b; }
]], { name = "s64.cu" })
    local y = gt.zeros({ 2 }, "i64")
    K.s64(1, 1, y, 3LL, 4ULL)
    assert.are.same({ 3, 4 }, y:tolist())
    K.s64(1, 1, y, -5, 6)
    assert.are.same({ -5, 6 }, y:tolist())
    assert.has_error(function() K.s64(1, 1, y, 1, -1LL) end)
  end)
end)
