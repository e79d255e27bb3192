/* plan.h - a segment's new buffers placed in the tree pool; checkpoints (plan.c; private to the core). */
#ifndef GT_PLAN_H
#define GT_PLAN_H
#include "gt.h"

typedef struct gt_node gt_node;

/* The pool's state after a segment (a node's checkpoint): its live blocks. */
typedef struct gt_ckpt { int32_t seg, idx; uint64_t off, size; } gt_ckpt;
int gt_plan_run(gt_tree *t, int first);               /* the segment's new buffers placed for one eager run */
int gt_plan_node(gt_tree *t, gt_node *n, int first);  /* placed for n's recording: the plan and checkpoint saved on n */
#endif
