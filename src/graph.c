/* graph.c - a segment's graph: recorded from the queue (planned, built,
   instantiated, or the exec updated in place), patched, rebuilt, replayed,
   launched (its device time sampled), and a call's replayed segments
   launched when something needs them to have run (deferred launches, as one
   graph where the path allows); the queue run eagerly otherwise.  The
   bottom of the visit path: visit.c calls it, it calls the backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "predict.h"
#include "cond.h"
#include "deps.h"
#include "life.h"
#include "graph.h"

/* Launch i of n's graph was patched: its values may differ from the
   recording's, which the lane replays, so the lane leaves it to the core. */
static inline void lane_patched(gt_node *n, int i) { if (n->pred.lrec) n->pred.lrec[i].cfg = 0; }

static int scratch(gt_tree *t, int n) {
  if (GT_GROW(t->scratch, t->scratchcap, n) || GT_GROW(t->pscratch, t->pscratchcap, n)) return gt_err(t->rt, GT_E_NOMEM);
  return GT_OK;
}

/* A sampled launch's device time, once it has run (without waiting for it):
   into n's gpu_us, which the advisor reads (tree:advise() answers whether
   a step is launch-bound from the run's own launches, not a relaunch). */
void gt_graph_gpu_harvest(gt_backend *be, gt_node *n) {
  double us;
  if (!n->gev_pending || be->event_ready_us(be, n->gev[0], n->gev[1], &us) == GT_BREFUSED) return;
  n->gev_pending = 0;
  n->gpu_us_sum += us;   /* (an error reading it: no sample) */
  n->gpu_n++;
}

/* Whether n's launch now is timed: its first 8, then one in 256 (two event
   records on the stream: a launch's host cost grows by about theirs). */
static int gpu_sampled(gt_node *n) { return n->gpu_n < 8 || (n->visits & 255) == 0; }

/* Whether n has its two events (made on its first sampled launch). */
static int gpu_events(gt_backend *be, gt_node *n) {
  for (int i = 0; i < 2; i++) if (!n->gev[i] && be->event_create(be, &n->gev[i]) != GT_BOK) return 0;
  return 1;
}

int gt_graph_launch(gt_tree *t, gt_node *n) {
  gt_backend *be = &t->rt->be;
  if (!t->rt->profile) {
    if (n->gev_pending) gt_graph_gpu_harvest(be, n);
    int timed = !n->gev_pending && gpu_sampled(n) && gpu_events(be, n) && be->event_record(be, n->gev[0]) == GT_BOK;
    if (be->graph_launch(be, n->graph) != GT_BOK) return gt_err_be(t->rt, GT_E_GRAPH_LAUNCH);
    if (timed && be->event_record(be, n->gev[1]) == GT_BOK) n->gev_pending = 1;
    return GT_OK;
  }
  gt_bevent *e0 = NULL, *e1 = NULL;
  double us = 0;
  int st = be->event_create(be, &e0) || be->event_create(be, &e1) || be->event_record(be, e0) ||
           be->graph_launch(be, n->graph) || be->event_record(be, e1) || be->event_elapsed_us(be, e0, e1, &us);
  if (e0) be->event_destroy(be, e0);
  if (e1) be->event_destroy(be, e1);
  if (st) return gt_err_be(t->rt, GT_E_GRAPH_LAUNCH);
  n->gpu_us_sum += us;
  n->gpu_n++;
  return GT_OK;
}

int gt_graph_run_eager(gt_tree *t, gt_node *n) {
  gt_backend *be = &t->rt->be;
  double t0 = t->rt->profile ? gt_now_us() : 0;
  int at;
  if (gt_cond_run_queue(be, &t->q, &at) != GT_BOK) {   /* a cond is decided on the host here */
    const gt_qlaunch *l = at >= 0 ? &t->q.l[at] : NULL;
    return gt_fail_be(t->rt, l ? gt_launch_what(l) : "copy");
  }
  if (t->rt->profile && n) {
    if (be->sync(be) != GT_BOK) return gt_fail_be(t->rt, NULL);
    n->gpu_us_sum += gt_now_us() - t0;
    n->gpu_n++;
  }
  return GT_OK;
}

/* Record n: plan, build, instantiate (or update the exec in place), launch.
   Returns what ran: GT_V_RECORD, GT_V_UPDATE, or GT_V_EAGER when the graph
   build failed (n runs eagerly from now on); GT_ERR on failure. */
