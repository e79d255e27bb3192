/* tree.c - graph trees: calls, segment nodes, choosing and running a visit (warmup, record, replay, eager).

   The replay path of one call: Lua's op calls gt_launch_tensors (kernel.c)
   with the tensors and scalars its launcher passes; inside
   a tree call it is appended to the segment's queue and gt_cursor_push
   (key.c) compares it with what the predicted node recorded at that
   position.  At a sync point or the call's end Lua calls gt_tree_flush
   (here): gt_cursor_hit gives the node when everything matched (else
   gt_segment_key finds it among the parent's children), choose_mode picks
   the visit, visit() runs it (replay(): bind the new buffers to the plan,
   patch the launches the cursor noted as changed, launch the graph),
   and advance() moves the cursor under the node for the next segment. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "key.h"
#include "predict.h"

/* -- Creating and freeing ------------------------------------------------- */

gt_tree *gt_tree_new(gt_runtime *rt, const gt_tree_opts *opts) {
  gt_tree *t = calloc(1, sizeof *t);
  if (!t) { gt_fail(rt, "out of host memory"); return NULL; }
  t->rt = rt;
  rt->launch_pending = gt_tree_launch_pending;     /* (gt_pending's: runtime.c does not call up into tree.c) */
  t->opts = *opts;
  t->name = gt_strdup(opts->name && *opts->name ? opts->name : "tree");
  t->where = gt_strdup(opts->where);
  t->opts.name = t->name;
  t->opts.where = t->where;
  t->refs = 1;
  t->gen = gt_gen_next();
  t->root.id = -1;
  t->root.depth = -1;
  t->nkept = -1;
  t->ndpath = -1;
  int nomem = !t->name || !t->where;
  if (nomem || gt_pool_init_growing(&t->pool, &rt->be, getenv("GTLUA_POOL_RESERVE"), rt->err) != GT_OK) {
    free(t->name); free(t->where); free(t);
    if (nomem) gt_fail(rt, "out of host memory");
    return NULL;
  }
  return t;
}

static void drop_graph(gt_tree *t, gt_node *n) {
  gt_pathg_drop(&t->rt->be, &n->pg);
  if (n->graph) { t->rt->be.graph_destroy(&t->rt->be, n->graph); n->graph = NULL; n->gver++; t->recorded--; }
  free(n->argvals); free(n->plan); free(n->ckpt); free(n->launches);
  n->argvals = NULL; n->plan = NULL; n->ckpt = NULL; n->launches = NULL; n->nckpt = n->nargvals = 0;
  gt_cursor_forget(n);
}

/* Drops the graphs below n: their plans started from n's old checkpoint. */
static void drop_below(gt_tree *t, gt_node *n) {
  for (int i = 0; i < n->nkids; i++) { drop_graph(t, n->kids[i]); drop_below(t, n->kids[i]); }
}

/* The call's buffers live in the slab: the next call reuses them. */
static void release_call_bufs(gt_tree *t) { t->lastn = t->nbufs; t->nbufs = 0; }

