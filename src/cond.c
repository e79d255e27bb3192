/* cond.c - device-side branches: cond structure in the launch queue, host-decided runs (deps.c lifts their edges). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "predict.h"
#include "cond.h"

/* A gt.cond / gt.loop inside a tree call is queued as entries among the
   launches: IF p, then-launches, [ELSE, else-launches,] END; or WHILE p,
   body, END p.  So the segment key, the planner and replay see it like any
   other launch, and the backend builds one conditional node from it. */


static int dtype_size(int dtype) {
  switch (dtype) {
  case GT_F32: case GT_I32: return 4;
  case GT_I64: return 8;
  case GT_U8: return 1;
  default: return 0;
  }
}

/* -- The public entry points -------------------------------------------- */

static char cond_why[512];             /* why the backend builds no conditional nodes */

int gt_cond_support(gt_runtime *rt) {
  gt_backend *be = &rt->be;
  if (!rt->cond_bits) {
    const char *off = getenv("GTLUA_NO_COND");   /* to try the host-branch fallback anywhere */
    int bits = off && *off && strcmp(off, "0") ? 0 : be->cond_support ? be->cond_support(be) : 0;
    if (off && *off && strcmp(off, "0")) snprintf(cond_why, sizeof cond_why, "GTLUA_NO_COND is set");
    else if (!bits) snprintf(cond_why, sizeof cond_why, "%s", be->cond_support ? be->err : "this backend has no conditional nodes");
    rt->cond_bits = bits + 1;
  }
  if (rt->cond_bits == 1) gt_fail(rt, "%s", cond_why);
  return rt->cond_bits - 1;
}

/* Queues one structure entry; its position in the queue, or GT_ERR. */
/* Where the program's gt.cond/gt.loop calls are ("gt.cond at model.lua:12"),
   for messages: a few, kept for the process. */
static char **sites;
static int nsites, sitecap;

int gt_cond_site(gt_runtime *rt, const char *where) {
  char *c = gt_strdup(where);
  if (!c || GT_GROW(sites, sitecap, nsites + 1)) { free(c); return gt_err(rt, GT_E_NOMEM); }
  sites[nsites++] = c;
  return nsites;
}

static const char *site_name(int id) { return id >= 1 && id <= nsites ? sites[id - 1] : "a gt.cond or gt.loop"; }

int gt_cond_mark(gt_runtime *rt, int what, gt_buf *p, int64_t off, int dtype, uint64_t max, int site) {
  gt_tree *t = gt_active(rt);
  if (!t) return gt_fail(rt, "gt.cond: a cond entry outside a tree call");
  if (what < GT_COND_IF || what > GT_COND_END) return gt_fail(rt, "gt.cond: unknown entry %d", what);
  gt_qlaunch l = { .kind = what, .made = site };   /* (made: a mark's site, gt_cond_site's id) */
  gt_arg a = { 0 };
  if (p) {
    int sz = dtype_size(dtype);
    if (!sz) return gt_fail(rt, "gt.cond: the condition must be f32, i32, i64 or u8");
    if (p->gen != *p->gen_now) return gt_fail(rt, "gt.cond: the condition is a stale tensor");
    a = (gt_arg){ .buf = p, .off = off, .nbytes = sz };
    l.nargs = 1;
    l.value = dtype;
    l.bytes = max;
  }
  int pos = t->q.n;
  if (gt_submit(rt, &l, &a) != GT_OK) return GT_ERR;
  return pos;
}


/* A body's Lua raised (and the user's pcall may catch it): every structure
   still open from queue position at (its IF or WHILE) gets its END, innermost
   first, so the queue nests again and the call goes on as eager code does.
   What the body queued before the error stays in it, as eager code ran it:
   an open loop runs that body at most once (eager code's loop stops at the
   pass that raised). */
