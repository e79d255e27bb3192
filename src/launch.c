/* launch.c - kernel launches: a launch configuration checked once, the
   arguments bound and checked (gt_launch, gt_launch_tensors: the bound
   launchers' entry), and the lean launches of gt.ops (gt_launch_lean); in a
   tree call the launch is queued and compared with the predicted node's as
   it is (the cursor's quick tier inline here, predict.h). */
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "predict.h"
#include "stage.h"

/* For a launch of configuration cfg (an id, 0: none) with nargs arguments
   about to be queued in t: the signature of the predicted node's launch at
   that position, its graph values (*was) and whether statics are kept; NULL
   when there is nothing to test quickly (no prediction, another
   configuration, values unknown): gt_cursor_push decides. */
static inline const gt_asig *cursor_expect(const gt_tree *t, uint32_t cfg, int nargs, const uint64_t **was,
                                              int *statics_kept) {
  const gt_node *n = t->pred.cand;
  int i = t->q.n;
  if (t->pred.cmiss || !cfg || i >= n->pred.nsig) return NULL;
  const gt_qlaunch *r = &n->launches[i];
  if (r->cfg != cfg || !n->argvals || n->nargvals < r->arg0 + nargs) return NULL;
  *was = n->argvals + r->arg0;
  *statics_kept = n->sfrees == gt_static_frees;
  return n->pred.asig + r->arg0;
}

/* After a launch that faulted past the start of a tensor parameter (the cpu
   backend names it): that tensor's size, appended to the message. */
static void fault_sizes(gt_runtime *rt, const gt_kernel *k, const gt_arg *args) {
  static const char tag[] = "past the start of parameter '";
  const char *p = rt->be.fault_addr ? strstr(rt->err, tag) : NULL;
  if (!p) return;
  p += sizeof tag - 1;
  size_t nl = strcspn(p, "'");
  for (int i = 0; i < k->nparams; i++) {
    if (!args[i].buf || strlen(k->pname[i]) != nl || strncmp(k->pname[i], p, nl)) continue;
    uint64_t start = args[i].buf->addr + (uint64_t)args[i].off, len = (uint64_t)args[i].nbytes;
    size_t n = strlen(rt->err);
    if (rt->be.fault_addr >= start + len)
      snprintf(rt->err + n, GT_ERRLEN - n, " Parameter '%s' holds %llu bytes: the access is %llu bytes past its end.",
               k->pname[i], (unsigned long long)len, (unsigned long long)(rt->be.fault_addr - start - len));
    return;
  }
}

static int check_dims(gt_runtime *rt, const gt_kernel *k, unsigned gx, unsigned gy, unsigned gz,
                      unsigned bx, unsigned by, unsigned bz) {
  if (!gx || !gy || !gz || !bx || !by || !bz)
    return gt_fail(rt, "kernel '%s': grid and block sizes must be at least 1", k->name);
  /* CUDA's limits on every current device; the cpu backend keeps them too so
     that a launch debugged there also runs on a GPU. */
  if (gx > 0x7fffffffu || gy > 65535 || gz > 65535)
    return gt_fail(rt, "kernel '%s': grid %ux%ux%u exceeds the device limits (x up to 2147483647, y and z up to 65535)",
                   k->name, gx, gy, gz);
  if (bx > 1024 || by > 1024 || bz > 64 || (uint64_t)bx * by * bz > 1024)
    return gt_fail(rt, "kernel '%s': block %ux%ux%u exceeds the device limits (x, y up to 1024, z up to 64, "
                   "at most 1024 threads in all)", k->name, bx, by, bz);
  return GT_OK;
}

int gt_launch_config(gt_runtime *rt, gt_kernel *k, unsigned gx, unsigned gy, unsigned gz,
                     unsigned bx, unsigned by, unsigned bz, unsigned smem, gt_launchcfg *out) {
  if (check_dims(rt, k, gx, gy, gz, bx, by, bz)) return GT_ERR;
  static int32_t ids;    /* a configuration's id, never reused (the cursor compares one number, key.c); 0 once spent */
  *out = (gt_launchcfg){ k, { gx, gy, gz }, { bx, by, bz }, smem, ids < INT32_MAX ? ++ids : 0 };
  return GT_OK;
}

/* Runs the launch now (outside a tree call). */
static int launch_now(gt_runtime *rt, const gt_qlaunch *l, gt_arg *args) {
  const gt_kernel *k = l->k;
  for (int i = 0; i < k->nparams; i++)
    if (args[i].buf && !args[i].buf->addr) return gt_fail(rt, "kernel '%s': parameter '%s' has no memory", k->name, k->pname[i]);
  rt->be.fault_addr = 0;
  if (gt_submit(rt, l, args) != GT_OK) {
    fault_sizes(rt, k, args);
    return GT_ERR;
  }
  return GT_OK;
}

