/* deps.c - a segment as graph nodes: their argument values, and edges from the launches' read/write sets. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "deps.h"

/* Dependencies come from read/write sets over byte ranges, kept as live
   access records: a node waits for the last writers of what it reads, and
   for the last writers and readers of what it writes; a write retires the
   records it covers (later nodes reach them through it).  So a chain gets
   one edge per node, and independent kernels none.  Conditional bodies
   (IF/ELSE/WHILE ... END entries) then have their edges lifted so that each
   joins two nodes of one body. */

typedef struct { uint64_t lo, hi; int write; } access_t;
typedef struct { uint64_t lo, hi; int write, node; } rec_t;
typedef struct { int a, b; } edge_t;

/* Launch i's tensor arguments as byte ranges (at most 64: a kernel's parameters). */
static int accesses(const gt_queue *q, int i, const uint64_t *vals, access_t *acc) {
  const gt_qlaunch *l = &q->l[i];
  const gt_arg *a = q->args + l->arg0;
  int n = 0;
  for (int j = 0; j < l->nargs && n < 64; j++) {
    if (!a[j].buf) continue;
    acc[n++] = (access_t){ vals[j], vals[j] + (a[j].nbytes ? a[j].nbytes : 1), gt_launch_writes(l, j) };
  }
  return n;
}

/* Node i's waits on the live records, appended to *deps (marks: one edge per pair). */
static int waits(const access_t *acc, int na, const rec_t *rec, int nrec, int i, int *mark, int **deps, int *nd, int *dcap) {
  for (int r = 0; r < nrec; r++)
    for (int x = 0; x < na; x++)
      if ((acc[x].write || rec[r].write) && acc[x].lo < rec[r].hi && rec[r].lo < acc[x].hi && mark[rec[r].node] != i + 1) {
        if (GT_GROW(*deps, *dcap, *nd + 1)) return GT_ERR;
        mark[rec[r].node] = i + 1;
        (*deps)[(*nd)++] = rec[r].node;
        break;
      }
  return GT_OK;
}

/* Node i's accesses become live records; a write retires those it covers. */
static int note(const access_t *acc, int na, int i, rec_t **rec, int *nrec, int *rcap) {
  for (int x = 0; x < na; x++) {
    if (acc[x].write) {
      int w = 0;
      for (int r = 0; r < *nrec; r++)
        if (!((*rec)[r].lo >= acc[x].lo && (*rec)[r].hi <= acc[x].hi)) (*rec)[w++] = (*rec)[r];
      *nrec = w;
    }
    if (GT_GROW(*rec, *rcap, *nrec + 1)) return GT_ERR;
    (*rec)[(*nrec)++] = (rec_t){ acc[x].lo, acc[x].hi, acc[x].write, i };
  }
  return GT_OK;
}

/* Launch i of the top level waits for nothing: under a width bound w, past
   the first w such launches it waits for the one w before it, so they form
   w lanes of chains instead of an edgeless fan (an added edge only orders
   launches that were free to run in any order: results are the same). */
static int lane(int w, int i, int *roots, int *nroots, int **deps, int *nd, int *dcap) {
  if (*nroots >= w) {
    if (GT_GROW(*deps, *dcap, *nd + 1)) return GT_ERR;
    (*deps)[(*nd)++] = roots[*nroots - w];
  }
  roots[(*nroots)++] = i;
  return GT_OK;
}

int gt_deps_build(const gt_queue *q, const uint64_t *vals, gt_gnode *g, int **depmem, int width) {
  int *mark = calloc(q->n ? 2 * q->n : 1, sizeof *mark), *deps = NULL, nd = 0, dcap = 0, nrec = 0, rcap = 0, conds = 0;
  int level = 0, nroots = 0;
  rec_t *rec = NULL;
  if (!mark) return GT_ERR;
  for (int i = 0; i < q->n; i++) {
    access_t acc[64];
    int na = accesses(q, i, vals + q->l[i].arg0, acc), d0 = nd, k = q->l[i].kind;
    conds |= gt_kind_is_cond(k);
    if (waits(acc, na, rec, nrec, i, mark, &deps, &nd, &dcap) || note(acc, na, i, &rec, &nrec, &rcap) ||
        (width > 0 && nd == d0 && !level && !gt_kind_is_cond(k) && lane(width, i, mark + q->n, &nroots, &deps, &nd, &dcap))) {
      free(mark); free(rec); free(deps);
      return GT_ERR;
    }
    level += (k == GT_GN_IF || k == GT_GN_WHILE) - (k == GT_GN_END);
    g[i].ndeps = nd - d0;
    g[i].deps = (const int *)(intptr_t)d0;      /* an index until deps stops moving */
  }
  for (int i = 0; i < q->n; i++) g[i].deps = deps ? deps + (intptr_t)g[i].deps : NULL;
  free(mark); free(rec);
  if (conds && gt_deps_lift(q, g, &deps)) { free(deps); return GT_ERR; }
  *depmem = deps;
  return GT_OK;
}

