// paged.cu - the paged-KV-cache kernels of examples/paged.lua (a serving
// step: decodes and a chunk of one prompt in one batch of rows).
//
// A step's rows: [0, Bp) decode rows, the first nd of them real; [Bp, Bp+Cp)
// chunk rows, the first nc real; the rest are padding (a bucket's size).  A
// row r is real when r < nd or Bp <= r < Bp + nc (paged_real).  Per row, in
// persistent device arrays the host writes before the step: tok[r] (the
// token), pos[r] (its position), slot[r] (where its K and V go in the pool),
// seq[r] (its sequence's row of the block table).  The KV pool is one
// tensor [L, 2, NS, D]: layer l's K at ((2l) * NS + s) * D, V at
// ((2l + 1) * NS + s) * D for slot s = block * BS + offset; the block table
// is [S, NB] (block ids, -1 unused).  Pad rows write nothing and read
// nothing through the tables (their outputs are ignored).
//
// paged_attn_f32 is attn_decode_f32 (gpt.cu) reading K and V through the
// block table: the same partition of the work over the same block size, so
// one row's result is the same whichever rows share its step.

#include "block_reduce.cuh"

#define PAGED_MAX_T 1024
#define PAGED_UNROLL 4

#define PAGED_STRIDE_LOOP(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)blockDim.x * gridDim.x)

__device__ __forceinline__ bool paged_real(int r, int nd, int Bp, int nc) {
  return r < nd || (r >= Bp && r < Bp + nc);
}

// x[r, :] = wte[tok[r], :] + wpe[pos[r], :] for the M rows (pad rows too:
// the arrays hold valid ids and positions everywhere; their rows are ignored).
__global__ void paged_embed_f32(float *x, const int *tok, const int *pos, const float *wte, const float *wpe,
                                int M, int D, int V, int T) {
  PAGED_STRIDE_LOOP(k, (long long)M * D) {
    int r = (int)(k / D), d = (int)(k - (long long)r * D);
    int id = tok[r], p = pos[r];
    float e = (id >= 0 && id < V) ? wte[(long long)id * D + d] : 0.0f;
    x[k] = e + ((p >= 0 && p < T) ? wpe[(long long)p * D + d] : 0.0f);
  }
}

// Layer l's K and V of each real row (qkv rows are [q | k | v]) into the pool at slot[r].
__global__ void paged_kv_write_f32(float *kv, const float *qkv, const int *slot, int M, int D, int NS, int l,
                                   int nd, int Bp, int nc) {
  PAGED_STRIDE_LOOP(k, (long long)M * D) {
    int r = (int)(k / D), d = (int)(k - (long long)r * D);
    int s = slot[r];
    if (!paged_real(r, nd, Bp, nc) || s < 0 || s >= NS) continue;
    const float *q = qkv + (long long)r * 3 * D;
    kv[((long long)(2 * l) * NS + s) * D + d] = q[D + d];
    kv[((long long)(2 * l + 1) * NS + s) * D + d] = q[2 * D + d];
  }
}

// The pool slot of position t of the sequence whose block table row is bt.
__device__ __forceinline__ long long paged_slot(const int *bt, int t, int BS) {
  return (long long)bt[t / BS] * BS + (t % BS);
}

