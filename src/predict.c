/* predict.c - the replay predictor: the cursor and the lane.

   A segment begins with a prediction: the child of its parent that followed
   the one visited there last (gt_cursor_start).  Each launch, as it is
   queued, is compared with the launch at the same position of the
   predicted node's recording (gt_cursor_push, and launch.c's binds through
   gt_predict_arg as they bind each argument): the launch-match predicate,
   stated once in predict.h (gt_predict_arg: the quick tier, gt_arg_quick,
   then the full compare, gt_cursor_arg).  A segment that matched to its end
   is that node (gt_cursor_hit), and the launches whose scalars or external
   addresses differ from what its graph holds are noted (t->pred.cdirty) for the
   replay to patch.  A mismatch may switch the prediction to a sibling whose
   recording matches what was queued so far; else the key (key.c) decides.

   The lane: for gt.ops's lean launches the comparison is a few equalities:
   the same lean state (its configuration id names the kernel, dims and
   scalars, which a lean state never changes), and each tensor the same
   buffer struct at the same view, still live, where the recording had one
   of the call's own buffers or a static one (gt_arg_quick's test), or an
   input from outside the call (numbered and tested by the cursor
   afterwards: gt_lane_check).  The lane hands Lua the predicted node's
   launches in that form (gt_lrec), so that launcher.lua's lean runner makes
   the test, the output's buffer struct and the count itself, with no call
   into the core; the core writes those launches into its queue, exactly
   as it would have queued them, when anything first reads the queue
   (gt_active: every function that reaches the call syncs first).  The lane
   is open only while the prediction stands (no miss, statics kept, the
   queue's room for the node's launches reserved, so that a sync never
   allocates); anything else closes it and the core decides.

   GTLUA_VERIFY_LANE=1 checks the fast tiers against the full compare as
   they run: a hit's every launch compared again in full (fresh numbering)
   at the segment's end, the launches it must patch among those noted, and
   each launch the lane replays tested against its record's roles
   (gt_lane_verify, called by launcher.lua's generated test); a disagreement
   is an error naming the launch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "key.h"
#include "predict.h"

int gt_verify_lane = -1;

/* -- The cursor: launches compared as they are queued ----------------------- */

static int same_launch(const gt_qlaunch *a, const gt_qlaunch *b) {
  return a->kind == b->kind && a->k == b->k && a->nargs == b->nargs && a->smem == b->smem && a->bytes == b->bytes &&
         a->value == b->value && a->grid[0] == b->grid[0] && a->grid[1] == b->grid[1] && a->grid[2] == b->grid[2] &&
         a->block[0] == b->block[0] && a->block[1] == b->block[1] && a->block[2] == b->block[2];
}

/* Notes launch i, matched, among those a replay patches when dirty (one of
   its scalars or external addresses differs from the value the graph holds;
   unknown: the values are not known). */
static void note_dirty(gt_tree *t, int i, uint64_t dirty, int unknown) {
  if (!dirty || !t->pred.cexact) return;
  if (unknown || GT_GROW(t->pred.cdirty, t->pred.cdirtycap, t->pred.ndirty + 1)) t->pred.cexact = 0;
  else t->pred.cdirty[t->pred.ndirty++] = i;
}

/* Launch i of the queue against launch i of n's recording.  On a match, i
   joins t->pred.cdirty when one of its scalars or external addresses differs from
   the value n's graph holds (internal, path and static arguments that match
   are at the addresses the graph holds: the plan is fixed while n lives). */
static int match_at(gt_tree *t, const gt_node *n, int i) {
  if (i >= n->pred.nsig) return 0;
  const gt_qlaunch *l = &t->q.l[i], *r = &n->launches[i];
  if ((!l->cfg || l->cfg != r->cfg) && !same_launch(l, r)) return 0;
  const gt_arg *a = t->q.args + l->arg0;
  const gt_asig *s = n->pred.asig + r->arg0;
  static const uint64_t none[GT_MAX_PARAMS];   /* (a launch has at most GT_MAX_PARAMS arguments) */
  const uint64_t *was = n->argvals && n->nargvals >= r->arg0 + l->nargs ? n->argvals + r->arg0 : none;
  uint64_t dirty = 0;
  int statics_kept = n->sfrees == gt_static_frees;
  for (int j = 0; j < l->nargs; j++)
    if (!gt_predict_arg(t, &a[j], &s[j], was[j], statics_kept, &dirty)) return 0;
  note_dirty(t, i, dirty | (was == none), was == none);
  return 1;
}

