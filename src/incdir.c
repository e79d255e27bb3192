/* incdir.c - the search for the CUDA headers NVRTC needs for half precision. */
#include <ctype.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "incdir.h"

/* -- Candidates ---------------------------------------------------------- */

static int has_headers(const char *dir) {
  char p[1200];
  snprintf(p, sizeof p, "%s/cuda_fp16.h", dir);
  if (access(p, R_OK) != 0) return 0;
  snprintf(p, sizeof p, "%s/cuda_bf16.h", dir);
  return access(p, R_OK) == 0;
}

static int is_dir(const char *d) {
  char p[1200];
  snprintf(p, sizeof p, "%s/.", d);
  return access(p, F_OK) == 0;
}

/* Appends dir to searched; when it has the headers, writes opts and returns 1. */
static int try_dir(const char *dir, char *opts, size_t cap, char *searched, size_t scap) {
  size_t n = strlen(searched);
  if (n + strlen(dir) + 3 < scap) snprintf(searched + n, scap - n, "%s%s", n ? ", " : "", dir);
  if (!has_headers(dir)) return 0;
  char cccl[1200];
  int w = snprintf(opts, cap, "-I%s", dir);
  snprintf(cccl, sizeof cccl, "%s/cccl", dir);
  if (!is_dir(cccl)) snprintf(cccl, sizeof cccl, "%s/../../cuda_cccl/include", dir);   /* CUDA 12's wheels */
  if (is_dir(cccl) && w > 0 && (size_t)w < cap) snprintf(opts + w, cap - (size_t)w, " -I%s", cccl);
  return 1;
}

static int try_env(const char *var, const char *sub, char *opts, size_t cap, char *searched, size_t scap) {
  const char *v = getenv(var);
  char d[1100];
  if (!v || !*v) return 0;
  snprintf(d, sizeof d, "%s%s", v, sub);
  return try_dir(d, opts, cap, searched, scap);
}

/* Every match of pattern, in glob's order (newest versions last: tried from the end). */
static int try_glob(const char *pattern, char *opts, size_t cap, char *searched, size_t scap) {
  glob_t g;
  int found = 0;
  if (glob(pattern, 0, NULL, &g) != 0) {
    size_t n = strlen(searched);
    if (n + strlen(pattern) + 3 < scap) snprintf(searched + n, scap - n, "%s%s", n ? ", " : "", pattern);
    return 0;
  }
  for (size_t i = g.gl_pathc; i-- > 0 && !found;) found = try_dir(g.gl_pathv[i], opts, cap, searched, scap);
  globfree(&g);
  return found;
}

/* -- The search ---------------------------------------------------------- */

int gt_cuda_include(const char *nvrtc_lib, char *opts, size_t cap, char *searched, size_t scap) {
  static const char *const fixed[] = { "/usr/local/cuda/include", "/usr/local/cuda-*/include", "/opt/cuda/include",
    "/usr/include" };
  static const char *const wheels[] = { "/lib/python3*/site-packages/nvidia/cu13/include",
    "/lib/python3*/site-packages/nvidia/cuda_runtime/include" };
  static const char *const roots[] = { "/usr/local", "/usr", "/opt/conda" };
  char d[1200];
  searched[0] = opts[0] = 0;
  if (try_env("GTLUA_CUDA_INCLUDE", "", opts, cap, searched, scap) || try_env("CUDA_HOME", "/include", opts, cap, searched, scap) ||
      try_env("CUDA_PATH", "/include", opts, cap, searched, scap))
    return 0;
  if (nvrtc_lib && strchr(nvrtc_lib, '/')) {          /* <root>/lib[64]/libnvrtc.so -> <root>/include */
    snprintf(d, sizeof d, "%s", nvrtc_lib);
    char *s = strrchr(d, '/');
    *s = 0;
    if ((s = strrchr(d, '/'))) { strcpy(s, "/include"); if (try_dir(d, opts, cap, searched, scap)) return 0; }
  }
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
    if (try_glob(fixed[i], opts, cap, searched, scap)) return 0;
  const char *home = getenv("HOME"), *venv = getenv("VIRTUAL_ENV"), *conda = getenv("CONDA_PREFIX");
  for (size_t w = 0; w < sizeof wheels / sizeof *wheels; w++) {
    const char *mine[] = { venv, conda };
    for (size_t i = 0; i < 2; i++) {
      if (!mine[i] || !*mine[i]) continue;
      snprintf(d, sizeof d, "%s%s", mine[i], wheels[w]);
      if (try_glob(d, opts, cap, searched, scap)) return 0;
    }
    if (home && *home) {
      snprintf(d, sizeof d, "%s/.local%s", home, wheels[w]);
      if (try_glob(d, opts, cap, searched, scap)) return 0;
    }
    for (size_t i = 0; i < sizeof roots / sizeof *roots; i++) {
      snprintf(d, sizeof d, "%s%s", roots[i], wheels[w]);
      if (try_glob(d, opts, cap, searched, scap)) return 0;
      snprintf(d, sizeof d, "%s%s", roots[i], wheels[w]);
      char *sp = strstr(d, "site-packages");
      if (sp) {   /* Debian's dist-packages */
        char t[1200];
        snprintf(t, sizeof t, "%.*sdist-packages%s", (int)(sp - d), d, sp + 13);
        if (try_glob(t, opts, cap, searched, scap)) return 0;
      }
    }
  }
  return -1;
}

/* -- Does a source need them --------------------------------------------- */

static int half_word(const char *w, size_t n) {
  static const char *const words[] = { "__half", "half", "half2", "__half2", "__nv_bfloat16", "nv_bfloat16",
    "__nv_bfloat162", "nv_bfloat162", "cuda_fp16", "cuda_bf16", "mma", "nvcuda" };
  static const char *const prefixes[] = { "__float2half", "__float2bfloat16", "__half2", "__bfloat16", "__floats2",
    "__float22", "__hadd", "__hsub", "__hmul", "__hdiv", "__hfma", "__hmax", "__hmin", "__hneg", "__habs", "__low2",
    "__high2", "__ushort_as_", "__int2half", "__int2bfloat16", "__double2half", "__double2bfloat16" };
  for (size_t i = 0; i < sizeof words / sizeof *words; i++)
    if (strlen(words[i]) == n && !strncmp(words[i], w, n)) return 1;
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
    if (n >= strlen(prefixes[i]) && !strncmp(prefixes[i], w, strlen(prefixes[i]))) return 1;
  return 0;
}

int gt_uses_half(const char *src) {
  for (const char *p = src; *p;) {
    if (isalpha((unsigned char)*p) || *p == '_') {
      const char *w = p;
      while (isalnum((unsigned char)*p) || *p == '_') p++;
      if (half_word(w, (size_t)(p - w))) return 1;
    } else if (isdigit((unsigned char)*p)) {
      while (isalnum((unsigned char)*p) || *p == '_' || *p == '.') p++;
    } else p++;
  }
  return 0;
}
