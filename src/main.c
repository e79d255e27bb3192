/* main.c - the gtlua host: embeds LuaJIT, runs scripts, -e code, Busted
   and the REPL (in the shape of lua.c): its arguments, gt loaded, the exit
   report.  Messages and protected calls are main_call.c's, gt.host and the
   root main_gthost.c's, the REPL main_repl.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"
#include "luajit.h"
#include "main.h"

static const char *opt_backend, *opt_report;
static int opt_nproc;

#define GTLUA_VERSION "0.1.0"

enum { HAS_E = 1, HAS_I = 2, HAS_V = 4, HAS_HELP = 8, HAS_STATS = 16, HAS_BUSTED = 32, HAS_ADVISE = 64, ARGS_ERROR = -1 };

/* -- Arguments ------------------------------------------------------------ */

static void print_usage(FILE *f, const char *badoption) {
  if (badoption && strncmp(badoption, "--backend=", 10) == 0)
    fprintf(f, "%s: unknown backend '%s' (cpu, cuda or auto)\n", PROGNAME, badoption + 10);
  else if (badoption && strncmp(badoption, "--nproc", 7) == 0)
    fprintf(f, "%s: '--nproc' needs a number of processes (1 or more)\n", PROGNAME);
  else if (badoption && (badoption[1] == 'e' || badoption[1] == 'l'))
    fprintf(f, "%s: '%s' needs argument\n", PROGNAME, badoption);
  else if (badoption)
    fprintf(f, "%s: unrecognized option '%s'\n", PROGNAME, badoption);
  fputs("usage: " PROGNAME " [options] [script [args]]\n"
        "Available options are:\n"
        "  -e stat          execute string 'stat'\n"
        "  -i               enter interactive mode after executing 'script'\n"
        "  -l mod           require library 'mod' into global 'mod' (or -l g=mod)\n"
        "  -v               show version information\n"
        "  --backend=NAME   cpu, cuda or auto (sets GTLUA_BACKEND)\n"
        "  --stats          print the statistics report at exit\n"
        "  --report=FILE    write the HTML report to FILE at exit (also --report FILE)\n"
        "  --busted ARGS    run Busted specs with gt and its assertions (gt.busted) loaded,\n"
        "                   e.g. gtlua --busted my_spec.lua (the rest of the line is Busted's)\n"
        "  --nproc N        start N processes of the command, one a GPU (RANK, WORLD_SIZE, ... set\n"
        "                   as torchrun does; output lines prefixed [rank]; see gt.dist)\n"
        "  --advise         at exit, answer per tree: launch-bound? how many shapes? what breaks graphs?\n"
        "  -h, --help       show this help\n"
        "  --               stop handling options\n"
        "  -                stop handling options and execute stdin\n"
        "Environment: GTLUA_INIT (code or @file, run first), GTLUA_HOME (the directory\n"
        "  with lua/ and kernels/), GTLUA_BACKEND, GTLUA_NO_GT=1 (no gt), GTLUA_HISTORY,\n"
        "  GTLUA_REPL_TIME (seconds), GTLUA_BUSTED (the busted script for --busted)\n", f);
  fflush(f);
}

/* Checks the options; *first is the index of the script (argc when none).
   Returns the HAS_* flags, or ARGS_ERROR with *first at the bad option. */
