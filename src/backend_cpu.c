/* backend_cpu.c - cpu backend: kernels built by the host C++ compiler, run by a thread pool + fibers. */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>
#include "backend.h"
#include "cpu_prelude.h"
#include "shmcoll.h"
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>   /* fiber stacks are announced to valgrind */
#endif
#endif
#ifndef VALGRIND_STACK_REGISTER
#define VALGRIND_STACK_REGISTER(lo, hi) 0u
#define VALGRIND_STACK_DEREGISTER(id) (void)(id)
#endif

const char *gt_cpu_prelude_text(void); /* cpu_prelude.h's text (scripts/embed.sh) */

#define CPU_GRAN ((size_t)64 << 10)    /* commit granularity */
#define CPU_STACK ((size_t)192 << 10)  /* per fiber: 128 KiB of stack above the guard */
#define CPU_GUARD ((size_t)64 << 10)   /* lowest part of each fiber stack: no access (any page size) */
#define CPU_ALTSTACK ((size_t)64 << 10) /* signal stack of each thread that runs kernels */
#define CPU_MAX_THREADS 1024           /* per block */
#define CPU_MAX_WORKERS 64
#define CPU_MAX_SMEM (227u << 10)      /* dynamic shared bytes per block: the largest CUDA devices' limit */
#define CPU_PATH 4096
#define CPU_DIR (CPU_PATH - 128)       /* room for a cache file name after it */

/* -- Types -------------------------------------------------------------- */

struct gt_bmodule { void *so; int fibers, n; struct gt_bfunc *fns; }; /* fibers: source names a barrier */
struct gt_bfunc {
  gt_cpu_entry entry;
  gt_bmodule *mod;
  char name[64];
  int nparams;
  uint8_t *argsz;     /* bytes of each parameter's value, then nparams ptype codes */
  char **pname;       /* parameter names (one allocation with the texts) */
};
/* copied nodes: args point at their own values; match: conditional structure
   (IF -> its ELSE or END, WHILE and ELSE -> END, END -> IF/WHILE), iters: a WHILE's passes */
struct gt_bgraph { int n; gt_gnode *nodes; int *match, *iters; uint64_t bytes; };
struct gt_bevent { double t; };

typedef struct cpu_job {
  const struct gt_bfunc *fn;
  unsigned grid[3], block[3], smem;
  void **args;
  uint64_t nblocks;
  atomic_uint_fast64_t next;   /* next block index to take */
  atomic_int misuse;           /* a barrier was called in loop mode */
  atomic_int fault;            /* a block faulted; the first fault's details follow */
  int fsig, fcode, fwr, fstack;   /* fwr: 1 write, 0 read, -1 unknown; fstack: a stack overflowed */
  uintptr_t faddr;
  gt_cpu_dim fbid, ftid;
} cpu_job;

typedef struct cpu_worker cpu_worker;
static void fiber_main(cpu_worker *w);

/* -- Fiber context switch ----------------------------------------------- */

#if defined(__x86_64__) && !defined(GT_CPU_UCONTEXT)
typedef struct { void *sp; } cpu_fctx;
void gt_cpu_switch(void **save, void *to) __attribute__((visibility("hidden")));
void gt_cpu_fiber_start(void) __attribute__((visibility("hidden")));
__asm__(".text\n.globl gt_cpu_switch\n.hidden gt_cpu_switch\n.type gt_cpu_switch,@function\n"
        "gt_cpu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
        ".size gt_cpu_switch, .-gt_cpu_switch\n"
        ".globl gt_cpu_fiber_start\n.hidden gt_cpu_fiber_start\n.type gt_cpu_fiber_start,@function\n"
        "gt_cpu_fiber_start:\n  movq %r13, %rdi\n  callq *%r12\n  ud2\n"
        ".size gt_cpu_fiber_start, .-gt_cpu_fiber_start\n");

static void fctx_switch(cpu_fctx *from, cpu_fctx *to) { gt_cpu_switch(&from->sp, to->sp); }
/* The first switch pops zeroed callee-saved registers (r12 = fiber_main,
   r13 = w) and returns into gt_cpu_fiber_start with a 16-aligned stack. */
static void fctx_make(cpu_fctx *c, char *stack, size_t size, cpu_worker *w) {
  uint64_t *sp = (uint64_t *)((uintptr_t)(stack + size) & ~(uintptr_t)15) - 9;
  memset(sp, 0, 9 * sizeof *sp);
  sp[2] = (uint64_t)(uintptr_t)w;
  sp[3] = (uint64_t)(uintptr_t)fiber_main;
  sp[6] = (uint64_t)(uintptr_t)gt_cpu_fiber_start;
  c->sp = sp;
}
#else
#include <ucontext.h>
typedef struct { ucontext_t uc; } cpu_fctx;
static _Thread_local cpu_worker *fctx_worker;
static void fctx_entry(void) { fiber_main(fctx_worker); }
static void fctx_switch(cpu_fctx *from, cpu_fctx *to) { swapcontext(&from->uc, &to->uc); }
static void fctx_make(cpu_fctx *c, char *stack, size_t size, cpu_worker *w) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack, c->uc.uc_stack.ss_size = size, c->uc.uc_link = NULL;
  fctx_worker = w;
  makecontext(&c->uc, fctx_entry, 0);
}
#endif

enum { FIB_NEW, FIB_LIVE, FIB_DONE };
typedef struct cpu_fiber { cpu_fctx ctx; int state, next, prev; unsigned vg; gt_cpu_dim tid; } cpu_fiber;

struct cpu_worker {
  gt_cpu_ctx ctx;               /* first member: the callbacks cast it back */
  struct cpu_backend *cb;
  pthread_t thread;
  cpu_job *job;
  int nthreads, cur, live;      /* threads of the block, running fiber, unfinished fibers */
  cpu_fctx main;                /* the worker's own stack */
  cpu_fiber *fib;               /* fib_cap fibers; the unfinished ones form a ring in block order */
  char *stacks, *smem;
  sigjmp_buf fault_jmp;         /* set while the worker runs blocks: a fault returns here */
  int fib_cap;
  size_t smem_cap;
  unsigned long long xchg[CPU_MAX_THREADS];   /* one warp-exchange slot per thread */
};

typedef struct cpu_backend {
  int nworkers, started;        /* workers (w[0] is the launching thread), helpers running */
  cpu_worker *w;
  pthread_mutex_t launch_mu;    /* one launch or graph at a time */
  pthread_mutex_t mu;           /* guards the fields below */
  pthread_cond_t wake, done;
  cpu_job *job;
  int tickets, busy, quit;      /* helpers still to join / still running / exit */
  char cxx[128];
  uint64_t prelude_hash;
  int cache;                    /* 0: not yet looked at, 1: cachedir is the kernel cache, -1: none (refused) */
  char cachedir[CPU_DIR];
  gt_shmc *coll;                     /* gt.dist's group (NULL: none joined) */
  int noexec;                        /* GTLUA_CPU_NOEXEC=1: graph launches run no kernels (host-cost profiling) */
} cpu_backend;

__attribute__((format(printf, 3, 4)))
static int cpu_fail(gt_backend *b, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->err, GT_ERRLEN, fmt, ap);
  va_end(ap);
  return code;
}

/* -- Memory ------------------------------------------------------------- */

static size_t round_gran(size_t n) { return (n + CPU_GRAN - 1) & ~(CPU_GRAN - 1); }

static int cpu_reserve(gt_backend *b, size_t bytes, uint64_t *base) {
  size_t want = round_gran(bytes), len = want + CPU_GRAN;
  char *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return cpu_fail(b, GT_BOOM, "cpu: reserving %zu bytes of address space failed (%s): the address space is used "
                    "up (ulimit -v, or many live trees), or the size is beyond it", bytes, strerror(errno));
  uintptr_t a = ((uintptr_t)p + CPU_GRAN - 1) & ~(uintptr_t)(CPU_GRAN - 1);   /* trim to alignment */
  if (a > (uintptr_t)p) munmap(p, a - (uintptr_t)p);
  if ((uintptr_t)p + len > a + want) munmap((char *)(a + want), (uintptr_t)p + len - (a + want));
  *base = a;
  return GT_BOK;
}

/* The memory the machine can still give (/proc/meminfo's MemAvailable), in
   bytes; 0 when it cannot be read. */
static uint64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[128];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  fclose(f);
  return (uint64_t)kb << 10;
}

