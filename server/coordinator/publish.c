/* publish.c - the worker list as clients see it: published versions,
 * each encoded once and shared by every watcher and every Join.
 *
 * Workers' sessions change the live list (C.workers) under C.mu and record
 * each change (publish_change_locked: a fixed-size copy, O(1)). The main
 * loop's tick (publish_tick) publishes at most every PUB_MIN_MS: it takes
 * the recorded changes (a pointer swap under C.mu), applies them outside
 * C.mu to the published list (a sorted table of entries, each with its
 * WorkerInfo packed once), and when the list really changed (a worker
 * added, removed, or listed again with another address, cores or ticket)
 * gives it the next version and encodes, once each:
 *   - the delta from the previous version (WorkerList{delta, base_version,
 *     workers = added or changed, removed = ids}), kept in a bounded
 *     history (PUB_HISTORY deltas, PUB_HISTORY_BYTES);
 *   - the whole list (WorkerList{version, workers});
 *   - the entries as JoinResponse.workers (field 3), for Join.
 * The whole list and Join's entries are concatenations of the cached
 * packed entries (a memcpy each, no protobuf building). Everything is a
 * refcounted grpc_slice: a send to a watcher is a byte buffer over the
 * same slice (stk__rpc_shared_buffer), never a copy or a new encoding.
 * Installing a version is a few pointer swaps under C.mu.
 *
 * Once the job ends (C.shutting_down) the next tick encodes the last list,
 * whole, with shutting_down (and failed, reason), which every watcher
 * gets whatever it knows.
 *
 * Owns: the pending changes in C (C.changes, written by the *_locked
 * helper from any file under C.mu) and P below. P's published part is
 * under C.mu; the table of entries belongs to the main loop's thread (the
 * only caller of publish_tick) and is touched without a lock. Must not
 * encode anything under C.mu beyond the job part of Join (once per change
 * of the job), and must not block. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "coordinator.h"
#include "daemon_log.h"

/* A published entry: what clients see of a worker, and its packed
 * WorkerInfo (main loop thread only). */
typedef struct pentry {
  char id[MAX_STR], address[MAX_STR], ticket[STK__TICKET_MAX];
  uint32_t cores;
  uint8_t *packed;
  size_t plen;
} pentry;

/* One delta of the history: applied to version base it gives version. */
typedef struct pdelta {
  uint64_t base, version;
  grpc_slice bytes;
} pdelta;

static struct {
  /* Main loop thread only (publish_tick): the published list, sorted by
   * id, and when it was last published. */
  pentry **tab;
  size_t n, cap;
  int64_t last_ms;
  /* The table was lost to an allocation failure: the next version is
   * built from the whole live list and has no delta (the history is
   * cleared, so every watcher gets the whole list). */
  int resync;
  /* Under C.mu (installed by publish_tick; read by the watch pump and
   * Join). version 0: nothing published yet. */
  uint64_t version;
  grpc_slice whole;        /* WorkerList at version (not a delta) */
  grpc_slice join_workers; /* the entries as JoinResponse field 3 */
  int have_final;
  grpc_slice final; /* the last list, with shutting_down */
  pdelta hist[PUB_HISTORY];
  size_t hfirst, hlen, hbytes; /* ring: oldest at hfirst */
  /* Join's job part (JoinResponse fields 1, 4, 5) for the job as it is
   * now: rebuilt when the job's hash or classes change. Under C.mu. */
  grpc_slice job_part;
  uint64_t job_hash;
  uint32_t job_nclasses;
  int job_have_classes, have_job_part;
  /* Figures for /metrics and logs (under C.mu). */
  uint64_t published, delta_bytes, whole_bytes;
} P;

/* ---- Encoding ------------------------------------------------------------ */

typedef struct wbuf {
  uint8_t *p;
  size_t len, cap;
  int oom;
} wbuf;

static void wb_need(wbuf *b, size_t n) {
  if (b->oom || b->len + n <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + n) cap *= 2;
  uint8_t *p = realloc(b->p, cap);
  if (!p) {
    b->oom = 1;
    return;
  }
  b->p = p, b->cap = cap;
}

static void wb_varint(wbuf *b, uint64_t v) {
  wb_need(b, 10);
  if (b->oom) return;
  do {
    uint8_t c = v & 0x7f;
    v >>= 7;
    b->p[b->len++] = c | (v ? 0x80 : 0);
  } while (v);
}