int gt_cond_close(gt_runtime *rt, int at) {
  gt_tree *t = gt_active(rt);
  if (!t || at < 0 || at >= t->q.n || !gt_kind_is_begin(t->q.l[at].kind)) return GT_OK;
  int n = t->q.n, top = 0;
  int *open = malloc((size_t)(n - at) * sizeof *open);
  if (!open) return gt_err(rt, GT_E_NOMEM);
  for (int i = at; i < n; i++) {
    int k = t->q.l[i].kind;
    if (gt_kind_is_begin(k)) open[top++] = i;
    else if (k == GT_GN_END && top) top--;
  }
  int st = GT_OK;
  while (top && st == GT_OK) {
    gt_qlaunch *b = &t->q.l[open[--top]];
    gt_qlaunch l = { .kind = GT_COND_END };
    gt_arg a = { 0 };
    if (b->kind == GT_GN_WHILE) {      /* END p, as gt.loop queues it, bounded to the one pass */
      b->bytes = 1;
      a = t->q.args[b->arg0];
      l.nargs = 1;
      l.value = b->value;
      l.bytes = 1;
    }
    st = gt_submit(rt, &l, &a);
  }
  free(open);
  return st;
}

/* -- Tensors made in a body and read where it may not have run ------------ */

/* Whether a launch in q's entries (from, to) writes buffer b. */
static int writes_in(const gt_queue *q, int from, int to, const gt_buf *b) {
  for (int i = from + 1; i < to; i++)
    for (int j = 0; j < q->l[i].nargs; j++)
      if (q->args[q->l[i].arg0 + j].buf == b && gt_launch_writes(&q->l[i], j)) return 1;
  return 0;
}

/* Whether argument j of launch l reads its buffer. */
static int reads(const gt_qlaunch *l, int j) {
  if (l->kind == GT_GN_KERNEL) return l->k->ptype[j] == GT_P_IN || l->k->ptype[j] == GT_P_OUT;
  return gt_kind_two_addrs(l->kind) && j == 1;
}

