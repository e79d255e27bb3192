-- Loops and branches the device decides from values its kernels compute
-- (DESIGN.md section 8): counted loops, loops nested in loops, a condition
-- kept across tree calls, bodies of several launch shapes, and the host
-- transfers a device-decided step does not make (gt.transfers).
local gt = require "gt"
require "gt.busted"

local K = gt.compile([[
// c[0] = (int)x[0] clamped to [0, cap]; p[0] = c[0] > 0
__global__ void count_from(int *c, int *p, const float *x, int cap) {
  if (threadIdx.x == 0) { int n = (int)x[0]; n = n < 0 ? 0 : n > cap ? cap : n; c[0] = n; p[0] = n > 0; }
}
// one pass of a counted loop: c[0] -= 1; p[0] = c[0] > 0
__global__ void tick(int *c, int *p) { if (threadIdx.x == 0) { c[0] -= 1; p[0] = c[0] > 0; } }
__global__ void addc(float *y, int n, float a) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] += a;
}
// y[i] += sum(x): every thread of every block reads all of x
__global__ void addsum(float *y, const float *x, int ny, int nx) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ny; i += gridDim.x * blockDim.x) {
    float s = 0; for (int j = 0; j < nx; j++) s += x[j]; y[i] += s;
  }
}
__global__ void cp(float *y, const float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i];
}
__global__ void setv(int *p, int v) { if (threadIdx.x == 0) p[0] = v; }
// inner counter for outer pass: c[0] = base + pass[0]; p = c[0] > 0; pass[0] += 1
__global__ void inner_start(int *c, int *p, int *pass, int base) {
  if (threadIdx.x == 0) { c[0] = base + pass[0]; p[0] = c[0] > 0; pass[0] += 1; }
}
// go[0] = total[0] < goal
__global__ void below(int *go, const int *total, int goal) { if (threadIdx.x == 0) go[0] = total[0] < goal; }
__global__ void inc(int *total) { if (threadIdx.x == 0) total[0] += 1; }
]], { name = "cond_loops_spec.cu" })

describe("gt.loop counted on the device", function()
  -- y = x + 1 + 1 + ... : as many passes as x[0] says (at most cap)
  local function counted(x, cap)
    local c, p = gt.tensor({ 1 }, "i32"), gt.tensor({ 1 }, "i32")
    K.count_from(1, 1, c, p, x, cap)
    local y = gt.tensor(x.shape)
    K.cp(1, 32, y, x, x.numel)           -- a kernel, not a copy node: a new x is patched, the graph replays
    gt.loop(p, function()
      K.addc(2, 32, y, y.numel, 1)
      K.tick(1, 1, c, p)
    end)
    return y
  end

  it("runs as many passes as a kernel before it computed, counted down by a kernel in its body, one node", function()
    local step = gt.tree(counted)
    for round = 1, 3 do
      for _, n in ipairs { 3, 0, 7, 1 } do
        local x = gt.from({ n, 10, 20 })
        local want = { n + math.max(n, 0), 10 + n, 20 + n }
        assert.tensor_near(want, counted(x, 16))
        assert.tensor_near(want, step(x, 16))
      end
    end
    assert.nodes(step, 1)
    assert.truthy(step:stats().replays >= 10)
  end)

  it("nests in a loop's body: the outer body resets the inner count from a device value each pass", function()
    -- outer pass i (0-based) runs the inner body base + i times; the outer loop runs until total reaches goal
    local function nested(y, base, goal)
      local pass, total = gt.zeros({ 1 }, "i32"), gt.zeros({ 1 }, "i32")
      local go, c, q = gt.tensor({ 1 }, "i32"), gt.tensor({ 1 }, "i32"), gt.tensor({ 1 }, "i32")
      K.below(1, 1, go, total, goal)
      gt.loop(go, function()
        K.inner_start(1, 1, c, q, pass, base)
        gt.loop(q, function()
          K.addc(1, 32, y, y.numel, 1)
          K.inc(1, 1, total)
          K.tick(1, 1, c, q)
        end, { max = 64 })
        K.below(1, 1, go, total, goal)
      end, { max = 16 })
      return pass, total
    end
    local function host(base, goal)      -- the same loops on the host: passes, total
      local pass, total = 0, 0
      while total < goal and pass < 16 do
        total = total + math.max(0, math.min(64, base + pass))
        pass = pass + 1
      end
      return pass, total
    end
    local step = gt.tree(nested)
    for round = 1, 2 do
      for _, bg in ipairs { { 1, 10 }, { 3, 3 }, { 0, 5 }, { 2, 0 } } do
        local hp, ht = host(bg[1], bg[2])
        for _, run in ipairs { nested, step } do
          local y = gt.zeros({ 4 })
          local pass, total = run(y, bg[1], bg[2])
          assert.are.same({ hp, ht }, { pass:item(), total:item() })
          assert.tensor_near({ ht, ht, ht, ht }, y)
        end
      end
    end
    assert.nodes(step, 1)
  end)
end)

