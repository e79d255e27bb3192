/* tree.c - graph trees: segment nodes, warmup/record/replay, the planned pool, liveness. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"

static char *dupstr(const char *s) {
  size_t n = strlen(s ? s : "") + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s ? s : "", n);
  return d;
}

/* -- Creating and freeing ------------------------------------------------- */

gt_tree *gt_tree_new(gt_runtime *rt, const gt_tree_opts *opts) {
  gt_tree *t = calloc(1, sizeof *t);
  if (!t) { gt_fail(rt, "out of host memory"); return NULL; }
  t->rt = rt;
  t->opts = *opts;
  t->name = dupstr(opts->name && *opts->name ? opts->name : "tree");
  t->where = dupstr(opts->where);
  t->opts.name = t->name;
  t->opts.where = t->where;
  t->refs = 1;
  t->gen = gt_gen_next();
  t->root.id = -1;
  t->root.depth = -1;
  const char *r = getenv("GTLUA_POOL_RESERVE");
  uint64_t reserve = r && *r ? (uint64_t)(strtod(r, NULL) * (1ull << 30)) : gt_pool_reserve_default(rt);
  int nomem = !t->name || !t->where;
  if (nomem || gt_pool_init(&t->pool, &rt->be, reserve, rt->err) != GT_OK) {
    free(t->name); free(t->where); free(t);
    if (nomem) gt_fail(rt, "out of host memory");
    return NULL;
  }
  return t;
}

static void drop_graph(gt_tree *t, gt_node *n) {
  if (n->graph) { t->rt->be.graph_destroy(&t->rt->be, n->graph); n->graph = NULL; t->recorded--; }
  free(n->argvals); free(n->plan); free(n->ckpt); free(n->launches);
  n->argvals = NULL; n->plan = NULL; n->ckpt = NULL; n->launches = NULL; n->nckpt = n->nargvals = 0;
  gt_cursor_forget(n);
}

/* Drops the graphs below n: their plans started from n's old checkpoint. */
static void drop_below(gt_tree *t, gt_node *n) {
  for (int i = 0; i < n->nkids; i++) { drop_graph(t, n->kids[i]); drop_below(t, n->kids[i]); }
}

/* The call's buffers live in the slab: the next call reuses them. */
static void release_call_bufs(gt_tree *t) { t->nbufs = 0; }

/* The slab's structs may still be pointed at by Lua handles (tensors that
   outlived their tree): they go to the runtime for the next tree, marked so
   that every old view reads stale, never back to malloc. */
static void give_slab(gt_tree *t) {
  gt_runtime *rt = t->rt;
  for (int i = 0; i < t->nslab; i++) {
    gt_buf *chunk = t->slab[i];
    for (int j = 0; j < GT_SLAB; j++) chunk[j] = (gt_buf){ .gen_now = &gt_released_gen, .relseg = -1 };
    if (GT_GROW(rt->spare, rt->sparecap, rt->nspare + 1)) continue;   /* out of host memory: leak the chunk, never free it */
    rt->spare[rt->nspare++] = chunk;
  }
  free(t->slab);
}

static void free_node(gt_tree *t, gt_node *n) {
  drop_graph(t, n);
  gt_explain_free(n);
  free(n->kids); free(n->label); free(n->skip); free(n);
}

/* Lua's tree object was collected: graphs, nodes and memory go now; the
   struct itself stays while tensors still point at it (they are stale from
   now on: a new generation), and goes with the last (gt_tree_unref). */
void gt_tree_free(gt_tree *t) {
  gt_runtime *rt = t->rt;
  if (rt->active == t) gt_tree_abort(rt);
  t->closed = 1;
  t->gen = gt_gen_next();
  release_call_bufs(t);
  for (int i = 0; i < t->nstage; i++) if (t->stage[i]) gt_buf_unref(t->stage[i]);
  t->nstage = 0;
  if (t->keyed) t->keyed_free(t);
  for (int i = 0; i < t->nnodes; i++) free_node(t, t->nodes[i]);
  t->nnodes = 0;
  free(t->root.kids);
  for (int i = 0; i < t->nskip; i++) free(t->skip[i].reason);
  free(t->skip); free(t->warn); free(t->nodes); free(t->bufs); free(t->segstart);
  free(t->path); free(t->lastpath); free(t->scratch); free(t->pscratch); free(t->stage); free(t->pinned);
  free(t->rels);
  gt_queue_free(&t->q);
  give_slab(t);
  gt_pool_destroy(&t->pool);
  gt_tree_unref(t);
}

const char *gt_tree_name(gt_tree *t) { return t->name; }
const char *gt_tree_where(gt_tree *t) { return t->where; }
gt_tree *gt_tree_active(gt_runtime *rt) { return rt->active; }

static void warn(gt_tree *t, const char *msg) {
  free(t->warn);
  t->warn = dupstr(msg);
  t->nwarn++;
}

int gt_tree_warnings(gt_tree *t, const char **last) {
  if (last) *last = t->warn;
  return t->nwarn;
}

