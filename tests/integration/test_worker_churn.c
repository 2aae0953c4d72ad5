/* test_worker_churn.c - libstoker's worker table reuses the entries of
 * workers that left: a rogue coordinator in this process (Join,
 * WatchWorkers, Finish) lists worker after worker, 300 distinct ids in 30
 * lists of 10 beside a steady worker "good-a", more than the table's 256
 * entries; then a list with only a new worker "good-b". Every worker is
 * served by the in-process worker of rogue_util.h (correct batches), good-b
 * on its own port. Before reuse, the table filled up and good-b was never
 * used: the rank stalled into "no live worker". Now the rank receives
 * every step exactly once, in order, byte-identical to the reference, and
 * good-b serves the batches after the churn.
 *
 * The lists are paced by conditions, never by a clock: list k goes out
 * once the previous list's workers have opened their streams and the
 * streams of the one before have closed (counted by the rogue worker), so
 * the client never holds more than a few dozen leaving workers at once.
 *
 * usage: test_worker_churn <stoker-coordinator> <stoker-worker> [...]
 *        (the binaries are not used: the coordinator is the test itself)
 */
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "common/clock.h"
#include "rogue_util.h"
#include "stoker/client.h"

#define ROUNDS    30
#define PER_ROUND 10
#define STEPS     60

static char job_text[4096];
static uint64_t job_hash;

/* One WatchWorkers call; in L.watchers from its open to its close. */
typedef struct watcher {
  stk__rpc_call *call;
  int started;   /* its request came: lists go out from now on */
  uint64_t sent; /* the version it has */
  struct watcher *next;
} watcher;

/* The list the rogue coordinator publishes, and the watches that get it;
 * guarded by L.mu. */
static struct {
  pthread_mutex_t mu;
  uint64_t version;
  int n;
  char ids[PER_ROUND + 1][32];
  char addrs[PER_ROUND + 1][64];
  watcher *watchers;
} L = {PTHREAD_MUTEX_INITIALIZER, 1, 0, {{0}}, {{0}}, NULL};

/* Under L.mu: the current list as messages (pointing into L). */
static uint64_t snapshot(Stoker__V1__WorkerInfo *w, Stoker__V1__WorkerInfo **wp,
                         size_t *n) {
  for (int i = 0; i < L.n; i++) {
    stoker__v1__worker_info__init(&w[i]);
    w[i].worker_id = L.ids[i];
    w[i].address = L.addrs[i];
    w[i].cores = 1;
    wp[i] = &w[i];
  }
  *n = (size_t)L.n;
  return L.version;
}

/* Under L.mu: send the current list to w unless it has it. A watch whose
 * send fails is ended (OK, as when the client goes). */
static void watch_send_locked(watcher *w) {
  if (!w->started || w->sent == L.version) return;
  Stoker__V1__WorkerInfo wi[PER_ROUND + 1], *wp[PER_ROUND + 1];
  Stoker__V1__WorkerList l = STOKER__V1__WORKER_LIST__INIT;
  l.workers = wp;
  w->sent = l.version = snapshot(wi, wp, &l.n_workers);
  if (stk__rpc_call_send_msg(w->call, &l.base)) /* copies: L may change after */
    stk__rpc_call_finish(w->call, GRPC_STATUS_OK, "");
}

static void publish(int n, char ids[][32], char addrs[][64]) {
  pthread_mutex_lock(&L.mu);
  L.n = n;
  for (int i = 0; i < n; i++) {
    memcpy(L.ids[i], ids[i], sizeof(L.ids[i]));
    memcpy(L.addrs[i], addrs[i], sizeof(L.addrs[i]));
  }
  L.version++;
  for (watcher *w = L.watchers; w; w = w->next) watch_send_locked(w);
  pthread_mutex_unlock(&L.mu);
}

static void on_join(stk__rpc_call *call, const ProtobufCMessage *q) {
  (void)q;
  Stoker__V1__JobSpec job = STOKER__V1__JOB_SPEC__INIT;
  job.canonical = job_text;
  job.hash = job_hash;
  Stoker__V1__WorkerInfo w[PER_ROUND + 1], *wp[PER_ROUND + 1];
  Stoker__V1__JoinResponse r = STOKER__V1__JOIN_RESPONSE__INIT;
  r.job = &job;
  r.workers = wp;
  pthread_mutex_lock(&L.mu);
  r.list_version = snapshot(w, wp, &r.n_workers);
  stk__rpc_call_reply(call, &r.base); /* copies: L may change after */
  pthread_mutex_unlock(&L.mu);
}

