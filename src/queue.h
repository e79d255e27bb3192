/* queue.h - the launch queue of the segment being built, gt_submit (queue.c; private to the core). */
#ifndef GT_QUEUE_H
#define GT_QUEUE_H
#include "gt_internal.h"
#include "backend.h"

typedef struct gt_qlaunch {
  int kind;                  /* GT_GN_KERNEL / GT_GN_MEMCPY / GT_GN_MEMSET / GT_GN_COLL (its args: dst, src) */
  uint32_t cfg;              /* the launch configuration's id (0: none): equal ids, equal kernel and dims */
  gt_kernel *k;
  unsigned grid[3], block[3], smem;
  int arg0, nargs;           /* slice of queue.args */
  uint64_t bytes;            /* memcpy/memset; a collective's piece (one rank's part) */
  int value;                 /* memset; a collective: gt_coll_pack's */
  int made;                  /* kernels: the tensor (1.., in parameter order) whose buffer the launch made; 0: none */
} gt_qlaunch;

typedef struct gt_queue {
  gt_qlaunch *l; int n, cap;
  gt_arg *args; int nargs, argcap;
  uint64_t *vals; int valcap;     /* resolved argument values (scratch) */
  void **ptrs; int ptrcap;
} gt_queue;

int gt_queue_push(gt_queue *q, const gt_qlaunch *l, const gt_arg *args);
/* Room for one more launch of nargs arguments at the queue's end: its entry,
   and in *args where its arguments go; gt_queue_commit appends it once
   filled in.  NULL when host memory runs out.  (Inline: every replayed op
   queues through these.) */
static inline gt_qlaunch *gt_queue_reserve(gt_queue *q, int nargs, gt_arg **args) {
  if (GT_GROW(q->l, q->cap, q->n + 1) || GT_GROW(q->args, q->argcap, q->nargs + nargs)) return NULL;
  *args = q->args + q->nargs;
  return &q->l[q->n];
}

static inline void gt_queue_commit(gt_queue *q, gt_qlaunch *d) {
  d->arg0 = q->nargs;
  q->nargs += d->nargs;
  q->n++;
}
void gt_queue_clear(gt_queue *q);
void gt_queue_free(gt_queue *q);
/* Launch i's arguments as values (addresses, scalar bits) into vals. */
void gt_queue_resolve(const gt_queue *q, int i, uint64_t *vals);
/* A backend node for launch l whose argument values are vals (ptrs: scratch
   of nargs, kept alive by the caller while the node is used). */
void gt_launch_gnode(const gt_qlaunch *l, uint64_t *vals, void **ptrs, gt_gnode *out);
/* Run launch i now; backend status. */
int gt_queue_run(gt_backend *be, gt_queue *q, int i);
/* A launch from the API: queued in a tree call (and pushed past the replay
   cursor), else run now (watched writes noted).  args: l->nargs, copied. */
int gt_submit(gt_runtime *rt, const gt_qlaunch *l, gt_arg *args);
/* Whether launch l writes its argument j (`T *` of a kernel, a copy's or fill's destination; cond entries read p). */
static inline int gt_launch_writes(const gt_qlaunch *l, int j) {
  return l->kind == GT_GN_KERNEL ? l->k->ptype[j] == GT_P_OUT : (l->kind == GT_GN_MEMCPY || l->kind == GT_GN_MEMSET || l->kind == GT_GN_COLL) && j == 0;
}
/* Whether launch l's entries are two addresses (a copy's, a collective's: dst, src). */
static inline int gt_kind_two_addrs(int kind) { return kind == GT_GN_MEMCPY || kind == GT_GN_COLL; }
static inline int gt_kind_is_begin(int kind) { return kind == GT_GN_IF || kind == GT_GN_WHILE; }
static inline int gt_kind_is_cond(int kind) { return kind >= GT_GN_IF && kind <= GT_GN_END; }
/* A launch as messages name it: its kernel, or what it is. */
static inline const char *gt_launch_what(const gt_qlaunch *l) {
  static const char *const colls[] = { "all_reduce", "all_gather", "reduce_scatter", "broadcast", "path check" };
  if (l->kind == GT_GN_COLL) return colls[(l->value & 15) <= 4 ? l->value & 15 : 4];
  return l->kind == GT_GN_KERNEL ? l->k->name : l->kind == GT_GN_MEMCPY ? "copy" : l->kind == GT_GN_MEMSET ? "fill" : "gt.cond";
}
/* gt_buf_free within t's call (or none), without syncing the lane first. */
int gt_buf_free_in(gt_runtime *rt, gt_tree *t, gt_buf *b);
#endif