void gt_tree_note_skip(gt_tree *t, const char *reason) {
  t->skips++;
  for (int i = 0; i < t->nskip; i++)
    if (!strcmp(t->skip[i].reason, reason)) { t->skip[i].count++; return; }
  if (GT_GROW(t->skip, t->skipcap, t->nskip + 1)) return;
  t->skip[t->nskip++] = (gt_skip){ dupstr(reason), 1 };
}

/* -- Calls --------------------------------------------------------------- */

int gt_tree_begin(gt_runtime *rt, gt_tree *t, const char *eager) {
  if (rt->active)
    return gt_fail(rt, "tree '%s' was called inside a call of tree '%s': tree calls cannot nest", t->name, rt->active->name);
  if (t->closed) return gt_fail(rt, "tree '%s' was freed", t->name);
  release_call_bufs(t);
  t->prev_gen = t->gen;
  t->gen = gt_gen_next();
  gt_pool_clear(&t->pool);
  t->state_node = NULL;
  t->cur = NULL;
  t->cur_planned = 0;
  t->depth = 0;
  t->npath = 0;
  t->nrels = 0;
  t->eager_call = eager != NULL;
  if (eager) gt_tree_note_skip(t, eager);
  gt_cursor_start(t, &t->root);
  t->cmiss |= t->eager_call;
  if (t->nstage) memset(t->pinned, 0, t->nstage);
  if (GT_GROW(t->segstart, t->segcap, 1)) return gt_fail(rt, "out of host memory");
  t->segstart[0] = 0;
  t->calls++;
  t->at_begin = (gt_call_info){ t->calls, t->warmups, t->records, t->replays, t->eager, t->updates, 0, 0, 0 };
  t->begin_us = gt_now_us();
  rt->active = t;
  return GT_OK;
}

static int grow_slab(gt_tree *t) {
  gt_runtime *rt = t->rt;
  if (GT_GROW(t->slab, t->slabcap, t->nslab + 1)) return gt_fail(rt, "out of host memory");
  gt_buf *chunk = rt->nspare ? rt->spare[--rt->nspare] : malloc(GT_SLAB * sizeof *chunk);
  if (!chunk) return gt_fail(rt, "out of host memory");
  t->slab[t->nslab++] = chunk;
  return GT_OK;
}

gt_buf *gt_tree_buf_new(gt_runtime *rt, uint64_t bytes) {
  gt_tree *t = rt->active;
  if (!t) { gt_fail(rt, "gt_tree_buf_new outside a tree call"); return NULL; }
  int i = t->nbufs;
  if (GT_GROW(t->bufs, t->bufcap, i + 1)) { gt_fail(rt, "out of host memory"); return NULL; }
  if (i / GT_SLAB >= t->nslab && grow_slab(t)) return NULL;
  gt_buf *b = &t->slab[i / GT_SLAB][i % GT_SLAB];
  memset(b, 0, sizeof *b);
  b->bytes = bytes;
  b->tree = t;
  b->gen = t->gen;
  b->gen_now = &t->gen;
  b->flags = GT_BUF_TREE | GT_BUF_SLAB;
  b->seg = t->depth;
  b->idx = i - t->segstart[t->depth];
  b->ci = i;
  b->relseg = -1;
  b->qpos = (uint32_t)t->q.n;
  t->bufs[t->nbufs++] = b;
  return b;
}

gt_buf *gt_tree_buf_ptr(gt_tree *t, int i) {
  return i >= 0 && i / GT_SLAB < t->nslab ? &t->slab[i / GT_SLAB][i % GT_SLAB] : NULL;
}

uint32_t gt_tree_gen(gt_tree *t) { return t->gen; }
uint32_t gt_tree_prev_gen(gt_tree *t) { return t->prev_gen; }

uint32_t gt_tree_failed_gen(gt_tree *t) { return t->failed_gen; }

void gt_tree_stage_pin(gt_runtime *rt, gt_buf *b) {
  gt_tree *t = rt->active;
  if (!t || !(b->flags & GT_BUF_STAGING)) return;
  for (int i = 0; i < t->nstage; i++)
    if (t->stage[i] && b->addr >= t->stage[i]->addr && b->addr < t->stage[i]->addr + t->stage[i]->bytes) t->pinned[i] = 1;
}

/* The k-th staging slot of this call: the k-th one that no input of the call
   lives in (a previous call's staged tensor fed back), so staging one input
   never overwrites another, in any order.  Without feedback the slots, and
   so the addresses the graphs hold, stay the same from call to call. */
static int stage_slot(gt_tree *t, int k) {
  for (int i = 0;; i++) {
    if (i >= t->nstage) {
      if (GT_GROW(t->stage, t->stagecap, i + 1) || GT_GROW(t->pinned, t->pinnedcap, i + 1)) return gt_fail(t->rt, "out of host memory");
      t->stage[i] = NULL;
      t->pinned[i] = 0;
      t->nstage = i + 1;
    }
    if (!t->pinned[i] && k-- == 0) return i;
  }
}

/* Copies an input into the call's k-th staging slot (ordinary memory the
   tree owns): outer chunks of chunk bytes, each padded with zeros to padded bytes. */
