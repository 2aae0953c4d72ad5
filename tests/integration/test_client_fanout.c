/* test_client_fanout.c - a rank's threads do not grow with the number of
 * workers it streams from: the same job is read by one rank from 4 and
 * then from 40 single-thread stoker-worker processes (a fresh coordinator
 * each time). The rank's remote streams are served by a fixed pool of io
 * threads, so while every stream is open the test process has as many of
 * libstoker's threads (named "stk-...") in both runs (give or take the
 * gRPC threads that briefly carry an "stk-" name), and in all
 * at most slack() more (gRPC's executor grows with load up to 2 per core,
 * whatever the number of calls), where one thread per worker would add 36.
 * Every worker must
 * build at least one batch (its debug log has a "building" line: the
 * streams are all used, not merely open) and the rank must receive every
 * step exactly once, in order, byte-identical to stk_build_reference.
 *
 * usage: test_client_fanout <stoker-coordinator> <stoker-worker> [...]
 */
#include <dirent.h>
#include <signal.h>

#include "daemon_util.h"
#include "e2e_util.h"

#define FEW            4
#define MANY           40
#define STEPS          240 /* num_samples / batch_size */
#define STK_NAME_SLACK 2   /* gRPC threads seen under a libstoker name (main) */

/* Threads of this process (entries of /proc/self/task), or -1; *stk gets
 * how many of them are libstoker's (named "stk-..."). */
static int thread_count(int *stk) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  *stk = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    n++;
    char path[300], comm[32] = "";
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f && fgets(comm, sizeof(comm), f) && !strncmp(comm, "stk-", 4)) (*stk)++;
    if (f) fclose(f);
  }
  closedir(d);
  return n;
}

/* How many more threads gRPC may run with more calls in flight: its
 * executor grows with load to 2 per core. */
static int slack(void) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  return ncpu > 2 ? 2 * (int)ncpu : 4;
}

/* One rank reads the whole job from n workers. *threads, *stk: the most
 * threads this process had while every stream was open, and libstoker's
 * among them (-1 if never seen). */
static void run(int n, int *threads, int *stk) {
  const char *job[] = {"--set", "num_samples=960",
                       "--set", "batch_size=4",
                       "--set", "height=8",
                       "--set", "width=8",
                       "--set", "world_size=1",
                       "--set", "epochs=1",
                       "--set", "synthetic_cost_us=500",
                       "--set", "seed=11",
                       NULL};
  stk_proc p[MANY + 1];
  memset(p, 0, sizeof(p));
  char name[32];
  snprintf(name, sizeof(name), "coord-%d", n);
  int port = du_start_coordinator(&p[0], name, job);
  CHECK(port > 0);
  if (port <= 0) return;
  const char *wargs[] = {"--threads", "1", "--log-level", "debug", NULL};
  for (int i = 1; i <= n; i++) {
    snprintf(name, sizeof(name), "w%d-%d", n, i);
    CHECK(du_start_worker(&p[i], name, port, wargs) > 0);
  }
  stk__rpc_channel *ch = du_channel(port);
  CHECK(du_wait_workers(ch, (size_t)n, 30000) == 0);
  stk__rpc_channel_close(ch);
  if (check_failures) return;

  rank_run r;
  rank_init(&r);
  r.port = port, r.rank = 0, r.world = 1, r.finish = 1, r.prefetch = 16;
  pthread_t t;
  pthread_create(&t, NULL, rank_main, &r);
  *threads = *stk = -1;
  while (__atomic_load_n(&r.progress, __ATOMIC_ACQUIRE) < STEPS &&
         __atomic_load_n(&r.final_status, __ATOMIC_ACQUIRE) == 0) {
    stk_stats st;
    if (rank_stats(&r, &st) == 0 && st.workers_alive == (uint32_t)n) {
      int ours = 0, k = thread_count(&ours);
      if (k > *threads) *threads = k;
      if (ours > *stk) *stk = ours;
    }
    stk__sleep_ms(5);
  }
  pthread_join(t, NULL);
  if (r.final_status != STK_END_OF_DATA) fprintf(stderr, "rank: %s\n", r.error);
  CHECK(r.final_status == STK_END_OF_DATA);
  CHECK(r.delivered == STEPS);
  CHECK(r.mismatches == 0);
  CHECK(r.order_errors == 0);
  CHECK(*threads > 0);
  int idle = 0;
  for (int i = 1; i <= n; i++) {
    int built = proc_log_count(&p[i], ": building epoch ");
    if (built < 1) fprintf(stderr, "%s built no batch\n", p[i].name), idle++;
  }
  CHECK(idle == 0);
  fprintf(stderr,
          "%d workers: %llu batches, %d threads in this process (%d of libstoker) "
          "while every stream was open, reissued %llu\n",
          n, (unsigned long long)r.delivered, *threads, *stk,
          (unsigned long long)r.stats.reissued);
  /* The rank finished: the job ends and every daemon exits 0. */
  for (int i = 0; i <= n; i++) {
    int code = proc_wait(&p[i], 20000);
    if (code != 0) fprintf(stderr, "%s: exit %d\n", p[i].name, code);
    CHECK(code == 0);
  }
  pthread_mutex_destroy(&r.mu);
  if (check_failures)
    for (int i = 0; i <= n; i++) proc_dump_log(&p[i]);
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  int few = -1, many = -1, few_stk = -1, many_stk = -1;
  run(FEW, &few, &few_stk);
  if (!check_failures) run(MANY, &many, &many_stk);
  fprintf(stderr,
          "threads: %d (libstoker %d) with %d workers, %d (libstoker %d) with %d "
          "workers (slack %d)\n",
          few, few_stk, FEW, many, many_stk, MANY, slack());
  /* A thread that gRPC starts from one of libstoker's carries its name
   * ("stk-io") until gRPC names it, so a sample may count up to 2 more
   * than libstoker's own 5 (seen under ASan: 7 with 4 workers); one thread
   * per worker would add 36. */
  CHECK(few_stk > 0 && many_stk <= few_stk + STK_NAME_SLACK);
  CHECK(few > 0 && many > 0 && many - few <= slack());
  if (check_failures) proc_keep_tmp();
  CHECK_DONE();
}
