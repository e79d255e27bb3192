/* main.c - the gtlua host: embeds LuaJIT, runs scripts, -e code and a REPL (in the shape of lua.c). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <editline/readline.h>
#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"
#include "luajit.h"

#define GTLUA_VERSION "0.1.0"
#define PROGNAME "gtlua"
#define HISTORY_MAX 1000

enum { HAS_E = 1, HAS_I = 2, HAS_V = 4, HAS_HELP = 8, HAS_STATS = 16, HAS_BUSTED = 32, HAS_ADVISE = 64, ARGS_ERROR = -1 };

static lua_State *globalL;                 /* for the signal handler and completion */
static const char *progname = PROGNAME;    /* error prefix; none inside the REPL */
static const char *opt_backend, *opt_report;
static const char *gt_root;                /* where lua/ and kernels/ were looked for */
static volatile sig_atomic_t interrupted;

/* -- Messages and protected calls ---------------------------------------- */

static void l_message(const char *pname, const char *msg) {
  fflush(stdout);
  if (pname) fprintf(stderr, "%s: ", pname);
  fprintf(stderr, "%s\n", msg);
  fflush(stderr);
}

/* Prints the error on the stack top when status is an error, and pops it. */
static int report(lua_State *L, int status) {
  if (status != 0 && !lua_isnil(L, -1)) {
    const char *msg = lua_tostring(L, -1);
    l_message(progname, msg ? msg : "(error object is not a string)");
    lua_pop(L, 1);
  }
  return status;
}

/* Message handler: the error as a string plus debug.traceback.  error() with
   nil stays nil: a silent exit 1, as lua.c 5.1 (busted's runner relies on it). */
static int msghandler(lua_State *L) {
  if (lua_isnoneornil(L, 1)) return 1;
  if (lua_type(L, 1) != LUA_TSTRING && lua_type(L, 1) != LUA_TNUMBER) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    lua_replace(L, 1);
  }
  lua_getglobal(L, "debug");
  if (lua_istable(L, -1)) lua_getfield(L, -1, "traceback");
  if (!lua_isfunction(L, -1)) {   /* debug.traceback removed: the C one */
    luaL_traceback(L, L, lua_tostring(L, 1), 1);
    return 1;
  }
  lua_pushvalue(L, 1);
  lua_pushinteger(L, 2);
  lua_call(L, 2, 1);
  return 1;
}

/* Ctrl-C: a count hook raises "interrupted!" inside the running chunk; a second
   Ctrl-C before the hook runs kills the process (the default action). */
static void lstop(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  lua_pushliteral(L, "interrupted!");
  lua_error(L);
}

