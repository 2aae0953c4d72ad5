/* stream.c - a remote worker's thread: its Worker.Stream, reconnects,
 * and receiving its batches (frames checked against the job's layout,
 * chunks copied once into the claimed buffer after bounds checks, crc32c
 * verified while copying).
 *
 * When the stream breaks the thread sends every request it held back to
 * the queue (requests.c: a hedge in flight elsewhere takes over instead),
 * then retries the worker with backoff while it is wanted (listed, not
 * dropped, in this rank's working set: workers.c). A worker that stops
 * answering without breaking its connection is cut after 30 s of silence
 * (1 s once it is no longer wanted); one no longer wanted ends its stream
 * once it holds no request.
 *
 * Dropping a worker (workers.c keeps the record): a stream that ends with
 * a final status (INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION: it
 * disagrees with us about the job or protocol; UNAUTHENTICATED,
 * PERMISSION_DENIED: our token), a malformed message, or
 * STK__CRC_STREAK_MAX batches in a row whose crc32c does not match
 * (requests.c). Every other status re-issues and retries.
 *
 * Owns: the stream part of its worker entry (channel, stream, alive,
 * probing, cap, failures). Must not: hold c->mu across a gRPC call or a
 * payload copy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/thread.h"
#include "common/clock.h"
#include "internal.h"
#include "stoker.pb-c.h"
#include "wire.h"

/* One batch being received on a stream (the receiver's own, no lock). */
typedef struct rx {
  int active;
  int u8;             /* the batch came in the wire_u8 form */
  unsigned char *dst; /* the copy's buffer, NULL = dropping a duplicate */
  uint64_t seq;
  uint32_t substituted;
  uint64_t total, got;
  uint32_t crc;     /* from the header */
  uint32_t crc_acc; /* of the chunks so far, in offset order */
} rx;

/* 0 when h describes exactly layout L, else -1 with why. */
static int header_is(const Stoker__V1__BatchHeader *h, const stk_batch_layout *L,
                     char *why, size_t n) {
  if (h->total_bytes != L->total_bytes) {
    snprintf(why, n, "batch of %llu bytes, the job's layout has %llu",
             (unsigned long long)h->total_bytes, (unsigned long long)L->total_bytes);
    return -1;
  }
  if (h->n_tensors != L->ntensors) {
    snprintf(why, n, "batch with %zu tensors, want %u", h->n_tensors, L->ntensors);
    return -1;
  }
  for (size_t i = 0; i < h->n_tensors; i++) {
    const stk_tensor_desc *d = &L->tensors[i];
    if (!h->tensors[i] || h->tensors[i]->offset != d->offset ||
        h->tensors[i]->nbytes != d->nbytes) {
      snprintf(why, n, "tensor %zu at a different offset/size than the layout", i);
      return -1;
    }
  }
  return 0;
}

/* The form of a batch from its header: 0 the job's layout, 1 the wire_u8
 * one (only when this client asked for it), -1 neither (why says). */
static int check_header(stk_client *c, const Stoker__V1__BatchHeader *h, char *why,
                        size_t n) {
  if (c->job.wire_u8 && h->total_bytes == c->job.wire.total_bytes)
    return header_is(h, &c->job.wire, why, n) ? -1 : 1;
  return header_is(h, &c->job.layout, why, n) ? -1 : 0;
}

/* Under mu: which buffer w's batch seq goes to (NULL: nobody wants it). */
/* A payload chunk m of the batch in x: bounds-checked, copied once into
 * x->dst (crc32c taken while copying); the last one completes the copy
 * (under mu). 0, or -1 with why: a protocol error. */
