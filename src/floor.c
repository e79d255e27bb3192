/* floor.c - the benchmark floor: the last call's graphs (or the marked
   paths, in turn) launched back to back from C with no tree logic, each
   step repeating the kernel-node patches its call made; what the graphs
   write is kept aside and put back, so the tree's state is as before. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "graph.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* A path the floor launches: its nodes, and the kernel-node patches of the
   call it was taken from, with the argument values they set. */
typedef struct gt_floorpath {
  gt_node **path; int npath;
  int *patched; int npatched;    /* (path index, launch) pairs */
  uint64_t *vals;                /* each patched launch's arguments, one after another */
} gt_floorpath;

static void floorpath_free(gt_floorpath *f) { free(f->path); free(f->patched); free(f->vals); }

/* The last call's path as a floor path into *f (its patches' values: what
   the graphs hold now).  GT_ERR when out of host memory. */
static int floorpath_of(gt_tree *t, gt_floorpath *f) {
  int nv = 0;
  for (int p = 0; p < t->npatched; p++) nv += t->lastpath[t->patched[2 * p]]->launches[t->patched[2 * p + 1]].nargs;
  *f = (gt_floorpath){ .path = malloc((t->nlastpath + 1) * sizeof *f->path), .npath = t->nlastpath,
                       .patched = malloc((2 * t->npatched + 1) * sizeof *f->patched), .npatched = t->npatched,
                       .vals = malloc((nv + 1) * sizeof *f->vals) };
  if (!f->path || !f->patched || !f->vals) { floorpath_free(f); return GT_ERR; }
  if (t->nlastpath) memcpy(f->path, t->lastpath, t->nlastpath * sizeof *f->path);
  if (t->npatched) memcpy(f->patched, t->patched, 2 * t->npatched * sizeof *f->patched);
  for (int p = 0, v = 0; p < t->npatched; p++) {
    const gt_node *n = f->path[f->patched[2 * p]];
    const gt_qlaunch *l = &n->launches[f->patched[2 * p + 1]];
    memcpy(f->vals + v, n->argvals + l->arg0, l->nargs * sizeof *f->vals);
    v += l->nargs;
  }
  return GT_OK;
}

int gt_tree_floor_mark(gt_runtime *rt, gt_tree *t) {
  if (!t->nlastpath) return gt_fail(rt, "tree '%s': call it before marking a path for the floor", t->name);
  if (GT_GROW(t->floor.paths, t->floor.cap, t->floor.n + 1) || floorpath_of(t, &t->floor.paths[t->floor.n]))
    return gt_err(rt, GT_E_NOMEM);
  return ++t->floor.n;
}

void gt_tree_floor_clear(gt_tree *t) {
  for (int i = 0; i < t->floor.n; i++) floorpath_free(&t->floor.paths[i]);
  t->floor.n = 0;
}

void gt_floor_free(gt_tree *t) {
  gt_tree_floor_clear(t);
  free(t->floor.paths);
  t->floor = (gt_floor){ 0 };
}

/* One step of the floor: f's patches (its values into the graphs, and into
   the nodes' argvals: what the graphs hold), then its graphs launched. */
static int floor_step(gt_tree *t, const gt_floorpath *f, int patch) {
  gt_backend *be = &t->rt->be;
  for (int p = 0, v = 0; patch && p < f->npatched; p++) {
    gt_node *n = f->path[f->patched[2 * p]];
    int i = f->patched[2 * p + 1];
    const gt_qlaunch *l = &n->launches[i];
    memcpy(n->argvals + l->arg0, f->vals + v, l->nargs * sizeof *f->vals);
    v += l->nargs;
    int st = gt_graph_patch(t, -1, n, i);
    if (st > 0) st = gt_graph_rebuild(t, n);   /* (the driver refused it: a node in a conditional body) */
    if (st) return GT_ERR;
  }
  for (int i = 0; i < f->npath; i++) {
    if (!f->path[i]->graph)          /* (a budget or a trim dropped it since the path was marked) */
      return gt_fail(t->rt, "tree '%s': a floor path's graph was dropped (graph_memory or a trim): mark the path again", t->name);
    if (be->graph_launch(be, f->path[i]->graph) != GT_BOK) return gt_fail_be(t->rt, NULL);
  }
  return GT_OK;
}

/* -- What the floor writes, kept -------------------------------------------
   The floor's graphs write what the calls they come from wrote: the last
   call's outputs and every tensor it made, an input a kernel writes into, a
   static buffer a step updates (a KV cache).  Those bytes are copied aside
   before the first step and back after the last, so that a floor changes no
   value anyone can read: a tensor the last call returned reads as before. */