int gt_cursor_arg(gt_tree *t, const gt_arg *a, const gt_asig *s, uint64_t was, uint64_t *dirty) {
  if (!a->buf) return 0;
  gt_asig x = gt_key_arg(t, a, 0, t->pred.cserial, &t->pred.cseen, &t->cfirst, &t->cfirstcap);
  if (x.role != s->role || x.id != s->id || x.off != s->off || x.nbytes != s->nbytes) return 0;
  if (x.role == GT_ROLE_EXTERNAL) {
    *dirty |= (a->buf->addr + (uint64_t)a->off) ^ was;
    if (s->write) a->buf->wgen = t->gen;   /* (gt_buf.wgen) */
  }
  return 1;
}

void gt_cursor_quick(gt_tree *t, uint64_t dirty) { note_dirty(t, t->q.n - 1, dirty, 0); }

/* Launch i of the segment, which the lane replayed, against launch i of the
   prediction n: its external inputs numbered and tested as match_at would
   have as it landed (the lane tested the rest, and that each is the struct
   and view n's recording queued).  A mismatch is a miss: the key decides
   at the segment's end. */
int gt_cursor_lazy(gt_tree *t, const gt_node *n, int i) {
  if (t->pred.cmiss) return 0;
  const gt_qlaunch *l = &n->launches[i];
  const gt_arg *a = n->pred.qargs + l->arg0;
  const gt_asig *s = n->pred.asig + l->arg0;
  const uint64_t *was = n->argvals + l->arg0;
  uint64_t dirty = 0;
  for (int j = 0; j < l->nargs; j++)
    if (s[j].role == GT_ROLE_EXTERNAL && !gt_cursor_arg(t, &a[j], &s[j], was[j], &dirty)) {
      t->pred.cmiss = 1;
      gt_lane_close(t->rt);
      return 0;
    }
  note_dirty(t, i, dirty, 0);
  return 1;
}

static void restart(gt_tree *t) {
  if (__builtin_expect(gt_verify_lane < 0, 0)) gt_predict_init();
  t->pred.cfrees = gt_static_frees;
  t->pred.cserial = gt_key_serial();
  t->pred.cseen = 0;
  t->pred.ndirty = 0;
  t->pred.cexact = 1;
}

/* A segment begins under parent: predict the child that followed the one
   visited there last, the last time that one was visited (a steady path
   follows itself; alternating or cycling paths are predicted too). */
void gt_cursor_start(gt_tree *t, gt_node *parent) {
  gt_node *k = parent->pred.last_kid;
  t->pred.cand = k && k->pred.after ? k->pred.after : k;
  t->pred.cmiss = !t->pred.cand;
  restart(t);
}

/* The prediction missed at launch i: a sibling whose recording matches the
   whole queue so far takes over (its ordinals numbered afresh). */
static void switch_cand(gt_tree *t, int i) {
  gt_node *p = t->pred.cand->parent, *miss = t->pred.cand;
  t->pred.cmiss = 1;
  gt_lane_close(t->rt);
  for (int k = 0; k < p->nkids; k++) {
    gt_node *c = p->kids[k];
    if (c == miss || c->pred.nsig <= i) continue;
    restart(t);
    int j = 0;
    while (j <= i && match_at(t, c, j)) j++;
    if (j > i) { t->pred.cand = c; t->pred.cmiss = 0; gt_lane_start(t); return; }   /* (the lane follows the new prediction) */
  }
}

void gt_cursor_push(gt_tree *t) {
  if (t->pred.cmiss) return;
  int i = t->q.n - 1;
  if (!match_at(t, t->pred.cand, i)) switch_cand(t, i);
}

