/* client_workers.c - the worker table: which workers this client knows, which it
 * dropped or refused, the lifetime of each entry and its runner, and this
 * rank's working set (which of the listed workers it streams from).
 *
 * The table is a growable array of pointers to entries; an entry is
 * allocated once and never moves (its runner keeps the pointer), and an id
 * index (hash buckets chained through the entries) finds a worker by id in
 * O(1), so a list delta touches only the entries it names. A worker that
 * left the list and whose runner has ended is "departed": its entry (and
 * counters, for the stats) is kept until more than STK__KEEP_DEPARTED have
 * departed, then reused. There is no fixed limit on the number of workers.
 *
 * The working set. A rank streams from a bounded set of the listed
 * workers, not from all of them: the k workers with the highest weighted
 * rendezvous (HRW) score for (job hash, rank, worker id), weighted by the
 * worker's cores (wset.h has the formula), plus every worker this rank
 * covers (hash(id, job) mod world_size == rank, so every worker is in some
 * rank's set). k is cfg.working_set (default 8), grown up to
 * cfg.working_set_max (default 4k). A worker joining or leaving changes
 * only the sets it enters or leaves. Only workers in the set are "wanted"
 * (stk__worker_wanted): they get a runner (stk__stream_start) and new
 * requests; one that leaves the set takes no new request, finishes what it
 * holds and its runner ends, as an unlisted worker's does.
 *
 * The policy (stk__workers_tick, the scheduler thread, every 250 ms):
 * - grow: when the caller stalled in next() (over 1% of the last tick)
 *   while every member with a live stream is busy (requests outstanding,
 *   or a batch done during that tick), the set takes the next worker in
 *   HRW order, at most once a second, up to working_set_max;
 * - shrink: after 10 s with the stall under 1% in every tick, it gives one
 *   grown worker back (the lowest scored), one per 10 s, down to k;
 *   coverage workers are never given back;
 * - replace: a member the client dropped leaves at once, and an HRW member
 *   with no live stream for 5 s (it cannot be reached) is skipped for 30 s;
 *   in both cases the next worker in HRW order takes its place.
 * Every change is logged (rate-limited, stk__clog): "streams from 8 of 300
 * workers (working set 8, +2 coverage)"; stk_stats.working_set shows the
 * size. A local client has one worker, always wanted.
 *
 * Dropping a worker (for this client only; it may serve other ranks, see
 * stream.c for when): its id is remembered so a later worker list does not
 * bring it back; the reason is kept (c->workers.drop_msg) and becomes the
 * client's error if no worker is left for no_worker_timeout_ms. A dropped
 * worker is never fatal by itself.
 *
 * Owns: c->workers and the table and working-set parts of each entry
 * (stk__worker). Must not: block in gRPC while holding c->mu.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "client_internal.h"
#include "wset.h"

#define MS              1000000LL
#define TICK_NS         (250 * MS) /* the policy's period */
#define GROW_EVERY_NS   (1000 * MS)
#define SHRINK_CALM_NS  (10000 * MS)
#define STALL_FRACTION  0.01
#define DOWN_REPLACE_NS (5000 * MS)  /* an HRW member unreachable this long */
#define SKIP_NS         (30000 * MS) /* ... is out of the set this long */
#define LOG_EVERY_NS    (5000 * MS)  /* working-set lines at most this often */
#define REFUSED_LOG_NS  (10000 * MS) /* refused-entry lines */

enum { WSET_OUT = 0, WSET_HRW = 1, WSET_COVER = 2 };

int stk__workers_init(stk_client *c) {
  uint32_t k = c->cfg.working_set ? c->cfg.working_set : STK__WSET_DEFAULT;
  if (k > STK__WSET_MAX_CAP) k = STK__WSET_MAX_CAP;
  uint32_t max = c->cfg.working_set_max ? c->cfg.working_set_max : 4 * k;
  if (max > STK__WSET_MAX_CAP) max = STK__WSET_MAX_CAP;
  if (max < k) max = k;
  c->workers.wset_k = k;
  c->workers.wset_max = max;
  return 0;
}

/* Free entry w's strings and its load block. */
static void entry_strings_free(stk__worker *w) {
  free(w->id);
  free(w->address);
  free(w->lat_ns); /* the block that holds abandoned[] too */
  w->id = w->address = NULL;
  w->lat_ns = NULL;
  w->abandoned = NULL;
}

