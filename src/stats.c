/* stats.c - counters of trees and nodes, read as plain structs (Lua builds tables and pictures). */
#include <stdlib.h>
#include <string.h>
#include "core.h"

int gt_tree_stats(gt_tree *t, gt_tree_info *o) {
  memset(o, 0, sizeof *o);
  o->calls = t->calls;
  o->nodes = t->nnodes;
  o->recorded = t->recorded;
  o->warmups = t->warmups;
  o->replays = t->replays;
  o->eager = t->eager;
  o->updates = t->updates;
  o->skips = t->skips;
  o->limit_hit = t->limit_hit;
  o->reserved = t->pool.committed;
  o->in_use = t->state_node ? t->state_node->checkpoint_bytes : gt_pool_in_use(&t->pool);
  o->high_water = t->pool.high_water;
  for (int i = 0; i < t->nnodes; i++) if (t->nodes[i]->depth + 1 > o->depth) o->depth = t->nodes[i]->depth + 1;
  return GT_OK;
}

int gt_tree_node(gt_tree *t, int id, gt_node_info *o) {
  if (id < 0 || id >= t->nnodes) return GT_ERR;
  const gt_node *n = t->nodes[id];
  memset(o, 0, sizeof *o);
  o->id = n->id;
  o->parent = n->parent->id;
  o->depth = n->depth;
  o->children = n->nkids;
  o->kernels = n->nlaunch;
  o->visits = n->visits;
  o->warmups = n->warmups;
  o->recorded = n->graph != NULL;
  o->records = n->records;
  o->replays = n->replays;
  o->updates = n->updates;
  o->eager = n->eager;
  o->skip = n->skip;
  o->label = n->label;
  o->record_us = n->record_us;
  o->instantiate_us = n->instantiate_us;
  o->replay_cpu_us = n->replay_n ? n->replay_us_sum / n->replay_n : 0;
  o->gpu_us = n->gpu_n ? n->gpu_us_sum / n->gpu_n : 0;
  o->planned_bytes = n->planned_bytes;
  o->checkpoint_bytes = n->checkpoint_bytes;
  o->reusable_bytes = n->reusable_bytes;
  o->key = n->key;
  o->last_call = n->last_call;
  o->keyed = n->keyed;
  o->shapes = n->shapes;
  o->cut = n->cut;
  o->why = n->why;
  return GT_OK;
}

int gt_tree_history(gt_tree *t, int i, gt_call_info *out) {
  int n = t->calls < GT_HISTORY ? t->calls : GT_HISTORY;
  if (i < 0 || i >= n) return GT_ERR;
  *out = t->hist[(t->calls - n + i) % GT_HISTORY];
  return out->call ? GT_OK : GT_ERR;   /* a call still running has no entry yet */
}

int gt_tree_child(gt_tree *t, int id, int k) {
  const gt_node *n = id < 0 ? &t->root : id < t->nnodes ? t->nodes[id] : NULL;
  if (!n || k < 0 || k >= n->nkids) return -1;
  return n->kids[k]->id;
}

int gt_tree_skip_reason(gt_tree *t, int i, const char **reason, int *count) {
  if (i < 0 || i >= t->nskip) return GT_ERR;
  *reason = t->skip[i].reason;
  *count = t->skip[i].count;
  return GT_OK;
}

/* -- The floor ----------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The last call's patches again (the values its graphs hold now), for a
   floor that pays what a step at a new scalar or address pays. */
static int repatch(gt_tree *t, int np) {
  for (int p = 0; p < np; p++) {
    gt_node *n = t->lastpath[t->patched[2 * p]];
    if (n->launches && gt_tree_patch_node(t, -1, n, t->patched[2 * p + 1])) return GT_ERR;
  }
  return GT_OK;
}

/* Launches the graphs of the tree's last call back to back, no tree logic:
   the floor that tree replay is measured against (patch: each launch
   preceded by the kernel-node patches the last call made).  Medians in µs;
   returns the patches a step repeats, or GT_ERR. */
int gt_tree_bench_floor(gt_runtime *rt, gt_tree *t, int iters, int sync_each, int patch, double *cpu_us, double *step_us) {
  gt_backend *be = &rt->be;
  if (!t->nlastpath || iters < 1) return gt_fail(rt, "tree '%s': call it at least once before measuring the floor", t->name);
  for (int i = 0; i < t->nlastpath; i++)
    if (!t->lastpath[i]->graph) return gt_fail(rt, "tree '%s': the last call did not replay every segment", t->name);
  int np = patch ? t->npatched : 0;
  double *c = malloc(iters * sizeof *c), *s = malloc(iters * sizeof *s);
  if (!c || !s) { free(c); free(s); return gt_fail(rt, "out of host memory"); }
  if (be->sync(be)) { free(c); free(s); return gt_fail_be(rt, NULL); }
  double start = gt_now_us();
  int st = GT_BOK;
  for (int k = 0; k < iters && st == GT_BOK; k++) {
    double t0 = gt_now_us();
    if (np && repatch(t, np)) { free(c); free(s); return GT_ERR; }
    for (int i = 0; i < t->nlastpath && st == GT_BOK; i++) st = be->graph_launch(be, t->lastpath[i]->graph);
    double t1 = gt_now_us();
    if (sync_each && st == GT_BOK) st = be->sync(be);
    c[k] = t1 - t0;
    s[k] = gt_now_us() - t0;
  }
  if (st == GT_BOK) st = be->sync(be);
  double total = gt_now_us() - start;
  qsort(c, iters, sizeof *c, cmp_double);
  qsort(s, iters, sizeof *s, cmp_double);
  *cpu_us = c[iters / 2];
  *step_us = sync_each ? s[iters / 2] : total / iters;
  free(c); free(s);
  return st == GT_BOK ? np : gt_fail_be(rt, NULL);
}
