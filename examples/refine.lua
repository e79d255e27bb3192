-- refine.lua: run a refinement kernel until a residual computed on the device is small (gt.loop).
--
--   gtlua examples/refine.lua            solves a few systems, prints the sweeps each took and the tree
--
-- Jacobi sweeps for a diagonally dominant tridiagonal system A x = b.  After
-- each sweep a kernel computes the residual max |A x - b| and sets the flag
-- `more` while it is above tol; gt.loop(more, body, {max = n}) repeats the
-- body while the flag is set.  In a tree the loop is one conditional WHILE
-- node: the number of sweeps is decided on the GPU, with no host sync per
-- sweep.  The host version (a Lua while loop over :item()) gives the same x.
local gt = require "gt"

local K = gt.compile([[
// one Jacobi sweep for A = tridiag(-1, 4, -1): y = (b + x[i-1] + x[i+1]) / 4
__global__ void jacobi(float *y, const float *x, const float *b, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float l = i > 0 ? x[i - 1] : 0.0f, r = i + 1 < n ? x[i + 1] : 0.0f;
    y[i] = (b[i] + l + r) * 0.25f;
  }
}
// more = max |A x - b| > tol; sweeps counts the sweeps
__global__ void residual(int *more, int *sweeps, const float *x, const float *b, int n, float tol, int count) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float m = 0.0f;
  for (int i = 0; i < n; i++) {
    float l = i > 0 ? x[i - 1] : 0.0f, r = i + 1 < n ? x[i + 1] : 0.0f;
    m = fmaxf(m, fabsf(4.0f * x[i] - l - r - b[i]));
  }
  more[0] = m > tol;
  sweeps[0] += count;
}
]], { name = "refine.cu" })

local n, tol, max = gt.backend() == "cuda" and 4096 or 256, 1e-4, 200
local grid = math.ceil(n / 256)

local function solve(b)
  local x, y = gt.zeros({ n }), gt.tensor({ n })
  local more, sweeps = gt.tensor({ 1 }, "i32"), gt.zeros({ 1 }, "i32")
  K.residual(1, 1, more, sweeps, x, b, n, tol, 0)
  gt.loop(more, function()
    K.jacobi(grid, 256, y, x, b, n)
    x:copy(y)
    K.residual(1, 1, more, sweeps, x, b, n, tol, 1)
  end, { max = max })
  return x, sweeps
end

local function solve_on_host(b)                      -- the same, branching after :item()
  local x, y = gt.zeros({ n }), gt.tensor({ n })
  local more, sweeps = gt.tensor({ 1 }, "i32"), gt.zeros({ 1 }, "i32")
  K.residual(1, 1, more, sweeps, x, b, n, tol, 0)
  local k = 0
  while more:item() ~= 0 and k < max do
    K.jacobi(grid, 256, y, x, b, n)
    x:copy(y)
    K.residual(1, 1, more, sweeps, x, b, n, tol, 1)
    k = k + 1
  end
  return x, sweeps
end

local step = gt.tree(solve)
for i = 1, 5 do
  local b = gt.randn({ n }, { seed = i, scale = 10 ^ (i - 3) })
  local x, s = step(b)
  local xh, sh = solve_on_host(b)
  local d, xs, hs = 0, x:tolist(), xh:tolist()
  for k = 1, n do d = math.max(d, math.abs(xs[k] - hs[k])) end
  print(string.format("system %d: %3d sweeps on the device, %3d on the host; max difference %.2g", i, s:item(), sh:item(), d))
end
print(step)
