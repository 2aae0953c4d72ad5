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
 * With --state-dir, what a restart must not forget (the job's hash, the
 * dataset size and fingerprint, joined and finished ranks, the registered
 * workers, the job's end) is written to a state journal (journal.c) before
 * the call that changed it is answered; a coordinator restarted with the
 * same job and state dir resumes from it. Clients also re-announce
 * themselves on every watch (rank, job hash, finished), so even a restart
 * on a fresh disk converges while the ranks' clients are still open.
 *
 * Owns the job, the worker table and the rank table, all under one mutex.
 * Calls are event driven (proto/rpc.h, "Server"): handlers run on the rpc
 * layer's threads and never block; sends only queue, so they may be made
 * under the mutex (lock order: C.mu, then the rpc layer's own locks). The
 * one exception is the state journal: a small file write + fsync made
 * inline on a serving thread, without C.mu (journal_sync), before a call
 * is answered. Must not trust the network: every message is validated and
 * a bad one ends only its own call.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/advice.h"
#include "common/error.h"
#include "common/secret.h"
#include "daemon.h"
#include "health.h"
#include "journal.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
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
  EXIT_FAIL = 1,   /* cannot listen, cannot write the port file, state dir */
  EXIT_USAGE = 2,  /* bad option, config file or job spec; another job's state */
  EXIT_IDLE = 3,   /* no client touched the job for --idle-timeout-s */
  EXIT_ABORTED = 4 /* a rank aborted the job (Finish.abort_job) */
};

static const char exit_codes_text[] =
    "  0  the job ended: every rank finished, rank 0 asked, or SIGTERM/SIGINT\n"
    "  1  runtime failure (cannot listen, cannot write the port file, cannot use\n"
    "     --state-dir: locked by another coordinator, unreadable, damaged state)\n"
    "  2  usage error (bad option, config file or job spec; --state-dir holds\n"
    "     another job's state)\n"
    "  3  idle timeout: no client touched the job for --idle-timeout-s "
    "(workers were still shut down)\n"
    "  4  the job was aborted: a rank (or stoker abort) asked with Finish.abort_job;\n"
    "     workers were told the job failed and exit with their own abort code\n";

static char token[STK_TOKEN_MAX + 1]; /* resolved in main (stk__daemon_token) */
static stk__role_tokens roles;        /* --*-token-file, read in main */

#define MAX_STR      STK_MAX_ID_BYTES /* worker ids and addresses (proto/wire_limits.h) */
#define MAX_FAILURES 8                /* worker failures kept for Status */

/* ---- Options ----------------------------------------------------------- */

static struct {
  char *listen, *job, *token, *token_file, *port_file, *log_level, *metrics_listen,
      *state_dir, *worker_token_file, *client_token_file, *admin_token_file;
  int trust_worker_addresses;
  stk__tls_opts tls;
  stk__strlist set;
  long long idle_timeout_s, heartbeat_interval_ms, heartbeat_misses, stats_interval_s,
      shutdown_grace_s, max_message_mb, watch_lease_s, rejoin_wait_s, linger_s;
  int print_job, discard_state;
  stk__serve_opts serve;
  double max_bad_fraction;
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
     "end the job when no client touched it this long (a call, an open watch "
     "within its lease, or batches flowing from a worker count)",
     &opt.idle_timeout_s, 1, 86400 * 30},
    {"watch-lease-s", OPT_INT, "60", NULL,
     "end each WatchWorkers call (OK) after this long; libstoker opens a new one "
     "at once, a watcher on a dead host does not, so it stops keeping the job "
     "from its idle timeout",
     &opt.watch_lease_s, 1, 86400},
    {"state-dir", OPT_STR, "", NULL,
     "directory (created if missing) for the job's state journal: job hash, "
     "dataset size and fingerprint, joined and finished ranks, workers, the "
     "job's end; a coordinator restarted with the same job and state dir resumes "
     "where it was. Empty = no journal (clients still re-announce themselves)",
     &opt.state_dir, 0, 0},
    {"rejoin-wait-s", OPT_INT, "10", NULL,
     "after a restart with --state-dir, how long (from the start) the end of the "
     "job waits for workers registered before the restart to come back and take "
     "their Shutdown; a live worker re-registers within a few seconds (its "
     "reconnect backoff is at most 2 s), a gone one never does",
     &opt.rejoin_wait_s, 0, 3600},
    {"discard-state", OPT_BOOL, "false", NULL,
     "start afresh when --state-dir holds another job's state or a damaged "
     "file (it is overwritten; logged)",
     &opt.discard_state, 0, 0},
    {"heartbeat-interval-ms", OPT_INT, "1000", NULL, "how often workers heartbeat",
     &opt.heartbeat_interval_ms, 50, 60000},
    {"heartbeat-misses", OPT_INT, "3", NULL,
     "missed heartbeats before a worker is dropped from the list", &opt.heartbeat_misses,
     1, 1000},
    STK__OPT_STATS_INTERVAL_S(opt.stats_interval_s),
    {"shutdown-grace-s", OPT_INT, "15", NULL,
     "on shutdown, how long to wait for workers to drain and disconnect, and "
     "for workers registered before a restart (--state-dir, --rejoin-wait-s) to "
     "come back and be told (a second SIGTERM/SIGINT cuts it short)",
     &opt.shutdown_grace_s, 0, 3600},
    {"linger-s", OPT_INT, "10", NULL,
     "when a job that began before this coordinator started (it was restarted) "
     "ends, stay up this long telling every worker that comes back to shut down "
     "(workers retry every 1-3 s) and every rank that the job ended",
     &opt.linger_s, 0, 3600},
    STK__OPT_TOKEN_FILE(opt.token_file, "every call must carry"),
    STK__OPT_TOKEN(opt.token),
    {"worker-token-file", OPT_STR, "", NULL,
     "role separation: a token (first line of FILE) that may only open worker "
     "sessions and read Status",
     &opt.worker_token_file, 0, 0},
    {"client-token-file", OPT_STR, "", NULL,
     "role separation: a token that may only join, watch, finish, report and read "
     "Status (give the workers the same file)",
     &opt.client_token_file, 0, 0},
    {"admin-token-file", OPT_STR, "", NULL,
     "role separation: a token that may call everything (stoker abort, status)",
     &opt.admin_token_file, 0, 0},
    {"trust-worker-addresses", OPT_BOOL, "false", NULL,
     "accept a worker whose advertised host does not resolve to the address its "
     "session comes from (behind NAT or a proxy)",
     &opt.trust_worker_addresses, 0, 0},
    STK__TLS_SERVER_OPTIONS(opt.tls),
    STK__OPT_PORT_FILE(opt.port_file),
    STK__OPT_MAX_MESSAGE_MB(opt.max_message_mb, "4",
                            "largest gRPC message sent (requests are received with "
                            "their own small limits: docs/operations.md)"),
    STK__OPT_LOG_LEVEL(opt.log_level),
    STK__SERVE_OPTIONS(opt.serve),
    STK__OPT_METRICS_LISTEN(opt.metrics_listen),
    {"max-bad-fraction", OPT_DOUBLE, "0", NULL,
     "fail the job (as an abort: exit 4, workers exit 5) once a worker has found more "
     "than this fraction of the dataset's samples bad; 0 = off (bad samples are "
     "replaced)",
     &opt.max_bad_fraction, 0, 1},
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
  int leaving;         /* session over: no longer journaled, unlink next */
  int shutdown_sent;
  int64_t registered_ms, last_hb_ms;
  struct {
    uint64_t batches_built, bytes_sent, samples_substituted;
    uint32_t active_streams, queued_requests;
    double busy_fraction, batches_per_s;
  } stats;
  Stoker__V1__WorkerStats *hb; /* the last heartbeat's stats, whole (under C.mu) */
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
  uint64_t config_hash; /* of the job as configured: the state journal's key */
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
  /* The job began before this coordinator started (a restart): a rank it
   * never saw join re-announced itself or finished, or the state journal
   * resumed it. Workers of the earlier coordinator may still be in their
   * reconnect backoff when the job ends: the end lingers (--linger-s). */
  int seen_earlier;
  int by_signal; /* the shutdown was asked by a signal: no linger */
  /* Workers that could not serve the job and said why (WorkerFailure):
   * the last MAX_FAILURES, for Status and waiting ranks. */
  struct wfail {
    char text[800]; /* "worker ID (ADDRESS): REASON", escaped */
    int64_t at_ms;
  } fails[MAX_FAILURES];
  uint32_t nfails; /* ever recorded; the newest is fails[(nfails - 1) % MAX] */
  int64_t start_ms, last_touch_ms;
  int watchers;
  struct watcher *watch_list; /* open WatchWorkers calls */
  int done;
  struct crank {   /* the figures a rank last reported (ReportStats) */
    int64_t at_ms; /* 0 = never */
    /* The process that holds the rank (one per rank): its client id (NULL
     * = none known), where it joined from and when, its open watches and
     * when one was last seen (holder_live). */
    char *holder;
    char holder_peer[64];
    int64_t holder_since_ms, holder_seen_ms;
    int holder_watches;
    uint64_t holder_gen; /* changes with the holder (a watch counts for one) */
    double stall_fraction, batches_per_s;
    uint64_t batches;
    uint32_t workers_alive;
  } * ranks;
  /* From the state journal: ids of workers registered before a restart and
   * not back yet; the end of the job waits (bounded) for them too. */
  char **expect;
  size_t nexpect;
} C = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* The state journal (--state-dir). Writes are serialised by J.mu, taken
 * without C.mu; seq numbers the snapshots so an older one is never written
 * after a newer one. */
