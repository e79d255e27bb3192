/* stats.c - counters of trees and nodes, read as plain structs (Lua builds tables and pictures). */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "graph.h"
#include "keyed.h"

int gt_tree_stats(gt_tree *t, gt_tree_info *o) {
  memset(o, 0, sizeof *o);
  o->calls = t->stats.calls;
  o->nodes = t->nnodes;
  o->recorded = t->recorded;
  o->warmups = t->stats.warmups;
  o->replays = t->stats.replays;
  o->eager = t->stats.eager;
  o->updates = t->stats.updates;
  o->skips = t->skips;
  o->limit_hit = t->limit_hit;
  o->keyed_fused = t->stats.kfused;
  o->keyed_hits = t->stats.khits;
  o->path_fused = t->pfused;
  o->reserved = t->mem->committed;
  o->in_use = t->state_node ? t->state_node->checkpoint_bytes : gt_pool_in_use(t->mem);
  o->high_water = t->mem->high_water;
  o->graph_bytes = t->graph_bytes;
  o->budget_drops = t->budget_drops;
  o->reinstantiations = t->reinst;
  for (int i = 0; i < t->nnodes; i++) {
    if (t->nodes[i]->depth + 1 > o->depth) o->depth = t->nodes[i]->depth + 1;
    o->graph_measured += t->nodes[i]->graph && t->nodes[i]->graph_measured;
    o->path_graph_bytes += t->nodes[i]->pg.bytes;
  }
  for (const gt_keyed *k = t->keyed; k; k = k->next) o->path_graph_bytes += k->pg.bytes;
  return GT_OK;
}

int gt_tree_node(gt_tree *t, int id, gt_node_info *o) {
  if (id < 0 || id >= t->nnodes) return GT_ERR;
  gt_node *n = t->nodes[id];
  if (!t->rt->active) gt_graph_gpu_harvest(&t->rt->be, n);   /* (a sampled launch that has run since) */
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
  o->skip = n->skip ? n->skip : n->graph ? NULL : n->eager_why;   /* (an eager node past max_recordings: that reason) */
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
  o->shapes = n->ex.shapes;
  o->cut = n->ex.cut;
  o->why = n->ex.why;
  o->shared = n->ex.shared;
  o->shared_with = n->ex.shared_with;
  o->graph_bytes = n->graph_bytes;
  o->graph_measured = n->graph && n->graph_measured;
  o->reinstantiations = n->reinst;
  o->roots = n->roots;
  return GT_OK;
}

int gt_tree_history(gt_tree *t, int i, gt_call_info *out) {
  int n = t->stats.calls < GT_HISTORY ? t->stats.calls : GT_HISTORY;
  if (i < 0 || i >= n) return GT_ERR;
  *out = t->hist[(t->stats.calls - n + i) % GT_HISTORY];
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

int gt_tree_node_cut(gt_tree *t, int id, int i, const char **site, int *count) {
  if (id < 0 || id >= t->nnodes || i < 0) return GT_ERR;
  const gt_node *n = t->nodes[id];
  int other = n->ex.cut_other + (n->ex.cut_last >= n->ex.ncuts ? n->cut_nlast : 0);
  if (i > n->ex.ncuts || (i == n->ex.ncuts && !other)) return GT_ERR;
  if (i == n->ex.ncuts) { *site = "other sites"; *count = other; return GT_OK; }
  int c = n->ex.cuts[i].count;
  if (i == n->ex.cut_last) {
    /* plus the replays counted at it since it became the last, and visits no
       flush counted (a keyed hit launches its path without segment ends) */
    int sum = other;
    for (int j = 0; j < n->ex.ncuts; j++) sum += n->ex.cuts[j].count;
    sum += n->cut_nlast;
    c += n->cut_nlast + (n->visits > sum ? n->visits - sum : 0);
  }
  *site = n->ex.cuts[i].text;
  *count = c;
  return GT_OK;
}
