/* explain.c - why each node of a tree exists, where its segment ended, and its shapes (DESIGN 9). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "predict.h"

static void set_text(char **dst, const char *s) {
  char *d = gt_strdup(s);
  if (!d) return;                     /* out of memory: the node stays unexplained */
  free(*dst);
  *dst = d;
}

/* A static weight as the key sees it: marked static, not one of this call's
   buffers, not staging (key.c's gt_role_of, reduced to the one question). */
static int is_static(const gt_tree *t, const gt_buf *b) {
  if (b->flags & GT_BUF_STAGING) return 0;
  if ((b->flags & GT_BUF_TREE) && b->tree == t && b->gen == t->gen) return 0;
  return (b->flags & GT_BUF_STATIC) != 0;
}

/* The kernels of the queued segment alone, and its static addresses in order. */
static void summarize(gt_tree *t, gt_node *n) {
  const gt_queue *q = &t->q;
  uint64_t h = 0x6b657273ull;
  int ns = 0;
  for (int i = 0; i < q->n; i++) {
    const gt_qlaunch *l = &q->l[i];
    h = (h ^ ((uint64_t)l->kind << 40 ^ (l->k ? (uint64_t)l->k->id : 0))) * 0x100000001b3ull;
    for (int j = 0; j < l->nargs; j++) if (q->args[l->arg0 + j].buf && is_static(t, q->args[l->arg0 + j].buf)) ns++;
  }
  n->ex.kseq = h;
  n->ex.kinds = q->n ? malloc(q->n * sizeof *n->ex.kinds) : NULL;
  n->ex.nkinds = n->ex.kinds ? q->n : 0;                  /* (out of host memory: no shared launches are found) */
  for (int i = 0; i < n->ex.nkinds; i++) n->ex.kinds[i] = (uint32_t)q->l[i].kind << 24 ^ (q->l[i].k ? (uint32_t)q->l[i].k->id : 0);
  n->ex.statics = ns ? malloc(ns * sizeof *n->ex.statics) : NULL;
  if (!n->ex.statics) return;
  for (int i = 0; i < q->n; i++) {
    const gt_qlaunch *l = &q->l[i];
    for (int j = 0; j < l->nargs; j++) {
      const gt_buf *b = q->args[l->arg0 + j].buf;
      if (b && is_static(t, b)) n->ex.statics[n->ex.nstatics++] = b->addr;
    }
  }
}

/* The k-th static argument of the queued segment: its parameter's name
   ("weight" when no kernel names it), and its kernel's (NULL: none). */
static const char *static_name(const gt_tree *t, int k, const char **param) {
  const gt_queue *q = &t->q;
  *param = "weight";
  for (int i = 0; i < q->n; i++) {
    const gt_qlaunch *l = &q->l[i];
    for (int j = 0; j < l->nargs; j++) {
      const gt_buf *b = q->args[l->arg0 + j].buf;
      if (b && is_static(t, b) && k-- == 0) {
        if (!l->k) return NULL;
        *param = l->k->pname[j];
        return l->k->name;
      }
    }
  }
  return NULL;
}

/* Why n (just made under n->parent, not yet among its children) exists: the
   first sibling that matches it most closely decides.  Same topology: a
   static moved; same kernels: a new shape (named once Lua gives the shapes);
   else a new branch.  An only child continues its parent's reason. */
/* A node's label: its kernels in order, repeats counted ("gelu_f32 linear_f32 x2"). */
static char *make_label(const gt_queue *q) {
  char buf[96] = "", item[64];
  size_t len = 0;
  for (int i = 0; i < q->n;) {
    static const char *const other[] = { "?", "copy", "fill", "?", "if", "else", "while", "end" };
    const char *nm = q->l[i].k ? q->l[i].k->name : q->l[i].kind == GT_GN_COLL ? gt_launch_what(&q->l[i]) : other[q->l[i].kind & 7];
    int j = i + 1;
    while (j < q->n && q->l[j].kind == q->l[i].kind && (!q->l[j].k || !strcmp(q->l[j].k->name, nm))) j++;
    if (j - i > 1) snprintf(item, sizeof item, "%s%s x%d", i ? " " : "", nm, j - i);
    else snprintf(item, sizeof item, "%s%s", i ? " " : "", nm);
    if (len + strlen(item) > 56) {   /* (the collectives the cut leaves out are counted: a node of its own kind) */
      int nc = 0;
      for (int k = i; k < q->n; k++) nc += q->l[k].kind == GT_GN_COLL;
      if (nc) snprintf(item, sizeof item, " ... +%d collective%s", nc, nc > 1 ? "s" : "");
      strcat(buf, nc ? item : " ...");
      break;
    }
    strcat(buf, item);
    len += strlen(item);
    i = j;
  }
  if (!q->n) strcpy(buf, "(memory only)");
  return gt_strdup(buf);
}

