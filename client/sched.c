/* sched.c - the scheduler thread: spreads requests over the workers and
 * decides when a request is late enough to hedge.
 *
 * It hands each free receive buffer the next step (at most `prefetch`
 * requests outstanding in total, so memory is bounded by construction) and
 * sends the lowest queued step to the worker with the smallest
 * (outstanding + 1) / rate, rate being the worker's smoothed batches/s. A
 * worker whose stream has not answered yet gets one request (a probe)
 * until it does; a worker that is late (below) gets new requests only when
 * no other worker can take them.
 *
 * Hedged requests: a request is late when it has waited more than 3x its
 * worker's median issue-to-complete latency (over its last 16 batches; the
 * client's median until the worker has 4; never under 100 ms, so a healthy
 * run does not hedge). The scheduler then asks one other worker for the
 * same batch too: at most one hedge per batch and at most
 * c->pool.nhedges in flight (each has its own receive buffer). What
 * happens to the two copies is requests.c's.
 *
 * Owns: c->sched, each worker's `late` flag; hands requests to the
 * workers' streams (stream.c's stk__stream_send queues them, under c->mu,
 * never blocking). State changes go through requests.c. Must not: block
 * under c->mu.
 */
#include <stdlib.h>
#include <string.h>

#include "common/thread.h"
#include "common/clock.h"
#include "client_internal.h"
#include "stoker.pb-c.h"

/* qsort's order of two int64_t. */
static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0..n), n >= 1 and <= STK__LAT_SAMPLES (v unchanged). */
static int64_t median(const int64_t *v, uint32_t n) {
  int64_t t[STK__LAT_SAMPLES];
  memcpy(t, v, n * sizeof(*t));
  qsort(t, n, sizeof(*t), cmp_i64);
  return t[n / 2];
}

/* Under mu: how long a request may wait on w before it is hedged. */
static int64_t hedge_after_ns(const stk_client *c, const stk__worker *w) {
  int64_t med = 0;
  if (w->nlat >= 4) med = median(w->lat_ns, w->nlat);
  else {
    /* Not enough of w's own: the median of every worker's last sample. */
    int64_t v[STK__LAT_SAMPLES];
    uint32_t n = 0;
    for (uint32_t i = 0; i < c->workers.n && n < STK__LAT_SAMPLES; i++) {
      const stk__worker *o = c->workers.table[i];
      if (o->used && o->nlat)
        v[n++] = o->lat_ns[(o->lat_pos + STK__LAT_SAMPLES - 1) % STK__LAT_SAMPLES];
    }
    med = n ? median(v, n) : 1000000000; /* nothing known: 1 s */
  }
  int64_t after = 3 * med, floor = (int64_t)STK__HEDGE_FLOOR_MS * 1000000;
  return after > floor ? after : floor;
}

/* Under mu: the worker for a request, or NULL if none can take one. A
 * hedge (hedge != 0) never goes to `avoid` (the request's own worker) nor
 * to a late or probing worker; a first copy goes to `avoid` (the worker
 * that sent a bad copy) or a late worker only when no other can take it. */
