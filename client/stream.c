/* stream.c - one Worker.Stream per live worker and the scheduler that
 * spreads requests over them.
 *
 * Scheduler thread: hands each free receive buffer the next step (at most
 * `prefetch` requests outstanding in total, so memory is bounded by
 * construction) and sends the lowest queued step to the worker with the
 * smallest (outstanding + 1) / rate, rate being the worker's smoothed
 * batches/s. A worker whose stream has not answered yet gets one request
 * (a probe) until it does.
 *
 * Worker thread (one per listed worker): opens the stream, receives headers
 * and chunks, copies each chunk once into the request's buffer after
 * bounds-checking it, verifies crc32c, and marks the request DONE. When the
 * stream breaks it sends every request it held back to the queue (they are
 * re-issued elsewhere; a batch that still arrives twice is dropped), then
 * retries the worker with backoff while the coordinator still lists it.
 * A local worker (stk_client_open_local) builds batches in-process instead;
 * a transient build error (STK_UNAVAILABLE) sends the request back to the
 * queue after a backoff, like a remote worker's UNAVAILABLE. Worker
 * statuses that end a stream: FAILED_PRECONDITION, INVALID_ARGUMENT,
 * OUT_OF_RANGE, UNAUTHENTICATED and PERMISSION_DENIED are fatal; every
 * other one (UNAVAILABLE: draining or a transient build error, INTERNAL,
 * RESOURCE_EXHAUSTED, ...) re-issues the stream's requests.
 *
 * Owns: worker entries, their channels and streams. Must not: hold c->mu
 * across a gRPC call or a payload copy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "internal.h"
#include "stoker.pb-c.h"
#include "wire.h"

static void *remote_main(void *arg);
static void *local_main(void *arg);

static int worker_start(stk_client *c, stk__worker *w) {
  w->thread_exited = 0;
  if (pthread_create(&w->thread, NULL, w->local ? local_main : remote_main, w)) {
    w->thread_started = 0;
    return -1;
  }
  w->thread_started = 1;
  return 0;
}

int stk__worker_add(stk_client *c, const char *id, const char *address, int local) {
  for (uint32_t i = 0; i < c->nworkers; i++) {
    stk__worker *w = &c->workers[i];
    if (strcmp(w->id, id) != 0) continue;
    w->listed = 1;
    if (w->thread_started && w->thread_exited) {
      pthread_join(w->thread, NULL); /* it has left its loop already */
      w->thread_started = 0;
    }
    if (!w->thread_started && !c->stopping) worker_start(c, w);
    return (int)i;
  }
  if (c->nworkers >= STK__MAX_WORKERS) return -1;
  stk__worker *w = &c->workers[c->nworkers];
  memset(w, 0, sizeof(*w));
  w->used = 1;
  w->idx = (int)c->nworkers;
  w->local = local;
  w->c = c;
  w->listed = 1;
  snprintf(w->id, sizeof(w->id), "%s", id);
  snprintf(w->address, sizeof(w->address), "%s", address);
  pthread_mutex_init(&w->send_mu, NULL);
  c->nworkers++;
  if (local) w->alive = 1;
  if (!c->stopping) worker_start(c, w);
  return w->idx;
}

void stk__worker_unlist_missing(stk_client *c, const char *const *ids, size_t n) {
  for (uint32_t i = 0; i < c->nworkers; i++) {
    stk__worker *w = &c->workers[i];
    if (w->local) continue;
    int found = 0;
    for (size_t k = 0; k < n && !found; k++) found = !strcmp(ids[k], w->id);
    /* An unlisted worker takes no new requests; its open stream may finish
     * what it holds (a coordinator restart briefly lists nobody), but a
     * silent one is cut after a short grace (see rx_loop). */
    if (!found) w->listed = 0;
  }
  pthread_cond_broadcast(&c->cv_sched);
}

/* Under mu: send w's requests back to the queue. */
static void requeue(stk_client *c, stk__worker *w) {
  for (uint32_t i = 0; i < c->nreqs; i++) {
    stk__req *r = &c->reqs[i];
    if (r->worker == w->idx && (r->state == REQ_ISSUED || r->state == REQ_RECEIVING)) {
      r->state = REQ_QUEUED;
      r->worker = -1;
      c->reissued++;
    }
  }
  w->outstanding = 0;
  pthread_cond_broadcast(&c->cv_sched);
}

