/* stream.c - one Worker.Stream per live worker and the scheduler that
 * spreads requests over them.
 *
 * Scheduler thread: hands each free receive buffer the next step (at most
 * `prefetch` requests outstanding in total, so memory is bounded by
 * construction) and sends the lowest queued step to the worker with the
 * smallest (outstanding + 1) / rate, rate being the worker's smoothed
 * batches/s. A worker whose stream has not answered yet gets one request
 * (a probe) until it does; a worker that is late (below) gets new requests
 * only when no other worker can take them.
 *
 * Hedged requests: a request is late when it has waited more than 3x its
 * worker's median issue-to-complete latency (over its last 16 batches; the
 * client's median until the worker has 4; never under 100 ms, so a healthy
 * run does not hedge). The scheduler then asks one other worker for the
 * same batch too: at most one hedge per batch and at most c->nhedges in
 * flight (each has its own receive buffer). Both copies are byte-identical
 * (a batch is a function of its address); the first complete one with a
 * valid crc32c wins, the other is dropped when it comes (there is no
 * per-request cancel in the protocol) and counted. The state machine is in
 * internal.h.
 *
 * Worker thread (one per listed worker): opens the stream, receives headers
 * and chunks, copies each chunk once into the request's buffer after
 * bounds-checking it, verifies crc32c, and marks the request DONE. When the
 * stream breaks it sends every request it held back to the queue (a hedge
 * in flight elsewhere takes over instead), then retries the worker with
 * backoff while the coordinator still lists it.
 *
 * Dropping a worker (for this client only; it may serve other ranks): a
 * stream that ends with a final status (INVALID_ARGUMENT, OUT_OF_RANGE,
 * FAILED_PRECONDITION: it disagrees with us about the job or protocol;
 * UNAUTHENTICATED, PERMISSION_DENIED: our token), a malformed message, or
 * STK__CRC_STREAK_MAX batches in a row whose crc32c does not match. Its
 * requests go to the others; its id is remembered so a later worker list
 * does not bring it back; the reason is kept (c->drop_msg) and becomes the
 * client's error if no worker is left for join_timeout_ms. A dropped
 * worker is never fatal by itself.
 *
 * Worker table: STK__MAX_WORKERS entries. A worker that left the list and
 * whose thread has exited is "departed": its entry (and counters, for the
 * stats) is kept until more than STK__KEEP_DEPARTED have departed or the
 * table is full, then reused. A table full of listed workers refuses the
 * next one and says so (c->refused_msg).
 *
 * A local worker (stk_client_open_local) builds batches in-process instead;
 * a transient build error (STK_UNAVAILABLE) sends the request back to the
 * queue after a backoff, like a remote worker's UNAVAILABLE.
 *
 * Owns: worker entries, their channels and streams, hedge slots' states.
 * Must not: hold c->mu across a gRPC call or a payload copy.
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

static void *remote_main(void *arg);
static void *local_main(void *arg);

/* ---- worker table ----------------------------------------------------- */

static int worker_start(stk_client *c, stk__worker *w) {
  (void)c;
  w->thread_exited = 0;
  if (pthread_create(&w->thread, NULL, w->local ? local_main : remote_main, w)) {
    w->thread_started = 0;
    return -1;
  }
  w->thread_started = 1;
  return 0;
}

static int is_banned(const stk_client *c, const char *id) {
  uint32_t n = c->nbanned < STK__MAX_BANNED ? c->nbanned : STK__MAX_BANNED;
  for (uint32_t i = 0; i < n; i++)
    if (!strcmp(c->banned[i], id)) return 1;
  return 0;
}

/* Under mu: stop using w for the rest of this client's life. Its thread
 * sees `dropped`, cancels its stream and leaves; its requests are re-asked
 * elsewhere (requeue). */
static void drop_worker(stk_client *c, stk__worker *w, int status, const char *why) {
  if (w->dropped || w->local) return;
  w->dropped = 1;
  c->workers_dropped++;
  c->drop_status = status;
  snprintf(c->drop_msg, sizeof(c->drop_msg),
           "worker %.100s dropped by this client: %.160s", w->address, why);
  if (!is_banned(c, w->id)) {
    snprintf(c->banned[c->nbanned % STK__MAX_BANNED], STK_MAX_ID_BYTES, "%s", w->id);
    c->nbanned++;
  }
  pthread_cond_broadcast(&c->cv_sched);
  pthread_cond_broadcast(&c->cv_next);
}

