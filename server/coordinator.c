/* coordinator.c - stoker-coordinator, one per job: loads the job spec,
 * keeps worker sessions (register, heartbeats, Drain/Shutdown commands),
 * lets client ranks join and watch the live worker list, tracks finished
 * ranks, answers Status, and ends the job in order: when every rank has
 * finished, rank 0 asks, a signal arrives or no client touched the job for
 * --idle-timeout-s, it commands every worker to shut down, waits for them
 * (bounded) and exits. A rank may instead abort the job (Finish with
 * abort_job): the job then ends as failed (state "failed", workers told
 * Shutdown{failed}, exit code 4).
 *
 * Owns the job, the worker table and the rank table, all under one mutex.
 * Calls are event driven (proto/rpc.h, "Server"): handlers run on the rpc
 * layer's threads and never block; sends only queue, so they may be made
 * under the mutex (lock order: C.mu, then the rpc layer's own locks). Must not trust the
 * network: every message is validated and a bad one ends only its own call.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "daemon.h"
#include "log.h"
#include "options.h"
#include "msgcheck.h"
#include "rpc.h"
#include "stoker.pb-c.h"
#include "stoker/augment.h"
#include "stoker/version.h"
#include "wire_limits.h"

#define PROGRAM "stoker-coordinator"

enum {
  EXIT_OK = 0,     /* the job ended: all ranks finished, rank 0 asked, or a signal */
  EXIT_FAIL = 1,   /* cannot listen, cannot write the port file */
  EXIT_USAGE = 2,  /* bad option, config file or job spec */
  EXIT_IDLE = 3,   /* no client touched the job for --idle-timeout-s */
  EXIT_ABORTED = 4 /* a rank aborted the job (Finish.abort_job) */
};

static const char exit_codes_text[] =
    "  0  the job ended: every rank finished, rank 0 asked, or SIGTERM/SIGINT\n"
    "  1  runtime failure (cannot listen, cannot write the port file)\n"
    "  2  usage error (bad option, config file or job spec)\n"
    "  3  idle timeout: no client touched the job for --idle-timeout-s "
    "(workers were still shut down)\n"
    "  4  the job was aborted: a rank (or stoker abort) asked with Finish.abort_job;\n"
    "     workers were told the job failed and exit with their own abort code\n";

#define MAX_STR STK_MAX_ID_BYTES /* worker ids and addresses (proto/wire_limits.h) */

/* ---- Options ----------------------------------------------------------- */

static struct {
  char *listen, *job, *token, *port_file, *log_level;
  stk__tls_opts tls;
  stk__strlist set;
  long long idle_timeout_s, heartbeat_interval_ms, heartbeat_misses, stats_interval_s,
      shutdown_grace_s, max_message_mb;
  int print_job;
  stk__serve_opts serve;
} opt;

static stk__option options[] = {
    {"listen", OPT_STR, "127.0.0.1:7070", stk__opt_hostport,
     "address to listen on (port 0 = any free port)", &opt.listen, 0, 0},
    {"job", OPT_STR, "", NULL, "job spec file ('key = value' lines)", &opt.job, 0, 0},
    {"set", OPT_LIST, NULL, NULL,
     "override one job key (the keys --print-job shows), e.g. --set "
     "batch_size=64; applied after --job",
     &opt.set, 0, 0},
    {"print-job", OPT_BOOL, "false", NULL,
     "print the job's canonical text and hash, then exit", &opt.print_job, 0, 0},
    {"idle-timeout-s", OPT_INT, "600", NULL,
     "end the job when no client touched it this long (a call, an open watch, "
     "or batches flowing from a worker count)",
     &opt.idle_timeout_s, 1, 86400 * 30},
    {"heartbeat-interval-ms", OPT_INT, "1000", NULL, "how often workers heartbeat",
     &opt.heartbeat_interval_ms, 50, 60000},
    {"heartbeat-misses", OPT_INT, "3", NULL,
     "missed heartbeats before a worker is dropped from the list", &opt.heartbeat_misses,
     1, 1000},
    {"stats-interval-s", OPT_INT, "10", NULL, "seconds between stats log lines",
     &opt.stats_interval_s, 1, 86400},
    {"shutdown-grace-s", OPT_INT, "15", NULL,
     "on shutdown, how long to wait for workers to drain and disconnect (a "
     "second SIGTERM/SIGINT cuts it short)",
     &opt.shutdown_grace_s, 0, 3600},
    {"token", OPT_STR, "", NULL, "bearer token every call must carry", &opt.token, 0, 0},
    STK__TLS_SERVER_OPTIONS(opt.tls),
    {"port-file", OPT_STR, "", NULL,
     "after binding, write the bound port here (decimal, newline; atomic rename)",
     &opt.port_file, 0, 0},
    {"max-message-mb", OPT_INT, "4", NULL,
     "largest gRPC message sent (requests are received with their own small "
     "limits: docs/operations.md)",
     &opt.max_message_mb, 1, 1024},
    {"log-level", OPT_STR, "info", stk__opt_loglevel, "debug | info | warn | error",
     &opt.log_level, 0, 0},
    STK__SERVE_OPTIONS(opt.serve),
};
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

/* ---- State ------------------------------------------------------------- */

/* The phases of a worker session (Coordinator.WorkerSession). */
enum { WS_HELLO, WS_HELLO2, WS_SERVING, WS_OVER };

