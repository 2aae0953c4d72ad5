/* test_worker_kill.c - exactly-once under failure, for real: a coordinator,
 * one worker (the victim) and two ranks on 127.0.0.1. Once both ranks are
 * well into the epoch the victim is stopped (SIGSTOP), then killed with
 * SIGKILL, and a replacement worker is started. Both ranks must still
 * receive every step exactly once, in order, byte-identical to the
 * reference; the requests the victim held are re-issued to the
 * replacement; the coordinator and the replacement exit 0 after the
 * finish, the victim by SIGKILL.
 *
 * Why this cannot depend on timing: each rank stops consuming after 10
 * batches (hold_at) until the victim is stopped, so neither can have asked
 * for its whole epoch by then (prefetch 6 of 40). The victim is the only
 * worker while it is stopped, so each rank's client, consuming again,
 * sends it requests (it has no other worker to pick). A request sent after
 * the stop took effect can never be answered, so the test waits - on each
 * client's own counters, not on a clock - until each rank has sent the
 * stopped victim at least one request (or already re-issued some), and
 * only then kills it. From then on "reissued > 0" and "the replacement
 * served batches" are guaranteed by the failure rules, not by a schedule.
 * (Before hold_at, a rank could race through its epoch while waiting for
 * the other to reach 10, and hold nothing at the victim: CI saw it.)
 *
 * usage: test_worker_kill <stoker-coordinator> <stoker-worker>
 */
#include <signal.h>
#include <sys/wait.h>

#include "daemon_util.h"
#include "e2e_util.h"

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  /* 1 ms of CPU per sample: a batch of 8 takes ~8 ms per builder, so the
   * ranks wait on the workers (requests are in flight all the time). */
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
  memset(p, 0, sizeof(p));
  int port = du_start_coordinator(&p[0], "coordinator", job);
  CHECK(port > 0);
  if (port <= 0) CHECK_DONE();
  const char *wargs[] = {"--threads", "1", NULL};
  int vport = du_start_worker(&p[1], "victim", port, wargs);
  CHECK(vport > 0);
  stk__rpc_channel *ch = du_channel(port);
  CHECK(du_wait_workers(ch, 1, 10000) == 0);
  if (check_failures) CHECK_DONE();

  rank_run r[2];
  pthread_t t[2];
  for (uint32_t i = 0; i < 2; i++) {
    rank_init(&r[i]);
    r[i].port = port, r[i].rank = i, r[i].world = 2, r[i].finish = 1;
    r[i].prefetch = 6;
    r[i].step_ms = 2;
    r[i].hold_at = 10;
    pthread_create(&t[i], NULL, rank_main, &r[i]);
  }

  /* 1. Both ranks well into the epoch, and held there (bounded: 60 s). */
  int ready = 0;
  for (int i = 0; i < 12000 && !ready; i++) {
    ready = __atomic_load_n(&r[0].progress, __ATOMIC_ACQUIRE) >= 10 &&
            __atomic_load_n(&r[1].progress, __ATOMIC_ACQUIRE) >= 10;
    if (!ready) stk__sleep_ms(5);
  }
  CHECK(ready);

  /* 2. Stop the victim and wait until the kernel says it is stopped. */
  proc_signal(&p[1], SIGSTOP);
  int wst = 0;
  CHECK(waitpid(p[1].pid, &wst, WUNTRACED) == p[1].pid && WIFSTOPPED(wst));
  int64_t base[2];
  uint64_t reissued[2] = {0, 0};
  for (int i = 0; i < 2; i++) base[i] = victim_sent(&r[i], vport, &reissued[i]);
  fprintf(stderr, "victim stopped at rank0=%d rank1=%d batches\n",
          __atomic_load_n(&r[0].progress, __ATOMIC_ACQUIRE),
          __atomic_load_n(&r[1].progress, __ATOMIC_ACQUIRE));
  for (int i = 0; i < 2; i++) __atomic_store_n(&r[i].release, 1, __ATOMIC_RELEASE);

  /* 3. Until each rank has a request the stopped victim can never answer
   *    (sent after the stop), or has already moved some elsewhere. */
  int stuck[2] = {0, 0};
  for (int i = 0; i < 6000 && !(stuck[0] && stuck[1]); i++) {
    for (int k = 0; k < 2; k++) {
      int64_t now = victim_sent(&r[k], vport, &reissued[k]);
      if (base[k] < 0) base[k] = now;
      if ((base[k] >= 0 && now > base[k]) || reissued[k] > 0) stuck[k] = 1;
    }
    if (!(stuck[0] && stuck[1])) stk__sleep_ms(5);
  }
  CHECK(stuck[0] && stuck[1]);

  /* 4. Kill it; a replacement registers and takes over. */
  proc_signal(&p[1], SIGKILL);
  CHECK(proc_wait(&p[1], 5000) == 128 + SIGKILL);
  int rport = du_start_worker(&p[2], "replacement", port, wargs);
  CHECK(rport > 0);
  stk__rpc_channel_close(ch);

  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    if (r[i].error[0]) fprintf(stderr, "rank %d: %s\n", i, r[i].error);
    CHECK(r[i].final_status == STK_END_OF_DATA);
    CHECK_EQ_U64(r[i].delivered, 40);
    CHECK_EQ_U64(r[i].mismatches, 0);
    CHECK_EQ_U64(r[i].order_errors, 0);
    /* the victim held requests when it died: they moved */
    CHECK(r[i].stats.reissued > 0);
    int ri = worker_index(&r[i].stats, rport);
    uint64_t by_replacement = ri >= 0 ? r[i].stats.workers[ri].batches : 0;
    int vi = worker_index(&r[i].stats, vport);
    uint64_t by_victim = vi >= 0 ? r[i].stats.workers[vi].batches : 0;
    /* what the victim could not answer, the replacement built */
    CHECK(by_replacement > 0);
    CHECK_EQ_U64(by_victim + by_replacement, 40);
    fprintf(stderr,
            "rank %d: %llu batches (victim %llu, replacement %llu), reissued %llu, "
            "duplicates %llu\n",
            i, (unsigned long long)r[i].delivered, (unsigned long long)by_victim,
            (unsigned long long)by_replacement, (unsigned long long)r[i].stats.reissued,
            (unsigned long long)r[i].stats.duplicates);
  }
  /* every rank finished: the job ends and both live daemons exit 0 */
  int codes[3] = {proc_wait(&p[0], 15000), 0, proc_wait(&p[2], 15000)};
  for (int i = 0; i < 3; i += 2) {
    if (codes[i] != 0) fprintf(stderr, "%s: exit %d\n", p[i].name, codes[i]);
    CHECK(codes[i] == 0);
  }
  for (int i = 0; i < 2; i++) pthread_mutex_destroy(&r[i].mu);
  if (check_failures) {
    for (int i = 0; i < 3; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
  CHECK_DONE();
}
