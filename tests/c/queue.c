/* queue.c - C tests of queue.c: queued launches and their resolved arguments. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "ctest.h"

void test_queue(void) {
  gt_queue q = { 0 };
  gt_buf b = { .addr = 4096, .bytes = 64, .refs = 1 };
  gt_kernel k = { .name = "k", .nparams = 2 };
  gt_qlaunch l = { .kind = GT_GN_KERNEL, .k = &k, .grid = { 2, 1, 1 }, .block = { 32, 1, 1 }, .nargs = 2 };
  gt_arg a[2] = { { .buf = &b, .off = 16, .nbytes = 32 }, { .v.f32 = 1.5f } };
  for (int i = 0; i < 100; i++) GT_CHECK(gt_queue_push(&q, &l, a) == GT_OK);
  GT_CHECK(q.n == 100 && q.nargs == 200 && b.refs == 1);
  uint64_t vals[2];
  gt_queue_resolve(&q, 99, vals);
  float f;
  memcpy(&f, &vals[1], 4);
  GT_CHECK(vals[0] == 4096 + 16 && f == 1.5f);
  gt_queue_clear(&q);
  GT_CHECK(q.n == 0 && q.nargs == 0);
  gt_queue_free(&q);
}
