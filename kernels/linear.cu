// linear.cu - tiled shared-memory matrix products: Y = X @ W (+ b), with an activation.
//
// Shapes are row-major: X [M,K], W [K,N], b [N], Y [M,N] (W as in x @ W, like
// PyTorch's x @ W + b).  Launch with 16x16 blocks and a 2-D grid of
// ceil(N/16) x ceil(M/16) blocks; the block loops over output tiles with a
// grid stride, so a smaller grid still covers everything.  Each thread owns
// one output element; each step stages a 16x16 tile of X and of W in shared
// memory (out-of-range elements as zeros, so any M, N, K works).

#define GT_TILE 16

// act: 0 none, 1 relu, 2 gelu (tanh approximation), 3 tanh.
__device__ __forceinline__ float gt_activate(float v, int act) {
  if (act == 1) return fmaxf(v, 0.0f);
  if (act == 2) return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  if (act == 3) return tanhf(v);
  return v;
}

// Y = act(X @ W + b) over all output tiles; has_bias = 0 ignores b.
__device__ __forceinline__ void gt_tiled(float *Y, const float *X, const float *W, const float *b,
                                         int M, int N, int K, int has_bias, int act) {
  __shared__ float xs[GT_TILE][GT_TILE];
  __shared__ float ws[GT_TILE][GT_TILE];
  int tx = threadIdx.x, ty = threadIdx.y;
  int tiles_m = (M + GT_TILE - 1) / GT_TILE, tiles_n = (N + GT_TILE - 1) / GT_TILE;
  for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
    for (int tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
      int row = tm * GT_TILE + ty, col = tn * GT_TILE + tx;
      float acc = 0.0f;
      for (int k0 = 0; k0 < K; k0 += GT_TILE) {
        xs[ty][tx] = (row < M && k0 + tx < K) ? X[(long long)row * K + k0 + tx] : 0.0f;
        ws[ty][tx] = (k0 + ty < K && col < N) ? W[(long long)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < GT_TILE; kk++) acc += xs[ty][kk] * ws[kk][tx];
        __syncthreads();
      }
      if (row < M && col < N) {
        if (has_bias) acc += b[col];
        Y[(long long)row * N + col] = gt_activate(acc, act);
      }
    }
  }
}

// Y = act(X @ W + b); has_bias = 0 ignores b (pass any f32 tensor, e.g. W).
__global__ void linear_f32(float *Y, const float *X, const float *W, const float *b,
                           int M, int N, int K, int has_bias, int act) {
  gt_tiled(Y, X, W, b, M, N, K, has_bias, act);
}

// Y = A @ B: A [M,K], B [K,N]; the same tiling without bias or activation.
__global__ void matmul_f32(float *Y, const float *A, const float *B, int M, int N, int K) {
  gt_tiled(Y, A, B, A, M, N, K, 0, 0);
}

// Y = X^T: X [R,C], Y [C,R].  16x16 blocks over a grid of ceil(C/16) x
// ceil(R/16), grid-strided like gt_tiled; each tile goes through shared memory
// (a column of padding keeps the transposed read off one bank), so that both
// the read of X and the write of Y are along rows.
__global__ void transpose_f32(float *Y, const float *X, int R, int C) {
  __shared__ float t[GT_TILE][GT_TILE + 1];
  int tx = threadIdx.x, ty = threadIdx.y;
  int tiles_r = (R + GT_TILE - 1) / GT_TILE, tiles_c = (C + GT_TILE - 1) / GT_TILE;
  for (int tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
    for (int tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
      int r = tr * GT_TILE + ty, c = tc * GT_TILE + tx;
      if (r < R && c < C) t[ty][tx] = X[(long long)r * C + c];
      __syncthreads();
      int yr = tc * GT_TILE + ty, yc = tr * GT_TILE + tx;     // Y[yr][yc] = X[yc][yr] = t[tx][ty]
      if (yr < C && yc < R) Y[(long long)yr * R + yc] = t[tx][ty];
      __syncthreads();
    }
  }
}