/* Under mu: w's latency and abandoned-copy arrays, allocated at its first
 * runner (one block). 0, or -1 when out of memory. */
static int entry_load_alloc(stk__worker *w) {
  if (w->lat_ns) return 0;
  int64_t *b = calloc(
      1, STK__LAT_SAMPLES * sizeof(int64_t) + STK__MAX_PER_WORKER * sizeof(uint64_t));
  if (!b) return -1;
  w->lat_ns = b;
  w->abandoned = (uint64_t *)(b + STK__LAT_SAMPLES);
  return 0;
}

void stk__workers_free(stk_client *c) {
  if (c->io) { /* an open that failed after its join started runners */
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    pthread_mutex_unlock(&c->mu);
    stk__stream_stop_all(c);
  }
  if (!c->workers.table) return;
  for (uint32_t i = 0; i < c->workers.n; i++) {
    stk__worker *w = c->workers.table[i];
    stk__rpc_channel_close(w->ch);
    entry_strings_free(w);
    free(w);
  }
  free(c->workers.table);
  free(c->workers.index);
  c->workers.table = NULL;
  c->workers.index = NULL;
  c->workers.n = c->workers.cap = c->workers.nindex = 0;
}

void stk__workers_close_channels(stk_client *c) {
  for (uint32_t i = 0; c->workers.table && i < c->workers.n; i++) {
    stk__rpc_channel_close(c->workers.table[i]->ch);
    c->workers.table[i]->ch = NULL;
  }
}

/* ---- the id index ------------------------------------------------------ */

/* Under mu: the bucket of id_hash. */
static uint32_t *bucket(stk_client *c, uint64_t id_hash) {
  return &c->workers.index[id_hash & (c->workers.nindex - 1)];
}

/* Under mu: the used entry listed under id, or NULL. */
static stk__worker *index_find(stk_client *c, const char *id, uint64_t h) {
  if (!c->workers.nindex) return NULL;
  for (uint32_t e = *bucket(c, h); e; e = c->workers.table[e - 1]->hnext) {
    stk__worker *w = c->workers.table[e - 1];
    if (w->id_hash == h && !strcmp(w->id, id)) return w;
  }
  return NULL;
}

/* Under mu: w (used, id set) into the index. */
static void index_add(stk_client *c, stk__worker *w) {
  uint32_t *b = bucket(c, w->id_hash);
  w->hnext = *b;
  *b = (uint32_t)w->idx + 1;
}

/* Under mu: w out of the index. */
static void index_del(stk_client *c, stk__worker *w) {
  for (uint32_t *p = bucket(c, w->id_hash); *p; p = &c->workers.table[*p - 1]->hnext)
    if (*p == (uint32_t)w->idx + 1) {
      *p = w->hnext;
      w->hnext = 0;
      return;
    }
}

/* Under mu: room for one more entry pointer, with the index sized to at
 * least twice the table (rebuilt when it grows). 0 or -1. */
static int table_grow(stk_client *c) {
  if (c->workers.n < c->workers.cap) return 0;
  uint32_t cap = c->workers.cap ? 2 * c->workers.cap : 16;
  stk__worker **t = realloc(c->workers.table, cap * sizeof(*t));
  if (!t) return -1;
  c->workers.table = t;
  uint32_t nidx = 2 * cap;
  uint32_t *idx = calloc(nidx, sizeof(*idx));
  if (!idx) return -1; /* the table grew; the index stays as it was */
  c->workers.cap = cap;
  free(c->workers.index);
  c->workers.index = idx;
  c->workers.nindex = nidx;
  for (uint32_t i = 0; i < c->workers.n; i++)
    if (c->workers.table[i]->used && c->workers.table[i]->id)
      index_add(c, c->workers.table[i]);
  return 0;
}

/* ---- entries ----------------------------------------------------------- */

/* Under mu: start the local worker's thread. 0 or -1. */
static int local_start(stk__worker *w) {
  w->thread_exited = 0;
  if (pthread_create(&w->thread, NULL, stk__local_main, w)) {
    w->thread_started = 0;
    return -1;
  }
  w->thread_started = 1;
  return 0;
}

