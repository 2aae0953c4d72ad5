/* proc.c - the tests' process harness (see proc.h). Owns the table of
 * spawned processes and the temporary directory; installs an atexit hook
 * and fatal-signal handlers that kill -9 and reap every child. */
#define _GNU_SOURCE
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "files.h"

#define MAX_PROCS 64

static pid_t procs[MAX_PROCS];
static int nprocs;
static char tmpdir[256];
static int keep_tmp, hooks_installed;

static void forget(pid_t pid) {
  for (int i = 0; i < nprocs; i++)
    if (procs[i] == pid) procs[i] = 0;
}

void proc_reap_all(void) {
  for (int i = 0; i < nprocs; i++)
    if (procs[i] > 0) kill(procs[i], SIGKILL);
  for (int i = 0; i < nprocs; i++)
    if (procs[i] > 0) {
      waitpid(procs[i], NULL, 0);
      procs[i] = 0;
    }
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f) {
  return remove(path);
}

static void at_exit(void) {
  proc_reap_all();
  if (*tmpdir && !keep_tmp && !getenv("STOKER_KEEP_TMP"))
    nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  else if (*tmpdir) fprintf(stderr, "proc: logs kept in %s\n", tmpdir);
}

static void on_fatal(int sig) {
  /* Async-signal-safe: kill and reap, then die of the same signal. */
  for (int i = 0; i < nprocs; i++)
    if (procs[i] > 0) kill(procs[i], SIGKILL);
  for (int i = 0; i < nprocs; i++)
    if (procs[i] > 0) waitpid(procs[i], NULL, 0);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void install_hooks(void) {
  if (hooks_installed) return;
  hooks_installed = 1;
  atexit(at_exit);
  int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTERM, SIGINT, SIGALRM};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) signal(sigs[i], on_fatal);
}

const char *proc_tmpdir(void) {
  if (!*tmpdir) {
    install_hooks();
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/stoker-test-XXXXXX",
             base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
      perror("mkdtemp");
      tmpdir[0] = 0;
      return "/tmp";
    }
  }
  return tmpdir;
}

void proc_keep_tmp(void) { keep_tmp = 1; }

int proc_spawn(stk_proc *p, const char *name, char *const argv[]) {
  memset(p, 0, sizeof(*p));
  install_hooks();
  if (nprocs >= MAX_PROCS) {
    fprintf(stderr, "proc: too many processes\n");
    return -1;
  }
  snprintf(p->name, sizeof(p->name), "%s", name);
  snprintf(p->log, sizeof(p->log), "%s/%s.log", proc_tmpdir(), name);
  int fd = open(p->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "proc: cannot open %s: %s\n", p->log, strerror(errno));
    return -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    perror("fork");
    return -1;
  }
  if (pid == 0) {
    /* Die with the test even if it is killed with -9. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fd, 1);
    dup2(fd, 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    signal(SIGPIPE, SIG_DFL);
    execv(argv[0], argv);
    dprintf(2, "proc: cannot exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(fd);
  p->pid = pid;
  procs[nprocs++] = pid;
  return 0;
}

static int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

int proc_wait(stk_proc *p, int timeout_ms) {
  if (p->exited) return p->code;
  if (!p->pid) return -1;
  int64_t until = stk__now_ms() + timeout_ms;
  for (;;) {
    int status;
    pid_t r = waitpid(p->pid, &status, WNOHANG);
    if (r == p->pid) {
      forget(p->pid);
      p->pid = 0;
      p->exited = 1;
      p->code = decode(status);
      return p->code;
    }
    if (stk__now_ms() >= until) return -1;
    stk__sleep_ms(10);
  }
}

int proc_wait_port(stk_proc *p, const char *path, int timeout_ms) {
  int64_t until = stk__now_ms() + timeout_ms;
  for (;;) {
    FILE *f = fopen(path, "r");
    if (f) {
      int port = -1;
      char nl = 0;
      int n = fscanf(f, "%d%c", &port, &nl);
      fclose(f);
      if (n == 2 && nl == '\n' && port > 0 && port < 65536) return port;
    }
    if (p && proc_wait(p, 0) >= 0) {
      fprintf(stderr, "proc: %s exited (code %d) before writing %s\n", p->name, p->code,
              path);
      return -1;
    }
    if (stk__now_ms() >= until) {
      fprintf(stderr, "proc: no port in %s after %d ms\n", path, timeout_ms);
      return -1;
    }
    stk__sleep_ms(10);
  }
}

void proc_signal(stk_proc *p, int sig) {
  if (p->pid > 0 && !p->exited) kill(p->pid, sig);
}

void proc_dump_log(const stk_proc *p) {
  FILE *f = fopen(p->log, "r");
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  long start = size > 6000 ? size - 6000 : 0;
  fseek(f, start, SEEK_SET);
  fprintf(stderr, "---- %s (%s)%s ----\n", p->name, p->log, start ? " tail" : "");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) fwrite(buf, 1, n, stderr);
  fprintf(stderr, "---- end of %s ----\n", p->name);
  fclose(f);
}

char *proc_read_log(const stk_proc *p) { return files_slurp(p->log, NULL); }

int proc_log_count(const stk_proc *p, const char *needle) {
  char *log = proc_read_log(p);
  int n = 0;
  for (const char *q = log; q && *needle && (q = strstr(q, needle)); q++) n++;
  free(log);
  return n;
}

int proc_wait_log(const stk_proc *p, const char *needle, int n, int timeout_ms) {
  for (int64_t until = stk__now_ms() + timeout_ms;;) {
    int have = proc_log_count(p, needle);
    if (have >= n) return 0;
    if (stk__now_ms() >= until) {
      fprintf(stderr, "proc_wait_log: %d of %d lines with '%s' in %s\n", have, n, needle,
              p->log);
      return -1;
    }
    stk__sleep_ms(50);
  }
}
