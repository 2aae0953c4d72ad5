/* test_client_deltas.c - libstoker applies worker-list deltas: a rogue
 * coordinator in this process (fakecoord.h) sends WorkerList deltas to the
 * client's watch (which says takes_deltas), and in-process workers
 * (rogue_util.h, correct batches) serve the rank:
 *   1. the join's whole list has good-a; a delta adds good-b: the client
 *      lists 2 workers;
 *   2. a delta removes good-a: the client lists 1, and good-b serves the
 *      rest of the epoch;
 *   3. a delta whose base_version is not the client's list version: the
 *      client watches again with known_version 0 and applies the whole list
 *      it gets (good-b and good-c).
 * Every step arrives exactly once, in order, byte-identical to the
 * reference. Waits are on conditions (bounded), never on a clock.
 *
 * usage: test_client_deltas (no binaries needed)
 */
#include <string.h>

#include "check.h"
#include "common/clock.h"
#include "fakecoord.h"
#include "rogue_util.h"
#include "stoker/client.h"

#define STEPS 60

/* Wait (bounded: 20 s) until the client lists n workers; 0 or -1. */
static int wait_listed(stk_client *c, uint32_t n) {
  stk_stats s;
  for (int64_t end = stk__now_ms() + 20000; stk__now_ms() < end;) {
    stk_client_stats(c, &s);
    if (s.workers_listed == n) return 0;
    stk__sleep_ms(2);
  }
  fprintf(stderr, "client lists %u workers, want %u\n", s.workers_listed, n);
  return -1;
}

/* Wait (bounded: 20 s) until the fakecoord saw more than `deltas` watch
 * requests with takes_deltas and more than `whole` asking for a whole list
 * (-1: do not care); 0 or -1. */
static int wait_watches(int deltas, int whole) {
  int d = 0, w = 0;
  for (int64_t end = stk__now_ms() + 20000; stk__now_ms() < end;) {
    fakecoord_watch_counts(&d, &w);
    if (d > deltas && (whole < 0 || w > whole)) return 0;
    stk__sleep_ms(2);
  }
  fprintf(stderr, "watches with takes_deltas %d, whole lists asked %d\n", d, w);
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
  char addr_a[64], addr_b[64];
  snprintf(addr_a, sizeof(addr_a), "127.0.0.1:%d", pa);
  snprintf(addr_b, sizeof(addr_b), "127.0.0.1:%d", pb);
  const char *ida[] = {"good-a"}, *aa[] = {addr_a};
  fakecoord_publish(1, ida, aa);

  stk_client *c = rogue_open_client(pc, 1, 4, 0, 0, err, sizeof(err));
  CHECK(c != NULL);
  if (!c) CHECK_DONE();
  size_t len = (size_t)stk_client_payload_bytes(c);
  unsigned char *ref = malloc(len);
  uint64_t step = 0;
  for (; step < 5; step++) CHECK(rogue_take(c, step, 1, ref, len) == 0);

  /* 1. good-b added by a delta (once the watch said takes_deltas) */
  CHECK(wait_watches(0, -1) == 0);
  int d0 = 0, w0 = 0;
  fakecoord_watch_counts(&d0, &w0);
  const char *idb[] = {"good-b"}, *ab[] = {addr_b};
  fakecoord_delta(1, idb, ab, 0, NULL, 0);
  CHECK(wait_listed(c, 2) == 0);
  for (; step < 10; step++) CHECK(rogue_take(c, step, 1, ref, len) == 0);

  /* 2. good-a removed by a delta: good-b serves the rest */
  fakecoord_delta(0, NULL, NULL, 1, ida, 0);
  CHECK(wait_listed(c, 1) == 0);
  stk_stats s1;
  stk_client_stats(c, &s1);
  for (; step < 30; step++) CHECK(rogue_take(c, step, 1, ref, len) == 0);

  /* 3. a delta that does not fit: the client asks for the whole list */
  const char *idc[] = {"good-c"}, *ac[] = {addr_a};
  int d1 = 0, w1 = 0;
  fakecoord_watch_counts(&d1, &w1);
  CHECK(d1 == d0 && w1 == w0); /* the deltas fitted: no new watch */
  fakecoord_delta(1, idc, ac, 0, NULL, 5);
  CHECK(wait_watches(d1, w1) == 0);
  CHECK(wait_listed(c, 2) == 0);
  for (; step < STEPS && !check_failures; step++)
    CHECK(rogue_take(c, step, 1, ref, len) == 0);
  stk_batch *b = NULL;
  if (!check_failures) CHECK(stk_client_next(c, &b) == STK_END_OF_EPOCH);
  if (!check_failures) CHECK(stk_client_next(c, &b) == STK_END_OF_DATA);

  stk_stats s;
  stk_client_stats(c, &s);
  uint64_t by_b = 0;
  char suffix[16];
  snprintf(suffix, sizeof(suffix), ":%d", pb);
  for (uint32_t i = 0; i < s.nworkers; i++) {
    size_t al = strlen(s.workers[i].address);
    if (al > strlen(suffix) &&
        !strcmp(s.workers[i].address + al - strlen(suffix), suffix))
      by_b += s.workers[i].batches;
  }
  int d2 = 0, w2 = 0;
  fakecoord_watch_counts(&d2, &w2);
  printf(
      "steps %llu, batches by good-b %llu, listed %u, working set %u, watches %d "
      "(whole lists asked %d)\n",
      (unsigned long long)step, (unsigned long long)by_b, s.workers_listed, s.working_set,
      d2, w2);
  CHECK_EQ_U64(step, STEPS);
  CHECK(by_b > 0);
  CHECK_EQ_U64(s.working_set, 2);
  stk_client_close(c);
  free(ref);
  stk__rpc_server_stop(co, 500);
  stk__rpc_server_stop(wa, 500);
  stk__rpc_server_stop(wb, 500);
  stk__rpc_shutdown();
  CHECK_DONE();
}
