/* deps.h - graph nodes and edges of a segment's queue (deps.c; private to the core). */
#ifndef GT_DEPS_H
#define GT_DEPS_H
#include "core.h"

/* Every edge a <- b of g (the nodes of q's launches) climbs out of cond
   bodies until both ends lie in one body; duplicates are dropped.  *deps is
   replaced (the old array freed).  GT_ERR when out of host memory. */
int gt_deps_lift(const gt_queue *q, gt_gnode *g, int **deps);
#endif
