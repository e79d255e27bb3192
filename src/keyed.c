/* keyed.c - keyed calls: a memoized path replayed without running the Lua body.

   After a call whose every segment replayed, gt_tree_keyed_save remembers its
   path and what of the call's inputs its graphs hold: tensor addresses
   (found in the recorded argument values: a view's address range is the
   argument's alone, so nothing is a coincidence; patched on a hit: new
   inputs, staged copies) and the kernel scalars that the `patch` numbers
   reached, which the call traced (lua/gt/trace.lua: each scalar with the
   expression that computed it from the numbers).  Every other scalar is the
   path's own.  A hit (gt_tree_keyed_run) evaluates the trace with its own
   numbers, checks each value against its parameter's type as a launch does,
   patches, launches the path's graphs back to back and makes the call's
   output buffers at their planned addresses.  A path that reads a tensor
   that is no argument, not made in the call and not static (a captured
   tensor, another tree's output) is not saved: only the body sees which
   tensor it reads.  A static buffer a path reads that is freed (its address
   may be another buffer's by now) sends the next call through the body;
   freeing one it does not read costs it nothing.

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
  int node, launch, slot, in, kind;  /* in: KP_ADDR/KP_COPY: the input; KP_SCALAR: the trace's step */
  int64_t delta;                 /* KP_ADDR/KP_COPY: slot value - the input's address */
  uint8_t ptype;                 /* KP_SCALAR: the kernel parameter's type */
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
  gt_texpr *ex; double *ev; int nex;   /* the trace's steps, and their values on this hit */
  int32_t *guard; int nguard, gcap;   /* comparisons the body made: step, answer (pairs) */
  gt_pathg pg;                   /* the path as one graph (fused) */
  struct gt_keyed *next;
};
_Static_assert(sizeof(gt_keyed) % _Alignof(kseg) == 0 && sizeof(gt_node *) % _Alignof(kseg) == 0 &&
               sizeof(kseg) % _Alignof(kout) == 0, "gt_keyed's parts follow it in one allocation");


static void keyed_free(gt_keyed *k) {
  gt_pathg_free(&k->t->rt->be, &k->pg);
  for (int d = 0; d < k->npath; d++) free(k->s[d].vals);
  free(k->p); free(k->ex); free(k->ev); free(k->guard); free(k);
}

