/* kernel.c - kernel sources: signature parsing, the check that a source is what
   NVRTC compiles, compilation through the backend, the module registry.
   Launching them is launch.c's. */
#include <ctype.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "kernel.h"

struct gt_module {
  int n;
  gt_kernel *k;
  gt_bmodule *bm;
  char *arena;                 /* names, texts and type arrays of all kernels */
  struct gt_module *next;      /* every module, for leak checkers: Lua's references are not malloc'd */
};
static gt_module *g_modules;

/* -- Signature parsing --------------------------------------------------- */

/* The source without comments and string contents (same length, so offsets agree). */
static char *strip_comments(const char *src) {
  size_t n = strlen(src);
  char *s = malloc(n + 1);
  if (!s) return NULL;
  memcpy(s, src, n + 1);
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '/' && s[i + 1] == '/') { while (i < n && s[i] != '\n') s[i++] = ' '; }
    else if (s[i] == '/' && s[i + 1] == '*') {
      s[i++] = ' '; s[i++] = ' ';
      while (i < n && !(s[i] == '*' && s[i + 1] == '/')) { if (s[i] != '\n') s[i] = ' '; i++; }
      if (i < n) { s[i++] = ' '; s[i] = ' '; }
    } else if (s[i] == '"') {
      for (i++; i < n && s[i] != '"'; i++) { if (s[i] == '\\') s[i++] = ' '; if (i < n) s[i] = ' '; }
    }
  }
  return s;
}

static int is_id(int c) { return isalnum(c) || c == '_'; }


/* Words of a type, without qualifiers, joined by single spaces. */
static void base_type(const char *t, char *out, size_t cap) {
  char w[64];
  out[0] = 0;
  while (*t) {
    if (!is_id(*t)) { t++; continue; }
    size_t k = 0;
    while (is_id(*t) && k < sizeof w - 1) w[k++] = *t++;
    w[k] = 0;
    if (!strcmp(w, "const") || !strcmp(w, "volatile") || !strcmp(w, "__restrict__") || !strcmp(w, "restrict") ||
        !strcmp(w, "__restrict") || !strcmp(w, "signed")) continue;
    if (out[0]) strncat(out, " ", cap - strlen(out) - 1);
    strncat(out, w, cap - strlen(out) - 1);
  }
  if (!strcmp(out, "long long int") || !strcmp(out, "long int") || !strcmp(out, "long")) strcpy(out, "long long");
  if (!strcmp(out, "unsigned long long int") || !strcmp(out, "unsigned long") || !strcmp(out, "unsigned long int"))
    strcpy(out, "unsigned long long");
  if (!strcmp(out, "unsigned int")) strcpy(out, "unsigned");
}

static int dtype_of(const char *b) {
  if (!strcmp(b, "float")) return GT_F32;
  if (!strcmp(b, "double")) return GT_F64;
  if (!strcmp(b, "int") || !strcmp(b, "int32_t")) return GT_I32;
  if (!strcmp(b, "long long") || !strcmp(b, "int64_t")) return GT_I64;
  if (!strcmp(b, "unsigned char") || !strcmp(b, "uint8_t") || !strcmp(b, "char")) return GT_U8;
  if (!strcmp(b, "unsigned") || !strcmp(b, "uint32_t")) return GT_U32;
  if (!strcmp(b, "unsigned long long") || !strcmp(b, "uint64_t") || !strcmp(b, "size_t")) return GT_U64;
  if (!strcmp(b, "__half") || !strcmp(b, "half")) return GT_F16;
  if (!strcmp(b, "__nv_bfloat16") || !strcmp(b, "nv_bfloat16")) return GT_BF16;
  return 0;
}

