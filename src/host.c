/* host.c - what the host asks of the whole core, above every other file of it:
   syncs and host copies (the active call's replayed segments launched
   first: graph.c's pending launches), and a tree's free and trim (its keyed
   paths and its floor with it).  Calls go down from here only: the tree
   does not call up into keyed.c or floor.c, nor runtime.c into the tree. */
#include "core.h"
#include "tree.h"
#include "graph.h"
#include "life.h"
#include "keyed.h"
#include "floor.h"

/* The active call's replayed segments not launched yet are launched (in
   order, or as one graph) before a sync or a host copy. */
static int pending(gt_runtime *rt) {
  return rt->active && rt->active->npend ? gt_graph_launch_pending(rt->active) : GT_OK;
}

int gt_sync(gt_runtime *rt) {
  if (pending(rt)) return GT_ERR;
  rt->xfer.syncs++;
  if (rt->be.sync(&rt->be) != GT_BOK) return gt_fail_be(rt, NULL);
  return GT_OK;
}

int gt_buf_write(gt_runtime *rt, gt_buf *b, uint64_t off, const void *src, uint64_t bytes) {
  if (gt_buf_check(rt, b, off, bytes, "copy to device") != GT_OK || pending(rt)) return GT_ERR;
  rt->xfer.writes++;
  if (bytes && rt->be.htod(&rt->be, b->addr + off, src, bytes) != GT_BOK) return gt_fail_be(rt, NULL);
  if (rt->active) b->wgen = rt->active->gen;   /* written by the call (gt_buf.wgen) */
  return GT_OK;
}

int gt_buf_read(gt_runtime *rt, gt_buf *b, uint64_t off, void *dst, uint64_t bytes) {
  if (gt_buf_check(rt, b, off, bytes, "copy to host") != GT_OK || pending(rt)) return GT_ERR;
  rt->xfer.reads++;
  if (bytes && rt->be.dtoh(&rt->be, dst, b->addr + off, bytes) != GT_BOK) return gt_fail_be(rt, NULL);
  return GT_OK;
}

/* Lua's tree object was collected: its keyed paths and floor go, then the
   tree (gt_life_release: now, or once another tree's queued launches that
   may read its memory have run). */
void gt_tree_free(gt_tree *t) {
  if (t->rt->active == t) gt_tree_abort(t->rt);
  if (t->keyed) gt_keyed_free_all(t);
  gt_floor_free(t);
  gt_life_release(t);
}

int gt_tree_trim(gt_runtime *rt, gt_tree *t, int keep) {
  int dropped = gt_life_trim_drop(rt, t, keep);
  if (dropped < 0) return GT_ERR;
  if (dropped && t->keyed) gt_keyed_trim_all(t);
  return gt_life_trim_shrink(rt, t, dropped);
}
