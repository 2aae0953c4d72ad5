/* test_worker_drop.c - one bad worker is dropped by the client, never fatal
 * to it: a real coordinator, a rogue worker in this process (rogue_util.h)
 * registered with it, then a real worker, and three libstoker ranks.
 * The rogue misbehaves per rank:
 *   rank 0: every batch with a wrong crc32c. The client drops the rogue
 *           after 3 in a row (crc_errors == 3), asks nothing more of it;
 *   rank 1: refuses the stream with INVALID_ARGUMENT;
 *   rank 2: refuses it with FAILED_PRECONDITION.
 * First, with the rogue as the only worker, a rank-2 client with a short
 * join_timeout_ms ends with STK_MISMATCH and an error naming the worker
 * and its refusal (no worker left by the deadline). Then the three ranks
 * run with the rogue alone until each has met its misbehaviour (counted by
 * the rogue: a condition, not a clock), the real worker starts, and every
 * rank receives its whole epoch exactly once, in order, byte-identical to
 * the reference, with workers_dropped == 1 and no second stream to the
 * rogue although the coordinator keeps listing it. The coordinator and the
 * real worker exit 0 at the end.
 *
 * usage: test_worker_drop <stoker-coordinator> <stoker-worker>
 */
#include "common/clock.h"
#include "daemon_util.h"
#include "e2e_util.h"
#include "rogue_util.h"

