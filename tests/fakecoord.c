/* fakecoord.c - the coordinator played by a test process (fakecoord.h).
 * Owns the published job and worker list and the open watches, all under
 * one mutex; a list goes out to the watches from fakecoord_publish. */
#include "fakecoord.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker.pb-c.h"

#define NMETHODS 3 /* Join, WatchWorkers, Finish */

/* One WatchWorkers call; in F.watchers from its open to its close. */
typedef struct watcher {
  stk__rpc_call *call;
  int started;   /* its request came: lists go out from now on */
  int deltas;    /* its request said takes_deltas */
  uint64_t sent; /* the version it has */
  struct watcher *next;
} watcher;

/* Everything below guarded by F.mu. version 0: nothing published yet. */
static struct {
  pthread_mutex_t mu;
  char job[4096];
  uint64_t hash;
  int resend_known;
  uint64_t version;
  int n;
  char ids[FAKECOORD_MAX_WORKERS][FAKECOORD_MAX_TEXT];
  char addrs[FAKECOORD_MAX_WORKERS][FAKECOORD_MAX_TEXT];
  watcher *watchers;
  int whole_asked;  /* watch requests with takes_deltas and known_version 0 */
  int deltas_asked; /* watch requests with takes_deltas */
} F = {.mu = PTHREAD_MUTEX_INITIALIZER};

void fakecoord_set_job(const char *canonical, uint64_t hash) {
  pthread_mutex_lock(&F.mu);
  snprintf(F.job, sizeof(F.job), "%s", canonical);
  F.hash = hash;
  pthread_mutex_unlock(&F.mu);
}

void fakecoord_resend_known(int on) {
  pthread_mutex_lock(&F.mu);
  F.resend_known = on;
  pthread_mutex_unlock(&F.mu);
}

/* Under F.mu: the current list as messages (pointing into F). */
static uint64_t snapshot(Stoker__V1__WorkerInfo *w, Stoker__V1__WorkerInfo **wp,
                         size_t *n) {
  for (int i = 0; i < F.n; i++) {
    stoker__v1__worker_info__init(&w[i]);
    w[i].worker_id = F.ids[i];
    w[i].address = F.addrs[i];
    w[i].cores = 1;
    wp[i] = &w[i];
  }
  *n = (size_t)F.n;
  return F.version;
}

/* Under F.mu: send the current list to w unless it has it (or, with
 * resend_known, once per request). A watch whose send fails is ended (OK,
 * as when the client goes). */
static void watch_send_locked(watcher *w, int requested) {
  if (!w->started || !F.version) return;
  if (w->sent == F.version && !(requested && F.resend_known)) return;
  Stoker__V1__WorkerInfo wi[FAKECOORD_MAX_WORKERS], *wp[FAKECOORD_MAX_WORKERS];
  Stoker__V1__WorkerList l = STOKER__V1__WORKER_LIST__INIT;
  l.workers = wp;
  w->sent = l.version = snapshot(wi, wp, &l.n_workers);
  if (stk__rpc_call_send_msg(w->call, &l.base)) /* copies: F may change after */
    stk__rpc_call_finish(w->call, GRPC_STATUS_OK, "");
}

void fakecoord_publish(int n, const char *const *ids, const char *const *addrs) {
  if (n < 0 || n > FAKECOORD_MAX_WORKERS) abort(); /* a bug in the test */
  pthread_mutex_lock(&F.mu);
  F.n = n;
  for (int i = 0; i < n; i++) {
    if (strlen(ids[i]) >= FAKECOORD_MAX_TEXT || strlen(addrs[i]) >= FAKECOORD_MAX_TEXT)
      abort();
    strcpy(F.ids[i], ids[i]);
    strcpy(F.addrs[i], addrs[i]);
  }
  F.version++;
  for (watcher *w = F.watchers; w; w = w->next) watch_send_locked(w, 0);
  pthread_mutex_unlock(&F.mu);
}

/* Under F.mu: worker id's index in F, or -1. */
static int find_locked(const char *id) {
  for (int i = 0; i < F.n; i++)
    if (!strcmp(F.ids[i], id)) return i;
  return -1;
}

void fakecoord_delta(int nadd, const char *const *ids, const char *const *addrs,
                     int nremove, const char *const *removed, int base_skew) {
  pthread_mutex_lock(&F.mu);
  Stoker__V1__WorkerInfo wi[FAKECOORD_MAX_WORKERS], *wp[FAKECOORD_MAX_WORKERS];
  if (nadd > FAKECOORD_MAX_WORKERS) abort();
  for (int i = 0; i < nadd; i++) {
    int k = find_locked(ids[i]);
    if (k < 0) {
      if (F.n == FAKECOORD_MAX_WORKERS) abort();
      k = F.n++;
    }
    if (strlen(ids[i]) >= FAKECOORD_MAX_TEXT || strlen(addrs[i]) >= FAKECOORD_MAX_TEXT)
      abort();
    strcpy(F.ids[k], ids[i]);
    strcpy(F.addrs[k], addrs[i]);
    stoker__v1__worker_info__init(&wi[i]);
    wi[i].worker_id = (char *)ids[i];
    wi[i].address = (char *)addrs[i];
    wi[i].cores = 1;
    wp[i] = &wi[i];
  }
  for (int i = 0; i < nremove; i++) {
    int k = find_locked(removed[i]);
    if (k < 0) continue;
    F.n--;
    strcpy(F.ids[k], F.ids[F.n]);
    strcpy(F.addrs[k], F.addrs[F.n]);
  }
  uint64_t base = F.version++;
  Stoker__V1__WorkerList d = STOKER__V1__WORKER_LIST__INIT;
  d.version = F.version;
  d.delta = 1;
  d.base_version = base + (uint64_t)base_skew;
  d.workers = wp;
  d.n_workers = (size_t)nadd;
  d.removed = (char **)removed;
  d.n_removed = (size_t)nremove;
  for (watcher *w = F.watchers; w; w = w->next) {
    if (!w->started) continue;
    if (!w->deltas || w->sent != base) {
      watch_send_locked(w, 0); /* the whole list */
      continue;
    }
    w->sent = F.version;
    if (stk__rpc_call_send_msg(w->call, &d.base))
      stk__rpc_call_finish(w->call, GRPC_STATUS_OK, "");
  }
  pthread_mutex_unlock(&F.mu);
}

