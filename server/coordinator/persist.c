/* persist.c - the coordinator's use of --state-dir: a snapshot of what a
 * restart must not forget (the job's hash, the dataset size and
 * fingerprint, joined and finished ranks, the registered workers, the
 * job's end) written to the state journal (server/journal.c: format and
 * file)
 * before the call that changed it is answered; at start, resuming C from
 * it; and the workers of the journal expected back (C.expect).
 *
 * Owns J (below) and C.expect. Writes are group commits on a thread of
 * their own (the writer): a caller queues (persist_after: a callback, so
 * a serving thread never waits on the disk, and its place in the queue is
 * embedded in its own object, so queueing never allocates; persist_sync,
 * the main loop's: blocks until written), and one snapshot, taken once the writer picks
 * the queue up, answers every caller queued before it. The snapshot is a copy taken under
 * C.mu (the rank flags and worker ids, memcpy); formatting, the write and the fsync are
 * made without any lock of C. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/thread.h"
#include "coordinator.h"
#include "journal.h"
#include "daemon_log.h"

/* The state journal (--state-dir). One thread (the writer) takes every
 * snapshot and writes it: group commit, so a thousand Finish calls
 * arriving together cost a few writes + fsyncs, not a thousand, and no
 * serving thread waits on the disk. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;   /* a waiter queued, or stop */
  pthread_cond_t done; /* a write finished (persist_sync's waits) */
  stk__state_dir *dir; /* NULL: no journal. Set by persist_open before the
                          server starts, read-only after: no lock */
  pthread_t writer;
  int running; /* the writer thread was started (main's thread only) */
  /* under mu: */
  journal_waiter *head, **tail; /* queued, oldest first */
  int stop;
  uint64_t writes;  /* snapshots written (for the sync waits) */
  int failing;      /* the last write failed (logged once) */
  uint64_t waiters; /* callers served, for the figures */
  uint64_t by[3];   /* snapshots written by thread kind, and waits on a
                       serving thread in by[1] (persist_figures) */
} J = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .cv = PTHREAD_COND_INITIALIZER,
       .done = PTHREAD_COND_INITIALIZER};

/* What a snapshot holds, copied under C.mu (memcpy of the rank flags and
 * the worker ids) so the text is formatted outside it. */
typedef struct jsnap {
  stk__journal j;
  char *ids; /* the worker ids, MAX_STR apart */
} jsnap;

static void snap_free(jsnap *s) {
  free(s->j.joined), free(s->j.finished), free(s->j.job_name), free(s->j.reason);
  free(s->j.worker_ids), free(s->ids);
  memset(s, 0, sizeof(*s));
}

/* Copy the state into s. 0, or -1 when out of memory (s freed). Under C.mu. */
static int snap_take_locked(jsnap *s) {
  memset(s, 0, sizeof(*s));
  stk__journal *j = &s->j;
  uint32_t W = C.spec.world_size;
  j->job_hash = C.config_hash;
  j->world_size = W;
  j->num_samples = C.resolved ? C.spec.num_samples : 0;
  j->have_fp = C.have_fp;
  j->fingerprint = C.fingerprint;
  j->ended = C.shutdown_req != 0;
  j->exit_code = C.shutdown_req ? C.shutdown_req - 1 : 0;
  j->failed = C.failed;
  size_t n = state_nworkers_locked() + C.nexpect;
  j->job_name = strdup(C.spec.name);
  j->reason = strdup(C.shutdown_reason);
  j->joined = malloc(W ? W : 1);
  j->finished = malloc(W ? W : 1);
  j->worker_ids = calloc(n ? n : 1, sizeof(char *));
  s->ids = malloc((n ? n : 1) * MAX_STR);
  if (!j->job_name || !j->reason || !j->joined || !j->finished || !j->worker_ids ||
      !s->ids) {
    snap_free(s);
    return -1;
  }
  memcpy(j->joined, C.joined, W);
  memcpy(j->finished, C.finished, W);
  for (cworker *w = C.workers; w; w = w->next)
    if (!w->leaving) memcpy(s->ids + MAX_STR * j->nworkers++, w->id, MAX_STR);
  for (size_t i = 0; i < C.nexpect; i++)
    snprintf(s->ids + MAX_STR * j->nworkers++, MAX_STR, "%s", C.expect[i]);
  for (size_t i = 0; i < j->nworkers; i++) j->worker_ids[i] = s->ids + MAX_STR * i;
  return 0;
}