static int on_chunk(stk_client *c, stk__worker *w, rx *x, grpc_byte_buffer *bb,
                    const stk__wire_msg *m, char *why, size_t n) {
  if (!x->active) {
    snprintf(why, n, "payload chunk without a batch header");
    return -1;
  }
  if (m->offset != x->got || m->len > x->total - x->got) {
    snprintf(why, n, "chunk [%llu, +%llu) out of order or past the batch end %llu",
             (unsigned long long)m->offset, (unsigned long long)m->len,
             (unsigned long long)x->total);
    return -1;
  }
  if (x->dst && m->len) {
    /* x->dst was this copy's buffer when its header came; a buffer being
     * written never changes hands (internal.h), so no lock is needed. */
    unsigned char *dst = x->dst + m->offset;
    if (c->cfg.verify_crc) x->crc_acc = stk__wire_copy_chunk_crc(bb, m, dst, x->crc_acc);
    else stk__wire_copy_chunk(bb, m, dst);
  }
  x->got += m->len;
  if (x->got == x->total) {
    x->active = 0;
    pthread_mutex_lock(&c->mu);
    stk__pool_bytes(c, x->total);
    if (x->dst) {
      /* Chunks arrive in offset order (checked above), so the running
       * checksum is the payload's: no second pass over the batch. */
      int ok = !c->cfg.verify_crc || x->crc_acc == x->crc;
      stk__req_complete(c, w, x->seq, x->total, ok, x->substituted, x->u8);
    }
    pthread_mutex_unlock(&c->mu);
  }
  return 0;
}

/* One BatchResponse from w: a header (checked against the job, claims
 * the batch's buffer) with perhaps a first chunk, or a chunk. 0, or -1
 * with why: a protocol error (the caller drops w). */
static int on_message(stk_client *c, stk__worker *w, rx *x, grpc_byte_buffer *bb,
                      char *why, size_t n) {
  stk__wire_msg m;
  snprintf(why, n, "malformed BatchResponse");
  if (stk__wire_decode_ex(bb, STK_MAX_CHUNK_MSG, &m, why, n)) return -1;
  int rc = 0, form = 0;
  pthread_mutex_lock(&c->mu);
  w->last_msg_ns = stk__now_ns();
  w->probing = 0;
  pthread_mutex_unlock(&c->mu);
  if (m.msg && m.msg->header) {
    const Stoker__V1__BatchHeader *h = m.msg->header;
    if (x->active) {
      snprintf(why, n, "a batch header before the previous batch was complete");
      rc = -1;
    } else if ((form = check_header(c, h, why, n)) < 0) {
      rc = -1;
    } else if (h->rank == c->cfg.rank && h->epoch < c->job.spec.epochs &&
               h->sample_offset != stk__epoch_offset(c, h->epoch)) {
      /* Our rank's batch at another sample offset than this epoch's: a
       * worker that predates elastic resume ignored the request's
       * sample_offset (BatchRequest field 5) and built another batch. */
      snprintf(why, n,
               "batch of epoch %llu at sample offset %llu, asked for offset %llu "
               "(a worker older than elastic resume ignores it)",
               (unsigned long long)h->epoch, (unsigned long long)h->sample_offset,
               (unsigned long long)stk__epoch_offset(c, h->epoch));
      rc = -1;
    } else {
      pthread_mutex_lock(&c->mu);
      x->dst = NULL;
      uint64_t seq;
      if (h->rank == c->cfg.rank &&
          !stk__addr_seq(c, h->epoch, h->step, h->sample_offset, &seq)) {
        x->seq = seq;
        x->dst = stk__req_claim(c, w, x->seq);
      } else {
        stk__pool_duplicate(c);
      }
      pthread_mutex_unlock(&c->mu);
      x->substituted = h->substituted;
      x->u8 = form;
      x->active = 1;
      x->got = 0;
      x->total = h->total_bytes;
      x->crc = h->crc32c;
      x->crc_acc = 0;
      if (m.msg->chunk.len) {
        stk__wire_msg cm = m;
        cm.is_chunk = 1;
        cm.offset = m.msg->chunk_offset;
        cm.len = m.msg->chunk.len;
        rc = on_chunk(c, w, x, bb, &cm, why, n);
      } else if (x->total == 0) {
        rc = -1;
        snprintf(why, n, "empty batch");
      }
    }
  } else if (m.is_chunk) {
    rc = on_chunk(c, w, x, bb, &m, why, n);
  } else {
    snprintf(why, n, "BatchResponse with neither header nor chunk");
    rc = -1;
  }
  stk__wire_msg_free(&m);
  return rc;
}