int gt_tree_stage(gt_runtime *rt, int k, gt_buf *src, uint64_t off, uint64_t outer, uint64_t chunk, uint64_t padded, gt_buf **out) {
  gt_tree *t = rt->active;
  if (!t) return gt_fail(rt, "staging outside a tree call");
  if (padded < chunk) padded = chunk;
  uint64_t need = outer * padded;
  int slot = stage_slot(t, k);
  if (slot < 0) return GT_ERR;
  t->pinned[slot] = 1;
  gt_buf *m = t->stage[slot];
  if (!m || m->bytes < need) {       /* no live tensor points into an unpinned slot */
    if (m) gt_buf_unref(m);
    rt->active = NULL;               /* ordinary memory, not the call's */
    m = t->stage[slot] = gt_buf_new(rt, need);
    rt->active = t;
    if (!m) return GT_ERR;
  }
  gt_backend *be = &rt->be;
  if (padded > chunk && be->memset8(be, m->addr, 0, need) != GT_BOK) return gt_fail_be(rt, NULL);
  for (uint64_t i = 0; i < outer; i++)
    if (chunk && be->dtod(be, m->addr + i * padded, src->addr + off + i * chunk, chunk) != GT_BOK) return gt_fail_be(rt, NULL);
  gt_buf *b = calloc(1, sizeof *b);
  if (!b) return gt_fail(rt, "out of host memory");
  b->addr = m->addr;
  b->bytes = need;
  b->refs = 1;
  b->tree = t;
  t->refs++;
  b->gen = t->gen;
  b->gen_now = &t->gen;
  b->flags = GT_BUF_STAGING;
  b->relseg = -1;
  *out = b;
  return GT_OK;
}

/* -- Memory of a segment ------------------------------------------------- */

/* The pool holds what is live at this point of the call: a replayed node's
   checkpoint is only bound when someone needs it. */
static int materialize(gt_tree *t) {
  gt_node *n = t->state_node;
  if (!n) return GT_OK;
  gt_pool_clear(&t->pool);
  for (int i = 0; i < n->nckpt; i++) {
    gt_ckpt *c = &n->ckpt[i];
    int k = t->segstart[c->seg] + c->idx;
    if (GT_GROW(t->pool.blk, t->pool.cap, t->pool.n + 1)) return gt_fail(t->rt, "out of host memory");
    t->pool.blk[t->pool.n++] = (gt_block){ c->off, c->size, t->bufs[k] };
  }
  t->state_node = NULL;
  return GT_OK;
}

/* Peak bytes over the segment's launches of intervals [first, end). */
static uint64_t peak_bytes(const gt_interval *iv, int n, int nl) {
  int64_t *d = calloc(nl + 2, sizeof *d);
  if (!d) return 0;
  for (int i = 0; i < n; i++) {
    uint32_t e = iv[i].end == UINT32_MAX || iv[i].end > (uint32_t)nl ? (uint32_t)nl + 1 : iv[i].end;
    if (e <= iv[i].first) e = iv[i].first + 1;            /* a tensor occupies memory while it is made */
    int64_t sz = (int64_t)((iv[i].size + GT_ALIGN - 1) / GT_ALIGN * GT_ALIGN);
    d[iv[i].first] += sz;
    d[e] -= sz;
  }
  int64_t cur = 0, peak = 0;
  for (int k = 0; k <= nl; k++) { cur += d[k]; if (cur > peak) peak = cur; }
  free(d);
  return (uint64_t)peak;
}

typedef struct { uint64_t bytes, end, reusable; } plan_info;

/* Places the segment's new buffers over their intervals (creation to release,
   or the end of the call), from the state at the parent's end, the parent's
   buffers released here freed at their release; sets their addresses (and
   offsets into plan, when given).  The same plan serves warmups, eager runs
   and recordings: launches run in queue order, so reuse after a release is
   safe in each.  info->reusable: what freeing every new buffer after its
   last use would save at the peak. */
static int plan_segment(gt_tree *t, int first, uint64_t *plan, plan_info *info) {
  int nn = t->nbufs - first, nold = 0;
  gt_queue *q = &t->q;
  if (materialize(t)) return GT_ERR;
  gt_interval *iv = calloc(2 * nn + t->nrels + 1, sizeof *iv), *ideal = iv + nn, *old = ideal + nn;
  if (!iv) return gt_fail(t->rt, "out of host memory");
  for (int i = 0; i < nn; i++) {
    gt_buf *b = t->bufs[first + i];
    iv[i] = (gt_interval){ b->bytes, b->qpos, b->relseg == t->depth ? b->rel : UINT32_MAX, b, 0 };
    ideal[i] = (gt_interval){ b->bytes, b->qpos, b->qpos, b, 0 };
  }
  for (int i = 0; i < t->nrels; i++) {
    gt_buf *b = t->rels[i];
    if (b->seg != t->depth) old[nold++] = (gt_interval){ b->bytes, 0, b->rel, b, b->addr - t->pool.base };
  }
  for (int i = 0; info && i < q->n; i++) {
    const gt_arg *a = q->args + q->l[i].arg0;
    for (int j = 0; j < q->l[i].nargs; j++) {
      gt_buf *b = a[j].buf;
      if (b && gt_role_of(t, b) == GT_ROLE_INTERNAL && ideal[b->idx].end < (uint32_t)i + 1) ideal[b->idx].end = (uint32_t)i + 1;
    }
  }
  if (info) {
    uint64_t actual = peak_bytes(iv, nn, q->n), best = peak_bytes(ideal, nn, q->n);
    info->reusable = actual > best ? actual - best : 0;
  }
  if (gt_pool_plan(&t->pool, iv, nn, old, nold, t->rt->err) != GT_OK) {
    char why[GT_ERRLEN];
    snprintf(why, sizeof why, "%s", t->rt->err);
    free(iv);
    return gt_fail(t->rt, "tree '%s': out of memory: %s", t->name, why);
  }
  uint64_t end = 0, bytes = 0;
  for (int i = 0; i < nn; i++) {
    if (plan) plan[i] = iv[i].off;
    iv[i].buf->addr = t->pool.base + iv[i].off;
    bytes += (iv[i].size + GT_ALIGN - 1) / GT_ALIGN * GT_ALIGN;
    if (iv[i].off + iv[i].size > end) end = iv[i].off + iv[i].size;
  }
  free(iv);
  if (info) { info->bytes = bytes; info->end = end; }
  return GT_OK;
}