/* Memory is reserved without swap accounting (MAP_NORESERVE: a pool may
   reserve far more than it uses), so the kernel would accept any commit and
   kill the process when it is touched: a commit larger than what the machine
   has available fails here instead, as cuMemCreate does on a GPU. */
static int cpu_commit(gt_backend *b, uint64_t addr, size_t bytes) {
  uint64_t avail = bytes >= ((size_t)64 << 20) ? mem_available() : 0;
  if (avail && bytes > avail) {
    char b1[GT_BYTES_LEN], b2[GT_BYTES_LEN];
    return cpu_fail(b, GT_BOOM, "cpu: committing %s at 0x%llx failed: the machine has %s available; "
                    "free memory or use smaller tensors.", gt_bytes(bytes, b1), (unsigned long long)addr, gt_bytes(avail, b2));
  }
  if (mprotect((void *)(uintptr_t)addr, bytes, PROT_READ | PROT_WRITE) == 0) return GT_BOK;
  char b1[GT_BYTES_LEN];
  return cpu_fail(b, GT_BOOM, "cpu: committing %s at 0x%llx failed (%s); free memory or use a smaller pool.",
                  gt_bytes(bytes, b1), (unsigned long long)addr, strerror(errno));
}

static int cpu_decommit(gt_backend *b, uint64_t addr, size_t bytes) {
  void *p = (void *)(uintptr_t)addr;
  if (madvise(p, bytes, MADV_DONTNEED) == 0 && mprotect(p, bytes, PROT_NONE) == 0) return GT_BOK;
  return cpu_fail(b, GT_BERR, "cpu: decommitting %zu bytes at 0x%llx failed (%s); pass a granularity-aligned range.",
                  bytes, (unsigned long long)addr, strerror(errno));
}

static int cpu_release(gt_backend *b, uint64_t base, size_t bytes) {
  if (munmap((void *)(uintptr_t)base, round_gran(bytes)) == 0) return GT_BOK;
  return cpu_fail(b, GT_BERR, "cpu: releasing %zu bytes at 0x%llx failed (%s); pass the range reserve returned.",
                  bytes, (unsigned long long)base, strerror(errno));
}

/* Addresses are host pointers; n == 0 may come with a null pointer. */
#define ADDR(a) ((void *)(uintptr_t)(a))
static int cpu_htod(gt_backend *b, uint64_t d, const void *s, size_t n) {
  (void)b; if (n) memcpy(ADDR(d), s, n); return GT_BOK; }
static int cpu_dtoh(gt_backend *b, void *d, uint64_t s, size_t n) {
  (void)b; if (n) memcpy(d, ADDR(s), n); return GT_BOK; }
static int cpu_dtod(gt_backend *b, uint64_t d, uint64_t s, size_t n) {
  (void)b; if (n) memmove(ADDR(d), ADDR(s), n); return GT_BOK; }
static int cpu_memset8(gt_backend *b, uint64_t d, uint8_t v, size_t n) {
  (void)b; if (n) memset(ADDR(d), v, n); return GT_BOK; }

/* -- Compile: source rewriting ------------------------------------------ */

static int is_ident(char c) { return c == '_' || isalnum((unsigned char)c); }
static int word_at(const char *src, const char *p, const char *w) {
  size_t n = strlen(w);
  return strncmp(p, w, n) == 0 && !is_ident(p[n]) && (p == src || !is_ident(p[-1]));
}
static const char *skip_space(const char *p) { while (isspace((unsigned char)*p)) p++; return p; }
static void put_quoted(FILE *f, const char *t) {   /* " 't'" for sh */
  fputs(" '", f);
  for (; *t; t++) *t == '\'' ? fputs("'\\''", f) : fputc(*t, f);
  fputc('\'', f);
}

/* `extern __shared__ T name[];` -> `T *name = (T *)gt_dyn_smem();` in a
   function, else `static gt_dyn_shared_<T> name;` (converts to T *), keeping
   the line count; __align__(..) / alignas(..) are dropped from T.  Returns
   the end of the declaration, or NULL when p does not start one. */
static const char *rewrite_dyn_shared(FILE *out, const char *src, const char *p, int in_function) {
  const char *q = skip_space(p + 6), *end, *br, *name, *ne;
  char type[256];
  size_t n = 0;
  if (!word_at(src, q, "__shared__") || !(end = strchr(q += 10, ';')) || !(br = memchr(q, '[', (size_t)(end - q))))
    return NULL;
  for (ne = br; ne > q && isspace((unsigned char)ne[-1]); ne--) {}
  for (name = ne; name > q && is_ident(name[-1]); name--) {}
  for (const char *t = q; t < name && n < sizeof type - 1; t++) {
    if (word_at(src, t, "__align__") || word_at(src, t, "alignas"))
      for (int depth = 0; t < name && (*t != ')' || --depth > 0); t++) depth += *t == '(';
    else type[n++] = isspace((unsigned char)*t) ? ' ' : *t;
  }
  type[n] = 0;
  if (name == ne || n == sizeof type - 1) return NULL;
  if (in_function) fprintf(out, "%s *%.*s = (%s *)gt_dyn_smem();", type, (int)(ne - name), name, type);
  else fprintf(out, "static gt_dyn_shared_<%s> %.*s;", type, (int)(ne - name), name);
  for (; p < end; p++) if (*p == '\n') fputc('\n', out);
  return end + 1;
}

/* The end of an `#include <cuda_fp16.h>` (or cuda_bf16.h, .hpp, "..." forms)
   starting at p, or NULL: the prelude gives what those headers declare, so
   the line is dropped (its newline kept). */
static const char *half_include(const char *p) {
  static const char *const names[] = { "cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h", "cuda_bf16.hpp" };
  const char *q = skip_space(p + 1), *eol = p + strcspn(p, "\n");
  if (strncmp(q, "include", 7)) return NULL;
  q = skip_space(q + 7);
  if (*q != '<' && *q != '"') return NULL;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    size_t n = strlen(names[i]);
    if (!strncmp(q + 1, names[i], n) && (q[n + 1] == '>' || q[n + 1] == '"') && q + n + 1 < eol) return eol;
  }
  return NULL;
}

/* The source with dynamic shared declarations rewritten (comments and
   literals are copied untouched), then one entry point per kernel. */
static void build_source(FILE *out, const char *src, const gt_ksig *sigs, int nsigs) {
  int depth = 0;
  uint64_t code = 0;   /* bit d: the brace at depth d opened code (after ')', or inside code) */
  for (const char *p = src, *r; *p;) {
    const char *start = p, *q = p;
    int in_code = depth > 0 && depth <= 64 && (code >> (depth - 1) & 1);
    if (p[0] == '/' && p[1] == '/') p += strcspn(p, "\n");
    else if (p[0] == '/' && p[1] == '*') p = strstr(p + 2, "*/") ? strstr(p + 2, "*/") + 2 : p + strlen(p);
    else if (*p == '"' || *p == '\'') {
      char qc = *p++;
      while (*p && *p != qc && *p != '\n') p += (p[0] == '\\' && p[1]) ? 2 : 1;
      p += *p == qc;
    } else if (*p == '{') {
      while (q > src && isspace((unsigned char)q[-1])) q--;
      if (depth < 64) code = (in_code || (q > src && q[-1] == ')')) ? code | 1ull << depth : code & ~(1ull << depth);
      depth++, p++;
    } else if (*p == '}') depth -= depth > 0, p++;
    else if (word_at(src, p, "extern") && (r = rewrite_dyn_shared(out, src, p, in_code))) { p = r; continue; }
    else if (*p == '#' && (r = half_include(p))) { p = r; continue; }
    else p += 1 + strcspn(p + 1, "/\"'e{}#");
    fwrite(start, 1, (size_t)(p - start), out);
  }
  fputs("\n#line 1 \"<gtlua cpu entry points>\"\n", out);
  for (int i = 0; i < nsigs; i++) fprintf(out, "GT_CPU_ENTRY(gt_entry_%d, %s)\n", i, sigs[i].name);
}

static int uses_fibers(const char *src) {
  static const char *const words[] = {"__syncthreads", "__syncwarp", "__shfl_", "__ballot_sync",
                                      "__any_sync", "__all_sync"};
  for (size_t i = 0; i < sizeof words / sizeof *words; i++) if (strstr(src, words[i])) return 1;
  return 0;
}