typedef struct cworker {
  char id[MAX_STR], address[MAX_STR];
  uint32_t cores;
  stk__rpc_call *call; /* its session; valid until session_closed */
  int phase;           /* WS_*: touched only by the call's callbacks */
  uint64_t ack_hash;   /* the job hash the RegisterAck carried */
  int live;            /* in C.workers */
  int shutdown_sent;
  int64_t registered_ms, last_hb_ms;
  struct {
    uint64_t batches_built, bytes_sent, samples_substituted;
    uint32_t active_streams, queued_requests;
    double busy_fraction, batches_per_s;
  } stats;
  struct cworker *next;
} cworker;

enum { ST_WAITING, ST_RUNNING, ST_DRAINING, ST_DONE, ST_FAILED };
static const char *const state_names[] = {"waiting", "running", "draining", "done",
                                          "failed"};

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* list version changed, or shutting down */
  stk__tls *tls;     /* --tls-*, loaded at start; NULL = plaintext */
  stk_job_spec spec;
  int resolved; /* num_samples known */
  char *canonical;
  uint64_t hash;
  uint64_t fingerprint;
  int have_fp;
  cworker *workers; /* live ones */
  uint64_t version;
  uint8_t *joined, *finished;
  uint32_t njoined, nfinished;
  int shutting_down;
  int shutdown_req; /* exit code to use once requested, +1 */
  char shutdown_reason[400];
  int failed; /* the job was aborted; shutdown_reason says why */
  int64_t start_ms, last_touch_ms;
  int watchers;
  struct watcher *watch_list; /* open WatchWorkers calls */
  int done;
} C = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void touch_locked(void) { C.last_touch_ms = stk__now_ms(); }

static void request_shutdown_locked(int code, const char *why) {
  if (C.shutdown_req) return;
  C.shutdown_req = code + 1;
  snprintf(C.shutdown_reason, sizeof(C.shutdown_reason), "%s", why);
}

static int state_locked(void) {
  if (C.failed) return ST_FAILED;
  if (C.done) return ST_DONE;
  if (C.shutting_down) return ST_DRAINING;
  if (!C.resolved || !C.workers) return ST_WAITING;
  return ST_RUNNING;
}

/* Recompute the canonical text and hash after a change of the spec. */
static int job_publish_locked(void) {
  size_t n = stk_job_spec_format(&C.spec, NULL, 0);
  char *t = malloc(n + 1);
  if (!t) return -1;
  stk_job_spec_format(&C.spec, t, n + 1);
  free(C.canonical);
  C.canonical = t;
  C.hash = stk_job_spec_hash(&C.spec);
  return 0;
}

static int unlink_locked(cworker *w) {
  for (cworker **pp = &C.workers; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      w->live = 0;
      C.version++;
      pthread_cond_broadcast(&C.cv);
      return 1;
    }
  return 0;
}

static size_t nworkers_locked(void) {
  size_t n = 0;
  for (cworker *w = C.workers; w; w = w->next) n++;
  return n;
}

/* Copies of the live list (strings duplicated); free with infos_free. */
static Stoker__V1__WorkerInfo **infos_locked(size_t *n) {
  *n = nworkers_locked();
  Stoker__V1__WorkerInfo **v = calloc(*n ? *n : 1, sizeof(*v));
  if (!v) return *n = 0, NULL;
  size_t i = 0;
  for (cworker *w = C.workers; w; w = w->next) {
    Stoker__V1__WorkerInfo *x = malloc(sizeof(*x));
    if (!x) break;
    stoker__v1__worker_info__init(x);
    x->worker_id = strdup(w->id);
    x->address = strdup(w->address);
    x->cores = w->cores;
    if (!x->worker_id || !x->address) {
      free(x->worker_id), free(x->address), free(x);
      break;
    }
    v[i++] = x;
  }
  *n = i;
  return v;
}

static void infos_free(Stoker__V1__WorkerInfo **v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(v[i]->worker_id);
    free(v[i]->address);
    free(v[i]);
  }
  free(v);
}

/* ---- Coordinator.WorkerSession -----------------------------------------
 *
 * A state machine per call: hello (checked) -> RegisterAck with the job ->
 * second hello (job hash, dataset) -> on the live list -> heartbeats until
 * the session ends (session_closed drops the worker from the list). */

static int send_ack(stk__rpc_call *call, const char *canonical, uint64_t hash) {
  Stoker__V1__JobSpec job = STOKER__V1__JOB_SPEC__INIT;
  job.canonical = (char *)canonical;
  job.hash = hash;
  Stoker__V1__RegisterAck ack = STOKER__V1__REGISTER_ACK__INIT;
  ack.job = &job;
  ack.heartbeat_interval_ms = (uint32_t)opt.heartbeat_interval_ms;
  Stoker__V1__CoordinatorCommand cmd = STOKER__V1__COORDINATOR_COMMAND__INIT;
  cmd.kind_case = STOKER__V1__COORDINATOR_COMMAND__KIND_ACK;
  cmd.ack = &ack;
  return stk__rpc_call_send_msg(call, &cmd.base);
}

static const Stoker__V1__Register *hello_of(const Stoker__V1__WorkerMessage *m) {
  if (!m || m->kind_case != STOKER__V1__WORKER_MESSAGE__KIND_HELLO) return NULL;
  return m->hello;
}

