/* rogue_util.h - an in-process worker for libstoker tests: a gRPC server
 * speaking Worker.Stream that builds each requested batch with
 * stk_build_reference and sends it as one message (header + whole
 * payload), and, per rank, misbehaves on purpose: a wrong crc32c on every
 * batch, or a refusal of the stream with INVALID_ARGUMENT or
 * FAILED_PRECONDITION at the first request. It can register with a real
 * stoker-coordinator (a WorkerSession: hello, ack, hello with the dataset)
 * so the coordinator lists it beside real workers. It counts what it did,
 * per rank, for the test's assertions.
 *
 * One rogue per test process (the rpc layer's handlers take no user
 * pointer), any number of servers sharing it. Header-only, test code only.
 */
#ifndef STOKER_TEST_ROGUE_UTIL_H
#define STOKER_TEST_ROGUE_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "rpc/rpc.h"
#include "stoker.pb-c.h"
#include "stoker/augment.h"
#include "stoker/client.h"
#include "stoker/version.h"

enum { ROGUE_GOOD, ROGUE_BAD_CRC, ROGUE_INVALID_ARGUMENT, ROGUE_FAILED_PRECONDITION };
#define ROGUE_MAX_RANKS 8

static struct {
  stk_job_spec spec; /* set before the first stream (rogue_set_job) */
  uint64_t hash;
  stk_batch_layout layout;
  int mode[ROGUE_MAX_RANKS]; /* ROGUE_* per rank; ROGUE_GOOD by default */
  /* counters, read with __atomic loads */
  int streams[ROGUE_MAX_RANKS];  /* streams whose first request was rank r */
  int refused[ROGUE_MAX_RANKS];  /* streams refused (INVALID_ARGUMENT, ...) */
  int bad_sent[ROGUE_MAX_RANKS]; /* batches sent with a wrong crc32c */
  int sent[ROGUE_MAX_RANKS];     /* batches sent with the right one */
  int opened, closed;            /* Worker.Stream calls started / ended */
  int job_ready;                 /* rogue_set_job published the job */
} R;

