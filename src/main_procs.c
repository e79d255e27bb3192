/* main_procs.c - the host's launcher: `gtlua --nproc N script [args]` starts
   N processes of the same command line, as torchrun does (RANK, LOCAL_RANK,
   WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), prints their
   output a line at a time prefixed "[rank] ", stops them all when one fails
   or on Ctrl-C, and exits with the first failure's status. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>
#include "main.h"

#define MAXPROC 64

typedef struct { int fd; char buf[4096]; size_t n; } outpipe;   /* a rank's stdout or stderr */
typedef struct {
  pid_t pid;
  int done, status;
  outpipe out[2];
} rank_t;

static volatile sig_atomic_t got_signal;
static void on_signal(int sig) { got_signal = sig; }

/* A free TCP port of this host (the kernel's choice), for MASTER_PORT. */
static int free_port(void) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  int s = socket(AF_INET, SOCK_STREAM, 0), port = 29500;
  if (s < 0) return port;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(s);
  return port;
}

static void setenv_int(const char *name, long v) {
  char s[32];
  snprintf(s, sizeof s, "%ld", v);
  setenv(name, s, 1);
}

/* The child: its environment, stdin (rank 0 keeps the terminal), stdout and
   stderr into the pipes, then the same binary without --nproc. */
static void child(int r, int n, int po[2], int pe[2], char **cargv) {
  static char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  setenv_int("RANK", r);
  setenv_int("LOCAL_RANK", r);
  setenv_int("WORLD_SIZE", n);
  setenv_int("LOCAL_WORLD_SIZE", n);
  if (r > 0) {
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) { dup2(nul, STDIN_FILENO); close(nul); }
  }
  dup2(po[1], STDOUT_FILENO);
  dup2(pe[1], STDERR_FILENO);
  close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  setpgid(0, 0);   /* its own group: what it starts is stopped with it */
  if (len > 0) { self[len] = '\0'; execv(self, cargv); }
  execvp(cargv[0], cargv);
  fprintf(stderr, "%s: --nproc: cannot start rank %d: %s\n", PROGNAME, r, strerror(errno));
  _exit(127);
}

/* Writes the complete lines of p (all of it at the end), each prefixed. */
static void flush_lines(int r, outpipe *p, FILE *to, int all) {
  size_t start = 0;
  for (size_t i = 0; i < p->n; i++)
    if (p->buf[i] == '\n') {
      fprintf(to, "[%d] %.*s\n", r, (int)(i - start), p->buf + start);
      start = i + 1;
    }
  if ((all || start == 0) && start < p->n && (all || p->n == sizeof p->buf)) {
    fprintf(to, "[%d] %.*s\n", r, (int)(p->n - start), p->buf + start);   /* a line too long for the buffer, or the last */
    start = p->n;
  }
  memmove(p->buf, p->buf + start, p->n - start);
  p->n -= start;
  fflush(to);
}

/* Reads what is there on rank r's stream s; closes it at its end. */
static void drain(rank_t *rk, int r, int s) {
  outpipe *p = &rk[r].out[s];
  ssize_t got = read(p->fd, p->buf + p->n, sizeof p->buf - p->n);
  if (got > 0) { p->n += (size_t)got; flush_lines(r, p, s ? stderr : stdout, 0); return; }
  if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
  flush_lines(r, p, s ? stderr : stdout, 1);
  close(p->fd);
  p->fd = -1;
}

static int start_ranks(rank_t *rk, int n, char **cargv) {
  for (int r = 0; r < n; r++) {
    int po[2], pe[2];
    if (pipe(po) || pipe(pe)) { perror(PROGNAME ": --nproc: pipe"); return -1; }
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { perror(PROGNAME ": --nproc: fork"); return -1; }
    if (pid == 0) child(r, n, po, pe, cargv);
    setpgid(pid, pid);   /* (also in the child: whichever runs first) */
    close(po[1]); close(pe[1]);
    rk[r].pid = pid;
    rk[r].out[0].fd = po[0];
    rk[r].out[1].fd = pe[0];
  }
  return 0;
}

/* sig to every rank's process group (a rank that ended may have left children holding its pipes). */
static void signal_all(rank_t *rk, int n, int sig) {
  for (int r = 0; r < n; r++) kill(-rk[r].pid, sig);
}

