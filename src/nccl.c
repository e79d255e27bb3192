/* nccl.c - NCCL by dlopen, for the cuda backend's gt.dist group: the
   library found, the communicator made (the unique id from NCCL_COMM_ID, as
   every rank computes it alike), collectives enqueued on a stream, NCCL's
   failures as sentences naming the call.  NCCL's types are declared here
   from its ABI (nccl.h is not needed to build). */
#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nccl.h"
#include "util.h"

typedef struct { char internal[128]; } nccl_id;
typedef void *nccl_comm;
typedef int nccl_res;          /* ncclResult_t: 0 is ncclSuccess */
enum { NC_INT8 = 0, NC_UINT8 = 1, NC_INT32 = 2, NC_UINT32 = 3, NC_INT64 = 4, NC_UINT64 = 5, NC_FLOAT16 = 6, NC_FLOAT32 = 7,
       NC_FLOAT64 = 8, NC_BFLOAT16 = 9 };
enum { NC_SUM = 0, NC_MAX = 2, NC_MIN = 3 };

struct gt_nccl {
  void *lib;
  nccl_comm comm;
  nccl_res (*GetVersion)(int *);
  nccl_res (*GetUniqueId)(nccl_id *);
  nccl_res (*CommInitRank)(nccl_comm *, int, nccl_id, int);
  nccl_res (*CommDestroy)(nccl_comm);
  nccl_res (*AllReduce)(const void *, void *, size_t, int, int, nccl_comm, void *);
  nccl_res (*AllGather)(const void *, void *, size_t, int, nccl_comm, void *);
  nccl_res (*ReduceScatter)(const void *, void *, size_t, int, int, nccl_comm, void *);
  nccl_res (*Broadcast)(const void *, void *, size_t, int, int, nccl_comm, void *);
  const char *(*GetErrorString)(nccl_res);
  const char *(*GetLastError)(nccl_comm);   /* (2.13+; may be missing) */
  int version;
};

static int fail(gt_nccl *n, nccl_res r, const char *call, char *err, size_t errlen) {
  const char *last = n->GetLastError ? n->GetLastError(n->comm) : NULL;
  snprintf(err, errlen, "gt.dist (cuda): %s failed: %s%s%s", call, n->GetErrorString ? n->GetErrorString(r) : "NCCL error",
           last && *last ? ": " : "", last && *last ? last : "");
  return -1;
}

/* The first libnccl.so.2 that loads: GTLUA_NCCL, the loader's path, the wheels, the toolkit. */
static void *load(char *tried, size_t len) {
  const char *env = getenv("GTLUA_NCCL"), *home = getenv("CUDA_HOME"), *venv = getenv("VIRTUAL_ENV"), *conda = getenv("CONDA_PREFIX");
  const char *hdir = getenv("HOME");
  char pat[1024];
  void *h;
  if (env && *env) {
    if ((h = dlopen(env, RTLD_NOW | RTLD_LOCAL))) return h;
    snprintf(tried, len, "GTLUA_NCCL=%s (%s)", env, dlerror());
    return NULL;
  }
  if ((h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL))) return h;
  const char *roots[] = { venv, conda, "/usr/local", "/usr", "/opt/conda", hdir ? hdir : NULL };
  for (size_t r = 0; r < sizeof roots / sizeof *roots; r++) {
    if (!roots[r]) continue;
    snprintf(pat, sizeof pat, "%s%s/lib/python3*/*-packages/nvidia/{nccl,cu13,cu12}/lib/libnccl.so.2", roots[r],
             r == 5 ? "/.local" : "");
    glob_t g;
    if (glob(pat, GLOB_BRACE, NULL, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; i++)
        if ((h = dlopen(g.gl_pathv[i], RTLD_NOW | RTLD_LOCAL))) { globfree(&g); return h; }
      globfree(&g);
    }
  }
  const char *libs[] = { home && *home ? home : "/usr/local/cuda", "/usr/local/cuda" };
  for (size_t i = 0; i < 2; i++) {
    snprintf(pat, sizeof pat, "%s/lib64/libnccl.so.2", libs[i]);
    if ((h = dlopen(pat, RTLD_NOW | RTLD_LOCAL))) return h;
  }
  snprintf(tried, len, "libnccl.so.2 on the loader's path, site-packages/nvidia/{nccl,cu13,cu12}/lib under "
           "$VIRTUAL_ENV, $CONDA_PREFIX, /usr/local, /usr, /opt/conda and ~/.local, and $CUDA_HOME/lib64");
  return NULL;
}

