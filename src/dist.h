/* dist.h - gt.dist in the core (dist.c): the group, collectives as queue
   entries, the path check of a tree call's segment across ranks. */
#ifndef GT_DIST_H
#define GT_DIST_H
#include "core.h"

/* Before a segment's non-replayed visit in a group of several ranks: every
   rank's segment has the same signature (launches, collectives, shapes,
   roles), else an error on every rank naming the segment and the ranks. */
int gt_dist_check(gt_tree *t);
#endif
