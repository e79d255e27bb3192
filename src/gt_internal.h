/* gt_internal.h - the core's structs that Lua's FFI reads or writes field by field:
   the buffer struct (tensor.lua makes a tree call's output in place) and the
   replay lane (launcher.lua's generated tests).  Not the API: gt.h passes a
   gt_buf only as a handle.  Fed to ffi.cdef after gt.h, with it (the two are
   embedded as one text, gt_header_text), so the same rules hold: plain C
   declarations, no macros, no inline code. */
#ifndef GT_INTERNAL_H
#define GT_INTERNAL_H
#include "gt.h"

/* A device buffer.  Tensors in Lua are views (offset, shape) onto one.
   addr is 0 until known: inside a tree call a new buffer gets its address at
   the end of its segment.  A view made in generation g is stale when
   g != *gen_now: memory of a tree's call is reused by the next call of that
   tree, and a released buffer's gen_now points at a value no view holds. */
struct gt_buf {
  uint64_t addr;
  uint64_t bytes;
  int32_t gen;             /* (generations are signed: LuaJIT reads an int32_t as an integer, a uint32_t as a double) */
  int32_t wgen;           /* the generation of the last tree call that wrote into it (tree.lua's write_back) */
  const int32_t *gen_now;
  int32_t flags;           /* GT_BUF_* */
  int32_t refs;            /* Lua's reference + the core's */
  gt_tree *tree;           /* owning tree, NULL for ordinary memory */
  int32_t seg;             /* tree buffers: segment of the call that created it */
  int32_t idx;             /* tree buffers: creation index within that segment */
  uint64_t block;          /* ordinary buffers: pool block (offset + 1), 0 = none */
  uint32_t qpos;           /* tree buffers: launches queued in its segment before it was made */
  uint32_t kmark, kord;    /* segment keys: the key computation that last numbered it, and its number */
  int32_t ci;              /* tree buffers: index within the call (gt_tree_buf_new's result) */
  int32_t relseg;          /* tree buffers: segment in which it was released (-1: not released) */
  uint32_t rel;            /* tree buffers: launches queued in that segment before the release */
  int32_t site;            /* the gt.scope that released it (gt_tree_scope_end's site), 0: another release */
};

/* The replay lane: a lean launch that the predicted node recorded next,
   argument for argument, is replayed from Lua (launcher.lua's make_lean)
   (or a bound launcher's, its scalars compared too) without calling the
   core: tested against the node's record, its output's
   buffer struct made in place, counted in lazy.  The core writes those
   launches into its queue (gt_lane_sync) before anything else reads the
   queue.  One lane per runtime (tree calls do not nest); n = 0 closes it. */
enum { GT_SLAB_BITS = 8 };           /* a tree's buffer structs come in chunks of 1 << GT_SLAB_BITS */
typedef struct gt_lten {             /* one tensor of a lane record */
  gt_buf *b;                         /* its buffer (NULL: the one made, or unused) */
  double o, n;                       /* its byte offset and bytes */
} gt_lten;
typedef struct gt_lrec {
  int32_t cfg;                       /* the lean state's configuration id; 0: not the lane's (signed: an integer in Lua) */
  int32_t made;                      /* the tensor (1..4: a lean state's, in parameter order) whose buffer it makes; 0: none */
  int32_t midx;                      /* that buffer's index in the segment */
  int32_t marg;                      /* and the launch's argument it is */
  int32_t ext;                       /* 1: a tensor is an input from outside the call (the cursor tests it afterwards) */
  const gt_arg *qa;                  /* its arguments as queued (a bound launcher's scalars are compared with them) */
  gt_lten t[8];                      /* its tensors in parameter order (a bound launcher's: up to 8), each one's fields together */
} gt_lrec;
typedef struct gt_lseen {            /* GTLUA_VERIFY_LANE: a launch the lane replayed, as Lua saw it */
  gt_buf *b[8];                      /* its tensors in parameter order (NULL: the one made) */
  double o[8], n[8];                 /* their byte offsets and bytes */
  uint64_t s[64];                    /* its scalars by parameter (GT_MAX_PARAMS; a 4-byte one in the low bytes) */
  int32_t seen;                      /* 1: written by Lua for this launch */
} gt_lseen;
typedef struct gt_lane {
  const gt_lrec *rec;                /* the predicted node's launches */
  gt_lseen *seen;                    /* GTLUA_VERIFY_LANE: one per launch of the prediction (else NULL) */
  int32_t n;                         /* its launches (0: the lane is closed) */
  int32_t lazy;                      /* launches replayed here that the queue does not hold yet */
  const int32_t *qn;                 /* the queue's launches (the next launch is qn[0] + lazy) */
  int32_t *nbufs;                    /* the call's buffers so far */
  gt_buf **bufs;                     /* the call's buffers */
  gt_buf **slab;                     /* the chunks of buffer structs */
  int32_t room;                      /* buffers the call has structs for without growing */
  int32_t depth, segstart;           /* the segment and its first buffer */
  int32_t gen;                       /* the call's generation */
  const int32_t *gen_now;            /* where its buffers' gen_now point */
  gt_tree *tree;
} gt_lane;
gt_lane *gt_lane_of(gt_runtime *rt);
/* GTLUA_VERIFY_LANE=1: 1, and launcher.lua's lane test writes what it saw of
   each launch it replays into gt_lane.seen, which the core compares in full
   with the record when it queues the launch. */
int gt_lane_verifying(void);
#endif