typedef struct gt_span { uint64_t lo, hi; } gt_span;
typedef struct gt_kept { gt_span *s; int n, kept; uint64_t bytes; gt_buf *dev; uint8_t *host; } gt_kept;   /* kept: every span copied aside */

static int cmp_span(const void *a, const void *b) {
  uint64_t x = ((const gt_span *)a)->lo, y = ((const gt_span *)b)->lo;
  return x < y ? -1 : x > y;
}

/* The bytes [lo, hi) that launch l of node n writes, one span per written argument, into k->s. */
static int written_spans(const gt_node *n, const gt_qlaunch *l, gt_kept *k, int *cap) {
  for (int j = 0; j < l->nargs; j++) {
    if (!gt_launch_writes(l, j)) continue;
    uint64_t a = n->argvals[l->arg0 + j];
    uint64_t len = l->kind == GT_GN_KERNEL || l->kind == GT_GN_COLL ? (uint64_t)n->pred.qargs[l->arg0 + j].nbytes : l->bytes;
    if (!len) continue;
    if (GT_GROW(k->s, *cap, k->n + 1)) return GT_ERR;
    k->s[k->n++] = (gt_span){ a, a + len };
  }
  return GT_OK;
}

/* Every span the paths' launches write, sorted and merged. */
static int floor_spans(const gt_floorpath *paths, int npaths, gt_kept *k) {
  int cap = 0;
  for (int f = 0; f < npaths; f++)
    for (int i = 0; i < paths[f].npath; i++) {
      const gt_node *n = paths[f].path[i];
      for (int l = 0; l < n->nlaunch; l++) if (written_spans(n, &n->launches[l], k, &cap)) return GT_ERR;
    }
  if (k->n) qsort(k->s, k->n, sizeof *k->s, cmp_span);
  int m = 0;
  for (int i = 0; i < k->n; i++) {
    if (m && k->s[i].lo <= k->s[m - 1].hi) { if (k->s[i].hi > k->s[m - 1].hi) k->s[m - 1].hi = k->s[i].hi; }
    else k->s[m++] = k->s[i];
  }
  k->n = m;
  for (int i = 0; i < m; i++) k->bytes += k->s[i].hi - k->s[i].lo;
  return GT_OK;
}

/* Copies the spans aside (device memory, else host memory): GT_ERR with the reason. */
static int keep_spans(gt_runtime *rt, gt_tree *t, const gt_floorpath *paths, int npaths, gt_kept *k) {
  gt_backend *be = &rt->be;
  if (floor_spans(paths, npaths, k))
    return gt_fail(rt, "tree '%s': out of host memory listing what the floor's graphs write", t->name);
  if (!k->bytes) return GT_OK;
  k->dev = gt_buf_new(rt, k->bytes);
  if (!k->dev && !(k->host = malloc(k->bytes)))
    return gt_fail(rt, "tree '%s': tree:floor needs %llu bytes (device or host memory) to keep what its graphs "
                   "write (the last call's tensors, inputs and static buffers its kernels write), put back after "
                   "it; there are not that many free", t->name, (unsigned long long)k->bytes);
  for (uint64_t i = 0, off = 0; i < (uint64_t)k->n; off += k->s[i].hi - k->s[i].lo, i++) {
    size_t len = k->s[i].hi - k->s[i].lo;
    int st = k->dev ? be->dtod(be, k->dev->addr + off, k->s[i].lo, len) : be->dtoh(be, k->host + off, k->s[i].lo, len);
    if (st != GT_BOK) return gt_fail_be(rt, "tree:floor (keeping what it writes)");
  }
  k->kept = 1;
  return GT_OK;
}

/* Puts the kept bytes back (after the floor's steps, whether or not they
   all ran) and frees them; st: the floor's status so far (its error stays
   the one reported). */
static int put_back(gt_runtime *rt, gt_kept *k, int st) {
  gt_backend *be = &rt->be;
  int bst = GT_BOK;
  for (uint64_t i = 0, off = 0; k->kept && bst == GT_BOK && i < (uint64_t)k->n; off += k->s[i].hi - k->s[i].lo, i++) {
    size_t len = k->s[i].hi - k->s[i].lo;
    bst = k->dev ? be->dtod(be, k->s[i].lo, k->dev->addr + off, len) : be->htod(be, k->s[i].lo, k->host + off, len);
  }
  if (bst == GT_BOK && k->kept && k->n) bst = be->sync(be);
  if (bst != GT_BOK && st == GT_OK) st = gt_fail_be(rt, "tree:floor (putting back what it wrote)");
  if (k->dev) gt_buf_release(k->dev);
  free(k->host); free(k->s);
  *k = (gt_kept){ 0 };
  return st;
}

