/* keyed.c - keyed calls: a memoized path replayed without running the Lua body.

   After a call whose every segment replayed, gt_tree_keyed_save (keyed_save.c) remembers its
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
#include "stage.h"
#include "tree.h"
#include "graph.h"
#include "keyed.h"

void gt_keyed_free(gt_keyed *k) {
  gt_pathg_free(&k->t->rt->be, &k->pg);
  for (int d = 0; d < k->npath; d++) free(k->s[d].vals);
  free(k->p); free(k->ex); free(k->ev); free(k->guard); free(k);
}

void gt_tree_keyed_drop(gt_keyed *k) {
  if (!k) return;
  for (gt_keyed **pp = &k->t->keyed; *pp; pp = &(*pp)->next)
    if (*pp == k) { *pp = k->next; break; }
  gt_keyed_free(k);
}

/* What k's path's graphs hold now, as this key's: after a body run of it. */
int gt_keyed_snapshot(gt_keyed *k) {
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

void gt_keyed_free_all(gt_tree *t) {
  while (t->keyed) { gt_keyed *n = t->keyed->next; gt_keyed_free(t->keyed); t->keyed = n; }
}

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

/* Whether the static buffers node n reads are the ones its graph holds: no
   static buffer freed since n's statics were compared (n->sfrees), or none
   of those freed lay where n reads one (then n's statics are kept again). */
static int statics_kept(gt_node *n) {
  if (n->sfrees == gt_static_frees) return 1;
  if (!n->pred.asig || !n->argvals) return 0;
  for (int i = 0; i < n->pred.nsig && i < n->nlaunch; i++) {
    const gt_qlaunch *l = &n->launches[i];
    for (int j = 0; j < l->nargs; j++) {
      int slot = l->arg0 + j;
      if (slot < n->nargvals && n->pred.asig[slot].role == GT_ROLE_STATIC &&
          gt_static_freed_since(n->sfrees, n->argvals[slot], (uint64_t)n->pred.asig[slot].nbytes))
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
  const gt_asig *x = m->pred.asig && slot < m->nargvals ? &m->pred.asig[slot] : NULL, *y = n->pred.asig && slot < n->nargvals ? &n->pred.asig[slot] : NULL;
  if (!x || !y || x->role != y->role || x->off != y->off || x->nbytes != y->nbytes) return 0;
  if (x->role == GT_ROLE_INTERNAL || x->role == GT_ROLE_PATH) return x->id == y->id;
  return now == want;
}

int gt_tree_keyed_check(gt_runtime *rt, gt_keyed *k, const gt_arg *ins) {
  gt_tree *t = k->t;
  if (t->nlastpath != k->npath)
    return gt_fail(rt, "%s: %d segments where it has %d", gt_errmsg_text(GT_E_OTHER_PATH), t->nlastpath, k->npath);
  trace_eval(k, ins);
  int moved = GT_OK;
  for (int i = 0; i < k->nguard; i++)          /* a hit would not have taken the path: memoize it again */
    if (k->ev[k->guard[2 * i]] != k->guard[2 * i + 1]) return GT_KEYED_ANEW;
  for (int d = 0; d < k->npath; d++)           /* (likewise: a trim dropped its graph, or a static it read was freed) */
    if (!k->path[d]->graph || !k->path[d]->launches || !statics_kept(k->path[d])) return GT_KEYED_ANEW;
  for (int d = 0, j = 0; d < k->npath; d++) {
    const gt_node *n = k->path[d], *m = t->lastpath[d];
    if (m != n) {
      moved = GT_KEYED_ANEW;
      /* a node visited without a recording (its first visit): its key, which
         hashes what a graph bakes in, says whether it is the same segment */
      if (!m->launches || !m->argvals) {
        if (m->key == k->s[d].key) continue;
        return gt_fail(rt, "%s: its segment %d differs", gt_errmsg_text(GT_E_OTHER_PATH), d + 1);
      }
      if (m->nlaunch != n->nlaunch || m->nargvals != k->s[d].nvals)
        return gt_fail(rt, "%s: its segment %d differs (%d launches where it has %d)", gt_errmsg_text(GT_E_OTHER_PATH),
                       d + 1, m->nlaunch, n->nlaunch);
    } else if (n->key != k->s[d].key) return GT_KEYED_ANEW;   /* updated in place since (another static): a hit would not take it */
    else if (n->nargvals != k->s[d].nvals)
      return gt_fail(rt, "%s: its segment %d was recorded again with other launches", gt_errmsg_text(GT_E_OTHER_PATH), d + 1);
    for (int i = 0; i < n->nlaunch; i++) {
      const gt_qlaunch *l = &n->launches[i], *lm = &m->launches[i];
      if (lm->kind != l->kind || lm->k != l->k || lm->nargs != l->nargs || memcmp(lm->grid, l->grid, sizeof l->grid) ||
          memcmp(lm->block, l->block, sizeof l->block) || lm->smem != l->smem || lm->bytes != l->bytes)
        return gt_fail(rt, "%s: its segment %d differs (launch %d is %s where it has %s)", gt_errmsg_text(GT_E_OTHER_PATH), d + 1, i + 1,
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
        int ptr = gt_keyed_is_pointer(l, a);
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
void gt_keyed_trim_all(gt_tree *t) {
  for (gt_keyed *k = t->keyed; k; k = k->next) gt_pathg_drop(&t->rt->be, &k->pg);
}

/* Segment e of k's path visited in this call (its graph launched): a
   replay, or an update when its graph was rebuilt first. */
static void note_visit(gt_tree *t, gt_keyed *k, int e, int rebuilt) {
  gt_node *n = k->path[e];
  if (rebuilt) n->updates++, t->stats.updates++;
  else n->replays++, t->stats.replays++;
  n->visits++; n->last_call = (uint64_t)t->stats.calls;
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
  t->stats.khits++;
  gt_tree_finish_call(t);
  return GT_OK;
}

/* Whether node n's graph can be rebuilt from its recording (a copy or fill
   at other addresses, a patch the driver refuses: gt_graph_rebuild). */
static int rebuildable(const gt_node *n) { return n->launches && n->pred.qargs && n->pred.nsig == n->nlaunch; }

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
      if (!gt_keyed_patchable(&n->launches[i])) rebuild = 1;
      else if ((st = gt_graph_patch(t, d, n, i)) < 0) return GT_ERR;
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
      if (!gt_keyed_patchable(l)) { rebuild = 1; continue; }
      int st = gt_graph_patch(t, d, n, i);
      if (st < 0) return GT_ERR;
      rebuild |= st > 0;
    }
  }
  if (rebuild && gt_graph_rebuild(t, n)) return GT_ERR;
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
    if (!n->graph || n->key != g->key || n->nargvals != g->nvals) return GT_KEYED_BODY;
    /* a static buffer it reads freed: the graph may hold its address, now
       another buffer's (the body runs; its segments compare the statics again) */
    if (!statics_kept(n)) return GT_KEYED_BODY;
    if (n->gver != k->s[d].gv) {                 /* another key's body, or a plain call, patched it since */
      clean = 0;
      if (!rebuildable(n)) return GT_KEYED_BODY;
    }
  }
  if (k->nex) trace_eval(k, ins);
  for (int i = 0; i < k->nguard; i++)          /* a comparison the body made answers otherwise: its path may differ */
    if (k->ev[k->guard[2 * i]] != k->guard[2 * i + 1]) return GT_KEYED_BODY;
  for (int i = 0; i < k->np; i++) {
    const kpatch *p = &k->p[i];
    if (p->kind == KP_SCALAR && !scalar_ok(k->ev[p->in], p->ptype)) return GT_KEYED_BODY;   /* (the body's launch raises eager's error) */
    uint64_t v = patch_value(k, p, ins);
    if (v == k->path[p->node]->argvals[p->slot]) continue;
    if (p->kind == KP_COPY && !rebuildable(k->path[p->node])) return GT_KEYED_BODY;     /* (a copy at other addresses: a rebuild) */
    clean = 0;
  }
  if (gt_tree_grow_path(t, k->npath)) return gt_err(rt, GT_E_NOMEM);
  if (clean && !rt->profile && gt_pathg_ok(&k->pg, k->path, k->npath)) {   /* the path as one graph */
    gt_backend *be = &rt->be;
    if (be->graph_launch(be, k->pg.g) != GT_BOK) return gt_err_be(rt, GT_E_GRAPH_LAUNCH);
    for (int e = 0; e < k->npath; e++) note_visit(t, k, e, 0);
    t->stats.kfused++;
    return keyed_end(t, k, ins, outb);
  }
  for (int d = 0, pi = 0; d < k->npath; d++) {  /* node by node: its values and patches in, then its launch */
    int rebuilt = keyed_node(t, k, d, ins, &pi);
    if (rebuilt < 0 || gt_graph_launch(t, k->path[d])) return GT_ERR;
    note_visit(t, k, d, rebuilt);
  }
  if (!rt->profile && k->npath > 1) gt_pathg_note(&rt->be, &k->pg, k->path, k->npath);   /* (a patch changed its versions: a new row) */
  return keyed_end(t, k, ins, outb);
}

int gt_tree_keyed_call(gt_runtime *rt, gt_keyed *k, const gt_arg *ins, gt_buf **outb) {
  if (gt_tree_begin_timed(rt, k->t, 0)) return GT_ERR;
  int r = gt_tree_keyed_run(rt, k, ins, outb);
  if (r == GT_KEYED_BODY) {                                /* the body runs: the call is timed (its start was a few checks ago) */
    k->t->begin_us = gt_fast_us();
    if (gt_tree_begin_body(k->t)) r = GT_ERR;
  }
  if (r < 0 && rt->active == k->t) gt_tree_abort(rt);
  return r;
}
