// half.cu - the kernel library in half precision: elements stored as T (bf16
// with -DGT_BF16, else f16), every sum, product and function computed in f32
// and rounded to T once, at the store (round to nearest even).
//
// gt.ops loads this file twice (one module per dtype).  Elementwise kernels
// walk a 1-D grid with a grid stride; row kernels take one block per row
// (blockDim.x a multiple of 32, at most 1024); the matrix product takes a
// block of four warps per 64x64 tile of the result and multiplies on the
// tensor cores (mma.sync m16n8k16, f32 accumulators) on sm_80 and up, or in
// scalar f32 on the cpu backend and older GPUs (same tiles, same thread layout).

#include "block_reduce.cuh"

#ifdef GT_BF16
typedef __nv_bfloat16 T;
__device__ __forceinline__ T gt_h(float v) { return __float2bfloat16_rn(v); }
__device__ __forceinline__ float gt_f(T v) { return __bfloat162float(v); }
__device__ __forceinline__ unsigned short gt_u(T v) { return __bfloat16_as_ushort(v); }
#else
typedef __half T;
__device__ __forceinline__ T gt_h(float v) { return __float2half_rn(v); }
__device__ __forceinline__ float gt_f(T v) { return __half2float(v); }
__device__ __forceinline__ unsigned short gt_u(T v) { return __half_as_ushort(v); }
#endif

#define GT_STRIDE_LOOP(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)blockDim.x * gridDim.x)

// -- Fill and casts -----------------------------------------------------------

__global__ void fill(T *y, long long n, float v) { GT_STRIDE_LOOP(i, n) y[i] = gt_h(v); }
__global__ void copy(T *y, const T *x, long long n) { GT_STRIDE_LOOP(i, n) y[i] = x[i]; }
__global__ void to_f32(float *y, const T *x, long long n) { GT_STRIDE_LOOP(i, n) y[i] = gt_f(x[i]); }
__global__ void from_f32(T *y, const float *x, long long n) { GT_STRIDE_LOOP(i, n) y[i] = gt_h(x[i]); }
// From the other half type (its bits; other_bf16: 1 when it is bf16).
__global__ void from_half(T *y, const unsigned short *x, long long n, int other_bf16) {
  GT_STRIDE_LOOP(i, n) {
    float v = other_bf16 ? __bfloat162float(__ushort_as_bfloat16(x[i])) : __half2float(__ushort_as_half(x[i]));
    y[i] = gt_h(v);
  }
}

// -- Arithmetic and activations -------------------------------------------------

__global__ void add(T *y, const T *a, const T *b, long long n) { GT_STRIDE_LOOP(i, n) y[i] = gt_h(gt_f(a[i]) + gt_f(b[i])); }
__global__ void mul(T *y, const T *a, const T *b, long long n) { GT_STRIDE_LOOP(i, n) y[i] = gt_h(gt_f(a[i]) * gt_f(b[i])); }
// b has m elements and repeats along a's rows (a bias, a scale).
__global__ void add_rows(T *y, const T *a, const T *b, long long n, long long m) {
  GT_STRIDE_LOOP(i, n) y[i] = gt_h(gt_f(a[i]) + gt_f(b[i % m]));
}
__global__ void mul_rows(T *y, const T *a, const T *b, long long n, long long m) {
  GT_STRIDE_LOOP(i, n) y[i] = gt_h(gt_f(a[i]) * gt_f(b[i % m]));
}
// y = s*x + t with numbers s, t.
__global__ void affine(T *y, const T *x, long long n, float s, float t) { GT_STRIDE_LOOP(i, n) y[i] = gt_h(s * gt_f(x[i]) + t); }

// act: 0 none, 1 relu, 2 gelu (tanh approximation), 3 tanh, 4 sigmoid.
__device__ __forceinline__ float gt_act(float v, int act) {
  if (act == 1) return fmaxf(v, 0.0f);
  if (act == 2) return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  if (act == 3) return tanhf(v);
  if (act == 4) return 1.0f / (1.0f + expf(-v));
  return v;
}
__global__ void activate(T *y, const T *x, long long n, int act) { GT_STRIDE_LOOP(i, n) y[i] = gt_h(gt_act(gt_f(x[i]), act)); }

// -- Rows: softmax, normalisations, reductions -----------------------------------

