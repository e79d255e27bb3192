/* cpu_prelude.h - the CUDA-compat header that the cpu backend compiles kernel sources with. */
#ifndef GT_CPU_PRELUDE_H
#define GT_CPU_PRELUDE_H

/* -- Executor interface (plain C: backend_cpu.c includes this part) ------ */

/* One worker's view of the running block.  The executor owns it and keeps
   tid current: in loop mode the entry sets it per thread, in fiber mode the
   executor sets it on every switch.  Warp calls name lanes 0..31 of the
   caller's warp (32 consecutive linear thread ids). */
typedef struct gt_cpu_dim { unsigned x, y, z; } gt_cpu_dim;
typedef struct gt_cpu_ctx gt_cpu_ctx;
struct gt_cpu_ctx {
  gt_cpu_dim tid, bid, bdim, gdim;   /* threadIdx, blockIdx, blockDim, gridDim */
  void *smem;                        /* dynamic shared memory (launch smem bytes) */
  int fiber;                         /* 1: the entry runs one thread; 0: it loops over the block */
  void (*sync)(gt_cpu_ctx *c);                                  /* __syncthreads */
  void (*syncwarp)(gt_cpu_ctx *c, unsigned mask);               /* __syncwarp */
  unsigned long long (*shfl)(gt_cpu_ctx *c, unsigned mask, unsigned long long v, int src);
  unsigned (*vote)(gt_cpu_ctx *c, unsigned mask, int pred, int mode); /* 0 ballot 1 any 2 all 3 active */
};
/* What compile generates per kernel: extern "C" void gt_entry_<i>(ctx, args). */
typedef void (*gt_cpu_entry)(gt_cpu_ctx *c, void **args);

#ifdef __cplusplus
/* -- CUDA surface ------------------------------------------------------- */
#include <assert.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <utility>

#define __GTLUA_CPU__ 1
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
/* A worker runs one block at a time, so per-thread storage is per-block
   (thread_local at block scope is static). */
#define __shared__ thread_local

static thread_local gt_cpu_ctx *gt_ctx_;
typedef gt_cpu_dim uint3;
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
  dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
#define threadIdx (static_cast<const uint3 &>(gt_ctx_->tid))
#define blockIdx (static_cast<const uint3 &>(gt_ctx_->bid))
#define blockDim (static_cast<const uint3 &>(gt_ctx_->bdim))
#define gridDim (static_cast<const uint3 &>(gt_ctx_->gdim))
static constexpr int warpSize = 32;
/* `extern __shared__ T name[];` is rewritten into `T *name = (T *)gt_dyn_smem();`
   in a function, and into `static gt_dyn_shared_<T> name;` outside one. */
static inline void *gt_dyn_smem() { return gt_ctx_->smem; }
template <class T> struct gt_dyn_shared_ { operator T *() const { return (T *)gt_dyn_smem(); } };

#define GT_VEC2(T, V, A) struct __attribute__((aligned(A))) V { T x, y; }; \
  static inline V make_##V(T x, T y) { return V{x, y}; }
#define GT_VEC3(T, V) struct V { T x, y, z; }; \
  static inline V make_##V(T x, T y, T z) { return V{x, y, z}; }
#define GT_VEC4(T, V, A) struct __attribute__((aligned(A))) V { T x, y, z, w; }; \
  static inline V make_##V(T x, T y, T z, T w) { return V{x, y, z, w}; }
GT_VEC2(float, float2, 8) GT_VEC3(float, float3) GT_VEC4(float, float4, 16)
GT_VEC2(int, int2, 8) GT_VEC3(int, int3) GT_VEC4(int, int4, 16)
GT_VEC2(unsigned, uint2, 8) GT_VEC4(unsigned, uint4, 16)
GT_VEC2(double, double2, 16)
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }

