/* tree.h - tree calls and nodes as the core's other files reach them (tree.c; private to the core). */
#ifndef GT_TREE_H
#define GT_TREE_H
#include "core.h"

/* tree.c: launches the call's replayed segments not launched yet (in order,
   or as one graph): before anything that needs them to have run (host.c's
   syncs and host copies). */
int gt_tree_launch_pending(gt_tree *t);
/* gt_tree_free's part in the tree itself (host.c frees the keyed paths and
   the floor first). */
void gt_tree_release(gt_tree *t);
/* gt_tree_trim in two parts around the keyed paths' (host.c): drop graphs
   beyond the keep most recently used (returns how many), then the paths'
   one graphs and the pool's memory past what the kept graphs use (returns
   dropped, or GT_ERR). */
int gt_tree_trim_drop(gt_runtime *rt, gt_tree *t, int keep);
int gt_tree_trim_shrink(gt_runtime *rt, gt_tree *t, int dropped);

int gt_tree_begin_timed(gt_runtime *rt, gt_tree *t, int always);   /* gt_tree_begin of a keyed call */
int gt_tree_begin_body(gt_tree *t);   /* ... and the rest when its body runs after all */
int gt_tree_grow_path(gt_tree *t, int n);
int gt_tree_launch_graph(gt_tree *t, gt_node *n);   /* launch n's graph (timed when profiling) */
void gt_tree_finish_call(gt_tree *t);               /* end the active call after its segments ran */
void gt_node_gpu_harvest(gt_backend *be, gt_node *n);   /* tree.c: a sampled launch's device time, if it has run */
/* Sets launch i of n's graph to the values n->argvals holds (d >= 0: n's
   index in the call's path, noted for the floor); 1: the driver refused
   (a node in a conditional body): gt_tree_rebuild_node sets them all. */
int gt_tree_patch_node(gt_tree *t, int d, gt_node *n, int i);
int gt_tree_rebuild_node(gt_tree *t, gt_node *n);
#endif
