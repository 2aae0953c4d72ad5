/* test_hedge.c - hedged requests against a slow (not dead) worker: a real
 * coordinator, two real workers, and libstoker ranks in this process that
 * each train a simulated 20 ms step per batch. Three runs, one rank each:
 *   rank 0: both workers healthy (the baseline stall);
 *   rank 1: one worker stopped (SIGSTOP) 1 s of every 1.5 s (SIGCONT),
 *           hedging on: its late requests are asked of the other worker;
 *   rank 2: the same cycles with hedging off (STOKER_HEDGE=0), to show
 *           what the hedges saved.
 * Asserted (guaranteed by the code, not by the machine's speed): every
 * rank receives its epoch exactly once, in order, byte-identical to the
 * reference; rank 1 sent hedges and won at least one. For "won > 0" the
 * first stop is made to hold a request: a worker is stopped, and the test
 * waits (on the client's counters) until the client sends it a request,
 * which it then cannot answer; the rank needs that step, so it must be
 * hedged to the running worker, and the stop lasts until a hedge has won
 * (bounded). Which worker the scheduler uses is its business, so the
 * test tries one worker, then the other; the one that held a request is
 * the victim of the run's later cycles (rank 2's first stop is found the
 * same way, so both stopped runs stop a worker in use). Printed, not asserted (they
 * depend on the load): each run's stall %, hedges sent, won and dropped.
 *
 * usage: test_hedge <stoker-coordinator> <stoker-worker>
 */
#include <signal.h>
#include <sys/wait.h>

#include "common/clock.h"
#include "daemon_util.h"
#include "e2e_util.h"

#define STEPS 60

static int finished(rank_run *r) {
  return rank_done(r) || __atomic_load_n(&r->progress, __ATOMIC_ACQUIRE) >= STEPS;
}

static uint64_t hedges_won(rank_run *r) {
  stk_stats st;
  return rank_stats(r, &st) == 0 ? st.hedges_won : 0;
}

/* Stop a worker and wait until the kernel says it is stopped. */
static void stop(stk_proc *v) {
  proc_signal(v, SIGSTOP);
  int wst = 0;
  CHECK(waitpid(v->pid, &wst, WUNTRACED) == v->pid && WIFSTOPPED(wst));
}

/* (outstanding + completed) of the worker on `port` for rank r: it grows
 * only when the client sends that worker a request. -1 if unknown. */
static int64_t sent_to(rank_run *r, int port) {
  stk_stats st;
  if (rank_stats(r, &st)) return -1;
  char suffix[16];
  snprintf(suffix, sizeof(suffix), ":%d", port);
  size_t sl = strlen(suffix);
  for (uint32_t i = 0; i < st.nworkers && i < STK_MAX_WORKER_STATS; i++) {
    size_t al = strlen(st.workers[i].address);
    if (al >= sl && !strcmp(st.workers[i].address + al - sl, suffix))
      return (int64_t)st.workers[i].outstanding + (int64_t)st.workers[i].batches;
  }
  return -1;
}

/* Stop both workers, then wait until one of them is sent a request of r:
 * sent after the stop took effect, it cannot be answered, and the rank
 * needs it (every request is within its prefetch window), so it must be
 * hedged; the other worker is then resumed to take the hedge. With both
 * stopped, every request the rank sends (one per batch it consumes from
 * its prefetched ring) goes to a stopped worker, so which worker the
 * scheduler prefers does not matter (stopping only one let the rank send
 * everything to the other and finish first: a flake seen under
 * scripts/stress.sh). Each try is bounded (1 s; both resumed if nothing
 * was sent, e.g. no batch was left in the ring). The index of the worker
 * left stopped, or -1 (the rank finished first). */
static int stop_holding(rank_run *r, stk_proc *w, const int *ports) {
  for (int attempt = 0; attempt < 30 && !finished(r); attempt++) {
    stop(&w[0]);
    stop(&w[1]);
    int64_t base[2] = {sent_to(r, ports[0]), sent_to(r, ports[1])};
    for (int64_t t0 = stk__now_ms(); !finished(r) && stk__now_ms() - t0 < 1000;) {
      for (int v = 0; v < 2; v++) {
        int64_t sent = sent_to(r, ports[v]);
        if (base[v] < 0) base[v] = sent;
        else if (sent > base[v]) {
          proc_signal(&w[1 - v], SIGCONT);
          return v;
        }
      }
      stk__sleep_ms(2);
    }
    proc_signal(&w[0], SIGCONT);
    proc_signal(&w[1], SIGCONT);
  }
  return -1;
}

/* Keep the rank's thread going for ms (or until it finished). */
static void hold(rank_run *r, int ms) {
  for (int64_t t0 = stk__now_ms(); !finished(r) && stk__now_ms() - t0 < ms;)
    stk__sleep_ms(5);
}

/* Run rank `rank` to the end of its epoch. With cycles, a worker is
 * stopped 1 s of every 1.5 s meanwhile: the first stop is the one of
 * stop_holding (which picks *victim, the worker of the later cycles), and
 * with want_win it lasts until a hedge has won (bounded: 20 s). */
