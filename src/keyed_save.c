/* keyed_save.c - a keyed path saved (gt_tree_keyed_save): after a call whose
   every segment replayed, its path and what of the call's inputs its graphs
   hold (tensor addresses, found in the recorded argument values; the kernel
   scalars the `patch` numbers reached, from the call's trace), as patches a
   hit applies (keyed.c). */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "stage.h"
#include "keyed.h"

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
    if (kinds[a] != GT_KIN_TENSOR || !ins[a].buf) continue;
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
  const uint8_t *reach = t->ndreach >= 0 && t->trace.ndpath == k->npath ? t->dreach : NULL;
  for (int d = 0, base = 0; d < k->npath; base += k->path[d]->nargvals, d++) {
    gt_node *n = k->path[d];
    for (int i = 0; i < n->nlaunch; i++) {
      const gt_qlaunch *l = &n->launches[i];
      for (int j = 0; j < l->nargs; j++) {
        int slot = l->arg0 + j;
        if (!gt_keyed_is_pointer(l, j)) continue;
        uint64_t v = n->argvals[slot];
        int a = input_of(v, ins, kinds, nin);
        if (a == -2) return gt_fail(rt, "two tensor arguments share memory");
        int ext = n->pred.asig && i < n->pred.nsig && slot < n->nargvals && n->pred.asig[slot].role == GT_ROLE_EXTERNAL;
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
        kpatch p = { d, i, slot, a, gt_keyed_patchable(l) ? KP_ADDR : KP_COPY, 0, 0, 0 };
        p.delta = (int64_t)(v - (ins[a].buf->addr + (uint64_t)ins[a].off));
        p.write = gt_launch_writes(l, j);
        if (add_patch(k, p)) return gt_err(rt, GT_E_NOMEM);
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
      if (GT_GROW(k->guard, k->gcap, 2 * k->nguard + 2)) return gt_err(rt, GT_E_NOMEM);
      k->guard[2 * k->nguard] = x->expr;
      k->guard[2 * k->nguard + 1] = x->param;
      k->nguard++;
      continue;
    }
    const gt_node *n = x->seg >= 0 && x->seg < k->npath ? k->path[x->seg] : NULL;
    const gt_qlaunch *l = n && x->launch >= 0 && x->launch < n->nlaunch ? &n->launches[x->launch] : NULL;
    if (!l || l->kind != GT_GN_KERNEL || x->param < 0 || x->param >= l->nargs || gt_keyed_is_pointer(l, x->param) ||
        x->expr < 0 || x->expr >= k->nex)
      return gt_fail(rt, "a traced `patch` number reached a launch the path does not hold");
    kpatch p = { x->seg, x->launch, l->arg0 + x->param, x->expr, KP_SCALAR, 0, l->k->ptype[x->param], 0 };
    if (add_patch(k, p)) return gt_err(rt, GT_E_NOMEM);
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
  if (!k) { gt_err(rt, GT_E_NOMEM); return NULL; }
  k->t = t;
  k->npath = npath;
  k->path = (gt_node **)(k + 1);          /* (every part's alignment is 8) */
  k->s = (kseg *)(k->path + npath);
  k->o = (kout *)(k->s + npath);
  memcpy(k->path, t->lastpath, k->npath * sizeof *k->path);
  for (int d = 0; d < k->npath; d++) k->s[d].nvals = -1;
  if (gt_keyed_snapshot(k)) { gt_keyed_free(k); gt_err(rt, GT_E_NOMEM); return NULL; }
  return k;
}

/* Whether every segment of the tree's last call holds a graph at the call's
   values: replayed, or updated (an update leaves them too); records too when
   rec. */
static int path_graphed(gt_runtime *rt, gt_tree *t, int rec) {
  const gt_call_info *h = &t->hist[(t->stats.calls - 1) % GT_HISTORY];
  if (!t->nlastpath) return gt_fail(rt, "the call launched nothing");
  if (h->replays + h->updates + (rec ? h->records : 0) != t->nlastpath)
    return gt_fail(rt, rec ? "not every segment has a graph yet" : "not every segment replayed yet");
  for (int d = 0; d < t->nlastpath; d++)
    if (!t->lastpath[d]->graph || !t->lastpath[d]->launches) return gt_fail(rt, "a segment holds no graph");
  return GT_OK;
}

int gt_tree_keyed_ready(gt_tree *t) { return t->stats.calls > 0 && path_graphed(t->rt, t, 1) == GT_OK; }

gt_keyed *gt_tree_keyed_save(gt_runtime *rt, gt_tree *t, const gt_arg *ins, const uint8_t *kinds, int nin,
                             const int *outs, int nout, const gt_texpr *ex, int nex, const gt_tslot *sl, int nsl) {
  if (path_graphed(rt, t, 0)) return NULL;
  gt_keyed *k = keyed_new(rt, t, nout);
  if (!k) return NULL;
  for (int i = 0; i < nout; i++) {
    gt_buf *b = gt_tree_buf_ptr(t, outs[i]);
    if (!b || b->gen != t->gen || b->seg >= k->npath) { gt_keyed_free(k); gt_fail(rt, "an output is not a tensor of the call"); return NULL; }
    k->o[i] = (kout){ outs[i], b->seg, b->idx, b->bytes };
  }
  k->no = nout;
  for (int i = 0; i < nex; i++)             /* (steps refer to arguments and earlier steps only) */
    if ((ex[i].op == GT_TX_ARG && (ex[i].a < 0 || ex[i].a >= nin || kinds[ex[i].a] != GT_KIN_PATCH)) ||
        (ex[i].op > GT_TX_CONST && (ex[i].a < 0 || ex[i].a >= i || ex[i].op > GT_TX_EQ ||
                                    ((ex[i].op < GT_TX_UNM || ex[i].op >= GT_TX_LT) && (ex[i].b < 0 || ex[i].b >= i))))) {
      gt_keyed_free(k);
      gt_fail(rt, "the call's trace is malformed at step %d", i + 1);
      return NULL;
    }
  k->nex = nex;
  k->ex = malloc((size_t)(nex ? nex : 1) * sizeof *k->ex);
  k->ev = malloc((size_t)(nex ? nex : 1) * sizeof *k->ev);
  if (!k->ex || !k->ev) { gt_keyed_free(k); gt_err(rt, GT_E_NOMEM); return NULL; }
  if (nex) memcpy(k->ex, ex, (size_t)nex * sizeof *ex);
  int bad = find_inputs(rt, k, ins, kinds, nin) || find_traced(rt, k, sl, nsl);
  t->ndreach = -1;                           /* (the traced run's reach serves this save only) */
  if (bad) { gt_keyed_free(k); return NULL; }
  if (k->np > 1) qsort(k->p, (size_t)k->np, sizeof *k->p, by_slot);
  for (int d = 0; d < k->npath; d++) k->path[d]->keyed = 1;
  k->next = t->keyed;
  t->keyed = k;
  return k;
}
