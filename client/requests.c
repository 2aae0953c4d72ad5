/* requests.c - the request and hedge state machine (client_internal.h): every
 * state change of c->pool's receive buffers and hedge slots, and the
 * per-worker load, latency and rate that completing a copy updates.
 *
 * Both copies of a hedged batch are byte-identical (a batch is a function
 * of its address); the first complete one with a valid crc32c wins, the
 * other is dropped when it comes (there is no per-request cancel in the
 * protocol) and counted.
 *
 * Owns: the states of c->pool.reqs[] and c->pool.hedges[] and the pool's
 * counters; the load part of each worker entry. Every function runs under
 * c->mu and never blocks. Must not: touch a buffer's bytes (the receivers
 * and the copy thread do, outside the lock).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "client_internal.h"

/* h back to FREE, tied to no request or worker. */
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

/* 1 (and forgotten) if seq was abandoned on w. */
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
  stk__hedge *h = &c->pool.hedges[r->hedge];
  unsigned char *tmp = r->buf;
  r->buf = h->buf;
  h->buf = tmp;
  r->state = h->state == HEDGE_RECEIVING ? REQ_RECEIVING : REQ_ISSUED;
  r->worker = h->worker;
  r->issued_ns = h->issued_ns;
  r->hedge = -1;
  hedge_free(h);
}

/* ---- the scheduler's side --------------------------------------------- */

void stk__req_fill(stk_client *c, uint64_t *next, uint64_t end) {
  for (uint32_t i = 0; i < c->pool.nreqs && *next < end; i++) {
    stk__req *r = &c->pool.reqs[i];
    if (r->state != REQ_FREE) continue;
    r->state = REQ_QUEUED;
    r->seq = (*next)++;
    r->worker = -1;
    r->avoid = -1;
    r->hedge = -1;
    r->hedged = 0;
  }
}

stk__req *stk__req_first_queued(stk_client *c) {
  stk__req *r = NULL;
  for (uint32_t i = 0; i < c->pool.nreqs; i++) {
    stk__req *q = &c->pool.reqs[i];
    if (q->state == REQ_QUEUED && (!r || q->seq < r->seq)) r = q;
  }
  return r;
}

void stk__req_issue(stk_client *c, stk__req *r, stk__worker *w) {
  (void)c;
  r->state = REQ_ISSUED;
  r->worker = w->idx;
  r->issued_ns = stk__now_ns();
  w->last_assigned_ns = r->issued_ns;
  if (w->outstanding == 0) w->last_msg_ns = r->issued_ns;
  w->outstanding++;
}

stk__hedge *stk__hedge_find_free(stk_client *c) {
  for (uint32_t i = 0; i < c->pool.nhedges; i++)
    if (c->pool.hedges[i].state == HEDGE_FREE) return &c->pool.hedges[i];
  return NULL;
}

void stk__hedge_issue(stk_client *c, stk__hedge *h, stk__req *r, stk__worker *w,
                      int64_t now) {
  h->state = HEDGE_ISSUED;
  h->req = (int)(r - c->pool.reqs);
  h->seq = r->seq;
  h->worker = w->idx;
  h->issued_ns = now;
  r->hedge = (int)(h - c->pool.hedges);
  r->hedged = 1;
  w->last_assigned_ns = now;
  if (w->outstanding == 0) w->last_msg_ns = now;
  w->outstanding++;
  c->pool.hedges_sent++;
}

int stk__req_still_issued(const stk__worker *w, uint64_t seq, const stk__req *r,
                          const stk__hedge *h) {
  return r ? r->state == REQ_ISSUED && r->worker == w->idx && r->seq == seq
           : h->state == HEDGE_ISSUED && h->worker == w->idx && h->seq == seq;
}

void stk__req_unsent(stk__worker *w, uint64_t seq) {
  if (take_abandoned(w, seq) && w->outstanding) w->outstanding--;
}

/* ---- the receivers' side ---------------------------------------------- */

unsigned char *stk__req_claim(stk_client *c, stk__worker *w, uint64_t seq) {
  for (uint32_t i = 0; i < c->pool.nreqs; i++) {
    stk__req *r = &c->pool.reqs[i];
    if (r->state == REQ_ISSUED && r->worker == w->idx && r->seq == seq) {
      r->state = REQ_RECEIVING;
      return r->buf;
    }
  }
  for (uint32_t i = 0; i < c->pool.nhedges; i++) {
    stk__hedge *h = &c->pool.hedges[i];
    if (h->state == HEDGE_ISSUED && h->worker == w->idx && h->seq == seq) {
      h->state = HEDGE_RECEIVING;
      return h->buf;
    }
  }
  if (take_abandoned(w, seq)) { /* the losing copy of a hedged batch */
    if (w->outstanding) w->outstanding--;
    c->pool.hedge_dropped++;
  }
  c->pool.duplicates++;
  return NULL;
}

void stk__pool_duplicate(stk_client *c) { c->pool.duplicates++; }

void stk__pool_bytes(stk_client *c, uint64_t n) { c->pool.bytes += n; }

/* A copy of seq from w is complete (its buffer holds it): make the batch
 * DONE if this copy wins, else drop it. */