/* Extra options: host-compiler ones pass, NVRTC-only ones are dropped. */
static void put_opts(FILE *f, const char *opts) {
  char tok[512];
  for (const char *p = opts ? opts : ""; *(p = skip_space(p));) {
    size_t n = strcspn(p, " \t\r\n");
    snprintf(tok, sizeof tok, "%.*s", (int)n, p);
    p += n;
    if (!strcmp(tok, "--use_fast_math") || !strcmp(tok, "-use_fast_math")) fputs(" -ffast-math", f);
    else if (tok[0] == '-' && tok[1] && strchr("DUIOfgWw", tok[1]) && strncmp(tok, "-fmad", 5) &&
             strncmp(tok, "-ftz", 4))
      put_quoted(f, tok);
  }
}

/* -- Compile: cache and compiler ---------------------------------------- */

static int write_file(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fchmod(fileno(f), 0644) == 0 && fwrite(text, 1, n, f) == n;   /* whatever the umask: see gt_cache_file_ok */
  return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* The whole of a (small) file in *buf (the caller frees it); -1 when it
   cannot be read, or (mine) is not a file of ours that only we can write. */
static int read_file(const char *path, int mine, char **buf, size_t *n) {
  FILE *f = fopen(path, "rb");
  long len = -1;
  *buf = NULL;
  if (f && (!mine || gt_cache_file_ok(fileno(f)) == 0) && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && len < (1l << 30) && fseek(f, 0, SEEK_SET) == 0 &&
      (*buf = malloc((size_t)len + 1)) && fread(*buf, 1, (size_t)len, f) == (size_t)len) {
    fclose(f);
    *n = (size_t)len;
    return 0;
  }
  if (f) fclose(f);
  free(*buf), *buf = NULL;
  return -1;
}

/* A cached shared object ends with a trailer holding gt_hash64 of the bytes
   before it (the loader ignores bytes past the ELF contents), so an entry is
   one file, renamed into place whole, and a damaged or foreign one is a miss. */
#define SO_TRAILER_LEN 29
static void so_trailer(char out[SO_TRAILER_LEN + 1], const char *bytes, size_t n) {
  snprintf(out, SO_TRAILER_LEN + 1, "\ngtlua-so-1 %016llx\n",
           (unsigned long long)gt_hash64(bytes, n, 0x67747368656b31ull));   /* "gtshek1" */
}

/* 0 when so is a whole entry of ours: its trailer matches its bytes. */
static int so_verified(const char *so) {
  char *bytes, want[SO_TRAILER_LEN + 1];
  size_t n;
  if (read_file(so, 1, &bytes, &n) != 0) return -1;
  int ok = n > SO_TRAILER_LEN;
  if (ok) so_trailer(want, bytes, n - SO_TRAILER_LEN);
  ok = ok && !memcmp(bytes + n - SO_TRAILER_LEN, want, SO_TRAILER_LEN);
  free(bytes);
  return ok ? 0 : -1;
}

/* Appends the trailer to the compiler's output (not yet in place). */
static int so_seal(const char *tmp) {
  char *bytes, trailer[SO_TRAILER_LEN + 1];
  size_t n;
  if (read_file(tmp, 0, &bytes, &n) != 0) return -1;
  so_trailer(trailer, bytes, n);
  free(bytes);
  FILE *f = fopen(tmp, "ab");
  if (!f) return -1;
  int ok = fchmod(fileno(f), 0755) == 0 && fwrite(trailer, 1, SO_TRAILER_LEN, f) == SO_TRAILER_LEN;
  return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* 0 when path holds exactly text (the prelude: it is compiled into every kernel). */
static int same_file(const char *path, const char *text) {
  char *bytes;
  size_t n;
  if (read_file(path, 1, &bytes, &n) != 0) return -1;
  int same = n == strlen(text) && !memcmp(bytes, text, n);
  free(bytes);
  return same ? 0 : -1;
}

static atomic_uint cpu_tmp_seq;
static void tmp_name(char *out, const char *dir, uint64_t h, const char *ext) {
  snprintf(out, CPU_PATH, "%s/%016llx.%ld.%u.tmp%s", dir, (unsigned long long)h, (long)getpid(),
           atomic_fetch_add(&cpu_tmp_seq, 1), ext);
}

/* Compiles text into so, sealed with its trailer, atomically (temp file +
   rename); on failure GT_BERR with the compiler's log and no file left behind. */
static int run_compiler(gt_backend *b, const char *dir, const char *text, size_t n, const char *flags,
                        const char *so, uint64_t h) {
  cpu_backend *cb = b->impl;
  char src[CPU_PATH], tmp[CPU_PATH], pre[CPU_PATH], ptmp[CPU_PATH], log[GT_ERRLEN], *cmd = NULL;
  size_t cmdlen, loglen = 0;
  snprintf(pre, sizeof pre, "%s/prelude-%016llx.h", dir, (unsigned long long)cb->prelude_hash);
  tmp_name(src, dir, h, ".cpp"), tmp_name(tmp, dir, h, ".so"), tmp_name(ptmp, dir, h, ".h");
  const char *prelude = gt_cpu_prelude_text();
  if ((same_file(pre, prelude) != 0 && (write_file(ptmp, prelude, strlen(prelude)) != 0 || rename(ptmp, pre) != 0)) ||
      write_file(src, text, n) != 0) {
    int e = errno;
    unlink(ptmp), unlink(src);
    return cpu_fail(b, GT_BERR, "cpu: cannot write to the kernel cache %s (%s); check its permissions or "
                    "set GTLUA_CACHE.", dir, strerror(e));
  }
  FILE *f = open_memstream(&cmd, &cmdlen), *pp = NULL;
  if (f) {
    fprintf(f, "%s -std=c++17 -O2 -fPIC -shared -w -fvisibility=hidden -fno-strict-aliasing -fno-math-errno -include",
            cb->cxx);
    put_quoted(f, pre), fputs(flags, f), fputs(" -x c++", f), put_quoted(f, src);
    fputs(" -o", f), put_quoted(f, tmp), fputs(" 2>&1", f);
    pp = fclose(f) == 0 ? popen(cmd, "r") : NULL;
  }
  int st = -1, e = errno;
  if (pp) {
    loglen = fread(log, 1, sizeof log - 1, pp);   /* keep the start of the log, drain the rest */
    while (fgetc(pp) != EOF) {}
    st = pclose(pp);
  }
  log[loglen] = 0;
  free(cmd);
  unlink(src);
  int rc = GT_BOK;
  if (st == -1)
    rc = cpu_fail(b, GT_BERR, "cpu: cannot start the C++ compiler '%s' (%s); install g++ or set GTLUA_CXX.",
                  cb->cxx, strerror(e));
  else if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
    rc = cpu_fail(b, GT_BERR, "cpu: cannot run the C++ compiler '%s'; install g++ or set GTLUA_CXX:\n%s", cb->cxx, log);
  else if (st != 0)
    rc = cpu_fail(b, GT_BERR, "cpu: kernel compile failed:\n%s", loglen ? log : "(no compiler output)");
  else if (so_seal(tmp) != 0 || rename(tmp, so) != 0)
    rc = cpu_fail(b, GT_BERR, "cpu: cannot store %s in the kernel cache (%s); check its permissions.",
                  so, strerror(errno));
  if (rc != GT_BOK) unlink(tmp);
  return rc;
}

void gt_backend_cpu_module_free(gt_backend *b, gt_bmodule *m) {
  (void)b;
  if (!m) return;
  for (int i = 0; i < m->n; i++) free(m->fns[i].argsz), free(m->fns[i].pname);
  free(m->fns);
  if (m->so) dlclose(m->so);
  free(m);
}

/* Loads so and binds fns[i] to sigs[i]'s entry point. */
static int load_module(gt_backend *b, const char *so, const char *src, const gt_ksig *sigs, int nsigs,
                       gt_bmodule **mod, gt_bfunc **fns) {
  gt_bmodule *m = calloc(1, sizeof *m);
  int rc = GT_BOK;
  if (!m || !(m->fns = calloc(nsigs > 0 ? (size_t)nsigs : 1, sizeof *m->fns))) {
    free(m);
    return cpu_fail(b, GT_BOOM, "cpu: out of host memory while loading kernels.");
  }
  m->fibers = uses_fibers(src);
  if (!(m->so = dlopen(so, RTLD_NOW | RTLD_LOCAL)))
    rc = cpu_fail(b, GT_BERR, "cpu: loading compiled kernels failed (%s); delete %s and retry.", dlerror(), so);
  for (int i = 0; i < nsigs && rc == GT_BOK; i++) {
    struct gt_bfunc *f = &m->fns[m->n++];
    char sym[32];
    snprintf(sym, sizeof sym, "gt_entry_%d", i);
    snprintf(f->name, sizeof f->name, "%s", sigs[i].name);
    f->entry = (gt_cpu_entry)dlsym(m->so, sym), f->mod = m, f->nparams = sigs[i].nparams;
    if (!f->entry || !(f->argsz = malloc(f->nparams > 0 ? 2 * (size_t)f->nparams : 1)))
      rc = cpu_fail(b, GT_BERR, "cpu: kernel '%s' is missing from %s; delete that file and retry.", f->name, so);
    for (int k = 0; rc == GT_BOK && k < f->nparams; k++) {
      uint8_t t = sigs[i].ptype[k];   /* pointers and 64-bit scalars: 8 bytes */
      f->argsz[k] = t == GT_P_BOOL ? 1 : (t == GT_P_I32 || t == GT_P_U32 || t == GT_P_F32) ? 4 : 8;
      f->argsz[f->nparams + k] = t;
    }
    if (rc == GT_BOK && sigs[i].pname && f->nparams > 0) {   /* names for fault messages */
      size_t len = (size_t)f->nparams * sizeof(char *);
      for (int k = 0; k < f->nparams; k++) len += strlen(sigs[i].pname[k]) + 1;
      char *t = (char *)(f->pname = malloc(len)) + (size_t)f->nparams * sizeof(char *);
      for (int k = 0; f->pname && k < f->nparams; k++) f->pname[k] = strcpy(t, sigs[i].pname[k]), t += strlen(t) + 1;
    }
    fns[i] = f;
  }
  if (rc != GT_BOK) gt_backend_cpu_module_free(b, m);
  else *mod = m;
  return rc;
}

/* The kernel cache's cpu/ directory in dir, or when the cache is refused a
   fresh private directory of its own (*scratch = 1) that the caller removes. */
static int cache_dir(gt_backend *b, char *dir, int *scratch) {
  cpu_backend *cb = b->impl;
  const char *tmp = getenv("TMPDIR");
  if (!cb->cache) cb->cache = gt_cache_subdir("cpu", cb->cachedir, sizeof cb->cachedir) == 0 ? 1 : -1;
  *scratch = cb->cache < 0;
  if (!*scratch) return snprintf(dir, CPU_DIR, "%s", cb->cachedir), GT_BOK;
  snprintf(dir, CPU_DIR, "%s/gtlua-nocache-XXXXXX", tmp && *tmp && strlen(tmp) < CPU_DIR - 64 ? tmp : "/tmp");
  if (!mkdtemp(dir))
    return cpu_fail(b, GT_BERR, "cpu: cannot create a directory to compile kernels in (%s: %s); set TMPDIR or "
                    "GTLUA_CACHE to a writable directory.", dir, strerror(errno));
  return GT_BOK;
}

static void remove_scratch(const char *dir) {
  char path[CPU_PATH];
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name), unlink(path);
  if (d) closedir(d);
  rmdir(dir);
}

/* A cached entry is loaded only from the checked cache directory and only
   when its trailer matches; anything else is a miss, compiled again. */
static int cpu_compile(gt_backend *b, const char *src, const char *opts, const gt_ksig *sigs, int nsigs,
                       gt_bmodule **mod, gt_bfunc **fns) {
  cpu_backend *cb = b->impl;
  char dir[CPU_DIR], so[CPU_PATH], *text = NULL, *flags = NULL;
  size_t ntext = 0, nflags = 0;
  int scratch = 0;
  FILE *ft = open_memstream(&text, &ntext), *ff = open_memstream(&flags, &nflags);
  if (ft) build_source(ft, src, sigs, nsigs);
  if (ff) put_opts(ff, opts), fputs(" -fstack-clash-protection", ff);   /* big frames touch the fiber stack guard */
  int oom = !ft || fclose(ft) != 0, rc = GT_BOK;
  oom |= !ff || fclose(ff) != 0;
  if (oom) rc = cpu_fail(b, GT_BOOM, "cpu: out of host memory while preparing a kernel source.");
  else rc = cache_dir(b, dir, &scratch);
  if (rc == GT_BOK) {
    uint64_t h = gt_hash64(text, ntext, 0x67746370753031ull);   /* "gtcpu01" */
    h = gt_hash64(flags, nflags, h ^ cb->prelude_hash);
    h = gt_hash64(cb->cxx, strlen(cb->cxx), h);
    snprintf(so, sizeof so, "%s/%016llx.so", dir, (unsigned long long)h);
    if (scratch || so_verified(so) != 0) rc = run_compiler(b, dir, text, ntext, flags, so, h);   /* else: cached */
  }
  free(text), free(flags);
  if (rc == GT_BOK) rc = load_module(b, so, src, sigs, nsigs, mod, fns);
  if (scratch) remove_scratch(dir);   /* a loaded object stays mapped */
  return rc;
}

/* -- Executor: fibers and warps ----------------------------------------- */

/* Suspends fiber `from` (-1: the worker's own stack) and runs `to` (-1: back
   to the worker); returns when some fiber switches back to `from`. */
static void fib_switch(cpu_worker *w, int from, int to) {
  cpu_fctx *dst = &w->main;
  if (to >= 0) {
    cpu_fiber *f = &w->fib[to];
    if (f->state == FIB_NEW)   /* stack tops staggered so that they do not share cache sets */
      fctx_make(&f->ctx, w->stacks + (size_t)to * CPU_STACK + CPU_GUARD,
                CPU_STACK - CPU_GUARD - (size_t)(to % 61) * 320, w);
    f->state = FIB_LIVE;
    dst = &f->ctx;
  }
  w->cur = to;
  fctx_switch(from >= 0 ? &w->fib[from].ctx : &w->main, dst);
  if (from >= 0) w->ctx.tid = w->fib[from].tid;
}

static void fiber_main(cpu_worker *w) {
  int me = w->cur;
  cpu_fiber *f = &w->fib[me];
  w->ctx.tid = f->tid;
  w->job->fn->entry(&w->ctx, w->job->args);
  f->state = FIB_DONE;
  w->fib[f->prev].next = f->next, w->fib[f->next].prev = f->prev;
  fib_switch(w, me, --w->live ? f->next : -1);
  abort();   /* a finished fiber is never resumed */
}

/* Barriers in loop mode are only right for one-thread blocks. */
static int loop_mode(cpu_worker *w) {
  if (w->ctx.fiber) return 0;
  if (w->nthreads > 1) atomic_store(&w->job->misuse, 1);
  return 1;
}

/* Fibers run round robin: a barrier hands over to the next unfinished fiber
   of its group (the block, or the warp's lanes in mask), so a fiber resumes
   from a barrier once every other member has reached it. */
static void cpu_sync(gt_cpu_ctx *c) {
  cpu_worker *w = (cpu_worker *)c;
  if (!loop_mode(w) && w->fib[w->cur].next != w->cur) fib_switch(w, w->cur, w->fib[w->cur].next);
}

static void warp_barrier(cpu_worker *w, unsigned mask) {
  int me = w->cur, base = me & ~31;
  for (int k = 1; k < 32; k++) {
    int lane = (me + k) & 31, j = base + lane;
    if (j < w->nthreads && (mask >> lane & 1) && w->fib[j].state != FIB_DONE) { fib_switch(w, me, j); return; }
  }
}

static void cpu_syncwarp(gt_cpu_ctx *c, unsigned mask) {
  if (!loop_mode((cpu_worker *)c)) warp_barrier((cpu_worker *)c, mask);
}

static unsigned long long cpu_shfl(gt_cpu_ctx *c, unsigned mask, unsigned long long v, int src) {
  cpu_worker *w = (cpu_worker *)c;
  if (loop_mode(w)) return v;
  int me = w->cur, j = (me & ~31) + (src & 31);
  w->xchg[me] = v;
  warp_barrier(w, mask);
  unsigned long long r = (j < w->nthreads && w->fib[j].state != FIB_DONE) ? w->xchg[j] : v;
  warp_barrier(w, mask);   /* nobody overwrites a slot before all have read it */
  return r;
}

/* mode 0: ballot, 1: any, 2: all, 3: active mask (no barrier). */
static unsigned cpu_vote(gt_cpu_ctx *c, unsigned mask, int pred, int mode) {
  cpu_worker *w = (cpu_worker *)c;
  gt_cpu_dim t = w->ctx.tid, d = w->ctx.bdim;
  int me = (int)(t.x + d.x * (t.y + d.y * t.z)), base = me & ~31;
  unsigned live = 0, yes = 0;
  if (mode != 3 && loop_mode(w)) {
    live = mask & 1u << (me & 31), yes = pred ? live : 0;
  } else {
    if (mode != 3) w->xchg[me] = pred != 0, warp_barrier(w, mask);
    for (int l = 0; l < 32 && base + l < w->nthreads; l++)
      if ((mask >> l & 1) && !(w->ctx.fiber && w->fib[base + l].state == FIB_DONE))
        live |= 1u << l, yes |= (mode != 3 && w->xchg[base + l]) ? 1u << l : 0;
    if (mode == 3) return live;
    warp_barrier(w, mask);
  }
  return mode == 0 ? yes : mode == 1 ? yes != 0 : yes == live;
}

/* -- Executor: faults --------------------------------------------------- */

/* A kernel that touches unmapped memory, divides an integer by zero or traps
   must not take the process with it: SIGSEGV/SIGBUS/SIGFPE/SIGILL on a thread
   that runs blocks (on its own signal stack: a fiber's stack may be what
   overflowed) records the fault in the job and jumps back to run_blocks; the
   launch then fails with a message.  Other faults go to the handler that was
   there before (or the default action: the process dies as it did). */
static const int cpu_fault_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
#define CPU_NSIGS ((int)(sizeof cpu_fault_sigs / sizeof *cpu_fault_sigs))
static struct sigaction cpu_old_act[CPU_NSIGS];
static pthread_mutex_t cpu_sig_mu = PTHREAD_MUTEX_INITIALIZER;
static int cpu_sig_users;                        /* open cpu backends */
static _Thread_local cpu_worker *cpu_running;   /* the worker this thread runs blocks for */
static _Thread_local int cpu_has_altstack;

static void chain_fault(int sig, siginfo_t *si, void *uc) {
  int i = 0;
  while (i < CPU_NSIGS - 1 && cpu_fault_sigs[i] != sig) i++;
  struct sigaction *o = &cpu_old_act[i];
  if ((o->sa_flags & SA_SIGINFO) && o->sa_sigaction) { o->sa_sigaction(sig, si, uc); return; }
  if (!(o->sa_flags & SA_SIGINFO) && o->sa_handler != SIG_DFL && o->sa_handler != SIG_IGN) { o->sa_handler(sig); return; }
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, NULL);   /* the faulting instruction runs again and ends the process as before */
  if (si->si_code <= 0) raise(sig);   /* sent by kill(): nothing repeats it */
}