__global__ void softmax(T *y, const T *x, int M, int N) {
  __shared__ float red[32];
  for (int r = blockIdx.x; r < M; r += gridDim.x) {
    const T *xr = x + (long long)r * N;
    T *yr = y + (long long)r * N;
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) m = fmaxf(m, gt_f(xr[j]));
    m = gt_block_max(m, red);
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += expf(gt_f(xr[j]) - m);
    float inv = 1.0f / gt_block_sum(s, red);
    for (int j = threadIdx.x; j < N; j += blockDim.x) yr[j] = gt_h(expf(gt_f(xr[j]) - m) * inv);
  }
}

__global__ void layernorm(T *y, const T *x, const T *gamma, const T *beta, int M, int N, float eps) {
  __shared__ float red[32];
  for (int r = blockIdx.x; r < M; r += gridDim.x) {
    const T *xr = x + (long long)r * N;
    T *yr = y + (long long)r * N;
    float s = 0.0f, v = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += gt_f(xr[j]);
    float mean = gt_block_sum(s, red) / N;
    for (int j = threadIdx.x; j < N; j += blockDim.x) { float d = gt_f(xr[j]) - mean; v += d * d; }
    float rstd = rsqrtf(gt_block_sum(v, red) / N + eps);
    for (int j = threadIdx.x; j < N; j += blockDim.x)
      yr[j] = gt_h((gt_f(xr[j]) - mean) * rstd * gt_f(gamma[j]) + gt_f(beta[j]));
  }
}

__global__ void rmsnorm(T *y, const T *x, const T *w, int M, int N, float eps) {
  __shared__ float red[32];
  for (int r = blockIdx.x; r < M; r += gridDim.x) {
    const T *xr = x + (long long)r * N;
    T *yr = y + (long long)r * N;
    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) { float v = gt_f(xr[j]); s += v * v; }
    float rs = rsqrtf(gt_block_sum(s, red) / N + eps);
    for (int j = threadIdx.x; j < N; j += blockDim.x) yr[j] = gt_h(gt_f(xr[j]) * rs * gt_f(w[j]));
  }
}

__global__ void rowsum(T *y, const T *x, int M, int N) {
  __shared__ float red[32];
  for (int r = blockIdx.x; r < M; r += gridDim.x) {
    const T *xr = x + (long long)r * N;
    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += gt_f(xr[j]);
    s = gt_block_sum(s, red);
    if (threadIdx.x == 0) y[r] = gt_h(s);
  }
}

__global__ void rowmax(T *y, const T *x, int M, int N) {
  __shared__ float red[32];
  for (int r = blockIdx.x; r < M; r += gridDim.x) {
    const T *xr = x + (long long)r * N;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < N; j += blockDim.x) m = fmaxf(m, gt_f(xr[j]));
    m = gt_block_max(m, red);
    if (threadIdx.x == 0) y[r] = gt_h(m);
  }
}

// y[r] = index (0-based) of the first maximum of row r.
__global__ void argmax(int *y, const T *x, int M, int N) {
  __shared__ float redv[32];
  __shared__ int redi[32];
  for (int r = blockIdx.x; r < M; r += gridDim.x) {
    const T *xr = x + (long long)r * N;
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int j = threadIdx.x; j < N; j += blockDim.x) gt_argmax_pick(&v, &i, gt_f(xr[j]), j);
    gt_block_argmax(&v, &i, redv, redi);
    if (threadIdx.x == 0) y[r] = i == 0x7fffffff ? 0 : i;
    __syncthreads();
  }
}

// -- Lookups and layout ------------------------------------------------------------

// y[i, :] = table[ids[i], :] (an id outside [0, V): zeros).
__global__ void embedding(T *y, const int *ids, const T *table, long long n, int D, int V) {
  GT_STRIDE_LOOP(k, n * D) {
    long long i = k / D;
    int d = (int)(k - i * D), id = ids[i];
    y[k] = (id >= 0 && id < V) ? table[(long long)id * D + d] : gt_h(0.0f);
  }
}

// y [C, R] = x [R, C] transposed.
__global__ void transpose(T *y, const T *x, int R, int C) {
  GT_STRIDE_LOOP(k, (long long)R * C) {
    long long r = k / C, c = k - r * C;
    y[c * R + r] = x[k];
  }
}

// -- Matrix product: y [M, N] = act(x [M, K] @ W [K, N] + b) ---------------------------
//
// Grid (ceil(N/64), ceil(M/64)) of 128-thread blocks: block (bx, by) owns the
// 64x64 tile of y at rows 64*by, columns 64*bx; warp w of it the 32x32
// quarter at rows 32*(w/2), columns 32*(w%2), as 2x4 tiles of 16x8; lane l
// holds, of each, rows g and g+8 (g = l/4) at columns 2(l%4) + {0, 1}: the
// accumulator layout of mma.m16n8k16.  On the GPU the block stages 64x32 of
// x and 32x64 of W (transposed, so that a lane's pair of k is one 32-bit
// read) in shared memory per step of 32 along K, zeros past the edges.

