/* resolve.c - the advertised-address checks of worker sessions that
 * advertise a host name (stk__host_is_peer: a DNS lookup, which may take
 * seconds) off the RPC threads; a numeric address needs no lookup and is
 * checked on the spot by coord_workers.c. A few resolver threads
 * (--resolve-threads: at most that many lookups at once) take checks from
 * a bounded queue (RESOLVE_QUEUE_PER_THREAD per thread: past it a check
 * is refused at once); a watch thread answers
 * a check that has not completed within --resolve-timeout-ms as timed out,
 * and the lookup's late result is dropped. Each check is answered exactly
 * once, by a callback that runs under the resolver's lock (lock order:
 * the resolver's lock, then C.mu, then the rpc layer's), unless its owner
 * released it first.
 *
 * Test hook: with STOKER_TEST_RESOLVE_GATE=PATH in the environment, a
 * resolver thread waits while PATH exists before it looks a name up, so a
 * test holds checks pending for as long as it needs (deterministically,
 * without a slow DNS server). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "coordinator.h"
#include "daemon_log.h"

struct resolve_job {
  char addr[MAX_STR], peer[320];
  resolve_done_fn done;
  void *arg;
  int64_t deadline_ms;
  int taken;    /* a resolver thread took it (it is looking the name up) */
  int answered; /* done was called (or the owner released it first) */
  int owned;    /* the owner has not released it */
  int looking;  /* a thread is in the lookup: it frees the job afterwards */
  struct resolve_job *next;
};

static struct {
  pthread_mutex_t mu;
  pthread_cond_t work;  /* a job was queued, or stopping */
  pthread_cond_t watch; /* a deadline to watch, or stopping (CLOCK_MONOTONIC) */
  pthread_cond_t gone;  /* a thread exited */
  resolve_job *jobs;    /* every job not yet freed, oldest first */
  size_t queued, max_queued;
  int threads, alive, stop, started;
  int64_t timeout_ms;
  const char *gate; /* STOKER_TEST_RESOLVE_GATE */
} R = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Unlink and free j if nobody needs it any more. Under R.mu. */
static void maybe_free_locked(resolve_job *j) {
  if (j->owned || j->looking || (!j->taken && !j->answered)) return;
  for (resolve_job **p = &R.jobs; *p; p = &(*p)->next)
    if (*p == j) {
      *p = j->next;
      break;
    }
  free(j);
}

/* Answer j once. Under R.mu. */
static void answer_locked(resolve_job *j, int match, const char *numeric,
                          const char *resolved) {
  if (j->answered) return;
  j->answered = 1;
  if (!j->taken) R.queued--, j->taken = 1; /* timed out in the queue: never looked up */
  if (j->owned) j->done(j->arg, match, numeric, resolved);
}

static void *resolver_main(void *unused) {
  (void)unused;
  pthread_mutex_lock(&R.mu);
  for (;;) {
    resolve_job *j = NULL;
    while (!R.stop) {
      for (j = R.jobs; j && j->taken; j = j->next) {}
      if (j) break;
      pthread_cond_wait(&R.work, &R.mu);
    }
    if (R.stop) break;
    j->taken = j->looking = 1;
    R.queued--;
    char addr[MAX_STR], peer[sizeof(j->peer)];
    memcpy(addr, j->addr, sizeof(addr));
    memcpy(peer, j->peer, sizeof(peer));
    pthread_mutex_unlock(&R.mu);
    if (R.gate && access(R.gate, F_OK) == 0) {
      char e[MAX_STR * 4 + 8];
      LOG_INFO("resolver: the lookup of %s is held by the test gate",
               stk__escape(e, sizeof(e), addr));
    }
    while (R.gate && access(R.gate, F_OK) == 0 &&
           !__atomic_load_n(&R.stop, __ATOMIC_RELAXED))
      stk__sleep_ms(20);
    char resolved[200], numeric[MAX_STR];
    int m = stk__host_is_peer(addr, peer, resolved, sizeof(resolved), numeric,
                              sizeof(numeric));
    pthread_mutex_lock(&R.mu);
    j->looking = 0;
    answer_locked(j, m, numeric, resolved);
    maybe_free_locked(j);
  }
  R.alive--;
  pthread_cond_broadcast(&R.gone);
  pthread_mutex_unlock(&R.mu);
  return NULL;
}

