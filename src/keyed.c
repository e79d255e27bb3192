/* keyed.c - keyed calls: a memoized path replayed without running the Lua body.

   After a call whose every segment replayed, gt_tree_keyed_save remembers its
   path and finds, in the recorded argument values of its graphs, where the
   call's inputs went: tensor addresses (patched on a hit: new inputs, staged
   copies) and the numbers listed in `patch` (kernel scalars equal to them).
   A number matched on one call may be a coincidence (a 0 that is a flag, not
   the position), so such a match stays unconfirmed: a hit with the same value
   patches nothing, a hit with another value runs the body instead, and
   gt_tree_keyed_confirm keeps the slots that followed the new value.  A hit
   (gt_tree_keyed_run) patches, launches the path's graphs back to back and
   makes the call's output buffers at their planned addresses. */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "core.h"

enum { KP_ADDR = 1, KP_COPY, KP_SCALAR };

typedef struct kpatch {
  int node, launch, slot, in, kind, confirmed;
  int64_t delta;                 /* KP_ADDR/KP_COPY: slot value - the input's address */
  uint8_t ptype;                 /* KP_SCALAR: the kernel parameter's type */
  double seen;                   /* KP_SCALAR: the input's value when matched */
} kpatch;

typedef struct kout { int ci, seg, idx; uint64_t bytes; } kout;

struct gt_keyed {
  gt_tree *t;
  gt_node **path; int npath;
  uint64_t *keys;                /* the nodes' keys when saved: a node updated in place since (another static address) bakes in other values */
  kpatch *p; int np, pcap;
  kout *o; int no;
  struct gt_keyed *next;
};

static void keyed_free(gt_keyed *k) {
  free(k->path); free(k->keys); free(k->p); free(k->o); free(k);
}

static void keyed_free_all(gt_tree *t) {
  while (t->keyed) { gt_keyed *n = t->keyed->next; keyed_free(t->keyed); t->keyed = n; }
}

/* A number as the bits a kernel scalar of type ptype holds (as gt_launch stores it). */
static uint64_t scalar_bits(double v, int ptype) {
  union { float f; uint32_t u; } f32;
  union { double d; uint64_t u; } f64;
  switch (ptype) {
  case GT_P_I32: return (uint32_t)(int32_t)v;
  case GT_P_U32: return (uint32_t)v;
  case GT_P_I64: return (uint64_t)(int64_t)v;
  case GT_P_U64: return (uint64_t)v;
  case GT_P_F32: f32.f = (float)v; return f32.u;
  case GT_P_F64: f64.d = v; return f64.u;
  default: return v != 0;
  }
}

static int is_pointer(const gt_qlaunch *l, int j) {
  if (l->kind != GT_GN_KERNEL) return l->kind == GT_GN_MEMCPY ? j < 2 : j == 0;
  return l->k->ptype[j] == GT_P_IN || l->k->ptype[j] == GT_P_OUT;
}

static int add_patch(gt_keyed *k, kpatch p) {
  if (GT_GROW(k->p, k->pcap, k->np + 1)) return GT_ERR;
  k->p[k->np++] = p;
  return GT_OK;
}

/* Where slot value v came from among the call's inputs: -1 if from none, -2
   if from two tensors that share memory (which one cannot be told). */
static int input_of(uint64_t v, int ptr, int ptype, const gt_arg *ins, const uint8_t *kinds, int nin) {
  int found = -1;
  for (int a = 0; a < nin; a++) {
    if (ptr && kinds[a] == 1 && ins[a].buf) {
      uint64_t lo = ins[a].buf->addr + (uint64_t)ins[a].off, hi = lo + (uint64_t)ins[a].nbytes;
      if (v >= lo && (v < hi || v == lo)) { if (found >= 0) return -2; found = a; }
    } else if (!ptr && kinds[a] == 2 && scalar_bits(ins[a].v.f64, ptype) == v &&
               (ptype == GT_P_F32 || ptype == GT_P_F64 || ins[a].v.f64 == floor(ins[a].v.f64)))
      return a;                  /* a number flows unchanged into an integer parameter only when it is whole */
  }
  return found;
}

