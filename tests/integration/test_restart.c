/* test_restart.c - the coordinator is killed -9 and restarted on the same
 * port, at several points of a job, with real processes on 127.0.0.1 (a
 * coordinator, two workers) and two ranks (libstoker clients in this
 * process, every batch checked against stk_build_reference):
 *  1. before any rank joined (--state-dir);
 *  2. mid-epoch: both ranks hold at a step until the restarted coordinator
 *     knows them again (their watches re-announce them), then go on;
 *  3. after rank 0 finished and closed its client: the restarted
 *     coordinator knows rank 0 finished from its state journal alone, and
 *     rank 1's finish ends the job (it does not wait for rank 0
 *     until the idle timeout);
 *  4. during the shutdown: (a) every worker was sent its Shutdown (one is
 *     stopped and has not acted on it): the restarted coordinator reads
 *     that the job ended and waits (bounded) for that worker; (b) a worker
 *     missed an earlier restart and was never told: the restarted
 *     coordinator refuses joins, tells it when it comes back, exits 0;
 *  5. on a fresh disk (no --state-dir): rank 0 finished but keeps its
 *     client open; its watch re-announces it as finished, so the job ends
 *     when rank 1 finishes;
 *  6. after the ranks streamed their last batches but before any Finish,
 *     with both workers stopped (SIGSTOP) so they cannot re-register before
 *     the ranks finish at the restarted coordinator: it lingers
 *     (--linger-s), the workers are let go and come back to their
 *     Shutdown, and exit 0 (not 3, orphaned) -- on a fresh disk and with
 *     --state-dir.
 * Every case: every process exits 0 (coordinator, workers; ranks deliver
 * every step exactly once, in order, byte-exact, and finish OK) within
 * 15 s of the last finish (case 4: of the restart).
 *
 * usage: test_restart <stoker-coordinator> <stoker-worker> [...]
 */
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "daemon_util.h"
#include "stoker/client.h"

#define W      2
#define EPOCHS 2
#define SPE    32 /* 256 samples / (2 ranks x 4) */
static const char *const job_args[] = {
    "--set",     "num_samples=256", "--set",    "batch_size=4", "--set",
    "height=16", "--set",           "width=16", "--set",        "world_size=2",
    "--set",     "epochs=2",        "--set",    "seed=3",       NULL};

/* ---- Rank threads -------------------------------------------------------- */

typedef struct rank {
  int port;
  uint32_t rank;
  uint64_t hold_at; /* after this many batches wait for `go` (0 = never) */
  int keep_open;    /* after finish, keep the client open until `go_close` */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int held, go, go_close, finished, done; /* under mu */
  /* results */
  uint64_t delivered, mismatches, order_errors;
  int final_status, finish_status;
  int64_t finish_ms;
  char error[512];
} rank;

