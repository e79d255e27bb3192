/* pool.c - device memory pools: reserved address ranges, best-fit blocks, and the planner. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "core.h"

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* -- Ranges -------------------------------------------------------------- */

static uint64_t rstart(const gt_pool *p, const gt_range *r) { return r->addr - p->base; }

/* Reserves a range of at least bytes, kept in address order: its index, or
   -1 with the backend's message in be->err. */
static int add_range(gt_pool *p, uint64_t bytes) {
  gt_range *nr = realloc(p->rng, (p->nrng + 1) * sizeof *nr);
  if (!nr) { snprintf(p->be->err, GT_ERRLEN, "%s", gt_errmsg_text(GT_E_NOMEM)); return -1; }
  p->rng = nr;
  uint64_t size = align_up(bytes ? bytes : 1, p->be->granularity), addr;
  if (size < bytes || p->be->reserve(p->be, size, &addr) != GT_BOK) {
    char b1[GT_BYTES_LEN];
    if (size < bytes) snprintf(p->be->err, GT_ERRLEN, "%s cannot be reserved", gt_bytes(bytes, b1));
    return -1;
  }
  int i = p->nrng++;
  for (; i > 0 && p->rng[i - 1].addr > addr; i--) p->rng[i] = p->rng[i - 1];
  p->rng[i] = (gt_range){ addr, size, 0, 0 };
  p->reserve += size;
  return i;
}

/* Commits r up to end bytes from its start (rounded up to granularity). */
static int commit_to(gt_pool *p, gt_range *r, uint64_t end, char *err) {
  if (end <= r->committed) return GT_OK;
  uint64_t want = align_up(end, p->be->granularity);
  if (p->be->commit(p->be, r->addr + r->committed, want - r->committed) != GT_BOK) {
    char b1[GT_BYTES_LEN], b2[GT_BYTES_LEN], b3[GT_BYTES_LEN], b4[GT_BYTES_LEN];
    snprintf(err, GT_ERRLEN, "committing %s more failed (the pool reserves %s, commits %s, %s in use): %s",
             gt_bytes(want - r->committed, b1), gt_bytes(p->reserve, b2), gt_bytes(p->committed, b3),
             gt_bytes(gt_pool_in_use(p), b4), p->be->err);
    return GT_ERR;
  }
  p->committed += want - r->committed;
  r->committed = want;
  return GT_OK;
}

/* -- Setup --------------------------------------------------------------- */

int gt_pool_init(gt_pool *p, gt_backend *be, uint64_t reserve, char *err) {
  memset(p, 0, sizeof *p);
  p->be = be;
  if (add_range(p, reserve) < 0) {
    char b1[GT_BYTES_LEN];
    snprintf(err, GT_ERRLEN, "could not reserve %s of addresses: %s", gt_bytes(reserve, b1), be->err);
    free(p->rng);
    memset(p, 0, sizeof *p);
    return GT_ERR;
  }
  p->base = p->rng[0].addr;
  return GT_OK;
}

/* The first range by default: 64 MiB of addresses, at most 1/32768 of a
   `ulimit -v` (reserved addresses count against it although nothing is
   committed), at least one granule.  Ranges after it double the pool. */
static uint64_t default_first(const gt_backend *be) {
  struct rlimit r;
  uint64_t first = 64u << 20;
  if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur / 32768 < first) first = r.rlim_cur / 32768;
  return max_u64(align_up(first, be->granularity), be->granularity);
}

int gt_pool_init_growing(gt_pool *p, gt_backend *be, const char *first_gib, char *err) {
  memset(p, 0, sizeof *p);
  p->be = be;
  p->growing = 1;
  p->first = default_first(be);
  if (!first_gib || !*first_gib) return GT_OK;
  char *end;
  double x = strtod(first_gib, &end), unit = 1ull << 30;
  if (*end == 'K' || *end == 'k') unit = 1 << 10, end++;
  else if (*end == 'M' || *end == 'm') unit = 1 << 20, end++;
  else if (*end == 'G' || *end == 'g') end++;
  if (end == first_gib || *end || !(x > 0) || !isfinite(x) || x * unit >= 0x1p63) {
    snprintf(err, GT_ERRLEN, "GTLUA_POOL_RESERVE=%s is not a size: give the addresses a tree's pool reserves first in GiB "
             "(e.g. 4), or with K, M or G (e.g. 512M); unset, it is %llu MiB, and a pool grows by further ranges",
             first_gib, (unsigned long long)(p->first >> 20));
    return GT_ERR;
  }
  p->first = max_u64(align_up((uint64_t)(x * unit), be->granularity), be->granularity);
  p->growing = 2;
  return GT_OK;
}