/* A new branch's leading launches that a sibling has too (same kinds and
   kernels): the sibling with the most, into n->ex.shared and n->ex.shared_with. */
static void shared_launches(gt_node *n, const gt_node *p) {
  for (int i = 0; i < p->nkids; i++) {
    const gt_node *s = p->kids[i];
    int k = 0;
    while (k < n->ex.nkinds && k < s->ex.nkinds && n->ex.kinds[k] == s->ex.kinds[k]) k++;
    if (k > n->ex.shared) n->ex.shared = k, n->ex.shared_with = s->id;
  }
}

void gt_explain_node(gt_tree *t, gt_node *n) {
  n->label = make_label(&t->q);
  gt_node *p = n->parent;
  char why[256];
  n->ex.why_sib = -1;
  n->ex.shared = 0, n->ex.shared_with = -1;
  summarize(t, n);
  gt_node *topo = NULL, *same = NULL;
  for (int i = 0; i < p->nkids; i++) {
    gt_node *s = p->kids[i];
    if (!topo && s->key_nostatic == n->key_nostatic) topo = s;
    if (!same && s->ex.kseq == n->ex.kseq) same = s;
  }
  if (topo && topo->ex.nstatics == n->ex.nstatics) {
    int k = 0;
    while (k < n->ex.nstatics && topo->ex.statics && n->ex.statics && topo->ex.statics[k] == n->ex.statics[k]) k++;
    const char *param, *kernel = static_name(t, k < n->ex.nstatics ? k : 0, &param);
    if (k < n->ex.nstatics)             /* "static W moved (linear_f32, sibling [0])" */
      snprintf(why, sizeof why, "static %s moved (%s%ssibling [%d])", param, kernel ? kernel : "", kernel ? ", " : "", topo->id);
    else {                            /* same bytes everywhere: the shapes may still tell them apart */
      n->ex.why_sib = topo->id;
      snprintf(why, sizeof why, "new launch dimensions (sibling [%d])", topo->id);
    }
  } else if (same) {
    n->ex.why_sib = same->id;
    snprintf(why, sizeof why, "new shape (sibling [%d])", same->id);
  } else if (p->nkids > 0) {
    shared_launches(n, p);
    if (p->id < 0) snprintf(why, sizeof why, "new branch at the start (first segments: %d before)", p->nkids);
    else snprintf(why, sizeof why, "new branch after [%d]", p->id);
  } else if (p->id < 0 || (p->ex.why && !strcmp(p->ex.why, "first path"))) {
    snprintf(why, sizeof why, "first path");
  } else snprintf(why, sizeof why, "continues [%d]", p->id);
  set_text(&n->ex.why, why);
}

void gt_explain_free(gt_node *n) {
  free(n->ex.why); free(n->ex.cut); free(n->ex.shapes); free(n->ex.statics); free(n->ex.kinds);
  n->ex.why = n->ex.cut = n->ex.shapes = NULL;
  n->ex.statics = NULL;
  n->ex.kinds = NULL, n->ex.nkinds = 0;
  for (int i = 0; i < n->ex.ncuts; i++) free(n->ex.cuts[i].text);
  free(n->ex.cuts);
  n->ex.cuts = NULL;
  n->ex.ncuts = 0;
}

/* -- Cut sites: every distinct place a node's segment ended, with its visits --

   A site is named by Lua (explain.lua's cut_site reads the stack: slow, and
   debug.getinfo stops a LuaJIT trace), so a replay does not ask: it counts
   the visit at the site it ended at last when the API that ended it (item,
   tolist, gt.cut, ... known without the stack) is that site's and no other
   site of the node has it (cut_fast; one increment, in gt_tree_flush).
   Anything else asks Lua here: the first visit, warmups and records (so a
   second site of the same API is found while a node is young), a visit
   that ended at another API than last time; an eager visit counts at the
   only site of its API without asking.  A replay's visit at a new line of
   an API already seen at one line of the node is counted at that line. */

static void fold_nlast(gt_node *n) {   /* the replays counted in cut_nlast into their site */
  if (n->cut_nlast && n->ex.cut_last < n->ex.ncuts) n->ex.cuts[n->ex.cut_last].count += n->cut_nlast;
  else n->ex.cut_other += n->cut_nlast;
  n->cut_nlast = 0;
}