static int resolve(gt_nccl *n, char *err, size_t errlen) {
#define SYM(f) *(void **)&n->f = dlsym(n->lib, "nccl" #f)
  SYM(GetVersion); SYM(GetUniqueId); SYM(CommInitRank); SYM(CommDestroy); SYM(AllReduce); SYM(AllGather);
  SYM(ReduceScatter); SYM(Broadcast); SYM(GetErrorString); SYM(GetLastError);
#undef SYM
  if (!n->GetVersion || !n->GetUniqueId || !n->CommInitRank || !n->CommDestroy || !n->AllReduce || !n->AllGather ||
      !n->ReduceScatter || !n->Broadcast || !n->GetErrorString) {
    snprintf(err, errlen, "gt.dist (cuda): the libnccl.so.2 loaded lacks a function gtlua needs (NCCL 2.9 or newer is needed)");
    return -1;
  }
  nccl_res r = n->GetVersion(&n->version);
  if (r) return fail(n, r, "ncclGetVersion", err, errlen);
  if (n->version < 20906) {
    snprintf(err, errlen, "gt.dist (cuda): NCCL %d is too old: collectives in CUDA graphs need 2.9.6 or newer", n->version);
    return -1;
  }
  return 0;
}

int gt_nccl_open(gt_nccl **out, int rank, int world, const char *id, char *err, size_t errlen) {
  gt_nccl *n = calloc(1, sizeof *n);
  char tried[1024] = "", comm_id[300];
  if (!n) { snprintf(err, errlen, "gt.dist (cuda): out of host memory"); return -1; }
  if (!(n->lib = load(tried, sizeof tried))) {
    snprintf(err, errlen, "gt.dist (cuda): cannot load NCCL (libnccl.so.2); looked for %s. Install it "
             "(pip install nvidia-nccl-cu13, or the CUDA toolkit's) or set GTLUA_NCCL to its path", tried);
    free(n);
    return -1;
  }
  if (resolve(n, err, errlen)) { dlclose(n->lib); free(n); return -1; }
  const char *colon = strrchr(id, ':');
  if (!getenv("NCCL_COMM_ID") && colon) {   /* every rank's ncclGetUniqueId then answers alike */
    snprintf(comm_id, sizeof comm_id, "%.*s:%d", (int)(colon - id), id, atoi(colon + 1) + 1);
    setenv("NCCL_COMM_ID", comm_id, 1);
  }
  nccl_id uid;
  nccl_res r = n->GetUniqueId(&uid);
  if (!r) r = n->CommInitRank(&n->comm, world, uid, rank);
  if (r) {
    fail(n, r, n->comm ? "ncclCommInitRank" : "ncclGetUniqueId (or ncclCommInitRank)", err, errlen);
    dlclose(n->lib);
    free(n);
    return -1;
  }
  *out = n;
  return 0;
}

static int nccl_dtype(int dt) {
  switch (dt) {
  case GT_F32: return NC_FLOAT32;
  case GT_F64: return NC_FLOAT64;
  case GT_I32: return NC_INT32;
  case GT_I64: return NC_INT64;
  case GT_U32: return NC_UINT32;
  case GT_U64: return NC_UINT64;
  case GT_F16: return NC_FLOAT16;
  case GT_BF16: return NC_BFLOAT16;
  default: return NC_UINT8;
  }
}

int gt_nccl_run(gt_nccl *n, const gt_coll *c, uint64_t dst, uint64_t src, void *stream, char *err, size_t errlen) {
  int dt = nccl_dtype(c->dtype), op = c->op == GT_RED_MAX ? NC_MAX : c->op == GT_RED_MIN ? NC_MIN : NC_SUM;
  void *d = (void *)(uintptr_t)dst;
  const void *s = (const void *)(uintptr_t)src;
  nccl_res r;
  switch (c->kind) {
  case GT_COLL_ALL_REDUCE: r = n->AllReduce(s, d, c->count, dt, op, n->comm, stream); return r ? fail(n, r, "ncclAllReduce", err, errlen) : 0;
  case GT_COLL_REDUCE_SCATTER: r = n->ReduceScatter(s, d, c->count, dt, op, n->comm, stream); return r ? fail(n, r, "ncclReduceScatter", err, errlen) : 0;
  case GT_COLL_BROADCAST: r = n->Broadcast(s, d, c->count, dt, c->root, n->comm, stream); return r ? fail(n, r, "ncclBroadcast", err, errlen) : 0;
  default: r = n->AllGather(s, d, c->count, dt, n->comm, stream); return r ? fail(n, r, "ncclAllGather", err, errlen) : 0;
  }
}

void gt_nccl_close(gt_nccl *n) {
  if (!n) return;
  if (n->comm) n->CommDestroy(n->comm);
  free(n);   /* (the library stays loaded: NCCL's threads may still be in it) */
}
