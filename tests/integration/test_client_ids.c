/* test_client_ids.c - libstoker against a rogue coordinator (a small gRPC
 * server in this process speaking Join and WatchWorkers) whose worker list
 * breaks the shared id limit (proto/wire_limits.h): an id of 300 bytes and
 * an address of 300 bytes. The client must not truncate them into workers
 * it would dial: both entries are refused, no worker is used, and the
 * client ends with STK_UNAVAILABLE saying why ("worker list entry
 * refused: ... (at most 255)") instead of hanging or crashing.
 *
 * usage: test_client_ids <stoker-coordinator> <stoker-worker> [...]
 *        (the binaries are not used: the coordinator is the test itself)
 */
#include <string.h>
#include <time.h>

#include "check.h"
#include "rpc.h"
#include "stoker.pb-c.h"
#include "stoker/client.h"
#include "stoker/version.h"

static char job_text[4096];
static uint64_t job_hash;
static char long_id[301], long_addr[301];

static void fill_workers(Stoker__V1__WorkerInfo *w, Stoker__V1__WorkerInfo **wp) {
  stoker__v1__worker_info__init(&w[0]);
  stoker__v1__worker_info__init(&w[1]);
  w[0].worker_id = long_id, w[0].address = "127.0.0.1:1", w[0].cores = 1;
  w[1].worker_id = "short-id", w[1].address = long_addr, w[1].cores = 1;
  wp[0] = &w[0], wp[1] = &w[1];
}

static void on_join(stk__rpc_call *call, const ProtobufCMessage *q) {
  (void)q;
  Stoker__V1__JobSpec job = STOKER__V1__JOB_SPEC__INIT;
  job.canonical = job_text;
  job.hash = job_hash;
  Stoker__V1__WorkerInfo w[2], *wp[2];
  fill_workers(w, wp);
  Stoker__V1__JoinResponse r = STOKER__V1__JOIN_RESPONSE__INIT;
  r.job = &job;
  r.list_version = 1;
  r.n_workers = 2;
  r.workers = wp;
  stk__rpc_call_reply(call, &r.base);
}

/* The watch sends one list and stays open until the client goes (the
 * server's stop ends it otherwise). */
static int watch_open(stk__rpc_call *call) {
  (void)call;
  return 0;
}

static void watch_message(stk__rpc_call *call, const ProtobufCMessage *q) {
  if (!q) {
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "bad watch");
    return;
  }
  Stoker__V1__WorkerInfo w[2], *wp[2];
  fill_workers(w, wp);
  Stoker__V1__WorkerList l = STOKER__V1__WORKER_LIST__INIT;
  l.version = 1;
  l.n_workers = 2;
  l.workers = wp;
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

int main(void) {
  memset(long_id, 'i', 300), long_id[300] = 0;
  memset(long_addr, 'a', 300), long_addr[300] = 0;
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  CHECK(stk_job_spec_set(&spec, "num_samples", "64", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_set(&spec, "batch_size", "4", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_set(&spec, "world_size", "1", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_set(&spec, "height", "8", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_set(&spec, "width", "8", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_format(&spec, job_text, sizeof(job_text)) < sizeof(job_text));
  job_hash = stk_job_spec_hash(&spec);

  stk__rpc_init();
  stk__rpc_method methods[] = {
      {"/stoker.v1.Coordinator/Join", &stoker__v1__join_request__descriptor, 0, on_join,
       NULL},
      {"/stoker.v1.Coordinator/WatchWorkers", &stoker__v1__watch_request__descriptor, 0,
       NULL, &watch_ops},
      {"/stoker.v1.Coordinator/Finish", &stoker__v1__finish_request__descriptor, 0,
       on_finish, NULL}};
  stk__rpc_server_config sc;
  memset(&sc, 0, sizeof(sc));
  sc.listen = "127.0.0.1:0";
  sc.methods = methods;
  sc.nmethods = 3;
  stk__rpc_server *srv = NULL;
  int port = 0;
  char err[512];
  if (stk__rpc_server_start(&sc, &srv, &port, err, sizeof(err))) {
    fprintf(stderr, "rogue coordinator: %s\n", err);
    return 1;
  }
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = addr;
  cfg.rank = 0;
  cfg.world_size = 1;
  cfg.join_timeout_ms = 1500;
  stk_client *c = NULL;
  int st = stk_client_open(&cfg, &c, err, sizeof(err));
  if (st != STK_OK) {
    /* refusing at open would be as good, if it says why */
    printf("open: %d %s\n", st, err);
    CHECK(strstr(err, "at most 255") != NULL);
  } else {
    stk_batch *b = NULL;
    st = stk_client_next(c, &b);
    printf("next: status %d (%s): %s\n", st, stk_strerror(st), stk_client_error(c));
    CHECK(st == STK_UNAVAILABLE);
    CHECK(strstr(stk_client_error(c), "worker list entry refused") != NULL);
    CHECK(strstr(stk_client_error(c), "of 300 bytes (at most 255)") != NULL);
    stk_stats s;
    memset(&s, 0, sizeof(s));
    stk_client_stats(c, &s);
    CHECK(s.nworkers == 0); /* nothing truncated into a worker entry */
    stk_client_close(c);
  }
  stk__rpc_server_stop(srv, 500);
  stk__rpc_shutdown();
  CHECK_DONE();
}
