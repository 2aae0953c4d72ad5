/* e2e_util.h - rank threads for the end-to-end tests: each thread opens a
 * real libstoker client against a real coordinator, consumes every epoch,
 * and checks that each step arrives exactly once, in order, byte-identical
 * to stk_build_reference; and the run of a whole job the end-to-end tests
 * share (e2e_start, e2e_ranks, e2e_wait_exit, e2e_logs_if_failed).
 * Header-only, test code only; drive the processes from the main thread
 * (proc.h is not thread-safe).
 */
#ifndef STOKER_TEST_E2E_UTIL_H
#define STOKER_TEST_E2E_UTIL_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon_util.h"
#include "stoker/client.h"

typedef struct rank_run {
  /* in */
  int port;
  uint32_t rank, world;
  uint32_t prefetch;
  int step_ms;           /* simulated training step */
  int finish;            /* call stk_client_finish at the end */
  const char *data_root; /* for the reference of file datasets */
  const char *token;     /* bearer token, NULL = none */
  int cuda;              /* CUDA slots on a host-memory stand-in (fake_cudart,
                            through $STOKER_CUDART and $STOKER_CUDA_DRIVER):
                            every tensor's "device" bytes are checked too */
  int hold_at;           /* after this many batches, wait for `release` (0: never) */
  uint32_t working_set, working_set_max; /* cfg's (0: the defaults) */
  volatile int release;                  /* set by the main thread (bounded wait: 60 s) */
  /* out */
  uint64_t delivered, mismatches, order_errors, epochs_seen;
  int final_status; /* STK_END_OF_DATA when all went well */
  stk_stats stats;
  char error[512];
  volatile int progress; /* batches so far, read by the main thread */
  int done;              /* atomic: rank_main has returned (rank_done) */
  struct timespec finished_at;
  /* the open client, for rank_stats(); guarded by mu (rank_init sets it up) */
  pthread_mutex_t mu;
  stk_client *client;
} rank_run;

/* Zero r and set up what rank_stats needs; fill the "in" fields after. */
static inline void rank_init(rank_run *r) {
  memset(r, 0, sizeof(*r));
  pthread_mutex_init(&r->mu, NULL);
}

/* Snapshot of rank r's client stats from another thread: 0, or -1 while
 * the rank has no open client (not yet opened, or already closed). */
static inline int rank_stats(rank_run *r, stk_stats *out) {
  pthread_mutex_lock(&r->mu);
  int ok = r->client != NULL;
  if (ok) stk_client_stats(r->client, out);
  pthread_mutex_unlock(&r->mu);
  return ok ? 0 : -1;
}

/* Index of the worker whose address ends in ":port" in st, or -1. */
static inline int worker_index(const stk_stats *st, int port) {
  char suffix[16];
  snprintf(suffix, sizeof(suffix), ":%d", port);
  size_t sl = strlen(suffix);
  for (uint32_t i = 0; i < st->nworkers && i < STK_MAX_WORKER_STATS; i++) {
    size_t al = strlen(st->workers[i].address);
    if (al >= sl && !strcmp(st->workers[i].address + al - sl, suffix)) return (int)i;
  }
  return -1;
}

/* The victim's (outstanding + completed) for rank r: it only grows when the
 * client sends the victim a request (the worker-kill tests wait on it, not
 * on a clock). -1 if unknown. */
static inline int64_t victim_sent(rank_run *r, int vport, uint64_t *reissued) {
  stk_stats st;
  if (rank_stats(r, &st)) return -1;
  *reissued = st.reissued;
  int i = worker_index(&st, vport);
  if (i < 0) return -1;
  return (int64_t)st.workers[i].outstanding + (int64_t)st.workers[i].batches;
}

