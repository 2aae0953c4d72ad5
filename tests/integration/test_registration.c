/* test_registration.c - the coordinator's worker registration protocol,
 * driven by fake workers (raw WorkerSession streams) against a real
 * stoker-coordinator running a file-dataset job whose size is unknown:
 *  - Join before any worker registered: UNAVAILABLE "waiting for a worker";
 *  - a real worker that cannot open its dataset exits 1 and tells the
 *    coordinator why: a waiting rank's answer and Status name the reason;
 *  - hello, RegisterAck with the job, second hello with the job hash, the
 *    dataset size and fingerprint: the worker is listed and N is learnt
 *    (the job hash changes to the resolved one);
 *  - a second worker with another fingerprint, another size or a wrong
 *    job hash is refused with FAILED_PRECONDITION and a clear message;
 *  - a session that starts with a heartbeat, or an old protocol, is refused;
 *  - a worker whose session ends leaves the list (watchers see it).
 *
 * usage: test_registration <stoker-coordinator> <stoker-worker>
 */
#include <signal.h>

#include "daemon_util.h"

#define SESSION "/stoker.v1.Coordinator/WorkerSession"

static int send_hello(stk__rpc_stream *s, const char *id, uint32_t proto, uint64_t hash,
                      uint64_t size, uint64_t fp) {
  Stoker__V1__WorkerInfo info = STOKER__V1__WORKER_INFO__INIT;
  info.worker_id = (char *)id;
  info.address = "127.0.0.1:1";
  info.cores = 1;
  Stoker__V1__Register reg = STOKER__V1__REGISTER__INIT;
  reg.worker = &info;
  reg.protocol_version = proto;
  reg.job_hash = hash;
  reg.dataset_size = size;
  reg.dataset_fingerprint = fp;
  Stoker__V1__WorkerMessage m = STOKER__V1__WORKER_MESSAGE__INIT;
  m.kind_case = STOKER__V1__WORKER_MESSAGE__KIND_HELLO;
  m.hello = &reg;
  return stk__rpc_stream_send_msg(s, &m.base);
}

/* First hello; the ack's job hash (0 on failure). */
static uint64_t hello_ack(stk__rpc_stream *s, const char *id) {
  CHECK(send_hello(s, id, STK_PROTOCOL_VERSION, 0, 0, 0) == 0);
  grpc_byte_buffer *bb = NULL;
  if (stk__rpc_stream_recv(s, &bb, 5000) != 1) return 0;
  Stoker__V1__CoordinatorCommand *c = (Stoker__V1__CoordinatorCommand *)stk__rpc_unpack(
      &stoker__v1__coordinator_command__descriptor, bb, 1 << 20);
  grpc_byte_buffer_destroy(bb);
  uint64_t h = 0;
  if (c && c->kind_case == STOKER__V1__COORDINATOR_COMMAND__KIND_ACK && c->ack->job) {
    h = c->ack->job->hash;
    CHECK(c->ack->heartbeat_interval_ms > 0);
    stk_job_spec spec;
    stk_job_spec_defaults(&spec);
    CHECK(stk_job_spec_parse(&spec, c->ack->job->canonical, NULL, 0) == STK_OK);
    CHECK(stk_job_spec_hash(&spec) == h);
  }
  if (c) protobuf_c_message_free_unpacked(&c->base, NULL);
  return h;
}

/* A full registration with these values; the session's final status when
 * refused, or 0 with *out the open session when accepted. */
