/* lane.c - the replay lane: a replayed op's launch tested and queued from Lua.

   On the replay path the cursor (key.c) compares each launch, as it is
   queued, with what the predicted node recorded next.  For gt.ops's lean
   launches that comparison is a few equalities: the same lean state (its
   configuration id names the kernel, dims and scalars, which a lean state
   never changes), and each tensor the same buffer struct at the same view,
   still live, where the recording had one of the call's own buffers or a
   static one (gt_arg_quick's test), or an input from outside the call
   (numbered and tested by the cursor afterwards: gt_lane_check).  The lane hands Lua the predicted node's
   launches in that form (gt_lrec), so that kernel.lua's lean runner makes
   the test, the output's buffer struct and the count itself, with no call
   into the core; the core writes those launches into its queue, exactly
   as it would have queued them, when anything first reads the queue
   (gt_active: every function that reaches the call syncs first).

   The lane is open only while the cursor's prediction stands (no miss,
   statics kept, the queue's room for the node's launches reserved, so that
   a sync never allocates); anything else closes it and the core decides. */
#include <stdlib.h>
#include <string.h>
#include "core.h"

static const int32_t no_launches;

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
  n->lane_ext = 0;
  gt_lrec *rec = calloc(n->nsig ? n->nsig : 1, sizeof *rec);
  if (!rec) return NULL;
  for (int i = 0; i < n->nsig; i++) {
    const gt_qlaunch *l = &n->launches[i];
    const gt_kernel *k = l->k;
    if (l->kind != GT_GN_KERNEL || !l->cfg || k->ntensors > 8 || n->nargvals < l->arg0 + l->nargs) continue;
    const gt_asig *s = n->asig + l->arg0;
    const gt_arg *qa = n->qargs + l->arg0;
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
    if (ok && r.ext) n->lane_ext = i + 1;
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
  gt_node *n = t->cand;
  gt_lane_close(rt);
  L->lazy = 0;
  t->lane_checked = 0;
  if (t->cmiss || t->eager_call || !n || !n->nsig || !n->argvals || n->sfrees != gt_static_frees) return;
  gt_queue *q = &t->q;   /* room for every launch of n: a sync never allocates */
  if (GT_GROW(q->l, q->cap, n->nsig) || GT_GROW(q->args, q->argcap, n->nargvals)) return;
  if (!n->lrec && !(n->lrec = lane_records(n))) return;
  L->rec = n->lrec;
  L->qn = &q->n;
  L->nbufs = &t->nbufs;
  L->depth = t->depth;
  L->segstart = t->segstart[t->depth];
  L->gen = t->gen;
  L->gen_now = &t->gen;
  L->tree = t;
  gt_lane_room(t);
  L->n = n->nsig;
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
  const gt_node *n = t->cand;
  int lazy = L->lazy, i0 = q->n;
  if (!lazy) return;
  gt_lane_check(t);                  /* (while lazy counts them) */
  L->lazy = 0;
  t->lane_call = 1;
  const gt_qlaunch *l = &n->launches[i0], *last = &n->launches[i0 + lazy - 1];
  int a0 = l->arg0, na = last->arg0 + last->nargs - a0;
  if (i0 + lazy > q->cap || q->nargs + na > q->argcap) { t->lane_lost = 1; return; }  /* (cannot happen: the call fails at its flush) */
  memcpy(q->l + i0, l, lazy * sizeof *l);
  memcpy(q->args + q->nargs, n->qargs + a0, na * sizeof *q->args);
  if (q->nargs != a0) for (int i = 0; i < lazy; i++) q->l[i0 + i].arg0 += q->nargs - a0;
  gt_buf **made = t->bufs + t->segstart[t->depth];
  for (int i = i0; i < i0 + lazy; i++) {
    const gt_lrec *r = &n->lrec[i];
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
  const gt_node *n = t->cand;
  int i0 = t->q.n, end = i0 + t->rt->lane.lazy, i = t->lane_checked > i0 ? t->lane_checked : i0;
  int last = end < n->lane_ext ? end : n->lane_ext, ok = 1;
  for (; i < last && ok; i++) if (n->lrec[i].ext) ok = gt_cursor_lazy(t, n, i);
  if (end > t->lane_checked) t->lane_checked = end;
  return ok;
}