static int scalar_of(const char *b) {
  static const struct { const char *n; int t; } map[] = {
    { "int", GT_P_I32 }, { "int32_t", GT_P_I32 }, { "unsigned", GT_P_U32 }, { "uint32_t", GT_P_U32 },
    { "long long", GT_P_I64 }, { "int64_t", GT_P_I64 }, { "unsigned long long", GT_P_U64 }, { "uint64_t", GT_P_U64 },
    { "size_t", GT_P_U64 }, { "float", GT_P_F32 }, { "double", GT_P_F64 }, { "bool", GT_P_BOOL } };
  for (size_t i = 0; i < sizeof map / sizeof *map; i++) if (!strcmp(b, map[i].n)) return map[i].t;
  return 0;
}

static void trim_copy(char *dst, size_t cap, const char *a, const char *b) {
  while (a < b && isspace((unsigned char)*a)) a++;
  while (b > a && isspace((unsigned char)b[-1])) b--;
  size_t n = (size_t)(b - a) < cap - 1 ? (size_t)(b - a) : cap - 1;
  memcpy(dst, a, n);
  dst[n] = 0;
  for (char *p = dst; *p; p++) if (isspace((unsigned char)*p)) *p = ' ';
}

/* Parses one parameter declaration "const float *__restrict__ x". */
static int parse_param(const char *a, const char *b, gt_kparam *p, const char *kname, char *err) {
  char decl[256];
  trim_copy(decl, sizeof decl, a, b);
  char *eq = strchr(decl, '=');
  if (eq) { *eq = 0; trim_copy(decl, sizeof decl, decl, decl + strlen(decl)); }
  size_t n = strlen(decl);
  if (!n) { snprintf(err, GT_ERRLEN, "kernel '%s': empty parameter", kname); return GT_ERR; }
  const char *end = decl + n, *s = end;
  while (s > decl && is_id(s[-1])) s--;
  if (s == end || s == decl) { snprintf(err, GT_ERRLEN, "kernel '%s': cannot read parameter '%s' (name it)", kname, decl); return GT_ERR; }
  snprintf(p->name, sizeof p->name, "%s", s);
  trim_copy(p->text, sizeof p->text, decl, s);
  char *star = strrchr(p->text, '*');
  char base[128];
  if (star) {
    char before[128];
    snprintf(before, sizeof before, "%.*s", (int)(star - p->text), p->text);
    if (strchr(before, '*')) { snprintf(err, GT_ERRLEN, "kernel '%s': parameter '%s' is a pointer to a pointer; pass buffers as T*", kname, p->name); return GT_ERR; }
    base_type(before, base, sizeof base);
    p->ptype = strstr(before, "const") ? GT_P_IN : GT_P_OUT;
    p->pdtype = (uint8_t)dtype_of(base);
    return GT_OK;
  }
  base_type(p->text, base, sizeof base);
  p->ptype = (uint8_t)scalar_of(base);
  if (!p->ptype) {
    snprintf(err, GT_ERRLEN, "kernel '%s': parameter '%s' has type '%s', which gtlua cannot pass; use T* for tensors or "
             "int, unsigned, long long, int64_t, size_t, float, double, bool", kname, p->name, p->text);
    return GT_ERR;
  }
  return GT_OK;
}