/* At the segment's end: the predicted node, if everything matched. */
gt_node *gt_cursor_hit(gt_tree *t, int first) {
  gt_node *n = t->pred.cand;
  if (t->pred.cmiss || t->q.n + t->rt->lane.lazy != n->pred.nsig || t->nbufs - first != n->pred.nbsig || t->nrels != n->pred.nrsig) return NULL;
  for (int i = 0; i < n->pred.nbsig; i++) if (t->bufs[first + i]->bytes != n->pred.bsig[i]) return NULL;
  for (int i = 0; i < t->nrels; i++) {
    const gt_buf *b = t->rels[i];
    const gt_rsig *r = &n->pred.rsig[i];
    if (b->rel != r->rel || b->seg != r->seg || b->idx != r->idx) return NULL;
  }
  /* every static argument was tested the long way (flags, address) and no
     static struct has been freed since the segment began: n's statics are
     kept from here (the quick test, and the lane, may trust them again) */
  if (n->sfrees != gt_static_frees && t->pred.cfrees == gt_static_frees) n->sfrees = gt_static_frees;
  return n;
}

int gt_cursor_dirty(const gt_tree *t, const gt_node *n) {
  return n == t->pred.cand && !t->pred.cmiss && t->pred.cexact ? t->pred.ndirty : -1;
}

/* After n's graph was built from the queue: what the cursor compares with. */
int gt_cursor_save(gt_tree *t, gt_node *n, int first) {
  gt_queue *q = &t->q;
  int nb = t->nbufs - first;
  gt_asig *as = malloc((q->nargs ? q->nargs : 1) * sizeof *as);
  uint64_t *bs = malloc((nb ? nb : 1) * sizeof *bs);
  gt_rsig *rs = malloc((t->nrels ? t->nrels : 1) * sizeof *rs);
  gt_arg *qa = malloc((q->nargs ? q->nargs : 1) * sizeof *qa);
  if (!as || !bs || !rs || !qa) { free(as); free(bs); free(rs); free(qa); return gt_err(t->rt, GT_E_NOMEM); }
  if (q->nargs) memcpy(qa, q->args, q->nargs * sizeof *qa);   /* (an empty queue may have no array) */
  uint32_t nseen = 0, ser = gt_key_serial();
  for (int i = 0; i < q->nargs; i++) as[i] = q->args[i].buf ? gt_key_arg(t, &q->args[i], 0, ser, &nseen, &t->kfirst, &t->kfirstcap) : (gt_asig){ 0 };
  for (int i = 0; i < q->n; i++)
    for (int j = 0; j < q->l[i].nargs; j++) as[q->l[i].arg0 + j].write = gt_launch_writes(&q->l[i], j);
  for (int i = 0; i < nb; i++) bs[i] = t->bufs[first + i]->bytes;
  for (int i = 0; i < t->nrels; i++) rs[i] = (gt_rsig){ t->rels[i]->rel, t->rels[i]->seg, t->rels[i]->idx };
  gt_cursor_forget(n);
  n->pred.asig = as; n->pred.bsig = bs; n->pred.rsig = rs; n->pred.qargs = qa;
  n->pred.nsig = q->n; n->pred.nbsig = nb; n->pred.nrsig = t->nrels;
  n->sfrees = gt_static_frees;
  return GT_OK;
}

void gt_cursor_forget(gt_node *n) {
  free(n->pred.asig); free(n->pred.bsig); free(n->pred.rsig); free(n->pred.lrec); free(n->pred.qargs);
  n->pred.asig = NULL; n->pred.bsig = NULL; n->pred.rsig = NULL; n->pred.lrec = NULL; n->pred.qargs = NULL;
  n->pred.nsig = n->pred.nbsig = n->pred.nrsig = 0;
}


/* -- The lane: a replayed op tested and counted in Lua ---------------------- */

static const int32_t no_launches;
static int verify_lazy(gt_tree *t, const gt_node *n, int li);

gt_lane *gt_lane_of(gt_runtime *rt) {
  if (!rt->lane.qn) gt_lane_close(rt);
  return &rt->lane;
}

void gt_lane_close(gt_runtime *rt) {
  rt->lane.n = 0;
  rt->lane.qn = &no_launches;
}

