// gpt.cu - the decoder-only kernels of examples/gpt.lua: token + position
// embedding; matrix products for a few rows of activations (decode) with a
// layernorm prologue and bias / gelu / residual epilogues; one-query
// attention that also stores this position's K and V in the cache; greedy
// argmax with the end-token flag; and two set-up helpers (random fill, transpose).
//
// Layout (examples/gpt.lua): hidden D = H heads x Dh; qkv rows are [q | k | v]
// (3*D floats per sequence, as GPT-2's c_attn); weight matrices are [N, K]:
// one output feature per row, contiguous (PyTorch's nn.Linear layout), so the
// LM head is the embedding table itself.  Each layer's K and V caches are
// [Bmax, T, D] row-major, sequence b's position t at (b*T + t)*D.  A batch of
// B <= Bmax sequences uses the first B rows.  The position is a scalar
// argument, so a recorded graph serves every position (scalars are patched on
// replay).

#include "block_reduce.cuh"

// Longest context attn_decode_f32 handles: its scores live in shared memory.
#define GPT_MAX_T 1024

#define GPT_STRIDE_LOOP(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)blockDim.x * gridDim.x)

// y[b, :] = wte[ids[b], :] + wpe[pos, :]; an id outside [0, V) gives wpe's row alone.
// posd[0] = pos: the step's later kernels read the position from the device,
// so a new position patches this one kernel of the recorded step.
__global__ void embed_pos_f32(float *y, int *posd, const int *ids, const float *wte, const float *wpe,
                              int B, int D, int V, int pos) {
  if (blockIdx.x == 0 && threadIdx.x == 0) posd[0] = pos;
  GPT_STRIDE_LOOP(k, (long long)B * D) {
    int b = (int)(k / D), d = (int)(k - (long long)b * D);
    int id = ids[b];
    float e = (id >= 0 && id < V) ? wte[(long long)id * D + d] : 0.0f;
    y[k] = e + wpe[(long long)pos * D + d];
  }
}

// -- Matrix products for a few rows (decode) ----------------------------------
//
// y[m, n] = epilogue(sum_k in[m, k] * W[n, k]) for M rows of K and N output
// features, in = x or layernorm(x).  At decode a step is a matrix-vector
// product whose cost is reading W once (GPT-2 small: ~500 MB a token), so a
// warp streams one feature's row of W -- float4 loads, 512 contiguous bytes a
// pass, eight passes in flight -- against up to MT rows of `in` staged in
// shared memory: every loaded weight serves all rows.  S warps may split one
// feature's K into S slices (partial sums combined in shared memory) so that
// narrow matrices still keep every multiprocessor busy.  Blocks stride over
// rounds of blockDim/32/S features; rows go MT at a time (the launcher picks
// MT >= M when the staged rows fit, so W is read once).
//
// Requirements (gpt.lua's launcher checks them): K % 4 == 0; W 16-byte
// aligned; blockDim.x a multiple of 32*S, at most 1024; dynamic shared
// memory MT*K floats.

#define GPT_LN 1      // mode bits: in = layernorm(x) with g, beta (eps 1e-5)
#define GPT_BIAS 2    // + bias[n]
#define GPT_GELU 4    // gelu (tanh approximation) after the bias
#define GPT_RES 8     // + res[m, n], last