int gt_kernel_parse(const char *src, gt_kdecl *ks, int cap, int *nk, char *err) {
  char *s = strip_comments(src);
  if (!s) { snprintf(err, GT_ERRLEN, "%s", gt_errmsg_text(GT_E_NOMEM)); return GT_ERR; }
  int n = 0, st = GT_OK;
  for (char *g = strstr(s, "__global__"); g && st == GT_OK; g = strstr(g + 10, "__global__")) {
    if ((g > s && is_id(g[-1])) || is_id(g[10])) continue;
    /* the name is the last identifier before the parameter list's '(' */
    char *q = g + 10, *name = NULL, *open = NULL;
    size_t nlen = 0;
    while (*q && *q != ';' && *q != '{') {
      if (is_id(*q)) {
        char *w = q;
        while (is_id(*q)) q++;
        if ((size_t)(q - w) == 17 && !strncmp(w, "__launch_bounds__", 17)) {
          while (*q && *q != '(') q++;
          for (int d = 0; *q; q++) { if (*q == '(') d++; else if (*q == ')' && --d == 0) { q++; break; } }
          continue;
        }
        name = w; nlen = q - w;
      } else if (*q == '(') { open = q; break; }
      else q++;
    }
    if (!open || !name) continue;
    if (n == cap) { snprintf(err, GT_ERRLEN, "more than %d kernels in one source", cap); st = GT_ERR; break; }
    gt_kdecl *k = &ks[n];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%.*s", (int)nlen, name);
    /* split the parameter list at top-level commas */
    char *a = open + 1, *p = a;
    int depth = 0;
    for (; *p; p++) {
      if (*p == '(' || *p == '<' || *p == '[') depth++;
      else if ((*p == ')' || *p == '>' || *p == ']') && depth > 0) depth--;
      else if (*p == ')' || (*p == ',' && depth == 0)) {
        char tmp[256];
        trim_copy(tmp, sizeof tmp, a, p);
        if (tmp[0] && strcmp(tmp, "void")) {
          if (k->np == GT_MAX_PARAMS) { snprintf(err, GT_ERRLEN, "kernel '%s': more than %d parameters", k->name, GT_MAX_PARAMS); st = GT_ERR; break; }
          if (parse_param(a, p, &k->p[k->np], k->name, err) != GT_OK) { st = GT_ERR; break; }
          k->np++;
        }
        if (*p == ')') break;
        a = p + 1;
      }
    }
    if (st == GT_OK) n++;
  }
  free(s);
  *nk = n;
  return st;
}

/* -- Modules ------------------------------------------------------------- */

/* What every kernel source may use on both backends without includes: NVRTC
   has no <stdint.h>, <limits.h>, <float.h> or <math.h> constants (the cpu
   backend's prelude includes the host's headers).  (C++ allows repeating a typedef.) */
static const char common_prelude[] =
  "#ifdef __CUDACC_RTC__\n"
  "typedef signed char int8_t; typedef unsigned char uint8_t; typedef short int16_t;\n"
  "typedef unsigned short uint16_t; typedef int int32_t; typedef unsigned int uint32_t;\n"
  "typedef long long int64_t; typedef unsigned long long uint64_t;\n"
  "#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n"
  "#ifndef NAN\n#define NAN __int_as_float(0x7fffffff)\n#endif\n"
  "#ifndef FLT_MAX\n#define FLT_MAX 3.402823466e+38f\n#endif\n"
  "#ifndef INT_MAX\n#define INT_MAX 2147483647\n#define INT_MIN (-INT_MAX - 1)\n#define UINT_MAX 4294967295u\n#endif\n"
  "#ifndef INT32_MAX\n#define INT32_MAX 2147483647\n#define INT32_MIN (-INT32_MAX - 1)\n#define UINT32_MAX 4294967295u\n"
  "#define INT64_MAX 9223372036854775807ll\n#define INT64_MIN (-INT64_MAX - 1)\n#define UINT64_MAX 18446744073709551615ull\n#endif\n"
  "#ifndef FLT_MIN\n#define FLT_MIN 1.175494351e-38f\n#define FLT_EPSILON 1.192092896e-07f\n"
  "#define DBL_MAX 1.7976931348623158e+308\n#define DBL_MIN 2.2250738585072014e-308\n"
  "#define DBL_EPSILON 2.2204460492503131e-16\n#endif\n"
  "#endif\n";

/* -- What NVRTC compiles ------------------------------------------------- */

/* NVRTC is given no include path and has no C++ standard library: it opens no
   <header> and knows no std:: name.  The cpu backend compiles with the host's
   C++ compiler, which has both, so a kernel could run there and fail on a GPU;
   both backends therefore check a source the same way.  An #include of a C
   header whose device surface both compilers have without a file (the
   fixed-width types, the math functions, printf, assert, memcpy, malloc, the
   limits macros: common_prelude and the cpu prelude give them) is blanked;
   CUDA's own headers (cuda_*.h, cuda/..., mma.h) are left to the compilers; any
   other <header> and any std:: name is refused. */
