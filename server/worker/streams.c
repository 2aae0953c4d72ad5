/* streams.c - Worker.Stream, the RPC that serves batches: each
 * BatchRequest (a credit) is checked (msgcheck.c) and queued on the
 * stream's scheduler queue (fairsched.c); each finished batch goes out whole,
 * a header message then zero-copy chunks of the batch buffer (wire.c), in
 * completion order. An invalid request ends only its stream, with a gRPC
 * status. Owns the per-stream state (wstream); reads the job in W once
 * current_sched() said it is loaded. Must not trust the requests.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon_log.h"
#include "msgcheck.h"
#include "rpc/wire.h"
#include "worker.h"

/* Event driven (rpc/include/rpc/rpc.h, "Server"): a request arrives -> validate and
 * queue it (stream_message); a batch is built -> the scheduler's ready
 * hook queues its header and chunks on the call at once (pump); the
 * call's send queue drained -> the batch is released and the next one
 * goes (stream_drained). One batch in flight per stream, so the messages
 * of two batches never interleave. A send the client does not take within
 * --send-stall-s cancels the stream in the rpc layer (its chunks go back
 * to the pool), and stream_closed gives back the rest.
 */

typedef struct wstream {
  stk__rpc_call *call; /* valid until stream_closed (ended) */
  fairsched_stream *st;
  pthread_mutex_t mu;
  int ended;           /* stream_closed ran: never touch call again */
  int over;            /* a status was given */
  int bad;             /* ended by an invalid request */
  fairsched_done *cur; /* the batch being sent */
  uint64_t batches, bytes;
} wstream;

/* The messages of one batch: the header, then its payload in chunks that
 * point into the batch buffer (one buffer reference each). 0 with *n, or
 * -1 (everything made so far destroyed). */
static int batch_messages(fairsched_done *d, grpc_byte_buffer **v, size_t max,
                          size_t *n) {
  const stk_batch_layout *L = d->u8 ? &W.layout8 : &W.layout;
  *n = 0;
  Stoker__V1__BatchHeader h = STOKER__V1__BATCH_HEADER__INIT;
  h.epoch = d->epoch;
  h.rank = d->rank;
  h.step = d->step;
  h.sample_offset = d->offset;
  h.n_tensors = L->ntensors;
  h.tensors = d->u8 ? W.td8.ptr : W.td.ptr;
  h.n_sample_indices = W.spec.batch_size;
  h.sample_indices = d->indices;
  h.crc32c = d->crc32c;
  h.total_bytes = L->total_bytes;
  h.substituted = d->substituted;
  Stoker__V1__BatchResponse r = STOKER__V1__BATCH_RESPONSE__INIT;
  r.header = &h;
  v[(*n)++] = stk__rpc_pack(&r.base);
  if (!v[0]) goto fail;
  uint64_t total = L->total_bytes, chunk = (uint64_t)opt.chunk_bytes;
  for (uint64_t off = 0; off < total; off += chunk) {
    size_t len = (size_t)(total - off < chunk ? total - off : chunk);
    if (*n >= max) goto fail;
    fairsched_buf_ref(d->buf);
    grpc_byte_buffer *bb =
        stk__wire_chunk(off, d->data + off, len, fairsched_buf_unref, d->buf);
    if (!bb) {
      fairsched_buf_unref(d->buf);
      goto fail;
    }
    v[(*n)++] = bb;
  }
  return 0;
fail:
  for (size_t i = 0; i < *n; i++)
    if (v[i]) grpc_byte_buffer_destroy(v[i]);
  *n = 0;
  return -1;
}

/* End the stream with a status (under x->mu). */
static void end_locked(wstream *x, grpc_status_code code, const char *msg, int abort) {
  x->over = 1;
  if (abort) stk__rpc_call_abort(x->call, code, msg);
  else stk__rpc_call_finish(x->call, code, msg);
}

/* Send the next finished batch unless one is in flight, or end the stream
 * when the scheduler says so. Any thread; never blocks. */
