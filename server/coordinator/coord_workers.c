/* coord_workers.c - Coordinator.WorkerSession: a state machine per call, hello
 * (checked; its advertised address on a resolver thread, resolve.c) ->
 * RegisterAck with the job -> second hello (job hash, dataset) -> on the
 * live list (C.workers; with a state journal, from the journal's writer
 * thread once on disk) -> heartbeats until the session ends
 * (session_closed drops the worker from the list, likewise after the
 * journal); no serving thread waits for DNS or the disk. And from the main
 * loop, the heartbeat lapse check and the Shutdown commands. Owns the
 * worker entries (cworker), the live list and the worker failures in C,
 * under C.mu; the dataset's size and fingerprint when the first worker
 * teaches them. Must not trust a worker: every message is checked and a
 * bad one ends only its own session. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "coordinator.h"
#include "daemon_log.h"
#include "msgcheck.h"

/* Set a session's phase (C.mu taken here). */
static void set_phase(cworker *w, int phase) {
  pthread_mutex_lock(&C.mu);
  w->phase = phase;
  pthread_mutex_unlock(&C.mu);
}

static void worker_free(cworker *w) {
  if (w->hb) protobuf_c_message_free_unpacked(&w->hb->base, NULL);
  free(w);
}

static int send_ack(stk__rpc_call *call, const char *canonical, uint64_t hash,
                    const char *key) {
  Stoker__V1__JobSpec job = STOKER__V1__JOB_SPEC__INIT;
  job.canonical = (char *)canonical;
  job.hash = hash;
  Stoker__V1__RegisterAck ack = STOKER__V1__REGISTER_ACK__INIT;
  ack.job = &job;
  ack.heartbeat_interval_ms = (uint32_t)opt.heartbeat_interval_ms;
  ack.stream_ticket_key = (char *)key;
  ack.coordinator_time_ms = tickets_on() ? tickets_clock_ms() : 0;
  Stoker__V1__CoordinatorCommand cmd = STOKER__V1__COORDINATOR_COMMAND__INIT;
  cmd.kind_case = STOKER__V1__COORDINATOR_COMMAND__KIND_ACK;
  cmd.ack = &ack;
  return stk__rpc_call_send_msg(call, &cmd.base);
}

static const Stoker__V1__Register *hello_of(const Stoker__V1__WorkerMessage *m) {
  if (!m || m->kind_case != STOKER__V1__WORKER_MESSAGE__KIND_HELLO) return NULL;
  return m->hello;
}

/* The rest of the first hello, once the worker's address is settled:
 * draw its ticket key, mint its first ticket and send the job. 0, or -1
 * when the call was refused. From a callback of the session, or from the
 * check's answer (its phase still WS_CHECKING, under the resolver's
 * lock). */
static int send_job(stk__rpc_call *call, cworker *w, int checking) {
  if (tickets_key_new(w->key) || tickets_mint(w->key, w->ticket, &w->ticket_expiry)) {
    stk__rpc_call_finish(call, GRPC_STATUS_INTERNAL, "cannot mint a stream ticket");
    return -1;
  }
  pthread_mutex_lock(&C.mu);
  int rc = 0;
  if (!checking || w->phase == WS_CHECKING) { /* else it ended meanwhile */
    w->ack_hash = C.hash;
    w->phase = WS_HELLO2;
    rc = send_ack(call, C.canonical, C.hash, w->key);
    if (rc) w->phase = WS_OVER;
  }
  pthread_mutex_unlock(&C.mu);
  return rc;
}

/* Clients dial the address a worker advertises, so a worker (or anyone
 * with a worker token) must not send them elsewhere: its host must
 * resolve to the address the session comes from. The answer of the check
 * (a host name: resolve.c, on a resolver thread, so a lookup never runs
 * on a serving thread; a numeric address: on the spot, from the session's
 * own callback, worker_hello): on a match, the worker is listed with the checked address
 * in numeric form (clients dial what was checked and never resolve the name again),
 * except over TLS, where clients verify the worker's certificate against the name it
 * advertised; else the session ends FAILED_PRECONDITION (final), or UNAVAILABLE (retry)
 * when the lookup timed out. */
