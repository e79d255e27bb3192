// gpt.cu - the decoder-only kernels gt.ops lacks: token + position embedding,
// KV-cache store, one-query attention over the cache, greedy finish with an
// end-token flag, and two set-up helpers (random fill, transpose).
//
// Layout (examples/gpt.lua): hidden D = H heads x Dh; qkv rows are [q | k | v]
// (3*D floats per sequence, as GPT-2's c_attn); each layer's K and V caches are
// [Bmax, T, D] row-major, sequence b's position t at (b*T + t)*D.  A batch of
// B <= Bmax sequences uses the first B rows.  The position is a scalar
// argument, so a recorded graph serves every position (scalars are patched on
// replay).

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// Longest context attn_decode_f32 handles: its scores live in shared memory.
#define GPT_MAX_T 1024

#define GPT_STRIDE_LOOP(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)blockDim.x * gridDim.x)

// y[b, :] = wte[ids[b], :] + wpe[pos, :]; an id outside [0, V) gives wpe's row alone.
__global__ void embed_pos_f32(float *y, const int *ids, const float *wte, const float *wpe,
                              int B, int D, int V, int pos) {
  GPT_STRIDE_LOOP(k, (long long)B * D) {
    int b = (int)(k / D), d = (int)(k - (long long)b * D);
    int id = ids[b];
    float e = (id >= 0 && id < V) ? wte[(long long)id * D + d] : 0.0f;
    y[k] = e + wpe[(long long)pos * D + d];
  }
}

// kc[b, pos, :] = k of qkv row b, vc[b, pos, :] = v of qkv row b, for b < B.
__global__ void kv_store_f32(float *kc, float *vc, const float *qkv, int B, int D, int T, int pos) {
  GPT_STRIDE_LOOP(k, (long long)B * D) {
    int b = (int)(k / D), d = (int)(k - (long long)b * D);
    long long dst = ((long long)b * T + pos) * D + d;
    const float *row = qkv + (long long)b * 3 * D;
    kc[dst] = row[D + d];
    vc[dst] = row[2 * D + d];
  }
}

#include "block_reduce.cuh"

// One query per sequence against cache positions 0..len-1:
// y[b, h*Dh + d] = sum_t softmax_t(scale * q.k_t) v_t[d].
// One block per (sequence, head), blocks striding over B*H; blockDim.x a
// multiple of 32 (gpt.lua: Dh rounded up to 32).  len <= GPT_MAX_T.
__global__ void attn_decode_f32(float *y, const float *qkv, const float *kc, const float *vc,
                                int B, int H, int Dh, int T, int len, float scale) {
  __shared__ float p[GPT_MAX_T];
  __shared__ float red[32];
  int D = H * Dh;
  if (len > GPT_MAX_T) len = GPT_MAX_T;
  for (int bh = blockIdx.x; bh < B * H; bh += gridDim.x) {
    int b = bh / H, h = bh - b * H;
    const float *q = qkv + (long long)b * 3 * D + h * Dh;
    const float *kb = kc + (long long)b * T * D + h * Dh;
    const float *vb = vc + (long long)b * T * D + h * Dh;
    float m = -INFINITY;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
      const float *kr = kb + (long long)t * D;
      float s = 0.0f;
      for (int d = 0; d < Dh; d++) s += q[d] * kr[d];
      s *= scale;
      p[t] = s;
      m = fmaxf(m, s);
    }
    m = gt_block_max(m, red);
    float sum = 0.0f;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
      float e = expf(p[t] - m);
      p[t] = e;
      sum += e;
    }
    sum = gt_block_sum(sum, red);     // its barriers also publish p
    float inv = 1.0f / sum;
    for (int d = threadIdx.x; d < Dh; d += blockDim.x) {
      float acc = 0.0f;
      for (int t = 0; t < len; t++) acc += p[t] * vb[(long long)t * D + d];
      y[(long long)b * D + h * Dh + d] = acc * inv;
    }
    __syncthreads();                   // p is reused by the next (b, h)
  }
}

// Greedy finish: tok[b] = eot once sequence b is done, else next[b].  When
// live != 0 a sequence whose next token is eot becomes done (done[b] = 1, a
// device flag the host reads every few steps) and tok[b] is kept in
// hist[b, slot] (hist is [Bmax, hstride]; a slot outside it is skipped).
__global__ void finish_i32(int *tok, int *done, int *hist, const int *next, int B, int eot, int live,
                           int hstride, int slot) {
  GPT_STRIDE_LOOP(b, B) {
    int d = done[b];
    int n = next[b];
    int t = d ? eot : n;
    tok[b] = t;
    if (live) {
      if (!d && n == eot) done[b] = 1;
      if (slot >= 0 && slot < hstride) hist[b * hstride + slot] = t;
    }
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