/* WatchWorkers: every new list goes out (from publish) until the client
 * goes (the server's stop ends the watch otherwise). */
static int watch_open(stk__rpc_call *call) {
  watcher *w = calloc(1, sizeof(*w));
  if (!w) {
    stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  w->call = call;
  stk__rpc_call_set_data(call, w);
  pthread_mutex_lock(&L.mu);
  w->next = L.watchers;
  L.watchers = w;
  pthread_mutex_unlock(&L.mu);
  return 0;
}

static void watch_message(stk__rpc_call *call, const ProtobufCMessage *q) {
  if (!q) {
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "bad watch");
    return;
  }
  watcher *w = stk__rpc_call_data(call);
  pthread_mutex_lock(&L.mu);
  if (!w->started) { /* later requests are not read, as before the port */
    w->started = 1;
    w->sent = ((const Stoker__V1__WatchRequest *)q)->known_version;
    watch_send_locked(w);
  }
  pthread_mutex_unlock(&L.mu);
}

static void watch_closed(stk__rpc_call *call) {
  watcher *w = stk__rpc_call_data(call);
  pthread_mutex_lock(&L.mu);
  for (watcher **p = &L.watchers; *p; p = &(*p)->next)
    if (*p == w) {
      *p = w->next;
      break;
    }
  pthread_mutex_unlock(&L.mu);
  free(w);
}

static const stk__rpc_stream_ops watch_ops = {watch_open, watch_message, NULL, NULL,
                                              watch_closed};

static void on_finish(stk__rpc_call *call, const ProtobufCMessage *q) {
  (void)q;
  Stoker__V1__FinishResponse r = STOKER__V1__FINISH_RESPONSE__INIT;
  stk__rpc_call_reply(call, &r.base);
}

/* Take the next batch and check it against the reference: 0 or -1. */
static int take(stk_client *c, const stk_job_spec *spec, uint64_t step,
                unsigned char *ref, size_t len) {
  stk_batch *b = NULL;
  int st = stk_client_next(c, &b);
  if (st != STK_OK) {
    fprintf(stderr, "step %llu: %s: %s\n", (unsigned long long)step, stk_strerror(st),
            stk_client_error(c));
    return -1;
  }
  size_t n = 0;
  const void *p = stk_batch_payload(b, &n);
  char err[256];
  int ok =
      stk_batch_step(b) == step && n == len &&
      stk_build_reference(spec, NULL, 0, 0, step, ref, len, err, sizeof(err)) == STK_OK &&
      memcmp(p, ref, len) == 0;
  stk_batch_release(b);
  return ok ? 0 : -1;
}

/* Wait (bounded: 20 s) until the rogue worker opened >= o and closed >= c
 * streams; 0 or -1. */
static int wait_streams(int o, int c) {
  for (int64_t end = stk__now_ms() + 20000; stk__now_ms() < end;) {
    if (rogue_get(&R.opened) >= o && rogue_get(&R.closed) >= c) return 0;
    stk__sleep_ms(2);
  }
  fprintf(stderr, "streams: opened %d (want %d), closed %d (want %d)\n",
          rogue_get(&R.opened), o, rogue_get(&R.closed), c);
  return -1;
}

