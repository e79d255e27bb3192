// half.cu - the kernel library in half precision: elements stored as T (bf16
// with -DGT_BF16, else f16), every sum, product and function computed in f32
// and rounded to T once, at the store (round to nearest even).
//
// gt.ops loads this file twice (one module per dtype).  Elementwise kernels
// walk a 1-D grid with a grid stride; row kernels take one block per row
// (blockDim.x a multiple of 32, at most 1024); the matrix product takes one
// warp per 16x32 tile of the result and multiplies on the tensor cores
// (mma.sync m16n8k16, f32 accumulators) on sm_80 and up, or in scalar f32 on
// the cpu backend and older GPUs (same tiles, same thread layout).

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

// The bits of p[i] (0 outside: tiles past the edges multiply zeros).
__device__ __forceinline__ unsigned gt_bits(const T *p, long long i, bool in) {
  return in ? (unsigned)gt_u(p[i]) : 0u;
}

// Grid (ceil(N/32), ceil(M/16)), blocks of 32 threads: warp (bx, by) owns
// rows 16*by.. and columns 32*bx.. as four 16x8 tiles; lane l holds, of tile
// j, rows g and g+8 (g = l/4) at columns 8j + 2(l%4) + {0, 1}: the
// accumulator layout of mma.m16n8k16.
__global__ void linear(T *y, const T *x, const T *W, const T *b, int M, int N, int K, int has_bias, int act) {
  int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  int m0 = blockIdx.y * 16, n0 = blockIdx.x * 32;
  float c[4][4] = {};
#if defined(__GTLUA_CPU__) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800)
  for (int j = 0; j < 4; j++)
    for (int q = 0; q < 4; q++) {
      int r = m0 + g + (q >> 1) * 8, col = n0 + j * 8 + t * 2 + (q & 1);
      float acc = 0.0f;
      if (r < M && col < N)
        for (int k = 0; k < K; k++) acc += gt_f(x[(long long)r * K + k]) * gt_f(W[(long long)k * N + col]);
      c[j][q] = acc;
    }
#else
  int r0 = m0 + g, r1 = r0 + 8;
  for (int k0 = 0; k0 < K; k0 += 16) {
    int ka = k0 + t * 2, kb = ka + 8;
    unsigned a[4];
    a[0] = gt_bits(x, (long long)r0 * K + ka, r0 < M && ka < K) | gt_bits(x, (long long)r0 * K + ka + 1, r0 < M && ka + 1 < K) << 16;
    a[1] = gt_bits(x, (long long)r1 * K + ka, r1 < M && ka < K) | gt_bits(x, (long long)r1 * K + ka + 1, r1 < M && ka + 1 < K) << 16;
    a[2] = gt_bits(x, (long long)r0 * K + kb, r0 < M && kb < K) | gt_bits(x, (long long)r0 * K + kb + 1, r0 < M && kb + 1 < K) << 16;
    a[3] = gt_bits(x, (long long)r1 * K + kb, r1 < M && kb < K) | gt_bits(x, (long long)r1 * K + kb + 1, r1 < M && kb + 1 < K) << 16;
    for (int j = 0; j < 4; j++) {
      int col = n0 + j * 8 + g;
      bool cn = col < N;
      unsigned b0 = gt_bits(W, (long long)ka * N + col, cn && ka < K) | gt_bits(W, (long long)(ka + 1) * N + col, cn && ka + 1 < K) << 16;
      unsigned b1 = gt_bits(W, (long long)kb * N + col, cn && kb < K) | gt_bits(W, (long long)(kb + 1) * N + col, cn && kb + 1 < K) << 16;
#ifdef GT_BF16
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
#else
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
#endif
                   : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
  }
#endif
  for (int j = 0; j < 4; j++)
    for (int q = 0; q < 4; q++) {
      int r = m0 + g + (q >> 1) * 8, col = n0 + j * 8 + t * 2 + (q & 1);
      if (r >= M || col >= N) continue;
      float v = c[j][q] + (has_bias ? gt_f(b[col]) : 0.0f);
      y[(long long)r * N + col] = gt_h(gt_act(v, act));
    }
}