static int collectargs(char **argv, int *first) {
  int args = 0, i;
  for (i = 1; argv[i] != NULL; i++) {
    const char *a = argv[i];
    *first = i;
    if (a[0] != '-' || a[1] == '\0') return args;           /* script or '-' */
    if (strcmp(a, "--") == 0) { *first = i + 1; return args; }
    if (strncmp(a, "--backend=", 10) == 0) {
      opt_backend = a + 10;
      if (strcmp(opt_backend, "cpu") && strcmp(opt_backend, "cuda") && strcmp(opt_backend, "auto"))
        return ARGS_ERROR;
    } else if (strncmp(a, "--report=", 9) == 0 && a[9] != '\0') {
      opt_report = a + 9;
    } else if (strcmp(a, "--report") == 0) {
      if (argv[i + 1] == NULL) return ARGS_ERROR;
      opt_report = argv[++i];
    } else if (strcmp(a, "--nproc") == 0 || strncmp(a, "--nproc=", 8) == 0) {
      const char *v = a[7] == '=' ? a + 8 : argv[++i];
      if (v == NULL || (opt_nproc = atoi(v)) < 1) return ARGS_ERROR;
    } else if (strcmp(a, "--stats") == 0) {
      args |= HAS_STATS;
    } else if (strcmp(a, "--advise") == 0) {
      args |= HAS_ADVISE;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      args |= HAS_HELP;
    } else if (strcmp(a, "--busted") == 0) {   /* the rest is Busted's */
      *first = i + 1;
      return args | HAS_BUSTED;
    } else if ((a[1] == 'i' || a[1] == 'v') && a[2] == '\0') {
      args |= a[1] == 'i' ? HAS_I | HAS_V : HAS_V;   /* -i implies -v */
    } else if (a[1] == 'e' || a[1] == 'l') {
      if (a[1] == 'e') args |= HAS_E;
      if (a[2] == '\0' && (argv[++i] == NULL || argv[i][0] == '-')) return ARGS_ERROR;
    } else {
      return ARGS_ERROR;
    }
  }
  *first = i;
  return args;
}

/* arg as lua.c: the script at 0, interpreter and options below, script args 1..n;
   without a script, the interpreter at 0. */