/* Queues (in a tree call) or runs the kernel.  Scalars are normalised here
   so equal values compare equal. */
int gt_launch(gt_runtime *rt, gt_kernel *k, unsigned gx, unsigned gy, unsigned gz,
              unsigned bx, unsigned by, unsigned bz, unsigned smem, gt_arg *args) {
  if (check_dims(rt, k, gx, gy, gz, bx, by, bz)) return GT_ERR;
  for (int i = 0; i < k->nparams; i++) {
    switch (k->ptype[i]) {
    case GT_P_IN: case GT_P_OUT:
      if (!args[i].buf) return gt_fail(rt, "kernel '%s': parameter '%s' needs a tensor", k->name, k->pname[i]);
      if (args[i].buf->gen != *args[i].buf->gen_now)
        return gt_fail(rt, "kernel '%s': parameter '%s' is a stale tensor (overwritten by a later tree call)", k->name, k->pname[i]);
      break;
    case GT_P_I32: case GT_P_U32: case GT_P_F32: args[i].v.bits &= 0xffffffffu; args[i].buf = NULL; break;
    case GT_P_BOOL: args[i].v.bits = (args[i].v.bits & 0xff) != 0; args[i].buf = NULL; break;
    default: args[i].buf = NULL; break;
    }
  }
  gt_qlaunch l = { .kind = GT_GN_KERNEL, .k = k, .grid = { gx, gy, gz }, .block = { bx, by, bz }, .smem = smem, .nargs = k->nparams };
  return rt->active ? gt_submit(rt, &l, args) : launch_now(rt, &l, args);
}

/* Tensor parameter j's handle t bound into o (in tree call tr, an output
   handle without a buffer gets the call's next one).  0, j + 1 when t is
   stale, non-contiguous or of another dtype, or GT_ERR (out of host memory). */
static inline __attribute__((always_inline)) int bind_tensor(gt_tree *tr, const gt_kernel *k, int j, const gt_tensor *t, gt_arg *o) {
  gt_buf *b = t->_b;
  if (!b) {
    if (!tr || k->ptype[j] != GT_P_OUT) return j + 1;
    gt_tensor *y = (gt_tensor *)t;
    b = gt_tree_buf_quick(tr, (uint64_t)y->_nb);
    if (!b && !(b = gt_tree_buf_new(tr->rt, (uint64_t)y->_nb))) return GT_ERR;
    y->_b = b;
    y->_gen = tr->gen;
  }
  if (t->_gen != *b->gen_now || t->_vid || (k->pdtype[j] && t->_dt != k->pdtype[j])) return j + 1;
  o->buf = b; o->off = (int64_t)t->_off; o->nbytes = (int64_t)t->_nb; o->v.u64 = 0;
  return 0;
}

/* A bound launch's arguments into out (k->nparams): the tensor parameters
   from their handles (bind_tensor), the scalars from args in normal form (a
   4-byte one is read as 4 bytes, as Lua stored it: an 8-byte load of a
   fresh 4-byte store waits for the store to reach the cache).  0, j + 1 when
   tensor parameter j fails its check, or GT_ERR. */
static inline int bind_args(gt_tree *tr, const gt_kernel *k, const gt_tensor *const *ts, const gt_arg *args, gt_arg *out) {
  for (int j = 0; j < k->nparams; j++) {
    gt_arg *o = &out[j];
    switch (k->ptype[j]) {
    case GT_P_IN: case GT_P_OUT: {
      int bad = bind_tensor(tr, k, j, ts[j], o);
      if (bad) return bad;
      break;
    }
    case GT_P_I32: case GT_P_U32: case GT_P_F32:
      o->buf = NULL; o->off = o->nbytes = 0; o->v.u64 = args[j].v.u32;
      break;
    default:
      o->buf = NULL; o->off = o->nbytes = 0; o->v.u64 = args[j].v.u64;
      break;
    }
  }
  return 0;
}

/* The scalars of a predicted launch of k (its parameters from order[ntensors]
   on) from args into out in normal form (4-byte ones read as 4 bytes, as
   bind_args), returning their differences from was (the values the graph
   holds) ORed together.  Two loops, the 4-byte scalars then the rest: no
   test of the width per scalar. */
static inline uint64_t bind_scalars(const gt_kernel *k, const gt_arg *args, gt_arg *out, const uint64_t *was) {
  const uint8_t *ord = k->order;
  int i = k->ntensors, n4 = i + k->n4, n = k->nparams;
  uint64_t d = 0;
  for (; i < n4; i++) {
    int j = ord[i];
    uint64_t v = args[j].v.u32;
    out[j] = (gt_arg){ NULL, 0, 0, { .u64 = v } };
    d |= v ^ was[j];
  }
  for (; i < n; i++) {
    int j = ord[i];
    uint64_t v = args[j].v.u64;
    out[j] = (gt_arg){ NULL, 0, 0, { .u64 = v } };
    d |= v ^ was[j];
  }
  return d;
}