static struct {
  pthread_mutex_t mu;
  stk__state_dir *dir; /* NULL: no journal */
  uint64_t seq;        /* under C.mu: last snapshot taken */
  uint64_t written;    /* under J.mu: last snapshot on disk */
  int failing;         /* under J.mu: the last write failed (logged once) */
} J = {.mu = PTHREAD_MUTEX_INITIALIZER};

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

/* ---- State journal (--state-dir) ---------------------------------------- */

/* The state as journal text (C's fields, read under C.mu). 0 or -1. */
static int journal_text_locked(char **text, size_t *len) {
  stk__journal j;
  memset(&j, 0, sizeof(j));
  j.job_hash = C.config_hash;
  j.job_name = C.spec.name;
  j.world_size = C.spec.world_size;
  j.num_samples = C.resolved ? C.spec.num_samples : 0;
  j.have_fp = C.have_fp;
  j.fingerprint = C.fingerprint;
  j.joined = C.joined;
  j.finished = C.finished;
  j.ended = C.shutdown_req != 0;
  j.exit_code = C.shutdown_req ? C.shutdown_req - 1 : 0;
  j.failed = C.failed;
  j.reason = C.shutdown_reason;
  size_t n = nworkers_locked() + C.nexpect;
  char **ids = calloc(n ? n : 1, sizeof(*ids));
  if (!ids) return -1;
  for (cworker *w = C.workers; w; w = w->next)
    if (!w->leaving) ids[j.nworkers++] = w->id;
  for (size_t i = 0; i < C.nexpect; i++) ids[j.nworkers++] = C.expect[i];
  j.worker_ids = ids;
  int rc = stk__journal_format(&j, text, len);
  free(ids);
  return rc;
}

/* Put the state as of now in the journal (nothing without --state-dir):
 * returns once a snapshot holding every change made before the call is on
 * disk, so a call answered after it survives a kill -9. A failed write is
 * logged (once until one succeeds again) and the job goes on from memory:
 * a disk problem must not end a running job. Call without C.mu. */
static void journal_sync(void) {
  if (!J.dir) return;
  char *text = NULL;
  size_t len = 0;
  pthread_mutex_lock(&C.mu);
  uint64_t seq = ++J.seq;
  int rc = journal_text_locked(&text, &len);
  pthread_mutex_unlock(&C.mu);
  char err[600] = "out of memory";
  pthread_mutex_lock(&J.mu);
  if (seq > J.written) { /* else a newer snapshot, which has ours, is on disk */
    if (rc || stk__state_dir_write(J.dir, text, len, err, sizeof(err))) {
      if (!J.failing)
        LOG_ERROR(
            "state journal: %s; the job goes on, but a restart may forget what "
            "changed since the last write",
            err);
      J.failing = 1;
    } else {
      if (J.failing) LOG_INFO("state journal written again");
      J.failing = 0;
      J.written = seq;
    }
  }
  pthread_mutex_unlock(&J.mu);
  free(text);
}

/* A worker id registered again: no longer expected back. Under C.mu. */
static void expect_remove_locked(const char *id) {
  for (size_t i = 0; i < C.nexpect; i++)
    if (!strcmp(C.expect[i], id)) {
      free(C.expect[i]);
      C.expect[i] = C.expect[--C.nexpect];
      return;
    }
}

/* Journal id as a worker to expect back, unless it is already: 1 when
 * added, 0 when it was there or on allocation failure. Under C.mu. */
static int expect_add_locked(const char *id) {
  for (size_t i = 0; i < C.nexpect; i++)
    if (!strcmp(C.expect[i], id)) return 0;
  char **v = realloc(C.expect, (C.nexpect + 1) * sizeof(*v));
  if (!v) return 0;
  C.expect = v;
  if (!(v[C.nexpect] = strdup(id))) return 0;
  C.nexpect++;
  return 1;
}

/* Once --rejoin-wait-s has passed since the start, forget the workers of
 * the journal that did not come back (gone, or they would have): the end
 * of the job no longer waits for them. Call without C.mu. */
static void expect_expire(void) {
  pthread_mutex_lock(&C.mu);
  size_t n = C.nexpect;
  int due = n && stk__now_ms() - C.start_ms >= opt.rejoin_wait_s * 1000;
  if (due) {
    for (size_t i = 0; i < n; i++) free(C.expect[i]);
    C.nexpect = 0;
  }
  pthread_mutex_unlock(&C.mu);
  if (!due) return;
  LOG_WARN(
      "%zu workers registered before the restart did not come back within %lld s "
      "(--rejoin-wait-s): not waiting for them",
      n, opt.rejoin_wait_s);
  journal_sync();
}

/* Take over a journal read at start: the dataset, the ranks, the end and
 * the workers to expect back. 0, or -1 with err (the file does not fit
 * this job: treated as damaged). Before the server starts. */
