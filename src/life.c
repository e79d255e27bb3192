/* life.c - a tree's graphs, nodes and memory going away: a node's graph
   dropped (with the graphs below it, whose plans began at its end), a node
   freed, a tree released (gt_tree_free's part in the tree) or trimmed, now
   or, during another tree's call, once that call's queue has run (settle). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "predict.h"
#include "stage.h"
#include "life.h"

static void drop_graph(gt_tree *t, gt_node *n) {
  gt_pathg_drop(&t->rt->be, &n->pg);
  if (n->graph) { t->rt->be.graph_destroy(&t->rt->be, n->graph); n->graph = NULL; n->gver++; t->recorded--; }
  free(n->argvals); free(n->plan); free(n->ckpt); free(n->launches);
  n->argvals = NULL; n->plan = NULL; n->ckpt = NULL; n->launches = NULL; n->nckpt = n->nargvals = 0;
  gt_cursor_forget(n);
}

/* Drops the graphs below n: their plans started from n's old checkpoint. */
void gt_life_drop_below(gt_tree *t, gt_node *n) {
  for (int i = 0; i < n->nkids; i++) { drop_graph(t, n->kids[i]); gt_life_drop_below(t, n->kids[i]); }
}

void gt_life_free_node(gt_tree *t, gt_node *n) {
  drop_graph(t, n);
  for (int i = 0; i < 2; i++) if (n->gev[i]) t->rt->be.event_destroy(&t->rt->be, n->gev[i]);
  gt_explain_free(n);
  gt_pathg_free(&t->rt->be, &n->pg);
  free(n->kids); free(n->label); free(n->skip); free(n);
}

/* -- Releases in queue order ------------------------------------------------
   During a call of tree A, another tree B's memory may be read by A's
   queued launches (B's output passed to A) and by A's replayed segments not
   launched yet: B:trim() and B's collection (gt_tree_free) release it only
   once those have run.  What they would release waits in rt->tlater (the
   tree struct kept by a reference) until A's call settles, as a buffer
   released during a call waits in rt->later; B's tensors go stale at once,
   as in eager code. */

static void free_now(gt_tree *t);

/* What t's memory waits for (GT_DEFER_*), t listed once.  GT_ERR when out of host memory. */
static int defer_tree(gt_runtime *rt, gt_tree *t, int what) {
  if (!t->deferred) {
    if (GT_GROW(rt->tlater, rt->tlatercap, rt->ntlater + 1)) return GT_ERR;
    t->refs++;
    rt->tlater[rt->ntlater++] = t;
  }
  if (what > t->deferred) t->deferred = what;
  return GT_OK;
}

/* The active call's queued launches have run (or been dropped), its
   replayed segments are launched: what waited for them goes. */
void gt_life_settle(gt_runtime *rt) {
  gt_buf_settle(rt);
  while (rt->ntlater) {
    gt_tree *t = rt->tlater[--rt->ntlater];
    int what = t->deferred;
    t->deferred = GT_DEFER_NONE;
    if (what == GT_DEFER_FREE) free_now(t);
    else if (what == GT_DEFER_SHRINK) gt_pool_shrink(&t->pool, t->shrink_end);   /* (decommitting syncs the device) */
    gt_tree_unref(t);
  }
}

/* gt_tree_free's part in the tree (host.c frees its keyed paths and floor
   first): graphs, nodes and memory go now (during another tree's call, once
   its queue has run: settle); the struct itself stays while tensors still
   point at it (they are stale from now on: a new generation), and goes with
   the last (gt_tree_unref). */
void gt_life_release(gt_tree *t) {
  gt_runtime *rt = t->rt;
  if (rt->active) {
    t->closed = 1;
    t->gen = gt_gen_next();
    defer_tree(rt, t, GT_DEFER_FREE);   /* (out of host memory: never freed rather than freed early) */
    return;
  }
  free_now(t);
}

