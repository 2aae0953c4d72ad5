/* test_hostile_msgs.c - bounded memory from the network.
 *
 * Small messages that protobuf-c would turn into huge allocations (one per
 * unknown field, one per repeated sub-message): 4 MiB of unknown varint
 * fields, 16 MiB of empty length-delimited fields, a batch header of
 * 100000 empty tensor descriptors, and messages just inside and just past
 * each receive limit of rpc/wire_limits.h. Sent to
 *   - a real stoker-worker (Worker.Stream) and a real stoker-coordinator
 *     (Join, WorkerSession, Status): each gets a clear status
 *     (RESOURCE_EXHAUSTED or INVALID_ARGUMENT naming the limit) and the
 *     daemon keeps serving (a checked batch, a join, a status afterwards);
 *   - libstoker in this process, from a rogue coordinator+worker (this
 *     binary re-run with --rogue KIND, a separate process so its own
 *     buffers do not count): stk_client_next ends with STK_PROTOCOL
 *     saying which limit, or the client re-asks past a message gRPC
 *     refused; it never crashes.
 * Every process's peak RSS (VmHWM) is printed and asserted against a
 * bound far below the blow-ups measured without limits (180 MiB, 720 MiB).
 *
 * usage: test_hostile_msgs <stoker-coordinator> <stoker-worker>
 *        test_hostile_msgs --rogue KIND PORTFILE   (internal)
 */
#include <signal.h>
#include <stdatomic.h>

#include "daemon_util.h"
#include "stoker/client.h"
#include "rpc/wire_limits.h"

#define STREAM "/stoker.v1.Worker/Stream"
#define MiB    (1024.0 * 1024.0)

/* RSS bounds, in KiB of growth of VmHWM. Measured on the project's 2-core
 * VM (RelWithDebInfo): worker +17 MiB, coordinator +25 MiB (gRPC holds a
 * refused message before refusing it), libstoker +52 MiB over all five
 * rogues; without the limits the same payloads took 180 to 720 MiB.
 * Sanitizer builds keep freed memory in quarantine (ASan) or shadow it
 * (TSan): bounds x4 there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_SCALE 4 /* TSan: shadow memory and its own allocator */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RSS_SCALE 4
#endif
#endif
#ifndef RSS_SCALE
#define RSS_SCALE 1
#endif
#define DAEMON_BOUND_KIB (64L * 1024 * RSS_SCALE)
#define CLIENT_BOUND_KIB (96L * 1024 * RSS_SCALE)

/* Peak and current RSS of pid (0 = self) in KiB; -1 if unreadable. */
static long vm_kib(pid_t pid, const char *key) {
  char path[64], line[256];
  if (pid) snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  else snprintf(path, sizeof(path), "/proc/self/status");
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long v = -1;
  size_t kl = strlen(key);
  while (fgets(line, sizeof(line), f))
    if (!strncmp(line, key, kl) && line[kl] == ':') v = atol(line + kl + 1);
  fclose(f);
  return v;
}

/* ---- Hostile payloads --------------------------------------------------- */

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  for (; v >= 0x80; v >>= 7) p[n++] = (uint8_t)(v | 0x80);
  p[n++] = (uint8_t)v;
  return n;
}

enum { FILL_VARINT, FILL_EMPTY_LEN, FILL_EMPTY_TENSORS };

/* A message of exactly len bytes: prefix (may be NULL), then unknown
 * fields. FILL_VARINT: field 15 = 1 (2 bytes each); FILL_EMPTY_LEN:
 * field 16, empty length-delimited (3 bytes each), the "repeated
 * sub-message" flood. The last 2 to 4 bytes are one longer varint field.
 * Returns a byte buffer, or NULL. */
