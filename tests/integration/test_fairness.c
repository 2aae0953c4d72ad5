/* test_fairness.c - the worker's builders serve streams round-robin: with
 * one builder thread, a stream that queued 60 requests does not make a
 * second stream's single request wait behind them. Also checks that the
 * busy stream still gets all 60 batches, whole and byte-exact.
 *
 * usage: test_fairness <stoker-coordinator> <stoker-worker>
 */
#include <signal.h>

#include "common/clock.h"
#include "daemon_util.h"

#define STREAM "/stoker.v1.Worker/Stream"

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  stk_proc p[2];
  /* 4 samples x 5 ms = 20 ms per batch: 60 batches take 1.2 s in FIFO. */
  const char *cargs[] = {"--set", "num_samples=512", "--set", "batch_size=4",
                         "--set", "height=16",       "--set", "width=16",
                         "--set", "world_size=2",    "--set", "synthetic_cost_us=5000",
                         NULL};
  int cport = du_start_coordinator(&p[0], "fair-coord", cargs);
  CHECK(cport > 0);
  if (cport <= 0) return 1;
  const char *wargs[] = {"--threads", "1", NULL};
  int wport = du_start_worker(&p[1], "fair-w", cport, wargs);
  CHECK(wport > 0);
  stk__rpc_channel *c = du_channel(cport), *w = du_channel(wport);
  CHECK(du_wait_workers(c, 1, 10000) == 0);
  char det[256];
  Stoker__V1__JoinResponse *jr = NULL;
  CHECK(du_join(c, 0, 2, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det)) == 0);
  if (!jr) return 1;
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  CHECK(stk_job_spec_parse(&spec, jr->job->canonical, NULL, 0) == STK_OK);
  uint64_t hash = jr->job->hash;
  protobuf_c_message_free_unpacked(&jr->base, NULL);

  stk__rpc_stream *busy = NULL, *quiet = NULL;
  CHECK(stk__rpc_stream_open(w, STREAM, 30000, &busy) == 0);
  CHECK(stk__rpc_stream_open(w, STREAM, 30000, &quiet) == 0);
  int64_t t_busy = stk__now_ms();
  for (uint64_t k = 0; k < 60; k++) CHECK(du_send_request(busy, hash, 0, 0, k) == 0);
  /* The busy stream's first batch is back: its queue is in place (a
   * condition, not a sleep). */
  uint64_t first = 0;
  CHECK(du_recv_batch_any(busy, &spec, 0, 0, 0, &first) == 0);
  int64_t t0 = stk__now_ms();
  CHECK(du_send_request(quiet, hash, 0, 1, 5) == 0);
  CHECK(du_recv_batch_checked(quiet, &spec, 0, 1, 5) == 0);
  int64_t waited = stk__now_ms() - t0;
  stk__rpc_stream_close_send(quiet);
  CHECK(du_stream_end(quiet, det, sizeof(det)) == GRPC_STATUS_OK);
  stk__rpc_stream_destroy(quiet);

  uint64_t seen[1] = {first < 64 ? 1ull << first : 0};
  for (int k = 1; k < 60; k++) {
    uint64_t got = 0;
    CHECK(du_recv_batch_any(busy, &spec, 0, 0, 0, &got) == 0);
    if (got < 64) seen[0] |= 1ull << got;
  }
  CHECK(seen[0] == (1ull << 60) - 1);
  /* Fair: the quiet stream waited for at most a few busy batches, not for
   * the ~58 queued ahead of it (FIFO). The batch time is measured in this
   * run (61 batches built by one builder), so a slow or loaded machine
   * scales both sides alike. */
  double per_batch = (double)(stk__now_ms() - t_busy) / 61.0;
  fprintf(stderr,
          "quiet stream's batch came after %lld ms = %.1f batch times (FIFO ~58)\n",
          (long long)waited, waited / per_batch);
  CHECK(waited < 20 * per_batch);
  stk__rpc_stream_close_send(busy);
  CHECK(du_stream_end(busy, det, sizeof(det)) == GRPC_STATUS_OK);
  stk__rpc_stream_destroy(busy);

  proc_signal(&p[0], SIGTERM);
  for (int i = 0; i < 2; i++) CHECK(proc_wait(&p[i], 10000) == 0);
  stk__rpc_channel_close(c);
  stk__rpc_channel_close(w);
  if (check_failures) {
    for (int i = 0; i < 2; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
  stk__rpc_shutdown();
  CHECK_DONE();
}
