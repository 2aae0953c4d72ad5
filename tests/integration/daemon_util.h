/* daemon_util.h - helpers the daemon integration tests share: start a
 * coordinator and workers on 127.0.0.1 port 0 (through --port-file), wait
 * until the workers are registered, raw Join/Finish/Status calls with the
 * rpc layer, and fetching one batch over Worker.Stream with a full check
 * against stk_build_reference. Header-only (static), test code only. */
#ifndef STOKER_TEST_DAEMON_UTIL_H
#define STOKER_TEST_DAEMON_UTIL_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/clock.h"
#include "proc.h"
#include "rpc/rpc.h"
#include "stoker.pb-c.h"
#include "stoker/augment.h"
#include "stoker/version.h"
#include "rpc/wire.h"

static const char *coord_bin, *worker_bin;

/* Every integration test's start: argv[1] and argv[2] are the coordinator
 * and worker binaries (ctest passes them). 0, or 2 (usage) to return from
 * main. */
static inline int du_init(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <stoker-coordinator> <stoker-worker> [...]\n", argv[0]);
    return 2;
  }
  coord_bin = argv[1];
  worker_bin = argv[2];
  stk__rpc_init();
  return 0;
}

/* Spawn the coordinator with the args of `extra` then of `more` (either
 * may be NULL); returns its port or -1. */
static inline int du_start_coordinator2(stk_proc *p, const char *name,
                                        const char *const *extra,
                                        const char *const *more) {
  char pf[600];
  snprintf(pf, sizeof(pf), "%s/%s.port", proc_tmpdir(), name);
  unlink(pf);
  char *argv[64];
  int n = 0;
  argv[n++] = (char *)coord_bin;
  argv[n++] = "--listen";
  argv[n++] = "127.0.0.1:0";
  argv[n++] = "--port-file";
  argv[n++] = pf;
  argv[n++] = "--stats-interval-s";
  argv[n++] = "1";
  for (; extra && *extra && n < 62; extra++) argv[n++] = (char *)*extra;
  for (; more && *more && n < 62; more++) argv[n++] = (char *)*more;
  argv[n] = NULL;
  if (proc_spawn(p, name, argv)) return -1;
  int port = proc_wait_port(p, pf, 10000);
  if (port < 0) proc_dump_log(p);
  return port;
}

/* Spawn the coordinator with extra args; returns its port or -1. */
static inline int du_start_coordinator(stk_proc *p, const char *name,
                                       const char *const *extra) {
  return du_start_coordinator2(p, name, extra, NULL);
}

static inline int du_start_worker(stk_proc *p, const char *name, int coord_port,
                                  const char *const *extra) {
  char pf[600], target[64];
  snprintf(pf, sizeof(pf), "%s/%s.port", proc_tmpdir(), name);
  snprintf(target, sizeof(target), "127.0.0.1:%d", coord_port);
  unlink(pf);
  char *argv[64];
  int n = 0;
  argv[n++] = (char *)worker_bin;
  argv[n++] = "--coordinator";
  argv[n++] = target;
  argv[n++] = "--port-file";
  argv[n++] = pf;
  argv[n++] = "--stats-interval-s";
  argv[n++] = "1";
  for (; extra && *extra && n < 62; extra++) argv[n++] = (char *)*extra;
  argv[n] = NULL;
  if (proc_spawn(p, name, argv)) return -1;
  int port = proc_wait_port(p, pf, 10000);
  if (port < 0) proc_dump_log(p);
  return port;
}

/* Wait (bounded) until the worker p has registered with its coordinator
 * and holds the job: before that its port is open but every stream is
 * refused UNAVAILABLE ("no job yet"), and a load opened at once only
 * tests that refusal. 0 or -1. */
static inline int du_wait_registered(const stk_proc *p, int timeout_ms) {
  return proc_wait_log(p, "registered with coordinator", 1, timeout_ms);
}

