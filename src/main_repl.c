/* main_repl.c - the REPL: input (libedit on a terminal, plain lines
   otherwise), history, completion and help through gt.repl, errors kept
   for ?tb. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <editline/readline.h>
#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"
#include "luajit.h"
#include "main.h"

#define HISTORY_MAX 1000

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
  lua_rawgeti(gtl_L, LUA_REGISTRYINDEX, complete_ref);
  lua_rawgeti(gtl_L, -1, state + 1);
  if ((s = lua_tostring(gtl_L, -1)) != NULL) r = strdup(s);
  lua_pop(gtl_L, 2);
  return r;
}

/* Tab: the candidates come from repl.complete(word) (gt.te -> gt.tensor). */
static char **complete(const char *text, int start, int end) {
  lua_State *L = gtl_L;
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
  if (gtl_report(L, gtl_docall(L, 1, 1)) == 0) {
    lua_pushboolean(L, isatty(STDOUT_FILENO) && getenv("NO_COLOR") == NULL);
    lua_setfield(L, -2, "color");
    repl_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (push_repl_fn(L, "start")) gtl_report(L, gtl_docall(L, 0, 0));   /* the banner's second line, help */
  }
  tty_input = isatty(STDIN_FILENO);
  if (!tty_input) return;
  gtl_catch_sigint(prompt_int, NULL);   /* gtl_docall swaps in its handler while code runs */
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
  double t0 = gtl_now();
  if ((status = gtl_docall(L, 0, LUA_MULTRET)) != 0) return status;
  n = lua_gettop(L) - base + 1;
  if (push_repl_fn(L, "show")) {
    lua_insert(L, base);
    lua_pushboolean(L, quiet);
    lua_insert(L, base + 1);
    lua_pushnumber(L, gtl_now() - t0);
    lua_insert(L, base + 2);
    status = gtl_docall(L, n + 2, 0);
  } else if (n > 0 && !quiet) {   /* no gt.repl: print as lua.c does */
    lua_getglobal(L, "print");
    lua_insert(L, base);
    status = gtl_docall(L, n, 0);
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
  return gtl_docall(L, 1, 0);
}

/* An error in the REPL prints its message and traceback (DESIGN section
   10), as lua.c's does; the text is also kept for ?tb (registry
   "gtlua.traceback"), to see it again after other output. */
static void report_repl(lua_State *L, int status) {
  if (status != 0 && lua_isstring(L, -1)) {
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "gtlua.traceback");
  }
  gtl_report(L, status);
}

/* The loop: errors print (their message; ?tb the traceback) and the loop goes on; end of input ends it. */
void gtl_repl(lua_State *L) {
  gtl_progname = NULL;
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
  gtl_progname = PROGNAME;
}