static void laction(int sig) {
  signal(sig, SIG_DFL);
  interrupted = 1;
  lua_sethook(globalL, lstop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* Installs fn for SIGINT without SA_RESTART (a blocking read returns early);
   saves the previous action in *old unless NULL. */
static void catch_sigint(void (*fn)(int), struct sigaction *old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sigaction(SIGINT, &sa, old);
}

/* Calls the function below narg arguments with the traceback handler and Ctrl-C armed. */
static int docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg, status;
  struct sigaction old;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  catch_sigint(laction, &old);
  status = lua_pcall(L, narg, nres, base);
  sigaction(SIGINT, &old, NULL);
  if (interrupted) {   /* the hook may not have fired: never leave it behind */
    interrupted = 0;
    lua_sethook(L, NULL, 0, 0);
  }
  lua_remove(L, base);
  return status;
}

static int dochunk(lua_State *L, int status) {
  if (status == 0) status = docall(L, 0, 0);
  return report(L, status);
}

static int dofile(lua_State *L, const char *name) {
  return dochunk(L, luaL_loadfile(L, name));
}

static int dostring(lua_State *L, const char *s, const char *name) {
  return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* -- Finding the project root -------------------------------------------- */

/* Root of lua/ and kernels/: $GTLUA_HOME, else the build tree (<exe dir>/..),
   else an installed tree (<exe dir>/../share/gtlua).  Sets GTLUA_BIN, and
   GTLUA_HOME when unset, so Lua code and spawned specs find both. */
static const char *find_root(void) {
  static char exe[PATH_MAX], root[PATH_MAX];
  static const char *const up[] = { "/..", "/../share/gtlua" };
  char dir[PATH_MAX + 32], probe[PATH_MAX + 64];
  const char *home = getenv("GTLUA_HOME");
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  size_t i;
  if (n > 0) {
    exe[n] = '\0';
    setenv("GTLUA_BIN", exe, 1);
  }
  if (home && *home) return home;
  if (n <= 0) return NULL;
  for (i = 0; i <= 2; i++) {   /* i == 2: no tree has gt yet, take the build tree */
    snprintf(dir, sizeof dir, "%.*s%s", (int)(strrchr(exe, '/') - exe), exe, up[i % 2]);
    snprintf(probe, sizeof probe, "%s/lua/gt/init.lua", dir);
    if ((i == 2 || access(probe, R_OK) == 0) && realpath(dir, root)) {
      setenv("GTLUA_HOME", root, 1);
      return root;
    }
  }
  return NULL;
}

/* fn at index fi (its arguments after it) in a pcall made from C; then its
   results past the second into the table at index 1 (extra[1..n-2]) and
   nils pushed so that fi and fi + 1 hold r1 and r2.  Returns the status;
   *n: fn's result count (1 with an error, the error at fi). */
static int pcall_spill(lua_State *L, int fi, int *n) {
  int status = lua_pcall(L, lua_gettop(L) - fi, LUA_MULTRET, 0);
  *n = status ? 1 : lua_gettop(L) - fi + 1;
  luaL_checkstack(L, 10, "gt.host");
  if (*n == 0) lua_pushnil(L);
  if (*n <= 1) lua_pushnil(L);
  for (int i = 3; i <= *n; i++) {
    lua_pushvalue(L, fi - 1 + i);
    lua_rawseti(L, 1, i - 2);
  }
  return status;
}

/* gt.host.run(extra, finish, self, fn, ...) -> ok, n, r1, r2: a tree call's
   body and end.  fn(...) runs in a pcall made from C; then, also protected,
   finish(self, ok, n, r1, r2) (with an error: ok false, n 1, r1 the error;
   results past the second in extra[1..n-2]).  The result: true, fn's result
   count and first two results; or false, 1, the error (of fn, passed on by
   finish, or finish's own).  Compiled code returning from the body or from
   finish meets this C frame, and a trace stops there cleanly.  LuaJIT
   cannot compile a return across the frame of its own pcall (the trace
   aborts with "return to lower frame"), and after a few aborts the end of
   every step ran in the interpreter. */
static int host_run(lua_State *L) {
  int n, status = pcall_spill(L, 4, &n);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, 3);
  lua_pushboolean(L, status == 0);
  lua_pushinteger(L, n);
  lua_pushvalue(L, 4);
  lua_pushvalue(L, 5);
  int err = lua_gettop(L) - 5;                 /* where finish's error lands */
  if (lua_pcall(L, 5, 0, 0) != 0) status = 1;
  else err = 4;                                /* (fn's error, if any: finish passes it on) */
  lua_pushboolean(L, status == 0);
  lua_pushinteger(L, status ? 1 : n);
  lua_pushvalue(L, status ? err : 4);
  if (status) lua_pushnil(L); else lua_pushvalue(L, 5);
  return 4;
}

/* gt.host.call(extra, fn, ...) -> ok, n, r1, r2: host_run with no finish
   (gt.scope's, which settles its tensors in compiled code after this
   returns): fn(...) in a pcall made from C; results past the second in
   extra[1..n-2]; with an error false, 1, the error. */
static int host_call(lua_State *L) {
  int n, status = pcall_spill(L, 2, &n);
  lua_pushboolean(L, status == 0);
  lua_pushinteger(L, n);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, 3);
  return 4;
}

static int open_host(lua_State *L) {
  lua_newtable(L);
  lua_pushcfunction(L, host_run);
  lua_setfield(L, -2, "run");
  lua_pushcfunction(L, host_call);
  lua_setfield(L, -2, "call");
  return 1;
}

/* require "gt.host": the host's functions for gt's modules. */
static void preload_host(lua_State *L) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, open_host);
  lua_setfield(L, -2, "gt.host");
  lua_pop(L, 2);
}