/* n's launches as the lane tests them; NULL when out of host memory. */
static gt_lrec *lane_records(gt_node *n) {
  n->pred.lane_ext = 0;
  gt_lrec *rec = calloc(n->pred.nsig ? n->pred.nsig : 1, sizeof *rec);
  if (!rec) return NULL;
  for (int i = 0; i < n->pred.nsig; i++) {
    const gt_qlaunch *l = &n->launches[i];
    const gt_kernel *k = l->k;
    if (l->kind != GT_GN_KERNEL || !l->cfg || k->ntensors > 8 || n->nargvals < l->arg0 + l->nargs) continue;
    const gt_asig *s = n->pred.asig + l->arg0;
    const gt_arg *qa = n->pred.qargs + l->arg0;
    int same = 1;                    /* the graph holds the recorded scalars (none patched since) */
    for (int j = 0; j < l->nargs; j++) same &= qa[j].buf != NULL || qa[j].v.u64 == n->argvals[l->arg0 + j];
    if (!same) continue;
    gt_lrec r = { .cfg = l->cfg, .made = l->made, .qa = qa };
    int ok = 1;
    for (int j = 0; j < k->ntensors && ok; j++) {
      const gt_asig *a = &s[k->order[j]];
      const gt_arg *v = &qa[k->order[j]];   /* (an external's view as queued: its signature's offset is relative) */
      r.t[j].o = (double)v->off;
      r.t[j].n = (double)v->nbytes;
      if (l->made == j + 1) {
        ok = a->role == GT_ROLE_INTERNAL && a->off == 0;
        r.midx = (int)a->id;
        r.marg = k->order[j];
      } else {
        ok = a->role == GT_ROLE_INTERNAL || a->role == GT_ROLE_PATH || a->role == GT_ROLE_STATIC ||
             a->role == GT_ROLE_EXTERNAL;
        r.ext |= a->role == GT_ROLE_EXTERNAL;
        r.t[j].b = v->buf;
      }
    }
    if (ok) rec[i] = r;
    if (ok && r.ext) n->pred.lane_ext = i + 1;
  }
  return rec;
}

void gt_lane_room(gt_tree *t) {
  gt_lane *L = &t->rt->lane;
  if (L->tree != t) return;
  L->bufs = t->bufs;
  L->slab = t->slab;
  L->room = t->bufcap < t->nslab * GT_SLAB ? t->bufcap : t->nslab * GT_SLAB;
}

void gt_lane_start(gt_tree *t) {
  gt_runtime *rt = t->rt;
  gt_lane *L = &rt->lane;
  gt_node *n = t->pred.cand;
  gt_lane_close(rt);
  L->lazy = 0;
  t->pred.lane_checked = 0;
  if (t->pred.cmiss || t->eager_call || !n || !n->pred.nsig || !n->argvals || n->sfrees != gt_static_frees) return;
  gt_queue *q = &t->q;   /* room for every launch of n: a sync never allocates */
  if (GT_GROW(q->l, q->cap, n->pred.nsig) || GT_GROW(q->args, q->argcap, n->nargvals)) return;
  if (!n->pred.lrec && !(n->pred.lrec = lane_records(n))) return;
  if (gt_verify_lane > 0 && !(L->seen = realloc(L->seen, n->pred.nsig * sizeof *L->seen))) return;
  if (L->seen) memset(L->seen, 0, n->pred.nsig * sizeof *L->seen);
  L->rec = n->pred.lrec;
  L->qn = &q->n;
  L->nbufs = &t->nbufs;
  L->depth = t->depth;
  L->segstart = t->segstart[t->depth];
  L->gen = t->gen;
  L->gen_now = &t->gen;
  L->tree = t;
  gt_lane_room(t);
  L->n = n->pred.nsig;
}

/* The lane's lazy launches, the predicted node's next ones, into the queue:
   the recorded launches and their arguments as they were queued (the lane
   tested the same buffer structs; a lean state's scalars never differ from
   the recording's), each one's made buffer this call's (the segment's
   buffer midx).  Every launch before them matched the recording, so they
   take the same places in the queue's arrays; the room was reserved by
   gt_lane_start, so this never allocates. */
