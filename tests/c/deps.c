/* deps.c - C tests of deps.c: edges from read/write sets, lifted out of cond bodies. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "deps.h"
#include "ctest.h"

static const uint8_t io[] = { GT_P_OUT, GT_P_IN, GT_P_IN };   /* k(out, in, in) */
static gt_kernel tk = { .name = "k", .nparams = 3, .ptype = io };

/* Queues k(out, in1, in2) over [addr, addr+64) ranges (in2 0: no second input). */
static void push(gt_queue *q, gt_buf *out, gt_buf *in1, gt_buf *in2) {
  gt_qlaunch l = { .kind = GT_GN_KERNEL, .k = &tk, .nargs = 3 };
  gt_arg a[3] = { { .buf = out, .nbytes = 64 }, { .buf = in1, .nbytes = 64 }, { .buf = in2, .nbytes = 64 } };
  GT_CHECK(gt_queue_push(q, &l, a) == GT_OK);
}

/* Edges of the queue: the total, with g filled for inspection. */
static int edges(gt_queue *q, gt_gnode *g, int **deps) {
  uint64_t vals[64 * 3];
  for (int i = 0; i < q->n; i++) gt_queue_resolve(q, i, vals + q->l[i].arg0);
  memset(g, 0, q->n * sizeof *g);
  *deps = NULL;
  GT_CHECK(gt_deps_build(q, vals, g, deps, 0) == GT_OK);
  int total = 0;
  for (int i = 0; i < q->n; i++) total += g[i].ndeps;
  return total;
}

static void test_edges(void) {
  gt_buf b[8];
  for (int i = 0; i < 8; i++) b[i] = (gt_buf){ .addr = 4096 * (i + 1), .bytes = 64 };
  gt_queue q = { 0 };
  gt_gnode g[8];
  int *d;
  for (int i = 0; i < 5; i++) push(&q, &b[i + 1], &b[i], NULL);      /* a chain of 5: 4 edges, each on the one before */
  GT_CHECK(edges(&q, g, &d) == 4);
  GT_CHECK(g[0].ndeps == 0 && g[4].ndeps == 1 && g[4].deps[0] == 3 && g[1].deps[0] == 0);
  free(d); gt_queue_clear(&q);
  for (int i = 0; i < 4; i++) push(&q, &b[i + 1], &b[0], NULL);      /* independent kernels reading one input: none */
  GT_CHECK(edges(&q, g, &d) == 0);
  free(d); gt_queue_clear(&q);
  push(&q, &b[1], &b[0], NULL); push(&q, &b[2], &b[3], NULL); push(&q, &b[4], &b[1], NULL);   /* a read after a write waits for it alone */
  GT_CHECK(edges(&q, g, &d) == 1 && g[2].ndeps == 1 && g[2].deps[0] == 0);
  free(d); gt_queue_clear(&q);
  push(&q, &b[1], &b[0], NULL); push(&q, &b[0], &b[2], NULL);       /* a write after a read waits for the read */
  GT_CHECK(edges(&q, g, &d) == 1 && g[1].deps[0] == 0);
  free(d); gt_queue_clear(&q);
  push(&q, &b[1], &b[0], NULL); push(&q, &b[1], &b[2], NULL); push(&q, &b[3], &b[1], NULL);   /* write, write, read: the last writer only */
  GT_CHECK(edges(&q, g, &d) == 2 && g[2].ndeps == 1 && g[2].deps[0] == 1);
  free(d); gt_queue_clear(&q);
  push(&q, &b[1], &b[0], NULL); push(&q, &b[2], &b[1], &b[0]); push(&q, &b[3], &b[1], &b[2]);   /* a read of two writers waits for both */
  GT_CHECK(edges(&q, g, &d) == 3 && g[2].ndeps == 2);
  free(d); gt_queue_clear(&q);
  push(&q, &b[1], &b[0], NULL); push(&q, &b[2], &b[1], &b[1]);     /* one edge per pair of nodes, not per argument */
  GT_CHECK(edges(&q, g, &d) == 1 && g[1].ndeps == 1);
  free(d); gt_queue_clear(&q);
  gt_buf lo = { .addr = 1 << 20, .bytes = 64 }, hi = { .addr = (1 << 20) + 64, .bytes = 64 }, all = { .addr = 1 << 20, .bytes = 128 };
  push(&q, &lo, &b[0], NULL); push(&q, &hi, &b[0], NULL);            /* disjoint byte ranges of one memory: none */
  gt_qlaunch cp = { .kind = GT_GN_MEMCPY, .nargs = 2, .bytes = 128 };
  gt_arg ca[2] = { { .buf = &b[5], .nbytes = 128 }, { .buf = &all, .nbytes = 128 } };
  GT_CHECK(gt_queue_push(&q, &cp, ca) == GT_OK);                      /* a copy of both halves waits for both */
  GT_CHECK(edges(&q, g, &d) == 2 && g[1].ndeps == 0 && g[2].ndeps == 2);
  free(d);
  gt_queue_free(&q);
}

