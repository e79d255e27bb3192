/* main_gthost.c - gt.host, the host's functions for gt's modules (a tree
   body and its end, each in a pcall made from C), and the project root:
   where lua/ and kernels/ are, put on package.path. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"
#include "luajit.h"
#include "main.h"

const char *gtl_root;

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
void gtl_preload_host(lua_State *L) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, open_host);
  lua_setfield(L, -2, "gt.host");
  lua_pop(L, 2);
}

void gtl_set_paths(lua_State *L) {
  const char *root = gtl_root = find_root();
  if (root == NULL) return;
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/lua/?.lua;%s/lua/?/init.lua;%s", root, root, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 2);
}
