/* kernel.c - C tests of kernel.c: signature parsing. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "kernel.h"
#include "ctest.h"

void test_kernel(void) {
  static gt_kdecl ks[8];
  char err[GT_ERRLEN];
  int n = 0;
  const char *src =
    "// __global__ void commented(int x)\n"
    "extern \"C\" __global__ void __launch_bounds__(256) axpb(float *__restrict__ x, int n, float a, const float *b) {}\n"
    "__device__ float helper(float x) { return x; }\n"
    "__global__ void mixed(const long long* ids, unsigned char *m, size_t n, double d, bool f, unsigned u) { }\n"
    "__global__ void noargs(void) {}\n";
  GT_CHECK(gt_kernel_parse(src, ks, 8, &n, err) == GT_OK);
  GT_CHECK(n == 3);
  GT_CHECK(!strcmp(ks[0].name, "axpb") && ks[0].np == 4);
  GT_CHECK(ks[0].p[0].ptype == GT_P_OUT && ks[0].p[0].pdtype == GT_F32 && !strcmp(ks[0].p[0].name, "x"));
  GT_CHECK(ks[0].p[1].ptype == GT_P_I32 && ks[0].p[2].ptype == GT_P_F32);
  GT_CHECK(ks[0].p[3].ptype == GT_P_IN && !strcmp(ks[0].p[3].text, "const float *"));
  GT_CHECK(ks[1].p[0].ptype == GT_P_IN && ks[1].p[0].pdtype == GT_I64);
  GT_CHECK(ks[1].p[1].ptype == GT_P_OUT && ks[1].p[1].pdtype == GT_U8);
  GT_CHECK(ks[1].p[2].ptype == GT_P_U64 && ks[1].p[3].ptype == GT_P_F64 && ks[1].p[4].ptype == GT_P_BOOL && ks[1].p[5].ptype == GT_P_U32);
  GT_CHECK(ks[2].np == 0);
  GT_CHECK(gt_kernel_parse("__global__ void bad(float **p) {}", ks, 8, &n, err) == GT_ERR && strstr(err, "pointer to a pointer"));
  GT_CHECK(gt_kernel_parse("__global__ void bad(half h) {}", ks, 8, &n, err) == GT_ERR && strstr(err, "'h'"));
  /* what NVRTC compiles: a device C header blanked, a host header or a std:: name refused at its line */
  const char *ok = "#include <cmath>\n// std::vector\n__global__ void k(float *y) { y[0] = sqrtf(\"std::x\"[0]); }\n";
  char out[256];
  strcpy(out, ok);
  GT_CHECK(gt_kernel_portable(NULL, ok, out, "a.cu") == GT_OK && !strncmp(out, "                \n// std::vector", 30));
  strcpy(out, "x\n  #  include <vector>\n");
  GT_CHECK(gt_kernel_portable(NULL, out, out, "a.cu") == GT_ERR && strstr(gt_errmsg(NULL), "a.cu:2: #include <vector>: NVRTC"));
  strcpy(out, "#line 7 \"h.cuh\"\n__device__ int f() { return std::min(1, 2); }\n");
  GT_CHECK(gt_kernel_portable(NULL, out, out, "a.cu") == GT_ERR && strstr(gt_errmsg(NULL), "h.cuh:7: std::min: NVRTC"));
  strcpy(out, "#include <cuda_fp16.h>\n__device__ int mystd::x;\n");
  GT_CHECK(gt_kernel_portable(NULL, out, out, "a.cu") == GT_OK && out[0] == '#');
}
