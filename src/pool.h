/* pool.h - reserved address ranges, grown by committing (pool.c; private to the core). */
#ifndef GT_POOL_H
#define GT_POOL_H
#include "gt_internal.h"
#include "backend.h"

typedef struct gt_block { uint64_t off, size; gt_buf *buf; } gt_block;
typedef struct gt_range {
  uint64_t addr, size;
  uint64_t committed;        /* bytes committed from addr */
  uint64_t high;             /* the highest end of a block ever placed, from addr */
} gt_range;

/* A block at offset off lives at address base + off.  A fixed pool
   (gt_pool_init, ordinary memory) is one range reserved at once, base its
   address.  A growing pool (gt_pool_init_growing, a tree's) reserves nothing
   until its first allocation, then adds ranges, each at least as large as all
   before it; ranges never move and are released only by gt_pool_destroy, so
   an offset (there base is 0 and an offset is an address) stays valid for
   every graph that holds it.  A block never straddles two ranges. */
typedef struct gt_pool {
  gt_backend *be;
  uint64_t base;             /* fixed: the range's address; growing: 0 */
  gt_block *blk;             /* live blocks, sorted by offset (n: every call clears them, next to base: every hit reads it) */
  int n, cap;
  uint64_t reserve;          /* bytes reserved, all ranges */
  uint64_t committed;        /* bytes committed, all ranges */
  uint64_t high_water;       /* the ranges' highs added up (one range: the largest end ever used) */
  uint64_t first;            /* growing: the first range's size */
  int growing;               /* 0: fixed; 1: growing; 2: growing, first set by the user (not retried smaller) */
  gt_range *rng;             /* sorted by address */
  int nrng;
} gt_pool;

/* Bumped whenever a pool gives memory back (a shrink that decommits, a
   destroy): memory a graph held an address in may be unmapped since. */
extern uint64_t gt_pool_epoch;
/* 1 when memory given back after epoch since held addr (or may have: the log reaches back 64 releases). */
int gt_pool_released_since(uint64_t since, uint64_t addr);
/* A fixed pool: reserve bytes of addresses now.  On failure err says why. */
int gt_pool_init(gt_pool *p, gt_backend *be, uint64_t reserve, char *err);
/* A growing pool: nothing reserved yet.  first_gib: the first range's size
   (GTLUA_POOL_RESERVE: GiB, or with a K/M/G suffix; NULL or empty: 64 MiB, less
   under a small `ulimit -v`, retried with just the request when it cannot be
   reserved).  GT_ERR with err set when first_gib is not a size. */
int gt_pool_init_growing(gt_pool *p, gt_backend *be, const char *first_gib, char *err);
/* Decommits and releases every range. */
void gt_pool_destroy(gt_pool *p);
uint64_t gt_pool_in_use(const gt_pool *p);
/* Best-fit allocation of size bytes for buf; *off on success.  A growing pool
   adds a range when nothing fits; on failure err names the request, the
   pool's size, its largest free block and the variables that size it. */
int gt_pool_alloc(gt_pool *p, uint64_t size, gt_buf *buf, uint64_t *off, char *err);
void gt_pool_free(gt_pool *p, uint64_t off);
void gt_pool_clear(gt_pool *p);
/* Fixed pool: make sure [0, end) is committed. */
int gt_pool_ensure(gt_pool *p, uint64_t end, char *err);
/* Give back committed memory at offsets from keep_end up (rounded up to
   granularity); the ranges stay reserved. */
void gt_pool_shrink(gt_pool *p, uint64_t keep_end);
/* Plan: given the current live blocks and n intervals [first, end) in queue
   positions (end = UINT32_MAX: alive at the end), assign offsets by best fit,
   reusing a planned block for tensors made at or after its end.  old: live
   blocks (at off) released at position end; their memory is reused likewise.
   On return the pool holds the live blocks not in old plus the planned blocks
   still alive at the end. */
typedef struct gt_interval { uint64_t size; uint32_t first, end; gt_buf *buf; uint64_t off; } gt_interval;
int gt_pool_plan(gt_pool *p, gt_interval *iv, int n, const gt_interval *old, int nold, char *err);
#endif