static void on_fault(int sig, siginfo_t *si, void *uc) {
  cpu_worker *w = cpu_running;
  if (!w || si->si_code <= 0) { chain_fault(sig, si, uc); return; }
  cpu_running = NULL;
  cpu_job *j = w->job;
  int none = 0;
  if (atomic_compare_exchange_strong(&j->fault, &none, 1)) {
    j->fsig = sig, j->fcode = si->si_code, j->faddr = (uintptr_t)si->si_addr, j->fwr = -1;
    uintptr_t sp = 0;
#if defined(__x86_64__) && defined(REG_ERR)
    if (sig == SIGSEGV) j->fwr = (((ucontext_t *)uc)->uc_mcontext.gregs[REG_ERR] & 2) != 0;   /* page fault: W bit */
    sp = (uintptr_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RSP];
#endif
    /* a stack overflow: the stack pointer went below the running fiber's
       stack, the address is in its guard, or (no fiber) right at the stack pointer */
    uintptr_t lo = w->ctx.fiber && w->cur >= 0 ? (uintptr_t)w->stacks + (size_t)w->cur * CPU_STACK : 0;
    if (lo) j->fstack = (sp && sp < lo + CPU_GUARD + 256) || (j->faddr >= lo && j->faddr < lo + CPU_GUARD);
    else j->fstack = sp && j->faddr + (64u << 10) > sp && j->faddr < sp + (64u << 10);
    j->fbid = w->ctx.bid, j->ftid = w->ctx.tid;
  }
  atomic_store(&j->next, j->nblocks);   /* no worker starts another block */
  siglongjmp(w->fault_jmp, 1);
}

