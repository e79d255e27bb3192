/* util.c - hashing, the clock, the kernel cache directory, warnings, array growth (depends on nothing in src/). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "gt.h"
#include "util.h"

/* -- Hashing and the clock ------------------------------------------------ */

uint64_t gt_hash64(const void *data, size_t len, uint64_t seed) {
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ull ^ seed;
  for (size_t i = 0; i < len; i++) { h ^= p[i]; h *= 1099511628211ull; }
  h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33;
  return h;
}

double gt_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* The bookkeeping clock (a call's time in the history, sampled replay
   times): the time-stamp counter where the kernel itself keeps time with it
   (its clocksource is "tsc": invariant and synchronised), scaled against
   CLOCK_MONOTONIC over the first 2 ms; else gt_now_us.  A clock_gettime is a
   few launches' worth of host time on some machines; rdtsc a fraction. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <x86intrin.h>
static int tsc_state;                /* 0: not decided, 1: calibrating, 2: in use, -1: not used */
static uint64_t tsc0;
static double tsc_us0, us_per_tick;

static int kernel_uses_tsc(void) {
  char src[32] = "";
  FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (!f) return 0;
  int ok = fgets(src, sizeof src, f) && !strncmp(src, "tsc", 3) && (src[3] == '\n' || !src[3]);
  fclose(f);
  return ok && !getenv("GTLUA_NO_TSC");
}

double gt_fast_us(void) {
  if (tsc_state == 2) return tsc_us0 + (double)(__rdtsc() - tsc0) * us_per_tick;
  double now = gt_now_us();
  if (tsc_state == 0) {
    tsc_state = kernel_uses_tsc() ? 1 : -1;
    tsc0 = __rdtsc();
    tsc_us0 = now;
  } else if (tsc_state == 1 && now - tsc_us0 >= 2000) {
    uint64_t t = __rdtsc();
    if (t > tsc0) {
      us_per_tick = (now - tsc_us0) / (double)(t - tsc0);
      tsc0 = t;
      tsc_us0 = now;
      tsc_state = 2;
    } else tsc_state = -1;
  }
  return now;
}
#else
double gt_fast_us(void) { return gt_now_us(); }
#endif

/* -- The kernel cache directory ------------------------------------------ */

/* The cache holds code this process runs (shared objects, CUBINs), so a
   directory someone else can write is refused, as ssh and ccache do: it must
   be owned by this user and not writable by group or others. */

static char g_warning[1024];       /* a warning for the user not yet shown (gt_take_warning) */

static void warn_once(const char *fmt, ...) {
  if (g_warning[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_warning, sizeof g_warning, fmt, ap);
  va_end(ap);
}

const char *gt_take_warning(void) {
  static char shown[sizeof g_warning];
  if (!g_warning[0]) return NULL;
  memcpy(shown, g_warning, sizeof shown);
  g_warning[0] = 0;
  return shown;
}

/* 0 when dir is a directory fit to hold code: ours, not writable by group or
   others (a symbolic link to one only when the link is ours or root's); else
   the reason in why and -1 (no such directory) or -2 (someone else could
   write it). */
static int check_private_dir(const char *dir, char *why, size_t len) {
  struct stat ls, st;
  uid_t me = geteuid();
  if (lstat(dir, &ls) != 0 || stat(dir, &st) != 0)
    return snprintf(why, len, "cannot be created or read (%s)", strerror(errno)), -1;
  if (S_ISLNK(ls.st_mode) && ls.st_uid != me && ls.st_uid != 0)
    return snprintf(why, len, "is a symbolic link owned by uid %u", (unsigned)ls.st_uid), -2;
  if (!S_ISDIR(st.st_mode)) return snprintf(why, len, "is not a directory"), -1;
  if (st.st_uid != me)
    return snprintf(why, len, "is owned by uid %u, not by you (uid %u)", (unsigned)st.st_uid, (unsigned)me), -2;
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return snprintf(why, len, "is writable by group or others (mode %04o)", (unsigned)(st.st_mode & 07777)), -2;
  return 0;
}

/* Queues the warning for a cache directory not used (check: -1 or -2 as above). */
static void refuse(const char *dir, const char *why, int check) {
  warn_once("the kernel cache %s %s%s; kernels are compiled without caching (slower). Set GTLUA_CACHE to a "
            "directory that only you can write (e.g. mkdir -m 700).", dir, why,
            check == -2 ? ", so it could hold code someone else put there: it is not used" : "");
}

/* Creates path and its missing parents with mode 0700, then checks path and
   every parent it created; 0 when all are fit, else -1 (a warning queued). */
static int make_private_dir(const char *path) {
  char buf[1024], why[256];
  size_t created[64];
  int n = 0;
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1;; p++) {
    if (*p && *p != '/') continue;
    char c = *p;
    *p = 0;
    if (mkdir(buf, 0700) == 0 && n < 64) created[n++] = (size_t)(p - buf);
    *p = c;
    if (!c) break;
  }
  int rc = check_private_dir(path, why, sizeof why);
  if (rc) return refuse(path, why, rc), -1;
  for (int i = 0; i < n; i++) {
    buf[created[i]] = 0;
    if ((rc = check_private_dir(buf, why, sizeof why))) return refuse(buf, why, rc), -1;
    buf[created[i]] = '/';
  }
  return 0;
}

const char *gt_cache_dir(void) {
  static char dir[1024];
  static int state;                 /* 0: not yet chosen, 1: usable, -1: refused */
  if (state) return state > 0 ? dir : NULL;
  const char *c = getenv("GTLUA_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
  int n;
  if (c && *c) n = snprintf(dir, sizeof dir, "%s", c);
  else if (x && *x) n = snprintf(dir, sizeof dir, "%s/gtlua", x);
  else if (h && *h) n = snprintf(dir, sizeof dir, "%s/.cache/gtlua", h);
  else n = snprintf(dir, sizeof dir, "/tmp/gtlua-%u", (unsigned)geteuid());   /* per user, never shared */
  while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
  if (n >= (int)sizeof dir - 64) refuse(dir, "is a path too long", -1), state = -1;
  else state = make_private_dir(dir) == 0 ? 1 : -1;
  return state > 0 ? dir : NULL;
}

int gt_cache_file_ok(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH))
         ? 0 : -1;
}

int gt_cache_subdir(const char *name, char *out, size_t len) {
  const char *root = gt_cache_dir();
  if (!root) return -1;
  if (snprintf(out, len, "%s/%s", root, name) >= (int)len) return refuse(root, "is a path too long", -1), -1;
  return make_private_dir(out);
}

const char *gt_bytes(uint64_t v, char *buf) {
  static const char *const unit[] = { "TiB", "GiB", "MiB", "KiB" };
  for (int i = 0; i < 4; i++) {
    double u = (double)(1ull << (10 * (4 - i)));
    if ((double)v >= u) { snprintf(buf, GT_BYTES_LEN, "%.1f %s", (double)v / u, unit[i]); return buf; }
  }
  snprintf(buf, GT_BYTES_LEN, "%llu B", (unsigned long long)v);
  return buf;
}

char *gt_strdup(const char *s) {
  size_t n = strlen(s ? s : "") + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s ? s : "", n);
  return d;
}

/* -- Arrays ---------------------------------------------------------------- */

int gt_grow(void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return 0;
  int c = *cap ? *cap * 2 : 16;
  while (c < need) c *= 2;
  void *np = realloc(*p, (size_t)c * elem);
  if (!np) return -1;
  *p = np;
  *cap = c;
  return 0;
}