/* Under mu: a request's payload is complete. */
static void complete(stk_client *c, stk__worker *w, stk__req *r, int crc_ok) {
  int64_t now = stk__now_ns();
  if (w->outstanding) w->outstanding--;
  if (!crc_ok) {
    c->crc_errors++;
    c->reissued++;
    r->state = REQ_QUEUED;
    r->worker = -1;
    r->avoid = w->idx;
    pthread_cond_broadcast(&c->cv_sched);
    return;
  }
  r->state = REQ_DONE;
  r->worker = -1;
  w->batches++;
  w->stream_batches++;
  pthread_cond_broadcast(&c->cv_copy);
  pthread_cond_broadcast(&c->cv_sched);
  if (w->stream_batches == 1) { /* includes connection setup: not a rate */
    w->last_done_ns = now;
    return;
  }
  int64_t since = r->issued_ns > w->last_done_ns ? r->issued_ns : w->last_done_ns;
  double dt = (double)(now - since) / 1e9;
  if (dt < 1e-6) dt = 1e-6;
  double inst = 1.0 / dt;
  w->rate = w->rate > 0 ? 0.8 * w->rate + 0.2 * inst : inst;
  w->last_done_ns = now;
}

/* ---- remote worker ---------------------------------------------------- */

typedef struct rx {
  int active;
  int req; /* index into c->reqs, -1 = dropping a duplicate */
  uint64_t total, got;
  uint32_t crc;     /* from the header */
  uint32_t crc_acc; /* of the chunks so far, in offset order */
} rx;

static int check_header(stk_client *c, const Stoker__V1__BatchHeader *h, char *why,
                        size_t n) {
  if (h->total_bytes != c->layout.total_bytes) {
    snprintf(why, n, "batch of %llu bytes, the job's layout has %llu",
             (unsigned long long)h->total_bytes,
             (unsigned long long)c->layout.total_bytes);
    return -1;
  }
  if (h->n_tensors != c->layout.ntensors) {
    snprintf(why, n, "batch with %zu tensors, want %u", h->n_tensors, c->layout.ntensors);
    return -1;
  }
  for (size_t i = 0; i < h->n_tensors; i++) {
    const stk_tensor_desc *d = &c->layout.tensors[i];
    if (!h->tensors[i] || h->tensors[i]->offset != d->offset ||
        h->tensors[i]->nbytes != d->nbytes) {
      snprintf(why, n, "tensor %zu at a different offset/size than the layout", i);
      return -1;
    }
  }
  return 0;
}

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
  if (x->req >= 0 && m->len) {
    /* The buffer pointer is stable while the request is RECEIVING: only
     * DONE requests have their buffers swapped by the copy thread. */
    unsigned char *dst = c->reqs[x->req].buf + m->offset;
    if (c->cfg.verify_crc) x->crc_acc = stk__wire_copy_chunk_crc(bb, m, dst, x->crc_acc);
    else stk__wire_copy_chunk(bb, m, dst);
  }
  x->got += m->len;
  if (x->got == x->total) {
    x->active = 0;
    if (x->req >= 0) {
      stk__req *r = &c->reqs[x->req];
      /* Chunks arrive in offset order (checked above), so the running
       * checksum is the payload's: no second pass over the batch. */
      int ok = !c->cfg.verify_crc || x->crc_acc == x->crc;
      pthread_mutex_lock(&c->mu);
      c->bytes += x->total;
      w->bytes += x->total;
      complete(c, w, r, ok);
      pthread_mutex_unlock(&c->mu);
    } else {
      pthread_mutex_lock(&c->mu);
      c->bytes += x->total;
      pthread_mutex_unlock(&c->mu);
    }
  }
  return 0;
}

