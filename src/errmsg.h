/* errmsg.h - the core's messages that recur, each written once (in the style
   of LuaJIT's lj_errmsg.h): GT_ERRDEF lists them as (name, text); GT_E_name
   is a message's number, gt_errmsg_text(GT_E_name) its text (errmsg.c), and
   gt_err(rt, GT_E_name) fails with it (runtime.c, as gt_fail). */
#ifndef GT_ERRMSG_H
#define GT_ERRMSG_H

#define GT_ERRDEF(_) \
  _(NOMEM, "out of host memory") \
  _(GRAPH_LAUNCH, "graph launch") \
  _(GRAPH_PATCH, "graph patch") \
  _(OTHER_PATH, "took another path than the memoized one")

typedef enum {
#define GT_ERRENUM(name, text) GT_E_##name,
  GT_ERRDEF(GT_ERRENUM)
#undef GT_ERRENUM
  GT_E__MAX
} gt_errcode;

const char *gt_errmsg_text(gt_errcode e);
#endif