/* Wait (bounded) until *p >= want; 0 or -1. */
static int wait_count(const int *p, int want, int timeout_ms) {
  for (int64_t end = stk__now_ms() + timeout_ms; stk__now_ms() < end;) {
    if (rogue_get(p) >= want) return 0;
    stk__sleep_ms(5);
  }
  return rogue_get(p) >= want ? 0 : -1;
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  const char *job[] = {"--set",     "num_samples=720", /* 30 steps per rank */
                       "--set",     "batch_size=8",    "--set",
                       "height=32", "--set",           "width=32",
                       "--set",     "world_size=3",    "--set",
                       "epochs=1",  "--set",           "synthetic_cost_us=200",
                       "--set",     "seed=11",         "--heartbeat-misses",
                       "1000", /* the rogue sends none */
                       NULL};
  stk_proc p[2];
  memset(p, 0, sizeof(p));
  int port = du_start_coordinator(&p[0], "coordinator", job);
  CHECK(port > 0);
  if (port <= 0) CHECK_DONE();
  R.mode[0] = ROGUE_BAD_CRC;
  R.mode[1] = ROGUE_INVALID_ARGUMENT;
  R.mode[2] = ROGUE_FAILED_PRECONDITION;
  stk__rpc_server *srv = NULL;
  int rport = rogue_start(&srv);
  CHECK(rport > 0);
  stk__rpc_channel *ch = du_channel(port);
  stk__rpc_stream *session = NULL;
  CHECK(rport > 0 && rogue_register(ch, "rogue-1", rport, 30000, &session) == 0);
  CHECK(du_wait_workers(ch, 1, 30000) == 0);
  if (check_failures) {
    proc_dump_log(&p[0]);
    proc_keep_tmp();
    stk__rpc_stream_destroy(session);
    stk__rpc_channel_close(ch);
    stk__rpc_server_stop(srv, 500);
    CHECK_DONE();
  }

  /* 1. The rogue alone: a client whose only worker refuses it fails at
   *    its deadline, saying why. */
  char addr[64], err[512] = "";
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = addr;
  cfg.rank = 2;
  cfg.world_size = 3;
  cfg.join_timeout_ms = 4000;
  stk_client *c = NULL;
  CHECK(stk_client_open(&cfg, &c, err, sizeof(err)) == STK_OK);
  if (c) {
    stk_batch *b = NULL;
    int64_t t0 = stk__now_ms();
    int st = stk_client_next(c, &b);
    int64_t took = stk__now_ms() - t0;
    printf("sole rogue worker: next -> %s after %lld ms: %s\n", stk_strerror(st),
           (long long)took, stk_client_error(c));
    CHECK(st == STK_MISMATCH);
    CHECK(strstr(stk_client_error(c), "dropped by this client") != NULL);
    CHECK(strstr(stk_client_error(c), "FAILED_PRECONDITION") != NULL);
    CHECK(strstr(stk_client_error(c), "rogue: another job") != NULL);
    stk_stats s;
    stk_client_stats(c, &s);
    CHECK_EQ_U64(s.workers_dropped, 1);
    CHECK(b == NULL);
    stk_client_close(c);
  }
  CHECK_EQ_U64(rogue_get(&R.refused[2]), 1);

  /* 2. Three ranks against the rogue alone, until each met its fault. */
  rank_run r[3];
  pthread_t t[3];
  for (uint32_t i = 0; i < 3; i++) {
    rank_init(&r[i]);
    r[i].port = port, r[i].rank = i, r[i].world = 3, r[i].finish = 1;
    r[i].prefetch = 4;
    pthread_create(&t[i], NULL, rank_main, &r[i]);
  }
  CHECK(wait_count(&R.bad_sent[0], 3, 30000) == 0);
  CHECK(wait_count(&R.refused[1], 1, 30000) == 0);
  CHECK(wait_count(&R.refused[2], 2, 30000) == 0);

  /* 3. A real worker: every rank completes through it. */
  const char *wargs[] = {"--threads", "2", NULL};
  int wport = du_start_worker(&p[1], "worker", port, wargs);
  CHECK(wport > 0);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 3; i++) {
    if (r[i].error[0]) fprintf(stderr, "rank %d: %s\n", i, r[i].error);
    CHECK(r[i].final_status == STK_END_OF_DATA);
    CHECK_EQ_U64(r[i].delivered, 30);
    CHECK_EQ_U64(r[i].mismatches, 0);
    CHECK_EQ_U64(r[i].order_errors, 0);
    CHECK_EQ_U64(r[i].stats.workers_dropped, 1);
    printf(
        "rank %d: %llu batches, crc_errors %llu, reissued %llu, workers_dropped %u; "
        "rogue: %d stream(s), %d refused, %d bad batches sent\n",
        i, (unsigned long long)r[i].delivered, (unsigned long long)r[i].stats.crc_errors,
        (unsigned long long)r[i].stats.reissued, r[i].stats.workers_dropped,
        rogue_get(&R.streams[i]), rogue_get(&R.refused[i]), rogue_get(&R.bad_sent[i]));
  }
  /* exactly the bound: the third bad batch in a row drops the rogue */
  CHECK_EQ_U64(r[0].stats.crc_errors, 3);
  CHECK_EQ_U64(r[1].stats.crc_errors, 0);
  /* dropped means dropped: the coordinator still lists the rogue, yet no
   * client opened a second stream to it */
  CHECK_EQ_U64(rogue_get(&R.streams[0]), 1);
  CHECK_EQ_U64(rogue_get(&R.refused[1]), 1);
  CHECK_EQ_U64(rogue_get(&R.refused[2]), 2); /* step 1's client and rank 2 */
  CHECK_EQ_U64(rogue_get(&R.sent[0]) + rogue_get(&R.sent[1]) + rogue_get(&R.sent[2]), 0);

  /* Every rank finished: the coordinator ends the job. The rogue leaves
   * (its session ends), and both daemons exit 0. */
  stk__rpc_stream_destroy(session);
  int codes[2] = {proc_wait(&p[0], 20000), proc_wait(&p[1], 20000)};
  for (int i = 0; i < 2; i++) {
    if (codes[i] != 0) fprintf(stderr, "%s: exit %d\n", p[i].name, codes[i]);
    CHECK(codes[i] == 0);
  }
  stk__rpc_channel_close(ch);
  stk__rpc_server_stop(srv, 500);
  for (int i = 0; i < 3; i++) pthread_mutex_destroy(&r[i].mu);
  if (check_failures) {
    for (int i = 0; i < 2; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
  CHECK_DONE();
}
