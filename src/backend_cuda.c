/* backend_cuda.c - the cuda backend: libcuda + NVRTC via dlopen, VMM memory, cached CUBINs, explicit graphs. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"

/* Compile and cache-hit counters for tests (the lead declares it in backend.h).
   Both are 0 for a backend that is not an open cuda backend. */
void gt_backend_cuda_counts(gt_backend *b, int *compiles, int *cache_hits);

#ifndef GT_HAVE_CUDA

/* -- Built without the CUDA headers ------------------------------------ */

/* Always fails: this build has no cuda backend. */
int gt_backend_cuda_open(gt_backend *b) {
  b->name = "cuda";
  b->impl = NULL;
  snprintf(b->err, GT_ERRLEN, "gtlua was built without the CUDA headers "
           "(set CUDA_HOME to a CUDA toolkit and rebuild)");
  return GT_BERR;
}

void gt_backend_cuda_counts(gt_backend *b, int *compiles, int *cache_hits) {
  (void)b;
  *compiles = *cache_hits = 0;
}

#else

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cuda.h>
#include <nvrtc.h>
#include "incdir.h"
#include "nccl.h"

#define MIN_DRIVER 12040          /* CUDA 12.4: conditional graph nodes */
#define SMEM_DEFAULT 49152        /* shared memory a block gets without opting in */

/* -- Driver and NVRTC entry points ------------------------------------- */

/* Each field is typed by the header's own prototype.  cuda.h #defines many
   names to their ABI versions (cuMemcpyHtoDAsync -> cuMemcpyHtoDAsync_v2), so
   a field, its type and XSTR(name) all follow the version the header means. */
#define CUDA_FUNCS(X) \
  X(cuInit) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) \
  X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuMemGetInfo) \
  X(cuMemGetAllocationGranularity) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate) \
  X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) \
  X(cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncGetAttribute) \
  X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) \
  X(cuGraphCreate) X(cuGraphDestroy) X(cuGraphAddKernelNode) X(cuGraphAddMemcpyNode) \
  X(cuGraphAddMemsetNode) X(cuGraphAddEmptyNode) X(cuGraphKernelNodeSetParams) \
  X(cuGraphMemcpyNodeSetParams) X(cuGraphMemsetNodeSetParams) X(cuGraphInstantiateWithFlags) \
  X(cuGraphUpload) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphExecKernelNodeSetParams) \
  X(cuGraphExecUpdate) \
  X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy)

#define NVRTC_FUNCS(X) \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcGetNumSupportedArchs) X(nvrtcGetSupportedArchs) \
  X(nvrtcCreateProgram) X(nvrtcDestroyProgram) X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) \
  X(nvrtcGetProgramLog) X(nvrtcAddNameExpression) X(nvrtcGetLoweredName) \
  X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX)

#define STR_(x) #x
#define XSTR(x) STR_(x)
#define FIELD(f) __typeof__(&f) f;

struct cuda_api { CUDA_FUNCS(FIELD) };
/* Conditional nodes (CUDA 12.4+): optional, a driver without them branches on the host. */
#define COND_FUNCS(X) X(cuGraphConditionalHandleCreate) X(cuGraphAddNode)
struct cond_api { COND_FUNCS(FIELD) };
/* Stream capture into a graph (CUDA 12.3+): how a collective (NCCL) joins a segment's graph. */
#define CAPTURE_FUNCS(X) X(cuStreamBeginCaptureToGraph) X(cuStreamGetCaptureInfo) X(cuStreamEndCapture)
struct capture_api { CAPTURE_FUNCS(FIELD) };
struct nvrtc_api { NVRTC_FUNCS(FIELD) };

/* -- State ------------------------------------------------------------- */

struct gt_bfunc {
  CUfunction f;
  unsigned smem_ok;             /* dynamic shared bytes launchable without (more) opt-in */
  int static_smem;
  char *name;                   /* as written in the source, for messages */
};

struct gt_bmodule {
  CUmodule m;
  int n;
  gt_bfunc fn[];
};

struct gt_bgraph {
  CUgraph graph;                /* the graph exec was instantiated from: its nodes name exec's nodes */
  CUgraphExec exec;
  int n;
  CUgraphNode *nodes;           /* per node; an IF/WHILE: its conditional node; a WHILE's END: the re-setting kernel */
  uint8_t *kind;                /* GT_GN_* per node, or KIND_EMPTY */
  gt_bfunc **fn;                /* kernel nodes: the function (an update may not change it) */
  int conds;                    /* conditional nodes in it (an update is refused then) */
  CUdeviceptr counters;         /* a pass counter per bounded WHILE (0: none) */
  struct cond_set *cset;        /* per node: an IF/WHILE's, or a WHILE's END's, kernel that reads p (a new p is patched there) */
  size_t delta;                 /* the device's free memory before instantiate + upload minus after (0: none seen) */
  int roots;                    /* nodes that wait for nothing (the graph's width, as the estimate weighs it) */
};

/* A gt_cond_set kernel node and its fixed arguments (graph_build fills it). */
struct cond_set { CUgraphNode node; unsigned long long handle; CUdeviceptr cnt; int first; };

struct gt_bevent { CUevent e; };

enum { KIND_EMPTY = 8 };        /* a 0-byte copy or fill: an empty node keeps the topology (past the GT_GN_* kinds) */

/* A reserved range; granule i is backed by its own allocation h[i] when on[i]. */
typedef struct cuda_resv {
  CUdeviceptr base;
  size_t bytes;
  CUmemGenericAllocationHandle *h;
  uint8_t *on;
} cuda_resv;

/* A code image: what NVRTC produced or the cache held. */
typedef struct cuda_image {
  int ptx;                      /* 0: CUBIN, 1: PTX (NUL-terminated) */
  size_t size;
  char *data;
  int n;
  char **lowered;               /* lowered (mangled) kernel names, one per signature */
} cuda_image;

typedef struct cuda_impl {
  gt_backend *b;
  void *libcuda, *libnvrtc;
  __typeof__(&cuGetProcAddress) getproc;
  __typeof__(&cuDriverGetVersion) driver_version;
  __typeof__(&cuGetErrorName) errname;
  __typeof__(&cuGetErrorString) errstring;
  struct cuda_api cu;
  struct nvrtc_api nv;
  int driver, nvrtc, ordinal;
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  int ctx_retained;
  int cubin;                    /* 1: compile sm_XY CUBIN; 0: compute_XY PTX for the driver to JIT */
  char arch[32];
  int smem_optin;
  size_t gran;
  CUmemAllocationProp prop;
  CUmemAccessDesc access;
  cuda_resv *resv; int nresv, capresv;
  CUgraphNode *deps; int *stamp; int capdeps, capstamp;
  char cachedir[3072];          /* "" until the first compile; "-" when there is none */
  struct cond_api cond;         /* NULL fields: the driver has no conditional nodes */
  int cond_bits;                /* -1 until asked: GT_COND_NODES | GT_COND_ELSE_NODES, or 0 */
  char cond_why[512];           /* why there are none */
  gt_bmodule *cond_mod;
  gt_bfunc *cond_set;           /* gt_cond_set: reads p, sets the conditional handle */
  int cal_done;                 /* graph memory calibrated (cuda_graph_bytes) */
  double cal_chain, cal_wide;   /* bytes a kernel node costs in a chain; what each root past the first adds */
  gt_bmodule *nop_mod;
  gt_bfunc *nop;                /* gt_nop, the calibration's kernel */
  gt_device_info info;
  int compiles, cache_hits;
  int inc_state;                /* 0 not searched yet; 1 inc holds the -I options; -1 not found (searched) */
  char inc[2600], searched[3000];
  struct capture_api cap;       /* NULL fields: no capture into a graph (collectives then run eagerly only) */
  gt_nccl *nccl;                /* gt.dist's communicator (NULL: none joined) */
} cuda_impl;

/* -- Errors ------------------------------------------------------------ */

static void err_append(gt_backend *b, const char *fmt, ...) {
  size_t len = strlen(b->err);
  va_list ap;
  if (len + 1 >= GT_ERRLEN) return;
  va_start(ap, fmt);
  vsnprintf(b->err + len, GT_ERRLEN - len, fmt, ap);
  va_end(ap);
}

static int sticky_error(CUresult r) {
  return r == CUDA_ERROR_ILLEGAL_ADDRESS || r == CUDA_ERROR_LAUNCH_FAILED ||
         r == CUDA_ERROR_ILLEGAL_INSTRUCTION || r == CUDA_ERROR_MISALIGNED_ADDRESS ||
         r == CUDA_ERROR_INVALID_ADDRESS_SPACE || r == CUDA_ERROR_INVALID_PC ||
         r == CUDA_ERROR_HARDWARE_STACK_ERROR || r == CUDA_ERROR_ASSERT ||
         r == CUDA_ERROR_LAUNCH_TIMEOUT;
}

/* Writes "cuda: <call> failed: <NAME> (<description>)"; GT_BOOM for out of memory. */
static int cu_fail(cuda_impl *I, const char *call, CUresult r) {
  const char *name = NULL, *desc = NULL;
  char num[32];
  if (!I->errname || I->errname(r, &name) != CUDA_SUCCESS || !name)
    snprintf(num, sizeof num, "CUresult %d", (int)r), name = num;
  if (!I->errstring || I->errstring(r, &desc) != CUDA_SUCCESS || !desc) desc = "no description";
  snprintf(I->b->err, GT_ERRLEN, "cuda: %s failed: %s (%s)", call, name, desc);
  if (sticky_error(r))
    err_append(I->b, "; a kernel failed on the device (maybe an earlier one: launches are "
               "asynchronous) and the CUDA context is lost; run under compute-sanitizer to find it");
  return r == CUDA_ERROR_OUT_OF_MEMORY ? GT_BOOM : GT_BERR;
}

static inline int cu_check(cuda_impl *I, const char *call, CUresult r) {
  return r == CUDA_SUCCESS ? GT_BOK : cu_fail(I, call, r);
}

static int nv_check(cuda_impl *I, const char *call, nvrtcResult r) {
  if (r == NVRTC_SUCCESS) return GT_BOK;
  snprintf(I->b->err, GT_ERRLEN, "cuda: %s failed: %s", call, I->nv.nvrtcGetErrorString(r));
  return r == NVRTC_ERROR_OUT_OF_MEMORY ? GT_BOOM : GT_BERR;
}

/* Every driver and NVRTC call goes through these: CU(I, cuLaunchKernel, ...). */
#define CU(I, fn, ...) cu_check((I), #fn, (I)->cu.fn(__VA_ARGS__))
#define NV(I, fn, ...) nv_check((I), #fn, (I)->nv.fn(__VA_ARGS__))