static void address_checked(void *arg, int m, const char *numeric, const char *res) {
  cworker *w = arg;
  stk__rpc_call *call = w->call;
  if (m == 1) {
    char was[MAX_STR * 4 + 8] = "";
    pthread_mutex_lock(&C.mu);
    int mine = w->phase == WS_CHECKING;
    if (mine && !C.tls && *numeric && strcmp(numeric, w->address)) {
      stk__escape(was, sizeof(was), w->address);
      snprintf(w->address, sizeof(w->address), "%s", numeric);
    }
    pthread_mutex_unlock(&C.mu);
    if (!mine) return; /* the session ended meanwhile */
    if (*was)
      LOG_INFO("worker %s: advertised %s, listed as %s (the address checked)", w->id, was,
               numeric);
    send_job(call, w, 1);
    return;
  }
  char msg[3200], id[MAX_STR * 4 + 8], addr[MAX_STR * 4 + 8], peer[300];
  stk__escape(id, sizeof(id), w->id);
  stk__escape(addr, sizeof(addr), w->address);
  stk__escape(peer, sizeof(peer), stk__rpc_call_peer(call));
  if (m == RESOLVE_TIMEOUT)
    snprintf(msg, sizeof(msg),
             "the host of the advertised address %s did not resolve in time (%s): "
             "retry later, or advertise a numeric address; worker %s",
             addr, res, id);
  else
    snprintf(msg, sizeof(msg),
             "advertised address %s is not the host the session comes from (%s; %s%s): "
             "fix the worker's --advertise, or run the coordinator with "
             "--trust-worker-addresses (NAT, proxies); worker %s",
             addr, peer, m == 0 ? "it resolves to " : "", res, id);
  LOG_WARN("refusing: %s", msg);
  pthread_mutex_lock(&C.mu);
  int mine = w->phase == WS_CHECKING;
  if (mine) w->phase = WS_OVER;
  pthread_mutex_unlock(&C.mu);
  if (mine)
    stk__rpc_call_finish(
        call,
        m == RESOLVE_TIMEOUT ? GRPC_STATUS_UNAVAILABLE : GRPC_STATUS_FAILED_PRECONDITION,
        msg);
}

/* The first hello: check it, fill the worker's entry (not linked yet),
 * start the address check or send the job. 0, or -1 when the call was
 * refused (its status sent). */
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
  /* untrusted: a finite share of at most a million cores, else unknown */
  double cc = h->worker->cpu_cores;
  w->cpu_cores = cc > 0 && cc < 1e6 ? cc : 0;
  /* checked by stk__check_hello: "" or a name of at most 47 bytes */
  snprintf(w->instance_type, sizeof(w->instance_type), "%s",
           h->worker->instance_type ? h->worker->instance_type : "");
  /* With role tokens every listed worker has a stream ticket, so a client
   * never sends its token to a worker (or to anyone holding the worker
   * token): a worker that does not check tickets (an older stoker-worker,
   * a stock client) is refused. A re-registration of the same id at the
   * same address gets the same ticket key. */
  if (tickets_on() && !h->checks_tickets) {
    snprintf(msg, sizeof(msg),
             "this coordinator has role tokens, so clients stream with per-worker "
             "tickets: this worker does not check them (upgrade stoker-worker)");
    LOG_WARN("refusing worker: %s", msg);
    stk__rpc_call_finish(call, GRPC_STATUS_FAILED_PRECONDITION, msg);
    return -1;
  }
  if (opt.trust_worker_addresses) return send_job(call, w, 0);
  w->phase = WS_CHECKING;
  /* A numeric address needs no lookup: checked here, on the spot, so a
   * burst of workers (a cluster starting) never waits for, or fills, the
   * resolver's queue. */
  if (stk__host_is_numeric(w->address)) {
    char res[200], numeric[MAX_STR];
    int m = stk__host_is_peer(w->address, stk__rpc_call_peer(call), res, sizeof(res),
                              numeric, sizeof(numeric));
    address_checked(w, m, numeric, res);
    pthread_mutex_lock(&C.mu);
    int over = w->phase == WS_OVER;
    pthread_mutex_unlock(&C.mu);
    return over ? -1 : 0;
  }
  /* A name: the session answers when its lookup does (address_checked). */
  if (!(w->check =
            resolve_submit(w->address, stk__rpc_call_peer(call), address_checked, w))) {
    snprintf(msg, sizeof(msg),
             "%zu worker host names are being looked up, the most the queue holds "
             "(%d per resolver thread, --resolve-threads %lld): retry; for bursts "
             "of this size raise --resolve-threads, or advertise numeric addresses",
             resolve_pending(), (int)RESOLVE_QUEUE_PER_THREAD, opt.resolve_threads);
    LOG_WARN("refusing worker for now: %s", msg);
    stk__rpc_call_finish(call, GRPC_STATUS_UNAVAILABLE, msg);
    return -1;
  }
  return 0;
}