static int departed(const stk__worker *w) {
  return w->used && !w->local && !w->listed && (!w->thread_started || w->thread_exited);
}

/* Under mu: free departed entries, oldest first, until at most `keep` are
 * left. The thread of a departed entry has left its loop (thread_exited is
 * its last write under mu), so joining it here does not wait; it closed
 * its channel itself. No request, hedge or abandoned copy refers to it:
 * its stream's end requeued them all. */
static void reclaim(stk_client *c, uint32_t keep) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < c->nworkers; i++) n += departed(&c->workers[i]) ? 1 : 0;
  while (n > keep) {
    stk__worker *old = NULL;
    for (uint32_t i = 0; i < c->nworkers; i++) {
      stk__worker *w = &c->workers[i];
      if (departed(w) && (!old || w->left_ns < old->left_ns)) old = w;
    }
    if (!old) break;
    if (old->thread_started) pthread_join(old->thread, NULL);
    old->thread_started = 0;
    for (uint32_t i = 0; i < c->nreqs; i++)
      if (c->reqs[i].avoid == old->idx) c->reqs[i].avoid = -1;
    old->used = 0;
    n--;
  }
}

/* Under mu: entry i made ready for a new worker (send_mu stays initialised
 * for the table's life: client_free destroys every entry's below
 * c->nworkers). */
static stk__worker *slot_init(stk_client *c, uint32_t i) {
  stk__worker *w = &c->workers[i];
  if (i < c->nworkers) pthread_mutex_destroy(&w->send_mu);
  memset(w, 0, sizeof(*w));
  pthread_mutex_init(&w->send_mu, NULL);
  w->idx = (int)i;
  w->c = c;
  if (i >= c->nworkers) c->nworkers = i + 1;
  return w;
}

/* Under mu: a free entry, reclaiming departed ones if needed; NULL when
 * every entry holds a listed (or not yet departed) worker. */
static stk__worker *slot_get(stk_client *c) {
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t i = 0; i < c->nworkers; i++)
      if (!c->workers[i].used) return slot_init(c, i);
    if (c->nworkers < STK__MAX_WORKERS) return slot_init(c, c->nworkers);
    if (pass == 0) reclaim(c, 0);
  }
  return NULL;
}

int stk__worker_add(stk_client *c, const char *id, const char *address, int local) {
  for (uint32_t i = 0; i < c->nworkers; i++) {
    stk__worker *w = &c->workers[i];
    if (!w->used || strcmp(w->id, id) != 0) continue;
    w->listed = 1;
    if (w->dropped) return (int)i; /* listed, but not ours to use */
    if (w->thread_started && w->thread_exited) {
      pthread_join(w->thread, NULL); /* it has left its loop already */
      w->thread_started = 0;
    }
    if (!w->thread_started && !c->stopping) worker_start(c, w);
    return (int)i;
  }
  if (!local && is_banned(c, id)) return -1; /* dropped earlier, then departed */
  stk__worker *w = slot_get(c);
  if (!w) {
    c->workers_refused++;
    snprintf(c->refused_msg, sizeof(c->refused_msg),
             "worker table full (%d workers listed or leaving): worker %.80s not used",
             STK__MAX_WORKERS, address);
    return -1;
  }
  w->used = 1;
  w->local = local;
  w->listed = 1;
  snprintf(w->id, sizeof(w->id), "%s", id);
  snprintf(w->address, sizeof(w->address), "%s", address);
  if (local) w->alive = 1;
  if (!c->stopping) worker_start(c, w);
  return w->idx;
}

void stk__worker_unlist_missing(stk_client *c, const char *const *ids, size_t n) {
  for (uint32_t i = 0; i < c->nworkers; i++) {
    stk__worker *w = &c->workers[i];
    if (!w->used || w->local) continue;
    int found = 0;
    for (size_t k = 0; k < n && !found; k++) found = !strcmp(ids[k], w->id);
    /* An unlisted worker takes no new requests; its open stream may finish
     * what it holds (a coordinator restart briefly lists nobody), but a
     * silent one is cut after a short grace (see rx_loop). */
    if (!found) w->listed = 0;
  }
  pthread_cond_broadcast(&c->cv_sched);
}