int gt_cond_check(gt_tree *t) {
  const gt_queue *q = &t->q;
  int n = q->n, any = 0, st = GT_OK;
  for (int i = 0; i < n && !any; i++) any = gt_kind_is_cond(q->l[i].kind);
  if (!any) return GT_OK;
  /* open[p]: the body open when the queue held p entries (the position of
     the IF, ELSE or WHILE that opened it; -1: none); up[m]: the body a mark
     m's structure sits in; other[m]: an IF's ELSE (-1: none) and an ELSE's
     IF; close[m]: where body m ends (its ELSE or END) */
  int *open = malloc((size_t)(n + 1) * sizeof *open), *up = malloc((size_t)(n + 1) * sizeof *up);
  int *other = malloc((size_t)(n + 1) * sizeof *other), *close = malloc((size_t)(n + 1) * sizeof *close);
  int *stack = malloc((size_t)(n + 1) * sizeof *stack), sp = 0;
  if (!open || !up || !other || !close || !stack) { st = gt_err(t->rt, GT_E_NOMEM); goto done; }
  for (int i = 0; i <= n; i++) {
    open[i] = sp ? stack[sp - 1] : -1;
    if (i == n) break;
    int k = q->l[i].kind;
    up[i] = other[i] = close[i] = -1;
    if (k == GT_GN_IF || k == GT_GN_WHILE) { up[i] = open[i]; stack[sp++] = i; }
    else if (k == GT_GN_ELSE && sp) { int f = stack[--sp]; close[f] = i; other[f] = i; other[i] = f; up[i] = up[f]; stack[sp++] = i; }
    else if (k == GT_GN_END && sp) close[stack[--sp]] = i;
  }
  for (int i = 0; i < n && st == GT_OK; i++) {
    const gt_qlaunch *l = &q->l[i];
    if (gt_kind_is_cond(l->kind)) continue;
    for (int j = 0; j < l->nargs && st == GT_OK; j++) {
      const gt_buf *b = q->args[l->arg0 + j].buf;
      if (!b || b->tree != t || b->gen != t->gen || b->seg != t->depth || b->qpos > (uint32_t)n || !reads(l, j)) continue;
      /* each body the buffer was made in, from the innermost out, that this launch is not in */
      for (int m = open[b->qpos]; m >= 0; m = up[m]) {
        int in = 0;
        for (int c = open[i]; c >= 0 && !in; c = up[c]) in = c == m;
        if (in) break;
        int k = q->l[m].kind, sib = other[m], mark = k == GT_GN_ELSE ? other[m] : m;
        int elsewhere = 0;               /* the launch is in the other body of the same cond */
        for (int c = open[i]; sib >= 0 && c >= 0 && !elsewhere; c = up[c]) elsewhere = c == sib;
        const char *body = k == GT_GN_WHILE ? "the body" : k == GT_GN_ELSE ? "the else body" : "the then body";
        const char *what = gt_launch_what(l);
        if (k == GT_GN_WHILE)
          st = gt_fail(t->rt, "a tensor made in the body of %s is read after the loop by %s (launch %d): the device "
                       "runs the body's launches again on each pass, over the same tensors, and not at all when p "
                       "starts false. Make the tensor before gt.loop and write into it in the body "
                       "(z:copy(ops.add(z, 1)), not z = ops.add(z, 1))", site_name(q->l[mark].made), what, i + 1);
        else if (elsewhere)
          st = gt_fail(t->rt, "a tensor made in %s of %s is read in the other body by %s (launch %d), where it holds "
                       "nothing. Make it before gt.cond", body, site_name(q->l[mark].made), what, i + 1);
        else if (sib < 0 || !writes_in(q, sib, close[sib], b))
          st = gt_fail(t->rt, "a tensor made in %s of %s is read after it by %s (launch %d), but %s: when the device "
                       "takes the other way it holds nothing. Make the tensor before gt.cond and write into it in %s "
                       "(y:copy(ops.mul(x, 2)), not y = ops.mul(x, 2))", body, site_name(q->l[mark].made), what, i + 1,
                       sib < 0 ? "the cond has no else body to write it" : k == GT_GN_ELSE ? "the then body does not write it"
                       : "the else body does not write it", sib < 0 ? "the body" : "both bodies");
        if (st != GT_OK) break;
      }
    }
  }
done:
  free(open); free(up); free(other); free(close); free(stack);
  return st;
}

static int overlaps(const gt_arg *a, const gt_buf *p, int64_t off, int64_t nbytes) {
  if (!a->buf) return 0;
  if (a->buf == p) return a->off < off + nbytes && off < a->off + (a->nbytes ? a->nbytes : 1);
  uint64_t lo = a->buf->addr + (uint64_t)a->off, plo = p->addr + (uint64_t)off;   /* views of one memory */
  return a->buf->addr && p->addr && lo < plo + (uint64_t)nbytes && plo < lo + (uint64_t)(a->nbytes ? a->nbytes : 1);
}

int gt_cond_writes(gt_runtime *rt, int from, gt_buf *p, int64_t off, int64_t nbytes) {
  gt_tree *t = gt_active(rt);
  if (!t) return 0;
  const gt_queue *q = &t->q;
  for (int i = from < 0 ? 0 : from; i < q->n; i++)
    for (int j = 0; j < q->l[i].nargs; j++)
      if (gt_launch_writes(&q->l[i], j) && overlaps(&q->args[q->l[i].arg0 + j], p, off, nbytes)) return 1;
  return 0;
}

int gt_cond_watch(gt_runtime *rt, int slot, gt_buf *p, int64_t off, int64_t nbytes) {
  if (slot < 0 || slot >= 16) return 1;          /* too deep to watch: no check */
  int hit = rt->watch_hit[slot];
  rt->watch_hit[slot] = 0;
  rt->watch_lo[slot] = p ? p->addr + (uint64_t)off : 0;
  rt->watch_hi[slot] = p ? rt->watch_lo[slot] + (uint64_t)nbytes : 0;
  rt->watching = 0;
  for (int s = 0; s < 16; s++) if (rt->watch_hi[s]) rt->watching = s + 1;
  return hit;
}

