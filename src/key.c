/* key.c - what a graph bakes in: segment keys, and the replay cursor.

   A segment's key hashes everything its graph bakes in (launches, each
   tensor argument's role and identity, the sizes of the buffers it makes,
   its releases); scalars and external addresses are patched, not keyed.
   The key finds a node among its siblings.  On the replay path no key is
   computed: the cursor compares each launch as it is queued with what the
   predicted node recorded next (the same fields the key hashes, compared
   instead of hashed), and a segment that matched to its end is that node.
   A mismatch falls back to the key (and may switch the prediction to a
   sibling whose recording matches what was queued so far). */
#include <stdlib.h>
#include <string.h>
#include "core.h"

static inline uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

static uint32_t serial_counter;
static uint32_t next_serial(void) { return ++serial_counter ? serial_counter : ++serial_counter; }

/* Numbers buffers in order of first appearance within one key computation
   (serial): O(1) per argument through a mark on the buffer. */
static uint32_t ordinal(uint32_t serial, uint32_t *nseen, gt_buf *b) {
  if (b->kmark != serial) { b->kmark = serial; b->kord = (*nseen)++; }
  return b->kord;
}

int gt_role_of(const gt_tree *t, const gt_buf *b) {
  if (b->flags & GT_BUF_STAGING) return GT_ROLE_EXTERNAL;
  if ((b->flags & GT_BUF_TREE) && b->tree == t && b->gen == t->gen) return b->seg == t->depth ? GT_ROLE_INTERNAL : GT_ROLE_PATH;
  return (b->flags & GT_BUF_STATIC) ? GT_ROLE_STATIC : GT_ROLE_EXTERNAL;
}

/* One tensor argument as the key sees it.  topology: static tensors by order
   of use, not address.  An external buffer: by order of first use, and its
   view by the offset from the one it was first used at (*first, *cap: those
   offsets by ordinal), as its address is patched: one view at any offset is
   one node, two views of one buffer are keyed by how they lie. */
static gt_asig arg_sig(const gt_tree *t, const gt_arg *a, int topology, uint32_t serial, uint32_t *nseen,
                       int64_t **first, int *cap) {
  gt_buf *b = a->buf;
  gt_asig s = { 0, a->off, a->nbytes, gt_role_of(t, b), 0, b };
  switch (s.role) {
  case GT_ROLE_INTERNAL: s.id = (uint64_t)b->idx; break;
  case GT_ROLE_PATH: s.id = ((uint64_t)b->seg << 32) | (uint32_t)b->idx; break;
  case GT_ROLE_STATIC: s.id = topology ? ordinal(serial, nseen, b) : b->addr; break;
  default: {
    int fresh = b->kmark != serial;
    s.id = ordinal(serial, nseen, b);
    if (fresh && !GT_GROW(*first, *cap, (int)s.id + 1)) (*first)[s.id] = a->off;
    if ((int)s.id < *cap) s.off = a->off - (*first)[s.id];   /* (out of host memory: absolute, another node at worst) */
    break;
  }
  }
  return s;
}

uint64_t gt_segment_key(gt_tree *t, int topology) {
  gt_queue *q = &t->q;
  uint32_t nseen = 0, ser = next_serial();
  int first = t->segstart[t->depth];
  uint64_t h = mix(0x51ed270b27f1a3ull + (uint64_t)topology, (uint64_t)(t->nbufs - first));
  for (int i = first; i < t->nbufs; i++) h = mix(h, t->bufs[i]->bytes);
  for (int i = 0; i < q->n; i++) {
    const gt_qlaunch *l = &q->l[i];
    h = mix(h, ((uint64_t)l->kind << 62) ^ ((uint64_t)l->smem << 32) ^ (l->k ? (uint64_t)l->k->id : l->bytes));
    if (!topology) {
      h = mix(h, ((uint64_t)l->grid[0] << 40) ^ ((uint64_t)l->grid[1] << 20) ^ l->grid[2]);
      h = mix(h, ((uint64_t)l->block[0] << 40) ^ ((uint64_t)l->block[1] << 20) ^ l->block[2]);
    }
    const gt_arg *a = q->args + l->arg0;
    for (int j = 0; j < l->nargs; j++) {
      if (!a[j].buf) continue;
      gt_asig s = arg_sig(t, &a[j], topology, ser, &nseen, &t->kfirst, &t->kfirstcap);
      h = mix(h, ((uint64_t)s.role << 60) ^ ((uint64_t)j << 52) ^ (uint64_t)s.off);
      h = mix(mix(h, (uint64_t)s.nbytes), s.id);
    }
  }
  for (int i = 0; i < t->nrels; i++) {   /* releases plan memory: the same launches released otherwise are another node */
    gt_buf *b = t->rels[i];
    h = mix(mix(h, 0x7e1ea5eull ^ ((uint64_t)b->rel << 20)), ((uint64_t)b->seg << 32) | (uint32_t)b->idx);
  }
  return h;
}