static void rank_set(rank *r, int *flag) {
  pthread_mutex_lock(&r->mu);
  *flag = 1;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* Wait (bounded) until *flag is set; 0 or -1. */
static int rank_wait(rank *r, int *flag, int timeout_ms) {
  int64_t until = stk__now_ms() + timeout_ms;
  pthread_mutex_lock(&r->mu);
  while (!*flag && stk__now_ms() < until) stk__cond_wait_until(&r->cv, &r->mu, until);
  int ok = *flag;
  pthread_mutex_unlock(&r->mu);
  return ok ? 0 : -1;
}

static void *rank_main(void *arg) {
  rank *r = arg;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", r->port);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = addr;
  cfg.rank = r->rank;
  cfg.world_size = W;
  cfg.join_timeout_ms = 30000;
  stk_client *c = NULL;
  r->final_status = stk_client_open(&cfg, &c, r->error, sizeof r->error);
  if (r->final_status != STK_OK) {
    rank_set(r, &r->done);
    return NULL;
  }
  stk_job_spec spec;
  stk_client_job(c, &spec);
  stk_batch_layout L;
  stk_batch_layout_of(&spec, &L);
  unsigned char *ref = malloc(L.total_bytes);
  uint64_t seq = 0;
  for (;;) {
    if (r->hold_at && seq == r->hold_at) {
      rank_set(r, &r->held);
      rank_wait(r, &r->go, 60000);
    }
    stk_batch *b = NULL;
    int s = stk_client_next(c, &b);
    if (s == STK_END_OF_EPOCH) continue;
    if (s != STK_OK) {
      r->final_status = s;
      if (s != STK_END_OF_DATA)
        snprintf(r->error, sizeof r->error, "%s: %s", stk_strerror(s),
                 stk_client_error(c));
      break;
    }
    if (stk_batch_epoch(b) * SPE + stk_batch_step(b) != seq) r->order_errors++;
    size_t len = 0;
    const void *p = stk_batch_payload(b, &len);
    char err[256];
    if (!ref || len != L.total_bytes ||
        stk_build_reference(&spec, NULL, stk_batch_epoch(b), r->rank, stk_batch_step(b),
                            ref, L.total_bytes, err, sizeof err) != STK_OK ||
        memcmp(p, ref, L.total_bytes) != 0)
      r->mismatches++;
    stk_batch_release(b);
    seq++;
  }
  r->delivered = seq;
  r->finish_status = stk_client_finish(c, 0);
  if (r->finish_status != STK_OK)
    snprintf(r->error, sizeof r->error, "finish: %s", stk_client_error(c));
  r->finish_ms = stk__now_ms();
  rank_set(r, &r->finished);
  if (r->keep_open) rank_wait(r, &r->go_close, 60000);
  stk_client_close(c);
  free(ref);
  rank_set(r, &r->done);
  return NULL;
}

static void rank_start(rank *r, pthread_t *t, int port, uint32_t id, uint64_t hold_at,
                       int keep_open) {
  memset(r, 0, sizeof(*r));
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->port = port, r->rank = id, r->hold_at = hold_at, r->keep_open = keep_open;
  pthread_create(t, NULL, rank_main, r);
}

/* Join the thread (after releasing every gate) and check what it saw. */
static void rank_end(rank *r, pthread_t t) {
  rank_set(r, &r->go);
  rank_set(r, &r->go_close);
  pthread_join(t, NULL);
  if (r->final_status != STK_END_OF_DATA || r->finish_status != STK_OK)
    fprintf(stderr, "rank %u: status %d, finish %d: %s\n", r->rank, r->final_status,
            r->finish_status, r->error);
  CHECK(r->final_status == STK_END_OF_DATA);
  CHECK(r->finish_status == STK_OK);
  CHECK_EQ_U64(r->delivered, (uint64_t)EPOCHS * SPE);
  CHECK_EQ_U64(r->mismatches, 0);
  CHECK_EQ_U64(r->order_errors, 0);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
}

/* ---- Daemons --------------------------------------------------------------- */

/* Start a coordinator on port (0 = any) with the job, --state-dir (NULL =
 * none) and extra args; its port, or -1. */
static int coord_start(stk_proc *p, const char *name, int port, const char *state_dir,
                       const char *const *extra) {
  char listen[64], pf[600];
  snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
  snprintf(pf, sizeof pf, "%s/%s.port", proc_tmpdir(), name);
  unlink(pf);
  char *argv[64];
  int n = 0;
  argv[n++] = (char *)coord_bin;
  argv[n++] = "--listen";
  argv[n++] = listen;
  argv[n++] = "--port-file";
  argv[n++] = pf;
  argv[n++] = "--stats-interval-s";
  argv[n++] = "1";
  if (state_dir) {
    argv[n++] = "--state-dir";
    argv[n++] = (char *)state_dir;
  }
  for (const char *const *a = job_args; *a; a++) argv[n++] = (char *)*a;
  for (; extra && *extra && n < 62; extra++) argv[n++] = (char *)*extra;
  argv[n] = NULL;
  if (proc_spawn(p, name, argv)) return -1;
  int got = proc_wait_port(p, pf, 15000);
  if (got < 0) proc_dump_log(p);
  return got;
}

/* kill -9 the coordinator and start it again on the same port. */
static int coord_restart(stk_proc *old, stk_proc *p, const char *name, int port,
                         const char *state_dir, const char *const *extra) {
  proc_signal(old, SIGKILL);
  CHECK(proc_wait(old, 10000) == 128 + SIGKILL);
  int got = coord_start(p, name, port, state_dir, extra);
  CHECK(got == port);
  return got;
}

typedef struct want {
  size_t workers;            /* at least this many live workers */
  uint32_t joined, finished; /* at least these many ranks */
  uint32_t finished_mask;    /* these ranks among the finished (bit r) */
  const char *state;         /* this state (NULL = any) */
} want;

/* Poll Status (bounded) until it shows w; 0 or -1 (the last status printed). */
static int wait_status(int port, const want *w, int timeout_ms) {
  stk__rpc_channel *ch = du_channel(port);
  int ok = 0;
  char last[300] = "no answer";
  for (int64_t until = stk__now_ms() + timeout_ms; !ok && stk__now_ms() < until;) {
    Stoker__V1__StatusResponse *s = du_status(ch);
    if (s) {
      uint32_t mask = 0;
      for (size_t i = 0; i < s->n_finished_ranks; i++)
        if (s->finished_ranks[i] < 32) mask |= 1u << s->finished_ranks[i];
      ok = s->n_workers >= w->workers && s->n_joined_ranks >= w->joined &&
           s->n_finished_ranks >= w->finished &&
           (mask & w->finished_mask) == w->finished_mask &&
           (!w->state || !strcmp(s->state, w->state));
      snprintf(last, sizeof last,
               "state %s, %zu workers, %zu joined, %zu finished (mask %x)", s->state,
               s->n_workers, s->n_joined_ranks, s->n_finished_ranks, mask);
      protobuf_c_message_free_unpacked(&s->base, NULL);
    }
    if (!ok) stk__sleep_ms(50);
  }
  stk__rpc_channel_close(ch);
  if (!ok) fprintf(stderr, "wait_status: gave up at: %s\n", last);
  return ok ? 0 : -1;
}

/* The processes of the job exit 0 by deadline_ms (a stk__now_ms() value). */
static void all_exit_0(stk_proc *ps, int n, int64_t deadline_ms) {
  for (int i = 0; i < n; i++) {
    if (ps[i].exited && ps[i].code == 128 + SIGKILL) continue; /* the killed one */
    int64_t left = deadline_ms - stk__now_ms();
    int code = proc_wait(&ps[i], left > 0 ? (int)left : 0);
    if (code != 0) fprintf(stderr, "%s: exit %d\n", ps[i].name, code);
    CHECK(code == 0);
  }
  printf("  every process exited 0, %.1f s before the 15 s bound\n",
         (double)(deadline_ms - stk__now_ms()) / 1000.0);
}

static char *state_dir_for(const char *name) {
  static char dir[600];
  snprintf(dir, sizeof dir, "%s/%s.state", proc_tmpdir(), name);
  return dir;
}

static const char *const wargs[] = {"--threads", "1", NULL};
/* Cases that need no linger keep it short (the suite's time). */
static const char *const short_linger[] = {"--linger-s", "2", NULL};

/* Cases 1-3 and 5 share one shape: start, restart at a point, run out. */
enum { BEFORE_JOINS, MID_EPOCH, AFTER_RANK0, FRESH_DISK };
static const char *const case_names[] = {"before joins", "mid-epoch",
                                         "after rank 0 finished", "fresh disk"};

static void restart_case(int which) {
  printf("case: coordinator restarted %s\n", case_names[which]);
  int before = check_failures;
  stk_proc p[4]; /* coordinator, restarted coordinator, 2 workers */
  memset(p, 0, sizeof(p));
  char name[64];
  snprintf(name, sizeof name, "c%d", which);
  const char *sd = which == FRESH_DISK ? NULL : state_dir_for(name);
  int port = coord_start(&p[0], name, 0, sd, short_linger);
  CHECK(port > 0);
  if (port <= 0) return;
  char w1[64], w2[64];
  snprintf(w1, sizeof w1, "c%d-w1", which);
  snprintf(w2, sizeof w2, "c%d-w2", which);
  CHECK(du_start_worker(&p[2], w1, port, wargs) > 0);
  CHECK(du_start_worker(&p[3], w2, port, wargs) > 0);
  want two_workers = {2, 0, 0, 0, NULL};
  CHECK(wait_status(port, &two_workers, 15000) == 0);
  snprintf(name, sizeof name, "c%d-restarted", which);

  rank r[2];
  pthread_t t[2];
  if (which == BEFORE_JOINS) {
    coord_restart(&p[0], &p[1], name, port, sd, short_linger);
    CHECK(proc_log_count(&p[1], "resuming job"));
    rank_start(&r[0], &t[0], port, 0, 0, 0);
    rank_start(&r[1], &t[1], port, 1, 0, 0);
  } else if (which == MID_EPOCH) {
    rank_start(&r[0], &t[0], port, 0, SPE / 2, 0);
    rank_start(&r[1], &t[1], port, 1, SPE / 2 + 3, 0);
    CHECK(rank_wait(&r[0], &r[0].held, 30000) == 0);
    CHECK(rank_wait(&r[1], &r[1].held, 30000) == 0);
    coord_restart(&p[0], &p[1], name, port, sd, short_linger);
    /* Workers back, both ranks known again (journal, re-announcement). */
    want back = {2, 2, 0, 0, "running"};
    CHECK(wait_status(port, &back, 15000) == 0);
    rank_set(&r[0], &r[0].go);
    rank_set(&r[1], &r[1].go);
  } else { /* AFTER_RANK0, FRESH_DISK: rank 0 finishes before the restart */
    rank_start(&r[0], &t[0], port, 0, 0, which == FRESH_DISK);
    rank_start(&r[1], &t[1], port, 1, SPE + 5, 0);
    CHECK(rank_wait(&r[0], &r[0].finished, 30000) == 0);
    CHECK(rank_wait(&r[1], &r[1].held, 30000) == 0);
    if (which == AFTER_RANK0) {
      CHECK(rank_wait(&r[0], &r[0].done, 10000) == 0); /* its client is closed */
    }
    want one_done = {0, 0, 1, 1, NULL};
    CHECK(wait_status(port, &one_done, 5000) == 0);
    coord_restart(&p[0], &p[1], name, port, sd, short_linger);
    /* Known at once from the journal; on a fresh disk from rank 0's watch. */
    want known = {2, 0, 1, 1, "running"};
    CHECK(wait_status(port, &known, 15000) == 0);
    CHECK(proc_wait(&p[1], 0) == -1); /* still running: rank 1 is not done */
    if (which == FRESH_DISK) CHECK(proc_log_count(&p[1], "re-announced itself"));
    else CHECK(proc_log_count(&p[1], "1/2 ranks finished"));
    rank_set(&r[1], &r[1].go);
  }
  CHECK(rank_wait(&r[0], &r[0].finished, 60000) == 0);
  CHECK(rank_wait(&r[1], &r[1].finished, 60000) == 0);
  int64_t last = r[0].finish_ms > r[1].finish_ms ? r[0].finish_ms : r[1].finish_ms;
  all_exit_0(p, 4, last + 15000);
  rank_end(&r[0], t[0]);
  rank_end(&r[1], t[1]);
  if (check_failures != before) {
    for (int i = 0; i < 4; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
  proc_reap_all();
}

/* Case 4a: killed during the shutdown, after every worker was sent its
 * Shutdown (one of them stopped, so it has not acted on it, and may not
 * even have it): the restarted coordinator reads that the job ended and
 * that this worker's session had not ended; the worker, resumed, either
 * finds its Shutdown or comes back and is told; either way everything
 * exits 0 (the coordinator waits at most --rejoin-wait-s for it). */
static void during_shutdown_told(void) {
  printf("case: coordinator restarted during the shutdown, every worker told\n");
  int before = check_failures;
  stk_proc p[4];
  memset(p, 0, sizeof(p));
  const char *sd = state_dir_for("c4a");
  const char *grace[] = {"--shutdown-grace-s", "120", NULL};
  int port = coord_start(&p[0], "c4a", 0, sd, grace);
  CHECK(port > 0);
  if (port <= 0) return;
  CHECK(du_start_worker(&p[2], "c4a-w1", port, wargs) > 0);
  CHECK(du_start_worker(&p[3], "c4a-w2", port, wargs) > 0);
  want two_workers = {2, 0, 0, 0, NULL};
  CHECK(wait_status(port, &two_workers, 15000) == 0);
  proc_signal(&p[3], SIGSTOP); /* w2 will not act on its Shutdown */
  stk__rpc_channel *ch = du_channel(port);
  char det[256];
  uint32_t nf = 0;
  CHECK(du_finish(ch, 0, 0, &nf, det, sizeof det) == GRPC_STATUS_OK);
  CHECK(du_finish(ch, 1, 0, &nf, det, sizeof det) == GRPC_STATUS_OK);
  stk__rpc_channel_close(ch);
  CHECK(proc_wait(&p[2], 15000) == 0); /* w1 took its Shutdown */
  /* ... and the coordinator saw its session end: out of the journal
   * before that log line (a kill before it would keep w1 "to tell") */
  CHECK(proc_wait_log(&p[0], ") left; ", 1, 15000) == 0);
  /* Both told (journaled before the log line); still waiting for w2. */
  CHECK(proc_wait_log(&p[0], "sent shutdown to worker", 2, 15000) == 0);
  CHECK(proc_wait(&p[0], 0) == -1);
  int64_t t0 = stk__now_ms();
  const char *rejoin[] = {"--rejoin-wait-s", "5", "--linger-s", "2", NULL};
  CHECK(coord_restart(&p[0], &p[1], "c4a-restarted", port, sd, rejoin) == port);
  CHECK(proc_log_count(&p[1], "had already ended"));
  CHECK(proc_log_count(&p[1], "workers still to tell: 1")); /* sent is not received */
  proc_signal(&p[3], SIGCONT);
  all_exit_0(p, 4, t0 + 15000);
  if (check_failures != before) {
    for (int i = 0; i < 4; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
  proc_reap_all();
}

/* Case 4b: a worker (stopped) misses a restart mid-job; the restarted
 * coordinator expects it back. Every rank finishes: the coordinator tells
 * the worker that is there and waits for the other; it is killed -9 while
 * waiting and started again: it reads that the job ended and that one
 * worker was never told, refuses joins, tells that worker when it comes
 * back (SIGCONT) and exits 0; so does the worker. */
static void during_shutdown_untold(void) {
  printf("case: coordinator restarted during the shutdown, a worker not told yet\n");
  int before = check_failures;
  stk_proc p[5]; /* 3 coordinators, 2 workers */
  memset(p, 0, sizeof(p));
  const char *sd = state_dir_for("c4b");
  int port = coord_start(&p[0], "c4b", 0, sd, NULL);
  CHECK(port > 0);
  if (port <= 0) return;
  CHECK(du_start_worker(&p[3], "c4b-w1", port, wargs) > 0);
  CHECK(du_start_worker(&p[4], "c4b-w2", port, wargs) > 0);
  want two_workers = {2, 0, 0, 0, NULL};
  CHECK(wait_status(port, &two_workers, 15000) == 0);
  proc_signal(&p[4], SIGSTOP); /* w2 misses the restart */
  const char *long_rejoin[] = {"--rejoin-wait-s", "120", "--linger-s", "2", NULL};
  CHECK(coord_restart(&p[0], &p[1], "c4b-restarted", port, sd, long_rejoin) == port);
  CHECK(proc_log_count(&p[1], "workers expected back: 2"));
  want w1_back = {1, 0, 0, 0, NULL};
  CHECK(wait_status(port, &w1_back, 15000) == 0);
  stk__rpc_channel *ch = du_channel(port);
  char det[256];
  uint32_t nf = 0;
  CHECK(du_finish(ch, 0, 0, &nf, det, sizeof det) == GRPC_STATUS_OK);
  CHECK(du_finish(ch, 1, 0, &nf, det, sizeof det) == GRPC_STATUS_OK);
  stk__rpc_channel_close(ch);
  CHECK(proc_wait(&p[3], 15000) == 0); /* w1 took its Shutdown */
  CHECK(proc_wait_log(&p[1], "sent shutdown to worker", 1, 15000) == 0);
  /* The coordinator saw w1's session end (journaled before this line):
   * killed before that, the restart would still count w1 "to tell" (a
   * flake found by scripts/stress.sh) */
  CHECK(proc_wait_log(&p[1], ") left; ", 1, 15000) == 0);
  want draining = {0, 0, 2, 3, "draining"};
  CHECK(wait_status(port, &draining, 15000) == 0);
  CHECK(proc_wait(&p[1], 0) == -1); /* waiting for w2 */
  int64_t t0 = stk__now_ms();
  CHECK(coord_restart(&p[1], &p[2], "c4b-restarted2", port, sd, short_linger) == port);
  CHECK(proc_log_count(&p[2], "had already ended"));
  CHECK(proc_log_count(&p[2], "workers still to tell: 1"));
  CHECK(proc_wait(&p[2], 0) == -1); /* waits for w2 */
  ch = du_channel(port);
  Stoker__V1__JoinResponse *jr = NULL;
  CHECK(du_join(ch, 0, W, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof det) ==
        GRPC_STATUS_FAILED_PRECONDITION);
  if (jr) protobuf_c_message_free_unpacked(&jr->base, NULL);
  stk__rpc_channel_close(ch);
  proc_signal(&p[4], SIGCONT); /* w2 comes back, is told, exits 0 */
  all_exit_0(p, 5, t0 + 15000);
  CHECK(proc_log_count(&p[2], "sent shutdown to worker"));
  if (check_failures != before) {
    for (int i = 0; i < 5; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
  proc_reap_all();
}

/* Case 6: every batch streamed, no Finish yet, workers stopped, restart. */
static void end_before_workers_back(int with_state) {
  printf("case: restarted after the last batches, workers back only after the end (%s)\n",
         with_state ? "--state-dir" : "fresh disk");
  int before = check_failures;
  stk_proc p[4];
  memset(p, 0, sizeof(p));
  const char *name = with_state ? "c6s" : "c6";
  const char *sd = with_state ? state_dir_for(name) : NULL;
  int port = coord_start(&p[0], name, 0, sd, NULL);
  CHECK(port > 0);
  if (port <= 0) return;
  char w1[64], w2[64], again[64];
  snprintf(w1, sizeof w1, "%s-w1", name);
  snprintf(w2, sizeof w2, "%s-w2", name);
  snprintf(again, sizeof again, "%s-restarted", name);
  CHECK(du_start_worker(&p[2], w1, port, wargs) > 0);
  CHECK(du_start_worker(&p[3], w2, port, wargs) > 0);
  want two_workers = {2, 0, 0, 0, NULL};
  CHECK(wait_status(port, &two_workers, 15000) == 0);
  rank r[2];
  pthread_t t[2];
  rank_start(&r[0], &t[0], port, 0, (uint64_t)EPOCHS * SPE, 0);
  rank_start(&r[1], &t[1], port, 1, (uint64_t)EPOCHS * SPE, 0);
  CHECK(rank_wait(&r[0], &r[0].held, 60000) == 0);
  CHECK(rank_wait(&r[1], &r[1].held, 60000) == 0);
  proc_signal(&p[2], SIGSTOP); /* they cannot re-register until let go */
  proc_signal(&p[3], SIGSTOP);
  coord_restart(&p[0], &p[1], again, port, sd, NULL); /* the default --linger-s */
  rank_set(&r[0], &r[0].go);
  rank_set(&r[1], &r[1].go);
  CHECK(rank_wait(&r[0], &r[0].finished, 60000) == 0);
  CHECK(rank_wait(&r[1], &r[1].finished, 60000) == 0);
  /* The end is decided (every rank finished) with no worker registered. */
  CHECK(proc_wait_log(&p[1], "staying up", 1, 15000) == 0);
  proc_signal(&p[2], SIGCONT);
  proc_signal(&p[3], SIGCONT);
  int64_t last = r[0].finish_ms > r[1].finish_ms ? r[0].finish_ms : r[1].finish_ms;
  all_exit_0(p, 4, last + 15000);
  CHECK(proc_log_count(&p[2], "coordinator says shut down") == 1);
  CHECK(proc_log_count(&p[3], "coordinator says shut down") == 1);
  rank_end(&r[0], t[0]);
  rank_end(&r[1], t[1]);
  if (check_failures != before) {
    for (int i = 0; i < 4; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
  proc_reap_all();
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  restart_case(BEFORE_JOINS);
  restart_case(MID_EPOCH);
  restart_case(AFTER_RANK0);
  during_shutdown_told();
  during_shutdown_untold();
  restart_case(FRESH_DISK);
  end_before_workers_back(0);
  end_before_workers_back(1);
  stk__rpc_shutdown();
  CHECK_DONE();
}
