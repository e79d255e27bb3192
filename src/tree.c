/* tree.c - graph trees and their calls: a tree made; a call begun (a new
   generation), its segments ended (visit.c), the call ended or aborted; a
   traced call kept or dropped (gt_tree_dry, gt_tree_discard).

   The replay path of one call: Lua's op calls gt_launch_tensors (kernel.c)
   with the tensors and scalars its launcher passes; inside a tree call it is
   appended to the segment's queue and gt_cursor_push (predict.c) compares
   it with what the predicted node recorded at that position.  At a sync
   point or the call's end Lua calls gt_tree_flush (visit.c): gt_cursor_hit
   gives the node when everything matched (else gt_segment_key finds it
   among the parent's children), choose_mode picks the visit, visit() runs
   it (graph.c's gt_graph_replay: bind the new buffers to the plan, patch the
   launches the cursor noted as changed, launch the graph), and advance()
   moves the cursor under the node for the next segment. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "predict.h"
#include "stage.h"
#include "life.h"
#include "gmem.h"
#include "graph.h"
#include "visit.h"
#include "tree.h"

gt_tree *gt_tree_new(gt_runtime *rt, const gt_tree_opts *opts) {
  if (opts->pool && opts->pool->closed) { gt_fail(rt, "option pool: tree '%s' was freed", opts->pool->name); return NULL; }
  gt_tree *t = calloc(1, sizeof *t);
  if (!t) { gt_err(rt, GT_E_NOMEM); return NULL; }
  t->rt = rt;
  t->opts = *opts;
  t->name = gt_strdup(opts->name && *opts->name ? opts->name : "tree");
  t->where = gt_strdup(opts->where);
  t->opts.name = t->name;
  t->opts.where = t->where;
  t->refs = 1;
  t->gen = gt_gen_next();
  t->root.id = -1;
  t->root.depth = -1;
  t->trace.nkept = -1;
  t->trace.ndpath = -1;
  int nomem = !t->name || !t->where;
  if (nomem || gt_pool_init_growing(&t->pool, &rt->be, getenv("GTLUA_POOL_RESERVE"), rt->err) != GT_OK) {
    free(t->name); free(t->where); free(t);
    if (nomem) gt_err(rt, GT_E_NOMEM);
    return NULL;
  }
  t->mem = &t->pool, t->powner = t, t->pshare = 1;
  if (opts->pool) {                   /* (the owner of the pool that tree uses) */
    gt_tree *o = opts->pool->powner;
    t->mem = &o->pool, t->powner = o;
    o->pshare++, o->refs++;
    t->shared = o->shared = 1;
    if (!o->plast) o->plast = o;      /* (its last call's outputs, if any, are the live ones) */
  }
  t->opts.pool = NULL;
  if (gt_gmem_list(t)) {
    if (t->powner != t) t->powner->pshare--, gt_tree_unref(t->powner);
    gt_pool_destroy(&t->pool);
    free(t->name); free(t->where); free(t);
    gt_err(rt, GT_E_NOMEM);
    return NULL;
  }
  return t;
}

const char *gt_tree_name(gt_tree *t) { return t->name; }
const char *gt_tree_where(gt_tree *t) { return t->where; }
gt_tree *gt_tree_active(gt_runtime *rt) { return rt->active; }

/* -- Calls --------------------------------------------------------------- */

int gt_tree_begin(gt_runtime *rt, gt_tree *t, const char *eager) {
  if (gt_tree_begin_timed(rt, t, 1)) return GT_ERR;
  if (gt_tree_begin_body(t)) { gt_tree_abort(rt); return GT_ERR; }
  t->eager_call = eager != NULL;
  if (eager) snprintf(t->eager_why, sizeof t->eager_why, "%s", eager);
  t->pred.cmiss |= t->eager_call;
  gt_lane_start(t);
  return GT_OK;
}

/* t's call takes the pool it shares: the outputs of the tree that used it
   last are overwritten (stale from now on, naming t). */
static void shared_pool_taken(gt_tree *t) {
  gt_tree *o = t->powner, *l = o->plast;
  o->plast = t;
  if (!l) return;
  l->over_gen = l->gen;
  l->gen = gt_gen_next();
  t->refs++;
  if (l->over_by) gt_tree_unref(l->over_by);
  l->over_by = t;
}

