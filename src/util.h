/* util.h - helpers every layer may use: hashing, the clock, the kernel cache
   directory, warnings, array growth.  util.c depends on nothing in src/. */
#ifndef GT_UTIL_H
#define GT_UTIL_H
#include <stddef.h>
#include <stdint.h>

uint64_t gt_hash64(const void *data, size_t len, uint64_t seed); /* FNV-1a 64 + mix (keys, cache entry checks) */
double gt_now_us(void);           /* monotonic clock */
double gt_fast_us(void);          /* the same, cheaper to read (the TSC where the kernel trusts it); for bookkeeping */

/* The kernel cache: $GTLUA_CACHE, else $XDG_CACHE_HOME/gtlua, else
   ~/.cache/gtlua, else /tmp/gtlua-<uid>; created with mode 0700.  NULL when it
   is refused (not ours, or writable by group or others: it could hold code
   someone else put there); the reason is queued once for gt_take_warning and
   kernels are then compiled without caching. */
const char *gt_cache_dir(void);
/* gt_cache_dir()/name in out, created 0700 and checked the same way; 0 when
   usable, -1 when there is no usable cache (a warning queued). */
int gt_cache_subdir(const char *name, char *out, size_t len);
/* 0 when the open file fd is a regular file of ours that group and others
   cannot write: a cache entry older than the directory's checks (planted
   while the directory was open to others) is a miss, not loaded. */
int gt_cache_file_ok(int fd);

/* Grows the array *p of *cap elements of elem bytes to hold at least need
   (doubling, from 16).  0 on success; -1 when out of host memory, *p and
   *cap unchanged.  GT_GROW checks inline, so a push that fits costs a compare. */
int gt_grow(void **p, int *cap, int need, size_t elem);
#define GT_GROW(p, cap, need) ((need) <= (cap) ? 0 : gt_grow((void **)&(p), &(cap), (need), sizeof *(p)))

char *gt_strdup(const char *s);   /* a malloc'd copy (NULL: ""); NULL when out of host memory */

/* v bytes as people read them, in buf (GT_BYTES_LEN chars): "512 B", "8.0 KiB",
   "1.5 MiB", "2.0 GiB", "4.0 TiB" (lua/gt/units.lua's bytes); returns buf. */
#define GT_BYTES_LEN 24
const char *gt_bytes(uint64_t v, char *buf);

#endif
