/* gt.h - the public C API of gtlua: opaque handles, plain structs, gt_ prototypes.
   lua/gt/init.lua feeds this very file (minus '#' lines) to ffi.cdef, and
   gt_internal.h after it (the structs Lua reads that are not the API), so it
   must stay plain C declarations: no macros, no inline code. */
#ifndef GT_H
#define GT_H
#include <stddef.h>
#include <stdint.h>

typedef struct gt_runtime gt_runtime; /* one per process */
typedef struct gt_tree gt_tree;       /* a graph tree: nodes, pool, stats */
typedef struct gt_module gt_module;   /* one compiled kernel source */
typedef struct gt_keyed gt_keyed;     /* a memoized path of keyed calls */

/* Status codes of the gt_ functions that return int. */
enum { GT_OK = 0, GT_ERR = -1 };

/* Element types. */
enum { GT_F32 = 1, GT_I32 = 2, GT_I64 = 3, GT_U8 = 4, GT_F64 = 5, GT_U32 = 6, GT_U64 = 7, GT_F16 = 8, GT_BF16 = 9 };
/* Collectives (gt.dist) and their reductions; GT_COLL_CHECK is the path check (an all-gather of segment keys). */
enum { GT_COLL_ALL_REDUCE = 0, GT_COLL_ALL_GATHER = 1, GT_COLL_REDUCE_SCATTER = 2, GT_COLL_BROADCAST = 3, GT_COLL_CHECK = 4 };
enum { GT_RED_SUM = 0, GT_RED_MAX = 1, GT_RED_MIN = 2 };

/* Kernel parameter kinds, parsed from the source. */
enum {
  GT_P_IN = 1,    /* const T *  : a buffer the kernel reads */
  GT_P_OUT = 2,   /* T *        : a buffer the kernel writes (and may read) */
  GT_P_I32 = 3, GT_P_U32 = 4, GT_P_I64 = 5, GT_P_U64 = 6,
  GT_P_F32 = 7, GT_P_F64 = 8, GT_P_BOOL = 9
};

/* Buffer flags. */
/* RELEASED: freed by gt_buf_free (gt.scope, t:free(), an op's temporary);
   KEEP: a scope's return value; ALIAS: a struct over another buffer's
   memory, which it neither owns nor holds; DRYARG: a traced call's argument, as its
   body gets it (gt_tree_dry_arg, or a traced call's staged input). */
enum { GT_BUF_STATIC = 1, GT_BUF_TREE = 2, GT_BUF_RELEASED = 4, GT_BUF_STAGING = 8, GT_BUF_KEEP = 16, GT_BUF_SLAB = 32,
       GT_BUF_ALIAS = 64, GT_BUF_DRYARG = 128 };

typedef struct gt_device_info {
  char backend[16];        /* "cpu" or "cuda" */
  char name[256];
  int cc_major, cc_minor;  /* compute capability (cpu: 0.0) */
  int sms;                 /* multiprocessors (cpu: worker threads) */
  uint64_t total_mem;      /* bytes */
  int driver_version;      /* e.g. 13000 (cpu: 0) */
  int nvrtc_version;       /* e.g. 13000 (cpu: 0) */
  char compiler[128];      /* cpu: the host compiler command; cuda: "nvrtc" */
  uint64_t free_mem;       /* bytes free on the device now (cuMemGetInfo; cpu: 0): graphs' memory shows only there */
} gt_device_info;

/* A device buffer (its fields: gt_internal.h).  Tensors in Lua are views (offset, shape) onto one. */
typedef struct gt_buf gt_buf;

/* One kernel argument: a tensor view (buf != NULL) or a scalar in v. */
typedef struct gt_arg {
  gt_buf *buf;
  int64_t off;             /* byte offset of the view into buf (signed: LuaJIT stores a number */
  int64_t nbytes;          /* into int64_t without breaking its traces, unlike uint64_t) */
  union { int32_t i32; uint32_t u32; int64_t i64; uint64_t u64; float f32; double f64; uint64_t bits; } v;
} gt_arg;

