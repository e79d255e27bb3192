/* cond.c - C tests of cond.c: cond entries matched. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "cond.h"
#include "ctest.h"

/* The test queue x: [0] k; [1] IF; [2] k; [3] ELSE; [4] IF; [5] k; [6] END; [7] END; [8] k
   (deps.c's tests use it too). */
void test_cond_queue(gt_queue *q, gt_kernel *k) {
  gt_arg none = { 0 };
  int kinds[] = { GT_GN_KERNEL, GT_GN_IF, GT_GN_KERNEL, GT_GN_ELSE, GT_GN_IF, GT_GN_KERNEL, GT_GN_END, GT_GN_END, GT_GN_KERNEL };
  for (int i = 0; i < 9; i++) {
    gt_qlaunch l = { .kind = kinds[i], .k = kinds[i] == GT_GN_KERNEL ? k : NULL };
    GT_CHECK(gt_queue_push(q, &l, &none) == GT_OK);
  }
}

void test_cond(void) {
  gt_kernel k = { .name = "k" };
  gt_queue q = { 0 };
  gt_arg none = { 0 };
  test_cond_queue(&q, &k);
  int match[10], stack[10];
  GT_CHECK(gt_cond_match(&q, match, stack) == GT_OK);
  GT_CHECK(match[1] == 3 && match[3] == 7 && match[4] == 6 && match[6] == 4 && match[7] == 1);
  gt_qlaunch bad = { .kind = GT_GN_END };
  GT_CHECK(gt_queue_push(&q, &bad, &none) == GT_OK);
  GT_CHECK(gt_cond_match(&q, match, stack) == GT_ERR);
  gt_queue_free(&q);
}