static const char *fmt_bytes(char *buf, size_t len, uint64_t v) {
  if (v >= (1ull << 30)) snprintf(buf, len, "%.1f GiB", v / 1073741824.0);
  else if (v >= (1ull << 20)) snprintf(buf, len, "%.1f MiB", v / 1048576.0);
  else if (v >= (1ull << 10)) snprintf(buf, len, "%.1f KiB", v / 1024.0);
  else snprintf(buf, len, "%llu bytes", (unsigned long long)v);
  return buf;
}

static int no_memory(gt_backend *b, const char *what) {
  snprintf(b->err, GT_ERRLEN, "cuda: out of host memory (%s)", what);
  return GT_BOOM;
}

/* -- Loading the libraries --------------------------------------------- */

/* The versioned ABI name the header means (abi) is what we need.  A driver at
   least as new as the header answers cuGetProcAddress for exactly that
   version; an older one is asked by symbol, so a missing ABI fails cleanly. */
static int resolve(cuda_impl *I, const char *base, const char *abi, void **slot) {
  void *p = NULL;
  if (I->getproc && I->driver >= CUDA_VERSION) {
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (I->getproc(base, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st) != CUDA_SUCCESS ||
        st != CU_GET_PROC_ADDRESS_SUCCESS)
      p = NULL;
  }
  if (!p) p = dlsym(I->libcuda, abi);
  if (!p && !strcmp(base, "cuEventElapsedTime"))  /* its _v2 is newer than 12.4, with the same ABI */
    p = dlsym(I->libcuda, base);
  if (!p) {
    snprintf(I->b->err, GT_ERRLEN, "cuda: the NVIDIA driver (CUDA %d.%d) has no %s, which gtlua "
             "(built with CUDA %d.%d headers) needs; update the driver",
             I->driver / 1000, I->driver % 1000 / 10, abi, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
    return GT_BERR;
  }
  *slot = p;
  return GT_BOK;
}

static int load_libcuda(cuda_impl *I) {
  gt_backend *b = I->b;
  if (!(I->libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))) {
    snprintf(b->err, GT_ERRLEN, "cuda: could not load libcuda.so.1 (no NVIDIA driver?): %s", dlerror());
    return GT_BERR;
  }
  *(void **)&I->driver_version = dlsym(I->libcuda, "cuDriverGetVersion");
  *(void **)&I->errname = dlsym(I->libcuda, "cuGetErrorName");
  *(void **)&I->errstring = dlsym(I->libcuda, "cuGetErrorString");
  *(void **)&I->getproc = dlsym(I->libcuda, XSTR(cuGetProcAddress));
  if (!I->driver_version || I->driver_version(&I->driver) != CUDA_SUCCESS) {
    snprintf(b->err, GT_ERRLEN, "cuda: libcuda.so.1 loaded but cuDriverGetVersion is missing or failed "
             "(a broken driver install?)");
    return GT_BERR;
  }
  if (I->driver < MIN_DRIVER) {
    snprintf(b->err, GT_ERRLEN, "cuda: the NVIDIA driver supports CUDA %d.%d; gtlua needs CUDA %d.%d "
             "or newer (update the driver)", I->driver / 1000, I->driver % 1000 / 10,
             MIN_DRIVER / 1000, MIN_DRIVER % 1000 / 10);
    return GT_BERR;
  }
#define RESOLVE(f) if (resolve(I, #f, XSTR(f), (void **)&I->cu.f)) return GT_BERR;
  CUDA_FUNCS(RESOLVE)
#undef RESOLVE
  /* optional: a missing one means "no conditional nodes", said by cond_support */
#define RESOLVE_OPT(f) if (resolve(I, #f, XSTR(f), (void **)&I->cond.f)) I->cond.f = NULL;
  COND_FUNCS(RESOLVE_OPT)
#undef RESOLVE_OPT
#define RESOLVE_CAP(f) if (resolve(I, #f, XSTR(f), (void **)&I->cap.f)) I->cap.f = NULL;
  CAPTURE_FUNCS(RESOLVE_CAP)
#undef RESOLVE_CAP
  b->err[0] = 0;
  I->cond_bits = -1;
  return GT_BOK;
}

/* Takes the first NVRTC whose major version the driver can run (a CUBIN from
   a newer toolkit does not load on an older driver). */
static int load_nvrtc(cuda_impl *I) {
  static const char *names[] = { "libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12" };
  const char *home = getenv("CUDA_HOME");
  const char *dirs[] = { NULL, home && *home ? home : NULL, "/usr/local/cuda" };
  char path[512], tried[1024] = "", last[1024] = "", newer[1024] = "";
  for (size_t d = 0; d < sizeof dirs / sizeof *dirs; d++) {
    if (d > 0 && !dirs[d]) continue;
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
      void *h;
      int major = 0, minor = 0;
      if (d == 0) snprintf(path, sizeof path, "%s", names[k]);
      else snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], names[k]);
      if (!(h = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
        const char *e = dlerror();
        snprintf(last, sizeof last, "%s", e ? e : "?");
        if (strlen(tried) + strlen(path) + 3 < sizeof tried)
          strcat(strcat(tried, *tried ? ", " : ""), path);
        continue;
      }
#define NVSYM(f) *(void **)&I->nv.f = dlsym(h, #f);
      NVRTC_FUNCS(NVSYM)
#undef NVSYM
      int complete = 1;
      for (void **p = (void **)&I->nv; p < (void **)(&I->nv + 1); p++) complete = complete && *p;
      if (!complete || I->nv.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS || major * 1000 > I->driver) {
        if (!complete) snprintf(last, sizeof last, "%s lacks an NVRTC 12 function gtlua uses", path);
        else if (!*newer) snprintf(newer, sizeof newer, "%s is NVRTC %d.%d", path, major, minor);
        dlclose(h);
        continue;
      }
      I->libnvrtc = h;
      I->nvrtc = major * 1000 + minor * 10;
      return GT_BOK;
    }
  }
  if (*newer)
    snprintf(I->b->err, GT_ERRLEN, "cuda: %s, newer than the driver (CUDA %d.%d), whose kernels it "
             "could not load; update the driver or put an older libnvrtc on LD_LIBRARY_PATH",
             newer, I->driver / 1000, I->driver % 1000 / 10);
  else
    snprintf(I->b->err, GT_ERRLEN, "cuda: could not load libnvrtc (tried %s): %s", tried, last);
  return GT_BERR;
}

/* sm_XY when this NVRTC knows the device's arch; else PTX for the newest arch
   it knows below it, which the driver compiles at load. */
static int pick_arch(cuda_impl *I) {
  int n = 0, *archs, cc = I->info.cc_major * 10 + I->info.cc_minor, best = 0, rc;
  if ((rc = NV(I, nvrtcGetNumSupportedArchs, &n))) return rc;
  if (!(archs = calloc((size_t)(n > 0 ? n : 1), sizeof *archs))) return no_memory(I->b, "arch list");
  if ((rc = NV(I, nvrtcGetSupportedArchs, archs))) { free(archs); return rc; }
  for (int i = 0; i < n; i++)
    if (archs[i] <= cc && archs[i] > best) best = archs[i];
  if (!best) {
    snprintf(I->b->err, GT_ERRLEN, "cuda: NVRTC %d.%d cannot compile for this GPU (sm_%d); it knows "
             "sm_%d and up", I->nvrtc / 1000, I->nvrtc % 1000 / 10, cc, n > 0 ? archs[0] : 0);
    free(archs);
    return GT_BERR;
  }
  free(archs);
  I->cubin = best == cc;
  snprintf(I->arch, sizeof I->arch, "%s_%d", I->cubin ? "sm" : "compute", best);
  return GT_BOK;
}

/* -- Device and memory ------------------------------------------------- */

static int cuda_device_info(gt_backend *b, gt_device_info *out) {
  cuda_impl *I = b->impl;
  size_t fr = 0, tot = 0;
  *out = I->info;
  if (I->cu.cuMemGetInfo(&fr, &tot) == CUDA_SUCCESS) out->free_mem = fr;
  return GT_BOK;
}

static size_t round_gran(cuda_impl *I, size_t bytes) {
  return (bytes + I->gran - 1) / I->gran * I->gran;
}

static int cuda_sync(gt_backend *b) {
  cuda_impl *I = b->impl;
  return CU(I, cuStreamSynchronize, I->stream);
}

static int cuda_reserve(gt_backend *b, size_t bytes, uint64_t *base) {
  cuda_impl *I = b->impl;
  size_t size = round_gran(I, bytes ? bytes : 1), n = size / I->gran;
  cuda_resv r = { 0, size, calloc(n, sizeof *r.h), calloc(n, 1) };
  char s[32];
  int rc;
  if (!r.h || !r.on || GT_GROW(I->resv, I->capresv, I->nresv + 1)) {
    free(r.h), free(r.on);
    return no_memory(b, "reservation table");
  }
  if ((rc = CU(I, cuMemAddressReserve, &r.base, size, I->gran, 0, 0))) {
    err_append(b, " (reserving %s of device addresses: the address space is used up, or the size is beyond it)",
               fmt_bytes(s, sizeof s, size));
    free(r.h), free(r.on);
    return rc;
  }
  I->resv[I->nresv++] = r;
  *base = r.base;
  return GT_BOK;
}

/* The reservation holding [addr, addr + bytes) with both ends on granules, or
   NULL with b->err set. */
static cuda_resv *find_resv(cuda_impl *I, const char *what, uint64_t addr, size_t bytes) {
  for (int i = 0; i < I->nresv; i++) {
    cuda_resv *r = &I->resv[i];
    if (addr >= r->base && addr - r->base <= r->bytes && bytes <= r->bytes - (addr - r->base) &&
        addr % I->gran == 0 && bytes % I->gran == 0)
      return r;
  }
  snprintf(I->b->err, GT_ERRLEN, "cuda: %s of %zu bytes at 0x%llx is not a granule-aligned (%zu bytes) "
           "piece of a reserved range", what, bytes, (unsigned long long)addr, I->gran);
  return NULL;
}

/* Unmaps and frees granules first..last-1 of r that are mapped. */
static int unmap_granules(cuda_impl *I, cuda_resv *r, size_t first, size_t last) {
  int rc = GT_BOK;
  for (size_t i = first; i < last; i++)
    if (r->on[i]) {
      r->on[i] = 0;
      if (!rc) rc = CU(I, cuMemUnmap, r->base + i * I->gran, I->gran);
      if (!rc) rc = CU(I, cuMemRelease, r->h[i]);
    }
  return rc;
}

