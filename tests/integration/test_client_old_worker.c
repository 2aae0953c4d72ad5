/* test_client_old_worker.c - elastic resume against a worker that predates
 * it: a small gRPC server in this process plays the coordinator (Join,
 * WatchWorkers, Finish) and an old worker (Worker.Stream answering every
 * request with a header that lacks sample_offset, as a worker that does
 * not know BatchRequest field 5 would). A client resumed with another
 * world size (a W=4 state into this W=3 job: sample offset 4) must end
 * with STK_PROTOCOL naming the sample offset, not hang or deliver the
 * wrong samples.
 *
 * usage: test_client_old_worker (no binaries: both daemons are the test)
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "rpc.h"
#include "stoker.pb-c.h"
#include "stoker/client.h"
#include "stoker/version.h"

#define JOB_FMT                                                        \
  "source = synthetic\nnum_samples = 64\nbatch_size = 4\nheight = 8\n" \
  "width = 8\ndrop_last = false\nworld_size = %d\n"

static char job_text[4096], worker_addr[64];
/* set (release) once job_text and worker_addr are written; the handlers
 * read them after an acquire: the client reaches the handlers through
 * gRPC and the kernel, an order TSan cannot see */
static int published;
static int ready(void) { return __atomic_load_n(&published, __ATOMIC_ACQUIRE); }
static uint64_t job_hash;
static stk_batch_layout layout;

static void one_worker(Stoker__V1__WorkerInfo *w, Stoker__V1__WorkerInfo **wp) {
  stoker__v1__worker_info__init(w);
  w->worker_id = "old-worker", w->address = worker_addr, w->cores = 1;
  *wp = w;
}

static void on_join(stk__rpc_call *call, const ProtobufCMessage *q) {
  (void)q;
  if (!ready()) {
    stk__rpc_call_finish(call, GRPC_STATUS_UNAVAILABLE, "not ready");
    return;
  }
  Stoker__V1__JobSpec job = STOKER__V1__JOB_SPEC__INIT;
  job.canonical = job_text;
  job.hash = job_hash;
  Stoker__V1__WorkerInfo w, *wp;
  one_worker(&w, &wp);
  Stoker__V1__JoinResponse r = STOKER__V1__JOIN_RESPONSE__INIT;
  r.job = &job;
  r.list_version = 1;
  r.n_workers = 1;
  r.workers = &wp;
  stk__rpc_call_reply(call, &r.base);
}

/* The watch sends one list and stays open until the client goes (the
 * server's stop ends it otherwise). */
static int watch_open(stk__rpc_call *call) {
  (void)ready(); /* the acquire: job and address are published */
  (void)call;
  return 0;
}

static void watch_message(stk__rpc_call *call, const ProtobufCMessage *q) {
  (void)ready(); /* the acquire: job and address are published */
  if (!q) {
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "bad watch");
    return;
  }
  Stoker__V1__WorkerInfo w, *wp;
  one_worker(&w, &wp);
  Stoker__V1__WorkerList l = STOKER__V1__WORKER_LIST__INIT;
  l.version = 1;
  l.n_workers = 1;
  l.workers = &wp;
  stk__rpc_call_send_msg(call, &l.base);
}

static void watch_closed(stk__rpc_call *call) { (void)call; }

static const stk__rpc_stream_ops watch_ops = {watch_open, watch_message, NULL, NULL,
                                              watch_closed};

static void on_finish(stk__rpc_call *call, const ProtobufCMessage *q) {
  (void)q;
  Stoker__V1__FinishResponse r = STOKER__V1__FINISH_RESPONSE__INIT;
  stk__rpc_call_reply(call, &r.base);
}

/* The old worker: every request gets a well-formed header for its
 * (epoch, rank, step), without the sample offset. The stream ends
 * CANCELLED when a request does not parse, a send fails or the client
 * half-closes. */
static int stream_open(stk__rpc_call *call) {
  (void)ready(); /* the acquire: job and address are published */
  (void)call;
  return 0;
}