/* The node's last counted site i (ncuts: the other sites): a replay may count there alone if its API is unique. */
static void set_last(gt_node *n, int i) {
  fold_nlast(n);
  n->ex.cut_last = i;
  n->cut_fast = -1;
  if (i >= n->ex.ncuts) return;
  int api = n->ex.cuts[i].api;
  for (int j = 0; j < n->ex.ncuts; j++) if (j != i && n->ex.cuts[j].api == api) return;
  n->cut_fast = api;
}

void gt_explain_count_cut(gt_tree *t, gt_node *n, int api, int ran) {
  (void)t;
  n->ex.cut_ask = 0;
  if (ran == GT_V_REPLAY || ran == GT_V_EAGER || ran == GT_V_PLANNED) {
    int found = -1, same = 0;
    for (int i = 0; i < n->ex.ncuts; i++) if (n->ex.cuts[i].api == api) { found = i; same++; }
    if (same == 1) {
      set_last(n, found);
      n->ex.cuts[found].count++;
      return;
    }
  }
  n->ex.cut_ask = 1 + api;                /* gt_tree_explain_wanted asks Lua for the site */
}

/* The visit that asked ended at site text (API n->ex.cut_ask - 1): counted there. */
static void count_site(gt_node *n, const char *text) {
  int api = n->ex.cut_ask - 1;
  n->ex.cut_ask = 0;
  int i = 0;
  while (i < n->ex.ncuts && strcmp(n->ex.cuts[i].text, text)) i++;
  if (i == n->ex.ncuts && n->ex.ncuts < GT_CUT_SITES) {
    gt_cutsite *c = realloc(n->ex.cuts, (n->ex.ncuts + 1) * sizeof *c);
    char *d = c ? gt_strdup(text) : NULL;
    if (c) n->ex.cuts = c;
    if (d) n->ex.cuts[n->ex.ncuts++] = (gt_cutsite){ d, api, 0 };
  }
  set_last(n, i);                      /* (i == ncuts: out of room, an "other site") */
  if (i < n->ex.ncuts) n->ex.cuts[i].count++;
  else n->ex.cut_other++;
}

/* -- Notes from Lua ------------------------------------------------------- */

int gt_tree_explain_wanted(gt_runtime *rt) {
  gt_tree *t = gt_active(rt);
  if (!t || !t->cur) return 0;
  const gt_node *n = t->cur;
  int want = (n->ex.cut && !n->ex.cut_ask ? 0 : GT_WANT_CUT) | (n->ex.shapes ? 0 : GT_WANT_SHAPES);
  /* (GT_WANT_FIRST alone asks nothing: 0, so a replayed first segment ending at the
     return ends its call in gt_tree_return, with no explain round trip) */
  return want ? want | (n->parent == &t->root ? GT_WANT_FIRST : 0) : 0;
}

/* The first word where a and b differ (the shape that changed), into out. */
static void first_difference(const char *a, const char *b, char *oa, char *ob, size_t size) {
  for (;;) {
    size_t la = strcspn(a, " ,"), lb = strcspn(b, " ,");
    if (la != lb || strncmp(a, b, la)) {
      snprintf(oa, size, "%.*s", (int)la, a);
      snprintf(ob, size, "%.*s", (int)lb, b);
      return;
    }
    if (!a[la] || !b[lb]) { snprintf(oa, size, "%s", a); snprintf(ob, size, "%s", b); return; }
    a += la + 1;
    b += lb + 1;
  }
}

/* Shapes name the change behind a "new shape" node: "new shape 16x256
   (sibling [4] has 8x256)". */
static void explain_shape(gt_tree *t, gt_node *n) {
  if (n->ex.why_sib < 0 || n->ex.why_sib >= t->nnodes) return;
  const gt_node *s = t->nodes[n->ex.why_sib];
  char why[400], mine[128], theirs[128];
  if (!s->ex.shapes || !strcmp(s->ex.shapes, n->ex.shapes)) {
    snprintf(why, sizeof why, "new launch or release pattern, same kernels and shapes as sibling [%d]", s->id);
  } else {
    first_difference(n->ex.shapes, s->ex.shapes, mine, theirs, sizeof mine);
    snprintf(why, sizeof why, "new shape %s (sibling [%d] has %s)", mine, s->id, theirs);
  }
  set_text(&n->ex.why, why);
}

void gt_tree_note(gt_runtime *rt, const char *cut, const char *shapes) {
  gt_tree *t = gt_active(rt);
  if (!t || !t->cur) return;
  gt_node *n = t->cur;
  if (cut && !n->ex.cut) set_text(&n->ex.cut, cut);
  if (cut && n->ex.cut_ask) count_site(n, cut);
  if (shapes && !n->ex.shapes) {
    set_text(&n->ex.shapes, shapes);
    if (n->ex.shapes) explain_shape(t, n);
  }
}