static inline void rank_body(rank_run *r) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", r->port);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = addr;
  cfg.rank = r->rank;
  cfg.world_size = r->world;
  if (r->prefetch) cfg.prefetch = r->prefetch;
  cfg.working_set = r->working_set;
  cfg.working_set_max = r->working_set_max;
  cfg.join_timeout_ms = 20000;
  cfg.token = r->token;
  if (r->cuda) cfg.device = STK_DEVICE_CUDA;
  stk_client *c = NULL;
  int os = stk_client_open(&cfg, &c, r->error, sizeof r->error);
  /* atomic: a watching thread may poll it (test_client_fanout) */
  __atomic_store_n(&r->final_status, os, __ATOMIC_RELEASE);
  if (os != STK_OK) return;
  pthread_mutex_lock(&r->mu);
  r->client = c;
  pthread_mutex_unlock(&r->mu);
  stk_job_spec spec;
  stk_client_job(c, &spec);
  uint64_t spe = stk_client_steps_per_epoch(c);
  stk_batch_layout L;
  stk_batch_layout_of(&spec, &L);
  unsigned char *ref = malloc(L.total_bytes);
  uint64_t epoch = 0, step = 0;
  for (;;) {
    stk_batch *b = NULL;
    int s = stk_client_next(c, &b);
    if (s == STK_END_OF_EPOCH) {
      if (step != spe) r->order_errors++;
      r->epochs_seen++;
      epoch++, step = 0;
      continue;
    }
    if (s != STK_OK) {
      __atomic_store_n(&r->final_status, (int)s, __ATOMIC_RELEASE);
      if (s != STK_END_OF_DATA)
        snprintf(r->error, sizeof r->error, "%s: %s", stk_strerror(s),
                 stk_client_error(c));
      break;
    }
    if (stk_batch_epoch(b) != epoch || stk_batch_step(b) != step) r->order_errors++;
    size_t len = 0;
    const void *p = stk_batch_payload(b, &len);
    char err[256];
    if (len != L.total_bytes ||
        stk_build_reference(&spec, r->data_root, stk_batch_epoch(b), r->rank,
                            stk_batch_step(b), ref, L.total_bytes, err,
                            sizeof err) != STK_OK ||
        memcmp(p, ref, L.total_bytes) != 0)
      r->mismatches++;
    for (uint32_t i = 0; r->cuda && i < L.ntensors; i++) {
      stk_tensor t; /* the stand-in's device memory is host memory */
      if (stk_batch_tensor(b, i, &t) || t.device != STK_DEVICE_CUDA ||
          t.nbytes != L.tensors[i].nbytes ||
          memcmp(t.data, ref + L.tensors[i].offset, (size_t)t.nbytes) != 0) {
        r->mismatches++;
        break;
      }
    }
    stk_batch_release(b);
    r->delivered++;
    step++;
    __atomic_store_n(&r->progress, (int)r->delivered, __ATOMIC_RELEASE);
    for (int i = 0; r->hold_at && (int)r->delivered == r->hold_at && i < 60000 &&
                    !__atomic_load_n(&r->release, __ATOMIC_ACQUIRE);
         i++) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    if (r->step_ms) {
      struct timespec ts = {0, (long)r->step_ms * 1000000};
      nanosleep(&ts, NULL);
    }
  }
  stk_client_stats(c, &r->stats);
  if (r->finish && stk_client_finish(c, 0) != STK_OK && !r->error[0])
    snprintf(r->error, sizeof r->error, "finish: %s", stk_client_error(c));
  clock_gettime(CLOCK_MONOTONIC, &r->finished_at);
  pthread_mutex_lock(&r->mu);
  r->client = NULL;
  pthread_mutex_unlock(&r->mu);
  stk_client_close(c);
  free(ref);
}

/* The rank thread (pthread_create(..., rank_main, r)): opens a client
 * for r, consumes and checks every batch as above, fills r's "out"
 * fields, and last sets r->done. Returns NULL. */