/* Recording: plan the segment, then save the plan and the checkpoint on n. */
static int plan_new(gt_tree *t, gt_node *n, int first) {
  int nn = t->nbufs - first;
  plan_info info;
  uint64_t *plan = malloc((nn ? nn : 1) * sizeof *plan);
  if (!plan) return gt_fail(t->rt, "out of host memory");
  if (plan_segment(t, first, plan, &info)) { free(plan); return GT_ERR; }
  gt_ckpt *ck = malloc((t->pool.n ? t->pool.n : 1) * sizeof *ck);
  if (!ck) { free(plan); return gt_fail(t->rt, "out of host memory"); }
  uint64_t ckb = 0, end = info.end;
  for (int i = 0; i < t->pool.n; i++) {
    gt_block *k = &t->pool.blk[i];
    ck[i] = (gt_ckpt){ k->buf->seg, k->buf->idx, k->off, k->size };
    ckb += k->size;
    if (k->off + k->size > end) end = k->off + k->size;
  }
  free(n->plan); free(n->ckpt);
  n->plan = plan;
  n->nnew = nn;
  n->ckpt = ck;
  n->nckpt = t->pool.n;
  n->planned_bytes = info.bytes;
  n->checkpoint_bytes = ckb;
  n->plan_end = end;
  n->reusable_bytes = info.reusable;
  return GT_OK;
}

/* -- Graphs -------------------------------------------------------------- */

static int scratch(gt_tree *t, int n) {
  if (GT_GROW(t->scratch, t->scratchcap, n) || GT_GROW(t->pscratch, t->pscratchcap, n)) return gt_fail(t->rt, "out of host memory");
  return GT_OK;
}

/* Backend nodes for the queue, their edges from deps.c; n->argvals
   receives the argument values the graph holds. */
static int build_nodes(gt_tree *t, gt_node *n, gt_gnode **out, int **depmem, void ***ptrmem) {
  gt_queue *q = &t->q;
  free(n->argvals);
  n->argvals = malloc((q->nargs ? q->nargs : 1) * sizeof *n->argvals);
  n->nargvals = q->nargs;
  void **ptrs = malloc((q->nargs ? q->nargs : 1) * sizeof *ptrs);
  gt_gnode *g = calloc(q->n ? q->n : 1, sizeof *g);
  if (!n->argvals || !ptrs || !g) goto oom;
  for (int i = 0; i < q->n; i++) {
    uint64_t *vals = n->argvals + q->l[i].arg0;
    gt_queue_resolve(q, i, vals);
    gt_queue_gnode(q, i, vals, ptrs + q->l[i].arg0, &g[i]);
  }
  if (gt_deps_build(q, n->argvals, g, depmem)) goto oom;
  *out = g;
  *ptrmem = ptrs;
  return GT_OK;
oom:
  free(ptrs); free(g);
  return gt_fail(t->rt, "out of host memory");
}

int gt_tree_launch_graph(gt_tree *t, gt_node *n) {
  gt_backend *be = &t->rt->be;
  if (!t->rt->profile) return be->graph_launch(be, n->graph) == GT_BOK ? GT_OK : gt_fail_be(t->rt, "graph launch");
  gt_bevent *e0 = NULL, *e1 = NULL;
  double us = 0;
  int st = be->event_create(be, &e0) || be->event_create(be, &e1) || be->event_record(be, e0) ||
           be->graph_launch(be, n->graph) || be->event_record(be, e1) || be->event_elapsed_us(be, e0, e1, &us);
  if (e0) be->event_destroy(be, e0);
  if (e1) be->event_destroy(be, e1);
  if (st) return gt_fail_be(t->rt, "graph launch");
  n->gpu_us_sum += us;
  n->gpu_n++;
  return GT_OK;
}