void gt_lane_sync(gt_tree *t) {
  gt_lane *L = &t->rt->lane;
  gt_queue *q = &t->q;
  const gt_node *n = t->pred.cand;
  int lazy = L->lazy, i0 = q->n;
  if (!lazy) return;
  gt_lane_check(t);                  /* (while lazy counts them) */
  if (L->seen) for (int i = i0; i < i0 + lazy && !t->pred.lane_lost; i++) if (verify_lazy(t, n, i)) t->pred.lane_lost = 2;
  L->lazy = 0;
  t->pred.lane_call = 1;
  const gt_qlaunch *l = &n->launches[i0], *last = &n->launches[i0 + lazy - 1];
  int a0 = l->arg0, na = last->arg0 + last->nargs - a0;
  if (i0 + lazy > q->cap || q->nargs + na > q->argcap) { t->pred.lane_lost = 1; return; }  /* (cannot happen: the call fails at its flush) */
  memcpy(q->l + i0, l, lazy * sizeof *l);
  memcpy(q->args + q->nargs, n->pred.qargs + a0, na * sizeof *q->args);
  if (q->nargs != a0) for (int i = 0; i < lazy; i++) q->l[i0 + i].arg0 += q->nargs - a0;
  gt_buf **made = t->bufs + t->segstart[t->depth];
  for (int i = i0; i < i0 + lazy; i++) {
    const gt_lrec *r = &n->pred.lrec[i];
    if (r->made) q->args[q->l[i].arg0 + r->marg].buf = made[r->midx];
  }
  q->n += lazy;
  q->nargs += na;
}

/* An external input the lane replayed is the struct and view the recording
   queued, but its number among the segment's external inputs, its address
   (patched where it moved) and its mark as written are the cursor's: given
   here, in queue order, before the segment's end or anything after it in
   the queue (lazy launches are the queue's tail) reads them. */
int gt_lane_check(gt_tree *t) {
  const gt_node *n = t->pred.cand;
  int i0 = t->q.n, end = i0 + t->rt->lane.lazy, i = t->pred.lane_checked > i0 ? t->pred.lane_checked : i0;
  int last = end < n->pred.lane_ext ? end : n->pred.lane_ext, ok = 1;
  for (; i < last && ok; i++) if (n->pred.lrec[i].ext) ok = gt_cursor_lazy(t, n, i);
  if (end > t->pred.lane_checked) t->pred.lane_checked = end;
  return ok;
}

/* -- GTLUA_VERIFY_LANE: the fast tiers against the full compare ------------- */

void gt_predict_init(void) {
  const char *v = getenv("GTLUA_VERIFY_LANE");
  gt_verify_lane = v && v[0] == '1' && !v[1];
}

int gt_lane_verifying(void) {
  if (gt_verify_lane < 0) gt_predict_init();
  return gt_verify_lane;
}

/* The error of a disagreement at launch i of the segment (argument j, -1:
   the launch) with n's recording. */
static int disagree(gt_tree *t, const gt_node *n, int i, int j, const char *tier, const char *why) {
  const gt_qlaunch *r = &n->launches[i];
  char arg[32] = "";
  if (j >= 0) snprintf(arg, sizeof arg, ", argument %d", j + 1);
  return gt_fail(t->rt, "GTLUA_VERIFY_LANE: the replay predictor's %s matched launch %d (%s%s) of segment %d of "
                 "tree '%s' to node %d's recording, but the full compare finds %s: a bug in gtlua's predictor "
                 "(please report it with this script)", tier, i + 1, gt_launch_what(r), arg, t->depth + 1,
                 t->name ? t->name : "?", n->id, why);
}

/* Argument a of launch i against s, the recording's, in full: its role and
   identity worked out afresh (serial, nseen, first, cap: the numbering of
   external buffers in queue order), and its difference from was into *d. */
static int full_arg(gt_tree *t, const gt_arg *a, const gt_asig *s, uint64_t was, uint32_t serial, uint32_t *nseen,
                    int64_t **first, int *cap, uint64_t *d, const char **why) {
  if (!a->buf) {
    *d |= a->v.bits ^ was;
    *why = "a scalar where the recording had a tensor";
    return !s->role;
  }
  gt_asig x = gt_key_arg(t, a, 0, serial, nseen, first, cap);
  *why = x.role != s->role ? "another role (made in the call, earlier segment, weight, input)" :
         x.id != s->id ? "another buffer" : "another view of the buffer";
  if (x.role != s->role || x.id != s->id || x.off != s->off || x.nbytes != s->nbytes) return 0;
  if (x.role == GT_ROLE_EXTERNAL) *d |= (a->buf->addr + (uint64_t)a->off) ^ was;
  return 1;
}