static void set_paths(lua_State *L) {
  const char *root = gt_root = find_root();
  if (root == NULL) return;
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/lua/?.lua;%s/lua/?/init.lua;%s", root, root, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 2);
}

/* -- Arguments ------------------------------------------------------------ */

static void print_usage(FILE *f, const char *badoption) {
  if (badoption && strncmp(badoption, "--backend=", 10) == 0)
    fprintf(f, "%s: unknown backend '%s' (cpu, cuda or auto)\n", PROGNAME, badoption + 10);
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
  status = docall(L, 1, 1);
  if (status == 0) {
    lua_pushlstring(L, spec, eq ? (size_t)(eq - spec) : strlen(spec));
    lua_insert(L, -2);
    lua_settable(L, LUA_GLOBALSINDEX);
  }
  return report(L, status);
}

/* Runs -e and -l in the order given. */
static int runargs(lua_State *L, char **argv, int script) {
  int i;
  for (i = 1; i < script; i++) {
    const char *a = argv[i], *extra;
    int status;
    if (a[0] != '-' || (a[1] != 'e' && a[1] != 'l')) continue;
    extra = a[2] ? a + 2 : argv[++i];
    status = a[1] == 'e' ? dostring(L, extra, "=(command line)") : dolibrary(L, extra);
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
  if (fname && is_busted(fname) && (status = dostring(L, "if package.loaded.gt then require 'gt.busted' end", "=(busted)")) != 0)
    return status;   /* gtlua $(command -v busted) spec/: gt's assertions, as with --busted */
  status = luaL_loadfile(L, fname);
  if (status == 0) {   /* the script's arguments, also as ... */
    lua_getglobal(L, "arg");
    n = lua_istable(L, -1) ? (int)lua_objlen(L, -1) : 0;
    luaL_checkstack(L, n + 3, "too many arguments to script");
    for (i = 1; i <= n; i++) lua_rawgeti(L, -i, i);
    lua_remove(L, -i);
    status = docall(L, n, 0);
  }
  return report(L, status);
}

/* -- gt ------------------------------------------------------------------- */

static int handle_init(lua_State *L) {
  const char *init = getenv("GTLUA_INIT");
  if (init == NULL) return 0;
  if (init[0] == '@') return dofile(L, init + 1);
  return dostring(L, init, "=GTLUA_INIT");
}

/* The global gt = require "gt", unless GTLUA_NO_GT is set (and not "0"). */
static int load_gt(lua_State *L) {
  const char *no_gt = getenv("GTLUA_NO_GT");
  int status;
  if (no_gt && *no_gt && strcmp(no_gt, "0") != 0) return 0;
  lua_getglobal(L, "require");
  lua_pushliteral(L, "gt");
  status = docall(L, 1, 1);
  if (status == 0) lua_setglobal(L, "gt");
  else if (lua_isstring(L, -1) && strstr(lua_tostring(L, -1), "module 'gt' not found")) {
    lua_pop(L, 1);   /* the long search list says little: say where we looked and what to do */
    lua_pushfstring(L, "cannot find gt's Lua files: no %s/lua/gt/init.lua.\n"
                    "Set GTLUA_HOME to the directory that holds lua/ and kernels/ (a gtlua checkout),\n"
                    "or run `make install` (PREFIX=...) and use PREFIX/bin/gtlua, which finds PREFIX/share/gtlua.",
                    gt_root ? gt_root : "(unknown)");
  }
  return report(L, status);
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
    l_message(PROGNAME, "--busted: no busted on the PATH (install lua-busted, or set GTLUA_BUSTED to its script)");
    return 1;
  }
  if ((status = dostring(L, "require 'gt.busted'", "=(--busted)")) != 0) return status;
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
  return report(L, docall(L, 1, 0));
}

/* -- REPL: input, history, completion ------------------------------------ */

static int repl_ref = LUA_NOREF;      /* require "gt.repl", or none (plain print) */
static int complete_ref = LUA_NOREF, complete_n;
static int tty_input;                 /* libedit; else plain lines and prompts on stdout */
static char history[PATH_MAX];
static volatile sig_atomic_t prompt_interrupted;