static void pump(wstream *x) {
  pthread_mutex_lock(&x->mu);
  while (!x->ended && !x->over && !x->cur) {
    int why;
    fairsched_done *d = fairsched_stream_poll(x->st, &why);
    if (!d) {
      if (why == SCHED_END_DONE) end_locked(x, GRPC_STATUS_OK, "", 0);
      else if (why == SCHED_END_DRAINED)
        end_locked(x, GRPC_STATUS_UNAVAILABLE, "worker is draining: ask another worker",
                   0);
      else if (why == SCHED_END_DEAD) /* a no-op when the call already ended; else
                                         the scheduler gave up on it (out of memory) */
        end_locked(x, GRPC_STATUS_RESOURCE_EXHAUSTED,
                   "worker out of memory: ask another worker", 1);
      break;
    }
    if (d->status) {
      /* a user-code failure fails the job (ABORTED, "the job failed: ...",
       * which the client takes as the job's end); anything else this
       * stream only */
      end_locked(x,
                 d->status == STK_USER_CODE ? GRPC_STATUS_ABORTED : GRPC_STATUS_INTERNAL,
                 d->err, 1);
      fairsched_stream_sent(x->st, d, 0);
      fairsched_stream_kill(x->st);
      break;
    }
    size_t max = 2 + (size_t)(W.layout.total_bytes / (uint64_t)opt.chunk_bytes);
    grpc_byte_buffer *stackv[64], **v = max <= 64 ? stackv : calloc(max, sizeof(*v));
    size_t n = 0;
    int rc = v ? batch_messages(d, v, max, &n) : -1;
    if (!rc) rc = stk__rpc_call_sendv(x->call, v, n);
    if (v != stackv) free(v);
    if (rc) {
      fairsched_stream_sent(x->st, d, 0);
      fairsched_stream_kill(x->st);
      end_locked(x, GRPC_STATUS_RESOURCE_EXHAUSTED, "worker out of memory", 1);
      break;
    }
    x->cur = d;
  }
  pthread_mutex_unlock(&x->mu);
}

static void stream_ready(void *arg) { pump(arg); }

static void stream_released(void *arg) {
  wstream *x = arg;
  pthread_mutex_destroy(&x->mu);
  free(x);
}

/* fairsched_reap: end the stream if its send has waited wait_ms (a client that
 * stopped reading holds a buffer another stream waits for). The client,
 * if it reads after all, asks again. */
static int stream_stalled(void *arg, int64_t now_ms, int wait_ms) {
  wstream *x = arg;
  int ended = 0;
  pthread_mutex_lock(&x->mu);
  if (!x->ended && !x->over && stk__rpc_call_send_wait_ms(x->call, now_ms) >= wait_ms) {
    end_locked(x, GRPC_STATUS_UNAVAILABLE,
               "the client stopped reading while other streams waited for a batch "
               "buffer; stream cancelled, ask again",
               1);
    ended = 1;
  }
  pthread_mutex_unlock(&x->mu);
  return ended;
}

static const fairsched_stream_hooks stream_hooks = {stream_ready, stream_released,
                                                    stream_stalled};