/* Exit status of a wait status, as a shell gives it. */
static int exit_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

/* Reaps the ranks that ended; the first failure (or a signal to us) stops the rest.
   *fail: the first failure's exit code (0: none yet); *stop_at: when the rest get SIGKILL. */
static int reap(rank_t *rk, int n, int *fail, double *stop_at, double now, double grace) {
  int st, left = 0;
  for (int r = 0; r < n; r++) {
    if (rk[r].done) continue;
    if (waitpid(rk[r].pid, &st, WNOHANG) != rk[r].pid) { left++; continue; }
    rk[r].done = 1;
    rk[r].status = st;
    if (exit_code(st) != 0 && !*fail && *stop_at == 0) {
      *fail = exit_code(st);
      if (WIFSIGNALED(st)) fprintf(stderr, "%s: rank %d was killed by signal %d (%s): stopping the other ranks\n",
                                   PROGNAME, r, WTERMSIG(st), strsignal(WTERMSIG(st)));
      else fprintf(stderr, "%s: rank %d exited with status %d: stopping the other ranks\n", PROGNAME, r, exit_code(st));
      fflush(stderr);
    }
  }
  if ((*fail || got_signal) && *stop_at == 0) {
    signal_all(rk, n, got_signal == SIGINT ? SIGINT : SIGTERM);   /* (Ctrl-C: each rank's traceback) */
    *stop_at = now + grace;
  } else if (*stop_at != 0 && now >= *stop_at && *stop_at < now + 3000) {
    signal_all(rk, n, SIGKILL);
    *stop_at = now + 3600;
  }
  return left;
}

/* Polls the ranks' output until every rank has ended and its pipes are closed. */
static int supervise(rank_t *rk, int n) {
  const char *g = getenv("GTLUA_NPROC_GRACE");
  double grace = g && *g ? atof(g) : 3.0, stop_at = 0;
  int fail = 0, left = n;
  struct pollfd pf[2 * MAXPROC];
  for (;;) {
    int np = 0, who[2 * MAXPROC];
    for (int r = 0; r < n; r++)
      for (int s = 0; s < 2; s++)
        if (rk[r].out[s].fd >= 0) { pf[np] = (struct pollfd){ rk[r].out[s].fd, POLLIN, 0 }; who[np++] = 2 * r + s; }
    if (!left && (!np || (stop_at != 0 && gtl_now() > stop_at))) break;   /* (pipes a stray child holds are left) */
    if (poll(pf, (nfds_t)np, 50) > 0)
      for (int i = 0; i < np; i++)
        if (pf[i].revents) drain(rk, who[i] / 2, who[i] % 2);
    left = reap(rk, n, &fail, &stop_at, gtl_now(), grace);
  }
  if (got_signal && !fail) return 128 + got_signal;
  return fail;
}

int gtl_procs_run(int argc, char **argv, int nproc) {
  char **cargv = calloc((size_t)argc + 1, sizeof *cargv);
  rank_t rk[MAXPROC];
  int c = 0;
  if (!cargv) return 1;
  if (nproc < 1 || nproc > MAXPROC) {
    fprintf(stderr, "%s: --nproc %d: give 1 to %d processes\n", PROGNAME, nproc, MAXPROC);
    return 1;
  }
  for (int i = 0; i < argc; i++) {   /* the command line without --nproc N */
    if (strcmp(argv[i], "--nproc") == 0) { i++; continue; }
    if (strncmp(argv[i], "--nproc=", 8) == 0) continue;
    cargv[c++] = argv[i];
  }
  if (!getenv("MASTER_ADDR")) setenv("MASTER_ADDR", "127.0.0.1", 1);
  if (!getenv("MASTER_PORT")) setenv_int("MASTER_PORT", free_port());
  setenv_int("GTLUA_DIST_RUN", (long)getpid());
  memset(rk, 0, sizeof rk);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  int bad = start_ranks(rk, nproc, cargv);
  if (bad) got_signal = SIGTERM;   /* (the ranks started are stopped) */
  for (int r = 0; r < nproc; r++)
    if (!rk[r].pid) rk[r].done = 1, rk[r].out[0].fd = rk[r].out[1].fd = -1;
  int st = supervise(rk, nproc);
  free(cargv);
  return bad ? 1 : st;
}