/* The first hello: check it, fill the worker's entry (not linked yet) and
 * send the job. 0, or -1 when the call was refused (its status sent). */
static int worker_hello(stk__rpc_call *call, cworker *w,
                        const Stoker__V1__WorkerMessage *m) {
  char msg[200];
  int code;
  const Stoker__V1__Register *h = hello_of(m);
  if (!h) {
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "the first message of a worker session must be hello");
    return -1;
  } else if ((code = stk__check_hello(h, msg, sizeof(msg)))) {
    stk__rpc_call_finish(call, (grpc_status_code)code, msg);
    return -1;
  }
  snprintf(w->id, sizeof(w->id), "%s", h->worker->worker_id);
  snprintf(w->address, sizeof(w->address), "%s", h->worker->address);
  w->cores = h->worker->cores;
  pthread_mutex_lock(&C.mu);
  w->ack_hash = C.hash;
  int rc = send_ack(call, C.canonical, C.hash);
  pthread_mutex_unlock(&C.mu);
  return rc;
}

/* The second hello's dataset against the job: the first worker tells the
 * job its size (when the job file left it to the index) and fingerprint;
 * every later one must agree. 0, or -1 with msg. Under C.mu. */
static int dataset_check_locked(const cworker *w, const Stoker__V1__Register *h,
                                char *msg, size_t len) {
  if (!C.resolved) {
    stk_job_spec t = C.spec;
    t.num_samples = h->dataset_size;
    if (!h->dataset_size || stk_steps_per_epoch(&t, h->dataset_size) == 0) {
      snprintf(msg, len,
               "worker %s has %" PRIu64
               " samples: not one step "
               "of world_size*batch_size",
               w->id, h->dataset_size);
      return -1;
    }
    C.spec = t;
    C.resolved = 1;
    job_publish_locked();
    LOG_INFO("dataset size %" PRIu64 " learnt from worker %s: job hash now %016" PRIx64,
             h->dataset_size, w->id, C.hash);
  } else if (h->dataset_size != C.spec.num_samples) {
    snprintf(msg, len,
             "worker %s has %" PRIu64 " samples, the job has %" PRIu64
             " (another dataset?)",
             w->id, h->dataset_size, C.spec.num_samples);
    return -1;
  }
  if (C.have_fp && h->dataset_fingerprint != C.fingerprint) {
    snprintf(msg, len,
             "worker %s's dataset fingerprint %016" PRIx64
             " differs from the job's %016" PRIx64
             " (another dataset or a "
             "different copy)",
             w->id, h->dataset_fingerprint, C.fingerprint);
    return -1;
  }
  if (!C.have_fp) C.fingerprint = h->dataset_fingerprint, C.have_fp = 1;
  return 0;
}

/* The second hello: check the job hash (the one our ack carried) and the
 * dataset and put the worker on the live list. 0, or -1 when the call was
 * refused. */
static int worker_admit(stk__rpc_call *call, cworker *w,
                        const Stoker__V1__WorkerMessage *m) {
  char msg[600];
  const Stoker__V1__Register *h = hello_of(m);
  if (!h || h->job_hash == 0) {
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "expected the second hello (with job_hash) after RegisterAck");
    return -1;
  }
  if (h->job_hash != w->ack_hash) {
    snprintf(msg, sizeof(msg),
             "worker %s answered with job hash %016" PRIx64 ", expected %016" PRIx64,
             w->id, h->job_hash, w->ack_hash);
    LOG_WARN("%s", msg);
    stk__rpc_call_finish(call, GRPC_STATUS_FAILED_PRECONDITION, msg);
    return -1;
  }
  pthread_mutex_lock(&C.mu);
  if (dataset_check_locked(w, h, msg, sizeof(msg))) {
    pthread_mutex_unlock(&C.mu);
    LOG_WARN("rejecting: %s", msg);
    stk__rpc_call_finish(call, GRPC_STATUS_FAILED_PRECONDITION, msg);
    return -1;
  }
  /* A worker that comes back under the same id replaces its old entry. */
  for (cworker *o = C.workers; o; o = o->next)
    if (!strcmp(o->id, w->id)) {
      unlink_locked(o);
      stk__rpc_call_abort(o->call, GRPC_STATUS_ABORTED, "replaced by a new session");
      break;
    }
  w->registered_ms = w->last_hb_ms = stk__now_ms();
  w->live = 1;
  w->next = C.workers;
  C.workers = w;
  C.version++;
  pthread_cond_broadcast(&C.cv);
  size_t nlive = nworkers_locked();
  pthread_mutex_unlock(&C.mu);
  LOG_INFO("worker %s registered at %s (%u cores); %zu live", w->id, w->address, w->cores,
           nlive);
  return 0;
}

/* Registered: a heartbeat (stats). */
static void worker_heartbeat(cworker *w, const Stoker__V1__WorkerMessage *m) {
  if (m->kind_case != STOKER__V1__WORKER_MESSAGE__KIND_HEARTBEAT) return;
  pthread_mutex_lock(&C.mu);
  w->last_hb_ms = stk__now_ms();
  const Stoker__V1__WorkerStats *s = m->heartbeat->stats;
  if (s) {
    /* Batches flowing to clients: the job is in use. */
    if (s->bytes_sent > w->stats.bytes_sent) touch_locked();
    w->stats.batches_built = s->batches_built;
    w->stats.bytes_sent = s->bytes_sent;
    w->stats.samples_substituted = s->samples_substituted;
    w->stats.active_streams = s->active_streams;
    w->stats.queued_requests = s->queued_requests;
    w->stats.busy_fraction = s->busy_fraction;
    w->stats.batches_per_s = s->batches_per_s;
  }
  pthread_mutex_unlock(&C.mu);
}