static void wb_bytes(wbuf *b, unsigned field, const void *p, size_t n) {
  wb_varint(b, (uint64_t)field << 3 | 2);
  wb_varint(b, n);
  wb_need(b, n);
  if (b->oom) return;
  memcpy(b->p + b->len, p, n);
  b->len += n;
}

static void wb_uint(wbuf *b, unsigned field, uint64_t v) {
  wb_varint(b, (uint64_t)field << 3);
  wb_varint(b, v);
}

/* The buffer as a refcounted slice (ownership passes); 0, or -1 when out
 * of memory (the buffer freed). */
static int wb_slice(wbuf *b, grpc_slice *out) {
  if (b->oom) {
    free(b->p);
    return -1;
  }
  if (!b->len) {
    free(b->p);
    *out = grpc_empty_slice();
    return 0;
  }
  *out = grpc_slice_new(b->p, b->len, free);
  return 0;
}

/* Pack e's WorkerInfo into e->packed. 0 or -1. */
static int entry_pack(pentry *e) {
  Stoker__V1__WorkerInfo x = STOKER__V1__WORKER_INFO__INIT;
  x.worker_id = e->id;
  x.address = e->address;
  x.cores = e->cores;
  x.stream_ticket = e->ticket;
  size_t n = protobuf_c_message_get_packed_size(&x.base);
  uint8_t *p = malloc(n ? n : 1);
  if (!p) return -1;
  protobuf_c_message_pack(&x.base, p);
  e->packed = p, e->plen = n;
  return 0;
}

/* Every published entry as field `field` (2: WorkerList.workers, 3:
 * JoinResponse.workers). */
static void wb_entries(wbuf *b, unsigned field) {
  for (size_t i = 0; i < P.n; i++) wb_bytes(b, field, P.tab[i]->packed, P.tab[i]->plen);
}

/* ---- The published table (main loop thread) ----------------------------- */

/* Index of id in P.tab, or -(insertion point) - 1. */
static long tab_find(const char *id) {
  size_t lo = 0, hi = P.n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(P.tab[mid]->id, id);
    if (!c) return (long)mid;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -(long)lo - 1;
}

static int tab_insert(size_t at, pentry *e) {
  if (P.n == P.cap) {
    size_t cap = P.cap ? P.cap * 2 : 64;
    pentry **t = realloc(P.tab, cap * sizeof(*t));
    if (!t) return -1;
    P.tab = t, P.cap = cap;
  }
  memmove(P.tab + at + 1, P.tab + at, (P.n - at) * sizeof(*P.tab));
  P.tab[at] = e;
  P.n++;
  return 0;
}

static void entry_free(pentry *e) {
  if (!e) return;
  free(e->packed);
  free(e);
}

static void tab_remove(size_t at) {
  entry_free(P.tab[at]);
  memmove(P.tab + at, P.tab + at + 1, (P.n - at - 1) * sizeof(*P.tab));
  P.n--;
}

/* ---- Changes (any file, under C.mu) -------------------------------------- */

void publish_change_locked(const cworker *w, int removed) {
  if (C.changes_lost) return; /* the next tick reads the whole list anyway */
  if (C.nchanges == C.changes_cap) {
    size_t cap = C.changes_cap ? C.changes_cap * 2 : 16;
    pub_change *v = realloc(C.changes, cap * sizeof(*v));
    if (!v) {
      C.changes_lost = 1; /* resynchronised from C.workers at the next tick */
      return;
    }
    C.changes = v, C.changes_cap = cap;
  }
  pub_change *c = &C.changes[C.nchanges++];
  memcpy(c->id, w->id, sizeof(c->id));
  c->removed = removed;
  if (!removed) {
    memcpy(c->address, w->address, sizeof(c->address));
    memcpy(c->ticket, w->ticket, sizeof(c->ticket));
    c->cores = w->cores;
  }
}

/* Sort the changes by id, keeping their order within an id (index as the
 * last key), so the last change of each id wins. */
