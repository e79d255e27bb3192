/* core.h - private declarations shared by the core's files (never included by Lua). */
#ifndef GT_CORE_H
#define GT_CORE_H
#include <stdarg.h>
#include <stdbool.h>
#include "gt.h"
#include "backend.h"

#define GT_ALIGN 256u
#define GT_SLAB (1 << GT_SLAB_BITS)
#define GT_HISTORY 1024
#define GT_JIT_FLUSHES 8       /* a tree's JIT flushes at most (gt_tree_return) */
#define GT_MAX_PARAMS 64      /* a kernel's parameters at most (kernel.c refuses more) */

/* -- Pool (pool.c): reserved address ranges, grown by committing ---------- */
typedef struct gt_block { uint64_t off, size; gt_buf *buf; } gt_block;
typedef struct gt_range {
  uint64_t addr, size;
  uint64_t committed;        /* bytes committed from addr */
  uint64_t high;             /* the highest end of a block ever placed, from addr */
} gt_range;

/* A block at offset off lives at address base + off.  A fixed pool
   (gt_pool_init, ordinary memory) is one range reserved at once, base its
   address.  A growing pool (gt_pool_init_growing, a tree's) reserves nothing
   until its first allocation, then adds ranges, each at least as large as all
   before it; ranges never move and are released only by gt_pool_destroy, so
   an offset (there base is 0 and an offset is an address) stays valid for
   every graph that holds it.  A block never straddles two ranges. */
typedef struct gt_pool {
  gt_backend *be;
  uint64_t base;             /* fixed: the range's address; growing: 0 */
  gt_block *blk;             /* live blocks, sorted by offset (n: every call clears them, next to base: every hit reads it) */
  int n, cap;
  uint64_t reserve;          /* bytes reserved, all ranges */
  uint64_t committed;        /* bytes committed, all ranges */
  uint64_t high_water;       /* the ranges' highs added up (one range: the largest end ever used) */
  uint64_t first;            /* growing: the first range's size */
  int growing;               /* 0: fixed; 1: growing; 2: growing, first set by the user (not retried smaller) */
  gt_range *rng;             /* sorted by address */
  int nrng;
} gt_pool;

/* Bumped whenever a pool gives memory back (a shrink that decommits, a
   destroy): memory a graph held an address in may be unmapped since. */
extern uint64_t gt_pool_epoch;
/* 1 when memory given back after epoch since held addr (or may have: the log reaches back 64 releases). */
int gt_pool_released_since(uint64_t since, uint64_t addr);
/* A fixed pool: reserve bytes of addresses now.  On failure err says why. */
int gt_pool_init(gt_pool *p, gt_backend *be, uint64_t reserve, char *err);
/* A growing pool: nothing reserved yet.  first_gib: the first range's size
   (GTLUA_POOL_RESERVE: GiB, or with a K/M/G suffix; NULL or empty: 64 MiB, less
   under a small `ulimit -v`, retried with just the request when it cannot be
   reserved).  GT_ERR with err set when first_gib is not a size. */
int gt_pool_init_growing(gt_pool *p, gt_backend *be, const char *first_gib, char *err);
/* Decommits and releases every range. */
void gt_pool_destroy(gt_pool *p);
uint64_t gt_pool_in_use(const gt_pool *p);
/* Best-fit allocation of size bytes for buf; *off on success.  A growing pool
   adds a range when nothing fits; on failure err names the request, the
   pool's size, its largest free block and the variables that size it. */
int gt_pool_alloc(gt_pool *p, uint64_t size, gt_buf *buf, uint64_t *off, char *err);
void gt_pool_free(gt_pool *p, uint64_t off);
void gt_pool_clear(gt_pool *p);
/* Fixed pool: make sure [0, end) is committed. */
int gt_pool_ensure(gt_pool *p, uint64_t end, char *err);
/* Give back committed memory at offsets from keep_end up (rounded up to
   granularity); the ranges stay reserved. */
void gt_pool_shrink(gt_pool *p, uint64_t keep_end);
/* Plan: given the current live blocks and n intervals [first, end) in queue
   positions (end = UINT32_MAX: alive at the end), assign offsets by best fit,
   reusing a planned block for tensors made at or after its end.  old: live
   blocks (at off) released at position end; their memory is reused likewise.
   On return the pool holds the live blocks not in old plus the planned blocks
   still alive at the end. */