/* An ImageFolder job's classes: the first worker to report them fixes the
 * job's count and names; every later one must agree (a worker whose names
 * did not fit the wire agrees by count). 0, or -1 with msg. Under C.mu. */
static int classes_check_locked(const cworker *w, const Stoker__V1__Register *h,
                                char *msg, size_t len) {
  if (C.spec.source != STK_SOURCE_IMAGEFOLDER) return 0;
  /* A hello without classes (a worker that predates them, a stock gRPC
   * client) says nothing about them: Join then answers without. */
  if (h->num_classes == 0) return 0;
  if ((h->n_classes && h->n_classes != h->num_classes) ||
      h->n_classes > STK_MAX_CLASS_NAMES) {
    snprintf(msg, len, "worker %s reports %u classes but %zu class names", w->id,
             h->num_classes, h->n_classes);
    return -1;
  }
  if (C.have_classes) {
    int same = h->num_classes == C.nclasses;
    for (size_t i = 0; same && C.classes && i < h->n_classes; i++)
      same = !strcmp(h->classes[i], C.classes[i]);
    if (!same) {
      snprintf(msg, len,
               "worker %s's dataset has other classes than the job's (%u class folders, "
               "the job has %u)",
               w->id, h->num_classes, C.nclasses);
      return -1;
    }
    return 0;
  }
  char **v = NULL;
  if (h->n_classes) {
    if (!(v = calloc(h->n_classes, sizeof(*v)))) goto nomem;
    for (size_t i = 0; i < h->n_classes; i++)
      if (!(v[i] = strdup(h->classes[i]))) {
        for (size_t k = 0; k < i; k++) free(v[k]);
        free(v);
        goto nomem;
      }
  }
  C.classes = v;
  C.nclasses = h->num_classes;
  C.have_classes = 1;
  return 0;
nomem:
  snprintf(msg, len, "out of memory");
  return -1;
}

/* The worker whose size the job took (num_samples = 0 in the job file),
 * for the message that refuses a worker that disagrees; "" when the job
 * pinned it or the size came from the state journal. Under C.mu. */
static char size_from[MAX_STR];

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
    snprintf(size_from, sizeof(size_from), "%s", w->id);
    state_job_publish_locked();
    /* First registrant decides. That is the usual case (workers share one
     * dataset), so info: a worker that disagrees later is refused with a
     * warning that names this one and says how to decide it yourself. */
    LOG_INFO("dataset size %" PRIu64
             " taken from the first worker to register, %s "
             "(job hash now %016" PRIx64 "; num_samples = 0 in the job)",
             h->dataset_size, w->id, C.hash);
  } else if (h->dataset_size != C.spec.num_samples) {
    if (size_from[0])
      snprintf(msg, len,
               "worker %.100s has %" PRIu64 " samples, the job has %" PRIu64
               " (taken from the first worker to register, %.100s: another dataset? "
               "to decide it yourself, pin num_samples in the job)",
               w->id, h->dataset_size, C.spec.num_samples, size_from);
    else
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
  return classes_check_locked(w, h, msg, len);
}

/* Put an admitted worker on the live list (a worker that comes back under
 * the same id replaces its old entry) and tell watchers; releases C.mu
 * (taken by the caller) and logs. */