static int run_eager(gt_tree *t, gt_node *n) {
  gt_backend *be = &t->rt->be;
  double t0 = t->rt->profile ? gt_now_us() : 0;
  int at;
  if (gt_cond_run_queue(be, &t->q, &at) != GT_BOK) {   /* a cond is decided on the host here */
    const gt_qlaunch *l = at >= 0 ? &t->q.l[at] : NULL;
    return gt_fail_be(t->rt, l && l->k ? l->k->name : l && l->kind > GT_GN_MEMSET ? "gt.cond" : "copy");
  }
  if (t->rt->profile && n) {
    if (be->sync(be) != GT_BOK) return gt_fail_be(t->rt, NULL);
    n->gpu_us_sum += gt_now_us() - t0;
    n->gpu_n++;
  }
  return GT_OK;
}

/* Record n: plan, build, instantiate (or update the exec in place), launch.
   Returns what ran: GT_V_RECORD, GT_V_UPDATE, or GT_V_EAGER when the graph
   build failed (n runs eagerly from now on); GT_ERR on failure. */
static int record(gt_tree *t, gt_node *n, int first, int update) {
  gt_backend *be = &t->rt->be;
  double t0 = gt_now_us();
  uint64_t *oldplan = NULL, oldend = n->plan_end;
  int oldnck = n->nckpt;
  if (update && n->plan) {
    oldplan = malloc((n->nnew ? n->nnew : 1) * sizeof *oldplan);
    if (oldplan) memcpy(oldplan, n->plan, n->nnew * sizeof *oldplan);
  }
  if (plan_new(t, n, first)) { free(oldplan); return GT_ERR; }
  if (update && (!oldplan || oldend != n->plan_end || oldnck != n->nckpt ||
                 memcmp(oldplan, n->plan, n->nnew * sizeof *oldplan)))
    drop_below(t, n);
  free(oldplan);
  gt_gnode *g = NULL;
  int *deps = NULL;
  void **ptrs = NULL;
  if (build_nodes(t, n, &g, &deps, &ptrs)) return GT_ERR;
  double t1 = gt_now_us();
  int st = GT_BOK;
  if (update && n->graph) {
    st = be->graph_update(be, n->graph, g, t->q.n);
    if (st == GT_BREFUSED) { be->graph_destroy(be, n->graph); n->graph = NULL; t->recorded--; st = GT_BOK; }
  }
  if (st == GT_BOK && !n->graph) {
    st = be->graph_create(be, g, t->q.n, &n->graph);
    if (st == GT_BOK) t->recorded++;
  }
  double t2 = gt_now_us();
  free(g); free(deps); free(ptrs);
  if (st != GT_BOK) {                 /* a failed build: the node runs eagerly from now on */
    char why[GT_ERRLEN + 32];
    snprintf(why, sizeof why, "graph build failed: %s", be->err);
    free(n->skip);
    n->skip = dupstr(why);
    n->graph = NULL;
    return run_eager(t, n) ? GT_ERR : GT_V_EAGER;
  }
  free(n->launches);
  n->launches = malloc((t->q.n ? t->q.n : 1) * sizeof *n->launches);
  if (!n->launches) return gt_fail(t->rt, "out of host memory");
  memcpy(n->launches, t->q.l, t->q.n * sizeof *n->launches);
  if (gt_cursor_save(t, n, first)) return GT_ERR;
  if (gt_tree_launch_graph(t, n)) return GT_ERR;
  n->instantiate_us = t2 - t1;
  n->record_us = gt_now_us() - t0;
  return update ? GT_V_UPDATE : GT_V_RECORD;
}

/* Replay n: bind the new buffers to the plan, patch changed arguments, launch.
   GT_V_REPLAY, or GT_V_UPDATE when a moved copy needed a whole-graph update. */
static int replay(gt_tree *t, gt_node *n, int first) {
  gt_queue *q = &t->q;
  gt_backend *be = &t->rt->be;
  for (int i = 0; i < n->nnew; i++) t->bufs[first + i]->addr = t->pool.base + n->plan[i];
  if (scratch(t, q->nargs)) return GT_ERR;
  uint64_t *vals = t->scratch;
  int refused = 0;
  for (int i = 0; i < q->n; i++) {
    const gt_qlaunch *l = &q->l[i];
    uint64_t *now = vals + l->arg0, *was = n->argvals + l->arg0;
    gt_queue_resolve(q, i, now);
    if (!memcmp(now, was, l->nargs * sizeof *now)) continue;
    if (l->kind != GT_GN_KERNEL) { refused = 1; continue; }
    gt_gnode g;
    gt_queue_gnode(q, i, now, t->pscratch, &g);
    int pst = be->graph_set_kernel(be, n->graph, i, &g);
    if (pst == GT_BREFUSED) { refused = 1; continue; }   /* (a node in a conditional body the driver will not patch) */
    if (pst != GT_BOK) return gt_fail_be(t->rt, "graph patch");
    memcpy(was, now, l->nargs * sizeof *now);
  }
  if (refused) {                      /* a copy node moved: update the whole exec */
    gt_gnode *g = NULL;
    int *deps = NULL;
    void **ptrs = NULL;
    if (build_nodes(t, n, &g, &deps, &ptrs)) return GT_ERR;
    int st = be->graph_update(be, n->graph, g, q->n);
    if (st == GT_BREFUSED) {
      be->graph_destroy(be, n->graph);
      st = be->graph_create(be, g, q->n, &n->graph);
    }
    free(g); free(deps); free(ptrs);
    if (st != GT_BOK) { n->graph = NULL; t->recorded--; return gt_fail_be(t->rt, "graph update"); }
  }
  return gt_tree_launch_graph(t, n) ? GT_ERR : refused ? GT_V_UPDATE : GT_V_REPLAY;
}

