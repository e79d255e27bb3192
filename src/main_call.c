/* main_call.c - the host's messages and protected calls: the traceback
   handler, Ctrl-C inside a running chunk, running files and strings (as lua.c). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"
#include "luajit.h"
#include "main.h"

lua_State *gtl_L;
const char *gtl_progname = PROGNAME;
static volatile sig_atomic_t interrupted;

void gtl_message(const char *pname, const char *msg) {
  fflush(stdout);
  if (pname) fprintf(stderr, "%s: ", pname);
  fprintf(stderr, "%s\n", msg);
  fflush(stderr);
}

/* Prints the error on the stack top when status is an error, and pops it. */
int gtl_report(lua_State *L, int status) {
  if (status != 0 && !lua_isnil(L, -1)) {
    const char *msg = lua_tostring(L, -1);
    gtl_message(gtl_progname, msg ? msg : "(error object is not a string)");
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
  lua_sethook(gtl_L, lstop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* Installs fn for SIGINT without SA_RESTART (a blocking read returns early);
   saves the previous action in *old unless NULL. */
void gtl_catch_sigint(void (*fn)(int), struct sigaction *old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sigaction(SIGINT, &sa, old);
}

/* Calls the function below narg arguments with the traceback handler and Ctrl-C armed. */
int gtl_docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg, status;
  struct sigaction old;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  gtl_catch_sigint(laction, &old);
  status = lua_pcall(L, narg, nres, base);
  sigaction(SIGINT, &old, NULL);
  if (interrupted) {   /* the hook may not have fired: never leave it behind */
    interrupted = 0;
    lua_sethook(L, NULL, 0, 0);
  }
  lua_remove(L, base);
  return status;
}

int gtl_dochunk(lua_State *L, int status) {
  if (status == 0) status = gtl_docall(L, 0, 0);
  return gtl_report(L, status);
}

int gtl_dofile(lua_State *L, const char *name) {
  return gtl_dochunk(L, luaL_loadfile(L, name));
}

int gtl_dostring(lua_State *L, const char *s, const char *name) {
  return gtl_dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

double gtl_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
