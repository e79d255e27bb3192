/* pathg.h - a path of several segments as one graph (pathg.c; private to the core). */
#ifndef GT_PATHG_H
#define GT_PATHG_H
#include "backend.h"

typedef struct gt_node gt_node;

/* A path of segments kept as one graph (keyed.c: keyed hits, graph.c's
   deferred launches): built once GT_PATHG_AFTER launches of the path segment
   by segment found its graphs unchanged (gt_node.gver), at most
   GT_PATHG_BUILDS times; it holds what the path's graphs held then, so it
   is launched only while they still do (gt_pathg_ok). */
typedef struct gt_pathg {
  gt_bgraph *g;                      /* the one graph, or NULL */
  uint32_t *ver; int n;              /* the path's gver at its last launch segment by segment (or at the build) */
  int same, builds;                  /* such launches in a row with those versions; graphs built */
  uint64_t bytes;                    /* the one graph's device memory (the backend's graph_bytes; 0: none) */
} gt_pathg;
extern uint64_t gt_pathg_total;      /* bytes every path's one graph holds, in the process */
enum { GT_PATHG_AFTER = 8, GT_PATHG_BUILDS = 4 };

/* pathg.c: a path's one graph (gt_pathg).  ok: it holds what path p's
   np graphs hold now; note: p was just launched segment by segment (counts,
   drops a stale graph, builds one when due); drop: the graph goes (its
   device memory with it); free: everything goes. */
int gt_pathg_ok(const gt_pathg *o, gt_node *const *p, int np);
void gt_pathg_note(gt_backend *be, gt_pathg *o, gt_node *const *p, int np, int width);   /* width: gt_deps_build's */
void gt_pathg_drop(gt_backend *be, gt_pathg *o);
void gt_pathg_free(gt_backend *be, gt_pathg *o);
#endif
