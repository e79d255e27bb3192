/* queue.c - the lazy launch queue of a segment: kernel launches, copies and fills. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "gt_test.h"

/* Appends a launch.  No references are taken: a buffer whose Lua handle is
   collected, or which is released, during a tree call keeps its memory until
   the call's queue has run (gt_buf_settle).  GT_ERR only when host memory runs out. */
int gt_queue_push(gt_queue *q, const gt_qlaunch *l, const gt_arg *args) {
  if (GT_GROW(q->l, q->cap, q->n + 1) || GT_GROW(q->args, q->argcap, q->nargs + l->nargs))
    return GT_ERR;
  gt_qlaunch *d = &q->l[q->n++];
  *d = *l;
  d->arg0 = q->nargs;
  if (l->nargs) memcpy(q->args + q->nargs, args, l->nargs * sizeof *args);   /* args may be NULL with none */
  q->nargs += l->nargs;
  return GT_OK;
}

void gt_queue_clear(gt_queue *q) { q->n = q->nargs = 0; }

void gt_queue_free(gt_queue *q) {
  gt_queue_clear(q);
  free(q->l); free(q->args); free(q->vals); free(q->ptrs);
  memset(q, 0, sizeof *q);
}

void gt_queue_resolve(const gt_queue *q, int i, uint64_t *vals) {
  const gt_qlaunch *l = &q->l[i];
  const gt_arg *a = q->args + l->arg0;
  for (int j = 0; j < l->nargs; j++) vals[j] = a[j].buf ? a[j].buf->addr + a[j].off : a[j].v.bits;
}

void gt_queue_gnode(const gt_queue *q, int i, uint64_t *vals, void **ptrs, gt_gnode *out) {
  const gt_qlaunch *l = &q->l[i];
  memset(out, 0, sizeof *out);
  out->kind = l->kind;
  if (l->kind == GT_GN_KERNEL) {
    out->fn = l->k->fn;
    memcpy(out->grid, l->grid, sizeof l->grid);
    memcpy(out->block, l->block, sizeof l->block);
    out->smem = l->smem;
    out->nargs = l->nargs;
    for (int j = 0; j < l->nargs; j++) ptrs[j] = &vals[j];
    out->args = ptrs;
  } else {
    out->dst = l->nargs ? vals[0] : 0;     /* a cond entry: p (ELSE and an IF's END have none) */
    out->src = l->kind == GT_GN_MEMCPY ? vals[1] : 0;
    out->bytes = l->bytes;
    out->value = (uint8_t)l->value;
  }
}

int gt_queue_run(gt_backend *be, gt_queue *q, int i) {
  int n = q->l[i].nargs;
  if (GT_GROW(q->vals, q->valcap, n) || GT_GROW(q->ptrs, q->ptrcap, n)) {
    strcpy(be->err, "out of host memory");
    return GT_BERR;
  }
  gt_gnode g;
  gt_queue_resolve(q, i, q->vals);
  gt_queue_gnode(q, i, q->vals, q->ptrs, &g);
  switch (g.kind) {
  case GT_GN_KERNEL: return be->launch(be, g.fn, g.grid, g.block, g.smem, g.args);
  case GT_GN_MEMCPY: return g.bytes ? be->dtod(be, g.dst, g.src, g.bytes) : GT_BOK;
  case GT_GN_MEMSET: return g.bytes ? be->memset8(be, g.dst, g.value, g.bytes) : GT_BOK;
  default: strcpy(be->err, "a cond entry runs only as part of its queue (gt_cond_run_queue)"); return GT_BERR;
  }
}

#ifdef GT_TEST
void gt_test_queue(void) {
  gt_queue q = { 0 };
  gt_buf b = { .addr = 4096, .bytes = 64, .refs = 1 };
  gt_kernel k = { .name = "k", .nparams = 2 };
  gt_qlaunch l = { .kind = GT_GN_KERNEL, .k = &k, .grid = { 2, 1, 1 }, .block = { 32, 1, 1 }, .nargs = 2 };
  gt_arg a[2] = { { .buf = &b, .off = 16, .nbytes = 32 }, { .v.f32 = 1.5f } };
  for (int i = 0; i < 100; i++) GT_CHECK(gt_queue_push(&q, &l, a) == GT_OK);
  GT_CHECK(q.n == 100 && q.nargs == 200 && b.refs == 1);
  uint64_t vals[2];
  gt_queue_resolve(&q, 99, vals);
  float f;
  memcpy(&f, &vals[1], 4);
  GT_CHECK(vals[0] == 4096 + 16 && f == 1.5f);
  gt_queue_clear(&q);
  GT_CHECK(q.n == 0 && q.nargs == 0);
  gt_queue_free(&q);
}
#endif
