/* keyed.c - keyed calls: a memoized path replayed without running the Lua body.

   After a call whose every segment replayed, gt_tree_keyed_save remembers its
   path and finds, in the recorded argument values of its graphs, where the
   call's inputs went: tensor addresses (patched on a hit: new inputs, staged
   copies) and the numbers listed in `patch` (kernel scalars equal to them).
   A number matched on one call may be a coincidence (a 0 that is a flag, not
   the position), so such a match stays unconfirmed: a hit with the same value
   patches nothing, a hit with another value runs the body instead, and
   gt_tree_keyed_confirm keeps the slots that followed the new value.  The
   key's body run before the save (its path recorded: nothing to save yet)
   leaves a candidate (gt_tree_keyed_note: the path's values and the call's
   numbers); a slot that followed the number from that call to the saving
   one is confirmed at once, so a key whose `patch` number changes every
   call stops running its body after its path recorded and replayed once.  A hit
   (gt_tree_keyed_run) patches, launches the path's graphs back to back and
   makes the call's output buffers at their planned addresses.

   A path of several segments is also built, once its hits have needed no
   patch for a while, into one graph of all its launches (fused: each
   segment's first launches wait for the previous segment's last ones),
   from what the segments' graphs hold (their nodes' launches and argvals).
   A hit that needs no patch launches it: one graph launch instead of one a
   segment.  It stays valid while no graph of the path changes (gt_node.gver:
   a patch, an update, a new recording, a trim); a hit that must patch
   launches the segments as before, and the path is fused again later, a few
   times at most. */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdio.h>
#include "core.h"

enum { KP_ADDR = 1, KP_COPY, KP_SCALAR };

typedef struct kpatch {
  int node, launch, slot, in, kind, confirmed;
  int64_t delta;                 /* KP_ADDR/KP_COPY: slot value - the input's address */
  uint8_t ptype;                 /* KP_SCALAR: the kernel parameter's type */
  double seen;                   /* KP_SCALAR: the input's value when matched */
  int write;                     /* KP_ADDR/KP_COPY: the launch writes into the input (gt_buf.wgen) */
} kpatch;

typedef struct kout { int ci, seg, idx; uint64_t bytes; } kout;

/* One segment of the path as this key's body left it. */
typedef struct kseg {
  uint64_t key;                  /* the node's key when saved: a node updated in place since (another static address) bakes in other values */
  uint64_t *vals; int nvals;     /* the argument values this key's body gave its graph (another key of the same
                                    nodes, or a plain call, may patch other scalars and addresses in) */
  uint32_t gv;                   /* the node's gver when its graph last held vals (with a hit's patches) */
} kseg;

/* One allocation holds k and its path, segments and outputs (a hit reads
   them in a few cache lines: after a long step the host's caches are cold). */
struct gt_keyed {
  gt_tree *t;
  int npath, np, pcap, no;
  gt_node **path;                /* (in k's allocation, as s and o) */
  kseg *s;
  kout *o;
  kpatch *p;
  gt_pathg pg;                   /* the path as one graph (fused) */
  double *nums; int nnum;        /* a candidate (gt_tree_keyed_note): the call's numbers by position (NAN: not a number) */
  struct gt_keyed *next;
};
_Static_assert(sizeof(gt_keyed) % _Alignof(kseg) == 0 && sizeof(gt_node *) % _Alignof(kseg) == 0 &&
               sizeof(kseg) % _Alignof(kout) == 0, "gt_keyed's parts follow it in one allocation");


static void keyed_free(gt_keyed *k) {
  gt_pathg_free(&k->t->rt->be, &k->pg);
  for (int d = 0; d < k->npath; d++) free(k->s[d].vals);
  free(k->p); free(k->nums); free(k);
}

/* k out of its tree's list, and freed. */
static void keyed_drop(gt_keyed *k) {
  for (gt_keyed **pp = &k->t->keyed; *pp; pp = &(*pp)->next)
    if (*pp == k) { *pp = k->next; break; }
  keyed_free(k);
}

