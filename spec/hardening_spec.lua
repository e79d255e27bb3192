-- hardening_spec.lua - bad input and bad kernels become Lua errors a user can act on,
-- and the process (and the REPL) goes on: launch arguments, kernel names, faulting
-- kernels on the cpu backend, address-space reservations, the soak script.
local gt = require "gt"
require "gt.busted"
local S = require "spec.support"
local shq, spit, gtlua, tmpfile = S.shq, S.spit, S.gtlua, S.tmpfile

local function error_of(f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error")
  return tostring(err)
end

local function has(s, part) return s:find(part, 1, true) ~= nil end

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

  it("counts the arguments of a launch with too many or too few, bound or not", function()
    local e = error_of(K.put, 1, 1, y, 1, 1, 1, 9)
    assert.truthy(has(e, "takes 4 arguments, got 5"), e)
    e = error_of(K.put:config(1, 1), y, 1, 1, 1, 9, 9, 9)
    assert.truthy(has(e, "takes 4 arguments, got 7"), e)
    e = error_of(K.put:config(1, 1), y, 1, 1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9)
    assert.truthy(has(e, "takes 4 arguments, got at least 12"), e)
    e = error_of(K.put, 1, 1, y, 1)
    assert.truthy(has(e, "takes 4 arguments: argument #3 ('u', unsigned) is missing"), e)
  end)

  it("still launches after all those errors", function()
    K.put(1, 1, y, 2 ^ 31 - 1, 2 ^ 32 - 1, -2 ^ 63)
    K.put({ 2, 1, 1 }, { 32 }, y, 7, 0, 0)
    assert.equal(7, y:tolist()[1])
  end)
end)

describe("the REPL after bad launch arguments and odd kernel names", function()
  it("reports each error and goes on", function()
    local input = table.concat({
      [[K = gt.compile("__global__ void k(float *y, int n) { y[0] = n; }", {name = 'we"ird.cu'})]],
      "y = gt.zeros({2})",
      "K.k(2^32 + 1, 1, y, 1)",
      "K.k({2.5, 1}, 1, y, 1)",
      "K.k:config(1, 1, 2^40)",
      "K.k(1, 1, y, math.huge)",
      "K.k(1, 1, y, 1.5)",
      "K.k(1, 1, y, 9)",
      "print(y:tolist()[1])",
    }, "\n") .. "\n"
    local status, out, err = gtlua("-i", { stdin = input })
    assert.equal(0, status, err)
    assert.truthy(has(err, "grid is 4294967297, outside 1..2147483647"), err)
    assert.truthy(has(err, "grid[1] is 2.5, not an integer"), err)
    assert.truthy(has(err, "shared memory must be a whole number of bytes"), err)
    assert.truthy(has(err, "argument #2 ('n', int) expects an integer in -2147483648..2147483647, got inf"), err)
    assert.truthy(has(err, "got 1.5"), err)
    assert.truthy(has(out, "> 9\n"), out)
  end)
end)

