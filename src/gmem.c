/* gmem.c - graph memory: each segment graph's bytes (the backend measures
   or estimates them when it is made) summed per tree and per process, and
   the budgets that bound them.  Past a budget the least recently visited
   graphs are dropped, their plans, keys and recordings kept: the next visit
   instantiates the graph again (a record that keeps the node's counters),
   so results never change, only time.  Keyed paths and fused paths see the
   drop through gt_node.gver and a NULL graph, as after a trim. */
#include <stdio.h>
#include <stdlib.h>
#include "core.h"
#include "gmem.h"

void gt_gmem_made(gt_tree *t, gt_node *n, int roots) {
  gt_backend *be = &t->rt->be;
  n->graph_bytes = be->graph_bytes(be, n->graph, &n->graph_measured);
  n->roots = roots;
  t->graph_bytes += n->graph_bytes;
  t->rt->graph_bytes += n->graph_bytes;
}

void gt_gmem_gone(gt_tree *t, gt_node *n) {
  if (!n->graph) return;
  t->rt->be.graph_destroy(&t->rt->be, n->graph);   /* (one still running is freed when it completes) */
  n->graph = NULL;
  n->gver++;
  t->recorded--;
  t->graph_bytes -= n->graph_bytes;
  t->rt->graph_bytes -= n->graph_bytes;
  n->graph_bytes = 0;
}

/* t's least recently visited graph that may go: not keep, not one the
   active call visited (its last_call is this call); NULL when none. */
static gt_node *lru(gt_tree *t, const gt_node *keep) {
  uint64_t now = t->rt->active == t ? (uint64_t)t->stats.calls : UINT64_MAX;
  gt_node *best = NULL;
  for (int i = 0; i < t->nnodes; i++) {
    gt_node *x = t->nodes[i];
    if (x->graph && x != keep && x->last_call < now && (!best || x->last_call < best->last_call)) best = x;
  }
  return best;
}

/* x's graph goes for the budget named what (limit bytes); t's warning once. */
static void drop(gt_tree *t, gt_node *x, const char *what, uint64_t limit) {
  char b1[GT_BYTES_LEN], b2[GT_BYTES_LEN], msg[512];
  double us = x->instantiate_us;
  uint64_t held = what[0] == 'i' ? t->graph_bytes : t->rt->graph_bytes;
  gt_pathg_drop(&t->rt->be, &x->pg);
  gt_gmem_gone(t, x);
  x->budget_dropped = 1;
  t->budget_drops++;
  if (t->budget_warned++) return;
  snprintf(msg, sizeof msg, "tree '%s' (%s): graph memory over %s = %s (%s held): the least recently visited graphs "
           "are dropped and instantiated again on their next visit (about %.0f us each, counted in stats().reinstantiations); "
           "raise the budget, or use buckets for fewer shapes", t->name, t->where, what, gt_bytes(limit, b1),
           gt_bytes(held, b2), us);
  free(t->warn);
  t->warn = gt_strdup(msg);
  t->nwarn++;
}

/* Of the open trees, the one called least recently (generations grow with
   calls) that has a graph to drop, and that graph; NULL when none. */
static gt_tree *lru_tree(gt_runtime *rt, const gt_node *keep, gt_node **x) {
  gt_tree *best = NULL;
  for (int i = 0; i < rt->ntrees; i++) {
    gt_tree *o = rt->trees[i];
    gt_node *c = o->closed ? NULL : lru(o, keep);
    if (c && (!best || (int32_t)(o->gen - best->gen) < 0)) best = o, *x = c;
  }
  return best;
}

void gt_gmem_budget(gt_tree *t, gt_node *n) {
  gt_runtime *rt = t->rt;
  gt_node *x;
  while (t->opts.graph_memory && t->graph_bytes > t->opts.graph_memory && (x = lru(t, n)))
    drop(t, x, "its graph_memory", t->opts.graph_memory);
  gt_tree *o;
  while (rt->graph_limit && rt->graph_bytes > rt->graph_limit && (o = lru_tree(rt, n, &x)))
    drop(o, x, "gt.graph_memory", rt->graph_limit);
}

int gt_gmem_list(gt_tree *t) {
  gt_runtime *rt = t->rt;
  if (GT_GROW(rt->trees, rt->treecap, rt->ntrees + 1)) return GT_ERR;
  rt->trees[rt->ntrees++] = t;
  return GT_OK;
}

void gt_gmem_unlist(gt_tree *t) {
  gt_runtime *rt = t->rt;
  for (int i = 0; i < rt->ntrees; i++)
    if (rt->trees[i] == t) { rt->trees[i] = rt->trees[--rt->ntrees]; return; }
}

uint64_t gt_graph_mem(gt_runtime *rt) { return rt->graph_bytes; }
uint64_t gt_path_graph_mem(void) { return gt_pathg_total; }

uint64_t gt_graph_mem_limit(gt_runtime *rt, uint64_t limit) {
  uint64_t old = rt->graph_limit;
  gt_tree *o;
  gt_node *x;
  rt->graph_limit = limit;
  while (!rt->active && limit && rt->graph_bytes > limit && (o = lru_tree(rt, NULL, &x)))   /* (in a call: at its next record) */
    drop(o, x, "gt.graph_memory", limit);
  return old;
}