/* -- Barriers, shuffles, votes ----------------------------------------- */
static inline void __syncthreads() { gt_ctx_->sync(gt_ctx_); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { gt_ctx_->syncwarp(gt_ctx_, mask); }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline int gt_lane_() {
  const gt_cpu_dim &t = gt_ctx_->tid, &d = gt_ctx_->bdim;
  return (int)((t.x + d.x * (t.y + d.y * t.z)) & 31);
}
template <class T> static inline T gt_shfl_(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 8, "__shfl_*_sync: values of at most 8 bytes");
  unsigned long long bits = 0;
  memcpy(&bits, &v, sizeof v);
  bits = gt_ctx_->shfl(gt_ctx_, mask, bits, src);
  memcpy(&v, &bits, sizeof v);
  return v;
}
template <class T> static inline T __shfl_sync(unsigned m, T v, int src, int w = 32) {
  return gt_shfl_(m, v, (gt_lane_() & ~(w - 1)) + (src & (w - 1)));
}
template <class T> static inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) {
  int l = gt_lane_();
  return gt_shfl_(m, v, (l & (w - 1)) >= (int)d ? l - (int)d : l);
}
template <class T> static inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) {
  int l = gt_lane_();
  return gt_shfl_(m, v, (l & (w - 1)) + (int)d < w ? l + (int)d : l);
}
template <class T> static inline T __shfl_xor_sync(unsigned m, T v, int x, int w = 32) {
  int l = gt_lane_(), s = l ^ x;
  return gt_shfl_(m, v, ((s ^ l) & ~(w - 1)) || s > 31 ? l : s);
}
static inline unsigned __ballot_sync(unsigned m, int p) { return gt_ctx_->vote(gt_ctx_, m, p, 0); }
static inline int __any_sync(unsigned m, int p) { return (int)gt_ctx_->vote(gt_ctx_, m, p, 1); }
static inline int __all_sync(unsigned m, int p) { return (int)gt_ctx_->vote(gt_ctx_, m, p, 2); }
static inline unsigned __activemask() { return gt_ctx_->vote(gt_ctx_, 0xffffffffu, 1, 3); }

/* -- Atomics (really atomic across worker threads) --------------------- */
template <class T, class F> static inline T gt_atomic_rmw_(T *p, F f) {
  T old, nv;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  do nv = f(old);
  while (!__atomic_compare_exchange(p, &old, &nv, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
  return old;
}
#define GT_ATOMIC_INT(T) \
  static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); } \
  static inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); } \
  static inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); } \
  static inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); } \
  static inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); } \
  static inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); } \
  static inline T atomicMax(T *p, T v) { return gt_atomic_rmw_(p, [v](T o) { return o > v ? o : v; }); } \
  static inline T atomicMin(T *p, T v) { return gt_atomic_rmw_(p, [v](T o) { return o < v ? o : v; }); } \
  static inline T atomicCAS(T *p, T cmp, T v) { \
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return cmp; }
GT_ATOMIC_INT(int) GT_ATOMIC_INT(unsigned) GT_ATOMIC_INT(long long) GT_ATOMIC_INT(unsigned long long)
#define GT_ATOMIC_FP(T) \
  static inline T atomicAdd(T *p, T v) { return gt_atomic_rmw_(p, [v](T o) { return o + v; }); } \
  static inline T atomicSub(T *p, T v) { return gt_atomic_rmw_(p, [v](T o) { return o - v; }); } \
  static inline T atomicExch(T *p, T v) { T o; __atomic_exchange(p, &v, &o, __ATOMIC_SEQ_CST); return o; }
GT_ATOMIC_FP(float) GT_ATOMIC_FP(double)
static inline unsigned atomicInc(unsigned *p, unsigned m) {
  return gt_atomic_rmw_(p, [m](unsigned o) { return o >= m ? 0u : o + 1; });
}
static inline unsigned atomicDec(unsigned *p, unsigned m) {
  return gt_atomic_rmw_(p, [m](unsigned o) { return (o == 0 || o > m) ? m : o - 1; });
}

/* -- Math and bits ------------------------------------------------------ */
/* glibc declares (but does not export) __expf & co., and newer glibc declares
   rsqrtf (C23), so these are macros. */
