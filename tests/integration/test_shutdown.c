/* test_shutdown.c - the ways a job ends, with real processes on 127.0.0.1:
 *  1. every rank calls Finish -> coordinator and both workers exit 0;
 *  2. rank 0 calls Finish with shutdown_job -> everything exits 0;
 *  3. no client touches the job (--idle-timeout-s 2) -> the coordinator
 *     exits 3 (idle) and its worker exits 0;
 *  4. the coordinator is killed -9 -> the worker (--orphan-timeout-s 2)
 *     exits 3 (orphan);
 *  5. SIGTERM to a worker with requests in flight: it sends every batch
 *     already asked for (its exit line counts them), then ends the stream
 *     UNAVAILABLE (ask elsewhere), leaves the coordinator's list and exits
 *     0. Every batch that reaches the client is byte-exact and asked for.
 *     Not asserted: that all of them reach this client. The worker may
 *     exit while the client still reads; a client that writes (a window
 *     update, a ping) to the closed socket gets a reset, and gRPC then
 *     drops what it had not handed over yet. A real client asks again
 *     elsewhere (test_worker_kill covers that).
 *
 * usage: test_shutdown <stoker-coordinator> <stoker-worker>
 */
#include <pthread.h>
#include <signal.h>

#include "daemon_util.h"

static const char *const job_args[] = {"--set", "num_samples=64", "--set", "batch_size=4",
                                       "--set", "height=16",      "--set", "width=16",
                                       "--set", "world_size=2",   NULL};

/* Touches a job (a refused Join every 50 ms) until stop, at most 120 s. */
typedef struct idle_toucher {
  int port;
  int stop;
} idle_toucher;

static void *idle_touch(void *arg) {
  idle_toucher *t = arg;
  stk__rpc_channel *c = du_channel(t->port);
  for (int i = 0; c && i < 2400 && !__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE); i++) {
    Stoker__V1__JoinResponse *jr = NULL;
    char det[256];
    du_join(c, 0, 1, STK_PROTOCOL_VERSION + 1, 0, &jr, det, sizeof(det));
    if (jr) protobuf_c_message_free_unpacked(&jr->base, NULL);
    stk__sleep_ms(50);
  }
  stk__rpc_channel_close(c);
  return NULL;
}

static void fail_dump(stk_proc *ps, int n) {
  for (int i = 0; i < n; i++) proc_dump_log(&ps[i]);
  proc_keep_tmp();
}