/* bind_args for a launch the cursor predicted (cursor_expect: s, the
   recorded launch's signature, of the same configuration, so the same
   kernel: its scalars are where s has scalars), in k->order: the tensors
   first, each taking gt_arg_quick's test as it is bound, or when that
   cannot tell (an external buffer, numbered by first use) gt_cursor_arg's
   (*quick stays 1 while all pass), then the scalars, whose differences
   from was (the values the graph holds) gather in *dirty.  No switch on the parameter's
   type: a replayed op's binding is its tensors and a few XORs. */
static inline int bind_predicted(gt_tree *tr, const gt_kernel *k, const gt_tensor *const *ts, const gt_arg *args,
                                 gt_arg *out, const gt_asig *s, const uint64_t *was, int statics_kept, int *quick,
                                 uint64_t *dirty) {
  const uint8_t *ord = k->order;
  int nt = k->ntensors, q = 1;
  uint64_t d = 0;
  for (int i = 0; i < nt; i++) {
    int j = ord[i];
    int bad = bind_tensor(tr, k, j, ts[j], &out[j]);
    if (bad) return bad;
    if (q) q = gt_predict_arg(tr, &out[j], &s[j], was[j], statics_kept, &d);
  }
  *quick = q;
  *dirty = d | bind_scalars(k, args, out, was);
  return 0;
}

/* The queue entry of a launch of configuration c. */
static gt_qlaunch launch_of(const gt_launchcfg *c) {
  return (gt_qlaunch){ .kind = GT_GN_KERNEL, .cfg = c->id, .k = c->k, .grid = { c->grid[0], c->grid[1], c->grid[2] },
                       .block = { c->block[0], c->block[1], c->block[2] }, .smem = c->smem, .nargs = c->k->nparams };
}

/* The launch of configuration c whose arguments were bound at d's slot ends
   its entry in the queue; the cursor notes it: quick (every argument passed
   gt_predict_arg) with its differences dirty, else compared in full; made:
   the tensor (1.., 0: none) whose buffer it made (the lane's record). */
static inline void commit_predicted(gt_tree *t, gt_qlaunch *d, const gt_launchcfg *c, int made, int quick, uint64_t dirty) {
  *d = launch_of(c);
  d->made = made;
  gt_queue_commit(&t->q, d);
  if (quick) { if (dirty) gt_cursor_quick(t, dirty); }   /* the predicted launch, argument for argument */
  else gt_cursor_push(t);
}

int gt_launch_tensors(gt_runtime *rt, const gt_launchcfg *c, const gt_tensor *const *ts, const gt_arg *args) {
  gt_kernel *k = c->k;
  gt_tree *t = gt_active(rt);
  if (t) {                         /* in a tree call: straight into the queue, compared as it lands */
    gt_arg *a;
    gt_qlaunch *d = gt_queue_reserve(&t->q, k->nparams, &a);
    if (!d) return gt_err(rt, GT_E_NOMEM);
    const uint64_t *was = NULL;
    int kept = 0, quick = 0;
    uint64_t dirty = 0;
    const gt_asig *s = cursor_expect(t, c->id, k->nparams, &was, &kept);
    int bad = s ? bind_predicted(t, k, ts, args, a, s, was, kept, &quick, &dirty) : bind_args(t, k, ts, args, a);
    if (bad) return bad;
    commit_predicted(t, d, c, 0, quick, dirty);
    return GT_OK;
  }
  gt_arg a[GT_MAX_PARAMS];
  int bad = bind_args(NULL, k, ts, args, a);
  if (bad) return bad;
  gt_qlaunch l = launch_of(c);
  return launch_now(rt, &l, a);
}

/* One tensor of a predicted lean launch (lean_predicted), parameter j, by
   value: bound into out[j] and tested (gt_predict_arg) while *q stays 1.  b was checked live, or made. */
static inline __attribute__((always_inline)) void lean_bind(gt_tree *t, int j, gt_buf *b, double off, double nb,
                                                            gt_arg *out, const gt_asig *s, const uint64_t *was,
                                                            int kept, int *q, uint64_t *d) {
  gt_arg *o = &out[j];
  o->buf = b; o->off = (int64_t)off; o->nbytes = (int64_t)nb; o->v.u64 = 0;
  if (*q) *q = gt_predict_arg(t, o, &s[j], was[j], kept, d);
}

