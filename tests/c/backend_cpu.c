/* backend_cpu.c - C tests of backend_cpu.c: fiber and loop kernels, faults. */
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "ctest.h"

static const char *test_fiber_src =   /* fiber mode: the source names barriers */
  "#line 1 \"fiber_test.cu\"\n"
  "__global__ void block_sum(const float *x, float *out) {\n"
  "  __shared__ float s[256];\n"
  "  unsigned t = threadIdx.x;\n"
  "  s[t] = x[blockIdx.x * 256 + t];\n"
  "  __syncthreads();\n"
  "  for (unsigned k = 128; k > 0; k >>= 1) { if (t < k) s[t] += s[t + k]; __syncthreads(); }\n"
  "  if (t == 0) out[blockIdx.x] = s[0];\n"
  "}\n"
  "__global__ void warp_sum(const float *x, float *out, unsigned *votes, int n) {\n"
  "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
  "  float v = i < n ? x[i] : 0.0f;\n"
  "  for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);\n"
  "  if ((threadIdx.x & 31) == 0) atomicAdd(out, v);\n"
  "  unsigned b = __ballot_sync(0xffffffffu, threadIdx.x & 1);\n"
  "  int all = __all_sync(0xffffffffu, i >= 0), any = __any_sync(0xffffffffu, i == 3);\n"
  "  double dv = __shfl_xor_sync(0xffffffffu, (double)threadIdx.x, 1);\n"
  "  if (i == 0) { votes[0] = b; votes[1] = all; votes[2] = any; votes[3] = (unsigned)dv; }\n"
  "}\n"
  "__global__ void dyn_reverse(const int *x, int *y) {\n"
  "  extern __shared__ __align__(16) int buf[];\n"
  "  int t = threadIdx.x, n = blockDim.x;\n"
  "  buf[t] = x[blockIdx.x * n + t];\n"
  "  __syncthreads();\n"
  "  y[blockIdx.x * n + t] = buf[n - 1 - t];\n"
  "}\n";
static const char *test_loop_src =    /* loop mode */
  "#line 1 \"loop_test.cu\"\n"
  "__global__ void count(float *acc, long long *hits) { atomicAdd(acc, 1.0f); atomicAdd(hits, 1LL); }\n"
  "__global__ void index2d(int *out, int w) {\n"
  "  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;\n"
  "  out[y * w + x] = x * 1000 + y;\n"
  "}\n"
  "__global__ void axpb(float *x, int n, float a, float b) {\n"
  "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
  "  if (i < n) x[i] = a * x[i] + b;\n"
  "}\n";
#define U3(x, y) ((const unsigned[]){x, y, 1})
#define PT(...) ((const uint8_t[]){__VA_ARGS__})

static void test_fiber_kernels(gt_backend *b, char *mem) {
  const gt_ksig sigs[] = {{"block_sum", 2, PT(GT_P_IN, GT_P_OUT), NULL, NULL},
                          {"warp_sum", 4, PT(GT_P_IN, GT_P_OUT, GT_P_OUT, GT_P_I32), NULL, NULL},
                          {"dyn_reverse", 2, PT(GT_P_IN, GT_P_OUT), NULL, NULL}};
  gt_bmodule *m = NULL;
  gt_bfunc *f[3];
  GT_CHECK(b->compile(b, test_fiber_src, "-DUNUSED=1 -arch=sm_90", sigs, 3, &m, f) == GT_BOK);
  if (!m) { fprintf(stderr, "%s\n", b->err); return; }
  float *x = (float *)mem, *out = x + 2048;
  unsigned *votes = (unsigned *)(out + 16);
  uint64_t px = (uintptr_t)x, pout = (uintptr_t)out, pvotes = (uintptr_t)votes;
  int ok = 1, n = 1000;
  for (int i = 0; i < 2048; i++) x[i] = (float)(i % 7);
  GT_CHECK(b->launch(b, f[0], U3(8, 1), U3(256, 1), 0, (void *[]){&px, &pout}) == GT_BOK);
  for (int k = 0; k < 8; k++) {
    float want = 0;
    for (int i = 0; i < 256; i++) want += (float)((k * 256 + i) % 7);
    ok &= out[k] == want;
  }
  GT_CHECK(ok);
  for (int i = 0; i < 1024; i++) x[i] = 1.0f;
  out[0] = 0;
  GT_CHECK(b->launch(b, f[1], U3(4, 1), U3(256, 1), 0, (void *[]){&px, &pout, &pvotes, &n}) == GT_BOK);
  GT_CHECK(out[0] == 1000.0f);
  GT_CHECK(votes[0] == 0xaaaaaaaau && votes[1] == 1 && votes[2] == 1 && votes[3] == 1);
  int *xi = (int *)mem, *yi = xi + 1024;
  uint64_t pxi = (uintptr_t)xi, pyi = (uintptr_t)yi;
  for (int i = 0; i < 384; i++) xi[i] = i;
  GT_CHECK(b->launch(b, f[2], U3(3, 1), U3(128, 1), 128 * 4, (void *[]){&pxi, &pyi}) == GT_BOK);
  GT_CHECK(yi[0] == 127 && yi[127] == 0 && yi[128] == 255 && yi[383] == 256);
  gt_backend_cpu_module_free(b, m);
}

