/* workers.c - the worker table: which workers this client knows, which it
 * dropped or refused, and the lifetime of each entry and its runner.
 *
 * STK__MAX_WORKERS entries. A worker that left the list and whose runner
 * (stream.c) has ended is "departed": its entry (and counters, for the stats) is
 * kept until more than STK__KEEP_DEPARTED have departed or the table is
 * full, then reused. A table full of listed workers refuses the next one
 * and says so (c->workers.refused_msg).
 *
 * Dropping a worker (for this client only; it may serve other ranks, see
 * stream.c for when): its id is remembered so a later worker list does not
 * bring it back; the reason is kept (c->workers.drop_msg) and becomes the
 * client's error if no worker is left for join_timeout_ms. A dropped
 * worker is never fatal by itself.
 *
 * Owns: c->workers and the table part of each entry (stk__worker). Must
 * not: block in gRPC while holding c->mu.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "internal.h"

int stk__workers_init(stk_client *c) {
  c->workers.table = calloc(STK__MAX_WORKERS, sizeof(stk__worker));
  return c->workers.table ? 0 : -1;
}

void stk__workers_free(stk_client *c) {
  if (!c->workers.table) return;
  if (c->io) { /* an open that failed after its join started runners */
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    pthread_mutex_unlock(&c->mu);
    stk__stream_stop_all(c);
  }
  for (uint32_t i = 0; i < c->workers.n; i++)
    stk__rpc_channel_close(c->workers.table[i].ch);
  free(c->workers.table);
  c->workers.table = NULL;
}

void stk__workers_close_channels(stk_client *c) {
  for (uint32_t i = 0; c->workers.table && i < c->workers.n; i++) {
    stk__rpc_channel_close(c->workers.table[i].ch);
    c->workers.table[i].ch = NULL;
  }
}

/* Under mu: start serving w (a remote worker's runner, or the local
 * builder's thread). 0 or -1. */
static int worker_start(stk__worker *w) {
  if (!w->local) return stk__stream_start(w);
  w->thread_exited = 0;
  if (pthread_create(&w->thread, NULL, stk__local_main, w)) {
    w->thread_started = 0;
    return -1;
  }
  w->thread_started = 1;
  return 0;
}

/* Under mu: 1 if this client dropped a worker with this id before. */
static int is_banned(const stk_client *c, const char *id) {
  uint32_t n =
      c->workers.nbanned < STK__MAX_BANNED ? c->workers.nbanned : STK__MAX_BANNED;
  for (uint32_t i = 0; i < n; i++)
    if (!strcmp(c->workers.banned[i], id)) return 1;
  return 0;
}

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
  for (uint32_t i = 0; i < c->workers.n; i++) n += departed(&c->workers.table[i]) ? 1 : 0;
  while (n > keep) {
    stk__worker *old = NULL;
    for (uint32_t i = 0; i < c->workers.n; i++) {
      stk__worker *w = &c->workers.table[i];
      if (departed(w) && (!old || w->left_ns < old->left_ns)) old = w;
    }
    if (!old) break;
    old->thread_started = 0;
    stk__req_forget_worker(c, old->idx);
    old->used = 0;
    n--;
  }
}

/* Under mu: entry i made ready for a new worker. */
static stk__worker *slot_init(stk_client *c, uint32_t i) {
  stk__worker *w = &c->workers.table[i];
  memset(w, 0, sizeof(*w));
  w->idx = (int)i;
  w->c = c;
  if (i >= c->workers.n) c->workers.n = i + 1;
  return w;
}

/* Under mu: a free entry, reclaiming departed ones if needed; NULL when
 * every entry holds a listed (or not yet departed) worker. */
static stk__worker *slot_get(stk_client *c) {
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t i = 0; i < c->workers.n; i++)
      if (!c->workers.table[i].used) return slot_init(c, i);
    if (c->workers.n < STK__MAX_WORKERS) return slot_init(c, c->workers.n);
    if (pass == 0) stk__workers_reclaim(c, 0);
  }
  return NULL;
}

/* Under mu: w's stream ticket becomes t (NULL = none); a change is
 * flagged for the runner (ticket_new). */
static void ticket_set(stk__worker *w, const char *t) {
  if (!t) t = "";
  if (!strcmp(w->ticket, t)) return;
  snprintf(w->ticket, sizeof(w->ticket), "%s", t);
  w->ticket_new = 1;
}

int stk__worker_add(stk_client *c, const char *id, const char *address,
                    const char *ticket, int local) {
  for (uint32_t i = 0; i < c->workers.n; i++) {
    stk__worker *w = &c->workers.table[i];
    if (!w->used || strcmp(w->id, id) != 0) continue;
    w->listed = 1;
    ticket_set(w, ticket);
    if (w->dropped) return (int)i;               /* listed, but not ours to use */
    if (w->thread_started && w->thread_exited) { /* its runner has ended */
      w->thread_started = 0;
    }
    if (!w->thread_started && !c->stopping) worker_start(w);
    return (int)i;
  }
  if (!local && is_banned(c, id)) return -1; /* dropped earlier, then departed */
  stk__worker *w = slot_get(c);
  if (!w) {
    c->workers.refused++;
    snprintf(c->workers.refused_msg, sizeof(c->workers.refused_msg),
             "worker table full (%d workers listed or leaving): worker %.80s not used",
             STK__MAX_WORKERS, address);
    return -1;
  }
  w->used = 1;
  w->local = local;
  w->listed = 1;
  snprintf(w->id, sizeof(w->id), "%s", id);
  snprintf(w->address, sizeof(w->address), "%s", address);
  ticket_set(w, ticket);
  if (local) w->alive = 1;
  if (!c->stopping) worker_start(w);
  return w->idx;
}

void stk__worker_unlist_missing(stk_client *c, const char *const *ids, size_t n) {
  for (uint32_t i = 0; i < c->workers.n; i++) {
    stk__worker *w = &c->workers.table[i];
    if (!w->used || w->local) continue;
    int found = 0;
    for (size_t k = 0; k < n && !found; k++) found = !strcmp(ids[k], w->id);
    /* An unlisted worker takes no new requests; its open stream may finish
     * what it holds (a coordinator restart briefly lists nobody), but a
     * silent one is cut after a short grace (see stream.c's rx_loop). */
    if (!found) w->listed = 0;
  }
  pthread_cond_broadcast(&c->cv_sched);
}

void stk__workers_refuse(stk_client *c, const char *msg) {
  c->workers.refused++;
  snprintf(c->workers.refused_msg, sizeof(c->workers.refused_msg), "%s", msg);
}

int stk__workers_all_dropped(stk_client *c) {
  uint32_t listed = 0, dropped = 0;
  for (uint32_t i = 0; i < c->workers.n; i++) {
    const stk__worker *w = &c->workers.table[i];
    if (!w->used || !w->listed) continue;
    listed++;
    dropped += w->dropped ? 1 : 0;
  }
  return listed > 0 && dropped == listed;
}

uint32_t stk__workers_alive(stk_client *c) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < c->workers.n; i++) n += c->workers.table[i].alive ? 1 : 0;
  return n;
}

void stk__workers_stop(stk_client *c) {
  pthread_mutex_lock(&c->mu);
  pthread_cond_broadcast(&c->cv_local);
  pthread_mutex_unlock(&c->mu);
  stk__stream_stop_all(c);
  for (uint32_t i = 0; i < c->workers.n; i++) {
    stk__worker *w = &c->workers.table[i];
    if (w->thread_started && w->local) pthread_join(w->thread, NULL);
    w->thread_started = 0;
  }
}