static int session_open(stk__rpc_call *call) {
  cworker *w = calloc(1, sizeof(*w));
  if (!w) {
    stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  w->call = call;
  w->phase = WS_HELLO;
  stk__rpc_call_set_data(call, w);
  return 0;
}

static void session_message(stk__rpc_call *call, const ProtobufCMessage *msg) {
  cworker *w = stk__rpc_call_data(call);
  const Stoker__V1__WorkerMessage *m = (const Stoker__V1__WorkerMessage *)msg;
  switch (w->phase) {
    case WS_HELLO:
      w->phase = worker_hello(call, w, m) ? WS_OVER : WS_HELLO2;
      break;
    case WS_HELLO2:
      w->phase = worker_admit(call, w, m) ? WS_OVER : WS_SERVING;
      break;
    case WS_SERVING:
      if (!m) { /* refused by the rpc layer, which ended the call saying why */
        w->phase = WS_OVER;
      } else {
        worker_heartbeat(w, m);
      }
      break;
  }
}

/* The worker said goodbye (half-close): end the session. */
static void session_half_close(stk__rpc_call *call) {
  cworker *w = stk__rpc_call_data(call);
  stk__rpc_call_finish(
      call, w->phase == WS_SERVING ? GRPC_STATUS_OK : GRPC_STATUS_CANCELLED, "");
}

/* The session is over: drop the worker from the live list (a no-op if a
 * heartbeat lapse or a replacement did already). */
static void session_closed(stk__rpc_call *call) {
  cworker *w = stk__rpc_call_data(call);
  pthread_mutex_lock(&C.mu);
  int was_live = unlink_locked(w);
  w->call = NULL;
  size_t nlive = nworkers_locked();
  pthread_mutex_unlock(&C.mu);
  if (was_live) LOG_INFO("worker %s (%s) left; %zu live", w->id, w->address, nlive);
  free(w);
}

static const stk__rpc_stream_ops session_ops = {session_open, session_message,
                                                session_half_close, NULL, session_closed};

/* ---- Coordinator.Join / WatchWorkers / Finish / Status ------------------ */

static void handle_join(stk__rpc_call *call, const ProtobufCMessage *req) {
  const Stoker__V1__JoinRequest *q = (const Stoker__V1__JoinRequest *)req;
  char msg[400];
  int code = 0;
  pthread_mutex_lock(&C.mu);
  touch_locked();
  if (q->protocol_version != STK_PROTOCOL_VERSION) {
    code = GRPC_STATUS_FAILED_PRECONDITION;
    snprintf(msg, sizeof(msg), "client speaks protocol %u, this coordinator %u",
             q->protocol_version, STK_PROTOCOL_VERSION);
  } else if (q->world_size != C.spec.world_size) {
    code = GRPC_STATUS_INVALID_ARGUMENT;
    snprintf(msg, sizeof(msg), "world_size %u differs from the job's %u", q->world_size,
             C.spec.world_size);
  } else if (q->rank >= C.spec.world_size) {
    code = GRPC_STATUS_INVALID_ARGUMENT;
    snprintf(msg, sizeof(msg), "rank %u is outside the job's world_size %u", q->rank,
             C.spec.world_size);
  } else if (q->client_id && strlen(q->client_id) >= MAX_STR) {
    code = GRPC_STATUS_INVALID_ARGUMENT;
    snprintf(msg, sizeof(msg), "client_id of %zu bytes (at most %d)",
             strlen(q->client_id), MAX_STR - 1);
  } else if (C.shutting_down) {
    code = GRPC_STATUS_FAILED_PRECONDITION;
    snprintf(msg, sizeof(msg), "the job is over (%.300s)", C.shutdown_reason);
  } else if (!C.resolved) {
    code = GRPC_STATUS_UNAVAILABLE;
    snprintf(msg, sizeof(msg),
             "waiting for a worker (the dataset size is not known yet)");
  } else if (q->expect_job_hash && q->expect_job_hash != C.hash) {
    code = GRPC_STATUS_FAILED_PRECONDITION;
    snprintf(msg, sizeof(msg),
             "resume state is from job %016" PRIx64
             ", this coordinator runs job %016" PRIx64 " (%s)",
             q->expect_job_hash, C.hash, C.spec.name);
  }
  if (code) {
    pthread_mutex_unlock(&C.mu);
    LOG_WARN("join from %s rejected: %s", stk__rpc_call_peer(call), msg);
    stk__rpc_call_finish(call, (grpc_status_code)code, msg);
    return;
  }
  if (!C.joined[q->rank]) C.joined[q->rank] = 1, C.njoined++;
  Stoker__V1__JobSpec job = STOKER__V1__JOB_SPEC__INIT;
  job.canonical = strdup(C.canonical);
  job.hash = C.hash;
  Stoker__V1__JoinResponse resp = STOKER__V1__JOIN_RESPONSE__INIT;
  resp.job = &job;
  resp.list_version = C.version;
  resp.workers = infos_locked(&resp.n_workers);
  pthread_mutex_unlock(&C.mu);
  LOG_INFO("rank %u joined (client %s from %s)", q->rank,
           q->client_id ? q->client_id : "", stk__rpc_call_peer(call));
  if (!job.canonical || !resp.workers)
    stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  else stk__rpc_call_reply(call, &resp.base);
  free(job.canonical);
  infos_free(resp.workers, resp.n_workers);
}

/* WatchWorkers: after its one request, a WorkerList whenever the live
 * list changed (sent from watch_pump_locked: the main loop's tick, a
 * finished send, the watch's start), the last one with shutting_down. */
typedef struct watcher {
  stk__rpc_call *call;
  uint64_t known;
  int started, sending, over;
  struct watcher *next;
} watcher;

/* Send wt the list if it changed and no send is in flight. Under C.mu. */
static void watch_pump_locked(watcher *wt) {
  if (!wt->started || wt->sending || wt->over) return;
  if (C.version == wt->known && !C.shutting_down) return;
  Stoker__V1__WorkerList list = STOKER__V1__WORKER_LIST__INIT;
  list.version = C.version;
  list.shutting_down = C.shutting_down;
  list.failed = C.shutting_down && C.failed;
  list.reason = list.failed ? C.shutdown_reason : NULL;
  list.workers = infos_locked(&list.n_workers);
  int rc = list.workers ? stk__rpc_call_send_msg(wt->call, &list.base) : -1;
  infos_free(list.workers, list.n_workers);
  if (rc) {
    wt->over = 1;
    stk__rpc_call_abort(wt->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  wt->sending = 1;
  wt->known = list.version;
  if (list.shutting_down) {
    wt->over = 1;
    stk__rpc_call_finish(wt->call, GRPC_STATUS_OK, "");
  }
}

/* Every watcher: from the main loop (list changes anywhere show within
 * one tick). */
static void watch_pump_all(void) {
  pthread_mutex_lock(&C.mu);
  for (watcher *wt = C.watch_list; wt; wt = wt->next) watch_pump_locked(wt);
  pthread_mutex_unlock(&C.mu);
}

static int watch_open(stk__rpc_call *call) {
  watcher *wt = calloc(1, sizeof(*wt));
  if (!wt) {
    stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  wt->call = call;
  stk__rpc_call_set_data(call, wt);
  pthread_mutex_lock(&C.mu);
  wt->next = C.watch_list;
  C.watch_list = wt;
  pthread_mutex_unlock(&C.mu);
  return 0;
}

static void watch_message(stk__rpc_call *call, const ProtobufCMessage *m) {
  watcher *wt = stk__rpc_call_data(call);
  const Stoker__V1__WatchRequest *q = (const Stoker__V1__WatchRequest *)m;
  pthread_mutex_lock(&C.mu);
  if (wt->started || wt->over) {
    pthread_mutex_unlock(&C.mu);
    return; /* one request per watch; more are ignored */
  }
  if (!q) {
    wt->over = 1;
    pthread_mutex_unlock(&C.mu);
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "request is not a stoker.v1.WatchRequest");
    return;
  }
  wt->started = 1;
  wt->known = q->known_version;
  C.watchers++;
  touch_locked();
  watch_pump_locked(wt);
  pthread_mutex_unlock(&C.mu);
}

static void watch_half_close(stk__rpc_call *call) {
  watcher *wt = stk__rpc_call_data(call);
  pthread_mutex_lock(&C.mu);
  int none = !wt->started && !wt->over;
  if (none) wt->over = 1;
  pthread_mutex_unlock(&C.mu);
  if (none) stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "no request");
}

static void watch_drained(stk__rpc_call *call) {
  watcher *wt = stk__rpc_call_data(call);
  pthread_mutex_lock(&C.mu);
  wt->sending = 0;
  watch_pump_locked(wt);
  pthread_mutex_unlock(&C.mu);
}

static void watch_closed(stk__rpc_call *call) {
  watcher *wt = stk__rpc_call_data(call);
  pthread_mutex_lock(&C.mu);
  for (watcher **pp = &C.watch_list; *pp; pp = &(*pp)->next)
    if (*pp == wt) {
      *pp = wt->next;
      break;
    }
  if (wt->started) {
    C.watchers--;
    touch_locked();
  }
  pthread_mutex_unlock(&C.mu);
  free(wt);
}

static const stk__rpc_stream_ops watch_ops = {watch_open, watch_message, watch_half_close,
                                              watch_drained, watch_closed};

/* Finish{abort_job}: end the job as failed, unless it is already ending. */
static void abort_job_locked(uint32_t rank, const char *reason, const char *peer) {
  char esc[256 * 4 + 8]; /* untrusted: escaped, bounded */
  stk__escape(esc, sizeof(esc), reason ? reason : "");
  if (C.shutdown_req) {
    LOG_WARN(
        "rank %u asks to abort the job (%s) from %s: ignored, the job is already "
        "ending (%s)",
        rank, *esc ? esc : "no reason given", peer, C.shutdown_reason);
    return;
  }
  char why[sizeof(C.shutdown_reason)];
  snprintf(why, sizeof(why), "rank %u aborted the job: %.300s", rank,
           *esc ? esc : "no reason given");
  LOG_ERROR("%s (from %s)", why, peer);
  C.failed = 1;
  request_shutdown_locked(EXIT_ABORTED, why);
}

static void handle_finish(stk__rpc_call *call, const ProtobufCMessage *req) {
  const Stoker__V1__FinishRequest *q = (const Stoker__V1__FinishRequest *)req;
  char msg[300];
  pthread_mutex_lock(&C.mu);
  touch_locked();
  uint32_t W = C.spec.world_size;
  if (q->rank >= W) {
    pthread_mutex_unlock(&C.mu);
    snprintf(msg, sizeof(msg), "rank %u is outside the job's world_size %u", q->rank, W);
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, msg);
    return;
  }
  if (q->shutdown_job && q->rank != 0) {
    pthread_mutex_unlock(&C.mu);
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "only rank 0 may end the whole job (shutdown_job)");
    return;
  }
  if (q->abort_job) {
    abort_job_locked(q->rank, q->reason, stk__rpc_call_peer(call));
    uint32_t nf = C.nfinished;
    pthread_mutex_unlock(&C.mu);
    Stoker__V1__FinishResponse resp = STOKER__V1__FINISH_RESPONSE__INIT;
    resp.ranks_finished = nf;
    resp.world_size = W;
    stk__rpc_call_reply(call, &resp.base);
    return;
  }
  if (!C.finished[q->rank]) C.finished[q->rank] = 1, C.nfinished++;
  uint32_t nf = C.nfinished;
  if (q->shutdown_job) request_shutdown_locked(EXIT_OK, "rank 0 ended the job");
  else if (nf == W) request_shutdown_locked(EXIT_OK, "every rank finished");
  pthread_mutex_unlock(&C.mu);
  LOG_INFO("rank %u finished%s (%u/%u)", q->rank,
           q->shutdown_job ? " and ends the job" : "", nf, W);
  Stoker__V1__FinishResponse resp = STOKER__V1__FINISH_RESPONSE__INIT;
  resp.ranks_finished = nf;
  resp.world_size = W;
  stk__rpc_call_reply(call, &resp.base);
}

