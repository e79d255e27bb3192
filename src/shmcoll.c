/* shmcoll.c - collectives across the ranks of one host through POSIX shared
   memory: the cpu backend's stand-in for NCCL (as Gloo is PyTorch's).

   The segment holds a header (each rank's pid, state, barrier count and the
   collective it is in) and one slot of data per rank.  A collective is a
   loop over chunks of at most a slot: each rank writes its part into its
   slot and arrives at a barrier; then it checks that every rank is in the
   same collective (kind, dtype, count, op, root), computes its result from
   all the slots and arrives at a second barrier, after which the slots may
   be written again.  A barrier is a count per rank (rank r has arrived at
   barrier s when its count is >= s) and one futex word bumped on every
   arrival; a waiter wakes at least every 50 ms to see whether a missing rank
   has ended or died, and gives up after the timeout.  So a collective never
   hangs: it completes, or every rank that waits gets an error. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "shmcoll.h"
#include "util.h"
#include "half.h"

#define MAGIC 0x6774636fu
#define SLOT_DEFAULT (8u << 20)

enum { R_NONE = 0, R_JOINED = 1, R_ENDED = 2 };

typedef struct {
  _Atomic int32_t pid, state;
  _Atomic uint64_t seq;       /* barriers arrived at */
  uint64_t ncoll;             /* collectives begun */
  gt_coll c;                  /* the collective it is in */
  char pad[8];
} rank_rec;

typedef struct {
  _Atomic uint32_t magic;
  _Atomic uint32_t gen;       /* the futex word: bumped on every arrival */
  int32_t world;
  uint32_t pad;
  uint64_t slot;              /* bytes of each rank's slot */
  rank_rec r[];
} shm_hdr;

struct gt_shmc {
  shm_hdr *h;
  size_t map_bytes;
  unsigned char *data;        /* world slots */
  int rank, world;
  uint64_t seq, ncoll;
  double timeout;
  char name[256];
};

static size_t hdr_bytes(int world) { return (sizeof(shm_hdr) + (size_t)world * sizeof(rank_rec) + 4095) & ~(size_t)4095; }

static void fwake(_Atomic uint32_t *w) { syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0); }
static void fwait(_Atomic uint32_t *w, uint32_t v, long ns) {
  struct timespec ts = { 0, ns };
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, NULL, 0);
}

