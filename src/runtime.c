/* runtime.c - the process's runtime: backend choice, errors, ordinary buffers, helpers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core.h"

static gt_runtime *g_rt;          /* the one runtime of this process */
static char g_open_err[GT_ERRLEN];
static uint64_t g_guard;          /* cpu: uncommitted bytes after a guarded block (0: none) */
static int g_guard_all;           /* GTLUA_CPU_CHECK=1: every ordinary block is guarded */

/* -- Errors -------------------------------------------------------------- */

int gt_fail(gt_runtime *rt, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rt ? rt->err : g_open_err, GT_ERRLEN, fmt, ap);
  va_end(ap);
  return GT_ERR;
}

int gt_fail_be(gt_runtime *rt, const char *what) {
  if (what) return gt_fail(rt, "%s: %s", what, rt->be.err);
  return gt_fail(rt, "%s", rt->be.err);
}

int gt_err(gt_runtime *rt, gt_errcode e) { return gt_fail(rt, "%s", gt_errmsg_text(e)); }
int gt_err_be(gt_runtime *rt, gt_errcode what) { return gt_fail_be(rt, gt_errmsg_text(what)); }

const char *gt_errmsg(gt_runtime *rt) { return rt ? rt->err : g_open_err; }

/* -- Opening ------------------------------------------------------------- */

static uint64_t env_bytes(const char *name, uint64_t dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  double x = strtod(v, &end);
  if (*end == 'G' || *end == 'g') x *= 1ull << 30;
  else if (*end == 'M' || *end == 'm') x *= 1ull << 20;
  return x > 0 ? (uint64_t)x : dflt;
}

/* The address-space limit (ulimit -v), else UINT64_MAX. */
static uint64_t as_limit(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return (uint64_t)r.rlim_cur;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Returns the runtime, opening it on first use with backend "cpu", "cuda" or
   "auto" (NULL: $GTLUA_BACKEND, default auto).  NULL on failure, the reason
   in gt_errmsg(NULL).  A later call with another backend name than the open
   one fails. */
gt_runtime *gt_runtime_open(const char *backend) {
  if (!backend || !*backend) backend = getenv("GTLUA_BACKEND");
  if (!backend || !*backend) backend = "auto";
  if (g_rt) {
    if (strcmp(backend, "auto") && strcmp(backend, g_rt->be.name)) {
      gt_fail(NULL, "the %s backend is already open in this process; one backend per process", g_rt->be.name);
      return NULL;
    }
    return g_rt;
  }
  gt_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) { gt_err(NULL, GT_E_NOMEM); return NULL; }
  int st;
  if (!strcmp(backend, "cuda")) st = gt_backend_cuda_open(&rt->be);
  else if (!strcmp(backend, "cpu")) st = gt_backend_cpu_open(&rt->be);
  else if (!strcmp(backend, "auto")) {
    st = gt_backend_cuda_open(&rt->be);
    if (st != GT_BOK) { memset(&rt->be, 0, sizeof rt->be); st = gt_backend_cpu_open(&rt->be); }
  } else {
    gt_fail(NULL, "unknown backend '%s': use cpu, cuda or auto", backend);
    free(rt);
    return NULL;
  }
  if (st != GT_BOK) {
    gt_fail(NULL, "could not open the %s backend: %s", backend, strncmp(rt->be.err, "cuda: ", 6) ? rt->be.err : rt->be.err + 6);
    free(rt);
    return NULL;
  }
  gt_device_info di;
  memset(&di, 0, sizeof di);
  rt->be.device_info(&rt->be, &di);
  /* cpu: 64 GiB of addresses, at most 1/4 of a `ulimit -v`; without
     GTLUA_MEM_RESERVE a failed reservation is retried with half, down to 256 MiB. */
  int cpu = strcmp(rt->be.name, "cuda") != 0;
  const char *env = getenv("GTLUA_MEM_RESERVE");
  uint64_t dflt = !cpu ? di.total_mem : min_u64(64ull << 30, as_limit() / 4 > (256u << 20) ? as_limit() / 4 : (256u << 20));
  uint64_t want = env_bytes("GTLUA_MEM_RESERVE", dflt);
  int st2;
  while ((st2 = gt_pool_init(&rt->mem, &rt->be, want, rt->err)) != GT_OK && cpu && !(env && *env) && want > (256u << 20))
    want /= 2;
  if (st2 != GT_OK) {
    char b1[GT_BYTES_LEN];
    gt_fail(NULL, "could not reserve %s of addresses for ordinary memory (%s%s): set GTLUA_MEM_RESERVE lower "
            "(e.g. GTLUA_MEM_RESERVE=1G) or raise ulimit -v; %s", gt_bytes(want, b1),
            env && *env ? "GTLUA_MEM_RESERVE=" : "the default", env && *env ? env : "", rt->be.err);
    rt->be.shutdown(&rt->be);
    free(rt);
    return NULL;
  }
  /* cpu: large blocks end at an uncommitted guard so that overruns fault */
  const char *chk = getenv("GTLUA_CPU_CHECK");
  g_guard = cpu ? rt->be.granularity : 0;
  g_guard_all = cpu && chk && *chk && strcmp(chk, "0");
  g_rt = rt;
  return rt;
}