typedef struct gt_interval { uint64_t size; uint32_t first, end; gt_buf *buf; uint64_t off; } gt_interval;
int gt_pool_plan(gt_pool *p, gt_interval *iv, int n, const gt_interval *old, int nold, char *err);

/* -- Queue (queue.c): the launches of the segment being built ------------- */
typedef struct gt_qlaunch {
  int kind;                  /* GT_GN_KERNEL / GT_GN_MEMCPY / GT_GN_MEMSET */
  uint32_t cfg;              /* the launch configuration's id (0: none): equal ids, equal kernel and dims */
  gt_kernel *k;
  unsigned grid[3], block[3], smem;
  int arg0, nargs;           /* slice of queue.args */
  uint64_t bytes;            /* memcpy/memset */
  int value;                 /* memset */
  int made;                  /* kernels: the tensor (1.., in parameter order) whose buffer the launch made; 0: none */
} gt_qlaunch;

typedef struct gt_queue {
  gt_qlaunch *l; int n, cap;
  gt_arg *args; int nargs, argcap;
  uint64_t *vals; int valcap;     /* resolved argument values (scratch) */
  void **ptrs; int ptrcap;
} gt_queue;

int gt_queue_push(gt_queue *q, const gt_qlaunch *l, const gt_arg *args);
/* Room for one more launch of nargs arguments at the queue's end: its entry,
   and in *args where its arguments go; gt_queue_commit appends it once
   filled in.  NULL when host memory runs out.  (Inline: every replayed op
   queues through these.) */
static inline gt_qlaunch *gt_queue_reserve(gt_queue *q, int nargs, gt_arg **args) {
  if (GT_GROW(q->l, q->cap, q->n + 1) || GT_GROW(q->args, q->argcap, q->nargs + nargs)) return NULL;
  *args = q->args + q->nargs;
  return &q->l[q->n];
}

static inline void gt_queue_commit(gt_queue *q, gt_qlaunch *d) {
  d->arg0 = q->nargs;
  q->nargs += d->nargs;
  q->n++;
}
void gt_queue_clear(gt_queue *q);
void gt_queue_free(gt_queue *q);
/* Launch i's arguments as values (addresses, scalar bits) into vals. */
void gt_queue_resolve(const gt_queue *q, int i, uint64_t *vals);
/* A backend node for launch l whose argument values are vals (ptrs: scratch
   of nargs, kept alive by the caller while the node is used). */
void gt_launch_gnode(const gt_qlaunch *l, uint64_t *vals, void **ptrs, gt_gnode *out);
/* Run launch i now; backend status. */
int gt_queue_run(gt_backend *be, gt_queue *q, int i);
/* A launch from the API: queued in a tree call (and pushed past the replay
   cursor), else run now (watched writes noted).  args: l->nargs, copied. */
int gt_submit(gt_runtime *rt, const gt_qlaunch *l, gt_arg *args);
/* Whether launch l writes its argument j (`T *` of a kernel, a copy's or fill's destination; cond entries read p). */
static inline int gt_launch_writes(const gt_qlaunch *l, int j) {
  return l->kind == GT_GN_KERNEL ? l->k->ptype[j] == GT_P_OUT : (l->kind == GT_GN_MEMCPY || l->kind == GT_GN_MEMSET) && j == 0;
}
static inline int gt_kind_is_begin(int kind) { return kind == GT_GN_IF || kind == GT_GN_WHILE; }
static inline int gt_kind_is_cond(int kind) { return kind >= GT_GN_IF && kind <= GT_GN_END; }
/* A launch as messages name it: its kernel, or what it is. */
static inline const char *gt_launch_what(const gt_qlaunch *l) {
  return l->kind == GT_GN_KERNEL ? l->k->name : l->kind == GT_GN_MEMCPY ? "copy" : l->kind == GT_GN_MEMSET ? "fill" : "gt.cond";
}
/* cond.c: GT_ERR (the message naming the gt.cond or gt.loop and the launch)
   when a launch of t's queue reads a tensor made in a device-side body where
   that body's writes may not have happened: after a gt.loop, in the other
   body, or after a gt.cond whose other body does not write it. */
int gt_cond_check(struct gt_tree *t);

void gt_tree_dry_release(gt_tree *t);   /* stage.c: a traced call's staged memory freed */
int gt_tree_dry_note(gt_tree *t);       /* stage.c: which of the segment's arguments a traced call reached through its arguments */
/* Marks the buffers that the queued launches write into as written by t's
   call (gt_buf.wgen; stage.c). */
