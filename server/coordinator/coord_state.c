/* coord_state.c - the coordinator's state C (coordinator.h says which lock
 * guards each field) and the small helpers every other file uses on it:
 * touch the idle clock, request the end of the job, the job's state, the
 * job's canonical text and hash, the live worker list; and loading the
 * job at start. Owns C's storage and the job spec; takes no lock itself
 * (its *_locked helpers are called under C.mu). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "coordinator.h"

coord_state C = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

void state_touch_locked(void) { C.last_touch_ms = stk__now_ms(); }

void state_request_shutdown_locked(int code, const char *why) {
  if (C.shutdown_req) return;
  C.shutdown_req = code + 1;
  snprintf(C.shutdown_reason, sizeof(C.shutdown_reason), "%s", why);
}

int state_locked(void) {
  if (C.failed) return ST_FAILED;
  if (C.done) return ST_DONE;
  if (C.shutting_down) return ST_DRAINING;
  if (!C.resolved || !C.workers) return ST_WAITING;
  return ST_RUNNING;
}

/* Recompute the canonical text and hash after a change of the spec. */
int state_job_publish_locked(void) {
  size_t n = stk_job_spec_format(&C.spec, NULL, 0);
  char *t = malloc(n + 1);
  if (!t) return -1;
  stk_job_spec_format(&C.spec, t, n + 1);
  free(C.canonical);
  C.canonical = t;
  C.hash = stk_job_spec_hash(&C.spec);
  return 0;
}

int state_unlink_locked(cworker *w) {
  for (cworker **pp = &C.workers; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      w->live = 0;
      C.workers_seen_ms = stk__now_ms();
      publish_change_locked(w, 1);
      pthread_cond_broadcast(&C.cv);
      return 1;
    }
  return 0;
}

size_t state_nworkers_locked(void) {
  size_t n = 0;
  for (cworker *w = C.workers; w; w = w->next) n++;
  return n;
}

int state_load_job(char *err, size_t errlen) {
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
  if (state_job_publish_locked()) return stk__errf(err, errlen, -1, "out of memory");
  C.config_hash = C.hash;
  C.joined = calloc(C.spec.world_size, 1);
  C.finished = calloc(C.spec.world_size, 1);
  C.ranks = calloc(C.spec.world_size, sizeof(*C.ranks));
  if (!C.joined || !C.finished || !C.ranks)
    return stk__errf(err, errlen, -1, "out of memory");
  return 0;
}
