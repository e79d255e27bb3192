/* predict.h - the replay predictor: the cursor and the lane (predict.c; private to the core).
   Its state is a struct of a tree (gt_tree.pred, core.h includes this header). */
#ifndef GT_PREDICT_H
#define GT_PREDICT_H
#include "gt_internal.h"
#include "key.h"

typedef struct gt_node gt_node;

/* A node's recording as the predictor compares it (gt_node.pred): nsig
   launches' signatures (0: none), and what the cursor predicts next. */
typedef struct gt_precord {
  gt_node *last_kid;                 /* the child visited last */
  gt_node *after;                    /* the sibling visited after this node last time (the cursor predicts it) */
  gt_asig *asig; uint64_t *bsig; gt_rsig *rsig; int nsig, nbsig, nrsig;
  gt_lrec *lrec;                     /* the recording as the replay lane tests it (made on first use) */
  int lane_ext;                      /* 1 + the last of lrec's launches with an external input (0: none) */
  gt_arg *qargs;                     /* the recorded launches' arguments as queued (what the lane's sync copies) */
} gt_precord;

/* A tree's predictor state: the cursor's prediction for the segment being
   queued, what it noted, and the lane's counts. */
typedef struct gt_cursor {
  gt_node *cand; int cmiss;          /* the cursor's predicted node, and whether it missed */
  int lane_lost;                     /* predict.c: a sync found no room for a launch (1), or GTLUA_VERIFY_LANE a
                                        disagreement (2, the message set): the call fails */
  int lane_checked;                  /* the segment's launches whose external inputs the cursor has numbered */
  int lane_call, lane_prev, jit_flushes;  /* the lane replayed launches in this call, in the one before; JIT flushes asked */
  uint32_t cserial, cseen;           /* the cursor's ordinals of external buffers */
  uint64_t cfrees;                   /* gt_static_frees when the segment began */
  int *cdirty, ndirty, cdirtycap;    /* launches whose scalars or external addresses differ from cand's graph */
  int cexact;                        /* cdirty lists all of them (else a replay compares every argument) */
} gt_cursor;

/* GTLUA_VERIFY_LANE=1: the fast tiers are checked against the full compare
   (predict.c); -1 until gt_predict_init reads the variable. */
extern int gt_verify_lane;
void gt_predict_init(void);
/* The cursor hit n: its every launch compared again in full, and each one
   that differs from n's graph among those noted for the replay to patch.
   GT_ERR (the message naming the launch) on a disagreement; the lane's
   launches are queued first. */
int gt_predict_verify(gt_tree *t, gt_node *n);

/* -- The launch-match predicate --------------------------------------------- */

/* The struct the recording saw, seen again (a->buf == s->buf at the same
   view), is the same argument without working out its role: one of the
   call's own buffers (the slab struct of the same index in the call: along
   the same path, the same segment and index; a live argument was made in
   this call) or a static tensor still static at the same address.  1: the
   same argument (a scalar's difference from was, the value the graph holds,
   goes into *dirty); 0: only the long way can tell (external buffers: their
   numbering follows order of first use), or a scalar where a tensor was. */
static inline int gt_arg_quick(const gt_arg *a, const gt_asig *s, uint64_t was, int statics_kept, uint64_t *dirty) {
  const gt_buf *b = a->buf;
  if (!b) {
    *dirty |= a->v.bits ^ was;
    return !s->role;
  }
  if (b != s->buf || a->off != s->off || a->nbytes != s->nbytes) return 0;
  if (s->role == GT_ROLE_INTERNAL || s->role == GT_ROLE_PATH) return 1;
  if (s->role != GT_ROLE_STATIC) return 0;
  if (statics_kept) return 1;        /* no static struct freed since: the same buffer, static for good */
  return (b->flags & (GT_BUF_STATIC | GT_BUF_TREE | GT_BUF_STAGING)) == GT_BUF_STATIC && b->addr == s->id;
}



/* The long test of one tensor argument a of the launch being queued against
   s (its role and identity: an external buffer by order of first use in
   the segment, numbered as it is tested); 1 when the same, its difference
   from was (the value the graph holds) into *dirty. */
int gt_cursor_arg(gt_tree *t, const gt_arg *a, const gt_asig *s, uint64_t was, uint64_t *dirty);

/* The launch-match predicate for one argument a of a launch being queued,
   against s, its recording's signature (was: the value the graph holds;
   statics_kept: no static struct freed since s was saved): the quick tier,
   or when it cannot tell the full compare.  1 when the same (its
   difference from was into *dirty).  Every launch the cursor compares goes
   through this test, argument by argument (the lane's test in Lua is the
   quick tier's, checked against the full compare under GTLUA_VERIFY_LANE). */
static inline int gt_predict_arg(gt_tree *t, const gt_arg *a, const gt_asig *s, uint64_t was, int statics_kept,
                                 uint64_t *dirty) {
  return gt_arg_quick(a, s, was, statics_kept, dirty) || gt_cursor_arg(t, a, s, was, dirty);
}

/* -- The cursor -------------------------------------------------------------- */
void gt_cursor_start(gt_tree *t, gt_node *parent);  /* a segment begins under parent */
void gt_cursor_push(gt_tree *t);                    /* a launch was queued */
/* The launch just queued passed gt_arg_quick or gt_cursor_arg throughout: dirty, its differences. */
void gt_cursor_quick(gt_tree *t, uint64_t dirty);
/* Launch i of the segment came through the lane: its external inputs
   tested against n's recording (0: they differ, the cursor missed). */
int gt_cursor_lazy(gt_tree *t, const gt_node *n, int i);
gt_node *gt_cursor_hit(gt_tree *t, int first);      /* the segment ends: its node if the cursor matched throughout */
/* After a hit on n: the launches a replay must patch (t->pred.cdirty), or -1
   when every launch must be compared (n was not the cursor's). */
int gt_cursor_dirty(const gt_tree *t, const gt_node *n);
int gt_cursor_save(gt_tree *t, gt_node *n, int first);  /* n was recorded from the queue */
void gt_cursor_forget(gt_node *n);

/* -- The lane ---------------------------------------------------------------- */
void gt_lane_start(gt_tree *t);       /* a segment's queue begins: the lane opens on the cursor's prediction, if it can */
void gt_lane_room(gt_tree *t);        /* the call's buffer structs grew (or moved) */
void gt_lane_sync(gt_tree *t);        /* the lane's lazy launches into the queue */
/* The lane's lazy launches' external inputs numbered and tested by the
   cursor, in order, once each (0: they differ, the cursor missed). */
int gt_lane_check(gt_tree *t);
void gt_lane_close(gt_runtime *rt);   /* nothing more through the lane (Lua's test reads a zero count then) */
#endif