static inline stk__rpc_channel *du_channel_token(int port, const char *token) {
  char target[64];
  snprintf(target, sizeof(target), "127.0.0.1:%d", port);
  stk__rpc_channel *ch = NULL;
  if (stk__rpc_channel_open(target, 0, token, NULL, &ch)) return NULL;
  return ch;
}

static inline stk__rpc_channel *du_channel(int port) {
  return du_channel_token(port, NULL);
}

/* Status; caller frees. NULL on error. */
static inline Stoker__V1__StatusResponse *du_status(stk__rpc_channel *ch) {
  Stoker__V1__StatusRequest q = STOKER__V1__STATUS_REQUEST__INIT;
  ProtobufCMessage *r = NULL;
  char det[256];
  int code = stk__rpc_unary(ch, "/stoker.v1.Coordinator/Status", &q.base,
                            &stoker__v1__status_response__descriptor, &r, 5000, det,
                            sizeof(det));
  return code == 0 ? (Stoker__V1__StatusResponse *)r : NULL;
}

/* Wait until the coordinator's published worker list (what Join and
 * watches give; Status shows the live list, published from it within
 * a quarter second) has n workers: a plain watch (no re-announcement),
 * read until a list has them. 0 or -1. */
static inline int du_wait_workers(stk__rpc_channel *ch, size_t n, int timeout_ms) {
  int64_t end = stk__now_ms() + timeout_ms;
  while (stk__now_ms() < end) {
    stk__rpc_stream *s = NULL;
    if (stk__rpc_stream_open(ch, "/stoker.v1.Coordinator/WatchWorkers", timeout_ms, &s) ==
        0) {
      Stoker__V1__WatchRequest q = STOKER__V1__WATCH_REQUEST__INIT;
      int ok = stk__rpc_stream_send_msg(s, &q.base) == 0;
      while (ok) {
        int left = (int)(end - stk__now_ms());
        grpc_byte_buffer *bb = NULL;
        if (left <= 0 || stk__rpc_stream_recv(s, &bb, left) != 1) break;
        ProtobufCMessage *m =
            stk__rpc_unpack(&stoker__v1__worker_list__descriptor, bb, 16u << 20);
        grpc_byte_buffer_destroy(bb);
        size_t have = m ? ((Stoker__V1__WorkerList *)m)->n_workers : 0;
        if (m) protobuf_c_message_free_unpacked(m, NULL);
        if (have >= n) {
          stk__rpc_stream_destroy(s);
          return 0;
        }
      }
      stk__rpc_stream_destroy(s);
    }
    stk__sleep_ms(50);
  }
  return -1;
}

/* Join; the gRPC status code. On OK, *resp is set (caller frees). */
static inline int du_join(stk__rpc_channel *ch, uint32_t rank, uint32_t world,
                          uint32_t proto, uint64_t expect,
                          Stoker__V1__JoinResponse **resp, char *det, size_t dlen) {
  Stoker__V1__JoinRequest q = STOKER__V1__JOIN_REQUEST__INIT;
  q.rank = rank;
  q.world_size = world;
  q.client_id = "test";
  q.protocol_version = proto;
  q.expect_job_hash = expect;
  ProtobufCMessage *r = NULL;
  int code = stk__rpc_unary(ch, "/stoker.v1.Coordinator/Join", &q.base,
                            &stoker__v1__join_response__descriptor, &r, 5000, det, dlen);
  *resp = (Stoker__V1__JoinResponse *)r;
  return code;
}

static inline int du_finish(stk__rpc_channel *ch, uint32_t rank, int shutdown_job,
                            uint32_t *nfinished, char *det, size_t dlen) {
  Stoker__V1__FinishRequest q = STOKER__V1__FINISH_REQUEST__INIT;
  q.rank = rank;
  q.shutdown_job = shutdown_job;
  ProtobufCMessage *r = NULL;
  int code =
      stk__rpc_unary(ch, "/stoker.v1.Coordinator/Finish", &q.base,
                     &stoker__v1__finish_response__descriptor, &r, 5000, det, dlen);
  if (r) {
    if (nfinished) *nfinished = ((Stoker__V1__FinishResponse *)r)->ranks_finished;
    protobuf_c_message_free_unpacked(r, NULL);
  }
  return code;
}