/* gt_launch_lean's path for the replayed op: a tree call whose cursor
   predicts this configuration next (s, was, kept: cursor_expect's), its
   tensors live and any without a buffer an output.  The tensors go from
   the registers they came in straight into the queue (no handles built, no
   dtype or contiguity test: the lean caller made those), the output's
   buffer from the slab.  Returns the buffer made (none: b1), or NULL
   having changed nothing when the general path must decide (a stale
   tensor, a missing one, a full slab or queue: it raises what is wrong). */
static inline __attribute__((always_inline)) gt_buf *
lean_predicted(gt_tree *t, const gt_launchcfg *c, const gt_arg *args, const gt_asig *s, const uint64_t *was, int kept,
               gt_buf *b1, double o1, double n1, int32_t g1, gt_buf *b2, double o2, double n2, int32_t g2,
               gt_buf *b3, double o3, double n3, int32_t g3, gt_buf *b4, double o4, double n4, int32_t g4) {
  const gt_kernel *k = c->k;
  const uint8_t *ord = k->order;
  int nt = k->ntensors, made = -1;
  if (nt > 4) return NULL;
  gt_buf *bv[4] = { b1, b2, b3, b4 };
  const int32_t gv[4] = { g1, g2, g3, g4 };
  for (int i = 0; i < nt; i++) {
    if (!bv[i]) {
      if (made >= 0 || k->ptype[ord[i]] != GT_P_OUT) return NULL;
      made = i;
    } else if (gv[i] != *bv[i]->gen_now) return NULL;
  }
  gt_arg *a;
  gt_qlaunch *d = gt_queue_reserve(&t->q, k->nparams, &a);
  if (!d) return NULL;
  if (made >= 0) {
    const double nbv[4] = { n1, n2, n3, n4 };
    if (!(bv[made] = gt_tree_buf_quick(t, (uint64_t)nbv[made]))) return NULL;
  }
  int q = 1;
  uint64_t dirty = 0;
  switch (nt) {                  /* (fall through: the tensors in order, each from its own registers) */
  case 4: lean_bind(t, ord[3], bv[3], o4, n4, a, s, was, kept, &q, &dirty); /* fall through */
  case 3: lean_bind(t, ord[2], bv[2], o3, n3, a, s, was, kept, &q, &dirty); /* fall through */
  case 2: lean_bind(t, ord[1], bv[1], o2, n2, a, s, was, kept, &q, &dirty); /* fall through */
  case 1: lean_bind(t, ord[0], bv[0], o1, n1, a, s, was, kept, &q, &dirty); /* fall through */
  default: break;
  }
  commit_predicted(t, d, c, made + 1, q, dirty | bind_scalars(k, args, a, was));
  return bv[made >= 0 ? made : 0];
}

gt_buf *gt_launch_lean(gt_runtime *rt, const gt_launchcfg *c, const gt_arg *args,
                       gt_buf *b1, double o1, double n1, int32_t g1, gt_buf *b2, double o2, double n2, int32_t g2,
                       gt_buf *b3, double o3, double n3, int32_t g3, gt_buf *b4, double o4, double n4, int32_t g4) {
  const gt_kernel *k = c->k;
  gt_tree *t = gt_active(rt);
  if (t) {
    const uint64_t *was;
    int kept;
    const gt_asig *s = cursor_expect(t, c->id, k->nparams, &was, &kept);
    gt_buf *b = s ? lean_predicted(t, c, args, s, was, kept, b1, o1, n1, g1, b2, o2, n2, g2, b3, o3, n3, g3,
                                   b4, o4, n4, g4) : NULL;
    if (b) return b;
  }
  gt_tensor tv[4] = { { b1, o1, n1, g1, 0, 0, 0 }, { b2, o2, n2, g2, 0, 0, 0 },
                      { b3, o3, n3, g3, 0, 0, 0 }, { b4, o4, n4, g4, 0, 0, 0 } };
  const gt_tensor *ts[GT_MAX_PARAMS];
  int nt = k->ntensors < 4 ? k->ntensors : 4, made = -1;
  for (int i = nt - 1; i >= 0; i--) {
    int j = k->order[i];
    tv[i]._dt = k->pdtype[j];
    ts[j] = &tv[i];
    if (!tv[i]._b) made = i;
  }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"   /* (ts's scalar entries are not read) */
  int r = gt_launch_tensors(rt, c, ts, args);
#pragma GCC diagnostic pop
  if (r) { rt->lean_status = r; return NULL; }
  if (t && made >= 0) t->q.l[t->q.n - 1].made = made + 1;
  return tv[made >= 0 ? made : 0]._b;
}

int gt_lean_status(gt_runtime *rt) { return rt->lean_status; }