/* Receive until the stream ends. Returns 1 if any message came. */
static int rx_loop(stk_client *c, stk__worker *w, stk__rpc_stream *s) {
  rx x;
  memset(&x, 0, sizeof(x));
  int got_any = 0;
  for (;;) {
    grpc_byte_buffer *bb = NULL;
    int rc = stk__rpc_stream_recv(s, &bb, 250);
    if (rc == -2) {
      pthread_mutex_lock(&c->mu);
      int64_t idle = (stk__now_ns() - w->last_msg_ns) / 1000000;
      int cut = c->stopping || c->errs.fatal || w->dropped ||
                (!stk__worker_wanted(c, w) && (w->outstanding == 0 || idle > 1000)) ||
                (w->outstanding > 0 && idle > 30000);
      pthread_mutex_unlock(&c->mu);
      if (cut) {
        stk__rpc_stream_cancel(s);
      }
      continue; /* the cancelled receive completes with -1 */
    }
    if (rc != 1) break;
    got_any = 1;
    char why[200] = "";
    int bad = on_message(c, w, &x, bb, why, sizeof(why));
    grpc_byte_buffer_destroy(bb);
    pthread_mutex_lock(&c->mu);
    if (bad) {
      char msg[256];
      snprintf(msg, sizeof(msg), "protocol error: %.200s", why);
      stk__worker_drop(c, w, STK_PROTOCOL, msg);
    }
    int cut = w->dropped;
    pthread_mutex_unlock(&c->mu);
    if (cut) stk__rpc_stream_cancel(s);
  }
  return got_any;
}

/* The name of a gRPC status that drops a worker, for the message. */
static const char *grpc_code_name(int code) {
  switch (code) {
    case GRPC_STATUS_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case GRPC_STATUS_OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case GRPC_STATUS_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case GRPC_STATUS_UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case GRPC_STATUS_PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    default:
      return "status";
  }
}

/* After a stream ended with code: drop w when the worker refused us for
 * good; learn a smaller outstanding cap from RESOURCE_EXHAUSTED. Under mu. */
static void stream_ended(stk_client *c, stk__worker *w, int code, const char *det,
                         uint32_t had) {
  int final, fst = stk__rpc_status(code, &final);
  if (code == GRPC_STATUS_RESOURCE_EXHAUSTED) {
    /* The worker allows fewer outstanding requests than we sent: ask for
     * at most half as many from now on. */
    w->cap = had > 2 ? had / 2 : 1;
  }
  /* Our requests are built from the job the coordinator gave us: a worker
   * that finds one invalid or out of range disagrees with us about the
   * protocol, not about the caller's arguments. */
  if (code == GRPC_STATUS_INVALID_ARGUMENT || code == GRPC_STATUS_OUT_OF_RANGE)
    fst = STK_PROTOCOL;
  /* One worker address that serves no Worker.Stream (its port taken by
   * another process after the worker died) is a dead worker: retried while
   * listed, never a reason to drop it for good. */
  if (code == GRPC_STATUS_UNIMPLEMENTED) final = 0;
  /* A worker that refuses its ticket has a newer one (its coordinator
   * restarted and our list is behind): retried while listed, and the next
   * list's ticket reopens the channel. */
  if (code == GRPC_STATUS_UNAUTHENTICATED && w->ticket[0]) final = 0;
  if (!final) return;
  char why[256];
  snprintf(why, sizeof(why), "it refused the stream (gRPC %s %d): %.150s",
           grpc_code_name(code), code, det);
  stk__worker_drop(c, w, fst, why);
}