/* One __global__ function of a module, with its parsed signature. */
typedef struct gt_kernel {
  const char *name;
  int nparams;
  const uint8_t *ptype;        /* GT_P_* per parameter */
  const uint8_t *pdtype;       /* pointer parameters: element type GT_F32..., 0 = any */
  const uint8_t *order;        /* parameter indices: the ntensors pointer parameters, then the n4 4-byte scalars, then the rest */
  int ntensors, n4;
  const char *const *pname;    /* parameter names */
  const char *const *ptext;    /* declared types, e.g. "const float *" */
  int graphable;               /* 0: segments using it run eagerly (a skip) */
  int id;                      /* process-unique */
  gt_module *module;
  void *fn;                    /* backend function */
} gt_kernel;

/* A tensor: Lua's handle, a view (offset, shape, dtype) onto a buffer.  It
   is all a replayed op allocates (a fresh one per op: a recycled handle would
   make a user's stale reference live again).  Shapes and strides are
   interned on the Lua side (_sid, _vid); a handle of ordinary memory holds a
   reference on its buffer (gt_buf_retain / gt_buf_release), a handle of a
   tree call's buffer none (the tree's slab owns the struct). */
typedef struct gt_tensor {
  gt_buf *_b;
  double _off;             /* byte offset into the buffer */
  double _nb;              /* bytes of the elements (numel * dtype size) */
  int32_t _gen;            /* the buffer's generation when the view was made */
  int32_t _sid;            /* interned shape (signed, as the next two: LuaJIT reads */
  int32_t _dt;             /* dtype code (GT_F32 ...)   an int32_t as an integer, a */
  int32_t _vid;            /* 0: contiguous; else interned strides   uint32_t as a double) */
} gt_tensor;

typedef struct gt_tree_opts {
  const char *name;            /* for messages and pictures */
  const char *where;           /* "file:line" of the definition */
  int warmup;                  /* eager visits before recording (default 1) */
  int max_recordings;          /* graphs this tree may hold (default 64) */
  int on_limit_error;          /* 1: past the limit raise, 0: run eagerly, 2: run eagerly and evict (Lua trims before the next call) */
  uint64_t graph_memory;       /* bytes the tree's graphs may hold (0: no budget): past it the least recently visited are dropped */
  int graph_width;             /* a segment graph's launches that wait for nothing at most, the rest in lanes behind them (0: no bound) */
  gt_tree *pool;               /* share this tree's pool (its calls and this one's never overlap), or NULL: a pool of its own */
} gt_tree_opts;

typedef struct gt_tree_info {
  int calls, nodes, recorded, warmups, replays, eager, updates, skips;
  int limit_hit;               /* visits refused a recording by max_recordings */
  uint64_t reserved, in_use, high_water;   /* pool bytes */
  int depth;                   /* levels of the tree (deepest node's depth + 1) */
  int keyed_fused;             /* keyed hits that launched a path of several segments as one graph */
  int keyed_hits;              /* keyed calls that launched their path without the body */
  int path_fused;              /* calls that replayed a path of several segments and launched it as one graph */
  uint64_t graph_bytes;        /* device memory the tree's segment graphs hold (the sum of its nodes' graph_bytes) */
  uint64_t path_graph_bytes;   /* device memory its paths launched as one graph hold (copies of segment graphs; no budget counts them) */
  int graph_measured;          /* nodes holding a graph whose bytes were measured (the rest estimated) */
  int budget_drops;            /* graphs the graph-memory budget dropped */
  int reinstantiations;        /* graphs instantiated again after a budget dropped them */
} gt_tree_info;

typedef struct gt_node_info {
  int id, parent, depth, children, kernels;   /* parent: -1 for a first segment */
  int visits, warmups, recorded, replays, updates, eager;
  int records;                 /* record visits (a node records again after a trim) */
  const char *skip;            /* reason the node runs eagerly, or NULL */
  const char *label;
  double record_us, instantiate_us, replay_cpu_us, gpu_us;  /* replay_cpu_us: mean */
  uint64_t planned_bytes, checkpoint_bytes, key;
  uint64_t reusable_bytes;     /* peak bytes an ideal plan (each tensor freed after its last use) would save */
  uint64_t last_call;          /* call number of the last visit */
  int keyed;                   /* on a memoized path of keyed calls */
  const char *shapes;          /* "x 8x256 f32 -> 8x256 f32": a first segment's inputs -> the outputs (the call's results at a
                                  return; the last tensor made at a cut), or NULL */
  const char *cut;             /* where and why the segment ended first: "model.lua:31 item", "return", or NULL (every site: gt_tree_node_cut) */
  const char *why;             /* why the node exists: "first path", "new branch after [3]", ... */
  int shared, shared_with;     /* a new branch: the leading launches it has as sibling shared_with has them (the
                                  paths part after them: a host branch without gt.cut); 0 and -1: none */
  uint64_t graph_bytes;        /* device memory its graph's instantiation and upload took (0: no graph now) */
  int graph_measured;          /* 1: graph_bytes measured (cpu: exact); 0: estimated from its node count and width */
  int reinstantiations;        /* instantiations again after a graph-memory budget dropped its graph */
  int roots;                   /* its graph's launches that wait for nothing in the segment (its width) */
} gt_node_info;