/* Ctrl-C at the prompt: readline returns NULL (no SA_RESTART), the line is dropped. */
static void prompt_int(int sig) {
  (void)sig;
  prompt_interrupted = 1;
}

/* Pushes the function repl[name]; 0 (nothing pushed) when there is none. */
static int push_repl_fn(lua_State *L, const char *name) {
  if (repl_ref == LUA_NOREF) return 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, repl_ref);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  if (lua_isfunction(L, -1)) return 1;
  lua_pop(L, 1);
  return 0;
}

/* libedit generator: the state-th entry of the list repl.complete returned. */
static char *complete_next(const char *text, int state) {
  const char *s;
  char *r = NULL;
  (void)text;
  if (state >= complete_n) return NULL;
  lua_rawgeti(globalL, LUA_REGISTRYINDEX, complete_ref);
  lua_rawgeti(globalL, -1, state + 1);
  if ((s = lua_tostring(globalL, -1)) != NULL) r = strdup(s);
  lua_pop(globalL, 2);
  return r;
}

/* Tab: the candidates come from repl.complete(word) (gt.te -> gt.tensor). */
static char **complete(const char *text, int start, int end) {
  lua_State *L = globalL;
  (void)start, (void)end;
  rl_attempted_completion_over = 1;   /* never fall back to file names */
  luaL_unref(L, LUA_REGISTRYINDEX, complete_ref);
  complete_ref = LUA_NOREF, complete_n = 0;
  if (!push_repl_fn(L, "complete")) return NULL;
  lua_pushstring(L, text);
  if (lua_pcall(L, 1, 1, 0) != 0 || !lua_istable(L, -1)) {
    lua_pop(L, 1);
    return NULL;
  }
  complete_n = (int)lua_objlen(L, -1);
  complete_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return complete_n > 0 ? rl_completion_matches(text, complete_next) : NULL;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

static void repl_init(lua_State *L) {
  static char breaks[] = " \t\n\"\\'><=;+-*/%^~#,()[]{}";
  const char *h = getenv("GTLUA_HISTORY"), *home = getenv("HOME");
  lua_getglobal(L, "require");
  lua_pushliteral(L, "gt.repl");
  if (report(L, docall(L, 1, 1)) == 0) {
    lua_pushboolean(L, isatty(STDOUT_FILENO) && getenv("NO_COLOR") == NULL);
    lua_setfield(L, -2, "color");
    repl_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (push_repl_fn(L, "start")) report(L, docall(L, 0, 0));   /* the banner's second line, help */
  }
  tty_input = isatty(STDIN_FILENO);
  if (!tty_input) return;
  catch_sigint(prompt_int, NULL);   /* docall swaps in laction while code runs */
  rl_readline_name = PROGNAME;
  rl_attempted_completion_function = complete;
  rl_basic_word_break_characters = rl_completer_word_break_characters = breaks;
  rl_completion_append_character = '\0';
  using_history();
  if (h == NULL && home != NULL) snprintf(history, sizeof history, "%s/.gtlua_history", home);
  else if (h != NULL) snprintf(history, sizeof history, "%s", h);   /* "": no history */
  stifle_history(HISTORY_MAX);
  if (history[0] && read_history(history) == 0 && file_size(history) > 256 * HISTORY_MAX)
    write_history(history);   /* keep the file at the last HISTORY_MAX entries */
}

/* Pushes the next input line without its newline and returns 1; returns 0 at
   the end of input, -1 (nothing pushed) when Ctrl-C dropped the line. */
static int pushline(lua_State *L, int firstline) {
  const char *prompt = firstline ? "> " : ">> ";
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  if (tty_input) {
    prompt_interrupted = 0;
    line = readline(prompt);
    if (line == NULL && prompt_interrupted) {   /* Ctrl-C: drop the line, prompt again */
      prompt_interrupted = 0;
      fputs("\n", stdout);
      return -1;
    }
    if (line == NULL) return 0;
    n = (ssize_t)strlen(line);
  } else {
    fputs(prompt, stdout);
    fflush(stdout);
    if ((n = getline(&line, &cap, stdin)) < 0) {
      free(line);
      return 0;
    }
  }
  if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
  lua_pushlstring(L, line, (size_t)n);
  free(line);
  return 1;
}

/* Adds a chunk to the history and appends it to the file, in libedit's format
   (octal escapes; libedit's own append_history writes one entry too many). */
static void save_line(const char *chunk) {
  const unsigned char *p;
  FILE *f;
  if (!tty_input || chunk[0] == '\0') return;
  add_history(chunk);
  if (!history[0] || (f = fopen(history, "a")) == NULL) return;
  if (ftell(f) == 0) fputs("_HiStOrY_V2_\n", f);
  for (p = (const unsigned char *)chunk; *p; p++) {
    if (*p <= ' ' || *p == '\\' || *p >= 127) fprintf(f, "\\%03o", *p);
    else fputc(*p, f);
  }
  fputc('\n', f);
  fclose(f);
}

/* A syntax error at '<eof>' means the chunk is incomplete: read more. */
static int incomplete(lua_State *L, int status) {
  static const char mark[] = "'<eof>'";
  size_t len;
  const char *msg = lua_tolstring(L, -1, &len);
  return status == LUA_ERRSYNTAX && len >= sizeof mark - 1 &&
         strcmp(msg + len - (sizeof mark - 1), mark) == 0;
}

/* Replaces the line on the stack top by its compiled chunk (return 0), reading
   '>>' lines while incomplete; else by an error (status).  Tries the chunk as
   an expression list first (printed), then as a statement; "=e" is "e". */
static int loadchunk(lua_State *L, int *quiet) {
  size_t len;
  const char *buf = lua_tostring(L, -1);
  int status;
  if (buf[0] == '=') {
    lua_pushstring(L, buf + 1);
    lua_replace(L, -2);
  }
  for (;;) {
    const char *ret;
    size_t n;
    buf = lua_tolstring(L, -1, &len);
    for (n = len; n > 0 && buf[n - 1] && strchr(" \t\r;", buf[n - 1]); n--) {}
    /* not "return f()": a tail call would hide the chunk's line from errors */
    lua_pushliteral(L, "return (function(...) return ... end)(");
    lua_pushlstring(L, buf, n);
    lua_pushliteral(L, "\n)");
    lua_concat(L, 3);
    ret = lua_tolstring(L, -1, &n);
    status = luaL_loadbuffer(L, ret, n, "=stdin");
    lua_remove(L, -2);
    if (status == 0) break;
    lua_pop(L, 1);
    status = luaL_loadbuffer(L, buf, len, "=stdin");
    if (status == 0 || !incomplete(L, status)) break;
    lua_pop(L, 1);
    if ((status = pushline(L, 0)) <= 0) {   /* end of input or Ctrl-C inside a chunk */
      if (status == 0) luaL_loadbuffer(L, buf, len, "=stdin");
      else lua_pushnil(L);                  /* nil: nothing to report */
      lua_remove(L, -2);
      return LUA_ERRSYNTAX;
    }
    lua_pushliteral(L, "\n");
    lua_insert(L, -2);
    lua_concat(L, 3);
  }
  save_line(buf);
  /* interpreted, not compiled: Ctrl-C's hook never runs inside a compiled loop
     (while true do end); gt's own functions stay compiled */
  if (status == 0) luaJIT_setmode(L, -1, LUAJIT_MODE_ALLFUNC | LUAJIT_MODE_OFF);
  while (len > 0 && buf[len - 1] && strchr(" \t\r", buf[len - 1])) len--;
  *quiet = len > 0 && buf[len - 1] == ';';
  lua_remove(L, -2);
  return status;
}

/* Runs the chunk on the stack top; repl.show(quiet, seconds, results...) prints. */
static int runchunk(lua_State *L, int quiet) {
  int base = lua_gettop(L), status, n;
  double t0 = now();
  if ((status = docall(L, 0, LUA_MULTRET)) != 0) return status;
  n = lua_gettop(L) - base + 1;
  if (push_repl_fn(L, "show")) {
    lua_insert(L, base);
    lua_pushboolean(L, quiet);
    lua_insert(L, base + 1);
    lua_pushnumber(L, now() - t0);
    lua_insert(L, base + 2);
    status = docall(L, n + 2, 0);
  } else if (n > 0 && !quiet) {   /* no gt.repl: print as lua.c does */
    lua_getglobal(L, "print");
    lua_insert(L, base);
    status = docall(L, n, 0);
  }
  lua_settop(L, base - 1 + (status != 0));
  fflush(stdout);
  return status;
}

/* "?name": repl.help("name"). */
static int dohelp(lua_State *L) {
  if (!push_repl_fn(L, "help")) {
    lua_pop(L, 1);
    return 0;
  }
  lua_pushstring(L, lua_tostring(L, -2) + 1);
  lua_remove(L, -3);
  return docall(L, 1, 0);
}

/* An error in the REPL prints its message and traceback (DESIGN section
   10), as lua.c's does; the text is also kept for ?tb (registry
   "gtlua.traceback"), to see it again after other output. */
static void report_repl(lua_State *L, int status) {
  if (status != 0 && lua_isstring(L, -1)) {
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "gtlua.traceback");
  }
  report(L, status);
}

