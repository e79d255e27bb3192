/* shmcoll.h - collectives across the processes of one host through shared
   memory (shmcoll.c): the cpu backend's stand-in for NCCL.  Uses nothing in
   src/ but util. */
#ifndef GT_SHMCOLL_H
#define GT_SHMCOLL_H
#include <stddef.h>
#include "coll.h"

typedef struct gt_shmc gt_shmc;

/* Joins (rank 0: creates) the shared segment `name` of world ranks; waits
   for all of them (timeout seconds: a rank missing by then is an error).
   0, or -1 with a sentence in err. */
int gt_shmc_open(gt_shmc **out, const char *name, int rank, int world, double timeout, char *err, size_t errlen);
/* Runs collective c: src (host memory) in, dst out (may be src).  Every
   rank's c must be equal; a rank that differs, has ended or died, or does
   not arrive within the timeout is an error on every rank that waits (-1,
   err naming the collective's number and the ranks). */
int gt_shmc_run(gt_shmc *s, const gt_coll *c, void *dst, const void *src, char *err, size_t errlen);
/* Leaves the group (the others then see this rank as ended); s freed. */
void gt_shmc_close(gt_shmc *s);
/* "all_reduce of 8 f32 (sum)" and the like, in buf. */
const char *gt_coll_describe(const gt_coll *c, char *buf, size_t len);
#endif