static int on_message(stk_client *c, stk__worker *w, rx *x, grpc_byte_buffer *bb,
                      char *why, size_t n) {
  stk__wire_msg m;
  snprintf(why, n, "malformed BatchResponse");
  if (stk__wire_decode_ex(bb, STK_MAX_CHUNK_MSG, &m, why, n)) return -1;
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  w->last_msg_ns = stk__now_ns();
  w->probing = 0;
  pthread_mutex_unlock(&c->mu);
  if (m.msg && m.msg->header) {
    const Stoker__V1__BatchHeader *h = m.msg->header;
    if (x->active) {
      snprintf(why, n, "a batch header before the previous batch was complete");
      rc = -1;
    } else if (check_header(c, h, why, n)) {
      rc = -1;
    } else {
      pthread_mutex_lock(&c->mu);
      x->req = -1;
      if (h->rank == c->cfg.rank && h->step < c->spe) {
        uint64_t seq = h->epoch * c->spe + h->step;
        for (uint32_t i = 0; i < c->nreqs; i++) {
          stk__req *r = &c->reqs[i];
          if (r->state == REQ_ISSUED && r->worker == w->idx && r->seq == seq) {
            r->state = REQ_RECEIVING;
            x->req = (int)i;
            break;
          }
        }
      }
      if (x->req < 0) c->duplicates++;
      else c->substituted += h->substituted;
      pthread_mutex_unlock(&c->mu);
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
      int cut = c->stopping || c->fatal ||
                (!w->listed && (w->outstanding == 0 || idle > 1000)) ||
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
    if (bad) {
      char msg[256];
      snprintf(msg, sizeof(msg), "worker %.100s: protocol error: %.120s", w->address,
               why);
      pthread_mutex_lock(&c->mu);
      stk__set_fatal(c, STK_PROTOCOL, msg);
      pthread_mutex_unlock(&c->mu);
      stk__rpc_stream_cancel(s);
    }
  }
  return got_any;
}

static void *remote_main(void *arg) {
  stk__worker *w = arg;
  stk_client *c = w->c;
  pthread_mutex_lock(&c->mu);
  while (!c->stopping && !c->fatal && w->listed) {
    pthread_mutex_unlock(&c->mu);
    stk__rpc_stream *s = NULL;
    if (!w->ch && stk__rpc_channel_open(w->address, STK_MAX_CHUNK_MSG, c->token, &w->ch))
      w->ch = NULL;
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
      requeue(c, w);
      pthread_mutex_unlock(&c->mu);
      stk__rpc_stream_cancel(s);
      pthread_mutex_lock(&w->send_mu); /* wait out a send in progress */
      pthread_mutex_unlock(&w->send_mu);
      char det[200] = "";
      int code = stk__rpc_stream_status(s, 500, det, sizeof(det));
      stk__rpc_stream_destroy(s);
      int final, fst = stk__rpc_status(code, &final);
      if (code == GRPC_STATUS_RESOURCE_EXHAUSTED) {
        /* The worker allows fewer outstanding requests than we sent:
         * ask for at most half as many from now on. */
        pthread_mutex_lock(&c->mu);
        w->cap = had > 2 ? had / 2 : 1;
        pthread_mutex_unlock(&c->mu);
      }
      /* Our requests are built from the job the coordinator gave us: a
       * worker that finds one invalid or out of range disagrees with us
       * about the protocol, not about the caller's arguments. */
      if (code == GRPC_STATUS_INVALID_ARGUMENT || code == GRPC_STATUS_OUT_OF_RANGE)
        fst = STK_PROTOCOL;
      /* One worker address that serves no Worker.Stream (its port taken by
       * another process after the worker died) is a dead worker, not a
       * reason to fail the client: the others carry on. */
      if (code == GRPC_STATUS_UNIMPLEMENTED) final = 0;
      if (final) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "worker %.100s refused the stream (gRPC status %d): %.100s", w->address,
                 code, det);
        pthread_mutex_lock(&c->mu);
        stk__set_fatal(c, fst, msg);
        pthread_mutex_unlock(&c->mu);
      }
    }
    w->failures = got_any ? 0 : w->failures + 1;
    int backoff = 100 << (w->failures < 5 ? w->failures : 5);
    if (backoff > 2000) backoff = 2000;
    for (int t = 0; t < backoff; t += 50) {
      pthread_mutex_lock(&c->mu);
      int stop = c->stopping || c->fatal || !w->listed;
      pthread_mutex_unlock(&c->mu);
      if (stop) break;
      stk__sleep_ms(50);
    }
    pthread_mutex_lock(&c->mu);
  }
  w->alive = 0;
  w->thread_exited = 1;
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* ---- local worker: builds in-process ---------------------------------- */

