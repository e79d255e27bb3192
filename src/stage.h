/* stage.h - a call's buffer structs (the slab), staging slots, what a call wrote (stage.c; private to the core). */
#ifndef GT_STAGE_H
#define GT_STAGE_H
#include "core.h"

void gt_tree_dry_release(gt_tree *t);   /* stage.c: a traced call's staged memory freed */
int gt_tree_dry_note(gt_tree *t);       /* stage.c: which of the segment's arguments a traced call reached through its arguments */
/* Marks the buffers that the queued launches write into as written by t's
   call (gt_buf.wgen; stage.c). */
void gt_queue_note_writes(gt_tree *t);
void gt_slab_give(gt_tree *t);      /* the tree's slab chunks go to the runtime (Lua handles may point into them) */

/* A tree call's buffer struct made afresh, every field written (a memset
   or a struct literal of it compiles to rep stos, slow at this size; the
   assert catches a field added without its store here). */
#if UINTPTR_MAX == 0xffffffffffffffffu
_Static_assert(sizeof(gt_buf) == 96, "gt_buf changed: update gt_slab_buf_init");
#endif
static inline void gt_slab_buf_init(gt_buf *b, gt_tree *t, uint64_t addr, uint64_t bytes, int seg, int idx, int ci,
                                    uint32_t qpos) {
  b->addr = addr; b->bytes = bytes; b->gen = t->gen; b->gen_now = &t->gen;
  b->flags = GT_BUF_TREE | GT_BUF_SLAB; b->refs = 0; b->tree = t; b->seg = seg; b->idx = idx; b->block = 0;
  b->qpos = qpos; b->kmark = 0; b->kord = 0; b->ci = ci; b->relseg = -1; b->rel = 0; b->site = 0;
}


/* The call's next buffer struct, of bytes, when t has room for it without
   growing (NULL: gt_tree_buf_new, which grows, or fails); the same struct
   gt_tree_buf_new would give.  A replayed op's output comes from here. */
static inline gt_buf *gt_tree_buf_quick(gt_tree *t, uint64_t bytes) {
  int i = t->nbufs;
  if (i >= t->bufcap || i / GT_SLAB >= t->nslab) return NULL;
  gt_buf *b = &t->slab[i / GT_SLAB][i % GT_SLAB];
  gt_slab_buf_init(b, t, 0, bytes, t->depth, i - t->segstart[t->depth], i, (uint32_t)t->q.n);
  t->bufs[t->nbufs++] = b;
  return b;
}
#endif
