/* test_shutdown.c - the ways a job ends, with real processes on 127.0.0.1:
 *  1. every rank calls Finish -> coordinator and both workers exit 0;
 *  2. rank 0 calls Finish with shutdown_job -> everything exits 0;
 *  3. no client touches the job (--idle-timeout-s 1) -> the coordinator
 *     exits 3 (idle) and its worker exits 0;
 *  4. the coordinator is killed -9 -> the worker (--orphan-timeout-s 2)
 *     exits 3 (orphan).
 *
 * usage: test_shutdown <stoker-coordinator> <stoker-worker>
 */
#include <signal.h>

#include "daemon_util.h"

static const char *const job_args[] = {
    "--set", "num_samples=64", "--set", "batch_size=4", "--set", "height=16",
    "--set", "width=16",       "--set", "world_size=2", NULL};

static void fail_dump(stk_proc *ps, int n) {
  for (int i = 0; i < n; i++) proc_dump_log(&ps[i]);
  proc_keep_tmp();
}

static void all_ranks_finish(void) {
  stk_proc p[3];
  int before = check_failures;
  int cport = du_start_coordinator(&p[0], "finish-coord", job_args);
  CHECK(cport > 0);
  if (cport <= 0) return;
  const char *wargs[] = {"--threads", "1", NULL};
  CHECK(du_start_worker(&p[1], "finish-w1", cport, wargs) > 0);
  CHECK(du_start_worker(&p[2], "finish-w2", cport, wargs) > 0);
  stk_rpc_channel *c = du_channel(cport);
  CHECK(du_wait_workers(c, 2, 10000) == 0);
  char det[256];
  uint32_t nf = 0;
  /* Only rank 0 may end the job; a bad rank is refused. */
  CHECK(du_finish(c, 1, 1, &nf, det, sizeof(det)) == GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(du_finish(c, 7, 0, &nf, det, sizeof(det)) == GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(du_finish(c, 0, 0, &nf, det, sizeof(det)) == GRPC_STATUS_OK);
  CHECK_EQ_U64(nf, 1);
  /* The job goes on with one rank left. */
  du_sleep_ms(300);
  CHECK(proc_wait(&p[0], 0) == -1);
  CHECK(du_finish(c, 1, 0, &nf, det, sizeof(det)) == GRPC_STATUS_OK);
  CHECK_EQ_U64(nf, 2);
  stk_rpc_channel_close(c);
  for (int i = 0; i < 3; i++) {
    int code = proc_wait(&p[i], 10000);
    if (code != 0) fprintf(stderr, "%s: exit %d\n", p[i].name, code);
    CHECK(code == 0);
  }
  if (check_failures != before) fail_dump(p, 3);
}

static void rank0_ends_job(void) {
  stk_proc p[2];
  int before = check_failures;
  int cport = du_start_coordinator(&p[0], "rank0-coord", job_args);
  CHECK(cport > 0);
  if (cport <= 0) return;
  const char *wargs[] = {"--threads", "1", NULL};
  CHECK(du_start_worker(&p[1], "rank0-w", cport, wargs) > 0);
  stk_rpc_channel *c = du_channel(cport);
  CHECK(du_wait_workers(c, 1, 10000) == 0);
  char det[256];
  uint32_t nf = 0;
  CHECK(du_finish(c, 0, 1, &nf, det, sizeof(det)) == GRPC_STATUS_OK);
  stk_rpc_channel_close(c);
  for (int i = 0; i < 2; i++) CHECK(proc_wait(&p[i], 10000) == 0);
  if (check_failures != before) fail_dump(p, 2);
}

static void idle_timeout(void) {
  stk_proc p[2];
  int before = check_failures;
  const char *args[32];
  int n = 0;
  for (const char *const *a = job_args; *a; a++) args[n++] = *a;
  args[n++] = "--idle-timeout-s";
  args[n++] = "1";
  args[n] = NULL;
  int cport = du_start_coordinator(&p[0], "idle-coord", args);
  CHECK(cport > 0);
  if (cport <= 0) return;
  const char *wargs[] = {"--threads", "1", NULL};
  CHECK(du_start_worker(&p[1], "idle-w", cport, wargs) > 0);
  CHECK(proc_wait(&p[0], 10000) == 3); /* idle */
  CHECK(proc_wait(&p[1], 10000) == 0); /* told to shut down */
  if (check_failures != before) fail_dump(p, 2);
}

static void orphan(void) {
  stk_proc p[2];
  int before = check_failures;
  int cport = du_start_coordinator(&p[0], "orphan-coord", job_args);
  CHECK(cport > 0);
  if (cport <= 0) return;
  const char *wargs[] = {"--threads", "1", "--orphan-timeout-s", "2", NULL};
  CHECK(du_start_worker(&p[1], "orphan-w", cport, wargs) > 0);
  stk_rpc_channel *c = du_channel(cport);
  CHECK(du_wait_workers(c, 1, 10000) == 0);
  stk_rpc_channel_close(c);
  proc_signal(&p[0], SIGKILL);
  CHECK(proc_wait(&p[0], 5000) == 128 + SIGKILL);
  int code = proc_wait(&p[1], 10000);
  CHECK(code == 3);
  if (check_failures != before) fail_dump(p, 2);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s stoker-coordinator stoker-worker\n", argv[0]);
    return 2;
  }
  coord_bin = argv[1];
  worker_bin = argv[2];
  stk_rpc_init();
  all_ranks_finish();
  rank0_ends_job();
  idle_timeout();
  orphan();
  stk_rpc_shutdown();
  CHECK_DONE();
}