/* One physical allocation per granule, so that any aligned piece can be
   decommitted later (the pool shrinks from its end). */
static int cuda_commit(gt_backend *b, uint64_t addr, size_t bytes) {
  cuda_impl *I = b->impl;
  cuda_resv *r = bytes ? find_resv(I, "commit", addr, bytes) : NULL;
  size_t first = r ? (addr - r->base) / I->gran : 0, last = first + bytes / I->gran, i;
  CUresult res = CUDA_SUCCESS;
  const char *call = "cuMemCreate";
  char s[3][32];
  int rc;
  if (!bytes) return GT_BOK;
  if (!r) return GT_BERR;
  for (i = first; i < last; i++)
    if (r->on[i]) {
      snprintf(b->err, GT_ERRLEN, "cuda: commit of %zu bytes at 0x%llx overlaps memory already committed "
               "at 0x%llx", bytes, (unsigned long long)addr, (unsigned long long)(r->base + i * I->gran));
      return GT_BERR;
    }
  for (i = first; i < last && res == CUDA_SUCCESS; i++) {
    if ((res = I->cu.cuMemCreate(&r->h[i], I->gran, &I->prop, 0)) != CUDA_SUCCESS) break;
    if ((res = I->cu.cuMemMap(r->base + i * I->gran, I->gran, 0, r->h[i], 0)) != CUDA_SUCCESS) {
      I->cu.cuMemRelease(r->h[i]);
      call = "cuMemMap";
      break;
    }
    r->on[i] = 1;
  }
  if (res == CUDA_SUCCESS && (res = I->cu.cuMemSetAccess(addr, bytes, &I->access, 1)) != CUDA_SUCCESS)
    call = "cuMemSetAccess";
  if (res == CUDA_SUCCESS) return GT_BOK;
  unmap_granules(I, r, first, last);
  if ((rc = cu_fail(I, call, res)) == GT_BOOM) {
    size_t fr = 0, tot = 0;
    I->cu.cuMemGetInfo(&fr, &tot);
    snprintf(b->err, GT_ERRLEN, "cuda: out of device memory: committing %s (%zu bytes) to the pool failed "
             "(%s: CUDA_ERROR_OUT_OF_MEMORY); the device has %s free of %s", fmt_bytes(s[0], 32, bytes),
             bytes, call, fmt_bytes(s[1], 32, fr), fmt_bytes(s[2], 32, tot));
  } else {
    err_append(b, " (committing %zu bytes at 0x%llx)", bytes, (unsigned long long)addr);
  }
  return rc;
}

/* Waits for the stream (work may still use the memory), then frees every
   committed granule in the range; parts never committed are skipped. */
static int cuda_decommit(gt_backend *b, uint64_t addr, size_t bytes) {
  cuda_impl *I = b->impl;
  cuda_resv *r = bytes ? find_resv(I, "decommit", addr, bytes) : NULL;
  int rc;
  if (!bytes) return GT_BOK;
  if (!r) return GT_BERR;
  if ((rc = cuda_sync(b))) return rc;
  return unmap_granules(I, r, (addr - r->base) / I->gran, (addr - r->base + bytes) / I->gran);
}

static void resv_free(cuda_impl *I, int i) {
  cuda_resv *r = &I->resv[i];
  unmap_granules(I, r, 0, r->bytes / I->gran);
  I->cu.cuMemAddressFree(r->base, r->bytes);
  free(r->h), free(r->on);
  I->resv[i] = I->resv[--I->nresv];
}

static int cuda_release(gt_backend *b, uint64_t base, size_t bytes) {
  cuda_impl *I = b->impl;
  int rc;
  (void)bytes;  /* the reservation knows its size */
  for (int i = 0; i < I->nresv; i++)
    if (I->resv[i].base == base) {
      if ((rc = cuda_sync(b))) return rc;
      resv_free(I, i);
      return GT_BOK;
    }
  snprintf(b->err, GT_ERRLEN, "cuda: release of 0x%llx, which is not the base of a reserved range",
           (unsigned long long)base);
  return GT_BERR;
}

static int cuda_htod(gt_backend *b, uint64_t dst, const void *src, size_t bytes) {
  cuda_impl *I = b->impl;
  return bytes ? CU(I, cuMemcpyHtoDAsync, dst, src, bytes, I->stream) : GT_BOK;
}

static int cuda_dtoh(gt_backend *b, void *dst, uint64_t src, size_t bytes) {
  cuda_impl *I = b->impl;
  int rc = bytes ? CU(I, cuMemcpyDtoHAsync, dst, src, bytes, I->stream) : GT_BOK;
  return rc ? rc : cuda_sync(b);
}

static int cuda_dtod(gt_backend *b, uint64_t dst, uint64_t src, size_t bytes) {
  cuda_impl *I = b->impl;
  return bytes ? CU(I, cuMemcpyDtoDAsync, dst, src, bytes, I->stream) : GT_BOK;
}

static int cuda_memset8(gt_backend *b, uint64_t dst, uint8_t value, size_t bytes) {
  cuda_impl *I = b->impl;
  return bytes ? CU(I, cuMemsetD8Async, dst, value, bytes, I->stream) : GT_BOK;
}

/* -- Kernels: NVRTC and the CUBIN cache -------------------------------- */

static void image_free(cuda_image *img) {
  for (int i = 0; img->lowered && i < img->n; i++) free(img->lowered[i]);
  free(img->lowered);
  free(img->data);
  memset(img, 0, sizeof *img);
}

static uint64_t cache_key(cuda_impl *I, const char *src, const char *opts, const gt_ksig *sigs, int nsigs) {
  static const char tag[] = "gtlua-cuda-cache-2";
  uint64_t h = gt_hash64(tag, sizeof tag, 0);
  h = gt_hash64(src, strlen(src) + 1, h);
  h = gt_hash64(opts ? opts : "", opts ? strlen(opts) + 1 : 1, h);
  h = gt_hash64(I->arch, strlen(I->arch) + 1, h);
  h = gt_hash64(&I->nvrtc, sizeof I->nvrtc, h);
  for (int i = 0; i < nsigs; i++) h = gt_hash64(sigs[i].name, strlen(sigs[i].name) + 1, h);
  return h;
}

/* Fills path with gt_cache_dir()/cuda/<key>.cubin; 0 when there is no cache
   (none could be made, or it was refused as not private: see gt_cache_dir). */
static int cache_path(cuda_impl *I, uint64_t key, char *path, size_t len) {
  if (!*I->cachedir) {
    char dir[sizeof I->cachedir];
    snprintf(I->cachedir, sizeof I->cachedir, "-");
    if (gt_cache_subdir("cuda", dir, sizeof dir) == 0 && strlen(dir) + 32 < sizeof dir)
      memcpy(I->cachedir, dir, sizeof dir);
  }
  if (!strcmp(I->cachedir, "-")) return 0;
  return snprintf(path, len, "%s/%016llx.cubin", I->cachedir, (unsigned long long)key) < (int)len;
}

/* File: "gtlua-cuda 2 cubin|ptx <n> <size> <sum>\n", n lowered names one a
   line, then size bytes; sum: gt_hash64 (16 hex digits) of everything after
   the first line, so that a damaged or foreign entry is a miss. */
#define CACHE_SEED 0x67746375626e32ull   /* "gtcubn2" */

static int cache_read(const char *path, int nsigs, cuda_image *img) {
  FILE *f = fopen(path, "rb");
  char kind[8], line[256], *body = NULL, *p, *end;
  int n;
  size_t size, total;
  unsigned long long sum;
  long start, flen;
  memset(img, 0, sizeof *img);
  if (!f) return -1;
  if (gt_cache_file_ok(fileno(f)) != 0 || !fgets(line, sizeof line, f) || sscanf(line, "gtlua-cuda 2 %7s %d %zu %16llx", kind, &n, &size, &sum) != 4 ||
      n != nsigs || size == 0 || size > ((size_t)1 << 31))
    goto bad;
  if ((start = ftell(f)) < 0 || fseek(f, 0, SEEK_END) != 0 || (flen = ftell(f)) < start) goto bad;
  total = (size_t)(flen - start);
  if (total < size || total - size > ((size_t)1 << 24) || fseek(f, start, SEEK_SET) != 0 ||
      !(body = malloc(total)) || fread(body, 1, total, f) != total || gt_hash64(body, total, CACHE_SEED) != sum)
    goto bad;
  if (!(img->lowered = calloc((size_t)(n > 0 ? n : 1), sizeof *img->lowered))) goto bad;
  img->ptx = !strcmp(kind, "ptx");
  p = body, end = body + total - size;   /* the names end where the code starts */
  for (; img->n < n; img->n++) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl || nl == p || !(img->lowered[img->n] = strndup(p, (size_t)(nl - p)))) goto bad;
    p = nl + 1;
  }
  if (p != end || !(img->data = malloc(size + 1))) goto bad;
  memcpy(img->data, end, size);
  img->data[size] = 0;
  img->size = size;
  free(body);
  fclose(f);
  return 0;
bad:
  free(body);
  fclose(f);
  image_free(img);
  return -1;
}

