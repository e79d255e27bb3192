/* errmsg.c - the text of each message of errmsg.h's table.  Uses nothing,
   so every layer (a pool's or a backend's error buffer too) may use it. */
#include "errmsg.h"

static const char *const errtext[GT_E__MAX] = {
#define GT_ERRTEXT(name, text) text,
  GT_ERRDEF(GT_ERRTEXT)
#undef GT_ERRTEXT
};

const char *gt_errmsg_text(gt_errcode e) { return e >= 0 && e < GT_E__MAX ? errtext[e] : "unknown error"; }