/* Under mu: w (remote, wanted) has a runner: an ended one is replaced by
 * a new one. */
static void runner_ensure(stk_client *c, stk__worker *w) {
  if (c->stopping) return;
  if (w->thread_started && w->thread_exited) w->thread_started = 0;
  if (!w->thread_started && !entry_load_alloc(w)) stk__stream_start(w);
}

/* Under mu: 1 if this client dropped a worker with this id before. */
static int is_banned(const stk_client *c, const char *id) {
  uint32_t n =
      c->workers.nbanned < STK__MAX_BANNED ? c->workers.nbanned : STK__MAX_BANNED;
  for (uint32_t i = 0; i < n; i++)
    if (!strcmp(c->workers.banned[i], id)) return 1;
  return 0;
}

static void wset_compute(stk_client *c, int64_t now);

void stk__worker_drop(stk_client *c, stk__worker *w, int status, const char *why) {
  if (w->dropped || w->local) return;
  w->dropped = 1;
  c->workers.dropped++;
  c->workers.drop_status = status;
  snprintf(c->workers.drop_msg, sizeof(c->workers.drop_msg),
           "worker %.100s dropped by this client: %.160s", w->address, why);
  if (!is_banned(c, w->id)) {
    snprintf(c->workers.banned[c->workers.nbanned % STK__MAX_BANNED], STK_MAX_ID_BYTES,
             "%s", w->id);
    c->workers.nbanned++;
  }
  stk__clog(c, "%s", c->workers.drop_msg);
  /* the next worker in HRW order takes its place */
  if (w->wset) wset_compute(c, stk__now_ns());
  pthread_cond_broadcast(&c->cv_sched);
  pthread_cond_broadcast(&c->cv_next);
}

/* Under mu: w left the list and its runner is gone (or never ran). */
static int departed(const stk__worker *w) {
  return w->used && !w->local && !w->listed && (!w->thread_started || w->thread_exited);
}

/* The runner of a departed entry has ended (thread_exited is its last
 * write under mu) and closed its channel itself. No request, hedge or
 * abandoned copy refers to it: its stream's end requeued them all. */
void stk__workers_reclaim(stk_client *c, uint32_t keep) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < c->workers.n; i++) n += departed(c->workers.table[i]) ? 1 : 0;
  while (n > keep) {
    stk__worker *old = NULL;
    for (uint32_t i = 0; i < c->workers.n; i++) {
      stk__worker *w = c->workers.table[i];
      if (departed(w) && (!old || w->left_ns < old->left_ns)) old = w;
    }
    if (!old) break;
    old->thread_started = 0;
    stk__req_forget_worker(c, old->idx);
    index_del(c, old);
    entry_strings_free(old);
    old->used = 0;
    n--;
  }
}

/* Under mu: entry w made ready for a new worker. */
static void entry_reset(stk_client *c, stk__worker *w, uint32_t i) {
  entry_strings_free(w);
  memset(w, 0, sizeof(*w));
  w->idx = (int)i;
  w->c = c;
}

/* Under mu: a free entry (an unused one, or a new one; departed ones are
 * reclaimed by the scheduler beyond STK__KEEP_DEPARTED); NULL when out of
 * memory. */
static stk__worker *entry_get(stk_client *c) {
  for (uint32_t i = 0; i < c->workers.n; i++)
    if (!c->workers.table[i]->used) {
      entry_reset(c, c->workers.table[i], i);
      return c->workers.table[i];
    }
  if (table_grow(c)) return NULL;
  stk__worker *w = calloc(1, sizeof(*w));
  if (!w) return NULL;
  w->idx = (int)c->workers.n;
  w->c = c;
  c->workers.table[c->workers.n++] = w;
  return w;
}

/* Under mu: w's stream ticket becomes t (NULL = none); a change is
 * flagged for the runner (ticket_new). */
static void ticket_set(stk__worker *w, const char *t) {
  if (!t) t = "";
  if (!strcmp(w->ticket, t)) return;
  snprintf(w->ticket, sizeof(w->ticket), "%s", t);
  w->ticket_new = 1;
  w->ticket_expired = 0;
}