int stk__workers_all_dropped(stk_client *c) {
  uint32_t listed = 0, dropped = 0;
  for (uint32_t i = 0; i < c->nworkers; i++) {
    const stk__worker *w = &c->workers[i];
    if (!w->used || !w->listed) continue;
    listed++;
    dropped += w->dropped ? 1 : 0;
  }
  return listed > 0 && dropped == listed;
}

/* ---- request and hedge states (under mu) ------------------------------ */

static void hedge_free(stk__hedge *h) {
  h->state = HEDGE_FREE;
  h->req = -1;
  h->worker = -1;
}

/* w will still send seq, which nobody wants any more: drop it on arrival. */
static void abandon(stk__worker *w, uint64_t seq) {
  if (w->nabandoned < STK__MAX_PER_WORKER) w->abandoned[w->nabandoned++] = seq;
  else if (w->outstanding) w->outstanding--; /* cannot happen: outstanding <= 64 */
}

static int take_abandoned(stk__worker *w, uint64_t seq) {
  for (uint32_t i = 0; i < w->nabandoned; i++) {
    if (w->abandoned[i] != seq) continue;
    w->abandoned[i] = w->abandoned[--w->nabandoned];
    return 1;
  }
  return 0;
}

/* r's own copy failed (its worker's stream broke, or a bad crc32c) while a
 * hedge is in flight: the hedge becomes the request's copy. The buffers
 * swap, so the hedge's receiver (which captured its buffer) keeps writing
 * the buffer that is now r's; r's old buffer is not being written. */
static void promote(stk_client *c, stk__req *r) {
  stk__hedge *h = &c->hedges[r->hedge];
  unsigned char *tmp = r->buf;
  r->buf = h->buf;
  h->buf = tmp;
  r->state = h->state == HEDGE_RECEIVING ? REQ_RECEIVING : REQ_ISSUED;
  r->worker = h->worker;
  r->issued_ns = h->issued_ns;
  r->hedge = -1;
  hedge_free(h);
}

/* Send w's requests back to the queue (w's stream is over: nothing of w's
 * is being received). */