describe("kernel source names", function()
  it("escapes quotes and backslashes of a name in #line", function()
    local K = gt.compile("__global__ void k(float *y) { y[0] = 1; }", { name = 'we"ird\\name.cu' })
    local y = gt.zeros({ 1 })
    K.k(1, 1, y)
    assert.equal(1, y:tolist()[1])
    local e = error_of(gt.compile, "__global__ void k(float *y) { y[0] = undefined_x; }", { name = 'we"ird.cu' })
    assert.truthy(has(e, 'we"ird.cu:1') or has(e, 'we"ird.cu(1)'), e)   -- g++ or NVRTC style
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

describe("a kernel that faults on the cpu backend", function()
  local K = gt.compile([[
    __global__ void poke(float *y, const float *x, long long at) { if (threadIdx.x == 0) y[at] = x[0]; }
    __global__ void over(float *y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 1; }
    __global__ void divide(int *y, int d) { y[threadIdx.x] = 100 / d; }
    __global__ void deep(float *y, int n) {
      volatile float big[100000];
      for (int i = 0; i < 100000; i++) big[i] = i;
      __syncthreads();
      y[threadIdx.x] = big[n];
    }
  ]], { name = "faults.cu" })
  local function cpu_only()
    if gt.backend() ~= "cpu" then pending("the cpu backend's fault handler") return false end
    return true
  end

  -- Elements from y's start, among wanted, whose address no writable mapping
  -- of this process holds (/proc/self/maps), so that a write there faults:
  -- what is mapped follows what ran before in the process (on a loaded
  -- machine 4 GB past y was writable in some suite runs, and the write
  -- landed there instead of faulting).
  local function unmapped(y, wanted)
    local base = tonumber(y._b.addr) + y._off
    local maps = {}
    for line in io.lines("/proc/self/maps") do
      local lo, hi, perm = line:match("^(%x+)-(%x+) (%S+)")
      if perm:find("w", 1, true) then maps[#maps + 1] = { tonumber(lo, 16), tonumber(hi, 16) } end
    end
    for _, at in ipairs(wanted) do
      local a, free = base + at * 4, true
      for _, m in ipairs(maps) do if a >= m[1] - 4096 and a < m[2] + 4096 then free = false break end end
      if free and a > 0 and a < 2 ^ 47 then return at end
    end
    error("no address without a writable mapping among the offsets tried")
  end

  it("raises a Lua error naming the kernel, the access and the buffer parameter; later launches work", function()
    if not cpu_only() then return end
    local x, y = gt.from({ 5 }), gt.zeros({ 4 })
    local at = unmapped(y, { 1e9, 2e9, 3e9, 5e9, 7e9, 1.1e10, 1.3e10, 1.7e10 })
    local e = error_of(K.poke, 1, 32, y, x, at)
    assert.truthy(has(e, "cpu: kernel 'poke' made an invalid memory write at address 0x"), e)
    assert.truthy(has(e, string.format("%.0f bytes past the start of parameter 'y'", at * 4)), e)
    assert.truthy(has(e, "in block (0, 0, 0) thread (0, 0, 0)"), e)
    assert.truthy(has(e, "later launches work"), e)
    assert.truthy(has(e, "GTLUA_CPU_CHECK=1"), e)   -- the limits of the check, and the way round them
    e = error_of(K.poke, 1, 32, y, x, unmapped(y, { -1e8, -2e8, -3e8, -5e8, -7e8, -1.1e9 }))
    assert.truthy(has(e, "made an invalid memory read") or has(e, "before the start of parameter"), e)
    K.poke(1, 32, y, x, 2)
    assert.same({ 0, 0, 5, 0 }, y:tolist())
  end)

  it("catches an overrun of a buffer over 1 MiB by one element (it ends at a guard page)", function()
    if not cpu_only() then return end
    local n = 300000
    local y = gt.zeros({ n })
    local e = error_of(K.over, math.ceil((n + 1) / 256), 256, y, n + 1)
    assert.truthy(has(e, "kernel 'over' made an invalid memory write"), e)
    assert.truthy(has(e, n * 4 .. " bytes past the start of parameter 'y'"), e)
    assert.truthy(has(e, "Parameter 'y' holds " .. n * 4 .. " bytes: the access is 0 bytes past its end."), e)
    K.over(math.ceil(n / 256), 256, y, n)
    assert.equal(1, y:tolist()[n])
  end)

  it("turns an integer division by zero into an error", function()
    if not cpu_only() then return end
    local y = gt.zeros({ 32 }, "i32")
    local e = error_of(K.divide, 1, 32, y, 0)
    assert.truthy(has(e, "cpu: kernel 'divide' made an integer division by zero"), e)
    K.divide(1, 32, y, 4)
    assert.equal(25, y:tolist()[32])
  end)

  it("reports a thread whose stack overflowed", function()
    if not cpu_only() then return end
    local e = error_of(K.deep, 1, 32, gt.zeros({ 32 }), 3)
    assert.truthy(has(e, "kernel 'deep'") and has(e, "a thread's stack overflowed"), e)
  end)

  it("fails a tree call that faults, and the tree replays afterwards", function()
    if not cpu_only() then return end
    local step = gt.tree(function(x, at)
      local y = gt.zeros({ 4 })
      K.poke(1, 32, y, x, at)
      return y
    end)
    local x = gt.from({ 7 })
    for _ = 1, 3 do assert.equal(7, step(x, 0):tolist()[1]) end
    local e = error_of(step, x, 1e9)
    assert.truthy(has(e, "kernel 'poke' made an invalid memory write"), e)
    for _ = 1, 3 do assert.equal(7, step(x, 0):tolist()[1]) end
  end)

  it("with GTLUA_CPU_CHECK=1 catches a one-element overrun of a small buffer", function()
    if not cpu_only() then return end
    local script = tmpfile([[
      local K = gt.compile("__global__ void over(float *y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 1; }")
      local y = gt.zeros({ 1000 })
      print(pcall(K.over, 4, 256, y, 1001))
      K.over(4, 256, y, 1000)
      print(y:tolist()[1000])
    ]])
    local status, out, err = gtlua(shq(script), { env = "GTLUA_BACKEND=cpu GTLUA_CPU_CHECK=1" })
    os.remove(script)
    assert.equal(0, status, err)
    assert.truthy(has(out, "false\t") and has(out, "over: cpu: kernel 'over' made an invalid memory write"), out)
    assert.truthy(has(out, "4000 bytes past the start of parameter 'y'"), out)
    assert.truthy(has(out, "Parameter 'y' holds 4000 bytes: the access is 0 bytes past its end."), out)
    assert.truthy(has(out, "\n1\n"), out)
  end)

  it("leaves the REPL running", function()
    if not cpu_only() then return end
    local input = 'K = gt.compile("__global__ void poke(float *y, long long at) { y[at] = 1; }")\n' ..
      "y = gt.zeros({4})\nK.poke(1, 1, y, 1e9)\nK.poke(1, 1, y, 1e10)\nK.poke(1, 1, y, 3)\nprint(y:tolist()[4])\n"
    local status, out, err = gtlua("-i", { env = "GTLUA_BACKEND=cpu", stdin = input })
    assert.equal(0, status, err)
    assert.truthy(has(err, "kernel 'poke' made an invalid memory write"), err)
    assert.truthy(has(out, "> 1\n"), out)
  end)
end)

describe("tree options", function()
  local f = function(x) return gt.ops.relu(x) end
  local function bad(opts, ...)
    local e = error_of(function() local t = gt.tree(f, opts) return t end)
    for _, part in ipairs({ ... }) do assert.truthy(has(e, part), e) end
    assert.falsy(has(e, "cannot convert"), e)     -- not an FFI conversion error
    return e
  end

  it("name the option, what it got and what is allowed, for every option", function()
    bad({ warmup = "x" }, "option warmup must be a whole number in 0..2147483647", 'got "x" (a string)')
    bad({ warmup = 1.5 }, "option warmup must be a whole number", "got 1.5")
    bad({ warmup = -1 }, "option warmup", "got -1")
    bad({ warmup = 0 / 0 }, "option warmup", "got nan")
    bad({ max_recordings = 2 ^ 32 }, "option max_recordings must be a whole number in 0..2147483647 or math.huge", "got 4294967296")
    bad({ max_recordings = 0.5 }, "option max_recordings", "got 0.5")
    bad({ on_limit = "eagre" }, 'option on_limit must be "eager"', '"error"', 'got "eagre"')
    bad({ on_limit = true }, "option on_limit", "got true")
    bad({ copy_inputs = 1 }, "option copy_inputs must be true or false", "got 1")
    bad({ name = 3 }, "option name must be a non-empty string", "got 3")
    bad({ name = "" }, "option name must be a non-empty string", 'got "" (a string)')
    bad({ warn_shapes = 0 }, "option warn_shapes must be a whole number >= 1", "or false", "got 0")
    bad({ buckets = 3 }, "option buckets must be {dim = d, sizes = {...}} or a list of them", "got 3")
    bad({ buckets = { dim = 0, sizes = { 1 } } }, "option buckets.dim must be a dimension", "got 0")
    bad({ buckets = { sizes = { 4, 2 } } }, "option buckets.sizes[2] must be increasing", "the size before it is 4", "got 2")
    bad({ buckets = { sizes = {} } }, "option buckets.sizes must be a non-empty list", "got a table")
    bad({ buckets = { { sizes = { 1 } }, 5 } }, "option buckets[2] must be a table", "got 5")
    bad({ buckets = { sizes = { 1 }, dims = 1 } }, 'option buckets has the unknown key "dims"')
    bad({ key = 3 }, "option key must be a function", "got 3")
    bad({ key = f, patch = { 0 } }, "option patch[1] must be an argument position", "got 0")
    bad({ key = f, patch = 2 }, "option patch must be a list of argument positions", "got 2")
    bad({ key = f, verify = 0.5 }, "option verify must be a whole number >= 1", "got 0.5")
    bad({ patch = { 2 } }, "option patch needs key = function")
    bad("fast", "the options must be a table", 'got "fast"')
  end)

  it("refuse unknown option names, with a did-you-mean", function()
    bad({ warmpu = 1 }, "unknown option 'warmpu' (did you mean 'warmup'?)", "Options: name, warmup, max_recordings")
    bad({ max_recording = 2 }, "did you mean 'max_recordings'?")
    bad({ Buckets = {} }, "did you mean 'buckets'?")
    local e = bad({ zzzzzzzz = 1 }, "unknown option 'zzzzzzzz'")
    assert.falsy(has(e, "did you mean"), e)
    bad({ 1 }, "options are named", "got the key 1")
    bad({ pool = {} }, "option pool must be a tree from gt.tree")
  end)

  it("raise at the caller's line, and the next tree works", function()
    local e = error_of(function() local t = gt.tree(f, { warmup = "x" }) return t end)
    assert.truthy(e:find("hardening_spec.lua:%d+: gt.tree: option warmup"), e)
    local t = gt.tree(f, { warmup = 0, max_recordings = math.huge, on_limit = "error", copy_inputs = false, name = "fine" })
    local x = gt.from({ -1, 2 })
    for _ = 1, 3 do assert.same({ 0, 2 }, t(x):tolist()) end
    assert.recorded(t, 1)
    assert.replayed(t, 2)
  end)

  it("are checked in the REPL too, which goes on", function()
    local status, out, err = gtlua("-i", { stdin = "t = gt.tree(function() end, {warmup = 'x'})\n" ..
      "t = gt.tree(function() end, {max_recordings = 2^32})\nprint(type(gt.tree(function() end, {warmup = 2})))\n" })
    assert.equal(0, status, err)
    assert.truthy(has(err, 'option warmup must be a whole number in 0..2147483647'), err)
    assert.truthy(has(err, "got 4294967296"), err)
    assert.truthy(has(out, "table"), out)
  end)
end)

describe("address-space reservations", function()
  local script = [[
    local K = gt.compile("__global__ void inc(float *y) { y[threadIdx.x] += 1; }")
    local y = gt.zeros({ 4 })
    local trees = {}
    for i = 1, 16 do trees[i] = gt.tree(function(v) K.inc(1, 4, v) return v end) end
    for i = 1, 16 do trees[i](y) end
    print(y:tolist()[1])
  ]]

  it("let a small script with trees run under ulimit -v 8000000 on the cpu backend", function()
    if gt.backend() ~= "cpu" then return pending("cpu backend") end
    if os.getenv("ASAN_OPTIONS") then return pending("ASan maps terabytes of shadow memory: no ulimit -v") end
    local path = tmpfile(script)
    local status, out, err = S.sh("ulimit -v 8000000 && GTLUA_BACKEND=cpu timeout 60 \"$GTLUA\" " .. shq(path))
    os.remove(path)
    assert.equal(0, status, err)
    assert.equal("16\n", out)
  end)

  -- 10^4 live trees, each with pool memory and a recorded graph: each pool reserves its
  -- first range (64 MiB of addresses, less under ulimit -v) only when it first needs memory
  local many = [[
    local n = tonumber(arg[1])
    local K = gt.compile("__global__ void add(float *y, const float *x, int i) { y[threadIdx.x] = x[threadIdx.x] + i; }")
    local x, t = gt.ones({ 4 }), {}
    for i = 1, n do
      t[i] = gt.tree(function(v) local y = gt.tensor({ 4 }) K.add(1, 4, y, v, i) return y end, { warmup = 0 })
      t[i](x)
    end
    local ok, recorded = 0, 0
    for i = 1, n do
      if t[i](x):tolist()[4] == 1 + i then ok = ok + 1 end
      recorded = recorded + t[i]:stats().recorded
    end
    print(ok, recorded)
  ]]

  it("let 10^4 trees live at once, each with pool memory and a graph, on every backend", function()
    local path = tmpfile(many)
    local status, out, err = gtlua(shq(path) .. " 10000", { env = "GTLUA_BACKEND=" .. gt.backend() })
    os.remove(path)
    assert.equal(0, status, err)
    assert.equal("10000\t10000\n", out)
  end)

  it("let 2000 trees with pool memory live under ulimit -v 8000000 on the cpu backend", function()
    if gt.backend() ~= "cpu" then return pending("cpu backend") end
    if os.getenv("ASAN_OPTIONS") then return pending("ASan maps terabytes of shadow memory: no ulimit -v") end
    local path = tmpfile(many)
    local status, out, err = S.sh("ulimit -v 8000000 && GTLUA_BACKEND=cpu timeout 60 \"$GTLUA\" " .. shq(path) .. " 2000")
    os.remove(path)
    assert.equal(0, status, err)
    assert.equal("2000\t2000\n", out)
  end)

  it("raise out of memory for a tensor beyond the machine's memory, in a tree call and outside, and go on", function()
    -- 4 TiB: more than the H200 or any CI machine has (on the cpu backend the kernel would accept
    -- the commit of reserved addresses and kill the process when the fill touched it)
    local status, out, err = gtlua([[-e 'local n = 2^40
      print(pcall(function() gt.tensor({n}):fill(1) end))
      local t = gt.tree(function() local y = gt.tensor({n}); y:fill(1); return y end)
      print(pcall(t)); print(pcall(t))
      print(gt.tree(function(x) return gt.ops.add(x, 1) end)(gt.ones({2})):tolist()[2])']],
      { env = "GTLUA_BACKEND=" .. gt.backend() })
    assert.equal(0, status, err)
    local _, fails = out:gsub("false\t[^\n]*out of memory", "")
    assert.equal(3, fails, out)
    local _, lined = out:gsub("false\t%(command line%):%d+: [^\n]*out of memory", "")   -- each names the line
    assert.equal(3, lined, out)
    local _, largest = out:gsub("false\t[^\n]*largest free block %d+", "")   -- the request, the pool and its largest free block
    assert.equal(3, largest, out)
    assert.truthy(has(out, "\n2\n"), out)
  end)

  it("reserve no addresses for a tree until it first needs pool memory", function()
    -- a first range of 10^8 GiB cannot be reserved: making the tree works, its first call says why
    local status, out, err = gtlua([[-e 'local t = gt.tree(function(x) return gt.ops.relu(x) end); print("made")
      print(pcall(t, gt.ones({2}))); print(pcall(t, gt.ones({2}))); print(gt.zeros({2}):tolist()[2])']],
      { env = "GTLUA_BACKEND=" .. gt.backend() .. " GTLUA_POOL_RESERVE=100000000" })
    assert.equal(0, status, err)
    assert.truthy(has(out, "made\n"), out)
    local _, fails = out:gsub("false\t[^\n]*out of memory: request of [%d.]+ %a+: reserving [%d.]+ %a+ more of addresses for the pool failed", "")
    assert.equal(2, fails, out)
    assert.truthy(has(out, "set GTLUA_POOL_RESERVE (GiB a tree's pool reserves first, set now) or GTLUA_MEM_RESERVE"), out)
    assert.truthy(has(out, "\n0\n"), out)
  end)

  it("name GTLUA_MEM_RESERVE when ordinary memory cannot be reserved", function()
    local status, _, err = gtlua("-e 'print(1)'", { env = "GTLUA_BACKEND=" .. gt.backend() .. " GTLUA_MEM_RESERVE=100000000G" })
    assert.equal(1, status)
    assert.truthy(has(err, "could not reserve"), err)
    assert.truthy(has(err, "set GTLUA_MEM_RESERVE lower"), err)
  end)

  it("name GTLUA_POOL_RESERVE when its value is not a size, and the process goes on", function()
    local status, out, err = gtlua([[-e 'print(pcall(gt.tree, function() end)); print(gt.zeros({2}):tolist()[2])']],
      { env = "GTLUA_BACKEND=" .. gt.backend() .. " GTLUA_POOL_RESERVE=lots" })
    assert.equal(0, status, err)
    assert.truthy(has(out, "false\t"), out)
    assert.truthy(has(out, "GTLUA_POOL_RESERVE=lots is not a size"), out)
    assert.truthy(has(out, "\n0\n"), out)
  end)

  it("grow a tree's pool by further ranges without moving it: earlier graphs replay unchanged", function()
    -- the first range is 1 MiB: a call that needs more adds a range; the small path's graph,
    -- recorded in the first range, still replays with its addresses, and both give right values
    local script = tmpfile([[
      local K = gt.compile("__global__ void fill(float *y, float v, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = v; }")
      local step = gt.tree(function(n, v)
        local y = gt.tensor({ n })
        K.fill(math.ceil(n / 256), 256, y, v, n)
        return y
      end, { warmup = 0 })
      local small, big = 1000, 3 * 2^20 / 4           -- 4 KB, then 3 MiB
      for i = 1, 3 do io.write(step(small, i):tolist()[small], " ") end
      local before = step:stats().pool.reserved
      for i = 1, 3 do local y = step(big, 10 + i); io.write(y:tolist()[big], " ") end
      for i = 1, 3 do io.write(step(small, 20 + i):tolist()[small], " ") end
      local s = step:stats()
      print(); print(s.recorded, s.replays, before < s.pool.reserved)
      -- a range added mid-call: the parent's tensor stays in the first range, the child reads it
      local K2 = gt.compile("__global__ void spread(float *y, const float *a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a[i % 1000]; }")
      local two = gt.tree(function(v)
        local a = gt.tensor({ small })
        K.fill(4, 256, a, v, small)
        gt.cut()
        local y = gt.tensor({ big })
        K2.spread(math.ceil(big / 256), 256, y, a, big)
        return y, a
      end, { warmup = 0 })
      for i = 1, 3 do local y, a = two(30 + i); io.write(y:tolist()[big], ",", a:tolist()[1], " ") end
      print(two:stats().replays)
    ]])
    local status, out, err = gtlua(shq(script), { env = "GTLUA_BACKEND=" .. gt.backend() .. " GTLUA_POOL_RESERVE=1M" })
    os.remove(script)
    assert.equal(0, status, err)
    assert.equal("1 2 3 11 12 13 21 22 23 \n2\t7\ttrue\n31,31 32,32 33,33 4\n", out)
  end)
end)

describe("dropped trees", function()
  it("are collected, also after returning tensors and taking their own outputs back", function()
    local K = gt.compile("__global__ void cp(float *y, const float *x) { y[threadIdx.x] = x[threadIdx.x] + 1; }")
    local alive = setmetatable({}, { __mode = "k" })
    local kept
    for i = 1, 6 do
      local t = gt.tree(function(v) local y = gt.tensor({ 4 }) K.cp(1, 4, y, v) return y end)
      local h = gt.zeros({ 4 })
      for _ = 1, 3 do h = t(h) end              -- feeds its own output back (staged)
      if i == 6 then kept = h:clone() end
      alive[t] = true
    end
    for _ = 1, 4 do collectgarbage() end
    assert.equal(nil, next(alive))
    assert.same({ 3, 3, 3, 3 }, kept:tolist())
  end)

  it("keep a returned tensor valid while it is held", function()
    local t = gt.tree(function(v) return gt.ops.relu(v) end)
    local y = t(gt.from({ -1, 2 }))
    t = nil   -- luacheck: ignore
    for _ = 1, 4 do collectgarbage() end
    assert.same({ 0, 2 }, y:tolist())
  end)
end)

describe("scripts/soak.sh", function()
  it("replays a tree and drops trees, printing RSS and pool bytes at start and end", function()
    local status, out, err = S.sh("GTLUA_BIN_UNDER_TEST=\"$GTLUA\" GTLUA_BACKEND=" .. gt.backend() ..
      " timeout 120 sh scripts/soak.sh 3000 40")
    assert.equal(0, status, out .. err)
    assert.truthy(out:find("replays: start%s+RSS%s+%d+ KiB%s+ordinary memory%s+%d+ B%s+tree pool in use%s+%d+ B"), out)
    assert.truthy(out:find("replays: end%s+RSS"), out)
    assert.truthy(has(out, "trees: start") and has(out, "trees: end"), out)
    assert.truthy(out:find("replays: start%s+RSS.-address space%s+%d+ KiB"), out)
    assert.truthy(out:find("replays%s+RSS [+-]%d+ KiB, ordinary memory %+0 B, pool %+0 B, address space [+-]%d+ KiB: flat"), out)
    assert.truthy(out:find("trees%s+RSS [+-]%d+ KiB, ordinary memory %+0 B, pool %+0 B, address space [+-]%d+ KiB: flat"), out)
    assert.truthy(has(out, "soak: flat"), out)
  end)
end)

describe("scripts/sanitize.sh", function()
  -- the real tool runs on the GPU machine (scripts/device-test.sh memcheck); here a stand-in
  -- that takes the options, writes a report where --log-file says and runs the program
  it("runs each spec file in its own process and names the one that died, with its last words", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. shq(dir)) == 0)
    spit(dir .. "/fake-cs", [[#!/bin/sh
[ "$1" = --version ] && { echo "stand-in 1.0"; exit 0; }
log=
while [ $# -gt 0 ]; do case "$1" in --log-file) log=$2; shift 2;; --*) echo "$1 $2" >> "${0%/*}/opts"; shift 2;; *) break;; esac; done
echo "========= ERROR SUMMARY: 0 errors" > "$(echo "$log" | sed "s/%p/$$/")"
exec "$@"
]])
    spit(dir .. "/a_spec.lua", 'describe("a", function() it("passes", function() assert.equal(2, 1 + 1) end) end)\n')
    spit(dir .. "/b_spec.lua", 'local ffi = require "ffi"\nffi.cdef "void abort(void);"\n' ..
      'describe("b", function() it("aborts", function() io.stderr:write("last words\\n") ffi.C.abort() end) end)\n')
    local status, out, err = S.sh(("chmod +x %s && OUT=%s COMPUTE_SANITIZER=%s SANITIZE_BACKEND=cpu GTLUA_BIN_UNDER_TEST=\"$GTLUA\" " ..
      "SPECS=%s sh scripts/sanitize.sh memcheck"):format(shq(dir .. "/fake-cs"), shq(dir), shq(dir .. "/fake-cs"),
      shq(dir .. "/a_spec.lua " .. dir .. "/b_spec.lua")))
    local opts = S.slurp(dir .. "/opts", true)
    local logs = io.popen("ls " .. shq(dir .. "/sanitize-memcheck")):read("*a")
    os.execute("rm -rf " .. shq(dir))
    assert.equal(1, status, out .. err)
    assert.truthy(out:find("a_spec%s+ok%s+%d+s%s+1 success / 0 failures / 0 errors / 0 pending.-ERROR SUMMARY: 0 errors"), out)
    assert.truthy(out:find("b_spec%s+died of signal 6"), out)
    assert.truthy(has(out, "    | last words"), out)
    assert.truthy(has(out, "sanitize memcheck: 2 files run, 1 not clean"), out)
    for _, o in ipairs({ "--tool memcheck", "--show-backtrace device", "--report-api-errors no",
                         "--target-processes application-only", "--require-cuda-init no", "--error-exitcode 86" }) do
      assert.truthy(has(opts, o), opts)
    end
    assert.truthy(has(logs, "a_spec.log") and logs:find("a_spec%.%d+%.cs%.log"), logs)
  end)

  it("refuses an unknown tool", function()
    local status, _, err = S.sh("sh scripts/sanitize.sh valgrind")
    assert.equal(2, status)
    assert.truthy(has(err, "usage: sh scripts/sanitize.sh memcheck|racecheck"), err)
  end)
end)

describe("bad input inside a tree call", function()
  it("refuses a shape too large for any memory, in a tree and outside, and the tree still works", function()
    local step = gt.tree(function(x, n)
      if n then gt.zeros { n } end
      return gt.ops.relu(x)
    end)
    local x = gt.from({ -1, 1 })
    for _, n in ipairs { 2 ^ 62, 2 ^ 53 } do
      assert.has_error(function() step(x, n) end, nil)
      local ok, err = pcall(step, x, n)
      assert.is_false(ok)
      assert.truthy(tostring(err):match("bad shape: dimension 1 is .+, not a size") or
                    tostring(err):match("more than any memory holds"), tostring(err))
    end
    local ok, err = pcall(gt.zeros, { 2 ^ 31, 2 ^ 31 })
    assert.is_false(ok)
    assert.truthy(tostring(err):match("more than any memory holds"), tostring(err))
    assert.are.same({ 0, 1 }, step(x):tolist())
  end)

  it("refuses narrow with a fractional dim, start or length", function()
    local t = gt.zeros { 4, 4 }
    for _, args in ipairs { { 1, 1.5, 2 }, { 1, 1, 1.5 }, { 1.5, 1, 1 } } do
      local ok, err = pcall(t.narrow, t, args[1], args[2], args[3])
      assert.is_false(ok)
      assert.truthy(tostring(err):match("narrow: "), tostring(err))
    end
    assert.are.equal(8, t:narrow(1, 2, 2).numel)
  end)

  it("refuses a coroutine.yield inside a tree body, and the runtime is left outside the call", function()
    local step = gt.tree(function(x)
      local y = gt.ops.relu(x)
      coroutine.yield(1)
      return y
    end)
    local other = gt.tree(function(x) return gt.ops.mul(x, 2) end)
    local x = gt.from({ -1, 3 })
    local co = coroutine.create(function() return step(x) end)
    local ok, err = coroutine.resume(co)
    assert.is_false(ok)
    assert.truthy(tostring(err):match("coroutine.yield inside a call of tree 'step'"), tostring(err))
    assert.are.same({ -2, 6 }, other(x):tolist())           -- no "cannot nest": the failed call ended
    local plain = gt.zeros { 2 }
    assert.are.same({ 0, 0 }, plain:tolist())               -- made outside any tree
    -- a coroutine the body starts may yield to the body
    local inner = gt.tree(function(v)
      local gen = coroutine.wrap(function() coroutine.yield(gt.ops.relu(v)) end)
      return gen()
    end)
    assert.are.same({ 0, 3 }, inner(x):tolist())
  end)

  it("takes gt.on_warning(fn) as setting the handler, as assigning it does", function()
    local old, got = gt.on_warning, {}
    gt.on_warning(function(m) got[#got + 1] = m end)
    local t = gt.tree(function(x) return gt.ops.relu(x) end, { max_recordings = 0, warmup = 0 })
    for i = 1, 2 do t(gt.randn { i }) end
    gt.on_warning = old
    assert.are.equal(1, #got)
    assert.matches("max_recordings = 0", got[1])
  end)
end)
