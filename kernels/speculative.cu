// speculative.cu - the kernels of greedy speculative decoding over
// examples/gpt.lua's model (examples/spec_kernels.lua launches them): token +
// position embedding, K/V stores and attention for R rows a sequence at
// per-sequence positions held on the device, greedy argmax into a token
// table, the acceptance of a verified draft, and the small counters of the
// device-side loops.
//
// The token table tok is [B, W] (W = 2k + 3): column 0 the token before the
// current one, column 1 the current token (the last one emitted, not yet fed
// to the target), columns 2 .. k+1 the draft's proposals d_1 .. d_k, columns
// k+2 .. 2k+2 the target's argmax t_0 .. t_k at the verified positions.  The
// token of column c (c <= k+1) lies at position pos[b] + c - 1.  A launch
// feeds R rows a sequence, columns c = col0 + (use_it ? it[0] : 0) + j for
// j < R, so one recorded kernel serves every pass of a device loop.  The K
// and V caches are [Bmax, T, D] per layer (examples/gpt.lua's layout).
//
// spec_attn_f32 computes what kernels/gpt.cu's attn_decode_f32 computes for
// the same query, position and block size, in the same order (bit for bit),
// so that the target's verify pass gives the plain decoder's logits exactly.

#include "block_reduce.cuh"

#define SPEC_MAX_T 1024       // gpt.cu's GPT_MAX_T
#define SPEC_UNROLL 4         // gpt.cu's GPT_ATTN_UNROLL

__device__ __forceinline__ float spec_dot4(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

// The column and position of row j of sequence b (the position clamped to [0, T)).
__device__ __forceinline__ int spec_col(const int *it, int col0, int use_it, int j) {
  return col0 + (use_it ? it[0] : 0) + j;
}
__device__ __forceinline__ int spec_pos(const int *pos, int b, int col, int T) {
  int p = pos[b] + col - 1;
  return p < 0 ? 0 : p >= T ? T - 1 : p;
}

// y[b*R + j, :] = wte[tok[b, col], :] + wpe[position, :] (an id outside [0, V): wpe's row alone).
__global__ void spec_embed_f32(float *y, const int *tok, const float *wte, const float *wpe, const int *pos,
                               const int *it, int B, int R, int D, int V, int T, int W, int col0, int use_it) {
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < (long long)B * R * D;
       k += (long long)blockDim.x * gridDim.x) {
    int r = (int)(k / D), d = (int)(k - (long long)r * D), b = r / R, j = r - b * R;
    int col = spec_col(it, col0, use_it, j);
    int id = tok[b * W + col];
    float e = (id >= 0 && id < V) ? wte[(long long)id * D + d] : 0.0f;
    y[k] = e + wpe[(long long)spec_pos(pos, b, col, T) * D + d];
  }
}

// Stores each row's k and v (qkv rows [q | k | v]) at its position in the caches.
__global__ void spec_kv_store_f32(float *kc, float *vc, const float *qkv, const int *pos, const int *it, int B, int R,
                                  int D, int T, int col0, int use_it) {
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < (long long)B * R * D;
       k += (long long)blockDim.x * gridDim.x) {
    int r = (int)(k / D), d = (int)(k - (long long)r * D), b = r / R, j = r - b * R;
    int p = pos[b] + spec_col(it, col0, use_it, j) - 1;
    if (p < 0 || p >= T) continue;
    long long o = ((long long)b * T + p) * D + d;
    kc[o] = qkv[(long long)r * 3 * D + D + d];
    vc[o] = qkv[(long long)r * 3 * D + 2 * D + d];
  }
}

