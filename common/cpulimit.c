/* cpulimit.c - the CPU a process may use (see cpulimit.h): reads the
 * cgroup files under a given root and combines them with the affinity
 * count. Owns nothing; reads files only. */
#define _GNU_SOURCE
#include "common/cpulimit.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* The first line of root/rel into buf (newline cut); 0, or -1. */
static int read_line(const char *root, const char *rel, char *buf, size_t len) {
  char path[1024];
  if ((size_t)snprintf(path, sizeof(path), "%s/%s", root, rel) >= sizeof(path)) return -1;
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char *r = fgets(buf, (int)len, f);
  fclose(f);
  if (!r) return -1;
  buf[strcspn(buf, "\n")] = 0;
  return 0;
}

/* v2: "QUOTA PERIOD" ("max PERIOD" = none). Cores, or 0 for none/bad. */
static double parse_v2(const char *s) {
  char q[32];
  long long period = 0;
  if (sscanf(s, "%31s %lld", q, &period) != 2 || period <= 0) return 0;
  if (!strcmp(q, "max")) return 0;
  char *end;
  long long quota = strtoll(q, &end, 10);
  if (*end || quota <= 0) return 0;
  return (double)quota / (double)period;
}

/* Walks cg (a cgroup path like "/a/b") and its ancestors under
 * root/mount, keeping the tightest quota in *best with its source. */
static void walk(const char *root, const char *mount, const char *cg, int version,
                 stk__cpu_limit *out) {
  char path[512], rel[700], line[128], line2[64];
  snprintf(path, sizeof(path), "%s", cg);
  for (;;) {
    size_t n = strlen(path);
    while (n > 0 && path[n - 1] == '/') path[--n] = 0;
    double q = 0;
    if (version == 2) {
      snprintf(rel, sizeof(rel), "%s%s/cpu.max", mount, path);
      if (!read_line(root, rel, line, sizeof(line))) q = parse_v2(line);
    } else {
      char rel2[700];
      snprintf(rel, sizeof(rel), "%s%s/cpu.cfs_quota_us", mount, path);
      snprintf(rel2, sizeof(rel2), "%s%s/cpu.cfs_period_us", mount, path);
      if (!read_line(root, rel, line, sizeof(line)) &&
          !read_line(root, rel2, line2, sizeof(line2))) {
        long long quota = strtoll(line, NULL, 10), period = strtoll(line2, NULL, 10);
        if (quota > 0 && period > 0) q = (double)quota / (double)period;
        snprintf(line + strlen(line), sizeof(line) - strlen(line), " %s", line2);
      }
    }
    if (q > 0 && (out->quota_cores == 0 || q < out->quota_cores)) {
      out->quota_cores = q;
      out->cgroup_version = version;
      snprintf(out->source, sizeof(out->source), "cgroup v%d /%.160s: %.40s", version,
               rel, line);
    }
    if (!n) break;
    char *slash = strrchr(path, '/');
    if (!slash) break;
    *slash = 0;
  }
}

void stk__cpu_limit_read(const char *root, int affinity, stk__cpu_limit *out) {
  memset(out, 0, sizeof(*out));
  if (affinity <= 0) affinity = 1;
  out->affinity = affinity;
  if (!root || !*root) root = "/";
  char path[1024];
  snprintf(path, sizeof(path), "%s/proc/self/cgroup", root);
  FILE *f = fopen(path, "r");
  char line[1024];
  while (f && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = 0;
    /* "ID:CONTROLLERS:PATH"; the path may hold ':' itself */
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2 || c2[1] != '/') continue;
    *c1 = 0, *c2 = 0;
    const char *ctl = c1 + 1, *cg = c2 + 1;
    if (!*ctl && !strcmp(line, "0")) {
      walk(root, "sys/fs/cgroup", cg, 2, out);
      continue;
    }
    /* v1: a controller list with "cpu" among its names */
    int has_cpu = 0;
    char tmp[256];
    snprintf(tmp, sizeof(tmp), "%s", ctl);
    for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t;
         t = strtok_r(NULL, ",", &save))
      has_cpu |= !strcmp(t, "cpu");
    if (!has_cpu) continue;
    char mount[300];
    snprintf(mount, sizeof(mount), "sys/fs/cgroup/%s", ctl);
    snprintf(path, sizeof(path), "%s/%s", root, mount);
    if (access(path, F_OK)) snprintf(mount, sizeof(mount), "sys/fs/cgroup/cpu");
    walk(root, mount, cg, 1, out);
  }
  if (f) fclose(f);
  out->cores = (double)affinity;
  if (out->quota_cores > 0 && out->quota_cores < out->cores) {
    out->cores = out->quota_cores;
  } else {
    if (out->quota_cores > 0)
      snprintf(out->source + strlen(out->source),
               sizeof(out->source) - strlen(out->source), "; affinity: %d CPUs",
               affinity);
    else
      snprintf(out->source, sizeof(out->source), "affinity: %d CPUs (no cgroup quota)",
               affinity);
  }
}

int stk__affinity_cpus(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (!sched_getaffinity(0, sizeof(set), &set)) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

unsigned long long stk__thread_cpu_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) return 0;
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

void stk__thread_cpu_split_ns(unsigned long long *user_ns, unsigned long long *sys_ns) {
  struct rusage ru;
  *user_ns = *sys_ns = 0;
  if (getrusage(RUSAGE_THREAD, &ru)) return;
  *user_ns = (unsigned long long)ru.ru_utime.tv_sec * 1000000000ull +
             (unsigned long long)ru.ru_utime.tv_usec * 1000ull;
  *sys_ns = (unsigned long long)ru.ru_stime.tv_sec * 1000000000ull +
            (unsigned long long)ru.ru_stime.tv_usec * 1000ull;
}

double stk__cpu_share(double cpu_s, double wall_s, double cores) {
  if (!(wall_s > 0) || !(cores > 0) || !(cpu_s >= 0)) return 0;
  return cpu_s / (wall_s * cores);
}

double stk__cpu_window_rate(stk__cpu_window *w, long long now_ns, double cpu_s,
                            long long window_ns, long long min_span_ns) {
  if (!w->n) {
    w->t_ns[0] = w->t_ns[1] = now_ns;
    w->cpu_s[0] = w->cpu_s[1] = cpu_s;
    w->n = 1;
    return -1;
  }
  if (now_ns - w->t_ns[1] >= window_ns) {
    w->t_ns[0] = w->t_ns[1], w->cpu_s[0] = w->cpu_s[1];
    w->t_ns[1] = now_ns, w->cpu_s[1] = cpu_s;
  }
  long long span = now_ns - w->t_ns[0];
  if (span < min_span_ns || span <= 0) return -1;
  double used = cpu_s - w->cpu_s[0];
  return used > 0 ? used / ((double)span / 1e9) : 0;
}

double stk__process_cpu_s(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru)) return 0;
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}