/* One call of a tree, for charts over calls (the last GT_HISTORY calls). */
typedef struct gt_call_info {
  int call;                    /* 1-based call number */
  int warmups, records, replays, eager, updates;   /* visits of each kind in this call */
  double cpu_us;               /* host time from the call's start to its end */
  uint64_t in_use, reserved;   /* pool bytes at the end of the call */
} gt_call_info;

/* -- Runtime ------------------------------------------------------------ */
gt_runtime *gt_runtime_open(const char *backend); /* "cpu"|"cuda"|"auto"|NULL ($GTLUA_BACKEND); singleton; NULL on error (gt_errmsg(NULL)) */
const char *gt_errmsg(gt_runtime *rt);           /* the last failure's message */
const char *gt_backend_name(gt_runtime *rt);
int gt_device(gt_runtime *rt, gt_device_info *out);
int gt_sync(gt_runtime *rt);                     /* ends the segment in a tree call, then waits for the device */
int gt_profile(gt_runtime *rt, int on);          /* GPU time per node; returns the previous setting */
uint64_t gt_mem_in_use(gt_runtime *rt);          /* ordinary (non-tree) memory in use, bytes */
uint64_t gt_graph_mem(gt_runtime *rt);            /* device memory every tree's segment graphs hold, bytes (what gt_graph_mem_limit bounds) */
uint64_t gt_path_graph_mem(void);                 /* device memory every path launched as one graph holds, bytes */
/* The process-wide graph-memory budget (0: none); returns the one before.
   Past it the graphs of the tree called least recently go first. */
uint64_t gt_graph_mem_limit(gt_runtime *rt, uint64_t limit);
double gt_clock_us(void);                        /* a monotonic wall clock, microseconds */
const char *gt_take_warning(void);               /* a runtime warning not yet shown (e.g. the kernel cache refused), once; NULL when none */
int gt_compile_counts(gt_runtime *rt, int *compiles, int *cache_hits); /* cuda: NVRTC runs and CUBIN cache hits; GT_ERR elsewhere */
/* The host's transfers and waits since the runtime opened: device -> host
   reads (gt_buf_read: item, tolist, a host-decided p), host -> device writes
   (gt_buf_write: gt.from, copy from a table) and gt_sync calls.  A step the
   device decides adds none of them. */
typedef struct gt_transfers { uint64_t reads, writes, syncs; } gt_transfers;
void gt_transfer_counts(gt_runtime *rt, gt_transfers *out);

/* -- Buffers ------------------------------------------------------------ */
gt_buf *gt_buf_new(gt_runtime *rt, uint64_t bytes);  /* ordinary memory; refs = 1 (the caller's); NULL on error (out of memory) */
/* In a tree call: a buffer of the call (its address comes at the end of its
   segment).  The struct lives in the tree (reused by later calls; compare
   generations to tell stale views); its memory stays the call's until the
   call ends unless gt_buf_free releases it earlier. */
gt_buf *gt_tree_buf_new(gt_runtime *rt, uint64_t bytes);  /* its index in the call is ->ci; NULL on error */
gt_buf *gt_tree_buf_ptr(gt_tree *t, int i);              /* the struct of index i of the current (or last) call */
int32_t gt_tree_gen(gt_tree *t);                         /* the generation of the current (or last) call */
int gt_tree_nbufs(gt_tree *t);                          /* buffers the current (or last) call has made so far */
/* A gt.scope in the running call ends: the call's buffers first.. that it
   did not return (GT_BUF_KEEP, cleared here) and that are not yet released
   are released, naming site.  GT_ERR when out of host memory. */