static void requeue(stk_client *c, stk__worker *w) {
  for (uint32_t i = 0; i < c->nhedges; i++) {
    stk__hedge *h = &c->hedges[i];
    if (h->state == HEDGE_FREE || h->worker != w->idx) continue;
    if (h->req >= 0) c->reqs[h->req].hedge = -1;
    hedge_free(h);
  }
  for (uint32_t i = 0; i < c->nreqs; i++) {
    stk__req *r = &c->reqs[i];
    if (r->worker != w->idx || (r->state != REQ_ISSUED && r->state != REQ_RECEIVING))
      continue;
    if (r->hedge >= 0) {
      promote(c, r);
      continue;
    }
    r->state = REQ_QUEUED;
    r->worker = -1;
    r->hedged = 0;
    c->reissued++;
  }
  w->outstanding = 0;
  w->nabandoned = 0;
  w->late = 0;
  pthread_cond_broadcast(&c->cv_sched);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static int64_t median(const int64_t *v, uint32_t n) {
  int64_t t[STK__LAT_SAMPLES];
  memcpy(t, v, n * sizeof(*t));
  qsort(t, n, sizeof(*t), cmp_i64);
  return t[n / 2];
}

/* How long a request may wait on w before it is hedged. */
static int64_t hedge_after_ns(const stk_client *c, const stk__worker *w) {
  int64_t med = 0;
  if (w->nlat >= 4) med = median(w->lat_ns, w->nlat);
  else {
    /* Not enough of w's own: the median of every worker's last sample. */
    int64_t v[STK__LAT_SAMPLES];
    uint32_t n = 0;
    for (uint32_t i = 0; i < c->nworkers && n < STK__LAT_SAMPLES; i++) {
      const stk__worker *o = &c->workers[i];
      if (o->used && o->nlat)
        v[n++] = o->lat_ns[(o->lat_pos + STK__LAT_SAMPLES - 1) % STK__LAT_SAMPLES];
    }
    med = n ? median(v, n) : 1000000000; /* nothing known: 1 s */
  }
  int64_t after = 3 * med, floor = (int64_t)STK__HEDGE_FLOOR_MS * 1000000;
  return after > floor ? after : floor;
}

/* A copy of seq from w is complete (x's buffer holds it): make the batch
 * DONE if this copy wins, else drop it. */
static void finish_copy(stk_client *c, stk__worker *w, uint64_t seq, int crc_ok,
                        uint32_t substituted, int u8) {
  int64_t now = stk__now_ns();
  if (w->outstanding) w->outstanding--;
  stk__req *r = NULL;
  stk__hedge *h = NULL;
  for (uint32_t i = 0; i < c->nreqs && !r; i++) {
    stk__req *q = &c->reqs[i];
    if (q->state == REQ_RECEIVING && q->worker == w->idx && q->seq == seq) r = q;
  }
  for (uint32_t i = 0; i < c->nhedges && !r && !h; i++) {
    stk__hedge *q = &c->hedges[i];
    if ((q->state == HEDGE_RECEIVING || q->state == HEDGE_ORPHAN) &&
        q->worker == w->idx && q->seq == seq)
      h = q;
  }
  if (!r && !h) return;                /* cannot happen: the header matched one of them */
  if (h && h->state == HEDGE_ORPHAN) { /* the other copy won meanwhile */
    hedge_free(h);
    c->hedge_dropped++;
    c->duplicates++;
    pthread_cond_broadcast(&c->cv_sched);
    return;
  }
  if (!crc_ok) {
    c->crc_errors++;
    if (++w->crc_streak >= STK__CRC_STREAK_MAX && !w->local) {
      char why[120];
      snprintf(why, sizeof(why), "%u batches in a row failed their crc32c",
               w->crc_streak);
      drop_worker(c, w, STK_CORRUPT, why);
    }
    if (h) { /* a bad hedge: the request's own copy is still coming */
      c->reqs[h->req].hedge = -1;
      hedge_free(h);
    } else if (r->hedge >= 0) {
      promote(c, r);
    } else {
      c->reissued++;
      r->state = REQ_QUEUED;
      r->worker = -1;
      r->hedged = 0;
      r->avoid = w->idx;
    }
    pthread_cond_broadcast(&c->cv_sched);
    return;
  }
  w->crc_streak = 0;
  int64_t issued = r ? r->issued_ns : h->issued_ns;
  if (w->stream_batches > 0 || w->local) { /* the first includes the connection */
    w->lat_ns[w->lat_pos] = now - issued;
    w->lat_pos = (w->lat_pos + 1) % STK__LAT_SAMPLES;
    if (w->nlat < STK__LAT_SAMPLES) w->nlat++;
  }
  if (h) { /* the hedge won: its buffer becomes the request's */
    r = &c->reqs[h->req];
    unsigned char *tmp = r->buf;
    r->buf = h->buf;
    h->buf = tmp;
    c->hedges_won++;
    stk__worker *pw = &c->workers[r->worker];
    if (r->state == REQ_RECEIVING) { /* pw writes the old buffer: keep it */
      h->state = HEDGE_ORPHAN;
      h->req = -1;
      h->worker = pw->idx;
    } else {
      abandon(pw, seq);
      hedge_free(h);
    }
  } else if (r->hedge >= 0) { /* the request's own copy won */
    stk__hedge *o = &c->hedges[r->hedge];
    if (o->state == HEDGE_RECEIVING) {
      o->state = HEDGE_ORPHAN;
      o->req = -1;
    } else {
      abandon(&c->workers[o->worker], seq);
      hedge_free(o);
    }
  }
  r->u8 = u8; /* the winning copy's form, now in r->buf */
  r->state = REQ_DONE;
  r->worker = -1;
  r->hedge = -1;
  c->substituted += substituted;
  w->batches++;
  w->stream_batches++;
  pthread_cond_broadcast(&c->cv_copy);
  pthread_cond_broadcast(&c->cv_sched);
  if (w->stream_batches == 1) { /* includes connection setup: not a rate */
    w->last_done_ns = now;
    return;
  }
  int64_t since = issued > w->last_done_ns ? issued : w->last_done_ns;
  double dt = (double)(now - since) / 1e9;
  if (dt < 1e-6) dt = 1e-6;
  double inst = 1.0 / dt;
  w->rate = w->rate > 0 ? 0.8 * w->rate + 0.2 * inst : inst;
  w->last_done_ns = now;
}

/* ---- remote worker ---------------------------------------------------- */

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
  if (c->wire_u8 && h->total_bytes == c->wire.total_bytes)
    return header_is(h, &c->wire, why, n) ? -1 : 1;
  return header_is(h, &c->layout, why, n) ? -1 : 0;
}