static void run(rank_run *r, uint32_t rank, int port, stk_proc *w, const int *ports,
                int cycles, int want_win, int *victim) {
  rank_init(r);
  r->port = port, r->rank = rank, r->world = 3, r->finish = 1;
  r->prefetch = 8;
  r->step_ms = 20;
  pthread_t t;
  pthread_create(&t, NULL, rank_main, r);
  /* the rank is streaming before the first stop (bounded: 60 s) */
  for (int i = 0;
       i < 12000 && __atomic_load_n(&r->progress, __ATOMIC_ACQUIRE) < 5 && !finished(r);
       i++)
    stk__sleep_ms(5);
  if (cycles) {
    *victim = stop_holding(r, w, ports);
    CHECK(*victim >= 0);
    if (*victim >= 0) {
      int64_t t0 = stk__now_ms();
      while (!finished(r) && (stk__now_ms() - t0 < 1000 ||
                              (want_win && !hedges_won(r) && stk__now_ms() - t0 < 20000)))
        stk__sleep_ms(5);
      proc_signal(&w[*victim], SIGCONT);
      hold(r, 500);
    }
  }
  while (cycles && *victim >= 0 && !finished(r)) {
    stop(&w[*victim]);
    hold(r, 1000);
    proc_signal(&w[*victim], SIGCONT);
    hold(r, 500);
  }
  pthread_join(t, NULL);
  if (r->error[0]) fprintf(stderr, "rank %u: %s\n", rank, r->error);
  CHECK(r->final_status == STK_END_OF_DATA);
  CHECK_EQ_U64(r->delivered, STEPS);
  CHECK_EQ_U64(r->mismatches, 0);
  CHECK_EQ_U64(r->order_errors, 0);
  pthread_mutex_destroy(&r->mu);
}

static void print(const char *what, const rank_run *r) {
  const stk_stats *s = &r->stats;
  printf(
      "%-34s stall %5.1f%% (%.2f s), hedges sent %llu, won %llu, dropped %llu, "
      "reissued %llu, duplicates %llu\n",
      what, 100.0 * s->stall_fraction, s->stall_ns / 1e9,
      (unsigned long long)s->hedges_sent, (unsigned long long)s->hedges_won,
      (unsigned long long)s->hedge_dropped, (unsigned long long)s->reissued,
      (unsigned long long)s->duplicates);
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  /* 8 samples x 1 ms of CPU: ~8 ms a batch per builder; 60 steps a rank */
  const char *job[] = {"--set", "num_samples=1440", "--set", "batch_size=8", "--set",
                       "height=32", "--set", "width=32", "--set", "world_size=3", "--set",
                       "epochs=1", "--set", "synthetic_cost_us=1000", "--set", "seed=7",
                       /* a stopped worker stays listed (the first stop may
                        * last longer than 3 default heartbeats) */
                       "--heartbeat-misses", "30", NULL};
  stk_proc p[3];
  memset(p, 0, sizeof(p));
  int port = du_start_coordinator(&p[0], "coordinator", job);
  CHECK(port > 0);
  if (port <= 0) CHECK_DONE();
  const char *wargs[] = {"--threads", "2", NULL};
  int ports[2];
  CHECK((ports[0] = du_start_worker(&p[1], "worker-a", port, wargs)) > 0);
  CHECK((ports[1] = du_start_worker(&p[2], "worker-b", port, wargs)) > 0);
  stk__rpc_channel *ch = du_channel(port);
  CHECK(du_wait_workers(ch, 2, 10000) == 0);
  stk__rpc_channel_close(ch);
  if (check_failures) CHECK_DONE();

  rank_run r[3];
  int victim = -1;
  run(&r[0], 0, port, &p[1], ports, 0, 0, &victim);
  run(&r[1], 1, port, &p[1], ports, 1, 1, &victim);
  CHECK(r[1].stats.hedges_sent > 0);
  CHECK(r[1].stats.hedges_won > 0);
  CHECK(r[1].stats.hedges_won <= r[1].stats.hedges_sent);
  /* hedging off: the environment is read when a client opens; no client
   * is open now */
  setenv("STOKER_HEDGE", "0", 1);
  run(&r[2], 2, port, &p[1], ports, 1, 0, &victim);
  unsetenv("STOKER_HEDGE");
  CHECK_EQ_U64(r[2].stats.hedges_sent, 0);
  print("healthy (both workers):", &r[0]);
  print("one worker stopped 1 s in 1.5 s:", &r[1]);
  print("... with hedging off:", &r[2]);

  int codes[3] = {proc_wait(&p[0], 20000), proc_wait(&p[1], 20000),
                  proc_wait(&p[2], 20000)};
  for (int i = 0; i < 3; i++) {
    if (codes[i] != 0) fprintf(stderr, "%s: exit %d\n", p[i].name, codes[i]);
    CHECK(codes[i] == 0);
  }
  if (check_failures) {
    for (int i = 0; i < 3; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
  CHECK_DONE();
}