static const char *const device_headers[] = {
  "cstdint", "stdint.h", "cmath", "math.h", "cstdio", "stdio.h", "cfloat", "float.h", "climits", "limits.h",
  "cstddef", "stddef.h", "cassert", "assert.h", "cstdlib", "stdlib.h", "cstring", "string.h", NULL
};
static const char device_has[] = "Kernels have what CUDA device code has: fixed-width integers (int32_t, ...), the "
  "math functions (sqrtf, expf, fminf, ...), printf, assert, memcpy and templates; <cstdint>, <cmath>, <cstdio>, "
  "<cfloat>, <climits>, <cstddef>, <cassert>, <cstdlib> and <cstring> (or their .h forms) may be included for them";

/* The file and line a stripped line at s + at (line of src) is in: #line
   directives (gt.load's inlined includes) move them.  file: chunk's or one
   named there (at most cap bytes). */
static void track_line(const char *src, const char *s, int *line, char *file, size_t cap) {
  const char *p = s;
  while (*p == ' ' || *p == '\t') p++;
  if (*p != '#') return;
  for (p++; *p == ' ' || *p == '\t'; p++) {}
  if (strncmp(p, "line", 4) || is_id(p[4])) return;
  char *end;
  long n = strtol(p + 4, &end, 10);
  if (end == p + 4) return;
  *line = (int)n - 1;                                  /* (the next line is n) */
  const char *q = src + (end - s);                     /* the name's text is blank in s: read it from src */
  while (*q == ' ') q++;
  if (*q != '"') return;
  size_t k = 0;
  for (q++; *q && *q != '"' && *q != '\n' && k + 1 < cap; q++) file[k++] = *q == '\\' && q[1] ? *++q : *q;
  file[k] = 0;
}

/* A std:: name on the stripped line s (up to its end), or NULL; its identifier in name. */
static const char *std_name(const char *s, const char *eol, char *name, size_t cap) {
  for (const char *p = s; p + 3 <= eol; p++) {
    if (strncmp(p, "std", 3) || (p > s && (is_id(p[-1]) || p[-1] == '.')) || is_id(p[3])) continue;
    const char *q = p + 3;
    while (q < eol && (*q == ' ' || *q == '\t')) q++;
    if (q + 2 > eol || q[0] != ':' || q[1] != ':') continue;
    for (q += 2; q < eol && (*q == ' ' || *q == '\t'); q++) {}
    size_t k = 0;
    while (q < eol && is_id(*q) && k + 1 < cap) name[k++] = *q++;
    name[k] = 0;
    return p;
  }
  return NULL;
}

/* The <name> of an #include on the stripped line s, or NULL (length in *len). */
static const char *angle_include(const char *s, size_t *len) {
  const char *p = s;
  while (*p == ' ' || *p == '\t') p++;
  if (*p != '#') return NULL;
  for (p++; *p == ' ' || *p == '\t'; p++) {}
  if (strncmp(p, "include", 7)) return NULL;
  for (p += 7; *p == ' ' || *p == '\t'; p++) {}
  if (*p != '<') return NULL;
  const char *e = strchr(p, '>');
  const char *nl = strchr(p, '\n');
  if (!e || (nl && e > nl)) return NULL;
  *len = (size_t)(e - p - 1);
  return p + 1;
}

static int is_device_header(const char *name, size_t len) {
  for (int i = 0; device_headers[i]; i++)
    if (strlen(device_headers[i]) == len && !strncmp(device_headers[i], name, len)) return 1;
  return 0;
}

/* Checks src as NVRTC would take it (see above), blanking in out (a copy of
   src) the includes both compilers serve; GT_ERR with rt's message. */
