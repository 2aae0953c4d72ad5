/* test_abort.c - ending a job as FAILED, with real processes on 127.0.0.1:
 * a coordinator, one worker and two ranks (libstoker clients in this
 * process) mid-epoch; `stoker wait` watches; `stoker abort --rank 0` ends
 * the job. Then: the coordinator exits 4 (aborted) and the worker 5 (job
 * aborted), both ranks get STK_CANCELLED with "the job failed" and the
 * reason (not a hang), `stoker wait` exits 4 and prints the reason (each
 * wait bounded to catch a hang, not timed); the reason's control bytes never reach a log
 * line raw. Also: abort with a rank outside the job (exit 1, clear message), a too long
 * --reason (exit 2), `stoker wait` on a dead address (exit 1 after
 * --timeout-s) and with a wrong token (exit 1 at once, the status shown).
 *
 * usage: test_abort <stoker-coordinator> <stoker-worker> <stoker>
 */
#include <signal.h>

#include "common/clock.h"
#include "daemon_util.h"
#include "e2e_util.h"

static const char *cli_bin;

static double now_s(void) { return (double)stk__now_ns() / 1e9; }

static int run_cli(const char *name, char **argv, int timeout_ms, stk_proc *p) {
  if (proc_spawn(p, name, argv)) return -1;
  return proc_wait(p, timeout_ms);
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  if (argc < 4) {
    fprintf(stderr, "usage: %s <stoker-coordinator> <stoker-worker> <stoker>\n", argv[0]);
    return 2;
  }
  cli_bin = argv[3];
  const char *job[] = {"--set", "num_samples=4000", "--set", "batch_size=8",
                       "--set", "height=32",        "--set", "width=32",
                       "--set", "world_size=2",     "--set", "epochs=50",
                       "--set", "seed=5",           NULL};
  stk_proc co, wk, waiter, ab;
  int port = du_start_coordinator(&co, "coordinator", job);
  CHECK(port > 0);
  if (port <= 0) CHECK_DONE();
  const char *wargs[] = {"--threads", "1", NULL};
  CHECK(du_start_worker(&wk, "worker", port, wargs) > 0);
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);

  /* Bad input first, while the job runs: a rank outside the job, a reason
   * too long. Neither may end the job. */
  char *bad_rank[] = {
      (char *)cli_bin, "abort", "--coordinator", target, "--rank", "7", NULL};
  CHECK(run_cli("abort-bad-rank", bad_rank, 60000, &ab) == 1);
  char *log = proc_read_log(&ab);
  CHECK(log && strstr(log, "outside the job's world_size"));
  free(log);
  char longr[400];
  memset(longr, 'x', sizeof longr - 1);
  longr[sizeof longr - 1] = 0;
  char *too_long[] = {(char *)cli_bin, "abort", "--coordinator", target, "--reason",
                      longr,           NULL};
  CHECK(run_cli("abort-too-long", too_long, 60000, &ab) == 2);

  rank_run r[2];
  pthread_t t[2];
  for (uint32_t i = 0; i < 2; i++) {
    rank_init(&r[i]);
    r[i].port = port, r[i].rank = i, r[i].world = 2, r[i].finish = 0;
    r[i].step_ms = 10;
    pthread_create(&t[i], NULL, rank_main, &r[i]);
  }
  char *wait_argv[] = {
      (char *)cli_bin, "wait", "--coordinator", target, "--timeout-s", "20", NULL};
  CHECK(proc_spawn(&waiter, "wait", wait_argv) == 0);
  /* Mid-epoch: both ranks have batches (bounded wait on the condition). */
  double t0 = now_s();
  while (now_s() - t0 < 30 && (__atomic_load_n(&r[0].progress, __ATOMIC_ACQUIRE) < 5 ||
                               __atomic_load_n(&r[1].progress, __ATOMIC_ACQUIRE) < 5))
    stk__sleep_ms(20);
  CHECK(__atomic_load_n(&r[0].progress, __ATOMIC_ACQUIRE) >= 5 &&
        __atomic_load_n(&r[1].progress, __ATOMIC_ACQUIRE) >= 5);
  CHECK(proc_wait(&waiter, 0) == -1); /* still waiting: the job runs */

  char *abort_argv[] = {(char *)cli_bin,
                        "abort",
                        "--coordinator",
                        target,
                        "--rank",
                        "0",
                        "--reason",
                        "train.py exited 3\n\x1b[31mred",
                        "--timeout-ms",
                        "30000",
                        NULL};
  double ta = now_s();
  int abort_rc = run_cli("abort", abort_argv, 40000, &ab);
  CHECK(abort_rc == 0);
  if (abort_rc != 0) { /* say why, and end the job so the ranks cannot hang the test */
    fprintf(stderr, "stoker abort: %d\n", abort_rc);
    proc_dump_log(&ab);
    proc_dump_log(&co);
    proc_signal(&co, SIGKILL);
    proc_signal(&wk, SIGKILL);
  }

  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  double tr = now_s() - ta;
  for (int i = 0; i < 2; i++) {
    fprintf(stderr, "rank %d: %llu batches, then status %d: %s\n", i,
            (unsigned long long)r[i].delivered, r[i].final_status, r[i].error);
    CHECK(r[i].final_status == STK_CANCELLED);
    CHECK(strstr(r[i].error, "the job failed") != NULL);
    CHECK(strstr(r[i].error, "train.py exited 3") != NULL);
    CHECK(strchr(r[i].error, '\x1b') == NULL);
    CHECK_EQ_U64(r[i].mismatches, 0);
    CHECK_EQ_U64(r[i].order_errors, 0);
  }
  CHECK(tr < 10.0);

  int wc = proc_wait(&waiter, 60000);
  fprintf(stderr, "stoker wait: exit %d\n", wc);
  CHECK(wc == 4);
  log = proc_read_log(&waiter);
  CHECK(log && strstr(log, "failed: rank 0 aborted the job: train.py exited 3"));
  free(log);
  int cc = proc_wait(&co, 60000);
  int wkc = proc_wait(&wk, 60000);
  double te = now_s() - ta;
  fprintf(stderr, "coordinator exit %d, worker exit %d, %.1f s after the abort\n", cc,
          wkc, te);
  CHECK(cc == 4);
  CHECK(wkc == 5);
  CHECK(te < 20.0);
  log = proc_read_log(&co);
  CHECK(log && strstr(log, "rank 0 aborted the job: train.py exited 3\\x0a\\x1b[31mred"));
  CHECK(log && !strchr(log, '\x1b'));
  free(log);
  log = proc_read_log(&wk);
  CHECK(log && strstr(log, "the job failed"));
  free(log);

  /* Nothing listens there any more: wait gives up after its timeout. */
  char *dead[] = {
      (char *)cli_bin, "wait", "--coordinator", target, "--timeout-s", "1", NULL};
  double tw = now_s();
  CHECK(run_cli("wait-dead", dead, 15000, &waiter) == 1);
  CHECK(now_s() - tw < 10.0);

  /* A coordinator that refuses the call (wrong token): wait says so at
   * once instead of retrying until its timeout. */
  const char *tok[] = {"--token", "right-token", "--set", "num_samples=64", NULL};
  stk_proc co2;
  int port2 = du_start_coordinator(&co2, "coordinator-token", tok);
  CHECK(port2 > 0);
  if (port2 > 0) {
    char target2[64];
    snprintf(target2, sizeof target2, "127.0.0.1:%d", port2);
    char *refused[] = {(char *)cli_bin, "wait",    "--coordinator",
                       target2,         "--token", "wrong-token",
                       "--timeout-s",   "60",      NULL};
    tw = now_s();
    CHECK(run_cli("wait-refused", refused, 20000, &waiter) == 1);
    CHECK(now_s() - tw < 10.0);
    log = proc_read_log(&waiter);
    CHECK(log && strstr(log, "gRPC status 16"));
    free(log);
    proc_signal(&co2, SIGTERM);
    CHECK(proc_wait(&co2, 60000) == 0);
  }

  if (check_failures) {
    proc_dump_log(&co);
    proc_dump_log(&wk);
    proc_keep_tmp();
  }
  CHECK_DONE();
}