static void link_locked(cworker *w) {
  for (cworker *o = C.workers; o; o = o->next)
    if (!strcmp(o->id, w->id)) {
      state_unlink_locked(o);
      if (o->call)
        stk__rpc_call_abort(o->call, GRPC_STATUS_ABORTED, "replaced by a new session");
      break;
    }
  w->registered_ms = w->last_hb_ms = stk__now_ms();
  w->live = 1;
  w->phase = WS_SERVING;
  w->next = C.workers;
  C.workers = w;
  C.workers_seen_ms = w->registered_ms;
  publish_change_locked(w, 0);
  persist_expect_remove_locked(w->id); /* it is back */
  pthread_cond_broadcast(&C.cv);
  size_t nlive = state_nworkers_locked();
  pthread_mutex_unlock(&C.mu);
  LOG_INFO("worker %s registered at %s (%u cores); %zu live", w->id, w->address, w->cores,
           nlive);
}

/* The admitted worker is in the journal (persist_after, on the writer
 * thread): list it, unless its session ended meanwhile (then it is freed
 * here). */
static void admit_journaled(void *arg) {
  cworker *w = arg;
  pthread_mutex_lock(&C.mu);
  w->journal_wait = 0;
  if (w->expect_added) persist_expect_remove_locked(w->id), w->expect_added = 0;
  if (w->phase != WS_ADMITTING) { /* refused or ended meanwhile */
    int gone = w->gone;
    pthread_mutex_unlock(&C.mu);
    if (gone) worker_free(w);
    return;
  }
  link_locked(w);
}

/* The second hello: check the job hash (the one our ack carried) and the
 * dataset and put the worker on the live list, at once or, with a state
 * journal, once it is on disk (admit_journaled). 0, or -1 when the call
 * was refused. */
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
  w->phase = WS_ADMITTING;
  if (persist_enabled()) {
    /* Journal the worker (and the dataset it taught the job) before it is
     * on the list: whatever Status shows, a restart knows. The write and
     * fsync run on the journal's writer thread, never on this serving
     * thread: the worker is listed from there (admit_journaled). */
    w->expect_added = persist_expect_add_locked(w->id);
    w->journal_wait = 1;
    pthread_mutex_unlock(&C.mu);
    persist_after(&w->jw, admit_journaled, w);
    return 0;
  }
  link_locked(w);
  return 0;
}

/* --max-bad-fraction: when a worker's distinct bad samples (s) exceed
 * that share of the dataset, the job fails as an abort would end it
 * (workers get Shutdown{failed} and exit 5, the coordinator exits 4).
 * Under C.mu. */
static void bad_check_locked(const cworker *w, const Stoker__V1__WorkerStats *s) {
  if (opt.max_bad_fraction <= 0 || !C.resolved || !C.spec.num_samples || C.shutdown_req)
    return;
  uint64_t bad = 0;
  for (size_t i = 0; i < s->n_bad_samples; i++) bad += s->bad_samples[i]->count;
  double f = (double)bad / (double)C.spec.num_samples;
  if (f <= opt.max_bad_fraction) return;
  char id[STK_ESCAPED_ID], why[sizeof(C.shutdown_reason)];
  snprintf(why, sizeof(why),
           "too many bad samples: worker %.120s found %" PRIu64 " of %" PRIu64
           " (%.2f%%) bad, over --max-bad-fraction %g",
           stk__escape(id, sizeof(id), w->id), bad, C.spec.num_samples, 100 * f,
           opt.max_bad_fraction);
  LOG_ERROR("%s", why);
  C.failed = 1;
  state_request_shutdown_locked(EXIT_ABORTED, why);
}

/* A worker's bad samples from its stats: user-code errors and all. */
static void bad_counts(const Stoker__V1__WorkerStats *s, uint64_t *user,
                       uint64_t *total) {
  for (size_t i = 0; s && i < s->n_bad_samples; i++) {
    const Stoker__V1__BadSampleCount *c = s->bad_samples[i];
    *total += c->count;
    if (c->reason && !strcmp(c->reason, "user_code")) *user += c->count;
  }
}