static inline int rogue_get(const int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void rogue_inc(int *p) { __atomic_add_fetch(p, 1, __ATOMIC_ACQ_REL); }

/* The job the rogue serves (canonical text as the coordinator sends it). */
static inline int rogue_set_job(const char *canonical, uint64_t hash) {
  stk_job_spec_defaults(&R.spec);
  if (stk_job_spec_parse(&R.spec, canonical, NULL, 0) != STK_OK) return -1;
  if (stk_batch_layout_of(&R.spec, &R.layout) != STK_OK) return -1;
  R.hash = hash;
  /* published: the serving threads read the job only after this (clients
   * learn the rogue's address only once it registered, through the
   * coordinator's process: an order TSan cannot see) */
  __atomic_store_n(&R.job_ready, 1, __ATOMIC_RELEASE);
  return 0;
}

/* A synthetic job of 8x8 images in batches of 4, with num_samples,
 * world_size and synthetic_cost_us (NULL: none) as text, made the rogue's
 * job; its canonical text into job_text (len bytes) and its hash into
 * *hash, for the test's coordinator. 0, or -1 (a value refused, the text
 * too long). */
static inline int rogue_tiny_job(const char *num_samples, const char *world_size,
                                 const char *cost_us, char *job_text, size_t len,
                                 uint64_t *hash) {
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  const char *kv[][2] = {{"num_samples", num_samples},
                         {"batch_size", "4"},
                         {"world_size", world_size},
                         {"height", "8"},
                         {"width", "8"},
                         {"synthetic_cost_us", cost_us}};
  for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
    if (kv[i][1] && stk_job_spec_set(&spec, kv[i][0], kv[i][1], NULL, 0) != STK_OK)
      return -1;
  if (stk_job_spec_format(&spec, job_text, len) >= len) return -1;
  *hash = stk_job_spec_hash(&spec);
  return rogue_set_job(job_text, *hash);
}

/* A client of rank 0 of world on the coordinator at 127.0.0.1:coord_port
 * (prefetch requests; working_set and working_set_max, 0 = defaults; a
 * 10 s join timeout). The client, or NULL with why in err (said on
 * stderr too). */
static inline stk_client *rogue_open_client(int coord_port, uint32_t world,
                                            uint32_t prefetch, uint32_t working_set,
                                            uint32_t working_set_max, char *err,
                                            size_t errlen) {
  char caddr[64];
  snprintf(caddr, sizeof(caddr), "127.0.0.1:%d", coord_port);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = caddr;
  cfg.rank = 0;
  cfg.world_size = world;
  cfg.prefetch = prefetch;
  cfg.working_set = working_set;
  cfg.working_set_max = working_set_max;
  cfg.join_timeout_ms = 10000;
  stk_client *c = NULL;
  if (stk_client_open(&cfg, &c, err, errlen) != STK_OK) {
    fprintf(stderr, "open: %s\n", err);
    return NULL;
  }
  return c;
}

/* Take c's next batch and check that it is step `step` of the rogue's job
 * (rank 0, epoch 0) and, when step % every == 0, that it equals the
 * reference built in ref (len bytes: the batch's size). 0 or -1 (said on
 * stderr when next fails). */
static inline int rogue_take(stk_client *c, uint64_t step, unsigned every,
                             unsigned char *ref, size_t len) {
  stk_batch *b = NULL;
  int st = stk_client_next(c, &b);
  if (st != STK_OK) {
    fprintf(stderr, "step %llu: %s: %s\n", (unsigned long long)step, stk_strerror(st),
            stk_client_error(c));
    return -1;
  }
  size_t n = 0;
  const void *p = stk_batch_payload(b, &n);
  char err[256];
  int ok = stk_batch_step(b) == step && n == len &&
           (step % every != 0 || (stk_build_reference(&R.spec, NULL, 0, 0, step, ref, len,
                                                      err, sizeof(err)) == STK_OK &&
                                  memcmp(p, ref, len) == 0));
  stk_batch_release(b);
  return ok ? 0 : -1;
}

/* Send batch (epoch, rank, step) built in buf as one BatchResponse. */
static inline int rogue_send_batch(stk__rpc_call *call, const Stoker__V1__BatchRequest *q,
                                   unsigned char *buf, int bad_crc) {
  const stk_batch_layout *L = &R.layout;
  char err[256];
  if (stk_build_reference(&R.spec, NULL, q->epoch, q->rank, q->step, buf, L->total_bytes,
                          err, sizeof(err)) != STK_OK)
    return -1;
  static const char *const dt[] = {"", "uint8", "float32", "bfloat16", "int64"};
  Stoker__V1__TensorDesc td[STK_MAX_TENSORS], *tdp[STK_MAX_TENSORS];
  uint64_t shapes[STK_MAX_TENSORS][STK_MAX_DIMS];
  for (uint32_t i = 0; i < L->ntensors; i++) {
    stoker__v1__tensor_desc__init(&td[i]);
    td[i].name = (char *)L->tensors[i].name;
    td[i].dtype = (char *)dt[L->tensors[i].dtype];
    for (uint32_t k = 0; k < L->tensors[i].ndim; k++)
      shapes[i][k] = L->tensors[i].shape[k];
    td[i].n_shape = L->tensors[i].ndim;
    td[i].shape = shapes[i];
    td[i].offset = L->tensors[i].offset;
    td[i].nbytes = L->tensors[i].nbytes;
    tdp[i] = &td[i];
  }
  Stoker__V1__BatchHeader h = STOKER__V1__BATCH_HEADER__INIT;
  h.epoch = q->epoch;
  h.rank = q->rank;
  h.step = q->step;
  h.n_tensors = L->ntensors;
  h.tensors = tdp;
  h.crc32c = stk_crc32c(0, buf, L->total_bytes) ^ (bad_crc ? 0x5a5a5a5au : 0);
  h.total_bytes = L->total_bytes;
  Stoker__V1__BatchResponse r = STOKER__V1__BATCH_RESPONSE__INIT;
  r.header = &h;
  r.chunk_offset = 0;
  r.chunk.data = buf;
  r.chunk.len = L->total_bytes;
  return stk__rpc_call_send_msg(call, &r.base);
}

/* One Worker.Stream call of the rogue: its batch buffer and whether the
 * first request came yet. */
typedef struct rogue_call {
  unsigned char *buf; /* NULL when it could not be had: every send fails */
  int first;
} rogue_call;

/* Worker.Stream: answer each request in order, as the rank's mode says
 * (stream callbacks: open, message, half_close, closed). */
static inline int rogue_stream_open(stk__rpc_call *call) {
  rogue_inc(&R.opened);
  if (!rogue_get(&R.job_ready)) {
    stk__rpc_call_finish(call, GRPC_STATUS_UNAVAILABLE, "rogue: no job yet");
    rogue_inc(&R.closed); /* no closed callback comes */
    return -1;
  }
  rogue_call *x = calloc(1, sizeof(*x));
  if (!x) {
    stk__rpc_call_finish(call, GRPC_STATUS_CANCELLED, "send failed");
    rogue_inc(&R.closed); /* no closed callback comes */
    return -1;
  }
  x->buf = malloc(R.layout.total_bytes ? R.layout.total_bytes : 1);
  x->first = 1;
  stk__rpc_call_set_data(call, x);
  return 0;
}

static inline void rogue_stream_message(stk__rpc_call *call, const ProtobufCMessage *m) {
  rogue_call *x = stk__rpc_call_data(call);
  const Stoker__V1__BatchRequest *q = (const Stoker__V1__BatchRequest *)m;
  if (!q) {
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "not a BatchRequest");
    return;
  }
  grpc_status_code code = GRPC_STATUS_OK;
  const char *why = "";
  uint32_t rank = q->rank < ROGUE_MAX_RANKS ? q->rank : 0;
  if (x->first) rogue_inc(&R.streams[rank]);
  x->first = 0;
  int mode = R.mode[rank];
  int bad = 0;
  if (q->job_hash != R.hash) {
    code = GRPC_STATUS_FAILED_PRECONDITION, why = "rogue: not this job", bad = 1;
  } else if (mode == ROGUE_INVALID_ARGUMENT) {
    code = GRPC_STATUS_INVALID_ARGUMENT, why = "rogue: your request is invalid", bad = 1;
  } else if (mode == ROGUE_FAILED_PRECONDITION) {
    code = GRPC_STATUS_FAILED_PRECONDITION, why = "rogue: another job", bad = 1;
  } else if (!x->buf || rogue_send_batch(call, q, x->buf, mode == ROGUE_BAD_CRC)) {
    code = GRPC_STATUS_CANCELLED, why = "send failed", bad = 1;
  } else {
    rogue_inc(mode == ROGUE_BAD_CRC ? &R.bad_sent[rank] : &R.sent[rank]);
  }
  if (bad && code != GRPC_STATUS_CANCELLED) rogue_inc(&R.refused[rank]);
  if (bad) stk__rpc_call_finish(call, code, why);
}

