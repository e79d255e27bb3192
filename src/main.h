/* main.h - what the host's files (main.c, main_call.c, main_gthost.c,
   main_repl.c) share; not part of the core (the C tests link without them). */
#ifndef GT_MAIN_H
#define GT_MAIN_H
#include <signal.h>
#include "lua.h"

#define PROGNAME "gtlua"

/* -- Messages and protected calls (main_call.c) --------------------------- */
extern lua_State *gtl_L;             /* for the signal handler and completion */
extern const char *gtl_progname;     /* error prefix; none inside the REPL */
void gtl_message(const char *pname, const char *msg);
int gtl_report(lua_State *L, int status);   /* prints the error on the stack top when status is an error, and pops it */
/* Installs fn for SIGINT without SA_RESTART (a blocking read returns early);
   saves the previous action in *old unless NULL. */
void gtl_catch_sigint(void (*fn)(int), struct sigaction *old);
int gtl_docall(lua_State *L, int narg, int nres);   /* the function below narg arguments, with the traceback handler and Ctrl-C armed */
int gtl_dochunk(lua_State *L, int status);
int gtl_dofile(lua_State *L, const char *name);
int gtl_dostring(lua_State *L, const char *s, const char *name);
double gtl_now(void);                /* a monotonic clock, seconds */

/* -- gt.host and the project root (main_gthost.c) ------------------------- */
extern const char *gtl_root;         /* where lua/ and kernels/ were looked for */
void gtl_preload_host(lua_State *L); /* require "gt.host": the host's functions for gt's modules */
void gtl_set_paths(lua_State *L);    /* the root found, lua/ put on package.path */

/* -- The launcher (main_procs.c) ----------------------------------------- */
/* `--nproc N`: argv (without --nproc) run as N ranks; returns the exit status. */
int gtl_procs_run(int argc, char **argv, int nproc);

/* -- The REPL (main_repl.c) ------------------------------------------------ */
void gtl_repl(lua_State *L);
#endif
