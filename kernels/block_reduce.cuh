// block_reduce.cuh - warp and block reductions shared by the kernel library
// (#include "block_reduce.cuh": gt.load inlines files beside the .cu).
// blockDim.x must be a multiple of 32, at most 1024.
#ifndef GT_BLOCK_REDUCE_CUH
#define GT_BLOCK_REDUCE_CUH

// NVRTC compiles without math.h, so INFINITY may be missing there.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

__device__ __forceinline__ float gt_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

__device__ __forceinline__ float gt_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}

// Every thread gets the block's total.  red: 32 shared floats; the trailing
// barrier makes red reusable by the next reduction.  Threads add the per-warp
// partials in the same order, so all see the same value.
__device__ float gt_block_sum(float v, float *red) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = gt_warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < nw; w++) t += red[w];
  __syncthreads();
  return t;
}

__device__ float gt_block_max(float v, float *red) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = gt_warp_max(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = -INFINITY;
  for (int w = 0; w < nw; w++) t = fmaxf(t, red[w]);
  __syncthreads();
  return t;
}

#endif
