/* core.h - the core's shared state: the runtime, the shells of a tree and a node
   (each subsystem's part of them declared in its own header, embedded here),
   errors.  Each subsystem's functions are declared in its header (pool.h,
   queue.h, key.h, predict.h, ...); never included by Lua. */
#ifndef GT_CORE_H
#define GT_CORE_H
#include <stdarg.h>
#include <stdbool.h>
#include "gt_internal.h"
#include "backend.h"
#include "errmsg.h"
#include "pool.h"
#include "queue.h"
#include "key.h"
#include "predict.h"
#include "pathg.h"
#include "plan.h"
#include "explain.h"
#include "floor.h"
#include "stats.h"
#include "tree.h"

#define GT_ALIGN 256u
#define GT_SLAB (1 << GT_SLAB_BITS)
#define GT_HISTORY 1024
#define GT_JIT_FLUSHES 8       /* a tree's JIT flushes at most (gt_tree_return) */
#define GT_MAX_PARAMS 64      /* a kernel's parameters at most (kernel.c refuses more) */

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
  int dist_rank, dist_world;  /* dist.c: this process in gt.dist's group (world 0: none joined) */
  gt_buf *dist_keys;         /* dist.c: the path check's all-gather, (world + 1) x 8 bytes */
  uint64_t *dist_vals;       /* dist.c: its result on the host (world of them) */
  struct gt_tree **tlater; int ntlater, tlatercap;   /* life.c: other trees whose memory waits for the active call's queue (gt_tree.deferred) */
  uint64_t graph_bytes, graph_limit; /* life.c: every tree's graph_bytes summed; the process-wide budget (0: none) */
  struct gt_tree **trees; int ntrees, treecap;   /* life.c: the open trees (the process-wide budget looks through them) */
};
int gt_fail(gt_runtime *rt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int gt_fail_be(gt_runtime *rt, const char *what); /* copy the backend's message */
int gt_err(gt_runtime *rt, gt_errcode e);          /* gt_fail with errmsg.h's message e */
int gt_err_be(gt_runtime *rt, gt_errcode what);    /* gt_fail_be naming errmsg.h's what */
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

/* -- Trees: the shells --------------------------------------------------- */
/* Visits of a segment: what gt_tree_flush chooses, and what ran.  PLANNED: a
   skipped node run eagerly on planned memory (its children may record);
   LIMIT: past max_recordings (an error, or an eager run). */
enum { GT_V_NONE = 0, GT_V_WARMUP, GT_V_RECORD, GT_V_REPLAY, GT_V_EAGER, GT_V_UPDATE, GT_V_PLANNED, GT_V_LIMIT };
typedef struct gt_skip { char *reason; int count; } gt_skip;

struct gt_node {
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
  gt_precord pred;                   /* predict.c: the recording as the cursor and the lane compare it */
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
  gt_pathg pg;                       /* the call's path from the root to this node as one graph (graph.c's deferred launches) */
  gt_ckpt *ckpt; int nckpt;          /* pool state after the segment */
  uint64_t graph_bytes;              /* life.c: what its graph's instantiation took (backend graph_bytes; 0: no graph) */
  int graph_measured, roots;         /* graph_bytes measured (else estimated); its graph's launches that wait for nothing */
  int budget_dropped;                /* a graph-memory budget dropped its graph (plan and recording kept): the next record instantiates again */
  int reinst;                        /* such instantiations */
  double record_us, instantiate_us, replay_us_sum, gpu_us_sum;
  int replay_n;
  gt_bevent *gev[2];                 /* a sampled launch's device time: events around it (graph.c's gpu_sampled) */
  uint64_t planned_bytes, plan_end, reusable_bytes;
  gt_explain ex;                     /* explain.c: why the node exists, where its segment ended, its shapes */
};

struct gt_tree {
  /* -- What every call reads or writes, together: a call touches these few
     cache lines, not a line a field (a keyed hit or a replay that finds the
     host's caches cold, after a long step, pays for each line it touches).
     First the numbers a call's start writes (gt_tree_begin_timed), then the
     arrays a call fills. */
  int32_t gen, prev_gen;         /* this call's generation; the one before it began (its outputs may be inputs) */
  int closed;
  int shared;                        /* its pool is shared (opts.pool): a call checks who used it last (shared_pool_taken) */
  gt_counts stats;                   /* stats.c: calls and visits so far */
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
  gt_pool *mem;                      /* the pool it plans into: &pool, or the owner's when shared (below) */
  gt_cursor pred;                    /* predict.c: the cursor's prediction and the lane's state */
  gt_queue q;
  /* -- The rest */
  char *name, *where;
  gt_tree_opts opts;
  int refs;                          /* Lua's, and one per buffer that points here */
  gt_node root;                      /* sentinel: its kids are the first segments */
  gt_node **nodes; int nnodes, nodecap;
  int skips, recorded, limit_hit;
  int pfused;                        /* calls whose replayed path launched as one graph (graph.c) */
  uint64_t graph_bytes;              /* life.c: its nodes' graph_bytes summed */
  int budget_drops, reinst, budget_warned;   /* graphs a budget dropped; instantiated again; its warning given */
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
  gt_trace trace;                    /* tree.c: what a traced call keeps and leaves */
  int dry;                           /* the call is traced: nothing of it runs (gt_tree_dry) */
  gt_buf **dryb; int ndryb, drybcap;  /* its staged inputs' memory and its arguments' structs (stage.c) */
  gt_buf **dryof; int dryofcap;       /* per dryb: the argument's buffer (gt_tree_dry_arg), or NULL */
  uint8_t *dreach; int ndreach, dreachcap;   /* per argument of its launches (as the traced path's values): reached through a call argument (stage.c) */
  /* key.c: the offset at which each external buffer (by ordinal) was first
     used in a key computation (k: keys and saved signatures; c: the cursor):
     an external view is keyed by its offset from there, so one view at any
     offset (a window sliding over a buffer) is one node */
  int64_t *kfirst, *cfirst; int kfirstcap, cfirstcap;
  gt_floor floor;                    /* floor.c: the paths a floor launches in turn */
  /* A pool shared between trees (opts.pool): mem is the owner's pool (its
     own: &pool), whose base every tree's pool has (0: a growing pool), so
     a replay reads pool.base as before.  The owner counts its sharers
     (pshare, itself included; each holds a reference to it) and names the
     tree whose call used the pool last (plast): its outputs are the live
     ones.  A call of another sharer overwrites them: their generation goes
     (over_gen, over_by: for the stale message). */
  struct gt_tree *powner, *plast, *over_by;
  int pshare;
  int32_t over_gen;
};

/* A trim or a free of a tree during another tree's call (gt_tree.deferred):
   its pool may hold what the call's queued launches read, so the memory goes
   when they have run (life.c's gt_life_settle). */
enum { GT_DEFER_NONE = 0, GT_DEFER_SHRINK, GT_DEFER_FREE };

/* The active call's tree, its queue holding every launch so far (what the
   core's functions reach the call through; NULL outside one): the lane's
   launches are queued first (predict.c). */
static inline gt_tree *gt_active(gt_runtime *rt) {
  gt_tree *t = rt->active;
  if (t && rt->lane.lazy) gt_lane_sync(t);
  return t;
}
#endif
