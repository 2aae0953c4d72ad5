/* proc.h - a tiny process harness for multi-process tests: spawn a binary
 * with its stdout/stderr in a log file, wait for its --port-file, wait for
 * its exit with a timeout, and make sure every spawned process is killed
 * (SIGKILL) and reaped when the test ends, however it ends: at exit, on a
 * fatal signal of the test, and - through PR_SET_PDEATHSIG - even when the
 * test itself is killed with -9.
 *
 * Not thread-safe: drive it from the test's main thread.
 */
#ifndef STOKER_TEST_PROC_H
#define STOKER_TEST_PROC_H

#include <sys/types.h>

typedef struct stk_proc {
  pid_t pid;  /* 0 once reaped */
  int exited; /* reaped: status below is valid */
  int code;   /* exit code, or 128 + signal number */
  char name[64];
  char log[512]; /* where its stdout and stderr went */
} stk_proc;

/* A fresh temporary directory for this test (removed at exit unless
 * STOKER_KEEP_TMP is set or a check failed and proc_keep_tmp() was
 * called). Path valid until exit. */
const char *proc_tmpdir(void);
/* Keep the temporary directory (and its logs) after exit. */
void proc_keep_tmp(void);

/* Spawn argv[0] with argv (NULL-terminated); output to <tmpdir>/<name>.log.
 * 0, or -1 (message on stderr). */
int proc_spawn(stk_proc *p, const char *name, char *const argv[]);
/* Wait up to timeout_ms for path to hold a port; the port, or -1. Gives up
 * early if p (may be NULL) exits meanwhile. */
int proc_wait_port(stk_proc *p, const char *path, int timeout_ms);
/* Wait up to timeout_ms for p to exit: its code (128+sig for a signal), or
 * -1 on timeout (p keeps running). */
int proc_wait(stk_proc *p, int timeout_ms);
/* Send a signal (no-op if already reaped). */
void proc_signal(stk_proc *p, int sig);
/* Print the last bytes of p's log to stderr (for failures). */
void proc_dump_log(const stk_proc *p);
/* p's whole log so far, NUL-terminated (the caller frees), or NULL. */
char *proc_read_log(const stk_proc *p);
/* How many times needle occurs in p's log so far (0 when unreadable). */
int proc_log_count(const stk_proc *p, const char *needle);
/* Poll (every 50 ms, at most timeout_ms) until p's log holds needle at
 * least n times; 0, or -1 with the count it saw printed to stderr. */
int proc_wait_log(const stk_proc *p, const char *needle, int n, int timeout_ms);
/* Kill -9 and reap every process still running (also runs at exit). */
void proc_reap_all(void);

#endif