const char *gt_backend_name(gt_runtime *rt) { return rt->be.name; }

int gt_device(gt_runtime *rt, gt_device_info *out) {
  memset(out, 0, sizeof *out);
  if (rt->be.device_info(&rt->be, out) != GT_BOK) return gt_fail_be(rt, "device info");
  snprintf(out->backend, sizeof out->backend, "%s", rt->be.name);
  return GT_OK;
}


int gt_profile(gt_runtime *rt, int on) {
  int old = rt->profile;
  rt->profile = on;
  return old;
}

uint64_t gt_mem_in_use(gt_runtime *rt) { return rt->mem_live; }
double gt_clock_us(void) { return gt_now_us(); }   /* the monotonic clock, for Lua */

void gt_transfer_counts(gt_runtime *rt, gt_transfers *out) { *out = rt->xfer; }

/* NVRTC runs and CUBIN cache hits so far; GT_ERR on a backend that keeps none (cpu). */
int gt_compile_counts(gt_runtime *rt, int *compiles, int *cache_hits) {
  *compiles = *cache_hits = 0;
  if (strcmp(rt->be.name, "cuda")) return gt_fail(rt, "compile counts are kept by the cuda backend only");
  gt_backend_cuda_counts(&rt->be, compiles, cache_hits);
  return GT_OK;
}

/* -- Ordinary memory ------------------------------------------------------ */

/* A caching allocator: blocks are rounded to a size class (powers of two up to
   1 MiB, then 2 MiB steps), cut from the reserved range by a bump pointer, and
   kept on their class's free list when released, so allocation is O(classes). */
struct gt_freelist { uint64_t size; uint64_t *off; int n, cap; };

static uint64_t size_class(uint64_t n) {
  if (g_guard_all) return n ? (n + g_guard - 1) / g_guard * g_guard : g_guard;   /* whole guard granules */
  if (n <= GT_ALIGN) return GT_ALIGN;
  if (n <= (1u << 20)) { uint64_t c = GT_ALIGN; while (c < n) c <<= 1; return c; }
  return (n + (2u << 20) - 1) / (2u << 20) * (2u << 20);
}

static struct gt_freelist *freelist(gt_runtime *rt, uint64_t size) {
  for (int i = 0; i < rt->nfl; i++) if (rt->fl[i].size == size) return &rt->fl[i];
  if (GT_GROW(rt->fl, rt->flcap, rt->nfl + 1)) return NULL;
  rt->fl[rt->nfl] = (struct gt_freelist){ size, NULL, 0, 0 };
  return &rt->fl[rt->nfl++];
}

/* Guarded blocks (cpu: above 1 MiB, or all with GTLUA_CPU_CHECK) start
   granule-aligned and are followed by one uncommitted granule; the buffer is
   placed at the block's end (16-byte aligned) so that reading or writing
   past it faults. */
static int is_guarded(uint64_t size) { return g_guard && (g_guard_all || size > (1u << 20)); }