/* The paths a floor launches (the last call's, or those marked), checked. */
static int floor_paths(gt_runtime *rt, gt_tree *t, gt_floorpath *last, gt_floorpath **paths, int *npaths) {
  if (rt->active)
    return gt_fail(rt, "tree '%s': tree:floor inside a call of tree '%s'; measure the floor outside tree calls",
                   t->name, rt->active->name);
  *paths = t->floor.paths;
  *npaths = t->floor.n;
  /* a tree's pool gave memory back since the last call: an input it read
     from another tree's pool (or its own) may be unmapped now */
  if (gt_pool_epoch != t->epoch_last)
    for (int d = 0; d < t->nlastpath; d++) {
      const gt_node *n = t->lastpath[d];
      for (int j = 0; n->pred.asig && n->argvals && j < n->nargvals; j++)
        if (n->pred.asig[j].role == GT_ROLE_EXTERNAL && gt_pool_released_since(t->epoch_last, n->argvals[j]))
          return gt_fail(rt, "tree '%s': an input of its last call lay in memory a tree's pool gave back since "
                         "(tree:trim, or a tree freed): call the tree again before tree:floor", t->name);
    }
  if (!*npaths) {                             /* the last call's path */
    for (int d = 0; d < t->nlastpath; d++)
      if (!t->lastpath[d]->graph || !t->lastpath[d]->launches)
        return gt_fail(rt, "tree '%s': the last call's segment %d holds no graph (trimmed, or not recorded): call the "
                       "tree again before tree:floor", t->name, d + 1);
    if (floorpath_of(t, last)) return gt_err(rt, GT_E_NOMEM);
    *paths = last;
    *npaths = 1;
  }
  for (int f = 0; f < *npaths; f++)
    for (int i = 0; i < (*paths)[f].npath; i++)
      if (!(*paths)[f].path[i]->graph)
        return gt_fail(rt, "tree '%s': a path of the floor did not replay every segment", t->name);
      else if (!(*paths)[f].path[i]->pred.qargs || (*paths)[f].path[i]->pred.nsig != (*paths)[f].path[i]->nlaunch)
        return gt_fail(rt, "tree '%s': a segment of the floor's path has no recording of what it writes", t->name);
  return GT_OK;
}

int gt_tree_bench_floor(gt_runtime *rt, gt_tree *t, int iters, int sync_each, int patch, double *cpu_us, double *step_us) {
  gt_backend *be = &rt->be;
  if ((!t->nlastpath && !t->floor.n) || iters < 1)
    return gt_fail(rt, "tree '%s': call it at least once before measuring the floor", t->name);
  gt_floorpath last = { 0 }, *paths = NULL;
  gt_kept kept = { 0 };
  int npaths = 0, np = 0;
  if (floor_paths(rt, t, &last, &paths, &npaths) || keep_spans(rt, t, paths, npaths, &kept)) {
    put_back(rt, &kept, GT_ERR);
    floorpath_free(&last);
    return GT_ERR;
  }
  for (int f = 0; f < npaths; f++) if (patch && paths[f].npatched > np) np = paths[f].npatched;
  double *c = malloc(iters * sizeof *c), *s = malloc(iters * sizeof *s);
  int st = !c || !s ? gt_err(rt, GT_E_NOMEM) : be->sync(be) ? gt_fail_be(rt, NULL) : GT_OK;
  double start = gt_now_us();
  for (int k = 0; k < iters && st == GT_OK; k++) {
    double t0 = gt_now_us();
    st = floor_step(t, &paths[k % npaths], patch);
    double t1 = gt_now_us();
    if (sync_each && st == GT_OK && be->sync(be)) st = gt_fail_be(rt, NULL);
    c[k] = t1 - t0;
    s[k] = gt_now_us() - t0;
  }
  if (st == GT_OK && be->sync(be)) st = gt_fail_be(rt, NULL);
  if (st == GT_OK) {
    double total = gt_now_us() - start;
    qsort(c, iters, sizeof *c, cmp_double);
    qsort(s, iters, sizeof *s, cmp_double);
    *cpu_us = c[iters / 2];
    *step_us = sync_each ? s[iters / 2] : total / iters;
  }
  free(c); free(s);
  st = put_back(rt, &kept, st);
  floorpath_free(&last);
  return st == GT_OK ? np : GT_ERR;
}