gt_tree *gt_tree_overwriter(gt_tree *t, int32_t gen) { return t->over_by && gen == t->over_gen ? t->over_by : NULL; }

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
  gt_release_call_bufs(t);
  t->prev_gen = t->gen;
  t->gen = gt_gen_next();
  if (t->shared && t->powner->plast != t) shared_pool_taken(t);
  gt_pool_clear(t->mem);
  t->state_node = NULL;
  t->cur = NULL;
  t->cur_planned = 0;
  t->depth = 0;
  t->npath = 0;
  t->npatched = 0;
  t->nrels = 0;
  t->eager_call = 0;
  t->npend = 0;
  t->stats.calls++;
  t->at_begin = (gt_call_info){ t->stats.calls, t->stats.warmups, t->stats.records, t->stats.replays, t->stats.eager, t->stats.updates, 0, 0, 0 };
  t->begin_us = always || gt_timed_call(t->stats.calls) ? gt_fast_us() : -1;
  rt->active = t;
  return GT_OK;
}

/* The begun call's body is to run: the cursor at the root, the first
   segment, this call's staging slots free.  Fails out of host memory only
   (the caller aborts the call). */
int gt_tree_begin_body(gt_tree *t) {
  gt_cursor_start(t, &t->root);
  if (t->nstage) memset(t->pinned, 0, t->nstage);
  if (GT_GROW(t->segstart, t->segcap, 1)) return gt_err(t->rt, GT_E_NOMEM);
  t->segstart[0] = 0;
  return GT_OK;
}

int32_t gt_tree_gen(gt_tree *t) { return t->gen; }
int gt_tree_nbufs(gt_tree *t) { return t->nbufs; }
int32_t gt_tree_prev_gen(gt_tree *t) { return t->prev_gen; }

int32_t gt_tree_failed_gen(gt_tree *t) { return t->failed_gen; }
int32_t gt_tree_trimmed_gen(gt_tree *t) { return t->trimmed_gen; }
int gt_tree_limit_hits(const gt_tree *t) { return t->limit_hit; }

/* The call's line in the history ring: what its visits were, what it cost. */
static void note_call(gt_tree *t) {
  gt_call_info *b = &t->at_begin;
  t->hist[(t->stats.calls - 1) % GT_HISTORY] = (gt_call_info){
    t->stats.calls, t->stats.warmups - b->warmups, t->stats.records - b->records, t->stats.replays - b->replays, t->stats.eager - b->eager,
    t->stats.updates - b->updates, t->begin_us >= 0 ? gt_fast_us() - t->begin_us : -1,
    t->state_node ? t->state_node->checkpoint_bytes : gt_pool_in_use(t->mem), t->mem->committed };
}

/* Ends the active call once its segments have run: the path is remembered. */
void gt_tree_finish_call(gt_tree *t) {
  if (t->npath && !GT_GROW(t->lastpath, t->lastcap, t->npath)) memcpy(t->lastpath, t->path, t->npath * sizeof *t->path);
  t->nlastpath = t->npath;
  t->epoch_last = gt_pool_epoch;
  note_call(t);
  gt_lane_close(t->rt);
  t->rt->active = NULL;
  gt_life_settle(t->rt);
}

int gt_tree_end(gt_runtime *rt) {
  gt_tree *t = rt->active;        /* (gt_tree_flush queues the lane's launches if it must) */
  if (!t) return GT_OK;
  int st = gt_tree_flush(rt, GT_CUT_RETURN);
  if (st == GT_OK) st = gt_graph_launch_pending(t);
  if (st != GT_OK) { gt_tree_abort(rt); return GT_ERR; }
  gt_tree_finish_call(t);
  return GT_OK;
}

int32_t gt_tree_call(gt_runtime *rt, gt_tree *t, const char *eager) {
  return gt_tree_begin(rt, t, eager) ? 0 : t->gen;
}

int gt_tree_return(gt_runtime *rt, int nwarn) {
  gt_tree *t = rt->active;        /* (gt_tree_flush queues the lane's launches if it must) */
  if (!t) return GT_RET_ENDED;
  if (gt_tree_flush(rt, GT_CUT_RETURN) || gt_graph_launch_pending(t)) return GT_ERR;
  /* the first call (of the first few) to replay through the lane after one
     that did not: LuaJIT's traces formed on the recording calls' path */
  int jit = t->pred.lane_call && !t->pred.lane_prev && t->pred.jit_flushes < GT_JIT_FLUSHES ? GT_RET_JIT_FLUSH : 0;
  t->pred.jit_flushes += jit != 0;
  t->pred.lane_prev = t->pred.lane_call;
  t->pred.lane_call = 0;
  int want = gt_tree_explain_wanted(rt);
  if (want) return jit | GT_RET_EXPLAIN | want;
  gt_tree_finish_call(t);
  return jit | (t->nwarn != nwarn ? GT_RET_WARNED : GT_RET_ENDED);
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
  gt_graph_launch_pending(t);         /* (the segments before the error ran, as they would have at their ends) */
  gt_life_settle(rt);
  t->nrels = 0;
  note_call(t);
  t->failed_gen = t->gen;
  t->gen = gt_gen_next();                         /* every tensor of the failed call is stale now */
  t->nlastpath = 0;
  rt->active = NULL;
}