__device__ __forceinline__ float gpt_gelu(float v) {
  return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

__device__ __forceinline__ float gpt_dot4(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

// Stages rows m0 .. m0+MT-1 of x [M, K] into xs [MT, K] (zeros past row M),
// layer-normed when mode has GPT_LN (stat: 2*MT floats).  Ends at a barrier.
template <int MT>
__device__ void gpt_stage(float *xs, float *stat, const float *x, const float *g, const float *beta,
                          int m0, int M, int K, int mode) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int mr = min(MT, M - m0);
  if (mode & GPT_LN) {
    for (int m = warp; m < mr; m += nw) {          // a warp per row: mean, then the centred variance
      const float *xr = x + (long long)(m0 + m) * K;
      float s = 0.0f;
      for (int k = lane; k < K; k += 32) s += xr[k];
      float mean = gt_warp_sum(s) / K;
      float v = 0.0f;
      for (int k = lane; k < K; k += 32) { float d = xr[k] - mean; v += d * d; }
      float rstd = rsqrtf(gt_warp_sum(v) / K + 1e-5f);
      if (lane == 0) { stat[2 * m] = mean; stat[2 * m + 1] = rstd; }
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < MT * K; i += blockDim.x) {
    int m = i / K, k = i - m * K;
    float v = 0.0f;
    if (m < mr) {
      v = x[(long long)(m0 + m) * K + k];
      if (mode & GPT_LN) v = (v - stat[2 * m]) * stat[2 * m + 1] * g[k] + beta[k];
    }
    xs[i] = v;
  }
  __syncthreads();
}

// Four weights of a row of WT from element 4c on, as floats: one float4
// load (gpt_half.cu specializes it for the 2-byte types: 8 bytes, widened).
template <class WT> __device__ __forceinline__ float4 gpt_w4(const WT *row, int c);
template <> __device__ __forceinline__ float4 gpt_w4<float>(const float *row, int c) {
  return __ldg((const float4 *)row + c);
}

// A lane's weights: GPT_PASSES loads of four of one feature's row, columns
// c, c+32, ... (in fours) below c_hi, zeros past it.  Issued together, so
// a warp has GPT_PASSES x 512 bytes (f32) in flight.
#define GPT_PASSES 8

template <class WT> __device__ __forceinline__ void gpt_load_w(float4 *wr, const WT *row, int c, int c_hi) {
#pragma unroll
  for (int j = 0; j < GPT_PASSES; j++)
    wr[j] = c + 32 * j < c_hi ? gpt_w4(row, c + 32 * j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// acc[m] += wr . in[m, those columns] for every staged row m.
template <int MT>
__device__ __forceinline__ void gpt_fma_w(float *acc, const float4 *wr, const float *xs, int K, int c, int c_hi) {
  const float4 *x4 = (const float4 *)xs;
  int K4 = K >> 2;
#pragma unroll
  for (int j = 0; j < GPT_PASSES; j++) {
    if (c + 32 * j < c_hi) {
#pragma unroll
      for (int m = 0; m < MT; m++) acc[m] = gpt_dot4(wr[j], x4[m * K4 + c + 32 * j], acc[m]);
    }
  }
}

// One exchange of the transposing butterfly: lanes with bit o set keep the
// upper HALF of acc[0..2*HALF), the others the lower, each adding its
// partner's copy; r counts the rows a lane skipped.  (acc is selected by
// value, by constant indices, so it stays in registers.)
template <int HALF>
__device__ __forceinline__ void gpt_fold(float *acc, int lane, int o, int *r) {
  bool up = (lane & o) != 0;
#pragma unroll
  for (int i = 0; i < HALF; i++) {
    float a = acc[i], b = acc[i + HALF];
    float send = up ? a : b, keep = up ? b : a;
    acc[i] = keep + __shfl_xor_sync(0xffffffff, send, o);
  }
  if (up) *r += HALF;
}

template <int N>
__device__ __forceinline__ void gpt_folds(float *acc, int lane, int o, int *r) {
  if constexpr (N > 1) {
    gpt_fold<N / 2>(acc, lane, o, r);
    gpt_folds<N / 2>(acc, lane, o >> 1, r);
  }
}

// Sums acc[0..MT) over the warp's lanes with MT - 1 + 5 - log2(MT) shuffles
// (each exchange halves the values a lane keeps).  Returns the sum of row
// *row; lanes with (lane & (32/MT - 1)) == 0 hold one row each (rows
// 0..MT-1 in lane order).
template <int MT>
__device__ __forceinline__ float gpt_warp_sum_rows(float *acc, int lane, int *row) {
  int r = 0;
  gpt_folds<MT>(acc, lane, 16, &r);
  float v = acc[0];
#pragma unroll
  for (int o = 16 / MT; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  *row = r;
  return v;
}

// The body of rows_linear_m<MT>_f32; xs: dynamic shared memory,
// stat: 32 floats, part: 512 floats (shared).  A warp's first weights are
// loaded before the rows are staged, and the next feature's while this one's
// sums are reduced, so DRAM latency overlaps the prologue and the epilogue.
template <int MT, class WT>
__device__ void gpt_rows_linear(float *y, const float *x, const WT *W, const float *bias, const float *res,
                                const float *g, const float *beta, int M, int N, int K, int S, int mode,
                                float *xs, float *stat, float *part) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int G = (blockDim.x >> 5) / S;                   // features per block per round
  int f = warp / S, s = warp - f * S;              // this warp: feature f of the round, slice s
  int ks = (((K + S - 1) / S) + 3) & ~3;           // slice length, whole float4s
  int c0 = (min(K, s * ks) >> 2) + lane, c_hi = min(K, (s + 1) * ks) >> 2;
  int stride = gridDim.x * G;
  bool writer = (lane & (32 / MT - 1)) == 0;       // holds a row's sum after gpt_warp_sum_rows
  float4 wr[GPT_PASSES];
  for (int m0 = 0; m0 < M; m0 += MT) {
    int mr = min(MT, M - m0);
    int n = blockIdx.x * G + f;
    if (f < G && n < N) gpt_load_w(wr, W + (long long)n * K, c0, c_hi);
    gpt_stage<MT>(xs, stat, x, g, beta, m0, M, K, mode);
    for (int base = blockIdx.x * G; base < N; base += stride) {   // uniform over the block
      n = base + f;
      bool mine = f < G && n < N;
      float acc[MT];
#pragma unroll
      for (int m = 0; m < MT; m++) acc[m] = 0.0f;
      if (mine) {
        const WT *w4 = W + (long long)n * K;
        gpt_fma_w<MT>(acc, wr, xs, K, c0, c_hi);
        for (int c = c0 + 32 * GPT_PASSES; c < c_hi; c += 32 * GPT_PASSES) {   // slices over 8 passes
          gpt_load_w(wr, w4, c, c_hi);
          gpt_fma_w<MT>(acc, wr, xs, K, c, c_hi);
        }
        if (n + stride < N) gpt_load_w(wr, W + (long long)(n + stride) * K, c0, c_hi);
      }
      int row;
      float sum = gpt_warp_sum_rows<MT>(acc, lane, &row);
      bool have = writer;
      if (S > 1) {                                 // add the slices in order (deterministic)
        if (writer) part[warp * MT + row] = sum;
        __syncthreads();
        row = lane;
        have = s == 0 && lane < MT;
        if (have) {
          sum = 0.0f;
          for (int j = 0; j < S; j++) sum += part[(warp + j) * MT + lane];
        }
        __syncthreads();
      }
      if (mine && have && row < mr) {
        long long o = (long long)(m0 + row) * N + n;
        float v = sum;
        if (mode & GPT_BIAS) v += bias[n];
        if (mode & GPT_GELU) v = gpt_gelu(v);
        if (mode & GPT_RES) v += res[o];
        y[o] = v;
      }
    }
    __syncthreads();                               // xs is staged again for the next rows
  }
}

// y [M, N] = epilogue(in @ W^T) with W [N, K] (see above), rows staged MT at
// a time: one kernel per MT, so that each gets the registers it needs
// (48 for MT = 1, 72 for MT = 16); mode: GPT_* bits; unused pointers (bias,
// res, g, beta) may be any f32 buffer.
#define GPT_ROWS_BODY(MT) \
  extern __shared__ float gpt_xs[]; \
  __shared__ float stat[32]; \
  __shared__ float part[512]; \
  gpt_rows_linear<MT>(y, x, W, bias, res, g, beta, M, N, K, S, mode, gpt_xs, stat, part);   // (WT from W)

// The five instances, one a line: gtlua reads a kernel's signature from the source text (macros are not
// expanded there), so each __global__ definition is written out.
__global__ void rows_linear_m1_f32(float *y, const float *x, const float *W, const float *bias, const float *res, const float *g, const float *beta, int M, int N, int K, int S, int mode) { GPT_ROWS_BODY(1) }
__global__ void rows_linear_m2_f32(float *y, const float *x, const float *W, const float *bias, const float *res, const float *g, const float *beta, int M, int N, int K, int S, int mode) { GPT_ROWS_BODY(2) }
__global__ void rows_linear_m4_f32(float *y, const float *x, const float *W, const float *bias, const float *res, const float *g, const float *beta, int M, int N, int K, int S, int mode) { GPT_ROWS_BODY(4) }
__global__ void rows_linear_m8_f32(float *y, const float *x, const float *W, const float *bias, const float *res, const float *g, const float *beta, int M, int N, int K, int S, int mode) { GPT_ROWS_BODY(8) }
__global__ void rows_linear_m16_f32(float *y, const float *x, const float *W, const float *bias, const float *res, const float *g, const float *beta, int M, int N, int K, int S, int mode) { GPT_ROWS_BODY(16) }

// -- Attention over the KV cache ----------------------------------------------

// One query per sequence against cache positions 0..pos, after storing this
// position's k and v (from qkv) at pos:
//   y[b, h*Dh + d] = sum_t softmax_t(scale * q.k_t) v_t[d].
// One block per (sequence, head), blocks striding over B*H.  Decode has few
// blocks (B*H: 12 at batch 1), so each block puts its whole context's loads
// in flight at once: the scores use Q lanes per cached position (Dh/4
// rounded up to a power of two, at most 32: float4 loads of whole rows),
// four positions a lane per round; the weighted sum of v splits the
// positions over NG = blockDim/(Dh/4) thread groups, four a thread per
// round, then adds the groups' sums as a tree.  blockDim.x: a multiple of
// 32, at most 1024, at least Dh/4; Dh % 4 == 0; pos < min(T, GPT_MAX_T).
#define GPT_ATTN_UNROLL 4

__global__ void __launch_bounds__(1024) attn_decode_f32(float *y, float *kc, float *vc, const float *qkv,
                                                        int B, int H, int Dh, int T, const int *posd, float scale) {
  int pos = posd[0];
  __shared__ float p[GPT_MAX_T];
  __shared__ float4 part[1024];
  __shared__ float red[32];
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  int D = H * Dh, C = Dh >> 2, D4 = D >> 2;
  int len = min(pos + 1, min(T, GPT_MAX_T));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int Q = 1;
  while (Q < C && Q < 32) Q <<= 1;
  int per_warp = 32 / Q, sub = lane / Q, ql = lane - sub * Q;
  int NG = blockDim.x / C, grp = threadIdx.x / C, c4 = threadIdx.x - grp * C;
  for (int bh = blockIdx.x; bh < B * H; bh += gridDim.x) {
    int b = bh / H, h = bh - b * H;
    const float *q = qkv + (long long)b * 3 * D + h * Dh;
    float *kb = kc + (long long)b * T * D + h * Dh;
    float *vb = vc + (long long)b * T * D + h * Dh;
    for (int d = threadIdx.x; d < Dh; d += blockDim.x) {
      kb[(long long)(len - 1) * D + d] = q[D + d];
      vb[(long long)(len - 1) * D + d] = q[2 * D + d];
    }
    __syncthreads();                               // the new row is visible to the block
    // Scores: lane group `sub` of warp `warp` takes positions t0 + j*per_warp + sub.
    const float4 *q4 = (const float4 *)q, *k4 = (const float4 *)kb;
    float m = -INFINITY;
    for (int t0 = warp * per_warp * GPT_ATTN_UNROLL; t0 < len; t0 += nw * per_warp * GPT_ATTN_UNROLL) {
      float s[GPT_ATTN_UNROLL];
#pragma unroll
      for (int j = 0; j < GPT_ATTN_UNROLL; j++) s[j] = 0.0f;
      for (int c = ql; c < C; c += Q) {
        float4 qv = q4[c], kv[GPT_ATTN_UNROLL];
#pragma unroll
        for (int j = 0; j < GPT_ATTN_UNROLL; j++) {
          int t = t0 + j * per_warp + sub;
          kv[j] = t < len ? k4[(long long)t * D4 + c] : zero;
        }
#pragma unroll
        for (int j = 0; j < GPT_ATTN_UNROLL; j++) s[j] = gpt_dot4(qv, kv[j], s[j]);
      }
#pragma unroll
      for (int j = 0; j < GPT_ATTN_UNROLL; j++) {
        float v = s[j];
        for (int o = Q >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
        v *= scale;
        int t = t0 + j * per_warp + sub;
        if (t < len) {
          if (ql == 0) p[t] = v;
          m = fmaxf(m, v);
        }
      }
    }
    m = gt_block_max(m, red);                      // its barriers also publish p
    float sum = 0.0f;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
      float e = expf(p[t] - m);
      p[t] = e;
      sum += e;
    }
    sum = gt_block_sum(sum, red);
    float inv = 1.0f / sum;
    // Weighted values: thread (grp, c4) sums positions grp, grp + NG, ...
    const float4 *v4 = (const float4 *)vb;
    float4 acc = zero;
    if (grp < NG) {
      for (int t0 = grp; t0 < len; t0 += NG * GPT_ATTN_UNROLL) {
        float4 vv[GPT_ATTN_UNROLL];
#pragma unroll
        for (int j = 0; j < GPT_ATTN_UNROLL; j++) {
          int t = t0 + j * NG;
          vv[j] = t < len ? v4[(long long)t * D4 + c4] : zero;
        }
#pragma unroll
        for (int j = 0; j < GPT_ATTN_UNROLL; j++) {
          int t = t0 + j * NG;
          float w = t < len ? p[t] : 0.0f;
          acc.x = fmaf(w, vv[j].x, acc.x);
          acc.y = fmaf(w, vv[j].y, acc.y);
          acc.z = fmaf(w, vv[j].z, acc.z);
          acc.w = fmaf(w, vv[j].w, acc.w);
        }
      }
      part[threadIdx.x] = acc;
    }
    __syncthreads();
    for (int n = NG; n > 1;) {                     // add the groups' sums as a tree
      int half = (n + 1) >> 1;
      if (grp < n - half) {
        float4 a = part[threadIdx.x], o = part[threadIdx.x + half * C];
        a.x += o.x; a.y += o.y; a.z += o.z; a.w += o.w;
        part[threadIdx.x] = a;
      }
      n = half;
      __syncthreads();
    }
    if (threadIdx.x < C) {
      float4 r = part[threadIdx.x];
      float *yr = y + (long long)b * D + h * Dh + 4 * threadIdx.x;
      yr[0] = r.x * inv; yr[1] = r.y * inv; yr[2] = r.z * inv; yr[3] = r.w * inv;
    }
    __syncthreads();                               // p and part are reused by the next (b, h)
  }
}

// -- Greedy finish --------------------------------------------------------------

// One block per sequence (blocks striding over B): next = the first maximum
// of logits row b; tok[b] = eot once sequence b is done, else next.  When
// live != 0 a sequence whose next is eot becomes done (done[b] = 1, a device
// flag the host reads every few steps) and tok[b] is kept in hist[b, pos]
// (hist is [Bmax, hstride]; a pos outside it is skipped).
__global__ void argmax_finish_f32(int *tok, int *done, int *hist, const float *logits, int B, int V, int eot,
                                  int live, int hstride, const int *posd) {
  int pos = posd[0];
  __shared__ float redv[32];
  __shared__ int redi[32];
  for (int b = blockIdx.x; b < B; b += gridDim.x) {
    const float *xr = logits + (long long)b * V;
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int j0 = threadIdx.x; j0 < V; j0 += 8 * blockDim.x) {   // eight loads in flight a thread
      float x8[8];
#pragma unroll
      for (int u = 0; u < 8; u++) {
        int j = j0 + u * blockDim.x;
        x8[u] = j < V ? xr[j] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < 8; u++) {
        int j = j0 + u * blockDim.x;
        if (j < V) gt_argmax_pick(&v, &i, x8[u], j);
      }
    }
    gt_block_argmax(&v, &i, redv, redi);
    if (threadIdx.x == 0) {
      int n = (i == 0x7fffffff) ? 0 : i;
      int d = done[b];
      int t = d ? eot : n;
      tok[b] = t;
      if (live) {
        if (!d && n == eot) done[b] = 1;
        if (pos >= 0 && pos < hstride) hist[(long long)b * hstride + pos] = t;
      }
    }
    __syncthreads();
  }
}

// -- Set-up helpers ---------------------------------------------------------

__device__ __forceinline__ unsigned int gpt_hash(unsigned int x) {
  x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
  return x;
}

// y[i] = scale * (a normal deviate from a hash of (seed, i)) + shift.
__global__ void randn_f32(float *y, long long n, int seed, float scale, float shift) {
  GPT_STRIDE_LOOP(i, n) {
    unsigned int k = (unsigned int)(i >> 1) * 2u;
    unsigned int h1 = gpt_hash(gpt_hash(k ^ (unsigned int)seed * 0x9e3779b9U) + 0x632be5abU);
    unsigned int h2 = gpt_hash(h1 ^ 0x85ebca6bU);
    float u1 = ((h1 >> 8) + 0.5f) * (1.0f / 16777216.0f);
    float u2 = ((h2 >> 8) + 0.5f) * (1.0f / 16777216.0f);
    float r = sqrtf(-2.0f * logf(u1));
    float a = 6.283185307179586f * u2;
    y[i] = scale * ((i & 1) ? r * sinf(a) : r * cosf(a)) + shift;
  }
}

// y[c, r] = x[r, c]: x is [R, Cn], y is [Cn, R] (the tied LM head from wte).
__global__ void transpose_f32(float *y, const float *x, int R, int Cn) {
  GPT_STRIDE_LOOP(k, (long long)R * Cn) {
    long long r = k / Cn, c = k - r * Cn;
    y[c * R + r] = x[k];
  }
}
