/* test_resident.c - a rank's and a worker's batch buffers are resident
 * from the start, so their RSS does not rise by a batch when a buffer is
 * first used late (a rank's hedge buffers when hedging first fires, a
 * worker's deepest free buffer when a slow client holds the others):
 *   - a real coordinator and one real worker with 224x224 batches of 32
 *     (4.8 MB): once registered, before it built anything for a client,
 *     the worker's VmRSS is at least its batch buffers (count and size
 *     from its "job loaded" log line);
 *   - a libstoker rank in this process: stk_client_open raises this
 *     process's VmRSS by at least 95 % of its pool (prefetch + slots +
 *     hedge buffers, each the batch's bytes); then it reads its epoch,
 *     finishes, and every process exits 0.
 * Guaranteed by the code (pages written at allocation), not by timing.
 *
 * usage: test_resident <stoker-coordinator> <stoker-worker>
 */
#include <signal.h>

#include "daemon_util.h"
#include "stoker/client.h"

/* VmRSS of pid in KiB (0 = this process), or -1. */
static long rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, pid ? "/proc/%d/status" : "/proc/self/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  fclose(f);
  return kib;
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  const char *job[] = {"--set", "num_samples=64", "--set", "batch_size=32", "--set",
                       "height=224", "--set", "width=224", "--set", "world_size=1",
                       "--set", "epochs=1",
                       /* 0.64 s of CPU a batch, so the rank measures its pool before a
                        * batch lands in it (a batch landing early cannot fail
                        * the check, only blur it) */
                       "--set", "synthetic_cost_us=20000", NULL};
  stk_proc p[2];
  memset(p, 0, sizeof(p));
  int port = du_start_coordinator(&p[0], "coordinator", job);
  CHECK(port > 0);
  if (port <= 0) CHECK_DONE();
  const char *wargs[] = {"--threads", "1", NULL};
  CHECK(du_start_worker(&p[1], "worker", port, wargs) > 0);
  stk__rpc_channel *ch = du_channel(port);
  CHECK(du_wait_workers(ch, 1, 20000) == 0);
  stk__rpc_channel_close(ch);
  if (check_failures) CHECK_DONE();

  /* The worker: resident buffers before any client asked for a batch. */
  char *log = proc_read_log(&p[1]);
  const char *at = log ? strstr(log, "batch_bytes=") : NULL;
  unsigned long long wbytes = 0;
  int nbuf = 0;
  CHECK(at && sscanf(at, "batch_bytes=%llu buffers=%d", &wbytes, &nbuf) == 2);
  free(log);
  long wrss = rss_kib(p[1].pid);
  printf("worker: %d batch buffers of %llu bytes; VmRSS %ld KiB\n", nbuf, wbytes, wrss);
  CHECK(nbuf >= 1 && wrss * 1024.0 >= (double)nbuf * (double)wbytes);

  /* The rank: its whole pool resident once open returns. */
  char addr[64], err[512] = "";
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = addr;
  cfg.rank = 0;
  cfg.world_size = 1;
  cfg.prefetch = 8;
  cfg.join_timeout_ms = 20000;
  long before = rss_kib(0);
  stk_client *c = NULL;
  int st = stk_client_open(&cfg, &c, err, sizeof err);
  if (st != STK_OK) fprintf(stderr, "open: %s: %s\n", stk_strerror(st), err);
  CHECK(st == STK_OK);
  if (st != STK_OK) {
    proc_signal(&p[1], SIGTERM);
    proc_signal(&p[0], SIGTERM);
    proc_wait(&p[1], 20000);
    proc_wait(&p[0], 20000);
    CHECK_DONE();
  }
  long after = rss_kib(0);
  stk_job_spec spec;
  stk_client_job(c, &spec);
  stk_batch_layout L;
  CHECK(stk_batch_layout_of(&spec, &L) == STK_OK);
  /* prefetch requests + slots + hedge buffers (a quarter of prefetch, at
   * least 2: client/ring.c) */
  double pool = (double)(cfg.prefetch + cfg.slots + 2) * (double)L.total_bytes;
  printf(
      "rank: pool %.1f MiB (%u + %u + 2 buffers of %llu bytes); VmRSS %ld -> %ld KiB "
      "(+%.1f MiB)\n",
      pool / 1048576.0, cfg.prefetch, cfg.slots, (unsigned long long)L.total_bytes,
      before, after, (after - before) / 1024.0);
  CHECK(before > 0 && (after - before) * 1024.0 >= 0.95 * pool);

  uint64_t got = 0;
  for (;;) {
    stk_batch *b = NULL;
    int s = stk_client_next(c, &b);
    if (s == STK_END_OF_EPOCH) continue;
    if (s != STK_OK) {
      CHECK(s == STK_END_OF_DATA);
      break;
    }
    got++;
    stk_batch_release(b);
  }
  CHECK_EQ_U64(got, stk_client_steps_per_epoch(c));
  CHECK(stk_client_finish(c, 1) == STK_OK);
  stk_client_close(c);
  int codes[2] = {proc_wait(&p[0], 30000), proc_wait(&p[1], 30000)};
  CHECK(codes[0] == 0 && codes[1] == 0);
  if (check_failures) {
    proc_dump_log(&p[0]);
    proc_dump_log(&p[1]);
  }
  CHECK_DONE();
}
