/* test_client_old_worker.c - elastic resume against a worker that predates
 * it: a small gRPC server in this process plays the coordinator (Join,
 * WatchWorkers, Finish: fakecoord.h) and an old worker (Worker.Stream
 * answering every request with a header that lacks sample_offset, as a
 * worker that does not know BatchRequest field 5 would). A client resumed with another
 * world size (a W=4 state into this W=3 job: sample offset 4) must end
 * with STK_PROTOCOL naming the sample offset, not hang or deliver the
 * wrong samples.
 *
 * usage: test_client_old_worker (no binaries: both daemons are the test)
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "fakecoord.h"
#include "stoker.pb-c.h"
#include "stoker/client.h"
#include "stoker/version.h"

#define JOB_FMT                                                        \
  "source = synthetic\nnum_samples = 64\nbatch_size = 4\nheight = 8\n" \
  "width = 8\ndrop_last = false\nworld_size = %d\n"

static stk_batch_layout layout; /* written before the rpc layer starts */

/* The old worker: every request gets a well-formed header for its
 * (epoch, rank, step), without the sample offset. The stream ends
 * CANCELLED when a request does not parse, a send fails or the client
 * half-closes. */
static int stream_open(stk__rpc_call *call) {
  (void)call;
  return 0;
}

static void stream_message(stk__rpc_call *call, const ProtobufCMessage *m) {
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
  char job_text[4096];
  CHECK(stk_job_spec_format(&spec, job_text, sizeof job_text) < sizeof job_text);
  fakecoord_set_job(job_text, stk_job_spec_hash(&spec));
  fakecoord_resend_known(1);
  CHECK(stk_batch_layout_of(&spec, &layout) == STK_OK);

  /* One server plays both: the coordinator (Join answers "not ready"
   * until its list names the worker, this server's own port) and the old
   * worker. */
  stk__rpc_init();
  stk__rpc_method worker[] = {{"/stoker.v1.Worker/Stream",
                               &stoker__v1__batch_request__descriptor, 0, NULL,
                               &stream_ops}};
  stk__rpc_server *srv = NULL;
  int port = 0;
  if (fakecoord_start(worker, 1, &srv, &port, err, sizeof err)) {
    fprintf(stderr, "rogue server: %s\n", err);
    return 1;
  }
  char worker_addr[64];
  snprintf(worker_addr, sizeof worker_addr, "127.0.0.1:%d", port);
  const char *id = "old-worker", *addr = worker_addr;
  fakecoord_publish(1, &id, &addr);
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