static int journal_apply(stk__journal *j, char *err, size_t errlen) {
  if (j->world_size != C.spec.world_size)
    return stk__errf(err, errlen, -1, "world_size %u, the job has %u", j->world_size,
                     C.spec.world_size);
  if (j->num_samples) {
    if (C.resolved && C.spec.num_samples != j->num_samples)
      return stk__errf(err, errlen, -1, "num_samples %" PRIu64 ", the job has %" PRIu64,
                       j->num_samples, C.spec.num_samples);
    if (!C.resolved) {
      stk_job_spec t = C.spec;
      t.num_samples = j->num_samples;
      if (stk_steps_per_epoch(&t, j->num_samples) == 0)
        return stk__errf(err, errlen, -1,
                         "num_samples %" PRIu64 " gives no step of the job",
                         j->num_samples);
      C.spec = t;
      C.resolved = 1;
      if (job_publish_locked()) return stk__errf(err, errlen, -1, "out of memory");
    }
  }
  C.have_fp = j->have_fp;
  C.fingerprint = j->fingerprint;
  C.seen_earlier = 1; /* a job resumed from the journal began earlier */
  for (uint32_t r = 0; r < C.spec.world_size; r++) {
    if (j->joined[r] && !C.joined[r]) C.joined[r] = 1, C.njoined++;
    if (j->finished[r] && !C.finished[r]) C.finished[r] = 1, C.nfinished++;
  }
  if (j->ended) {
    C.shutdown_req = j->exit_code + 1;
    C.failed = j->failed;
    snprintf(C.shutdown_reason, sizeof(C.shutdown_reason), "%s", j->reason);
    C.shutting_down = 1; /* no join while the shutdown is finished */
  } else if (C.nfinished == C.spec.world_size) {
    request_shutdown_locked(EXIT_OK, "every rank finished");
  }
  C.expect = j->worker_ids; /* taken over */
  C.nexpect = j->nworkers;
  j->worker_ids = NULL;
  j->nworkers = 0;
  return 0;
}

/* Open --state-dir and resume from its journal (or start one). EXIT_OK, or
 * an exit code with err. Before the server starts. */
