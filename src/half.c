/* half.c - host conversions between element types (bf16 and f16 by half.h's rounding). */
#include "gt.h"
#include "half.h"

/* -- One element -------------------------------------------------------- */

static double load(const void *p, int dt, size_t i) {
  switch (dt) {
  case GT_F32: return ((const float *)p)[i];
  case GT_F64: return ((const double *)p)[i];
  case GT_F16: return gt_f16_to_f32(((const uint16_t *)p)[i]);
  case GT_BF16: return gt_bf16_to_f32(((const uint16_t *)p)[i]);
  case GT_I32: return ((const int32_t *)p)[i];
  case GT_I64: return (double)((const int64_t *)p)[i];
  case GT_U8: return ((const uint8_t *)p)[i];
  default: return 0;
  }
}

/* An integer from v: truncated toward zero, saturated at the type's range (a NaN is 0). */
static int64_t to_int(double v, double lo, double hi) {
  if (v != v) return 0;
  return v <= lo ? (int64_t)lo : v >= hi ? (int64_t)hi : (int64_t)v;
}

static void store(void *p, int dt, size_t i, double v) {
  switch (dt) {
  case GT_F32: ((float *)p)[i] = (float)v; break;
  case GT_F64: ((double *)p)[i] = v; break;
  case GT_F16: ((uint16_t *)p)[i] = gt_f32_to_f16((float)v); break;
  case GT_BF16: ((uint16_t *)p)[i] = gt_f32_to_bf16((float)v); break;
  case GT_I32: ((int32_t *)p)[i] = (int32_t)to_int(v, -2147483648.0, 2147483647.0); break;
  case GT_I64: ((int64_t *)p)[i] = to_int(v, -9223372036854775808.0, 9223372036854774784.0); break;
  case GT_U8: ((uint8_t *)p)[i] = (uint8_t)to_int(v, 0, 255); break;
  default: break;
  }
}

static int known(int dt) {
  return dt == GT_F32 || dt == GT_F64 || dt == GT_F16 || dt == GT_BF16 || dt == GT_I32 || dt == GT_I64 || dt == GT_U8;
}

/* -- Arrays ------------------------------------------------------------- */

int gt_convert(void *dst, int ddt, const void *src, int sdt, size_t n) {
  if (!known(ddt) || !known(sdt)) return GT_ERR;
  if (ddt == sdt) { memmove(dst, src, n * (size_t)gt_dtype_size(ddt)); return GT_OK; }
  if (sdt == GT_I64 && ddt != GT_F32 && ddt != GT_F64 && ddt != GT_F16 && ddt != GT_BF16) {
    for (size_t i = 0; i < n; i++) {   /* integers to integers exactly (an i64 past 2^53 is not a double) */
      int64_t v = ((const int64_t *)src)[i];
      if (ddt == GT_I32) ((int32_t *)dst)[i] = (int32_t)(v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : v);
      else ((uint8_t *)dst)[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    return GT_OK;
  }
  for (size_t i = 0; i < n; i++) store(dst, ddt, i, load(src, sdt, i));
  return GT_OK;
}

int gt_dtype_size(int dt) {
  switch (dt) {
  case GT_F32: case GT_I32: case GT_U32: return 4;
  case GT_F64: case GT_I64: case GT_U64: return 8;
  case GT_F16: case GT_BF16: return 2;
  case GT_U8: return 1;
  default: return 0;
  }
}

uint16_t gt_half_bits(float f, int dt) { return dt == GT_BF16 ? gt_f32_to_bf16(f) : gt_f32_to_f16(f); }
float gt_half_value(uint16_t h, int dt) { return dt == GT_BF16 ? gt_bf16_to_f32(h) : gt_f16_to_f32(h); }
