/* test_resolve_pending.c - a worker's advertised host name is looked up
 * off the coordinator's RPC threads, against a real stoker-coordinator
 * whose lookups a test gate holds (STOKER_TEST_RESOLVE_GATE: a resolver
 * thread waits while the file exists), with fake workers (raw
 * WorkerSession streams):
 *  - with one resolver thread held and its queue full (16), two more
 *    sessions that advertise a host name are told to retry (UNAVAILABLE,
 *    naming --resolve-threads), and meanwhile every Status and Join is
 *    answered while no pending session has its RegisterAck (an order, not
 *    a time: the calls are answered before any ack);
 *  - meanwhile a worker that advertises a numeric address gets its
 *    RegisterAck: it needs no lookup, so a full queue never holds it;
 *  - a second message before RegisterAck ends that session
 *    (FAILED_PRECONDITION);
 *  - once the gate opens, every pending session gets its RegisterAck, and
 *    a worker that advertised "localhost:PORT" is listed with the numeric
 *    address that was checked;
 *  - a lookup that does not finish within --resolve-timeout-ms ends its
 *    session UNAVAILABLE (retry), saying so.
 *
 * usage: test_resolve_pending <stoker-coordinator> <stoker-worker>
 */
#include <signal.h>

#include "daemon_util.h"
#include "rogue_util.h"

#define SESSION "/stoker.v1.Coordinator/WorkerSession"
#define QUEUED  16 /* RESOLVE_QUEUE_PER_THREAD x --resolve-threads 1 */
#define NSESS   (1 + QUEUED + 2)

/* The RegisterAck's job hash, 0 when the next message is not one. */
static uint64_t recv_ack(stk__rpc_stream *s, int timeout_ms) {
  grpc_byte_buffer *bb = NULL;
  if (stk__rpc_stream_recv(s, &bb, timeout_ms) != 1) return 0;
  Stoker__V1__CoordinatorCommand *c = (Stoker__V1__CoordinatorCommand *)stk__rpc_unpack(
      &stoker__v1__coordinator_command__descriptor, bb, 1 << 20);
  grpc_byte_buffer_destroy(bb);
  uint64_t h = 0;
  if (c && c->kind_case == STOKER__V1__COORDINATOR_COMMAND__KIND_ACK && c->ack->job)
    h = c->ack->job->hash;
  if (c) protobuf_c_message_free_unpacked(&c->base, NULL);
  return h;
}