static __thread int on_writer; /* 1 on the writer thread (writer_main) */

/* Take a snapshot now and write it. Logs a failure (once until a write
 * succeeds again). Call without C.mu and J.mu. */
static void write_snapshot(void) {
  /* Which kind of thread writes: the test suite reads these (/metrics) to
   * check that no serving thread ever waits on the disk. */
  int kind = on_writer ? 0 : stk__rpc_server_on_thread() ? 1 : 2;
  if (kind == 1) LOG_ERROR("state journal: written on a serving thread (a bug)");
  jsnap s;
  char *text = NULL;
  size_t len = 0;
  char err[600] = "out of memory";
  pthread_mutex_lock(&C.mu);
  int rc = snap_take_locked(&s);
  pthread_mutex_unlock(&C.mu);
  if (!rc) {
    rc = stk__journal_format(&s.j, &text, &len);
    snap_free(&s);
  }
  if (!rc) rc = stk__state_dir_write(J.dir, text, len, err, sizeof(err));
  free(text);
  pthread_mutex_lock(&J.mu);
  J.by[kind]++;
  int was = J.failing;
  J.failing = rc != 0;
  pthread_mutex_unlock(&J.mu);
  if (rc && !was)
    LOG_ERROR(
        "state journal: %s; the job goes on, but a restart may forget what "
        "changed since the last write",
        err);
  else if (!rc && was) LOG_INFO("state journal written again");
}

/* The writer: takes every queued waiter, writes one snapshot (taken
 * after they all queued: it holds their changes), then answers them. */
static void *writer_main(void *arg) {
  (void)arg;
  stk__thread_name("stk-journal");
  on_writer = 1;
  pthread_mutex_lock(&J.mu);
  for (;;) {
    while (!J.head && !J.stop) pthread_cond_wait(&J.cv, &J.mu);
    if (!J.head) break; /* stop, and nobody waits */
    journal_waiter *batch = J.head;
    J.head = NULL, J.tail = &J.head;
    pthread_mutex_unlock(&J.mu);
    write_snapshot();
    uint64_t n = 0;
    for (journal_waiter *w = batch, *next; w; w = next, n++) {
      next = w->next; /* fn may free w's object */
      w->fn(w->arg);
    }
    pthread_mutex_lock(&J.mu);
    J.writes++;
    J.waiters += n;
    pthread_cond_broadcast(&J.done);
  }
  pthread_mutex_unlock(&J.mu);
  return NULL;
}

void persist_after(journal_waiter *jw, persist_done_fn fn, void *arg) {
  if (!J.dir) {
    fn(arg);
    return;
  }
  jw->fn = fn, jw->arg = arg, jw->next = NULL;
  pthread_mutex_lock(&J.mu);
  if (!J.running) { /* the writer has stopped: only main is left to call */
    pthread_mutex_unlock(&J.mu);
    write_snapshot();
    fn(arg);
    return;
  }
  *J.tail = jw;
  J.tail = &jw->next;
  pthread_cond_signal(&J.cv);
  pthread_mutex_unlock(&J.mu);
}

/* persist_sync's waiter: flags its done word (under J.mu: the writer
 * broadcasts J.done after the batch). */
static void sync_done(void *arg) {
  pthread_mutex_lock(&J.mu);
  *(int *)arg = 1;
  pthread_mutex_unlock(&J.mu);
}

/* Put the state as of now in the journal (nothing without --state-dir):
 * returns once a snapshot holding every change made before the call is on
 * disk, so a call answered after it survives a kill -9. Joins the
 * writer's next group commit. A failed write is logged (once until one
 * succeeds again) and the job goes on from memory: a disk problem must
 * not end a running job. Main loop only; call without C.mu. */
