/* visit.h - a segment's end: the node, the visit chosen and run (visit.c; private to the core).
   gt_tree_flush, the entry, is in gt.h. */
#ifndef GT_VISIT_H
#define GT_VISIT_H

/* Whether call number `call` times its host time: every call for the first
   64, then one in 16 (a clock read costs as much as a few launches'
   bookkeeping; it matters in a keyed call's microsecond). */
static inline int gt_timed_call(int call) { return call <= 64 || !(call & 15); }
#endif