int gt_tree_scope_end(gt_runtime *rt, int first, int site);
int32_t gt_tree_prev_gen(gt_tree *t);                    /* in a call: the previous call's generation */
void gt_buf_retain(gt_buf *b);                       /* one more Lua handle (a view) holds b */
void gt_buf_release(gt_buf *b);                      /* a Lua handle of b was collected: drop its reference */
/* Release b now (gt.scope, t:free()): every view of it is stale from here on.
   In a tree call the release takes effect in queue order: launches queued
   before it still use the memory, only later ones may reuse it.  Ordinary
   memory goes back to the allocator once no queued launch holds it.
   GT_ERR if b is already released. */
int gt_buf_free(gt_runtime *rt, gt_buf *b);
int gt_buf_write(gt_runtime *rt, gt_buf *b, uint64_t off, const void *src, uint64_t bytes); /* host -> device; a sync point */
int gt_buf_read(gt_runtime *rt, gt_buf *b, uint64_t off, void *dst, uint64_t bytes);        /* device -> host; a sync point */
int gt_buf_copy(gt_runtime *rt, gt_buf *dst, uint64_t doff, gt_buf *src, uint64_t soff, uint64_t bytes); /* queued in a tree call */
int gt_buf_memset(gt_runtime *rt, gt_buf *dst, uint64_t off, int value, uint64_t bytes);                /* queued in a tree call */

/* -- Kernels ------------------------------------------------------------ */
gt_module *gt_compile(gt_runtime *rt, const char *src, const char *opts, const char *chunkname, int graphable); /* NULL on error */
int gt_module_count(gt_module *m);
gt_kernel *gt_module_kernel(gt_module *m, int i);
int gt_launch(gt_runtime *rt, gt_kernel *k, unsigned gx, unsigned gy, unsigned gz,
              unsigned bx, unsigned by, unsigned bz, unsigned smem, gt_arg *args); /* args: k->nparams of them */
/* A launch configuration checked once: a bound launcher's kernel, grid, block
   and shared memory (K.name:config in Lua). */
typedef struct gt_launchcfg { gt_kernel *k; unsigned grid[3], block[3], smem; int32_t id; } gt_launchcfg;   /* (id signed: LuaJIT compares it as an integer) */
int gt_launch_config(gt_runtime *rt, gt_kernel *k, unsigned gx, unsigned gy, unsigned gz,
                     unsigned bx, unsigned by, unsigned bz, unsigned smem, gt_launchcfg *out);
/* gt_launch with a checked configuration, what Lua's generated launchers
   call: tensors[i] is tensor parameter i's handle (checked here: live,
   contiguous, of the parameter's dtype), args[i] scalar parameter i (buf
   NULL; i32, u32 and f32 in their low 4 bytes, the others in all 8); other
   entries are not read.  In a tree call this only queues the launch, and
   an output parameter's handle may come without a buffer (_b NULL, _nb its
   bytes): the call's buffer is made for it here (gt.ops.linear).  0,
   GT_ERR with the message set, or i + 1 when tensor parameter i fails its
   check (no message: the caller says what is wrong with its argument). */
int gt_launch_tensors(gt_runtime *rt, const gt_launchcfg *c, const gt_tensor *const *tensors, const gt_arg *args);
/* gt_launch_tensors for gt.ops's lean launchers (Kernel:_lean): a kernel
   of one to four tensor parameters, passed by value in parameter order as
   buffer, byte offset, bytes and generation (a NULL buffer: an output the
   tree call makes, of those bytes); the caller has checked their dtypes and
   contiguity.  By value, not as handles: a handle passed to C must exist in
   memory, one built from the answer may stay in LuaJIT's registers (an op's
   result consumed by the next op allocates nothing).  Returns the buffer
   made for the output (none made: the first tensor's), or NULL with
   gt_launch_tensors's answer in gt_lean_status. */
gt_buf *gt_launch_lean(gt_runtime *rt, const gt_launchcfg *c, const gt_arg *args,
                       gt_buf *b1, double o1, double n1, int32_t g1, gt_buf *b2, double o2, double n2, int32_t g2,
                       gt_buf *b3, double o3, double n3, int32_t g3, gt_buf *b4, double o4, double n4, int32_t g4);
int gt_lean_status(gt_runtime *rt);


/* -- Trees -------------------------------------------------------------- */
gt_tree *gt_tree_new(gt_runtime *rt, const gt_tree_opts *opts);
void gt_tree_free(gt_tree *t);
const char *gt_tree_name(gt_tree *t);
const char *gt_tree_where(gt_tree *t);
gt_tree *gt_tree_active(gt_runtime *rt);          /* the tree whose call is running, or NULL */
/* Start a call: a new generation.  eager (a skip reason, or NULL): every
   segment of this call runs eagerly without nodes (a call beyond the last
   bucket), counted in eager and under that reason in the skips. */
