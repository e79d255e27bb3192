/* launch_probe.c: what one graph launch costs the host on this GPU, and
   what it depends on; no gtlua, the driver API and NVRTC alone.

   Build here (the CUDA toolkit's headers and stub libcuda), run on the GPU
   machine (carry build/):
     cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L scripts/bench/probes/launch_probe.c \
        -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -L/usr/local/cuda/lib64 \
        -lcuda -lnvrtc -Wl,-rpath,/usr/local/cuda/lib64 -o build/launch_probe
     taskset -c 4 build/launch_probe

   Part 1: a chain of N kernel nodes, each spinning a given number of clock
   cycles, launched onto an idle stream (a sync before each launch, as the
   bench's "cpu" column measures).  The launch returns later when the
   kernels run longer, so a long graph's own launch, not gtlua, sets
   grow-512's floor; RESULTS.md shows the table of the latest run.
   Part 2: the same chain launched from the device (a one-node graph whose
   kernel tail-launches it, CUDA 12 device graph launch): its host time is
   no lower than a host launch's and the tail launch adds device time to
   every step, so gtlua does not launch that way. */
#include <cuda.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { const char *s_ = "?"; cuGetErrorString(r_, &s_); \
  fprintf(stderr, "%s: %s (line %d)\n", #x, s_, __LINE__); exit(1); } } while (0)

/* cudaGraphLaunch on the device is a builtin the driver resolves when the
   module loads (as gt_cond_set's cudaGraphSetConditional): no -rdc. */
static const char src[] =
  "extern \"C\" __device__ int cudaGraphLaunch(unsigned long long g, unsigned long long s);\n"
  "extern \"C\" __global__ void tail(unsigned long long g) { cudaGraphLaunch(g, 0x0100000000000000ull); }\n"
  "extern \"C\" __global__ void spin(float *x, int n, long long cyc) {\n"
  "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
  "  long long t0 = clock64(); while (clock64() - t0 < cyc) ;\n"
  "  if (i < n) x[i] += 1.f;\n"
  "}\n";

static CUstream st;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

/* Median host time of one launch of e onto the idle stream, and of the
   launch and its sync (*step). */
static double idle_launch(CUgraphExec e, double *step) {
  enum { R = 41 };
  double h[R], s[R];
  for (int r = 0; r < R; r++) {
    double t0 = now_us();
    CK(cuGraphLaunch(e, st));
    h[r] = now_us() - t0;
    CK(cuStreamSynchronize(st));
    s[r] = now_us() - t0;
  }
  qsort(h, R, sizeof *h, cmp);
  qsort(s, R, sizeof *s, cmp);
  *step = s[R / 2];
  return h[R / 2];
}

static void add_kernel(CUgraph g, CUgraphNode *dep, CUfunction f, unsigned grid, unsigned block, void **args,
                       CUgraphNode *out) {
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.func = f;
  p.gridDimX = grid, p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = block, p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  CK(cuGraphAddKernelNode(out, g, dep, dep ? 1 : 0, &p));
}

int main(void) {
  CUdevice d;
  CUcontext ctx;
  CK(cuInit(0));
  CK(cuDeviceGet(&d, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, d));
  CK(cuCtxSetCurrent(ctx));
  CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  nvrtcProgram prog;
  const char *opts[] = { "--gpu-architecture=sm_90" };
  if (nvrtcCreateProgram(&prog, src, "probe.cu", 0, NULL, NULL) || nvrtcCompileProgram(prog, 1, opts)) {
    fprintf(stderr, "nvrtc failed\n");
    return 1;
  }
  size_t size;
  nvrtcGetCUBINSize(prog, &size);
  char *cubin = malloc(size);
  nvrtcGetCUBIN(prog, cubin);
  CUmodule mod;
  CUfunction kspin, ktail;
  CK(cuModuleLoadData(&mod, cubin));
  CK(cuModuleGetFunction(&kspin, mod, "spin"));
  CK(cuModuleGetFunction(&ktail, mod, "tail"));
  int n = 1 << 16;
  CUdeviceptr x;
  CK(cuMemAlloc(&x, (size_t)n * 4));
  const int sizes[] = { 32, 128, 512 };
  const long long cycles[] = { 0, 2000, 15000 };   /* ~0, ~1 and ~8 us at the H200's clock */
  printf("%6s %8s %16s %12s %16s %12s\n", "nodes", "cycles", "host launch us", "step us", "device launch us", "step us");
  for (int si = 0; si < 3; si++)
    for (int ci = 0; ci < 3; ci++) {
      int N = sizes[si];
      long long cyc = cycles[ci];
      void *args[] = { &x, &n, &cyc };
      CUgraph g, lg;
      CUgraphNode prev = NULL, node;
      CK(cuGraphCreate(&g, 0));
      for (int i = 0; i < N; i++) {
        add_kernel(g, prev ? &prev : NULL, kspin, 16, 256, args, &node);
        prev = node;
      }
      CUgraphExec host, dev, launcher;
      CK(cuGraphInstantiateWithFlags(&host, g, 0));
      CK(cuGraphUpload(host, st));
      CK(cuGraphInstantiateWithFlags(&dev, g, CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH));
      CK(cuGraphUpload(dev, st));
      unsigned long long handle = (unsigned long long)(size_t)dev;
      void *largs[] = { &handle };
      CK(cuGraphCreate(&lg, 0));
      add_kernel(lg, NULL, ktail, 1, 1, largs, &node);
      CK(cuGraphInstantiateWithFlags(&launcher, lg, 0));
      CK(cuGraphUpload(launcher, st));
      for (int r = 0; r < 3; r++) CK(cuGraphLaunch(host, st));
      CK(cuStreamSynchronize(st));
      double hs, ds;
      double h = idle_launch(host, &hs), dl = idle_launch(launcher, &ds);
      printf("%6d %8lld %16.2f %12.1f %16.2f %12.1f\n", N, cyc, h, hs, dl, ds);
      CK(cuGraphExecDestroy(launcher));
      CK(cuGraphExecDestroy(dev));
      CK(cuGraphExecDestroy(host));
      CK(cuGraphDestroy(lg));
      CK(cuGraphDestroy(g));
    }
  return 0;
}
