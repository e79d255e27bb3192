/* half.c - half.h's conversions against an oracle built from exact double
   arithmetic: every f16 and bf16 value, every float within a few ulps of each
   value and of each midpoint between neighbours, a stride through all 2^32
   floats, and the edge cases by name. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "ctest.h"
#include "gt.h"
#include "half.h"

/* -- The oracle ---------------------------------------------------------- */

/* The value of f16 / bf16 bits by their definition (ldexp of the fields). */
static double f16_value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double s = (h & 0x8000) ? -1 : 1;
  if (e == 31) return m ? NAN : s * INFINITY;
  return e ? s * ldexp(1024 + m, e - 25) : s * ldexp(m, -24);
}
static double bf16_value(uint16_t h) {
  int e = (h >> 7) & 255, m = h & 127;
  double s = (h & 0x8000) ? -1 : 1;
  if (e == 255) return m ? NAN : s * INFINITY;
  return e ? s * ldexp(128 + m, e - 134) : s * ldexp(m, -133);
}

/* Nearest finite non-negative value of the format to |x| by binary search
   over its ordered bits 0..maxbits; ties go to the even pattern; past the
   largest finite value by half an ulp or more: infinity (inf_bits). */
static uint16_t nearest(double x, double (*value)(uint16_t), uint16_t maxbits, uint16_t inf_bits) {
  double a = fabs(x), top = value(maxbits), ulp = top - value((uint16_t)(maxbits - 1));
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  if (a >= top + ulp / 2) return sign | inf_bits;
  unsigned lo = 0, hi = maxbits;
  while (hi - lo > 1) { unsigned mid = (lo + hi) / 2; if (value((uint16_t)mid) <= a) lo = mid; else hi = mid; }
  double dl = a - value((uint16_t)lo), dh = value((uint16_t)hi) - a;
  unsigned r = dl < dh ? lo : dh < dl ? hi : (lo & 1 ? hi : lo);
  if (a >= value(maxbits)) r = maxbits;
  return (uint16_t)(sign | r);
}

static int same16(uint16_t got, float f, int bf) {
  if (f != f) return bf ? (got & 0x7fff) > 0x7f80 : (got & 0x7fff) > 0x7c00;
  return got == (bf ? nearest(f, bf16_value, 0x7f7f, 0x7f80) : nearest(f, f16_value, 0x7bff, 0x7c00));
}

/* -- The checks ---------------------------------------------------------- */

static int bad;   /* mismatches of one check, the first few printed */
static void check_float(float f) {
  int ok_h = same16(gt_f32_to_f16(f), f, 0), ok_b = same16(gt_f32_to_bf16(f), f, 1);
  if ((!ok_h || !ok_b) && bad++ < 5)
    fprintf(stderr, "half: %.9g (0x%08x): f16 0x%04x, bf16 0x%04x\n", f, gt_f32_bits(f), gt_f32_to_f16(f), gt_f32_to_bf16(f));
}

static void around(double v) {   /* floats within 3 ulps of v (v finite) */
  float f = (float)v;
  uint32_t u = gt_f32_bits(f);
  for (int d = -3; d <= 3; d++) check_float(gt_bits_f32(u + (uint32_t)d));
}

static void widening(void) {
  int w = 0;
  for (unsigned h = 0; h < 65536; h++) {
    double a = f16_value((uint16_t)h), b = bf16_value((uint16_t)h);
    float fa = gt_f16_to_f32((uint16_t)h), fb = gt_bf16_to_f32((uint16_t)h);
    w += !(a == fa || (a != a && fa != fa)) || !(b == fb || (b != b && fb != fb));
    if (a == a) w += gt_f32_to_f16(fa) != h;       /* exact round trips */
    if (b == b) w += gt_f32_to_bf16(fb) != h;
  }
  GT_CHECK(w == 0);
}

static void neighbourhoods(void) {
  bad = 0;
  for (unsigned h = 0; h < 0x7c00; h++) {         /* each value, its midpoint with the next, both signs */
    double v = f16_value((uint16_t)h), next = h + 1 < 0x7c00 ? f16_value((uint16_t)(h + 1)) : 65520.0;
    around(v), around(-v), around((v + next) / 2), around(-(v + next) / 2);
  }
  for (unsigned h = 0; h < 0x7f80; h += 7) {
    double v = bf16_value((uint16_t)h), next = bf16_value((uint16_t)(h + 1));
    around(v), around(-(v + next) / 2);
  }
  GT_CHECK(bad == 0);
  bad = 0;
  for (uint64_t u = 0; u < 0x100000000ull; u += 65521) check_float(gt_bits_f32((uint32_t)u));
  GT_CHECK(bad == 0);
}

