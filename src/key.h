/* key.h - segment keys: a hash over everything a graph bakes in (key.c; private to the core). */
#ifndef GT_KEY_H
#define GT_KEY_H
#include "core.h"

int gt_role_of(const gt_tree *t, const gt_buf *b);  /* GT_ROLE_* of a tensor argument in the segment being queued */
uint64_t gt_segment_key(gt_tree *t, int topology);  /* topology: without grids, static tensors by order */
/* One tensor argument as the key sees it.  topology: static tensors by order
   of use, not address.  An external buffer: by order of first use within
   the computation numbered serial (*nseen so far), and its view by the
   offset from the one it was first used at (*first, *cap: those offsets by
   ordinal), as its address is patched: one view at any offset is one node,
   two views of one buffer are keyed by how they lie. */
gt_asig gt_key_arg(const gt_tree *t, const gt_arg *a, int topology, uint32_t serial, uint32_t *nseen,
                   int64_t **first, int *cap);
uint32_t gt_key_serial(void);                       /* a new numbering of external buffers (never 0) */
#endif
