/* key.h - segment keys: a hash over everything a graph bakes in (key.c; private to the core). */
#ifndef GT_KEY_H
#define GT_KEY_H
#include "gt_internal.h"

/* Segment keys: a hash over everything a graph bakes in; scalars excluded. */
typedef struct gt_segkey { uint64_t full, nostatic; } gt_segkey;   /* nostatic: the topology (no static addresses, no grids) */
/* What the key sees of one argument (role 0: a scalar), and of one release. */
enum { GT_ROLE_INTERNAL = 1, GT_ROLE_PATH, GT_ROLE_STATIC, GT_ROLE_EXTERNAL };
/* One tensor argument as a key sees it; buf: the struct it was (the cursor's
   shortcut for the call's own buffers and static ones, see key.c). */
typedef struct gt_asig { uint64_t id; int64_t off, nbytes; int role, write; const gt_buf *buf; } gt_asig;
typedef struct gt_rsig { uint32_t rel; int32_t seg, idx; } gt_rsig;


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