#define __expf expf
#define __exp10f exp10f
#define __logf logf
#define __log2f log2f
#define __log10f log10f
#define __sinf sinf
#define __cosf cosf
#define __tanf tanf
#define __powf powf
#define __sincosf sincosf
#define rsqrtf gt_rsqrtf_
#define rsqrt gt_rsqrt_
static inline float gt_rsqrtf_(float x) { return 1.0f / sqrtf(x); }
static inline double gt_rsqrt_(double x) { return 1.0 / sqrt(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
#define GT_MINMAX(T) \
  static inline T min(T a, T b) { return a < b ? a : b; } \
  static inline T max(T a, T b) { return a > b ? a : b; }
GT_MINMAX(int) GT_MINMAX(unsigned) GT_MINMAX(long) GT_MINMAX(unsigned long)
GT_MINMAX(long long) GT_MINMAX(unsigned long long)
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
template <class A, class B> static inline auto min(A a, B b) -> decltype(a + b) {
  return min((decltype(a + b))a, (decltype(a + b))b);
}
template <class A, class B> static inline auto max(A a, B b) -> decltype(a + b) {
  return max((decltype(a + b))a, (decltype(a + b))b);
}
template <class D, class S> static inline D gt_bits_(S s) { D d; memcpy(&d, &s, sizeof d); return d; }
static inline int __float_as_int(float f) { return gt_bits_<int>(f); }
static inline unsigned __float_as_uint(float f) { return gt_bits_<unsigned>(f); }
static inline float __int_as_float(int i) { return gt_bits_<float>(i); }
static inline float __uint_as_float(unsigned i) { return gt_bits_<float>(i); }
static inline long long __double_as_longlong(double d) { return gt_bits_<long long>(d); }
static inline double __longlong_as_double(long long i) { return gt_bits_<double>(i); }
static inline int __float2int_rn(float f) { return (int)nearbyintf(f); }
static inline int __float2int_rz(float f) { return (int)f; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline void __trap() { __builtin_trap(); }

/* -- Half precision: what cuda_fp16.h and cuda_bf16.h give --------------- */
/* __half and __nv_bfloat16 hold their bits; conversions are half.h's (the
   bits CUDA's __float2half_rn / __float2bfloat16_rn give), arithmetic is done
   in float and rounded once (exact for +, -, *, /: float has more than twice
   the bits), as the device's half instructions round.  An #include of
   cuda_fp16.h or cuda_bf16.h in a kernel is dropped on this backend. */
#define __CUDA_FP16_H__
#define __CUDA_BF16_H__
struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };
#define GT_HALF_TYPE(H, TO, FROM) \
  struct H { \
    unsigned short __x; \
    H() = default; \
    H(const H##_raw &r) : __x(r.x) {} \
    H(float f) : __x(TO(f)) {} \
    H(double f) : __x(TO((float)f)) {} \
    template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type> H(I i) : __x(TO((float)i)) {} \
    operator float() const { return FROM(__x); } \
    operator H##_raw() const { return H##_raw{__x}; } \
    H &operator=(float f) { __x = TO(f); return *this; } \
    H &operator+=(const H &o) { return *this = (float)*this + (float)o; } \
    H &operator-=(const H &o) { return *this = (float)*this - (float)o; } \
    H &operator*=(const H &o) { return *this = (float)*this * (float)o; } \
    H &operator/=(const H &o) { return *this = (float)*this / (float)o; } \
  }; \
  static inline H operator+(const H &a, const H &b) { return H((float)a + (float)b); } \
  static inline H operator-(const H &a, const H &b) { return H((float)a - (float)b); } \
  static inline H operator*(const H &a, const H &b) { return H((float)a * (float)b); } \
  static inline H operator/(const H &a, const H &b) { return H((float)a / (float)b); } \
  static inline H operator-(const H &a) { H r; r.__x = (unsigned short)(a.__x ^ 0x8000u); return r; } \
  static inline H operator+(const H &a) { return a; } \
  static inline bool operator==(const H &a, const H &b) { return (float)a == (float)b; } \
  static inline bool operator!=(const H &a, const H &b) { return (float)a != (float)b; } \
  static inline bool operator<(const H &a, const H &b) { return (float)a < (float)b; } \
  static inline bool operator<=(const H &a, const H &b) { return (float)a <= (float)b; } \
  static inline bool operator>(const H &a, const H &b) { return (float)a > (float)b; } \
  static inline bool operator>=(const H &a, const H &b) { return (float)a >= (float)b; }
GT_HALF_TYPE(__half, gt_f32_to_f16, gt_f16_to_f32)
GT_HALF_TYPE(__nv_bfloat16, gt_f32_to_bf16, gt_bf16_to_f32)
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;
struct __align__(4) __half2 { __half x, y; };
struct __align__(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __half2 half2;
typedef __nv_bfloat162 nv_bfloat162;
/* The functions, for both types (P: the name's part, H the type, H2 its pair). */
#define GT_HALF_FUNCS(P, H, H2) \
  static inline H __float2##P(float f) { return H(f); } \
  static inline H __float2##P##_rn(float f) { return H(f); } \
  static inline H __double2##P(double f) { return H((float)f); } \
  static inline float __##P##2float(H h) { return (float)h; } \
  static inline H __ushort_as_##P(unsigned short u) { H h; h.__x = u; return h; } \
  static inline unsigned short __##P##_as_ushort(H h) { return h.__x; } \
  static inline short __##P##_as_short(H h) { return (short)h.__x; } \
  static inline H __short_as_##P(short u) { H h; h.__x = (unsigned short)u; return h; } \
  static inline int __##P##2int_rn(H h) { return (int)nearbyintf((float)h); } \
  static inline int __##P##2int_rz(H h) { return (int)(float)h; } \
  static inline H __int2##P##_rn(int i) { return H((float)i); } \
  static inline H2 __float2##P##2_rn(float f) { return H2{H(f), H(f)}; } \
  static inline H2 __floats2##P##2_rn(float a, float b) { return H2{H(a), H(b)}; } \
  static inline H2 __float22##P##2_rn(float2 f) { return H2{H(f.x), H(f.y)}; } \
  static inline float2 __##P##22float2(H2 h) { return float2{(float)h.x, (float)h.y}; } \
  static inline H2 __##P##2##P##2(H h) { return H2{h, h}; } \
  static inline H2 __halves2##P##2(H a, H b) { return H2{a, b}; } \
  static inline H __low2##P(H2 h) { return h.x; } \
  static inline H __high2##P(H2 h) { return h.y; } \
  static inline H2 __lows2##P##2(H2 a, H2 b) { return H2{a.x, b.x}; } \
  static inline H2 __highs2##P##2(H2 a, H2 b) { return H2{a.y, b.y}; } \
  static inline H2 __lowhigh2highlow(H2 h) { return H2{h.y, h.x}; } \
  static inline float __low2float(H2 h) { return (float)h.x; } \
  static inline float __high2float(H2 h) { return (float)h.y; } \
  static inline H __hadd(H a, H b) { return a + b; } \
  static inline H __hsub(H a, H b) { return a - b; } \
  static inline H __hmul(H a, H b) { return a * b; } \
  static inline H __hdiv(H a, H b) { return a / b; } \
  static inline H __hneg(H a) { return -a; } \
  static inline H __habs(H a) { H r; r.__x = (unsigned short)(a.__x & 0x7fffu); return r; } \
  static inline H __hfma(H a, H b, H c) { return H((float)fma((double)(float)a, (double)(float)b, (double)(float)c)); } \
  static inline H __hadd_rn(H a, H b) { return a + b; } \
  static inline H __hmul_rn(H a, H b) { return a * b; } \
  static inline H __hsub_rn(H a, H b) { return a - b; } \
  static inline bool __hisnan(H a) { return (a.__x & 0x7fffu) > (P##_INF_BITS_); } \
  static inline int __hisinf(H a) { return (a.__x & 0x7fffu) == (P##_INF_BITS_) ? (a.__x & 0x8000u ? -1 : 1) : 0; } \
  static inline H __hmax(H a, H b) { return __hisnan(a) ? b : __hisnan(b) ? a : a > b ? a : b; } \
  static inline H __hmin(H a, H b) { return __hisnan(a) ? b : __hisnan(b) ? a : a < b ? a : b; } \
  static inline bool __heq(H a, H b) { return a == b; } \
  static inline bool __hne(H a, H b) { return !__hisnan(a) && !__hisnan(b) && a != b; } \
  static inline bool __hlt(H a, H b) { return a < b; } \
  static inline bool __hle(H a, H b) { return a <= b; } \
  static inline bool __hgt(H a, H b) { return a > b; } \
  static inline bool __hge(H a, H b) { return a >= b; } \
  static inline H2 __hadd2(H2 a, H2 b) { return H2{a.x + b.x, a.y + b.y}; } \
  static inline H2 __hsub2(H2 a, H2 b) { return H2{a.x - b.x, a.y - b.y}; } \
  static inline H2 __hmul2(H2 a, H2 b) { return H2{a.x * b.x, a.y * b.y}; } \
  static inline H2 __h2div(H2 a, H2 b) { return H2{a.x / b.x, a.y / b.y}; } \
  static inline H2 __hneg2(H2 a) { return H2{-a.x, -a.y}; } \
  static inline H2 __habs2(H2 a) { return H2{__habs(a.x), __habs(a.y)}; } \
  static inline H2 __hfma2(H2 a, H2 b, H2 c) { return H2{__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; } \
  static inline H2 __hmax2(H2 a, H2 b) { return H2{__hmax(a.x, b.x), __hmax(a.y, b.y)}; } \
  static inline H2 __hmin2(H2 a, H2 b) { return H2{__hmin(a.x, b.x), __hmin(a.y, b.y)}; } \
  static inline H2 operator+(const H2 &a, const H2 &b) { return __hadd2(a, b); } \
  static inline H2 operator-(const H2 &a, const H2 &b) { return __hsub2(a, b); } \
  static inline H2 operator*(const H2 &a, const H2 &b) { return __hmul2(a, b); } \
  static inline H2 operator/(const H2 &a, const H2 &b) { return __h2div(a, b); } \
  static inline H hsqrt(H a) { return H(sqrtf((float)a)); } \
  static inline H hrsqrt(H a) { return H(1.0f / sqrtf((float)a)); } \
  static inline H hexp(H a) { return H(expf((float)a)); } \
  static inline H hlog(H a) { return H(logf((float)a)); } \
  static inline H htanh(H a) { return H(tanhf((float)a)); } \
  static inline H hrcp(H a) { return H(1.0f / (float)a); } \
  static inline H hfloor(H a) { return H(floorf((float)a)); } \
  static inline H hceil(H a) { return H(ceilf((float)a)); } \
  static inline H atomicAdd(H *p, H v) { return gt_atomic_rmw_(p, [v](H o) { return o + v; }); }
#define half_INF_BITS_ 0x7c00u
#define bfloat16_INF_BITS_ 0x7f80u
GT_HALF_FUNCS(half, __half, __half2)
GT_HALF_FUNCS(bfloat16, __nv_bfloat16, __nv_bfloat162)
#undef half_INF_BITS_
#undef bfloat16_INF_BITS_
static inline __nv_bfloat16 __float2bfloat16_rz(float f) { return __ushort_as_bfloat16((unsigned short)(__float_as_uint(f) >> 16)); }
static inline __half __float2half_rz(float f) {
  __half h = __float2half_rn(f);   /* one step toward zero when rounding went away from it */
  if (!__hisnan(h) && fabsf((float)h) > fabsf(f)) h.__x = (unsigned short)(h.__x - 1);
  return h;
}
static inline __half2 make_half2(__half a, __half b) { return __half2{a, b}; }
static inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162{a, b}; }
static inline __nv_bfloat16 __half2bfloat16(__half h) { return __nv_bfloat16((float)h); }

/* -- Entry points ------------------------------------------------------- */
/* GT_CPU_ENTRY(sym, kernel) defines extern "C" sym(ctx, args): it unpacks
   args[i] as the kernel's i-th parameter type and runs the kernel once
   (fiber mode) or for every thread of the block (loop mode). */
template <class F> struct gt_entry_;
template <class... P> struct gt_entry_<void (*)(P...)> {
  static constexpr size_t n = sizeof...(P);
  template <void (*K)(P...), size_t... I> static void run(gt_cpu_ctx *c, void **a, std::index_sequence<I...>) {
    std::tuple<typename std::decay<P>::type...> v(*(typename std::decay<P>::type *)a[I]...);
    gt_ctx_ = c;
    if (c->fiber) { K(std::get<I>(v)...); return; }
    for (unsigned z = 0; z < c->bdim.z; z++)
      for (unsigned y = 0; y < c->bdim.y; y++)
        for (unsigned x = 0; x < c->bdim.x; x++) {
          c->tid.x = x; c->tid.y = y; c->tid.z = z;
          /* the stores happen before each thread's body runs: a fault in it
             reports this thread (the compiler could otherwise keep x in a
             register and store tid once, after the loop) */
          __asm__ __volatile__("" : : "m"(c->tid));
          K(std::get<I>(v)...);
        }
  }
};
/* (its own names are gt_-prefixed: a kernel may be called c, a or E) */
#define GT_CPU_ENTRY(sym, k) \
  extern "C" __attribute__((visibility("default"))) void sym(gt_cpu_ctx *gt_ctx_arg_, void **gt_args_) { \
    using gt_E_ = gt_entry_<decltype(&k)>; \
    gt_E_::template run<&k>(gt_ctx_arg_, gt_args_, std::make_index_sequence<gt_E_::n>()); }
#endif /* __cplusplus */
#endif
