/* common/cpulimit.h - the CPU a process may use: its cgroup's CPU quota
 * (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us, the tightest of
 * its cgroup and the cgroup's ancestors) and its affinity mask. A data
 * worker reads it at start, registers it as its cores and measures its
 * busy share against it (a worker with 0.45 of a core that uses 0.45 CPU
 * seconds a second is fully busy). */
#ifndef STOKER_COMMON_CPULIMIT_H
#define STOKER_COMMON_CPULIMIT_H

#include <stddef.h>

typedef struct stk__cpu_limit {
  double cores;       /* usable: min(quota, affinity); > 0 */
  double quota_cores; /* the cgroup quota in cores; 0 = no quota found */
  int affinity;       /* CPUs in the affinity mask (as passed in) */
  int cgroup_version; /* 1 or 2 for the hierarchy the quota came from; 0 = none */
  char source[256];   /* where the figure came from, for the start log:
                         "cgroup v2 /sys/fs/cgroup/a/cpu.max: 45000 100000",
                         "affinity: 4 CPUs" */
} stk__cpu_limit;

/* The usable cores of the calling process: `root` is the file system
 * root the cgroup files are read under ("/" normally; a test passes a
 * directory holding fake proc/self/cgroup and sys/fs/cgroup/...), and
 * affinity the CPU count of its affinity mask (stk__affinity_cpus(); <= 0
 * counts as 1). A missing or unreadable cgroup file means no quota
 * (never an error): cores = affinity then. "max" or -1 mean no quota at
 * that level. Fills *out; always succeeds. Reentrant; reads files only. */
void stk__cpu_limit_read(const char *root, int affinity, stk__cpu_limit *out);

/* CPUs in the calling thread's affinity mask (sched_getaffinity), or the
 * online CPU count when that fails; at least 1. Thread-safe. */
int stk__affinity_cpus(void);

/* CPU time (user + system) the calling thread has used, ns
 * (CLOCK_THREAD_CPUTIME_ID); 0 on failure. Thread-safe. */
unsigned long long stk__thread_cpu_ns(void);

/* CPU seconds (user + system) the whole process has used (getrusage
 * RUSAGE_SELF); 0 on failure. Thread-safe. */
double stk__process_cpu_s(void);

#endif
