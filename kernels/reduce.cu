// reduce.cu - row reductions and normalisations: softmax, layernorm, rmsnorm, sum, max, argmax.
//
// x is [M, N] row-major (any leading shape flattened to M rows).  One block
// per row, rows visited with a grid stride; the block's threads stride over
// the row and combine through warp shuffles and one shared slot per warp.
// blockDim.x must be a multiple of 32, at most 1024 (gt.ops uses 32..256).

#include "block_reduce.cuh"

// -- Softmax and normalisations ---------------------------------------------

// y = exp(x - max) / sum(exp(x - max)) along each row.
__global__ void softmax_f32(float *y, const float *x, int M, int N) {
  __shared__ float red[32];
  for (int r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + (long long)r * N;
    float *yr = y + (long long)r * N;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < N; j += blockDim.x) m = fmaxf(m, xr[j]);
    m = gt_block_max(m, red);
    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += expf(xr[j] - m);
    s = gt_block_sum(s, red);
    float inv = 1.0f / s;
    for (int j = threadIdx.x; j < N; j += blockDim.x) yr[j] = expf(xr[j] - m) * inv;
  }
}

// y = (x - mean) / sqrt(var + eps) * gamma + beta; two passes (mean, then
// the centred variance) for accuracy on rows with a large mean.
__global__ void layernorm_f32(float *y, const float *x, const float *gamma, const float *beta,
                              int M, int N, float eps) {
  __shared__ float red[32];
  for (int r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + (long long)r * N;
    float *yr = y + (long long)r * N;
    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += xr[j];
    float mean = gt_block_sum(s, red) / N;
    float v = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) { float d = xr[j] - mean; v += d * d; }
    float rstd = rsqrtf(gt_block_sum(v, red) / N + eps);
    for (int j = threadIdx.x; j < N; j += blockDim.x) yr[j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
  }
}

// y = x / sqrt(mean(x^2) + eps) * w.
__global__ void rmsnorm_f32(float *y, const float *x, const float *w, int M, int N, float eps) {
  __shared__ float red[32];
  for (int r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + (long long)r * N;
    float *yr = y + (long long)r * N;
    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += xr[j] * xr[j];
    float rs = rsqrtf(gt_block_sum(s, red) / N + eps);
    for (int j = threadIdx.x; j < N; j += blockDim.x) yr[j] = xr[j] * rs * w[j];
  }
}

// -- Row sum, max, argmax ----------------------------------------------------

// y[r] = sum of row r.
__global__ void rowsum_f32(float *y, const float *x, int M, int N) {
  __shared__ float red[32];
  for (int r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + (long long)r * N;
    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += xr[j];
    s = gt_block_sum(s, red);
    if (threadIdx.x == 0) y[r] = s;
  }
}

// y[r] = max of row r.
__global__ void rowmax_f32(float *y, const float *x, int M, int N) {
  __shared__ float red[32];
  for (int r = blockIdx.x; r < M; r += gridDim.x) {
    const float *xr = x + (long long)r * N;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < N; j += blockDim.x) m = fmaxf(m, xr[j]);
    m = gt_block_max(m, red);
    if (threadIdx.x == 0) y[r] = m;
  }
}

// y[r] = index (0-based) of the first maximum of row r.
__global__ void argmax_f32(int *y, const float *x, int M, int N) {
  __shared__ float redv[32];
  __shared__ int redi[32];
  for (int r = blockIdx.x; r < M; r += gridDim.x) {
    int n = gt_row_argmax(x + (long long)r * N, N, redv, redi);
    if (threadIdx.x == 0) y[r] = n;
    __syncthreads();
  }
}