static int find_patches(gt_keyed *k, const gt_arg *ins, const uint8_t *kinds, int nin) {
  for (int d = 0; d < k->npath; d++) {
    gt_node *n = k->path[d];
    for (int i = 0; i < n->nlaunch; i++) {
      const gt_qlaunch *l = &n->launches[i];
      for (int j = 0; j < l->nargs; j++) {
        int slot = l->arg0 + j, ptr = is_pointer(l, j);
        if (!ptr && l->kind != GT_GN_KERNEL) continue;
        int pt = ptr ? 0 : l->k->ptype[j];
        uint64_t v = n->argvals[slot];
        int a = input_of(v, ptr, pt, ins, kinds, nin);
        if (a == -2) return 1;
        if (a < 0) continue;
        kpatch p = { d, i, slot, a, ptr ? (l->kind == GT_GN_KERNEL ? KP_ADDR : KP_COPY) : KP_SCALAR, 0, 0, (uint8_t)pt, 0 };
        if (ptr) p.delta = (int64_t)(v - (ins[a].buf->addr + (uint64_t)ins[a].off));
        else p.seen = ins[a].v.f64;
        if (add_patch(k, p)) return GT_ERR;
      }
    }
  }
  return GT_OK;
}

gt_keyed *gt_tree_keyed_save(gt_runtime *rt, gt_tree *t, const gt_arg *ins, const uint8_t *kinds, int nin,
                             const int *outs, int nout) {
  const gt_call_info *h = &t->hist[(t->calls - 1) % GT_HISTORY];
  if (!t->nlastpath) { gt_fail(rt, "the call launched nothing"); return NULL; }
  if (h->replays != t->nlastpath) { gt_fail(rt, "not every segment replayed yet"); return NULL; }
  for (int d = 0; d < t->nlastpath; d++)
    if (!t->lastpath[d]->graph || !t->lastpath[d]->launches) { gt_fail(rt, "a segment holds no graph"); return NULL; }
  gt_keyed *k = calloc(1, sizeof *k);
  if (!k) { gt_fail(rt, "out of host memory"); return NULL; }
  k->t = t;
  k->npath = t->nlastpath;
  k->path = malloc(k->npath * sizeof *k->path);
  k->keys = malloc(k->npath * sizeof *k->keys);
  k->o = malloc((nout ? nout : 1) * sizeof *k->o);
  if (!k->path || !k->keys || !k->o) goto oom;
  memcpy(k->path, t->lastpath, k->npath * sizeof *k->path);
  for (int d = 0; d < k->npath; d++) k->keys[d] = k->path[d]->key;
  for (int i = 0; i < nout; i++) {
    gt_buf *b = gt_tree_buf_ptr(t, outs[i]);
    if (!b || b->gen != t->gen || b->seg >= k->npath) { keyed_free(k); gt_fail(rt, "an output is not a tensor of the call"); return NULL; }
    k->o[i] = (kout){ outs[i], b->seg, b->idx, b->bytes };
  }
  k->no = nout;
  int st = find_patches(k, ins, kinds, nin);
  if (st == 1) { keyed_free(k); gt_fail(rt, "two tensor arguments share memory"); return NULL; }
  if (st) goto oom;
  for (int d = 0; d < k->npath; d++) k->path[d]->keyed = 1;
  k->next = t->keyed;
  t->keyed = k;
  t->keyed_free = keyed_free_all;
  return k;
oom:
  keyed_free(k);
  gt_fail(rt, "out of host memory");
  return NULL;
}

int gt_tree_keyed_differs(gt_tree *t, gt_keyed *k) {
  int n = t->nlastpath < k->npath ? t->nlastpath : k->npath;
  for (int d = 0; d < n; d++) if (t->lastpath[d] != k->path[d]) return d;
  return t->nlastpath == k->npath ? -1 : n;
}

/* After a body run of k's key that took k's path: an unconfirmed scalar slot
   that followed the input's new value is the input's; one that did not, is not. */