/* test_cond_queue's x: [0] k; [1] IF; [2] k; [3] ELSE; [4] IF; [5] k; [6] END; [7] END; [8] k */
static void test_lift(void) {
  gt_kernel k = { .name = "k" };
  gt_queue q = { 0 };
  test_cond_queue(&q, &k);
  gt_gnode g[9];
  memset(g, 0, sizeof g);
  /* 2 <- 0 (lifted to 1 <- 0), 5 <- 2 (other branch: dropped), 5 <- 0 (to 1 <- 0 again), 8 <- 5 (to 8 <- 1), 8 <- 0 */
  int *d = malloc(5 * sizeof *d);
  d[0] = 0; d[1] = 2; d[2] = 0; d[3] = 5; d[4] = 0;
  g[2].deps = d, g[2].ndeps = 1;
  g[5].deps = d + 1, g[5].ndeps = 2;
  g[8].deps = d + 3, g[8].ndeps = 2;
  GT_CHECK(gt_deps_lift(&q, g, &d) == GT_OK);
  GT_CHECK(g[1].ndeps == 1 && g[1].deps[0] == 0);
  GT_CHECK(g[2].ndeps == 0 && g[5].ndeps == 0);
  GT_CHECK(g[8].ndeps == 2 && g[8].deps[0] == 0 && g[8].deps[1] == 1);
  free(d);
  gt_queue_free(&q);
}

/* A fan of 8 independent launches under width 3: three roots, the k-th launch
   after them waits for the one three before it; a chain is left as it is. */
static void test_width(void) {
  gt_buf b[10];
  for (int i = 0; i < 10; i++) b[i] = (gt_buf){ .addr = 4096 * (i + 1), .bytes = 64 };
  gt_queue q = { 0 };
  gt_gnode g[8];
  uint64_t vals[64 * 3];
  int *d = NULL;
  for (int i = 0; i < 8; i++) push(&q, &b[i + 1], &b[0], NULL);
  for (int i = 0; i < q.n; i++) gt_queue_resolve(&q, i, vals + q.l[i].arg0);
  memset(g, 0, sizeof g);
  GT_CHECK(gt_deps_build(&q, vals, g, &d, 3) == GT_OK);
  int roots = 0;
  for (int i = 0; i < 8; i++) roots += g[i].ndeps == 0;
  GT_CHECK(roots == 3);
  for (int i = 3; i < 8; i++) GT_CHECK(g[i].ndeps == 1 && g[i].deps[0] == i - 3);
  free(d); gt_queue_clear(&q);
  for (int i = 0; i < 5; i++) push(&q, &b[i + 1], &b[i], NULL);
  for (int i = 0; i < q.n; i++) gt_queue_resolve(&q, i, vals + q.l[i].arg0);
  GT_CHECK(gt_deps_build(&q, vals, g, &d, 1) == GT_OK);
  for (int i = 1; i < 5; i++) GT_CHECK(g[i].ndeps == 1 && g[i].deps[0] == i - 1);
  free(d); gt_queue_free(&q);
}

void test_deps(void) {
  test_edges();
  test_width();
  test_lift();
}