// y[r, h*Dh + d] = sum_t softmax_t(scale * q_r . k_t) v_t[d] over positions
// 0..pos[r] of row r's sequence, read through the block table (the row's own
// K and V are in the pool already: paged_kv_write_f32).  One block per (row,
// head), blocks striding over M*H; a pad row gives zeros.  blockDim.x: a
// multiple of 32, at most 1024, at least Dh/4; Dh % 4 == 0.
__global__ void __launch_bounds__(1024) paged_attn_f32(float *y, const float *kv, const float *qkv, const int *pos,
                                                       const int *seq, const int *btab, int M, int H, int Dh,
                                                       int NS, int l, int BS, int NB, float scale,
                                                       int nd, int Bp, int nc) {
  __shared__ float p[PAGED_MAX_T];
  __shared__ float4 part[1024];
  __shared__ float red[32];
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  int D = H * Dh, C = Dh >> 2;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int Q = 1;
  while (Q < C && Q < 32) Q <<= 1;
  int per_warp = 32 / Q, sub = lane / Q, ql = lane - sub * Q;
  int NG = blockDim.x / C, grp = threadIdx.x / C, c4 = threadIdx.x - grp * C;
  const float *kbase = kv + (long long)(2 * l) * NS * D, *vbase = kv + (long long)(2 * l + 1) * NS * D;
  for (int bh = blockIdx.x; bh < M * H; bh += gridDim.x) {
    int r = bh / H, h = bh - r * H;
    float *yr = y + (long long)r * D + h * Dh;
    if (!paged_real(r, nd, Bp, nc)) {
      for (int d = threadIdx.x; d < Dh; d += blockDim.x) yr[d] = 0.0f;
      continue;                                    // (uniform over the block: no barrier skipped unevenly)
    }
    int len = min(pos[r] + 1, PAGED_MAX_T);
    const int *bt = btab + (long long)seq[r] * NB;
    const float4 *q4 = (const float4 *)(qkv + (long long)r * 3 * D + h * Dh);
    float m = -INFINITY;
    for (int t0 = warp * per_warp * PAGED_UNROLL; t0 < len; t0 += nw * per_warp * PAGED_UNROLL) {
      float s[PAGED_UNROLL];
#pragma unroll
      for (int j = 0; j < PAGED_UNROLL; j++) s[j] = 0.0f;
      for (int c = ql; c < C; c += Q) {
        float4 qv = q4[c], kvv[PAGED_UNROLL];
#pragma unroll
        for (int j = 0; j < PAGED_UNROLL; j++) {
          int t = t0 + j * per_warp + sub;
          kvv[j] = t < len ? ((const float4 *)(kbase + paged_slot(bt, t, BS) * D + h * Dh))[c] : zero;
        }
#pragma unroll
        for (int j = 0; j < PAGED_UNROLL; j++) {
          s[j] = fmaf(qv.x, kvv[j].x, s[j]);
          s[j] = fmaf(qv.y, kvv[j].y, s[j]);
          s[j] = fmaf(qv.z, kvv[j].z, s[j]);
          s[j] = fmaf(qv.w, kvv[j].w, s[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < PAGED_UNROLL; j++) {
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
    float4 acc = zero;
    if (grp < NG) {
      for (int t0 = grp; t0 < len; t0 += NG * PAGED_UNROLL) {
        float4 vv[PAGED_UNROLL];
#pragma unroll
        for (int j = 0; j < PAGED_UNROLL; j++) {
          int t = t0 + j * NG;
          vv[j] = t < len ? ((const float4 *)(vbase + paged_slot(bt, t, BS) * D + h * Dh))[c4] : zero;
        }
#pragma unroll
        for (int j = 0; j < PAGED_UNROLL; j++) {
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
      float4 rr = part[threadIdx.x];
      float *o = yr + 4 * threadIdx.x;
      o[0] = rr.x * inv; o[1] = rr.y * inv; o[2] = rr.z * inv; o[3] = rr.w * inv;
    }
    __syncthreads();                               // p and part are reused by the next (row, head)
  }
}

// The rows whose logits the step samples: xs[i] = x[i] for the Bp decode
// rows, and xs[Bp] = x[Bp + nc - 1] (the chunk's last row) when R = Bp + 1.
__global__ void paged_gather_f32(float *xs, const float *x, int R, int Bp, int nc, int D) {
  PAGED_STRIDE_LOOP(k, (long long)R * D) {
    int i = (int)(k / D), d = (int)(k - (long long)i * D);
    int src = i < Bp ? i : Bp + (nc > 0 ? nc - 1 : 0);
    xs[k] = x[(long long)src * D + d];
  }
}

// tok[i] = the first maximum of logits row i (one block per row, striding).
__global__ void paged_argmax_f32(int *tok, const float *logits, int R, int V) {
  __shared__ float redv[32];
  __shared__ int redi[32];
  for (int b = blockIdx.x; b < R; b += gridDim.x) {
    const float *xr = logits + (long long)b * V;
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int j = threadIdx.x; j < V; j += blockDim.x) gt_argmax_pick(&v, &i, xr[j], j);
    gt_block_argmax(&v, &i, redv, redi);
    if (threadIdx.x == 0) tok[b] = (i == 0x7fffffff) ? 0 : i;
    __syncthreads();
  }
}