static void test_loop_kernels(gt_backend *b, char *mem) {
  const gt_ksig sigs[] = {{"count", 2, PT(GT_P_OUT, GT_P_OUT), NULL, NULL}, {"index2d", 2, PT(GT_P_OUT, GT_P_I32), NULL, NULL},
                          {"axpb", 4, PT(GT_P_OUT, GT_P_I32, GT_P_F32, GT_P_F32), NULL, NULL}};
  gt_bmodule *m = NULL;
  gt_bfunc *f[3];
  GT_CHECK(b->compile(b, test_loop_src, NULL, sigs, 3, &m, f) == GT_BOK);
  if (!m) { fprintf(stderr, "%s\n", b->err); return; }
  float *acc = (float *)mem;
  long long *hits = (long long *)(mem + 64);
  int *o = (int *)(mem + 128), w = 32, ok = 1;
  uint64_t pacc = (uintptr_t)acc, phits = (uintptr_t)hits, po = (uintptr_t)o;
  *acc = 0, *hits = 0;
  GT_CHECK(b->launch(b, f[0], U3(64, 1), U3(128, 1), 0, (void *[]){&pacc, &phits}) == GT_BOK);
  GT_CHECK(*acc == 8192.0f && *hits == 8192);
  GT_CHECK(b->launch(b, f[1], U3(4, 3), U3(8, 4), 0, (void *[]){&po, &w}) == GT_BOK);
  for (int y = 0; y < 12; y++)
    for (int x = 0; x < 32; x++) ok &= o[y * 32 + x] == x * 1000 + y;
  GT_CHECK(ok);

  /* graph: axpb(x), copy x -> y, fill z; then patch, update, refuse */
  float *x = (float *)(mem + 8192), *y = x + 256, a = 2, c = 1;
  uint8_t *z = (uint8_t *)(y + 256);
  uint64_t px = (uintptr_t)x;
  int n = 256;
  gt_gnode nodes[3] = {
    {.kind = GT_GN_KERNEL, .fn = f[2], .grid = {4, 1, 1}, .block = {64, 1, 1}, .nargs = 4,
     .args = (void *[]){&px, &n, &a, &c}},
    {.kind = GT_GN_MEMCPY, .dst = (uintptr_t)y, .src = px, .bytes = 256 * 4, .ndeps = 1, .deps = (const int[]){0}},
    {.kind = GT_GN_MEMSET, .dst = (uintptr_t)z, .bytes = 16, .value = 7}};
  gt_bgraph *g = NULL;
  for (int i = 0; i < 256; i++) x[i] = 1;
  GT_CHECK(b->graph_create(b, nodes, 3, &g) == GT_BOK);
  if (!g) { gt_backend_cpu_module_free(b, m); return; }
  a = 100;   /* the graph holds copies of the values */
  GT_CHECK(b->graph_launch(b, g) == GT_BOK && x[0] == 3 && x[255] == 3 && y[17] == 3 && z[15] == 7);
  a = 3, c = 0;
  GT_CHECK(b->graph_set_kernel(b, g, 0, &nodes[0]) == GT_BOK);
  GT_CHECK(b->graph_launch(b, g) == GT_BOK && x[0] == 9 && y[255] == 9);
  a = 1, c = 1;
  GT_CHECK(b->graph_update(b, g, nodes, 3) == GT_BOK);
  GT_CHECK(b->graph_launch(b, g) == GT_BOK && x[3] == 10 && y[3] == 10);
  GT_CHECK(b->graph_update(b, g, nodes, 2) == GT_BREFUSED);
  GT_CHECK(b->graph_update(b, g, (gt_gnode[]){nodes[0], nodes[2], nodes[1]}, 3) == GT_BREFUSED);
  GT_CHECK(b->graph_launch(b, g) == GT_BOK && x[3] == 11 && y[3] == 11);
  b->graph_destroy(b, g);
  gt_backend_cpu_module_free(b, m);
}

