// block_reduce.cuh - warp and block reductions shared by the kernel library
// (#include "block_reduce.cuh": gt.load inlines files beside the .cu).
// blockDim.x must be a multiple of 32, at most 1024.
#ifndef GT_BLOCK_REDUCE_CUH
#define GT_BLOCK_REDUCE_CUH

// NVRTC compiles without math.h, so INFINITY may be missing there.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

struct gt_op_sum { __device__ float operator()(float a, float b) const { return a + b; } };
struct gt_op_max { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };

// Every lane of the warp gets op over the warp's values.
template <class Op> __device__ __forceinline__ float gt_warp_reduce(float v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}

// Every thread gets op over the block's values (init: op's identity).  red:
// 32 shared floats; the trailing barrier makes red reusable by the next
// reduction.  Threads combine the per-warp partials in the same order, so
// all see the same value.
template <class Op> __device__ float gt_block_reduce(float v, float *red, float init, Op op) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = gt_warp_reduce(v, op);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = init;
  for (int w = 0; w < nw; w++) t = op(t, red[w]);
  __syncthreads();
  return t;
}

__device__ __forceinline__ float gt_warp_sum(float v) { return gt_warp_reduce(v, gt_op_sum()); }
__device__ __forceinline__ float gt_block_sum(float v, float *red) { return gt_block_reduce(v, red, 0.0f, gt_op_sum()); }
__device__ __forceinline__ float gt_block_max(float v, float *red) { return gt_block_reduce(v, red, -INFINITY, gt_op_max()); }

// (value, index) pairs: the larger value wins, ties go to the smaller index.
__device__ __forceinline__ void gt_argmax_pick(float *v, int *i, float ov, int oi) {
  if (ov > *v || (ov == *v && oi < *i)) { *v = ov; *i = oi; }
}

// The block's first maximum of the threads' (v, i) pairs lands in thread 0's
// *v, *i (an empty block: i stays 0x7fffffff).  redv, redi: 32 shared each.
__device__ void gt_block_argmax(float *v, int *i, float *redv, int *redi) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffff, *v, o);
    int oi = __shfl_xor_sync(0xffffffff, *i, o);
    gt_argmax_pick(v, i, ov, oi);
  }
  if (lane == 0) { redv[warp] = *v; redi[warp] = *i; }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < nw; w++) gt_argmax_pick(v, i, redv[w], redi[w]);
}

// The index (0-based) of the first maximum of xr[0..N), in thread 0 (0 for
// an empty row).  redv, redi: 32 shared each.
__device__ int gt_row_argmax(const float *xr, int N, float *redv, int *redi) {
  float v = -INFINITY;
  int i = 0x7fffffff;
  for (int j = threadIdx.x; j < N; j += blockDim.x) gt_argmax_pick(&v, &i, xr[j], j);
  gt_block_argmax(&v, &i, redv, redi);
  return i == 0x7fffffff ? 0 : i;
}

#endif