static void handle_status(stk__rpc_call *call, const ProtobufCMessage *req) {
  (void)req; /* StatusRequest has no fields */
  Stoker__V1__StatusResponse resp = STOKER__V1__STATUS_RESPONSE__INIT;
  Stoker__V1__JobSpec job = STOKER__V1__JOB_SPEC__INIT;
  pthread_mutex_lock(&C.mu);
  int64_t now = stk__now_ms();
  job.canonical = strdup(C.canonical);
  job.hash = C.hash;
  resp.job = &job;
  resp.state = (char *)state_names[state_locked()];
  resp.uptime_ms = (uint64_t)(now - C.start_ms);
  resp.dataset_size = C.resolved ? C.spec.num_samples : 0;
  resp.end_reason = C.shutdown_req ? C.shutdown_reason : "";
  size_t nw = nworkers_locked(), i = 0;
  Stoker__V1__WorkerStatus *ws = calloc(nw ? nw : 1, sizeof(*ws));
  Stoker__V1__WorkerStatus **wsp = calloc(nw ? nw : 1, sizeof(*wsp));
  Stoker__V1__WorkerInfo *wi = calloc(nw ? nw : 1, sizeof(*wi));
  Stoker__V1__WorkerStats *wt = calloc(nw ? nw : 1, sizeof(*wt));
  uint32_t W = C.spec.world_size;
  uint32_t *jr = calloc(W, sizeof(uint32_t)), *fr = calloc(W, sizeof(uint32_t));
  int ok = job.canonical && ws && wsp && wi && wt && jr && fr;
  if (ok) {
    for (cworker *w = C.workers; w; w = w->next, i++) {
      stoker__v1__worker_status__init(&ws[i]);
      stoker__v1__worker_info__init(&wi[i]);
      stoker__v1__worker_stats__init(&wt[i]);
      wi[i].worker_id = strdup(w->id);
      wi[i].address = strdup(w->address);
      wi[i].cores = w->cores;
      wt[i].batches_built = w->stats.batches_built;
      wt[i].bytes_sent = w->stats.bytes_sent;
      wt[i].samples_substituted = w->stats.samples_substituted;
      wt[i].active_streams = w->stats.active_streams;
      wt[i].queued_requests = w->stats.queued_requests;
      wt[i].busy_fraction = w->stats.busy_fraction;
      wt[i].batches_per_s = w->stats.batches_per_s;
      ws[i].worker = &wi[i];
      ws[i].stats = &wt[i];
      ws[i].last_heartbeat_ms_ago = (uint64_t)(now - w->last_hb_ms);
      wsp[i] = &ws[i];
      if (!wi[i].worker_id || !wi[i].address) ok = 0;
    }
    resp.n_workers = i;
    resp.workers = wsp;
    for (uint32_t r = 0; r < W; r++) {
      if (C.joined[r]) jr[resp.n_joined_ranks++] = r;
      if (C.finished[r]) fr[resp.n_finished_ranks++] = r;
    }
    resp.joined_ranks = jr;
    resp.finished_ranks = fr;
  }
  pthread_mutex_unlock(&C.mu);
  if (ok) stk__rpc_call_reply(call, &resp.base);
  else stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t k = 0; k < i; k++) free(wi[k].worker_id), free(wi[k].address);
  free(ws), free(wsp), free(wi), free(wt), free(jr), free(fr);
  free(job.canonical);
}

