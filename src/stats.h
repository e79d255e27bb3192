/* stats.h - a tree's counters (gt_tree.stats; stats.c reads them out as gt_tree_info; private to the core). */
#ifndef GT_STATS_H
#define GT_STATS_H

/* A tree's calls and its visits of each kind so far (every call writes a
   few: they sit with the other fields a call touches, gt_tree's first lines). */
typedef struct gt_counts {
  int calls, warmups, replays, eager, updates, records;
  int khits, kfused;                 /* keyed hits; those that launched their path as one graph (keyed.c) */
} gt_counts;
#endif