static int fake_register(stk__rpc_channel *c, const char *id, uint64_t hash_xor,
                         uint64_t size, uint64_t fp, stk__rpc_stream **out, char *det,
                         size_t dlen) {
  *out = NULL;
  stk__rpc_stream *s = NULL;
  if (stk__rpc_stream_open(c, SESSION, 0, &s)) return -1;
  uint64_t h = hello_ack(s, id);
  CHECK(h != 0);
  CHECK(send_hello(s, id, STK_PROTOCOL_VERSION, h ^ hash_xor, size, fp) == 0);
  grpc_byte_buffer *bb = NULL;
  int r = stk__rpc_stream_recv(s, &bb, 1000);
  if (bb) grpc_byte_buffer_destroy(bb);
  if (r == -2) { /* nothing said: accepted, the session stays open */
    *out = s;
    return 0;
  }
  int code = stk__rpc_stream_status(s, 5000, det, dlen);
  stk__rpc_stream_destroy(s);
  return code;
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  stk_proc coord;
  const char *cargs[] = {
      "--set", "source=imagefolder", "--set", "dataset=imgs", "--set", "num_samples=0",
      "--set", "pipeline=train",     "--set", "batch_size=4", "--set", "world_size=2",
      "--set", "height=8",           "--set", "width=8",      NULL};
  int cport = du_start_coordinator(&coord, "reg-coord", cargs);
  CHECK(cport > 0);
  if (cport <= 0) return 1;
  stk__rpc_channel *c = du_channel(cport);
  char det[512];

  Stoker__V1__JoinResponse *jr = NULL;
  CHECK(du_join(c, 0, 2, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det)) ==
        GRPC_STATUS_UNAVAILABLE);
  CHECK(strstr(det, "waiting for a worker") != NULL);

  /* A real worker that cannot open its dataset says why before it exits
   * (1, a runtime failure): a waiting rank and Status name the reason. */
  stk_proc bad;
  const char *bargs[] = {"--threads", "1", "--data-root", "/nonexistent-stoker-root",
                         NULL};
  CHECK(du_start_worker(&bad, "reg-bad-worker", cport, bargs) > 0);
  CHECK(proc_wait(&bad, 30000) == 1);
  /* Within FAIL_GRACE_MS (2 s) of the failure a rank still waits (a good
   * worker may be starting beside the bad one); after it, with no worker
   * come since, Join refuses FAILED_PRECONDITION with the worker's reason
   * and the client fails at once. */
  int jc = du_join(c, 0, 2, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det));
  fprintf(stderr, "join while the only worker failed: %s\n", det);
  CHECK(jc == GRPC_STATUS_UNAVAILABLE || jc == GRPC_STATUS_FAILED_PRECONDITION);
  CHECK(strstr(det, jc == GRPC_STATUS_UNAVAILABLE
                        ? "waiting for a worker"
                        : "no worker can serve the job") != NULL);
  CHECK(strstr(det, "cannot open the dataset") != NULL);
  for (int i = 0; i < 300 && jc == GRPC_STATUS_UNAVAILABLE; i++) {
    stk__sleep_ms(100);
    jc = du_join(c, 0, 2, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det));
  }
  fprintf(stderr, "join after the grace: %s\n", det);
  CHECK(jc == GRPC_STATUS_FAILED_PRECONDITION);
  CHECK(strncmp(det, "no worker can serve the job: ", 29) == 0);
  CHECK(strstr(det, "could not serve the job") == NULL); /* one way of saying it */
  CHECK(strstr(det, "cannot open the dataset") != NULL);
  CHECK(strstr(det, "start the workers again") != NULL);
  Stoker__V1__StatusResponse *fs = du_status(c);
  CHECK(fs && fs->n_worker_failures == 1 &&
        strstr(fs->worker_failures[0], "cannot open the dataset") &&
        strstr(fs->worker_failures[0], "nonexistent-stoker-root"));
  if (fs) protobuf_c_message_free_unpacked(&fs->base, NULL);

  /* A session must start with hello, in our protocol version. */
  stk__rpc_stream *s = NULL;
  CHECK(stk__rpc_stream_open(c, SESSION, 0, &s) == 0);
  CHECK(send_hello(s, "old", 99, 0, 0, 0) == 0);
  CHECK(du_stream_end(s, det, sizeof(det)) == GRPC_STATUS_FAILED_PRECONDITION);
  CHECK(strstr(det, "protocol") != NULL);
  stk__rpc_stream_destroy(s);
  CHECK(stk__rpc_stream_open(c, SESSION, 0, &s) == 0);
  Stoker__V1__Heartbeat hb = STOKER__V1__HEARTBEAT__INIT;
  Stoker__V1__WorkerMessage m = STOKER__V1__WORKER_MESSAGE__INIT;
  m.kind_case = STOKER__V1__WORKER_MESSAGE__KIND_HEARTBEAT;
  m.heartbeat = &hb;
  CHECK(stk__rpc_stream_send_msg(s, &m.base) == 0);
  CHECK(du_stream_end(s, det, sizeof(det)) == GRPC_STATUS_INVALID_ARGUMENT);
  stk__rpc_stream_destroy(s);

  /* A wrong job hash in the second hello. */
  stk__rpc_stream *a = NULL, *b = NULL;
  CHECK(fake_register(c, "w-bad-hash", 1, 64, 0xf00d, &a, det, sizeof(det)) ==
        GRPC_STATUS_FAILED_PRECONDITION);
  CHECK(strstr(det, "job hash") != NULL);
  /* The first good worker fixes N = 64 and the fingerprint. */
  CHECK(fake_register(c, "w-a", 0, 64, 0xf00d, &a, det, sizeof(det)) == 0);
  CHECK(a != NULL);
  CHECK(du_wait_workers(c, 1, 5000) == 0);
  Stoker__V1__StatusResponse *st = du_status(c);
  CHECK(st && st->dataset_size == 64 && !strcmp(st->state, "running"));
  if (st) protobuf_c_message_free_unpacked(&st->base, NULL);
  /* Others must agree. */
  CHECK(fake_register(c, "w-b", 0, 64, 0xbeef, &b, det, sizeof(det)) ==
        GRPC_STATUS_FAILED_PRECONDITION);
  CHECK(strstr(det, "fingerprint") != NULL);
  CHECK(fake_register(c, "w-c", 0, 65, 0xf00d, &b, det, sizeof(det)) ==
        GRPC_STATUS_FAILED_PRECONDITION);
  CHECK(strstr(det, "samples") != NULL);
  /* The refusal names the worker the size came from and how to pin it. */
  CHECK(strstr(det, "w-a") != NULL);
  CHECK(strstr(det, "pin num_samples") != NULL);
  CHECK(fake_register(c, "w-d", 0, 64, 0xf00d, &b, det, sizeof(det)) == 0);
  CHECK(du_wait_workers(c, 2, 5000) == 0);

  /* Join now works and carries the resolved job (num_samples = 64). */
  jr = NULL;
  CHECK(du_join(c, 1, 2, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det)) == 0);
  if (jr) {
    stk_job_spec spec;
    stk_job_spec_defaults(&spec);
    CHECK(stk_job_spec_parse(&spec, jr->job->canonical, NULL, 0) == STK_OK);
    CHECK_EQ_U64(spec.num_samples, 64);
    CHECK(stk_job_spec_hash(&spec) == jr->job->hash);
    CHECK_EQ_U64(jr->n_workers, 2);
    protobuf_c_message_free_unpacked(&jr->base, NULL);
  }
  /* A worker that goes away leaves the list. */
  stk__rpc_stream_destroy(b);
  for (int i = 0; i < 400; i++) { /* bounded: 20 s */
    st = du_status(c);
    size_t n = st ? st->n_workers : 99;
    if (st) protobuf_c_message_free_unpacked(&st->base, NULL);
    if (n == 1) break;
    stk__sleep_ms(50);
  }
  st = du_status(c);
  CHECK(st && st->n_workers == 1);
  if (st) protobuf_c_message_free_unpacked(&st->base, NULL);

  /* Shutdown reaches the fake worker as a command. */
  proc_signal(&coord, SIGTERM);
  grpc_byte_buffer *bb = NULL;
  CHECK(stk__rpc_stream_recv(a, &bb, 5000) == 1);
  Stoker__V1__CoordinatorCommand *cmd =
      bb ? (Stoker__V1__CoordinatorCommand *)stk__rpc_unpack(
               &stoker__v1__coordinator_command__descriptor, bb, 1 << 20)
         : NULL;
  CHECK(cmd && cmd->kind_case == STOKER__V1__COORDINATOR_COMMAND__KIND_SHUTDOWN);
  if (cmd) protobuf_c_message_free_unpacked(&cmd->base, NULL);
  if (bb) grpc_byte_buffer_destroy(bb);
  stk__rpc_stream_destroy(a);
  CHECK(proc_wait(&coord, 10000) == 0);
  stk__rpc_channel_close(c);
  if (check_failures) {
    proc_dump_log(&coord);
    proc_keep_tmp();
  }
  stk__rpc_shutdown();
  CHECK_DONE();
}
