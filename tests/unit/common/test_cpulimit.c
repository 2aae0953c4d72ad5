/* test_cpulimit.c - common/cpulimit.c on fake cgroup trees: cgroup v2
 * cpu.max ("max" = none, a quota in the process's cgroup or an ancestor,
 * the tightest wins), cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us
 * (-1 = none; "cpu,cpuacct" and a plain "cpu" mount), the affinity count
 * when it is lower than the quota, and no cgroup files at all. */
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

  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
  if (system(cmd)) fprintf(stderr, "cannot remove %s\n", root);
  CHECK_DONE();
}
