/* worker.c - stoker-worker, the data-group sidecar: its options (one table
 * for the command line, --config, --help and --print-config), start-up
 * (token, TLS, the gRPC server, the coordinator session, /metrics), the
 * run loop until a signal, the coordinator's Shutdown, a rejection or the
 * orphan timeout, and the drain and exit code. Wires the other files:
 * session.c registers with the coordinator and calls worker_job.c's hooks,
 * streams.c serves Worker.Stream from the scheduler (fairsched.c), stats.c and
 * bad_samples.c report. Owns W and opt (worker.h) and the process's exit.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/cpulimit.h"
#include "common/secret.h"
#include "daemon.h"
#include "health.h"
#include "daemon_log.h"
#include "metrics.h"
#include "notify.h"
#include "daemon_options.h"
#include "rpc/memtune.h"
#include "rpc/rpc.h"
#include "stoker/augment.h"
#include "rpc/wire_limits.h"
#include "worker.h"

#define PROGRAM "stoker-worker"

enum {
  EXIT_OK = 0,       /* Shutdown from the coordinator, or SIGTERM/SIGINT */
  EXIT_FAIL = 1,     /* cannot listen, cannot open the dataset, ... */
  EXIT_USAGE = 2,    /* bad option */
  EXIT_ORPHAN = 3,   /* coordinator unreachable past --orphan-timeout-s */
  EXIT_REJECTED = 4, /* the coordinator rejected this worker (job/dataset) */
  EXIT_ABORTED = 5   /* Shutdown{failed}: the job was aborted */
};

static const char exit_codes_text[] =
    "  0  shut down by the coordinator (job over), or SIGTERM/SIGINT, after draining\n"
    "  1  runtime failure (cannot listen, cannot open the dataset, ...)\n"
    "  2  usage error (bad option or config file)\n"
    "  3  orphaned: the coordinator was unreachable longer than --orphan-timeout-s\n"
    "  4  rejected by the coordinator (another job, dataset size or fingerprint "
    "differs,\n"
    "     protocol version, wrong token)\n"
    "  5  the job was aborted (a rank or `stoker abort` ended it as failed); the\n"
    "     worker drained (at most 2 s) and exited\n";

/* ---- Options ----------------------------------------------------------- */

worker_opts opt; /* worker.h */

