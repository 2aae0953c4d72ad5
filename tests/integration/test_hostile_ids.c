/* test_hostile_ids.c - untrusted ids and addresses against a real
 * stoker-coordinator and the `stoker status` CLI:
 *  - a fake worker registers with an id full of newlines, ANSI/OSC escape
 *    sequences, BEL and CR: it is accepted, and neither the coordinator's
 *    log nor `stoker status` output carries one control byte or a forged
 *    line: the bytes show as \xNN; an address with such bytes, or a gRPC
 *    target that is not host:port (unix:/...), is refused INVALID_ARGUMENT;
 *  - one limit for ids (rpc/wire_limits.h): a 255-byte worker id is
 *    accepted whole, a 256-byte one is refused with INVALID_ARGUMENT and a
 *    message naming the limit (never truncated); a Join with a 256-byte
 *    client_id likewise, a hostile 40-byte one is logged escaped.
 *
 * usage: test_hostile_ids <stoker-coordinator> <stoker-worker> <stoker>
 */
#include <signal.h>

#include "daemon_util.h"
#include "files.h"

#define SESSION "/stoker.v1.Coordinator/WorkerSession"

static const char hostile_id[] =
    "evil\n2026-01-01T00:00:00.000Z stoker-coordinator INFO forged\r\x1b[31m"
    "red\x1b[0m\x1b]0;pwned\x07\xff";
static const char hostile_addr[] = "127.0.0.1:1\r\x1b[2J\x1b[H";

static int send_hello(stk__rpc_stream *s, const char *id, const char *addr, uint64_t hash,
                      uint64_t size) {
  Stoker__V1__WorkerInfo info = STOKER__V1__WORKER_INFO__INIT;
  info.worker_id = (char *)id;
  info.address = (char *)addr;
  info.cores = 1;
  Stoker__V1__Register reg = STOKER__V1__REGISTER__INIT;
  reg.worker = &info;
  reg.protocol_version = STK_PROTOCOL_VERSION;
  reg.job_hash = hash;
  reg.dataset_size = size;
  reg.dataset_fingerprint = 0x5eed;
  Stoker__V1__WorkerMessage m = STOKER__V1__WORKER_MESSAGE__INIT;
  m.kind_case = STOKER__V1__WORKER_MESSAGE__KIND_HELLO;
  m.hello = &reg;
  return stk__rpc_stream_send_msg(s, &m.base);
}

/* Register (both hellos); 0 with *out open when accepted, else the final
 * gRPC status with det. */
static int fake_register(stk__rpc_channel *c, const char *id, const char *addr,
                         stk__rpc_stream **out, char *det, size_t dlen) {
  *out = NULL;
  det[0] = 0;
  stk__rpc_stream *s = NULL;
  if (stk__rpc_stream_open(c, SESSION, 0, &s)) return -1;
  CHECK(send_hello(s, id, addr, 0, 0) == 0);
  grpc_byte_buffer *bb = NULL;
  int r = stk__rpc_stream_recv(s, &bb, 5000);
  uint64_t hash = 0;
  if (r == 1) {
    Stoker__V1__CoordinatorCommand *cmd =
        (Stoker__V1__CoordinatorCommand *)stk__rpc_unpack(
            &stoker__v1__coordinator_command__descriptor, bb, 1 << 20);
    if (cmd && cmd->kind_case == STOKER__V1__COORDINATOR_COMMAND__KIND_ACK &&
        cmd->ack->job)
      hash = cmd->ack->job->hash;
    if (cmd) protobuf_c_message_free_unpacked(&cmd->base, NULL);
  }
  if (bb) grpc_byte_buffer_destroy(bb);
  if (!hash) { /* refused at the first hello */
    int code = stk__rpc_stream_status(s, 5000, det, dlen);
    stk__rpc_stream_destroy(s);
    return code;
  }
  CHECK(send_hello(s, id, addr, hash, 64) == 0);
  bb = NULL;
  r = stk__rpc_stream_recv(s, &bb, 1000);
  if (bb) grpc_byte_buffer_destroy(bb);
  if (r == -2) { /* nothing said: accepted, the session stays open */
    *out = s;
    return 0;
  }
  int code = stk__rpc_stream_status(s, 5000, det, dlen);
  stk__rpc_stream_destroy(s);
  return code;
}

static int join_as(stk__rpc_channel *ch, const char *client_id, char *det, size_t dlen) {
  Stoker__V1__JoinRequest q = STOKER__V1__JOIN_REQUEST__INIT;
  q.rank = 0;
  q.world_size = 1;
  q.client_id = (char *)client_id;
  q.protocol_version = STK_PROTOCOL_VERSION;
  ProtobufCMessage *r = NULL;
  int code = stk__rpc_unary(ch, "/stoker.v1.Coordinator/Join", &q.base,
                            &stoker__v1__join_response__descriptor, &r, 5000, det, dlen);
  if (r) protobuf_c_message_free_unpacked(r, NULL);
  return code;
}

/* No byte outside printable ASCII but '\n', and no line that starts with
 * the forged timestamp. */
