/* backend.h - the interface every device backend implements (cpu, cuda). */
#ifndef GT_BACKEND_H
#define GT_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "gt.h"
#include "util.h"
#include "coll.h"

#define GT_ERRLEN 4096

/* Opaque per-backend objects. */
typedef struct gt_bmodule gt_bmodule; /* one compiled source */
typedef struct gt_bfunc gt_bfunc;     /* one __global__ function of a module */
typedef struct gt_bgraph gt_bgraph;   /* an instantiated graph (cuda: CUgraph + CUgraphExec) */
typedef struct gt_bevent gt_bevent;   /* a timing event */

/* What compile needs to know about each kernel: its name as written in the
   source and its parsed parameter list (kernel.c does the parsing). */
typedef struct gt_ksig {
  const char *name;
  int nparams;
  const uint8_t *ptype;       /* gt_ptype per parameter */
  const char *const *ptext;   /* declared type text, e.g. "const float *", "int" */
  const char *const *pname;   /* parameter names for messages (may be NULL) */
} gt_ksig;

/* One node of a graph to build.  Kernel args: args[i] points at the value of
   parameter i (as cuLaunchKernel's kernelParams); values are little-endian,
   pointers are 8 bytes. */
enum { GT_GN_KERNEL = 0, GT_GN_MEMCPY = 1, GT_GN_MEMSET = 2,
       /* A collective (gt.dist): dst written, src read, bytes = one rank's
          piece, coll = the packed gt_coll (gt_coll_pack).  Its buffers are
          fixed when the graph is built (NCCL's captured work holds them). */
       GT_GN_COLL = 3,
       /* Conditional nodes (gt.cond, gt.loop), flat: the nodes between an IF
          or WHILE and its END are its body; an ELSE splits an IF's body into
          then and else.  IF/WHILE (and a WHILE's END, which re-evaluates):
          dst = address of p, value = p's dtype (GT_F32, GT_I32, GT_I64,
          GT_U8; nonzero is true), bytes = a WHILE's iteration bound (0: none).
          After cond.c has lifted them, every dependency joins two nodes of
          the same body (a body node never waits on a node outside it: its
          IF/WHILE does).  ELSE and an IF's END are markers, no work. */
       GT_GN_IF = GT_COND_IF, GT_GN_ELSE = GT_COND_ELSE, GT_GN_WHILE = GT_COND_WHILE, GT_GN_END = GT_COND_END };
typedef struct gt_gnode {
  int kind;
  gt_bfunc *fn;               /* GT_GN_KERNEL */
  unsigned grid[3], block[3], smem;
  int nargs;
  void **args;
  uint64_t dst, src;          /* GT_GN_MEMCPY (device to device) / GT_GN_MEMSET (dst) */
  size_t bytes;
  uint8_t value;              /* GT_GN_MEMSET byte value */
  int32_t coll;               /* GT_GN_COLL: gt_coll_pack's */
  int ndeps;
  const int *deps;            /* indices of earlier nodes this one waits for */
} gt_gnode;

/* Status codes: 0 is success; failures leave a message in b->err. */
enum { GT_BOK = 0, GT_BERR = -1, GT_BOOM = -2, GT_BREFUSED = -3 };

typedef struct gt_backend gt_backend;
struct gt_backend {
  const char *name;           /* "cpu" or "cuda" */
  char err[GT_ERRLEN];        /* last failure, a full sentence naming the call */
  void *impl;                 /* backend private state */
  size_t granularity;         /* commit granularity in bytes (cuda: VMM granularity) */
  uint64_t fault_addr;        /* cpu: the address the last failed launch faulted at (0: none) */

  int (*device_info)(gt_backend *b, gt_device_info *out);
  void (*shutdown)(gt_backend *b);

  /* Memory is virtual-range based, so a pool can grow without moving:
     reserve a range of addresses (no memory behind it), commit/decommit pieces
     of it (multiples of granularity, aligned), release the whole range. */
  int (*reserve)(gt_backend *b, size_t bytes, uint64_t *base);
  int (*commit)(gt_backend *b, uint64_t addr, size_t bytes);
  int (*decommit)(gt_backend *b, uint64_t addr, size_t bytes);
  int (*release)(gt_backend *b, uint64_t base, size_t bytes);

  /* Copies and fills, ordered on the backend's one stream.  dtoh waits for
     the copy (so for all earlier work); the others may return early. */
  int (*htod)(gt_backend *b, uint64_t dst, const void *src, size_t bytes);
  int (*dtoh)(gt_backend *b, void *dst, uint64_t src, size_t bytes);
  int (*dtod)(gt_backend *b, uint64_t dst, uint64_t src, size_t bytes);
  int (*memset8)(gt_backend *b, uint64_t dst, uint8_t value, size_t bytes);

  /* Compile one source holding nsigs kernels; on success *mod owns the code
     and fns[i] is the function for sigs[i].  opts: extra compiler options
     separated by spaces (may be NULL).  Results are cached on disk under
     gt_cache_dir() when it is usable, each entry checked (a hash of its
     bytes) before it is loaded.  On failure b->err holds the compiler's log.
     Modules live as long as the process (graphs keep their functions). */
  int (*compile)(gt_backend *b, const char *src, const char *opts,
                 const gt_ksig *sigs, int nsigs, gt_bmodule **mod, gt_bfunc **fns);

