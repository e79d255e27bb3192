// gpt_half.cu - examples/gpt.lua's decode kernels for half-precision weights
// (bf16 with -DGPT_BF16, else f16): the matrices and the embeddings are
// stored as gpt_half and widened to f32 as they are loaded; activations,
// biases, layernorm parameters and the KV caches stay f32, and every product
// accumulates in f32.  A matrix product reads half the bytes of gpt.cu's,
// which it otherwise is (its templates, included with its f32 kernels).
// Requirements as gpt.cu's, with W 8-byte aligned.

#include "gpt.cu"

#ifdef GPT_BF16
typedef __nv_bfloat16 gpt_half;
__device__ __forceinline__ float gpt_hf(unsigned b) { return __bfloat162float(__ushort_as_bfloat16((unsigned short)b)); }
#else
typedef __half gpt_half;
__device__ __forceinline__ float gpt_hf(unsigned b) { return __half2float(__ushort_as_half((unsigned short)b)); }
#endif

template <> __device__ __forceinline__ float4 gpt_w4<gpt_half>(const gpt_half *row, int c) {
  uint2 u = __ldg((const uint2 *)row + c);
  return make_float4(gpt_hf(u.x & 0xffffu), gpt_hf(u.x >> 16), gpt_hf(u.y & 0xffffu), gpt_hf(u.y >> 16));
}

// embed_pos_f32 with half-precision tables.
__global__ void embed_pos_h(float *y, int *posd, const int *ids, const gpt_half *wte, const gpt_half *wpe,
                            int B, int D, int V, int pos) {
  if (blockIdx.x == 0 && threadIdx.x == 0) posd[0] = pos;
  GPT_STRIDE_LOOP(k, (long long)B * D) {
    int b = (int)(k / D), d = (int)(k - (long long)b * D);
    int id = ids[b];
    float e = (id >= 0 && id < V) ? (float)wte[(long long)id * D + d] : 0.0f;
    y[k] = e + (float)wpe[(long long)pos * D + d];
  }
}

// rows_linear_m<MT>_f32 with W [N, K] in half precision.
__global__ void rows_linear_m1_h(float *y, const float *x, const gpt_half *W, const float *bias, const float *res, const float *g, const float *beta, int M, int N, int K, int S, int mode) { GPT_ROWS_BODY(1) }
__global__ void rows_linear_m2_h(float *y, const float *x, const gpt_half *W, const float *bias, const float *res, const float *g, const float *beta, int M, int N, int K, int S, int mode) { GPT_ROWS_BODY(2) }
__global__ void rows_linear_m4_h(float *y, const float *x, const gpt_half *W, const float *bias, const float *res, const float *g, const float *beta, int M, int N, int K, int S, int mode) { GPT_ROWS_BODY(4) }
__global__ void rows_linear_m8_h(float *y, const float *x, const gpt_half *W, const float *bias, const float *res, const float *g, const float *beta, int M, int N, int K, int S, int mode) { GPT_ROWS_BODY(8) }
__global__ void rows_linear_m16_h(float *y, const float *x, const gpt_half *W, const float *bias, const float *res, const float *g, const float *beta, int M, int N, int K, int S, int mode) { GPT_ROWS_BODY(16) }