static void finish_copy(stk_client *c, stk__worker *w, uint64_t seq, int crc_ok,
                        uint32_t substituted, int u8) {
  int64_t now = stk__now_ns();
  if (w->outstanding) w->outstanding--;
  stk__req *r = NULL;
  stk__hedge *h = NULL;
  for (uint32_t i = 0; i < c->pool.nreqs && !r; i++) {
    stk__req *q = &c->pool.reqs[i];
    if (q->state == REQ_RECEIVING && q->worker == w->idx && q->seq == seq) r = q;
  }
  for (uint32_t i = 0; i < c->pool.nhedges && !r && !h; i++) {
    stk__hedge *q = &c->pool.hedges[i];
    if ((q->state == HEDGE_RECEIVING || q->state == HEDGE_ORPHAN) &&
        q->worker == w->idx && q->seq == seq)
      h = q;
  }
  if (!r && !h) return;                /* cannot happen: the header matched one of them */
  if (h && h->state == HEDGE_ORPHAN) { /* the other copy won meanwhile */
    hedge_free(h);
    c->pool.hedge_dropped++;
    c->pool.duplicates++;
    pthread_cond_broadcast(&c->cv_sched);
    return;
  }
  if (!crc_ok) {
    c->pool.crc_errors++;
    if (++w->crc_streak >= STK__CRC_STREAK_MAX && !w->local) {
      char why[120];
      snprintf(why, sizeof(why), "%u batches in a row failed their crc32c",
               w->crc_streak);
      stk__worker_drop(c, w, STK_CORRUPT, why);
    }
    if (h) { /* a bad hedge: the request's own copy is still coming */
      c->pool.reqs[h->req].hedge = -1;
      hedge_free(h);
    } else if (r->hedge >= 0) {
      promote(c, r);
    } else {
      c->pool.reissued++;
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
    r = &c->pool.reqs[h->req];
    unsigned char *tmp = r->buf;
    r->buf = h->buf;
    h->buf = tmp;
    c->pool.hedges_won++;
    stk__worker *pw = c->workers.table[r->worker];
    if (r->state == REQ_RECEIVING) { /* pw writes the old buffer: keep it */
      h->state = HEDGE_ORPHAN;
      h->req = -1;
      h->worker = pw->idx;
    } else {
      abandon(pw, seq);
      hedge_free(h);
    }
  } else if (r->hedge >= 0) { /* the request's own copy won */
    stk__hedge *o = &c->pool.hedges[r->hedge];
    if (o->state == HEDGE_RECEIVING) {
      o->state = HEDGE_ORPHAN;
      o->req = -1;
    } else {
      abandon(c->workers.table[o->worker], seq);
      hedge_free(o);
    }
  }
  r->u8 = u8; /* the winning copy's form, now in r->buf */
  r->state = REQ_DONE;
  r->worker = -1;
  r->hedge = -1;
  c->pool.substituted += substituted;
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

void stk__req_complete(stk_client *c, stk__worker *w, uint64_t seq, uint64_t nbytes,
                       int crc_ok, uint32_t substituted, int u8) {
  w->bytes += nbytes;
  finish_copy(c, w, seq, crc_ok, substituted, u8);
}

void stk__req_requeue_worker(stk_client *c, stk__worker *w) {
  for (uint32_t i = 0; i < c->pool.nhedges; i++) {
    stk__hedge *h = &c->pool.hedges[i];
    if (h->state == HEDGE_FREE || h->worker != w->idx) continue;
    if (h->req >= 0) c->pool.reqs[h->req].hedge = -1;
    hedge_free(h);
  }
  for (uint32_t i = 0; i < c->pool.nreqs; i++) {
    stk__req *r = &c->pool.reqs[i];
    if (r->worker != w->idx || (r->state != REQ_ISSUED && r->state != REQ_RECEIVING))
      continue;
    if (r->hedge >= 0) {
      promote(c, r);
      continue;
    }
    r->state = REQ_QUEUED;
    r->worker = -1;
    r->hedged = 0;
    c->pool.reissued++;
  }
  w->outstanding = 0;
  w->nabandoned = 0;
  w->late = 0;
  pthread_cond_broadcast(&c->cv_sched);
}

void stk__req_forget_worker(stk_client *c, int idx) {
  for (uint32_t i = 0; i < c->pool.nreqs; i++)
    if (c->pool.reqs[i].avoid == idx) c->pool.reqs[i].avoid = -1;
}

/* ---- the local worker's and the copy thread's side -------------------- */

stk__req *stk__req_local_take(stk_client *c, stk__worker *w) {
  stk__req *r = NULL;
  for (uint32_t i = 0; i < c->pool.nreqs; i++) {
    stk__req *q = &c->pool.reqs[i];
    if (q->state == REQ_ISSUED && q->worker == w->idx && (!r || q->seq < r->seq)) r = q;
  }
  if (r) r->state = REQ_RECEIVING;
  return r;
}

void stk__req_local_retry(stk_client *c, stk__worker *w, stk__req *r) {
  if (w->outstanding) w->outstanding--;
  r->state = REQ_QUEUED;
  r->worker = -1;
  c->pool.reissued++;
}

stk__req *stk__req_done(stk_client *c, uint64_t seq) {
  for (uint32_t i = 0; i < c->pool.nreqs; i++)
    if (c->pool.reqs[i].state == REQ_DONE && c->pool.reqs[i].seq == seq)
      return &c->pool.reqs[i];
  return NULL;
}

void stk__req_recycle(stk_client *c, stk__req *r) {
  (void)c;
  r->state = REQ_FREE;
}