static void *local_main(void *arg) {
  stk__worker *w = arg;
  stk_client *c = w->c;
  stk_builder *b = NULL;
  char err[256] = "";
  if (stk_builder_create(c->dataset, &c->spec, &b, err, sizeof(err)) != STK_OK) {
    char msg[300];
    snprintf(msg, sizeof(msg), "local builder: %s", err);
    pthread_mutex_lock(&c->mu);
    stk__set_fatal(c, STK_INTERNAL, msg);
    w->thread_exited = 1;
    pthread_mutex_unlock(&c->mu);
    return NULL;
  }
  pthread_mutex_lock(&c->mu);
  while (!c->stopping && !c->fatal) {
    stk__req *r = NULL;
    for (uint32_t i = 0; i < c->nreqs; i++) {
      stk__req *q = &c->reqs[i];
      if (q->state == REQ_ISSUED && q->worker == w->idx && (!r || q->seq < r->seq)) r = q;
    }
    if (!r) {
      pthread_cond_wait(&c->cv_local, &c->mu);
      continue;
    }
    r->state = REQ_RECEIVING;
    uint64_t seq = r->seq;
    pthread_mutex_unlock(&c->mu);
    stk_build_info info;
    memset(&info, 0, sizeof(info));
    int st = stk_builder_build(b, seq / c->spe, c->cfg.rank, seq % c->spe, r->buf,
                               c->layout.total_bytes, &info);
    pthread_mutex_lock(&c->mu);
    if (st == STK_UNAVAILABLE) {
      /* Transient (out of descriptors, EIO, out of memory): nothing was
       * substituted; ask again after a backoff, as a remote worker's
       * UNAVAILABLE would have us do. */
      if (w->outstanding) w->outstanding--;
      r->state = REQ_QUEUED;
      r->worker = -1;
      c->reissued++;
      w->failures++;
      pthread_cond_broadcast(&c->cv_sched);
      int backoff = 10 << (w->failures < 7 ? w->failures : 7); /* to 1.28 s */
      int64_t until = stk__now_ns() + (int64_t)backoff * 1000000;
      for (int64_t now = stk__now_ns(); !c->stopping && !c->fatal && now < until;
           now = stk__now_ns())
        stk__cond_wait_ms(&c->cv_local, &c->mu, (until - now) / 1000000 + 1);
      continue;
    }
    w->failures = 0;
    if (st) {
      char msg[300];
      snprintf(msg, sizeof(msg), "local builder: %s", stk_builder_error(b));
      stk__set_fatal(c, st, msg);
      break;
    }
    c->bytes += c->layout.total_bytes;
    w->bytes += c->layout.total_bytes;
    c->substituted += info.substituted;
    /* Fault injection for tests ($STOKER_FAULT_CRC_EVERY=N): every Nth
     * local batch counts as a crc32c mismatch and takes the re-request
     * path a corrupted network batch takes. */
    int crc_ok = 1;
    if (c->fault_crc_every && ++c->fault_count % c->fault_crc_every == 0) crc_ok = 0;
    complete(c, w, r, crc_ok);
  }
  w->thread_exited = 1;
  pthread_mutex_unlock(&c->mu);
  stk_builder_destroy(b);
  return NULL;
}

/* ---- scheduler -------------------------------------------------------- */

/* Under mu: the worker for a request, or NULL if none can take one. */
static stk__worker *pick(stk_client *c, int avoid) {
  stk__worker *best = NULL, *fallback = NULL;
  double best_score = 0, fb_score = 0, known = 0;
  int nknown = 0;
  for (uint32_t i = 0; i < c->nworkers; i++)
    if (c->workers[i].rate > 0) known += c->workers[i].rate, nknown++;
  double def_rate = nknown ? known / nknown : 1.0;
  for (uint32_t i = 0; i < c->nworkers; i++) {
    stk__worker *w = &c->workers[i];
    if (!w->alive || !w->listed) continue;
    uint32_t cap = w->probing ? 1 : (w->cap ? w->cap : STK__MAX_PER_WORKER);
    if (w->outstanding >= cap) continue;
    /* A worker measured slow still gets work when the others' queues are
     * deep (rate floored at a quarter of the mean), so one noisy sample
     * cannot starve it for good. */
    double rate = w->rate > 0 ? w->rate : def_rate;
    if (rate < 0.25 * def_rate) rate = 0.25 * def_rate;
    double score = (w->outstanding + 1) / rate;
    if (w->idx == avoid) {
      if (!fallback || score < fb_score) fallback = w, fb_score = score;
      continue;
    }
    /* Near-ties (within 5%) go to the worker assigned least recently, so
     * a lightly loaded job still spreads over every worker (and measures
     * each one's rate) instead of always picking the first. */
    if (!best || score < 0.95 * best_score ||
        (score <= 1.05 * best_score && w->last_assigned_ns < best->last_assigned_ns))
      best = w, best_score = score;
  }
  return best ? best : fallback;
}