/* Whether process pid is gone (or a zombie nobody reaped yet). */
static int pid_dead(int pid) {
  char path[64], st[256];
  if (pid <= 0) return 0;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(st, 1, sizeof st - 1, f);
  fclose(f);
  st[n] = '\0';
  const char *p = strrchr(st, ')');
  return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

const char *gt_coll_describe(const gt_coll *c, char *buf, size_t len) {
  static const char *const kinds[] = { "all_reduce", "all_gather", "reduce_scatter", "broadcast", "the path check" };
  static const char *const ops[] = { "sum", "max", "min" };
  static const char *const dts[] = { "?", "f32", "i32", "i64", "u8", "f64", "u32", "u64", "f16", "bf16" };
  const char *k = c->kind >= 0 && c->kind <= 4 ? kinds[c->kind] : "?", *d = c->dtype >= 0 && c->dtype <= 9 ? dts[c->dtype] : "?";
  if (c->kind == GT_COLL_ALL_REDUCE || c->kind == GT_COLL_REDUCE_SCATTER)
    snprintf(buf, len, "%s (%s) of %llu %s", k, c->op >= 0 && c->op <= 2 ? ops[c->op] : "?", (unsigned long long)c->count, d);
  else if (c->kind == GT_COLL_BROADCAST) snprintf(buf, len, "%s from rank %d of %llu %s", k, c->root, (unsigned long long)c->count, d);
  else if (c->kind == GT_COLL_CHECK) snprintf(buf, len, "%s", c->op ? "gt.dist.barrier" : "the path check of a tree's segment");
  else snprintf(buf, len, "%s of %llu %s", k, (unsigned long long)c->count, d);
  return buf;
}

/* -- The barrier ----------------------------------------------------------- */

/* Names in err why rank k is missing at barrier seq; 1 when it is certain it never comes. */
static int missing(gt_shmc *s, int k, uint64_t seq, double waited, char *err, size_t errlen, const char *what) {
  rank_rec *r = &s->h->r[k];
  int st = atomic_load(&r->state), dead = st == R_JOINED && pid_dead(atomic_load(&r->pid));
  if (atomic_load(&r->seq) >= seq) return 0;   /* (it arrived, and may have gone on and ended, since we looked) */
  if (st == R_ENDED) {
    snprintf(err, errlen, "gt.dist: rank %d ended its program while rank %d waits in %s", k, s->rank, what);
    return 1;
  }
  if (dead) {
    snprintf(err, errlen, "gt.dist: rank %d died (its process is gone) while rank %d waits in %s", k, s->rank, what);
    return 1;
  }
  if (waited > s->timeout) {
    snprintf(err, errlen, "gt.dist: rank %d waited %.0f s in %s for rank %d, which has not arrived "
             "(it runs something else, or is stuck; GTLUA_DIST_TIMEOUT sets the wait)", s->rank, waited, what, k);
    return 1;
  }
  return 0;
}

/* Arrives at the next barrier and waits for every rank (or fails naming one that never comes). */
static int barrier(gt_shmc *s, char *err, size_t errlen, const char *what) {
  shm_hdr *h = s->h;
  uint64_t seq = ++s->seq;
  double t0 = gt_now_us();
  atomic_store(&h->r[s->rank].seq, seq);
  atomic_fetch_add(&h->gen, 1);
  fwake(&h->gen);
  for (int spins = 0;; spins++) {
    uint32_t g = atomic_load(&h->gen);
    int k = 0;
    while (k < s->world && atomic_load(&h->r[k].seq) >= seq) k++;
    if (k == s->world) return 0;
    if (spins < 64) continue;
    if (missing(s, k, seq, (gt_now_us() - t0) * 1e-6, err, errlen, what)) return -1;
    fwait(&h->gen, g, 50000000L);
  }
}

/* -- Joining ----------------------------------------------------------------- */

static int map_segment(gt_shmc *s, int fd, size_t bytes, char *err, size_t errlen) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    snprintf(err, errlen, "gt.dist: cannot map the shared segment %s (%s)", s->name, strerror(errno));
    return -1;
  }
  s->h = p;
  s->map_bytes = bytes;
  return 0;
}

static int create_segment(gt_shmc *s, uint64_t slot, char *err, size_t errlen) {
  size_t bytes = hdr_bytes(s->world) + (size_t)s->world * slot;
  shm_unlink(s->name);   /* (a segment a crashed run of the same name left) */
  int fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
    snprintf(err, errlen, "gt.dist: cannot create the shared segment %s of %zu bytes (%s)", s->name, bytes, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  int rc = map_segment(s, fd, bytes, err, errlen);
  close(fd);
  if (rc) return rc;
  s->h->world = s->world;
  s->h->slot = slot;
  atomic_store(&s->h->magic, MAGIC);
  return 0;
}

/* Opens rank 0's segment once it is there and ready. */
static int attach_segment(gt_shmc *s, char *err, size_t errlen) {
  double t0 = gt_now_us();
  for (;;) {
    int fd = shm_open(s->name, O_RDWR, 0600);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size > hdr_bytes(s->world)) {
      int rc = map_segment(s, fd, (size_t)st.st_size, err, errlen);
      close(fd);
      if (rc) return rc;
      if (atomic_load(&s->h->magic) == MAGIC) break;
      munmap(s->h, s->map_bytes);
      s->h = NULL;
    } else if (fd >= 0) {
      close(fd);
    }
    if ((gt_now_us() - t0) * 1e-6 > s->timeout) {
      snprintf(err, errlen, "gt.dist: rank %d waited %.0f s for rank 0 to create %s (is rank 0 running, with the same MASTER_ADDR and MASTER_PORT?)",
               s->rank, s->timeout, s->name);
      return -1;
    }
    usleep(5000);
  }
  if (s->h->world != s->world) {
    snprintf(err, errlen, "gt.dist: rank %d has WORLD_SIZE=%d but rank 0 has %d", s->rank, s->world, s->h->world);
    return -1;
  }
  return 0;
}