/* What k's path's graphs hold now, as this key's: after a body run of it. */
static int snapshot(gt_keyed *k) {
  for (int d = 0; d < k->npath; d++) {
    const gt_node *n = k->path[d];
    kseg *g = &k->s[d];
    g->key = n->key;
    if (g->nvals != n->nargvals) {
      uint64_t *v = realloc(g->vals, (size_t)(n->nargvals ? n->nargvals : 1) * sizeof *v);
      if (!v) return GT_ERR;
      g->vals = v;
      g->nvals = n->nargvals;
    }
    memcpy(g->vals, n->argvals, (size_t)n->nargvals * sizeof *n->argvals);
    g->gv = n->gver;
  }
  return GT_OK;
}

static void keyed_free_all(gt_tree *t) {
  while (t->keyed) { gt_keyed *n = t->keyed->next; keyed_free(t->keyed); t->keyed = n; }
}

static void keyed_trim_all(gt_tree *t);

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

/* Patch p's value for this call's arguments ins. */
static uint64_t patch_value(const kpatch *p, const gt_arg *ins) {
  return p->kind == KP_SCALAR ? scalar_bits(ins[p->in].v.f64, p->ptype)
                              : ins[p->in].buf->addr + (uint64_t)ins[p->in].off + (uint64_t)p->delta;
}

/* A launch whose arguments a patch sets in the graph: a kernel's, and a
   gt.cond/gt.loop condition's address (a copy or a fill is rebuilt). */
static int patchable(const gt_qlaunch *l) { return l->kind == GT_GN_KERNEL || (gt_kind_is_cond(l->kind) && l->nargs); }

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
        kpatch p = { d, i, slot, a, ptr ? (patchable(l) ? KP_ADDR : KP_COPY) : KP_SCALAR, 0, 0, (uint8_t)pt, 0, 0 };
        if (ptr) p.delta = (int64_t)(v - (ins[a].buf->addr + (uint64_t)ins[a].off)), p.write = gt_launch_writes(l, j);
        else p.seen = ins[a].v.f64;
        if (add_patch(k, p)) return GT_ERR;
      }
    }
  }
  return GT_OK;
}

/* A gt_keyed for the tree's last call's path, its values snapshot (NULL:
   out of host memory, said). */
static gt_keyed *keyed_new(gt_runtime *rt, gt_tree *t, int nout) {
  int npath = t->nlastpath;
  gt_keyed *k = calloc(1, sizeof *k + npath * (sizeof *k->path + sizeof *k->s) + (nout ? nout : 1) * sizeof *k->o);
  if (!k) { gt_fail(rt, "out of host memory"); return NULL; }
  k->t = t;
  k->npath = npath;
  k->path = (gt_node **)(k + 1);          /* (every part's alignment is 8) */
  k->s = (kseg *)(k->path + npath);
  k->o = (kout *)(k->s + npath);
  memcpy(k->path, t->lastpath, k->npath * sizeof *k->path);
  for (int d = 0; d < k->npath; d++) k->s[d].nvals = -1;
  if (snapshot(k)) { keyed_free(k); gt_fail(rt, "out of host memory"); return NULL; }
  return k;
}

/* Whether every segment of the tree's last call holds a graph at the call's
   values: replayed, or updated (an update leaves them too); records too when
   rec (a candidate's). */
static int path_graphed(gt_runtime *rt, gt_tree *t, int rec) {
  const gt_call_info *h = &t->hist[(t->calls - 1) % GT_HISTORY];
  if (!t->nlastpath) return gt_fail(rt, "the call launched nothing");
  if (h->replays + h->updates + (rec ? h->records : 0) != t->nlastpath)
    return gt_fail(rt, rec ? "not every segment has a graph yet" : "not every segment replayed yet");
  for (int d = 0; d < t->nlastpath; d++)
    if (!t->lastpath[d]->graph || !t->lastpath[d]->launches) return gt_fail(rt, "a segment holds no graph");
  return GT_OK;
}

gt_keyed *gt_tree_keyed_note(gt_runtime *rt, gt_tree *t, const gt_arg *ins, const uint8_t *kinds, int nin,
                             gt_keyed *prev) {
  if (prev) keyed_drop(prev);
  if (path_graphed(rt, t, 1)) return NULL;
  gt_keyed *k = keyed_new(rt, t, 0);
  if (!k) return NULL;
  k->nums = malloc((size_t)(nin ? nin : 1) * sizeof *k->nums);
  if (!k->nums) { keyed_free(k); gt_fail(rt, "out of host memory"); return NULL; }
  for (int a = 0; a < nin; a++) k->nums[a] = kinds[a] == 2 ? ins[a].v.f64 : NAN;
  k->nnum = nin;
  k->next = t->keyed;                    /* (freed with the tree; a hit never launches a candidate) */
  t->keyed = k;
  t->keyed_free = keyed_free_all;
  t->keyed_trim = keyed_trim_all;
  return k;
}

