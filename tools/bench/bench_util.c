/* bench_util.c - clocks, medians, ImageFolder listing and the one-host job
 * of the stoker-bench subcommands (bench_util.h). */
#define _GNU_SOURCE
#include "bench_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

extern char **environ;

double bu_now_s(void) { return (double)stk__now_ns() / 1e9; }

double bu_thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

double bu_self_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

double bu_self_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_minflt + (double)ru.ru_majflt;
}

/* utime + stime of a /proc stat file, seconds; -1 if it cannot be read. */
static double stat_cpu_s(const char *path) {
  char buf[1024];
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  unsigned long ut = 0, st = 0;
  /* fields after ")": state(3) ... utime(14) stime(15) */
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / sysconf(_SC_CLK_TCK);
}

double bu_proc_cpu_s(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  return stat_cpu_s(path);
}

double bu_proc_threads_cpu_s(pid_t pid, const char *prefix) {
  char path[96], comm[32];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return -1;
  double sum = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/%d/task/%.16s/comm", (int)pid, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue; /* the thread just exited */
    int ok = fgets(comm, sizeof comm, f) != NULL;
    fclose(f);
    if (!ok || strncmp(comm, prefix, strlen(prefix))) continue;
    snprintf(path, sizeof path, "/proc/%d/task/%.16s/stat", (int)pid, e->d_name);
    double c = stat_cpu_s(path);
    if (c > 0) sum += c;
  }
  closedir(d);
  return sum;
}

/* One thread's stat and status files into t; 0, or -1. */
static int thread_read(pid_t pid, const char *tid, bu_thread *t) {
  char path[96], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/task/%.16s/stat", (int)pid, tid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *l = strchr(buf, '('), *r = strrchr(buf, ')');
  if (!l || !r || r < l) return -1;
  size_t cl =
      (size_t)(r - l - 1) < sizeof t->comm - 1 ? (size_t)(r - l - 1) : sizeof t->comm - 1;
  memcpy(t->comm, l + 1, cl);
  t->comm[cl] = 0;
  unsigned long ut = 0, st = 0;
  if (sscanf(r + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  t->tid = atoi(tid);
  t->user_s = (double)ut / sysconf(_SC_CLK_TCK);
  t->sys_s = (double)st / sysconf(_SC_CLK_TCK);
  t->vcsw = t->ivcsw = 0;
  snprintf(path, sizeof path, "/proc/%d/task/%.16s/status", (int)pid, tid);
  f = fopen(path, "r");
  if (!f) return 0;
  while (fgets(buf, sizeof buf, f)) {
    unsigned long v;
    if (sscanf(buf, "voluntary_ctxt_switches: %lu", &v) == 1) t->vcsw = (double)v;
    if (sscanf(buf, "nonvoluntary_ctxt_switches: %lu", &v) == 1) t->ivcsw = (double)v;
  }
  fclose(f);
  return 0;
}

int bu_threads_snap(pid_t pid, bu_threads *out) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  out->n = 0;
  DIR *d = opendir(path);
  if (!d) return -1;
  struct dirent *e;
  while ((e = readdir(d)) && out->n < BU_MAX_THREADS) {
    if (e->d_name[0] == '.') continue;
    if (!thread_read(pid, e->d_name, &out->t[out->n])) out->n++;
  }
  closedir(d);
  return 0;
}

void bu_threads_diff_add(const bu_threads *a, const bu_threads *b, bu_threads *acc) {
  for (int i = 0; i < b->n; i++) {
    const bu_thread *tb = &b->t[i], *ta = NULL;
    for (int k = 0; k < a->n && !ta; k++)
      if (a->t[k].tid == tb->tid) ta = &a->t[k];
    bu_thread *o = NULL;
    for (int k = 0; k < acc->n && !o; k++)
      if (!strcmp(acc->t[k].comm, tb->comm)) o = &acc->t[k];
    if (!o) {
      if (acc->n == BU_MAX_THREADS) continue;
      o = &acc->t[acc->n++];
      memset(o, 0, sizeof *o);
      snprintf(o->comm, sizeof o->comm, "%s", tb->comm);
    }
    o->user_s += tb->user_s - (ta ? ta->user_s : 0);
    o->sys_s += tb->sys_s - (ta ? ta->sys_s : 0);
    o->vcsw += tb->vcsw - (ta ? ta->vcsw : 0);
    o->ivcsw += tb->ivcsw - (ta ? ta->ivcsw : 0);
  }
}

double bu_median(const double *v, int n) {
  double t[64];
  if (n < 1) return 0;
  if (n > 64) n = 64;
  memcpy(t, v, sizeof(double) * (size_t)n);
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
      double x = t[j];
      t[j] = t[j - 1], t[j - 1] = x;
    }
  return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

static void find_binary(const char *bindir, const char *name, char *out, size_t len) {
  if (bindir) {
    snprintf(out, len, "%s/%s", bindir, name);
    return;
  }
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    const char *rel[] = {"", "/../../server", "/../server"};
    for (int i = 0; i < 3; i++) {
      if (snprintf(out, len, "%s%s/%s", self, rel[i], name) >= (int)len) continue;
      if (access(out, X_OK) == 0) return;
    }
  }
  snprintf(out, len, "%s", name); /* from PATH */
}

/* Spawn argv with stderr into log; the pid or -1. */
static pid_t spawn(char *const argv[], const char *log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc ? -1 : pid;
}

