/* stage.c - a tree call's buffers: the slab of buffer structs, and the staging slots for inputs. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "predict.h"
#include "stage.h"

/* -- The call's buffers ---------------------------------------------------- */

static int grow_slab(gt_tree *t) {
  gt_runtime *rt = t->rt;
  if (GT_GROW(t->slab, t->slabcap, t->nslab + 1)) return gt_err(rt, GT_E_NOMEM);
  gt_buf *chunk = rt->nspare ? rt->spare[--rt->nspare] : malloc(GT_SLAB * sizeof *chunk);
  if (!chunk) return gt_err(rt, GT_E_NOMEM);
  t->slab[t->nslab++] = chunk;
  return GT_OK;
}

gt_buf *gt_tree_buf_new(gt_runtime *rt, uint64_t bytes) {
  gt_tree *t = gt_active(rt);
  if (!t) { gt_fail(rt, "gt_tree_buf_new outside a tree call"); return NULL; }
  int i = t->nbufs;
  if (GT_GROW(t->bufs, t->bufcap, i + 1)) { gt_err(rt, GT_E_NOMEM); return NULL; }
  if (i / GT_SLAB >= t->nslab && grow_slab(t)) return NULL;
  gt_lane_room(t);
  return gt_tree_buf_quick(t, bytes);
}

/* (Releases only note where they fall among the launches: the lane's lazy
   launches stay lazy, and a replayed segment of scopes never copies them
   into the queue.) */
int gt_tree_scope_end(gt_runtime *rt, int first, int site) {
  gt_tree *t = rt->active;
  if (!t) return gt_fail(rt, "gt_tree_scope_end outside a tree call");
  for (int i = first < 0 ? 0 : first; i < t->nbufs; i++) {
    gt_buf *b = t->bufs[i];
    if (b->flags & GT_BUF_KEEP) { b->flags &= ~GT_BUF_KEEP; continue; }
    if (b->flags & GT_BUF_RELEASED) continue;
    if (gt_buf_free_in(rt, t, b)) return GT_ERR;
    b->site = site;
  }
  return GT_OK;
}

gt_buf *gt_tree_buf_ptr(gt_tree *t, int i) {
  return i >= 0 && i / GT_SLAB < t->nslab ? &t->slab[i / GT_SLAB][i % GT_SLAB] : NULL;
}

/* The slab's structs may still be pointed at by Lua handles (tensors that
   outlived their tree): they go to the runtime for the next tree, marked so
   that every old view reads stale, never back to malloc. */
void gt_slab_give(gt_tree *t) {
  gt_runtime *rt = t->rt;
  for (int i = 0; i < t->nslab; i++) {
    gt_buf *chunk = t->slab[i];
    for (int j = 0; j < GT_SLAB; j++) chunk[j] = (gt_buf){ .gen_now = &gt_released_gen, .relseg = -1 };
    if (GT_GROW(rt->spare, rt->sparecap, rt->nspare + 1)) continue;   /* out of host memory: leak the chunk, never free it */
    rt->spare[rt->nspare++] = chunk;
  }
  free(t->slab);
}

/* -- Staging ---------------------------------------------------------------- */

void gt_tree_stage_pin(gt_runtime *rt, gt_buf *b) {
  gt_tree *t = gt_active(rt);
  if (!t || !(b->flags & GT_BUF_STAGING)) return;
  for (int i = 0; i < t->nstage; i++)
    if (t->stage[i] && b->addr >= t->stage[i]->addr && b->addr < t->stage[i]->addr + t->stage[i]->bytes) t->pinned[i] = 1;
}

/* -- Writes into inputs ----------------------------------------------------
   A call's launches mark the buffers they write (gt_buf.wgen = the call's
   generation): the queued ones when a segment runs launch by launch
   (warmup, record, eager: gt_queue_note_writes), the ones a replay's
   cursor compares through gt_cursor_arg (a recorded write into an external
   buffer, key.c), a keyed hit's patched inputs (keyed.c). */