/* -- Structure ----------------------------------------------------------- */

static int cond_any(const gt_queue *q) {
  for (int i = 0; i < q->n; i++) if (gt_kind_is_cond(q->l[i].kind)) return 1;
  return 0;
}

int gt_cond_match(const gt_queue *q, int *match, int *stack) {
  int top = 0;
  for (int i = 0; i < q->n; i++) {
    int k = q->l[i].kind;
    match[i] = -1;
    if (gt_kind_is_begin(k)) stack[top++] = i;
    else if (k == GT_GN_ELSE) {
      if (!top || q->l[stack[top - 1]].kind != GT_GN_IF || match[stack[top - 1]] >= 0) return GT_ERR;
      match[stack[top - 1]] = i;
    } else if (k == GT_GN_END) {
      if (!top) return GT_ERR;
      int b = stack[--top];
      if (match[b] >= 0) match[match[b]] = i;   /* an IF with an ELSE: the ELSE leads here */
      else match[b] = i;
      match[i] = b;
    }
  }
  return top ? GT_ERR : GT_OK;
}

/* -- Running with the branch decided on the host ------------------------- */

static int truth(gt_backend *be, const gt_queue *q, int i, int *out) {
  const gt_qlaunch *l = &q->l[i];
  const gt_arg *a = &q->args[l->arg0];
  union { float f; int32_t i; int64_t l; uint8_t u; uint64_t raw; } v = { .raw = 0 };
  int sz = dtype_size(l->value);
  if (l->nargs != 1 || !a->buf || !sz) { strcpy(be->err, "gt.cond: a cond entry without its condition"); return GT_BERR; }
  if (be->dtoh(be, &v, a->buf->addr + (uint64_t)a->off, (size_t)sz) != GT_BOK) return GT_BERR;
  *out = l->value == GT_F32 ? v.f != 0 : l->value == GT_I32 ? v.i != 0 : l->value == GT_I64 ? v.l != 0 : v.u != 0;
  return GT_BOK;
}

int gt_cond_run_queue(gt_backend *be, gt_queue *q, int *at) {
  int n = q->n, st = GT_BOK;
  *at = -1;
  if (!cond_any(q)) {
    for (int i = 0; i < n; i++) if ((st = gt_queue_run(be, q, i)) != GT_BOK) { *at = i; return st; }
    return GT_BOK;
  }
  int *match = malloc(3 * (size_t)n * sizeof *match), *stack = match + n, *iters = stack + n;
  if (!match) { strcpy(be->err, gt_errmsg_text(GT_E_NOMEM)); return GT_BOOM; }
  if (gt_cond_match(q, match, stack) != GT_OK) {
    free(match);
    strcpy(be->err, "gt.cond: the queued cond entries do not nest (an IF or WHILE without its END)");
    return GT_BERR;
  }
  for (int i = 0; i < n && st == GT_BOK;) {
    const gt_qlaunch *l = &q->l[i];
    int yes = 0;
    *at = i;
    switch (l->kind) {
    case GT_GN_IF:
      if ((st = truth(be, q, i, &yes)) == GT_BOK) i = yes ? i + 1 : match[i] + 1;
      break;
    case GT_GN_ELSE: i = match[i] + 1; break;                /* the then body ran: skip the else body */
    case GT_GN_WHILE:
      iters[i] = 0;
      if ((st = truth(be, q, i, &yes)) == GT_BOK) i = yes ? i + 1 : match[i] + 1;
      break;
    case GT_GN_END: {
      int b = match[i];
      if (b < 0 || q->l[b].kind != GT_GN_WHILE) { i++; break; }
      iters[b]++;
      if ((st = truth(be, q, i, &yes)) == GT_BOK) i = yes && (!l->bytes || (uint64_t)iters[b] < l->bytes) ? b + 1 : i + 1;
      break;
    }
    default:
      st = gt_queue_run(be, q, i);
      i++;
    }
  }
  free(match);
  if (st == GT_BOK) *at = -1;
  return st;
}