/* -- The nodes of a graph ---------------------------------------------------- */

int gt_deps_nodes(gt_tree *t, gt_node *n, gt_gnode **out, int **depmem, void ***ptrmem) {
  gt_queue *q = &t->q;
  free(n->argvals);
  n->argvals = malloc((q->nargs ? q->nargs : 1) * sizeof *n->argvals);
  n->nargvals = q->nargs;
  void **ptrs = malloc((q->nargs ? q->nargs : 1) * sizeof *ptrs);
  gt_gnode *g = calloc(q->n ? q->n : 1, sizeof *g);
  if (!n->argvals || !ptrs || !g) goto oom;
  for (int i = 0; i < q->n; i++) {
    uint64_t *vals = n->argvals + q->l[i].arg0;
    gt_queue_resolve(q, i, vals);
    gt_launch_gnode(&q->l[i], vals, ptrs + q->l[i].arg0, &g[i]);
  }
  if (gt_deps_build(q, n->argvals, g, depmem, t->opts.graph_width)) goto oom;
  *out = g;
  *ptrmem = ptrs;
  return GT_OK;
oom:
  free(ptrs); free(g);
  return gt_err(t->rt, GT_E_NOMEM);
}

/* -- Lifting for conditional bodies --------------------------------------- */

static int by_edge(const void *x, const void *y) {
  const edge_t *p = x, *q = y;
  return p->a != q->a ? (p->a > q->a) - (p->a < q->a) : (p->b > q->b) - (p->b < q->b);
}

/* Each node's body: the innermost IF/WHILE it lies in (cond, -1 at the top),
   the branch (0 then or loop body, 1 else) and the nesting depth.  An
   IF/WHILE itself lies in its parent's body. */
static void bodies(const gt_queue *q, int *cond, int *branch, int *depth, int *stack) {
  int cur = -1, br = 0, dep = 0, top = 0;
  for (int i = 0; i < q->n; i++) {
    int k = q->l[i].kind;
    cond[i] = cur, branch[i] = br, depth[i] = dep;
    if (gt_kind_is_begin(k)) { stack[top++] = cur; stack[top++] = br; cur = i; br = 0; dep++; }
    else if (k == GT_GN_ELSE) br = 1;
    else if (k == GT_GN_END && top) { br = stack[--top]; cur = stack[--top]; dep--; }
  }
}

int gt_deps_lift(const gt_queue *q, gt_gnode *g, int **deps) {
  int n = q->n, nd = 0;
  for (int i = 0; i < n; i++) nd += g[i].ndeps;
  int *cond = malloc((5 * (size_t)n + 1) * sizeof *cond), *branch = cond + n, *depth = branch + n, *stack = depth + n;
  edge_t *e = malloc(((size_t)nd + 1) * sizeof *e);
  int *nd2 = malloc(((size_t)nd + 1) * sizeof *nd2);
  if (!cond || !e || !nd2) { free(cond); free(e); free(nd2); return GT_ERR; }
  bodies(q, cond, branch, depth, stack);
  int ne = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g[i].ndeps; k++) {
      int a = i, b = g[i].deps[k];
      while (cond[a] != cond[b] || branch[a] != branch[b]) {
        int da = depth[a], db = depth[b];
        if (da >= db) a = cond[a];
        if (db >= da) b = cond[b];
        if (a < 0 || b < 0) break;             /* cannot happen in a well nested queue */
      }
      if (a >= 0 && b >= 0 && a != b && b < a) e[ne++] = (edge_t){ a, b };
    }
  qsort(e, ne, sizeof *e, by_edge);
  int m = 0;
  for (int i = 0; i < ne; i++) if (!m || e[i].a != e[m - 1].a || e[i].b != e[m - 1].b) e[m++] = e[i];
  for (int i = 0, j = 0; i < n; i++) {
    int j0 = j;
    while (j < m && e[j].a == i) nd2[j] = e[j].b, j++;
    g[i].ndeps = j - j0;
    g[i].deps = j > j0 ? nd2 + j0 : NULL;
  }
  free(*deps);
  *deps = nd2;
  free(cond); free(e);
  return GT_OK;
}