/* k's unconfirmed scalar patches against candidate c (the key's body run
   before, on the same path and graphs): a slot that held c's number then and
   holds another number now, the call's, followed it (confirmed); one that
   did not hold it is another value (dropped); an equal number tells nothing. */
static void preconfirm(gt_keyed *k, const gt_keyed *c) {
  if (c->npath != k->npath) return;
  for (int d = 0; d < k->npath; d++)
    if (c->path[d] != k->path[d] || c->s[d].key != k->s[d].key || c->s[d].nvals != k->s[d].nvals) return;
  int w = 0;
  for (int i = 0; i < k->np; i++) {
    kpatch *p = &k->p[i];
    if (p->kind == KP_SCALAR && !p->confirmed && p->in < c->nnum && c->nums[p->in] == c->nums[p->in]) {
      uint64_t then = scalar_bits(c->nums[p->in], p->ptype);
      if (then != scalar_bits(p->seen, p->ptype)) {
        if (c->s[p->node].vals[p->slot] != then) continue;       /* it did not hold the number then */
        p->confirmed = 1;
      }
    }
    k->p[w++] = *p;
  }
  k->np = w;
}

gt_keyed *gt_tree_keyed_save(gt_runtime *rt, gt_tree *t, const gt_arg *ins, const uint8_t *kinds, int nin,
                             const int *outs, int nout, gt_keyed *cand) {
  if (path_graphed(rt, t, 0)) return NULL;
  gt_keyed *k = keyed_new(rt, t, nout);
  if (!k) return NULL;
  for (int i = 0; i < nout; i++) {
    gt_buf *b = gt_tree_buf_ptr(t, outs[i]);
    if (!b || b->gen != t->gen || b->seg >= k->npath) { keyed_free(k); gt_fail(rt, "an output is not a tensor of the call"); return NULL; }
    k->o[i] = (kout){ outs[i], b->seg, b->idx, b->bytes };
  }
  k->no = nout;
  int st = find_patches(k, ins, kinds, nin);
  if (st == 1) { keyed_free(k); gt_fail(rt, "two tensor arguments share memory"); return NULL; }
  if (st) goto oom;
  if (cand) { preconfirm(k, cand); keyed_drop(cand); }
  for (int d = 0; d < k->npath; d++) k->path[d]->keyed = 1;
  k->next = t->keyed;
  t->keyed = k;
  t->keyed_free = keyed_free_all;
  t->keyed_trim = keyed_trim_all;
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
  if (gt_tree_keyed_differs(k->t, k) >= 0 || snapshot(k)) return GT_ERR;   /* what the graphs bake in now */
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

/* A value as a message shows it: an address in hex, a scalar as its type reads. */
static void show_value(char *buf, size_t len, uint64_t v, int ptr, int ptype) {
  union { uint32_t u; float f; } f32 = { .u = (uint32_t)v };
  union { uint64_t u; double d; } f64 = { .u = v };
  if (ptr) snprintf(buf, len, "address 0x%llx", (unsigned long long)v);
  else if (ptype == GT_P_F32) snprintf(buf, len, "%.9g", f32.f);
  else if (ptype == GT_P_F64) snprintf(buf, len, "%.17g", f64.d);
  else if (ptype == GT_P_I32) snprintf(buf, len, "%d", (int32_t)(uint32_t)v);
  else if (ptype == GT_P_I64) snprintf(buf, len, "%lld", (long long)(int64_t)v);
  else snprintf(buf, len, "%llu", (unsigned long long)v);
}

int gt_tree_keyed_check(gt_runtime *rt, gt_keyed *k, const gt_arg *ins) {
  for (int d = 0, j = 0; d < k->npath; d++) {
    const gt_node *n = k->path[d];
    if (n->nargvals != k->s[d].nvals) return gt_fail(rt, "segment %d was recorded again with other launches", d + 1);
    for (int i = 0; i < n->nlaunch; i++) {
      const gt_qlaunch *l = &n->launches[i];
      for (int a = 0; a < l->nargs; a++) {
        int slot = l->arg0 + a, skip = 0;
        uint64_t want = k->s[d].vals[slot];
        for (; j < k->np && (k->p[j].node < d || (k->p[j].node == d && k->p[j].slot < slot)); j++) {}
        for (int q = j; q < k->np && k->p[q].node == d && k->p[q].slot == slot; q++) {
          if (k->p[q].kind == KP_SCALAR && !k->p[q].confirmed) skip = 1;   /* gt_tree_keyed_confirm settles it */
          else want = patch_value(&k->p[q], ins);
        }
        if (skip || n->argvals[slot] == want) continue;
        int ptr = is_pointer(l, a), pt = !ptr && l->kind == GT_GN_KERNEL ? l->k->ptype[a] : GT_P_U64;
        char was[48], now[48];
        show_value(was, sizeof was, want, ptr, pt);
        show_value(now, sizeof now, n->argvals[slot], ptr, pt);
        return gt_fail(rt, "segment %d, launch %d (%s): argument %d is %s where the memoized path has %s",
                       d + 1, i + 1, gt_launch_what(l), a + 1, now, was);
      }
    }
  }
  return GT_OK;
}

/* A trim that dropped graphs: the one graphs go too, with their device
   memory (a path fuses again once it repeats), as the tree's own do. */
static void keyed_trim_all(gt_tree *t) {
  for (gt_keyed *k = t->keyed; k; k = k->next) gt_pathg_drop(&t->rt->be, &k->pg);
}

/* Segment e of k's path visited in this call (its graph launched): a
   replay, or an update when its graph was rebuilt first. */
static void note_visit(gt_tree *t, gt_keyed *k, int e, int rebuilt) {
  gt_node *n = k->path[e];
  if (rebuilt) n->updates++, t->updates++;
  else n->replays++, t->replays++;
  n->visits++; n->last_call = (uint64_t)t->calls;
  t->path[e] = n;
}

/* The end of a hit: the inputs written marked, the path's state, the
   call's output buffers at their planned addresses, the call ended. */
static int keyed_end(gt_tree *t, gt_keyed *k, const gt_arg *ins, gt_buf **outb) {
  for (int i = 0; i < k->np; i++) if (k->p[i].write) ins[k->p[i].in].buf->wgen = t->gen;
  t->npath = k->npath;
  t->state_node = k->path[k->npath - 1];
  for (int i = 0; i < k->no; i++) {
    const kout *o = &k->o[i];
    gt_buf *b = gt_tree_buf_ptr(t, o->ci);
    gt_slab_buf_init(b, t, t->pool.base + k->path[o->seg]->plan[o->idx], o->bytes, o->seg, o->idx, o->ci, 0);
    if (outb) outb[i] = b;
  }
  t->khits++;
  gt_tree_finish_call(t);
  return GT_OK;
}

/* Whether node n's graph can be rebuilt from its recording (a copy or fill
   at other addresses, a patch the driver refuses: gt_tree_rebuild_node). */
static int rebuildable(const gt_node *n) { return n->launches && n->qargs && n->nsig == n->nlaunch; }

/* Node d of k's path before its launch: k's values back in its graph if
   something else changed it (gver), then this call's patches (*pi: the
   next of k->p, which are in path, launch and slot order), a launch
   patched once; a copy or fill at other addresses, or a patch the driver
   refuses (a node in a conditional body), and the whole graph is rebuilt
   at those values.  1: it was (the visit is an update). */
static int keyed_node(gt_tree *t, gt_keyed *k, int d, const gt_arg *ins, int *pi) {
  gt_node *n = k->path[d];
  int j = *pi, rebuild = 0;
  if (n->gver == k->s[d].gv) {                   /* the graph holds k's values: this call's patches alone */
    while (j < k->np && k->p[j].node == d) {
      int i = k->p[j].launch, dirty = 0, st = GT_OK;
      for (; j < k->np && k->p[j].node == d && k->p[j].launch == i; j++) {
        uint64_t v = patch_value(&k->p[j], ins);
        if (n->argvals[k->p[j].slot] != v) n->argvals[k->p[j].slot] = v, dirty = 1;
      }
      if (!dirty) continue;
      if (!patchable(&n->launches[i])) rebuild = 1;
      else if ((st = gt_tree_patch_node(t, d, n, i)) < 0) return GT_ERR;
      rebuild |= st > 0;
    }
  } else {                                     /* k's values back, with this call's patches, a launch patched once */
    for (int i = 0; i < n->nlaunch; i++) {
      const gt_qlaunch *l = &n->launches[i];
      uint64_t want[GT_MAX_PARAMS], *have = n->argvals + l->arg0;
      memcpy(want, k->s[d].vals + l->arg0, l->nargs * sizeof *want);
      for (; j < k->np && k->p[j].node == d && k->p[j].launch == i; j++) want[k->p[j].slot - l->arg0] = patch_value(&k->p[j], ins);
      if (!memcmp(want, have, l->nargs * sizeof *want)) continue;
      memcpy(have, want, l->nargs * sizeof *want);
      if (!patchable(l)) { rebuild = 1; continue; }
      int st = gt_tree_patch_node(t, d, n, i);
      if (st < 0) return GT_ERR;
      rebuild |= st > 0;
    }
  }
  if (rebuild && gt_tree_rebuild_node(t, n)) return GT_ERR;
  *pi = j;
  k->s[d].gv = n->gver;
  return rebuild;
}

int gt_tree_keyed_run(gt_runtime *rt, gt_keyed *k, const gt_arg *ins, gt_buf **outb) {
  gt_tree *t = k->t;
  if (rt->active != t) return gt_fail(rt, "keyed run outside its tree's call");
  int clean = 1;
  for (int d = 0; d < k->npath; d++) {         /* first the checks: nothing runs unless all can be patched */
    const gt_node *n = k->path[d];
    const kseg *g = &k->s[d];
    if (!n->graph || n->key != g->key || n->nargvals != g->nvals) return 1;
    /* a static buffer freed since the node's statics were last compared: the
       graph may hold its address, now another buffer's (the body runs; its
       segments compare the statics again) */
    if (n->sfrees != gt_static_frees) return 1;
    if (n->gver != k->s[d].gv) {                 /* another key's body, or a plain call, patched it since */
      clean = 0;
      if (!rebuildable(n)) return 1;
    }
  }
  for (int i = 0; i < k->np; i++) {
    const kpatch *p = &k->p[i];
    uint64_t v = patch_value(p, ins);
    if (p->kind == KP_SCALAR && !p->confirmed && v != k->s[p->node].vals[p->slot]) return 1;   /* (maybe not the input's) */
    if (v == k->path[p->node]->argvals[p->slot]) continue;
    if (p->kind == KP_COPY && !rebuildable(k->path[p->node])) return 1;     /* (a copy at other addresses: a rebuild) */
    clean = 0;
  }
  if (gt_tree_grow_path(t, k->npath)) return gt_fail(rt, "out of host memory");
  if (clean && !rt->profile && gt_pathg_ok(&k->pg, k->path, k->npath)) {   /* the path as one graph */
    gt_backend *be = &rt->be;
    if (be->graph_launch(be, k->pg.g) != GT_BOK) return gt_fail_be(rt, "graph launch");
    for (int e = 0; e < k->npath; e++) note_visit(t, k, e, 0);
    t->kfused++;
    return keyed_end(t, k, ins, outb);
  }
  for (int d = 0, pi = 0; d < k->npath; d++) {  /* node by node: its values and patches in, then its launch */
    int rebuilt = keyed_node(t, k, d, ins, &pi);
    if (rebuilt < 0 || gt_tree_launch_graph(t, k->path[d])) return GT_ERR;
    note_visit(t, k, d, rebuilt);
  }
  if (!rt->profile && k->npath > 1) gt_pathg_note(&rt->be, &k->pg, k->path, k->npath);   /* (a patch changed its versions: a new row) */
  return keyed_end(t, k, ins, outb);
}

int gt_tree_keyed_call(gt_runtime *rt, gt_keyed *k, const gt_arg *ins, gt_buf **outb) {
  if (gt_tree_begin_timed(rt, k->t, 0)) return GT_ERR;
  int r = gt_tree_keyed_run(rt, k, ins, outb);
  if (r == 1) {                                /* the body runs: the call is timed (its start was a few checks ago) */
    k->t->begin_us = gt_fast_us();
    if (gt_tree_begin_body(k->t)) r = GT_ERR;
  }
  if (r < 0 && rt->active == k->t) gt_tree_abort(rt);
  return r;
}