static grpc_byte_buffer *flood(const uint8_t *prefix, size_t plen, size_t len, int kind) {
  uint8_t *b = malloc(len);
  if (!b || len < plen + 2) return free(b), NULL;
  if (plen) memcpy(b, prefix, plen);
  size_t i = plen, unit = kind == FILL_VARINT ? 2 : 3;
  while (len - i >= unit + 2) {
    if (kind == FILL_VARINT) b[i++] = 0x78, b[i++] = 0x01;
    else b[i++] = 0x82, b[i++] = 0x01, b[i++] = 0x00;
  }
  b[i++] = 0x78; /* field 15, a varint of the remaining bytes */
  while (i < len - 1) b[i++] = 0x81;
  b[i++] = 0x01;
  grpc_slice s = grpc_slice_new(b, len, free);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

/* BatchResponse{header{tensors: n empty TensorDescs}}: 2n+~6 bytes. */
static grpc_byte_buffer *many_tensors(size_t n) {
  size_t inner = 2 * n, len = 1 + 10 + inner;
  uint8_t *b = malloc(len);
  if (!b) return NULL;
  size_t i = 0;
  b[i++] = 0x0a; /* field 1 (header), length-delimited */
  i += put_varint(b + i, inner);
  for (size_t k = 0; k < n; k++) b[i++] = 0x22, b[i++] = 0x00; /* field 4, empty */
  grpc_slice s = grpc_slice_new(b, i, free);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

/* A valid BatchRequest's bytes in buf (at least 64); its length. */
static size_t request_bytes(uint8_t *buf, uint64_t hash, uint64_t epoch, uint32_t rank,
                            uint64_t step) {
  Stoker__V1__BatchRequest q = STOKER__V1__BATCH_REQUEST__INIT;
  q.job_hash = hash, q.epoch = epoch, q.rank = rank, q.step = step;
  return protobuf_c_message_pack(&q.base, buf);
}

/* Send bb (consumed) on a new stream of method, half-closing after it
 * when half_close; the final status and its details. UNAVAILABLE means
 * the stream never reached the daemon (on a loaded machine a connection
 * can time out before gRPC's handshake), not a verdict on the message:
 * tried again, at most 5 times. */
static int send_raw(stk__rpc_channel *ch, const char *method, grpc_byte_buffer *bb,
                    int half_close, char *det, size_t dlen) {
  int code = -1;
  for (int attempt = 0; bb && attempt < 5; attempt++) {
    stk__rpc_stream *s = NULL;
    if (stk__rpc_stream_open(ch, method, 20000, &s)) break;
    stk__rpc_stream_send(s, grpc_byte_buffer_copy(bb));
    if (half_close) stk__rpc_stream_close_send(s);
    code = du_stream_end(s, det, dlen);
    stk__rpc_stream_destroy(s);
    if (code != GRPC_STATUS_UNAVAILABLE) break;
    fprintf(stderr, "  (attempt %d: %s; again)\n", attempt + 1, det);
  }
  if (bb) grpc_byte_buffer_destroy(bb);
  return code;
}

/* ---- Part 1: the daemons ------------------------------------------------ */

static stk_job_spec spec;
static uint64_t job_hash, steps;

static void worker_serves(stk__rpc_channel *w, const char *after) {
  stk__rpc_stream *s = NULL;
  CHECK(stk__rpc_stream_open(w, STREAM, 20000, &s) == 0);
  if (!s) return;
  CHECK(du_send_request(s, job_hash, 0, 0, 1) == 0);
  int rc = du_recv_batch_checked(s, &spec, 0, 0, 1);
  if (rc) fprintf(stderr, "worker: no valid batch after %s\n", after);
  CHECK(rc == 0);
  CHECK(stk__rpc_stream_close_send(s) == 0);
  char det[256];
  CHECK(du_stream_end(s, det, sizeof(det)) == GRPC_STATUS_OK);
  stk__rpc_stream_destroy(s);
}

static void expect(int code, int want, const char *det, const char *needle,
                   const char *what) {
  printf("  %-44s -> status %d: %s\n", what, code, det);
  if (code != want || (needle && !strstr(det, needle)))
    fprintf(stderr, "%s: want status %d with \"%s\"\n", what, want, needle ? needle : "");
  CHECK(code == want);
  if (needle) CHECK(strstr(det, needle) != NULL);
}

static void attack_worker(stk__rpc_channel *big, stk__rpc_channel *w, pid_t pid) {
  char det[512];
  uint8_t req[64];
  size_t rl = request_bytes(req, job_hash, 0, 0, 2);
  long hwm0 = vm_kib(pid, "VmHWM");

  /* Just inside the limit: a real request plus unknown fields (a newer
   * client's) still gets its batch. */
  stk__rpc_stream *s = NULL;
  CHECK(stk__rpc_stream_open(w, STREAM, 20000, &s) == 0);
  if (s) {
    CHECK(stk__rpc_stream_send(s, flood(req, rl, STK_MAX_REQUEST_MSG, FILL_VARINT)) == 0);
    CHECK(du_recv_batch_checked(s, &spec, 0, 0, 2) == 0);
    CHECK(stk__rpc_stream_close_send(s) == 0);
    CHECK(du_stream_end(s, det, sizeof(det)) == GRPC_STATUS_OK);
    stk__rpc_stream_destroy(s);
    printf("  %-44s -> batch received\n", "BatchRequest + unknown fields, 1 KiB");
  }
  int code = send_raw(big, STREAM, flood(req, rl, STK_MAX_REQUEST_MSG + 1, FILL_VARINT),
                      0, det, sizeof(det));
  expect(code, GRPC_STATUS_RESOURCE_EXHAUSTED, det, NULL, "BatchRequest, 1 KiB + 1 byte");
  worker_serves(w, "1 KiB + 1");
  /* Under the size limit but not a BatchRequest (wire type 7): refused by
   * the rpc layer with its own reason, which the worker's handler must not
   * replace with its own. */
  static const uint8_t junk[] = {0x0f, 0xff, 0xff, 0xff, 0x13, 0x00, 0x42};
  grpc_slice js = grpc_slice_from_static_buffer(junk, sizeof(junk));
  code = send_raw(big, STREAM, grpc_raw_byte_buffer_create(&js, 1), 0, det, sizeof(det));
  expect(code, GRPC_STATUS_INVALID_ARGUMENT, det, "not a valid stoker.v1.BatchRequest",
         "BatchRequest, 7 bytes of garbage");
  code =
      send_raw(big, STREAM, flood(NULL, 0, 4u << 20, FILL_VARINT), 0, det, sizeof(det));
  expect(code, GRPC_STATUS_RESOURCE_EXHAUSTED, det, NULL,
         "BatchRequest, 4 MiB of unknown varints");
  code = send_raw(big, STREAM, flood(NULL, 0, 16u << 20, FILL_EMPTY_LEN), 0, det,
                  sizeof(det));
  expect(code, GRPC_STATUS_RESOURCE_EXHAUSTED, det, NULL,
         "BatchRequest, 16 MiB of empty sub-messages");
  worker_serves(w, "16 MiB");
  long hwm1 = vm_kib(pid, "VmHWM");
  printf("worker VmHWM: %.1f MiB before, %.1f MiB after the attacks\n", hwm0 / 1024.0,
         hwm1 / 1024.0);
  /* Before: hundreds of MiB. A bound, not a tight figure: gRPC may hold
   * one refused message's bytes before it refuses it. */
  CHECK(hwm1 - hwm0 < DAEMON_BOUND_KIB);
}

static void attack_coordinator(stk__rpc_channel *big, stk__rpc_channel *c, pid_t pid) {
  char det[512];
  long hwm0 = vm_kib(pid, "VmHWM");
  Stoker__V1__JoinRequest jq = STOKER__V1__JOIN_REQUEST__INIT;
  jq.rank = 1, jq.world_size = 2, jq.protocol_version = STK_PROTOCOL_VERSION;
  uint8_t jb[64];
  size_t jl = protobuf_c_message_pack(&jq.base, jb);

  int code =
      send_raw(big, "/stoker.v1.Coordinator/Join",
               flood(jb, jl, STK_MAX_CONTROL_MSG, FILL_VARINT), 1, det, sizeof(det));
  expect(code, GRPC_STATUS_RESOURCE_EXHAUSTED, det, "to parse",
         "Join + 2000 unknown fields, 4 KiB");
  code =
      send_raw(big, "/stoker.v1.Coordinator/Join",
               flood(jb, jl, STK_MAX_CONTROL_MSG + 1, FILL_VARINT), 1, det, sizeof(det));
  expect(code, GRPC_STATUS_RESOURCE_EXHAUSTED, det, NULL, "Join, 4 KiB + 1 byte");
  code = send_raw(big, "/stoker.v1.Coordinator/Join",
                  flood(NULL, 0, 4u << 20, FILL_VARINT), 1, det, sizeof(det));
  expect(code, GRPC_STATUS_RESOURCE_EXHAUSTED, det, NULL,
         "Join, 4 MiB of unknown varints");
  code = send_raw(big, "/stoker.v1.Coordinator/WorkerSession",
                  flood(NULL, 0, 16u << 20, FILL_EMPTY_LEN), 0, det, sizeof(det));
  expect(code, GRPC_STATUS_RESOURCE_EXHAUSTED, det, NULL,
         "WorkerSession, 16 MiB of empty sub-messages");
  code = send_raw(big, "/stoker.v1.Coordinator/Status",
                  flood(NULL, 0, 4u << 20, FILL_EMPTY_LEN), 1, det, sizeof(det));
  expect(code, GRPC_STATUS_RESOURCE_EXHAUSTED, det, NULL,
         "Status, 4 MiB of empty sub-messages");

  /* Still serving: a join and a status. */
  Stoker__V1__JoinResponse *jr = NULL;
  code = du_join(c, 1, 2, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det));
  CHECK(code == GRPC_STATUS_OK && jr && jr->job && jr->job->hash == job_hash);
  if (jr) protobuf_c_message_free_unpacked(&jr->base, NULL);
  Stoker__V1__StatusResponse *st = du_status(c);
  CHECK(st != NULL && st->n_workers == 1);
  if (st) protobuf_c_message_free_unpacked(&st->base, NULL);
  long hwm1 = vm_kib(pid, "VmHWM");
  printf("coordinator VmHWM: %.1f MiB before, %.1f MiB after the attacks\n",
         hwm0 / 1024.0, hwm1 / 1024.0);
  CHECK(hwm1 - hwm0 < DAEMON_BOUND_KIB);
}

/* ---- Part 2: libstoker against a rogue worker --------------------------- */

static const char *rogue_kind;
static atomic_int rogue_streams;
static char rogue_addr[64], rogue_job[4096];
/* set (release) once rogue_addr is written; read (acquire) by the handler
 * that sends it: the client reaches it through gRPC, an order TSan cannot
 * see */
static int rogue_published;
static uint64_t rogue_hash;

static void rogue_job_spec(stk_job_spec *s) {
  stk_job_spec_defaults(s);
  stk_job_spec_set(s, "num_samples", "64", NULL, 0);
  stk_job_spec_set(s, "batch_size", "4", NULL, 0);
  stk_job_spec_set(s, "height", "8", NULL, 0);
  stk_job_spec_set(s, "width", "8", NULL, 0);
  stk_job_spec_set(s, "name", "rogue", NULL, 0);
}

static void rogue_list(Stoker__V1__WorkerInfo *w, Stoker__V1__WorkerInfo **wp) {
  stoker__v1__worker_info__init(w);
  (void)__atomic_load_n(&rogue_published, __ATOMIC_ACQUIRE);
  w->worker_id = "rogue", w->address = rogue_addr, w->cores = 1;
  wp[0] = w;
}

/* The rogue's handlers, on the event-driven server (rpc.h): a request the
 * rpc layer refused (m NULL) has already ended its call. */
static void rogue_join(stk__rpc_call *call, const ProtobufCMessage *q) {
  (void)q;
  Stoker__V1__JobSpec job = STOKER__V1__JOB_SPEC__INIT;
  job.canonical = rogue_job, job.hash = rogue_hash;
  Stoker__V1__WorkerInfo w, *wp[1];
  rogue_list(&w, wp);
  Stoker__V1__JoinResponse r = STOKER__V1__JOIN_RESPONSE__INIT;
  r.job = &job, r.list_version = 1, r.n_workers = 1, r.workers = wp;
  stk__rpc_call_reply(call, &r.base);
}

static int rogue_open(stk__rpc_call *call) {
  (void)call;
  return 0;
}

static void rogue_closed(stk__rpc_call *call) { (void)call; }

/* WatchWorkers: one list, then open until the client goes (or the rogue
 * is killed). */
static void rogue_watch(stk__rpc_call *call, const ProtobufCMessage *q) {
  if (!q) return;
  Stoker__V1__WorkerInfo w, *wp[1];
  rogue_list(&w, wp);
  Stoker__V1__WorkerList l = STOKER__V1__WORKER_LIST__INIT;
  l.version = 1, l.n_workers = 1, l.workers = wp;
  stk__rpc_call_send_msg(call, &l.base);
}

static void rogue_finish(stk__rpc_call *call, const ProtobufCMessage *q) {
  (void)q;
  Stoker__V1__FinishResponse r = STOKER__V1__FINISH_RESPONSE__INIT;
  stk__rpc_call_reply(call, &r.base);
}

/* Worker.Stream: answer the first request of a stream with the hostile
 * message of rogue_kind, ignore the rest; the stream stays open until
 * the client goes. "over" and "16m" are refused by gRPC itself (over the
 * client's channel limit), after which the client re-asks: the second
 * stream then gets a plainly wrong header, which the client reports. */
static void rogue_stream(stk__rpc_call *call, const ProtobufCMessage *q) {
  if (!q || stk__rpc_call_data(call)) return;
  stk__rpc_call_set_data(call, (void *)1); /* answered */
  int n = atomic_fetch_add(&rogue_streams, 1);
  grpc_byte_buffer *bb = NULL;
  const char *k = rogue_kind;
  if (!strcmp(k, "unknown4m")) bb = flood(NULL, 0, 4u << 20, FILL_VARINT);
  else if (!strcmp(k, "unknown1m")) bb = flood(NULL, 0, STK_MAX_HEADER_MSG, FILL_VARINT);
  else if (!strcmp(k, "tensors")) bb = many_tensors(100000);
  else if (n == 0 && !strcmp(k, "over"))
    bb = flood(NULL, 0, STK_MAX_CHUNK_MSG + 1, FILL_VARINT);
  else if (n == 0 && !strcmp(k, "16m")) bb = flood(NULL, 0, 16u << 20, FILL_EMPTY_LEN);
  if (bb) {
    stk__rpc_call_send(call, bb);
  } else {
    Stoker__V1__BatchHeader h = STOKER__V1__BATCH_HEADER__INIT;
    h.total_bytes = 1; /* wrong for any layout */
    Stoker__V1__BatchResponse r = STOKER__V1__BATCH_RESPONSE__INIT;
    r.header = &h;
    stk__rpc_call_send_msg(call, &r.base);
  }
}

static const stk__rpc_stream_ops rogue_watch_ops = {rogue_open, rogue_watch, NULL, NULL,
                                                    rogue_closed};
static const stk__rpc_stream_ops rogue_stream_ops = {rogue_open, rogue_stream, NULL, NULL,
                                                     rogue_closed};

static int rogue_main(const char *kind, const char *port_file) {
  rogue_kind = kind;
  stk_job_spec s;
  rogue_job_spec(&s);
  stk_job_spec_format(&s, rogue_job, sizeof(rogue_job));
  rogue_hash = stk_job_spec_hash(&s);
  stk__rpc_init();
  /* receive limits 0: the server's 32 MiB */
  stk__rpc_method methods[] = {
      {"/stoker.v1.Coordinator/Join", &stoker__v1__join_request__descriptor, 0,
       rogue_join, NULL},
      {"/stoker.v1.Coordinator/WatchWorkers", &stoker__v1__watch_request__descriptor, 0,
       NULL, &rogue_watch_ops},
      {"/stoker.v1.Coordinator/Finish", &stoker__v1__finish_request__descriptor, 0,
       rogue_finish, NULL},
      {STREAM, &stoker__v1__batch_request__descriptor, 0, NULL, &rogue_stream_ops}};
  stk__rpc_server_config sc;
  memset(&sc, 0, sizeof(sc));
  sc.listen = "127.0.0.1:0";
  sc.methods = methods;
  sc.nmethods = 4;
  sc.max_message_bytes = 32u << 20; /* it sends what others must refuse */
  stk__rpc_server *srv = NULL;
  int port = 0;
  char err[256], tmp[600];
  if (stk__rpc_server_start(&sc, &srv, &port, err, sizeof(err))) {
    fprintf(stderr, "rogue: %s\n", err);
    return 1;
  }
  snprintf(rogue_addr, sizeof(rogue_addr), "127.0.0.1:%d", port);
  __atomic_store_n(&rogue_published, 1, __ATOMIC_RELEASE);
  snprintf(tmp, sizeof(tmp), "%s.tmp", port_file);
  FILE *f = fopen(tmp, "w");
  if (!f) return 1;
  fprintf(f, "%d\n", port);
  fclose(f);
  rename(tmp, port_file);
  for (;;) pause(); /* killed by the test */
}

/* One client against a rogue of kind: next must fail with STK_PROTOCOL
 * and a reason containing needle, the process staying up. The client
 * drops the rogue worker (docs/operations.md, "Hedged requests") and fails
 * once no worker is left for join_timeout_ms, with the drop's reason. */
static void client_case(const char *self, const char *kind, const char *needle) {
  stk_proc rogue;
  char pf[600], name[64];
  snprintf(name, sizeof(name), "rogue-%s", kind);
  snprintf(pf, sizeof(pf), "%s/%s.port", proc_tmpdir(), name);
  char *argv[] = {(char *)self, "--rogue", (char *)kind, pf, NULL};
  CHECK(proc_spawn(&rogue, name, argv) == 0);
  int port = proc_wait_port(&rogue, pf, 10000);
  CHECK(port > 0);
  if (port <= 0) return;
  char addr[64], err[512] = "";
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = addr;
  cfg.rank = 0;
  cfg.world_size = 1;
  /* Also how long next waits for a live worker once the rogue is dropped
   * (client.h), which every case ends with: 5 s, not the 20 s it was. */
  cfg.join_timeout_ms = 5000;
  stk_client *c = NULL;
  int st = stk_client_open(&cfg, &c, err, sizeof(err));
  CHECK(st == STK_OK);
  if (st == STK_OK) {
    stk_batch *b = NULL;
    st = stk_client_next(c, &b);
    const char *e = stk_client_error(c);
    printf("  rogue %-10s -> client: %s: %s\n", kind, stk_strerror(st), e);
    CHECK(st == STK_PROTOCOL);
    if (!strstr(e, needle)) fprintf(stderr, "want \"%s\" in the error\n", needle);
    CHECK(strstr(e, needle) != NULL);
    if (st == STK_OK) stk_batch_release(b);
    stk_client_close(c);
  }
  proc_signal(&rogue, SIGKILL);
  proc_wait(&rogue, 10000);
  printf("  client VmHWM after %-10s %.1f MiB\n", kind, vm_kib(0, "VmHWM") / 1024.0);
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--rogue")) return rogue_main(argv[2], argv[3]);
  if (du_init(argc, argv)) return 2;
  char self[512];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (sl <= 0) return 2;
  self[sl] = 0;
  long base = vm_kib(0, "VmRSS");
  printf("test process VmRSS at start: %.1f MiB\n", base / 1024.0);

  /* Part 1: a real coordinator and worker. */
  stk_proc coord, worker;
  const char *cargs[] = {"--set",
                         "num_samples=64",
                         "--set",
                         "batch_size=4",
                         "--set",
                         "height=16",
                         "--set",
                         "width=16",
                         "--set",
                         "world_size=2",
                         "--set",
                         "name=hostile",
                         "--idle-timeout-s",
                         "60",
                         NULL};
  int cport = du_start_coordinator(&coord, "coordinator", cargs);
  CHECK(cport > 0);
  if (cport <= 0) CHECK_DONE();
  const char *wargs[] = {"--threads", "1", "--chunk-bytes", "4096", NULL};
  int wport = du_start_worker(&worker, "worker", cport, wargs);
  CHECK(wport > 0);
  if (wport <= 0) CHECK_DONE();
  stk__rpc_channel *c = du_channel(cport), *w = du_channel(wport), *cbig = NULL,
                   *wbig = NULL;
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", cport);
  CHECK(stk__rpc_channel_open(target, 32u << 20, NULL, NULL, &cbig) == 0);
  snprintf(target, sizeof(target), "127.0.0.1:%d", wport);
  CHECK(stk__rpc_channel_open(target, 32u << 20, NULL, NULL, &wbig) == 0);
  CHECK(du_wait_workers(c, 1, 10000) == 0);
  char det[512];
  Stoker__V1__JoinResponse *jr = NULL;
  CHECK(du_join(c, 0, 2, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det)) == 0);
  if (!jr || !jr->job) {
    fprintf(stderr, "join failed: %s\n", det);
    CHECK_DONE();
  }
  stk_job_spec_defaults(&spec);
  CHECK(stk_job_spec_parse(&spec, jr->job->canonical, NULL, 0) == STK_OK);
  job_hash = jr->job->hash;
  protobuf_c_message_free_unpacked(&jr->base, NULL);
  steps = stk_steps_per_epoch(&spec, spec.num_samples);
  worker_serves(w, "start");

  printf("worker (pid %d):\n", (int)worker.pid);
  attack_worker(wbig, w, worker.pid);
  printf("coordinator (pid %d):\n", (int)coord.pid);
  attack_coordinator(cbig, c, coord.pid);
  CHECK(proc_wait(&worker, 0) == -1 && proc_wait(&coord, 0) == -1); /* both alive */
  stk__rpc_channel_close(cbig);
  stk__rpc_channel_close(wbig);
  stk__rpc_channel_close(c);
  stk__rpc_channel_close(w);

  /* Part 2: libstoker in this process against rogue workers. */
  printf("libstoker:\n");
  client_case(self, "unknown4m", "to parse");
  client_case(self, "unknown1m", "to parse");
  client_case(self, "tensors", "BatchResponse");
  client_case(self, "over", "batch of 1 bytes");
  client_case(self, "16m", "batch of 1 bytes");
  long hwm = vm_kib(0, "VmHWM");
  printf("test process (libstoker) VmHWM: %.1f MiB (start RSS %.1f MiB)\n", hwm / 1024.0,
         base / 1024.0);
  CHECK(hwm - base < CLIENT_BOUND_KIB);

  proc_reap_all();
  stk__rpc_shutdown();
  if (check_failures) proc_keep_tmp();
  CHECK_DONE();
}