/* Under mu: which buffer w's batch seq goes to (NULL: nobody wants it). */
static unsigned char *claim(stk_client *c, stk__worker *w, uint64_t seq) {
  for (uint32_t i = 0; i < c->nreqs; i++) {
    stk__req *r = &c->reqs[i];
    if (r->state == REQ_ISSUED && r->worker == w->idx && r->seq == seq) {
      r->state = REQ_RECEIVING;
      return r->buf;
    }
  }
  for (uint32_t i = 0; i < c->nhedges; i++) {
    stk__hedge *h = &c->hedges[i];
    if (h->state == HEDGE_ISSUED && h->worker == w->idx && h->seq == seq) {
      h->state = HEDGE_RECEIVING;
      return h->buf;
    }
  }
  if (take_abandoned(w, seq)) { /* the losing copy of a hedged batch */
    if (w->outstanding) w->outstanding--;
    c->hedge_dropped++;
  }
  c->duplicates++;
  return NULL;
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
    c->bytes += x->total;
    if (x->dst) {
      /* Chunks arrive in offset order (checked above), so the running
       * checksum is the payload's: no second pass over the batch. */
      int ok = !c->cfg.verify_crc || x->crc_acc == x->crc;
      w->bytes += x->total;
      finish_copy(c, w, x->seq, ok, x->substituted, x->u8);
    }
    pthread_mutex_unlock(&c->mu);
  }
  return 0;
}

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
    } else if (h->rank == c->cfg.rank && h->epoch < c->spec.epochs &&
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
        x->dst = claim(c, w, x->seq);
      } else {
        c->duplicates++;
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
      int cut = c->stopping || c->fatal || w->dropped ||
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
    pthread_mutex_lock(&c->mu);
    if (bad) {
      char msg[256];
      snprintf(msg, sizeof(msg), "protocol error: %.200s", why);
      drop_worker(c, w, STK_PROTOCOL, msg);
    }
    int cut = w->dropped;
    pthread_mutex_unlock(&c->mu);
    if (cut) stk__rpc_stream_cancel(s);
  }
  return got_any;
}

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
  if (!final) return;
  char why[256];
  snprintf(why, sizeof(why), "it refused the stream (gRPC %s %d): %.150s",
           grpc_code_name(code), code, det);
  drop_worker(c, w, fst, why);
}

static void *remote_main(void *arg) {
  stk__worker *w = arg;
  stk__thread_name("stk-stream");
  stk_client *c = w->c;
  pthread_mutex_lock(&c->mu);
  while (!c->stopping && !c->fatal && w->listed && !w->dropped) {
    pthread_mutex_unlock(&c->mu);
    stk__rpc_stream *s = NULL;
    if (!w->ch &&
        stk__rpc_channel_open(w->address, STK_MAX_CHUNK_MSG, c->token, c->tls, &w->ch))
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
      pthread_mutex_lock(&c->mu);
      if (!w->dropped && !c->stopping) stream_ended(c, w, code, det, had);
      pthread_mutex_unlock(&c->mu);
    }
    w->failures = got_any ? 0 : w->failures + 1;
    int backoff = 100 << (w->failures < 5 ? w->failures : 5);
    if (backoff > 2000) backoff = 2000;
    for (int t = 0; t < backoff; t += 50) {
      pthread_mutex_lock(&c->mu);
      int stop = c->stopping || c->fatal || !w->listed || w->dropped;
      pthread_mutex_unlock(&c->mu);
      if (stop) break;
      stk__sleep_ms(50);
    }
    pthread_mutex_lock(&c->mu);
  }
  pthread_mutex_unlock(&c->mu);
  /* Gone from the list, dropped or stopping: the channel goes too (a
   * worker listed again gets a new thread, which opens a new one). */
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