/* Under mu: w's working-set score and coverage for this rank. */
static void entry_score(stk_client *c, stk__worker *w) {
  w->score = stk__wset_score(c->job.hash, c->cfg.rank, w->id_hash, w->cores);
  w->coverage = stk__wset_covers(c->job.hash, c->cfg.rank, c->cfg.world_size, w->id_hash);
}

int stk__worker_add(stk_client *c, const char *id, const char *address,
                    const char *ticket, uint32_t cores, int local) {
  uint64_t h = stk__wset_id_hash(id);
  if (!cores) cores = 1;
  stk__worker *w = index_find(c, id, h);
  if (w) {
    w->listed = 1;
    ticket_set(w, ticket);
    if (w->cores != cores) {
      w->cores = cores;
      entry_score(c, w);
    }
    /* A new address: taken when no runner uses the old one (a listed
     * worker's id names one process, so this is rare). */
    if (strcmp(w->address, address) != 0 && (!w->thread_started || w->thread_exited)) {
      char *a = strdup(address);
      if (a) free(w->address), w->address = a;
    }
    return w->idx;
  }
  if (!local && is_banned(c, id)) return -1; /* dropped earlier, then departed */
  w = entry_get(c);
  char *idc = w ? strdup(id) : NULL, *ac = idc ? strdup(address) : NULL;
  if (!ac) {
    free(idc);
    stk__workers_refuse(c, "worker list entry refused: out of memory");
    return -1;
  }
  w->used = 1;
  w->local = local;
  w->listed = 1;
  w->id = idc;
  w->address = ac;
  w->id_hash = h;
  w->cores = cores;
  entry_score(c, w);
  index_add(c, w);
  ticket_set(w, ticket);
  if (local) {
    w->alive = 1;
    if (!c->stopping && !entry_load_alloc(w)) local_start(w);
  }
  return w->idx;
}

void stk__workers_stream_end(stk_client *c, const stk__worker *w, int code,
                             const char *det) {
  if (code == GRPC_STATUS_OK) return;
  snprintf(c->workers.last_end, sizeof(c->workers.last_end),
           "%.100s closed: gRPC status %d%s%.60s", w->address, code,
           det && *det ? ", " : "", det ? det : "");
}

/* Under mu: w leaves the list: remembered as the last end. */
static void unlisted(stk_client *c, stk__worker *w) {
  if (w->listed)
    snprintf(c->workers.last_end, sizeof(c->workers.last_end),
             "%.100s unlisted by the coordinator", w->address);
  w->listed = 0;
}

void stk__worker_unlist(stk_client *c, const char *id) {
  stk__worker *w = index_find(c, id, stk__wset_id_hash(id));
  if (w && !w->local) unlisted(c, w);
}

void stk__worker_unlist_missing(stk_client *c, const char *const *ids, size_t n) {
  for (uint32_t i = 0; i < c->workers.n; i++) c->workers.table[i]->mark = 0;
  for (size_t k = 0; k < n; k++) {
    stk__worker *w = index_find(c, ids[k], stk__wset_id_hash(ids[k]));
    if (w) w->mark = 1;
  }
  for (uint32_t i = 0; i < c->workers.n; i++) {
    stk__worker *w = c->workers.table[i];
    /* An unlisted worker takes no new requests; its open stream may finish
     * what it holds (a coordinator restart briefly lists nobody), but a
     * silent one is cut after a short grace (see stream.c's rx_loop). */
    if (w->used && !w->local && !w->mark) unlisted(c, w);
  }
}

/* ---- the working set ---------------------------------------------------- */

int stk__worker_wanted(const stk_client *c, const stk__worker *w) {
  (void)c;
  return w->used && w->listed && !w->dropped && (w->local || w->wset != WSET_OUT);
}

/* Under mu: the working-set line, now or (rate-limited) at a later tick. */
static void wset_log(stk_client *c, int64_t now) {
  if (c->workers.wset_log_ns && now - c->workers.wset_log_ns < LOG_EVERY_NS) {
    c->workers.wset_log_pending = 1;
    return;
  }
  c->workers.wset_log_pending = 0;
  c->workers.wset_log_ns = now;
  uint32_t hrw = c->workers.wset_size - c->workers.wset_cover;
  if (c->workers.wset_size == c->workers.listed)
    stk__clog(c, "streams from all %u workers (working set %u, +%u coverage)",
              c->workers.listed, hrw, c->workers.wset_cover);
  else
    stk__clog(c,
              "streams from %u of %u workers (working set %u, +%u coverage; "
              "k %u, up to %u when input-bound)",
              c->workers.wset_size, c->workers.listed, hrw, c->workers.wset_cover,
              c->workers.wset_k, c->workers.wset_max);
}