/* -- Segment end --------------------------------------------------------- */

static gt_node *find_kid(gt_node *p, uint64_t key, int nostatic) {
  for (int i = 0; i < p->nkids; i++)
    if ((nostatic ? p->kids[i]->key_nostatic : p->kids[i]->key) == key) return p->kids[i];
  return NULL;
}

static char *make_label(const gt_queue *q) {
  char buf[96] = "", item[64];
  size_t len = 0;
  for (int i = 0; i < q->n;) {
    static const char *const other[] = { "?", "copy", "fill", "?", "if", "else", "while", "end" };
    const char *nm = q->l[i].k ? q->l[i].k->name : other[q->l[i].kind & 7];
    int j = i + 1;
    while (j < q->n && q->l[j].kind == q->l[i].kind && (!q->l[j].k || !strcmp(q->l[j].k->name, nm))) j++;
    if (j - i > 1) snprintf(item, sizeof item, "%s%s x%d", i ? " " : "", nm, j - i);
    else snprintf(item, sizeof item, "%s%s", i ? " " : "", nm);
    if (len + strlen(item) > 56) { strcat(buf, " ..."); break; }
    strcat(buf, item);
    len += strlen(item);
    i = j;
  }
  if (!q->n) strcpy(buf, "(memory only)");
  return dupstr(buf);
}

/* The first kernel of the queue that cannot be graphed, or NULL. */
static const gt_kernel *ungraphable(const gt_queue *q) {
  for (int i = 0; i < q->n; i++) if (q->l[i].k && !q->l[i].k->graphable) return q->l[i].k;
  return NULL;
}

static gt_node *new_node(gt_tree *t, gt_node *parent, gt_segkey key) {
  gt_node *n = calloc(1, sizeof *n);
  if (!n || GT_GROW(parent->kids, parent->kidcap, parent->nkids + 1) || GT_GROW(t->nodes, t->nodecap, t->nnodes + 1)) {
    free(n);
    gt_fail(t->rt, "out of host memory");
    return NULL;
  }
  n->id = t->nnodes;
  n->parent = parent;
  n->depth = parent->depth + 1;
  n->key = key.full;
  n->key_nostatic = key.nostatic;
  n->nlaunch = t->q.n;
  n->label = make_label(&t->q);
  const gt_kernel *k = ungraphable(&t->q);
  if (k) {
    char why[160];
    snprintf(why, sizeof why, "kernel '%s' is not graphable", k->name);
    n->skip = dupstr(why);
  }
  gt_explain_node(t, n);              /* before it joins its siblings */
  parent->kids[parent->nkids++] = n;
  t->nodes[t->nnodes++] = n;
  return n;
}

static int next_segment(gt_tree *t);

/* A call beyond the last bucket: segments run eagerly, with no node. */
static int flush_eager_call(gt_tree *t, int first) {
  if (plan_segment(t, first, NULL, NULL) || run_eager(t, NULL)) return GT_ERR;
  t->eager++;
  t->cur_planned = 0;
  return next_segment(t);
}

/* The visit a segment gets, as a pure function of what is known at its end
   (tinygrad's counter ladder): n, the node found (NULL: none); upd, a
   sibling of the same topology (another static address), looked up only
   when n is NULL and the parent's memory is planned (parent_ok); graphable:
   no launch of the queue is of a kernel that cannot be graphed. */
static int choose_mode(const gt_node *n, const gt_node *upd, int parent_ok, int graphable, const gt_tree_opts *o,
                       int recorded) {
  if (n && n->graph && parent_ok) return GT_V_REPLAY;
  if (n && n->skip) return parent_ok ? GT_V_PLANNED : GT_V_EAGER;
  if (!n && upd && upd->graph) return GT_V_UPDATE;
  if (!parent_ok || (n ? n->warmups : 0) < o->warmup) return GT_V_WARMUP;
  if (recorded >= o->max_recordings) return GT_V_LIMIT;
  return graphable ? GT_V_RECORD : GT_V_PLANNED;
}

/* A skipped node on planned memory: bound to its plan as a replay would be
   (or planned now), launched one by one; its children may still record. */
static int run_planned(gt_tree *t, gt_node *n, int first) {
  if (!n->plan) return plan_new(t, n, first) ? GT_ERR : run_eager(t, n);
  for (int i = 0; i < n->nnew; i++) t->bufs[first + i]->addr = t->pool.base + n->plan[i];
  t->state_node = n;
  return run_eager(t, n);
}

/* Past max_recordings: an error, or (on_limit = "eager") an eager run with a warning once. */
static int run_past_limit(gt_tree *t, gt_node *n, int first) {
  t->limit_hit++;
  if (t->opts.on_limit_error)
    return gt_fail(t->rt, "tree '%s' (%s): a new path needs a recording but max_recordings = %d are held; raise "
                   "max_recordings, use buckets, or set on_limit = \"eager\"", t->name, t->where, t->opts.max_recordings);
  if (t->limit_hit == 1) {
    char msg[512];
    snprintf(msg, sizeof msg, "tree '%s' (%s) reached max_recordings = %d; new paths run eagerly (see tree:stats().skips)",
             t->name, t->where, t->opts.max_recordings);
    warn(t, msg);
  }
  return plan_segment(t, first, NULL, NULL) ? GT_ERR : run_eager(t, n);
}