static void free_node(gt_tree *t, gt_node *n) {
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
static void settle(gt_runtime *rt) {
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

/* Lua's tree object was collected: graphs, nodes and memory go now (during
   another tree's call, once its queue has run: settle); the struct itself
   stays while tensors still point at it (they are stale from now on: a new
   generation), and goes with the last (gt_tree_unref). */
void gt_tree_free(gt_tree *t) {
  gt_runtime *rt = t->rt;
  if (rt->active == t) gt_tree_abort(rt);
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
  release_call_bufs(t);
  for (int i = 0; i < t->nstage; i++) if (t->stage[i]) gt_buf_unref(t->stage[i]);
  t->nstage = 0;
  if (t->keyed) t->keyed_free(t);
  if (t->floor_free) t->floor_free(t);
  free(t->fpaths);
  for (int i = 0; i < t->nnodes; i++) free_node(t, t->nodes[i]);
  t->nnodes = 0;
  free(t->root.kids);
  for (int i = 0; i < t->nskip; i++) free(t->skip[i].reason);
  free(t->skip); free(t->warn); free(t->nodes); free(t->bufs); free(t->segstart);
  free(t->path); free(t->lastpath); free(t->kept); free(t->dpath); free(t->dvals); free(t->dreach); gt_tree_dry_release(t); free(t->dryb); free(t->dryof); free(t->scratch); free(t->pscratch); free(t->stage); free(t->pinned); free(t->cdirty); free(t->patched); free(t->kfirst); free(t->cfirst);
  free(t->rels);
  gt_queue_free(&t->q);
  gt_slab_give(t);
  gt_pool_destroy(&t->pool);
  gt_tree_unref(t);
}

const char *gt_tree_name(gt_tree *t) { return t->name; }
const char *gt_tree_where(gt_tree *t) { return t->where; }
gt_tree *gt_tree_active(gt_runtime *rt) { return rt->active; }

static void warn(gt_tree *t, const char *msg) {
  free(t->warn);
  t->warn = gt_strdup(msg);
  t->nwarn++;
}

int gt_tree_warnings(gt_tree *t, const char **last) {
  if (last) *last = t->warn;
  return t->nwarn;
}

void gt_tree_note_skip(gt_tree *t, const char *reason) {
  t->skips++;
  for (int i = 0; i < t->nskip; i++)
    if (!strcmp(t->skip[i].reason, reason)) { t->skip[i].count++; return; }
  if (GT_GROW(t->skip, t->skipcap, t->nskip + 1)) return;
  t->skip[t->nskip++] = (gt_skip){ gt_strdup(reason), 1 };
}

/* -- Calls --------------------------------------------------------------- */

/* Whether call number `call` times its host time: every call for the first
   64, then one in 16 (a clock read costs as much as a few launches'
   bookkeeping; it matters in a keyed call's microsecond). */
static int timed_call(int call) { return call <= 64 || !(call & 15); }

int gt_tree_begin(gt_runtime *rt, gt_tree *t, const char *eager) {
  if (gt_tree_begin_timed(rt, t, 1)) return GT_ERR;
  if (gt_tree_begin_body(t)) { gt_tree_abort(rt); return GT_ERR; }
  t->eager_call = eager != NULL;
  if (eager) snprintf(t->eager_why, sizeof t->eager_why, "%s", eager);
  t->cmiss |= t->eager_call;
  gt_lane_start(t);
  return GT_OK;
}

/* The start of a call, gt_tree_begin's and a keyed hit's; always: time it
   whatever the sampling says (else history's cpu_us is -1 on an untimed
   call).  What only a body run needs is gt_tree_begin_body's: a keyed hit
   launches its path with neither the cursor nor a segment, and after a
   long step the host's caches are cold, so a hit pays for each line it
   touches. */
int gt_tree_begin_timed(gt_runtime *rt, gt_tree *t, int always) {
  if (rt->active)
    return gt_fail(rt, "tree '%s' was called inside a call of tree '%s': tree calls cannot nest. In a call of '%s', "
                   "call the plain function that '%s' wraps (its kernels then join the graphs of '%s'), or call '%s' "
                   "before or after '%s'", t->name, rt->active->name, rt->active->name, t->name, rt->active->name,
                   t->name, rt->active->name);
  if (t->closed) return gt_fail(rt, "tree '%s' was freed", t->name);
  gt_lane_close(rt);
  release_call_bufs(t);
  t->prev_gen = t->gen;
  t->gen = gt_gen_next();
  gt_pool_clear(&t->pool);
  t->state_node = NULL;
  t->cur = NULL;
  t->cur_planned = 0;
  t->depth = 0;
  t->npath = 0;
  t->npatched = 0;
  t->nrels = 0;
  t->eager_call = 0;
  t->npend = 0;
  t->calls++;
  t->at_begin = (gt_call_info){ t->calls, t->warmups, t->records, t->replays, t->eager, t->updates, 0, 0, 0 };
  t->begin_us = always || timed_call(t->calls) ? gt_fast_us() : -1;
  rt->active = t;
  return GT_OK;
}

/* The begun call's body is to run: the cursor at the root, the first
   segment, this call's staging slots free.  Fails out of host memory only
   (the caller aborts the call). */
int gt_tree_begin_body(gt_tree *t) {
  gt_cursor_start(t, &t->root);
  if (t->nstage) memset(t->pinned, 0, t->nstage);
  if (GT_GROW(t->segstart, t->segcap, 1)) return gt_fail(t->rt, "out of host memory");
  t->segstart[0] = 0;
  return GT_OK;
}

int32_t gt_tree_gen(gt_tree *t) { return t->gen; }
int gt_tree_nbufs(gt_tree *t) { return t->nbufs; }
int32_t gt_tree_prev_gen(gt_tree *t) { return t->prev_gen; }

int32_t gt_tree_failed_gen(gt_tree *t) { return t->failed_gen; }
int32_t gt_tree_trimmed_gen(gt_tree *t) { return t->trimmed_gen; }
int gt_tree_limit_hits(const gt_tree *t) { return t->limit_hit; }

/* -- Graphs -------------------------------------------------------------- */

static int scratch(gt_tree *t, int n) {
  if (GT_GROW(t->scratch, t->scratchcap, n) || GT_GROW(t->pscratch, t->pscratchcap, n)) return gt_fail(t->rt, "out of host memory");
  return GT_OK;
}

/* A sampled launch's device time, once it has run (without waiting for it):
   into n's gpu_us, which the advisor reads (tree:advise() answers whether
   a step is launch-bound from the run's own launches, not a relaunch). */
void gt_node_gpu_harvest(gt_backend *be, gt_node *n) {
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

int gt_tree_launch_graph(gt_tree *t, gt_node *n) {
  gt_backend *be = &t->rt->be;
  if (!t->rt->profile) {
    if (n->gev_pending) gt_node_gpu_harvest(be, n);
    int timed = !n->gev_pending && gpu_sampled(n) && gpu_events(be, n) && be->event_record(be, n->gev[0]) == GT_BOK;
    if (be->graph_launch(be, n->graph) != GT_BOK) return gt_fail_be(t->rt, "graph launch");
    if (timed && be->event_record(be, n->gev[1]) == GT_BOK) n->gev_pending = 1;
    return GT_OK;
  }
  gt_bevent *e0 = NULL, *e1 = NULL;
  double us = 0;
  int st = be->event_create(be, &e0) || be->event_create(be, &e1) || be->event_record(be, e0) ||
           be->graph_launch(be, n->graph) || be->event_record(be, e1) || be->event_elapsed_us(be, e0, e1, &us);
  if (e0) be->event_destroy(be, e0);
  if (e1) be->event_destroy(be, e1);
  if (st) return gt_fail_be(t->rt, "graph launch");
  n->gpu_us_sum += us;
  n->gpu_n++;
  return GT_OK;
}

static int run_eager(gt_tree *t, gt_node *n) {
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
static int record(gt_tree *t, gt_node *n, int first, int update) {
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
    drop_below(t, n);
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
    return run_eager(t, n) ? GT_ERR : GT_V_EAGER;
  }
  free(n->launches);
  n->launches = malloc((t->q.n ? t->q.n : 1) * sizeof *n->launches);
  if (!n->launches) return gt_fail(t->rt, "out of host memory");
  if (t->q.n) memcpy(n->launches, t->q.l, t->q.n * sizeof *n->launches);   /* (an empty queue may have no array) */
  if (gt_cursor_save(t, n, first)) return GT_ERR;
  if (gt_tree_launch_graph(t, n)) return GT_ERR;
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

int gt_tree_patch_node(gt_tree *t, int d, gt_node *n, int i) {
  const gt_qlaunch *l = &n->launches[i];
  gt_lane_patched(n, i);
  void *ptrs[GT_MAX_PARAMS];
  gt_gnode g;
  gt_launch_gnode(l, n->argvals + l->arg0, ptrs, &g);
  n->gver++;
  int st = t->rt->be.graph_set_kernel(&t->rt->be, n->graph, i, &g);
  if (st == GT_BREFUSED) return 1;     /* (a node in a conditional body the driver will not patch) */
  if (st != GT_BOK) return gt_fail_be(t->rt, "graph patch");
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
int gt_tree_rebuild_node(gt_tree *t, gt_node *n) {
  if (!n->launches || !n->qargs || n->nsig != n->nlaunch)
    return gt_fail(t->rt, "tree '%s': a segment's graph cannot be rebuilt without its recording", t->name);
  gt_queue q = { .l = n->launches, .n = n->nlaunch, .args = n->qargs, .nargs = n->nargvals };
  gt_gnode *g = calloc(n->nlaunch ? n->nlaunch : 1, sizeof *g);
  void **ptrs = malloc((n->nargvals ? n->nargvals : 1) * sizeof *ptrs);
  int *deps = NULL, st = g && ptrs ? GT_OK : GT_ERR;
  for (int i = 0; st == GT_OK && i < n->nlaunch; i++)
    gt_launch_gnode(&n->launches[i], n->argvals + n->launches[i].arg0, ptrs + n->launches[i].arg0, &g[i]);
  if (st == GT_OK && gt_deps_build(&q, n->argvals, g, &deps)) st = GT_ERR;
  if (st != GT_OK) gt_fail(t->rt, "out of host memory");
  else st = update_exec(t, n, g, n->nlaunch);
  free(g); free(ptrs); free(deps);
  return st;
}

/* Replay n: bind the new buffers to the plan, patch changed arguments, launch.
   GT_V_REPLAY, or GT_V_UPDATE when a moved copy needed a whole-graph update. */
static int replay(gt_tree *t, gt_node *n, int first) {
  gt_queue *q = &t->q;
  gt_backend *be = &t->rt->be;
  for (int i = 0; i < n->nnew; i++) t->bufs[first + i]->addr = t->pool.base + n->plan[i];
  if (scratch(t, q->nargs)) return GT_ERR;
  uint64_t *vals = t->scratch;
  int refused = 0, ndirty = gt_cursor_dirty(t, n), all = ndirty < 0;
  for (int d = 0; d < (all ? q->n : ndirty); d++) {
    int i = all ? d : t->cdirty[d];
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
    if (pst != GT_BOK) return gt_fail_be(t->rt, "graph patch");
    memcpy(was, now, l->nargs * sizeof *now);
    gt_lane_patched(n, i);
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
  /* launched when something needs it to have run (gt_tree_launch_pending,
     which finds it at the path's end: room for it there first); profiled:
     each graph launched and timed at its segment's end */
  if (t->rt->profile || GT_GROW(t->path, t->pathcap, t->npath + 1)) {
    if (gt_tree_launch_pending(t) || gt_tree_launch_graph(t, n)) return GT_ERR;   /* (in order) */
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

int gt_tree_launch_pending(gt_tree *t) {
  int np = t->npend;
  if (!np) return GT_OK;
  if (t->dry) return gt_fail(t->rt, "a traced call runs nothing on the device (it reads the device mid-call)");
  t->npend = 0;
  gt_node *const *p = t->path + t->npath - np;
  gt_pathg *pg = &p[np - 1]->pg;
  gt_backend *be = &t->rt->be;
  int whole = np == t->npath && np > 1;
  if (whole && gt_pathg_ok(pg, p, np)) {
    if (be->graph_launch(be, pg->g) != GT_BOK) return gt_fail_be(t->rt, "graph launch");
    t->pfused++;
  } else {
    for (int i = 0; i < np; i++) if (gt_tree_launch_graph(t, p[i])) return GT_ERR;
    if (whole) gt_pathg_note(be, pg, p, np);
  }
  /* what was released waits for the launches still queued too (before a
     segment's visit, they read its buffers: the visit settles after them) */
  if (!t->q.n && !t->rt->lane.lazy) settle(t->rt);
  return GT_OK;
}

/* -- Segment end --------------------------------------------------------- */

static gt_node *find_kid(gt_node *p, uint64_t key, int nostatic) {
  for (int i = 0; i < p->nkids; i++)
    if ((nostatic ? p->kids[i]->key_nostatic : p->kids[i]->key) == key) return p->kids[i];
  return NULL;
}

/* The first kernel of the queue that cannot be graphed, or NULL. */
static const gt_kernel *ungraphable(const gt_queue *q) {
  for (int i = 0; i < q->n; i++) if (q->l[i].k && !q->l[i].k->graphable) return q->l[i].k;
  return NULL;
}

static gt_node *new_node(gt_tree *t, gt_node *parent, gt_segkey key) {
  gt_node *n = calloc(1, sizeof *n);
  if (!n || GT_GROW(parent->kids, parent->kidcap, parent->nkids + 1) || GT_GROW(t->nodes, t->nodecap, t->nnodes + 1)) {
    free(n);
    gt_fail(t->rt, "out of host memory");
    return NULL;
  }
  n->id = t->nnodes;
  n->parent = parent;
  n->depth = parent->depth + 1;
  n->key = key.full;
  n->key_nostatic = key.nostatic;
  n->cut_fast = -1;                   /* (its first visit asks Lua for its cut site) */
  n->nlaunch = t->q.n;
  const gt_kernel *k = ungraphable(&t->q);
  if (k) {
    char why[160];
    snprintf(why, sizeof why, "kernel '%s' is not graphable", k->name);
    n->skip = gt_strdup(why);
  }
  gt_explain_node(t, n);              /* before it joins its siblings */
  parent->kids[parent->nkids++] = n;
  t->nodes[t->nnodes++] = n;
  return n;
}

static int next_segment(gt_tree *t);

/* A call beyond the last bucket: segments run eagerly, with no node. */
static int flush_eager_call(gt_tree *t, int first) {
  gt_queue_note_writes(t);
  if (gt_plan_run(t, first) || run_eager(t, NULL)) return GT_ERR;
  t->eager++;
  gt_tree_note_skip(t, t->eager_why);   /* (per visit, as every skip) */
  t->cur_planned = 0;
  return next_segment(t);
}

/* The visit a segment gets, as a pure function of what is known at its end
   (tinygrad's counter ladder): n, the node found (NULL: none); upd, a
   sibling of the same topology (another static address), looked up only
   when n is NULL and the parent's memory is planned (parent_ok); graphable:
   no launch of the queue is of a kernel that cannot be graphed. */
static int choose_mode(const gt_node *n, const gt_node *upd, int parent_ok, int graphable, const gt_tree_opts *o,
                       int recorded) {
  if (n && n->graph && parent_ok) return GT_V_REPLAY;
  if (n && n->skip) return parent_ok ? GT_V_PLANNED : GT_V_EAGER;
  if (!n && upd && upd->graph) return GT_V_UPDATE;
  if (recorded >= o->max_recordings && !(n && n->graph)) return GT_V_LIMIT;   /* it can never record: eager from its first visit */
  if (!parent_ok || (n ? n->warmups : 0) < o->warmup) return GT_V_WARMUP;
  return graphable ? GT_V_RECORD : GT_V_PLANNED;
}

/* A skipped node on planned memory: bound to its plan as a replay would be
   (or planned now), launched one by one; its children may still record. */
static int run_planned(gt_tree *t, gt_node *n, int first) {
  if (!n->plan) return gt_plan_node(t, n, first) ? GT_ERR : run_eager(t, n);
  for (int i = 0; i < n->nnew; i++) t->bufs[first + i]->addr = t->pool.base + n->plan[i];
  t->state_node = n;
  return run_eager(t, n);
}

/* Past max_recordings: an error, or (on_limit = "eager") an eager run with a warning once. */
static int run_past_limit(gt_tree *t, gt_node *n, int first) {
  t->limit_hit++;
  if (t->opts.on_limit_error == 1)
    return gt_fail(t->rt, "tree '%s' (%s): a new path needs a recording but max_recordings = %d are held; raise "
                   "max_recordings, use buckets, or set on_limit = \"eager\"", t->name, t->where, t->opts.max_recordings);
  if (t->limit_hit == 1) {
    char msg[512];
    snprintf(msg, sizeof msg, t->opts.on_limit_error == 2
             ? "tree '%s' (%s) reached max_recordings = %d; a new path runs eagerly, then the least recently used "
               "recording is dropped so that it records (on_limit = \"evict\"; see tree:stats().evictions)"
             : "tree '%s' (%s) reached max_recordings = %d; new paths run eagerly (see tree:stats().skips)",
             t->name, t->where, t->opts.max_recordings);
    warn(t, msg);
  }
  return gt_plan_run(t, first) ? GT_ERR : run_eager(t, n);
}

static void count_eager(gt_tree *t, gt_node *n, const char *why) {
  n->eager++; t->eager++; gt_tree_note_skip(t, why);
  if (!n->skip) n->eager_why = why;   /* (a literal: count_eager's callers pass a reason that lives) */
}

/* Runs the chosen visit; returns what ran (GT_V_*: a failed graph build runs
   eagerly) or GT_ERR.  Counters follow what ran. */
static int visit(gt_tree *t, gt_node *n, int mode, int first, double t0) {
  int ran = mode;
  switch (mode) {
  case GT_V_REPLAY:
    if ((ran = replay(t, n, first)) == GT_ERR) return GT_ERR;
    if (t->dry) {}                    /* (a traced call, dropped at its end: not counted) */
    else if (ran == GT_V_UPDATE) { n->updates++; t->updates++; }
    else {
      n->replays++; t->replays++;
      if (t0 > 0) { n->replay_us_sum += gt_fast_us() - t0; n->replay_n++; }
    }
    t->state_node = n;
    return ran;
  case GT_V_RECORD: case GT_V_UPDATE:
    if ((ran = record(t, n, first, mode == GT_V_UPDATE)) == GT_ERR) return GT_ERR;
    if (ran == GT_V_EAGER) count_eager(t, n, "graph build failed");
    else if (ran == GT_V_UPDATE) { n->updates++; t->updates++; }
    else { n->records++; t->records++; }
    return ran;
  case GT_V_PLANNED:
    if (run_planned(t, n, first)) return GT_ERR;
    count_eager(t, n, n->skip);
    return ran;
  case GT_V_LIMIT:
    if (run_past_limit(t, n, first)) return GT_ERR;
    count_eager(t, n, "max_recordings");
    return GT_V_EAGER;
  default:                            /* GT_V_WARMUP, GT_V_EAGER: memory planned for this run only */
    if (gt_plan_run(t, first) || run_eager(t, n)) return GT_ERR;
    if (mode == GT_V_WARMUP) { n->warmups++; t->warmups++; }
    else count_eager(t, n, n->skip);
    return ran;
  }
}

/* The next segment begins after n, which ran as `ran`: children may record
   when n's memory followed a plan. */
static int advance(gt_tree *t, gt_node *parent, gt_node *n, int ran) {
  n->visits += !t->dry;
  n->last_call = (uint64_t)t->calls;
  if (parent->last_kid) parent->last_kid->after = n;   /* (a cycle of paths, e.g. alternating branches, is predicted) */
  parent->last_kid = n;
  gt_cursor_start(t, n);
  if (!GT_GROW(t->path, t->pathcap, t->npath + 1)) t->path[t->npath++] = n;
  t->cur = n;
  t->cur_planned = ran == GT_V_REPLAY || ran == GT_V_UPDATE || ran == GT_V_RECORD || ran == GT_V_PLANNED;
  return next_segment(t);
}

static int next_segment(gt_tree *t) {
  t->depth++;
  if (GT_GROW(t->segstart, t->segcap, t->depth + 1)) return gt_fail(t->rt, "out of host memory");
  t->segstart[t->depth] = t->nbufs;
  t->nrels = 0;
  gt_queue_clear(&t->q);
  if (!t->npend) settle(t->rt);   /* (memory released in the segment waits for its graph's launch) */
  gt_lane_start(t);
  return GT_OK;
}

/* Ends the segment being queued: its node from the cursor (the replay path)
   or by key, the visit chosen, run, and the cursor advanced. */
int gt_tree_flush(gt_runtime *rt, int cut) {
  gt_tree *t = rt->active;           /* (the lane's launches are queued below only if the visit reads them) */
  if (!t) return GT_OK;
  int first = t->segstart[t->depth];
  if (t->lane_lost) { int v = t->lane_lost; t->lane_lost = 0; return v == 2 ? GT_ERR : gt_fail(rt, "out of host memory"); }
  if (t->q.n + rt->lane.lazy == 0 && t->nbufs == first && t->nrels == 0) return GT_OK;
  if (t->eager_call) return flush_eager_call(t, first);
  if (t->dry && gt_tree_dry_note(t)) return GT_ERR;   /* (a traced call: what reached its arguments) */
  /* a replay's host time is sampled (every call for the first 64, then one
     in 16): a clock read costs as much as a few launches' bookkeeping */
  double t0 = timed_call(t->calls) ? gt_fast_us() : 0;
  gt_node *parent = t->cur ? t->cur : &t->root;
  if (rt->lane.lazy) gt_lane_check(t);            /* (the lazy launches' external inputs: the cursor's) */
  gt_node *n = gt_cursor_hit(t, first), *upd = NULL;
  int hit = n != NULL;
  if (hit && gt_verify_lane > 0 && gt_predict_verify(t, n)) return GT_ERR;   /* (GTLUA_VERIFY_LANE) */
  if (!n) gt_lane_sync(t);                        /* off the cursor: keys read the queue */
  gt_segkey key = { n ? n->key : 0, 0 };
  if (!n) n = find_kid(parent, key.full = gt_segment_key(t, 0), 0);   /* off the cursor: by key */
  int parent_ok = !t->cur || t->cur_planned;
  if (!n) key.nostatic = gt_segment_key(t, 1);    /* the topology: needed only off the replay path */
  if (!n && parent_ok) upd = find_kid(parent, key.nostatic, 1);
  /* back to a key an update replaced (two shapes of one byte count, two or
     three weights, in turn): a node of its own, else every call would update */
  for (int i = 0; upd && i < 4; i++) if (upd->key_before[i] == key.full) upd = NULL;
  int mode = choose_mode(n, upd, parent_ok, n || !ungraphable(&t->q), &t->opts, t->recorded);
  if (t->dry && (mode != GT_V_REPLAY || rt->profile))    /* (a traced call runs nothing: keyed.lua) */
    return gt_fail(rt, "a traced call's segment %d does not replay", t->depth + 1);
  t->lane_call |= rt->lane.lazy > 0;
  /* a replay that patches nothing needs no queue; one that patches reads
     its launches there (the lane's too: an input it took may have moved) */
  if (mode != GT_V_REPLAY || gt_cursor_dirty(t, n) != 0) gt_lane_sync(t);
  if (mode != GT_V_REPLAY || !hit) gt_queue_note_writes(t);   /* (the cursor's replay marked them: gt_cursor_arg) */
  if (mode != GT_V_REPLAY && gt_cond_check(t)) return GT_ERR;   /* (a replay's queue is its recording's, checked then) */
  if (mode != GT_V_REPLAY && t->npend && gt_tree_launch_pending(t)) return GT_ERR;   /* (they run first) */
  int created = !n && mode != GT_V_UPDATE;
  if (mode == GT_V_UPDATE) {          /* (its shapes are noted again: an update may change them) */
    n = upd;
    n->key_before[n->nkey_before++ % 4] = n->key;
    n->key = key.full;
    free(n->shapes);
    n->shapes = NULL;
  }
  else if (created && !(n = new_node(t, parent, key))) return GT_ERR;
  int ran = visit(t, n, mode, first, t0);
  if (ran == GT_ERR) {
    if (created) {                    /* no half node: a failed first visit leaves nothing */
      parent->nkids--;
      t->nnodes--;
      free_node(t, n);
    }
    return GT_ERR;
  }
  /* the visit counted at its cut site: a replay at the site it ended at
     last, with that site's API the only one of its kind, is one increment */
  if (t->dry) {}
  else if (ran == GT_V_REPLAY && n->cut_fast == cut) n->cut_nlast++;
  else gt_explain_count_cut(t, n, cut, ran);
  return advance(t, parent, n, ran);
}

/* The call's line in the history ring: what its visits were, what it cost. */
static void note_call(gt_tree *t) {
  gt_call_info *b = &t->at_begin;
  t->hist[(t->calls - 1) % GT_HISTORY] = (gt_call_info){
    t->calls, t->warmups - b->warmups, t->records - b->records, t->replays - b->replays, t->eager - b->eager,
    t->updates - b->updates, t->begin_us >= 0 ? gt_fast_us() - t->begin_us : -1,
    t->state_node ? t->state_node->checkpoint_bytes : gt_pool_in_use(&t->pool), t->pool.committed };
}

/* Ends the active call once its segments have run: the path is remembered. */
void gt_tree_finish_call(gt_tree *t) {
  if (t->npath && !GT_GROW(t->lastpath, t->lastcap, t->npath)) memcpy(t->lastpath, t->path, t->npath * sizeof *t->path);
  t->nlastpath = t->npath;
  t->epoch_last = gt_pool_epoch;
  note_call(t);
  gt_lane_close(t->rt);
  t->rt->active = NULL;
  settle(t->rt);
}

int gt_tree_end(gt_runtime *rt) {
  gt_tree *t = rt->active;        /* (gt_tree_flush queues the lane's launches if it must) */
  if (!t) return GT_OK;
  int st = gt_tree_flush(rt, GT_CUT_RETURN);
  if (st == GT_OK) st = gt_tree_launch_pending(t);
  if (st != GT_OK) { gt_tree_abort(rt); return GT_ERR; }
  gt_tree_finish_call(t);
  return GT_OK;
}

int32_t gt_tree_call(gt_runtime *rt, gt_tree *t, const char *eager) {
  return gt_tree_begin(rt, t, eager) ? 0 : t->gen;
}

int gt_tree_return(gt_runtime *rt, int nwarn) {
  gt_tree *t = rt->active;        /* (gt_tree_flush queues the lane's launches if it must) */
  if (!t) return 0;
  if (gt_tree_flush(rt, GT_CUT_RETURN) || gt_tree_launch_pending(t)) return GT_ERR;
  /* the first call (of the first few) to replay through the lane after one
     that did not: LuaJIT's traces formed on the recording calls' path */
  int jit = t->lane_call && !t->lane_prev && t->jit_flushes < GT_JIT_FLUSHES ? 16 : 0;
  t->jit_flushes += jit != 0;
  t->lane_prev = t->lane_call;
  t->lane_call = 0;
  int want = gt_tree_explain_wanted(rt);
  if (want) return jit | 8 | want;
  gt_tree_finish_call(t);
  return jit | (t->nwarn != nwarn);
}

int gt_tree_grow_path(gt_tree *t, int n) { return GT_GROW(t->path, t->pathcap, n); }

/* A Lua error (or a failed segment): the queued segment is dropped, its new
   tensors become stale, and the call ends.  Nodes already run stay whole. */
void gt_tree_abort(gt_runtime *rt) {
  gt_tree *t = rt->active;
  if (!t) return;
  gt_lane_close(rt);
  rt->lane.lazy = 0;                 /* (dropped with the queue) */
  gt_queue_clear(&t->q);
  gt_tree_launch_pending(t);         /* (the segments before the error ran, as they would have at their ends) */
  settle(rt);
  t->nrels = 0;
  note_call(t);
  t->failed_gen = t->gen;
  t->gen = gt_gen_next();                         /* every tensor of the failed call is stale now */
  t->nlastpath = 0;
  rt->active = NULL;
}

int gt_tree_keep_last(gt_tree *t) {
  int n = t->rt->active == t ? t->lastn : t->nbufs;    /* (begun: not one made yet) */
  t->nkept = -1;
  if (GT_GROW(t->kept, t->keptcap, n + 1)) return gt_fail(t->rt, "out of host memory");
  for (int i = 0; i < n; i++) t->kept[i] = *t->bufs[i];
  t->nkept = n;
  t->kept_gen = t->rt->active == t ? t->prev_gen : t->gen;
  t->kept_prev = t->rt->active == t ? 0 : t->prev_gen;   /* (0: the call that comes next sets it) */
  return GT_OK;
}

int gt_tree_discard(gt_runtime *rt) {
  gt_tree *t = rt->active;
  if (!t || !t->dry || t->nkept < 0 || t->kept_gen != t->prev_gen) return 0;   /* (a traced call runs nothing) */
  t->npend = 0;                      /* (replayed segments whose graphs never launch) */
  int nlast = t->nlastpath;          /* (the last call's path stays the last: keyed.c saves it) */
  gt_tree_abort(rt);
  t->nlastpath = nlast;
  /* as if never made: the call before it stays the last, its buffer structs
     (the slab's, which the dropped call reused) as it left them: its
     outputs are live, and the next call's inputs; what the dropped call
     made is stale */
  for (int i = 0; i < t->nkept; i++) *t->bufs[i] = t->kept[i];
  t->nbufs = t->nkept;
  t->calls--;                        /* (not counted: its history line is the next call's) */
  gt_tree_dry_release(t);
  t->gen = t->kept_gen;
  if (t->kept_prev) t->prev_gen = t->kept_prev;
  t->nkept = -1;
  return 1;
}

void gt_tree_dry(gt_tree *t, int on) { t->dry = on; if (on) t->ndreach = 0; }

int gt_tree_dry_end(gt_runtime *rt) {
  gt_tree *t = rt->active;
  if (!t || !t->dry) return gt_fail(rt, "no traced call to end");
  int st = gt_tree_flush(rt, GT_CUT_RETURN);
  int nv = 0;
  for (int d = 0; st == GT_OK && d < t->npath; d++) nv += t->path[d]->nargvals;
  if (nv != t->ndreach) t->ndreach = -1;   /* (argument by argument as dvals, or not known) */
  t->ndpath = -1;
  if (st == GT_OK && (GT_GROW(t->dpath, t->dpathcap, t->npath + 1) || GT_GROW(t->dvals, t->dvalcap, nv + 1)))
    st = gt_fail(rt, "out of host memory");
  if (st == GT_OK) {
    for (int d = 0, v = 0; d < t->npath; d++) {
      const gt_node *n = t->path[d];
      t->dpath[d] = t->path[d];
      memcpy(t->dvals + v, n->argvals, (size_t)n->nargvals * sizeof *n->argvals);
      v += n->nargvals;
    }
    t->ndpath = t->npath;
  }
  if (!gt_tree_discard(rt)) gt_tree_abort(rt);
  return st;
}

/* Whether argument j of launch l is an address (a tensor's; else a scalar). */
static int arg_is_address(const gt_qlaunch *l, int j) {
  if (l->kind != GT_GN_KERNEL) return l->kind == GT_GN_MEMCPY ? j < 2 : j == 0;
  return l->k->ptype[j] == GT_P_IN || l->k->ptype[j] == GT_P_OUT;
}

/* (the nodes being the same, a tensor argument's role and identity are; its
   address may differ: a traced call's staged inputs lie elsewhere) */
int gt_tree_dry_same(gt_tree *t) {
  if (t->ndpath < 0 || t->ndpath != t->nlastpath) return 0;
  for (int d = 0, v = 0; d < t->ndpath; d++) {
    const gt_node *n = t->lastpath[d];
    if (n != t->dpath[d] || !n->launches) return 0;
    for (int i = 0; i < n->nlaunch; i++) {
      const gt_qlaunch *l = &n->launches[i];
      for (int j = 0; j < l->nargs; j++)
        if (!arg_is_address(l, j) && t->dvals[v + l->arg0 + j] != n->argvals[l->arg0 + j]) return 0;
    }
    v += n->nargvals;
  }
  return 1;
}

int gt_tree_next_launch(gt_runtime *rt, int32_t *seg) {
  gt_tree *t = rt->active;
  *seg = t ? t->depth : -1;
  return t ? t->q.n + rt->lane.lazy : 0;
}

/* A Lua error in the call's body: what the body queued since its last
   segment end runs eagerly first, as the same code runs outside a tree up to
   its error (its writes into inputs happen), with no node; then the call is
   aborted.  An error inside a gt.cond or gt.loop body: the launches before
   that cond run (which body the device would take is not known).  Best
   effort: a failure to place the segment's tensors runs nothing more. */
void gt_tree_abort_run(gt_runtime *rt) {
  gt_tree *t = rt->active;
  if (t && !t->lane_lost) {
    gt_lane_sync(t);
    int depth = 0, cut = t->q.n;
    for (int i = 0; i < t->q.n; i++) {
      int k = t->q.l[i].kind;
      if (gt_kind_is_begin(k) && depth++ == 0) cut = i;     /* (where the outermost open cond began) */
      else if (k == GT_GN_END && --depth == 0) cut = t->q.n;
    }
    t->q.n = cut;
    if (t->q.n && (!t->npend || gt_tree_launch_pending(t) == GT_OK)) {   /* (in order) */
      gt_queue_note_writes(t);
      if (gt_plan_run(t, t->segstart[t->depth]) == GT_OK) run_eager(t, NULL);
    }
  }
  gt_tree_abort(rt);
}

/* -- Trimming and the floor ---------------------------------------------- */

static int by_last_call(const void *a, const void *b) {
  const gt_node *x = *(gt_node *const *)a, *y = *(gt_node *const *)b;
  return x->last_call < y->last_call ? 1 : x->last_call > y->last_call ? -1 : 0;
}

int gt_tree_trim(gt_runtime *rt, gt_tree *t, int keep) {
  if (rt->active == t) return gt_fail(rt, "tree '%s': trim inside its own call", t->name);
  gt_node **rec = malloc((t->nnodes ? t->nnodes : 1) * sizeof *rec);
  if (!rec) return gt_fail(rt, "out of host memory");
  int n = 0, before = t->recorded;
  for (int i = 0; i < t->nnodes; i++) if (t->nodes[i]->graph) rec[n++] = t->nodes[i];
  qsort(rec, n, sizeof *rec, by_last_call);
  for (int i = keep < 0 ? 0 : keep; i < n; i++)
    if (rec[i]->graph) { drop_graph(t, rec[i]); drop_below(t, rec[i]); }
  free(rec);
  int dropped = before - t->recorded;       /* (with the graphs below a dropped one: their plans began at its end) */
  if (dropped && t->keyed_trim) t->keyed_trim(t);
  for (int i = 0; dropped && i < t->nnodes; i++)     /* the paths' one graphs (rebuilt when those paths repeat) */
    gt_pathg_drop(&t->rt->be, &t->nodes[i]->pg);
  uint64_t end = 0;
  for (int i = 0; i < t->nnodes; i++) if (t->nodes[i]->graph && t->nodes[i]->plan_end > end) end = t->nodes[i]->plan_end;
  /* the last call's outputs stay valid where every segment of its path kept
     its graph (they lie in that plan's memory, below end); else they may lie
     in memory given back, and read stale from now on */
  const gt_call_info *h = t->calls ? &t->hist[(t->calls - 1) % GT_HISTORY] : NULL;
  int kept = h && h->warmups == 0 && h->eager == 0 && t->nlastpath > 0 && t->failed_gen != t->gen;
  for (int d = 0; d < t->nlastpath && kept; d++) kept = t->lastpath[d]->graph != NULL;
  gt_pool_clear(&t->pool);
  if (!kept) { t->trimmed_gen = t->gen; t->gen = gt_gen_next(); }
  /* in another tree's call, its queued launches may read this pool (an
     output of this tree passed to it): the memory goes once they have run */
  t->shrink_end = end;
  if (!rt->active) gt_pool_shrink(&t->pool, end);
  else if (defer_tree(rt, t, GT_DEFER_SHRINK)) return gt_fail(rt, "out of host memory");
  return dropped;
}
