/* plan.c - the memory of a segment: its new buffers placed in the tree's pool, and the checkpoint after it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "key.h"

/* The pool holds what is live at this point of the call: a replayed node's
   checkpoint is only bound when someone needs it. */
static int materialize(gt_tree *t) {
  gt_node *n = t->state_node;
  if (!n) return GT_OK;
  gt_pool_clear(t->mem);
  for (int i = 0; i < n->nckpt; i++) {
    gt_ckpt *c = &n->ckpt[i];
    int k = t->segstart[c->seg] + c->idx;
    if (GT_GROW(t->mem->blk, t->mem->cap, t->mem->n + 1)) return gt_err(t->rt, GT_E_NOMEM);
    t->mem->blk[t->mem->n++] = (gt_block){ c->off, c->size, t->bufs[k] };
  }
  t->state_node = NULL;
  return GT_OK;
}

/* Peak bytes over the segment's launches of intervals [first, end). */
static uint64_t peak_bytes(const gt_interval *iv, int n, int nl) {
  int64_t *d = calloc(nl + 2, sizeof *d);
  if (!d) return 0;
  for (int i = 0; i < n; i++) {
    uint32_t e = iv[i].end == UINT32_MAX || iv[i].end > (uint32_t)nl ? (uint32_t)nl + 1 : iv[i].end;
    if (e <= iv[i].first) e = iv[i].first + 1;            /* a tensor occupies memory while it is made */
    int64_t sz = (int64_t)((iv[i].size + GT_ALIGN - 1) / GT_ALIGN * GT_ALIGN);
    d[iv[i].first] += sz;
    d[e] -= sz;
  }
  int64_t cur = 0, peak = 0;
  for (int k = 0; k <= nl; k++) { cur += d[k]; if (cur > peak) peak = cur; }
  free(d);
  return (uint64_t)peak;
}

typedef struct { uint64_t bytes, end, reusable; } plan_info;

/* Places the segment's new buffers over their intervals (creation to release,
   or the end of the call), from the state at the parent's end, the parent's
   buffers released here freed at their release; sets their addresses (and
   offsets into plan, when given).  The same plan serves warmups, eager runs
   and recordings: launches run in queue order, so reuse after a release is
   safe in each.  info->reusable: what freeing every new buffer after its
   last use would save at the peak. */
static int plan_segment(gt_tree *t, int first, uint64_t *plan, plan_info *info) {
  int nn = t->nbufs - first, nold = 0;
  gt_queue *q = &t->q;
  if (materialize(t)) return GT_ERR;
  gt_interval *iv = calloc(2 * nn + t->nrels + 1, sizeof *iv), *ideal = iv + nn, *old = ideal + nn;
  if (!iv) return gt_err(t->rt, GT_E_NOMEM);
  for (int i = 0; i < nn; i++) {
    gt_buf *b = t->bufs[first + i];
    iv[i] = (gt_interval){ b->bytes, b->qpos, b->relseg == t->depth ? b->rel : UINT32_MAX, b, 0 };
    ideal[i] = (gt_interval){ b->bytes, b->qpos, b->qpos, b, 0 };
  }
  for (int i = 0; i < t->nrels; i++) {
    gt_buf *b = t->rels[i];
    if (b->seg != t->depth) old[nold++] = (gt_interval){ b->bytes, 0, b->rel, b, b->addr - t->mem->base };
  }
  for (int i = 0; info && i < q->n; i++) {
    const gt_arg *a = q->args + q->l[i].arg0;
    for (int j = 0; j < q->l[i].nargs; j++) {
      gt_buf *b = a[j].buf;
      if (b && gt_role_of(t, b) == GT_ROLE_INTERNAL && ideal[b->idx].end < (uint32_t)i + 1) ideal[b->idx].end = (uint32_t)i + 1;
    }
  }
  if (info) {
    uint64_t actual = peak_bytes(iv, nn, q->n), best = peak_bytes(ideal, nn, q->n);
    info->reusable = actual > best ? actual - best : 0;
  }
  if (gt_pool_plan(t->mem, iv, nn, old, nold, t->rt->err) != GT_OK) {
    char why[GT_ERRLEN];
    snprintf(why, sizeof why, "%s", t->rt->err);
    free(iv);
    return gt_fail(t->rt, "tree '%s': out of memory: %s", t->name, why);
  }
  uint64_t end = 0, bytes = 0;
  for (int i = 0; i < nn; i++) {
    if (plan) plan[i] = iv[i].off;
    iv[i].buf->addr = t->mem->base + iv[i].off;
    bytes += (iv[i].size + GT_ALIGN - 1) / GT_ALIGN * GT_ALIGN;
    if (iv[i].off + iv[i].size > end) end = iv[i].off + iv[i].size;
  }
  free(iv);
  if (info) { info->bytes = bytes; info->end = end; }
  return GT_OK;
}

/* Recording: plan the segment, then save the plan and the checkpoint on n. */
int gt_plan_node(gt_tree *t, gt_node *n, int first) {
  int nn = t->nbufs - first;
  plan_info info;
  uint64_t *plan = malloc((nn ? nn : 1) * sizeof *plan);
  if (!plan) return gt_err(t->rt, GT_E_NOMEM);
  if (plan_segment(t, first, plan, &info)) { free(plan); return GT_ERR; }
  gt_ckpt *ck = malloc((t->mem->n ? t->mem->n : 1) * sizeof *ck);
  if (!ck) { free(plan); return gt_err(t->rt, GT_E_NOMEM); }
  uint64_t ckb = 0, end = info.end;
  for (int i = 0; i < t->mem->n; i++) {
    gt_block *k = &t->mem->blk[i];
    ck[i] = (gt_ckpt){ k->buf->seg, k->buf->idx, k->off, k->size };
    ckb += k->size;
    if (k->off + k->size > end) end = k->off + k->size;
  }
  free(n->plan); free(n->ckpt);
  n->plan = plan;
  n->nnew = nn;
  n->ckpt = ck;
  n->nckpt = t->mem->n;
  n->planned_bytes = info.bytes;
  n->checkpoint_bytes = ckb;
  n->plan_end = end;
  n->reusable_bytes = info.reusable;
  return GT_OK;
}

/* An eager run or a warmup: the segment planned for this run only. */
int gt_plan_run(gt_tree *t, int first) { return plan_segment(t, first, NULL, NULL); }
