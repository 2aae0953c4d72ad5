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

/* User and system CPU time the calling thread has used, ns (getrusage
 * RUSAGE_THREAD: their sum is the thread's CPU time, the split the
 * kernel's tick-sampled proportion of it); both 0 on failure.
 * Thread-safe. */
void stk__thread_cpu_split_ns(unsigned long long *user_ns, unsigned long long *sys_ns);

/* The share of a host's usable CPU that cpu_s CPU seconds over wall_s
 * seconds of wall clock are, with `cores` usable (stk__cpu_limit.cores):
 * cpu_s / (wall_s x cores), e.g. 0.7 CPU-s in 2 s with a 0.5-core quota
 * is 0.7. 0 when wall_s or cores is not positive or cpu_s is negative.
 * Pure. */
double stk__cpu_share(double cpu_s, double wall_s, double cores);

/* A CPU rate over a recent window: two samples (time, CPU seconds so
 * far), the newer replaced once it is `window_ns` old, so the rate spans
 * window_ns to 2 x window_ns of the past (since the first sample until
 * then). Zero-initialise; the caller serialises the calls. */
typedef struct stk__cpu_window {
  long long t_ns[2]; /* [0] the older sample, [1] the newer */
  double cpu_s[2];
  int n; /* samples taken (0, then 1 for good) */
} stk__cpu_window;

/* Feed the CPU seconds used so far (cpu_s, never decreasing) at now_ns
 * (a monotonic clock); returns the CPU seconds per wall second from the
 * older sample to now, or -1 while that span is under min_span_ns (the
 * first call, or calls close together at the start). Pure arithmetic on w. */
double stk__cpu_window_rate(stk__cpu_window *w, long long now_ns, double cpu_s,
                            long long window_ns, long long min_span_ns);

/* CPU seconds (user + system) the whole process has used (getrusage
 * RUSAGE_SELF); 0 on failure. Thread-safe. */
double stk__process_cpu_s(void);

#endif