static int stream_open(stk__rpc_call *call) {
  sched *s = current_sched();
  if (!s) {
    stk__rpc_call_finish(call, GRPC_STATUS_UNAVAILABLE,
                         "worker has no job yet (not registered with its coordinator)");
    return -1;
  }
  wstream *x = calloc(1, sizeof(*x));
  if (!x) {
    stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  x->call = call;
  pthread_mutex_init(&x->mu, NULL);
  /* Once open, the scheduler may call our hooks (a drain: ready -> pump)
   * on another thread before x->st is set here: they take x->mu first. */
  pthread_mutex_lock(&x->mu);
  int refused = __atomic_load_n(&W.draining, __ATOMIC_ACQUIRE) ||
                !(x->st = fairsched_stream_open(s, &stream_hooks, x));
  pthread_mutex_unlock(&x->mu);
  if (refused) {
    pthread_mutex_destroy(&x->mu);
    free(x);
    stk__rpc_call_finish(call, GRPC_STATUS_UNAVAILABLE,
                         "worker is draining: ask another worker");
    return -1;
  }
  stk__rpc_call_set_data(call, x);
  LOG_DEBUG("stream from %s opened", stk__rpc_call_peer(call));
  return 0;
}

/* Validate one request (msgcheck.c): 0, or a gRPC status code with msg. */
static int check_request(const Stoker__V1__BatchRequest *q, char *msg, size_t len) {
  stk__job_view j = {W.job_hash, &W.spec};
  return stk__check_batch_request(&j, q, msg, len);
}

static void stream_message(stk__rpc_call *call, const ProtobufCMessage *m) {
  wstream *x = stk__rpc_call_data(call);
  const Stoker__V1__BatchRequest *q = (const Stoker__V1__BatchRequest *)m;
  char msg[512];
  int code = 0;
  if (!q) {
    /* refused by the rpc layer, which told the peer which limit */
    code = GRPC_STATUS_INVALID_ARGUMENT;
    snprintf(msg, sizeof(msg),
             "malformed BatchRequest, or over a receive limit (the peer was told which)");
  } else {
    code = check_request(q, msg, sizeof(msg));
    if (!code && __atomic_load_n(&W.draining, __ATOMIC_ACQUIRE)) {
      /* Not queued: the stream ends UNAVAILABLE once what was asked
       * before the drain is sent, and the client asks elsewhere. */
      __atomic_add_fetch(&W.dropped_requests, 1, __ATOMIC_RELAXED);
    } else if (!code &&
               fairsched_stream_push(x->st, q->epoch, q->rank, q->step, q->sample_offset,
                                     q->image_uint8, (uint32_t)opt.max_outstanding)) {
      code = GRPC_STATUS_RESOURCE_EXHAUSTED;
      snprintf(msg, sizeof(msg),
               "more than %lld unanswered requests on this "
               "stream (--max-outstanding)",
               opt.max_outstanding);
    }
  }
  if (code) {
    LOG_LIMITED(STK_LOG_WARN, 20, "stream from %s: %s", stk__rpc_call_peer(call), msg);
    __atomic_add_fetch(&W.stream_errors, 1, __ATOMIC_RELAXED);
    fairsched_stream_kill(x->st);
    pthread_mutex_lock(&x->mu);
    x->bad = 1;
    end_locked(x, (grpc_status_code)code, msg, 1);
    pthread_mutex_unlock(&x->mu);
  }
}

static void stream_half_close(stk__rpc_call *call) {
  wstream *x = stk__rpc_call_data(call);
  fairsched_stream_half_close(x->st);
  pump(x);
}

/* The batch in flight went out whole: release it, send the next. */
static void stream_drained(stk__rpc_call *call) {
  wstream *x = stk__rpc_call_data(call);
  pthread_mutex_lock(&x->mu);
  fairsched_done *d = x->cur;
  x->cur = NULL;
  if (d) {
    uint64_t sent = d->total_bytes; /* d is freed by fairsched_stream_sent */
    fairsched_stream_sent(x->st, d, sent);
    x->batches++;
    x->bytes += sent;
  }
  pthread_mutex_unlock(&x->mu);
  pump(x);
}

static void stream_closed(stk__rpc_call *call) {
  wstream *x = stk__rpc_call_data(call);
  pthread_mutex_lock(&x->mu);
  x->ended = 1;
  fairsched_done *d = x->cur;
  x->cur = NULL;
  if (d) fairsched_stream_sent(x->st, d, 0); /* cancelled mid-batch */
  LOG_DEBUG("stream from %s ended (%s): %" PRIu64 " batches, %" PRIu64 " bytes",
            stk__rpc_call_peer(call),
            x->bad    ? "error"
            : x->over ? "status"
                      : "cancelled",
            x->batches, x->bytes);
  fairsched_stream *st = x->st;
  pthread_mutex_unlock(&x->mu);
  fairsched_stream_close(st); /* frees x, maybe later (stream_released) */
}

const stk__rpc_stream_ops stream_ops = {stream_open, stream_message, stream_half_close,
                                        stream_drained, stream_closed};