uint64_t gt_pool_epoch;
enum { RELEASED_LOG = 64 };
static struct { uint64_t lo, hi; } released[RELEASED_LOG];   /* by gt_pool_epoch */

static void note_released(uint64_t lo, uint64_t hi) {
  gt_pool_epoch++;
  released[gt_pool_epoch % RELEASED_LOG].lo = lo;
  released[gt_pool_epoch % RELEASED_LOG].hi = hi;
}

int gt_pool_released_since(uint64_t since, uint64_t addr) {
  if (gt_pool_epoch - since > RELEASED_LOG) return gt_pool_epoch != since;   /* (the log no longer reaches back) */
  for (uint64_t e = since + 1; e <= gt_pool_epoch; e++)
    if (addr >= released[e % RELEASED_LOG].lo && addr < released[e % RELEASED_LOG].hi) return 1;
  return 0;
}

void gt_pool_destroy(gt_pool *p) {
  for (int i = 0; i < p->nrng; i++) {
    gt_range *r = &p->rng[i];
    note_released(r->addr, r->addr + r->size);
    if (r->committed) p->be->decommit(p->be, r->addr, r->committed);
    p->be->release(p->be, r->addr, r->size);
  }
  free(p->rng);
  free(p->blk);
  memset(p, 0, sizeof *p);
}

uint64_t gt_pool_in_use(const gt_pool *p) {
  uint64_t s = 0;
  for (int i = 0; i < p->n; i++) s += p->blk[i].size;
  return s;
}

int gt_pool_ensure(gt_pool *p, uint64_t end, char *err) {
  if (!p->nrng || end > p->rng[0].size) {
    char b1[GT_BYTES_LEN], b2[GT_BYTES_LEN];
    snprintf(err, GT_ERRLEN, "the pool's %s of reserved addresses are not enough for %s (set GTLUA_MEM_RESERVE)",
             gt_bytes(p->reserve, b1), gt_bytes(end, b2));
    return GT_ERR;
  }
  return commit_to(p, &p->rng[0], end, err);
}

void gt_pool_shrink(gt_pool *p, uint64_t keep_end) {
  for (int i = 0; i < p->nrng; i++) {
    gt_range *r = &p->rng[i];
    uint64_t start = rstart(p, r), keep = keep_end <= start ? 0 : keep_end - start;
    if (keep >= r->committed) continue;
    keep = align_up(keep, p->be->granularity);
    if (keep >= r->committed) continue;
    p->be->decommit(p->be, r->addr + keep, r->committed - keep);
    note_released(r->addr + keep, r->addr + r->committed);
    p->committed -= r->committed - keep;
    r->committed = keep;
  }
}

/* A growing pool's next range: the first one, then as large as the pool
   (doubling it), at least the request; with the default first size a failed
   reservation is retried with just the request.  Its index, or -1 with err. */
static int grow(gt_pool *p, uint64_t size, uint64_t largest, char *err) {
  uint64_t want = max_u64(size, p->nrng ? p->reserve : p->first);
  int k = add_range(p, want);
  if (k < 0 && want > size && (p->nrng || p->growing == 1)) k = add_range(p, size);
  if (k >= 0) return k;
  char b1[GT_BYTES_LEN], b2[GT_BYTES_LEN], b3[GT_BYTES_LEN], b4[GT_BYTES_LEN], b5[GT_BYTES_LEN];
  snprintf(err, GT_ERRLEN, "request of %s: reserving %s more of addresses for the pool failed (it reserves "
           "%s in %d ranges, %s in use, largest free block %s): %s; set GTLUA_POOL_RESERVE (GiB a tree's pool "
           "reserves first%s) or GTLUA_MEM_RESERVE (ordinary memory) lower, raise ulimit -v, or drop trees you no longer use",
           gt_bytes(size, b1), gt_bytes(want, b2), gt_bytes(p->reserve, b3), p->nrng,
           gt_bytes(gt_pool_in_use(p), b4), gt_bytes(largest, b5), p->be->err,
           p->growing == 2 ? ", set now" : "");
  return -1;
}