int gt_graph_record(gt_tree *t, gt_node *n, int first, int update) {
  gt_backend *be = &t->rt->be;
  double t0 = gt_now_us();
  uint64_t *oldplan = NULL, oldend = n->plan_end;
  int oldnck = n->nckpt;
  if (update && n->plan) {
    oldplan = malloc((n->nnew ? n->nnew : 1) * sizeof *oldplan);
    if (oldplan) memcpy(oldplan, n->plan, n->nnew * sizeof *oldplan);
  }
  if (gt_plan_node(t, n, first)) { free(oldplan); return GT_ERR; }
  if (update && (!oldplan || oldend != n->plan_end || oldnck != n->nckpt ||
                 (n->nnew && memcmp(oldplan, n->plan, n->nnew * sizeof *oldplan))))
    gt_life_drop_below(t, n);
  free(oldplan);
  gt_gnode *g = NULL;
  int *deps = NULL;
  void **ptrs = NULL;
  if (gt_deps_nodes(t, n, &g, &deps, &ptrs)) return GT_ERR;
  double t1 = gt_now_us();
  int st = GT_BOK;
  if (update && n->graph) {
    st = be->graph_update(be, n->graph, g, t->q.n);
    if (st == GT_BREFUSED) { be->graph_destroy(be, n->graph); n->graph = NULL; t->recorded--; st = GT_BOK; }
  }
  if (st == GT_BOK && !n->graph) {
    st = be->graph_create(be, g, t->q.n, &n->graph);
    if (st == GT_BOK) t->recorded++;
  }
  double t2 = gt_now_us();
  free(g); free(deps); free(ptrs);
  n->gver++;
  if (st != GT_BOK) {                 /* a failed build: the node runs eagerly from now on */
    char why[GT_ERRLEN + 32];
    snprintf(why, sizeof why, "graph build failed: %s", be->err);
    free(n->skip);
    n->skip = gt_strdup(why);
    n->graph = NULL;
    return gt_graph_run_eager(t, n) ? GT_ERR : GT_V_EAGER;
  }
  free(n->launches);
  n->launches = malloc((t->q.n ? t->q.n : 1) * sizeof *n->launches);
  if (!n->launches) return gt_err(t->rt, GT_E_NOMEM);
  if (t->q.n) memcpy(n->launches, t->q.l, t->q.n * sizeof *n->launches);   /* (an empty queue may have no array) */
  if (gt_cursor_save(t, n, first)) return GT_ERR;
  if (gt_graph_launch(t, n)) return GT_ERR;
  n->instantiate_us = t2 - t1;
  n->record_us = gt_now_us() - t0;
  return update ? GT_V_UPDATE : GT_V_RECORD;
}

/* Notes that this call patched launch i of the node at path index d (the
   floor repeats the call's patches: tree:floor's patch). */
static void note_patch(gt_tree *t, int d, int i) {
  if (GT_GROW(t->patched, t->patchedcap, 2 * t->npatched + 2)) return;   /* (only the floor reads it) */
  t->patched[2 * t->npatched] = d;
  t->patched[2 * t->npatched + 1] = i;
  t->npatched++;
}

int gt_graph_patch(gt_tree *t, int d, gt_node *n, int i) {
  const gt_qlaunch *l = &n->launches[i];
  lane_patched(n, i);
  void *ptrs[GT_MAX_PARAMS];
  gt_gnode g;
  gt_launch_gnode(l, n->argvals + l->arg0, ptrs, &g);
  n->gver++;
  int st = t->rt->be.graph_set_kernel(&t->rt->be, n->graph, i, &g);
  if (st == GT_BREFUSED) return 1;     /* (a node in a conditional body the driver will not patch) */
  if (st != GT_BOK) return gt_err_be(t->rt, GT_E_GRAPH_PATCH);
  if (d >= 0) note_patch(t, d, i);
  return GT_OK;
}

/* n's exec set to the nodes g (count of them) as a whole: an update, else a
   new exec (a moved copy, a patch the driver refused). */
static int update_exec(gt_tree *t, gt_node *n, const gt_gnode *g, int count) {
  gt_backend *be = &t->rt->be;
  n->gver++;
  int st = be->graph_update(be, n->graph, g, count);
  if (st == GT_BREFUSED) {
    be->graph_destroy(be, n->graph);
    st = be->graph_create(be, g, count, &n->graph);
  }
  if (st != GT_BOK) { n->graph = NULL; t->recorded--; return gt_fail_be(t->rt, "graph update"); }
  return GT_OK;
}

/* n's graph brought to the values n->argvals holds, all of its launches at
   once (a keyed hit's moved copy, a patch the driver refused), from its
   recording (launches and arguments as queued), as a path's one graph is
   built. */
int gt_graph_rebuild(gt_tree *t, gt_node *n) {
  if (!n->launches || !n->pred.qargs || n->pred.nsig != n->nlaunch)
    return gt_fail(t->rt, "tree '%s': a segment's graph cannot be rebuilt without its recording", t->name);
  gt_queue q = { .l = n->launches, .n = n->nlaunch, .args = n->pred.qargs, .nargs = n->nargvals };
  gt_gnode *g = calloc(n->nlaunch ? n->nlaunch : 1, sizeof *g);
  void **ptrs = malloc((n->nargvals ? n->nargvals : 1) * sizeof *ptrs);
  int *deps = NULL, st = g && ptrs ? GT_OK : GT_ERR;
  for (int i = 0; st == GT_OK && i < n->nlaunch; i++)
    gt_launch_gnode(&n->launches[i], n->argvals + n->launches[i].arg0, ptrs + n->launches[i].arg0, &g[i]);
  if (st == GT_OK && gt_deps_build(&q, n->argvals, g, &deps)) st = GT_ERR;
  if (st != GT_OK) gt_err(t->rt, GT_E_NOMEM);
  else st = update_exec(t, n, g, n->nlaunch);
  free(g); free(ptrs); free(deps);
  return st;
}