static void stream_message(stk__rpc_call *call, const ProtobufCMessage *m) {
  (void)ready(); /* the acquire: job and address are published */
  if (!m) {
    stk__rpc_call_finish(call, GRPC_STATUS_CANCELLED, "");
    return;
  }
  Stoker__V1__TensorDesc td[STK_MAX_TENSORS], *tdp[STK_MAX_TENSORS];
  static const char *const dt[] = {"", "uint8", "float32", "bfloat16", "int64"};
  for (uint32_t i = 0; i < layout.ntensors; i++) {
    stoker__v1__tensor_desc__init(&td[i]);
    td[i].name = layout.tensors[i].name;
    td[i].dtype = (char *)dt[layout.tensors[i].dtype];
    td[i].offset = layout.tensors[i].offset;
    td[i].nbytes = layout.tensors[i].nbytes;
    tdp[i] = &td[i];
  }
  const Stoker__V1__BatchRequest *q = (const Stoker__V1__BatchRequest *)m;
  Stoker__V1__BatchHeader h = STOKER__V1__BATCH_HEADER__INIT;
  h.epoch = q->epoch, h.rank = q->rank, h.step = q->step;
  h.n_tensors = layout.ntensors;
  h.tensors = tdp;
  h.total_bytes = layout.total_bytes;
  Stoker__V1__BatchResponse r = STOKER__V1__BATCH_RESPONSE__INIT;
  r.header = &h;
  if (stk__rpc_call_send_msg(call, &r.base))
    stk__rpc_call_finish(call, GRPC_STATUS_CANCELLED, "");
}

static void stream_half_close(stk__rpc_call *call) {
  stk__rpc_call_finish(call, GRPC_STATUS_CANCELLED, "");
}

static void stream_closed(stk__rpc_call *call) { (void)call; }

static const stk__rpc_stream_ops stream_ops = {stream_open, stream_message,
                                               stream_half_close, NULL, stream_closed};

int main(void) {
  /* The state: a local W=4 client after one step (sample position 16; in
   * W=3, offset 4 and step 1). */
  char w4[512], err[512];
  snprintf(w4, sizeof w4, JOB_FMT, 4);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.rank = 0, cfg.world_size = 4;
  stk_client *c = NULL;
  CHECK(stk_client_open_local(&cfg, w4, NULL, &c, err, sizeof err) == STK_OK);
  unsigned char state[64];
  size_t slen = sizeof state;
  stk_batch *b = NULL;
  CHECK(c && stk_client_next(c, &b) == STK_OK);
  stk_batch_release(b);
  CHECK(c && stk_client_save_state(c, state, &slen) == STK_OK);
  stk_client_close(c);

  char w3[512];
  snprintf(w3, sizeof w3, JOB_FMT, 3);
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  CHECK(stk_job_spec_parse(&spec, w3, NULL, 0) == STK_OK);
  CHECK(stk_job_spec_format(&spec, job_text, sizeof job_text) < sizeof job_text);
  job_hash = stk_job_spec_hash(&spec);
  CHECK(stk_batch_layout_of(&spec, &layout) == STK_OK);

  stk__rpc_init();
  stk__rpc_method methods[] = {
      {"/stoker.v1.Coordinator/Join", &stoker__v1__join_request__descriptor, 0, on_join,
       NULL},
      {"/stoker.v1.Coordinator/WatchWorkers", &stoker__v1__watch_request__descriptor, 0,
       NULL, &watch_ops},
      {"/stoker.v1.Coordinator/Finish", &stoker__v1__finish_request__descriptor, 0,
       on_finish, NULL},
      {"/stoker.v1.Worker/Stream", &stoker__v1__batch_request__descriptor, 0, NULL,
       &stream_ops}};
  stk__rpc_server_config sc;
  memset(&sc, 0, sizeof sc);
  sc.listen = "127.0.0.1:0";
  sc.methods = methods;
  sc.nmethods = 4;
  stk__rpc_server *srv = NULL;
  int port = 0;
  if (stk__rpc_server_start(&sc, &srv, &port, err, sizeof err)) {
    fprintf(stderr, "rogue server: %s\n", err);
    return 1;
  }
  snprintf(worker_addr, sizeof worker_addr, "127.0.0.1:%d", port);
  __atomic_store_n(&published, 1, __ATOMIC_RELEASE);
  stk_client_config_defaults(&cfg);
  cfg.coordinator = worker_addr;
  cfg.rank = 0, cfg.world_size = 3;
  cfg.join_timeout_ms = 10000;
  cfg.resume_state = state, cfg.resume_len = slen;
  int st = stk_client_open(&cfg, &c, err, sizeof err);
  CHECK(st == STK_OK);
  if (st) fprintf(stderr, "open: %s\n", err);
  if (!st) {
    b = NULL;
    st = stk_client_next(c, &b);
    printf("next: status %d (%s): %s\n", st, stk_strerror(st), stk_client_error(c));
    CHECK(st == STK_PROTOCOL);
    CHECK(strstr(stk_client_error(c), "sample offset 0, asked for offset 4") != NULL);
    if (b) stk_batch_release(b);
    stk_client_close(c);
  }
  stk__rpc_server_stop(srv, 500);
  stk__rpc_shutdown();
  CHECK_DONE();
}