/* ---- main -------------------------------------------------------------- */

static int load_job(char *err, size_t errlen) {
  stk_job_spec_defaults(&C.spec);
  if (*opt.job && stk_job_spec_load(&C.spec, opt.job, err, errlen)) return -1;
  for (size_t i = 0; i < opt.set.n; i++) {
    char msg[400];
    if (stk_job_spec_parse(&C.spec, opt.set.v[i], msg, sizeof(msg))) {
      return stk__errf(err, errlen, -1, "--set %.100s: %s", opt.set.v[i], msg);
    }
  }
  if (stk_job_spec_validate(&C.spec, err, errlen)) return -1;
  C.resolved = C.spec.num_samples != 0;
  if (C.resolved && stk_steps_per_epoch(&C.spec, C.spec.num_samples) == 0) {
    snprintf(err, errlen,
             "num_samples %" PRIu64
             " gives no full step of "
             "world_size*batch_size",
             C.spec.num_samples);
    return -1;
  }
  if (job_publish_locked()) return stk__errf(err, errlen, -1, "out of memory");
  C.joined = calloc(C.spec.world_size, 1);
  C.finished = calloc(C.spec.world_size, 1);
  if (!C.joined || !C.finished) return stk__errf(err, errlen, -1, "out of memory");
  return 0;
}

