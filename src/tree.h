/* tree.h - tree calls as the core's other files reach them, and what a
   traced call keeps (gt_tree.trace; tree.c; private to the core). */
#ifndef GT_TREE_H
#define GT_TREE_H
#include "gt_internal.h"

typedef struct gt_node gt_node;

/* A traced call (gt_tree_dry): the last call's buffer structs, kept for a
   call that may be dropped (gt_tree_keep_last, gt_tree_discard), and the
   last traced call's path and the values its graphs would launch
   (gt_tree_dry_end, gt_tree_dry_same). */
typedef struct gt_trace {
  gt_buf *kept; int nkept, keptcap;  /* (nkept -1: nothing kept) */
  int32_t kept_gen;                  /* its generation (the dropped call's prev_gen) */
  int32_t kept_prev;                 /* the generation before it (0: not kept) */
  gt_node **dpath; uint64_t *dvals; int ndpath, dpathcap, dvalcap;   /* (ndpath -1: none) */
} gt_trace;


int gt_tree_begin_timed(gt_runtime *rt, gt_tree *t, int always);   /* gt_tree_begin of a keyed call */
int gt_tree_begin_body(gt_tree *t);   /* ... and the rest when its body runs after all */
int gt_tree_grow_path(gt_tree *t, int n);
void gt_tree_finish_call(gt_tree *t);               /* end the active call after its segments ran */
#endif
