/* cond.h - device-side branches: gt.cond/gt.loop entries in a queue (cond.c; private to the core). */
#ifndef GT_COND_H
#define GT_COND_H
#include "core.h"

/* match[i]: for an IF its ELSE (or END), for a WHILE or an ELSE its END, for
   an END its IF/WHILE (stack: q->n ints of scratch).  GT_ERR when the
   structure does not nest. */
int gt_cond_match(const gt_queue *q, int *match, int *stack);
#endif
