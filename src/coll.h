/* coll.h - one collective as the backends run it (gt.dist): what every rank
   must agree on.  Shared by shmcoll.c, nccl.c, the backends and dist.c. */
#ifndef GT_COLL_H
#define GT_COLL_H
#include <stdint.h>
#include "gt.h"

typedef struct gt_coll {
  int32_t kind;              /* GT_COLL_* */
  int32_t op;                /* GT_RED_* (reductions) */
  int32_t dtype;             /* GT_F32 ... */
  int32_t root;              /* broadcast */
  uint64_t count;            /* elements of one rank's piece: all-reduce and broadcast the whole,
                                all-gather the input, reduce-scatter the output */
} gt_coll;

/* The collective packed into a queue entry's int (and back). */
static inline int gt_coll_pack(const gt_coll *c) { return c->kind | c->op << 4 | c->dtype << 8 | c->root << 16; }
static inline gt_coll gt_coll_unpack(int v, uint64_t count) {
  gt_coll c = { v & 15, (v >> 4) & 15, (v >> 8) & 255, (v >> 16) & 0x7fff, count };
  return c;
}
/* A dtype's size in bytes (0: unknown). */
static inline int gt_coll_esize(int dtype) {
  switch (dtype) {
  case GT_F32: case GT_I32: case GT_U32: return 4;
  case GT_F64: case GT_I64: case GT_U64: return 8;
  case GT_F16: case GT_BF16: return 2;
  case GT_U8: return 1;
  default: return 0;
  }
}
#endif