/* ---- local worker: builds in-process ---------------------------------- */

static void *local_main(void *arg) {
  stk__worker *w = arg;
  stk__thread_name("stk-local");
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
    unsigned char *buf = r->buf; /* a local client has no hedges: stays r's */
    pthread_mutex_unlock(&c->mu);
    stk_build_info info;
    memset(&info, 0, sizeof(info));
    stk__addr a;
    stk__seq_addr(c, seq, &a);
    int st = stk_builder_build_at(b, a.epoch, a.offset, c->cfg.rank, a.step, buf,
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
    /* Fault injection for tests ($STOKER_FAULT_CRC_EVERY=N): every Nth
     * local batch counts as a crc32c mismatch and takes the re-request
     * path a corrupted network batch takes (a local worker is never
     * dropped for it: it is the only one). */
    int crc_ok = 1;
    if (c->fault_crc_every && ++c->fault_count % c->fault_crc_every == 0) crc_ok = 0;
    finish_copy(c, w, seq, crc_ok, info.substituted, 0);
  }
  w->thread_exited = 1;
  pthread_mutex_unlock(&c->mu);
  stk_builder_destroy(b);
  return NULL;
}

/* ---- scheduler -------------------------------------------------------- */

/* Under mu: the worker for a request, or NULL if none can take one. A
 * hedge (hedge != 0) never goes to `avoid` (the request's own worker) nor
 * to a late or probing worker; a first copy goes to `avoid` (the worker
 * that sent a bad copy) or a late worker only when no other can take it. */