int gt_tree_begin(gt_runtime *rt, gt_tree *t, const char *eager);
/* What ended a segment (a node counts its visits per cut site): a host read
   by item, by tolist, another host read or copy, gt.sync, gt.cut, the return. */
enum { GT_CUT_OTHER = 0, GT_CUT_ITEM, GT_CUT_TOLIST, GT_CUT_HOST, GT_CUT_SYNC, GT_CUT_CUT, GT_CUT_RETURN };
int gt_tree_flush(gt_runtime *rt, int cut);       /* end the segment (cut: GT_CUT_*): warm up, record, replay or run it */
int gt_tree_end(gt_runtime *rt);                  /* end the call (flushes) */
/* gt_tree_begin returning the call's generation (0: it failed, the message set). */
int32_t gt_tree_call(gt_runtime *rt, gt_tree *t, const char *eager);
/* The body returned: flush its last segment and end the call, in one call.
   nwarn: the warnings the caller has seen.  GT_RET_ENDED; GT_RET_WARNED:
   ended with new warnings; GT_RET_EXPLAIN | gt_tree_explain_wanted's bits:
   flushed, not ended (a node's first visit: explain it, then gt_tree_end);
   GT_ERR: the flush failed (the call is still open: abort it).  Plus
   GT_RET_JIT_FLUSH (not with GT_ERR): the call replayed through the lane
   (gt_lane) after one that did not, so LuaJIT's traces formed on the
   recording's path: flush them (jit.flush()); at most GT_JIT_FLUSHES times
   a tree. */
enum { GT_RET_ENDED = 0, GT_RET_WARNED = 1, GT_RET_EXPLAIN = 8, GT_RET_JIT_FLUSH = 16 };
int gt_tree_return(gt_runtime *rt, int nwarn);
void gt_tree_abort(gt_runtime *rt);               /* a Lua error: drop the queued segment, end the call */
void gt_tree_abort_run(gt_runtime *rt);           /* a Lua error in the body: the queued launches run eagerly, then abort */
/* Copy an input into the tree's staging slot: `outer` chunks of chunk bytes
   (src stride chunk) into chunks of padded bytes, zero-filling the rest; *out
   is a new buffer over the slot, valid for this call. */
int gt_tree_stage(gt_runtime *rt, int slot, gt_buf *src, uint64_t off, uint64_t outer, uint64_t chunk, uint64_t padded, gt_buf **out);
/* The same, the rest filled with the esz-byte element at fill (NULL: zeros). */
int gt_tree_stage_pad(gt_runtime *rt, int slot, gt_buf *src, uint64_t off, uint64_t outer, uint64_t chunk, uint64_t padded,
                      const void *fill, int esz, gt_buf **out);
/* An input of the call that lives in a staging slot (a previous call's staged
   tensor fed back): no input of this call is staged over it. */
void gt_tree_stage_pin(gt_runtime *rt, gt_buf *b);
/* Outside tree calls: the first `chunk` bytes of each of `outer` chunks of
   `padded` bytes of staged buffer src from src_off copied back to dst at off
   (stride chunk), after the work already submitted: gt_tree_stage undone. */
int gt_unstage(gt_runtime *rt, const gt_buf *src, uint64_t src_off, gt_buf *dst, uint64_t off, uint64_t outer,
               uint64_t chunk, uint64_t padded);
void gt_tree_note_skip(gt_tree *t, const char *reason);
int32_t gt_tree_failed_gen(gt_tree *t);             /* generation of the last call that failed */
int32_t gt_tree_trimmed_gen(gt_tree *t);            /* generation of the last call whose outputs a trim invalidated */
/* The tree sharing t's pool whose call overwrote the outputs of t's call of generation gen, or NULL. */
gt_tree *gt_tree_overwriter(gt_tree *t, int32_t gen);
int gt_tree_trim(gt_runtime *rt, gt_tree *t, int keep);   /* drop graphs beyond the keep most recently used; returns dropped */
int gt_tree_stats(gt_tree *t, gt_tree_info *out);
int gt_tree_limit_hits(const gt_tree *t);            /* visits refused a recording by max_recordings so far (on_limit = "evict" reads it after each call) */
int gt_tree_node(gt_tree *t, int id, gt_node_info *out); /* id 0..nodes-1 */
int gt_tree_child(gt_tree *t, int id, int k);             /* k-th child of node id (-1: roots); -1 if none */
/* The i-th distinct site node id's segment ended at ("model.lua:31 item",
   "gt.cut at model.lua:12", "return"; past 8 of them one "other
   sites" entry) and the visits that ended there; GT_ERR past the end. */
