/* test_coordinator_state.c - the coordinator's --state-dir refusals and the
 * watch lease, with real processes on 127.0.0.1:
 *  1. an aborted job's coordinator exits 4; started again on its state dir
 *     it exits 4 again at once (the job ended: not run a second time);
 *  2. another job on that state dir: exit 2 and a message naming both
 *     jobs; with --discard-state it runs;
 *  3. a damaged state file (truncated; garbage): exit 1 and a message
 *     naming the file and the line; with --discard-state it runs;
 *  4. a second coordinator on a state dir in use: exit 1, "in use"; one
 *     on a port in use: exit 1 (no silent SO_REUSEPORT sharing);
 *  5. watch lease (without one, a watcher on a dead host would keep a
 *     job from its idle timeout for hours): a watch that is never renewed
 *     (its host went silent) does not hold the job: the coordinator ends it OK
 *     after --watch-lease-s and the idle timeout ends the job (exit 3)
 *     while the connection is still open; a live libstoker client renews
 *     its watch at every lease and keeps an idle job alive, and once it
 *     closes the job ends by the idle timeout.
 *
 * usage: test_coordinator_state <stoker-coordinator> <stoker-worker> [...]
 */
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "daemon_util.h"
#include "stoker/client.h"

static const char *const job_a[] = {"--set", "num_samples=64", "--set", "batch_size=4",
                                    "--set", "height=16",      "--set", "width=16",
                                    "--set", "world_size=1",   "--set", "name=job-a",
                                    NULL};

/* Run a coordinator that is expected to exit at once (a refusal, or an
 * ended job); its exit code (-1 if it kept running 15 s). */
static int run_refused(stk_proc *p, const char *name, const char *sd,
                       const char *const *job, const char *extra) {
  char *argv[40];
  int n = 0;
  argv[n++] = (char *)coord_bin;
  argv[n++] = "--listen";
  argv[n++] = "127.0.0.1:0";
  argv[n++] = "--state-dir";
  argv[n++] = (char *)sd;
  for (; *job; job++) argv[n++] = (char *)*job;
  if (extra) argv[n++] = (char *)extra;
  argv[n] = NULL;
  if (proc_spawn(p, name, argv)) return -1;
  return proc_wait(p, 15000);
}