/* The client sent its last request: the stream ends OK once the batches
 * went out. */
static inline void rogue_stream_half_close(stk__rpc_call *call) {
  stk__rpc_call_finish(call, GRPC_STATUS_OK, "");
}

static inline void rogue_stream_closed(stk__rpc_call *call) {
  rogue_call *x = stk__rpc_call_data(call);
  if (x) free(x->buf);
  free(x);
  rogue_inc(&R.closed);
}

/* Start a rogue Worker.Stream server on 127.0.0.1; its port, or -1. */
static inline int rogue_start(stk__rpc_server **srv) {
  static const stk__rpc_stream_ops ops = {rogue_stream_open, rogue_stream_message,
                                          rogue_stream_half_close, NULL,
                                          rogue_stream_closed};
  static const stk__rpc_method methods[] = {{"/stoker.v1.Worker/Stream",
                                             &stoker__v1__batch_request__descriptor, 0,
                                             NULL, &ops}};
  stk__rpc_server_config sc;
  memset(&sc, 0, sizeof(sc));
  sc.listen = "127.0.0.1:0";
  sc.methods = methods;
  sc.nmethods = 1;
  int port = -1;
  char err[256];
  if (stk__rpc_server_start(&sc, srv, &port, err, sizeof(err))) {
    fprintf(stderr, "rogue worker: %s\n", err);
    return -1;
  }
  return port;
}

