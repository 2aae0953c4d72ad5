/* test_cpulimit.c - common/cpulimit.c on fake cgroup trees: cgroup v2
 * cpu.max ("max" = none, a quota in the process's cgroup or an ancestor,
 * the tightest wins), cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us
 * (-1 = none; "cpu,cpuacct" and a plain "cpu" mount), the affinity count
 * when it is lower than the quota, and no cgroup files at all; the
 * arithmetic of a host share (stk__cpu_share), the recent-window CPU
 * rate (stk__cpu_window_rate) and a thread's user/system split. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common/cpulimit.h"

static char root[64];

/* root/rel with content, the directories made on the way. */
static void put(const char *rel, const char *content) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
    *s = 0;
    mkdir(p, 0755);
    *s = '/';
  }
  FILE *f = fopen(p, "w");
  if (f) {
    fputs(content, f);
    fclose(f);
  }
}

static void fresh(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
  if (system(cmd)) fprintf(stderr, "cannot clear %s\n", root);
  mkdir(root, 0755);
}

static int near(double a, double b) { return a > b - 1e-9 && a < b + 1e-9; }

int main(void) {
  snprintf(root, sizeof(root), "/tmp/stk-cpulimit-%d", (int)getpid());
  stk__cpu_limit l;

  /* no files at all: the affinity count */
  fresh();
  stk__cpu_limit_read(root, 4, &l);
  CHECK(near(l.cores, 4) && l.quota_cores == 0 && l.cgroup_version == 0);
  CHECK(strstr(l.source, "affinity: 4") != NULL);
  stk__cpu_limit_read(root, 0, &l); /* a bad affinity counts as 1 */
  CHECK(near(l.cores, 1));

  /* v2: the process's own cgroup has no quota, its parent 0.45 core */
  fresh();
  put("proc/self/cgroup", "0::/job/worker\n");
  put("sys/fs/cgroup/job/worker/cpu.max", "max 100000\n");
  put("sys/fs/cgroup/job/cpu.max", "45000 100000\n");
  put("sys/fs/cgroup/cpu.max", "max 100000\n");
  stk__cpu_limit_read(root, 8, &l);
  CHECK(near(l.cores, 0.45) && near(l.quota_cores, 0.45) && l.cgroup_version == 2);
  CHECK(strstr(l.source, "cgroup v2") && strstr(l.source, "job/cpu.max"));
  /* the tightest of the chain */
  put("sys/fs/cgroup/job/worker/cpu.max", "30000 100000\n");
  stk__cpu_limit_read(root, 8, &l);
  CHECK(near(l.cores, 0.3));
  /* affinity lower than the quota binds */
  put("sys/fs/cgroup/job/worker/cpu.max", "600000 100000\n");
  put("sys/fs/cgroup/job/cpu.max", "max 100000\n");
  stk__cpu_limit_read(root, 2, &l);
  CHECK(near(l.cores, 2) && near(l.quota_cores, 6));
  /* garbage is no quota, never a crash */
  put("sys/fs/cgroup/job/worker/cpu.max", "lots of cpu\n");
  stk__cpu_limit_read(root, 3, &l);
  CHECK(near(l.cores, 3) && l.quota_cores == 0);
  put("sys/fs/cgroup/job/worker/cpu.max", "-5 0\n");
  stk__cpu_limit_read(root, 3, &l);
  CHECK(near(l.cores, 3));

  /* v1, "cpu,cpuacct" mount, among other controllers */
  fresh();
  put("proc/self/cgroup",
      "12:memory:/a\n4:cpu,cpuacct:/host1\n1:name=systemd:/x\n0::/\n");
  put("sys/fs/cgroup/cpu,cpuacct/host1/cpu.cfs_quota_us", "50000\n");
  put("sys/fs/cgroup/cpu,cpuacct/host1/cpu.cfs_period_us", "100000\n");
  put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  stk__cpu_limit_read(root, 16, &l);
  CHECK(near(l.cores, 0.5) && l.cgroup_version == 1);
  CHECK(strstr(l.source, "cpu.cfs_quota_us: 50000 100000") != NULL);
  /* v1 with only a plain "cpu" mount directory */
  fresh();
  put("proc/self/cgroup", "3:cpuacct,cpu:/h\n");
  put("sys/fs/cgroup/cpu/h/cpu.cfs_quota_us", "35000\n");
  put("sys/fs/cgroup/cpu/h/cpu.cfs_period_us", "100000\n");
  stk__cpu_limit_read(root, 16, &l);
  CHECK(near(l.cores, 0.35));
  /* no quota (-1) anywhere: affinity */
  put("sys/fs/cgroup/cpu/h/cpu.cfs_quota_us", "-1\n");
  stk__cpu_limit_read(root, 5, &l);
  CHECK(near(l.cores, 5) && l.quota_cores == 0);

  /* this process, for real: some positive figure */
  stk__cpu_limit_read("/", stk__affinity_cpus(), &l);
  CHECK(l.cores > 0 && l.affinity >= 1);
  printf("this process: %.2f cores (%s)\n", l.cores, l.source);
  CHECK(stk__process_cpu_s() >= 0);

  /* host share: 0.7 CPU-s in 2 s under a 0.35-core quota is the whole
   * quota; 0.25 core busy on 0.35 is 71%; nonsense inputs give 0 */
  CHECK(near(stk__cpu_share(0.7, 2, 0.35), 1.0));
  CHECK(near(stk__cpu_share(0.25, 1, 0.35), 0.25 / 0.35));
  CHECK(near(stk__cpu_share(3, 1, 4), 0.75));
  CHECK(stk__cpu_share(1, 0, 1) == 0 && stk__cpu_share(1, 1, 0) == 0);
  CHECK(stk__cpu_share(-1, 1, 1) == 0 && stk__cpu_share(1, -1, 1) == 0);

  /* the window: 5 s, at least 1 s of span before a rate */
  const long long S = 1000000000ll;
  stk__cpu_window w = {0};
  CHECK(stk__cpu_window_rate(&w, 10 * S, 100.0, 5 * S, S) < 0);         /* first sample */
  CHECK(stk__cpu_window_rate(&w, 10 * S + S / 2, 100.1, 5 * S, S) < 0); /* 0.5 s */
  /* 2 s after the first sample, 0.5 CPU-s more: 0.25 core */
  CHECK(near(stk__cpu_window_rate(&w, 12 * S, 100.5, 5 * S, S), 0.25));
  /* 5 s after it: the samples rotate (older = t 10, newer = t 15) */
  CHECK(near(stk__cpu_window_rate(&w, 15 * S, 101.0, 5 * S, S), 0.2));
  CHECK(w.t_ns[0] == 10 * S && w.t_ns[1] == 15 * S);
  /* from t 15 on the rate is from t 10: 17 s, 101.7 -> 1.7 CPU-s in 7 s */
  CHECK(near(stk__cpu_window_rate(&w, 17 * S, 101.7, 5 * S, S), 1.7 / 7));
  /* at t 20 they rotate again (older = t 15): idle since, rate falls */
  CHECK(near(stk__cpu_window_rate(&w, 20 * S, 101.7, 5 * S, S), 0.7 / 5));
  CHECK(w.t_ns[0] == 15 * S && w.t_ns[1] == 20 * S);
  /* a long pause: both samples old, the rate spans the pause */
  CHECK(near(stk__cpu_window_rate(&w, 120 * S, 101.7, 5 * S, S), 0.0));
  CHECK(w.t_ns[0] == 20 * S && w.t_ns[1] == 120 * S);
  /* CPU figures that go down (a reader's race) give 0, never negative */
  CHECK(stk__cpu_window_rate(&w, 122 * S, 50.0, 5 * S, S) == 0);

  /* a thread's split: user + system is its CPU time, each part >= 0 */
  volatile double x = 0;
  for (int i = 0; i < 3000000; i++) x += i * 0.5;
  unsigned long long u = 0, sy = 0, t0 = stk__thread_cpu_ns();
  stk__thread_cpu_split_ns(&u, &sy);
  unsigned long long t1 = stk__thread_cpu_ns();
  CHECK(u > 0 && u + sy <= t1 + 1000000);
  CHECK(u + sy + 20000000 >= t0); /* getrusage's microseconds, a tick's slack */

  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
  if (system(cmd)) fprintf(stderr, "cannot remove %s\n", root);
  CHECK_DONE();
}
