/* queue.c - the lazy launch queue of a segment: kernel launches, copies and fills. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "predict.h"

/* Appends a launch.  No references are taken: a buffer whose Lua handle is
   collected, or which is released, during a tree call keeps its memory until
   the call's queue has run (gt_buf_settle).  GT_ERR only when host memory runs out. */
int gt_queue_push(gt_queue *q, const gt_qlaunch *l, const gt_arg *args) {
  gt_arg *a;
  gt_qlaunch *d = gt_queue_reserve(q, l->nargs, &a);
  if (!d) return GT_ERR;
  *d = *l;
  if (l->nargs) memcpy(a, args, l->nargs * sizeof *args);   /* args may be NULL with none */
  gt_queue_commit(q, d);
  return GT_OK;
}

void gt_queue_clear(gt_queue *q) { q->n = q->nargs = 0; }

void gt_queue_free(gt_queue *q) {
  gt_queue_clear(q);
  free(q->l); free(q->args); free(q->vals); free(q->ptrs);
  memset(q, 0, sizeof *q);
}

void gt_queue_resolve(const gt_queue *q, int i, uint64_t *vals) {
  const gt_qlaunch *l = &q->l[i];
  const gt_arg *a = q->args + l->arg0;
  for (int j = 0; j < l->nargs; j++) vals[j] = a[j].buf ? a[j].buf->addr + a[j].off : a[j].v.bits;
}

void gt_launch_gnode(const gt_qlaunch *l, uint64_t *vals, void **ptrs, gt_gnode *out) {
  memset(out, 0, sizeof *out);
  out->kind = l->kind;
  if (l->kind == GT_GN_KERNEL) {
    out->fn = l->k->fn;
    memcpy(out->grid, l->grid, sizeof l->grid);
    memcpy(out->block, l->block, sizeof l->block);
    out->smem = l->smem;
    out->nargs = l->nargs;
    for (int j = 0; j < l->nargs; j++) ptrs[j] = &vals[j];
    out->args = ptrs;
  } else {
    out->dst = l->nargs ? vals[0] : 0;     /* a cond entry: p (ELSE and an IF's END have none) */
    out->src = gt_kind_two_addrs(l->kind) ? vals[1] : 0;
    out->bytes = l->bytes;
    out->value = (uint8_t)l->value;
    out->coll = l->kind == GT_GN_COLL ? l->value : 0;
  }
}

int gt_queue_run(gt_backend *be, gt_queue *q, int i) {
  int n = q->l[i].nargs;
  if (GT_GROW(q->vals, q->valcap, n) || GT_GROW(q->ptrs, q->ptrcap, n)) {
    strcpy(be->err, gt_errmsg_text(GT_E_NOMEM));
    return GT_BERR;
  }
  gt_gnode g;
  gt_queue_resolve(q, i, q->vals);
  gt_launch_gnode(&q->l[i], q->vals, q->ptrs, &g);
  switch (g.kind) {
  case GT_GN_KERNEL: return be->launch(be, g.fn, g.grid, g.block, g.smem, g.args);
  case GT_GN_MEMCPY: return g.bytes ? be->dtod(be, g.dst, g.src, g.bytes) : GT_BOK;
  case GT_GN_MEMSET: return g.bytes ? be->memset8(be, g.dst, g.value, g.bytes) : GT_BOK;
  case GT_GN_COLL: {
    gt_coll c = gt_coll_unpack(g.coll, g.bytes / (uint64_t)gt_coll_esize((g.coll >> 8) & 255));
    return be->coll_run(be, &c, g.dst, g.src);
  }
  default: strcpy(be->err, "a cond entry runs only as part of its queue (gt_cond_run_queue)"); return GT_BERR;
  }
}

/* -- Submitting: queue it or run it now ----------------------------------- */

/* An eager launch writes into a range gt_cond_watch follows (a gt.loop outside a tree: does its body write p?). */
static void note_watched(gt_runtime *rt, const gt_qlaunch *l, const gt_arg *args) {
  for (int j = 0; j < l->nargs; j++) {
    const gt_arg *a = &args[j];
    if (!a->buf || !gt_launch_writes(l, j)) continue;
    uint64_t lo = a->buf->addr + (uint64_t)a->off, hi = lo + (uint64_t)(a->nbytes ? a->nbytes : 1);
    for (int s = 0; s < rt->watching; s++)
      if (lo < rt->watch_hi[s] && rt->watch_lo[s] < hi) rt->watch_hit[s] = 1;
  }
}