/* -- The cursor ------------------------------------------------------------ */

static int same_launch(const gt_qlaunch *a, const gt_qlaunch *b) {
  return a->kind == b->kind && a->k == b->k && a->nargs == b->nargs && a->smem == b->smem && a->bytes == b->bytes &&
         a->value == b->value && a->grid[0] == b->grid[0] && a->grid[1] == b->grid[1] && a->grid[2] == b->grid[2] &&
         a->block[0] == b->block[0] && a->block[1] == b->block[1] && a->block[2] == b->block[2];
}

/* Notes launch i, matched, among those a replay patches when dirty (one of
   its scalars or external addresses differs from the value the graph holds;
   unknown: the values are not known). */
static void note_dirty(gt_tree *t, int i, uint64_t dirty, int unknown) {
  if (!dirty || !t->cexact) return;
  if (unknown || GT_GROW(t->cdirty, t->cdirtycap, t->ndirty + 1)) t->cexact = 0;
  else t->cdirty[t->ndirty++] = i;
}

/* Launch i of the queue against launch i of n's recording.  On a match, i
   joins t->cdirty when one of its scalars or external addresses differs from
   the value n's graph holds (internal, path and static arguments that match
   are at the addresses the graph holds: the plan is fixed while n lives). */
static int match_at(gt_tree *t, const gt_node *n, int i) {
  if (i >= n->nsig) return 0;
  const gt_qlaunch *l = &t->q.l[i], *r = &n->launches[i];
  if ((!l->cfg || l->cfg != r->cfg) && !same_launch(l, r)) return 0;
  const gt_arg *a = t->q.args + l->arg0;
  const gt_asig *s = n->asig + r->arg0;
  static const uint64_t none[GT_MAX_PARAMS];   /* (a launch has at most GT_MAX_PARAMS arguments) */
  const uint64_t *was = n->argvals && n->nargvals >= r->arg0 + l->nargs ? n->argvals + r->arg0 : none;
  uint64_t dirty = 0;
  int statics_kept = n->sfrees == gt_static_frees;
  for (int j = 0; j < l->nargs; j++)
    if (!gt_arg_quick(&a[j], &s[j], was[j], statics_kept, &dirty) && !gt_cursor_arg(t, &a[j], &s[j], was[j], &dirty))
      return 0;
  note_dirty(t, i, dirty | (was == none), was == none);
  return 1;
}

int gt_cursor_arg(gt_tree *t, const gt_arg *a, const gt_asig *s, uint64_t was, uint64_t *dirty) {
  if (!a->buf) return 0;
  gt_asig x = arg_sig(t, a, 0, t->cserial, &t->cseen, &t->cfirst, &t->cfirstcap);
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
  if (t->cmiss) return 0;
  const gt_qlaunch *l = &n->launches[i];
  const gt_arg *a = n->qargs + l->arg0;
  const gt_asig *s = n->asig + l->arg0;
  const uint64_t *was = n->argvals + l->arg0;
  uint64_t dirty = 0;
  for (int j = 0; j < l->nargs; j++)
    if (s[j].role == GT_ROLE_EXTERNAL && !gt_cursor_arg(t, &a[j], &s[j], was[j], &dirty)) {
      t->cmiss = 1;
      t->rt->lane_close(t->rt);
      return 0;
    }
  note_dirty(t, i, dirty, 0);
  return 1;
}

static void restart(gt_tree *t) {
  t->cfrees = gt_static_frees;
  t->cserial = next_serial();
  t->cseen = 0;
  t->ndirty = 0;
  t->cexact = 1;
}

/* A segment begins under parent: predict the child that followed the one
   visited there last, the last time that one was visited (a steady path
   follows itself; alternating or cycling paths are predicted too). */
void gt_cursor_start(gt_tree *t, gt_node *parent) {
  gt_node *k = parent->last_kid;
  t->cand = k && k->after ? k->after : k;
  t->cmiss = !t->cand;
  restart(t);
}

