/* test_client_failover.c - libstoker against real daemons on loopback:
 * a coordinator and two workers (tests/proc.h spawns and always reaps
 * them), ranks 0 and 1 in one process. Mid-epoch one worker is SIGKILLed:
 * its outstanding requests are re-issued to the other, and each rank still
 * gets every step exactly once, in order, byte-identical to the reference.
 * A replacement worker then registers and is used. Finally both ranks
 * finish and the coordinator exits 0.
 * argv: coordinator and worker binaries (ctest passes them). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "proc.h"
#include "stoker/client.h"

static const char *coord_bin, *worker_bin;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static int start_worker(stk_proc *p, const char *name, int cport) {
  char pf[600], target[64];
  snprintf(pf, sizeof(pf), "%s/%s.port", proc_tmpdir(), name);
  snprintf(target, sizeof(target), "127.0.0.1:%d", cport);
  char *argv[] = {(char *)worker_bin,
                  "--coordinator",
                  target,
                  "--listen",
                  "127.0.0.1:0",
                  "--port-file",
                  pf,
                  "--threads",
                  "1",
                  NULL};
  if (proc_spawn(p, name, argv)) return -1;
  return proc_wait_port(p, pf, 10000);
}

static int take(stk_client *c, uint64_t want_step, unsigned char *ref, size_t plen) {
  stk_batch *b = NULL;
  int st = stk_client_next(c, &b);
  if (st) {
    fprintf(stderr, "next: %s: %s\n", stk_strerror(st), stk_client_error(c));
    return -1;
  }
  int ok = stk_batch_step(b) == want_step && stk_batch_epoch(b) == 0;
  size_t len = 0;
  const void *p = stk_batch_payload(b, &len);
  /* The reference burns the job's synthetic cost like a worker does: check
   * every 4th step in full so the workers stay the bottleneck (requests
   * in flight when one dies); the library checks every crc32c. */
  if (want_step % 4 == 0)
    ok = ok && len == plen &&
         stk_client_reference(c, 0, want_step, NULL, ref, plen) == STK_OK &&
         memcmp(ref, p, len) == 0;
  if (!ok)
    fprintf(stderr, "step %llu: wrong or different batch\n",
            (unsigned long long)want_step);
  stk_batch_release(b);
  return ok ? 0 : -1;
}

int main(int argc, char **argv) {
  if (argc < 3 || access(argv[1], X_OK) || access(argv[2], X_OK)) {
    printf("SKIP: needs the stoker-coordinator and stoker-worker binaries\n");
    return 77;
  }
  coord_bin = argv[1], worker_bin = argv[2];
  stk_proc coord, w[3];
  char pf[600];
  snprintf(pf, sizeof(pf), "%s/coord.port", proc_tmpdir());
  char *cargv[] = {(char *)coord_bin,
                   "--listen",
                   "127.0.0.1:0",
                   "--port-file",
                   pf,
                   "--set",
                   "name=failover",
                   "--set",
                   "num_samples=256",
                   "--set",
                   "height=16",
                   "--set",
                   "width=16",
                   "--set",
                   "batch_size=4",
                   "--set",
                   "world_size=2",
                   "--set",
                   "epochs=1",
                   "--set",
                   "synthetic_cost_us=8000",
                   NULL};
  if (proc_spawn(&coord, "coordinator", cargv)) return 1;
  int cport = proc_wait_port(&coord, pf, 10000);
  CHECK(cport > 0);
  CHECK(start_worker(&w[0], "worker0", cport) > 0);
  CHECK(start_worker(&w[1], "worker1", cport) > 0);
  if (check_failures) {
    proc_dump_log(&coord);
    CHECK_DONE();
  }
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", cport);
  stk_client *c[2] = {NULL, NULL};
  for (uint32_t r = 0; r < 2; r++) {
    stk_client_config cfg;
    stk_client_config_defaults(&cfg);
    cfg.coordinator = target;
    cfg.rank = r;
    cfg.world_size = 2;
    cfg.prefetch = 6;
    cfg.join_timeout_ms = 10000;
    char err[512];
    int st = stk_client_open(&cfg, &c[r], err, sizeof(err));
    if (st) fprintf(stderr, "open rank %u: %s\n", r, err);
    CHECK(st == STK_OK);
  }
  if (!c[0] || !c[1]) {
    proc_dump_log(&coord);
    CHECK_DONE();
  }
  uint64_t spe = stk_client_steps_per_epoch(c[0]);
  CHECK_EQ_U64(spe, 32);
  size_t plen = (size_t)stk_client_payload_bytes(c[0]);
  unsigned char *ref = malloc(plen);
  int started2 = 0;
  for (uint64_t s = 0; s < spe && !check_failures; s++) {
    if (s == 6) {
      proc_signal(&w[0], SIGKILL); /* requests are in flight: builds are slow */
      proc_wait(&w[0], 5000);
    }
    if (s == 10) {
      CHECK(start_worker(&w[2], "worker2", cport) > 0);
      started2 = 1;
      /* until both clients have a stream to it (a worker that has not got
       * its job yet refuses streams for a moment; the client retries) */
      int alive = 0;
      for (int i = 0; i < 200 && !alive; i++) {
        stk_stats a, b;
        stk_client_stats(c[0], &a);
        stk_client_stats(c[1], &b);
        alive = a.nworkers == 3 && a.workers[2].alive && b.nworkers == 3 &&
                b.workers[2].alive;
        if (!alive) sleep_ms(25);
      }
      CHECK(alive);
      sleep_ms(300);
    }
    for (int r = 0; r < 2; r++) CHECK(take(c[r], s, ref, plen) == 0);
  }
  for (int r = 0; r < 2; r++) {
    stk_batch *b = NULL;
    CHECK(stk_client_next(c[r], &b) == STK_END_OF_EPOCH);
    CHECK(stk_client_next(c[r], &b) == STK_END_OF_DATA);
  }
  stk_stats s0, s1;
  stk_client_stats(c[0], &s0);
  stk_client_stats(c[1], &s1);
  printf("reissued %llu + %llu, duplicates %llu + %llu, stall %.0f%% / %.0f%%\n",
         (unsigned long long)s0.reissued, (unsigned long long)s1.reissued,
         (unsigned long long)s0.duplicates, (unsigned long long)s1.duplicates,
         100 * s0.stall_fraction, 100 * s1.stall_fraction);
  CHECK(s0.reissued + s1.reissued >= 1);
  CHECK_EQ_U64(s0.batches, spe);
  /* the replacement worker (the third entry) was used */
  uint64_t w2 = 0;
  for (uint32_t i = 2; i < s0.nworkers; i++) w2 += s0.workers[i].batches;
  for (uint32_t i = 2; i < s1.nworkers; i++) w2 += s1.workers[i].batches;
  CHECK(started2 && w2 > 0);
  for (uint32_t i = 0; i < s0.nworkers; i++)
    printf("rank 0 worker %s: %llu batches, alive %u, rate %.1f/s\n",
           s0.workers[i].address, (unsigned long long)s0.workers[i].batches,
           s0.workers[i].alive, s0.workers[i].batches_per_s);
  CHECK(stk_client_finish(c[0], 0) == STK_OK);
  CHECK(stk_client_finish(c[1], 0) == STK_OK);
  stk_client_close(c[0]);
  stk_client_close(c[1]);
  CHECK(proc_wait(&coord, 15000) == 0); /* all ranks finished: the job ends */
  free(ref);
  if (check_failures) {
    proc_keep_tmp();
    proc_dump_log(&coord);
  }
  CHECK_DONE();
}