static void *sched_main(void *arg) {
  stk_client *c = arg;
  pthread_mutex_lock(&c->mu);
  while (!c->stopping && !c->fatal) {
    for (uint32_t i = 0; i < c->nreqs && c->next_issue < c->total; i++) {
      stk__req *r = &c->reqs[i];
      if (r->state != REQ_FREE) continue;
      r->state = REQ_QUEUED;
      r->seq = c->next_issue++;
      r->worker = -1;
      r->avoid = -1;
    }
    stk__req *r = NULL;
    for (uint32_t i = 0; i < c->nreqs; i++) {
      stk__req *q = &c->reqs[i];
      if (q->state == REQ_QUEUED && (!r || q->seq < r->seq)) r = q;
    }
    uint32_t alive = 0;
    for (uint32_t i = 0; i < c->nworkers; i++) alive += c->workers[i].alive ? 1 : 0;
    if (alive) c->no_worker_since_ns = 0;
    else if (!c->no_worker_since_ns) c->no_worker_since_ns = stk__now_ns();
    if (!r) {
      stk__cond_wait_ms(&c->cv_sched, &c->mu, 200);
      continue;
    }
    stk__worker *w = pick(c, r->avoid);
    if (!w) {
      stk__cond_wait_ms(&c->cv_sched, &c->mu, 100);
      continue;
    }
    uint64_t seq = r->seq;
    r->state = REQ_ISSUED;
    r->worker = w->idx;
    r->issued_ns = stk__now_ns();
    w->last_assigned_ns = r->issued_ns;
    if (w->outstanding == 0) w->last_msg_ns = r->issued_ns;
    w->outstanding++;
    if (w->local) {
      pthread_cond_broadcast(&c->cv_local);
      continue;
    }
    stk__rpc_stream *s = w->stream;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_lock(&w->send_mu);
    pthread_mutex_lock(&c->mu);
    int still = w->stream == s && s && r->state == REQ_ISSUED && r->worker == w->idx &&
                r->seq == seq;
    pthread_mutex_unlock(&c->mu);
    if (still) {
      Stoker__V1__BatchRequest req = STOKER__V1__BATCH_REQUEST__INIT;
      req.job_hash = c->job_hash;
      req.epoch = seq / c->spe;
      req.rank = c->cfg.rank;
      req.step = seq % c->spe;
      if (stk__rpc_stream_send_msg(s, &req.base)) stk__rpc_stream_cancel(s);
    }
    pthread_mutex_unlock(&w->send_mu);
    pthread_mutex_lock(&c->mu);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

int stk__sched_start(stk_client *c) {
  if (pthread_create(&c->sched_thread, NULL, sched_main, c)) return -1;
  c->sched_started = 1;
  return 0;
}

void stk__streams_stop(stk_client *c) {
  if (c->sched_started) pthread_join(c->sched_thread, NULL);
  c->sched_started = 0;
  pthread_mutex_lock(&c->mu);
  for (uint32_t i = 0; i < c->nworkers; i++)
    if (c->workers[i].stream) stk__rpc_stream_cancel(c->workers[i].stream);
  pthread_cond_broadcast(&c->cv_local);
  pthread_mutex_unlock(&c->mu);
  for (uint32_t i = 0; i < c->nworkers; i++) {
    if (c->workers[i].thread_started) pthread_join(c->workers[i].thread, NULL);
    c->workers[i].thread_started = 0;
  }
}