int gt_tree_node_cut(gt_tree *t, int id, int i, const char **site, int *count);
int gt_tree_skip_reason(gt_tree *t, int i, const char **reason, int *count); /* i-th skip reason; GT_ERR past the end */
int gt_tree_history(gt_tree *t, int i, gt_call_info *out); /* i-th of the remembered calls, oldest first; GT_ERR past the end */
int gt_tree_warnings(gt_tree *t, const char **last);     /* warnings so far, the last one's text */
/* Explaining nodes: after gt_tree_flush, what the visited node still lacks
   (GT_WANT_CUT: its cut site, on a first visit and whenever the visit's site
   is not known to the node yet; GT_WANT_SHAPES: its shapes; GT_WANT_FIRST is
   added for a first segment; 0 outside a call or when nothing was visited);
   gt_tree_note fills them (NULL leaves one as it is; a cut site counts the
   visit at that site). */
enum { GT_WANT_CUT = 1, GT_WANT_SHAPES = 2, GT_WANT_FIRST = 4 };
int gt_tree_explain_wanted(gt_runtime *rt);
void gt_tree_note(gt_runtime *rt, const char *cut, const char *shapes);
/* The floor: the last call's graphs launched back to back from C, no tree
   logic (patch: each step first repeats the kernel-node patches that call
   made).  With paths marked (gt_tree_floor_mark: the last call's path, its
   patches and their values), the marked paths instead, one a step, in
   turn.  Medians in µs; returns the patches a step repeats (the most of
   any path), or GT_ERR. */
int gt_tree_bench_floor(gt_runtime *rt, gt_tree *t, int iters, int sync_each, int patch, double *cpu_us, double *step_us);
int gt_tree_floor_mark(gt_runtime *rt, gt_tree *t);   /* the marks so far, or GT_ERR */
void gt_tree_floor_clear(gt_tree *t);

/* -- Keyed calls -------------------------------------------------------- */
/* A `patch` number as the body sees it on a call that memoizes a path: its
   value v and e, its expression's index in the call's trace; call: the
   trace it belongs to (lua/gt/trace.lua). */
typedef struct gt_traced { double v; int32_t e, call; } gt_traced;
/* One step of a trace: GT_TX_ARG (argument a, 0-based, as a number),
   GT_TX_CONST (c), or an operation on earlier steps a (and b), as Lua
   computes it on numbers (a comparison: 1 or 0). */
enum { GT_TX_ARG = 0, GT_TX_CONST, GT_TX_ADD, GT_TX_SUB, GT_TX_MUL, GT_TX_DIV, GT_TX_MOD, GT_TX_POW, GT_TX_UNM,
       GT_TX_FLOOR, GT_TX_CEIL, GT_TX_ABS, GT_TX_SQRT, GT_TX_LT, GT_TX_LE, GT_TX_EQ };
typedef struct gt_texpr { int32_t op, a, b; double c; } gt_texpr;
/* A kernel scalar that a traced number reached: parameter param of launch
   launch of segment seg of the call, step expr of the trace.  seg -1: a
   guard instead, a comparison the body made (step expr, GT_TX_LT/LE/EQ,
   gave param, 0 or 1): a hit whose numbers give the other answer runs the
   body. */
typedef struct gt_tslot { int32_t seg, launch, param, expr; } gt_tslot;
/* Where the next launch of the active call goes: its index in the segment
   being queued, the segment's ordinal in the call in *seg (-1: no call). */
int gt_tree_next_launch(gt_runtime *rt, int32_t *seg);
/* Memoizes the path of the tree's last call (every segment replayed) for
   keyed calls.  ins: the call's arguments by position (a tensor: buf and
   off; a number: v.f64); kinds[i]: GT_KIN_TENSOR, a tensor whose address is
   patched; GT_KIN_PATCH, a `patch` number; GT_KIN_OTHER, neither.  outs: buffer indices within the call
   (gt_buf.ci) of the tensors it returned.  ex, nex and sl, nsl: the call's
   trace (its steps, and the kernel scalars its numbers reached): a hit
   evaluates each step with its own numbers and patches those scalars; every
   other scalar is the path's.  NULL when the path cannot be keyed, the
   reason in gt_errmsg. */
