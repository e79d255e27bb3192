/* pool.c - C tests of pool.c: a pool's blocks, growing pools, the interval planner. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "ctest.h"

static int t_reserve(gt_backend *b, size_t n, uint64_t *base) { (void)b; (void)n; *base = 1ull << 40; return 0; }
static int t_commit(gt_backend *b, uint64_t a, size_t n) { (void)b; (void)a; (void)n; return 0; }
static int t_release(gt_backend *b, uint64_t a, size_t n) { (void)b; (void)a; (void)n; return 0; }

/* A backend whose reservations come top down (as mmap's), 4 GiB at most. */
static uint64_t t_next, t_live;
static int t_ranges;
static int t_reserve_down(gt_backend *b, size_t n, uint64_t *base) {
  if (n > (4ull << 30)) { snprintf(b->err, GT_ERRLEN, "no room"); return -1; }
  t_next -= 8ull << 30;
  *base = t_next;
  t_ranges++;
  return 0;
}
static int t_commit_n(gt_backend *b, uint64_t a, size_t n) { (void)b; (void)a; t_live += n; return 0; }
static int t_decommit_n(gt_backend *b, uint64_t a, size_t n) { (void)b; (void)a; t_live -= n; return 0; }
static int t_release_n(gt_backend *b, uint64_t a, size_t n) { (void)b; (void)a; (void)n; t_ranges--; return 0; }

static void test_pool_growing(void) {
  gt_backend be = { .granularity = 4096, .reserve = t_reserve_down, .commit = t_commit_n, .decommit = t_decommit_n,
                    .release = t_release_n };
  gt_pool p;
  char err[GT_ERRLEN];
  uint64_t a, b, c, d;
  t_next = 1ull << 46;
  GT_CHECK(gt_pool_init_growing(&p, &be, "1M", err) == GT_OK && p.nrng == 0 && p.reserve == 0 && t_ranges == 0);
  GT_CHECK(gt_pool_alloc(&p, 1000, NULL, &a, err) == GT_OK && p.nrng == 1 && a == p.rng[0].addr && p.base == 0);
  GT_CHECK(p.reserve == (1u << 20) && p.committed == 4096 && t_live == 4096);
  uint64_t first = a;
  /* too large for the first range: a second one, at least as large as the pool, placed below it */
  GT_CHECK(gt_pool_alloc(&p, 2u << 20, NULL, &b, err) == GT_OK && p.nrng == 2 && b < first && b == p.rng[0].addr);
  GT_CHECK(p.reserve == (3u << 20) && p.high_water == (2u << 20) + 1024);
  /* a small request goes into the free end of the first range: nothing moves, nothing straddles */
  GT_CHECK(gt_pool_alloc(&p, 900 << 10, NULL, &c, err) == GT_OK && c == first + 1024 && p.nrng == 2);
  GT_CHECK(p.high_water == (2u << 20) + 1024 + (900 << 10));
  GT_CHECK(gt_pool_alloc(&p, 2u << 20, NULL, &d, err) == GT_OK && p.nrng == 3 && p.reserve == (6u << 20));
  GT_CHECK(p.committed == t_live && t_live == 4096 + (2u << 20) + 225 * 4096 + (2u << 20));
  gt_pool_free(&p, b);
  gt_pool_free(&p, d);
  GT_CHECK(gt_pool_alloc(&p, 1u << 20, NULL, &b, err) == GT_OK && b == p.rng[0].addr && p.nrng == 3);   /* best fit */
  gt_pool_clear(&p);
  gt_pool_shrink(&p, 0);
  GT_CHECK(p.committed == 0 && t_live == 0 && p.nrng == 3 && t_ranges == 3);   /* addresses kept: plans hold them */
  gt_pool_destroy(&p);
  GT_CHECK(t_ranges == 0);
  /* GTLUA_POOL_RESERVE: a size, or an error naming it */
  GT_CHECK(gt_pool_init_growing(&p, &be, "abc", err) == GT_ERR && strstr(err, "GTLUA_POOL_RESERVE=abc is not a size"));
  GT_CHECK(gt_pool_init_growing(&p, &be, "-1", err) == GT_ERR && gt_pool_init_growing(&p, &be, "0", err) == GT_ERR);
  GT_CHECK(gt_pool_init_growing(&p, &be, "1e30", err) == GT_ERR && gt_pool_init_growing(&p, &be, "4x", err) == GT_ERR);
  GT_CHECK(gt_pool_init_growing(&p, &be, "0.5", err) == GT_OK && p.first == (512u << 20) && p.growing == 2);
  /* a first range set by the user is not retried smaller; the message names the variables */
  GT_CHECK(gt_pool_init_growing(&p, &be, "8", err) == GT_OK);
  GT_CHECK(gt_pool_alloc(&p, 100, NULL, &a, err) == GT_ERR && p.nrng == 0);
  GT_CHECK(strstr(err, "GTLUA_POOL_RESERVE") && strstr(err, "GTLUA_MEM_RESERVE") && strstr(err, "no room"));
  gt_pool_destroy(&p);
  /* the default first range is retried with just the request */
  GT_CHECK(gt_pool_init_growing(&p, &be, NULL, err) == GT_OK && p.growing == 1);
  p.first = 8ull << 30;
  GT_CHECK(gt_pool_alloc(&p, 100, NULL, &a, err) == GT_OK && p.reserve == 4096);
  GT_CHECK(gt_pool_alloc(&p, 5ull << 30, NULL, &a, err) == GT_ERR && strstr(err, "request of 5.0 GiB"));
  gt_pool_destroy(&p);
  GT_CHECK(t_ranges == 0 && t_live == 0);
}

