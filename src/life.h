/* life.h - a tree's graphs, nodes and memory going away (life.c; private to the core). */
#ifndef GT_LIFE_H
#define GT_LIFE_H
#include "core.h"

/* The call's buffers live in the slab: the next call reuses them. */
static inline void gt_release_call_bufs(gt_tree *t) { t->lastn = t->nbufs; t->nbufs = 0; }
void gt_life_drop_below(gt_tree *t, gt_node *n);   /* the graphs below n dropped: their plans started from n's old checkpoint */
void gt_life_free_node(gt_tree *t, gt_node *n);         /* n's graph, events, explanation, one-graph path and n */
/* The active call's queued launches have run (or been dropped), its
   replayed segments are launched: what waited for them goes (other trees'
   frees and shrinks, buffers released in the call). */
void gt_life_settle(gt_runtime *rt);
/* gt_tree_free's part in the tree itself (host.c aborts the tree's own
   call and frees its keyed paths and floor first). */
void gt_life_release(gt_tree *t);
/* gt_tree_trim in two parts around the keyed paths' (host.c): drop graphs
   beyond the keep most recently used (returns how many, or GT_ERR), then the
   paths' one graphs and the pool's memory past what the kept graphs use
   (returns dropped, or GT_ERR). */
int gt_life_trim_drop(gt_runtime *rt, gt_tree *t, int keep);
int gt_life_trim_shrink(gt_runtime *rt, gt_tree *t, int dropped);
#endif