int gt_shmc_open(gt_shmc **out, const char *name, int rank, int world, double timeout, char *err, size_t errlen) {
  gt_shmc *s = calloc(1, sizeof *s);
  const char *e = getenv("GTLUA_DIST_SLOT");
  uint64_t slot = e && *e ? strtoull(e, NULL, 10) : SLOT_DEFAULT;
  if (!s) { snprintf(err, errlen, "gt.dist: out of host memory"); return -1; }
  snprintf(s->name, sizeof s->name, "%s", name);
  s->rank = rank, s->world = world, s->timeout = timeout;
  if (slot < 64) slot = 64;
  slot = (slot + 63) & ~(uint64_t)63;
  if ((rank == 0 ? create_segment(s, slot, err, errlen) : attach_segment(s, err, errlen)) != 0) {
    if (s->h) munmap(s->h, s->map_bytes);
    free(s);
    return -1;
  }
  s->data = (unsigned char *)s->h + hdr_bytes(world);
  atomic_store(&s->h->r[rank].pid, (int32_t)getpid());
  atomic_store(&s->h->r[rank].state, R_JOINED);
  if (barrier(s, err, errlen, "gt.dist.init (all ranks joining)") != 0) {
    gt_shmc_close(s);
    return -1;
  }
  if (rank == 0) shm_unlink(s->name);   /* everyone has it mapped: nothing is left behind */
  *out = s;
  return 0;
}

void gt_shmc_close(gt_shmc *s) {
  if (!s) return;
  atomic_store(&s->h->r[s->rank].state, R_ENDED);
  atomic_fetch_add(&s->h->gen, 1);
  fwake(&s->h->gen);
  munmap(s->h, s->map_bytes);
  free(s);
}

/* -- Collectives ------------------------------------------------------------ */

#define RED_LOOP(T)                                                                              \
  do {                                                                                           \
    T *d = dst; const T *x = src;                                                                \
    if (op == GT_RED_SUM) for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] + x[i]);               \
    else if (op == GT_RED_MAX) for (size_t i = 0; i < n; i++) d[i] = x[i] > d[i] ? x[i] : d[i]; \
    else for (size_t i = 0; i < n; i++) d[i] = x[i] < d[i] ? x[i] : d[i];                       \
  } while (0)

/* f16 and bf16 through f32, rounded back to nearest even (as a GPU's half add). */
static void reduce_half(uint16_t *d, const uint16_t *x, size_t n, int bf, int op) {
  for (size_t i = 0; i < n; i++) {
    float a = bf ? gt_bf16_to_f32(d[i]) : gt_f16_to_f32(d[i]), b = bf ? gt_bf16_to_f32(x[i]) : gt_f16_to_f32(x[i]);
    float r = op == GT_RED_SUM ? a + b : op == GT_RED_MAX ? (b > a ? b : a) : (b < a ? b : a);
    d[i] = bf ? gt_f32_to_bf16(r) : gt_f32_to_f16(r);
  }
}

/* dst[i] = dst[i] op src[i], n elements of dtype. */
static void reduce_into(void *dst, const void *src, size_t n, int dtype, int op) {
  switch (dtype) {
  case GT_F16: case GT_BF16: reduce_half(dst, src, n, dtype == GT_BF16, op); break;
  case GT_F32: RED_LOOP(float); break;
  case GT_F64: RED_LOOP(double); break;
  case GT_I32: RED_LOOP(int32_t); break;
  case GT_I64: RED_LOOP(int64_t); break;
  case GT_U32: RED_LOOP(uint32_t); break;
  case GT_U64: RED_LOOP(uint64_t); break;
  default: RED_LOOP(uint8_t); break;
  }
}