enum { GT_KIN_OTHER = 0, GT_KIN_TENSOR = 1, GT_KIN_PATCH = 2 };
gt_keyed *gt_tree_keyed_save(gt_runtime *rt, gt_tree *t, const gt_arg *ins, const uint8_t *kinds, int nin,
                             const int *outs, int nout, const gt_texpr *ex, int nex, const gt_tslot *sl, int nsl);
/* A memoized path no key replays any more (another saved for its key): freed. */
void gt_tree_keyed_drop(gt_keyed *k);
/* Whether every segment of the tree's last call holds a graph (replayed or
   recorded): the next call of its key can be traced and memoized. */
int gt_tree_keyed_ready(gt_tree *t);
/* In a call begun with gt_tree_begin (inputs staged): patch the memoized
   path's inputs and scalars from ins, launch its graphs, make the output
   buffers of the call (to outb, when not NULL), end the call.  GT_KEYED_BODY:
   the path is gone (a trim), a static buffer it reads was freed, a patched
   scalar is not what its parameter takes (the body raises eager's error), or
   it needs more than a patch: run the body in the same call instead.  GT_ERR
   on failure. */
enum { GT_KEYED_HIT = 0, GT_KEYED_BODY = 1 };
int gt_tree_keyed_run(gt_runtime *rt, gt_keyed *k, const gt_arg *ins, gt_buf **outb);
/* A keyed call whose inputs need no staging, in one call: begins the tree's
   call, then as gt_tree_keyed_run.  outb (k's output count, the order of
   gt_tree_keyed_save's outs) receives the output buffers of a replay.
   GT_KEYED_BODY: the call has begun and its body must run; GT_ERR: nothing
   is left begun. */
int gt_tree_keyed_call(gt_runtime *rt, gt_keyed *k, const gt_arg *ins, gt_buf **outb);
/* After a body run of k's key (verify): GT_OK when what the body launched
   is what k replays with ins (the same launches, each argument's role, k's
   values and ins's patches), segment by segment, whichever nodes hold them;
   GT_KEYED_ANEW when it is, on other nodes than k's (the runtime keyed it
   anew: save the path again); GT_ERR naming the first segment, launch and
   argument that differ. */
enum { GT_KEYED_ANEW = 1 };
int gt_tree_keyed_check(gt_runtime *rt, gt_keyed *k, const gt_arg *ins);
/* The active traced call (gt_tree_dry: nothing of it ran on the device) is
   dropped, as if never made: the last call's buffers as gt_tree_keep_last
   kept them, the call not counted.  1 when so, 0 when the call is not
   traced or nothing was kept for it (abort it as usual). */
int gt_tree_discard(gt_runtime *rt);
/* Before a traced call (begun or about to begin): keeps the last call's
   buffer structs, which a dropped call gives back (gt_tree_discard). */
int gt_tree_keep_last(gt_tree *t);
/* A traced call (on: from now until off): it runs nothing on the device; a
   segment that would not replay, or a host read, fails it. */
void gt_tree_dry(gt_tree *t, int on);
/* The traced call's body returned: its last segment flushed, its path and
   the values its graphs would launch kept, the call dropped (as
   gt_tree_discard). */
int gt_tree_dry_end(gt_runtime *rt);
/* 1 when the tree's last call took the kept traced call's path with the same
   values in every launch (the trace followed what decides them). */
int gt_tree_dry_same(gt_tree *t);
/* A traced call's argument b as its body gets it: a struct of its own over
   b's memory (the same struct for the same b within the call), so that the
   path tells the launches that reach a tensor through the call's argument
   from those that reach its memory another way (a captured tensor); NULL
   when t's call is not traced (said) or out of host memory. */
gt_buf *gt_tree_dry_arg(gt_tree *t, gt_buf *b);

/* -- Device-side branches (cond.c) --------------------------------------- */
/* Entries of the launch queue that give it structure: IF p {then} [ELSE
   {else}] END, WHILE p {body} END.  p: a one-element tensor view (f32, i32,
   i64 or u8; nonzero is true). */
