/* visit.c - a segment's end (gt_tree_flush): the node it visits (the
   cursor's hit, else the segment key among the parent's children, else a
   new node), the visit chosen as a pure function of the node's state
   (choose_mode: replay, update, warmup, record, eager, past the limit), the
   visit run (graph.c), then advance: the node's counters, the cursor under
   it for the next segment.  Warnings and skip reasons are counted here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "key.h"
#include "predict.h"
#include "cond.h"
#include "stage.h"
#include "life.h"
#include "graph.h"
#include "visit.h"
#include "dist.h"

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
    gt_err(t->rt, GT_E_NOMEM);
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
  if (gt_plan_run(t, first) || gt_graph_run_eager(t, NULL)) return GT_ERR;
  t->stats.eager++;
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
  if (!n->plan) return gt_plan_node(t, n, first) ? GT_ERR : gt_graph_run_eager(t, n);
  for (int i = 0; i < n->nnew; i++) t->bufs[first + i]->addr = t->pool.base + n->plan[i];
  t->state_node = n;
  return gt_graph_run_eager(t, n);
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
  return gt_plan_run(t, first) ? GT_ERR : gt_graph_run_eager(t, n);
}

static void count_eager(gt_tree *t, gt_node *n, const char *why) {
  n->eager++; t->stats.eager++; gt_tree_note_skip(t, why);
  if (!n->skip) n->eager_why = why;   /* (a literal: count_eager's callers pass a reason that lives) */
}

/* Runs the chosen visit; returns what ran (GT_V_*: a failed graph build runs
   eagerly) or GT_ERR.  Counters follow what ran. */
static int visit(gt_tree *t, gt_node *n, int mode, int first, double t0) {
  int ran = mode;
  switch (mode) {
  case GT_V_REPLAY:
    if ((ran = gt_graph_replay(t, n, first)) == GT_ERR) return GT_ERR;
    if (t->dry) {}                    /* (a traced call, dropped at its end: not counted) */
    else if (ran == GT_V_UPDATE) { n->updates++; t->stats.updates++; }
    else {
      n->replays++; t->stats.replays++;
      if (t0 > 0) { n->replay_us_sum += gt_fast_us() - t0; n->replay_n++; }
    }
    t->state_node = n;
    return ran;
  case GT_V_RECORD: case GT_V_UPDATE: {
    int again = n->budget_dropped;    /* (a graph a budget dropped, instantiated again: counted apart) */
    if ((ran = gt_graph_record(t, n, first, mode == GT_V_UPDATE)) == GT_ERR) return GT_ERR;
    n->budget_dropped = 0;
    if (ran == GT_V_EAGER) count_eager(t, n, "graph build failed");
    else if (ran == GT_V_UPDATE) { n->updates++; t->stats.updates++; }
    else if (again) { n->reinst++; t->reinst++; }
    else { n->records++; t->stats.records++; }
    return ran;
  }
  case GT_V_PLANNED:
    if (run_planned(t, n, first)) return GT_ERR;
    count_eager(t, n, n->skip);
    return ran;
  case GT_V_LIMIT:
    if (run_past_limit(t, n, first)) return GT_ERR;
    count_eager(t, n, "max_recordings");
    return GT_V_EAGER;
  default:                            /* GT_V_WARMUP, GT_V_EAGER: memory planned for this run only */
    if (gt_plan_run(t, first) || gt_graph_run_eager(t, n)) return GT_ERR;
    if (mode == GT_V_WARMUP) { n->warmups++; t->stats.warmups++; }
    else count_eager(t, n, n->skip);
    return ran;
  }
}

/* The next segment begins after n, which ran as `ran`: children may record
   when n's memory followed a plan. */
static int advance(gt_tree *t, gt_node *parent, gt_node *n, int ran) {
  n->visits += !t->dry;
  n->last_call = (uint64_t)t->stats.calls;
  if (parent->pred.last_kid) parent->pred.last_kid->pred.after = n;   /* (a cycle of paths, e.g. alternating branches, is predicted) */
  parent->pred.last_kid = n;
  gt_cursor_start(t, n);
  if (!GT_GROW(t->path, t->pathcap, t->npath + 1)) t->path[t->npath++] = n;
  t->cur = n;
  t->cur_planned = ran == GT_V_REPLAY || ran == GT_V_UPDATE || ran == GT_V_RECORD || ran == GT_V_PLANNED;
  return next_segment(t);
}

static int next_segment(gt_tree *t) {
  t->depth++;
  if (GT_GROW(t->segstart, t->segcap, t->depth + 1)) return gt_err(t->rt, GT_E_NOMEM);
  t->segstart[t->depth] = t->nbufs;
  t->nrels = 0;
  gt_queue_clear(&t->q);
  if (!t->npend) gt_life_settle(t->rt);   /* (memory released in the segment waits for its graph's launch) */
  gt_lane_start(t);
  return GT_OK;
}

/* Ends the segment being queued: its node from the cursor (the replay path)
   or by key, the visit chosen, run, and the cursor advanced. */
int gt_tree_flush(gt_runtime *rt, int cut) {
  gt_tree *t = rt->active;           /* (the lane's launches are queued below only if the visit reads them) */
  if (!t) return GT_OK;
  int first = t->segstart[t->depth];
  if (t->pred.lane_lost) { int v = t->pred.lane_lost; t->pred.lane_lost = 0; return v == 2 ? GT_ERR : gt_err(rt, GT_E_NOMEM); }
  if (t->q.n + rt->lane.lazy == 0 && t->nbufs == first && t->nrels == 0) return GT_OK;
  if (t->eager_call) return flush_eager_call(t, first);
  if (t->dry && gt_tree_dry_note(t)) return GT_ERR;   /* (a traced call: what reached its arguments) */
  /* a replay's host time is sampled (every call for the first 64, then one
     in 16): a clock read costs as much as a few launches' bookkeeping */
  double t0 = gt_timed_call(t->stats.calls) ? gt_fast_us() : 0;
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
  t->pred.lane_call |= rt->lane.lazy > 0;
  /* a replay that patches nothing needs no queue; one that patches reads
     its launches there (the lane's too: an input it took may have moved) */
  if (mode != GT_V_REPLAY || gt_cursor_dirty(t, n) != 0) gt_lane_sync(t);
  if (mode != GT_V_REPLAY || !hit) gt_queue_note_writes(t);   /* (the cursor's replay marked them: gt_cursor_arg) */
  if (mode != GT_V_REPLAY && (gt_cond_check(t) || (rt->dist_world > 1 && gt_dist_check(t)))) return GT_ERR;   /* (a replay's: its recording's) */
  if (mode != GT_V_REPLAY && t->npend && gt_graph_launch_pending(t)) return GT_ERR;   /* (they run first) */
  int created = !n && mode != GT_V_UPDATE;
  if (mode == GT_V_UPDATE) {          /* (its shapes are noted again: an update may change them) */
    n = upd;
    n->key_before[n->nkey_before++ % 4] = n->key;
    n->key = key.full;
    free(n->ex.shapes);
    n->ex.shapes = NULL;
  }
  else if (created && !(n = new_node(t, parent, key))) return GT_ERR;
  int ran = visit(t, n, mode, first, t0);
  if (ran == GT_ERR) {
    if (created) {                    /* no half node: a failed first visit leaves nothing */
      parent->nkids--;
      t->nnodes--;
      gt_life_free_node(t, n);
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