/* Send Shutdown to every live worker that has not had it yet (the send
 * only queues: no wait under the lock). */
static void send_shutdowns(void) {
  pthread_mutex_lock(&C.mu);
  for (cworker *w = C.workers; w; w = w->next) {
    if (w->shutdown_sent) continue;
    w->shutdown_sent = 1;
    Stoker__V1__Shutdown sd = STOKER__V1__SHUTDOWN__INIT;
    sd.failed = C.failed;
    sd.reason = C.failed ? C.shutdown_reason : (char *)"";
    Stoker__V1__CoordinatorCommand cmd = STOKER__V1__COORDINATOR_COMMAND__INIT;
    cmd.kind_case = STOKER__V1__COORDINATOR_COMMAND__KIND_SHUTDOWN;
    cmd.shutdown = &sd;
    if (stk__rpc_call_send_msg(w->call, &cmd.base) == 0)
      LOG_INFO("sent shutdown to worker %s", w->id);
  }
  pthread_mutex_unlock(&C.mu);
}

static void check_heartbeats(void) {
  int64_t now = stk__now_ms(), limit = opt.heartbeat_interval_ms * opt.heartbeat_misses;
  pthread_mutex_lock(&C.mu);
  for (cworker *w = C.workers, *next; w; w = next) {
    next = w->next;
    if (now - w->last_hb_ms <= limit) continue;
    LOG_WARN("worker %s (%s) missed %lld heartbeats: dropped from the list", w->id,
             w->address, opt.heartbeat_misses);
    unlink_locked(w);
    /* The session ends; the worker reconnects and registers again. */
    stk__rpc_call_abort(w->call, GRPC_STATUS_UNAVAILABLE, "heartbeats lapsed");
  }
  pthread_mutex_unlock(&C.mu);
}

/* One stats line (greppable: "stats state=..."); *last_ms and *last_bytes
 * carry the previous line's time and byte count for the rate. */
static void log_stats(int64_t now, int64_t *last_ms, uint64_t *last_bytes) {
  pthread_mutex_lock(&C.mu);
  double bps = 0;
  uint64_t bytes = 0;
  for (cworker *w = C.workers; w; w = w->next)
    bps += w->stats.batches_per_s, bytes += w->stats.bytes_sent;
  double dt = (double)(now - *last_ms) / 1000.0;
  double mbps = bytes >= *last_bytes ? (double)(bytes - *last_bytes) / dt / 1e6 : 0;
  LOG_INFO(
      "stats state=%s workers=%zu ranks_joined=%u ranks_finished=%u "
      "watchers=%d batches_per_s=%.1f mb_per_s=%.1f idle_s=%lld",
      state_names[state_locked()], nworkers_locked(), C.njoined, C.nfinished, C.watchers,
      bps, mbps, C.watchers ? 0LL : (long long)((now - C.last_touch_ms) / 1000));
  pthread_mutex_unlock(&C.mu);
  *last_bytes = bytes, *last_ms = now;
}

/* Run the job until a shutdown is requested (all ranks finished, rank 0
 * asked, an abort, a signal or the idle timeout); returns the exit code. */
static int run_job(void) {
  int64_t next_stats = stk__now_ms() + opt.stats_interval_s * 1000;
  int64_t last_stats = stk__now_ms();
  uint64_t last_bytes = 0;
  for (;;) {
    int sig = stk__signal_pending();
    int64_t now = stk__now_ms();
    pthread_mutex_lock(&C.mu);
    if (sig) {
      char why[64];
      snprintf(why, sizeof(why), "signal %d", sig);
      request_shutdown_locked(EXIT_OK, why);
    }
    if (!C.watchers && now - C.last_touch_ms > opt.idle_timeout_s * 1000)
      request_shutdown_locked(EXIT_IDLE, "idle timeout: no client touched the job");
    int req = C.shutdown_req;
    pthread_mutex_unlock(&C.mu);
    if (req) return req - 1;
    check_heartbeats();
    watch_pump_all();
    if (now >= next_stats) {
      log_stats(now, &last_stats, &last_bytes);
      next_stats = now + opt.stats_interval_s * 1000;
    }
    stk__sleep_ms(50);
  }
}