static int noted_dirty(const gt_tree *t, int i) {
  for (int k = 0; k < t->pred.ndirty; k++) if (t->pred.cdirty[k] == i) return 1;
  return 0;
}

/* The cursor hit n (the lane's launches among its queue): every launch
   compared again in full, and each one that differs from n's graph among
   those the replay patches.  GT_ERR (the message naming the launch) on a
   disagreement. */
int gt_predict_verify(gt_tree *t, gt_node *n) {
  gt_lane_sync(t);
  if (t->pred.lane_lost) {                /* the lane's check failed (the message set), or it found no room */
    int v = t->pred.lane_lost;
    t->pred.lane_lost = 0;
    return v == 2 ? GT_ERR : gt_err(t->rt, GT_E_NOMEM);
  }
  const gt_queue *q = &t->q;
  uint32_t serial = gt_key_serial(), nseen = 0;
  int64_t *first = NULL;
  int cap = 0, st = GT_OK;
  for (int i = 0; i < q->n && st == GT_OK; i++) {
    const gt_qlaunch *l = &q->l[i], *r = &n->launches[i];
    if ((!l->cfg || l->cfg != r->cfg) && !same_launch(l, r)) { st = disagree(t, n, i, -1, "cursor", "another kernel or launch shape"); break; }
    const gt_arg *a = q->args + l->arg0;
    const gt_asig *s = n->pred.asig + r->arg0;
    int known = n->argvals && n->nargvals >= r->arg0 + l->nargs;
    uint64_t d = 0;
    const char *why;
    for (int j = 0; j < l->nargs && st == GT_OK; j++)
      if (!full_arg(t, &a[j], &s[j], known ? n->argvals[r->arg0 + j] : 0, serial, &nseen, &first, &cap, &d, &why))
        st = disagree(t, n, i, j, "fast tiers", why);
    if (st == GT_OK && known && d && t->pred.cexact && !noted_dirty(t, i))
      st = disagree(t, n, i, -1, "cursor", "values that differ from its graph's, not among those the replay patches");
  }
  free(first);
  return st;
}

/* Launch li, which the lane replayed (what Lua saw in L->seen[li]: its
   tensors in parameter order, NULL the one made, and its scalars), against
   its record's roles in full.  GT_ERR on a disagreement. */
static int verify_lazy(gt_tree *t, const gt_node *n, int li) {
  gt_lseen *e = &t->rt->lane.seen[li];
  if (!e->seen) return disagree(t, n, li, -1, "lane", "no note of what the lane's test saw (launcher.lua's lane code)");
  e->seen = 0;
  const gt_qlaunch *l = &n->launches[li];
  const gt_kernel *k = l->k;
  const gt_lrec *r = &n->pred.lrec[li];
  uint32_t serial = gt_key_serial(), nseen = 0;
  int64_t *first = NULL;
  int cap = 0, st = GT_OK;
  const char *why = "another record";
  for (int i = 0; i < k->ntensors && i < 8 && st == GT_OK; i++) {
    int j = k->order[i];
    const gt_asig *s = &n->pred.asig[l->arg0 + j];
    const gt_arg *qa = &r->qa[j];
    if (!e->b[i]) {
      if (r->made != i + 1 || s->role != GT_ROLE_INTERNAL) st = disagree(t, n, li, j, "lane", "an output made where the recording made none");
      continue;
    }
    gt_arg a = { e->b[i], (int64_t)e->o[i], (int64_t)e->n[i], { 0 } };
    uint64_t d = 0;
    if (a.buf != qa->buf || a.off != qa->off || a.nbytes != qa->nbytes)
      st = disagree(t, n, li, j, "lane", "another buffer struct or view than the recording queued");
    else if (s->role != GT_ROLE_EXTERNAL && !full_arg(t, &a, s, 0, serial, &nseen, &first, &cap, &d, &why))
      st = disagree(t, n, li, j, "lane", why);
  }
  for (int i = k->ntensors; i < k->nparams && st == GT_OK; i++) {
    int j = k->order[i];
    uint64_t v = i < k->ntensors + k->n4 ? (uint32_t)e->s[j] : e->s[j];
    if (v != r->qa[j].v.u64) st = disagree(t, n, li, j, "lane", "another scalar than the recording's");
  }
  free(first);
  return st;
}
