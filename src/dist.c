/* dist.c - gt.dist in the core: the group joined through the backend
   (backend_cpu.c: shared memory; backend_cuda.c: NCCL), each collective a
   queue entry of its own kind (GT_GN_COLL: run now outside a tree call,
   queued and recorded into the segment's graph inside one), and the path
   check: before a segment's first visits, the ranks compare a signature of
   what they queued (an all-gather of 8 bytes), so that ranks on different
   paths get an error instead of waiting in different collectives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "dist.h"

int gt_dist_init(gt_runtime *rt, int rank, int world, const char *id, double timeout) {
  if (rt->dist_world) {
    if (rt->dist_world == world && rt->dist_rank == rank) return GT_OK;
    return gt_fail(rt, "gt.dist.init: already joined as rank %d of %d", rt->dist_rank, rt->dist_world);
  }
  if (world < 1 || rank < 0 || rank >= world)
    return gt_fail(rt, "gt.dist.init: rank %d of world size %d is not a rank (0 .. world size - 1)", rank, world);
  if (!(rt->dist_vals = malloc((size_t)world * sizeof *rt->dist_vals))) return gt_err(rt, GT_E_NOMEM);
  if (!(rt->dist_keys = gt_buf_new(rt, (uint64_t)(world + 1) * 8))) return GT_ERR;
  if (rt->be.coll_open(&rt->be, rank, world, id, timeout) != GT_BOK) {
    gt_buf_unref(rt->dist_keys);
    rt->dist_keys = NULL;
    free(rt->dist_vals);
    rt->dist_vals = NULL;
    return gt_fail_be(rt, NULL);
  }
  rt->dist_rank = rank, rt->dist_world = world;
  return GT_OK;
}

int gt_dist_rank(gt_runtime *rt) { return rt->dist_world ? rt->dist_rank : -1; }
int gt_dist_world(gt_runtime *rt) { return rt->dist_world; }

/* Whether the queue's last entry lies inside a gt.cond/gt.loop body. */
static int in_cond_body(const gt_queue *q) {
  int open = 0;
  for (int i = 0; i < q->n; i++) {
    if (gt_kind_is_begin(q->l[i].kind)) open++;
    else if (q->l[i].kind == GT_GN_END && open > 0) open--;
  }
  return open > 0;
}

/* One rank's piece in bytes, after the sizes are checked (0 with the message set when they do not fit). */
static uint64_t piece_of(gt_runtime *rt, int kind, int root, int es, uint64_t dbytes, uint64_t sbytes, const char *name) {
  uint64_t w = (uint64_t)rt->dist_world;
  if (dbytes % (uint64_t)es || sbytes % (uint64_t)es) { gt_fail(rt, "gt.dist.%s: the sizes are not whole elements", name); return 0; }
  switch (kind) {
  case GT_COLL_ALL_GATHER:
    if (dbytes == w * sbytes) return sbytes;
    gt_fail(rt, "gt.dist.all_gather: out has %llu elements but must have world size (%d) x the input's %llu",
            (unsigned long long)(dbytes / es), rt->dist_world, (unsigned long long)(sbytes / es));
    return 0;
  case GT_COLL_REDUCE_SCATTER:
    if (sbytes == w * dbytes) return dbytes;
    gt_fail(rt, "gt.dist.reduce_scatter: the input has %llu elements but must have world size (%d) x out's %llu",
            (unsigned long long)(sbytes / es), rt->dist_world, (unsigned long long)(dbytes / es));
    return 0;
  case GT_COLL_BROADCAST:
    if (root >= 0 && root < rt->dist_world) return dbytes;
    gt_fail(rt, "gt.dist.broadcast: root %d is not a rank (0 .. %d)", root, rt->dist_world - 1);
    return 0;
  default: return dbytes;
  }
}

static int gather_tagged(gt_runtime *rt, uint64_t v, uint64_t *vals, int tag);
static int gather_u64(gt_runtime *rt, uint64_t v, uint64_t *vals) { return gather_tagged(rt, v, vals, 0); }

/* An eager collective over NCCL, which cannot tell ranks that disagree
   (they would wait or read past a buffer): the ranks compare what they are
   about to run first (the cpu backend's group compares every collective itself). */
static int same_coll(gt_runtime *rt, const gt_coll *c, const char *name) {
  uint64_t h = gt_hash64(c, sizeof *c, 0x636f6c6cull);
  if (gather_u64(rt, h, rt->dist_vals)) return GT_ERR;
  for (int k = 1; k < rt->dist_world; k++)
    if (rt->dist_vals[k] != rt->dist_vals[0])
      return gt_fail(rt, "gt.dist.%s differs across ranks: rank 0 and rank %d run collectives of another kind, dtype, size, "
                     "op or root (every rank must run the same collectives in the same order, on tensors of the same shape "
                     "and dtype)", name, k);
  return GT_OK;
}