/* Receive one whole batch (header + chunks) from s into a new buffer and
 * check it: address, layout, sample ids, crc32c, and every byte against
 * stk_build_reference. 0 when it all holds. */
static inline int du_recv_batch_any(stk__rpc_stream *s, const stk_job_spec *spec,
                                    uint64_t epoch, uint32_t rank, uint64_t step,
                                    uint64_t *any_step);
static inline int du_recv_batch_impl(stk__rpc_stream *s, const stk_job_spec *spec,
                                     uint64_t epoch, uint32_t rank, uint64_t step,
                                     uint64_t *any_step, int end_ok);
static inline int du_recv_batch_checked(stk__rpc_stream *s, const stk_job_spec *spec,
                                        uint64_t epoch, uint32_t rank, uint64_t step) {
  return du_recv_batch_any(s, spec, epoch, rank, step, NULL);
}

/* As du_recv_batch_checked; with any_step non-NULL, the batch may be any
 * step (batches come in completion order): it is checked against the
 * reference of the step its header names, stored in *any_step. */
static inline int du_recv_batch_any(stk__rpc_stream *s, const stk_job_spec *spec,
                                    uint64_t epoch, uint32_t rank, uint64_t step,
                                    uint64_t *any_step) {
  return du_recv_batch_impl(s, spec, epoch, rank, step, any_step, 0);
}

/* As du_recv_batch_any(..., any_step), but the stream may end (or fail)
 * before the batch is whole: then 1, and no check fails. 0 for a whole
 * batch that checks out, -1 for anything else (a check failed). */
static inline int du_recv_batch_or_end(stk__rpc_stream *s, const stk_job_spec *spec,
                                       uint64_t epoch, uint32_t rank,
                                       uint64_t *any_step) {
  return du_recv_batch_impl(s, spec, epoch, rank, 0, any_step, 1);
}

/* A stream message for du_recv_batch_impl: 1 with *bb, 0 when the stream
 * ended and end_ok (*ended set), -1 otherwise (a check failed). */
static inline int du_recv_msg(stk__rpc_stream *s, grpc_byte_buffer **bb, int end_ok,
                              int *ended) {
  int r = stk__rpc_stream_recv(s, bb, 10000);
  if (r == 1) return 1;
  if (end_ok && r != -2) { /* ended or failed; a timeout is a hang */
    *ended = 1;
    return 0;
  }
  CHECK(r == 1);
  return -1;
}

