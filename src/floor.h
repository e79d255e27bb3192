/* floor.h - the benchmark floor: the last call's graphs launched back to back from C (floor.c; private to the core). */
#ifndef GT_FLOOR_H
#define GT_FLOOR_H

/* A tree's marked paths (gt_tree_floor_mark), launched in turn by gt_tree_bench_floor (floor.c). */
typedef struct gt_floor { struct gt_floorpath *paths; int n, cap; } gt_floor;
void gt_floor_free(struct gt_tree *t);   /* the marks and their array freed (the tree is freed) */
#endif