void gt_queue_note_writes(gt_tree *t) {
  for (int i = 0; i < t->q.n; i++) {
    const gt_qlaunch *l = &t->q.l[i];
    const gt_arg *a = t->q.args + l->arg0;
    for (int j = 0; j < l->nargs; j++) if (a[j].buf && gt_launch_writes(l, j)) a[j].buf->wgen = t->gen;
  }
}

int gt_unstage(gt_runtime *rt, const gt_buf *src, uint64_t src_off, gt_buf *dst, uint64_t off, uint64_t outer,
               uint64_t chunk, uint64_t padded) {
  if (rt->active) return gt_fail(rt, "gt_unstage inside a tree call");
  if (padded < chunk || off + outer * chunk > dst->bytes || src_off + outer * padded > src->bytes)
    return gt_fail(rt, "gt_unstage: out of range");
  gt_backend *be = &rt->be;
  for (uint64_t i = 0; i < outer; i++)
    if (chunk && be->dtod(be, dst->addr + off + i * chunk, src->addr + src_off + i * padded, chunk) != GT_BOK)
      return gt_fail_be(rt, NULL);
  return GT_OK;
}

/* The k-th staging slot of this call: the k-th one that no input of the call
   lives in (a previous call's staged tensor fed back), so staging one input
   never overwrites another, in any order.  Without feedback the slots, and
   so the addresses the graphs hold, stay the same from call to call. */
static int stage_slot(gt_tree *t, int k) {
  for (int i = 0;; i++) {
    if (i >= t->nstage) {
      if (GT_GROW(t->stage, t->stagecap, i + 1) || GT_GROW(t->pinned, t->pinnedcap, i + 1)) return gt_err(t->rt, GT_E_NOMEM);
      t->stage[i] = NULL;
      t->pinned[i] = 0;
      t->nstage = i + 1;
    }
    if (!t->pinned[i] && k-- == 0) return i;
  }
}

static gt_buf *staging_buf(gt_tree *t, uint64_t addr, uint64_t bytes);

/* A traced call's staged input (gt_tree_dry): memory of its own, nothing
   copied (nothing of the call runs), so that no staging slot, where the
   last call's outputs may live, changes; freed with the call
   (gt_tree_dry_release). */
static int stage_dry(gt_runtime *rt, gt_tree *t, uint64_t need, gt_buf **out) {
  if (GT_GROW(t->dryb, t->drybcap, t->ndryb + 1) || GT_GROW(t->dryof, t->dryofcap, t->ndryb + 1))
    return gt_err(rt, GT_E_NOMEM);
  rt->active = NULL;                 /* ordinary memory, not the call's */
  gt_buf *m = gt_buf_new(rt, need ? need : 1);
  rt->active = t;
  if (!m) return GT_ERR;
  t->dryof[t->ndryb] = NULL;
  t->dryb[t->ndryb++] = m;
  gt_buf *b = staging_buf(t, m->addr, need);
  if (!b) return gt_err(rt, GT_E_NOMEM);
  b->flags |= GT_BUF_DRYARG;         /* (only the body's argument reaches it) */
  *out = b;
  return GT_OK;
}

gt_buf *gt_tree_dry_arg(gt_tree *t, gt_buf *b) {
  gt_runtime *rt = t->rt;
  if (!t->dry) { gt_fail(rt, "no traced call"); return NULL; }
  for (int i = 0; i < t->ndryb; i++) if (t->dryof[i] == b) return t->dryb[i];
  if (GT_GROW(t->dryb, t->drybcap, t->ndryb + 1) || GT_GROW(t->dryof, t->dryofcap, t->ndryb + 1)) {
    gt_err(rt, GT_E_NOMEM);
    return NULL;
  }
  gt_buf *s = malloc(sizeof *s);
  if (!s) { gt_err(rt, GT_E_NOMEM); return NULL; }
  *s = *b;                           /* (the same memory, generation and role: the segments replay as with b) */
  s->refs = 1;                       /* (the call's; a handle on it takes its own) */
  s->flags = (b->flags & ~GT_BUF_SLAB) | GT_BUF_ALIAS | GT_BUF_DRYARG;
  s->kmark = 0;
  s->block = 0;                      /* (freeing it in the body returns no memory: b's stays b's) */
  if (s->tree) s->tree->refs++;      /* (as a staged input's struct holds its tree) */
  t->dryof[t->ndryb] = b;
  t->dryb[t->ndryb++] = s;
  return s;
}