int gt_kernel_portable(gt_runtime *rt, const char *src, char *out, const char *chunk) {
  char *s = strip_comments(src);
  if (!s) return gt_err(rt, GT_E_NOMEM);
  char file[256], name[64];
  snprintf(file, sizeof file, "%s", chunk);
  int line = 1, st = GT_OK;
  for (char *l = s; *l && st == GT_OK; line++) {
    char *eol = strchr(l, '\n');
    if (!eol) eol = l + strlen(l);
    size_t len;
    const char *h = angle_include(l, &len);
    track_line(src + (l - s), l, &line, file, sizeof file);
    if (h && is_device_header(h, len)) memset(out + (l - s), ' ', (size_t)(eol - l));
    else if (h && strncmp(h, "cuda", 4) && !(len == 5 && !strncmp(h, "mma.h", 5)))
      st = gt_fail(rt, "%s:%d: #include <%.*s>: NVRTC (the compiler of the cuda backend) has no C++ standard "
                        "library and opens no host header, so a GPU would refuse this kernel, and gtlua refuses it on "
                        "every backend. %s", file, line, (int)len, h, device_has);
    else if (!h && std_name(l, eol, name, sizeof name))
      st = gt_fail(rt, "%s:%d: std::%s: NVRTC (the compiler of the cuda backend) has no C++ standard library "
                        "(no std::vector, std::string, std::map, std::min, ...), so a GPU would refuse this kernel, and "
                        "gtlua refuses it on every backend. Use what device code has: arrays in local or __shared__ "
                        "memory instead of containers, min, max, fminf, fmaxf, sqrtf and the other math functions, "
                        "int32_t and the other fixed-width types", file, line, name);
    l = *eol ? eol + 1 : eol;
  }
  free(s);
  return st;
}

/* A parameter type's class in gt_kernel.order: 0 a tensor, 1 a 4-byte scalar, 2 an 8-byte one. */
static int param_class(int pt) {
  if (pt == GT_P_IN || pt == GT_P_OUT) return 0;
  return pt == GT_P_I32 || pt == GT_P_U32 || pt == GT_P_F32 ? 1 : 2;
}

/* The kernels of a module from their parsed signatures: names and parameter
   tables in one arena (mem, sized by gt_compile), their ids, and the
   signatures the backend compiles from. */
static void fill_kernels(gt_runtime *rt, gt_module *m, const gt_kdecl *ks, int nk, char *mem, gt_kernel *kk, gt_ksig *sig,
                         int graphable) {
  char *a = mem;
#define TAKE(n) (a += (n), a - (n))
  for (int i = 0; i < nk; i++) {
    const gt_kdecl *s = &ks[i];
    gt_kernel *k = &kk[i];
    int np = s->np;
    k->name = strcpy(TAKE(strlen(s->name) + 1), s->name);
    k->nparams = np;
    uint8_t *pt = (uint8_t *)TAKE(np), *pd = (uint8_t *)TAKE(np), *ord = (uint8_t *)TAKE(np);
    a += (8 - (uintptr_t)a % 8) % 8;
    const char **pn = (const char **)TAKE(np * sizeof(char *));
    const char **tx = (const char **)TAKE(np * sizeof(char *));
    for (int j = 0; j < np; j++) {
      pt[j] = s->p[j].ptype;
      pd[j] = s->p[j].pdtype;
      pn[j] = strcpy(TAKE(strlen(s->p[j].name) + 1), s->p[j].name);
      tx[j] = strcpy(TAKE(strlen(s->p[j].text) + 1), s->p[j].text);
    }
    k->ptype = pt; k->pdtype = pd; k->pname = pn; k->ptext = tx;
    int no = 0, count[3] = { 0, 0, 0 };   /* the order a predicted launch binds in (bind_predicted) */
    for (int c = 0; c < 3; c++)
      for (int j = 0; j < np; j++) if (param_class(pt[j]) == c) ord[no++] = (uint8_t)j, count[c]++;
    k->order = ord; k->ntensors = count[0]; k->n4 = count[1];
    k->graphable = graphable;
    k->id = ++rt->next_kernel_id;
    k->module = m;
    sig[i] = (gt_ksig){ k->name, np, pt, tx, pn };
    a += (8 - (uintptr_t)a % 8) % 8;
  }
#undef TAKE
}