/* A fault in a kernel fails its launch with a message; the next launch runs. */
static void test_faults(gt_backend *b) {
  const gt_ksig sigs[] = {{"poke", 3, PT(GT_P_OUT, GT_P_I64, GT_P_I32), NULL, (const char *const[]){"y", "at", "d"}},
                          {"sync_poke", 2, PT(GT_P_OUT, GT_P_I64), NULL, (const char *const[]){"y", "at"}}};
  gt_bmodule *m = NULL;
  gt_bfunc *f[2];
  GT_CHECK(b->compile(b, "__global__ void poke(float *y, long long at, int d) { y[at] = 1.0f / (float)(10 / d); }\n"
                         "__global__ void sync_poke(float *y, long long at) { __syncthreads(); y[at + threadIdx.x] = 2; }\n",
                      NULL, sigs, 2, &m, f) == GT_BOK);
  if (!m) { fprintf(stderr, "%s\n", b->err); return; }
  uint64_t base = 0;
  GT_CHECK(b->reserve(b, 4 * b->granularity, &base) == GT_BOK && b->commit(b, base, b->granularity) == GT_BOK);
  float *y = (float *)(uintptr_t)base;
  uint64_t py = base;
  long long past = 2 * b->granularity / sizeof(float), zero = 0;   /* reserved, not committed */
  int one = 1, none = 0;
  GT_CHECK(b->launch(b, f[0], U3(64, 1), U3(32, 1), 0, (void *[]){&py, &past, &one}) == GT_BERR);
  GT_CHECK(strstr(b->err, "kernel 'poke' made an invalid memory write") && strstr(b->err, "parameter 'y'"));
  GT_CHECK(b->launch(b, f[0], U3(4, 1), U3(32, 1), 0, (void *[]){&py, &zero, &none}) == GT_BERR);
  GT_CHECK(strstr(b->err, "integer division by zero") != NULL);
  GT_CHECK(b->launch(b, f[1], U3(8, 1), U3(64, 1), 0, (void *[]){&py, &past}) == GT_BERR);
  GT_CHECK(strstr(b->err, "kernel 'sync_poke' made an invalid memory write") != NULL);
  y[0] = 0;
  GT_CHECK(b->launch(b, f[0], U3(8, 1), U3(32, 1), 0, (void *[]){&py, &zero, &one}) == GT_BOK && y[0] == 0.1f);
  GT_CHECK(b->launch(b, f[1], U3(8, 1), U3(64, 1), 0, (void *[]){&py, &zero}) == GT_BOK && y[63] == 2);
  gt_backend_cpu_module_free(b, m);
  b->release(b, base, 4 * b->granularity);
}

void test_backend_cpu(void) {
  gt_backend b;
  gt_device_info info;
  gt_bmodule *m = NULL;
  gt_bfunc *f = NULL;
  gt_bevent *e0 = NULL, *e1 = NULL;
  uint64_t base = 0;
  size_t len = 4 << 20;
  double us = -1;
  GT_CHECK(gt_backend_cpu_open(&b) == GT_BOK);
  GT_CHECK(b.device_info(&b, &info) == GT_BOK && !strcmp(info.backend, "cpu") && info.sms >= 1);
  GT_CHECK(b.reserve(&b, len, &base) == GT_BOK && base % b.granularity == 0);
  GT_CHECK(b.commit(&b, base, len) == GT_BOK);
  test_fiber_kernels(&b, (char *)(uintptr_t)base);
  test_loop_kernels(&b, (char *)(uintptr_t)base + (1 << 20));
  test_faults(&b);
  const gt_ksig sig = {"k", 1, PT(GT_P_OUT), NULL, NULL};
  GT_CHECK(b.compile(&b, "#line 1 \"bad.cu\"\n__global__ void k(float *x) { x[0] = undefined_thing; }\n",
                     NULL, &sig, 1, &m, &f) == GT_BERR);
  GT_CHECK(strncmp(b.err, "cpu: kernel compile failed:\n", 28) == 0);
  GT_CHECK(strstr(b.err, "bad.cu:1") && strstr(b.err, "undefined_thing"));
  GT_CHECK(b.event_create(&b, &e0) == GT_BOK && b.event_create(&b, &e1) == GT_BOK);
  GT_CHECK(b.event_record(&b, e0) == GT_BOK && b.event_record(&b, e1) == GT_BOK);
  GT_CHECK(b.event_elapsed_us(&b, e0, e1, &us) == GT_BOK && us >= 0);
  b.event_destroy(&b, e0), b.event_destroy(&b, e1);
  GT_CHECK(b.decommit(&b, base, len) == GT_BOK && b.release(&b, base, len) == GT_BOK);
  b.shutdown(&b);
}
