/* explain.h - a node's label, why it exists, its shapes and cut sites (explain.c; private to the core). */
#ifndef GT_EXPLAIN_H
#define GT_EXPLAIN_H
#include <stdint.h>
#include "gt.h"

typedef struct gt_node gt_node;

/* One site a node's segment ended at: its text as node.cut's ("model.lua:31
   item"), its API (GT_CUT_*), its visits (explain.c). */
typedef struct gt_cutsite { char *text; int api, count; } gt_cutsite;
enum { GT_CUT_SITES = 8 };

/* A node's explanation (gt_node.ex): why it exists, where its segment ended, its shapes. */
typedef struct gt_explain {
  char *why, *cut, *shapes;
  gt_cutsite *cuts; int ncuts;       /* every distinct site the segment ended at, in order of first visit (at most GT_CUT_SITES) */
  int cut_other;                     /* visits that ended at sites past those */
  int cut_last;                      /* the site counted last (cut_nlast's, and where stats.c counts a keyed hit's visit) */
  int cut_ask;                       /* 1 + the API whose site Lua names this visit (gt_tree_note), 0: none */
  uint64_t kseq;                     /* hash of the kernels alone (no shapes, no grids) */
  uint32_t *kinds; int nkinds;       /* each launch's kind and kernel id, in order (a new branch's shared launches) */
  int shared, shared_with;           /* a new branch: its leading launches that sibling shared_with has too (-1: none) */
  uint64_t *statics; int nstatics;   /* static addresses in order of use */
  int why_sib;                       /* "new shape": the sibling compared with (-1: none) */
} gt_explain;

void gt_explain_node(gt_tree *t, gt_node *n);     /* at creation: why (shapes come later from Lua) */
void gt_explain_free(gt_node *n);
void gt_explain_count_cut(gt_tree *t, gt_node *n, int api, int ran);   /* a visit ended at api's site (off the one-increment path) */
#endif