static void all_ranks_finish(void) {
  stk_proc p[3];
  int before = check_failures;
  int cport = du_start_coordinator(&p[0], "finish-coord", job_args);
  CHECK(cport > 0);
  if (cport <= 0) return;
  const char *wargs[] = {"--threads", "1", NULL};
  CHECK(du_start_worker(&p[1], "finish-w1", cport, wargs) > 0);
  CHECK(du_start_worker(&p[2], "finish-w2", cport, wargs) > 0);
  stk__rpc_channel *c = du_channel(cport);
  CHECK(du_wait_workers(c, 2, 10000) == 0);
  char det[256];
  uint32_t nf = 0;
  /* Only rank 0 may end the job; a bad rank is refused. */
  CHECK(du_finish(c, 1, 1, &nf, det, sizeof(det)) == GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(du_finish(c, 7, 0, &nf, det, sizeof(det)) == GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(du_finish(c, 0, 0, &nf, det, sizeof(det)) == GRPC_STATUS_OK);
  CHECK_EQ_U64(nf, 1);
  /* The job goes on with one rank left: the coordinator answers, running,
   * with rank 0 (only) finished. */
  Stoker__V1__StatusResponse *st = du_status(c);
  CHECK(st && st->n_finished_ranks == 1 && strcmp(st->state, "done") != 0);
  if (st) protobuf_c_message_free_unpacked(&st->base, NULL);
  CHECK(proc_wait(&p[0], 0) == -1);
  CHECK(du_finish(c, 1, 0, &nf, det, sizeof(det)) == GRPC_STATUS_OK);
  CHECK_EQ_U64(nf, 2);
  stk__rpc_channel_close(c);
  for (int i = 0; i < 3; i++) {
    int code = proc_wait(&p[i], 10000);
    if (code != 0) fprintf(stderr, "%s: exit %d\n", p[i].name, code);
    CHECK(code == 0);
  }
  if (check_failures != before) fail_dump(p, 3);
}

static void rank0_ends_job(void) {
  stk_proc p[2];
  int before = check_failures;
  int cport = du_start_coordinator(&p[0], "rank0-coord", job_args);
  CHECK(cport > 0);
  if (cport <= 0) return;
  const char *wargs[] = {"--threads", "1", NULL};
  CHECK(du_start_worker(&p[1], "rank0-w", cport, wargs) > 0);
  stk__rpc_channel *c = du_channel(cport);
  CHECK(du_wait_workers(c, 1, 10000) == 0);
  char det[256];
  uint32_t nf = 0;
  CHECK(du_finish(c, 0, 1, &nf, det, sizeof(det)) == GRPC_STATUS_OK);
  stk__rpc_channel_close(c);
  for (int i = 0; i < 2; i++) CHECK(proc_wait(&p[i], 10000) == 0);
  if (check_failures != before) fail_dump(p, 2);
}

static void idle_timeout(void) {
  stk_proc p[2];
  int before = check_failures;
  const char *more[] = {"--idle-timeout-s", "2", NULL};
  int cport = du_start_coordinator2(&p[0], "idle-coord", job_args, more);
  CHECK(cport > 0);
  if (cport <= 0) return;
  /* Until the worker has registered, keep the job touched (a Join, even a
   * refused one, counts; Status does not), from a thread of its own that
   * starts before the worker does, so the idle clock cannot run out during
   * a slow worker start; from the last touch it must. */
  idle_toucher t = {.port = cport};
  pthread_t th;
  int have_thread = pthread_create(&th, NULL, idle_touch, &t) == 0;
  CHECK(have_thread);
  const char *wargs[] = {"--threads", "1", NULL};
  CHECK(du_start_worker(&p[1], "idle-w", cport, wargs) > 0);
  stk__rpc_channel *c = du_channel(cport);
  int registered = du_wait_workers(c, 1, 60000) == 0; /* bounded: TSan is slow */
  __atomic_store_n(&t.stop, 1, __ATOMIC_RELEASE);
  if (have_thread) pthread_join(th, NULL);
  CHECK(registered);
  stk__rpc_channel_close(c);
  CHECK(proc_wait(&p[0], 10000) == 3); /* idle */
  CHECK(proc_wait(&p[1], 10000) == 0); /* told to shut down */
  if (check_failures != before) fail_dump(p, 2);
}

static void orphan(void) {
  stk_proc p[2];
  int before = check_failures;
  int cport = du_start_coordinator(&p[0], "orphan-coord", job_args);
  CHECK(cport > 0);
  if (cport <= 0) return;
  const char *wargs[] = {"--threads", "1", "--orphan-timeout-s", "2", NULL};
  CHECK(du_start_worker(&p[1], "orphan-w", cport, wargs) > 0);
  stk__rpc_channel *c = du_channel(cport);
  CHECK(du_wait_workers(c, 1, 10000) == 0);
  stk__rpc_channel_close(c);
  proc_signal(&p[0], SIGKILL);
  CHECK(proc_wait(&p[0], 5000) == 128 + SIGKILL);
  int code = proc_wait(&p[1], 10000);
  CHECK(code == 3);
  if (check_failures != before) fail_dump(p, 2);
}

static void worker_drain(void) {
  stk_proc p[2];
  int before = check_failures;
  const char *more[] = {"--set", "synthetic_cost_us=5000",
                        NULL}; /* 20 ms per batch on one thread */
  int cport = du_start_coordinator2(&p[0], "drain-coord", job_args, more);
  CHECK(cport > 0);
  if (cport <= 0) return;
  const char *wargs[] = {"--threads", "1", NULL};
  int wport = du_start_worker(&p[1], "drain-w", cport, wargs);
  CHECK(wport > 0);
  stk__rpc_channel *c = du_channel(cport), *w = du_channel(wport);
  CHECK(du_wait_workers(c, 1, 10000) == 0);
  char det[256];
  Stoker__V1__JoinResponse *jr = NULL;
  CHECK(du_join(c, 1, 2, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det)) == 0);
  if (!jr) return;
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  CHECK(stk_job_spec_parse(&spec, jr->job->canonical, NULL, 0) == STK_OK);
  uint64_t hash = jr->job->hash;
  protobuf_c_message_free_unpacked(&jr->base, NULL);
  stk__rpc_stream *s = NULL;
  CHECK(stk__rpc_stream_open(w, "/stoker.v1.Worker/Stream", 20000, &s) == 0);
  for (uint64_t k = 0; k < 8; k++) CHECK(du_send_request(s, hash, 0, 1, k) == 0);
  /* The first batch is being built when the signal comes. */
  CHECK(du_recv_batch_checked(s, &spec, 0, 1, 0) == 0);
  proc_signal(&p[1], SIGTERM);
  uint32_t seen = 1;
  int k = 1;
  for (; k < 8; k++) {
    uint64_t got = 0;
    int r = du_recv_batch_or_end(s, &spec, 0, 1, &got);
    CHECK(r >= 0);
    if (r) break; /* the stream ended early (see the top comment) */
    CHECK(got < 8 && !(seen & (1u << got))); /* asked, and only once */
    if (got < 8) seen |= 1u << got;
  }
  if (k == 8) {
    CHECK_EQ_U64(seen, 0xff);
    /* Asked after the drain began: not served, the stream ends
     * UNAVAILABLE. */
    du_send_request(s, hash, 0, 1, 0);
  } else {
    printf("  the worker exited before the client read %d of the 7 batches\n", 8 - k);
  }
  CHECK(du_stream_end(s, det, sizeof(det)) == GRPC_STATUS_UNAVAILABLE);
  stk__rpc_stream_destroy(s);
  CHECK(proc_wait(&p[1], 10000) == 0);
  /* Built and sent, every one: what the worker guarantees. */
  stk_batch_layout L;
  CHECK(stk_batch_layout_of(&spec, &L) == 0);
  char line[128];
  snprintf(line, sizeof(line), "8 batches built, %llu bytes sent",
           (unsigned long long)(8 * L.total_bytes));
  CHECK(proc_log_count(&p[1], line) == 1);
  for (int i = 0; i < 400; i++) { /* bounded: 20 s */
    Stoker__V1__StatusResponse *st = du_status(c);
    size_t nw = st ? st->n_workers : 99;
    if (st) protobuf_c_message_free_unpacked(&st->base, NULL);
    if (!nw) break;
    stk__sleep_ms(50);
  }
  Stoker__V1__StatusResponse *st = du_status(c);
  CHECK(st && st->n_workers == 0);
  if (st) protobuf_c_message_free_unpacked(&st->base, NULL);
  proc_signal(&p[0], SIGTERM);
  CHECK(proc_wait(&p[0], 10000) == 0);
  stk__rpc_channel_close(c);
  stk__rpc_channel_close(w);
  if (check_failures != before) fail_dump(p, 2);
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  all_ranks_finish();
  rank0_ends_job();
  idle_timeout();
  orphan();
  worker_drain();
  stk__rpc_shutdown();
  CHECK_DONE();
}
