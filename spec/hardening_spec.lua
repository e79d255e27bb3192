-- hardening_spec.lua - bad input and bad kernels become Lua errors a user can act on,
-- and the process (and the REPL) goes on: launch arguments, kernel names, faulting
-- kernels on the cpu backend, address-space reservations, the soak script.
local gt = require "gt"
local S = require "spec.support"
local shq, spit, gtlua = S.shq, S.spit, S.gtlua

local function error_of(f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error")
  return tostring(err)
end

local function has(s, part) return s:find(part, 1, true) ~= nil end

local function tmpfile(text)
  local path = os.tmpname()
  spit(path, text)
  return path
end

describe("launch arguments", function()
  local K = gt.compile([[
    __global__ void put(float *y, int n, unsigned u, long long l) { if (threadIdx.x == 0 && blockIdx.x == 0) y[0] = n; }
  ]], { name = "put.cu" })
  local y = gt.zeros({ 4 })

  it("refuses grid and block sizes that are not integers in 1..2^31-1 instead of wrapping them", function()
    local e = error_of(K.put, 2 ^ 32 + 1, 1, y, 1, 1, 1)
    assert.truthy(has(e, "kernel 'put': grid must be a positive integer or {x, y, z}"), e)
    assert.truthy(has(e, "grid is 4294967297, outside 1..2147483647"), e)
    e = error_of(K.put, 1, 0, y, 1, 1, 1)
    assert.truthy(has(e, "block is 0, outside 1..2147483647"), e)
    e = error_of(K.put, 1, -1, y, 1, 1, 1)
    assert.truthy(has(e, "block is -1, outside"), e)
    e = error_of(K.put, math.huge, 1, y, 1, 1, 1)
    assert.truthy(has(e, "grid is inf, not an integer"), e)
  end)

  it("says which component of a {x, y, z} size is wrong, not 'got table: 0x...'", function()
    local e = error_of(K.put, { 2.5, 1 }, 1, y, 1, 1, 1)
    assert.truthy(has(e, "grid[1] is 2.5, not an integer"), e)
    assert.falsy(has(e, "table: 0x"), e)
    e = error_of(K.put, 1, { 32, "4" }, y, 1, 1, 1)
    assert.truthy(has(e, "block[2] is a string"), e)
    e = error_of(K.put, "8", 1, y, 1, 1, 1)
    assert.truthy(has(e, "grid is a string"), e)
  end)

  it("keeps the device limits on every backend (grid y/z, threads per block)", function()
    local e = error_of(K.put, { 1, 70000 }, 1, y, 1, 1, 1)
    assert.truthy(has(e, "kernel 'put': grid 1x70000x1 exceeds the device limits"), e)
    e = error_of(K.put, 1, 2048, y, 1, 1, 1)
    assert.truthy(has(e, "kernel 'put': block 2048x1x1 exceeds the device limits"), e)
    e = error_of(K.put, 1, { 32, 32, 2 }, y, 1, 1, 1)
    assert.truthy(has(e, "at most 1024 threads in all"), e)
  end)

  it("refuses a shared memory size that would wrap to 0 bytes", function()
    local e = error_of(K.put.config, K.put, 1, 1, 2 ^ 40)
    assert.truthy(has(e, "kernel 'put': shared memory must be a whole number of bytes in 0..4294967295"), e)
    assert.truthy(has(e, "got 1099511627776"), e)
    e = error_of(K.put.config, K.put, 1, 1, 10.5)
    assert.truthy(has(e, "got 10.5"), e)
  end)

  it("refuses shared memory beyond what a device allows on the cpu backend too #cpu", function()
    if gt.backend() ~= "cpu" then return pending("cpu backend only") end
    local e = error_of(K.put:config(1, 1, 2 ^ 20), y, 1, 1, 1)
    assert.truthy(has(e, "1048576 bytes of dynamic shared memory"), e)
  end)

  it("refuses integer scalars that are not integers in the parameter's range, naming kernel and parameter", function()
    local e = error_of(K.put, 1, 1, y, math.huge, 1, 1)
    assert.truthy(has(e, "kernel 'put': argument #2 ('n', int) expects an integer in -2147483648..2147483647, got inf"), e)
    e = error_of(K.put, 1, 1, y, 1.5, 1, 1)
    assert.truthy(has(e, "argument #2 ('n', int) expects an integer in -2147483648..2147483647, got 1.5"), e)
    e = error_of(K.put, 1, 1, y, 2 ^ 31, 1, 1)
    assert.truthy(has(e, "got 2147483648"), e)
    e = error_of(K.put, 1, 1, y, 0 / 0, 1, 1)
    assert.truthy(has(e, "argument #2 ('n', int)"), e)
    e = error_of(K.put, 1, 1, y, 1, -1, 1)
    assert.truthy(has(e, "argument #3 ('u', unsigned) expects an integer in 0..4294967295, got -1"), e)
    e = error_of(K.put, 1, 1, y, 1, 1, 2 ^ 63)
    assert.truthy(has(e, "argument #4 ('l', long long) expects an integer in -2^63..2^63-1"), e)
    e = error_of(K.put:config(1, 1), y, -math.huge, 1, 1)
    assert.truthy(has(e, "argument #2 ('n', int)"), e)
  end)

  it("still launches after all those errors", function()
    K.put(1, 1, y, 2 ^ 31 - 1, 2 ^ 32 - 1, -2 ^ 63)
    K.put({ 2, 1, 1 }, { 32 }, y, 7, 0, 0)
    assert.equal(7, y:tolist()[1])
  end)
end)

describe("kernel source names", function()
  it("escapes quotes and backslashes of a name in #line", function()
    local K = gt.compile("__global__ void k(float *y) { y[0] = 1; }", { name = 'we"ird\\name.cu' })
    local y = gt.zeros({ 1 })
    K.k(1, 1, y)
    assert.equal(1, y:tolist()[1])
    local e = error_of(gt.compile, "__global__ void k(float *y) { y[0] = undefined_x; }", { name = 'we"ird.cu' })
    assert.truthy(has(e, 'we"ird.cu:1'), e)
    assert.truthy(has(e, "undefined_x"), e)
  end)

  it("compiles kernels of a script whose path holds a quote", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. shq(dir .. '/a"b')) == 0)
    local script = dir .. '/a"b/s.lua'
    spit(script, 'local K = gt.compile("__global__ void k(float *y) { y[0] = 3; }")\n' ..
      'local y = gt.zeros({1}); K.k(1, 1, y); print(y:tolist()[1])\n')
    local status, out, err = gtlua(shq(script))
    os.execute("rm -rf " .. shq(dir))
    assert.equal(0, status, err)
    assert.equal("3\n", out)
  end)
end)