/* The port written to file within timeout_s, or -1 (also if pid exits). */
static int read_port(const char *file, pid_t pid, double timeout_s) {
  double until = bu_now_s() + timeout_s;
  while (bu_now_s() < until) {
    FILE *f = fopen(file, "r");
    int port = 0;
    if (f) {
      if (fscanf(f, "%d", &port) != 1) port = 0;
      fclose(f);
      if (port > 0) return port;
    }
    if (waitpid(pid, NULL, WNOHANG) == pid) return -1;
    usleep(20000);
  }
  return -1;
}

/* Wait up to timeout_s for pid, then SIGKILL it: its exit code (128 +
 * signal), or -1 if it had to be killed. */
static int wait_exit(pid_t pid, double timeout_s) {
  double until = bu_now_s() + timeout_s;
  int st;
  while (bu_now_s() < until) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r < 0) return -1;
    usleep(20000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

int bu_job_start(bu_job *j, const stk_job_spec *spec, const char *bindir,
                 char *const *cextra, char *const *wextra) {
  memset(j, 0, sizeof(*j));
  snprintf(j->tmp, sizeof j->tmp, "/tmp/stoker-bench-XXXXXX");
  if (!mkdtemp(j->tmp)) {
    perror("mkdtemp");
    return -1;
  }
  char job[PATH_MAX], cport[PATH_MAX], wport[PATH_MAX];
  snprintf(job, sizeof job, "%s/job.conf", j->tmp);
  snprintf(cport, sizeof cport, "%s/coordinator.port", j->tmp);
  snprintf(wport, sizeof wport, "%s/worker.port", j->tmp);
  snprintf(j->clog, sizeof j->clog, "%s/coordinator.log", j->tmp);
  snprintf(j->wlog, sizeof j->wlog, "%s/worker.log", j->tmp);
  char text[8192];
  stk_job_spec_format(spec, text, sizeof text);
  FILE *jf = fopen(job, "w");
  if (!jf || fputs(text, jf) < 0 || fclose(jf)) {
    perror(job);
    return -1;
  }
  char coord_bin[PATH_MAX], worker_bin[PATH_MAX];
  find_binary(bindir, "stoker-coordinator", coord_bin, sizeof coord_bin);
  find_binary(bindir, "stoker-worker", worker_bin, sizeof worker_bin);
  char *argv[64];
  int n = 0;
  argv[n++] = coord_bin, argv[n++] = "--listen", argv[n++] = "127.0.0.1:0";
  argv[n++] = "--port-file", argv[n++] = cport, argv[n++] = "--job", argv[n++] = job;
  argv[n++] = "--idle-timeout-s", argv[n++] = "120";
  for (; cextra && *cextra && n < 63; cextra++) argv[n++] = *cextra;
  argv[n] = NULL;
  j->cpid = spawn(argv, j->clog);
  int port = j->cpid > 0 ? read_port(cport, j->cpid, 10) : -1;
  if (port < 0) {
    fprintf(stderr, "coordinator did not start (%s); log: %s\n", coord_bin, j->clog);
    bu_job_stop(j, 0);
    return -1;
  }
  snprintf(j->addr, sizeof j->addr, "127.0.0.1:%d", port);
  n = 0;
  argv[n++] = worker_bin, argv[n++] = "--coordinator", argv[n++] = j->addr;
  argv[n++] = "--listen", argv[n++] = "127.0.0.1:0", argv[n++] = "--port-file";
  argv[n++] = wport;
  for (; wextra && *wextra && n < 63; wextra++) argv[n++] = *wextra;
  argv[n] = NULL;
  j->wpid = spawn(argv, j->wlog);
  if (j->wpid <= 0 || read_port(wport, j->wpid, 10) < 0) {
    fprintf(stderr, "worker did not start (%s); log: %s\n", worker_bin, j->wlog);
    bu_job_stop(j, 0);
    return -1;
  }
  return 0;
}

int bu_job_stop(bu_job *j, int ok) {
  int rc = 0;
  if (!ok) { /* a failed run: do not wait for the job to end by itself */
    if (j->wpid > 0) kill(j->wpid, SIGTERM);
    if (j->cpid > 0) kill(j->cpid, SIGTERM);
  }
  if (j->wpid > 0 && wait_exit(j->wpid, 10) != 0) {
    if (ok) fprintf(stderr, "worker did not exit 0; log: %s\n", j->wlog);
    rc = -1;
  }
  if (j->cpid > 0 && wait_exit(j->cpid, 10) != 0) {
    if (ok) fprintf(stderr, "coordinator did not exit 0; log: %s\n", j->clog);
    rc = -1;
  }
  j->wpid = j->cpid = 0;
  if (ok && rc == 0 && j->tmp[0]) {
    const char *files[] = {"job.conf", "coordinator.port", "worker.port",
                           "coordinator.log", "worker.log"};
    char p[PATH_MAX];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
      snprintf(p, sizeof p, "%s/%s", j->tmp, files[i]);
      unlink(p);
    }
    rmdir(j->tmp);
  }
  return ok ? rc : -1;
}

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t bu_list_jpegs(const char *dir, char ***out, size_t max) {
  char cmd[PATH_MAX + 64];
  snprintf(cmd, sizeof(cmd), "cd '%s' && ls -1 */*.jpg */*.jpeg 2>/dev/null", dir);
  FILE *f = popen(cmd, "r");
  char **v = NULL;
  size_t n = 0, cap = 0;
  char line[PATH_MAX];
  while (f && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = 0;
    if (n == cap) v = realloc(v, (cap = cap ? cap * 2 : 1024) * sizeof(*v));
    v[n++] = strdup(line);
  }
  if (f) pclose(f);
  if (n) qsort(v, n, sizeof(*v), cmp);
  if (n > max) {
    for (size_t i = max; i < n; i++) free(v[i]);
    n = max;
  }
  *out = v;
  return n;
}