void gt_tree_keyed_drop(gt_keyed *k) {
  if (!k) return;
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

/* A number as the bits a kernel scalar of type ptype holds (as gt_launch
   stores it), once scalar_ok said it fits. */
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

/* Whether a launch takes v for a parameter of type ptype (launcher.lua's
   checks: an integer parameter takes a whole number in its range). */
static int scalar_ok(double v, int ptype) {
  switch (ptype) {
  case GT_P_I32: return v == floor(v) && v >= -2147483648.0 && v < 2147483648.0;
  case GT_P_U32: return v == floor(v) && v >= 0 && v < 4294967296.0;
  case GT_P_I64: return v == floor(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0;
  case GT_P_U64: return v == floor(v) && v >= 0 && v < 18446744073709551616.0;
  default: return 1;
  }
}

/* The trace's steps evaluated with this call's numbers (as Lua computes them). */
static void trace_eval(gt_keyed *k, const gt_arg *ins) {
  for (int i = 0; i < k->nex; i++) {
    const gt_texpr *e = &k->ex[i];
    double x = e->a >= 0 && e->a < i ? k->ev[e->a] : 0, y = e->b >= 0 && e->b < i ? k->ev[e->b] : 0, v;
    switch (e->op) {
    case GT_TX_ARG: v = ins[e->a].v.f64; break;
    case GT_TX_CONST: v = e->c; break;
    case GT_TX_ADD: v = x + y; break;
    case GT_TX_SUB: v = x - y; break;
    case GT_TX_MUL: v = x * y; break;
    case GT_TX_DIV: v = x / y; break;
    case GT_TX_MOD: v = x - floor(x / y) * y; break;
    case GT_TX_POW: v = pow(x, y); break;
    case GT_TX_UNM: v = -x; break;
    case GT_TX_FLOOR: v = floor(x); break;
    case GT_TX_CEIL: v = ceil(x); break;
    case GT_TX_ABS: v = fabs(x); break;
    case GT_TX_SQRT: v = sqrt(x); break;
    case GT_TX_LT: v = x < y; break;
    case GT_TX_LE: v = x <= y; break;
    case GT_TX_EQ: v = x == y; break;
    default: v = NAN; break;
    }
    k->ev[i] = v;
  }
}

/* Patch p's value for this call's arguments ins (the trace evaluated). */
static uint64_t patch_value(const gt_keyed *k, const kpatch *p, const gt_arg *ins) {
  return p->kind == KP_SCALAR ? scalar_bits(k->ev[p->in], p->ptype)
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

/* Which of the call's tensor inputs holds address v: -1 if none, -2 if two
   (tensors that share memory: which one cannot be told). */
static int input_of(uint64_t v, const gt_arg *ins, const uint8_t *kinds, int nin) {
  int found = -1;
  for (int a = 0; a < nin; a++) {
    if (kinds[a] != 1 || !ins[a].buf) continue;
    uint64_t lo = ins[a].buf->addr + (uint64_t)ins[a].off, hi = lo + (uint64_t)ins[a].nbytes;
    if (v >= lo && (v < hi || v == lo)) { if (found >= 0) return -2; found = a; }
  }
  return found;
}

/* The addresses of the call's tensor inputs in the path's graphs: patches.
   A slot is an input's when the traced run reached it through that
   argument (t->dreach: the body got a struct of its own for each argument,
   gt_tree_dry_arg), not when its address only lies there: a captured tensor
   that is also passed in keeps its own.  GT_ERR with the reason when an
   address is two inputs', or a launch reads an external tensor that is no
   input (a captured one). */
static int find_inputs(gt_runtime *rt, gt_keyed *k, const gt_arg *ins, const uint8_t *kinds, int nin) {
  const gt_tree *t = k->t;
  const uint8_t *reach = t->ndreach >= 0 && t->ndpath == k->npath ? t->dreach : NULL;
  for (int d = 0, base = 0; d < k->npath; base += k->path[d]->nargvals, d++) {
    gt_node *n = k->path[d];
    for (int i = 0; i < n->nlaunch; i++) {
      const gt_qlaunch *l = &n->launches[i];
      for (int j = 0; j < l->nargs; j++) {
        int slot = l->arg0 + j;
        if (!is_pointer(l, j)) continue;
        uint64_t v = n->argvals[slot];
        int a = input_of(v, ins, kinds, nin);
        if (a == -2) return gt_fail(rt, "two tensor arguments share memory");
        int ext = n->asig && i < n->nsig && slot < n->nargvals && n->asig[slot].role == GT_ROLE_EXTERNAL;
        if (a >= 0 && reach && !reach[base + slot]) {      /* argument a's memory, reached another way */
          if (!ext) continue;                               /* (a static tensor: kept, and guarded) */
          return gt_fail(rt, "segment %d, launch %d (%s) reads%s%s%s the memory of argument %d through another tensor "
                         "than that argument (a captured tensor also passed in): pass it one way only",
                         d + 1, i + 1, gt_launch_what(l), l->kind == GT_GN_KERNEL ? " through '" : "",
                         l->kind == GT_GN_KERNEL ? l->k->pname[j] : "", l->kind == GT_GN_KERNEL ? "'" : "", a + 1);
        }
        if (a < 0) {
          if (ext)
            return gt_fail(rt, "segment %d, launch %d (%s) reads%s%s%s a tensor that is not an argument of the call, "
                           "not made in it and not static: a captured tensor (mark it :static() if it stays, "
                           "or pass it as an argument)", d + 1, i + 1, gt_launch_what(l),
                           l->kind == GT_GN_KERNEL ? " through '" : "", l->kind == GT_GN_KERNEL ? l->k->pname[j] : "",
                           l->kind == GT_GN_KERNEL ? "'" : "");
          continue;
        }
        kpatch p = { d, i, slot, a, patchable(l) ? KP_ADDR : KP_COPY, 0, 0, 0 };
        p.delta = (int64_t)(v - (ins[a].buf->addr + (uint64_t)ins[a].off));
        p.write = gt_launch_writes(l, j);
        if (add_patch(k, p)) return gt_fail(rt, "out of host memory");
      }
    }
  }
  return GT_OK;
}

/* The kernel scalars the trace reached, as patches. */
static int find_traced(gt_runtime *rt, gt_keyed *k, const gt_tslot *sl, int nsl) {
  for (int s = 0; s < nsl; s++) {
    const gt_tslot *x = &sl[s];
    if (x->seg == -1) {                          /* a guard */
      if (x->expr < 0 || x->expr >= k->nex || k->ex[x->expr].op < GT_TX_LT || k->ex[x->expr].op > GT_TX_EQ) return gt_fail(rt, "the call's trace is malformed");
      if (GT_GROW(k->guard, k->gcap, 2 * k->nguard + 2)) return gt_fail(rt, "out of host memory");
      k->guard[2 * k->nguard] = x->expr;
      k->guard[2 * k->nguard + 1] = x->param;
      k->nguard++;
      continue;
    }
    const gt_node *n = x->seg >= 0 && x->seg < k->npath ? k->path[x->seg] : NULL;
    const gt_qlaunch *l = n && x->launch >= 0 && x->launch < n->nlaunch ? &n->launches[x->launch] : NULL;
    if (!l || l->kind != GT_GN_KERNEL || x->param < 0 || x->param >= l->nargs || is_pointer(l, x->param) ||
        x->expr < 0 || x->expr >= k->nex)
      return gt_fail(rt, "a traced `patch` number reached a launch the path does not hold");
    kpatch p = { x->seg, x->launch, l->arg0 + x->param, x->expr, KP_SCALAR, 0, l->k->ptype[x->param], 0 };
    if (add_patch(k, p)) return gt_fail(rt, "out of host memory");
  }
  return GT_OK;
}

static int by_slot(const void *a, const void *b) {
  const kpatch *x = a, *y = b;
  return x->node != y->node ? (x->node < y->node ? -1 : 1) : x->slot != y->slot ? (x->slot < y->slot ? -1 : 1) : 0;
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
   rec. */
static int path_graphed(gt_runtime *rt, gt_tree *t, int rec) {
  const gt_call_info *h = &t->hist[(t->calls - 1) % GT_HISTORY];
  if (!t->nlastpath) return gt_fail(rt, "the call launched nothing");
  if (h->replays + h->updates + (rec ? h->records : 0) != t->nlastpath)
    return gt_fail(rt, rec ? "not every segment has a graph yet" : "not every segment replayed yet");
  for (int d = 0; d < t->nlastpath; d++)
    if (!t->lastpath[d]->graph || !t->lastpath[d]->launches) return gt_fail(rt, "a segment holds no graph");
  return GT_OK;
}

int gt_tree_keyed_ready(gt_tree *t) { return t->calls > 0 && path_graphed(t->rt, t, 1) == GT_OK; }

gt_keyed *gt_tree_keyed_save(gt_runtime *rt, gt_tree *t, const gt_arg *ins, const uint8_t *kinds, int nin,
                             const int *outs, int nout, const gt_texpr *ex, int nex, const gt_tslot *sl, int nsl) {
  if (path_graphed(rt, t, 0)) return NULL;
  gt_keyed *k = keyed_new(rt, t, nout);
  if (!k) return NULL;
  for (int i = 0; i < nout; i++) {
    gt_buf *b = gt_tree_buf_ptr(t, outs[i]);
    if (!b || b->gen != t->gen || b->seg >= k->npath) { keyed_free(k); gt_fail(rt, "an output is not a tensor of the call"); return NULL; }
    k->o[i] = (kout){ outs[i], b->seg, b->idx, b->bytes };
  }
  k->no = nout;
  for (int i = 0; i < nex; i++)             /* (steps refer to arguments and earlier steps only) */
    if ((ex[i].op == GT_TX_ARG && (ex[i].a < 0 || ex[i].a >= nin || kinds[ex[i].a] != 2)) ||
        (ex[i].op > GT_TX_CONST && (ex[i].a < 0 || ex[i].a >= i || ex[i].op > GT_TX_EQ ||
                                    ((ex[i].op < GT_TX_UNM || ex[i].op >= GT_TX_LT) && (ex[i].b < 0 || ex[i].b >= i))))) {
      keyed_free(k);
      gt_fail(rt, "the call's trace is malformed at step %d", i + 1);
      return NULL;
    }
  k->nex = nex;
  k->ex = malloc((size_t)(nex ? nex : 1) * sizeof *k->ex);
  k->ev = malloc((size_t)(nex ? nex : 1) * sizeof *k->ev);
  if (!k->ex || !k->ev) { keyed_free(k); gt_fail(rt, "out of host memory"); return NULL; }
  if (nex) memcpy(k->ex, ex, (size_t)nex * sizeof *ex);
  int bad = find_inputs(rt, k, ins, kinds, nin) || find_traced(rt, k, sl, nsl);
  t->ndreach = -1;                           /* (the traced run's reach serves this save only) */
  if (bad) { keyed_free(k); return NULL; }
  if (k->np > 1) qsort(k->p, (size_t)k->np, sizeof *k->p, by_slot);
  for (int d = 0; d < k->npath; d++) k->path[d]->keyed = 1;
  k->next = t->keyed;
  t->keyed = k;
  t->keyed_free = keyed_free_all;
  t->keyed_trim = keyed_trim_all;
  return k;
}

/* Whether the static buffers node n reads are the ones its graph holds: no
   static buffer freed since n's statics were compared (n->sfrees), or none
   of those freed lay where n reads one (then n's statics are kept again). */
static int statics_kept(gt_node *n) {
  if (n->sfrees == gt_static_frees) return 1;
  if (!n->asig || !n->argvals) return 0;
  for (int i = 0; i < n->nsig && i < n->nlaunch; i++) {
    const gt_qlaunch *l = &n->launches[i];
    for (int j = 0; j < l->nargs; j++) {
      int slot = l->arg0 + j;
      if (slot < n->nargvals && n->asig[slot].role == GT_ROLE_STATIC &&
          gt_static_freed_since(n->sfrees, n->argvals[slot], (uint64_t)n->asig[slot].nbytes))
        return 0;
    }
  }
  n->sfrees = gt_static_frees;
  return 1;
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

/* Argument a of launch i of node m (what the body launched) against the same
   argument of k's node n, whose value the hit would give is want: 0 when
   they agree (a scalar's bits, a tensor's role and identity: the address
   of an external or static one, a buffer of the call by its place). */
static int same_arg(const gt_node *m, const gt_node *n, int slot, uint64_t want, int ptr) {
  uint64_t now = m->argvals[slot];
  if (!ptr || m == n) return now == want;
  const gt_asig *x = m->asig && slot < m->nargvals ? &m->asig[slot] : NULL, *y = n->asig && slot < n->nargvals ? &n->asig[slot] : NULL;
  if (!x || !y || x->role != y->role || x->off != y->off || x->nbytes != y->nbytes) return 0;
  if (x->role == GT_ROLE_INTERNAL || x->role == GT_ROLE_PATH) return x->id == y->id;
  return now == want;
}

int gt_tree_keyed_check(gt_runtime *rt, gt_keyed *k, const gt_arg *ins) {
  gt_tree *t = k->t;
  if (t->nlastpath != k->npath)
    return gt_fail(rt, "took another path than the memoized one: %d segments where it has %d", t->nlastpath, k->npath);
  trace_eval(k, ins);
  int moved = 0;
  for (int i = 0; i < k->nguard; i++)          /* a hit would not have taken the path: memoize it again */
    if (k->ev[k->guard[2 * i]] != k->guard[2 * i + 1]) return 1;
  for (int d = 0; d < k->npath; d++)           /* (likewise: a trim dropped its graph, or a static it read was freed) */
    if (!k->path[d]->graph || !k->path[d]->launches || !statics_kept(k->path[d])) return 1;
  for (int d = 0, j = 0; d < k->npath; d++) {
    const gt_node *n = k->path[d], *m = t->lastpath[d];
    if (m != n) {
      moved = 1;
      /* a node visited without a recording (its first visit): its key, which
         hashes what a graph bakes in, says whether it is the same segment */
      if (!m->launches || !m->argvals) {
        if (m->key == k->s[d].key) continue;
        return gt_fail(rt, "took another path than the memoized one: its segment %d differs", d + 1);
      }
      if (m->nlaunch != n->nlaunch || m->nargvals != k->s[d].nvals)
        return gt_fail(rt, "took another path than the memoized one: its segment %d differs (%d launches where it has %d)",
                       d + 1, m->nlaunch, n->nlaunch);
    } else if (n->key != k->s[d].key) return 1;   /* updated in place since (another static): a hit would not take it */
    else if (n->nargvals != k->s[d].nvals)
      return gt_fail(rt, "took another path than the memoized one: its segment %d was recorded again with other launches", d + 1);
    for (int i = 0; i < n->nlaunch; i++) {
      const gt_qlaunch *l = &n->launches[i], *lm = &m->launches[i];
      if (lm->kind != l->kind || lm->k != l->k || lm->nargs != l->nargs || memcmp(lm->grid, l->grid, sizeof l->grid) ||
          memcmp(lm->block, l->block, sizeof l->block) || lm->smem != l->smem || lm->bytes != l->bytes)
        return gt_fail(rt, "took another path than the memoized one: its segment %d differs (launch %d is %s where it has %s)", d + 1, i + 1,
                       gt_launch_what(lm), gt_launch_what(l));
      for (int a = 0; a < l->nargs; a++) {
        int slot = l->arg0 + a;
        uint64_t want = k->s[d].vals[slot];
        for (; j < k->np && (k->p[j].node < d || (k->p[j].node == d && k->p[j].slot < slot)); j++) {}
        for (int q = j; q < k->np && k->p[q].node == d && k->p[q].slot == slot; q++) {
          if (k->p[q].kind == KP_SCALAR && !scalar_ok(k->ev[k->p[q].in], k->p[q].ptype))
            return gt_fail(rt, "launched other values than the memoized path: segment %d, launch %d (%s): argument %d would be %.17g, which its type cannot hold",
                           d + 1, i + 1, gt_launch_what(l), a + 1, k->ev[k->p[q].in]);
          want = patch_value(k, &k->p[q], ins);
        }
        int ptr = is_pointer(l, a);
        if (same_arg(m, n, slot, want, ptr)) continue;
        int pt = !ptr && l->kind == GT_GN_KERNEL ? l->k->ptype[a] : GT_P_U64;
        char was[48], now[48];
        show_value(was, sizeof was, want, ptr, pt);
        show_value(now, sizeof now, m->argvals[slot], ptr, pt);
        return gt_fail(rt, "launched other values than the memoized path: segment %d, launch %d (%s): argument %d is %s where the memoized path has %s",
                       d + 1, i + 1, gt_launch_what(l), a + 1, now, was);
      }
    }
  }
  return moved;
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
    if (o->ci >= t->nbufs) t->nbufs = o->ci + 1;   /* (the call's buffers: what gt_tree_keep_last keeps) */
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
        uint64_t v = patch_value(k, &k->p[j], ins);
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
      for (; j < k->np && k->p[j].node == d && k->p[j].launch == i; j++) want[k->p[j].slot - l->arg0] = patch_value(k, &k->p[j], ins);
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
    gt_node *n = k->path[d];
    const kseg *g = &k->s[d];
    if (!n->graph || n->key != g->key || n->nargvals != g->nvals) return 1;
    /* a static buffer it reads freed: the graph may hold its address, now
       another buffer's (the body runs; its segments compare the statics again) */
    if (!statics_kept(n)) return 1;
    if (n->gver != k->s[d].gv) {                 /* another key's body, or a plain call, patched it since */
      clean = 0;
      if (!rebuildable(n)) return 1;
    }
  }
  if (k->nex) trace_eval(k, ins);
  for (int i = 0; i < k->nguard; i++)          /* a comparison the body made answers otherwise: its path may differ */
    if (k->ev[k->guard[2 * i]] != k->guard[2 * i + 1]) return 1;
  for (int i = 0; i < k->np; i++) {
    const kpatch *p = &k->p[i];
    if (p->kind == KP_SCALAR && !scalar_ok(k->ev[p->in], p->ptype)) return 1;   /* (the body's launch raises eager's error) */
    uint64_t v = patch_value(k, p, ins);
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