int gt_tree_dry_note(gt_tree *t) {
  gt_lane_sync(t);                   /* (the lane's launches are the segment's too) */
  const gt_queue *q = &t->q;
  if (GT_GROW(t->dreach, t->dreachcap, t->ndreach + q->nargs + 1)) return gt_err(t->rt, GT_E_NOMEM);
  for (int i = 0; i < q->nargs; i++)
    t->dreach[t->ndreach + i] = q->args[i].buf && (q->args[i].buf->flags & GT_BUF_DRYARG);
  t->ndreach += q->nargs;
  return GT_OK;
}

void gt_tree_dry_release(gt_tree *t) {
  for (int i = 0; i < t->ndryb; i++) gt_buf_unref(t->dryb[i]);
  t->ndryb = 0;
}

/* Copies an input into the call's k-th staging slot (ordinary memory the
   tree owns): outer chunks of chunk bytes, each padded to padded bytes with
   zeros, or with the esz-byte element at fill (buckets' pad value). */
int gt_tree_stage_pad(gt_runtime *rt, int k, gt_buf *src, uint64_t off, uint64_t outer, uint64_t chunk, uint64_t padded,
                      const void *fill, int esz, gt_buf **out) {
  gt_tree *t = gt_active(rt);
  if (!t) return gt_fail(rt, "staging outside a tree call");
  if (padded < chunk) padded = chunk;
  uint64_t need = outer * padded;
  if (t->dry) return stage_dry(rt, t, need, out);
  int slot = stage_slot(t, k);
  if (slot < 0) return GT_ERR;
  t->pinned[slot] = 1;
  gt_buf *m = t->stage[slot];
  if (!m || m->bytes < need) {       /* no live tensor points into an unpinned slot */
    if (m) gt_buf_unref(m);
    rt->active = NULL;               /* ordinary memory, not the call's */
    m = t->stage[slot] = gt_buf_new(rt, need);
    rt->active = t;
    if (!m) return GT_ERR;
  }
  gt_backend *be = &rt->be;
  if (fill && esz > 0 && padded > chunk && (padded - chunk) % (uint64_t)esz == 0) {   /* the pad value, element by element */
    uint64_t tail = padded - chunk;
    unsigned char *h = malloc(tail);
    if (!h) return gt_err(rt, GT_E_NOMEM);
    for (uint64_t j = 0; j < tail; j += (uint64_t)esz) memcpy(h + j, fill, (size_t)esz);
    int st = GT_BOK;
    for (uint64_t i = 0; i < outer && st == GT_BOK; i++) st = be->htod(be, m->addr + i * padded + chunk, h, tail);
    free(h);
    if (st != GT_BOK) return gt_fail_be(rt, NULL);
  } else if (padded > chunk && be->memset8(be, m->addr, 0, need) != GT_BOK) return gt_fail_be(rt, NULL);
  for (uint64_t i = 0; i < outer; i++)
    if (chunk && be->dtod(be, m->addr + i * padded, src->addr + off + i * chunk, chunk) != GT_BOK) return gt_fail_be(rt, NULL);
  gt_buf *b = staging_buf(t, m->addr, need);
  if (!b) return gt_err(rt, GT_E_NOMEM);
  *out = b;
  return GT_OK;
}

/* A buffer struct of this call over staged memory at addr. */
static gt_buf *staging_buf(gt_tree *t, uint64_t addr, uint64_t bytes) {
  gt_buf *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->addr = addr;
  b->bytes = bytes;
  b->refs = 1;
  b->tree = t;
  t->refs++;
  b->gen = t->gen;
  b->gen_now = &t->gen;
  b->flags = GT_BUF_STAGING;
  b->relseg = -1;
  return b;
}

int gt_tree_stage(gt_runtime *rt, int k, gt_buf *src, uint64_t off, uint64_t outer, uint64_t chunk, uint64_t padded, gt_buf **out) {
  return gt_tree_stage_pad(rt, k, src, off, outer, chunk, padded, NULL, 0, out);
}