void gt_queue_note_writes(gt_tree *t);

/* -- Dependencies (deps.c) ------------------------------------------------ */
/* The edges of the queue's launches as graph nodes g (vals: the resolved
   argument values, q->nargs of them): g[i].ndeps and g[i].deps, pointing
   into *deps (the caller frees it).  A body of a cond waits on nothing
   outside it: its IF/WHILE does.  GT_ERR when out of host memory (g's deps
   then unset, nothing to free). */
int gt_deps_build(const gt_queue *q, const uint64_t *vals, gt_gnode *g, int **deps);

/* Segment keys: a hash over everything a graph bakes in; scalars excluded. */
typedef struct gt_segkey { uint64_t full, nostatic; } gt_segkey;   /* nostatic: the topology (no static addresses, no grids) */

/* -- Runtime (runtime.c) ------------------------------------------------- */
typedef struct gt_later { gt_buf **b; int n, cap; } gt_later;
struct gt_runtime {
  gt_backend be;
  char err[GT_ERRLEN];
  gt_pool mem;               /* ordinary memory: its address range (blocks are not tracked there) */
  struct gt_freelist *fl;    /* ordinary memory: cached free blocks by size class */
  int nfl, flcap;
  uint64_t mem_top, mem_live;  /* bump pointer and bytes handed out */
  struct gt_tree *active;    /* the tree whose call runs */
  int profile;
  int next_kernel_id;
  int32_t zero_gen;          /* generation of ordinary buffers: never changes */
  gt_later later[2];         /* during a tree call: buffers released [0] and handles collected [1] */
  gt_buf **spare; int nspare, sparecap;   /* slab chunks of destroyed trees, for the next tree */
  int cond_bits;             /* cond.c: backend's conditional nodes + 1 (0: not asked yet) */
  uint64_t watch_lo[16], watch_hi[16];  /* cond.c: eager writes into [lo, hi) are noted (hi = 0: none) */
  int watch_hit[16], watching;          /* watching: slots in use */
  int lean_status;           /* gt_launch_lean's last failure: gt_launch_tensors's answer */
  gt_transfers xfer;         /* reads, writes and syncs asked for (gt_transfer_counts) */
  gt_lane lane;              /* predict.c: the replay lane of the active call */
  struct gt_tree **tlater; int ntlater, tlatercap;   /* tree.c: other trees whose memory waits for the active call's queue (gt_tree.deferred) */
  int (*launch_pending)(struct gt_tree *t);  /* tree.c's gt_tree_launch_pending, set by gt_tree_new (gt_pending:
                                                runtime.c's syncs and host copies do not call up into tree.c) */
};
int gt_fail(gt_runtime *rt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int gt_fail_be(gt_runtime *rt, const char *what); /* copy the backend's message */
void gt_buf_retain(gt_buf *b);
void gt_buf_unref(gt_buf *b);                      /* the core's reference */
extern const int32_t gt_released_gen;              /* what a released buffer's gen_now points at */
extern uint64_t gt_static_frees;                   /* static buffers' structs freed so far */
/* 1 when a static buffer freed after the first `since` of them lay in [addr, addr+bytes) (or may have: the log reaches back 256 frees). */
int gt_static_freed_since(uint64_t since, uint64_t addr, uint64_t bytes);
int32_t gt_gen_next(void);                         /* a new generation, unique in the process (until 2^32 calls) */
void gt_buf_settle(gt_runtime *rt);                /* what gt_buf_release/gt_buf_free deferred in a tree call */
void gt_buf_return(gt_runtime *rt, gt_buf *b);     /* b's ordinary memory back to the allocator (after the queue, in a call) */
int gt_buf_check(gt_runtime *rt, gt_buf *b, uint64_t off, uint64_t bytes, const char *what);  /* [off, off+bytes) lies in b's memory */
void gt_tree_unref(gt_tree *t);                    /* a buffer no longer points at t: the struct goes with the last */

/* -- Trees (tree.c) ------------------------------------------------------ */
/* Visits of a segment: what gt_tree_flush chooses, and what ran.  PLANNED: a
   skipped node run eagerly on planned memory (its children may record);
   LIMIT: past max_recordings (an error, or an eager run). */
enum { GT_V_NONE = 0, GT_V_WARMUP, GT_V_RECORD, GT_V_REPLAY, GT_V_EAGER, GT_V_UPDATE, GT_V_PLANNED, GT_V_LIMIT };


typedef struct gt_ckpt { int32_t seg, idx; uint64_t off, size; } gt_ckpt;
/* What the key sees of one argument (role 0: a scalar), and of one release. */
enum { GT_ROLE_INTERNAL = 1, GT_ROLE_PATH, GT_ROLE_STATIC, GT_ROLE_EXTERNAL };
/* One tensor argument as a key sees it; buf: the struct it was (the cursor's
   shortcut for the call's own buffers and static ones, see key.c). */
typedef struct gt_asig { uint64_t id; int64_t off, nbytes; int role, write; const gt_buf *buf; } gt_asig;
typedef struct gt_rsig { uint32_t rel; int32_t seg, idx; } gt_rsig;
typedef struct gt_skip { char *reason; int count; } gt_skip;

/* A path of segments kept as one graph (keyed.c: keyed hits, tree.c's
   deferred launches): built once GT_PATHG_AFTER launches of the path segment
   by segment found its graphs unchanged (gt_node.gver), at most
   GT_PATHG_BUILDS times; it holds what the path's graphs held then, so it
   is launched only while they still do (gt_pathg_ok). */
typedef struct gt_pathg {
  gt_bgraph *g;                      /* the one graph, or NULL */
  uint32_t *ver; int n;              /* the path's gver at its last launch segment by segment (or at the build) */
  int same, builds;                  /* such launches in a row with those versions; graphs built */
} gt_pathg;
enum { GT_PATHG_AFTER = 8, GT_PATHG_BUILDS = 4 };

/* One site a node's segment ended at: its text as node.cut's ("model.lua:31
   item"), its API (GT_CUT_*), its visits (explain.c). */
typedef struct gt_cutsite { char *text; int api, count; } gt_cutsite;
enum { GT_CUT_SITES = 8 };

typedef struct gt_node {
  /* -- What a replay or a keyed hit reads or writes, together (see gt_tree) */
  gt_bgraph *graph;
  uint32_t gver;                     /* bumped whenever graph changes (made, patched, updated, dropped): keyed.c's fused graphs */
  int nnew;                          /* buffers made in the segment */
  uint64_t key;
  uint64_t *plan;                    /* offsets of the segment's new buffers */
  uint64_t *argvals; int nargvals;   /* argument values the graph holds now */
  int visits, replays;
  int cut_fast, cut_nlast;           /* explain.c: the API (GT_CUT_*) a replay counts at cuts[cut_last] without asking Lua (-1: none), and visits counted so (not yet in its count) */
  uint64_t last_call;
  uint64_t checkpoint_bytes;         /* pool bytes in use after the segment (every call's history reads its last node's) */
  uint64_t sfrees;                   /* gt_static_frees when asig was saved */
  int gpu_n;
  int gev_pending;                   /* the events of a sampled launch (gev) wait to be read */
  /* key.c: the recording as the cursor compares it (nsig launches, 0: none) */
  struct gt_node *last_kid;          /* the child visited last */
  struct gt_node *after;             /* the sibling visited after this node last time (the cursor predicts it) */
  gt_asig *asig; uint64_t *bsig; gt_rsig *rsig; int nsig, nbsig, nrsig;
  gt_lrec *lrec;                     /* lane.c: the recording as the replay lane tests it (made on first use) */
  int lane_ext;                      /* lane.c: 1 + the last of lrec's launches with an external input (0: none) */
  gt_arg *qargs;                     /* the recorded launches' arguments as queued (what the lane's sync copies) */
  struct gt_node *parent;            /* the tree's root sentinel for a first segment */
  int id, depth;
  int nlaunch;                       /* launches */
  int keyed;                         /* on a path that keyed calls replay */
  gt_qlaunch *launches;              /* the recorded launches (argument values in argvals), for keyed patches */
  /* -- The rest */
  struct gt_node **kids; int nkids, kidcap;
  uint64_t key_nostatic;
  uint64_t key_before[4];            /* the last keys updates in place replaced (0: none): going back to one is a new node */
  int nkey_before;                   /* updates so far (the ring's next slot: nkey_before % 4) */
  char *label, *skip;                /* skip: why it runs eagerly (NULL: it graphs) */
  const char *eager_why;             /* why its last eager visit ran eagerly, where skip is NULL (max_recordings) */
  int warmups, records, updates, eager;
  gt_pathg pg;                       /* the call's path from the root to this node as one graph (tree.c's deferred launches) */
  gt_ckpt *ckpt; int nckpt;          /* pool state after the segment */
  double record_us, instantiate_us, replay_us_sum, gpu_us_sum;
  int replay_n;
  gt_bevent *gev[2];                 /* a sampled launch's device time: events around it (tree.c's gpu_sampled) */
  uint64_t planned_bytes, plan_end, reusable_bytes;
  /* explain.c: why the node exists, where its segment ended, its shapes */
  char *why, *cut, *shapes;
  gt_cutsite *cuts; int ncuts;       /* every distinct site the segment ended at, in order of first visit (at most GT_CUT_SITES) */
  int cut_other;                     /* visits that ended at sites past those */
  int cut_last;                      /* the site counted last (cut_nlast's, and where stats.c counts a keyed hit's visit) */
  int cut_ask;                       /* 1 + the API whose site Lua names this visit (gt_tree_note), 0: none */
  uint64_t kseq;                     /* hash of the kernels alone (no shapes, no grids) */
  uint32_t *kinds; int nkinds;       /* each launch's kind and kernel id, in order (a new branch's shared launches) */
  int shared, shared_with;           /* a new branch: its leading launches that sibling shared_with has too (-1: none) */
  uint64_t *statics; int nstatics;   /* static addresses in order of use */
  int why_sib;                       /* "new shape": the sibling compared with (-1: none) */
} gt_node;

struct gt_tree {
  /* -- What every call reads or writes, together: a call touches these few
     cache lines, not a line a field (a keyed hit or a replay that finds the
     host's caches cold, after a long step, pays for each line it touches).
     First the numbers a call's start writes (gt_tree_begin_timed), then the
     arrays a call fills. */
  int32_t gen, prev_gen;         /* this call's generation; the one before it began (its outputs may be inputs) */
  int closed;
  int calls, warmups, replays, eager, updates, records;
  int khits, kfused;                 /* keyed hits; those that launched their path as one graph (keyed.c) */
  int npend;                         /* replayed segments whose graphs are not launched yet: the last npend of path */
  int depth;
  int eager_call;                    /* this call runs every segment eagerly, without nodes */
  int lastn;                         /* nbufs of the call before this one (gt_tree_keep_last) */
  uint64_t epoch_last;               /* gt_pool_epoch when the last call ended (the floor: its inputs still mapped) */
  int cur_planned;                   /* the node visited last followed a plan (children may record) */
  int nbufs, nrels, npath, npatched, nlastpath;   /* (the arrays below) */
  gt_call_info at_begin;             /* counters when the call began */
  double begin_us;
  gt_node *cur;                      /* the node visited last */
  gt_node *state_node;               /* pool holds this node's checkpoint (lazily) */
  gt_runtime *rt;
  gt_node **path; int pathcap;
  gt_node **lastpath; int lastcap;
  gt_buf **bufs; int bufcap;         /* the call's buffers: slab[0..nbufs) */
  gt_buf **slab; int nslab, slabcap;         /* chunks of GT_SLAB structs, reused by every call */
  int *segstart; int segcap;
  gt_buf **rels; int relcap;         /* buffers of the call released in the segment being queued */
  int *patched; int patchedcap;      /* this call's kernel-node patches: (path index, launch) pairs */
  int nstage;                        /* staging slots (stage, below) */
  uint8_t *pinned;                   /* per slot: an input of this call lives there */
  struct gt_keyed *keyed;            /* memoized paths of keyed calls (a list) */
  gt_pool pool;
  gt_node *cand; int cmiss;          /* key.c: the cursor's predicted node, and whether it missed */
  int lane_lost;                     /* predict.c: a sync found no room for a launch (1), or GTLUA_VERIFY_LANE a
                                        disagreement (2, the message set): the call fails */
  int lane_checked;                  /* lane.c: the segment's launches whose external inputs the cursor has numbered */
  int lane_call, lane_prev, jit_flushes;  /* the lane replayed launches in this call, in the one before; JIT flushes asked */
  uint32_t cserial, cseen;           /* the cursor's ordinals of external buffers */
  uint64_t cfrees;                   /* gt_static_frees when the segment began (key.c) */
  int *cdirty, ndirty, cdirtycap;    /* launches whose scalars or external addresses differ from cand's graph */
  int cexact;                        /* cdirty lists all of them (else a replay compares every argument) */
  gt_queue q;
  /* -- The rest */
  char *name, *where;
  gt_tree_opts opts;
  int refs;                          /* Lua's, and one per buffer that points here */
  gt_node root;                      /* sentinel: its kids are the first segments */
  gt_node **nodes; int nnodes, nodecap;
  int skips, recorded, limit_hit;
  int pfused;                        /* calls whose replayed path launched as one graph (tree.c) */
  gt_call_info hist[GT_HISTORY];     /* ring of the last calls */
  gt_skip *skip; int nskip, skipcap;
  int nwarn; char *warn;
  char eager_why[64];               /* the eager call's skip reason, counted per segment (flush_eager_call) */
  int32_t failed_gen;
  int32_t trimmed_gen;               /* the generation whose outputs a trim invalidated (gt_tree_trim) */
  int deferred;                      /* GT_DEFER_*: what waits in rt->tlater for another tree's call to settle */
  uint64_t shrink_end;               /* GT_DEFER_SHRINK: the pool's end to keep */
  gt_buf **stage; int stagecap, pinnedcap;       /* staging slots (ordinary memory) */
  uint64_t *scratch; void **pscratch; int scratchcap, pscratchcap;
  gt_buf *kept; int nkept, keptcap;  /* the last call's buffer structs, kept for a call that may be dropped (gt_tree_discard) */
  int32_t kept_gen;                  /* its generation (the dropped call's prev_gen) */
  int32_t kept_prev;                 /* the generation before it (0: not kept) */
  int dry;                           /* the call is traced: nothing of it runs (gt_tree_dry) */
  gt_buf **dryb; int ndryb, drybcap;  /* its staged inputs' memory and its arguments' structs (stage.c) */
  gt_buf **dryof; int dryofcap;       /* per dryb: the argument's buffer (gt_tree_dry_arg), or NULL */
  gt_node **dpath; uint64_t *dvals; int ndpath, dpathcap, dvalcap;   /* the last traced call's path and values */
  uint8_t *dreach; int ndreach, dreachcap;   /* per argument of its launches (as dvals): reached through a call argument (stage.c) */
  void (*keyed_free)(struct gt_tree *t);  /* frees them (keyed.c sets it: the tree does not call up into keyed.c) */
  void (*keyed_trim)(struct gt_tree *t);  /* drops their one-graph paths (a trim frees graph memory; keyed.c sets it) */
  /* key.c: the offset at which each external buffer (by ordinal) was first
     used in a key computation (k: keys and saved signatures; c: the cursor):
     an external view is keyed by its offset from there, so one view at any
     offset (a window sliding over a buffer) is one node */
  int64_t *kfirst, *cfirst; int kfirstcap, cfirstcap;
  struct gt_floorpath *fpaths; int nfpaths, fpathcap;   /* stats.c: the paths a floor launches in turn */
  void (*floor_free)(struct gt_tree *t);   /* frees them (stats.c sets it: the tree does not call up into stats.c) */
};

/* A trim or a free of a tree during another tree's call (gt_tree.deferred):
   its pool may hold what the call's queued launches read, so the memory goes
   when they have run (tree.c's settle). */
enum { GT_DEFER_NONE = 0, GT_DEFER_SHRINK, GT_DEFER_FREE };

/* pathg.c: a path's one graph (gt_pathg).  ok: it holds what path p's
   np graphs hold now; note: p was just launched segment by segment (counts,
   drops a stale graph, builds one when due); drop: the graph goes (its
   device memory with it); free: everything goes. */
int gt_pathg_ok(const gt_pathg *o, gt_node *const *p, int np);
void gt_pathg_note(gt_backend *be, gt_pathg *o, gt_node *const *p, int np);
void gt_pathg_drop(gt_backend *be, gt_pathg *o);
void gt_pathg_free(gt_backend *be, gt_pathg *o);
/* tree.c: launches the call's replayed segments not launched yet (in order,
   or as one graph): before anything that needs them to have run. */
int gt_tree_launch_pending(gt_tree *t);
static inline int gt_pending(gt_runtime *rt) {
  return rt->active && rt->active->npend ? rt->launch_pending(rt->active) : GT_OK;
}


/* A tree call's buffer struct made afresh, every field written (a memset
   or a struct literal of it compiles to rep stos, slow at this size; the
   assert catches a field added without its store here). */
#if UINTPTR_MAX == 0xffffffffffffffffu
_Static_assert(sizeof(gt_buf) == 96, "gt_buf changed: update gt_slab_buf_init");
#endif
static inline void gt_slab_buf_init(gt_buf *b, gt_tree *t, uint64_t addr, uint64_t bytes, int seg, int idx, int ci,
                                    uint32_t qpos) {
  b->addr = addr; b->bytes = bytes; b->gen = t->gen; b->gen_now = &t->gen;
  b->flags = GT_BUF_TREE | GT_BUF_SLAB; b->refs = 0; b->tree = t; b->seg = seg; b->idx = idx; b->block = 0;
  b->qpos = qpos; b->kmark = 0; b->kord = 0; b->ci = ci; b->relseg = -1; b->rel = 0; b->site = 0;
}


/* The call's next buffer struct, of bytes, when t has room for it without
   growing (NULL: gt_tree_buf_new, which grows, or fails); the same struct
   gt_tree_buf_new would give.  A replayed op's output comes from here. */
static inline gt_buf *gt_tree_buf_quick(gt_tree *t, uint64_t bytes) {
  int i = t->nbufs;
  if (i >= t->bufcap || i / GT_SLAB >= t->nslab) return NULL;
  gt_buf *b = &t->slab[i / GT_SLAB][i % GT_SLAB];
  gt_slab_buf_init(b, t, 0, bytes, t->depth, i - t->segstart[t->depth], i, (uint32_t)t->q.n);
  t->bufs[t->nbufs++] = b;
  return b;
}

/* Backend nodes for t's queue as n's graph: n->argvals receives the argument
   values the graph holds; *ptrs (argument pointers) and *deps live while the
   nodes are used, the caller frees all three.  GT_ERR when out of host memory. */
int gt_deps_nodes(gt_tree *t, gt_node *n, gt_gnode **nodes, int **deps, void ***ptrs);

/* -- A call's buffers (stage.c) and a segment's memory (plan.c) ----------- */
void gt_slab_give(gt_tree *t);      /* the tree's slab chunks go to the runtime (Lua handles may point into them) */
int gt_plan_run(gt_tree *t, int first);               /* the segment's new buffers placed for one eager run */
int gt_plan_node(gt_tree *t, gt_node *n, int first);  /* placed for n's recording: the plan and checkpoint saved on n */

int gt_tree_begin_timed(gt_runtime *rt, gt_tree *t, int always);   /* gt_tree_begin of a keyed call */
int gt_tree_begin_body(gt_tree *t);   /* ... and the rest when its body runs after all */
/* gt_buf_free within t's call (or none), without syncing the lane first. */
int gt_buf_free_in(gt_runtime *rt, gt_tree *t, gt_buf *b);
/* -- Device-side branches (cond.c) ---------------------------------------- */
/* Runs the queue's launches in order, deciding each IF and WHILE on the host
   (p read back: a sync on cuda).  *at: the launch that failed. */
int gt_cond_run_queue(gt_backend *be, gt_queue *q, int *at);

/* -- Keyed calls (keyed.c) ------------------------------------------------ */
int gt_tree_grow_path(gt_tree *t, int n);
int gt_tree_launch_graph(gt_tree *t, gt_node *n);   /* launch n's graph (timed when profiling) */
void gt_tree_finish_call(gt_tree *t);               /* end the active call after its segments ran */
void gt_node_gpu_harvest(gt_backend *be, gt_node *n);   /* tree.c: a sampled launch's device time, if it has run */
/* Sets launch i of n's graph to the values n->argvals holds (d >= 0: n's
   index in the call's path, noted for the floor); 1: the driver refused
   (a node in a conditional body): gt_tree_rebuild_node sets them all. */
int gt_tree_patch_node(gt_tree *t, int d, gt_node *n, int i);
int gt_tree_rebuild_node(gt_tree *t, gt_node *n);
/* -- Explaining nodes (explain.c) ----------------------------------------- */
void gt_explain_node(gt_tree *t, gt_node *n);     /* at creation: why (shapes come later from Lua) */
void gt_explain_free(gt_node *n);
void gt_explain_count_cut(gt_tree *t, gt_node *n, int api, int ran);   /* a visit ended at api's site (off the one-increment path) */
#endif
