/* gt_test.h - a tiny C unit-test helper, compiled only with -DGT_TEST
   (make test builds build/gtlua-test, whose main runs every gt_test_* below). */
#ifndef GT_TEST_H
#define GT_TEST_H
#ifdef GT_TEST
#include <stdio.h>
extern int gt_test_failed, gt_test_passed;
#define GT_CHECK(cond) do { if (cond) gt_test_passed++; else { gt_test_failed++; \
  fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
/* One per module that has C-level tests; main.c calls them all. */
void gt_test_pool(void);
void gt_test_queue(void);
void gt_test_kernel(void);
void gt_test_backend_cpu(void);
void gt_test_cond(void);
void gt_test_deps(void);
void gt_test_key(void);
struct gt_queue;
struct gt_kernel;
void gt_test_cond_queue(struct gt_queue *q, struct gt_kernel *k);   /* cond.c: a queue with nested IF/ELSE/END */
#endif
#endif