// Row r = b*R + j attends over cache positions 0 .. its own (stored by
// spec_kv_store_f32 before): y[r, h*Dh + d] = sum_t softmax_t(scale q.k_t) v_t[d].
// A block per (row, head), striding; blockDim as attn_decode_f32's.
__global__ void __launch_bounds__(1024) spec_attn_f32(float *y, const float *kc, const float *vc, const float *qkv,
                                                      const int *pos, const int *it, int B, int R, int H, int Dh,
                                                      int T, int col0, int use_it, float scale) {
  __shared__ float p[SPEC_MAX_T];
  __shared__ float4 part[1024];
  __shared__ float red[32];
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  int D = H * Dh, C = Dh >> 2, D4 = D >> 2;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int Q = 1;
  while (Q < C && Q < 32) Q <<= 1;
  int per_warp = 32 / Q, sub = lane / Q, ql = lane - sub * Q;
  int NG = blockDim.x / C, grp = threadIdx.x / C, c4 = threadIdx.x - grp * C;
  for (int rh = blockIdx.x; rh < B * R * H; rh += gridDim.x) {
    int r = rh / H, h = rh - r * H, b = r / R, j = r - b * R;
    int len = min(pos[b] + spec_col(it, col0, use_it, j), min(T, SPEC_MAX_T));
    const float *q = qkv + (long long)r * 3 * D + h * Dh;
    const float *kb = kc + (long long)b * T * D + h * Dh;
    const float *vb = vc + (long long)b * T * D + h * Dh;
    const float4 *q4 = (const float4 *)q, *k4 = (const float4 *)kb;
    float m = -INFINITY;
    for (int t0 = warp * per_warp * SPEC_UNROLL; t0 < len; t0 += nw * per_warp * SPEC_UNROLL) {
      float s[SPEC_UNROLL];
#pragma unroll
      for (int u = 0; u < SPEC_UNROLL; u++) s[u] = 0.0f;
      for (int c = ql; c < C; c += Q) {
        float4 qv = q4[c], kv[SPEC_UNROLL];
#pragma unroll
        for (int u = 0; u < SPEC_UNROLL; u++) {
          int t = t0 + u * per_warp + sub;
          kv[u] = t < len ? k4[(long long)t * D4 + c] : zero;
        }
#pragma unroll
        for (int u = 0; u < SPEC_UNROLL; u++) s[u] = spec_dot4(qv, kv[u], s[u]);
      }
#pragma unroll
      for (int u = 0; u < SPEC_UNROLL; u++) {
        float v = s[u];
        for (int o = Q >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
        v *= scale;
        int t = t0 + u * per_warp + sub;
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
    const float4 *v4 = (const float4 *)vb;
    float4 acc = zero;
    if (grp < NG) {
      for (int t0 = grp; t0 < len; t0 += NG * SPEC_UNROLL) {
        float4 vv[SPEC_UNROLL];
#pragma unroll
        for (int u = 0; u < SPEC_UNROLL; u++) {
          int t = t0 + u * NG;
          vv[u] = t < len ? v4[(long long)t * D4 + c4] : zero;
        }
#pragma unroll
        for (int u = 0; u < SPEC_UNROLL; u++) {
          int t = t0 + u * NG;
          float w = t < len ? p[t] : 0.0f;
          acc.x = fmaf(w, vv[u].x, acc.x);
          acc.y = fmaf(w, vv[u].y, acc.y);
          acc.z = fmaf(w, vv[u].z, acc.z);
          acc.w = fmaf(w, vv[u].w, acc.w);
        }
      }
      part[threadIdx.x] = acc;
    }
    __syncthreads();
    for (int n = NG; n > 1;) {                     // the groups' sums as a tree
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
      float4 a = part[threadIdx.x];
      float *yr = y + (long long)r * D + h * Dh + 4 * threadIdx.x;
      yr[0] = a.x * inv; yr[1] = a.y * inv; yr[2] = a.z * inv; yr[3] = a.w * inv;
    }
    __syncthreads();                               // p and part serve the next (row, head)
  }
}

// A block per row r = b*R + j (striding): the first maximum of logits row r
// goes to tok[b, ocol0 + (use_it ? it[0] : 0) + j]; with last != 0 only row
// R-1 writes, at column ocol0 + (use_it ? it[0] : 0).
__global__ void spec_argmax_f32(int *tok, const float *logits, const int *it, int B, int R, int V, int W, int ocol0,
                                int use_it, int last) {
  __shared__ float redv[32];
  __shared__ int redi[32];
  for (int r = blockIdx.x; r < B * R; r += gridDim.x) {
    int b = r / R, j = r - b * R;
    if (last && j != R - 1) continue;              // (uniform over the block)
    int i = gt_row_argmax(logits + (long long)r * V, V, redv, redi);
    if (threadIdx.x == 0) tok[b * W + ocol0 + (use_it ? it[0] : 0) + (last ? 0 : j)] = i;
    __syncthreads();
  }
}

// The draft loop's counter: it = 1, go = k > 1 (begin); it += 1, go = it < k (tick).
__global__ void spec_draft_begin(int *it, int *go, int k) {
  if (blockIdx.x == 0 && threadIdx.x == 0) { it[0] = 1; go[0] = k > 1; }
}
__global__ void spec_draft_tick(int *it, int *go, int k) {
  if (blockIdx.x == 0 && threadIdx.x == 0) { it[0] += 1; go[0] = it[0] < k; }
}

// The acceptance, one thread for all B sequences: for each sequence still
// generating (cnt[b] < N and not done), n = the longest prefix of the draft
// d_1.. equal to the target's t_0..; t_0 .. t_n are emitted into
// hist[b, pos .. pos+n] (hist [Bmax, hs]: the token generated when position
// q was fed lies at q, as gpt.lua's hist), counting up to N; an eot ends the
// sequence (its later tokens are eot, written up to position p1 + N - 1).
// Then prev = the token at pos + n, cur = t_n, pos += n + 1.  stat[b] +=
// {n, 1, tokens emitted}.  go = some sequence still generating.
__global__ void spec_accept(int *tok, int *pos, int *cnt, int *done, int *hist, int *stat, int *go, int B, int W, int k,
                            int hs, int eot, int N, int p1) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int any = 0;
  for (int b = 0; b < B; b++) {
    int *tb = tok + b * W;
    if (!done[b] && cnt[b] < N) {
      int n = 0, q = pos[b], emitted = 0;
      while (n < k && tb[2 + n] == tb[k + 2 + n]) n++;
      for (int j = 0; j <= n && cnt[b] < N; j++) {
        int t = tb[k + 2 + j];
        if (q + j < hs) hist[(long long)b * hs + q + j] = t;
        cnt[b] += 1;
        emitted++;
        if (t == eot) {
          done[b] = 1;
          for (int e = q + j + 1; e < p1 + N && e < hs; e++) hist[(long long)b * hs + e] = eot;
          cnt[b] = N;
        }
      }
      tb[0] = tb[1 + n];
      tb[1] = tb[k + 2 + n];
      pos[b] = q + n + 1;
      stat[3 * b] += n;
      stat[3 * b + 1] += 1;
      stat[3 * b + 2] += emitted;
    }
    any |= !done[b] && cnt[b] < N;
  }
  go[0] = any;
}

// The host's decision put on the device: tok[b, 0..1] = s[b, 1..2], pos[b] = s[b, 0].
__global__ void spec_set_state(int *tok, int *pos, const int *s, int B, int W) {
  for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < B; b += blockDim.x * gridDim.x) {
    pos[b] = s[3 * b];
    tok[b * W] = s[3 * b + 1];
    tok[b * W + 1] = s[3 * b + 2];
  }
}

// y[i] *= a (the set-up's scaling of the upper layers' output projections).
__global__ void spec_scale_f32(float *y, long long n, float a) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x)
    y[i] *= a;
}