static inline void *rank_main(void *arg) {
  rank_run *r = arg;
  rank_body(r);
  __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* 1 once r's rank_main has returned (its "out" fields are final), else 0;
 * from any thread. */
static inline int rank_done(rank_run *r) {
  return __atomic_load_n(&r->done, __ATOMIC_ACQUIRE);
}

static inline double ts_diff_s(struct timespec a, struct timespec b) {
  return (double)(a.tv_sec - b.tv_sec) + (a.tv_nsec - b.tv_nsec) / 1e9;
}

/* Start a job on 127.0.0.1: p[0] the coordinator ("TAG-coordinator", the
 * job's --set arguments and coord_extra, NULL for none), p[1..nworkers]
 * the workers ("TAG-worker1"..., each with wargs). The coordinator's
 * port, or -1 when it did not start (a CHECK failed; proc.c reaps what
 * started). p must hold 1 + nworkers entries. */
static inline int e2e_start(stk_proc *p, const char *tag, const char *const *job,
                            const char *const *coord_extra, int nworkers,
                            const char *const *wargs) {
  char name[64];
  snprintf(name, sizeof name, "%s-coordinator", tag);
  int port = du_start_coordinator2(&p[0], name, job, coord_extra);
  CHECK(port > 0);
  if (port <= 0) return -1;
  for (int i = 1; i <= nworkers; i++) {
    snprintf(name, sizeof name, "%s-worker%d", tag, i);
    CHECK(du_start_worker(&p[i], name, port, wargs) > 0);
  }
  return port;
}

/* Run n ranks (rank_main threads, world size n, each calling finish at
 * the end) of the job at port, with data_root, token and cuda as in
 * rank_run, and join them; then the checks every end-to-end job makes:
 * each rank ended with STK_END_OF_DATA after want_batches batches, over
 * `epochs` epochs, none differing from the reference and none out of
 * order. A rank's error is printed with tag. r must hold n (<= 8) entries; the
 * caller reads the rest of each r[i] (stats, finished_at) after. */
static inline void e2e_ranks(rank_run *r, uint32_t n, int port, const char *tag,
                             const char *data_root, const char *token, int cuda,
                             uint64_t want_batches, uint64_t epochs) {
  pthread_t t[8];
  CHECK(n <= 8);
  if (n > 8) return;
  for (uint32_t i = 0; i < n; i++) {
    rank_init(&r[i]);
    r[i].port = port, r[i].rank = i, r[i].world = n, r[i].finish = 1;
    r[i].data_root = data_root;
    r[i].token = token;
    r[i].cuda = cuda;
    pthread_create(&t[i], NULL, rank_main, &r[i]);
  }
  for (uint32_t i = 0; i < n; i++) pthread_join(t[i], NULL);
  for (uint32_t i = 0; i < n; i++) {
    if (r[i].error[0]) fprintf(stderr, "%s rank %u: %s\n", tag, i, r[i].error);
    CHECK(r[i].final_status == STK_END_OF_DATA);
    CHECK_EQ_U64(r[i].delivered, want_batches);
    CHECK_EQ_U64(r[i].mismatches, 0);
    CHECK_EQ_U64(r[i].order_errors, 0);
    CHECK_EQ_U64(r[i].epochs_seen, epochs);
  }
}

/* Wait (bounded: 60 s each) for p[0..n) to exit; each must exit 0. */
static inline void e2e_wait_exit(stk_proc *p, int n) {
  for (int i = 0; i < n; i++) {
    int code = proc_wait(&p[i], 60000);
    if (code != 0) fprintf(stderr, "%s: exit %d\n", p[i].name, code);
    CHECK(code == 0);
  }
}

/* When a check failed since check_failures was `before`: p[0..n)'s logs
 * to stderr, and the temporary directory kept. */
static inline void e2e_logs_if_failed(stk_proc *p, int n, int before) {
  if (check_failures == before) return;
  for (int i = 0; i < n; i++) proc_dump_log(&p[i]);
  proc_keep_tmp();
}

#endif
