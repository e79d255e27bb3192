-- The cuda backend: CUBIN cache, large dynamic shared memory, concurrency in one graph, agreement with cpu.
local gt = require "gt"
require "gt.busted"

local bin = os.getenv("GTLUA_BIN")
local function run(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("*a")
  local ok = p:close()
  return out, ok
end

describe("the cuda backend #gpu", function()
  it("runs on a CUDA device", function()
    assert.are.same("cuda", gt.backend())
    local d = gt.device()
    assert.is_true(d.memory > 0 and d.sms > 0 and d.nvrtc > 0)
  end)

  it("caches CUBINs on disk: a second process compiles nothing", function()
    local tag = tostring(os.time()) .. tostring(math.random(1e9))
    local src = "// " .. tag .. "\n__global__ void k(float *y) { y[threadIdx.x] = 1.0f; }\n"
    local f = os.tmpname()
    local h = io.open(f, "w"); h:write(src); h:close()
    local script = ("local K = gt.load(%q); local c, hit = gt.compile_counts(); io.write(c, ' ', hit)"):format(f)
    local first = run(("%s --backend=cuda -e %q"):format(bin, script))
    local second = run(("%s --backend=cuda -e %q"):format(bin, script))
    os.remove(f)
    assert.are.same("1 0", first:match("%d+ %d+$"))
    assert.are.same("0 1", second:match("%d+ %d+$"))
  end)

  it("launches kernels with more than 48 KiB of dynamic shared memory, eagerly and in a graph", function()
    local K = gt.compile([[
      __global__ void big_smem(float *y, int n) {
        extern __shared__ float s[];
        for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = (float)i;
        __syncthreads();
        float acc = 0;
        for (int i = threadIdx.x; i < n; i += blockDim.x) acc += s[n - 1 - i];
        y[threadIdx.x] = acc;
      }]])
    local n = 24 * 1024                                 -- 96 KiB of floats
    local f = K.big_smem:config(1, 256, n * 4)
    local function expected()
      local e = {}
      for t = 0, 255 do local a = 0 for i = t, n - 1, 256 do a = a + (n - 1 - i) end e[t + 1] = a end
      return e
    end
    local y = gt.zeros{ 256 }
    f(y, n)
    assert.tensor_near(expected(), y, 1e-6)
    local step = gt.tree(function() local o = gt.zeros{ 256 }; f(o, n); return o end)
    for _ = 1, 5 do assert.tensor_near(expected(), step(), 1e-6) end
    assert.replayed(step, 3)
  end)

  it("runs independent kernels of one segment concurrently (edges from read/write sets) #timing", function()
    local K = gt.compile([[
      __global__ void spin(float *out, const float *in, long long cycles) {
        long long start = clock64();
        while (clock64() - start < cycles) { }
        out[0] = in[0] + 1.0f;
      }]])
    local cycles = 4000000
    local a, b = gt.zeros{ 1 }, gt.zeros{ 1 }
    local indep = gt.tree(function()
      local x, y = gt.tensor{ 1 }, gt.tensor{ 1 }
      K.spin(1, 1, x, a, cycles); K.spin(1, 1, y, b, cycles)
      return x, y
    end)
    local chain = gt.tree(function()
      local x, y = gt.tensor{ 1 }, gt.tensor{ 1 }
      K.spin(1, 1, x, a, cycles); K.spin(1, 1, y, x, cycles)
      return x, y
    end)
    gt.profile(true)
    for _ = 1, 4 do indep(); chain() end
    gt.profile(false)
    local ti, tc = indep:stats().node[0].gpu_us, chain:stats().node[0].gpu_us
    assert.is_true(ti > 0 and tc > 0)
    assert.is_true(ti < 0.75 * tc, ("independent %.0f us vs dependent %.0f us"):format(ti, tc))
    local x, y = chain()
    assert.are.same({ 1, 2 }, { x:item(), y:item() })
  end)

  it("agrees with the cpu backend on the same kernels (differential)", function()
    local script = [[
      local x = gt.randn({ 33, 70 }, { seed = 3 })
      local W = gt.randn({ 70, 45 }, { seed = 4, scale = 0.1 })
      local b = gt.randn({ 45 }, { seed = 5 })
      local y = gt.ops.softmax(gt.ops.linear(x, W, b, "gelu"))
      local z = gt.ops.layernorm(y, gt.ones{ 45 }, gt.zeros{ 45 })
      local out = {}
      for _, v in ipairs(z:view{ -1 }:tolist()) do out[#out + 1] = string.format("%.7g", v) end
      io.write(table.concat(out, " "))
    ]]
    local cpu, ok = run(("%s --backend=cpu -e %q"):format(bin, script))
    if not ok then pending("no cpu backend here (no host C++ compiler?): " .. cpu:sub(1, 200)) return end
    local cuda = run(("%s --backend=cuda -e %q"):format(bin, script))
    local a, c = {}, {}
    for v in cpu:gmatch("%S+") do a[#a + 1] = tonumber(v) end
    for v in cuda:gmatch("%S+") do c[#c + 1] = tonumber(v) end
    assert.are.same(33 * 45, #a)
    assert.tensor_near(a, c, 1e-3)
  end)
end)