static void *watch_main(void *unused) {
  (void)unused;
  pthread_mutex_lock(&R.mu);
  while (!R.stop) {
    int64_t now = stk__now_ms(), next = -1;
    for (resolve_job *j = R.jobs, *n; j; j = n) {
      n = j->next;
      if (j->answered) continue;
      if (now >= j->deadline_ms) {
        char why[120];
        snprintf(why, sizeof(why), "no answer within --resolve-timeout-ms %lld",
                 (long long)R.timeout_ms);
        answer_locked(j, RESOLVE_TIMEOUT, "", why);
        maybe_free_locked(j);
      } else if (next < 0 || j->deadline_ms < next) {
        next = j->deadline_ms;
      }
    }
    if (next < 0) {
      pthread_cond_wait(&R.watch, &R.mu);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      int64_t ns = (int64_t)ts.tv_nsec + (next - now) * 1000000;
      ts.tv_sec += ns / 1000000000;
      ts.tv_nsec = ns % 1000000000;
      pthread_cond_timedwait(&R.watch, &R.mu, &ts);
    }
  }
  R.alive--;
  pthread_cond_broadcast(&R.gone);
  pthread_mutex_unlock(&R.mu);
  return NULL;
}

int resolve_start(int threads, long long timeout_ms) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&R.watch, &ca);
  pthread_condattr_destroy(&ca);
  pthread_cond_init(&R.work, NULL);
  pthread_cond_init(&R.gone, NULL);
  R.threads = threads;
  R.timeout_ms = timeout_ms;
  R.max_queued = (size_t)threads * RESOLVE_QUEUE_PER_THREAD;
  const char *g = getenv("STOKER_TEST_RESOLVE_GATE");
  R.gate = g && *g ? g : NULL;
  R.started = 1;
  for (int i = 0; i <= threads; i++) {
    pthread_attr_t at;
    pthread_t t;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&R.mu);
    R.alive++;
    pthread_mutex_unlock(&R.mu);
    int rc = pthread_create(&t, &at, i ? resolver_main : watch_main, NULL);
    pthread_attr_destroy(&at);
    if (rc) {
      pthread_mutex_lock(&R.mu);
      R.alive--;
      pthread_mutex_unlock(&R.mu);
      resolve_stop();
      return -1;
    }
  }
  return 0;
}

void resolve_stop(void) {
  if (!R.started) return;
  pthread_mutex_lock(&R.mu);
  __atomic_store_n(&R.stop, 1, __ATOMIC_RELAXED);
  pthread_cond_broadcast(&R.work);
  pthread_cond_broadcast(&R.watch);
  /* A thread stuck in a lookup may keep going past the process's end: wait
   * a little for the threads, never for a lookup. */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 2;
  while (R.alive > 0)
    if (pthread_cond_timedwait(&R.gone, &R.mu, &ts) == ETIMEDOUT) break;
  int idle = R.alive == 0;
  if (idle)
    while (R.jobs) {
      resolve_job *j = R.jobs;
      R.jobs = j->next;
      free(j);
    }
  pthread_mutex_unlock(&R.mu);
  if (idle) R.started = 0;
}

resolve_job *resolve_submit(const char *addr, const char *peer, resolve_done_fn done,
                            void *arg) {
  resolve_job *j = calloc(1, sizeof(*j));
  if (!j) return NULL;
  snprintf(j->addr, sizeof(j->addr), "%s", addr);
  snprintf(j->peer, sizeof(j->peer), "%s", peer);
  j->done = done;
  j->arg = arg;
  j->owned = 1;
  j->deadline_ms = stk__now_ms() + R.timeout_ms;
  pthread_mutex_lock(&R.mu);
  if (!R.started || R.stop || R.queued >= R.max_queued) {
    pthread_mutex_unlock(&R.mu);
    free(j);
    return NULL;
  }
  resolve_job **p = &R.jobs;
  while (*p) p = &(*p)->next;
  *p = j;
  R.queued++;
  pthread_cond_signal(&R.work);
  pthread_cond_signal(&R.watch);
  pthread_mutex_unlock(&R.mu);
  return j;
}

void resolve_release(resolve_job *j) {
  if (!j) return;
  pthread_mutex_lock(&R.mu);
  j->owned = 0;
  if (!j->answered) {
    j->answered = 1;
    if (!j->taken) R.queued--, j->taken = 1;
  }
  maybe_free_locked(j);
  pthread_mutex_unlock(&R.mu);
}

size_t resolve_pending(void) {
  pthread_mutex_lock(&R.mu);
  size_t n = 0;
  for (resolve_job *j = R.jobs; j; j = j->next) n += !j->answered;
  pthread_mutex_unlock(&R.mu);
  return n;
}