/* Replay n: bind the new buffers to the plan, patch changed arguments, launch.
   GT_V_REPLAY, or GT_V_UPDATE when a moved copy needed a whole-graph update. */
int gt_graph_replay(gt_tree *t, gt_node *n, int first) {
  gt_queue *q = &t->q;
  gt_backend *be = &t->rt->be;
  for (int i = 0; i < n->nnew; i++) t->bufs[first + i]->addr = t->pool.base + n->plan[i];
  if (scratch(t, q->nargs)) return GT_ERR;
  uint64_t *vals = t->scratch;
  int refused = 0, ndirty = gt_cursor_dirty(t, n), all = ndirty < 0;
  for (int d = 0; d < (all ? q->n : ndirty); d++) {
    int i = all ? d : t->pred.cdirty[d];
    const gt_qlaunch *l = &q->l[i];
    uint64_t *now = vals + l->arg0, *was = n->argvals + l->arg0;
    gt_queue_resolve(q, i, now);
    if (!memcmp(now, was, l->nargs * sizeof *now)) continue;
    if (l->kind != GT_GN_KERNEL && !(gt_kind_is_cond(l->kind) && l->nargs)) { refused = 1; continue; }   /* (a cond's p is patched too) */
    gt_gnode g;
    gt_launch_gnode(l, now, t->pscratch, &g);
    n->gver++;
    int pst = be->graph_set_kernel(be, n->graph, i, &g);
    if (pst == GT_BREFUSED) { refused = 1; continue; }   /* (a node in a conditional body the driver will not patch) */
    if (pst != GT_BOK) return gt_err_be(t->rt, GT_E_GRAPH_PATCH);
    memcpy(was, now, l->nargs * sizeof *now);
    lane_patched(n, i);
    note_patch(t, t->npath, i);
  }
  if (refused) {                      /* a copy node moved: update the whole exec */
    gt_lane_sync(t);
    gt_gnode *g = NULL;
    int *deps = NULL;
    void **ptrs = NULL;
    if (gt_deps_nodes(t, n, &g, &deps, &ptrs)) return GT_ERR;
    int st = update_exec(t, n, g, q->n);
    free(g); free(deps); free(ptrs);
    if (st) return GT_ERR;
  }
  /* launched when something needs it to have run (gt_graph_launch_pending,
     which finds it at the path's end: room for it there first); profiled:
     each graph launched and timed at its segment's end */
  if (t->rt->profile || GT_GROW(t->path, t->pathcap, t->npath + 1)) {
    if (gt_graph_launch_pending(t) || gt_graph_launch(t, n)) return GT_ERR;   /* (in order) */
  } else t->npend++;
  return refused ? GT_V_UPDATE : GT_V_REPLAY;
}

/* -- Deferred launches ------------------------------------------------------
   A replayed segment's graph is launched when something needs it to have
   run, not at its segment's end: before a segment that runs otherwise
   (warmup, record, eager), before the host reads or writes device memory or
   waits for the device (gt_pending: gt_sync, gt_buf_read, gt_buf_write),
   and at the call's end.  Nothing can tell the difference (the device runs
   one stream in order), and a call whose every segment replayed launches
   them together: as one graph (gt_pathg, kept on the path's last node: the
   path is its ancestry), as keyed.c does for keyed hits.  The branch
   scenario: two graph launches a call become one. */

int gt_graph_launch_pending(gt_tree *t) {
  int np = t->npend;
  if (!np) return GT_OK;
  if (t->dry) return gt_fail(t->rt, "a traced call runs nothing on the device (it reads the device mid-call)");
  t->npend = 0;
  gt_node *const *p = t->path + t->npath - np;
  gt_pathg *pg = &p[np - 1]->pg;
  gt_backend *be = &t->rt->be;
  int whole = np == t->npath && np > 1;
  if (whole && gt_pathg_ok(pg, p, np)) {
    if (be->graph_launch(be, pg->g) != GT_BOK) return gt_err_be(t->rt, GT_E_GRAPH_LAUNCH);
    t->pfused++;
  } else {
    for (int i = 0; i < np; i++) if (gt_graph_launch(t, p[i])) return GT_ERR;
    if (whole) gt_pathg_note(be, pg, p, np);
  }
  /* what was released waits for the launches still queued too (before a
     segment's visit, they read its buffers: the visit settles after them) */
  if (!t->q.n && !t->rt->lane.lazy) gt_life_settle(t->rt);
  return GT_OK;
}