int gt_dist_coll(gt_runtime *rt, int kind, int op, int root, int dtype, gt_buf *dst, uint64_t doff, uint64_t dbytes,
                 gt_buf *src, uint64_t soff, uint64_t sbytes) {
  static const char *const names[] = { "all_reduce", "all_gather", "reduce_scatter", "broadcast" };
  int es = gt_coll_esize(dtype);
  if (kind < 0 || kind > GT_COLL_BROADCAST) return gt_fail(rt, "gt.dist: collective kind %d is none of gt.dist's", kind);
  if (!rt->dist_world) return gt_fail(rt, "gt.dist.%s: gt.dist.init() has not been called", names[kind]);
  if (!es) return gt_fail(rt, "gt.dist.%s: dtype %d cannot be reduced or moved", names[kind], dtype);
  if (op < GT_RED_SUM || op > GT_RED_MIN) return gt_fail(rt, "gt.dist.%s: op %d is none of sum, max, min", names[kind], op);
  if (doff + dbytes > dst->bytes || soff + sbytes > src->bytes) return gt_fail(rt, "gt.dist.%s: a view exceeds its buffer", names[kind]);
  if ((kind == GT_COLL_ALL_GATHER || kind == GT_COLL_REDUCE_SCATTER) && dst == src && doff < soff + sbytes && soff < doff + dbytes)
    return gt_fail(rt, "gt.dist.%s: out and the input overlap; give out memory of its own", names[kind]);
  uint64_t piece = piece_of(rt, kind, root, es, dbytes, sbytes, names[kind]);
  if (!piece && (dbytes || sbytes)) return GT_ERR;
  gt_tree *t = gt_active(rt);
  if (t && in_cond_body(&t->q))
    return gt_fail(rt, "gt.dist.%s inside a gt.cond/gt.loop body of tree '%s': collectives cannot be conditional graph nodes "
                   "(CUDA and NCCL refuse them); decide on the host (e.g. :item()) and call it outside the body", names[kind], t->name);
  gt_coll c = { kind, op, dtype, root, piece / (uint64_t)es };
  if (!t && rt->dist_world > 1 && strcmp(rt->be.name, "cpu") && same_coll(rt, &c, names[kind])) return GT_ERR;
  gt_qlaunch l = { .kind = GT_GN_COLL, .nargs = 2, .bytes = piece, .value = gt_coll_pack(&c) };
  gt_arg a[2] = { { .buf = dst, .off = (int64_t)doff, .nbytes = (int64_t)dbytes }, { .buf = src, .off = (int64_t)soff, .nbytes = (int64_t)sbytes } };
  if (!t && (gt_buf_check(rt, dst, doff, dbytes, names[kind]) || gt_buf_check(rt, src, soff, sbytes, names[kind]))) return GT_ERR;
  return gt_submit(rt, &l, a);
}

/* Runs the path check's all-gather of v (tag 0; a barrier's: 1, so the two never pass for each other): every rank's value into vals. */
static int gather_tagged(gt_runtime *rt, uint64_t v, uint64_t *vals, int tag) {
  gt_backend *be = &rt->be;
  uint64_t base = rt->dist_keys->addr, w = (uint64_t)rt->dist_world;
  gt_coll c = { GT_COLL_CHECK, tag, GT_U64, 0, 1 };
  if (be->htod(be, base + w * 8, &v, 8) != GT_BOK || be->coll_run(be, &c, base, base + w * 8) != GT_BOK ||
      be->dtoh(be, vals, base, w * 8) != GT_BOK)
    return gt_fail_be(rt, NULL);
  return GT_OK;
}

int gt_dist_barrier(gt_runtime *rt) {
  if (!rt->dist_world) return gt_fail(rt, "gt.dist.barrier: gt.dist.init() has not been called");
  if (rt->active) return gt_fail(rt, "gt.dist.barrier inside a tree call: call it between calls");
  return gather_tagged(rt, 0, rt->dist_vals, 1);
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

/* What of the segment every rank must run alike: its collectives in order
   (kind, op, dtype, root, sizes).  Kernels may differ between ranks (rank 0
   alone adds a bias before an all-reduce); collectives that differ would
   wait for each other forever under NCCL. */
static uint64_t path_sig(gt_tree *t) {
  const gt_queue *q = &t->q;
  uint64_t h = 0x6469737470617468ull;
  for (int i = 0; i < q->n; i++)
    if (q->l[i].kind == GT_GN_COLL) h = mix(mix(h, (uint64_t)(uint32_t)q->l[i].value), q->l[i].bytes);
  return h;
}

int gt_dist_check(gt_tree *t) {
  gt_runtime *rt = t->rt;
  uint64_t *vals = rt->dist_vals, mine = path_sig(t);
  int w = rt->dist_world, nother = 0;
  char same[160] = "", other[160] = "";
  if (w < 2) return GT_OK;
  if (gather_u64(rt, mine, vals)) return GT_ERR;
  for (int k = 0; k < w; k++) {
    char *s = vals[k] == vals[0] ? same : other;
    size_t n = strlen(s);
    if (vals[k] != vals[0]) nother++;
    if (n < sizeof same - 8) snprintf(s + n, sizeof same - n, "%s%d", n ? ", " : "", k);
  }
  if (!nother) return GT_OK;
  return gt_fail(rt, "gt.dist: tree '%s' (%s): segment %d takes different paths across ranks: rank%s %s queued one list of "
                 "collectives, rank%s %s another (kinds, sizes or order differ; rank %d is this one).  Every rank's tree call "
                 "must run the same collectives: decide branches from values every rank shares",
                 t->name, t->where ? t->where : "?", t->depth + 1, strchr(same, ',') ? "s" : "", same,
                 nother > 1 ? "s" : "", other, rt->dist_rank);
}
