/* pathg.c - a path of several segments as one graph (gt_pathg): built from
   what the segments' graphs hold (their nodes' launches and argvals; each
   segment's edges as in its own graph, and a segment's first launches wait
   for the previous segment's last ones), and launched instead of one graph a
   segment while none of them changed (gt_node.gver).  Keyed hits (keyed.c)
   and a tree's replayed paths (graph.c's deferred launches) use it; it calls
   down only (deps.c, queue.c, the backend). */
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "core.h"
#include "deps.h"

/* Whether a path of np segments can be one graph: several segments, each
   with its recording (launches, the values its graph holds, the arguments
   as queued) and no conditional node (their bodies are graphs of their own). */
static int path_fusable(gt_node *const *path, int np) {
  if (np < 2) return 0;
  for (int d = 0; d < np; d++) {
    const gt_node *n = path[d];
    if (!n->graph || !n->launches || !n->pred.qargs || !n->argvals || n->nlaunch < 1 || n->pred.nsig != n->nlaunch) return 0;
    const gt_qlaunch *last = &n->launches[n->nlaunch - 1];
    if (n->nargvals < last->arg0 + last->nargs) return 0;
    for (int i = 0; i < n->nlaunch; i++) if (gt_kind_is_cond(n->launches[i].kind)) return 0;
  }
  return 1;
}

/* The path's launches as one graph's nodes (each segment's edges as its
   own graph has them; a segment's launches that wait for nothing in it wait
   for the previous segment's launches that nothing in it waits for), built
   by the backend into *out.  GT_ERR when out of host memory; a backend
   status otherwise. */
static int path_fuse(gt_backend *be, gt_node *const *path, int np, gt_bgraph **out) {
  int total = 0, nvals = 0, nedges = 0, ecap, st = GT_BOK;
  for (int d = 0; d < np; d++) total += path[d]->nlaunch, nvals += path[d]->nargvals;
  gt_gnode *g = calloc((size_t)total, sizeof *g);
  uint64_t *vals = malloc((size_t)(nvals ? nvals : 1) * sizeof *vals);
  void **ptrs = malloc((size_t)(nvals ? nvals : 1) * sizeof *ptrs);
  int **segdeps = calloc((size_t)np, sizeof *segdeps), *waited = calloc((size_t)total, sizeof *waited), *edges = NULL;
  if (!g || !vals || !ptrs || !segdeps || !waited) { st = GT_ERR; goto done; }
  for (int d = 0, base = 0, vbase = 0; d < np; d++) {   /* each segment's nodes and edges, as recorded */
    gt_node *n = path[d];
    gt_queue q = { .l = n->launches, .n = n->nlaunch, .args = n->pred.qargs, .nargs = n->nargvals };
    memcpy(vals + vbase, n->argvals, (size_t)n->nargvals * sizeof *vals);
    for (int i = 0; i < n->nlaunch; i++)
      gt_launch_gnode(&n->launches[i], vals + vbase + n->launches[i].arg0, ptrs + vbase + n->launches[i].arg0, &g[base + i]);
    if (gt_deps_build(&q, vals + vbase, g + base, &segdeps[d])) { st = GT_ERR; goto done; }
    for (int i = 0; i < n->nlaunch; i++) {
      nedges += g[base + i].ndeps;
      for (int e = 0; e < g[base + i].ndeps; e++) waited[base + g[base + i].deps[e]] = 1;
    }
    base += n->nlaunch, vbase += n->nargvals;
  }
  ecap = nedges + total + 16;
  edges = malloc((size_t)ecap * sizeof *edges);
  if (!edges) { st = GT_ERR; goto done; }
  int ne = 0;
  for (int d = 0, base = 0, prev = -1; d < np; d++) {    /* global indices; the joins between segments */
    int nl = path[d]->nlaunch;
    for (int i = base; i < base + nl; i++) {
      const int *local = g[i].deps;
      int nd = g[i].ndeps, e0 = ne;
      for (int e = 0; e < nd; e++) edges[ne++] = base + local[e];
      if (!nd && prev >= 0)                   /* a first launch of its segment: after the previous one's last launches */
        for (int j = prev; j < base; j++) {
          if (waited[j]) continue;
          if (GT_GROW(edges, ecap, ne + 1)) { st = GT_ERR; goto done; }
          edges[ne++] = j;
        }
      g[i].ndeps = ne - e0;
      g[i].deps = (const int *)(intptr_t)e0;   /* an index until edges stops moving */
    }
    prev = base, base += nl;
  }
  for (int i = 0; i < total; i++) g[i].deps = g[i].ndeps ? edges + (intptr_t)g[i].deps : NULL;
  st = be->graph_create(be, g, total, out);
done:
  for (int d = 0; segdeps && d < np; d++) free(segdeps[d]);
  free(segdeps); free(waited); free(edges); free(g); free(vals); free(ptrs);
  return st;
}

int gt_pathg_ok(const gt_pathg *o, gt_node *const *p, int np) {
  if (!o->g || o->n != np) return 0;
  for (int d = 0; d < np; d++) if (p[d]->gver != o->ver[d]) return 0;
  return 1;
}

void gt_pathg_drop(gt_backend *be, gt_pathg *o) {
  if (o->g) be->graph_destroy(be, o->g);
  o->g = NULL;
  o->same = 0;
}

void gt_pathg_free(gt_backend *be, gt_pathg *o) {
  gt_pathg_drop(be, o);
  free(o->ver);
  *o = (gt_pathg){ 0 };
}

/* After p was launched segment by segment: a stale one graph goes (its
   segments' graphs changed since it was built); a row of such launches
   with the same graphs is counted, and after GT_PATHG_AFTER of them the
   path is built as one graph (a failed build, or GT_PATHG_BUILDS of them,
   stop it for good; this launch has run). */
void gt_pathg_note(gt_backend *be, gt_pathg *o, gt_node *const *p, int np) {
  if (o->g && !gt_pathg_ok(o, p, np)) gt_pathg_drop(be, o);
  int same = o->ver && o->n == np;
  for (int d = 0; same && d < np; d++) same = p[d]->gver == o->ver[d];
  if (same) o->same++;
  else {
    uint32_t *v = o->n == np ? o->ver : realloc(o->ver, (size_t)np * sizeof *v);
    if (!v) return;
    o->ver = v;
    o->n = np;
    for (int d = 0; d < np; d++) v[d] = p[d]->gver;
    o->same = 1;
  }
  if (o->same < GT_PATHG_AFTER || o->g || o->builds >= GT_PATHG_BUILDS) return;
  o->builds++;
  if (!path_fusable(p, np) || path_fuse(be, p, np, &o->g) != GT_BOK) {
    o->g = NULL;
    o->builds = GT_PATHG_BUILDS;
  }
}

