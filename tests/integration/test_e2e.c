/* test_e2e.c - the whole path, real processes on 127.0.0.1: a coordinator,
 * two workers and two ranks (libstoker clients in this process). Every
 * delivered batch must equal the reference batch, each step exactly once
 * and in order over two epochs, and every process must exit 0 within 10 s
 * of the last finish.
 *
 * usage: test_e2e <stoker-coordinator> <stoker-worker>
 */
#include "daemon_util.h"
#include "e2e_util.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <stoker-coordinator> <stoker-worker>\n", argv[0]);
    return 2;
  }
  coord_bin = argv[1];
  worker_bin = argv[2];
  const char *job[] = {"--set", "num_samples=600", "--set", "batch_size=8",
                       "--set", "height=32",       "--set", "width=32",
                       "--set", "world_size=2",    "--set", "epochs=2",
                       "--set", "seed=11",         NULL};
  stk_proc p[3];
  int port = du_start_coordinator(&p[0], "coordinator", job);
  CHECK(port > 0);
  if (port <= 0) CHECK_DONE();
  const char *wargs[] = {"--threads", "1", NULL};
  CHECK(du_start_worker(&p[1], "worker1", port, wargs) > 0);
  CHECK(du_start_worker(&p[2], "worker2", port, wargs) > 0);

  rank_run r[2];
  pthread_t t[2];
  for (uint32_t i = 0; i < 2; i++) {
    memset(&r[i], 0, sizeof r[i]);
    r[i].port = port, r[i].rank = i, r[i].world = 2, r[i].finish = 1;
    pthread_create(&t[i], NULL, rank_main, &r[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    if (r[i].error[0]) fprintf(stderr, "rank %d: %s\n", i, r[i].error);
    CHECK(r[i].final_status == STK_END_OF_DATA);
    CHECK_EQ_U64(r[i].delivered, 2 * 37); /* floor(600 / 16) steps x 2 epochs */
    CHECK_EQ_U64(r[i].mismatches, 0);
    CHECK_EQ_U64(r[i].order_errors, 0);
    CHECK_EQ_U64(r[i].epochs_seen, 2);
    CHECK(r[i].stats.crc_errors == 0);
    fprintf(stderr, "rank %d: %llu batches, stall %.1f%%, %u workers used\n", i,
            (unsigned long long)r[i].delivered, 100 * r[i].stats.stall_fraction,
            r[i].stats.nworkers);
  }
  struct timespec last = ts_diff_s(r[0].finished_at, r[1].finished_at) > 0
                             ? r[0].finished_at
                             : r[1].finished_at;
  for (int i = 0; i < 3; i++) {
    int code = proc_wait(&p[i], 10000);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (code != 0) fprintf(stderr, "%s: exit %d\n", p[i].name, code);
    CHECK(code == 0);
    CHECK(ts_diff_s(now, last) < 10.0);
  }
  if (check_failures) {
    for (int i = 0; i < 3; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
  CHECK_DONE();
}