  /* Eager launch; args as in gt_gnode. */
  int (*launch)(gt_backend *b, gt_bfunc *fn, const unsigned grid[3], const unsigned block[3],
                unsigned smem, void **args);

  /* Build a graph from n nodes (dependencies as given), instantiate and upload
     it.  The node array and the args it points at may be freed afterwards. */
  int (*graph_create)(gt_backend *b, const gt_gnode *nodes, int n, gt_bgraph **out);
  int (*graph_launch)(gt_backend *b, gt_bgraph *g);
  /* Patch node i (a kernel node: same function, new grid/args/smem; or an
     IF/WHILE/END entry: its condition p at a new address, node->dst).
     GT_BREFUSED where the driver will not patch it (the graph is updated). */
  int (*graph_set_kernel)(gt_backend *b, gt_bgraph *g, int i, const gt_gnode *node);
  /* Replace the whole graph with a same-topology one in place
     (cuGraphExecUpdate).  GT_BREFUSED when the driver refuses; g is unchanged then. */
  int (*graph_update)(gt_backend *b, gt_bgraph *g, const gt_gnode *nodes, int n);
  void (*graph_destroy)(gt_backend *b, gt_bgraph *g);
  /* The device memory g's instantiation and upload took (cpu: the host
     bytes its executable form holds, exact).  *measured: 1 when measured
     (cuda: the free-memory delta around instantiate and upload was above
     the allocation granularity; cpu: always), 0 when estimated from g's
     node count and roots (the launches that wait for nothing) with the
     device's calibration of a kernel node in a chain and in a wide graph,
     made once at first need. */
  uint64_t (*graph_bytes)(gt_backend *b, const gt_bgraph *g, int *measured);

  int (*event_create)(gt_backend *b, gt_bevent **ev);
  int (*event_record)(gt_backend *b, gt_bevent *ev);
  int (*event_elapsed_us)(gt_backend *b, gt_bevent *start, gt_bevent *end, double *us); /* waits for end */
  /* The same without waiting: GT_BREFUSED while end has not happened yet. */
  int (*event_ready_us)(gt_backend *b, gt_bevent *start, gt_bevent *end, double *us);
  void (*event_destroy)(gt_backend *b, gt_bevent *ev);

  int (*sync)(gt_backend *b);

  /* Conditional nodes this backend can build into graphs: GT_COND_NODES
     (IF and WHILE), plus GT_COND_ELSE_NODES (an IF with an else body).  0
     when there are none (the runtime then branches on the host); why in
     b->err.  The first call may compile a helper kernel. */
  int (*cond_support)(gt_backend *b);

  /* Collectives (gt.dist): join the group of world ranks as rank (id: a
     name every rank of the group gives alike, e.g. MASTER_ADDR:MASTER_PORT;
     timeout in seconds), then run one on this backend's addresses in
     stream order.  The group is left at shutdown. */
  int (*coll_open)(gt_backend *b, int rank, int world, const char *id, double timeout);
  int (*coll_run)(gt_backend *b, const gt_coll *c, uint64_t dst, uint64_t src);
};

/* Constructors: fill *b (name, err, function pointers, impl).  GT_BERR with
   b->err set when the backend cannot start (no libcuda, no device, ...). */
int gt_backend_cpu_open(gt_backend *b);
int gt_backend_cuda_open(gt_backend *b);
/* A module of the cpu backend freed (modules otherwise live as long as the
   process; the C tests free theirs). */
void gt_backend_cpu_module_free(gt_backend *b, gt_bmodule *m);
/* NVRTC compiles and CUBIN cache hits so far (0/0 unless b is an open cuda backend). */
void gt_backend_cuda_counts(gt_backend *b, int *compiles, int *cache_hits);



/* Fills a backend's table from functions named P_reserve, P_commit, ... (P:
   its prefix); sync is named apart (the cpu backend's cpu_sync is a barrier). */
#define GT_BACKEND_FILL(b, P, sync_fn) do {                                                        \
    (b)->device_info = P##_device_info, (b)->shutdown = P##_shutdown;                             \
    (b)->reserve = P##_reserve, (b)->commit = P##_commit, (b)->decommit = P##_decommit;           \
    (b)->release = P##_release;                                                                   \
    (b)->htod = P##_htod, (b)->dtoh = P##_dtoh, (b)->dtod = P##_dtod, (b)->memset8 = P##_memset8;  \
    (b)->compile = P##_compile, (b)->launch = P##_launch;                                         \
    (b)->graph_create = P##_graph_create, (b)->graph_launch = P##_graph_launch;                   \
    (b)->graph_set_kernel = P##_graph_set_kernel, (b)->graph_update = P##_graph_update;           \
    (b)->graph_destroy = P##_graph_destroy, (b)->graph_bytes = P##_graph_bytes;                   \
    (b)->event_create = P##_event_create, (b)->event_record = P##_event_record;                   \
    (b)->event_elapsed_us = P##_event_elapsed_us, (b)->event_destroy = P##_event_destroy;         \
    (b)->event_ready_us = P##_event_ready_us;                                                     \
    (b)->sync = sync_fn, (b)->cond_support = P##_cond_support;                                    \
    (b)->coll_open = P##_coll_open, (b)->coll_run = P##_coll_run;                                 \
  } while (0)

#endif
