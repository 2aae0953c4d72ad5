/* test_worker_nofile.c - a stoker-worker under a small `ulimit -n` serves
 * exactly the reference batches, real files, real processes:
 *  - the worker starts with RLIMIT_NOFILE soft 16 / hard 64 (set by a
 *    shell in its parent, `ulimit`), raises soft to hard and logs it, and
 *    warns that 64 is low for two builders;
 *  - tar shards (120 of them, more than a builder keeps open) and a batch
 *    of 48 (more than a read window), two builder threads: the builders'
 *    32 descriptors each plus gRPC's do not fit in 64, so builds run into
 *    EMFILE and degrade or fail transiently; none may substitute a
 *    sample, and one rank receives every batch of two epochs, each equal
 *    to the reference built in this process without a limit.
 * The worker's counters (substituted, transient errors and retries) are
 * printed from its exit line.
 * Then a worker whose every 5th batch fails transiently
 * (--fault-transient-every): the stream ends UNAVAILABLE, the client asks
 * again, and every step still arrives once, in order, exact.
 *
 * usage: test_worker_nofile <stoker-coordinator> <stoker-worker> <stoker-dataset>
 */
#include <sys/resource.h>

#include "daemon_util.h"
#include "e2e_util.h"

/* The last line of the log that contains `key`, into out. */
static int last_line_with(const char *log, const char *key, char *out, size_t len) {
  FILE *f = fopen(log, "r");
  if (!f) return -1;
  char line[4096];
  int found = -1;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, key)) snprintf(out, len, "%s", line), found = 0;
  fclose(f);
  return found;
}

