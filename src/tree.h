/* tree.h - tree calls as the core's other files reach them (tree.c; private to the core). */
#ifndef GT_TREE_H
#define GT_TREE_H
#include "core.h"

int gt_tree_begin_timed(gt_runtime *rt, gt_tree *t, int always);   /* gt_tree_begin of a keyed call */
int gt_tree_begin_body(gt_tree *t);   /* ... and the rest when its body runs after all */
int gt_tree_grow_path(gt_tree *t, int n);
void gt_tree_finish_call(gt_tree *t);               /* end the active call after its segments ran */
#endif