static int clean_text(const char *what, const char *buf, size_t len) {
  size_t ctl = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)buf[i];
    if (ch != '\n' && (ch < 0x20 || ch > 0x7e)) ctl++;
  }
  int forged = strstr(buf, "\n2026-01-01T00:00:00.000Z") != NULL ||
               !strncmp(buf, "2026-01-01T00:00:00.000Z", 24);
  printf("%s: %zu bytes, %zu control bytes, forged line: %s\n", what, len, ctl,
         forged ? "YES" : "no");
  return ctl == 0 && !forged;
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  if (argc < 4) {
    fprintf(stderr, "usage: %s <stoker-coordinator> <stoker-worker> <stoker>\n", argv[0]);
    return 2;
  }
  const char *cli = argv[3];
  stk_proc coord;
  const char *cargs[] = {"--set", "num_samples=64", "--set", "world_size=1",
                         "--set", "batch_size=4",   "--set", "height=8",
                         "--set", "width=8",        NULL};
  /* The fake workers never heartbeat: with 1000 misses allowed they stay
   * listed however slowly this runs (seen dropped after 3 s under TSan). */
  const char *patient[] = {"--heartbeat-misses", "1000", NULL};
  int cport = du_start_coordinator2(&coord, "hostile-coord", cargs, patient);
  CHECK(cport > 0);
  if (cport <= 0) return 1;
  stk__rpc_channel *c = du_channel(cport);
  char det[512];

  /* 1. hostile but within the limit: accepted */
  stk__rpc_stream *a = NULL, *b = NULL, *x = NULL;
  CHECK(fake_register(c, hostile_id, "127.0.0.1:1", &a, det, sizeof(det)) == 0);
  /* an address is host:port and nothing else */
  const char *bad_addr[] = {hostile_addr,
                            "unix:/tmp/sock",
                            "unix:///tmp/sock:1",
                            "dns:///h:1",
                            "h:0",
                            "h:65536",
                            ":80",
                            "h:-1",
                            "a b:1"};
  for (size_t i = 0; i < sizeof(bad_addr) / sizeof(bad_addr[0]); i++) {
    int rc = fake_register(c, "w-bad-address", bad_addr[i], &x, det, sizeof(det));
    CHECK(rc == GRPC_STATUS_INVALID_ARGUMENT && strstr(det, "not host:port"));
  }
  /* 2. the shared limit: 255 bytes whole, 256 refused */
  char id255[256], id256[257];
  memset(id255, 'a', 255), id255[255] = 0;
  memset(id256, 'b', 256), id256[256] = 0;
  CHECK(fake_register(c, id255, "127.0.0.1:2", &b, det, sizeof(det)) == 0);
  int code = fake_register(c, id256, "127.0.0.1:3", &x, det, sizeof(det));
  printf("256-byte worker id: gRPC status %d: %s\n", code, det);
  CHECK(code == GRPC_STATUS_INVALID_ARGUMENT && strstr(det, "at most 255 bytes"));
  code = fake_register(c, "w-long-address", id256, &x, det, sizeof(det));
  CHECK(code == GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(du_wait_workers(c, 2, 5000) == 0);
  Stoker__V1__StatusResponse *st = du_status(c);
  int whole = 0;
  for (size_t i = 0; st && i < st->n_workers; i++)
    if (st->workers[i]->worker && !strcmp(st->workers[i]->worker->worker_id, id255))
      whole = 1;
  CHECK(whole); /* listed whole, not cut */
  if (st) protobuf_c_message_free_unpacked(&st->base, NULL);

  /* 3. Join: a 256-byte client id refused, a hostile one logged escaped */
  code = join_as(c, id256, det, sizeof(det));
  printf("256-byte client id: gRPC status %d: %s\n", code, det);
  CHECK(code == GRPC_STATUS_INVALID_ARGUMENT && strstr(det, "at most 255"));
  CHECK(join_as(c, "rank0\n\x1b[1A\x1b[2Kfake", det, sizeof(det)) == GRPC_STATUS_OK);

  /* 4. stoker status renders it all escaped */
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", cport);
  char *sargv[] = {(char *)cli, "status", "--coordinator", target, NULL};
  stk_proc sp;
  CHECK(proc_spawn(&sp, "hostile-status", sargv) == 0);
  CHECK(proc_wait(&sp, 20000) == 0);
  size_t len = 0;
  char *out = files_slurp(sp.log, &len);
  CHECK(out != NULL);
  if (out) {
    CHECK(clean_text("stoker status output", out, len));
    CHECK(strstr(out, "evil\\x0a2026-01-01T00:00:00.000Z") != NULL);
    CHECK(strstr(out, "\\x1b[31m") && strstr(out, "\\x07\\xff"));

    if (check_failures) fputs(out, stderr);
    free(out);
  }

  /* 5. the coordinator's log */
  proc_signal(&coord, SIGTERM);
  stk__rpc_stream_destroy(a);
  stk__rpc_stream_destroy(b);
  CHECK(proc_wait(&coord, 10000) == 0);
  out = files_slurp(coord.log, &len);
  CHECK(out != NULL);
  if (out) {
    CHECK(clean_text("coordinator log", out, len));
    CHECK(strstr(out, "worker evil\\x0a2026") != NULL);
    CHECK(strstr(out, "rank0\\x0a\\x1b[1A") != NULL);
    free(out);
  }
  stk__rpc_channel_close(c);
  if (check_failures) {
    proc_dump_log(&coord);
    proc_keep_tmp();
  }
  stk__rpc_shutdown();
  CHECK_DONE();
}