static void createargtable(lua_State *L, char **argv, int argc, int script) {
  int i;
  if (script == argc) script = 0;
  lua_createtable(L, argc - script - 1, script + 1);
  for (i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

/* -l mod: global mod = require "mod"; -l g=mod: global g. */
static int dolibrary(lua_State *L, const char *spec) {
  const char *eq = strchr(spec, '=');
  int status;
  lua_getglobal(L, "require");
  lua_pushstring(L, eq ? eq + 1 : spec);
  status = gtl_docall(L, 1, 1);
  if (status == 0) {
    lua_pushlstring(L, spec, eq ? (size_t)(eq - spec) : strlen(spec));
    lua_insert(L, -2);
    lua_settable(L, LUA_GLOBALSINDEX);
  }
  return gtl_report(L, status);
}

/* Runs -e and -l in the order given. */
static int runargs(lua_State *L, char **argv, int script) {
  int i;
  for (i = 1; i < script; i++) {
    const char *a = argv[i], *extra;
    int status;
    if (a[0] != '-' || (a[1] != 'e' && a[1] != 'l')) continue;
    extra = a[2] ? a + 2 : argv[++i];
    status = a[1] == 'e' ? gtl_dostring(L, extra, "=(command line)") : dolibrary(L, extra);
    if (status != 0) return status;
  }
  return 0;
}

/* Whether script path names Busted's runner ("busted", or GTLUA_BUSTED). */
static int is_busted(const char *path) {
  const char *base = strrchr(path, '/'), *b = getenv("GTLUA_BUSTED");
  base = base ? base + 1 : path;
  return strcmp(base, "busted") == 0 || (b && *b && strcmp(b, path) == 0);
}

static int handle_script(lua_State *L, char **argv) {
  const char *fname = argv[0];
  int status, n, i;
  if (strcmp(fname, "-") == 0 && strcmp(argv[-1], "--") != 0) fname = NULL;  /* stdin */
  if (fname && is_busted(fname) && (status = gtl_dostring(L, "if package.loaded.gt then require 'gt.busted' end", "=(busted)")) != 0)
    return status;   /* gtlua $(command -v busted) spec/: gt's assertions, as with --busted */
  status = luaL_loadfile(L, fname);
  if (status == 0) {   /* the script's arguments, also as ... */
    lua_getglobal(L, "arg");
    n = lua_istable(L, -1) ? (int)lua_objlen(L, -1) : 0;
    luaL_checkstack(L, n + 3, "too many arguments to script");
    for (i = 1; i <= n; i++) lua_rawgeti(L, -i, i);
    lua_remove(L, -i);
    status = gtl_docall(L, n, 0);
  }
  return gtl_report(L, status);
}

/* -- gt ------------------------------------------------------------------- */

static int handle_init(lua_State *L) {
  const char *init = getenv("GTLUA_INIT");
  if (init == NULL) return 0;
  if (init[0] == '@') return gtl_dofile(L, init + 1);
  return gtl_dostring(L, init, "=GTLUA_INIT");
}

/* The global gt = require "gt", unless GTLUA_NO_GT is set (and not "0"). */
static int load_gt(lua_State *L) {
  const char *no_gt = getenv("GTLUA_NO_GT");
  int status;
  if (no_gt && *no_gt && strcmp(no_gt, "0") != 0) return 0;
  lua_getglobal(L, "require");
  lua_pushliteral(L, "gt");
  status = gtl_docall(L, 1, 1);
  if (status == 0) lua_setglobal(L, "gt");
  else if (lua_isstring(L, -1) && strstr(lua_tostring(L, -1), "module 'gt' not found")) {
    lua_pop(L, 1);   /* the long search list says little: say where we looked and what to do */
    lua_pushfstring(L, "cannot find gt's Lua files: no %s/lua/gt/init.lua.\n"
                    "Set GTLUA_HOME to the directory that holds lua/ and kernels/ (a gtlua checkout),\n"
                    "or run `make install` (PREFIX=...) and use PREFIX/bin/gtlua, which finds PREFIX/share/gtlua.",
                    gtl_root ? gtl_root : "(unknown)");
  }
  return gtl_report(L, status);
}

/* --busted ARGS: Busted's runner (GTLUA_BUSTED, else busted on the PATH) as the
   script, with gt.busted's assertions loaded first; argv[first..] are its arguments. */
static int run_busted(lua_State *L, char **argv, int argc, int first) {
  static char path[PATH_MAX];
  const char *b = getenv("GTLUA_BUSTED"), *p = getenv("PATH");
  char **bargv;
  int i, n = argc - first, status;
  if (b == NULL || *b == '\0') {
    b = NULL;
    while (p && *p) {
      const char *end = strchr(p, ':');
      size_t len = end ? (size_t)(end - p) : strlen(p);
      snprintf(path, sizeof path, "%.*s/busted", (int)len, len ? p : ".");
      if (access(path, R_OK) == 0) { b = path; break; }
      p = end ? end + 1 : NULL;
    }
  }
  if (b == NULL) {
    gtl_message(PROGNAME, "--busted: no busted on the PATH (install lua-busted, or set GTLUA_BUSTED to its script)");
    return 1;
  }
  if ((status = gtl_dostring(L, "require 'gt.busted'", "=(--busted)")) != 0) return status;
  if ((bargv = calloc((size_t)n + 3, sizeof *bargv)) == NULL) return 1;
  bargv[0] = argv[0];
  bargv[1] = (char *)b;
  for (i = 0; i < n; i++) bargv[i + 2] = argv[first + i];
  createargtable(L, bargv, n + 2, 1);
  status = handle_script(L, bargv + 1);
  free(bargv);
  return status;
}

/* Pushes the global gt's field name when gt is a table; 0 (nothing pushed) if not. */
static int push_gt_field(lua_State *L, const char *name) {
  lua_getglobal(L, "gt");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, name);
    lua_remove(L, -2);
    if (!lua_isnil(L, -1)) return 1;
  }
  lua_pop(L, 1);
  return 0;
}

static void print_version(lua_State *L) {
  const char *backend = NULL;
  int top = lua_gettop(L);
  if (push_gt_field(L, "backend") && lua_pcall(L, 0, 1, 0) == 0) backend = lua_tostring(L, -1);
  printf("%s %s (%s) backend %s\n", PROGNAME, GTLUA_VERSION, LUAJIT_VERSION,
         backend ? backend : "none");
  fflush(stdout);
  lua_settop(L, top);
}

