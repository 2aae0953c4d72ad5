/* test_fairness.c - the worker's builders serve streams round-robin: with
 * one builder thread, a stream that queued 60 requests does not make a
 * second stream's single request wait behind them. Also checks that the
 * busy stream still gets all 60 batches, whole and byte-exact.
 *
 * What is asserted is an order, never a time: the worker runs with
 * --log-level debug, which logs under the scheduler's lock when a request
 * is queued and when a builder starts one, so its log is the build order.
 * Between the quiet request being queued and its build starting, at most
 * one busy batch may start (FIFO would start every busy batch still
 * queued; 50+ here).
 *
 * usage: test_fairness <stoker-coordinator> <stoker-worker>
 */
#include <signal.h>
#include <string.h>

#include "daemon_util.h"

#define STREAM "/stoker.v1.Worker/Stream"

/* From the worker's debug log: how many rank-0 (busy) builds started
 * between "queued ... rank 1 step 5" and "building ... rank 1 step 5", and
 * how many busy requests were queued but not started when quiet arrived.
 * 0, or -1 when either line is missing. */
static int build_order(const stk_proc *w, int *between, int *queued_busy) {
  char *log = proc_read_log(w);
  if (!log) return -1;
  int state = 0, busy_queued = 0, busy_started = 0, rc = -1;
  for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
    int quiet = strstr(line, " rank 1 step 5") != NULL;
    int busy = strstr(line, " rank 0 step ") != NULL;
    if (strstr(line, ": queued epoch ")) {
      if (quiet && state == 0) {
        state = 1, *queued_busy = busy_queued - busy_started, *between = 0;
      } else if (busy) busy_queued++;
    } else if (strstr(line, ": building epoch ")) {
      if (quiet && state == 1) {
        state = 2, rc = 0;
        break;
      }
      if (busy) {
        busy_started++;
        if (state == 1) (*between)++;
      }
    }
  }
  free(log);
  return rc;
}

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
  const char *wargs[] = {"--threads", "1", "--log-level", "debug", NULL};
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
  for (uint64_t k = 0; k < 60; k++) CHECK(du_send_request(busy, hash, 0, 0, k) == 0);
  /* The busy stream's first batch is back: its queue is in place (a
   * condition, not a sleep). */
  uint64_t first = 0;
  CHECK(du_recv_batch_any(busy, &spec, 0, 0, 0, &first) == 0);
  CHECK(du_send_request(quiet, hash, 0, 1, 5) == 0);
  CHECK(du_recv_batch_checked(quiet, &spec, 0, 1, 5) == 0);
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
  /* Fair: in the worker's build order, the quiet request waited for at
   * most the one busy batch a builder may pick in the same turn. */
  int between = -1, queued_busy = 0;
  CHECK(build_order(&p[1], &between, &queued_busy) == 0);
  fprintf(stderr,
          "busy batches started between the quiet request's arrival and its build: %d "
          "(busy requests still queued then: %d; FIFO would start them all)\n",
          between, queued_busy);
  CHECK(between >= 0 && between <= 1);
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