void persist_sync(void) {
  if (!J.dir) return;
  if (stk__rpc_server_on_thread()) { /* counted like a write there */
    LOG_ERROR("state journal: waited for on a serving thread (a bug)");
    pthread_mutex_lock(&J.mu);
    J.by[1]++;
    pthread_mutex_unlock(&J.mu);
  }
  int done = 0;
  journal_waiter jw = {sync_done, &done, NULL};
  pthread_mutex_lock(&J.mu);
  if (!J.running) {
    pthread_mutex_unlock(&J.mu);
    write_snapshot();
    return;
  }
  *J.tail = &jw;
  J.tail = &jw.next;
  pthread_cond_signal(&J.cv);
  while (!done) pthread_cond_wait(&J.done, &J.mu);
  pthread_mutex_unlock(&J.mu);
}

void persist_figures(uint64_t *writes, uint64_t *waiters, uint64_t by[3]) {
  pthread_mutex_lock(&J.mu);
  *writes = J.writes, *waiters = J.waiters;
  memcpy(by, J.by, sizeof(J.by));
  pthread_mutex_unlock(&J.mu);
}

/* A worker id registered again: no longer expected back. Under C.mu. */
void persist_expect_remove_locked(const char *id) {
  for (size_t i = 0; i < C.nexpect; i++)
    if (!strcmp(C.expect[i], id)) {
      free(C.expect[i]);
      C.expect[i] = C.expect[--C.nexpect];
      return;
    }
}

/* Journal id as a worker to expect back, unless it is already: 1 when
 * added, 0 when it was there or on allocation failure. Under C.mu. */
int persist_expect_add_locked(const char *id) {
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
void persist_expect_expire(void) {
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
  persist_sync();
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
      if (state_job_publish_locked()) return stk__errf(err, errlen, -1, "out of memory");
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
    state_request_shutdown_locked(EXIT_OK, "every rank finished");
  }
  C.expect = j->worker_ids; /* taken over */
  C.nexpect = j->nworkers;
  j->worker_ids = NULL;
  j->nworkers = 0;
  return 0;
}

/* Open --state-dir and resume from its journal (or start one). EXIT_OK, or
 * an exit code with err. Before the server starts. */
int persist_open(char *err, size_t errlen) {
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
  jsnap sn;
  pthread_mutex_lock(&C.mu);
  r = snap_take_locked(&sn);
  pthread_mutex_unlock(&C.mu);
  if (r) return stk__errf(err, errlen, EXIT_FAIL, "out of memory");
  r = stk__journal_format(&sn.j, &text, &len);
  snap_free(&sn);
  if (r) return stk__errf(err, errlen, EXIT_FAIL, "out of memory");
  r = stk__state_dir_write(J.dir, text, len, msg, sizeof(msg));
  free(text);
  if (r) return stk__errf(err, errlen, EXIT_FAIL, "--state-dir: %s", msg);
  J.tail = &J.head;
  /* Without its writer no serving thread could answer without waiting on
   * the disk: refuse to start rather than write inline. */
  if (pthread_create(&J.writer, NULL, writer_main, NULL) != 0)
    return stk__errf(err, errlen, EXIT_FAIL,
                     "--state-dir: cannot start the state journal's writer thread");
  pthread_mutex_lock(&J.mu);
  J.running = 1;
  pthread_mutex_unlock(&J.mu);
  return EXIT_OK;
}

int persist_enabled(void) { return J.dir != NULL; }

void persist_close(void) {
  pthread_mutex_lock(&J.mu);
  int running = J.running;
  J.stop = 1;
  pthread_cond_signal(&J.cv);
  pthread_mutex_unlock(&J.mu);
  if (running) {
    pthread_join(J.writer, NULL);
    pthread_mutex_lock(&J.mu);
    J.running = 0;
    pthread_mutex_unlock(&J.mu);
  }
  stk__state_dir_close(J.dir);
  J.dir = NULL;
}