/* --stats / --report=FILE / --advise: gt._at_exit{stats =, report =, advise =}, when gt offers it. */
static int at_exit(lua_State *L, int args) {
  if (!(args & (HAS_STATS | HAS_ADVISE)) && !opt_report) return 0;
  if (!push_gt_field(L, "_at_exit")) return 0;
  lua_createtable(L, 0, 3);
  lua_pushboolean(L, (args & HAS_STATS) != 0);
  lua_setfield(L, -2, "stats");
  lua_pushboolean(L, (args & HAS_ADVISE) != 0);
  lua_setfield(L, -2, "advise");
  if (opt_report) {
    lua_pushstring(L, opt_report);
    lua_setfield(L, -2, "report");
  }
  return gtl_report(L, gtl_docall(L, 1, 0));
}

/* -- Main ----------------------------------------------------------------- */

struct smain { int argc; char **argv; int args, script, status; };

static int pmain(lua_State *L) {
  struct smain *s = (struct smain *)lua_touserdata(L, 1);
  int args = s->args, ok;
  gtl_L = L;
  luaL_openlibs(L);
  gtl_preload_host(L);
  gtl_set_paths(L);
  createargtable(L, s->argv, s->argc, s->script);
  ok = handle_init(L) == 0 && load_gt(L) == 0;
  if (ok && (args & HAS_V)) print_version(L);
  ok = ok && runargs(L, s->argv, s->script) == 0;
  if (ok && (args & HAS_BUSTED)) ok = run_busted(L, s->argv, s->argc, s->script) == 0;
  else if (ok && s->script < s->argc) ok = handle_script(L, s->argv + s->script) == 0;
  if (ok && (args & HAS_I)) {
    gtl_repl(L);
  } else if (ok && s->script == s->argc && !(args & (HAS_E | HAS_V | HAS_BUSTED))) {
    if (isatty(STDIN_FILENO)) {   /* no script, a terminal: the REPL */
      print_version(L);
      gtl_repl(L);
    } else {
      ok = gtl_dofile(L, NULL) == 0;  /* no script, a pipe: stdin is the script */
    }
  }
  if (at_exit(L, args) != 0) ok = 0;
  s->status = !ok;
  return 0;
}

int main(int argc, char **argv) {
  struct smain s = { argc, argv, 0, argc, 0 };
  lua_State *L;
  int status;
  s.args = collectargs(argv, &s.script);
  if (s.args == ARGS_ERROR) {
    print_usage(stderr, argv[s.script]);
    return EXIT_FAILURE;
  }
  if (s.args & HAS_HELP) {
    print_usage(stdout, NULL);
    return EXIT_SUCCESS;
  }
  if (opt_nproc) return gtl_procs_run(argc, argv, opt_nproc);
  if (getenv("GTLUA_DIST_RUN")) setvbuf(stdout, NULL, _IOLBF, 0);   /* a rank's lines reach the launcher as printed */
  if (opt_backend) setenv("GTLUA_BACKEND", opt_backend, 1);  /* before gt loads */
  if ((s.args & (HAS_STATS | HAS_ADVISE)) || opt_report) setenv("GTLUA_KEEP_TREES", "1", 1);  /* trees stay for the exit report */
  /* Lua's memory: LuaJIT's own allocator.  Free lists of our own would be
     slightly quicker per replayed op with warm caches, but the collector's
     sweep order scatters the handles they give out, which costs more with
     the caches cold between steps (as after a device sync), and they never
     give memory back. */
  if ((L = luaL_newstate()) == NULL) {
    gtl_message(PROGNAME, "cannot create state: not enough memory");
    return EXIT_FAILURE;
  }
  status = lua_cpcall(L, pmain, &s);
  gtl_report(L, status);
  /* at exit a dropped tree's finalizer frees it, outputs alive or not (tree.lua) */
  (void)luaL_dostring(L, "local g = package.loaded.gt; if g then g._closing = true end");
  lua_close(L);
  return (status == 0 && s.status == 0) ? EXIT_SUCCESS : EXIT_FAILURE;
}