/* Tell every worker to shut down (also ones that register meanwhile), then
 * wait up to the grace period for them to drain and disconnect. */
static void shut_down_workers(void) {
  pthread_mutex_lock(&C.mu);
  LOG_INFO("shutting down the job: %s", C.shutdown_reason);
  C.shutting_down = 1;
  pthread_cond_broadcast(&C.cv);
  pthread_mutex_unlock(&C.mu);
  int64_t until = stk__now_ms() + opt.shutdown_grace_s * 1000;
  for (;;) {
    send_shutdowns();
    watch_pump_all();
    pthread_mutex_lock(&C.mu);
    size_t left = nworkers_locked();
    pthread_mutex_unlock(&C.mu);
    if (!left) break;
    if (stk__signal_count() >= 2) {
      LOG_WARN("second signal: not waiting for %zu workers", left);
      break;
    }
    if (stk__now_ms() >= until) {
      LOG_WARN("%zu workers still connected after %lld s; exiting anyway", left,
               opt.shutdown_grace_s);
      break;
    }
    stk__sleep_ms(20);
  }
  pthread_mutex_lock(&C.mu);
  C.done = 1;
  pthread_mutex_unlock(&C.mu);
}

/* Serve the Coordinator service on opt.listen and write the port file.
 * 0, or -1 with err. */
static int start_server(stk__rpc_server **srv, char *err, size_t errlen) {
  /* {path, request type, receive limit (wire_limits.h), unary, stream}.
   * The unary handlers only take C.mu briefly: they run inline on the rpc
   * layer's threads. */
  static const stk__rpc_method methods[] = {
      {"/stoker.v1.Coordinator/WorkerSession", &stoker__v1__worker_message__descriptor,
       STK_MAX_CONTROL_MSG, NULL, &session_ops},
      {"/stoker.v1.Coordinator/Join", &stoker__v1__join_request__descriptor,
       STK_MAX_CONTROL_MSG, handle_join, NULL},
      {"/stoker.v1.Coordinator/WatchWorkers", &stoker__v1__watch_request__descriptor,
       STK_MAX_CONTROL_MSG, NULL, &watch_ops},
      {"/stoker.v1.Coordinator/Finish", &stoker__v1__finish_request__descriptor,
       STK_MAX_CONTROL_MSG, handle_finish, NULL},
      {"/stoker.v1.Coordinator/Status", &stoker__v1__status_request__descriptor,
       STK_MAX_CONTROL_MSG, handle_status, NULL},
  };
  int port = 0;
  if (stk__daemon_serve(opt.listen, methods, sizeof(methods) / sizeof(methods[0]),
                        opt.max_message_mb, opt.token, C.tls, &opt.serve, opt.port_file,
                        srv, &port, err, errlen))
    return -1;
  LOG_INFO("job %s (hash %016" PRIx64
           ", world_size %u, batch_size %u, %s samples) "
           "listening on %s port %d (%s)",
           C.spec.name, C.hash, C.spec.world_size, C.spec.batch_size,
           C.resolved ? "known" : "unknown until a worker registers", opt.listen, port,
           stk__tls_describe(C.tls));
  return 0;
}

int main(int argc, char **argv) {
  stk__log_init(PROGRAM);
  stk__rpc_tune_malloc(); /* reuse gRPC's message buffers (rpc.h) */
  int pr = stk__options_parse(
      options, NOPTIONS, argc, argv, PROGRAM,
      "Runs one stoker job: worker sessions, client joins, finish, status.",
      exit_codes_text);
  int code = pr == OPTS_EXIT_OK ? EXIT_OK : EXIT_USAGE;
  char err[600];
  if (pr != OPTS_RUN) goto out;
  stk__tls_files tf = {opt.tls.ca, opt.tls.cert, opt.tls.key, opt.tls.require};
  if (load_job(err, sizeof(err)) || stk__tls_load(&tf, &C.tls, err, sizeof(err)) ||
      (C.tls && !stk__tls_has_cert(C.tls) &&
       stk__errf(err, sizeof(err), -1, "TLS needs --tls-cert and --tls-key"))) {
    fprintf(stderr, PROGRAM ": %s\n", err);
    code = EXIT_USAGE;
    goto out;
  }
  if (opt.print_job) {
    printf("%s# hash = %016" PRIx64 "%s\n", C.canonical, C.hash,
           C.resolved ? "" : " (num_samples from the dataset: changes once known)");
    code = EXIT_OK;
    goto out;
  }
  stk__signals_install();
  stk__daemon_raise_nofile();
  C.start_ms = C.last_touch_ms = stk__now_ms();
  C.version = 1; /* a watcher that knows nothing (0) gets the list at once */
  stk__rpc_server *srv = NULL;
  if (start_server(&srv, err, sizeof(err))) {
    LOG_ERROR("%s", err);
    code = EXIT_FAIL;
    goto out;
  }
  code = run_job();
  shut_down_workers();
  stk__rpc_server_stop(srv, 1000);
  LOG_INFO("exiting (code %d)", code);
out:
  stk__options_free(options, NOPTIONS);
  free(C.canonical), free(C.joined), free(C.finished);
  stk__tls_free(C.tls);
  return code;
}
