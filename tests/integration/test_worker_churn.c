/* test_worker_churn.c - libstoker's worker table reuses the entries of
 * workers that left: a rogue coordinator in this process (Join,
 * WatchWorkers, Finish: fakecoord.h) lists worker after worker, 300
 * distinct ids in 30 lists of 10 beside a steady worker "good-a", more
 * than the table's 256 entries; then a list with only a new worker
 * "good-b". Every worker is served by the in-process worker of
 * rogue_util.h (correct batches), good-b on its own port. A table that did
 * not reuse entries would be full by then and never use good-b (the rank
 * stalls into "no live worker"). The rank must receive every step exactly
 * once, in order, byte-identical to the reference, and good-b must serve
 * the batches after the churn.
 *
 * The lists are paced by conditions, never by a clock: list k goes out
 * once the previous list's workers have opened their streams and the
 * streams of the one before have closed (counted by the rogue worker), so
 * the client never holds more than a few dozen leaving workers at once.
 *
 * usage: test_worker_churn <stoker-coordinator> <stoker-worker> [...]
 *        (the binaries are not used: the coordinator is the test itself)
 */
#include <string.h>

#include "check.h"
#include "common/clock.h"
#include "fakecoord.h"
#include "rogue_util.h"
#include "stoker/client.h"

#define ROUNDS    30
#define PER_ROUND 10
#define STEPS     60

/* Publish n workers: ids[i] at addrs[i]. */
static void publish(int n, char ids[][32], char addrs[][64]) {
  const char *ip[PER_ROUND + 1], *ap[PER_ROUND + 1];
  for (int i = 0; i < n; i++) ip[i] = ids[i], ap[i] = addrs[i];
  fakecoord_publish(n, ip, ap);
}

/* Wait (bounded: 20 s) until the rogue worker opened >= o and closed >= c
 * streams; 0 or -1. */
static int wait_streams(int o, int c) {
  for (int64_t end = stk__now_ms() + 20000; stk__now_ms() < end;) {
    if (rogue_get(&R.opened) >= o && rogue_get(&R.closed) >= c) return 0;
    stk__sleep_ms(2);
  }
  fprintf(stderr, "streams: opened %d (want %d), closed %d (want %d)\n",
          rogue_get(&R.opened), o, rogue_get(&R.closed), c);
  return -1;
}

int main(void) {
  char job_text[4096];
  uint64_t job_hash = 0;
  CHECK(rogue_tiny_job("240", "1", NULL, job_text, sizeof(job_text), &job_hash) == 0);
  fakecoord_set_job(job_text, job_hash);
  if (check_failures) CHECK_DONE();

  stk__rpc_init();
  stk__rpc_server *wa = NULL, *wb = NULL, *co = NULL;
  int pa = rogue_start(&wa), pb = rogue_start(&wb);
  int pc = -1;
  char err[512] = "";
  if (fakecoord_start(NULL, 0, &co, &pc, err, sizeof(err))) pc = -1;
  CHECK(pa > 0 && pb > 0 && pc > 0);
  if (check_failures) CHECK_DONE();

  char ids[PER_ROUND + 1][32], addrs[PER_ROUND + 1][64];
  snprintf(ids[0], sizeof(ids[0]), "good-a");
  for (int i = 0; i <= PER_ROUND; i++)
    snprintf(addrs[i], sizeof(addrs[i]), "127.0.0.1:%d", pa);
  publish(1, ids, addrs);

  stk_client *c = rogue_open_client(pc, 1, 4, 0, 0, err, sizeof(err));
  CHECK(c != NULL);
  if (!c) CHECK_DONE();
  size_t len = (size_t)stk_client_payload_bytes(c);
  unsigned char *ref = malloc(len);
  uint64_t step = 0;
  for (; step < 5; step++) CHECK(rogue_take(c, step, 1, ref, len) == 0);

  /* 300 workers come and go, PER_ROUND at a time, beside good-a. */
  int64_t t0 = stk__now_ms();
  for (int k = 0; k < ROUNDS && !check_failures; k++) {
    /* the previous list's workers have their streams; the one before's
     * are gone (good-a's stream is the +1) */
    CHECK(wait_streams(1 + PER_ROUND * k, k >= 2 ? PER_ROUND * (k - 1) : 0) == 0);
    for (int i = 0; i < PER_ROUND; i++)
      snprintf(ids[1 + i], sizeof(ids[1 + i]), "churn-%d", k * PER_ROUND + i);
    publish(1 + PER_ROUND, ids, addrs);
  }
  CHECK(wait_streams(1 + PER_ROUND * ROUNDS, PER_ROUND * (ROUNDS - 1)) == 0);
  printf("%d workers listed and unlisted in %lld ms\n", ROUNDS * PER_ROUND,
         (long long)(stk__now_ms() - t0));

  /* Only good-b from now on: entry 302 of this client's life. */
  snprintf(ids[0], sizeof(ids[0]), "good-b");
  snprintf(addrs[0], sizeof(addrs[0]), "127.0.0.1:%d", pb);
  publish(1, ids, addrs);
  /* the old workers take no new request: all but the <= 4 prefetched
   * steps come from good-b */
  for (; step < STEPS && !check_failures; step++)
    CHECK(rogue_take(c, step, 1, ref, len) == 0);
  stk_batch *b = NULL;
  if (!check_failures) CHECK(stk_client_next(c, &b) == STK_END_OF_EPOCH);
  if (!check_failures) CHECK(stk_client_next(c, &b) == STK_END_OF_DATA);

  stk_stats s;
  stk_client_stats(c, &s);
  char suffix[16];
  snprintf(suffix, sizeof(suffix), ":%d", pb);
  uint64_t by_b = 0;
  for (uint32_t i = 0; i < s.nworkers; i++) {
    size_t al = strlen(s.workers[i].address);
    if (al > strlen(suffix) &&
        !strcmp(s.workers[i].address + al - strlen(suffix), suffix))
      by_b += s.workers[i].batches;
  }
  printf(
      "steps %llu, batches by good-b %llu, entries in stats %u, alive %u, "
      "duplicates %llu, reissued %llu\n",
      (unsigned long long)step, (unsigned long long)by_b, s.nworkers, s.workers_alive,
      (unsigned long long)s.duplicates, (unsigned long long)s.reissued);
  CHECK_EQ_U64(step, STEPS);
  CHECK(by_b > 0);
  CHECK(s.nworkers <= STK_MAX_WORKER_STATS);
  stk_client_close(c);
  free(ref);
  stk__rpc_server_stop(co, 500);
  stk__rpc_server_stop(wa, 500);
  stk__rpc_server_stop(wb, 500);
  stk__rpc_shutdown();
  CHECK_DONE();
}