static stk__worker *pick(stk_client *c, int avoid, int hedge) {
  stk__worker *best = NULL, *fallback = NULL;
  double best_score = 0, fb_score = 0, known = 0;
  int nknown = 0;
  for (uint32_t i = 0; i < c->nworkers; i++)
    if (c->workers[i].used && c->workers[i].rate > 0)
      known += c->workers[i].rate, nknown++;
  double def_rate = nknown ? known / nknown : 1.0;
  for (uint32_t i = 0; i < c->nworkers; i++) {
    stk__worker *w = &c->workers[i];
    if (!w->used || !w->alive || !w->listed || w->dropped) continue;
    uint32_t cap = w->probing ? 1 : (w->cap ? w->cap : STK__MAX_PER_WORKER);
    if (w->outstanding >= cap) continue;
    if (hedge && (w->idx == avoid || w->late || w->probing)) continue;
    /* A worker measured slow still gets work when the others' queues are
     * deep (rate floored at a quarter of the mean), so one noisy sample
     * cannot starve it for good. */
    double rate = w->rate > 0 ? w->rate : def_rate;
    if (rate < 0.25 * def_rate) rate = 0.25 * def_rate;
    double score = (w->outstanding + 1) / rate;
    if (w->idx == avoid || w->late) {
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
  return best || hedge ? best : fallback;
}

/* Under mu: mark late workers and, if a request is late and a hedge slot
 * and another worker are free, issue a hedge for it (*hedge_out, to be
 * sent by the caller). Returns when the next request becomes late (ns),
 * for the scheduler's wait. */
static int64_t hedge_scan(stk_client *c, stk__hedge **hedge_out) {
  int64_t now = stk__now_ns(), next = now + 200000000;
  *hedge_out = NULL;
  if (!c->nhedges) return next;
  for (uint32_t i = 0; i < c->nworkers; i++) {
    stk__worker *w = &c->workers[i];
    /* a worker that has not yet sent a copy we gave up on is still slow */
    w->late = w->used && w->nabandoned > 0;
  }
  for (uint32_t i = 0; i < c->nhedges; i++)
    if (c->hedges[i].state == HEDGE_ORPHAN) c->workers[c->hedges[i].worker].late = 1;
  int64_t after[STK__MAX_WORKERS];
  for (uint32_t i = 0; i < c->nworkers; i++) after[i] = -1;
  stk__req *late = NULL;
  for (uint32_t i = 0; i < c->nreqs; i++) {
    stk__req *r = &c->reqs[i];
    if ((r->state != REQ_ISSUED && r->state != REQ_RECEIVING) || r->worker < 0) continue;
    stk__worker *w = &c->workers[r->worker];
    if (w->local) continue;
    if (after[w->idx] < 0) after[w->idx] = hedge_after_ns(c, w);
    int64_t due = r->issued_ns + after[w->idx];
    /* bytes still flowing: late only once they stop */
    if (r->state == REQ_RECEIVING && w->last_msg_ns + after[w->idx] > due)
      due = w->last_msg_ns + after[w->idx];
    if (now < due) {
      if (due < next) next = due;
      continue;
    }
    w->late = 1;
    if (!r->hedged && (!late || r->seq < late->seq)) late = r;
  }
  if (!late) return next;
  stk__hedge *h = NULL;
  for (uint32_t i = 0; i < c->nhedges && !h; i++)
    if (c->hedges[i].state == HEDGE_FREE) h = &c->hedges[i];
  stk__worker *w = h ? pick(c, late->worker, 1) : NULL;
  if (!w) return next;
  h->state = HEDGE_ISSUED;
  h->req = (int)(late - c->reqs);
  h->seq = late->seq;
  h->worker = w->idx;
  h->issued_ns = now;
  late->hedge = (int)(h - c->hedges);
  late->hedged = 1;
  w->last_assigned_ns = now;
  if (w->outstanding == 0) w->last_msg_ns = now;
  w->outstanding++;
  c->hedges_sent++;
  *hedge_out = h;
  return now; /* look again at once: another may be late too */
}

/* Send w the request for seq on stream s, unless meanwhile it was taken
 * back (still_mine re-checks under mu). Called and returns with mu held;
 * drops it while sending. */
static void send_request(stk_client *c, stk__worker *w, uint64_t seq, stk__req *r,
                         stk__hedge *h) {
  stk__rpc_stream *s = w->stream;
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_lock(&w->send_mu);
  pthread_mutex_lock(&c->mu);
  int still = w->stream == s && s &&
              (r ? r->state == REQ_ISSUED && r->worker == w->idx && r->seq == seq
                 : h->state == HEDGE_ISSUED && h->worker == w->idx && h->seq == seq);
  /* The other copy won before this one was sent: it was abandoned, but it
   * will never come, so it no longer counts against w. */
  if (!still && w->stream == s && s && take_abandoned(w, seq) && w->outstanding)
    w->outstanding--;
  pthread_mutex_unlock(&c->mu);
  if (still) {
    Stoker__V1__BatchRequest req = STOKER__V1__BATCH_REQUEST__INIT;
    req.job_hash = c->job_hash;
    stk__addr a;
    stk__seq_addr(c, seq, &a);
    req.epoch = a.epoch;
    req.rank = c->cfg.rank;
    req.step = a.step;
    req.sample_offset = a.offset;
    req.image_uint8 = c->wire_u8;
    if (stk__rpc_stream_send_msg(s, &req.base)) stk__rpc_stream_cancel(s);
  }
  pthread_mutex_unlock(&w->send_mu);
  pthread_mutex_lock(&c->mu);
}

static void *sched_main(void *arg) {
  stk_client *c = arg;
  stk__thread_name("stk-sched");
  pthread_mutex_lock(&c->mu);
  while (!c->stopping && !c->fatal) {
    reclaim(c, STK__KEEP_DEPARTED);
    for (uint32_t i = 0; i < c->nreqs && c->next_issue < c->total; i++) {
      stk__req *r = &c->reqs[i];
      if (r->state != REQ_FREE) continue;
      r->state = REQ_QUEUED;
      r->seq = c->next_issue++;
      r->worker = -1;
      r->avoid = -1;
      r->hedge = -1;
      r->hedged = 0;
    }
    stk__hedge *h = NULL;
    int64_t next_late = hedge_scan(c, &h);
    if (h) {
      send_request(c, &c->workers[h->worker], h->seq, NULL, h);
      continue;
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
    int64_t wait_ms = (next_late - stk__now_ns()) / 1000000 + 1;
    stk__worker *w = r ? pick(c, r->avoid, 0) : NULL;
    if (!w) {
      int64_t cap = r ? 100 : 200;
      stk__cond_wait_ms(&c->cv_sched, &c->mu, wait_ms < cap ? wait_ms : cap);
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
    send_request(c, w, seq, r, NULL);
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