static void edges(void) {
  GT_CHECK(gt_f32_to_f16(0.0f) == 0x0000 && gt_f32_to_f16(-0.0f) == 0x8000);
  GT_CHECK(gt_f32_to_bf16(0.0f) == 0x0000 && gt_f32_to_bf16(-0.0f) == 0x8000);
  GT_CHECK(gt_f32_to_f16(INFINITY) == 0x7c00 && gt_f32_to_f16(-INFINITY) == 0xfc00);
  GT_CHECK(gt_f32_to_bf16(INFINITY) == 0x7f80 && gt_f32_to_bf16(-INFINITY) == 0xff80);
  GT_CHECK(gt_f32_to_f16(NAN) == 0x7fff && gt_f32_to_bf16(NAN) == 0x7fff);
  GT_CHECK(gt_f32_to_f16(65504.0f) == 0x7bff && gt_f32_to_f16(65519.996f) == 0x7bff && gt_f32_to_f16(65520.0f) == 0x7c00);
  GT_CHECK(gt_f32_to_bf16(3.3895314e38f) == 0x7f7f && gt_f32_to_bf16(FLT_MAX) == 0x7f80);   /* FLT_MAX rounds up */
  GT_CHECK(gt_f32_to_f16(ldexpf(1, -24)) == 0x0001 && gt_f32_to_f16(ldexpf(1, -25)) == 0x0000);    /* tie to even: 0 */
  GT_CHECK(gt_f32_to_f16(ldexpf(3, -25)) == 0x0002);                                               /* 1.5 ulp: tie to 2 */
  GT_CHECK(gt_f32_to_f16(ldexpf(1, -14)) == 0x0400 && gt_f32_to_f16(ldexpf(1023, -24)) == 0x03ff);
  GT_CHECK(gt_f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00 && gt_f32_to_f16(1.0f + ldexpf(3, -11)) == 0x3c02);
  GT_CHECK(gt_f32_to_bf16(1.0f + ldexpf(1, -8)) == 0x3f80 && gt_f32_to_bf16(1.0f + ldexpf(3, -8)) == 0x3f82);
  GT_CHECK(gt_f32_to_bf16(1e-40f) == 0x0001 && gt_bf16_to_f32(0x0001) == gt_bits_f32(0x10000));
  GT_CHECK(gt_f16_to_f32(0x0001) == ldexpf(1, -24) && gt_f16_to_f32(0x7bff) == 65504.0f && isnan(gt_f16_to_f32(0x7e00)));
  float in[3] = { 1.5f, -2.0f, 1e9f }, back[3];
  uint16_t bits[3];
  int32_t ints[3];
  GT_CHECK(gt_convert(bits, GT_BF16, in, GT_F32, 3) == GT_OK && gt_convert(back, GT_F32, bits, GT_BF16, 3) == GT_OK);
  GT_CHECK(back[0] == 1.5f && back[1] == -2.0f && bits[2] == gt_f32_to_bf16(1e9f));
  GT_CHECK(gt_convert(ints, GT_I32, in, GT_F32, 3) == GT_OK && ints[0] == 1 && ints[1] == -2 && ints[2] == 1000000000);
  GT_CHECK(gt_convert(ints, 99, in, GT_F32, 3) == GT_ERR && gt_dtype_size(GT_BF16) == 2 && gt_dtype_size(99) == 0);
}

void test_half(void) {
  edges();
  widening();
  neighbourhoods();
}

/* -- incdir.c: which sources need the CUDA headers, and where they are ------ */

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "incdir.h"

static void touch(const char *path) { FILE *f = fopen(path, "w"); if (f) fclose(f); }

void test_incdir(void) {
  GT_CHECK(gt_uses_half("__global__ void k(__half *y) {}") && gt_uses_half("const nv_bfloat16 *x"));
  GT_CHECK(gt_uses_half("y = __hadd(a, b);") && gt_uses_half("#include <cuda_bf16.h>") && gt_uses_half("half h;"));
  GT_CHECK(!gt_uses_half("float halfway = 1.5e-3f; int behalf;") && !gt_uses_half("__global__ void k(float *y) {}"));
  char dir[] = "/tmp/gtlua-incdir-XXXXXX", p[256], opts[2600], searched[3000];
  if (!mkdtemp(dir)) { GT_CHECK(0); return; }
  const char *old = getenv("GTLUA_CUDA_INCLUDE");
  char *saved = old ? strdup(old) : NULL;
  setenv("GTLUA_CUDA_INCLUDE", dir, 1);
  snprintf(p, sizeof p, "%s/cuda_fp16.h", dir), touch(p);
  int r = gt_cuda_include(NULL, opts, sizeof opts, searched, sizeof searched);
  GT_CHECK(r != 0 || strncmp(searched, dir, strlen(dir)) == 0);     /* half the headers: searched, not taken */
  GT_CHECK(r != 0 || strstr(opts, dir) == NULL);
  snprintf(p, sizeof p, "%s/cuda_bf16.h", dir), touch(p);
  snprintf(p, sizeof p, "%s/cccl", dir), mkdir(p, 0700);
  char want[600];
  snprintf(want, sizeof want, "-I%s -I%s/cccl", dir, dir);
  GT_CHECK(gt_cuda_include(NULL, opts, sizeof opts, searched, sizeof searched) == 0 && strcmp(opts, want) == 0);
  if (saved) setenv("GTLUA_CUDA_INCLUDE", saved, 1); else unsetenv("GTLUA_CUDA_INCLUDE");
  free(saved);
  rmdir(p);
  snprintf(p, sizeof p, "%s/cuda_fp16.h", dir), unlink(p);
  snprintf(p, sizeof p, "%s/cuda_bf16.h", dir), unlink(p);
  rmdir(dir);
}
