/* keyed.h - keyed calls: memoized paths replayed without the Lua body
   (keyed.c: a path's life, the hit, the check; keyed_save.c: saving one;
   private to the core).  The API (gt_tree_keyed_*) is in gt.h. */
#ifndef GT_KEYED_H
#define GT_KEYED_H
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

/* A launch whose arguments a patch sets in the graph: a kernel's, and a
   gt.cond/gt.loop condition's address (a copy or a fill is rebuilt). */
static inline int gt_keyed_patchable(const gt_qlaunch *l) { return l->kind == GT_GN_KERNEL || (gt_kind_is_cond(l->kind) && l->nargs); }

static inline int gt_keyed_is_pointer(const gt_qlaunch *l, int j) {
  if (l->kind != GT_GN_KERNEL) return gt_kind_two_addrs(l->kind) ? j < 2 : j == 0;
  return l->k->ptype[j] == GT_P_IN || l->k->ptype[j] == GT_P_OUT;
}

/* k and everything it holds freed (not unlinked from its tree's list). */
void gt_keyed_free(gt_keyed *k);
/* What k's path's graphs hold now, as this key's: after a body run of it.  GT_ERR when out of host memory. */
int gt_keyed_snapshot(gt_keyed *k);

void gt_keyed_free_all(gt_tree *t);   /* the tree's memoized paths freed (the tree is freed) */
/* A trim dropped graphs: the paths' one graphs go too, with their device
   memory (a path fuses again once it repeats), as the tree's own do. */
void gt_keyed_trim_all(gt_tree *t);
#endif
