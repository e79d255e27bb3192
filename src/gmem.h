/* gmem.h - graph memory: what each segment graph holds, the budgets that
   bound it, the open trees they look through (gmem.c; private to the core). */
#ifndef GT_GMEM_H
#define GT_GMEM_H
#include "core.h"

/* n's graph was just made: its bytes (the backend's graph_bytes) counted in
   its tree and the process; roots: its launches that wait for nothing. */
void gt_gmem_made(gt_tree *t, gt_node *n, int roots);
/* n's graph destroyed, its bytes uncounted (n->graph NULL, gver bumped, the tree's recorded count down). */
void gt_gmem_gone(gt_tree *t, gt_node *n);
/* After n's graph was made: while t's budget (opts.graph_memory) or the
   process's (gt_graph_mem_limit) is exceeded, the least recently visited
   graphs are dropped (plans and recordings kept; never n, nor a graph the
   active call visited).  One warning per tree that loses a graph. */
void gt_gmem_budget(gt_tree *t, gt_node *n);
/* The open trees: t listed (gt_tree_new) or unlisted (its memory freed).  GT_ERR when out of host memory. */
int gt_gmem_list(gt_tree *t);
void gt_gmem_unlist(gt_tree *t);
#endif
