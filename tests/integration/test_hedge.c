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
 * reference; rank 1 sent hedges and won at least one. The first stop lasts
 * until a hedge has won (bounded), so "won > 0" never depends on how fast
 * this machine is: a stopped worker keeps its requests until they are
 * late, and a late request is hedged to the running worker. Printed, not
 * asserted (they depend on the load): each run's stall %, hedges sent,
 * won and dropped.
 *
 * usage: test_hedge <stoker-coordinator> <stoker-worker>
 */
#include <signal.h>
#include <sys/wait.h>

#include "common/clock.h"
#include "daemon_util.h"
#include "e2e_util.h"

#define STEPS 100

static int rank_done; /* the current run's rank thread has returned */

static void *rank_thread(void *arg) {
  rank_main(arg);
  __atomic_store_n(&rank_done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static int finished(rank_run *r) {
  return __atomic_load_n(&rank_done, __ATOMIC_ACQUIRE) ||
         __atomic_load_n(&r->progress, __ATOMIC_ACQUIRE) >= STEPS;
}

static uint64_t hedges_won(rank_run *r) {
  stk_stats st;
  return rank_stats(r, &st) == 0 ? st.hedges_won : 0;
}

/* Stop the victim and wait until the kernel says it is stopped. */
static void stop(stk_proc *v) {
  proc_signal(v, SIGSTOP);
  int wst = 0;
  CHECK(waitpid(v->pid, &wst, WUNTRACED) == v->pid && WIFSTOPPED(wst));
}

/* Run rank `rank` to the end of its epoch; with cycles, the victim is
 * stopped 1 s of every 1.5 s meanwhile (the first stop also until a hedge
 * has won, when want_win, bounded by 20 s). */
static void run(rank_run *r, uint32_t rank, int port, stk_proc *victim, int cycles,
                int want_win) {
  rank_init(r);
  r->port = port, r->rank = rank, r->world = 3, r->finish = 1;
  r->prefetch = 8;
  r->step_ms = 20;
  pthread_t t;
  __atomic_store_n(&rank_done, 0, __ATOMIC_RELEASE);
  pthread_create(&t, NULL, rank_thread, r);
  /* the rank is streaming before the first stop (bounded: 60 s) */
  for (int i = 0;
       i < 12000 && __atomic_load_n(&r->progress, __ATOMIC_ACQUIRE) < 5 && !finished(r);
       i++)
    du_sleep_ms(5);
  for (int n = 0; cycles && !finished(r); n++) {
    stop(victim);
    int64_t t0 = stk__now_ms();
    while (!finished(r) &&
           (stk__now_ms() - t0 < 1000 ||
            (n == 0 && want_win && !hedges_won(r) && stk__now_ms() - t0 < 20000)))
      du_sleep_ms(5);
    proc_signal(victim, SIGCONT);
    for (int64_t t1 = stk__now_ms(); !finished(r) && stk__now_ms() - t1 < 500;)
      du_sleep_ms(5);
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
  /* 8 samples x 1 ms of CPU: ~8 ms a batch per builder; 100 steps a rank */
  const char *job[] = {"--set", "num_samples=2400", "--set", "batch_size=8", "--set",
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
  CHECK(du_start_worker(&p[1], "victim", port, wargs) > 0);
  CHECK(du_start_worker(&p[2], "steady", port, wargs) > 0);
  stk__rpc_channel *ch = du_channel(port);
  CHECK(du_wait_workers(ch, 2, 10000) == 0);
  stk__rpc_channel_close(ch);
  if (check_failures) CHECK_DONE();

  rank_run r[3];
  run(&r[0], 0, port, &p[1], 0, 0);
  run(&r[1], 1, port, &p[1], 1, 1);
  CHECK(r[1].stats.hedges_sent > 0);
  CHECK(r[1].stats.hedges_won > 0);
  CHECK(r[1].stats.hedges_won <= r[1].stats.hedges_sent);
  /* hedging off: the environment is read when a client opens; no client
   * is open now */
  setenv("STOKER_HEDGE", "0", 1);
  run(&r[2], 2, port, &p[1], 1, 0);
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
