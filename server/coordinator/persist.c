/* persist.c - the coordinator's use of --state-dir: a snapshot of what a
 * restart must not forget (the job's hash, the dataset size and
 * fingerprint, joined and finished ranks, the registered workers, the
 * job's end) written to the state journal (server/journal.c: format and
 * file)
 * before the call that changed it is answered; at start, resuming C from
 * it; and the workers of the journal expected back (C.expect).
 *
 * Owns J (below) and C.expect. The one blocking step a serving thread
 * takes (journal_sync: a small file write + fsync) is here, made without
 * C.mu. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "coordinator.h"
#include "journal.h"
#include "log.h"

/* The state journal (--state-dir). Writes are serialised by J.mu, taken
 * without C.mu; seq numbers the snapshots so an older one is never written
 * after a newer one. */
static struct {
  pthread_mutex_t mu;
  stk__state_dir *dir; /* NULL: no journal. Set by journal_open before the
                          server starts, read-only after: no lock */
  uint64_t seq;        /* under C.mu: last snapshot taken */
  uint64_t written;    /* under J.mu: last snapshot on disk */
  int failing;         /* under J.mu: the last write failed (logged once) */
} J = {.mu = PTHREAD_MUTEX_INITIALIZER};

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
void journal_sync(void) {
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
void expect_remove_locked(const char *id) {
  for (size_t i = 0; i < C.nexpect; i++)
    if (!strcmp(C.expect[i], id)) {
      free(C.expect[i]);
      C.expect[i] = C.expect[--C.nexpect];
      return;
    }
}

/* Journal id as a worker to expect back, unless it is already: 1 when
 * added, 0 when it was there or on allocation failure. Under C.mu. */
int expect_add_locked(const char *id) {
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
void expect_expire(void) {
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
int journal_open(char *err, size_t errlen) {
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

int journal_enabled(void) { return J.dir != NULL; }

void journal_close(void) { stk__state_dir_close(J.dir); }