static void free_now(gt_tree *t) {
  t->closed = 1;
  t->gen = gt_gen_next();
  gt_release_call_bufs(t);
  for (int i = 0; i < t->nstage; i++) if (t->stage[i]) gt_buf_unref(t->stage[i]);
  t->nstage = 0;
  for (int i = 0; i < t->nnodes; i++) gt_life_free_node(t, t->nodes[i]);
  t->nnodes = 0;
  free(t->root.kids);
  for (int i = 0; i < t->nskip; i++) free(t->skip[i].reason);
  free(t->skip); free(t->warn); free(t->nodes); free(t->bufs); free(t->segstart);
  free(t->path); free(t->lastpath); free(t->trace.kept); free(t->trace.dpath); free(t->trace.dvals); free(t->dreach); gt_tree_dry_release(t); free(t->dryb); free(t->dryof); free(t->scratch); free(t->pscratch); free(t->stage); free(t->pinned); free(t->pred.cdirty); free(t->patched); free(t->kfirst); free(t->cfirst);
  free(t->rels);
  gt_queue_free(&t->q);
  gt_slab_give(t);
  gt_pool_destroy(&t->pool);
  gt_tree_unref(t);
}

static int by_last_call(const void *a, const void *b) {
  const gt_node *x = *(gt_node *const *)a, *y = *(gt_node *const *)b;
  return x->last_call < y->last_call ? 1 : x->last_call > y->last_call ? -1 : 0;
}

int gt_life_trim_drop(gt_runtime *rt, gt_tree *t, int keep) {
  if (rt->active == t) return gt_fail(rt, "tree '%s': trim inside its own call", t->name);
  gt_node **rec = malloc((t->nnodes ? t->nnodes : 1) * sizeof *rec);
  if (!rec) return gt_err(rt, GT_E_NOMEM);
  int n = 0, before = t->recorded;
  for (int i = 0; i < t->nnodes; i++) if (t->nodes[i]->graph) rec[n++] = t->nodes[i];
  qsort(rec, n, sizeof *rec, by_last_call);
  for (int i = keep < 0 ? 0 : keep; i < n; i++)
    if (rec[i]->graph) { drop_graph(t, rec[i]); gt_life_drop_below(t, rec[i]); }
  free(rec);
  return before - t->recorded;       /* (with the graphs below a dropped one: their plans began at its end) */
}

int gt_life_trim_shrink(gt_runtime *rt, gt_tree *t, int dropped) {
  for (int i = 0; dropped && i < t->nnodes; i++)     /* the paths' one graphs (rebuilt when those paths repeat) */
    gt_pathg_drop(&t->rt->be, &t->nodes[i]->pg);
  uint64_t end = 0;
  for (int i = 0; i < t->nnodes; i++) if (t->nodes[i]->graph && t->nodes[i]->plan_end > end) end = t->nodes[i]->plan_end;
  /* the last call's outputs stay valid where every segment of its path kept
     its graph (they lie in that plan's memory, below end); else they may lie
     in memory given back, and read stale from now on */
  const gt_call_info *h = t->stats.calls ? &t->hist[(t->stats.calls - 1) % GT_HISTORY] : NULL;
  int kept = h && h->warmups == 0 && h->eager == 0 && t->nlastpath > 0 && t->failed_gen != t->gen;
  for (int d = 0; d < t->nlastpath && kept; d++) kept = t->lastpath[d]->graph != NULL;
  gt_pool_clear(&t->pool);
  if (!kept) { t->trimmed_gen = t->gen; t->gen = gt_gen_next(); }
  /* in another tree's call, its queued launches may read this pool (an
     output of this tree passed to it): the memory goes once they have run */
  t->shrink_end = end;
  if (!rt->active) gt_pool_shrink(&t->pool, end);
  else if (defer_tree(rt, t, GT_DEFER_SHRINK)) return gt_err(rt, GT_E_NOMEM);
  return dropped;
}