static uint64_t guard_shift(uint64_t size, uint64_t bytes) {
  return is_guarded(size) ? size - (bytes + 15) / 16 * 16 : 0;
}

static int mem_alloc(gt_runtime *rt, uint64_t bytes, uint64_t *off) {
  uint64_t size = size_class(bytes);
  struct gt_freelist *f = freelist(rt, size);
  if (!f) return gt_err(rt, GT_E_NOMEM);
  if (f->n) { *off = f->off[--f->n]; rt->mem_live += size; return GT_OK; }
  uint64_t start = rt->mem_top, guard = is_guarded(size) ? g_guard : 0;
  if (guard) start = (start + guard - 1) / guard * guard;
  if (start + size + guard > rt->mem.reserve || gt_pool_ensure(&rt->mem, start + size + guard, rt->err) != GT_OK ||
      (guard && rt->be.decommit(&rt->be, rt->mem.base + start + size, guard) != GT_BOK)) {
    uint64_t cached = 0, largest = 0;
    for (int i = 0; i < rt->nfl; i++) {
      cached += rt->fl[i].size * rt->fl[i].n;
      if (rt->fl[i].n && rt->fl[i].size > largest) largest = rt->fl[i].size;
    }
    int reserved = start + size + guard > rt->mem.reserve;   /* else the memory itself ran out (the commit failed) */
    char why[GT_ERRLEN];
    snprintf(why, sizeof why, "%s", rt->err);
    char b1[GT_BYTES_LEN], b2[GT_BYTES_LEN], b3[GT_BYTES_LEN], b4[GT_BYTES_LEN], b5[GT_BYTES_LEN];
    return gt_fail(rt, "out of memory allocating %s: %s in use, %s cached in free blocks (largest free block "
                   "%s), %s reserved; %s%s", gt_bytes(bytes, b1), gt_bytes(rt->mem_live, b2), gt_bytes(cached, b3),
                   gt_bytes(largest, b4), gt_bytes(rt->mem.reserve, b5),
                   reserved ? "the reservation is used up (GTLUA_MEM_RESERVE raises it)"
                            : "free tensors you no longer need (t:free(), gt.scope) or drop trees; ", reserved ? "" : why);
  }
  *off = start;
  rt->mem_top = start + size + guard;
  rt->mem_live += size;
  return GT_OK;
}

static void mem_free(gt_runtime *rt, uint64_t off, uint64_t bytes) {
  uint64_t size = size_class(bytes);
  struct gt_freelist *f = freelist(rt, size);
  if (!f) return;                     /* out of host memory: the block is lost, not reused */
  if (GT_GROW(f->off, f->cap, f->n + 1)) return;
  f->off[f->n++] = off;
  rt->mem_live -= size;
}

/* -- Buffers ------------------------------------------------------------- */

/* A new buffer of bytes from ordinary memory (also inside a tree call: tree
   buffers come from gt_tree_buf_new).  The caller holds one reference
   (gt_buf_release drops it). */
gt_buf *gt_buf_new(gt_runtime *rt, uint64_t bytes) {
  gt_buf *b = calloc(1, sizeof *b);
  if (!b) { gt_err(rt, GT_E_NOMEM); return NULL; }
  b->bytes = bytes;
  b->refs = 1;
  b->gen_now = &rt->zero_gen;
  uint64_t off = 0;
  if (mem_alloc(rt, bytes, &off) != GT_OK) { free(b); return NULL; }
  b->addr = rt->mem.base + off + guard_shift(size_class(bytes), bytes);
  b->block = off + 1;
  return b;
}

void gt_buf_retain(gt_buf *b) { if (!(b->flags & GT_BUF_SLAB)) b->refs++; }

const int32_t gt_released_gen = -1;             /* no view is ever made in this generation */

/* Generations come from one counter for the whole process, so a buffer
   struct that moves to another tree (a collected tree's slab) never meets a
   view of its old life with a matching generation. */
static uint32_t gen_counter;   /* (counted unsigned: wraps without overflow; handed out as int32_t) */
int32_t gt_gen_next(void) {
  if (++gen_counter == 0 || (int32_t)gen_counter == gt_released_gen) gen_counter = 1;
  return (int32_t)gen_counter;
}

