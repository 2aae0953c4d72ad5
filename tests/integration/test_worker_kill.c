/* test_worker_kill.c - exactly-once under failure, for real: a coordinator,
 * two workers and two ranks on 127.0.0.1; once both ranks are well into
 * the epoch, one worker is killed with SIGKILL. Both ranks must still
 * receive every step exactly once, in order, byte-identical to the
 * reference, with the dead worker's requests re-issued to the survivor;
 * the coordinator and the surviving worker exit 0 after the finish.
 *
 * usage: test_worker_kill <stoker-coordinator> <stoker-worker>
 */
#include <signal.h>

#include "daemon_util.h"
#include "e2e_util.h"

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  /* 1 ms of CPU per sample: a batch of 8 takes ~8 ms per builder, so the
   * epoch (2 x 40 steps) lasts long enough to kill a worker in its middle. */
  const char *job[] = {"--set", "num_samples=640",
                       "--set", "batch_size=8",
                       "--set", "height=32",
                       "--set", "width=32",
                       "--set", "world_size=2",
                       "--set", "epochs=1",
                       "--set", "synthetic_cost_us=1000",
                       "--set", "seed=5",
                       NULL};
  stk_proc p[3];
  int port = du_start_coordinator(&p[0], "coordinator", job);
  CHECK(port > 0);
  if (port <= 0) CHECK_DONE();
  const char *wargs[] = {"--threads", "1", NULL};
  CHECK(du_start_worker(&p[1], "worker1", port, wargs) > 0);
  CHECK(du_start_worker(&p[2], "worker2", port, wargs) > 0);
  stk_rpc_channel *ch = du_channel(port);
  CHECK(du_wait_workers(ch, 2, 10000) == 0);
  stk_rpc_channel_close(ch);

  rank_run r[2];
  pthread_t t[2];
  for (uint32_t i = 0; i < 2; i++) {
    memset(&r[i], 0, sizeof r[i]);
    r[i].port = port, r[i].rank = i, r[i].world = 2, r[i].finish = 1;
    r[i].prefetch = 6;
    r[i].step_ms = 2;
    pthread_create(&t[i], NULL, rank_main, &r[i]);
  }
  /* Kill worker 2 once both ranks have 10 batches (bounded wait). */
  int killed = 0;
  for (int i = 0; i < 3000 && !killed; i++) {
    if (__atomic_load_n(&r[0].progress, __ATOMIC_ACQUIRE) >= 10 &&
        __atomic_load_n(&r[1].progress, __ATOMIC_ACQUIRE) >= 10) {
      proc_signal(&p[2], SIGKILL);
      killed = 1;
      fprintf(stderr, "killed worker2 at rank0=%d rank1=%d batches\n", r[0].progress,
              r[1].progress);
    }
    du_sleep_ms(5);
  }
  CHECK(killed);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  uint64_t reissued = 0;
  for (int i = 0; i < 2; i++) {
    if (r[i].error[0]) fprintf(stderr, "rank %d: %s\n", i, r[i].error);
    CHECK(r[i].final_status == STK_END_OF_DATA);
    CHECK_EQ_U64(r[i].delivered, 40);
    CHECK_EQ_U64(r[i].mismatches, 0);
    CHECK_EQ_U64(r[i].order_errors, 0);
    CHECK(r[i].progress < 40 || r[i].delivered == 40);
    reissued += r[i].stats.reissued;
    fprintf(stderr, "rank %d: %llu batches, reissued %llu, duplicates %llu\n", i,
            (unsigned long long)r[i].delivered, (unsigned long long)r[i].stats.reissued,
            (unsigned long long)r[i].stats.duplicates);
  }
  /* Requests were in flight on the killed worker: they moved. */
  CHECK(reissued > 0);
  CHECK(proc_wait(&p[2], 5000) == 128 + SIGKILL);
  for (int i = 0; i < 2; i++) {
    int code = proc_wait(&p[i], 10000);
    if (code != 0) fprintf(stderr, "%s: exit %d\n", p[i].name, code);
    CHECK(code == 0);
  }
  if (check_failures) {
    for (int i = 0; i < 3; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
  CHECK_DONE();
}
