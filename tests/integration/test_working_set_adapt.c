/* test_working_set_adapt.c - the working set adapts: rank 0 of a job of
 * world size 4 (a rogue coordinator in this process, fakecoord.h; only
 * rank 0 runs), 8 workers listed (served by the in-process worker of
 * rogue_util.h, which builds correct batches slowly: synthetic_cost_us),
 * working_set 1 and working_set_max 3:
 *   1. at open the set is the top worker by HRW score plus the workers
 *      rank 0 covers (computed here with client/wset.c);
 *   2. consuming as fast as it can, the rank is input-bound with every
 *      member busy: the set grows one worker at a time to the top 3 plus
 *      coverage;
 *   3. once it stops asking for batches (no stall), the set shrinks back
 *      to the top 1 plus coverage;
 *   4. every batch taken comes in order, and every 16th is checked against
 *      the reference (byte-identical).
 * Waits are on the client's own counters, bounded; the grow and shrink
 * rates (1/s, one per 10 s of calm) only bound how long they take.
 *
 * usage: test_working_set_adapt (no binaries needed)
 */
#include <string.h>

#include "check.h"
#include "client/wset.h"
#include "common/clock.h"
#include "fakecoord.h"
#include "rogue_util.h"
#include "stoker/client.h"

#define NW    8
#define WORLD 4

/* The expected set size of rank 0 with k workers of ids[]. */
static uint32_t expected(uint64_t hash, const char *const *ids, uint32_t k) {
  double score[NW] = {0};
  uint32_t top[NW];
  int in[NW];
  for (int i = 0; i < NW; i++) {
    uint64_t h = stk__wset_id_hash(ids[i]);
    score[i] = stk__wset_score(hash, 0, h, 1);
    in[i] = stk__wset_covers(hash, 0, WORLD, h);
  }
  uint32_t t = stk__wset_top(score, NW, k, top);
  for (uint32_t j = 0; j < t; j++) in[top[j]] = 1;
  uint32_t n = 0;
  for (int i = 0; i < NW; i++) n += (uint32_t)in[i];
  return n;
}

int main(void) {
  char job_text[4096];
  uint64_t job_hash = 0;
  CHECK(rogue_tiny_job("64000", "4", "2000", job_text, sizeof(job_text), &job_hash) == 0);
  fakecoord_set_job(job_text, job_hash);
  if (check_failures) CHECK_DONE();

  stk__rpc_init();
  stk__rpc_server *wa = NULL, *co = NULL;
  int pa = rogue_start(&wa), pc = -1;
  char err[512] = "";
  if (fakecoord_start(NULL, 0, &co, &pc, err, sizeof(err))) pc = -1;
  CHECK(pa > 0 && pc > 0);
  if (check_failures) CHECK_DONE();
  char idv[NW][32], addr[64];
  const char *ids[NW], *addrs[NW];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", pa);
  for (int i = 0; i < NW; i++) {
    snprintf(idv[i], sizeof(idv[i]), "adapt-%d", i);
    ids[i] = idv[i], addrs[i] = addr;
  }
  fakecoord_publish(NW, ids, addrs);
  uint32_t small = expected(job_hash, ids, 1), big = expected(job_hash, ids, 3);
  printf("expected set: %u workers at k=1, %u at k=3\n", small, big);
  CHECK(big > small); /* the job hash and ids leave room to grow */

  stk_client *c = rogue_open_client(pc, WORLD, 8, 1, 3, err, sizeof(err));
  CHECK(c != NULL);
  if (!c) CHECK_DONE();
  stk_stats s;
  stk_client_stats(c, &s);
  CHECK_EQ_U64(s.working_set, small);
  size_t len = (size_t)stk_client_payload_bytes(c);
  /* the reference costs what the worker's build does: checked for every
   * 16th step only, so this loop stays faster than its input */
  unsigned char *ref = malloc(len);

  /* 2. input-bound: grows to the top 3 plus coverage (bounded: 30 s) */
  uint64_t step = 0;
  int64_t t0 = stk__now_ms();
  uint32_t seen_max = s.working_set;
  while (!check_failures && stk__now_ms() - t0 < 30000) {
    CHECK(rogue_take(c, step, 16, ref, len) == 0);
    step++;
    stk_client_stats(c, &s);
    if (s.working_set > seen_max) {
      printf("after %llu steps (%lld ms): working set %u, stall %.1f%%\n",
             (unsigned long long)step, (long long)(stk__now_ms() - t0), s.working_set,
             100 * s.stall_fraction);
      seen_max = s.working_set;
    }
    if (s.working_set == big) break;
  }
  CHECK_EQ_U64(s.working_set, big);
  CHECK(s.working_set <= big);

  /* 3. calm (no next at all): shrinks back (bounded: 60 s) */
  t0 = stk__now_ms();
  while (!check_failures && stk__now_ms() - t0 < 60000) {
    stk_client_stats(c, &s);
    if (s.working_set == small) break;
    stk__sleep_ms(20);
  }
  printf("shrunk to %u in %lld ms\n", s.working_set, (long long)(stk__now_ms() - t0));
  CHECK_EQ_U64(s.working_set, small);
  /* still delivering after the shrink */
  for (int i = 0; i < 10 && !check_failures; i++, step++)
    CHECK(rogue_take(c, step, 16, ref, len) == 0);
  printf("steps %llu, reissued %llu, duplicates %llu\n", (unsigned long long)step,
         (unsigned long long)s.reissued, (unsigned long long)s.duplicates);

  stk_client_close(c);
  free(ref);
  stk__rpc_server_stop(co, 500);
  stk__rpc_server_stop(wa, 500);
  stk__rpc_shutdown();
  CHECK_DONE();
}