int gt_tree_keep_last(gt_tree *t) {
  int n = t->rt->active == t ? t->lastn : t->nbufs;    /* (begun: not one made yet) */
  t->trace.nkept = -1;
  if (GT_GROW(t->trace.kept, t->trace.keptcap, n + 1)) return gt_err(t->rt, GT_E_NOMEM);
  for (int i = 0; i < n; i++) t->trace.kept[i] = *t->bufs[i];
  t->trace.nkept = n;
  t->trace.kept_gen = t->rt->active == t ? t->prev_gen : t->gen;
  t->trace.kept_prev = t->rt->active == t ? 0 : t->prev_gen;   /* (0: the call that comes next sets it) */
  return GT_OK;
}

int gt_tree_discard(gt_runtime *rt) {
  gt_tree *t = rt->active;
  if (!t || !t->dry || t->trace.nkept < 0 || t->trace.kept_gen != t->prev_gen) return 0;   /* (a traced call runs nothing) */
  t->npend = 0;                      /* (replayed segments whose graphs never launch) */
  int nlast = t->nlastpath;          /* (the last call's path stays the last: keyed.c saves it) */
  gt_tree_abort(rt);
  t->nlastpath = nlast;
  /* as if never made: the call before it stays the last, its buffer structs
     (the slab's, which the dropped call reused) as it left them: its
     outputs are live, and the next call's inputs; what the dropped call
     made is stale */
  for (int i = 0; i < t->trace.nkept; i++) *t->bufs[i] = t->trace.kept[i];
  t->nbufs = t->trace.nkept;
  t->stats.calls--;                        /* (not counted: its history line is the next call's) */
  gt_tree_dry_release(t);
  t->gen = t->trace.kept_gen;
  if (t->trace.kept_prev) t->prev_gen = t->trace.kept_prev;
  t->trace.nkept = -1;
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
  t->trace.ndpath = -1;
  if (st == GT_OK && (GT_GROW(t->trace.dpath, t->trace.dpathcap, t->npath + 1) || GT_GROW(t->trace.dvals, t->trace.dvalcap, nv + 1)))
    st = gt_err(rt, GT_E_NOMEM);
  if (st == GT_OK) {
    for (int d = 0, v = 0; d < t->npath; d++) {
      const gt_node *n = t->path[d];
      t->trace.dpath[d] = t->path[d];
      memcpy(t->trace.dvals + v, n->argvals, (size_t)n->nargvals * sizeof *n->argvals);
      v += n->nargvals;
    }
    t->trace.ndpath = t->npath;
  }
  if (!gt_tree_discard(rt)) gt_tree_abort(rt);
  return st;
}

/* Whether argument j of launch l is an address (a tensor's; else a scalar). */
static int arg_is_address(const gt_qlaunch *l, int j) {
  if (l->kind != GT_GN_KERNEL) return gt_kind_two_addrs(l->kind) ? j < 2 : j == 0;
  return l->k->ptype[j] == GT_P_IN || l->k->ptype[j] == GT_P_OUT;
}

/* (the nodes being the same, a tensor argument's role and identity are; its
   address may differ: a traced call's staged inputs lie elsewhere) */
int gt_tree_dry_same(gt_tree *t) {
  if (t->trace.ndpath < 0 || t->trace.ndpath != t->nlastpath) return 0;
  for (int d = 0, v = 0; d < t->trace.ndpath; d++) {
    const gt_node *n = t->lastpath[d];
    if (n != t->trace.dpath[d] || !n->launches) return 0;
    for (int i = 0; i < n->nlaunch; i++) {
      const gt_qlaunch *l = &n->launches[i];
      for (int j = 0; j < l->nargs; j++)
        if (!arg_is_address(l, j) && t->trace.dvals[v + l->arg0 + j] != n->argvals[l->arg0 + j]) return 0;
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
  if (t && !t->pred.lane_lost) {
    gt_lane_sync(t);
    int depth = 0, cut = t->q.n;
    for (int i = 0; i < t->q.n; i++) {
      int k = t->q.l[i].kind;
      if (gt_kind_is_begin(k) && depth++ == 0) cut = i;     /* (where the outermost open cond began) */
      else if (k == GT_GN_END && --depth == 0) cut = t->q.n;
    }
    t->q.n = cut;
    if (t->q.n && (!t->npend || gt_graph_launch_pending(t) == GT_OK)) {   /* (in order) */
      gt_queue_note_writes(t);
      if (gt_plan_run(t, t->segstart[t->depth]) == GT_OK) gt_graph_run_eager(t, NULL);
    }
  }
  gt_tree_abort(rt);
}