/* A launch from the API (gt_launch, copies, fills, cond entries): in a tree
   call it is queued and the cursor compares it with the predicted node's
   recording; else it runs now.  GT_ERR with the message set. */
int gt_submit(gt_runtime *rt, const gt_qlaunch *l, gt_arg *args) {
  gt_tree *t = gt_active(rt);
  if (t) {
    if (gt_queue_push(&t->q, l, args) != GT_OK) return gt_err(rt, GT_E_NOMEM);
    gt_cursor_push(t);
    return GT_OK;
  }
  if (rt->watching) note_watched(rt, l, args);
  uint64_t vals[64];
  void *ptrs[64];
  gt_qlaunch one = *l;
  one.arg0 = 0;
  gt_queue q = { .l = &one, .n = 1, .args = args, .nargs = l->nargs, .vals = vals, .ptrs = ptrs, .valcap = 64, .ptrcap = 64 };
  if (gt_queue_run(&rt->be, &q, 0) != GT_BOK) return gt_fail_be(rt, l->k ? l->k->name : NULL);
  return GT_OK;
}

/* b (a buffer of this call) is released here: launches queued from now on
   may reuse its memory.  Part of the segment's key. */
static int release_queued(gt_tree *t, gt_buf *b) {
  if (GT_GROW(t->rels, t->relcap, t->nrels + 1)) return gt_err(t->rt, GT_E_NOMEM);
  b->relseg = t->depth;
  b->rel = (uint32_t)(t->q.n + t->rt->lane.lazy);   /* (the lane's launches are the queue's next ones) */
  t->rels[t->nrels++] = b;
  return GT_OK;
}

int gt_buf_free_in(gt_runtime *rt, gt_tree *t, gt_buf *b) {
  if (b->flags & GT_BUF_RELEASED) return gt_fail(rt, "the tensor was already released");
  b->flags |= GT_BUF_RELEASED;
  b->gen_now = &gt_released_gen;
  b->site = 0;
  if ((b->flags & GT_BUF_SLAB) && b->tree == t && t && b->gen == t->gen) return release_queued(t, b);
  if (!b->tree) gt_buf_return(rt, b);   /* (staging: the memory is the tree's slot) */
  return GT_OK;
}

int gt_buf_free(gt_runtime *rt, gt_buf *b) { return gt_buf_free_in(rt, gt_active(rt), b); }

int gt_buf_copy(gt_runtime *rt, gt_buf *dst, uint64_t doff, gt_buf *src, uint64_t soff, uint64_t bytes) {
  if (doff + bytes > dst->bytes || soff + bytes > src->bytes) return gt_fail(rt, "copy: %llu bytes exceed a buffer", (unsigned long long)bytes);
  gt_qlaunch l = { .kind = GT_GN_MEMCPY, .nargs = 2, .bytes = bytes };
  gt_arg a[2] = { { .buf = dst, .off = doff, .nbytes = bytes }, { .buf = src, .off = soff, .nbytes = bytes } };
  if (!rt->active && (gt_buf_check(rt, dst, doff, bytes, "copy") || gt_buf_check(rt, src, soff, bytes, "copy"))) return GT_ERR;
  return gt_submit(rt, &l, a);
}

int gt_buf_memset(gt_runtime *rt, gt_buf *dst, uint64_t off, int value, uint64_t bytes) {
  if (off + bytes > dst->bytes) return gt_fail(rt, "fill: %llu bytes exceed the buffer", (unsigned long long)bytes);
  gt_qlaunch l = { .kind = GT_GN_MEMSET, .nargs = 1, .bytes = bytes, .value = value };
  gt_arg a[1] = { { .buf = dst, .off = off, .nbytes = bytes } };
  if (!rt->active && gt_buf_check(rt, dst, off, bytes, "fill")) return GT_ERR;
  return gt_submit(rt, &l, a);
}
