/* main.c - build/gtlua-test: every subsystem's C tests in one run (the
   core's objects without the host); non-zero on failure.  scripts/test.sh
   reads the last line. */
#include "ctest.h"

int gt_test_failed, gt_test_passed;

int main(void) {
  test_pool();
  test_queue();
  test_kernel();
  test_backend_cpu();
  test_cond();
  test_deps();
  test_key();
  test_half();
  test_incdir();
  printf("C tests: %d passed, %d failed\n", gt_test_passed, gt_test_failed);
  return gt_test_failed != 0;
}