static int journal_open(char *err, size_t errlen) {
  char msg[500];
  if (stk__state_dir_open(opt.state_dir, &J.dir, err, errlen)) return EXIT_FAIL;
  char *text = NULL;
  size_t len = 0;
  int r = stk__state_dir_read(J.dir, &text, &len, msg, sizeof(msg));
  stk__journal j;
  memset(&j, 0, sizeof(j));
  int code = EXIT_OK;
  if (r < 0) {
    if (!opt.discard_state) {
      code = stk__errf(err, errlen, EXIT_FAIL, "--state-dir: %s", msg);
    } else {
      LOG_WARN("--discard-state: %s; starting afresh", msg);
    }
  } else if (r == 1 && stk__journal_parse(text, len, &j, msg, sizeof(msg))) {
    if (!opt.discard_state)
      code = stk__errf(err, errlen, EXIT_FAIL,
                       "the state file %s/state is damaged or not a state file (%s); "
                       "move it away, or start with --discard-state to start afresh",
                       opt.state_dir, msg);
    else
      LOG_WARN("--discard-state: damaged state file %s/state (%s) overwritten",
               opt.state_dir, msg);
  } else if (r == 1 && j.job_hash != C.config_hash) {
    char name[STK_ESCAPED_ID];
    stk__escape(name, sizeof(name), j.job_name);
    if (!opt.discard_state)
      code =
          stk__errf(err, errlen, EXIT_USAGE,
                    "--state-dir %s holds the state of another job (%s, hash %016" PRIx64
                    "); this coordinator runs job %s (hash %016" PRIx64
                    "): give each job its own state dir, or --discard-state to "
                    "overwrite it",
                    opt.state_dir, name, j.job_hash, C.spec.name, C.config_hash);
    else
      LOG_WARN("--discard-state: the state of job %s (hash %016" PRIx64
               ") in %s overwritten",
               name, j.job_hash, opt.state_dir);
  } else if (r == 1) {
    if (journal_apply(&j, msg, sizeof(msg))) {
      code = stk__errf(err, errlen, EXIT_FAIL,
                       "the state file %s/state does not fit the job (%s); move it away, "
                       "or start with --discard-state",
                       opt.state_dir, msg);
    } else if (C.shutdown_req && j.ended) {
      LOG_INFO(
          "state dir %s: the job had already ended (%s, exit code %d): finishing its "
          "shutdown (workers still to tell: %zu)",
          opt.state_dir, C.shutdown_reason, C.shutdown_req - 1, C.nexpect);
    } else {
      LOG_INFO("state dir %s: resuming job %s (hash %016" PRIx64
               "): %u/%u ranks finished, "
               "%u joined, dataset size %" PRIu64 "%s, workers expected back: %zu",
               opt.state_dir, C.spec.name, C.hash, C.nfinished, C.spec.world_size,
               C.njoined, C.resolved ? C.spec.num_samples : 0,
               C.resolved ? "" : " (not known yet)", C.nexpect);
    }
  } else {
    LOG_INFO("state dir %s: no state yet, starting the journal", opt.state_dir);
  }
  free(text);
  stk__journal_free(&j);
  if (code != EXIT_OK) return code;
  /* Write at once: a fresh dir gets its job, and a dir we cannot write to
   * is found now rather than at the first finish. */
  pthread_mutex_lock(&C.mu);
  uint64_t seq = ++J.seq;
  r = journal_text_locked(&text, &len);
  pthread_mutex_unlock(&C.mu);
  if (r) return stk__errf(err, errlen, EXIT_FAIL, "out of memory");
  r = stk__state_dir_write(J.dir, text, len, msg, sizeof(msg));
  free(text);
  if (r) return stk__errf(err, errlen, EXIT_FAIL, "--state-dir: %s", msg);
  J.written = seq;
  return EXIT_OK;
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

/* Clients dial the address a worker advertises, so a worker (or anyone
 * with a worker token) must not send them elsewhere: its host must
 * resolve to the address the session comes from. 0, or -1 when the call
 * was refused (FAILED_PRECONDITION: final for the worker). A DNS lookup
 * on this serving thread, once per session. */
static int advertised_check(stk__rpc_call *call, const cworker *w) {
  char res[200], msg[3200], id[MAX_STR * 4 + 8], addr[MAX_STR * 4 + 8], peer[300];
  const char *p = stk__rpc_call_peer(call);
  int m = stk__host_is_peer(w->address, p, res, sizeof(res));
  if (m == 1) return 0;
  stk__escape(id, sizeof(id), w->id);
  stk__escape(addr, sizeof(addr), w->address);
  stk__escape(peer, sizeof(peer), p);
  snprintf(msg, sizeof(msg),
           "advertised address %s is not the host the session comes from (%s; %s%s): "
           "fix the worker's --advertise, or run the coordinator with "
           "--trust-worker-addresses (NAT, proxies); worker %s",
           addr, peer, m == 0 ? "it resolves to " : "", res, id);
  LOG_WARN("refusing: %s", msg);
  stk__rpc_call_finish(call, GRPC_STATUS_FAILED_PRECONDITION, msg);
  return -1;
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
  if (!opt.trust_worker_addresses && advertised_check(call, w)) return -1;
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
    /* First registrant decides: say so, and how to take the decision back
     * (a worker with another dataset is then refused, both sizes logged). */
    LOG_WARN("dataset size %" PRIu64
             " taken from the first worker to register, %s "
             "(job hash now %016" PRIx64
             "); to decide it yourself, pin num_samples = %" PRIu64 " in the job",
             h->dataset_size, w->id, C.hash, h->dataset_size);
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
  if (J.dir) {
    /* Journal the worker (and the dataset it taught the job) before it is
     * on the list: whatever Status shows, a restart knows. A file write +
     * fsync inline on this serving thread (journal_sync); the session's
     * callbacks come one at a time, so none runs meanwhile. */
    int pending = expect_add_locked(w->id);
    pthread_mutex_unlock(&C.mu);
    journal_sync();
    pthread_mutex_lock(&C.mu);
    if (pending) expect_remove_locked(w->id);
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
  expect_remove_locked(w->id); /* it is back */
  pthread_cond_broadcast(&C.cv);
  size_t nlive = nworkers_locked();
  pthread_mutex_unlock(&C.mu);
  LOG_INFO("worker %s registered at %s (%u cores); %zu live", w->id, w->address, w->cores,
           nlive);
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
  request_shutdown_locked(EXIT_ABORTED, why);
}

/* A deep copy of a worker's stats (pack, unpack): a heartbeat's stats
 * are kept past the callback, and a Status reply uses copies after C.mu
 * is released. NULL when out of memory. */
static Stoker__V1__WorkerStats *stats_copy(const Stoker__V1__WorkerStats *s) {
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
    bad_check_locked(w, s);
    /* a copy (the rpc layer frees m): bad samples for Status, /metrics */
    Stoker__V1__WorkerStats *cp = stats_copy(s);
    if (cp) {
      if (w->hb) protobuf_c_message_free_unpacked(&w->hb->base, NULL);
      w->hb = cp;
    }
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
static const char *last_failure_locked(char *buf, size_t len) {
  if (!C.nfails) return "";
  const struct wfail *e = &C.fails[(C.nfails - 1) % MAX_FAILURES];
  snprintf(buf, len, "; a worker could not serve the job: %s (%.0f s ago)", e->text,
           (double)(stk__now_ms() - e->at_ms) / 1000.0);
  return buf;
}

static void session_message(stk__rpc_call *call, const ProtobufCMessage *msg) {
  cworker *w = stk__rpc_call_data(call);
  const Stoker__V1__WorkerMessage *m = (const Stoker__V1__WorkerMessage *)msg;
  if (m && m->kind_case == STOKER__V1__WORKER_MESSAGE__KIND_FAILURE &&
      w->phase != WS_OVER) {
    w->phase = WS_OVER;
    worker_failure(call, w, m->failure);
    return;
  }
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
  /* Out of the journal before it leaves the list: once Status no longer
   * shows the worker, a restart does not wait for it either. journal_sync
   * writes and fsyncs inline on this serving thread; the handle stays
   * valid until we return, so the main loop may still send to it or
   * abort it meanwhile. */
  pthread_mutex_lock(&C.mu);
  int journaled = w->live && !w->leaving;
  w->leaving = 1;
  pthread_mutex_unlock(&C.mu);
  if (journaled) journal_sync();
  pthread_mutex_lock(&C.mu);
  int was_live = unlink_locked(w);
  w->call = NULL;
  size_t nlive = nworkers_locked();
  pthread_mutex_unlock(&C.mu);
  if (was_live) LOG_INFO("worker %s (%s) left; %zu live", w->id, w->address, nlive);
  if (w->hb) protobuf_c_message_free_unpacked(&w->hb->base, NULL);
  free(w);
}

static const stk__rpc_stream_ops session_ops = {session_open, session_message,
                                                session_half_close, NULL, session_closed};

/* ---- Coordinator.Join / WatchWorkers / Finish / Status ------------------ */

/* How long a rank's holder counts as alive after its last watch ended (the
 * client opens the next one at once) or after its join (its first watch
 * follows it). */
#define HOLDER_GRACE_MS 5000

/* The holder of rank r is alive: an open watch, or seen within the grace. */
static int holder_live_locked(uint32_t r, int64_t now) {
  const struct crank *k = &C.ranks[r];
  return k->holder &&
         (k->holder_watches > 0 || now - k->holder_seen_ms < HOLDER_GRACE_MS);
}

/* Another live process holds rank r (client ids compared; a client without
 * an id, e.g. a stock one, is never refused). */
static int holder_busy_locked(uint32_t r, const char *client_id, int64_t now) {
  const struct crank *k = &C.ranks[r];
  return client_id && *client_id && k->holder && *k->holder &&
         strcmp(k->holder, client_id) != 0 && holder_live_locked(r, now);
}

/* client_id (from peer) holds rank r now; what it replaced, for the log:
 * 0 nobody, 1 the same client, 2 another one (gone). */
static int holder_take_locked(uint32_t r, const char *client_id, const char *peer,
                              int64_t now, char *old, size_t oldlen) {
  struct crank *k = &C.ranks[r];
  int was = !k->holder ? 0 : !strcmp(k->holder, client_id ? client_id : "") ? 1 : 2;
  snprintf(old, oldlen, "%s", k->holder ? k->holder : "");
  if (was != 1) {
    char *h = strdup(client_id ? client_id : "");
    if (!h) return was;
    free(k->holder);
    k->holder = h;
    k->holder_since_ms = now;
    k->holder_watches = 0;
    k->holder_gen++;
  }
  snprintf(k->holder_peer, sizeof(k->holder_peer), "%s", peer);
  k->holder_seen_ms = now;
  return was;
}

static void handle_join(stk__rpc_call *call, const ProtobufCMessage *req) {
  const Stoker__V1__JoinRequest *q = (const Stoker__V1__JoinRequest *)req;
  char msg[400];
  int code = 0;
  int64_t now = stk__now_ms();
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
    char lf[900];
    snprintf(msg, sizeof(msg),
             "waiting for a worker (the dataset size is not known yet)%.330s",
             last_failure_locked(lf, sizeof(lf)));
  } else if (q->expect_job_hash && q->expect_job_hash != C.hash) {
    code = GRPC_STATUS_FAILED_PRECONDITION;
    snprintf(msg, sizeof(msg),
             "resume state is from job %016" PRIx64
             ", this coordinator runs job %016" PRIx64 " (%s)",
             q->expect_job_hash, C.hash, C.spec.name);
  } else if (holder_busy_locked(q->rank, q->client_id, now)) {
    /* UNAVAILABLE: libstoker keeps trying for its join timeout, so a
     * process that replaces a dead holder gets in once that one is gone. */
    const struct crank *r = &C.ranks[q->rank];
    char esc[300];
    code = GRPC_STATUS_UNAVAILABLE;
    snprintf(msg, sizeof(msg),
             "rank %u is held by client %s (from %s, joined %.0f s ago): one process "
             "per rank; a holder that died frees it within seconds",
             q->rank, stk__escape(esc, sizeof(esc), r->holder), r->holder_peer,
             (double)(now - r->holder_since_ms) / 1000.0);
  }
  if (code) {
    pthread_mutex_unlock(&C.mu);
    LOG_WARN("join from %s rejected: %s", stk__rpc_call_peer(call), msg);
    stk__rpc_call_finish(call, (grpc_status_code)code, msg);
    return;
  }
  int newly = !C.joined[q->rank];
  if (newly) C.joined[q->rank] = 1, C.njoined++;
  char old[MAX_STR], esc_old[300];
  int was = holder_take_locked(q->rank, q->client_id, stk__rpc_call_peer(call), now, old,
                               sizeof(old));
  Stoker__V1__JobSpec job = STOKER__V1__JOB_SPEC__INIT;
  job.canonical = strdup(C.canonical);
  job.hash = C.hash;
  Stoker__V1__JoinResponse resp = STOKER__V1__JOIN_RESPONSE__INIT;
  resp.job = &job;
  resp.list_version = C.version;
  resp.workers = infos_locked(&resp.n_workers);
  pthread_mutex_unlock(&C.mu);
  /* A new rank is on disk before it is answered (a file write + fsync,
   * inline on this serving thread). */
  if (newly) journal_sync();
  if (was == 2)
    LOG_INFO("rank %u rejoined by client %s from %s, replacing client %s (gone)", q->rank,
             q->client_id ? q->client_id : "", stk__rpc_call_peer(call),
             stk__escape(esc_old, sizeof(esc_old), old));
  else
    LOG_INFO("rank %u %s (client %s from %s)", q->rank, was == 1 ? "rejoined" : "joined",
             q->client_id ? q->client_id : "", stk__rpc_call_peer(call));
  if (!job.canonical || !resp.workers)
    stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  else stk__rpc_call_reply(call, &resp.base);
  free(job.canonical);
  infos_free(resp.workers, resp.n_workers);
}

/* WatchWorkers: after its one request (a re-announcement: checked, and
 * journaled when it taught the coordinator something), a WorkerList
 * whenever the live list changed (sent from watch_pump_locked: the main
 * loop's tick, a finished send, the watch's start), the last one with
 * shutting_down. A watch keeps the job from its idle timeout only within
 * its lease (--watch-lease-s) and while no send waits on its peer; at the
 * end of the lease (seen within one tick of the main loop) the call ends
 * OK and a live client opens a new one, so a watcher on a dead host cannot
 * hold a job open for longer than lease + idle timeout. */
typedef struct watcher {
  stk__rpc_call *call;
  uint32_t rank;
  int holds;    /* counted in C.ranks[rank].holder_watches ... */
  uint64_t gen; /* ... while its holder_gen is this */
  uint64_t known;
  int64_t lease_end; /* set when started */
  int started, sending, over;
  struct watcher *next;
} watcher;

/* Open watches that keep the job from its idle timeout now. Under C.mu. */
static int watch_holds_locked(int64_t now) {
  int n = 0;
  for (const watcher *wt = C.watch_list; wt; wt = wt->next)
    n += wt->started && !wt->over && !wt->sending && now < wt->lease_end;
  return n;
}

/* Send wt the list if it changed and no send is in flight; end it once
 * its lease is over. Under C.mu. */
static void watch_pump_locked(watcher *wt) {
  if (!wt->started || wt->sending || wt->over) return;
  if (C.version == wt->known && !C.shutting_down) {
    if (stk__now_ms() >= wt->lease_end) {
      wt->over = 1;
      touch_locked(); /* the idle clock runs from the end of the hold */
      stk__rpc_call_finish(wt->call, GRPC_STATUS_OK, "watch lease over: watch again");
    }
    return;
  }
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
  /* A send may wait on a peer that stopped reading: no hold meanwhile. */
  wt->sending = 1;
  touch_locked();
  wt->known = list.version;
  if (list.shutting_down) {
    wt->over = 1;
    stk__rpc_call_finish(wt->call, GRPC_STATUS_OK, "");
  }
}

/* Every watcher: from the main loop (list changes anywhere show within
 * one tick, and so do the ends of leases). */
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

/* A watch's re-announcement (WatchRequest with job_hash): check it and
 * take what the coordinator did not know (after a restart: the rank joined,
 * finished, rank 0 ended the job). 0 (*changed set when the state moved),
 * or a gRPC status with msg. Under C.mu. */
static int reannounce_locked(const Stoker__V1__WatchRequest *q, int *changed, char *msg,
                             size_t len) {
  *changed = 0;
  if (!q->job_hash) return 0; /* an old or stock client: a plain watch */
  if (q->rank >= C.spec.world_size) {
    snprintf(msg, len, "rank %u is outside the job's world_size %u", q->rank,
             C.spec.world_size);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (q->client_id && strlen(q->client_id) >= MAX_STR) {
    snprintf(msg, len, "client_id of %zu bytes (at most %d)", strlen(q->client_id),
             MAX_STR - 1);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (q->end_job && q->rank != 0) {
    snprintf(msg, len, "only rank 0 may end the whole job (end_job)");
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (C.shutting_down) return 0; /* the watch gets the last list at once */
  if (!C.resolved) {
    char lf[900];
    snprintf(msg, len, "waiting for a worker (the dataset size is not known yet)%.330s",
             last_failure_locked(lf, sizeof(lf)));
    return GRPC_STATUS_UNAVAILABLE;
  }
  if (q->job_hash != C.hash) {
    snprintf(msg, len,
             "this client is in job %016" PRIx64 ", this coordinator runs job %016" PRIx64
             " (%s)",
             q->job_hash, C.hash, C.spec.name);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  if (!C.joined[q->rank]) /* it joined an earlier coordinator */
    C.joined[q->rank] = 1, C.njoined++, *changed = 1, C.seen_earlier = 1;
  if (q->finished && !C.finished[q->rank]) {
    C.finished[q->rank] = 1, C.nfinished++, *changed = 1;
    if (C.nfinished == C.spec.world_size)
      request_shutdown_locked(EXIT_OK, "every rank finished");
  }
  if (q->end_job && !C.shutdown_req) {
    request_shutdown_locked(EXIT_OK, "rank 0 ended the job");
    *changed = 1;
  }
  return 0;
}

static void watch_message(stk__rpc_call *call, const ProtobufCMessage *m) {
  watcher *wt = stk__rpc_call_data(call);
  const Stoker__V1__WatchRequest *q = (const Stoker__V1__WatchRequest *)m;
  char msg[400];
  int changed = 0;
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
  touch_locked();
  int code = reannounce_locked(q, &changed, msg, sizeof(msg));
  uint32_t nf = C.nfinished;
  if (code) wt->over = 1;
  pthread_mutex_unlock(&C.mu);
  if (code) {
    LOG_WARN("watch from %s (rank %u) refused: %s", stk__rpc_call_peer(call), q->rank,
             msg);
    stk__rpc_call_finish(call, (grpc_status_code)code, msg);
    return;
  }
  if (changed) {
    /* On disk before the watch answers. journal_sync writes and fsyncs a
     * small file inline, on this serving thread (the one blocking step a
     * callback takes). The watch is not started yet, so the main loop's
     * pump leaves it alone meanwhile; and its callbacks come one at a
     * time, so watch_closed waits for this one. */
    journal_sync();
    LOG_INFO(
        "rank %u re-announced itself on its watch (client %s from %s)%s%s (%u/%u "
        "finished)",
        q->rank, q->client_id ? q->client_id : "", stk__rpc_call_peer(call),
        q->finished ? ": finished" : "", q->end_job ? ", ends the job" : "", nf,
        C.spec.world_size);
  }
  LOG_DEBUG("watch from %s (rank %u) opened, lease %lld s", stk__rpc_call_peer(call),
            q->rank, opt.watch_lease_s);
  pthread_mutex_lock(&C.mu);
  if (q->rank < C.spec.world_size && q->client_id && *q->client_id) {
    struct crank *k = &C.ranks[q->rank];
    char old[MAX_STR];
    /* A restarted coordinator learns the holder from its watch. */
    if (!k->holder || !holder_live_locked(q->rank, stk__now_ms()))
      holder_take_locked(q->rank, q->client_id, stk__rpc_call_peer(call), stk__now_ms(),
                         old, sizeof(old));
    if (!strcmp(k->holder ? k->holder : "", q->client_id)) {
      wt->rank = q->rank, wt->holds = 1, wt->gen = k->holder_gen;
      k->holder_watches++;
      k->holder_seen_ms = stk__now_ms();
    }
  }
  wt->started = 1;
  wt->known = q->known_version;
  wt->lease_end = stk__now_ms() + opt.watch_lease_s * 1000;
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
  if (wt->holds && C.ranks[wt->rank].holder_gen == wt->gen) {
    struct crank *k = &C.ranks[wt->rank];
    if (k->holder_watches > 0) k->holder_watches--;
    k->holder_seen_ms = stk__now_ms();
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
  if (q->job_hash && C.resolved && q->job_hash != C.hash) {
    snprintf(msg, sizeof(msg),
             "finish for job %016" PRIx64 ", this coordinator runs job %016" PRIx64,
             q->job_hash, C.hash);
    pthread_mutex_unlock(&C.mu);
    LOG_WARN("finish from %s refused: %s", stk__rpc_call_peer(call), msg);
    stk__rpc_call_finish(call, GRPC_STATUS_FAILED_PRECONDITION, msg);
    return;
  }
  if (q->abort_job) {
    abort_job_locked(q->rank, q->reason, stk__rpc_call_peer(call));
    uint32_t nf = C.nfinished;
    pthread_mutex_unlock(&C.mu);
    journal_sync(); /* the end is on disk before anyone hears of it */
    Stoker__V1__FinishResponse resp = STOKER__V1__FINISH_RESPONSE__INIT;
    resp.ranks_finished = nf;
    resp.world_size = W;
    stk__rpc_call_reply(call, &resp.base);
    return;
  }
  /* A client's Finish (it carries the job hash) for a rank that never
   * joined here: it joined an earlier coordinator. */
  if (!C.joined[q->rank] && q->job_hash) C.seen_earlier = 1;
  if (!C.finished[q->rank]) C.finished[q->rank] = 1, C.nfinished++;
  uint32_t nf = C.nfinished;
  if (q->shutdown_job) request_shutdown_locked(EXIT_OK, "rank 0 ended the job");
  else if (nf == W) request_shutdown_locked(EXIT_OK, "every rank finished");
  pthread_mutex_unlock(&C.mu);
  /* An answered Finish survives a restart: on disk first (a file write +
   * fsync, inline on this serving thread). */
  journal_sync();
  LOG_INFO("rank %u finished%s (%u/%u)", q->rank,
           q->shutdown_job ? " and ends the job" : "", nf, W);
  Stoker__V1__FinishResponse resp = STOKER__V1__FINISH_RESPONSE__INIT;
  resp.ranks_finished = nf;
  resp.world_size = W;
  stk__rpc_call_reply(call, &resp.base);
}

/* Coordinator.ReportStats: a rank's own figures (stall, rate), kept for
 * Status and /metrics. A report counts as the client touching the job. */
static void handle_report_stats(stk__rpc_call *call, const ProtobufCMessage *req) {
  const Stoker__V1__ClientStats *q = (const Stoker__V1__ClientStats *)req;
  pthread_mutex_lock(&C.mu);
  uint32_t W = C.spec.world_size;
  if (q->rank >= W) {
    pthread_mutex_unlock(&C.mu);
    char msg[120];
    snprintf(msg, sizeof(msg), "rank %u is outside the job's world_size %u", q->rank, W);
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, msg);
    return;
  }
  touch_locked();
  struct crank *r = &C.ranks[q->rank];
  r->at_ms = stk__now_ms();
  /* untrusted figures: a fraction in 0..1, a rate >= 0 (NaN counts as 0) */
  r->stall_fraction =
      q->stall_fraction > 0 ? (q->stall_fraction < 1 ? q->stall_fraction : 1) : 0;
  r->batches_per_s =
      q->batches_per_s > 0 && q->batches_per_s < 1e12 ? q->batches_per_s : 0;
  r->batches = q->batches;
  r->workers_alive = q->workers_alive;
  pthread_mutex_unlock(&C.mu);
  Stoker__V1__ReportStatsResponse resp = STOKER__V1__REPORT_STATS_RESPONSE__INIT;
  stk__rpc_call_reply(call, &resp.base);
}

/* What Status adds beyond the worker table: per worker the bad samples
 * and buffers, per rank its reported figures. Freed by
 * status_extras_free after the reply. */
typedef struct status_extras {
  Stoker__V1__WorkerStats **copies;
  size_t ncopies;
  Stoker__V1__RankStatus *rs, **rsp;
  Stoker__V1__ClientStats *cs;
} status_extras;

/* Fill the extras into resp and wt (the response's worker stats, in
 * C.workers order). 1, or 0 when out of memory. Under C.mu. */
static int status_extras_locked(Stoker__V1__StatusResponse *resp,
                                Stoker__V1__WorkerStats *wt, int64_t now,
                                status_extras *ex) {
  memset(ex, 0, sizeof(*ex));
  size_t nw = resp->n_workers, i = 0;
  if (!(ex->copies = calloc(nw ? nw : 1, sizeof(*ex->copies)))) return 0;
  for (cworker *w = C.workers; w && i < nw; w = w->next, i++) {
    const Stoker__V1__WorkerStats *s = w->hb;
    if (!s) continue;
    Stoker__V1__WorkerStats *cp = stats_copy(s);
    if (!cp) return 0;
    ex->copies[ex->ncopies++] = cp;
    wt[i].free_buffers = cp->free_buffers;
    wt[i].nbuffers = cp->nbuffers;
    wt[i].n_bad_samples = cp->n_bad_samples;
    wt[i].bad_samples = cp->bad_samples;
    wt[i].n_bad_recent = cp->n_bad_recent;
    wt[i].bad_recent = cp->bad_recent;
  }
  uint32_t W = C.spec.world_size, n = 0;
  for (uint32_t r = 0; r < W; r++) n += C.ranks[r].at_ms != 0;
  ex->rs = calloc(n ? n : 1, sizeof(*ex->rs));
  ex->rsp = calloc(n ? n : 1, sizeof(*ex->rsp));
  ex->cs = calloc(n ? n : 1, sizeof(*ex->cs));
  if (!ex->rs || !ex->rsp || !ex->cs) return 0;
  for (uint32_t r = 0, k = 0; r < W; r++) {
    const struct crank *c = &C.ranks[r];
    if (!c->at_ms) continue;
    stoker__v1__rank_status__init(&ex->rs[k]);
    stoker__v1__client_stats__init(&ex->cs[k]);
    ex->cs[k].rank = r;
    ex->cs[k].stall_fraction = c->stall_fraction;
    ex->cs[k].batches_per_s = c->batches_per_s;
    ex->cs[k].batches = c->batches;
    ex->cs[k].workers_alive = c->workers_alive;
    ex->rs[k].rank = r;
    ex->rs[k].stats = &ex->cs[k];
    ex->rs[k].last_report_ms_ago = (uint64_t)(now - c->at_ms);
    ex->rsp[k] = &ex->rs[k];
    k++;
  }
  resp->n_ranks = n;
  resp->ranks = ex->rsp;
  return 1;
}

static void status_extras_free(status_extras *ex) {
  for (size_t i = 0; i < ex->ncopies; i++)
    protobuf_c_message_free_unpacked(&ex->copies[i]->base, NULL);
  free(ex->copies), free(ex->rs), free(ex->rsp), free(ex->cs);
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
  status_extras ex = {0};
  if (ok && !status_extras_locked(&resp, wt, now, &ex)) ok = 0;
  char fail_text[MAX_FAILURES][900], *fail_p[MAX_FAILURES];
  uint32_t nf = C.nfails < MAX_FAILURES ? C.nfails : MAX_FAILURES;
  for (uint32_t k = 0; k < nf; k++) { /* oldest first */
    const struct wfail *e = &C.fails[(C.nfails - nf + k) % MAX_FAILURES];
    snprintf(fail_text[k], sizeof(fail_text[k]), "%s, %.0f s ago", e->text,
             (double)(now - e->at_ms) / 1000.0);
    fail_p[k] = fail_text[k];
  }
  resp.n_worker_failures = nf;
  resp.worker_failures = fail_p;
  pthread_mutex_unlock(&C.mu);
  if (ok) stk__rpc_call_reply(call, &resp.base);
  else stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t k = 0; k < i; k++) free(wi[k].worker_id), free(wi[k].address);
  free(ws), free(wsp), free(wi), free(wt), free(jr), free(fr);
  free(job.canonical);
  status_extras_free(&ex);
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
  C.config_hash = C.hash;
  C.joined = calloc(C.spec.world_size, 1);
  C.finished = calloc(C.spec.world_size, 1);
  C.ranks = calloc(C.spec.world_size, sizeof(*C.ranks));
  if (!C.joined || !C.finished || !C.ranks)
    return stk__errf(err, errlen, -1, "out of memory");
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
    /* Sent is not received (the message may still sit in gRPC or the
     * socket when the coordinator dies): the worker stays in the journal
     * until its session ends, which it does once it has drained. */
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
      bps, mbps,
      watch_holds_locked(now) ? 0LL : (long long)((now - C.last_touch_ms) / 1000));
  char st[200];
  snprintf(st, sizeof(st), "%s: %zu workers, %.1f batches/s, ranks %u joined %u finished",
           state_names[state_locked()], nworkers_locked(), bps, C.njoined, C.nfinished);
  pthread_mutex_unlock(&C.mu);
  stk__notify_status(st);
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
      if (!C.shutdown_req) C.by_signal = 1;
      request_shutdown_locked(EXIT_OK, why);
    }
    if (!watch_holds_locked(now) && now - C.last_touch_ms > opt.idle_timeout_s * 1000)
      request_shutdown_locked(EXIT_IDLE, "idle timeout: no client touched the job");
    int req = C.shutdown_req;
    pthread_mutex_unlock(&C.mu);
    if (req) {
      journal_sync(); /* the end (a signal, the idle timeout) before telling workers */
      return req - 1;
    }
    stk__notify_tick(now);
    check_heartbeats();
    watch_pump_all();
    expect_expire();
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
  stk__health_set(0);
  pthread_cond_broadcast(&C.cv);
  char st[sizeof(C.shutdown_reason) + 40];
  snprintf(st, sizeof(st), "shutting down: %s", C.shutdown_reason);
  pthread_mutex_unlock(&C.mu);
  stk__notify_stopping(st);
  int64_t now = stk__now_ms(), until = now + opt.shutdown_grace_s * 1000;
  pthread_mutex_lock(&C.mu);
  int64_t linger_until = C.seen_earlier && !C.by_signal ? now + opt.linger_s * 1000 : 0;
  pthread_mutex_unlock(&C.mu);
  if (linger_until > until) until = linger_until;
  if (linger_until > now)
    LOG_INFO(
        "the job began before this coordinator started: staying up %lld s "
        "(--linger-s) to tell workers that come back to shut down",
        opt.linger_s);
  for (;;) {
    stk__notify_tick(stk__now_ms());
    send_shutdowns();
    watch_pump_all();
    expect_expire();
    pthread_mutex_lock(&C.mu);
    /* Workers registered before a restart and not back yet (state journal)
     * still need their Shutdown: wait for them too (--rejoin-wait-s, and
     * within the grace). */
    size_t left = nworkers_locked() + C.nexpect;
    pthread_mutex_unlock(&C.mu);
    if (!left && stk__now_ms() >= linger_until) break;
    if (stk__signal_count() >= 2) {
      LOG_WARN("second signal: not waiting for %zu workers", left);
      break;
    }
    if (stk__now_ms() >= until) {
      pthread_mutex_lock(&C.mu);
      size_t nexp = C.nexpect;
      pthread_mutex_unlock(&C.mu);
      LOG_WARN(
          "%zu workers still connected after %lld s (%zu known before a restart "
          "never came back); exiting anyway",
          left - nexp, opt.shutdown_grace_s, nexp);
      break;
    }
    stk__sleep_ms(20);
  }
  pthread_mutex_lock(&C.mu);
  C.done = 1;
  pthread_mutex_unlock(&C.mu);
}

/* The job-wide verdict from the workers' and ranks' last figures (ranks
 * that reported in the last 30 s). Under C.mu. */
static void verdict_locked(int64_t now, stk__verdict *v, double *max_stall,
                           uint32_t *nr) {
  double busy = 0, stall = 0;
  uint32_t nw = 0, n = 0;
  for (cworker *w = C.workers; w; w = w->next) busy += w->stats.busy_fraction, nw++;
  for (uint32_t r = 0; r < C.spec.world_size; r++) {
    const struct crank *c = &C.ranks[r];
    if (!c->at_ms || now - c->at_ms > 30000) continue;
    n++;
    if (c->stall_fraction > stall) stall = c->stall_fraction;
  }
  stk__job_verdict(nw, busy, n, stall, v);
  *max_stall = stall, *nr = n;
}

/* GET /metrics (metrics.c's HTTP thread): the job, the workers as their
 * heartbeats report them, the ranks as they report themselves. */
static void coord_metrics(metrics_buf *b, void *ud) {
  char lab[1500];
  pthread_mutex_lock(&C.mu);
  int64_t now = stk__now_ms();
  metrics_family(b, "stoker_coordinator_up", "gauge", "1 while the coordinator serves");
  metrics_sample(b, "stoker_coordinator_up", NULL, 1);
  metrics_family(b, "stoker_coordinator_uptime_seconds", "gauge", "seconds since start");
  metrics_sample(b, "stoker_coordinator_uptime_seconds", NULL,
                 (double)(now - C.start_ms) / 1e3);
  metrics_family(b, "stoker_coordinator_job_state", "gauge",
                 "1 for the job's current state, 0 for the others");
  int st = state_locked();
  for (int i = 0; i <= ST_FAILED; i++)
    metrics_sample(b, "stoker_coordinator_job_state",
                   metrics_label(lab, sizeof(lab), "state", state_names[i]), i == st);
  metrics_family(b, "stoker_coordinator_live_workers", "gauge",
                 "workers on the live list");
  metrics_sample(b, "stoker_coordinator_live_workers", NULL, (double)nworkers_locked());
  metrics_family(b, "stoker_coordinator_world_size", "gauge", "ranks of the job");
  metrics_sample(b, "stoker_coordinator_world_size", NULL, C.spec.world_size);
  metrics_family(b, "stoker_coordinator_ranks_joined", "gauge", "ranks that joined");
  metrics_sample(b, "stoker_coordinator_ranks_joined", NULL, C.njoined);
  metrics_family(b, "stoker_coordinator_ranks_finished", "gauge", "ranks that finished");
  metrics_sample(b, "stoker_coordinator_ranks_finished", NULL, C.nfinished);
  metrics_family(b, "stoker_coordinator_watchers", "gauge", "open WatchWorkers streams");
  metrics_sample(b, "stoker_coordinator_watchers", NULL, C.watchers);
  metrics_family(b, "stoker_coordinator_dataset_samples", "gauge",
                 "samples in the dataset (0 until a worker told)");
  metrics_sample(b, "stoker_coordinator_dataset_samples", NULL,
                 C.resolved ? (double)C.spec.num_samples : 0);
  static const struct {
    const char *name, *help;
  } wf[] = {{"stoker_coordinator_worker_batches_per_second",
             "a worker's build rate (heartbeat)"},
            {"stoker_coordinator_worker_busy_fraction",
             "a worker's builder threads' busy share (heartbeat)"}};
  for (int k = 0; k < 2; k++) {
    metrics_family(b, wf[k].name, "gauge", wf[k].help);
    for (cworker *w = C.workers; w; w = w->next) {
      /* the id is unique among live workers; the address may repeat */
      char id[700], addr[700];
      snprintf(lab, sizeof(lab), "%s,%s", metrics_label(id, sizeof(id), "worker", w->id),
               metrics_label(addr, sizeof(addr), "address", w->address));
      metrics_sample(b, wf[k].name, lab,
                     k ? w->stats.busy_fraction : w->stats.batches_per_s);
    }
  }
  static const struct {
    const char *name, *type, *help;
  } rf[] = {{"stoker_rank_stall_fraction", "gauge",
             "share of a rank's loop time spent waiting for input (client report)"},
            {"stoker_rank_batches_per_second", "gauge",
             "batches a rank's loop takes per second (client report)"},
            {"stoker_rank_batches_total", "counter", "batches handed to a rank's loop"}};
  for (int k = 0; k < 3; k++) {
    metrics_family(b, rf[k].name, rf[k].type, rf[k].help);
    for (uint32_t r = 0; r < C.spec.world_size; r++) {
      const struct crank *c = &C.ranks[r];
      if (!c->at_ms) continue;
      char rank[16];
      snprintf(rank, sizeof(rank), "%u", r);
      metrics_sample(b, rf[k].name, metrics_label(lab, sizeof(lab), "rank", rank),
                     k == 0   ? c->stall_fraction
                     : k == 1 ? c->batches_per_s
                              : (double)c->batches);
    }
  }
  stk__verdict v;
  double stall;
  uint32_t nr;
  verdict_locked(now, &v, &stall, &nr);
  pthread_mutex_unlock(&C.mu);
  metrics_family(b, "stoker_job_workers_needed", "gauge",
                 "input-bound: data workers that would remove the stall (0 otherwise)");
  metrics_sample(b, "stoker_job_workers_needed", NULL,
                 v.kind == STK_VERDICT_INPUT_BOUND ? v.workers_needed : 0);
  metrics_family(b, "stoker_job_workers_spare", "gauge",
                 "compute-bound: data workers that could go (0 otherwise)");
  metrics_sample(b, "stoker_job_workers_spare", NULL, v.workers_spare);
  (void)ud;
}

/* Serve the Coordinator service on opt.listen and write the port file.
 * 0, or -1 with err. */
static int start_server(stk__rpc_server **srv, char *err, size_t errlen) {
  /* {path, request type, receive limit (wire_limits.h), unary, stream,
   * no_token, roles}. The unary handlers only take C.mu briefly: they run
   * inline on the rpc layer's threads. Roles (with role tokens): workers
   * open sessions, clients join/watch/finish/report, anyone reads Status,
   * admin does everything. */
  static const stk__rpc_method methods[] = {
      {"/stoker.v1.Coordinator/WorkerSession", &stoker__v1__worker_message__descriptor,
       STK_MAX_CONTROL_MSG, NULL, &session_ops, 0, STK__ROLE_WORKER},
      {"/stoker.v1.Coordinator/Join", &stoker__v1__join_request__descriptor,
       STK_MAX_CONTROL_MSG, handle_join, NULL, 0, STK__ROLE_CLIENT},
      {"/stoker.v1.Coordinator/WatchWorkers", &stoker__v1__watch_request__descriptor,
       STK_MAX_CONTROL_MSG, NULL, &watch_ops, 0, STK__ROLE_CLIENT},
      {"/stoker.v1.Coordinator/Finish", &stoker__v1__finish_request__descriptor,
       STK_MAX_CONTROL_MSG, handle_finish, NULL, 0, STK__ROLE_CLIENT},
      {"/stoker.v1.Coordinator/Status", &stoker__v1__status_request__descriptor,
       /* the job spec, every worker's address, bad-file paths: not for the
        * worker role (a worker needs nothing of it) */
       STK_MAX_CONTROL_MSG, handle_status, NULL, 0, STK__ROLE_CLIENT},
      {"/stoker.v1.Coordinator/ReportStats", &stoker__v1__client_stats__descriptor,
       STK_MAX_CONTROL_MSG, handle_report_stats, NULL, 0, STK__ROLE_CLIENT},
      STK__HEALTH_METHODS,
  };
  int port = 0;
  stk__health_init("stoker.v1.Coordinator");
  if (stk__daemon_serve(opt.listen, methods, sizeof(methods) / sizeof(methods[0]),
                        opt.max_message_mb, token, &roles, C.tls, &opt.serve,
                        opt.port_file, srv, &port, err, errlen))
    return -1;
  LOG_INFO("job %s (hash %016" PRIx64
           ", world_size %u, batch_size %u, %s samples) "
           "listening on %s port %d (%s)",
           C.spec.name, C.hash, C.spec.world_size, C.spec.batch_size,
           C.resolved ? "known" : "unknown until a worker registers", opt.listen, port,
           stk__tls_describe(C.tls));
  stk__health_set(1); /* accepting joins (grpc.health.v1) until the shutdown */
  return 0;
}

int main(int argc, char **argv) {
  int pr = stk__daemon_init(
      PROGRAM, options, NOPTIONS, argc, argv,
      "Runs one stoker job: worker sessions, client joins, finish, status.",
      exit_codes_text);
  int code = pr == OPTS_EXIT_OK ? EXIT_OK : EXIT_USAGE;
  char err[600];
  if (pr != OPTS_RUN) goto out;
  if (load_job(err, sizeof(err)) ||
      stk__daemon_tls(&opt.tls, "", &C.tls, err, sizeof(err))) {
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
  if (stk__daemon_token(opt.token, opt.token_file, argc, argv, token, sizeof(token)) ||
      stk__daemon_role_tokens(opt.worker_token_file, opt.client_token_file,
                              opt.admin_token_file, &roles)) {
    code = EXIT_USAGE;
    goto out;
  }
  if (roles.n && *token)
    LOG_WARN(
        "role tokens are set and so is the shared token (--token-file, $STOKER_TOKEN): "
        "the shared one still grants every role");
  stk__daemon_start();
  C.start_ms = C.last_touch_ms = stk__now_ms();
  /* List versions are never 0 (a watcher that knows nothing gets the list
   * at once) and start from the wall clock, so a restarted coordinator
   * does not reuse a version its clients saw with another list. */
  C.version = ((uint64_t)time(NULL) << 20) | 1;
  if (*opt.state_dir && (code = journal_open(err, sizeof(err))) != EXIT_OK) {
    LOG_ERROR("%s", err);
    goto out;
  }
  stk__rpc_server *srv = NULL;
  if (start_server(&srv, err, sizeof(err))) {
    LOG_ERROR("%s", err);
    code = EXIT_FAIL;
    goto out;
  }
  metrics_server *ms = NULL;
  if (stk__daemon_metrics(opt.metrics_listen, coord_metrics, NULL, &ms)) {
    stk__rpc_server_stop(srv, 0);
    code = EXIT_FAIL;
    goto out;
  }
  stk__notify_ready("accepting workers and ranks");
  code = run_job();
  shut_down_workers();
  stk__rpc_server_stop(srv, 1000);
  metrics_stop(ms);
  LOG_INFO("exiting (code %d)", code);
out:
  stk__options_free(options, NOPTIONS);
  for (uint32_t r = 0; C.ranks && r < C.spec.world_size; r++) free(C.ranks[r].holder);
  free(C.canonical), free(C.joined), free(C.finished), free(C.ranks);
  stk__tls_free(C.tls);
  for (size_t i = 0; i < C.nexpect; i++) free(C.expect[i]);
  free(C.expect);
  stk__state_dir_close(J.dir);
  return code;
}