/* Installs the handlers for the first open backend; SA_NODEFER: the jump out
   of the handler leaves the signal unblocked without saving masks per launch. */
static void faults_catch(int on) {
  pthread_mutex_lock(&cpu_sig_mu);
  if (on && cpu_sig_users++ == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < CPU_NSIGS; i++) sigaction(cpu_fault_sigs[i], &sa, &cpu_old_act[i]);
  } else if (!on && --cpu_sig_users == 0) {
    for (int i = 0; i < CPU_NSIGS; i++) sigaction(cpu_fault_sigs[i], &cpu_old_act[i], NULL);
  }
  pthread_mutex_unlock(&cpu_sig_mu);
}

/* Gives this thread a signal stack unless it has one; it stays for the
   thread's life (helpers remove theirs when they end). */
static void altstack_ensure(void) {
  stack_t cur;
  if (!cpu_has_altstack) {   /* helpers start with every signal blocked: a blocked fault would kill the process */
    sigset_t faults;
    sigemptyset(&faults);
    for (int i = 0; i < CPU_NSIGS; i++) sigaddset(&faults, cpu_fault_sigs[i]);
    pthread_sigmask(SIG_UNBLOCK, &faults, NULL);
  }
  if (cpu_has_altstack || sigaltstack(NULL, &cur) != 0) return;
  if (!(cur.ss_flags & SS_DISABLE)) { cpu_has_altstack = 1; return; }
  void *p = mmap(NULL, CPU_ALTSTACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  stack_t ss = {.ss_sp = p, .ss_size = CPU_ALTSTACK, .ss_flags = 0};
  if (sigaltstack(&ss, NULL) == 0) cpu_has_altstack = 2;
  else munmap(p, CPU_ALTSTACK);
}

static void altstack_drop(void) {
  stack_t cur, off = {.ss_flags = SS_DISABLE};
  if (cpu_has_altstack != 2 || sigaltstack(NULL, &cur) != 0) return;
  if (sigaltstack(&off, NULL) == 0) munmap(cur.ss_sp, cur.ss_size);
  cpu_has_altstack = 0;
}

/* The launch's failure for a fault: what, where, and the parameter whose
   buffer the address is nearest to, then what the check cannot see. */
static int fault_fail(gt_backend *b, const struct gt_bfunc *fn, const cpu_job *j, void **args) {
  char what[160], near[384] = "";
  const char *acc = j->fwr == 1 ? "write" : j->fwr == 0 ? "read" : "access";
  if (j->fsig == SIGFPE)
    snprintf(what, sizeof what, "%s", j->fcode == FPE_INTDIV ? "an integer division by zero"
                                      : "an arithmetic fault (integer overflow in a division?)");
  else if (j->fsig == SIGILL)
    snprintf(what, sizeof what, "an illegal instruction (a trap: __trap(), assert, or unreachable code)");
  else
    snprintf(what, sizeof what, "an invalid memory %s at address 0x%llx (%s)", acc, (unsigned long long)j->faddr,
             j->fsig == SIGBUS ? "SIGBUS" : "SIGSEGV");
  if ((j->fsig == SIGSEGV || j->fsig == SIGBUS) && j->fstack)
    snprintf(near, sizeof near, ": a thread's stack overflowed (each thread of a kernel has %zu KiB on the cpu "
             "backend); use smaller local arrays", (CPU_STACK - CPU_GUARD) >> 10);
  else if ((j->fsig == SIGSEGV || j->fsig == SIGBUS) && j->faddr < 65536)
    snprintf(near, sizeof near, ": a null pointer (a parameter that is not a tensor, or an index far below 0?)");
  else if (j->fsig == SIGSEGV || j->fsig == SIGBUS) {
    int below = -1, above = -1, outs = 0;
    uint64_t db = UINT64_MAX, da = UINT64_MAX;
    for (int k = 0; k < fn->nparams; k++) outs += fn->argsz[fn->nparams + k] == GT_P_OUT;
    for (int k = 0; k < fn->nparams; k++) {   /* a write: only the buffers the kernel may write */
      uint8_t t = fn->argsz[fn->nparams + k];
      if (t != GT_P_OUT && (t != GT_P_IN || (j->fwr == 1 && outs))) continue;
      uint64_t v;
      memcpy(&v, args[k], 8);
      if (v <= j->faddr && j->faddr - v < db) db = j->faddr - v, below = k;
      if (v > j->faddr && v - j->faddr < da) da = v - j->faddr, above = k;
    }
    if (below >= 0 && db < (1ull << 36))
      snprintf(near, sizeof near, ", %llu bytes past the start of parameter '%s' (an index out of bounds?)",
               (unsigned long long)db, fn->pname ? fn->pname[below] : "?");
    else if (above >= 0 && da < (1ull << 30))
      snprintf(near, sizeof near, ", %llu bytes before the start of parameter '%s' (a negative index?)",
               (unsigned long long)da, fn->pname ? fn->pname[above] : "?");
    else snprintf(near, sizeof near, ", not near any buffer parameter (a wild pointer or index?)");
  }
  int mem = j->fsig == SIGSEGV || j->fsig == SIGBUS;
  b->fault_addr = mem ? j->faddr : 0;
  return cpu_fail(b, GT_BERR, "cpu: kernel '%s' made %s%s, in block (%u, %u, %u) thread (%u, %u, %u). The launch was "
                  "stopped (its outputs may be partly written); later launches work.%s", fn->name, what, near,
                  j->fbid.x, j->fbid.y, j->fbid.z, j->ftid.x, j->ftid.y, j->ftid.z, !mem ? "" :
                  " The cpu backend catches only accesses to unmapped memory: an overrun into a neighbouring buffer "
                  "goes unnoticed unless the buffer is over 1 MiB or GTLUA_CPU_CHECK=1 is set (every buffer then ends "
                  "at a guard page; buffers of tree calls are not guarded).");
}

/* -- Executor: blocks and the pool -------------------------------------- */

static void block_loop(cpu_worker *w, cpu_job *j) {
  int n = w->nthreads;
  for (uint64_t i; (i = atomic_fetch_add(&j->next, 1)) < j->nblocks;) {
    w->ctx.bid = (gt_cpu_dim){(unsigned)(i % j->grid[0]), (unsigned)(i / j->grid[0] % j->grid[1]),
                              (unsigned)(i / ((uint64_t)j->grid[0] * j->grid[1]))};
    if (!w->ctx.fiber) { j->fn->entry(&w->ctx, j->args); continue; }   /* the entry loops over threads */
    for (int k = 0; k < n; k++)
      w->fib[k].state = FIB_NEW, w->fib[k].next = (k + 1) % n, w->fib[k].prev = (k + n - 1) % n;
    w->live = n;
    fib_switch(w, -1, 0);
  }
}

static void run_blocks(cpu_worker *w, cpu_job *j) {
  int n = w->nthreads = (int)(j->block[0] * j->block[1] * j->block[2]);
  w->job = j;
  w->ctx.bdim = (gt_cpu_dim){j->block[0], j->block[1], j->block[2]};
  w->ctx.gdim = (gt_cpu_dim){j->grid[0], j->grid[1], j->grid[2]};
  w->ctx.tid = (gt_cpu_dim){0, 0, 0};
  w->ctx.fiber = j->fn->mod->fibers && n > 1;
  w->ctx.smem = w->smem;
  for (int k = 0; w->ctx.fiber && k < n; k++)
    w->fib[k].tid = (gt_cpu_dim){k % j->block[0], k / j->block[0] % j->block[1], k / (j->block[0] * j->block[1])};
  if (sigsetjmp(w->fault_jmp, 0) == 0) {   /* a fault comes back here, abandoning the block's fibers */
    cpu_running = w;
    block_loop(w, j);
  }
  cpu_running = NULL;
}

static void free_stacks(cpu_worker *w) {
  for (int i = 0; i < w->fib_cap; i++) VALGRIND_STACK_DEREGISTER(w->fib[i].vg);
  if (w->stacks) munmap(w->stacks, (size_t)w->fib_cap * CPU_STACK);
  free(w->fib);
  w->stacks = NULL, w->fib = NULL, w->fib_cap = 0;
}

/* Grows the worker's dynamic shared memory and fiber stacks (while idle). */
static int prepare(cpu_worker *w, size_t smem, int nfib) {
  if (!w->smem || smem > w->smem_cap) {
    size_t cap = smem ? (smem + 4095) & ~(size_t)4095 : 4096;
    char *p = aligned_alloc(64, cap);
    if (!p) return -1;
    free(w->smem);
    w->smem = p, w->smem_cap = cap;
  }
  if (nfib <= w->fib_cap) return 0;
  int cap = 64;
  while (cap < nfib) cap *= 2;
  char *s = mmap(NULL, (size_t)cap * CPU_STACK, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  cpu_fiber *f = calloc((size_t)cap, sizeof *f);
  if (s == MAP_FAILED || !f) {
    if (s != MAP_FAILED) munmap(s, (size_t)cap * CPU_STACK);
    free(f);
    return -1;
  }
  for (int i = 0; i < cap; i++) {
    char *lo = s + (size_t)i * CPU_STACK;
    mprotect(lo, CPU_GUARD, PROT_NONE);
    f[i].vg = VALGRIND_STACK_REGISTER(lo + CPU_GUARD, lo + CPU_STACK);
  }
  free_stacks(w);
  w->stacks = s, w->fib = f, w->fib_cap = cap;
  return 0;
}

static void *helper_main(void *arg) {
  cpu_worker *w = arg;
  cpu_backend *cb = w->cb;
  altstack_ensure();
  pthread_mutex_lock(&cb->mu);
  for (;;) {
    while (!cb->quit && cb->tickets == 0) pthread_cond_wait(&cb->wake, &cb->mu);
    if (cb->quit) break;
    cb->tickets--;
    cpu_job *j = cb->job;
    pthread_mutex_unlock(&cb->mu);
    run_blocks(w, j);
    pthread_mutex_lock(&cb->mu);
    if (--cb->busy == 0) pthread_cond_signal(&cb->done);
  }
  pthread_mutex_unlock(&cb->mu);
  altstack_drop();
  return NULL;
}

static void pool_start(cpu_backend *cb) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);   /* signals stay with the host's threads */
  for (int i = 1; i < cb->nworkers && pthread_create(&cb->w[i].thread, NULL, helper_main, &cb->w[i]) == 0; i++)
    cb->started = i;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Runs a whole grid: the calling thread takes blocks too, helpers join when
   there is more than one block.  The caller holds launch_mu. */
static int exec_grid(gt_backend *b, const struct gt_bfunc *fn, const unsigned g[3], const unsigned bl[3],
                     unsigned smem, void **args) {
  cpu_backend *cb = b->impl;
  uint64_t nt = (uint64_t)bl[0] * bl[1] * bl[2], nb = (uint64_t)g[0] * g[1] * g[2];
  if (!fn) return cpu_fail(b, GT_BERR, "cpu: launch of a NULL kernel function; compile the module first.");
  if (nt == 0 || nt > CPU_MAX_THREADS)
    return cpu_fail(b, GT_BERR, "cpu: launch of kernel '%s' failed: a block of %ux%ux%u threads is outside 1..%d; "
                    "use a smaller block.", fn->name, bl[0], bl[1], bl[2], CPU_MAX_THREADS);
  if (nb == 0)
    return cpu_fail(b, GT_BERR, "cpu: launch of kernel '%s' failed: grid %ux%ux%u has a zero dimension.",
                    fn->name, g[0], g[1], g[2]);
  if (smem > CPU_MAX_SMEM)
    return cpu_fail(b, GT_BERR, "cpu: launch of kernel '%s' failed: %u bytes of dynamic shared memory exceed the %u "
                    "a block may use on the largest CUDA devices; use less.", fn->name, smem, CPU_MAX_SMEM);
  cpu_job j = {.fn = fn, .grid = {g[0], g[1], g[2]}, .block = {bl[0], bl[1], bl[2]}, .smem = smem,
               .args = args, .nblocks = nb};
  atomic_init(&j.next, 0);
  atomic_init(&j.misuse, 0);
  atomic_init(&j.fault, 0);
  b->fault_addr = 0;
  altstack_ensure();
  if (nb > 1 && cb->nworkers > 1 && !cb->started) pool_start(cb);
  int helpers = nb - 1 < (uint64_t)cb->started ? (int)(nb - 1) : cb->started;
  int nfib = fn->mod->fibers && nt > 1 ? (int)nt : 0;
  for (int i = 0; i <= (helpers ? cb->started : 0); i++)
    if (prepare(&cb->w[i], smem, nfib) != 0)
      return cpu_fail(b, GT_BOOM, "cpu: launch of kernel '%s' failed: no memory for %u bytes of shared memory "
                      "and %d fiber stacks; use smaller blocks.", fn->name, smem, nfib);
  if (helpers) {
    pthread_mutex_lock(&cb->mu);
    cb->job = &j, cb->tickets = cb->busy = helpers;
    pthread_cond_broadcast(&cb->wake);
    pthread_mutex_unlock(&cb->mu);
  }
  run_blocks(&cb->w[0], &j);
  if (helpers) {
    pthread_mutex_lock(&cb->mu);
    cb->busy -= cb->tickets, cb->tickets = 0;   /* helpers that did not wake in time are not waited for */
    while (cb->busy) pthread_cond_wait(&cb->done, &cb->mu);
    pthread_mutex_unlock(&cb->mu);
  }
  if (atomic_load(&j.fault)) return fault_fail(b, fn, &j, args);
  if (atomic_load(&j.misuse))
    return cpu_fail(b, GT_BERR, "cpu: kernel '%s' called __syncthreads or a warp function that its source does not "
                    "name (a macro from a header?), so it ran without fibers and its results are wrong; name the "
                    "function in the kernel source.", fn->name);
  return GT_BOK;
}

static int cpu_launch(gt_backend *b, gt_bfunc *fn, const unsigned grid[3], const unsigned block[3],
                      unsigned smem, void **args) {
  cpu_backend *cb = b->impl;
  pthread_mutex_lock(&cb->launch_mu);
  int rc = exec_grid(b, fn, grid, block, smem, args);
  pthread_mutex_unlock(&cb->launch_mu);
  return rc;
}

/* -- Graphs ------------------------------------------------------------- */

static void free_nodes(gt_gnode *nodes, int n) {
  for (int i = 0; i < n && nodes; i++) free(nodes[i].args);
  free(nodes);
}

/* Copies n nodes with their own argument values (deps are dropped: nodes
   run in order, which respects them).  first: index of src[0] in messages. */
static int copy_nodes(gt_backend *b, const gt_gnode *src, int n, int first, gt_gnode **out) {
  gt_gnode *nodes = calloc(n > 0 ? (size_t)n : 1, sizeof *nodes);
  if (!nodes) return cpu_fail(b, GT_BOOM, "cpu: out of host memory while building a graph.");
  for (int i = 0; i < n; i++) {
    const gt_gnode *s = &src[i];
    const struct gt_bfunc *fn = s->fn;
    nodes[i] = *s;
    nodes[i].args = NULL, nodes[i].deps = NULL, nodes[i].ndeps = 0;
    if (s->kind != GT_GN_KERNEL) continue;
    size_t na = s->nargs > 0 ? (size_t)s->nargs : 0;
    if (!fn || s->nargs != fn->nparams || !(nodes[i].args = calloc(na ? na : 1, sizeof(void *) + 8))) {
      free_nodes(nodes, i);
      if (fn && s->nargs == fn->nparams) return cpu_fail(b, GT_BOOM, "cpu: out of host memory while building a graph.");
      return cpu_fail(b, GT_BERR, "cpu: graph node %d passes %d arguments to kernel '%s', which takes %d.",
                      first + i, s->nargs, fn ? fn->name : "(null)", fn ? fn->nparams : 0);
    }
    uint64_t *vals = (uint64_t *)(nodes[i].args + na);
    for (size_t k = 0; k < na; k++) memcpy(&vals[k], s->args[k], fn->argsz[k]), nodes[i].args[k] = &vals[k];
  }
  *out = nodes;
  return GT_BOK;
}

/* The conditional structure of n nodes into match (and a scratch stack);
   GT_BERR when it does not nest. */
static int cond_match(gt_backend *b, const gt_gnode *nodes, int n, int *match, int *stack) {
  int top = 0;
  for (int i = 0; i < n; i++) {
    int k = nodes[i].kind;
    match[i] = -1;
    if (k == GT_GN_IF || k == GT_GN_WHILE) stack[top++] = i;
    else if (k == GT_GN_ELSE) {
      if (!top || nodes[stack[top - 1]].kind != GT_GN_IF || match[stack[top - 1]] >= 0) break;
      match[stack[top - 1]] = i;
    } else if (k == GT_GN_END) {
      if (!top) { top = -1; break; }
      int s = stack[--top];
      if (match[s] >= 0) match[match[s]] = i;
      else match[s] = i;
      match[i] = s;
    }
  }
  return top ? cpu_fail(b, GT_BERR, "cpu: a graph's conditional nodes do not nest (an IF or WHILE without its END).") : GT_BOK;
}

static int cpu_graph_create(gt_backend *b, const gt_gnode *nodes, int n, gt_bgraph **out) {
  gt_bgraph *g = calloc(1, sizeof *g);
  int *m = calloc(3 * (size_t)(n > 0 ? n : 1), sizeof *m);
  int rc = g && m ? copy_nodes(b, nodes, n, 0, &g->nodes) : cpu_fail(b, GT_BOOM, "cpu: out of host memory for a graph.");
  if (rc == GT_BOK && (rc = cond_match(b, nodes, n, m, m + n)) != GT_BOK) free_nodes(g->nodes, n);
  if (rc != GT_BOK) { free(g); free(m); return rc; }
  g->n = n;
  g->match = m, g->iters = m + 2 * (size_t)(n > 0 ? n : 1);
  g->bytes = sizeof *g + (n > 0 ? (size_t)n : 1) * (sizeof *g->nodes + 3 * sizeof *m);   /* (as allocated here and in copy_nodes) */
  for (int i = 0; i < n; i++)
    if (nodes[i].kind == GT_GN_KERNEL) g->bytes += (nodes[i].nargs > 0 ? (size_t)nodes[i].nargs : 1) * (sizeof(void *) + 8);
  *out = g;
  return GT_BOK;
}

/* A conditional node's condition, read where it lies (host memory here). */
static int cond_true(const gt_gnode *n) {
  const void *p = (const void *)(uintptr_t)n->dst;
  switch (n->value) {
  case GT_F32: return *(const float *)p != 0;
  case GT_I32: return *(const int32_t *)p != 0;
  case GT_I64: return *(const int64_t *)p != 0;
  default: return *(const uint8_t *)p != 0;
  }
}

/* -- Collectives: the shared-memory group (shmcoll.c) --------------------- */

static int cpu_coll_open(gt_backend *b, int rank, int world, const char *id, double timeout) {
  cpu_backend *cb = b->impl;
  char name[200];
  if (cb->coll) return GT_BOK;
  const char *run = getenv("GTLUA_DIST_RUN");   /* (gtlua --nproc's: a name no earlier run used) */
  snprintf(name, sizeof name, "/gtlua-%d-%s-%s", (int)getuid(), id, run ? run : "");
  for (char *p = name + 1; *p; p++) if (!isalnum((unsigned char)*p) && *p != '-') *p = '_';
  return gt_shmc_open(&cb->coll, name, rank, world, timeout, b->err, sizeof b->err) ? GT_BERR : GT_BOK;
}

static int cpu_coll_run(gt_backend *b, const gt_coll *c, uint64_t dst, uint64_t src) {
  cpu_backend *cb = b->impl;
  if (!cb->coll) return cpu_fail(b, GT_BERR, "gt.dist: no group joined (call gt.dist.init() first)");
  return gt_shmc_run(cb->coll, c, ADDR(dst), ADDR(src), b->err, sizeof b->err) ? GT_BERR : GT_BOK;
}

static int coll_node(gt_backend *b, const gt_gnode *n) {
  gt_coll c = gt_coll_unpack(n->coll, 0);
  int es = gt_coll_esize(c.dtype);
  c.count = es ? n->bytes / (uint64_t)es : 0;
  return cpu_coll_run(b, &c, n->dst, n->src);
}

/* Runs the nodes in order; IF and WHILE decide at launch from p, as a
   conditional node decides on the device. */
static int cpu_graph_launch(gt_backend *b, gt_bgraph *g) {
  cpu_backend *cb = b->impl;
  int rc = GT_BOK, s;
  pthread_mutex_lock(&cb->launch_mu);
  for (int i = 0; i < g->n && rc == GT_BOK && !cb->noexec;) {
    gt_gnode *n = &g->nodes[i];
    switch (n->kind) {
    case GT_GN_KERNEL: rc = exec_grid(b, n->fn, n->grid, n->block, n->smem, n->args); i++; break;
    case GT_GN_MEMCPY: cpu_dtod(b, n->dst, n->src, n->bytes); i++; break;
    case GT_GN_MEMSET: cpu_memset8(b, n->dst, n->value, n->bytes); i++; break;
    case GT_GN_COLL: rc = coll_node(b, n); i++; break;
    case GT_GN_IF: i = cond_true(n) ? i + 1 : g->match[i] + 1; break;
    case GT_GN_ELSE: i = g->match[i] + 1; break;
    case GT_GN_WHILE: g->iters[i] = 0; i = cond_true(n) ? i + 1 : g->match[i] + 1; break;
    default:                                       /* END: a WHILE's decides again */
      s = g->match[i];
      if (g->nodes[s].kind == GT_GN_WHILE && cond_true(n) && (!n->bytes || (size_t)++g->iters[s] < n->bytes)) i = s + 1;
      else i++;
    }
  }
  pthread_mutex_unlock(&cb->launch_mu);
  return rc;
}

static int cpu_graph_set_kernel(gt_backend *b, gt_bgraph *g, int i, const gt_gnode *node) {
  gt_gnode *copy;
  if (i >= 0 && i < g->n && (node->kind == GT_GN_IF || node->kind == GT_GN_WHILE || node->kind == GT_GN_END) &&
      g->nodes[i].kind == node->kind) {   /* a cond entry's p at a new address */
    g->nodes[i].dst = node->dst;
    return GT_BOK;
  }
  if (i < 0 || i >= g->n || g->nodes[i].kind != GT_GN_KERNEL || node->kind != GT_GN_KERNEL)
    return cpu_fail(b, GT_BERR, "cpu: graph node %d is not a kernel node of this graph (it has %d nodes).", i, g->n);
  int rc = copy_nodes(b, node, 1, i, &copy);
  if (rc != GT_BOK) return rc;
  free(g->nodes[i].args);
  g->nodes[i] = *copy;
  free(copy);
  return GT_BOK;
}

static int cpu_graph_update(gt_backend *b, gt_bgraph *g, const gt_gnode *nodes, int n) {
  gt_gnode *fresh;
  if (n != g->n) return cpu_fail(b, GT_BREFUSED, "cpu: graph update refused: %d nodes instead of %d.", n, g->n);
  for (int i = 0; i < n; i++)
    if (nodes[i].kind != g->nodes[i].kind || (nodes[i].kind == GT_GN_KERNEL && nodes[i].fn != g->nodes[i].fn))
      return cpu_fail(b, GT_BREFUSED, "cpu: graph update refused: node %d changed its kind or kernel.", i);
  int rc = copy_nodes(b, nodes, n, 0, &fresh);
  if (rc != GT_BOK) return rc;
  free_nodes(g->nodes, g->n);
  g->nodes = fresh;
  return GT_BOK;
}

/* The bytes the graph's executable form holds, as allocated (exact; set_kernel and update keep them). */
static uint64_t cpu_graph_bytes(gt_backend *b, const gt_bgraph *g, int *measured) {
  (void)b;
  *measured = 1;
  return g->bytes;
}

static void cpu_graph_destroy(gt_backend *b, gt_bgraph *g) {
  (void)b;
  if (g) free_nodes(g->nodes, g->n), free(g->match), free(g);
}

/* -- Events, info, lifetime --------------------------------------------- */

static int cpu_event_create(gt_backend *b, gt_bevent **ev) {
  return (*ev = calloc(1, sizeof **ev)) ? GT_BOK : cpu_fail(b, GT_BOOM, "cpu: out of host memory for an event.");
}
static int cpu_event_record(gt_backend *b, gt_bevent *ev) { (void)b; ev->t = gt_now_us(); return GT_BOK; }
static int cpu_event_elapsed_us(gt_backend *b, gt_bevent *s, gt_bevent *e, double *us) {
  (void)b;
  *us = e->t - s->t;
  return GT_BOK;
}
static void cpu_event_destroy(gt_backend *b, gt_bevent *ev) { (void)b; free(ev); }
static int cpu_event_ready_us(gt_backend *b, gt_bevent *s, gt_bevent *e, double *us) {   /* (a launch has run when it returns) */
  return cpu_event_elapsed_us(b, s, e, us);
}
static int cpu_sync_all(gt_backend *b) { (void)b; return GT_BOK; }   /* everything is synchronous */
static int cpu_cond_support(gt_backend *b) { (void)b; return GT_COND_NODES | GT_COND_ELSE_NODES; }

static int cpu_device_info(gt_backend *b, gt_device_info *o) {
  cpu_backend *cb = b->impl;
  char line[512];
  memset(o, 0, sizeof *o);
  snprintf(o->backend, sizeof o->backend, "cpu");
  snprintf(o->name, sizeof o->name, "CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
      snprintf(o->name, sizeof o->name, "%s", skip_space(strchr(line, ':') + 1));
      o->name[strcspn(o->name, "\n")] = 0;
      break;
    }
  if (f) fclose(f);
  o->sms = cb->nworkers;
  o->total_mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
  snprintf(o->compiler, sizeof o->compiler, "%s", cb->cxx);
  return GT_BOK;
}

static void cpu_shutdown(gt_backend *b) {
  cpu_backend *cb = b->impl;
  if (!cb) return;
  pthread_mutex_lock(&cb->mu);
  cb->quit = 1;
  pthread_cond_broadcast(&cb->wake);
  pthread_mutex_unlock(&cb->mu);
  for (int i = 1; i <= cb->started; i++) pthread_join(cb->w[i].thread, NULL);
  gt_shmc_close(cb->coll);
  for (int i = 0; i < cb->nworkers; i++) free_stacks(&cb->w[i]), free(cb->w[i].smem);
  free(cb->w);
  faults_catch(0);
  pthread_mutex_destroy(&cb->launch_mu), pthread_mutex_destroy(&cb->mu);
  pthread_cond_destroy(&cb->wake), pthread_cond_destroy(&cb->done);
  free(cb);
  b->impl = NULL;
}

/* Fills *b with the cpu backend: workers from GTLUA_CPU_THREADS, else
   min(nproc, 8); the compiler from GTLUA_CXX, else c++.  Helper threads
   start at the first multi-block launch.  GT_BOOM when out of memory. */
int gt_backend_cpu_open(gt_backend *b) {
  const char *env = getenv("GTLUA_CPU_THREADS"), *cxx = getenv("GTLUA_CXX");
  long nproc = sysconf(_SC_NPROCESSORS_ONLN), n = env ? strtol(env, NULL, 10) : 0;
  if (n <= 0) n = nproc < 1 ? 1 : nproc > 8 ? 8 : nproc;
  n = n > CPU_MAX_WORKERS ? CPU_MAX_WORKERS : n;
  memset(b, 0, sizeof *b);
  b->name = "cpu";
  cpu_backend *cb = calloc(1, sizeof *cb);
  cpu_worker *w = cb ? calloc((size_t)n, sizeof *w) : NULL;
  if (!w) {
    free(cb);
    return cpu_fail(b, GT_BOOM, "cpu: out of host memory while starting the cpu backend.");
  }
  for (int i = 0; i < n; i++) {
    w[i].cb = cb;
    w[i].ctx.sync = cpu_sync, w[i].ctx.syncwarp = cpu_syncwarp, w[i].ctx.shfl = cpu_shfl, w[i].ctx.vote = cpu_vote;
  }
  cb->w = w, cb->nworkers = (int)n;
  const char *noexec = getenv("GTLUA_CPU_NOEXEC");
  cb->noexec = noexec && !strcmp(noexec, "1");
  pthread_mutex_init(&cb->launch_mu, NULL), pthread_mutex_init(&cb->mu, NULL);
  pthread_cond_init(&cb->wake, NULL), pthread_cond_init(&cb->done, NULL);
  snprintf(cb->cxx, sizeof cb->cxx, "%s", cxx && *cxx ? cxx : "c++");
  cb->prelude_hash = gt_hash64(gt_cpu_prelude_text(), strlen(gt_cpu_prelude_text()), 0x70726c64ull);
  b->impl = cb;
  faults_catch(1);
  b->granularity = CPU_GRAN;
  GT_BACKEND_FILL(b, cpu, cpu_sync_all);
  return GT_BOK;
}
