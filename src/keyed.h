/* keyed.h - keyed calls: memoized paths replayed without the Lua body (keyed.c; private to the core).
   The API (gt_tree_keyed_*) is in gt.h; these are what host.c's free and trim
   of a tree call. */
#ifndef GT_KEYED_H
#define GT_KEYED_H
#include "core.h"

void gt_keyed_free_all(gt_tree *t);   /* the tree's memoized paths freed (the tree is freed) */
/* A trim dropped graphs: the paths' one graphs go too, with their device
   memory (a path fuses again once it repeats), as the tree's own do. */
void gt_keyed_trim_all(gt_tree *t);
#endif