/* Best effort: a failed write leaves no file behind and is not an error. */
static void cache_write(const char *path, const cuda_image *img) {
  char tmp[4200], *body, *q;
  FILE *f;
  int ok;
  size_t total = img->size;
  for (int i = 0; i < img->n; i++) total += strlen(img->lowered[i]) + 1;
  if (!(body = q = malloc(total + 1))) return;
  for (int i = 0; i < img->n; i++) q += sprintf(q, "%s\n", img->lowered[i]);
  memcpy(q, img->data, img->size);
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  if (!(f = fopen(tmp, "wb"))) { free(body); return; }
  ok = fchmod(fileno(f), 0644) == 0;   /* whatever the umask: see gt_cache_file_ok */
  ok = ok && fprintf(f, "gtlua-cuda 2 %s %d %zu %016llx\n", img->ptx ? "ptx" : "cubin", img->n, img->size,
               (unsigned long long)gt_hash64(body, total, CACHE_SEED)) > 0;
  ok = ok && fwrite(body, 1, total, f) == total;
  ok = (fclose(f) == 0) && ok;
  free(body);
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

static int compile_log(cuda_impl *I, nvrtcProgram prog, char **log) {
  size_t len = 0;
  int rc;
  *log = NULL;
  if ((rc = NV(I, nvrtcGetProgramLogSize, prog, &len))) return rc;
  if (!(*log = calloc(len + 1, 1))) return no_memory(I->b, "compiler log");
  return NV(I, nvrtcGetProgramLog, prog, *log);
}

/* Compiles src with NVRTC into img: CUBIN (or PTX) and the lowered names. */
static int nvrtc_build(cuda_impl *I, const char *src, const char *opts, const gt_ksig *sigs, int nsigs,
                       cuda_image *img) {
  gt_backend *b = I->b;
  char archopt[64], *copy = strdup(opts ? opts : ""), *save = NULL, *log = NULL;
  const char **argv = calloc(strlen(opts ? opts : "") / 2 + 3, sizeof *argv);
  nvrtcProgram prog = NULL;
  nvrtcResult r;
  int argc = 0, rc;
  memset(img, 0, sizeof *img);
  if (!copy || !argv) { free(copy); free(argv); return no_memory(b, "compiler options"); }
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", I->arch);
  argv[argc++] = archopt;
  argv[argc++] = "-std=c++17";
  for (char *t = strtok_r(copy, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) argv[argc++] = t;
  if ((rc = NV(I, nvrtcCreateProgram, &prog, src, "gtlua.cu", 0, NULL, NULL))) goto out;
  for (int i = 0; i < nsigs; i++)
    if ((rc = NV(I, nvrtcAddNameExpression, prog, sigs[i].name))) {
      err_append(b, " (kernel '%s')", sigs[i].name);
      goto out;
    }
  r = I->nv.nvrtcCompileProgram(prog, argc, argv);
  if (r != NVRTC_SUCCESS) {
    rc = compile_log(I, prog, &log);
    if (r == NVRTC_ERROR_COMPILATION)
      snprintf(b->err, GT_ERRLEN, "cuda: kernel compile failed:\n%s%s", log ? log : "",
               log && strstr(log, "__nv_name_map") ? "(a kernel name found in the source is not a "
               "__global__ function the compiler sees)\n" : "");
    else
      snprintf(b->err, GT_ERRLEN, "cuda: kernel compile failed: %s (options: %s -std=c++17 %s)\n%s",
               I->nv.nvrtcGetErrorString(r), archopt, opts ? opts : "", log ? log : "");
    rc = r == NVRTC_ERROR_OUT_OF_MEMORY ? GT_BOOM : GT_BERR;
    goto out;
  }
  if (!(img->lowered = calloc((size_t)(nsigs > 0 ? nsigs : 1), sizeof *img->lowered))) {
    rc = no_memory(b, "kernel names");
    goto out;
  }
  for (; img->n < nsigs; img->n++) {
    const char *low = NULL;
    if ((rc = NV(I, nvrtcGetLoweredName, prog, sigs[img->n].name, &low))) {
      err_append(b, " (kernel '%s': is it a __global__ function of this source?)", sigs[img->n].name);
      goto out;
    }
    if (!(img->lowered[img->n] = strdup(low))) { rc = no_memory(b, "kernel names"); goto out; }
  }
  img->ptx = !I->cubin;
  rc = img->ptx ? NV(I, nvrtcGetPTXSize, prog, &img->size) : NV(I, nvrtcGetCUBINSize, prog, &img->size);
  if (rc) goto out;
  if (!(img->data = malloc(img->size + 1))) { rc = no_memory(b, "compiled code"); goto out; }
  img->data[img->size] = 0;
  rc = img->ptx ? NV(I, nvrtcGetPTX, prog, img->data) : NV(I, nvrtcGetCUBIN, prog, img->data);
out:
  if (prog) I->nv.nvrtcDestroyProgram(&prog);
  if (rc) image_free(img);
  free(log);
  free(copy);
  free(argv);
  return rc;
}

static void cuda_module_free(gt_backend *b, gt_bmodule *mod) {
  cuda_impl *I = b->impl;
  if (!mod) return;
  I->cu.cuStreamSynchronize(I->stream);   /* no launch of its kernels may be pending */
  if (mod->m) I->cu.cuModuleUnload(mod->m);
  for (int i = 0; i < mod->n; i++) free(mod->fn[i].name);
  free(mod);
}

static int module_load(cuda_impl *I, const cuda_image *img, const gt_ksig *sigs, int nsigs,
                       gt_bmodule **out, gt_bfunc **fns) {
  gt_backend *b = I->b;
  char jitlog[2048] = "";
  CUjit_option o[2] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
  void *v[2] = { jitlog, (void *)(uintptr_t)sizeof jitlog };
  gt_bmodule *mod = calloc(1, sizeof *mod + (size_t)nsigs * sizeof(gt_bfunc));
  int rc;
  if (!mod) return no_memory(b, "module");
  if ((rc = CU(I, cuModuleLoadDataEx, &mod->m, img->data, 2, o, v))) {
    err_append(b, " (loading %s for %s from NVRTC %d.%d)%s%s", img->ptx ? "PTX" : "a CUBIN", I->arch,
               I->nvrtc / 1000, I->nvrtc % 1000 / 10, *jitlog ? ":\n" : "", jitlog);
    free(mod);
    return rc;
  }
  for (; mod->n < nsigs; mod->n++) {
    gt_bfunc *f = &mod->fn[mod->n];
    if ((rc = CU(I, cuModuleGetFunction, &f->f, mod->m, img->lowered[mod->n]))) {
      err_append(b, " (kernel '%s', lowered name '%s')", sigs[mod->n].name, img->lowered[mod->n]);
      break;
    }
    if ((rc = CU(I, cuFuncGetAttribute, &f->static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f->f))) break;
    f->smem_ok = f->static_smem < SMEM_DEFAULT ? (unsigned)(SMEM_DEFAULT - f->static_smem) : 0;
    if (!(f->name = strdup(sigs[mod->n].name))) { rc = no_memory(b, "kernel names"); break; }
  }
  if (rc) { cuda_module_free(b, mod); return rc; }
  for (int i = 0; i < nsigs; i++) fns[i] = &mod->fn[i];
  *out = mod;
  return GT_BOK;
}

/* A cache hit calls no NVRTC function; a cache file that fails its check is
   a miss (overwritten), one that fails to load is removed, and the source is
   compiled again. */
static int cuda_compile_src(cuda_impl *I, const char *src, const char *opts, const gt_ksig *sigs, int nsigs,
                            gt_bmodule **mod, gt_bfunc **fns) {
  char path[3200];
  int cached = cache_path(I, cache_key(I, src, opts, sigs, nsigs), path, sizeof path), rc;
  cuda_image img;
  if (cached && cache_read(path, nsigs, &img) == 0) {
    rc = module_load(I, &img, sigs, nsigs, mod, fns);
    image_free(&img);
    if (rc == GT_BOK) { I->cache_hits++; return GT_BOK; }
    unlink(path);
  }
  if ((rc = nvrtc_build(I, src, opts, sigs, nsigs, &img))) return rc;
  I->compiles++;
  if (cached) cache_write(path, &img);
  rc = module_load(I, &img, sigs, nsigs, mod, fns);
  image_free(&img);
  return rc;
}

/* NVRTC has no built-in cuda_fp16.h / cuda_bf16.h: a source that uses half
   precision gets both included in front and -I to the CUDA headers (searched
   once: incdir.c); *hsrc and *hopts are then malloc'd (else NULL). */
static int half_source(cuda_impl *I, const char *src, const char *opts, char **hsrc, char **hopts) {
  static const char head[] = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n";
  *hsrc = *hopts = NULL;
  if (!gt_uses_half(src)) return GT_BOK;
  if (!I->inc_state) {
    Dl_info di;
    const char *lib = dladdr((void *)I->nv.nvrtcVersion, &di) && di.dli_fname ? di.dli_fname : NULL;
    I->inc_state = gt_cuda_include(lib, I->inc, sizeof I->inc, I->searched, sizeof I->searched) == 0 ? 1 : -1;
  }
  if (I->inc_state < 0) {
    snprintf(I->b->err, GT_ERRLEN, "cuda: this kernel uses half precision (__half, __nv_bfloat16, ...), declared in "
             "cuda_fp16.h and cuda_bf16.h, which NVRTC does not have built in, and no directory holding them was found "
             "(searched: %s); set GTLUA_CUDA_INCLUDE to the CUDA toolkit's include directory (or pip's "
             "site-packages/nvidia/cu13/include)", I->searched);
    return GT_BERR;
  }
  size_t no = strlen(opts ? opts : "");
  if (!(*hsrc = malloc(sizeof head + strlen(src))) || !(*hopts = malloc(no + strlen(I->inc) + 2))) {
    free(*hsrc), *hsrc = NULL;
    return no_memory(I->b, "kernel source");
  }
  strcat(strcpy(*hsrc, head), src);
  snprintf(*hopts, no + strlen(I->inc) + 2, "%s%s%s", I->inc, no ? " " : "", opts ? opts : "");
  return GT_BOK;
}

static int cuda_compile(gt_backend *b, const char *src, const char *opts, const gt_ksig *sigs, int nsigs,
                        gt_bmodule **mod, gt_bfunc **fns) {
  cuda_impl *I = b->impl;
  char *hsrc, *hopts;
  int rc = half_source(I, src, opts, &hsrc, &hopts);
  if (rc) return rc;
  if (hsrc) src = hsrc, opts = hopts;
  rc = cuda_compile_src(I, src, opts, sigs, nsigs, mod, fns);
  free(hsrc), free(hopts);
  return rc;
}

void gt_backend_cuda_counts(gt_backend *b, int *compiles, int *cache_hits) {
  cuda_impl *I = b && b->name && !strcmp(b->name, "cuda") ? b->impl : NULL;
  *compiles = I ? I->compiles : 0;
  *cache_hits = I ? I->cache_hits : 0;
}

/* -- Launch ------------------------------------------------------------ */

/* Dynamic shared memory past the default 48 KiB (less the static part) needs
   the function's opt-in; it is raised once per function and size. */
static int ensure_smem(cuda_impl *I, gt_bfunc *fn, unsigned smem) {
  int rc;
  if (smem <= fn->smem_ok) return GT_BOK;
  if ((rc = CU(I, cuFuncSetAttribute, fn->f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem))) {
    err_append(I->b, " (kernel '%s' asks for %u bytes of dynamic shared memory besides %d static; "
               "this device allows %d per block)", fn->name, smem, fn->static_smem, I->smem_optin);
    return rc;
  }
  fn->smem_ok = smem;
  return GT_BOK;
}

static void launch_context(gt_backend *b, const gt_bfunc *fn, const unsigned *grid, const unsigned *block,
                           unsigned smem) {
  err_append(b, " (kernel '%s', grid %ux%ux%u, block %ux%ux%u, %u bytes of dynamic shared memory)",
             fn->name, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem);
}

static int cuda_launch(gt_backend *b, gt_bfunc *fn, const unsigned grid[3], const unsigned block[3],
                       unsigned smem, void **args) {
  cuda_impl *I = b->impl;
  int rc = ensure_smem(I, fn, smem);
  if (!rc && (rc = CU(I, cuLaunchKernel, fn->f, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                      smem, I->stream, args, NULL)))
    launch_context(b, fn, grid, block, smem);
  return rc;
}

/* -- Graphs ------------------------------------------------------------ */

static int node_kind(const gt_gnode *n) {
  return (n->kind == GT_GN_MEMCPY || n->kind == GT_GN_MEMSET) && n->bytes == 0 ? KIND_EMPTY : n->kind;
}

static void kernel_params(CUDA_KERNEL_NODE_PARAMS *p, const gt_gnode *n) {
  memset(p, 0, sizeof *p);
  p->func = n->fn->f;
  p->gridDimX = n->grid[0], p->gridDimY = n->grid[1], p->gridDimZ = n->grid[2];
  p->blockDimX = n->block[0], p->blockDimY = n->block[1], p->blockDimZ = n->block[2];
  p->sharedMemBytes = n->smem;  /* in every node: a node built with 0 faults only at replay */
  p->kernelParams = n->args;
}

static void memcpy_params(CUDA_MEMCPY3D *c, const gt_gnode *n) {
  memset(c, 0, sizeof *c);
  c->srcMemoryType = c->dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c->srcDevice = n->src, c->dstDevice = n->dst;
  c->srcPitch = c->dstPitch = c->WidthInBytes = n->bytes;
  c->srcHeight = c->dstHeight = c->Height = c->Depth = 1;
}

static void memset_params(CUDA_MEMSET_NODE_PARAMS *m, const gt_gnode *n) {
  memset(m, 0, sizeof *m);
  m->dst = n->dst, m->pitch = n->bytes, m->value = n->value;
  m->elementSize = 1, m->width = n->bytes, m->height = 1;
}

static int bad_node(gt_backend *b, int i, int n, const char *why) {
  snprintf(b->err, GT_ERRLEN, "cuda: graph node %d of %d %s", i, n, why);
  return GT_BERR;
}

/* One open conditional node while its body is built. */
typedef struct cond_frame {
  CUgraph parent, body[2];
  CUgraphConditionalHandle handle;
  int begin, branch, nodes[2];
  unsigned counter;             /* a bounded WHILE's counter slot, else ~0u */
} cond_frame;

/* A kernel node running gt_cond_set (cuda_cond_support compiled it): sets
   handle from p (nonzero is true); a bounded WHILE's pass counter is reset
   (first) or advanced, and ends the loop at max passes. */
/* gt_cond_set's arguments, and the node parameters that point at them. */
struct cond_args { unsigned long long handle; CUdeviceptr cond, cnt; int dtype, first; unsigned max; void *ptr[6]; };

/* The parameters of gt_cond_set for entry nd (p, dtype, max) with c's fixed arguments, stored in a. */
static void cond_set_params(cuda_impl *I, const gt_gnode *nd, const struct cond_set *c, struct cond_args *a,
                            CUDA_KERNEL_NODE_PARAMS *p) {
  *a = (struct cond_args){ c->handle, nd->dst, c->cnt, nd->value, c->first, (unsigned)nd->bytes,
                           { &a->handle, &a->cond, &a->dtype, &a->cnt, &a->max, &a->first } };
  memset(p, 0, sizeof *p);
  p->func = I->cond_set->f;
  p->gridDimX = p->gridDimY = p->gridDimZ = p->blockDimX = p->blockDimY = p->blockDimZ = 1;
  p->kernelParams = a->ptr;
}

static int add_cond_set(cuda_impl *I, CUgraph g, const gt_gnode *nd, const cond_frame *f, CUdeviceptr counters,
                        int first, const CUgraphNode *deps, size_t ndeps, CUgraphNode *out, struct cond_set *cs) {
  CUDA_KERNEL_NODE_PARAMS p;
  struct cond_set c = { NULL, f->handle, f->counter != ~0u ? counters + 4ull * f->counter : 0, first };
  struct cond_args a;
  cond_set_params(I, nd, &c, &a, &p);
  int rc = CU(I, cuGraphAddKernelNode, out, g, deps, ndeps, &p);
  if (!rc && cs) c.node = *out, *cs = c;
  return rc;
}

/* IF/WHILE i: its handle, the setting kernel (after the node's dependencies)
   and the conditional node after it, whose body graphs f receives. */
static int open_cond(cuda_impl *I, CUgraph g, const gt_gnode *nodes, int i, int n, CUdeviceptr counters,
                     unsigned *nwhile, size_t ndeps, cond_frame *f, CUgraphNode *out, struct cond_set *cs) {
  const gt_gnode *nd = &nodes[i];
  CUgraphNode setter;
  CUgraphNodeParams np;
  int rc, has_else = 0;
  if (!I->cond_set) return bad_node(I->b, i, n, "is a conditional node, which this driver cannot build");
  for (int j = i + 1, depth = 0; nd->kind == GT_GN_IF && j < n; j++) {
    if (nodes[j].kind == GT_GN_IF || nodes[j].kind == GT_GN_WHILE) depth++;
    else if (nodes[j].kind == GT_GN_END && depth-- == 0) break;
    else if (nodes[j].kind == GT_GN_ELSE && depth == 0) { has_else = 1; break; }
  }
  memset(f, 0, sizeof *f);
  f->parent = g, f->begin = i, f->counter = ~0u;
  if (nd->kind == GT_GN_WHILE && nd->bytes) f->counter = (*nwhile)++;
  if ((rc = cu_check(I, "cuGraphConditionalHandleCreate", I->cond.cuGraphConditionalHandleCreate(&f->handle, g, I->ctx, 0, 0))) ||
      (rc = add_cond_set(I, g, nd, f, counters, 1, I->deps, ndeps, &setter, cs)))
    return rc;
  memset(&np, 0, sizeof np);
  np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  np.conditional.handle = f->handle;
  np.conditional.type = nd->kind == GT_GN_IF ? CU_GRAPH_COND_TYPE_IF : CU_GRAPH_COND_TYPE_WHILE;
  np.conditional.size = has_else ? 2 : 1;
  np.conditional.ctx = I->ctx;
#if CUDA_VERSION >= 12030
  rc = cu_check(I, "cuGraphAddNode", I->cond.cuGraphAddNode(out, g, &setter, NULL, 1, &np));
#else
  rc = cu_check(I, "cuGraphAddNode", I->cond.cuGraphAddNode(out, g, &setter, 1, &np));
#endif
  if (rc) {
    if (has_else) err_append(I->b, " (an IF with an else body needs CUDA 12.8)");
    return rc;
  }
  f->body[0] = np.conditional.phGraph_out[0];
  f->body[1] = has_else ? np.conditional.phGraph_out[1] : NULL;
  return GT_BOK;
}

/* A collective captured into graph cur after the nd_deps nodes in I->deps
   (cuStreamBeginCaptureToGraph): NCCL's nodes join cur, their buffers fixed
   from now on; *out is an empty node after the capture's last nodes, which
   later nodes depend on. */
static int add_coll(cuda_impl *I, const gt_gnode *nd, CUgraph cur, size_t nd_deps, CUgraphNode *out) {
  gt_backend *b = I->b;
  CUstreamCaptureStatus st;
  cuuint64_t cid;
  CUgraph cg;
  const CUgraphNode *last = NULL;
  const CUgraphEdgeData *edges = NULL;
  size_t nlast = 0;
  int rc;
  if (!I->nccl) { snprintf(b->err, GT_ERRLEN, "cuda: a graph holds a collective but gt.dist.init() has not been called"); return GT_BERR; }
  if (!I->cap.cuStreamBeginCaptureToGraph || !I->cap.cuStreamGetCaptureInfo || !I->cap.cuStreamEndCapture) {
    snprintf(b->err, GT_ERRLEN, "cuda: this driver cannot capture into a graph (cuStreamBeginCaptureToGraph, CUDA 12.3), "
             "which a collective in a tree needs; update the driver");
    return GT_BERR;
  }
  gt_coll c = gt_coll_unpack(nd->coll, 0);
  c.count = gt_coll_esize(c.dtype) ? nd->bytes / (uint64_t)gt_coll_esize(c.dtype) : 0;
  if ((rc = cu_check(I, "cuStreamBeginCaptureToGraph", I->cap.cuStreamBeginCaptureToGraph(I->stream, cur, nd_deps ? I->deps : NULL,
                                                                                         NULL, nd_deps, CU_STREAM_CAPTURE_MODE_RELAXED))))
    return rc;
  int nrc = gt_nccl_run(I->nccl, &c, nd->dst, nd->src, I->stream, b->err, GT_ERRLEN);
  if (!nrc) rc = cu_check(I, "cuStreamGetCaptureInfo", I->cap.cuStreamGetCaptureInfo(I->stream, &st, &cid, &cg, &last, &edges, &nlast));
  if (!nrc && !rc && nlast) {        /* (the driver's array lasts only until the capture ends) */
    if (GT_GROW(I->deps, I->capdeps, (int)nlast)) rc = no_memory(b, "graph edges");
    else memcpy(I->deps, last, nlast * sizeof *last);
  }
  CUgraph ended = NULL;
  CUresult er = I->cap.cuStreamEndCapture(I->stream, &ended);   /* (always: the stream must leave capture) */
  if (nrc) return GT_BERR;
  if (!rc) rc = cu_check(I, "cuStreamEndCapture", er);
  if (rc) return rc;
  /* after the capture's last nodes, now in I->deps (none when NCCL added nothing: the node's own dependencies) */
  return CU(I, cuGraphAddEmptyNode, out, cur, I->deps, nlast ? nlast : nd_deps);
}

/* Builds a CUgraph of n nodes; *hout gets one handle per node.  Duplicate
   dependencies are dropped (the driver refuses them).  Nodes between an
   IF/WHILE and its END go into the conditional node's body graphs (their
   dependencies already lie within their body: cond.c lifted them). */
/* A node that does work (a kernel, a copy, a fill, or an empty node for a
   0-byte one) in graph cur, after the nd_deps nodes in I->deps. */
static int add_work(cuda_impl *I, const gt_gnode *nd, int kind, int i, int n, CUgraph cur, size_t nd_deps, CUgraphNode *out) {
  gt_backend *b = I->b;
  int rc;
  switch (kind) {
  case GT_GN_KERNEL: {
    CUDA_KERNEL_NODE_PARAMS p;
    if (!nd->fn) return bad_node(b, i, n, "is a kernel node without a function");
    if ((rc = ensure_smem(I, nd->fn, nd->smem))) return rc;
    kernel_params(&p, nd);
    if ((rc = CU(I, cuGraphAddKernelNode, out, cur, I->deps, nd_deps, &p)))
      launch_context(b, nd->fn, nd->grid, nd->block, nd->smem);
    return rc;
  }
  case GT_GN_MEMCPY: {
    CUDA_MEMCPY3D c;
    memcpy_params(&c, nd);
    return CU(I, cuGraphAddMemcpyNode, out, cur, I->deps, nd_deps, &c, I->ctx);
  }
  case GT_GN_MEMSET: {
    CUDA_MEMSET_NODE_PARAMS m;
    memset_params(&m, nd);
    return CU(I, cuGraphAddMemsetNode, out, cur, I->deps, nd_deps, &m, I->ctx);
  }
  case GT_GN_COLL: return add_coll(I, nd, cur, nd_deps, out);
  default:
    return CU(I, cuGraphAddEmptyNode, out, cur, I->deps, nd_deps);
  }
}

/* The END of frame f: a WHILE's condition is set again for the next pass
   (*out), and a body graph is never left empty. */
static int close_cond(cuda_impl *I, const gt_gnode *nodes, const gt_gnode *nd, const cond_frame *f, CUdeviceptr counters,
                      CUgraph cur, size_t nd_deps, CUgraphNode *out, struct cond_set *cs) {
  int rc = GT_BOK;
  CUgraphNode empty;
  if (nodes[f->begin].kind == GT_GN_WHILE) rc = add_cond_set(I, cur, nd, f, counters, 0, I->deps, nd_deps, out, cs);
  for (int k = 0; k < 2 && !rc; k++)
    if (f->body[k] && !f->nodes[k] && !(k == 0 && *out)) rc = CU(I, cuGraphAddEmptyNode, &empty, f->body[k], NULL, 0);
  return rc;
}

static int graph_build(cuda_impl *I, const gt_gnode *nodes, int n, CUdeviceptr counters, CUgraph *gout, CUgraphNode **hout,
                       struct cond_set *cs) {
  gt_backend *b = I->b;
  CUgraph g = NULL, cur;
  CUgraphNode *h = calloc((size_t)(n > 0 ? n : 1), sizeof *h);
  cond_frame *fr = calloc((size_t)(n > 0 ? n : 1), sizeof *fr);
  int rc, top = 0;
  unsigned nwhile = 0;
  if (!h || !fr || GT_GROW(I->stamp, I->capstamp, n)) { free(h), free(fr); return no_memory(b, "graph nodes"); }
  if ((rc = CU(I, cuGraphCreate, &g, 0))) { free(h), free(fr); return rc; }
  cur = g;
  for (int i = 0; i < n; i++) I->stamp[i] = -1;
  for (int i = 0; i < n && !rc; i++) {
    const gt_gnode *nd = &nodes[i];
    size_t nd_deps = 0;
    if (GT_GROW(I->deps, I->capdeps, nd->ndeps)) {
      rc = no_memory(b, "graph edges");
      break;
    }
    for (int k = 0; k < nd->ndeps; k++) {
      int d = nd->deps[k];
      if (d < 0 || d >= i) { rc = bad_node(b, i, n, "depends on a node that does not come before it"); break; }
      if (I->stamp[d] != i && h[d]) I->stamp[d] = i, I->deps[nd_deps++] = h[d];
    }
    if (rc) break;
    int kind = node_kind(nd);
    if (top && kind != GT_GN_ELSE && kind != GT_GN_END) fr[top - 1].nodes[fr[top - 1].branch]++;
    switch (kind) {
    case GT_GN_KERNEL: case GT_GN_MEMCPY: case GT_GN_MEMSET: case KIND_EMPTY: case GT_GN_COLL:
      rc = kind == GT_GN_COLL && top ? bad_node(b, i, n, "is a collective inside a conditional body, which NCCL refuses")
                                     : add_work(I, nd, kind, i, n, cur, nd_deps, &h[i]); break;
    case GT_GN_IF: case GT_GN_WHILE:
      if (!(rc = open_cond(I, cur, nodes, i, n, counters, &nwhile, nd_deps, &fr[top], &h[i], cs ? &cs[i] : NULL)))
        cur = fr[top++].body[0];
      break;
    case GT_GN_ELSE:
      if (!top || !fr[top - 1].body[1]) { rc = bad_node(b, i, n, "is an ELSE outside an IF"); break; }
      fr[top - 1].branch = 1;
      cur = fr[top - 1].body[1];
      break;
    case GT_GN_END:
      if (!top) { rc = bad_node(b, i, n, "is an END without its IF or WHILE"); break; }
      rc = close_cond(I, nodes, nd, &fr[top - 1], counters, cur, nd_deps, &h[i], cs ? &cs[i] : NULL);
      cur = fr[--top].parent;
      break;
    default:
      rc = bad_node(b, i, n, "has an unknown kind");
    }
    if (rc && strncmp(b->err, "cuda: graph node", 16)) err_append(b, " (graph node %d of %d)", i, n);
  }
  if (!rc && top) rc = bad_node(b, n - 1, n, "ends inside a conditional body (an IF or WHILE without its END)");
  free(fr);
  if (rc) {
    I->cu.cuGraphDestroy(g);
    free(h);
    return rc;
  }
  *gout = g, *hout = h;
  return GT_BOK;
}

static void cuda_graph_destroy(gt_backend *b, gt_bgraph *g) {
  cuda_impl *I = b->impl;
  if (!g) return;
  if (g->exec) I->cu.cuGraphExecDestroy(g->exec);
  if (g->graph) I->cu.cuGraphDestroy(g->graph);
  if (g->counters) {                 /* a launch still running may count in them */
    I->cu.cuStreamSynchronize(I->stream);
    I->cu.cuMemFree(g->counters);
  }
  free(g->nodes);
  free(g->kind);
  free(g->fn);
  free(g->cset);
  free(g);
}

/* Free device memory now (0 when the driver does not say). */
static size_t free_bytes(cuda_impl *I) {
  size_t fr = 0, tot = 0;
  return I->cu.cuMemGetInfo(&fr, &tot) == CUDA_SUCCESS ? fr : 0;
}

/* Builds, instantiates and uploads a graph of n nodes; g->delta: the free
   memory that instantiate and upload took, as cuMemGetInfo sees it. */
static int graph_make(gt_backend *b, const gt_gnode *nodes, int n, gt_bgraph **out) {
  cuda_impl *I = b->impl;
  gt_bgraph *g = calloc(1, sizeof *g);
  int rc;
  size_t cnt = (size_t)(n > 0 ? n : 1);
  if (!g || !(g->kind = malloc(cnt)) || !(g->fn = calloc(cnt, sizeof *g->fn))) {
    if (g) free(g->kind);
    free(g);
    return no_memory(b, "graph");
  }
  g->n = n;
  unsigned bounded = 0;
  for (int i = 0; i < n; i++) {
    g->kind[i] = (uint8_t)node_kind(&nodes[i]), g->fn[i] = nodes[i].fn;
    g->conds += nodes[i].kind == GT_GN_IF || nodes[i].kind == GT_GN_WHILE;
    bounded += nodes[i].kind == GT_GN_WHILE && nodes[i].bytes;
  }
  if (bounded && (rc = CU(I, cuMemAlloc, &g->counters, 4ull * bounded))) { cuda_graph_destroy(b, g); return rc; }
  if (g->conds && !(g->cset = calloc(cnt, sizeof *g->cset))) { cuda_graph_destroy(b, g); return no_memory(b, "graph"); }
  if ((rc = graph_build(I, nodes, n, g->counters, &g->graph, &g->nodes, g->cset))) { cuda_graph_destroy(b, g); return rc; }
  size_t f0 = free_bytes(I);
  if ((rc = CU(I, cuGraphInstantiateWithFlags, &g->exec, g->graph, 0)))
    err_append(b, " (instantiating a graph of %d nodes)", n);
  else if ((rc = CU(I, cuGraphUpload, g->exec, I->stream)))
    err_append(b, " (uploading a graph of %d nodes)", n);
  if (rc) { cuda_graph_destroy(b, g); return rc; }
  size_t f1 = free_bytes(I);
  g->delta = f0 && f1 && f0 > f1 ? f0 - f1 : 0;
  *out = g;
  return GT_BOK;
}

static int cuda_graph_create(gt_backend *b, const gt_gnode *nodes, int n, gt_bgraph **out) {
  int rc = graph_make(b, nodes, n, out);
  if (rc) return rc;
  for (int i = 0; i < n; i++) (*out)->roots += nodes[i].ndeps == 0 && nodes[i].kind != GT_GN_ELSE && nodes[i].kind != GT_GN_END;
  return GT_BOK;
}

/* -- Graph memory ------------------------------------------------------ */

/* cuMemGetInfo moves in steps of 2 MiB: a delta above one is a measurement. */
#define MEMINFO_STEP (2u << 20)
enum { CAL_CHAIN = 2048, CAL_WIDE = 64 };
static const char nop_src[] = "extern \"C\" __global__ void gt_nop() {}\n";

/* The delta a graph of n nop kernel nodes takes (a chain, or no edges): 0
   when none is seen.  The graph is kept in *x (a graph destroyed before the
   next is measured would lend it its memory). */
static size_t cal_graph(gt_backend *b, gt_gnode *g, const int *prev, int n, int chain, gt_bgraph **x) {
  for (int i = 0; i < n; i++) g[i].ndeps = chain && i > 0, g[i].deps = chain && i > 0 ? &prev[i] : NULL;
  if (graph_make(b, g, n, x) != GT_BOK) return *x = NULL, 0;
  return (*x)->delta > MEMINFO_STEP ? (*x)->delta : 0;
}

/* What a kernel node costs in a chain and what a root past the first adds,
   measured once on this device: a graph of one nop first (the process's first
   graph takes a fixed 2 MiB), a chain of CAL_CHAIN and CAL_WIDE with no edges
   (about 6 and 7 MiB on an H200, 20 ms; the driver keeps that memory for
   later graphs).  Where a delta is not seen (the driver's cached memory
   covered it) the H200's figures (driver 580) stand. */
static void calibrate(gt_backend *b) {
  cuda_impl *I = b->impl;
  I->cal_done = 1;
  I->cal_chain = 2560, I->cal_wide = 112 * 1024;
  static const gt_ksig sig = { "gt_nop", 0, NULL, NULL, NULL };
  int compiles = I->compiles, hits = I->cache_hits;
  char err[GT_ERRLEN];
  memcpy(err, b->err, sizeof err);
  int ok = I->nop || cuda_compile(b, nop_src, NULL, &sig, 1, &I->nop_mod, &I->nop) == GT_BOK;
  I->compiles = compiles, I->cache_hits = hits;
  gt_gnode *g = ok ? calloc(CAL_CHAIN, sizeof *g) : NULL;
  int *prev = ok ? malloc(CAL_CHAIN * sizeof *prev) : NULL;
  if (g && prev) {
    for (int i = 0; i < CAL_CHAIN; i++) {
      g[i].kind = GT_GN_KERNEL, g[i].fn = I->nop, prev[i] = i - 1;
      for (int k = 0; k < 3; k++) g[i].grid[k] = g[i].block[k] = 1;
    }
    gt_bgraph *x[3];
    cal_graph(b, g, prev, 1, 1, &x[0]);
    size_t dc = cal_graph(b, g, prev, CAL_CHAIN, 1, &x[1]), dw = cal_graph(b, g, prev, CAL_WIDE, 0, &x[2]);
    if (dc) I->cal_chain = (double)(dc / CAL_CHAIN);   /* (whole bytes: an estimate is then exact in node counts) */
    if (dw && dw > CAL_WIDE * I->cal_chain) I->cal_wide = (double)((dw - (size_t)(CAL_WIDE * I->cal_chain)) / (CAL_WIDE - 1));
    for (int i = 0; i < 3; i++) cuda_graph_destroy(b, x[i]);
  }
  free(g), free(prev);
  memcpy(b->err, err, sizeof err);   /* (a failed calibration leaves the defaults, and no message) */
}

static uint64_t cuda_graph_bytes(gt_backend *b, const gt_bgraph *g, int *measured) {
  cuda_impl *I = b->impl;
  *measured = g->delta > MEMINFO_STEP;
  if (*measured) return g->delta;
  if (!I->cal_done) calibrate(b);
  return (uint64_t)(g->n * I->cal_chain + (g->roots > 1 ? g->roots - 1 : 0) * I->cal_wide);
}

static int cuda_graph_launch(gt_backend *b, gt_bgraph *g) {
  cuda_impl *I = b->impl;
  return CU(I, cuGraphLaunch, g->exec, I->stream);
}

/* A cond entry's new p (a condition tensor at a new address): the kernel
   that reads it patched; GT_BREFUSED where the driver will not (the graph is rebuilt). */
static int set_cond(cuda_impl *I, gt_bgraph *g, int i, const gt_gnode *node) {
  const struct cond_set *c = g->cset ? &g->cset[i] : NULL;
  if (!c || !c->node) return GT_BREFUSED;   /* (an IF's END reads nothing) */
  CUDA_KERNEL_NODE_PARAMS p;
  struct cond_args a;
  cond_set_params(I, node, c, &a, &p);
  CUresult r = I->cu.cuGraphExecKernelNodeSetParams(g->exec, c->node, &p);
  if (r != CUDA_SUCCESS) {
    cu_fail(I, "cuGraphExecKernelNodeSetParams", r);
    return sticky_error(r) ? GT_BERR : GT_BREFUSED;
  }
  return CU(I, cuGraphKernelNodeSetParams, c->node, &p);
}

static int cuda_graph_set_kernel(gt_backend *b, gt_bgraph *g, int i, const gt_gnode *node) {
  cuda_impl *I = b->impl;
  CUDA_KERNEL_NODE_PARAMS p;
  int rc;
  if (i >= 0 && i < g->n && (g->kind[i] == GT_GN_IF || g->kind[i] == GT_GN_WHILE || g->kind[i] == GT_GN_END) &&
      node->kind == g->kind[i])
    return set_cond(I, g, i, node);
  if (i < 0 || i >= g->n || g->kind[i] != GT_GN_KERNEL)
    return bad_node(b, i, g->n, "is not a kernel node; only kernel nodes can be patched");
  if (node->fn != g->fn[i]) return bad_node(b, i, g->n, "runs another kernel; a patch keeps the function");
  if ((rc = ensure_smem(I, node->fn, node->smem))) return rc;
  kernel_params(&p, node);
  if (g->conds) {                    /* a node in a conditional body: if the driver will not patch it, */
    CUresult r = I->cu.cuGraphExecKernelNodeSetParams(g->exec, g->nodes[i], &p);   /* the graph is rebuilt */
    if (r != CUDA_SUCCESS) {
      cu_fail(I, "cuGraphExecKernelNodeSetParams", r);
      return sticky_error(r) ? GT_BERR : GT_BREFUSED;
    }
    return CU(I, cuGraphKernelNodeSetParams, g->nodes[i], &p);
  }
  /* The exec alone: the graph it came from lends only its node handles (an
     update copies its new parameters into them), so one driver call a patch. */
  if ((rc = CU(I, cuGraphExecKernelNodeSetParams, g->exec, g->nodes[i], &p)))
    launch_context(b, node->fn, node->grid, node->block, node->smem);
  return rc;
}

/* CUgraphExecUpdateResult, 1..8, in words. */
static const char *const update_results[] = {
  "an unspecified reason", "an unspecified reason", "the topology changed", "a node's type changed",
  "a kernel's function changed", "a node's parameters changed in an unsupported way",
  "a node is not supported by updates", "a kernel's function changed in an unsupported way",
  "a node's attributes changed in an unsupported way"
};

/* The exec keeps being named by the nodes of the graph it was instantiated
   from (the handles cuGraphExec*SetParams need), so on success the new
   parameters are copied into those nodes and the new graph is dropped. */
static int cuda_graph_update(gt_backend *b, gt_bgraph *g, const gt_gnode *nodes, int n) {
  cuda_impl *I = b->impl;
  CUgraphExecUpdateResultInfo info;
  CUgraph ng = NULL;
  CUgraphNode *nh = NULL;
  CUresult r;
  int rc, at = -1;
  if (n != g->n) {
    snprintf(b->err, GT_ERRLEN, "cuda: graph update refused: %d nodes instead of %d", n, g->n);
    return GT_BREFUSED;
  }
  if (g->conds) {                    /* conditional nodes: instantiated anew (their bodies and handles are new graphs) */
    snprintf(b->err, GT_ERRLEN, "cuda: graph update refused: the graph holds conditional nodes");
    return GT_BREFUSED;
  }
  for (int i = 0; i < n; i++)   /* (a collective: NCCL's captured work holds its buffers, so a new graph is captured) */
    if (node_kind(&nodes[i]) != g->kind[i] || (g->kind[i] == GT_GN_KERNEL && nodes[i].fn != g->fn[i]) || g->kind[i] == GT_GN_COLL) {
      snprintf(b->err, GT_ERRLEN, "cuda: graph update refused: node %d changed its kind or kernel, or is a collective", i);
      return GT_BREFUSED;
    }
  if ((rc = graph_build(I, nodes, n, 0, &ng, &nh, NULL))) return rc;
  memset(&info, 0, sizeof info);
  r = I->cu.cuGraphExecUpdate(g->exec, ng, &info);
  if (r != CUDA_SUCCESS) {
    for (int i = 0; i < n; i++)
      if (info.errorNode && nh[i] == info.errorNode) at = i;
    rc = cu_fail(I, "cuGraphExecUpdate", r);
    if (r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) {
      snprintf(b->err, GT_ERRLEN, "cuda: cuGraphExecUpdate refused the update: %s",
               update_results[(unsigned)info.result < 9 ? info.result : 0]);
      if (at >= 0) err_append(b, " (node %d)", at);
      rc = GT_BREFUSED;
    }
    I->cu.cuGraphDestroy(ng);
    free(nh);
    return rc;
  }
  for (int i = 0; i < n && !rc; i++) {
    const gt_gnode *nd = &nodes[i];
    if (g->kind[i] == GT_GN_KERNEL) {
      CUDA_KERNEL_NODE_PARAMS p;
      kernel_params(&p, nd);
      rc = CU(I, cuGraphKernelNodeSetParams, g->nodes[i], &p);
    } else if (g->kind[i] == GT_GN_MEMCPY) {
      CUDA_MEMCPY3D c;
      memcpy_params(&c, nd);
      rc = CU(I, cuGraphMemcpyNodeSetParams, g->nodes[i], &c);
    } else if (g->kind[i] == GT_GN_MEMSET) {
      CUDA_MEMSET_NODE_PARAMS m;
      memset_params(&m, nd);
      rc = CU(I, cuGraphMemsetNodeSetParams, g->nodes[i], &m);
    }
    if (rc) err_append(b, " (mirroring the update into graph node %d)", i);
  }
  I->cu.cuGraphDestroy(ng);
  free(nh);
  return rc ? rc : CU(I, cuGraphUpload, g->exec, I->stream);
}

/* -- Conditional nodes --------------------------------------------------- */

/* Sets a conditional node's handle from p on the device.  cudaGraphSetConditional
   is a device-runtime builtin that the driver resolves when the module loads
   (no -rdc, no libcudadevrt); it is declared here because NVRTC has no
   include path.  first: a WHILE's pass counter starts (the node's setter) or
   advances (the body's last node), and a bounded loop stops at max passes. */
static const char cond_src[] =
  "extern \"C\" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);\n"
  "extern \"C\" __global__ void gt_cond_set(unsigned long long h, const void *p, int dtype, unsigned *cnt,\n"
  "                                          unsigned max, int first) {\n"
  "  unsigned v;\n"
  "  switch (dtype) {\n"
  "  case 1: v = *(const float *)p != 0.0f; break;\n"
  "  case 2: v = *(const int *)p != 0; break;\n"
  "  case 3: v = *(const long long *)p != 0; break;\n"
  "  default: v = *(const unsigned char *)p != 0; break;\n"
  "  }\n"
  "  if (cnt) {\n"
  "    unsigned c = first ? 0u : *cnt + 1u;\n"
  "    *cnt = c;\n"
  "    if (c >= max) v = 0;\n"
  "  }\n"
  "  cudaGraphSetConditional(h, v);\n"
  "}\n";

/* GT_COND_NODES (IF, WHILE: CUDA 12.4) and GT_COND_ELSE_NODES (an IF with
   two bodies: CUDA 12.8) when the driver has the entry points and the
   setting kernel compiles and loads; else 0 with the reason in b->err.
   Decided once; the kernel's compile is not counted in gt.compile_counts. */
static int cuda_cond_support(gt_backend *b) {
  cuda_impl *I = b->impl;
  if (I->cond_bits < 0) {
    static const uint8_t pt[] = { GT_P_U64, GT_P_IN, GT_P_I32, GT_P_OUT, GT_P_U32, GT_P_I32 };
    static const char *const tx[] = { "unsigned long long", "const void *", "int", "unsigned *", "unsigned", "int" };
    static const char *const nm[] = { "h", "p", "dtype", "cnt", "max", "first" };
    gt_ksig sig = { "gt_cond_set", 6, pt, tx, nm };
    int compiles = I->compiles, hits = I->cache_hits;
    I->cond_bits = 0;
    if (!I->cond.cuGraphConditionalHandleCreate || !I->cond.cuGraphAddNode)
      snprintf(I->cond_why, sizeof I->cond_why, "the NVIDIA driver (CUDA %d.%d) has no conditional graph nodes "
               "(cuGraphConditionalHandleCreate, cuGraphAddNode: CUDA 12.4)", I->driver / 1000, I->driver % 1000 / 10);
    else if (cuda_compile(b, cond_src, NULL, &sig, 1, &I->cond_mod, &I->cond_set) != GT_BOK) {
      snprintf(I->cond_why, sizeof I->cond_why, "the kernel that sets a conditional node's handle did not build: %.400s", b->err);
      I->cond_set = NULL;
    } else
      I->cond_bits = GT_COND_NODES | (I->driver >= 12080 ? GT_COND_ELSE_NODES : 0);
    I->compiles = compiles, I->cache_hits = hits;
  }
  if (!I->cond_bits) snprintf(b->err, GT_ERRLEN, "%s", I->cond_why);
  return I->cond_bits;
}

/* -- Events ------------------------------------------------------------ */

static int cuda_event_create(gt_backend *b, gt_bevent **ev) {
  cuda_impl *I = b->impl;
  gt_bevent *e = calloc(1, sizeof *e);
  int rc;
  if (!e) return no_memory(b, "event");
  if ((rc = CU(I, cuEventCreate, &e->e, CU_EVENT_DEFAULT))) { free(e); return rc; }
  *ev = e;
  return GT_BOK;
}

static int cuda_event_record(gt_backend *b, gt_bevent *ev) {
  cuda_impl *I = b->impl;
  return CU(I, cuEventRecord, ev->e, I->stream);
}

static int cuda_event_elapsed_us(gt_backend *b, gt_bevent *start, gt_bevent *end, double *us) {
  cuda_impl *I = b->impl;
  float ms = 0;
  int rc;
  if ((rc = CU(I, cuEventSynchronize, end->e)) || (rc = CU(I, cuEventElapsedTime, &ms, start->e, end->e)))
    return rc;
  *us = ms * 1000.0;
  return GT_BOK;
}

static int cuda_event_ready_us(gt_backend *b, gt_bevent *start, gt_bevent *end, double *us) {
  cuda_impl *I = b->impl;
  float ms = 0;
  CUresult r = I->cu.cuEventElapsedTime(&ms, start->e, end->e);
  if (r == CUDA_ERROR_NOT_READY) return GT_BREFUSED;
  if (r != CUDA_SUCCESS) return cu_fail(I, "cuEventElapsedTime", r);
  *us = ms * 1000.0;
  return GT_BOK;
}

static void cuda_event_destroy(gt_backend *b, gt_bevent *ev) {
  cuda_impl *I = b->impl;
  if (!ev) return;
  I->cu.cuEventDestroy(ev->e);
  free(ev);
}

/* -- Open and shutdown ------------------------------------------------- */

/* Releases whatever start got to, and at shutdown all device memory too. */
static void cuda_close(cuda_impl *I) {
  if (I->stream) {
    I->cu.cuStreamSynchronize(I->stream);
    gt_nccl_close(I->nccl);
    while (I->nresv) resv_free(I, I->nresv - 1);
    I->cu.cuStreamDestroy(I->stream);
  }
  if (I->cond_mod) cuda_module_free(I->b, I->cond_mod);
  if (I->nop_mod) cuda_module_free(I->b, I->nop_mod);
  if (I->ctx_retained) I->cu.cuDevicePrimaryCtxRelease(I->dev);
  if (I->libnvrtc) dlclose(I->libnvrtc);
  /* libcuda stays loaded: the driver's threads may outlive the context. */
  free(I->resv);
  free(I->deps);
  free(I->stamp);
  free(I);
}

/* -- Collectives: NCCL (nccl.c) --------------------------------------- */

static int cuda_coll_run(gt_backend *b, const gt_coll *c, uint64_t dst, uint64_t src) {
  cuda_impl *I = b->impl;
  if (!I->nccl) { snprintf(b->err, GT_ERRLEN, "gt.dist: no group joined (call gt.dist.init() first)"); return GT_BERR; }
  return gt_nccl_run(I->nccl, c, dst, src, I->stream, b->err, GT_ERRLEN) ? GT_BERR : GT_BOK;
}

/* The communicator on this device (its context current), then a warm-up
   all-reduce of one element, synced: NCCL's first collective sets up its
   connections, which must not happen inside a capture. */
static int cuda_coll_open(gt_backend *b, int rank, int world, const char *id, double timeout) {
  cuda_impl *I = b->impl;
  CUdeviceptr w = 0;
  (void)timeout;   /* (NCCL waits in its own bootstrap; NCCL_TIMEOUT-like settings are NCCL's) */
  if (I->nccl) return GT_BOK;
  int rc = CU(I, cuCtxSetCurrent, I->ctx);
  if (rc) return rc;
  if (gt_nccl_open(&I->nccl, rank, world, id, b->err, GT_ERRLEN)) return GT_BERR;
  gt_coll c = { GT_COLL_ALL_REDUCE, GT_RED_SUM, GT_F32, 0, 1 };
  if (!(rc = CU(I, cuMemAlloc, &w, 4)) && !(rc = CU(I, cuMemsetD8Async, w, 0, 4, I->stream)) &&
      !(rc = cuda_coll_run(b, &c, w, w)))
    rc = CU(I, cuStreamSynchronize, I->stream);
  if (w) I->cu.cuMemFree(w);
  if (rc) err_append(b, " (gt.dist.init's warm-up all-reduce)");
  return rc;
}

static void cuda_shutdown(gt_backend *b) {
  if (!b->impl) return;
  cuda_close(b->impl);
  b->impl = NULL;
}

static int pick_device(cuda_impl *I) {
  const char *env = getenv("GTLUA_DEVICE"), *local = getenv("LOCAL_RANK");
  const char *var = env && *env ? "GTLUA_DEVICE" : "LOCAL_RANK";
  if (!(env && *env)) env = local;   /* a rank of gtlua --nproc (or torchrun): its own GPU */
  CUresult r = I->cu.cuInit(0);
  int count = 0, rc;
  char *end;
  if (r == CUDA_SUCCESS && I->cu.cuDeviceGetCount(&count) == CUDA_SUCCESS && !count) r = CUDA_ERROR_NO_DEVICE;
  if (r == CUDA_ERROR_NO_DEVICE) {
    snprintf(I->b->err, GT_ERRLEN, "cuda: no CUDA device found");
    return GT_BERR;
  }
  if ((rc = cu_check(I, "cuInit", r)) || (rc = CU(I, cuDeviceGetCount, &count))) return rc;
  if (env && *env) {
    long v = strtol(env, &end, 10);
    if (var[0] == 'L' && count == 1 && !*end) v = 0;   /* (a launcher that shows each rank its one GPU) */
    if (*end || v < 0 || v >= count) {
      snprintf(I->b->err, GT_ERRLEN, "cuda: %s=%s is not a device number (there %s %d: 0..%d)%s",
               var, env, count == 1 ? "is" : "are", count, count - 1,
               var[0] == 'L' ? "; a rank a GPU: run at most as many ranks as this host has GPUs" : "");
      return GT_BERR;
    }
    I->ordinal = (int)v;
  }
  return CU(I, cuDeviceGet, &I->dev, I->ordinal);
}

static int device_setup(cuda_impl *I) {
  gt_device_info *d = &I->info;
  const CUdevice_attribute OPTIN = CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                           VMM = CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
  size_t total = 0;
  int vmm = 0, rc;
  snprintf(d->backend, sizeof d->backend, "cuda");
  snprintf(d->compiler, sizeof d->compiler, "nvrtc");
  d->driver_version = I->driver;
  if ((rc = CU(I, cuDeviceGetName, d->name, (int)sizeof d->name, I->dev)) ||
      (rc = CU(I, cuDeviceGetAttribute, &d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, I->dev)) ||
      (rc = CU(I, cuDeviceGetAttribute, &d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, I->dev)) ||
      (rc = CU(I, cuDeviceGetAttribute, &d->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, I->dev)) ||
      (rc = CU(I, cuDeviceGetAttribute, &I->smem_optin, OPTIN, I->dev)) ||
      (rc = CU(I, cuDeviceGetAttribute, &vmm, VMM, I->dev)) ||
      (rc = CU(I, cuDeviceTotalMem, &total, I->dev)))
    return rc;
  d->total_mem = total;
  if (!vmm) {
    snprintf(I->b->err, GT_ERRLEN, "cuda: device %d (%s) does not support virtual memory management "
             "(cuMemAddressReserve/cuMemMap), which the pool needs", I->ordinal, d->name);
    return GT_BERR;
  }
  if ((rc = CU(I, cuDevicePrimaryCtxRetain, &I->ctx, I->dev))) return rc;
  I->ctx_retained = 1;
  if ((rc = CU(I, cuCtxSetCurrent, I->ctx)) || (rc = CU(I, cuStreamCreate, &I->stream, CU_STREAM_NON_BLOCKING)))
    return rc;
  I->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  I->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  I->prop.location.id = (int)I->dev;
  I->access.location = I->prop.location;
  I->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if ((rc = CU(I, cuMemGetAllocationGranularity, &I->gran, &I->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)))
    return rc;
  if (!I->gran) I->gran = 2u << 20;
  return GT_BOK;
}

/* Loads libcuda and NVRTC, opens device 0 (or $GTLUA_DEVICE) through its
   primary context and one non-blocking stream, and fills *b.  On failure
   returns GT_BERR (GT_BOOM: out of memory) with b->err saying what was
   missing, and b->impl is NULL with nothing left held. */
int gt_backend_cuda_open(gt_backend *b) {
  cuda_impl *I = calloc(1, sizeof *I);
  int rc;
  memset(b, 0, sizeof *b);
  b->name = "cuda";
  if (!I) return no_memory(b, "backend state");
  I->b = b;
  if ((rc = load_libcuda(I)) || (rc = load_nvrtc(I)) || (rc = pick_device(I)) || (rc = device_setup(I)) ||
      (rc = pick_arch(I))) {
    cuda_close(I);
    return rc == GT_BOOM ? GT_BOOM : GT_BERR;
  }
  I->info.nvrtc_version = I->nvrtc;
  b->impl = I;
  b->granularity = I->gran;
  GT_BACKEND_FILL(b, cuda, cuda_sync);
  return GT_BOK;
}

#endif