static inline int du_recv_batch_impl(stk__rpc_stream *s, const stk_job_spec *spec,
                                     uint64_t epoch, uint32_t rank, uint64_t step,
                                     uint64_t *any_step, int end_ok) {
  stk_batch_layout L;
  if (stk_batch_layout_of(spec, &L)) return -1;
  uint8_t *got = calloc(1, L.total_bytes), *ref = calloc(1, L.total_bytes);
  int ok = got && ref, ended = 0;
  grpc_byte_buffer *bb = NULL;
  stk__wire_msg m;
  if (ok && du_recv_msg(s, &bb, end_ok, &ended) != 1) ok = 0;
  if (ok) {
    CHECK(stk__wire_decode(bb, 32u << 20, &m) == 0);
    const Stoker__V1__BatchHeader *h = m.msg ? m.msg->header : NULL;
    CHECK(h != NULL);
    if (!h) ok = 0;
    if (h && any_step) {
      step = h->step;
      *any_step = step;
      CHECK(step < stk_steps_per_epoch(spec, spec->num_samples));
    }
    if (h) {
      CHECK_EQ_U64(h->epoch, epoch);
      CHECK_EQ_U64(h->rank, rank);
      CHECK_EQ_U64(h->step, step);
      CHECK_EQ_U64(h->total_bytes, L.total_bytes);
      CHECK_EQ_U64(h->n_tensors, L.ntensors);
      CHECK_EQ_U64(h->n_sample_indices, spec->batch_size);
      static const char *const dt[] = {"", "uint8", "float32", "bfloat16", "int64"};
      for (size_t i = 0; i < h->n_tensors && i < L.ntensors; i++) {
        CHECK(!strcmp(h->tensors[i]->name, L.tensors[i].name));
        CHECK(!strcmp(h->tensors[i]->dtype, dt[L.tensors[i].dtype]));
        CHECK_EQ_U64(h->tensors[i]->offset, L.tensors[i].offset);
        CHECK_EQ_U64(h->tensors[i]->nbytes, L.tensors[i].nbytes);
        CHECK_EQ_U64(h->tensors[i]->n_shape, L.tensors[i].ndim);
      }
      uint64_t have = 0;
      uint32_t crc = h->crc32c;
      uint64_t *idx = malloc(h->n_sample_indices * sizeof(uint64_t) + 1);
      if (idx && h->n_sample_indices)
        memcpy(idx, h->sample_indices, h->n_sample_indices * 8);
      size_t nidx = h->n_sample_indices;
      stk__wire_msg_free(&m);
      grpc_byte_buffer_destroy(bb);
      bb = NULL;
      while (ok && have < L.total_bytes) {
        if (du_recv_msg(s, &bb, end_ok, &ended) != 1) {
          ok = 0;
          break;
        }
        CHECK(stk__wire_decode(bb, 32u << 20, &m) == 0);
        CHECK(m.is_chunk);
        CHECK_EQ_U64(m.offset, have); /* in order, never interleaved */
        if (!m.is_chunk || m.offset != have || m.offset + m.len > L.total_bytes) {
          ok = 0;
        } else {
          stk__wire_copy_chunk(bb, &m, got + m.offset);
          have += m.len;
        }
        stk__wire_msg_free(&m);
        grpc_byte_buffer_destroy(bb);
        bb = NULL;
      }
      if (ok) {
        CHECK(stk_crc32c(0, got, L.total_bytes) == crc);
        char err[256] = "";
        int rc = stk_build_reference(spec, NULL, epoch, rank, step, ref, L.total_bytes,
                                     err, sizeof(err));
        CHECK(rc == 0);
        CHECK(memcmp(got, ref, L.total_bytes) == 0);
        const uint8_t *ti = got + L.tensors[STK_TENSOR_INDEX].offset;
        for (size_t j = 0; idx && j < nidx; j++) {
          int64_t v;
          memcpy(&v, ti + 8 * j, 8);
          CHECK_EQ_U64(idx[j], (uint64_t)v);
        }
        if (rc || memcmp(got, ref, L.total_bytes) ||
            stk_crc32c(0, got, L.total_bytes) != crc)
          ok = 0;
      }
      free(idx);
    }
  }
  if (bb) grpc_byte_buffer_destroy(bb);
  free(got);
  free(ref);
  return ok ? 0 : ended ? 1 : -1;
}

static inline int du_send_request(stk__rpc_stream *s, uint64_t hash, uint64_t epoch,
                                  uint32_t rank, uint64_t step) {
  Stoker__V1__BatchRequest q = STOKER__V1__BATCH_REQUEST__INIT;
  q.job_hash = hash;
  q.epoch = epoch;
  q.rank = rank;
  q.step = step;
  return stk__rpc_stream_send_msg(s, &q.base);
}

/* Drain a stream to its end and return its status code. */
static inline int du_stream_end(stk__rpc_stream *s, char *det, size_t dlen) {
  for (int i = 0; i < 100000; i++) {
    grpc_byte_buffer *bb = NULL;
    int r = stk__rpc_stream_recv(s, &bb, 10000);
    if (bb) grpc_byte_buffer_destroy(bb);
    if (r != 1) break;
  }
  return stk__rpc_stream_status(s, 10000, det, dlen);
}

#endif