void test_pool(void) {
  gt_backend be = { .granularity = 4096, .reserve = t_reserve, .commit = t_commit, .decommit = t_commit, .release = t_release };
  gt_pool p;
  char err[GT_ERRLEN];
  GT_CHECK(gt_pool_init(&p, &be, 1 << 20, err) == GT_OK);
  uint64_t a, b, c, d;
  GT_CHECK(gt_pool_alloc(&p, 1000, NULL, &a, err) == GT_OK && a == 0);
  GT_CHECK(gt_pool_alloc(&p, 100, NULL, &b, err) == GT_OK && b == 1024);
  GT_CHECK(gt_pool_alloc(&p, 4000, NULL, &c, err) == GT_OK && c == 1280);
  gt_pool_free(&p, a);
  GT_CHECK(gt_pool_alloc(&p, 200, NULL, &d, err) == GT_OK && d == 0);   /* best fit: the first gap */
  GT_CHECK(gt_pool_in_use(&p) == 256 + 256 + 4096);
  GT_CHECK(p.committed == 8192 && p.high_water == 1280 + 4096);
  GT_CHECK(gt_pool_alloc(&p, 2u << 20, NULL, &d, err) == GT_ERR && strstr(err, "largest free block"));
  gt_pool_clear(&p);
  /* planner: a chain x0 -> x1 -> x2 -> x3 reuses memory two apart; x3 lives on */
  gt_interval iv[4] = { { 1024, 0, 2, NULL, 0 }, { 1024, 1, 3, NULL, 0 }, { 1024, 2, 4, NULL, 0 }, { 1024, 3, UINT32_MAX, NULL, 0 } };
  GT_CHECK(gt_pool_plan(&p, iv, 4, NULL, 0, err) == GT_OK);
  GT_CHECK(iv[0].off == 0 && iv[1].off == 1024 && iv[2].off == 0 && iv[3].off == 1024);
  GT_CHECK(p.n == 1 && p.blk[0].off == 1024);
  /* an occupied block is never planned over */
  gt_interval iv2[2] = { { 512, 0, 1, NULL, 0 }, { 512, 1, 2, NULL, 0 } };
  GT_CHECK(gt_pool_plan(&p, iv2, 2, NULL, 0, err) == GT_OK && iv2[0].off == 0 && iv2[1].off == 0 && p.n == 1);
  /* an old block released at launch 2 is reused by a tensor made after it, not before */
  gt_interval old[1] = { { 1024, 0, 2, NULL, 1024 } };
  gt_interval iv3[2] = { { 1024, 1, UINT32_MAX, NULL, 0 }, { 1024, 2, UINT32_MAX, NULL, 0 } };
  GT_CHECK(gt_pool_plan(&p, iv3, 2, old, 1, err) == GT_OK);
  GT_CHECK(iv3[0].off == 0 && iv3[1].off == 1024 && p.n == 2);
  gt_pool_destroy(&p);
  test_pool_growing();
  char u[GT_BYTES_LEN];                                 /* the sizes messages give, in units */
  GT_CHECK(!strcmp(gt_bytes(512, u), "512 B") && !strcmp(gt_bytes(8192, u), "8.0 KiB"));
  GT_CHECK(!strcmp(gt_bytes(3ull << 19, u), "1.5 MiB") && !strcmp(gt_bytes(2ull << 30, u), "2.0 GiB"));
  GT_CHECK(!strcmp(gt_bytes(4ull << 40, u), "4.0 TiB") && !strcmp(gt_bytes(0, u), "0 B"));
}