/* Append a worker's last bad samples ("path: why", first lines) to b. */
static void bad_list(char *b, size_t len, const cworker *w,
                     const Stoker__V1__WorkerStats *s) {
  if (!s || !s->n_bad_recent) return;
  size_t o = strlen(b);
  char id[STK_ESCAPED_ID];
  stk__escape(id, sizeof(id), w->id);
  if (o < len)
    snprintf(b + o, len - o, "\nthe last %zu of worker %.120s: ", s->n_bad_recent, id);
  for (size_t i = 0; i < s->n_bad_recent; i++) {
    char e[640];
    stk__escape(e, sizeof(e), s->bad_recent[i] ? s->bad_recent[i] : "");
    o = strlen(b);
    if (o < len) snprintf(b + o, len - o, "%s%.300s", i ? "; " : "", e);
  }
}

/* A worker's first user-code error as the coordinator passes it on:
 * printable ASCII and line breaks (the traceback's), at most len - 1. */
static void user_text(char *b, size_t len, const char *t) {
  size_t o = 0;
  for (; t && *t && o + 1 < len; t++)
    b[o++] = (*t == '\n' || (*t >= 0x20 && *t < 0x7f)) ? *t : '?';
  b[o] = 0;
}

/* The job's bad_samples policy (stk_job_bad_samples_over) over the bad
 * samples of every listed worker (w's from s, this heartbeat): past it
 * the job fails as an abort (workers exit 5, the coordinator 4), the
 * reason carrying the first user-code error with its traceback and the
 * last bad samples, which every rank's next call returns. Under C.mu. */
static void policy_check_locked(const cworker *w, const Stoker__V1__WorkerStats *s) {
  if (!C.resolved || C.shutdown_req) return;
  uint64_t user = 0, total = 0;
  bad_counts(s, &user, &total);
  /* none here: this heartbeat adds nothing the others' did not check
   * (and the sum over every worker stays off the common path) */
  if (!total) return;
  const char *first =
      s->first_user_error && *s->first_user_error ? s->first_user_error : NULL;
  const cworker *fw = w;
  for (const cworker *x = C.workers; x; x = x->next) {
    if (x == w || !x->hb) continue;
    bad_counts(x->hb, &user, &total);
    if (!first && x->hb->first_user_error && *x->hb->first_user_error)
      first = x->hb->first_user_error, fw = x;
  }
  if (!stk_job_bad_samples_over(&C.spec, user, total, C.spec.num_samples)) return;
  char why[sizeof(C.shutdown_reason)], id[STK_ESCAPED_ID], ut[3200] = "";
  stk__escape(id, sizeof(id), fw->id);
  user_text(ut, sizeof(ut), first);
  const char *pol = C.spec.bad_samples;
  if (first && (!pol[0] || !strcmp(pol, "fail"))) {
    snprintf(why, sizeof(why),
             "a python or plugin op failed on a sample (worker %.120s; %" PRIu64
             " such samples so far): %s\n(bad_samples = %s: fix the op, or set "
             "bad_samples = substitute(N) or substitute(P%%) to replace such samples "
             "within a budget)",
             id, user, ut,
             pol[0] ? pol : "fail is the default for errors of python and plugin ops");
  } else {
    snprintf(why, sizeof(why),
             "too many bad samples: %" PRIu64 " (%" PRIu64
             " where a python or plugin op "
             "failed, %" PRIu64 " corrupt files), over bad_samples = %s",
             total, user, total - user,
             pol[0] ? pol : "the default (fail at a python or plugin op error)");
    if (first) {
      size_t o = strlen(why);
      snprintf(why + o, sizeof(why) - o, "\nthe first op error (worker %.120s): %.2600s",
               id, ut);
    }
    bad_list(why, sizeof(why), w, s);
    for (const cworker *x = C.workers; x; x = x->next)
      if (x != w && x->hb) bad_list(why, sizeof(why), x, x->hb);
  }
  LOG_ERROR("%s", why);
  C.failed = 1;
  state_request_shutdown_locked(EXIT_ABORTED, why);
}

/* A deep copy of a worker's stats (pack, unpack): a heartbeat's stats
 * are kept past the callback, and a Status reply uses copies after C.mu
 * is released. NULL when out of memory. */
