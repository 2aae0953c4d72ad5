/* test_counter_width.c - the counters a long job reads never wrap: every
 * event count and byte count of the public stats structs (stk_stats,
 * stk_worker_stats) is 64 bits wide, and so are the client's own
 * counters they are copied from (client/client_internal.h: the request pool's,
 * written in requests.c, and next()'s batch count, under c->mu); at a
 * million events a second, 2^64 lasts 584,000 years. Counts bounded by a
 * table's size (workers_alive, nworkers, working_set...) are not event
 * counters and stay 32 bits. The daemons' own counters
 * (server/worker/worker.h: dropped_requests, stream_errors; the /metrics
 * *_total families) are uint64_t as well.
 *
 * Checked twice: at compile time (the widths: this file does not build
 * otherwise), and at run time, where a real in-process client
 * (stk_client_open_local) whose counters start just below 2^32 runs a
 * whole job: the batches and bytes stk_client_stats reports afterwards
 * must be past 2^32 by exactly what the job delivered, and every other
 * counter must come back as it was set (no 32-bit step between the
 * counter and the caller's struct).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "client/client_internal.h"
#include "stoker/client.h"

#define WIDE(type, field) \
  _Static_assert(sizeof(((type *)0)->field) == 8, #type "." #field " is 64 bits")

WIDE(stk_stats, batches);
WIDE(stk_stats, bytes);
WIDE(stk_stats, stall_ns);
WIDE(stk_stats, wall_ns);
WIDE(stk_stats, reissued);
WIDE(stk_stats, duplicates);
WIDE(stk_stats, crc_errors);
WIDE(stk_stats, substituted);
WIDE(stk_stats, hedges_sent);
WIDE(stk_stats, hedges_won);
WIDE(stk_stats, hedge_dropped);
WIDE(stk_worker_stats, batches);
WIDE(stk_worker_stats, bytes);
/* where they come from */
WIDE(stk__pool, bytes);
WIDE(stk__pool, reissued);
WIDE(stk__pool, duplicates);
WIDE(stk__pool, crc_errors);
WIDE(stk__pool, substituted);
WIDE(stk__pool, hedges_sent);
WIDE(stk__pool, hedges_won);
WIDE(stk__pool, hedge_dropped);
WIDE(stk__worker, batches);
WIDE(stk__worker, bytes);

/* 16 steps for rank 0: 64 samples / (4 x 2 ranks) x 2 epochs */
static const char *JOB =
    "source = synthetic\nnum_samples = 64\nheight = 8\nwidth = 8\n"
    "batch_size = 4\nworld_size = 2\nepochs = 2\nseed = 7\n";
enum { STEPS = 16 };

/* Just below 2^32, so that a job's few batches and bytes cross it. */
#define NEAR_WRAP ((uint64_t)UINT32_MAX - 3)

static void test_past_2_32(void) {
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.world_size = 2;
  cfg.rank = 0;
  stk_client *c = NULL;
  char err[512] = "";
  CHECK(stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err)) == STK_OK);
  if (!c) {
    fprintf(stderr, "open_local: %s\n", err);
    return;
  }
  /* The counters start near the wrap, whatever the builder has already
   * added: the reported figures are then NEAR_WRAP + the job's own. Each
   * other counter gets its own value to come back unchanged. */
  pthread_mutex_lock(&c->mu);
  c->api.batches += NEAR_WRAP;
  c->pool.bytes += NEAR_WRAP;
  c->pool.reissued += NEAR_WRAP + 1;
  c->pool.duplicates += NEAR_WRAP + 2;
  c->pool.crc_errors += NEAR_WRAP + 3;
  c->pool.substituted += NEAR_WRAP + 4;
  c->pool.hedges_sent += NEAR_WRAP + 5;
  c->pool.hedges_won += NEAR_WRAP + 6;
  c->pool.hedge_dropped += NEAR_WRAP + 7;
  pthread_mutex_unlock(&c->mu);

  uint64_t delivered = 0, bytes = 0;
  stk_batch *b = NULL;
  int st;
  while ((st = stk_client_next(c, &b)) != STK_END_OF_DATA) {
    if (st == STK_END_OF_EPOCH) continue;
    CHECK(st == STK_OK);
    if (st != STK_OK) break;
    size_t len = 0;
    CHECK(stk_batch_payload(b, &len) != NULL);
    delivered++;
    bytes += len;
    stk_batch_release(b);
  }
  CHECK_EQ_U64(delivered, STEPS);

  stk_stats s;
  stk_client_stats(c, &s);
  printf("after %llu batches of %llu bytes: stats.batches %llu, stats.bytes %llu\n",
         (unsigned long long)delivered,
         (unsigned long long)(delivered ? bytes / delivered : 0),
         (unsigned long long)s.batches, (unsigned long long)s.bytes);
  CHECK(s.batches > UINT32_MAX && s.bytes > UINT32_MAX);
  CHECK_EQ_U64(s.batches, NEAR_WRAP + delivered);
  /* every batch the local builder made was delivered: bytes counted once */
  CHECK_EQ_U64(s.bytes, NEAR_WRAP + bytes);
  CHECK_EQ_U64(s.reissued, NEAR_WRAP + 1);
  CHECK_EQ_U64(s.duplicates, NEAR_WRAP + 2);
  CHECK_EQ_U64(s.crc_errors, NEAR_WRAP + 3);
  CHECK_EQ_U64(s.substituted, NEAR_WRAP + 4);
  CHECK_EQ_U64(s.hedges_sent, NEAR_WRAP + 5);
  CHECK_EQ_U64(s.hedges_won, NEAR_WRAP + 6);
  CHECK_EQ_U64(s.hedge_dropped, NEAR_WRAP + 7);
  stk_client_close(c);
}

int main(void) {
  test_past_2_32();
  CHECK_DONE();
}