int main(void) {
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  CHECK(stk_job_spec_set(&spec, "num_samples", "240", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_set(&spec, "batch_size", "4", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_set(&spec, "world_size", "1", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_set(&spec, "height", "8", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_set(&spec, "width", "8", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_format(&spec, job_text, sizeof(job_text)) < sizeof(job_text));
  job_hash = stk_job_spec_hash(&spec);
  CHECK(rogue_set_job(job_text, job_hash) == 0);
  if (check_failures) CHECK_DONE();

  stk__rpc_init();
  stk__rpc_server *wa = NULL, *wb = NULL, *co = NULL;
  int pa = rogue_start(&wa), pb = rogue_start(&wb);
  stk__rpc_method methods[] = {
      {"/stoker.v1.Coordinator/Join", &stoker__v1__join_request__descriptor, 0, on_join,
       NULL},
      {"/stoker.v1.Coordinator/WatchWorkers", &stoker__v1__watch_request__descriptor, 0,
       NULL, &watch_ops},
      {"/stoker.v1.Coordinator/Finish", &stoker__v1__finish_request__descriptor, 0,
       on_finish, NULL}};
  stk__rpc_server_config sc;
  memset(&sc, 0, sizeof(sc));
  sc.listen = "127.0.0.1:0";
  sc.methods = methods;
  sc.nmethods = 3;
  int pc = -1;
  char err[512] = "";
  if (stk__rpc_server_start(&sc, &co, &pc, err, sizeof(err))) pc = -1;
  CHECK(pa > 0 && pb > 0 && pc > 0);
  if (check_failures) CHECK_DONE();

  char ids[PER_ROUND + 1][32], addrs[PER_ROUND + 1][64];
  snprintf(ids[0], sizeof(ids[0]), "good-a");
  for (int i = 0; i <= PER_ROUND; i++)
    snprintf(addrs[i], sizeof(addrs[i]), "127.0.0.1:%d", pa);
  publish(1, ids, addrs);

  char caddr[64];
  snprintf(caddr, sizeof(caddr), "127.0.0.1:%d", pc);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = caddr;
  cfg.rank = 0;
  cfg.world_size = 1;
  cfg.prefetch = 4;
  cfg.join_timeout_ms = 10000;
  stk_client *c = NULL;
  CHECK(stk_client_open(&cfg, &c, err, sizeof(err)) == STK_OK);
  if (!c) {
    fprintf(stderr, "open: %s\n", err);
    CHECK_DONE();
  }
  size_t len = (size_t)stk_client_payload_bytes(c);
  unsigned char *ref = malloc(len);
  uint64_t step = 0;
  for (; step < 5; step++) CHECK(take(c, &spec, step, ref, len) == 0);

  /* 300 workers come and go, PER_ROUND at a time, beside good-a. */
  int64_t t0 = stk__now_ms();
  for (int k = 0; k < ROUNDS && !check_failures; k++) {
    /* the previous list's workers have their streams; the one before's
     * are gone (good-a's stream is the +1) */
    CHECK(wait_streams(1 + PER_ROUND * k, k >= 2 ? PER_ROUND * (k - 1) : 0) == 0);
    for (int i = 0; i < PER_ROUND; i++)
      snprintf(ids[1 + i], sizeof(ids[1 + i]), "churn-%d", k * PER_ROUND + i);
    publish(1 + PER_ROUND, ids, addrs);
  }
  CHECK(wait_streams(1 + PER_ROUND * ROUNDS, PER_ROUND * (ROUNDS - 1)) == 0);
  printf("%d workers listed and unlisted in %lld ms\n", ROUNDS * PER_ROUND,
         (long long)(stk__now_ms() - t0));

  /* Only good-b from now on: entry 302 of this client's life. */
  snprintf(ids[0], sizeof(ids[0]), "good-b");
  snprintf(addrs[0], sizeof(addrs[0]), "127.0.0.1:%d", pb);
  publish(1, ids, addrs);
  /* the old workers take no new request: all but the <= 4 prefetched
   * steps come from good-b */
  for (; step < STEPS && !check_failures; step++)
    CHECK(take(c, &spec, step, ref, len) == 0);
  stk_batch *b = NULL;
  if (!check_failures) CHECK(stk_client_next(c, &b) == STK_END_OF_EPOCH);
  if (!check_failures) CHECK(stk_client_next(c, &b) == STK_END_OF_DATA);

  stk_stats s;
  stk_client_stats(c, &s);
  char suffix[16];
  snprintf(suffix, sizeof(suffix), ":%d", pb);
  uint64_t by_b = 0;
  for (uint32_t i = 0; i < s.nworkers; i++) {
    size_t al = strlen(s.workers[i].address);
    if (al > strlen(suffix) &&
        !strcmp(s.workers[i].address + al - strlen(suffix), suffix))
      by_b += s.workers[i].batches;
  }
  printf(
      "steps %llu, batches by good-b %llu, entries in stats %u, alive %u, "
      "duplicates %llu, reissued %llu\n",
      (unsigned long long)step, (unsigned long long)by_b, s.nworkers, s.workers_alive,
      (unsigned long long)s.duplicates, (unsigned long long)s.reissued);
  CHECK_EQ_U64(step, STEPS);
  CHECK(by_b > 0);
  CHECK(s.nworkers <= STK_MAX_WORKER_STATS);
  stk_client_close(c);
  free(ref);
  stk__rpc_server_stop(co, 500);
  stk__rpc_server_stop(wa, 500);
  stk__rpc_server_stop(wb, 500);
  stk__rpc_shutdown();
  CHECK_DONE();
}