static int change_cmp(const void *a, const void *b) {
  const pub_change *x = a, *y = b;
  int c = strcmp(x->id, y->id);
  if (c) return c;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* ---- Publication (main loop) --------------------------------------------- */

static void hist_drop_oldest_locked(void) {
  pdelta *d = &P.hist[P.hfirst];
  P.hbytes -= GRPC_SLICE_LENGTH(d->bytes);
  grpc_slice_unref(d->bytes);
  P.hfirst = (P.hfirst + 1) % PUB_HISTORY;
  P.hlen--;
}

/* Apply the net changes v[0..n) (sorted by id, last per id wins; full: v
 * is the whole live list, so an entry not in it is removed) to the
 * table, writing the delta's added entries and removed ids into d. The
 * number of entries changed, or -1 when out of memory (the table may be
 * half applied: the caller resynchronises). */
static long apply(pub_change *v, size_t n, int full, wbuf *d) {
  long changed = 0;
  if (full) { /* removals: table entries absent from the snapshot */
    for (size_t i = P.n; i-- > 0;) {
      size_t lo = 0, hi = n;
      int found = 0;
      while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(v[mid].id, P.tab[i]->id);
        if (!c) {
          found = 1;
          break;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
      }
      if (!found) {
        wb_bytes(d, 8, P.tab[i]->id, strlen(P.tab[i]->id));
        tab_remove(i);
        changed++;
      }
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (i + 1 < n && !strcmp(v[i].id, v[i + 1].id)) continue; /* a later one wins */
    const pub_change *c = &v[i];
    long at = tab_find(c->id);
    if (c->removed) {
      if (at < 0) continue;
      wb_bytes(d, 8, c->id, strlen(c->id));
      tab_remove((size_t)at);
      changed++;
      continue;
    }
    if (at >= 0) {
      const pentry *o = P.tab[at];
      if (o->cores == c->cores && !strcmp(o->address, c->address) &&
          !strcmp(o->ticket, c->ticket))
        continue; /* listed again as it was: no change */
    }
    pentry *e = calloc(1, sizeof(*e));
    if (!e) return -1;
    memcpy(e->id, c->id, sizeof(e->id));
    memcpy(e->address, c->address, sizeof(e->address));
    memcpy(e->ticket, c->ticket, sizeof(e->ticket));
    e->cores = c->cores;
    if (entry_pack(e)) {
      free(e);
      return -1;
    }
    if (at >= 0) {
      entry_free(P.tab[at]);
      P.tab[at] = e;
    } else if (tab_insert((size_t)(-at - 1), e)) {
      entry_free(e);
      return -1;
    }
    wb_bytes(d, 2, e->packed, e->plen);
    changed++;
  }
  return changed;
}

/* The whole live list as changes (a resynchronisation). Under C.mu. NULL
 * when out of memory. */
static pub_change *snapshot_locked(size_t *n) {
  *n = state_nworkers_locked();
  pub_change *v = calloc(*n ? *n : 1, sizeof(*v));
  if (!v) return NULL;
  size_t i = 0;
  for (cworker *w = C.workers; w; w = w->next, i++) {
    memcpy(v[i].id, w->id, sizeof(v[i].id));
    memcpy(v[i].address, w->address, sizeof(v[i].address));
    memcpy(v[i].ticket, w->ticket, sizeof(v[i].ticket));
    v[i].cores = w->cores;
  }
  return v;
}

/* An allocation failed mid-way: forget the table and publish the next
 * version from the whole live list, without a delta. */
static void publish_failed(const char *what) {
  LOG_WARN("worker list: out of memory while %s; the next version is sent whole", what);
  for (size_t i = 0; i < P.n; i++) entry_free(P.tab[i]);
  P.n = 0;
  P.resync = 1;
  pthread_mutex_lock(&C.mu);
  C.changes_lost = 1;
  pthread_mutex_unlock(&C.mu);
}

void publish_tick(int64_t now) {
  pthread_mutex_lock(&C.mu);
  int need_final = C.shutting_down && !P.have_final;
  int due = C.nchanges || C.changes_lost || !P.version;
  if (!need_final && (!due || (P.version && now - P.last_ms < PUB_MIN_MS))) {
    pthread_mutex_unlock(&C.mu);
    return;
  }
  int full = C.changes_lost || !P.version;
  pub_change *v;
  size_t n;
  if (full) {
    v = snapshot_locked(&n);
    if (v) C.changes_lost = 0;
    free(C.changes);
    C.changes = NULL, C.nchanges = C.changes_cap = 0;
  } else {
    v = C.changes, n = C.nchanges;
    C.changes = NULL, C.nchanges = C.changes_cap = 0;
  }
  int failed = C.shutting_down && C.failed;
  char reason[sizeof(C.shutdown_reason)];
  snprintf(reason, sizeof(reason), "%s", failed ? C.shutdown_reason : "");
  uint64_t base = P.version;
  pthread_mutex_unlock(&C.mu);
  if (!v) { /* out of memory: try again next tick, from the whole list */
    pthread_mutex_lock(&C.mu);
    C.changes_lost = 1;
    pthread_mutex_unlock(&C.mu);
    return;
  }

  int64_t t0 = stk__now_ms();
  for (size_t i = 0; i < n; i++) v[i].seq = i;
  qsort(v, n, sizeof(*v), change_cmp);
  wbuf d = {0};
  long changed = apply(v, n, full, &d);
  free(v);
  if (changed < 0) {
    free(d.p);
    publish_failed("applying changes");
    return;
  }
  int no_delta = P.resync || !base;
  uint64_t version = base;
  grpc_slice delta = grpc_empty_slice(), whole = grpc_empty_slice(),
             join = grpc_empty_slice(), fin = grpc_empty_slice();
  int have_delta = 0, have_new = 0, have_fin = 0;
  if (changed > 0 || no_delta) {
    version = base ? base + 1 : C.first_version;
    wbuf w = {0}, j = {0};
    wb_uint(&w, 1, version);
    wb_entries(&w, 2);
    wb_entries(&j, 3);
    if (!no_delta) {
      wb_uint(&d, 1, version);
      wb_uint(&d, 6, 1);
      wb_uint(&d, 7, base);
    }
    int bad = wb_slice(&w, &whole);
    bad |= wb_slice(&j, &join);
    if (!no_delta) bad |= wb_slice(&d, &delta), have_delta = 1;
    else free(d.p);
    if (bad) {
      grpc_slice_unref(whole), grpc_slice_unref(join), grpc_slice_unref(delta);
      publish_failed("encoding");
      return;
    }
    have_new = 1;
  } else {
    free(d.p);
  }
  if (need_final) {
    wbuf f = {0};
    wb_uint(&f, 1, version);
    wb_entries(&f, 2);
    wb_uint(&f, 3, 1);
    if (failed) {
      wb_uint(&f, 4, 1);
      wb_bytes(&f, 5, reason, strlen(reason));
    }
    have_fin = wb_slice(&f, &fin) == 0;
  }
  int64_t took = stk__now_ms() - t0;

  pthread_mutex_lock(&C.mu);
  grpc_slice old_whole = grpc_empty_slice(), old_join = grpc_empty_slice();
  if (have_new) {
    old_whole = P.whole, old_join = P.join_workers;
    P.whole = whole, P.join_workers = join;
    P.version = version;
    P.published++;
    P.whole_bytes = GRPC_SLICE_LENGTH(whole);
    if (!have_delta) /* a version without a delta breaks the chain */
      while (P.hlen) hist_drop_oldest_locked();
    if (have_delta) {
      if (P.hlen == PUB_HISTORY) hist_drop_oldest_locked();
      pdelta *h = &P.hist[(P.hfirst + P.hlen) % PUB_HISTORY];
      h->base = base, h->version = version, h->bytes = delta;
      P.hlen++;
      P.hbytes += GRPC_SLICE_LENGTH(delta);
      P.delta_bytes = GRPC_SLICE_LENGTH(delta);
      while (P.hlen > 1 && P.hbytes > PUB_HISTORY_BYTES) hist_drop_oldest_locked();
    }
  }
  if (have_fin) P.final = fin, P.have_final = 1;
  size_t nlisted = P.n;
  pthread_mutex_unlock(&C.mu);
  grpc_slice_unref(old_whole), grpc_slice_unref(old_join);
  P.last_ms = now;
  if (have_new) P.resync = 0;
  if (have_new)
    LOG_DEBUG("worker list version %" PRIu64
              ": %zu listed, %ld changed (%zu bytes as a "
              "delta, %zu whole), encoded in %" PRId64 " ms",
              version, nlisted, changed, have_delta ? GRPC_SLICE_LENGTH(delta) : 0,
              GRPC_SLICE_LENGTH(whole), took);
}

/* ---- Readers (under C.mu) ------------------------------------------------ */

uint64_t publish_version_locked(void) { return P.version; }

int publish_messages_locked(uint64_t known, int deltas, int final, grpc_byte_buffer **out,
                            size_t max, uint64_t *version) {
  if (final) {
    if (!P.have_final || !max) return 0;
    *version = P.version;
    return (out[0] = stk__rpc_shared_buffer(&P.final, 1)) ? 1 : -1;
  }
  if (!P.version || known == P.version) return 0;
  *version = P.version;
  size_t from = P.hlen;
  if (deltas && known)
    for (size_t i = 0; i < P.hlen; i++)
      if (P.hist[(P.hfirst + i) % PUB_HISTORY].base == known) {
        from = i;
        break;
      }
  if (from < P.hlen && P.hlen - from <= max) {
    size_t k = 0;
    for (size_t i = from; i < P.hlen; i++) {
      out[k] = stk__rpc_shared_buffer(&P.hist[(P.hfirst + i) % PUB_HISTORY].bytes, 1);
      if (!out[k]) {
        for (size_t j = 0; j < k; j++) grpc_byte_buffer_destroy(out[j]);
        return -1;
      }
      k++;
    }
    return (int)k;
  }
  return (out[0] = stk__rpc_shared_buffer(&P.whole, 1)) ? 1 : -1;
}

/* Rebuild Join's job part when the job changed. 0 or -1. */
static int job_part_locked(void) {
  if (P.have_job_part && P.job_hash == C.hash && P.job_nclasses == C.nclasses &&
      P.job_have_classes == C.have_classes)
    return 0;
  Stoker__V1__JobSpec job = STOKER__V1__JOB_SPEC__INIT;
  job.canonical = C.canonical;
  job.hash = C.hash;
  Stoker__V1__JoinResponse resp = STOKER__V1__JOIN_RESPONSE__INIT;
  resp.job = &job;
  resp.num_classes = C.nclasses;
  resp.classes = C.classes;
  resp.n_classes = C.classes ? C.nclasses : 0;
  size_t n = protobuf_c_message_get_packed_size(&resp.base);
  uint8_t *p = malloc(n ? n : 1);
  if (!p) return -1;
  protobuf_c_message_pack(&resp.base, p);
  if (P.have_job_part) grpc_slice_unref(P.job_part);
  P.job_part = grpc_slice_new(p, n, free);
  P.job_hash = C.hash, P.job_nclasses = C.nclasses;
  P.job_have_classes = C.have_classes, P.have_job_part = 1;
  return 0;
}

grpc_byte_buffer *publish_join_reply_locked(uint64_t *version) {
  if (job_part_locked()) return NULL;
  uint8_t v[11];
  size_t k = 0;
  uint64_t x = P.version;
  v[k++] = 2 << 3; /* JoinResponse.list_version */
  do {
    uint8_t c = x & 0x7f;
    x >>= 7;
    v[k++] = c | (x ? 0x80 : 0);
  } while (x);
  grpc_slice s[3] = {P.job_part, grpc_slice_from_copied_buffer((const char *)v, k),
                     P.join_workers};
  grpc_byte_buffer *bb = stk__rpc_shared_buffer(s, 3);
  grpc_slice_unref(s[1]);
  *version = P.version;
  return bb;
}

void publish_figures_locked(uint64_t *version, uint64_t *published, uint64_t *delta_bytes,
                            uint64_t *whole_bytes, size_t *history) {
  *version = P.version, *published = P.published;
  *delta_bytes = P.delta_bytes, *whole_bytes = P.whole_bytes;
  *history = P.hlen;
}

void publish_free(void) {
  for (size_t i = 0; i < P.n; i++) entry_free(P.tab[i]);
  free(P.tab);
  P.tab = NULL, P.n = P.cap = 0;
  while (P.hlen) hist_drop_oldest_locked();
  if (P.version) grpc_slice_unref(P.whole), grpc_slice_unref(P.join_workers);
  if (P.have_final) grpc_slice_unref(P.final);
  if (P.have_job_part) grpc_slice_unref(P.job_part);
  P.version = 0, P.have_final = P.have_job_part = 0;
  free(C.changes);
  C.changes = NULL, C.nchanges = C.changes_cap = 0;
}