/* Ordinary memory goes back to the allocator when it is released; the struct
   lives while Lua's handles do. */
static void return_memory(gt_buf *b) {
  if (b->block && g_rt) mem_free(g_rt, b->block - 1, b->bytes);
  b->block = 0;
}

uint64_t gt_static_frees;

/* The last static buffers freed, by gt_static_frees after each: what a keyed
   path checks its statics against (keyed.c). */
enum { FREED_LOG = 256 };
static struct { uint64_t lo, hi; } freed_log[FREED_LOG];

int gt_static_freed_since(uint64_t since, uint64_t addr, uint64_t bytes) {
  if (gt_static_frees - since > FREED_LOG) return 1;      /* (the log no longer reaches back so far) */
  uint64_t end = addr + (bytes ? bytes : 1);
  for (uint64_t e = since + 1; e <= gt_static_frees; e++) {
    const uint64_t lo = freed_log[e % FREED_LOG].lo, hi = freed_log[e % FREED_LOG].hi;
    if (addr < hi && lo < end) return 1;
  }
  return 0;
}

void gt_buf_unref(gt_buf *b) {
  if ((b->flags & GT_BUF_SLAB) || --b->refs > 0) return;
  if (b->flags & GT_BUF_ALIAS) {                       /* its memory is another buffer's */
    if (b->tree) gt_tree_unref(b->tree);
    free(b);
    return;
  }
  if (b->tree) gt_tree_unref(b->tree);
  else return_memory(b);
  if (b->flags & GT_BUF_STATIC) {                     /* the struct may come back as another buffer (key.c) */
    gt_static_frees++;
    freed_log[gt_static_frees % FREED_LOG].lo = b->addr;
    freed_log[gt_static_frees % FREED_LOG].hi = b->addr + (b->bytes ? b->bytes : 1);
    if (g_rt) g_rt->lane.n = 0;                       /* the replay lane closes (predict.c: it trusted the statics kept) */
  }
  free(b);
}

/* During a tree call a launch may be queued on b: what would free its
   memory waits until the queue has run (gt_buf_settle). */
static int later(gt_runtime *rt, gt_buf *b, int unref) {
  gt_later *l = &rt->later[unref];
  if (GT_GROW(l->b, l->cap, l->n + 1)) return 0;   /* out of host memory: settle now */
  l->b[l->n++] = b;
  return 1;
}

void gt_buf_settle(gt_runtime *rt) {
  gt_later *r = &rt->later[0], *u = &rt->later[1];
  for (int i = 0; i < r->n; i++) if (r->b[i]->flags & GT_BUF_RELEASED) return_memory(r->b[i]);
  for (int i = 0; i < u->n; i++) gt_buf_unref(u->b[i]);
  r->n = u->n = 0;
}

/* One Lua handle of b was collected. */
void gt_buf_release(gt_buf *b) {
  if (b->flags & GT_BUF_SLAB) return;
  if (g_rt && g_rt->active && later(g_rt, b, 1)) return;
  gt_buf_unref(b);
}

/* b's ordinary memory goes back to the allocator now, or (in a tree call)
   once the queued launches that may use it have run. */
void gt_buf_return(gt_runtime *rt, gt_buf *b) {
  if (!rt->active || !later(rt, b, 0)) return_memory(b);
}

/* The tree struct lives while buffers point at it (their generation is its
   field); gt_tree_free has released everything else. */
void gt_tree_unref(gt_tree *t) {
  if (--t->refs > 0) return;
  free(t->name); free(t->where);
  free(t);
}

int gt_buf_check(gt_runtime *rt, gt_buf *b, uint64_t off, uint64_t bytes, const char *what) {
  if (!b->addr) return gt_fail(rt, "%s: the tensor has no memory (its segment never ran)", what);
  if (off + bytes > b->bytes) return gt_fail(rt, "%s: %llu bytes at offset %llu exceed the buffer's %llu bytes", what,
                                             (unsigned long long)bytes, (unsigned long long)off, (unsigned long long)b->bytes);
  return GT_OK;
}