/* Every rank's collective equals rank 0's, else err names the first rank
   that differs (the same message on every rank). */
static int same_everywhere(gt_shmc *s, char *err, size_t errlen) {
  char a[96], b[96];
  const gt_coll *c = &s->h->r[0].c;
  for (int k = 1; k < s->world; k++) {
    const gt_coll *o = &s->h->r[k].c;
    if (o->kind == c->kind && o->dtype == c->dtype && o->count == c->count && o->op == c->op && o->root == c->root) continue;
    snprintf(err, errlen, "gt.dist: collective #%llu differs across ranks: rank 0 runs %s, rank %d runs %s "
             "(every rank must run the same collectives in the same order, on tensors of the same shape and dtype)",
             (unsigned long long)s->ncoll, gt_coll_describe(c, a, sizeof a), k, gt_coll_describe(o, b, sizeof b));
    return -1;
  }
  return 0;
}

/* Chunk [e0, e0 + m) of each rank's piece: in, then out. */
static void chunk_in(gt_shmc *s, const gt_coll *c, const unsigned char *src, uint64_t e0, uint64_t m, int es) {
  unsigned char *mine = s->data + (size_t)s->rank * s->h->slot;
  if (c->kind == GT_COLL_REDUCE_SCATTER)
    for (int k = 0; k < s->world; k++) memcpy(mine + (size_t)k * m * es, src + ((size_t)k * c->count + e0) * es, m * es);
  else if (c->kind != GT_COLL_BROADCAST || s->rank == c->root)
    memcpy(mine, src + e0 * es, m * es);
}

static void chunk_out(gt_shmc *s, const gt_coll *c, unsigned char *dst, uint64_t e0, uint64_t m, int es) {
  size_t slot = s->h->slot, piece = (size_t)m * es;
  const unsigned char *base = s->data;
  switch (c->kind) {
  case GT_COLL_BROADCAST: if (s->rank != c->root) memcpy(dst + e0 * es, base + (size_t)c->root * slot, piece); break;
  case GT_COLL_ALL_GATHER: case GT_COLL_CHECK:
    for (int k = 0; k < s->world; k++) memcpy(dst + ((size_t)k * c->count + e0) * es, base + (size_t)k * slot, piece);
    break;
  default: {   /* all-reduce, reduce-scatter: rank order, so every rank's sum is the same number */
    size_t off = c->kind == GT_COLL_REDUCE_SCATTER ? (size_t)s->rank * piece : 0;
    memcpy(dst + e0 * es, base + off, piece);
    for (int k = 1; k < s->world; k++) reduce_into(dst + e0 * es, base + (size_t)k * slot + off, m, c->dtype, c->op);
  }
  }
}

int gt_shmc_run(gt_shmc *s, const gt_coll *c, void *dst, const void *src, char *err, size_t errlen) {
  int es = gt_coll_esize(c->dtype);
  char what[160], d[96];
  uint64_t per = s->h->slot / (uint64_t)(es ? es : 1) / (c->kind == GT_COLL_REDUCE_SCATTER ? (uint64_t)s->world : 1);
  snprintf(what, sizeof what, "collective #%llu (%s)", (unsigned long long)++s->ncoll, gt_coll_describe(c, d, sizeof d));
  s->h->r[s->rank].c = *c;
  s->h->r[s->rank].ncoll = s->ncoll;
  uint64_t e0 = 0;
  do {   /* (count 0 still meets the others once, so a mismatch is seen) */
    uint64_t m = c->count - e0 < per ? c->count - e0 : per;
    chunk_in(s, c, src, e0, m, es);
    if (barrier(s, err, errlen, what)) return -1;
    if (same_everywhere(s, err, errlen)) {   /* every rank sees it: all leave after one more barrier, */
      char e2[8];                            /* so that no rank's next collective overwrites what the others read */
      return barrier(s, e2, sizeof e2, what), -1;
    }
    chunk_out(s, c, dst, e0, m, es);
    if (barrier(s, err, errlen, what)) return -1;
    e0 += m;
  } while (e0 < c->count);
  return 0;
}
