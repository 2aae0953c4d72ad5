/* test_failover.c - failure rules of the daemons, real processes on
 * 127.0.0.1:
 *  1. a worker that stops heartbeating (SIGSTOP) is dropped from the list
 *     and watchers get a new WorkerList (bumped version); after SIGCONT it
 *     re-registers and watchers see it again;
 *  2. the coordinator is killed -9 and restarted on the same port: the
 *     worker re-registers and serves the restarted job's clients;
 *  3. an open WatchWorkers stream keeps an idle job alive; once it closes
 *     the idle timeout ends the job;
 *  4. with --token, calls without it are UNAUTHENTICATED, a worker with a
 *     wrong one exits 4, and a worker with it registers and serves.
 *
 * usage: test_failover <stoker-coordinator> <stoker-worker>
 */
#include <signal.h>

#include "daemon_util.h"

static const char *const job_args[] = {"--set", "num_samples=64", "--set", "batch_size=4",
                                       "--set", "height=16",      "--set", "width=16",
                                       "--set", "world_size=1",   NULL};

static stk__rpc_stream *watch_open(stk__rpc_channel *c, uint64_t known) {
  stk__rpc_stream *s = NULL;
  if (stk__rpc_stream_open(c, "/stoker.v1.Coordinator/WatchWorkers", 0, &s)) return NULL;
  Stoker__V1__WatchRequest q = STOKER__V1__WATCH_REQUEST__INIT;
  q.rank = 0;
  q.known_version = known;
  stk__rpc_stream_send_msg(s, &q.base);
  stk__rpc_stream_close_send(s);
  return s;
}

/* Next list from a watch within timeout_ms; caller frees. */
static Stoker__V1__WorkerList *watch_next(stk__rpc_stream *s, int timeout_ms) {
  grpc_byte_buffer *bb = NULL;
  if (stk__rpc_stream_recv(s, &bb, timeout_ms) != 1) return NULL;
  ProtobufCMessage *m =
      stk__rpc_unpack(&stoker__v1__worker_list__descriptor, bb, 1 << 20);
  grpc_byte_buffer_destroy(bb);
  return (Stoker__V1__WorkerList *)m;
}

