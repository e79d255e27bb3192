/* half.h - f32 <-> bf16 / f16 conversions, round to nearest even, in plain C99.
   The one definition of these conversions: src/half.c (host copies and casts)
   includes it, and the cpu backend's prelude is compiled with this text in
   front of it (Makefile), so that a cpu kernel's __float2bfloat16_rn,
   __float2half_rn and the casts gtlua makes give the same bits as CUDA's.
   Exact on every float: a NaN becomes the canonical quiet NaN (0x7fff, as
   CUDA's), an overflow becomes infinity, subnormals round to nearest even. */
#ifndef GT_HALF_H
#define GT_HALF_H
#include <stdint.h>
#include <string.h>

static inline uint32_t gt_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float gt_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* bf16 is the top half of an f32: add half an ulp of the kept part (less one
   when the kept part is even) and truncate. */
static inline uint16_t gt_f32_to_bf16(float f) {
  uint32_t u = gt_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float gt_bf16_to_f32(uint16_t h) { return gt_bits_f32((uint32_t)h << 16); }

/* f16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; normal from 2^-14,
   subnormals in steps of 2^-24, largest finite 65504 (65520 rounds to inf). */
static inline uint16_t gt_f32_to_f16(float f) {
  uint32_t u = gt_f32_bits(f), a = u & 0x7fffffffu;
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  if (a > 0x7f800000u) return 0x7fff;
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (a >= 0x38800000u) {                       /* normal: rebias 127 -> 15, round at bit 13 */
    a += 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((a - 0x38000000u) >> 13));
  }
  if (a < 0x33000000u) return sign;             /* below 2^-25 (2^-25 itself ties to 0) */
  uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;   /* 14..24 */
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
  q += rem > halfway || (rem == halfway && (q & 1u));
  return (uint16_t)(sign | q);                 /* (q == 0x400: rounded up to the smallest normal) */
}

static inline float gt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return gt_bits_f32(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (!m) return gt_bits_f32(sign);
    e = 113;
    while (!(m & 0x400u)) m <<= 1, e--;
    return gt_bits_f32(sign | (e << 23) | ((m & 0x3ffu) << 13));
  }
  return gt_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}
#endif
