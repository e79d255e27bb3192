/* ctest.h - the C tests' helper (tests/c/; build/gtlua-test runs them all).
   Each tests/c/<subsystem>.c defines test_<subsystem>, which main.c calls. */
#ifndef GT_CTEST_H
#define GT_CTEST_H
#include <stdio.h>
extern int gt_test_failed, gt_test_passed;
#define GT_CHECK(cond) do { if (cond) gt_test_passed++; else { gt_test_failed++; \
  fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)

void test_pool(void);
void test_queue(void);
void test_kernel(void);
void test_backend_cpu(void);
void test_cond(void);
void test_deps(void);
void test_key(void);
void test_half(void);
void test_incdir(void);
struct gt_queue;
struct gt_kernel;
/* cond.c's test queue: [0] k; [1] IF; [2] k; [3] ELSE; [4] IF; [5] k; [6] END; [7] END; [8] k. */
void test_cond_queue(struct gt_queue *q, struct gt_kernel *k);
#endif