static void heartbeat_lapse(void) {
  stk_proc p[2];
  int before = check_failures;
  const char *more[] = {"--heartbeat-interval-ms", "500", "--heartbeat-lapse-s", "2",
                        NULL};
  /* 3 misses = 1.5 s: suspect (still listed); a lapse of 2 s drops it. A
   * live worker under CPU load is not dropped by chance. */
  int cport = du_start_coordinator2(&p[0], "lapse-coord", job_args, more);
  CHECK(cport > 0);
  if (cport <= 0) return;
  const char *wargs[] = {"--threads", "1", NULL};
  CHECK(du_start_worker(&p[1], "lapse-w", cport, wargs) > 0);
  stk__rpc_channel *c = du_channel(cport);
  CHECK(du_wait_workers(c, 1, 10000) == 0);
  stk__rpc_stream *w = watch_open(c, 0);
  Stoker__V1__WorkerList *l = watch_next(w, 5000);
  CHECK(l && l->n_workers == 1);
  uint64_t v1 = l ? l->version : 0;
  if (l) protobuf_c_message_free_unpacked(&l->base, NULL);

  proc_signal(&p[1], SIGSTOP); /* no more heartbeats */
  l = watch_next(w, 5000);
  CHECK(l && l->n_workers == 0 && l->version > v1);
  uint64_t v2 = l ? l->version : 0;
  if (l) protobuf_c_message_free_unpacked(&l->base, NULL);

  proc_signal(&p[1], SIGCONT); /* it comes back and registers again */
  l = watch_next(w, 8000);
  CHECK(l && l->n_workers == 1 && l->version > v2);
  if (l) protobuf_c_message_free_unpacked(&l->base, NULL);

  proc_signal(&p[0], SIGTERM);
  /* Watchers hear that the job is over. */
  l = watch_next(w, 5000);
  CHECK(l && l->shutting_down);
  if (l) protobuf_c_message_free_unpacked(&l->base, NULL);
  stk__rpc_stream_destroy(w);
  stk__rpc_channel_close(c);
  for (int i = 0; i < 2; i++) CHECK(proc_wait(&p[i], 10000) == 0);
  if (check_failures != before) {
    for (int i = 0; i < 2; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
}

static void coordinator_restart(void) {
  stk_proc p[3];
  int before = check_failures;
  int cport = du_start_coordinator(&p[0], "restart-coord1", job_args);
  CHECK(cport > 0);
  if (cport <= 0) return;
  const char *wargs[] = {"--threads", "1", NULL};
  int wport = du_start_worker(&p[1], "restart-w", cport, wargs);
  CHECK(wport > 0);
  stk__rpc_channel *c = du_channel(cport);
  CHECK(du_wait_workers(c, 1, 10000) == 0);
  proc_signal(&p[0], SIGKILL);
  CHECK(proc_wait(&p[0], 5000) == 128 + SIGKILL);

  char listen[64];
  snprintf(listen, sizeof(listen), "127.0.0.1:%d", cport);
  char pf[600];
  snprintf(pf, sizeof(pf), "%s/restart-coord2.port", proc_tmpdir());
  char *argv[40];
  int n = 0;
  argv[n++] = (char *)coord_bin;
  argv[n++] = "--listen";
  argv[n++] = listen;
  argv[n++] = "--port-file";
  argv[n++] = pf;
  for (const char *const *a = job_args; *a; a++) argv[n++] = (char *)*a;
  argv[n] = NULL;
  CHECK(proc_spawn(&p[2], "restart-coord2", argv) == 0);
  CHECK(proc_wait_port(&p[2], pf, 10000) == cport);
  CHECK(du_wait_workers(c, 1, 10000) == 0);

  /* The restarted job's client is served by the re-registered worker. */
  char det[256];
  Stoker__V1__JoinResponse *jr = NULL;
  CHECK(du_join(c, 0, 1, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det)) == 0);
  if (jr && jr->job && jr->n_workers == 1) {
    stk_job_spec spec;
    stk_job_spec_defaults(&spec);
    CHECK(stk_job_spec_parse(&spec, jr->job->canonical, NULL, 0) == STK_OK);
    stk__rpc_channel *w =
        stk__rpc_channel_open(jr->workers[0]->address, 0, NULL, NULL, &w) ? NULL : w;
    stk__rpc_stream *s = NULL;
    CHECK(w && stk__rpc_stream_open(w, "/stoker.v1.Worker/Stream", 20000, &s) == 0);
    if (s) {
      CHECK(du_send_request(s, jr->job->hash, 0, 0, 2) == 0);
      CHECK(du_recv_batch_checked(s, &spec, 0, 0, 2) == 0);
      stk__rpc_stream_close_send(s);
      CHECK(du_stream_end(s, det, sizeof(det)) == GRPC_STATUS_OK);
      stk__rpc_stream_destroy(s);
    }
    stk__rpc_channel_close(w);
  } else {
    CHECK(!"join after restart");
  }
  if (jr) protobuf_c_message_free_unpacked(&jr->base, NULL);
  uint32_t nf;
  CHECK(du_finish(c, 0, 0, &nf, det, sizeof(det)) == 0);
  stk__rpc_channel_close(c);
  CHECK(proc_wait(&p[2], 10000) == 0);
  CHECK(proc_wait(&p[1], 10000) == 0);
  if (check_failures != before) {
    for (int i = 0; i < 3; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
}

static void watch_keeps_job_alive(void) {
  stk_proc p;
  int before = check_failures;
  const char *more[] = {"--idle-timeout-s", "3", NULL};
  int cport = du_start_coordinator2(&p, "watch-coord", job_args, more);
  CHECK(cport > 0);
  if (cport <= 0) return;
  stk__rpc_channel *c = du_channel(cport);
  stk__rpc_stream *w = watch_open(c, 0);
  /* Until the watch is open (its first list came), keep the job touched
   * with refused Joins, so a slow start under load cannot let the idle
   * clock run out before the watch counts. */
  Stoker__V1__WorkerList *l = NULL;
  for (int i = 0; i < 200 && !l; i++) { /* bounded: 20 s */
    Stoker__V1__JoinResponse *jr = NULL;
    char det[256];
    du_join(c, 0, 1, STK_PROTOCOL_VERSION + 1, 0, &jr, det, sizeof(det));
    if (jr) protobuf_c_message_free_unpacked(&jr->base, NULL);
    l = watch_next(w, 100); /* version 0 -> first list */
  }
  CHECK(l != NULL);
  if (l) protobuf_c_message_free_unpacked(&l->base, NULL);
  CHECK(proc_wait(&p, 4500) == -1); /* still running past the idle timeout */
  stk__rpc_stream_destroy(w);       /* the client goes away */
  CHECK(proc_wait(&p, 8000) == 3);
  stk__rpc_channel_close(c);
  if (check_failures != before) {
    proc_dump_log(&p);
    proc_keep_tmp();
  }
}

static void token(void) {
  stk_proc p[2];
  int before = check_failures;
  const char *more[] = {"--token", "s3cret", NULL};
  int cport = du_start_coordinator2(&p[0], "token-coord", job_args, more);
  CHECK(cport > 0);
  if (cport <= 0) return;
  const char *wargs[] = {"--threads", "1", "--token", "s3cret", NULL};
  int wport = du_start_worker(&p[1], "token-w", cport, wargs);
  CHECK(wport > 0);
  stk__rpc_channel *good = du_channel_token(cport, "s3cret"), *bad = du_channel(cport),
                   *wrong = du_channel_token(cport, "s3creT"), *wbad = du_channel(wport);
  CHECK(du_wait_workers(good, 1, 10000) == 0);
  /* A worker with the wrong token is rejected for good: exit 4. */
  stk_proc wrong_w;
  const char *bargs[] = {"--threads", "1", "--token", "nope", NULL};
  CHECK(du_start_worker(&wrong_w, "token-wrong-w", cport, bargs) > 0);
  CHECK(proc_wait(&wrong_w, 10000) == 4);
  char det[256];
  Stoker__V1__JoinResponse *jr = NULL;
  CHECK(du_join(bad, 0, 1, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det)) ==
        GRPC_STATUS_UNAUTHENTICATED);
  CHECK(du_join(wrong, 0, 1, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det)) ==
        GRPC_STATUS_UNAUTHENTICATED);
  stk__rpc_stream *s = NULL;
  CHECK(stk__rpc_stream_open(wbad, "/stoker.v1.Worker/Stream", 20000, &s) == 0);
  du_send_request(s, 1, 0, 0, 0); /* may fail: the call is refused */
  CHECK(du_stream_end(s, det, sizeof(det)) == GRPC_STATUS_UNAUTHENTICATED);
  stk__rpc_stream_destroy(s);
  uint32_t nf;
  CHECK(du_finish(good, 0, 1, &nf, det, sizeof(det)) == 0);
  stk__rpc_channel_close(good);
  stk__rpc_channel_close(bad);
  stk__rpc_channel_close(wrong);
  stk__rpc_channel_close(wbad);
  for (int i = 0; i < 2; i++) CHECK(proc_wait(&p[i], 10000) == 0);
  if (check_failures != before) {
    for (int i = 0; i < 2; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  heartbeat_lapse();
  coordinator_restart();
  watch_keeps_job_alive();
  token();
  stk__rpc_shutdown();
  CHECK_DONE();
}