enum { GT_COND_IF = 4, GT_COND_ELSE = 5, GT_COND_WHILE = 6, GT_COND_END = 7 };
enum { GT_COND_NODES = 1, GT_COND_ELSE_NODES = 2 };
/* What the backend builds: GT_COND_NODES | GT_COND_ELSE_NODES, or 0 (why in gt_errmsg). */
int gt_cond_support(gt_runtime *rt);
/* In a tree call: queues one structure entry (what: GT_COND_*; p, off, dtype:
   the condition for IF, WHILE and a WHILE's END, else NULL; max: a WHILE's
   iteration bound, 0 = none).  Returns the entry's queue position, GT_ERR on failure. */
int gt_cond_mark(gt_runtime *rt, int what, gt_buf *p, int64_t off, int dtype, uint64_t max, int site);
/* A body raised: queues the END of every structure still open from position at
   (gt_cond_mark's result for its IF or WHILE), innermost first; an open WHILE
   runs its body at most once.  Nothing open (or no call): nothing done. */
int gt_cond_close(gt_runtime *rt, int at);
/* A gt.cond/gt.loop call's place ("gt.cond at model.lua:12") for messages: its id (>= 1) for gt_cond_mark, or GT_ERR. */
int gt_cond_site(gt_runtime *rt, const char *where);
/* 1 when a launch queued at or after position from writes bytes [off, off+nbytes) of p, else 0. */
int gt_cond_writes(gt_runtime *rt, int from, gt_buf *p, int64_t off, int64_t nbytes);
/* Outside tree calls: watch slot (0..15) follows eager writes to p's bytes
   [off, off+nbytes) (p NULL: stops); returns whether the slot saw one since
   it was last set. */
int gt_cond_watch(gt_runtime *rt, int slot, gt_buf *p, int64_t off, int64_t nbytes);

/* -- Element types and files on the host (half.c, mapfile.c) ------------ */
/* Bytes per element of a dtype (GT_F32 ...), 0 for an unknown one. */
int gt_dtype_size(int dt);
/* Converts n elements of dtype sdt at src into dtype ddt at dst (host memory;
   f32, f64, f16, bf16, i32, i64, u8).  Floats to f16/bf16 round to nearest
   even (half.h), to integers truncate and saturate.  GT_ERR for an unknown dtype. */
int gt_convert(void *dst, int ddt, const void *src, int sdt, size_t n);
uint16_t gt_half_bits(float f, int dt);     /* f as f16 or bf16 (dt) bits, rounded to nearest even */
float gt_half_value(uint16_t h, int dt);    /* the f16 or bf16 (dt) bits h as a float, exactly */

/* A file mapped read-only into memory. */
typedef struct gt_mapped { const uint8_t *data; uint64_t size; } gt_mapped;
/* Maps path whole (an empty file: data NULL, size 0).  GT_ERR with the reason
   (strerror) in err (256 bytes).  gt_unmap undoes it. */
int gt_map_file(const char *path, gt_mapped *out, char *err);
void gt_unmap(gt_mapped *m);

/* -- gt.dist: several processes, one a GPU ----------------------------------- */
/* Joins the group of world ranks as rank (id: a name every rank gives alike;
   timeout: seconds a collective waits for a missing rank).  Again with the
   same rank and world: nothing.  GT_ERR with the message (the backend's). */
int gt_dist_init(gt_runtime *rt, int rank, int world, const char *id, double timeout);
int gt_dist_rank(gt_runtime *rt);                 /* -1 before init */
int gt_dist_world(gt_runtime *rt);                /* 0 before init */
/* Collective kind (GT_COLL_*; op GT_RED_*, root for broadcast) of dtype from
   src's bytes [soff, soff+sbytes) into dst's [doff, doff+dbytes) (all-reduce
   and broadcast: the same view, in place).  Outside a tree call it runs now;
   in one it is queued and becomes a node of the segment's graph. */
int gt_dist_coll(gt_runtime *rt, int kind, int op, int root, int dtype, gt_buf *dst, uint64_t doff, uint64_t dbytes,
                 gt_buf *src, uint64_t soff, uint64_t sbytes);
int gt_dist_barrier(gt_runtime *rt);              /* every rank arrives (outside tree calls) */

/* -- Host --------------------------------------------------------------- */
const char *gt_header_text(void);                 /* this file and gt_internal.h, for ffi.cdef */
#endif