#define GT_MM_BM 64
#define GT_MM_BN 64
#define GT_MM_BK 32
#define GT_MM_LD (GT_MM_BK + 8)     // a staged row's stride in elements (padded against bank conflicts)

// The (r, col) of accumulator q of tile (i, j) of this lane.
__device__ __forceinline__ void gt_mm_at(int m0, int n0, int i, int j, int q, int *r, int *col) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  *r = m0 + (w >> 1) * 32 + i * 16 + (lane >> 2) + (q >> 1) * 8;
  *col = n0 + (w & 1) * 32 + j * 8 + (lane & 3) * 2 + (q & 1);
}

__global__ void linear(T *y, const T *x, const T *W, const T *b, int M, int N, int K, int has_bias, int act) {
  int m0 = blockIdx.y * GT_MM_BM, n0 = blockIdx.x * GT_MM_BN;
  float c[2][4][4] = {};
#if defined(__GTLUA_CPU__) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800)
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      for (int q = 0; q < 4; q++) {
        int r, col;
        gt_mm_at(m0, n0, i, j, q, &r, &col);
        float acc = 0.0f;
        if (r < M && col < N)
          for (int k = 0; k < K; k++) acc += gt_f(x[(long long)r * K + k]) * gt_f(W[(long long)k * N + col]);
        c[i][j][q] = acc;
      }
#else
  __shared__ __align__(16) unsigned short xs[GT_MM_BM * GT_MM_LD];   // xs[m][k]
  __shared__ __align__(16) unsigned short ws[GT_MM_BN * GT_MM_LD];   // ws[n][k]: W's tile transposed
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  int wm = (w >> 1) * 32, wn = (w & 1) * 32;
  for (int k0 = 0; k0 < K; k0 += GT_MM_BK) {
    for (int e = threadIdx.x; e < GT_MM_BM * GT_MM_BK; e += blockDim.x) {   // consecutive threads: consecutive k of x
      int m = e / GT_MM_BK, k = e - m * GT_MM_BK, gm = m0 + m, gk = k0 + k;
      xs[m * GT_MM_LD + k] = gm < M && gk < K ? gt_u(x[(long long)gm * K + gk]) : 0;
    }
    for (int e = threadIdx.x; e < GT_MM_BK * GT_MM_BN; e += blockDim.x) {   // consecutive n of W
      int k = e / GT_MM_BN, n = e - k * GT_MM_BN, gk = k0 + k, gn = n0 + n;
      ws[n * GT_MM_LD + k] = gk < K && gn < N ? gt_u(W[(long long)gk * N + gn]) : 0;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < GT_MM_BK; kk += 16) {
      unsigned a[2][4], bb[4][2];
#pragma unroll
      for (int i = 0; i < 2; i++) {
        const unsigned short *r0 = xs + (wm + i * 16 + g) * GT_MM_LD + kk + t * 2, *r1 = r0 + 8 * GT_MM_LD;
        a[i][0] = *(const unsigned *)r0;
        a[i][1] = *(const unsigned *)r1;
        a[i][2] = *(const unsigned *)(r0 + 8);
        a[i][3] = *(const unsigned *)(r1 + 8);
      }
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const unsigned short *col = ws + (wn + j * 8 + g) * GT_MM_LD + kk + t * 2;
        bb[j][0] = *(const unsigned *)col;
        bb[j][1] = *(const unsigned *)(col + 8);
      }
#pragma unroll
      for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#ifdef GT_BF16
          asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
#else
          asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
#endif
                       : "+f"(c[i][j][0]), "+f"(c[i][j][1]), "+f"(c[i][j][2]), "+f"(c[i][j][3])
                       : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(bb[j][0]), "r"(bb[j][1]));
    }
    __syncthreads();                              // the tiles are staged again
  }
#endif
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      for (int q = 0; q < 4; q++) {
        int r, col;
        gt_mm_at(m0, n0, i, j, q, &r, &col);
        if (r >= M || col >= N) continue;
        float v = c[i][j][q] + (has_bias ? gt_f(b[col]) : 0.0f);
        y[(long long)r * N + col] = gt_h(gt_act(v, act));
      }
}