static void refusals(void) {
  int before = check_failures;
  stk_proc p[8];
  memset(p, 0, sizeof(p));
  char sd[600];
  snprintf(sd, sizeof sd, "%s/a.state", proc_tmpdir());
  const char *sdarg[] = {"--state-dir", sd, NULL};

  /* 1. job A aborted; started again, it ends at once with the same code */
  int port = du_start_coordinator2(&p[0], "a1", job_a, sdarg);
  CHECK(port > 0);
  if (port <= 0) return;
  /* The coordinator answers (bounded wait) before anything else runs. */
  stk__rpc_channel *ch = du_channel(port);
  int up = 0;
  for (int i = 0; i < 100 && !up; i++) {
    Stoker__V1__StatusResponse *st = du_status(ch);
    up = st != NULL;
    if (st) protobuf_c_message_free_unpacked(&st->base, NULL);
  }
  CHECK(up);
  /* 4. meanwhile a second coordinator on the same state dir is refused */
  CHECK(run_refused(&p[1], "a-second", sd, job_a, NULL) == 1);
  CHECK(proc_log_count(&p[1], "in use by another running stoker-coordinator"));
  /* A coordinator on a port in use fails (no SO_REUSEPORT sharing: the
   * kernel would split the connections between the two). */
  char listen[64];
  snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
  char *same_port[] = {(char *)coord_bin, "--listen", listen,         "--set",
                       "num_samples=64",  "--set",    "batch_size=4", "--set",
                       "world_size=1",    NULL};
  stk_proc sp;
  CHECK(proc_spawn(&sp, "same-port", same_port) == 0 && proc_wait(&sp, 15000) == 1);
  CHECK(proc_log_count(&sp, "cannot listen"));
  Stoker__V1__FinishRequest q = STOKER__V1__FINISH_REQUEST__INIT;
  q.rank = 0;
  q.abort_job = 1;
  q.reason = "test abort";
  ProtobufCMessage *r = NULL;
  char det[256];
  int fc = stk__rpc_unary(ch, "/stoker.v1.Coordinator/Finish", &q.base,
                          &stoker__v1__finish_response__descriptor, &r, 10000, det,
                          sizeof det);
  if (fc != GRPC_STATUS_OK) fprintf(stderr, "abort: status %d: %s\n", fc, det);
  CHECK(fc == GRPC_STATUS_OK);
  if (r) protobuf_c_message_free_unpacked(r, NULL);
  stk__rpc_channel_close(ch);
  CHECK(proc_wait(&p[0], 15000) == 4);
  CHECK(run_refused(&p[2], "a2", sd, job_a, NULL) == 4);
  CHECK(proc_log_count(&p[2], "had already ended (rank 0 aborted the job: test abort"));

  /* 2. another job on A's state dir */
  const char *job_b[] = {"--set",        "num_samples=64", "--set",
                         "batch_size=4", "--set",          "world_size=1",
                         "--set",        "name=job-b",     NULL};
  CHECK(run_refused(&p[3], "b-refused", sd, job_b, NULL) == 2);
  CHECK(proc_log_count(&p[3], "holds the state of another job (job-a"));
  CHECK(proc_log_count(&p[3], "this coordinator runs job job-b"));
  /* with --discard-state it runs (and ends on SIGTERM with 0) */
  const char *discard[] = {"--state-dir", sd, "--discard-state", NULL};
  port = du_start_coordinator2(&p[4], "b-discard", job_b, discard);
  CHECK(port > 0);
  CHECK(proc_log_count(&p[4], "--discard-state: the state of job job-a"));
  proc_signal(&p[4], SIGTERM);
  CHECK(proc_wait(&p[4], 15000) == 0);

  /* 3. damaged state files: truncated, then garbage */
  char state[700];
  snprintf(state, sizeof state, "%s/state", sd);
  FILE *f = fopen(state, "r+");
  CHECK(f != NULL);
  if (f) {
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fclose(f);
    CHECK(truncate(state, len - 4) == 0);
  }
  CHECK(run_refused(&p[5], "b-truncated", sd, job_b, NULL) == 1);
  CHECK(proc_log_count(&p[5], "is damaged or not a state file"));
  CHECK(proc_log_count(&p[5], "truncated"));
  f = fopen(state, "w");
  if (f)
    fputs(
        "\x7f"
        "ELF garbage\n\n\x01\x02",
        f),
        fclose(f);
  CHECK(run_refused(&p[6], "b-garbage", sd, job_b, NULL) == 1);
  CHECK(proc_log_count(&p[6], "line 1: not a stoker-coordinator state file"));
  port = du_start_coordinator2(&p[7], "b-garbage-discard", job_b, discard);
  CHECK(port > 0);
  CHECK(proc_log_count(&p[7], "--discard-state: damaged state file"));
  proc_signal(&p[7], SIGTERM);
  CHECK(proc_wait(&p[7], 15000) == 0);
  if (check_failures != before) {
    for (int i = 0; i < 8; i++)
      if (p[i].name[0]) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
  proc_reap_all();
}

/* A watch opened by hand and then never read or renewed: a host that
 * went silent (its TCP connection stays open). */
static void dead_watcher(void) {
  int before = check_failures;
  stk_proc p;
  const char *more[] = {"--idle-timeout-s", "2", "--watch-lease-s", "1", NULL};
  int port = du_start_coordinator2(&p, "lease-dead", job_a, more);
  CHECK(port > 0);
  if (port <= 0) return;
  stk__rpc_channel *ch = du_channel(port);
  stk__rpc_stream *s = NULL;
  CHECK(stk__rpc_stream_open(ch, "/stoker.v1.Coordinator/WatchWorkers", 0, &s) == 0);
  Stoker__V1__WatchRequest q = STOKER__V1__WATCH_REQUEST__INIT;
  q.known_version = 0;
  CHECK(s && stk__rpc_stream_send_msg(s, &q.base) == 0);
  if (s) stk__rpc_stream_close_send(s);
  /* Until the watch is open (its first list came), keep the job touched
   * with refused Joins, so a slow start under load cannot let the idle
   * clock run out before the watch counts. */
  int lists = 0;
  for (int i = 0; i < 200 && s && !lists; i++) { /* bounded: 20 s */
    Stoker__V1__JoinResponse *jr = NULL;
    char jdet[256];
    du_join(ch, 0, 1, STK_PROTOCOL_VERSION + 1, 0, &jr, jdet, sizeof jdet);
    if (jr) protobuf_c_message_free_unpacked(&jr->base, NULL);
    grpc_byte_buffer *bb = NULL;
    if (stk__rpc_stream_recv(s, &bb, 100) == 1) lists++;
    if (bb) grpc_byte_buffer_destroy(bb);
  }
  CHECK(lists == 1);
  int64_t t0 = stk__now_ms();
  /* From here the watch is never read nor renewed. The idle timeout must
   * end the job while the watch's connection is still open (an open watch
   * does not keep the job alive past its lease). */
  int code = proc_wait(&p, 30000);
  printf(
      "dead watcher: the coordinator exited %d %.1f s after the watch opened (idle 2 s, "
      "lease 1 s)\n",
      code, (double)(stk__now_ms() - t0) / 1000.0);
  CHECK(code == 3);
  /* The watch then ended OK at the end of its lease. */
  for (int i = 0; i < 10; i++) {
    grpc_byte_buffer *bb = NULL;
    int rc = s ? stk__rpc_stream_recv(s, &bb, 5000) : -1;
    if (bb) grpc_byte_buffer_destroy(bb);
    if (rc != 1) break;
  }
  char det[256] = "";
  int st = s ? stk__rpc_stream_status(s, 5000, det, sizeof det) : -1;
  printf("dead watcher: its watch ended with status %d (%s)\n", st, det);
  CHECK(st == GRPC_STATUS_OK && strstr(det, "lease"));
  stk__rpc_stream_destroy(s);
  stk__rpc_channel_close(ch);
  if (check_failures != before) {
    proc_dump_log(&p);
    proc_keep_tmp();
  }
  proc_reap_all();
}

typedef struct opener {
  char addr[64];
  stk_client *c;
  int status;
  char err[512];
  volatile int done;
} opener;

static void *open_main(void *arg) {
  opener *o = arg;
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = o->addr;
  cfg.rank = 0;
  cfg.world_size = 1;
  cfg.join_timeout_ms = 30000;
  o->status = stk_client_open(&cfg, &o->c, o->err, sizeof o->err);
  __atomic_store_n(&o->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* A live libstoker client renews its watch at every lease: an idle job
 * (no worker, no batches) stays up past several leases and its idle
 * timeout, and ends by the idle timeout once the client closes. */
static void live_watcher(void) {
  int before = check_failures;
  stk_proc p;
  const char *more[] = {
      "--idle-timeout-s", "6", "--watch-lease-s", "1", "--log-level", "debug", NULL};
  int port = du_start_coordinator2(&p, "lease-live", job_a, more);
  CHECK(port > 0);
  if (port <= 0) return;
  /* Open the client while keeping the job touched (refused Joins count),
   * so a slow start under load cannot let the idle clock run out first. */
  opener o;
  memset(&o, 0, sizeof o);
  snprintf(o.addr, sizeof o.addr, "127.0.0.1:%d", port);
  pthread_t t;
  pthread_create(&t, NULL, open_main, &o);
  stk__rpc_channel *ch = du_channel(port);
  for (int i = 0; i < 600 && !__atomic_load_n(&o.done, __ATOMIC_ACQUIRE); i++) {
    Stoker__V1__JoinResponse *jr = NULL;
    char det[256];
    du_join(ch, 0, 1, STK_PROTOCOL_VERSION + 1, 0, &jr, det, sizeof det);
    if (jr) protobuf_c_message_free_unpacked(&jr->base, NULL);
    stk__sleep_ms(50);
  }
  pthread_join(t, NULL);
  stk__rpc_channel_close(ch);
  CHECK(o.status == STK_OK);
  if (o.status != STK_OK) fprintf(stderr, "open: %s\n", o.err);
  /* Wait (bounded) for 8 watches: over 7 s of leases, past the 6 s idle
   * timeout, with nothing but the renewed watch touching the job. */
  int n = 0;
  for (int64_t until = stk__now_ms() + 60000;
       stk__now_ms() < until && proc_wait(&p, 0) == -1;) {
    n = proc_log_count(&p, "opened, lease 1 s");
    if (n >= 8) break;
    stk__sleep_ms(100);
  }
  printf("live watcher: %d watches opened; coordinator %s\n", n,
         proc_wait(&p, 0) == -1 ? "running" : "exited");
  CHECK(n >= 8);
  CHECK(proc_wait(&p, 0) == -1); /* still running */
  int64_t t0 = stk__now_ms();
  stk_client_close(o.c);
  int code = proc_wait(&p, 30000);
  printf("live watcher: closed; the coordinator exited %d after %.1f s\n", code,
         (double)(stk__now_ms() - t0) / 1000.0);
  CHECK(code == 3);
  if (check_failures != before) {
    proc_dump_log(&p);
    proc_keep_tmp();
  }
  proc_reap_all();
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  refusals();
  dead_watcher();
  live_watcher();
  stk__rpc_shutdown();
  CHECK_DONE();
}