/* The loop: errors print (their message; ?tb the traceback) and the loop goes on; end of input ends it. */
static void doREPL(lua_State *L) {
  progname = NULL;
  repl_init(L);
  for (;;) {
    int quiet = 0, status = pushline(L, 1);
    if (status == 0) break;
    if (status < 0) continue;
    if (lua_tostring(L, -1)[0] == '?') {
      save_line(lua_tostring(L, -1));
      status = dohelp(L);
    } else {
      status = loadchunk(L, &quiet);
      if (status == 0) status = runchunk(L, quiet);
    }
    report_repl(L, status);
    lua_settop(L, 0);
  }
  fputs("\n", stdout);
  fflush(stdout);
  signal(SIGINT, SIG_DFL);
  progname = PROGNAME;
}

/* -- Main ----------------------------------------------------------------- */

struct smain { int argc; char **argv; int args, script, status; };

static int pmain(lua_State *L) {
  struct smain *s = (struct smain *)lua_touserdata(L, 1);
  int args = s->args, ok;
  globalL = L;
  luaL_openlibs(L);
  preload_host(L);
  set_paths(L);
  createargtable(L, s->argv, s->argc, s->script);
  ok = handle_init(L) == 0 && load_gt(L) == 0;
  if (ok && (args & HAS_V)) print_version(L);
  ok = ok && runargs(L, s->argv, s->script) == 0;
  if (ok && (args & HAS_BUSTED)) ok = run_busted(L, s->argv, s->argc, s->script) == 0;
  else if (ok && s->script < s->argc) ok = handle_script(L, s->argv + s->script) == 0;
  if (ok && (args & HAS_I)) {
    doREPL(L);
  } else if (ok && s->script == s->argc && !(args & (HAS_E | HAS_V | HAS_BUSTED))) {
    if (isatty(STDIN_FILENO)) {   /* no script, a terminal: the REPL */
      print_version(L);
      doREPL(L);
    } else {
      ok = dofile(L, NULL) == 0;  /* no script, a pipe: stdin is the script */
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
  if (opt_backend) setenv("GTLUA_BACKEND", opt_backend, 1);  /* before gt loads */
  if ((s.args & (HAS_STATS | HAS_ADVISE)) || opt_report) setenv("GTLUA_KEEP_TREES", "1", 1);  /* trees stay for the exit report */
  /* Lua's memory: LuaJIT's own allocator.  Free lists of our own would be
     slightly quicker per replayed op with warm caches, but the collector's
     sweep order scatters the handles they give out, which costs more with
     the caches cold between steps (as after a device sync), and they never
     give memory back. */
  if ((L = luaL_newstate()) == NULL) {
    l_message(PROGNAME, "cannot create state: not enough memory");
    return EXIT_FAILURE;
  }
  status = lua_cpcall(L, pmain, &s);
  report(L, status);
  /* at exit a dropped tree's finalizer frees it, outputs alive or not (tree.lua) */
  (void)luaL_dostring(L, "local g = package.loaded.gt; if g then g._closing = true end");
  lua_close(L);
  return (status == 0 && s.status == 0) ? EXIT_SUCCESS : EXIT_FAILURE;
}