static stk__option options[] = {
    {"coordinator", OPT_STR, "", stk__opt_hostport,
     "host:port of stoker-coordinator (required)", &opt.coordinator, 0, 0},
    {"listen", OPT_STR, "127.0.0.1:0", stk__opt_hostport,
     "address to serve Worker.Stream on (port 0 = any free port)", &opt.listen, 0, 0},
    {"advertise", OPT_STR, "", stk__opt_hostport,
     "host:port clients dial (default: the bound listen address; the host "
     "name when listening on all addresses)",
     &opt.advertise, 0, 0},
    {"data-root", OPT_STR, "", NULL,
     "directory file datasets are read under (never outside it)", &opt.data_root, 0, 0},
    {"plugin-dir", OPT_STR, "", NULL,
     "directory of plugin ops (a job's plugin = NAME loads DIR/NAME.so; default "
     "$STOKER_PLUGIN_DIR; none: jobs naming a plugin are refused)",
     &opt.plugin_dir, 0, 0},
    {"python-path", OPT_STR, "", NULL,
     "directories of python ops' modules, joined by ':' (a chain's "
     "python(module:function) imports module from them only; default "
     "$STOKER_PYTHON_PATH; none: jobs with a python op are refused)",
     &opt.python_path, 0, 0},
    {"instance-type", OPT_STR, "", stk__opt_instance_type,
     "the instance type of this host (e.g. ml.c5.18xlarge; stoker-launch passes what "
     "the scheduler says): shown by stoker status, and what stoker status and stoker "
     "plan --coordinator price this worker's host as",
     &opt.instance_type, 0, 0},
    {"threads", OPT_INT, "0", NULL, "batch builder threads (0 = number of cores)",
     &opt.threads, 0, 1024},
    {"batch-buffers", OPT_INT, "0", NULL,
     "batch buffers, the bound on memory (0 = 2 * threads + 2)", &opt.batch_buffers, 0,
     4096},
    {"max-outstanding", OPT_INT, "64", NULL,
     "unanswered requests allowed per stream (past it: RESOURCE_EXHAUSTED)",
     &opt.max_outstanding, 1, 1 << 20},
    {"chunk-bytes", OPT_INT, "4194304", NULL, "payload bytes per chunk message",
     &opt.chunk_bytes, 4096, STK_MAX_CHUNK_BYTES},
    {"drain-timeout-s", OPT_INT, "10", NULL,
     "on shutdown, time to finish sending what was requested (a second "
     "SIGTERM/SIGINT cuts it short)",
     &opt.drain_timeout_s, 0, 3600},
    {"orphan-timeout-s", OPT_INT, "60", NULL,
     "exit (code 3) when the coordinator is unreachable this long", &opt.orphan_timeout_s,
     1, 86400 * 7},
    STK__OPT_TOKEN_FILE(opt.token_file,
                        "(every call must carry it; sent to the coordinator)"),
    STK__OPT_TOKEN(opt.token),
    {"client-token-file", OPT_STR, "", NULL,
     "for clients or coordinators older than stream tickets: streams may also carry "
     "this token (the coordinator's --client-token-file), which gives this worker the "
     "client token; not needed with a coordinator that mints tickets (role tokens)",
     &opt.client_token_file, 0, 0},
    STK__TLS_SERVER_OPTIONS(opt.tls),
    STK__OPT_PORT_FILE(opt.port_file),
    STK__OPT_STATS_INTERVAL_S(opt.stats_interval_s),
    STK__OPT_MAX_MESSAGE_MB(opt.max_message_mb, "16",
                            "largest gRPC message sent (chunks must fit); requests are "
                            "received with their own small limits (docs/operations.md)"),
    {"max-file-mb", OPT_INT, "64", NULL, "largest dataset file read", &opt.max_file_mb, 1,
     1 << 20},
    {"max-pixels", OPT_INT, "100000000", NULL, "largest decoded image (width*height)",
     &opt.max_pixels, 1, 1LL << 40},
    STK__OPT_LOG_LEVEL(opt.log_level),
    STK__OPT_METRICS_LISTEN(opt.metrics_listen),
    {"bad-log-per-10s", OPT_INT, "100", NULL,
     "at most this many bad-sample log lines per 10 s (each bad file is logged once; "
     "past the limit they are counted and the count logged)",
     &opt.bad_log_per_10s, 0, 1 << 20},
    {"fault-transient-every", OPT_INT, "0", NULL,
     "testing: every Nth batch fails as if out of file descriptors (the stream ends "
     "UNAVAILABLE, the client re-asks); 0 = off",
     &opt.fault_transient_every, 0, 1 << 30},
    STK__SERVE_OPTIONS(opt.serve),
    {"calibrate", OPT_STR, "", NULL,
     "do not serve: build the job file's batches on one thread for --calibrate-s "
     "seconds (dataset under --data-root) and print the images per CPU-second "
     "(stoker plan --calibrate runs this)",
     &opt.calibrate, 0, 0},
    {"calibrate-s", OPT_INT, "5", NULL, "how long --calibrate builds", &opt.calibrate_s,
     1, 3600},
};
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

static char token[STK_TOKEN_MAX + 1]; /* resolved in main (stk__daemon_token) */

/* ---- State ------------------------------------------------------------- */

/* The fields, their owners and their lock rules: worker.h. */
worker_state W = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- main -------------------------------------------------------------- */

static void default_advertise(char *out, size_t len, int port) {
  const char *l = opt.listen;
  const char *colon = strrchr(l, ':');
  size_t hlen = colon ? (size_t)(colon - l) : strlen(l);
  char host[256];
  snprintf(host, sizeof(host), "%.*s", (int)(hlen < 255 ? hlen : 255), l);
  if (!*host || !strcmp(host, "0.0.0.0") || !strcmp(host, "[::]") ||
      !strcmp(host, "::")) {
    if (gethostname(host, sizeof(host) - 1)) snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = 0;
  }
  snprintf(out, len, "%s:%d", host, port);
}