static stk__worker *pick(stk_client *c, int avoid, int hedge) {
  stk__worker *best = NULL, *fallback = NULL;
  double best_score = 0, fb_score = 0, known = 0;
  int nknown = 0;
  for (uint32_t i = 0; i < c->workers.n; i++)
    if (c->workers.table[i]->used && c->workers.table[i]->rate > 0)
      known += c->workers.table[i]->rate, nknown++;
  double def_rate = nknown ? known / nknown : 1.0;
  for (uint32_t i = 0; i < c->workers.n; i++) {
    stk__worker *w = c->workers.table[i];
    if (!w->alive || !stk__worker_wanted(c, w)) continue;
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
  if (!c->pool.nhedges) return next;
  for (uint32_t i = 0; i < c->workers.n; i++) {
    stk__worker *w = c->workers.table[i];
    /* a worker that has not yet sent a copy we gave up on is still slow */
    w->late = w->used && w->nabandoned > 0;
    w->hedge_after_ns = -1;
  }
  for (uint32_t i = 0; i < c->pool.nhedges; i++)
    if (c->pool.hedges[i].state == HEDGE_ORPHAN)
      c->workers.table[c->pool.hedges[i].worker]->late = 1;
  stk__req *late = NULL;
  for (uint32_t i = 0; i < c->pool.nreqs; i++) {
    stk__req *r = &c->pool.reqs[i];
    if ((r->state != REQ_ISSUED && r->state != REQ_RECEIVING) || r->worker < 0) continue;
    stk__worker *w = c->workers.table[r->worker];
    if (w->local) continue;
    if (w->hedge_after_ns < 0) w->hedge_after_ns = hedge_after_ns(c, w);
    int64_t due = r->issued_ns + w->hedge_after_ns;
    /* bytes still flowing: late only once they stop */
    if (r->state == REQ_RECEIVING && w->last_msg_ns + w->hedge_after_ns > due)
      due = w->last_msg_ns + w->hedge_after_ns;
    if (now < due) {
      if (due < next) next = due;
      continue;
    }
    w->late = 1;
    if (!r->hedged && (!late || r->seq < late->seq)) late = r;
  }
  if (!late) return next;
  stk__hedge *h = stk__hedge_find_free(c);
  stk__worker *w = h ? pick(c, late->worker, 1) : NULL;
  if (!w) return next;
  stk__hedge_issue(c, h, late, w, now);
  *hedge_out = h;
  return now; /* look again at once: another may be late too */
}

static void *sched_main(void *arg) {
  stk_client *c = arg;
  stk__thread_name("stk-sched");
  pthread_mutex_lock(&c->mu);
  while (!c->stopping && !c->errs.fatal) {
    stk__recv_cpu_note(c, STK__CPU_SCHED); /* part of the receive path's CPU */
    stk__workers_reclaim(c, STK__KEEP_DEPARTED);
    stk__workers_tick(c, stk__now_ns());
    stk__req_fill(c, &c->sched.next_issue, c->plan.total);
    stk__hedge *h = NULL;
    int64_t next_late = hedge_scan(c, &h);
    if (h) {
      stk__stream_send(c, c->workers.table[h->worker], h->seq, NULL, h);
      continue;
    }
    stk__req *r = stk__req_first_queued(c);
    uint32_t alive = stk__workers_alive(c);
    if (alive) c->sched.no_worker_since_ns = 0;
    else if (!c->sched.no_worker_since_ns) c->sched.no_worker_since_ns = stk__now_ns();
    int64_t wait_ms = (next_late - stk__now_ns()) / 1000000 + 1;
    stk__worker *w = r ? pick(c, r->avoid, 0) : NULL;
    if (!w) {
      int64_t cap = r ? 250 : 1000; /* every wake costs an idle rank CPU time */
      stk__cond_wait_ms(&c->cv_sched, &c->mu, wait_ms < cap ? wait_ms : cap);
      continue;
    }
    uint64_t seq = r->seq;
    stk__req_issue(c, r, w);
    if (w->local) {
      pthread_cond_broadcast(&c->cv_local);
      continue;
    }
    stk__stream_send(c, w, seq, r, NULL);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

int stk__sched_start(stk_client *c) {
  c->sched.next_issue = c->plan.start;
  if (pthread_create(&c->sched.thread, NULL, sched_main, c)) return -1;
  c->sched.started = 1;
  return 0;
}

void stk__streams_stop(stk_client *c) {
  if (c->sched.started) pthread_join(c->sched.thread, NULL);
  c->sched.started = 0;
  stk__workers_stop(c);
}

void stk__sched_no_worker_from(stk_client *c, int64_t now) {
  c->sched.no_worker_since_ns = now;
}
