/* cond.h - device-side branches: gt.cond/gt.loop entries in a queue (cond.c; private to the core). */
#ifndef GT_COND_H
#define GT_COND_H
#include "core.h"

/* cond.c: GT_ERR (the message naming the gt.cond or gt.loop and the launch)
   when a launch of t's queue reads a tensor made in a device-side body where
   that body's writes may not have happened: after a gt.loop, in the other
   body, or after a gt.cond whose other body does not write it. */
int gt_cond_check(struct gt_tree *t);
/* Runs the queue's launches in order, deciding each IF and WHILE on the host
   (p read back: a sync on cuda).  *at: the launch that failed. */
int gt_cond_run_queue(gt_backend *be, gt_queue *q, int *at);

/* match[i]: for an IF its ELSE (or END), for a WHILE or an ELSE its END, for
   an END its IF/WHILE (stack: q->n ints of scratch).  GT_ERR when the
   structure does not nest. */
int gt_cond_match(const gt_queue *q, int *match, int *stack);
#endif