/* Under mu: worker w can be in the HRW part of the set now. */
static int eligible(const stk__worker *w, int64_t now) {
  return w->used && !w->local && w->listed && !w->dropped && w->skip_until_ns <= now;
}

/* Under mu: recompute the set (the top k + extra eligible workers by
 * score, plus this rank's coverage workers), start the runners of workers
 * that entered it, log a change. O(M log k). On out of memory the set
 * stays as it was. */
static void wset_compute(stk_client *c, int64_t now) {
  if (c->local) return;
  uint32_t n = 0, listed = 0;
  for (uint32_t i = 0; i < c->workers.n; i++) {
    const stk__worker *w = c->workers.table[i];
    n += eligible(w, now) ? 1 : 0;
    listed += w->used && !w->local && w->listed ? 1 : 0;
  }
  uint32_t t = c->workers.wset_k + c->workers.wset_extra;
  if (t > c->workers.wset_max) t = c->workers.wset_max;
  double *score = malloc((n ? n : 1) * sizeof(*score));
  uint32_t *who = malloc((n ? n : 1) * sizeof(*who));
  uint32_t *top = malloc((t ? t : 1) * sizeof(*top));
  if (!score || !who || !top) {
    free(score), free(who), free(top);
    return;
  }
  uint32_t m = 0;
  for (uint32_t i = 0; i < c->workers.n; i++) {
    stk__worker *w = c->workers.table[i];
    w->mark = WSET_OUT;
    if (!eligible(w, now)) continue;
    score[m] = w->score;
    who[m++] = i;
  }
  uint32_t ntop = stk__wset_top(score, m, t, top);
  for (uint32_t j = 0; j < ntop; j++) c->workers.table[who[top[j]]]->mark = WSET_HRW;
  free(score), free(who), free(top);
  uint32_t size = 0, cover = 0, changed = 0;
  for (uint32_t i = 0; i < c->workers.n; i++) {
    stk__worker *w = c->workers.table[i];
    if (!w->used || w->local) continue;
    /* coverage is never given up (an unreachable coverage worker is still
     * this rank's to retry), unless it was dropped or left */
    if (w->mark == WSET_OUT && w->coverage && w->listed && !w->dropped)
      w->mark = WSET_COVER;
    if ((w->mark != WSET_OUT) != (w->wset != WSET_OUT)) {
      changed++;
      w->down_since_ns = 0;
    }
    w->wset = w->mark;
    if (w->wset == WSET_OUT) continue;
    size++;
    cover += w->wset == WSET_COVER ? 1 : 0;
    runner_ensure(c, w);
  }
  int first = c->workers.wset_log_ns == 0;
  changed += c->workers.listed != listed || c->workers.wset_size != size;
  c->workers.wset_size = size;
  c->workers.wset_cover = cover;
  c->workers.listed = listed;
  if (changed || first) wset_log(c, now);
  pthread_cond_broadcast(&c->cv_sched);
}

void stk__workers_changed(stk_client *c) { wset_compute(c, stk__now_ns()); }

