// swish.cu: two kernels for examples/custom_kernel.lua, loaded with gt.load.
// Every __global__ function becomes K.<name>; `const T *` parameters are read,
// `T *` written (the tree's memory planner relies on that), scalars are patched
// into recorded graphs.

// y = x * sigmoid(beta * x), over n elements (a grid-stride loop: any grid works)
__global__ void swish(float *y, const float *x, float beta, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = x[i] / (1.0f + expf(-beta * x[i]));
}

// each of the m rows of x (n wide) divided by its largest |value|: one block per row
__global__ void rowmax_scale(float *y, const float *x, int m, int n) {
  __shared__ float peak[256];
  int row = blockIdx.x;
  if (row >= m) return;
  float p = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) p = fmaxf(p, fabsf(x[row * n + j]));
  peak[threadIdx.x] = p;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) peak[threadIdx.x] = fmaxf(peak[threadIdx.x], peak[threadIdx.x + s]);
    __syncthreads();
  }
  float scale = peak[0] > 0.0f ? 1.0f / peak[0] : 1.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) y[row * n + j] = x[row * n + j] * scale;
}