/* The prediction missed at launch i: a sibling whose recording matches the
   whole queue so far takes over (its ordinals numbered afresh). */
static void switch_cand(gt_tree *t, int i) {
  gt_node *p = t->cand->parent, *miss = t->cand;
  t->cmiss = 1;
  t->rt->lane_close(t->rt);
  for (int k = 0; k < p->nkids; k++) {
    gt_node *c = p->kids[k];
    if (c == miss || c->nsig <= i) continue;
    restart(t);
    int j = 0;
    while (j <= i && match_at(t, c, j)) j++;
    if (j > i) { t->cand = c; t->cmiss = 0; t->rt->lane_start(t); return; }   /* (the lane follows the new prediction) */
  }
}

void gt_cursor_push(gt_tree *t) {
  if (t->cmiss) return;
  int i = t->q.n - 1;
  if (!match_at(t, t->cand, i)) switch_cand(t, i);
}

/* At the segment's end: the predicted node, if everything matched. */
gt_node *gt_cursor_hit(gt_tree *t, int first) {
  gt_node *n = t->cand;
  if (t->cmiss || t->q.n + t->rt->lane.lazy != n->nsig || t->nbufs - first != n->nbsig || t->nrels != n->nrsig) return NULL;
  for (int i = 0; i < n->nbsig; i++) if (t->bufs[first + i]->bytes != n->bsig[i]) return NULL;
  for (int i = 0; i < t->nrels; i++) {
    const gt_buf *b = t->rels[i];
    const gt_rsig *r = &n->rsig[i];
    if (b->rel != r->rel || b->seg != r->seg || b->idx != r->idx) return NULL;
  }
  /* every static argument was tested the long way (flags, address) and no
     static struct has been freed since the segment began: n's statics are
     kept from here (the quick test, and the lane, may trust them again) */
  if (n->sfrees != gt_static_frees && t->cfrees == gt_static_frees) n->sfrees = gt_static_frees;
  return n;
}

int gt_cursor_dirty(const gt_tree *t, const gt_node *n) {
  return n == t->cand && !t->cmiss && t->cexact ? t->ndirty : -1;
}

/* After n's graph was built from the queue: what the cursor compares with. */
int gt_cursor_save(gt_tree *t, gt_node *n, int first) {
  gt_queue *q = &t->q;
  int nb = t->nbufs - first;
  gt_asig *as = malloc((q->nargs ? q->nargs : 1) * sizeof *as);
  uint64_t *bs = malloc((nb ? nb : 1) * sizeof *bs);
  gt_rsig *rs = malloc((t->nrels ? t->nrels : 1) * sizeof *rs);
  gt_arg *qa = malloc((q->nargs ? q->nargs : 1) * sizeof *qa);
  if (!as || !bs || !rs || !qa) { free(as); free(bs); free(rs); free(qa); return gt_fail(t->rt, "out of host memory"); }
  if (q->nargs) memcpy(qa, q->args, q->nargs * sizeof *qa);   /* (an empty queue may have no array) */
  uint32_t nseen = 0, ser = next_serial();
  for (int i = 0; i < q->nargs; i++) as[i] = q->args[i].buf ? arg_sig(t, &q->args[i], 0, ser, &nseen, &t->kfirst, &t->kfirstcap) : (gt_asig){ 0 };
  for (int i = 0; i < q->n; i++)
    for (int j = 0; j < q->l[i].nargs; j++) as[q->l[i].arg0 + j].write = gt_launch_writes(&q->l[i], j);
  for (int i = 0; i < nb; i++) bs[i] = t->bufs[first + i]->bytes;
  for (int i = 0; i < t->nrels; i++) rs[i] = (gt_rsig){ t->rels[i]->rel, t->rels[i]->seg, t->rels[i]->idx };
  gt_cursor_forget(n);
  n->asig = as; n->bsig = bs; n->rsig = rs; n->qargs = qa;
  n->nsig = q->n; n->nbsig = nb; n->nrsig = t->nrels;
  n->sfrees = gt_static_frees;
  return GT_OK;
}

void gt_cursor_forget(gt_node *n) {
  free(n->asig); free(n->bsig); free(n->rsig); free(n->lrec); free(n->qargs);
  n->asig = NULL; n->bsig = NULL; n->rsig = NULL; n->lrec = NULL; n->qargs = NULL;
  n->nsig = n->nbsig = n->nrsig = 0;
}