void stk__workers_tick(stk_client *c, int64_t now) {
  stk__workers *ws = &c->workers;
  if (c->local || now - ws->wset_tick_ns < TICK_NS) return;
  int64_t span = ws->wset_tick_ns ? now - ws->wset_tick_ns : 0;
  ws->wset_tick_ns = now;
  int recompute = 0;
  /* Let skipped workers back; replace members that cannot be reached
   * (while another worker can take their place). */
  uint32_t busy = 0, members = 0, eligible_n = 0;
  for (uint32_t i = 0; i < ws->n; i++) {
    stk__worker *w = ws->table[i];
    if (w->skip_until_ns && w->skip_until_ns <= now) {
      w->skip_until_ns = 0;
      recompute = 1;
    }
    eligible_n += eligible(w, now) ? 1 : 0;
  }
  uint32_t hrw = ws->wset_size - ws->wset_cover;
  for (uint32_t i = 0; i < ws->n; i++) {
    stk__worker *w = ws->table[i];
    if (!w->used || w->local || w->wset == WSET_OUT) continue;
    members += w->alive ? 1 : 0;
    /* busy: requests outstanding now, or a batch done since the last tick
     * (a member idle only because the pool waits for another's step) */
    busy +=
        w->alive && (w->outstanding > 0 || (span > 0 && w->last_done_ns >= now - span))
            ? 1
            : 0;
    if (w->alive) w->down_since_ns = 0;
    else if (!w->down_since_ns) w->down_since_ns = now;
    else if (w->wset == WSET_HRW && now - w->down_since_ns > DOWN_REPLACE_NS &&
             eligible_n > hrw) {
      w->skip_until_ns = now + SKIP_NS;
      w->down_since_ns = 0;
      eligible_n--;
      recompute = 1;
      stk__clog(c,
                "worker %.100s unreachable for %lld s: the next worker takes its place",
                w->address, (long long)(DOWN_REPLACE_NS / (1000 * MS)));
    }
  }
  /* The caller's stall over the last tick (stall_ns grows when next
   * returns, so a long wait counts at the tick after it). */
  uint64_t stall = c->api.stall_ns - ws->wset_stall_ns;
  ws->wset_stall_ns = c->api.stall_ns;
  int stalled = span > 0 && (double)stall > STALL_FRACTION * (double)span;
  if (stalled || !ws->wset_calm_ns) ws->wset_calm_ns = now;
  if (stalled && members && busy == members &&
      ws->wset_k + ws->wset_extra < ws->wset_max && hrw < eligible_n &&
      now - ws->wset_changed_ns >= GROW_EVERY_NS) {
    ws->wset_extra++;
    ws->wset_changed_ns = now;
    recompute = 1;
  } else if (ws->wset_extra && now - ws->wset_calm_ns >= SHRINK_CALM_NS &&
             now - ws->wset_changed_ns >= SHRINK_CALM_NS) {
    ws->wset_extra--;
    ws->wset_changed_ns = now;
    recompute = 1;
  }
  if (recompute) wset_compute(c, now);
  else if (ws->wset_log_pending) wset_log(c, now);
  /* a member whose runner ended (it left and came back quickly) */
  for (uint32_t i = 0; !recompute && i < ws->n; i++) {
    stk__worker *w = ws->table[i];
    if (w->used && !w->local && stk__worker_wanted(c, w) &&
        (!w->thread_started || w->thread_exited))
      runner_ensure(c, w);
  }
}

/* ---- counts ------------------------------------------------------------ */

void stk__workers_refuse(stk_client *c, const char *msg) {
  c->workers.refused++;
  snprintf(c->workers.refused_msg, sizeof(c->workers.refused_msg), "%s", msg);
  int64_t now = stk__now_ns();
  if (c->workers.refused_log_ns && now - c->workers.refused_log_ns < REFUSED_LOG_NS)
    return;
  stk__clog(c, "%s (%llu refused, %llu since the last such line)", msg,
            (unsigned long long)c->workers.refused,
            (unsigned long long)(c->workers.refused - c->workers.refused_logged));
  c->workers.refused_log_ns = now;
  c->workers.refused_logged = c->workers.refused;
}

int stk__workers_all_dropped(stk_client *c) {
  uint32_t listed = 0, dropped = 0;
  for (uint32_t i = 0; i < c->workers.n; i++) {
    const stk__worker *w = c->workers.table[i];
    if (!w->used || !w->listed) continue;
    listed++;
    dropped += w->dropped ? 1 : 0;
  }
  return listed > 0 && dropped == listed;
}

uint32_t stk__workers_alive(stk_client *c) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < c->workers.n; i++) n += c->workers.table[i]->alive ? 1 : 0;
  return n;
}

void stk__workers_stop(stk_client *c) {
  pthread_mutex_lock(&c->mu);
  pthread_cond_broadcast(&c->cv_local);
  pthread_mutex_unlock(&c->mu);
  stk__stream_stop_all(c);
  for (uint32_t i = 0; i < c->workers.n; i++) {
    stk__worker *w = c->workers.table[i];
    if (w->thread_started && w->local) pthread_join(w->thread, NULL);
    w->thread_started = 0;
  }
}