static const char *job_args[] = {
    "--set", "source=imagefolder", "--set", "dataset=imgs", "--set", "num_samples=0",
    "--set", "pipeline=train",     "--set", "batch_size=4", "--set", "world_size=2",
    "--set", "height=8",           "--set", "width=8",      NULL};

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  char gate[600], det[512];
  snprintf(gate, sizeof(gate), "%s/resolve.gate", proc_tmpdir());
  FILE *g = fopen(gate, "w");
  CHECK(g != NULL);
  if (g) fclose(g);
  setenv("STOKER_TEST_RESOLVE_GATE", gate, 1);

  stk_proc coord;
  const char *more[] = {"--resolve-threads", "1", "--resolve-timeout-ms", "600000", NULL};
  int cport = du_start_coordinator2(&coord, "resolve-coord", job_args, more);
  CHECK(cport > 0);
  if (cport <= 0) return 1;
  stk__rpc_channel *c = du_channel(cport);

  /* The first lookup is held by the gate, on the only resolver thread. */
  stk__rpc_stream *s[NSESS] = {0};
  char id[32], addr[64];
  CHECK(stk__rpc_stream_open(c, SESSION, 0, &s[0]) == 0);
  CHECK(rogue_hello(s[0], "w0", "localhost:7100", 0, 0, 0) == 0);
  CHECK(proc_wait_log(&coord, "held by the test gate", 1, 30000) == 0);
  /* The queue takes 16 more names; the two after are told to retry. */
  for (int i = 1; i < NSESS; i++) {
    snprintf(id, sizeof(id), "w%d", i);
    snprintf(addr, sizeof(addr), "localhost:%d", 7100 + i);
    CHECK(stk__rpc_stream_open(c, SESSION, 0, &s[i]) == 0);
    CHECK(rogue_hello(s[i], id, addr, 0, 0, 0) == 0);
  }
  /* Which two is up to the order the serving threads took the hellos in. */
  int ended[NSESS] = {0}, refused = 0;
  for (int round = 0; round < 1500 && refused < NSESS - 1 - QUEUED; round++) /* 30 s */
    for (int i = 1; i < NSESS; i++) {
      if (ended[i]) continue;
      grpc_byte_buffer *bb = NULL;
      int r = stk__rpc_stream_recv(s[i], &bb, 1);
      if (bb) grpc_byte_buffer_destroy(bb);
      if (r == -2) continue;
      ended[i] = 1, refused++;
      CHECK(r == 0);
      CHECK(stk__rpc_stream_status(s[i], 10000, det, sizeof(det)) ==
            GRPC_STATUS_UNAVAILABLE);
      CHECK(strstr(det, "being looked up") != NULL);
      CHECK(strstr(det, "raise --resolve-threads") != NULL);
      fprintf(stderr, "session %d while the queue is full: %s\n", i, det);
    }
  CHECK(refused == NSESS - 1 - QUEUED);
  /* A numeric address is checked on the spot: its ack comes while the
   * queue is full and the gate holds every lookup. */
  stk__rpc_stream *num = NULL;
  CHECK(stk__rpc_stream_open(c, SESSION, 0, &num) == 0);
  CHECK(rogue_hello(num, "numeric", "127.0.0.1:7300", 0, 0, 0) == 0);
  CHECK(recv_ack(num, 20000) != 0);
  stk__rpc_stream_destroy(num);
  /* Both RPC threads are free: every other call is answered meanwhile. */
  int answered = 0;
  for (int i = 0; i < 20; i++) {
    Stoker__V1__StatusResponse *st = du_status(c);
    if (st && st->n_workers == 0) answered++;
    if (st) protobuf_c_message_free_unpacked(&st->base, NULL);
    Stoker__V1__JoinResponse *jr = NULL;
    if (du_join(c, 0, 2, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det)) ==
            GRPC_STATUS_UNAVAILABLE &&
        strstr(det, "waiting for a worker"))
      answered++;
    if (jr) protobuf_c_message_free_unpacked(&jr->base, NULL);
  }
  CHECK(answered == 40);
  /* ... and no pending session has had an answer yet. */
  int pending = 0, early = -1;
  for (int i = 0; i < NSESS; i++) {
    if (ended[i]) continue;
    grpc_byte_buffer *bb = NULL;
    int r = stk__rpc_stream_recv(s[i], &bb, 0);
    if (bb) grpc_byte_buffer_destroy(bb);
    CHECK(r == -2);
    pending++;
    if (i) early = i;
  }
  CHECK(pending == 1 + QUEUED);
  fprintf(stderr, "%d Status/Join answered while %d lookups were pending\n", answered,
          pending);
  /* A second message before RegisterAck ends the session. */
  CHECK(early > 0);
  CHECK(rogue_hello(s[early], "early", "127.0.0.1:7199", 1, 64, 0xf00d) == 0);
  CHECK(du_stream_end(s[early], det, sizeof(det)) == GRPC_STATUS_FAILED_PRECONDITION);
  CHECK(strstr(det, "before RegisterAck") != NULL);
  ended[early] = 1;

  /* The gate opens: every pending session gets its ack. */
  CHECK(unlink(gate) == 0);
  uint64_t h = 0;
  int acks = 0;
  for (int i = 0; i < NSESS; i++) {
    if (ended[i]) continue;
    uint64_t hi = recv_ack(s[i], 20000);
    CHECK(hi != 0);
    acks += hi != 0;
    if (i == 0) h = hi;
  }
  CHECK(acks == QUEUED);
  /* w0 completes its registration: listed with the checked address. */
  CHECK(rogue_hello(s[0], "w0", "localhost:7100", h, 64, 0xf00d) == 0);
  CHECK(du_wait_workers(c, 1, 20000) == 0);
  Stoker__V1__StatusResponse *st = du_status(c);
  CHECK(st && st->n_workers == 1);
  if (st && st->n_workers == 1) {
    const char *a = st->workers[0]->worker->address;
    fprintf(stderr, "advertised localhost:7100, listed as %s\n", a);
    CHECK(!strcmp(a, "127.0.0.1:7100") || !strcmp(a, "[::1]:7100"));
  }
  if (st) protobuf_c_message_free_unpacked(&st->base, NULL);
  for (int i = 0; i < NSESS; i++) stk__rpc_stream_destroy(s[i]);
  stk__rpc_channel_close(c);
  proc_signal(&coord, SIGTERM);
  CHECK(proc_wait(&coord, 20000) == 0);

  /* A lookup that outlasts --resolve-timeout-ms: retry later. */
  g = fopen(gate, "w");
  CHECK(g != NULL);
  if (g) fclose(g);
  stk_proc c2;
  const char *more2[] = {"--resolve-timeout-ms", "200", NULL};
  int port2 = du_start_coordinator2(&c2, "resolve-coord2", job_args, more2);
  CHECK(port2 > 0);
  stk__rpc_channel *ch2 = du_channel(port2);
  stk__rpc_stream *t = NULL;
  CHECK(stk__rpc_stream_open(ch2, SESSION, 0, &t) == 0);
  CHECK(rogue_hello(t, "slow", "localhost:7200", 0, 0, 0) == 0);
  CHECK(du_stream_end(t, det, sizeof(det)) == GRPC_STATUS_UNAVAILABLE);
  fprintf(stderr, "a lookup past the timeout: %s\n", det);
  CHECK(strstr(det, "did not resolve in time") != NULL);
  stk__rpc_stream_destroy(t);
  stk__rpc_channel_close(ch2);
  unlink(gate); /* the held thread goes on */
  proc_signal(&c2, SIGTERM);
  CHECK(proc_wait(&c2, 20000) == 0);

  if (check_failures) {
    proc_dump_log(&coord);
    proc_dump_log(&c2);
    proc_keep_tmp();
  }
  stk__rpc_shutdown();
  CHECK_DONE();
}