/* -- Blocks -------------------------------------------------------------- */

static int insert_at(gt_pool *p, int i, uint64_t off, uint64_t size, gt_buf *buf) {
  if (GT_GROW(p->blk, p->cap, p->n + 1)) return GT_ERR;
  memmove(p->blk + i + 1, p->blk + i, (p->n - i) * sizeof *p->blk);
  p->blk[i] = (gt_block){ off, size, buf };
  p->n++;
  return GT_OK;
}

/* Best fit over the gaps between live blocks, else the first range whose free
   end fits, else (growing) a new range.  Blocks stay inside one range. */
int gt_pool_alloc(gt_pool *p, uint64_t size, gt_buf *buf, uint64_t *off, char *err) {
  size = align_up(size ? size : 1, GT_ALIGN);
  uint64_t best = UINT64_MAX, best_off = 0, tail_off = 0, largest = 0;
  int best_i = -1, best_r = -1, tail_i = -1, tail_r = -1, i = 0;
  for (int k = 0; k < p->nrng; k++) {
    uint64_t start = rstart(p, &p->rng[k]), end = start + p->rng[k].size, prev = start;
    for (; i < p->n && p->blk[i].off < end; i++) {
      uint64_t s = align_up(prev, GT_ALIGN), gap = p->blk[i].off > s ? p->blk[i].off - s : 0;
      if (gap > largest) largest = gap;
      if (gap >= size && gap < best) { best = gap; best_off = s; best_i = i; best_r = k; }
      prev = p->blk[i].off + p->blk[i].size;
    }
    uint64_t s = align_up(prev, GT_ALIGN), gap = end > s ? end - s : 0;
    if (gap > largest) largest = gap;
    if (tail_r < 0 && gap >= size) { tail_off = s; tail_i = i; tail_r = k; }
  }
  if (best_i < 0 && tail_r >= 0) { best_off = tail_off; best_i = tail_i; best_r = tail_r; }
  if (best_i < 0 && !p->growing) {
    char b1[GT_BYTES_LEN], b2[GT_BYTES_LEN], b3[GT_BYTES_LEN], b4[GT_BYTES_LEN];
    snprintf(err, GT_ERRLEN, "request of %s: pool reserves %s, %s in use, largest free block %s",
             gt_bytes(size, b1), gt_bytes(p->reserve, b2), gt_bytes(gt_pool_in_use(p), b3), gt_bytes(largest, b4));
    return GT_ERR;
  }
  if (best_i < 0) {
    if ((best_r = grow(p, size, largest, err)) < 0) return GT_ERR;
    best_off = rstart(p, &p->rng[best_r]);
    for (best_i = 0; best_i < p->n && p->blk[best_i].off < best_off; best_i++) {}
  }
  gt_range *r = &p->rng[best_r];
  if (commit_to(p, r, best_off + size - rstart(p, r), err) != GT_OK) {   /* (the request and the largest free block first) */
    char why[GT_ERRLEN];
    snprintf(why, sizeof why, "%s", err);
    char b1[GT_BYTES_LEN], b2[GT_BYTES_LEN];
    snprintf(err, GT_ERRLEN, "request of %s (largest free block %s): %s", gt_bytes(size, b1), gt_bytes(largest, b2), why);
    return GT_ERR;
  }
  if (insert_at(p, best_i, best_off, size, buf) != GT_OK) {
    snprintf(err, GT_ERRLEN, "%s", gt_errmsg_text(GT_E_NOMEM));
    return GT_ERR;
  }
  uint64_t end = best_off + size - rstart(p, r);
  if (end > r->high) { p->high_water += end - r->high; r->high = end; }
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
  if (!placed) { snprintf(err, GT_ERRLEN, "%s", gt_errmsg_text(GT_E_NOMEM)); return GT_ERR; }
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