describe("a condition tensor kept across tree calls", function()
  it("is updated in place by the loop's body: each call runs at most max passes and resumes where the last stopped", function()
    local total, go = gt.zeros({ 1 }, "i32"):static(), gt.zeros({ 1 }, "i32"):static()
    local run = gt.tree(function(goal)
      gt.loop(go, function()
        K.inc(1, 1, total)
        K.below(1, 1, go, total, goal)
      end, { max = 4 })
    end)
    for _, goal in ipairs { 10, 3, 9 } do
      total:fill(0)
      K.below(1, 1, go, total, goal)
      local calls = 0
      while go:item() ~= 0 do run(goal); calls = calls + 1 end
      assert.equal(goal, total:item())
      assert.equal(math.ceil(goal / 4), calls)
    end
    assert.nodes(run, 1)
  end)
end)

describe("gt.cond and gt.loop bodies", function()
  it("hold launches of several shapes: grids, blocks and tensors of other sizes than the code around them", function()
    local function model(x, which)
      local p = gt.tensor({ 1 }, "i32")
      K.setv(1, 1, p, which)
      local a, b = gt.zeros({ 3 }), gt.zeros({ 40 })
      gt.cond(p, function()
        K.addsum(1, 1, a, x, a.numel, x.numel)
        K.addc(4, 8, b, b.numel, 2)
        local big = gt.zeros({ 300 })
        K.addc(3, 64, big, big.numel, 1)
        K.addsum(2, 16, b, big, b.numel, 7)
      end, function()
        K.addc(1, 1, a, a.numel, -1)
        K.addsum(5, 32, b, x, b.numel, x.numel)
      end)
      return a, b
    end
    local step = gt.tree(model)
    local x = gt.from({ 1, 2, 3, 4, 5 })
    for i = 1, 6 do
      local which = i % 2
      local a, b = step(x, which)
      local ea, eb = model(x, which)
      assert.tensor_near(which == 1 and { 15, 15, 15 } or { -1, -1, -1 }, a)
      assert.tensor_near(eb:tolist(), b)
      assert.tensor_near(which == 1 and 9 or 15, b:tolist()[40])
      assert.tensor_near(ea:tolist(), a)
    end
    assert.nodes(step, 1)
  end)
end)

describe("gt.transfers", function()
  it("counts host reads, writes and syncs: a replayed device-decided step adds none, item adds a read", function()
    local total, go = gt.zeros({ 1 }, "i32"):static(), gt.zeros({ 1 }, "i32"):static()
    local run = gt.tree(function()
      K.below(1, 1, go, total, 1000)
      gt.loop(go, function()
        K.inc(1, 1, total)
        K.below(1, 1, go, total, 1000)
      end, { max = 3 })
    end)
    for _ = 1, 3 do run() end            -- warm up, record, replay
    local t0 = gt.transfers()
    for _ = 1, 5 do run() end
    local t1 = gt.transfers()
    assert.are.same(t0, t1)
    assert.equal(24, total:item())
    local t2 = gt.transfers()
    assert.equal(t1.reads + 1, t2.reads)
    gt.sync()
    gt.from({ 1 })
    local t3 = gt.transfers()
    assert.are.same({ t2.reads, t2.writes + 1, t2.syncs + 1 }, { t3.reads, t3.writes, t3.syncs })
  end)
end)