void *stk__stream_main(void *arg) {
  stk__worker *w = arg;
  stk__thread_name("stk-stream");
  stk_client *c = w->c;
  pthread_mutex_lock(&c->mu);
  char bearer[STK_MAX_TICKET_BYTES];
  while (!c->stopping && !c->errs.fatal && stk__worker_wanted(c, w)) {
    /* Its stream ticket when listed with one (the worker never sees our
     * token), else our token (an older coordinator or worker). A new
     * ticket (a restarted coordinator) means a new channel. */
    int reopen = w->ticket_new;
    w->ticket_new = 0;
    memcpy(bearer, w->ticket, sizeof(bearer));
    pthread_mutex_unlock(&c->mu);
    if (reopen && w->ch) {
      stk__rpc_channel_close(w->ch);
      w->ch = NULL;
    }
    stk__rpc_stream *s = NULL;
    if (!w->ch && stk__rpc_channel_open(w->address, STK_MAX_CHUNK_MSG,
                                        bearer[0] ? bearer : c->token, c->tls, &w->ch))
      w->ch = NULL;
    explicit_bzero(bearer, sizeof(bearer));
    if (w->ch) stk__rpc_stream_open(w->ch, "/stoker.v1.Worker/Stream", 0, &s);
    int got_any = 0;
    if (s) {
      pthread_mutex_lock(&c->mu);
      w->stream = s;
      w->alive = 1;
      w->probing = 1;
      w->stream_batches = 0;
      w->last_msg_ns = stk__now_ns();
      pthread_cond_broadcast(&c->cv_sched);
      pthread_mutex_unlock(&c->mu);
      got_any = rx_loop(c, w, s);
      pthread_mutex_lock(&c->mu);
      uint32_t had = w->outstanding;
      w->stream = NULL;
      w->alive = 0;
      stk__req_requeue_worker(c, w);
      pthread_mutex_unlock(&c->mu);
      stk__rpc_stream_cancel(s);
      pthread_mutex_lock(&w->send_mu); /* wait out a send in progress */
      pthread_mutex_unlock(&w->send_mu);
      char det[200] = "";
      int code = stk__rpc_stream_status(s, 500, det, sizeof(det));
      stk__rpc_stream_destroy(s);
      pthread_mutex_lock(&c->mu);
      if (!w->dropped && !c->stopping) stream_ended(c, w, code, det, had);
      pthread_mutex_unlock(&c->mu);
    }
    w->failures = got_any ? 0 : w->failures + 1;
    int backoff = 100 << (w->failures < 5 ? w->failures : 5);
    if (backoff > 2000) backoff = 2000;
    for (int t = 0; t < backoff; t += 50) {
      pthread_mutex_lock(&c->mu);
      int stop = c->stopping || c->errs.fatal || !stk__worker_wanted(c, w);
      pthread_mutex_unlock(&c->mu);
      if (stop) break;
      stk__sleep_ms(50);
    }
    pthread_mutex_lock(&c->mu);
  }
  pthread_mutex_unlock(&c->mu);
  /* Gone from the list or the working set, dropped or stopping: the
   * channel goes too (a worker wanted again gets a new thread, which opens
   * a new one). */
  stk__rpc_channel_close(w->ch);
  w->ch = NULL;
  pthread_mutex_lock(&c->mu);
  w->alive = 0;
  w->left_ns = stk__now_ns();
  w->thread_exited = 1;
  pthread_cond_broadcast(&c->cv_sched);
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

int stk__stream_start(stk__worker *w) {
  w->thread_exited = 0;
  if (pthread_create(&w->thread, NULL, stk__stream_main, w)) {
    w->thread_started = 0;
    return -1;
  }
  w->thread_started = 1;
  return 0;
}