static void count_eager(gt_tree *t, gt_node *n, const char *why) { n->eager++; t->eager++; gt_tree_note_skip(t, why); }

/* Runs the chosen visit; returns what ran (GT_V_*: a failed graph build runs
   eagerly) or GT_ERR.  Counters follow what ran. */
static int visit(gt_tree *t, gt_node *n, int mode, int first, double t0) {
  int ran = mode;
  switch (mode) {
  case GT_V_REPLAY:
    if ((ran = replay(t, n, first)) == GT_ERR) return GT_ERR;
    if (ran == GT_V_UPDATE) { n->updates++; t->updates++; }
    else { n->replays++; t->replays++; n->replay_us_sum += gt_now_us() - t0; n->replay_n++; }
    t->state_node = n;
    return ran;
  case GT_V_RECORD: case GT_V_UPDATE:
    if ((ran = record(t, n, first, mode == GT_V_UPDATE)) == GT_ERR) return GT_ERR;
    if (ran == GT_V_EAGER) count_eager(t, n, "graph build failed");
    else if (ran == GT_V_UPDATE) { n->updates++; t->updates++; }
    else { n->records++; t->records++; }
    return ran;
  case GT_V_PLANNED:
    if (run_planned(t, n, first)) return GT_ERR;
    count_eager(t, n, n->skip);
    return ran;
  case GT_V_LIMIT:
    if (run_past_limit(t, n, first)) return GT_ERR;
    count_eager(t, n, "max_recordings");
    return GT_V_EAGER;
  default:                            /* GT_V_WARMUP, GT_V_EAGER: memory planned for this run only */
    if (plan_segment(t, first, NULL, NULL) || run_eager(t, n)) return GT_ERR;
    if (mode == GT_V_WARMUP) { n->warmups++; t->warmups++; }
    else count_eager(t, n, n->skip);
    return ran;
  }
}

/* The next segment begins after n, which ran as `ran`: children may record
   when n's memory followed a plan. */
static int advance(gt_tree *t, gt_node *parent, gt_node *n, int ran) {
  n->visits++;
  n->last_call = (uint64_t)t->calls;
  parent->last_kid = n;
  gt_cursor_start(t, n);
  if (!GT_GROW(t->path, t->pathcap, t->npath + 1)) t->path[t->npath++] = n;
  t->cur = n;
  t->cur_planned = ran == GT_V_REPLAY || ran == GT_V_UPDATE || ran == GT_V_RECORD || ran == GT_V_PLANNED;
  return next_segment(t);
}

static int next_segment(gt_tree *t) {
  t->depth++;
  if (GT_GROW(t->segstart, t->segcap, t->depth + 1)) return gt_fail(t->rt, "out of host memory");
  t->segstart[t->depth] = t->nbufs;
  t->nrels = 0;
  gt_queue_clear(&t->q);
  gt_buf_settle(t->rt);
  return GT_OK;
}

/* Ends the segment being queued: its node from the cursor (the replay path)
   or by key, the visit chosen, run, and the cursor advanced. */
int gt_tree_flush(gt_runtime *rt) {
  gt_tree *t = rt->active;
  if (!t) return GT_OK;
  int first = t->segstart[t->depth];
  if (t->q.n == 0 && t->nbufs == first && t->nrels == 0) return GT_OK;
  if (t->eager_call) return flush_eager_call(t, first);
  double t0 = gt_now_us();
  gt_node *parent = t->cur ? t->cur : &t->root;
  gt_node *n = gt_cursor_hit(t, first), *upd = NULL;
  gt_segkey key = { n ? n->key : 0, 0 };
  if (!n) n = find_kid(parent, key.full = gt_segment_key(t, 0), 0);   /* off the cursor: by key */
  int parent_ok = !t->cur || t->cur_planned;
  if (!n) key.nostatic = gt_segment_key(t, 1);    /* the topology: needed only off the replay path */
  if (!n && parent_ok) upd = find_kid(parent, key.nostatic, 1);
  int mode = choose_mode(n, upd, parent_ok, n || !ungraphable(&t->q), &t->opts, t->recorded);
  int created = !n && mode != GT_V_UPDATE;
  if (mode == GT_V_UPDATE) (n = upd)->key = key.full;
  else if (created && !(n = new_node(t, parent, key))) return GT_ERR;
  int ran = visit(t, n, mode, first, t0);
  if (ran == GT_ERR) {
    if (created) {                    /* no half node: a failed first visit leaves nothing */
      parent->nkids--;
      t->nnodes--;
      free_node(t, n);
    }
    return GT_ERR;
  }
  return advance(t, parent, n, ran);
}

