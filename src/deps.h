/* deps.h - graph nodes and edges of a segment's queue (deps.c; private to the core). */
#ifndef GT_DEPS_H
#define GT_DEPS_H
#include "core.h"

/* The edges of the queue's launches as graph nodes g (vals: the resolved
   argument values, q->nargs of them): g[i].ndeps and g[i].deps, pointing
   into *deps (the caller frees it).  A body of a cond waits on nothing
   outside it: its IF/WHILE does.  width > 0: the top level's launches that
   wait for nothing are at most width, the rest in width lanes behind them
   (gt_tree_opts.graph_width).  GT_ERR when out of host memory (g's deps
   then unset, nothing to free). */
int gt_deps_build(const gt_queue *q, const uint64_t *vals, gt_gnode *g, int **deps, int width);
/* Backend nodes for t's queue as n's graph: n->argvals receives the argument
   values the graph holds; *ptrs (argument pointers) and *deps live while the
   nodes are used, the caller frees all three.  GT_ERR when out of host memory. */
int gt_deps_nodes(gt_tree *t, gt_node *n, gt_gnode **nodes, int **deps, void ***ptrs);

/* Every edge a <- b of g (the nodes of q's launches) climbs out of cond
   bodies until both ends lie in one body; duplicates are dropped.  *deps is
   replaced (the old array freed).  GT_ERR when out of host memory. */
int gt_deps_lift(const gt_queue *q, gt_gnode *g, int **deps);
#endif