/* The options that no single option's validator can check. 0, or -1
 * after saying why on stderr. */
static int check_usage(void) {
  if (!*opt.coordinator) {
    fprintf(stderr, PROGRAM ": --coordinator host:port is required (see --help)\n");
    return -1;
  }
  if ((opt.chunk_bytes + (64 << 10)) > (opt.max_message_mb << 20)) {
    fprintf(stderr,
            PROGRAM
            ": --chunk-bytes %lld does not fit in --max-message-mb %lld "
            "(with 64 KiB for framing)\n",
            opt.chunk_bytes, opt.max_message_mb);
    return -1;
  }
  return 0;
}

/* The coordinator's stream ticket key and clock (session thread): from
 * now on Worker.Stream takes the tickets of that key until they expire
 * (and those of the previous key for TICKET_GRACE_MS), the worker's own
 * token no longer opens streams, and --client-token-file's token still
 * does (for clients of an older coordinator). Logged as a short hash only. */
#define TICKET_GRACE_MS 120000
static pthread_mutex_t srv_mu = PTHREAD_MUTEX_INITIALIZER; /* guards W.srv */
static void on_ticket(const char *key, uint64_t coordinator_ms) {
  pthread_mutex_lock(&srv_mu);
  int rc = W.srv ? stk__rpc_server_set_ticket_key(W.srv, key, STK__ROLE_CLIENT,
                                                  TICKET_GRACE_MS, coordinator_ms)
                 : -1;
  pthread_mutex_unlock(&srv_mu);
  if (rc) return; /* no server, or no key before and none now */
  if (!*key) {
    LOG_INFO(
        "the coordinator gives no stream tickets now: streams take this worker's "
        "tokens again (the previous key's tickets for %d s)",
        TICKET_GRACE_MS / 1000);
    return;
  }
  uint32_t h = stk_crc32c(0, key, strlen(key));
  LOG_INFO("streams take the coordinator's tickets (key crc32c %08" PRIx32 ")", h);
}

/* Serve until a signal, the coordinator's Shutdown, a rejection or the
 * orphan timeout; returns the exit code. */
static int run_worker(session *sess, stk__rpc_server *srv) {
  int64_t next_stats = stk__now_ms() + opt.stats_interval_s * 1000;
  stats_mark last = {stk__now_ms(), 0, 0};
  int64_t orphan_ms = opt.orphan_timeout_s * 1000;
  for (;;) {
    int sig = stk__signal_pending();
    if (sig) {
      LOG_INFO("signal %d: draining and exiting", sig);
      return EXIT_OK;
    }
    if (__atomic_load_n(&W.shutdown_cmd, __ATOMIC_ACQUIRE))
      return __atomic_load_n(&W.aborted, __ATOMIC_ACQUIRE) ? EXIT_ABORTED : EXIT_OK;
    const char *why = session_failed(sess);
    if (why) {
      int local = session_failed_locally(sess);
      LOG_ERROR("%s (exiting %d)", why, local ? EXIT_FAIL : EXIT_REJECTED);
      return local ? EXIT_FAIL : EXIT_REJECTED;
    }
    int64_t lost = session_lost_ms(sess);
    if (lost > orphan_ms) {
      LOG_ERROR(
          "coordinator %s unreachable for %lld s (--orphan-timeout-s %lld): "
          "exiting as an orphan (code %d)",
          opt.coordinator, (long long)(lost / 1000), opt.orphan_timeout_s, EXIT_ORPHAN);
      return EXIT_ORPHAN;
    }
    /* grpc.health.v1: SERVING while registered with a job whose dataset
     * is open, NOT_SERVING before, while the coordinator is lost, and
     * from the drain on */
    stk__health_set(current_sched() != NULL && lost == 0 &&
                    !__atomic_load_n(&W.draining, __ATOMIC_ACQUIRE));
    int64_t now = stk__now_ms();
    sched *s = current_sched();
    if (s) fairsched_reap(s, now, (int)(opt.serve.send_stall_s * 1000));
    int stats_due = now >= next_stats;
    notify_progress(sess, stats_due);
    stk__notify_tick(now);
    stk__health_tick(now);
    stk__rpc_malloc_tick(now);
    if (stats_due) {
      stats_log(srv, now, lost != 0, &last);
      next_stats = now + opt.stats_interval_s * 1000;
    }
    stk__sleep_ms(50);
  }
}