/* The call's line in the history ring: what its visits were, what it cost. */
static void note_call(gt_tree *t) {
  gt_call_info *b = &t->at_begin;
  t->hist[(t->calls - 1) % GT_HISTORY] = (gt_call_info){
    t->calls, t->warmups - b->warmups, t->records - b->records, t->replays - b->replays, t->eager - b->eager,
    t->updates - b->updates, gt_now_us() - t->begin_us,
    t->state_node ? t->state_node->checkpoint_bytes : gt_pool_in_use(&t->pool), t->pool.committed };
}

/* Ends the active call once its segments have run: the path is remembered. */
void gt_tree_finish_call(gt_tree *t) {
  if (t->npath && !GT_GROW(t->lastpath, t->lastcap, t->npath)) memcpy(t->lastpath, t->path, t->npath * sizeof *t->path);
  t->nlastpath = t->npath;
  note_call(t);
  t->rt->active = NULL;
  gt_buf_settle(t->rt);
}

int gt_tree_end(gt_runtime *rt) {
  gt_tree *t = rt->active;
  if (!t) return GT_OK;
  int st = gt_tree_flush(rt);
  if (st != GT_OK) { gt_tree_abort(rt); return GT_ERR; }
  gt_tree_finish_call(t);
  return GT_OK;
}

int gt_tree_grow_path(gt_tree *t, int n) { return GT_GROW(t->path, t->pathcap, n); }

/* A Lua error (or a failed segment): the queued segment is dropped, its new
   tensors become stale, and the call ends.  Nodes already run stay whole. */
void gt_tree_abort(gt_runtime *rt) {
  gt_tree *t = rt->active;
  if (!t) return;
  gt_queue_clear(&t->q);
  gt_buf_settle(rt);
  t->nrels = 0;
  note_call(t);
  t->failed_gen = t->gen;
  t->gen = gt_gen_next();                         /* every tensor of the failed call is stale now */
  t->nlastpath = 0;
  rt->active = NULL;
}

/* -- Trimming and the floor ---------------------------------------------- */

static int by_last_call(const void *a, const void *b) {
  const gt_node *x = *(gt_node *const *)a, *y = *(gt_node *const *)b;
  return x->last_call < y->last_call ? 1 : x->last_call > y->last_call ? -1 : 0;
}

int gt_tree_trim(gt_runtime *rt, gt_tree *t, int keep) {
  if (rt->active == t) return gt_fail(rt, "tree '%s': trim inside its own call", t->name);
  gt_node **rec = malloc((t->nnodes ? t->nnodes : 1) * sizeof *rec);
  if (!rec) return gt_fail(rt, "out of host memory");
  int n = 0, dropped = 0;
  for (int i = 0; i < t->nnodes; i++) if (t->nodes[i]->graph) rec[n++] = t->nodes[i];
  qsort(rec, n, sizeof *rec, by_last_call);
  for (int i = keep < 0 ? 0 : keep; i < n; i++)
    if (rec[i]->graph) { drop_graph(t, rec[i]); drop_below(t, rec[i]); dropped++; }
  free(rec);
  uint64_t end = 0;
  for (int i = 0; i < t->nnodes; i++) if (t->nodes[i]->graph && t->nodes[i]->plan_end > end) end = t->nodes[i]->plan_end;
  gt_pool_clear(&t->pool);
  t->gen = gt_gen_next();                         /* the last call's outputs may lie in trimmed memory */
  gt_pool_shrink(&t->pool, end);
  return dropped;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Launches the graphs of the tree's last call back to back, no tree logic:
   the floor that tree replay is measured against.  Medians in µs. */
int gt_tree_bench_floor(gt_runtime *rt, gt_tree *t, int iters, int sync_each, double *cpu_us, double *step_us) {
  gt_backend *be = &rt->be;
  if (!t->nlastpath || iters < 1) return gt_fail(rt, "tree '%s': call it at least once before measuring the floor", t->name);
  for (int i = 0; i < t->nlastpath; i++)
    if (!t->lastpath[i]->graph) return gt_fail(rt, "tree '%s': the last call did not replay every segment", t->name);
  double *c = malloc(iters * sizeof *c), *s = malloc(iters * sizeof *s);
  if (!c || !s) { free(c); free(s); return gt_fail(rt, "out of host memory"); }
  if (be->sync(be)) { free(c); free(s); return gt_fail_be(rt, NULL); }
  double start = gt_now_us();
  int st = GT_BOK;
  for (int k = 0; k < iters && st == GT_BOK; k++) {
    double t0 = gt_now_us();
    for (int i = 0; i < t->nlastpath && st == GT_BOK; i++) st = be->graph_launch(be, t->lastpath[i]->graph);
    double t1 = gt_now_us();
    if (sync_each && st == GT_BOK) st = be->sync(be);
    c[k] = t1 - t0;
    s[k] = gt_now_us() - t0;
  }
  if (st == GT_BOK) st = be->sync(be);
  double total = gt_now_us() - start;
  qsort(c, iters, sizeof *c, cmp_double);
  qsort(s, iters, sizeof *s, cmp_double);
  *cpu_us = c[iters / 2];
  *step_us = sync_each ? s[iters / 2] : total / iters;
  free(c); free(s);
  return st == GT_BOK ? GT_OK : gt_fail_be(rt, NULL);
}
