/* pool.c - device memory pools: a reserved address range, best-fit blocks, and the planner. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "gt_test.h"

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* -- Setup --------------------------------------------------------------- */

/* Reserve `reserve` bytes of addresses; nothing is committed yet. */
int gt_pool_init(gt_pool *p, gt_backend *be, uint64_t reserve, char *err) {
  memset(p, 0, sizeof *p);
  p->be = be;
  p->reserve = align_up(reserve, be->granularity);
  if (be->reserve(be, p->reserve, &p->base) != GT_BOK) {
    snprintf(err, GT_ERRLEN, "could not reserve %llu bytes of addresses: %s", (unsigned long long)p->reserve, be->err);
    return GT_ERR;
  }
  return GT_OK;
}

void gt_pool_destroy(gt_pool *p) {
  if (p->committed) p->be->decommit(p->be, p->base, p->committed);
  if (p->base) p->be->release(p->be, p->base, p->reserve);
  free(p->blk);
  memset(p, 0, sizeof *p);
}

uint64_t gt_pool_in_use(const gt_pool *p) {
  uint64_t s = 0;
  for (int i = 0; i < p->n; i++) s += p->blk[i].size;
  return s;
}

int gt_pool_ensure(gt_pool *p, uint64_t end, char *err) {
  if (end <= p->committed) return GT_OK;
  uint64_t want = align_up(end, p->be->granularity);
  if (want > p->reserve) {
    snprintf(err, GT_ERRLEN, "the pool's %llu reserved bytes are not enough for %llu (set GTLUA_POOL_RESERVE / GTLUA_MEM_RESERVE)",
             (unsigned long long)p->reserve, (unsigned long long)want);
    return GT_ERR;
  }
  if (p->be->commit(p->be, p->base + p->committed, want - p->committed) != GT_BOK) {
    snprintf(err, GT_ERRLEN, "%s", p->be->err);
    return GT_ERR;
  }
  p->committed = want;
  return GT_OK;
}

void gt_pool_shrink(gt_pool *p, uint64_t keep_end) {
  uint64_t keep = align_up(keep_end, p->be->granularity);
  if (keep >= p->committed) return;
  p->be->decommit(p->be, p->base + keep, p->committed - keep);
  p->committed = keep;
}

/* -- Blocks -------------------------------------------------------------- */

static int insert_at(gt_pool *p, int i, uint64_t off, uint64_t size, gt_buf *buf) {
  if (GT_GROW(p->blk, p->cap, p->n + 1)) return GT_ERR;
  memmove(p->blk + i + 1, p->blk + i, (p->n - i) * sizeof *p->blk);
  p->blk[i] = (gt_block){ off, size, buf };
  p->n++;
  return GT_OK;
}

/* Best fit over the gaps between live blocks, else after the last one.
   On failure err says the request, the pool's size and its largest gap. */
int gt_pool_alloc(gt_pool *p, uint64_t size, gt_buf *buf, uint64_t *off, char *err) {
  size = align_up(size ? size : 1, GT_ALIGN);
  uint64_t best = UINT64_MAX, best_off = 0, largest = 0, prev_end = 0;
  int best_i = -1;
  for (int i = 0; i <= p->n; i++) {
    uint64_t start = align_up(prev_end, GT_ALIGN);
    uint64_t end = i < p->n ? p->blk[i].off : p->reserve;
    uint64_t gap = end > start ? end - start : 0;
    if (gap > largest) largest = gap;
    if (i < p->n && gap >= size && gap < best) { best = gap; best_off = start; best_i = i; }
    if (i < p->n) prev_end = p->blk[i].off + p->blk[i].size;
  }
  if (best_i < 0) {
    best_off = align_up(prev_end, GT_ALIGN);
    best_i = p->n;
    if (best_off + size > p->reserve) {
      snprintf(err, GT_ERRLEN, "request of %llu bytes: pool reserves %llu, %llu in use, largest free block %llu",
               (unsigned long long)size, (unsigned long long)p->reserve, (unsigned long long)gt_pool_in_use(p),
               (unsigned long long)largest);
      return GT_ERR;
    }
  }
  if (gt_pool_ensure(p, best_off + size, err) != GT_OK) return GT_ERR;
  if (insert_at(p, best_i, best_off, size, buf) != GT_OK) {
    snprintf(err, GT_ERRLEN, "out of host memory");
    return GT_ERR;
  }
  if (best_off + size > p->high_water) p->high_water = best_off + size;
  *off = best_off;
  return GT_OK;
}

static int find(const gt_pool *p, uint64_t off) {
  int lo = 0, hi = p->n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (p->blk[mid].off == off) return mid;
    if (p->blk[mid].off < off) lo = mid + 1; else hi = mid - 1;
  }
  return -1;
}

void gt_pool_free(gt_pool *p, uint64_t off) {
  int i = find(p, off);
  if (i < 0) return;
  memmove(p->blk + i, p->blk + i + 1, (p->n - i - 1) * sizeof *p->blk);
  p->n--;
}

void gt_pool_clear(gt_pool *p) { p->n = 0; }

/* -- Planning ------------------------------------------------------------ */

int gt_pool_plan(gt_pool *p, gt_interval *iv, int n, const gt_interval *old, int nold, char *err) {
  char *placed = calloc(n + nold ? n + nold : 1, 1), *held = placed + n;
  if (!placed) { snprintf(err, GT_ERRLEN, "out of host memory"); return GT_ERR; }
  memset(held, 1, nold);
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < nold; j++)
      if (held[j] && old[j].end <= iv[i].first) { gt_pool_free(p, old[j].off); held[j] = 0; }
    for (int j = 0; j < i; j++)
      if (placed[j] && iv[j].end <= iv[i].first) { gt_pool_free(p, iv[j].off); placed[j] = 0; }
    if (gt_pool_alloc(p, iv[i].size, iv[i].buf, &iv[i].off, err) != GT_OK) { free(placed); return GT_ERR; }
    placed[i] = 1;
  }
  for (int j = 0; j < nold; j++) if (held[j]) gt_pool_free(p, old[j].off);
  for (int j = 0; j < n; j++)
    if (placed[j] && iv[j].end != UINT32_MAX) gt_pool_free(p, iv[j].off);
  free(placed);
  return GT_OK;
}

/* -- Tests --------------------------------------------------------------- */
#ifdef GT_TEST
static int t_reserve(gt_backend *b, size_t n, uint64_t *base) { (void)b; (void)n; *base = 1ull << 40; return 0; }
static int t_commit(gt_backend *b, uint64_t a, size_t n) { (void)b; (void)a; (void)n; return 0; }
static int t_release(gt_backend *b, uint64_t a, size_t n) { (void)b; (void)a; (void)n; return 0; }

void gt_test_pool(void) {
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
}
#endif