void fakecoord_watch_counts(int *deltas_asked, int *whole_asked) {
  pthread_mutex_lock(&F.mu);
  *deltas_asked = F.deltas_asked;
  *whole_asked = F.whole_asked;
  pthread_mutex_unlock(&F.mu);
}

static void on_join(stk__rpc_call *call, const ProtobufCMessage *q) {
  (void)q;
  Stoker__V1__JobSpec job = STOKER__V1__JOB_SPEC__INIT;
  Stoker__V1__WorkerInfo w[FAKECOORD_MAX_WORKERS], *wp[FAKECOORD_MAX_WORKERS];
  Stoker__V1__JoinResponse r = STOKER__V1__JOIN_RESPONSE__INIT;
  r.job = &job;
  r.workers = wp;
  pthread_mutex_lock(&F.mu);
  if (!F.version) {
    pthread_mutex_unlock(&F.mu);
    stk__rpc_call_finish(call, GRPC_STATUS_UNAVAILABLE, "not ready");
    return;
  }
  job.canonical = F.job;
  job.hash = F.hash;
  r.list_version = snapshot(w, wp, &r.n_workers);
  stk__rpc_call_reply(call, &r.base); /* copies: F may change after */
  pthread_mutex_unlock(&F.mu);
}

/* WatchWorkers: the list goes out when the request comes, then every new
 * one (from fakecoord_publish), until the client goes (the server's stop
 * ends the watch otherwise). */
static int watch_open(stk__rpc_call *call) {
  watcher *w = calloc(1, sizeof(*w));
  if (!w) {
    stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  w->call = call;
  stk__rpc_call_set_data(call, w);
  pthread_mutex_lock(&F.mu);
  w->next = F.watchers;
  F.watchers = w;
  pthread_mutex_unlock(&F.mu);
  return 0;
}

static void watch_message(stk__rpc_call *call, const ProtobufCMessage *q) {
  if (!q) {
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "bad watch");
    return;
  }
  watcher *w = stk__rpc_call_data(call);
  pthread_mutex_lock(&F.mu);
  if (!w->started) { /* later requests are not read */
    const Stoker__V1__WatchRequest *wr = (const Stoker__V1__WatchRequest *)q;
    w->started = 1;
    w->deltas = wr->takes_deltas;
    w->sent = wr->known_version;
    F.deltas_asked += wr->takes_deltas ? 1 : 0;
    F.whole_asked += wr->takes_deltas && !wr->known_version ? 1 : 0;
    watch_send_locked(w, 1);
  }
  pthread_mutex_unlock(&F.mu);
}

static void watch_closed(stk__rpc_call *call) {
  watcher *w = stk__rpc_call_data(call);
  pthread_mutex_lock(&F.mu);
  for (watcher **p = &F.watchers; *p; p = &(*p)->next)
    if (*p == w) {
      *p = w->next;
      break;
    }
  pthread_mutex_unlock(&F.mu);
  free(w);
}

static const stk__rpc_stream_ops watch_ops = {watch_open, watch_message, NULL, NULL,
                                              watch_closed};

static void on_finish(stk__rpc_call *call, const ProtobufCMessage *q) {
  (void)q;
  Stoker__V1__FinishResponse r = STOKER__V1__FINISH_RESPONSE__INIT;
  stk__rpc_call_reply(call, &r.base);
}

static void methods(stk__rpc_method *m) {
  const stk__rpc_method ms[NMETHODS] = {
      {"/stoker.v1.Coordinator/Join", &stoker__v1__join_request__descriptor, 0, on_join,
       NULL},
      {"/stoker.v1.Coordinator/WatchWorkers", &stoker__v1__watch_request__descriptor, 0,
       NULL, &watch_ops},
      {"/stoker.v1.Coordinator/Finish", &stoker__v1__finish_request__descriptor, 0,
       on_finish, NULL}};
  memcpy(m, ms, sizeof(ms));
}

int fakecoord_start(const stk__rpc_method *extra, size_t nextra, stk__rpc_server **srv,
                    int *port, char *err, size_t errlen) {
  stk__rpc_method *m = calloc(NMETHODS + nextra, sizeof(*m));
  if (!m) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  methods(m);
  if (nextra) memcpy(m + NMETHODS, extra, nextra * sizeof(*m));
  stk__rpc_server_config sc;
  memset(&sc, 0, sizeof(sc));
  sc.listen = "127.0.0.1:0";
  sc.methods = m;
  sc.nmethods = NMETHODS + nextra;
  int rc = stk__rpc_server_start(&sc, srv, port, err, errlen) ? -1 : 0;
  free(m);
  return rc;
}