static inline int rogue_hello(stk__rpc_stream *s, const char *id, const char *address,
                              uint64_t hash, uint64_t size, uint64_t fp) {
  Stoker__V1__WorkerInfo info = STOKER__V1__WORKER_INFO__INIT;
  info.worker_id = (char *)id;
  info.address = (char *)address;
  info.cores = 1;
  Stoker__V1__Register reg = STOKER__V1__REGISTER__INIT;
  reg.worker = &info;
  reg.protocol_version = STK_PROTOCOL_VERSION;
  reg.job_hash = hash;
  reg.dataset_size = size;
  reg.dataset_fingerprint = fp;
  Stoker__V1__WorkerMessage m = STOKER__V1__WORKER_MESSAGE__INIT;
  m.kind_case = STOKER__V1__WORKER_MESSAGE__KIND_HELLO;
  m.hello = &reg;
  return stk__rpc_stream_send_msg(s, &m.base);
}

/* One registration attempt (see rogue_register): 0, or -1 with why. */
static inline int rogue_register_once(stk__rpc_channel *coord, const char *id,
                                      const char *address, int timeout_ms,
                                      stk__rpc_stream **out, const char **why) {
  *out = NULL;
  stk__rpc_stream *s = NULL;
  *why = "cannot open the session";
  if (stk__rpc_stream_open(coord, "/stoker.v1.Coordinator/WorkerSession", 0, &s))
    return -1;
  int ok = rogue_hello(s, id, address, 0, 0, 0) == 0;
  if (!ok) *why = "first hello not sent";
  grpc_byte_buffer *bb = NULL;
  if (ok && !(ok = stk__rpc_stream_recv(s, &bb, timeout_ms) == 1)) *why = "no ack";
  Stoker__V1__CoordinatorCommand *c =
      ok ? (Stoker__V1__CoordinatorCommand *)stk__rpc_unpack(
               &stoker__v1__coordinator_command__descriptor, bb, 1 << 20)
         : NULL;
  if (bb) grpc_byte_buffer_destroy(bb);
  if (ok && !(ok = c && c->kind_case == STOKER__V1__COORDINATOR_COMMAND__KIND_ACK &&
                   c->ack->job &&
                   rogue_set_job(c->ack->job->canonical, c->ack->job->hash) == 0))
    *why = "the ack has no usable job";
  if (c) protobuf_c_message_free_unpacked(&c->base, NULL);
  stk_dataset *ds = NULL;
  if (ok && !(ok = stk_dataset_open(&R.spec, NULL, NULL, &ds, NULL, 0) == STK_OK))
    *why = "cannot open the synthetic dataset";
  if (ok && !(ok = rogue_hello(s, id, address, R.hash, stk_dataset_size(ds),
                               stk_dataset_fingerprint(ds)) == 0))
    *why = "second hello not sent";
  stk_dataset_close(ds);
  if (!ok) {
    stk__rpc_stream_destroy(s);
    return -1;
  }
  *out = s;
  return 0;
}

/* Register the rogue at a real coordinator (channel coord) as worker `id`
 * serving Worker.Stream on 127.0.0.1:port: first hello, the ack with the
 * job (which the rogue then serves), second hello with the synthetic
 * dataset's size and fingerprint. Tried again until timeout_ms has passed
 * (a loaded machine may be slow to answer). The open session in *out
 * (destroy it to leave the list; run the coordinator with enough
 * --heartbeat-misses, the rogue sends no heartbeats). 0, or -1 with a
 * message on stderr. */
static inline int rogue_register(stk__rpc_channel *coord, const char *id, int port,
                                 int timeout_ms, stk__rpc_stream **out) {
  char address[64];
  snprintf(address, sizeof(address), "127.0.0.1:%d", port);
  const char *why = "";
  for (int64_t end = stk__now_ms() + timeout_ms;;) {
    int64_t left = end - stk__now_ms();
    if (rogue_register_once(coord, id, address, left > 1000 ? (int)left : 1000, out,
                            &why) == 0)
      return 0;
    if (stk__now_ms() >= end) break;
    stk__sleep_ms(100); /* backoff before the next attempt */
  }
  fprintf(stderr, "rogue worker %s: registration failed: %s\n", id, why);
  return -1;
}

#endif
