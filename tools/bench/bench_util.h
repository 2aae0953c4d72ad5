/* bench_util.h - what the stoker-bench subcommands share: clocks (wall,
 * this thread's and a process's CPU time), the median of a few rounds, the
 * JPEG files of an ImageFolder, and a one-host job (a real
 * stoker-coordinator and one stoker-worker on loopback, spawned from the
 * build tree or PATH) for a libstoker client in the bench process.
 *
 * Single-threaded use: call from the bench's main thread.
 */
#ifndef STOKER_BENCH_UTIL_H
#define STOKER_BENCH_UTIL_H

#include <limits.h>
#include <sys/types.h>

#include "stoker/core.h"

/* Monotonic wall clock, seconds. */
double bu_now_s(void);
/* CPU time of the calling thread, seconds. */
double bu_thread_cpu_s(void);
/* CPU time of this process (all threads, user + system), seconds. */
double bu_self_cpu_s(void);
/* Page faults this process has taken so far (minor + major). */
double bu_self_faults(void);
/* CPU time of process pid from /proc, seconds; -1 if it cannot be read. */
double bu_proc_cpu_s(pid_t pid);
/* CPU time, seconds, of those threads of process pid whose name (comm)
 * starts with prefix (stoker names its threads: common/thread.h); threads
 * that have exited are not counted. -1 if /proc cannot be read. */
double bu_proc_threads_cpu_s(pid_t pid, const char *prefix);
/* Per-thread figures of a process from /proc/PID/task/TID/{stat,status}:
 * by thread name (comm), user and system CPU and context switches
 * (voluntary: it slept, a wake-up each; involuntary: preempted). */
#define BU_MAX_THREADS 96
typedef struct bu_thread {
  int tid;
  char comm[20];
  double user_s, sys_s;
  double vcsw, ivcsw;
} bu_thread;
typedef struct bu_threads {
  int n;
  bu_thread t[BU_MAX_THREADS];
} bu_threads;
/* Snapshot pid's threads (at most BU_MAX_THREADS). 0, or -1 if /proc
 * cannot be read. */
int bu_threads_snap(pid_t pid, bu_threads *out);
/* Accumulate into acc the figures of b minus a, per thread name (threads
 * of one name summed; one that started between a and b counts from 0). */
void bu_threads_diff_add(const bu_threads *a, const bu_threads *b, bu_threads *acc);

/* The JPEG files of an ImageFolder directory (CLASS/NAME.jpg, .jpeg),
 * relative to dir, in the dataset's order (sorted classes, sorted files),
 * at most max: *out is a malloc'ed array of malloc'ed strings (the caller
 * frees both); returns how many (0: none, or dir unreadable). */
size_t bu_list_jpegs(const char *dir, char ***out, size_t max);
/* The median of v[0..n) (n in 1..64; v is not modified). */
double bu_median(const double *v, int n);

/* A coordinator and one worker serving `spec` on 127.0.0.1. */
typedef struct bu_job {
  char tmp[64];        /* their files: job.conf, *.port, *.log */
  char addr[64];       /* the coordinator, for stk_client_config.coordinator */
  pid_t cpid, wpid;    /* 0 when not running */
  char clog[PATH_MAX]; /* the coordinator's log */
  char wlog[PATH_MAX]; /* the worker's log */
} bu_job;

/* Start the job: bindir holds stoker-coordinator and stoker-worker (NULL:
 * next to this binary, ../../server, ../server, then PATH); cextra and
 * wextra (NULL-terminated, may be NULL) are appended to the coordinator's
 * and the worker's arguments. 0 when both listen, else -1 with a message
 * on stderr (whatever started is stopped). */
int bu_job_start(bu_job *j, const stk_job_spec *spec, const char *bindir,
                 char *const *cextra, char *const *wextra);
/* Wait up to 10 s for both to exit (a client's stk_client_finish ends the
 * job), killing what is left. ok: the run went well, so a non-zero exit is
 * reported and, when all exited 0, the files are removed. 0 when both
 * exited 0. */
int bu_job_stop(bu_job *j, int ok);

#endif