/* Drain: no new streams; open streams finish what they were asked, for up
 * to --drain-timeout-s (2 s when the job failed: nobody is left to serve). */
static void drain(sched *s, int code) {
  __atomic_store_n(&W.draining, 1, __ATOMIC_RELEASE);
  stk__notify_stopping("draining");
  stk__health_set(0);
  if (!s) return;
  fairsched_drain(s);
  long long drain_s =
      code == EXIT_ABORTED && opt.drain_timeout_s > 2 ? 2 : opt.drain_timeout_s;
  int64_t until = stk__now_ms() + drain_s * 1000;
  fairsched_stats st;
  for (;;) {
    fairsched_stats_get(s, &st);
    if (!st.active_streams || stk__now_ms() >= until) break;
    stk__notify_tick(stk__now_ms());
    if (stk__signal_count() >= 2) {
      LOG_WARN("second signal: not waiting for the drain");
      break;
    }
    stk__sleep_ms(20);
  }
  if (st.active_streams)
    LOG_WARN("drain timeout: cancelling %u streams", st.active_streams);
}

int main(int argc, char **argv) {
  int pr = stk__daemon_init(PROGRAM, options, NOPTIONS, argc, argv,
                            "Serves batches of the coordinator's job to training clients "
                            "(Worker.Stream).",
                            exit_codes_text);
  int code = pr == OPTS_EXIT_OK ? EXIT_OK : EXIT_USAGE;
  if (pr != OPTS_RUN) goto out;
  if (*opt.calibrate) {
    code = worker_calibrate();
    goto out;
  }
  if (check_usage()) {
    code = EXIT_USAGE;
    goto out;
  }
  if (stk__daemon_token(opt.token, opt.token_file, argc, argv, token, sizeof(token))) {
    code = EXIT_USAGE;
    goto out;
  }
  {
    char terr[512];
    if (stk__daemon_tls(&opt.tls, " (the worker serves clients with them)", &W.tls, terr,
                        sizeof(terr))) {
      fprintf(stderr, PROGRAM ": %s\n", terr);
      code = EXIT_USAGE;
      goto out;
    }
  }
  stk__daemon_start();
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  W.threads = opt.threads ? (uint32_t)opt.threads : (uint32_t)(ncpu > 0 ? ncpu : 1);
  {
    stk__cpu_limit lim;
    stk__cpu_limit_read("/", stk__affinity_cpus(), &lim);
    W.cpu_cores = lim.cores;
    LOG_INFO("CPU: %.2f usable cores (%s)", lim.cores, lim.source);
  }
  {
    /* builders hold up to STK_BUILDER_MAX_FILES each; gRPC, clients and
     * the session need more. Below that, builds slow down (one file at a
     * time) or fail transiently (clients re-ask); never wrong data. */
    uint64_t soft, hard, want = (uint64_t)W.threads * (STK_BUILDER_MAX_FILES + 1) + 256;
    if (stk__raise_nofile(&soft, &hard) == 0 && soft < want)
      LOG_WARN("open-file limit %" PRIu64 " is low for %u builder threads (about %" PRIu64
               " wanted): reads will slow down under descriptor pressure; raise "
               "`ulimit -n` (hard) or LimitNOFILE",
               soft, W.threads, want);
  }

  /* {path, request type, receive limit, unary, stream, no_token, roles} */
  static const stk__rpc_method methods[] = {
      {"/stoker.v1.Worker/Stream", &stoker__v1__batch_request__descriptor,
       STK_MAX_REQUEST_MSG, NULL, &stream_ops, 0, STK__ROLE_CLIENT},
      STK__HEALTH_METHODS,
  };
  stk__health_init("stoker.v1.Worker", opt.serve.health_watch_lease_s * 1000);
  stk__rpc_server *srv = NULL;
  int port = 0;
  char err[512];
  /* With --client-token-file, streams may carry the clients' token (for
   * older clients and coordinators), and the worker's own (its coordinator
   * credential) no longer opens them; the coordinator's tickets, once their key
   * comes (on_ticket), open them too. */
  stk__role_tokens roles;
  if (stk__daemon_role_tokens(NULL, opt.client_token_file, NULL, &roles)) {
    code = EXIT_USAGE;
    goto out;
  }
  if (stk__daemon_serve(opt.listen, methods, sizeof(methods) / sizeof(methods[0]),
                        opt.max_message_mb, roles.n ? NULL : token, &roles, W.tls,
                        &opt.serve, opt.port_file, &srv, &port, err, sizeof(err))) {
    LOG_ERROR("%s", err);
    code = EXIT_FAIL;
    goto out;
  }
  pthread_mutex_lock(&srv_mu);
  W.srv = srv;
  pthread_mutex_unlock(&srv_mu);
  char advertise[300], host[256], worker_id[400];
  if (*opt.advertise) snprintf(advertise, sizeof(advertise), "%s", opt.advertise);
  else default_advertise(advertise, sizeof(advertise), port);
  if (gethostname(host, sizeof(host) - 1)) snprintf(host, sizeof(host), "localhost");
  host[sizeof(host) - 1] = 0;
  snprintf(worker_id, sizeof(worker_id), "%s:%d:%lld", host, (int)getpid(),
           (long long)stk__now_ms());
  if (strlen(advertise) >= STK_MAX_ID_BYTES || strlen(worker_id) >= STK_MAX_ID_BYTES) {
    LOG_ERROR(
        "the advertised address or worker id is over %d bytes (the coordinator "
        "would refuse it): %.60s...",
        STK_MAX_ID_BYTES - 1,
        strlen(advertise) >= STK_MAX_ID_BYTES ? advertise : worker_id);
    stk__rpc_server_stop(srv, 0);
    code = EXIT_USAGE;
    goto out;
  }
  LOG_INFO(
      "listening on %s port %d (%s), advertising %s, %u builder threads, "
      "coordinator %s",
      opt.listen, port, stk__tls_describe(W.tls), advertise, W.threads, opt.coordinator);

  session_config cfg = {opt.coordinator, token,     W.tls,       worker_id,
                        advertise,       W.threads, W.cpu_cores, opt.instance_type};
  session_hooks hooks = {on_job, fill_stats, on_command, fill_hello, on_ticket};
  session *sess = NULL;
  if (session_start(&cfg, &hooks, &sess)) {
    LOG_ERROR("cannot start the coordinator session");
    stk__rpc_server_stop(srv, 0);
    code = EXIT_FAIL;
    goto out;
  }
  stk__metrics_server *ms = NULL;
  code = stk__daemon_metrics(opt.metrics_listen, worker_metrics, NULL, NULL, &ms)
             ? EXIT_FAIL
             : run_worker(sess, srv);
  sched *s = current_sched();
  drain(s, code);
  pthread_mutex_lock(&srv_mu); /* the session thread may be in on_ticket */
  W.srv = NULL;
  pthread_mutex_unlock(&srv_mu);
  stk__rpc_server_stop(srv, 500);
  session_stop(sess);
  stk__metrics_stop(ms);
  if (s) {
    fairsched_stats st;
    fairsched_stats_get(s, &st);
    LOG_INFO("exiting (code %d): %" PRIu64 " batches built, %" PRIu64
             " bytes sent; substituted=%" PRIu64 " transient_errors=%" PRIu64
             " transient_retries=%" PRIu64 " reread=%" PRIu64,
             code, st.batches_built, fairsched_bytes_sent(s), st.samples_substituted,
             st.transient_errors, st.transient_retries, st.samples_reread);
  } else {
    LOG_INFO("exiting (code %d)", code);
  }
  fairsched_destroy(s, 2000);
  stk_dataset_close(W.ds);
  free(W.class_ptrs);
out:
  stk__tls_free(W.tls);
  stk__options_free(options, NOPTIONS);
  return code;
}