int gt_tree_keyed_confirm(gt_runtime *rt, gt_keyed *k, const gt_arg *ins) {
  (void)rt;
  if (gt_tree_keyed_differs(k->t, k) >= 0) return GT_ERR;
  for (int d = 0; d < k->npath; d++) k->keys[d] = k->path[d]->key;   /* what the graphs bake in now */
  int w = 0;
  for (int i = 0; i < k->np; i++) {
    kpatch *p = &k->p[i];
    uint64_t now = scalar_bits(ins[p->in].v.f64, p->ptype);
    if (p->kind == KP_SCALAR && !p->confirmed && now != scalar_bits(p->seen, p->ptype)) {
      if (k->path[p->node]->argvals[p->slot] != now) continue;   /* it kept its value: baked, not patched */
      p->confirmed = 1;
    }
    k->p[w++] = *p;
  }
  k->np = w;
  return GT_OK;
}

int gt_tree_keyed_run(gt_runtime *rt, gt_keyed *k, const gt_arg *ins, gt_buf **outb) {
  gt_tree *t = k->t;
  if (rt->active != t) return gt_fail(rt, "keyed run outside its tree's call");
  for (int d = 0; d < k->npath; d++) if (!k->path[d]->graph || k->path[d]->key != k->keys[d]) return 1;
  for (int i = 0; i < k->np; i++) {           /* first the checks: nothing runs unless all can be patched */
    const kpatch *p = &k->p[i];
    uint64_t v = p->kind == KP_SCALAR ? scalar_bits(ins[p->in].v.f64, p->ptype)
                                      : ins[p->in].buf->addr + (uint64_t)ins[p->in].off + (uint64_t)p->delta;
    if (v == k->path[p->node]->argvals[p->slot]) continue;
    if (p->kind == KP_COPY || (p->kind == KP_SCALAR && !p->confirmed)) return 1;
  }
  if (gt_tree_grow_path(t, k->npath)) return gt_fail(rt, "out of host memory");
  int last = -1;
  for (int i = 0; i <= k->np; i++) {           /* patch node by node, launching each when its patches are in */
    int d = i < k->np ? k->p[i].node : k->npath;
    for (int e = last + 1; e < d; e++) {
      gt_node *n = k->path[e];
      if (gt_tree_launch_graph(t, n)) return GT_ERR;
      n->replays++; n->visits++; n->last_call = (uint64_t)t->calls;
      t->replays++;
      t->path[e] = n;
      last = e;
    }
    if (i == k->np) break;
    const kpatch *p = &k->p[i];
    gt_node *n = k->path[p->node];
    uint64_t v = p->kind == KP_SCALAR ? scalar_bits(ins[p->in].v.f64, p->ptype)
                                      : ins[p->in].buf->addr + (uint64_t)ins[p->in].off + (uint64_t)p->delta;
    if (v == n->argvals[p->slot]) continue;
    n->argvals[p->slot] = v;
    if (gt_tree_patch_node(t, p->node, n, p->launch)) return GT_ERR;
  }
  t->npath = k->npath;
  t->state_node = k->path[k->npath - 1];
  for (int i = 0; i < k->no; i++) {           /* the outputs: buffers of this call at their planned addresses */
    const kout *o = &k->o[i];
    gt_buf *b = gt_tree_buf_ptr(t, o->ci);
    gt_slab_buf_init(b, t, t->pool.base + k->path[o->seg]->plan[o->idx], o->bytes, o->seg, o->idx, o->ci, 0);
    if (outb) outb[i] = b;
  }
  gt_tree_finish_call(t);
  return GT_OK;
}

int gt_tree_keyed_call(gt_runtime *rt, gt_keyed *k, const gt_arg *ins, gt_buf **outb) {
  if (gt_tree_begin_timed(rt, k->t, 0)) return GT_ERR;
  int r = gt_tree_keyed_run(rt, k, ins, outb);
  if (r == 1) k->t->begin_us = gt_fast_us();   /* the body runs: the call is timed (its start was a few checks ago) */
  if (r < 0 && rt->active == k->t) gt_tree_abort(rt);
  return r;
}