/* full: the prelude, a #line naming the chunk (a C string literal: quotes,
   backslashes and controls escaped), then the source. */
static void with_line(char *full, const char *chunkname, const char *src) {
  char *o = full + sprintf(full, "%s#line 1 \"", common_prelude);
  for (const char *c = chunkname; *c; c++) {
    if (*c == '"' || *c == '\\') *o++ = '\\', *o++ = *c;
    else if ((unsigned char)*c < 0x20) o += sprintf(o, "\\%03o", (unsigned char)*c);
    else *o++ = *c;
  }
  sprintf(o, "\"\n%s", src);
}

/* Compiles src (chunkname names it in messages) and returns its kernels.
   NULL on failure with the parser's or the compiler's message. */
gt_module *gt_compile(gt_runtime *rt, const char *src, const char *opts, const char *chunkname, int graphable) {
  static gt_kdecl ks[256];
  int nk = 0;
  if (!chunkname || !*chunkname) chunkname = "kernel.cu";
  if (gt_kernel_parse(src, ks, 256, &nk, rt->err) != GT_OK) {
    char why[GT_ERRLEN];
    snprintf(why, sizeof why, "%s", rt->err);
    gt_fail(rt, "%s: %s", chunkname, why);
    return NULL;
  }
  if (nk == 0) {
    gt_fail(rt, "%s: no __global__ function found: a kernel is a `__global__ void name(...)` function, and each one "
            "becomes K.name; mark the kernels __global__ (a __device__ function is a helper the kernels call)", chunkname);
    return NULL;
  }
  size_t arena = 0;
  for (int i = 0; i < nk; i++) arena += 256 + ks[i].np * (3 + 2 * sizeof(char *) + 256);
  gt_module *m = calloc(1, sizeof *m);
  char *mem = calloc(1, arena);
  gt_kernel *kk = calloc(nk, sizeof *kk);
  gt_ksig *sig = calloc(nk, sizeof *sig);
  gt_bfunc **fns = calloc(nk, sizeof *fns);
  char *full = malloc(strlen(common_prelude) + strlen(src) + 4 * strlen(chunkname) + 32), *dev = gt_strdup(src);
  if (!m || !mem || !kk || !sig || !fns || !full || !dev) {
    free(m); free(mem); free(kk); free(sig); free(fns); free(full); free(dev);
    gt_err(rt, GT_E_NOMEM);
    return NULL;
  }
  if (gt_kernel_portable(rt, src, dev, chunkname) != GT_OK) {
    free(m); free(mem); free(kk); free(sig); free(fns); free(full); free(dev);
    return NULL;
  }
  fill_kernels(rt, m, ks, nk, mem, kk, sig, graphable);
  with_line(full, chunkname, dev);
  free(dev);
  int st = rt->be.compile(&rt->be, full, opts, sig, nk, &m->bm, fns);
  free(full);
  free(sig);
  if (st != GT_BOK) {
    gt_fail_be(rt, NULL);
    free(m); free(mem); free(kk); free(fns);
    return NULL;
  }
  for (int i = 0; i < nk; i++) kk[i].fn = fns[i];
  free(fns);
  m->n = nk; m->k = kk; m->arena = mem;
  m->next = g_modules;   /* modules live as long as the process: graphs keep their functions */
  g_modules = m;
  return m;
}

int gt_module_count(gt_module *m) { return m->n; }
gt_kernel *gt_module_kernel(gt_module *m, int i) { return i >= 0 && i < m->n ? &m->k[i] : NULL; }