Stoker__V1__WorkerStats *stats_copy(const Stoker__V1__WorkerStats *s) {
  size_t n = protobuf_c_message_get_packed_size(&s->base);
  uint8_t *b = malloc(n ? n : 1);
  if (!b) return NULL;
  protobuf_c_message_pack(&s->base, b);
  Stoker__V1__WorkerStats *c = stoker__v1__worker_stats__unpack(NULL, n, b);
  free(b);
  return c;
}

/* Registered: a heartbeat (stats). */
static void worker_heartbeat(cworker *w, const Stoker__V1__WorkerMessage *m) {
  if (m->kind_case != STOKER__V1__WORKER_MESSAGE__KIND_HEARTBEAT) return;
  pthread_mutex_lock(&C.mu);
  int64_t now = stk__now_ms(), late_ms = 0;
  int recovered = w->suspect && w->live;
  if (w->suspect) late_ms = now - w->suspect_since_ms, w->suspect = 0;
  w->last_hb_ms = now;
  const Stoker__V1__WorkerStats *s = m->heartbeat->stats;
  if (s) {
    /* Batches flowing to clients: the job is in use. */
    if (s->bytes_sent > w->stats.bytes_sent) state_touch_locked();
    w->stats.batches_built = s->batches_built;
    w->stats.bytes_sent = s->bytes_sent;
    w->stats.samples_substituted = s->samples_substituted;
    w->stats.active_streams = s->active_streams;
    w->stats.queued_requests = s->queued_requests;
    w->stats.busy_fraction = s->busy_fraction;
    w->stats.batches_per_s = s->batches_per_s;
    bad_check_locked(w, s);
    policy_check_locked(w, s);
    /* a copy (the rpc layer frees m): bad samples for Status, /metrics */
    Stoker__V1__WorkerStats *cp = stats_copy(s);
    if (cp) {
      if (w->hb) protobuf_c_message_free_unpacked(&w->hb->base, NULL);
      w->hb = cp;
    }
  }
  pthread_mutex_unlock(&C.mu);
  if (recovered)
    LOG_INFO("worker %s (%s) heartbeats again: no longer suspect (was for %.1f s)", w->id,
             w->address, (double)late_ms / 1000.0);
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

/* A worker cannot serve the job and is going: keep its reason for Status
 * and for ranks waiting to join, log it, end the session. */
static void worker_failure(stk__rpc_call *call, cworker *w,
                           const Stoker__V1__WorkerFailure *f) {
  char id[MAX_STR * 4 + 8], addr[MAX_STR * 4 + 8], why[700];
  stk__escape(id, sizeof(id), w->id[0] ? w->id : "?");
  stk__escape(addr, sizeof(addr), w->address[0] ? w->address : stk__rpc_call_peer(call));
  stk__escape(why, sizeof(why), f && f->reason ? f->reason : "(no reason given)");
  pthread_mutex_lock(&C.mu);
  struct wfail *e = &C.fails[C.nfails++ % MAX_FAILURES];
  snprintf(e->text, sizeof(e->text), "worker %.150s (%.150s): %.450s", id, addr, why);
  e->at_ms = stk__now_ms();
  pthread_mutex_unlock(&C.mu);
  LOG_WARN("worker %s (%s) cannot serve the job and exits: %s", id, addr, why);
  stk__rpc_call_finish(call, GRPC_STATUS_OK, "");
}

/* The newest worker failure as "; a worker could not serve the job: TEXT
 * (N s ago)" for a waiting rank's message, or "" (none). Under C.mu. */
const char *workers_last_failure_locked(char *buf, size_t len) {
  if (!C.nfails) return "";
  const struct wfail *e = &C.fails[(C.nfails - 1) % MAX_FAILURES];
  snprintf(buf, len, "; a worker could not serve the job: %s (%.0f s ago)", e->text,
           (double)(stk__now_ms() - e->at_ms) / 1000.0);
  return buf;
}

int workers_none_can_serve_locked(char *buf, size_t len) {
  if (C.workers || !C.nfails) return 0;
  const struct wfail *e = &C.fails[(C.nfails - 1) % MAX_FAILURES];
  int64_t now = stk__now_ms();
  if (e->at_ms < C.workers_seen_ms || now - e->at_ms < FAIL_GRACE_MS) return 0;
  snprintf(buf, len,
           STK_NO_WORKER_CAN_SERVE
           "%.500s (%.0f s ago; no worker came since): fix what it says and start the "
           "workers again",
           e->text, (double)(now - e->at_ms) / 1000.0);
  return 1;
}

static void session_message(stk__rpc_call *call, const ProtobufCMessage *msg) {
  cworker *w = stk__rpc_call_data(call);
  const Stoker__V1__WorkerMessage *m = (const Stoker__V1__WorkerMessage *)msg;
  /* The phase also moves on other threads (the address check's answer,
   * the journal's writer): read it under C.mu. A message while the
   * address is checked ends the session; the worker's answer to nothing
   * cannot be taken. */
  pthread_mutex_lock(&C.mu);
  int phase = w->phase;
  if (phase == WS_CHECKING) w->phase = WS_OVER;
  pthread_mutex_unlock(&C.mu);
  if (phase != WS_CHECKING && w->check) { /* answered: done with it */
    resolve_release(w->check);
    w->check = NULL;
  }
  if (m && m->kind_case == STOKER__V1__WORKER_MESSAGE__KIND_FAILURE && phase != WS_OVER) {
    set_phase(w, WS_OVER);
    worker_failure(call, w, m->failure);
    return;
  }
  switch (phase) {
    case WS_HELLO:
      if (worker_hello(call, w, m)) set_phase(w, WS_OVER);
      break;
    case WS_CHECKING:
      if (m)
        stk__rpc_call_finish(call, GRPC_STATUS_FAILED_PRECONDITION,
                             "a worker's second message came before RegisterAck");
      break;
    case WS_HELLO2:
      if (worker_admit(call, w, m)) set_phase(w, WS_OVER);
      break;
    case WS_ADMITTING: /* heartbeats before it is listed count as well */
    case WS_SERVING:
      if (!m) { /* refused by the rpc layer, which ended the call saying why */
        set_phase(w, WS_OVER);
      } else {
        worker_heartbeat(w, m);
      }
      break;
  }
}

/* The worker said goodbye (half-close): end the session. */
static void session_half_close(stk__rpc_call *call) {
  cworker *w = stk__rpc_call_data(call);
  pthread_mutex_lock(&C.mu);
  int serving = w->phase == WS_SERVING;
  if (w->phase == WS_CHECKING || w->phase == WS_ADMITTING)
    w->phase = WS_OVER; /* no answer goes out now, it is not listed */
  pthread_mutex_unlock(&C.mu);
  stk__rpc_call_finish(call, serving ? GRPC_STATUS_OK : GRPC_STATUS_CANCELLED, "");
}

/* A listed worker whose session ended is out of the journal (persist_after,
 * on the writer thread): off the list, freed. */
static void leave_journaled(void *arg) {
  cworker *w = arg;
  pthread_mutex_lock(&C.mu);
  int was_live = state_unlink_locked(w);
  size_t nlive = state_nworkers_locked();
  pthread_mutex_unlock(&C.mu);
  if (was_live) LOG_INFO("worker %s (%s) left; %zu live", w->id, w->address, nlive);
  worker_free(w);
}

/* The session is over: drop the worker from the live list (a no-op if a
 * heartbeat lapse or a replacement did already). */
static void session_closed(stk__rpc_call *call) {
  cworker *w = stk__rpc_call_data(call);
  resolve_release(w->check); /* no answer comes after this */
  /* Out of the journal before it leaves the list: once Status no longer
   * shows the worker, a restart does not wait for it either. The write
   * runs on the journal's writer thread (leave_journaled unlinks and frees
   * it); the handle is gone once we return, so w->call is cleared now and
   * the main loop no longer sends to it. An admission still waiting for
   * the journal frees it there (admit_journaled). */
  pthread_mutex_lock(&C.mu);
  int journaled = w->live && !w->leaving, waiting = w->journal_wait;
  w->leaving = 1;
  w->call = NULL;
  w->gone = 1;
  if (w->phase != WS_SERVING) w->phase = WS_OVER;
  pthread_mutex_unlock(&C.mu);
  if (waiting) return;
  if (journaled) {
    persist_after(&w->jw, leave_journaled, w);
    return;
  }
  leave_journaled(w); /* never listed, or dropped already: no journal write */
}

const stk__rpc_stream_ops session_ops = {session_open, session_message,
                                         session_half_close, NULL, session_closed};

/* Send Shutdown to every live worker that has not had it yet (the send
 * only queues: no wait under the lock). */
void workers_send_shutdowns(void) {
  pthread_mutex_lock(&C.mu);
  for (cworker *w = C.workers; w; w = w->next) {
    if (w->shutdown_sent || !w->call) continue; /* no call: leaving */
    w->shutdown_sent = 1;
    Stoker__V1__Shutdown sd = STOKER__V1__SHUTDOWN__INIT;
    sd.failed = C.failed;
    sd.reason = C.failed ? C.shutdown_reason : (char *)"";
    Stoker__V1__CoordinatorCommand cmd = STOKER__V1__COORDINATOR_COMMAND__INIT;
    cmd.kind_case = STOKER__V1__COORDINATOR_COMMAND__KIND_SHUTDOWN;
    cmd.shutdown = &sd;
    /* Sent is not received (the message may still sit in gRPC or the
     * socket when the coordinator dies): the worker stays in the journal
     * until its session ends, which it does once it has drained. */
    if (stk__rpc_call_send_msg(w->call, &cmd.base) == 0)
      LOG_INFO("sent shutdown to worker %s", w->id);
  }
  pthread_mutex_unlock(&C.mu);
}

/* Late heartbeats make a worker suspect, not dropped: on a busy machine
 * a heartbeat waits behind everything else, and dropping a worker that
 * still serves makes every rank re-open its streams (more load). It
 * stays listed; only a closed session (session_closed) or a lapse of
 * --heartbeat-lapse-s drops it. Logs after C.mu is released (a few lines
 * per tick at most: one per change of state). */
void workers_check_heartbeats(void) {
  int64_t now = stk__now_ms(), late = opt.heartbeat_interval_ms * opt.heartbeat_misses,
          lapse = opt.heartbeat_lapse_s * 1000;
  if (lapse < late) lapse = late; /* never dropped before it was suspect */
  enum { MAX_LINES = 16 };
  struct {
    char id[STK_ESCAPED_ID], addr[STK_ESCAPED_ID];
    int dropped;
    double s;
  } lines[MAX_LINES];
  int nlines = 0, more = 0;
  pthread_mutex_lock(&C.mu);
  for (cworker *w = C.workers, *next; w; w = next) {
    next = w->next;
    int64_t since = now - w->last_hb_ms;
    int drop = since >= lapse;
    if (since <= late || (w->suspect && !drop)) continue;
    if (nlines < MAX_LINES) {
      stk__escape(lines[nlines].id, sizeof(lines[nlines].id), w->id);
      stk__escape(lines[nlines].addr, sizeof(lines[nlines].addr), w->address);
      lines[nlines].dropped = drop;
      lines[nlines++].s = (double)since / 1000.0;
    } else {
      more++;
    }
    if (!drop) {
      w->suspect = 1;
      w->suspect_since_ms = now;
      continue;
    }
    state_unlink_locked(w);
    /* The session ends; the worker reconnects and registers again. */
    if (w->call)
      stk__rpc_call_abort(w->call, GRPC_STATUS_UNAVAILABLE, "heartbeats lapsed");
  }
  pthread_mutex_unlock(&C.mu);
  for (int i = 0; i < nlines; i++) {
    if (lines[i].dropped)
      LOG_WARN(
          "worker %s (%s): no heartbeat for %.1f s (--heartbeat-lapse-s %lld): "
          "dropped from the list",
          lines[i].id, lines[i].addr, lines[i].s, opt.heartbeat_lapse_s);
    else
      LOG_WARN(
          "worker %s (%s): no heartbeat for %.1f s (over %lld x %lld ms): suspect, "
          "still listed while its session is open",
          lines[i].id, lines[i].addr, lines[i].s, opt.heartbeat_misses,
          opt.heartbeat_interval_ms);
  }
  if (more) LOG_WARN("%d more workers became suspect or were dropped", more);
}