static uint64_t field(const char *line, const char *name) {
  const char *p = strstr(line, name);
  return p ? strtoull(p + strlen(name), NULL, 10) : UINT64_MAX;
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  if (argc < 4) {
    fprintf(stderr, "usage: %s <coordinator> <worker> <stoker-dataset>\n", argv[0]);
    return 2;
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
      rl.rlim_max < 64) {
    fprintf(stderr, "skipped: the hard open-file limit is %llu, the test needs 64\n",
            (unsigned long long)rl.rlim_max);
    return 77;
  }
  char root[600];
  snprintf(root, sizeof root, "%s/data", proc_tmpdir());
  char *gen[] = {argv[3],      "gen",      "--out",      root,          "--count",
                 "240",        "--layout", "tar",        "--per-shard", "2",
                 "--min-side", "24",       "--max-side", "48",          NULL};
  stk_proc g;
  CHECK(proc_spawn(&g, "gen", gen) == 0);
  CHECK(proc_wait(&g, 60000) == 0);

  const char *job[] = {"--set", "source=tar",     "--set", "dataset=shards",
                       "--set", "pipeline=train", "--set", "height=16",
                       "--set", "width=16",       "--set", "batch_size=48",
                       "--set", "world_size=1",   "--set", "epochs=2",
                       "--set", "seed=5",         NULL};
  stk_proc coord, worker;
  int cport = du_start_coordinator(&coord, "nofile-coord", job);
  CHECK(cport > 0);
  if (cport <= 0) return 1;
  char pf[600], target[64];
  snprintf(pf, sizeof pf, "%s/nofile-worker.port", proc_tmpdir());
  snprintf(target, sizeof target, "127.0.0.1:%d", cport);
  char *wargv[] = {"/bin/sh",
                   "-c",
                   "ulimit -S -n 16 && ulimit -H -n 64 && exec \"$0\" \"$@\"",
                   (char *)worker_bin,
                   "--coordinator",
                   target,
                   "--port-file",
                   pf,
                   "--stats-interval-s",
                   "1",
                   "--threads",
                   "2",
                   "--data-root",
                   root,
                   NULL};
  CHECK(proc_spawn(&worker, "nofile-worker", wargv) == 0);
  int wport = proc_wait_port(&worker, pf, 10000);
  CHECK(wport > 0);

  rank_run r;
  rank_init(&r);
  r.port = cport, r.rank = 0, r.world = 1, r.finish = 1;
  r.data_root = root;
  pthread_t t;
  pthread_create(&t, NULL, rank_main, &r);
  pthread_join(t, NULL);
  if (r.error[0]) fprintf(stderr, "rank 0: %s\n", r.error);
  CHECK(r.final_status == STK_END_OF_DATA);
  CHECK_EQ_U64(r.delivered, 2 * 5); /* floor(240 / 48) x 2 epochs */
  CHECK_EQ_U64(r.mismatches, 0);
  CHECK_EQ_U64(r.order_errors, 0);
  CHECK_EQ_U64(r.stats.substituted, 0);
  printf("rank 0: %llu batches, all equal to the reference: %s, re-asked %llu\n",
         (unsigned long long)r.delivered, r.mismatches ? "NO" : "yes",
         (unsigned long long)r.stats.reissued);
  CHECK(proc_wait(&worker, 15000) == 0);
  CHECK(proc_wait(&coord, 15000) == 0);

  char line[4096] = "";
  CHECK(last_line_with(worker.log, "RLIMIT_NOFILE", line, sizeof line) == 0);
  printf("worker: %s", line);
  CHECK(strstr(line, "soft 64 hard 64") != NULL);
  CHECK(last_line_with(worker.log, "is low for 2 builder threads", line, sizeof line) ==
        0);
  line[0] = 0;
  CHECK(last_line_with(worker.log, "exiting", line, sizeof line) == 0);
  printf(
      "worker: substituted=%llu transient_errors=%llu transient_retries=%llu "
      "reread=%llu (samples read again alone, out of descriptors)\n",
      (unsigned long long)field(line, "substituted="),
      (unsigned long long)field(line, "transient_errors="),
      (unsigned long long)field(line, "transient_retries="),
      (unsigned long long)field(line, "reread="));
  CHECK_EQ_U64(field(line, "substituted="), 0);
  if (check_failures) {
    proc_dump_log(&worker);
    proc_dump_log(&coord);
    proc_keep_tmp();
  }

  /* Phase 2: a request that fails transiently is answered UNAVAILABLE and
   * the client asks again: every 5th batch fails all its build attempts
   * (--fault-transient-every 5); every step still arrives, exact. */
  int before = check_failures;
  const char *syn[] = {"--set", "num_samples=160", "--set", "batch_size=8",
                       "--set", "height=16",       "--set", "width=16",
                       "--set", "world_size=1",    "--set", "epochs=2",
                       NULL};
  cport = du_start_coordinator(&coord, "again-coord", syn);
  CHECK(cport > 0);
  const char *wa[] = {"--threads", "1", "--fault-transient-every", "5", NULL};
  CHECK(du_start_worker(&worker, "again-worker", cport, wa) > 0);
  rank_init(&r);
  r.port = cport, r.rank = 0, r.world = 1, r.finish = 1;
  pthread_create(&t, NULL, rank_main, &r);
  pthread_join(t, NULL);
  if (r.error[0]) fprintf(stderr, "rank 0: %s\n", r.error);
  CHECK(r.final_status == STK_END_OF_DATA);
  CHECK_EQ_U64(r.delivered, 2 * 20);
  CHECK_EQ_U64(r.mismatches, 0);
  CHECK_EQ_U64(r.order_errors, 0);
  CHECK(r.stats.reissued > 0);
  CHECK(proc_wait(&worker, 15000) == 0);
  CHECK(proc_wait(&coord, 15000) == 0);
  CHECK(last_line_with(worker.log, "exiting", line, sizeof line) == 0);
  printf(
      "ask again: %llu batches, all equal: %s, client re-asked %llu; worker "
      "transient_errors=%llu transient_retries=%llu\n",
      (unsigned long long)r.delivered, r.mismatches ? "NO" : "yes",
      (unsigned long long)r.stats.reissued,
      (unsigned long long)field(line, "transient_errors="),
      (unsigned long long)field(line, "transient_retries="));
  CHECK(field(line, "transient_errors=") > 0 && field(line, "transient_errors=") < 1000);
  line[0] = 0;
  CHECK(last_line_with(worker.log, "injected transient error", line, sizeof line) == 0);
  if (check_failures != before) {
    proc_dump_log(&worker);
    proc_keep_tmp();
  }
  stk__rpc_shutdown();
  CHECK_DONE();
}
