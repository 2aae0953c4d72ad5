/* coordinator.c - stoker-coordinator's main: the shared daemon start-up
 * (daemon.h), the job and its state journal, the Coordinator service's
 * method table, the main loop (signals, idle timeout, heartbeat lapses,
 * watches, the stats line) and the orderly end (every worker told to shut
 * down and waited for, bounded; lingering after a restart). Wires the
 * other files together; owns the credentials, and carries out the end of
 * the job (C.shutting_down, C.done). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/secret.h"
#include "coordinator.h"
#include "health.h"
#include "daemon_log.h"
#include "notify.h"
#include "rpc/memtune.h"

/* Credentials, read in main before the server starts; read-only after. */
static char token[STK_TOKEN_MAX + 1]; /* resolved in main (stk__daemon_token) */
static stk__role_tokens roles;        /* --*-token-file, read in main */

/* Run the job until a shutdown is requested (all ranks finished, rank 0
 * asked, an abort, a signal or the idle timeout); returns the exit code. */
static int run_job(stk__rpc_server *srv) {
  int64_t next_stats = stk__now_ms() + opt.stats_interval_s * 1000;
  int64_t last_stats = stk__now_ms();
  uint64_t last_bytes = 0, last_shed = 0;
  for (;;) {
    int sig = stk__signal_pending();
    int64_t now = stk__now_ms();
    pthread_mutex_lock(&C.mu);
    if (sig) {
      char why[64];
      snprintf(why, sizeof(why), "signal %d", sig);
      if (!C.shutdown_req) C.by_signal = 1;
      state_request_shutdown_locked(EXIT_OK, why);
    }
    if (!ranks_watch_holds_locked(now) &&
        now - C.last_touch_ms > opt.idle_timeout_s * 1000)
      state_request_shutdown_locked(EXIT_IDLE, "idle timeout: no client touched the job");
    int req = C.shutdown_req;
    pthread_mutex_unlock(&C.mu);
    if (req) {
      persist_sync(); /* the end (a signal, the idle timeout) before telling workers */
      return req - 1;
    }
    stk__notify_tick(now);
    stk__health_tick(now);
    stk__rpc_malloc_tick(now);
    workers_check_heartbeats();
    tickets_tick();
    publish_tick(now);
    ranks_watch_pump_all();
    persist_expect_expire();
    if (now >= next_stats) {
      status_log_stats(now, &last_stats, &last_bytes);
      stk__rpc_server_stats rs;
      stk__rpc_server_stats_get(srv, &rs);
      if (rs.shed > last_shed)
        LOG_WARN("%" PRIu64
                 " calls shed since the last stats line: their callers' "
                 "deadlines passed while they waited for a serving thread (this "
                 "coordinator is behind its load; the callers ask again)",
                 rs.shed - last_shed);
      last_shed = rs.shed;
      next_stats = now + opt.stats_interval_s * 1000;
    }
    stk__sleep_ms(50);
  }
}

/* Tell every worker to shut down (also ones that register meanwhile), then
 * wait up to the grace period for them to drain and disconnect. */
static void shut_down_workers(void) {
  pthread_mutex_lock(&C.mu);
  LOG_INFO("shutting down the job: %s", C.shutdown_reason);
  C.shutting_down = 1;
  stk__health_set(0);
  pthread_cond_broadcast(&C.cv);
  char st[sizeof(C.shutdown_reason) + 40];
  snprintf(st, sizeof(st), "shutting down: %s", C.shutdown_reason);
  pthread_mutex_unlock(&C.mu);
  stk__notify_stopping(st);
  int64_t now = stk__now_ms(), until = now + opt.shutdown_grace_s * 1000;
  pthread_mutex_lock(&C.mu);
  int64_t linger_until = C.seen_earlier && !C.by_signal ? now + opt.linger_s * 1000 : 0;
  pthread_mutex_unlock(&C.mu);
  if (linger_until > until) until = linger_until;
  if (linger_until > now)
    LOG_INFO(
        "the job began before this coordinator started: staying up %lld s "
        "(--linger-s) to tell workers that come back to shut down",
        opt.linger_s);
  for (;;) {
    stk__notify_tick(stk__now_ms());
    workers_send_shutdowns();
    publish_tick(stk__now_ms());
    ranks_watch_pump_all();
    persist_expect_expire();
    pthread_mutex_lock(&C.mu);
    /* Workers registered before a restart and not back yet (state journal)
     * still need their Shutdown: wait for them too (--rejoin-wait-s, and
     * within the grace). */
    size_t left = state_nworkers_locked() + C.nexpect;
    pthread_mutex_unlock(&C.mu);
    if (!left && stk__now_ms() >= linger_until) break;
    if (stk__signal_count() >= 2) {
      LOG_WARN("second signal: not waiting for %zu workers", left);
      break;
    }
    if (stk__now_ms() >= until) {
      pthread_mutex_lock(&C.mu);
      size_t nexp = C.nexpect;
      pthread_mutex_unlock(&C.mu);
      LOG_WARN(
          "%zu workers still connected after %lld s (%zu known before a restart "
          "never came back); exiting anyway",
          left - nexp, opt.shutdown_grace_s, nexp);
      break;
    }
    stk__sleep_ms(20);
  }
  pthread_mutex_lock(&C.mu);
  C.done = 1;
  pthread_mutex_unlock(&C.mu);
}

/* Serve the Coordinator service on opt.listen and write the port file.
 * 0, or -1 with err. */
static int start_server(stk__rpc_server **srv, char *err, size_t errlen) {
  /* {path, request type, receive limit (wire_limits.h), unary, stream,
   * no_token, roles}. The unary handlers only take C.mu briefly: they run
   * inline on the rpc layer's threads. Roles (with role tokens): workers
   * open sessions and read the job's state (Status, cut down), clients
   * join/watch/finish/report and read the whole Status, admin does
   * everything. */
  static const stk__rpc_method methods[] = {
      {"/stoker.v1.Coordinator/WorkerSession", &stoker__v1__worker_message__descriptor,
       STK_MAX_SESSION_MSG, NULL, &session_ops, 0, STK__ROLE_WORKER},
      {"/stoker.v1.Coordinator/Join", &stoker__v1__join_request__descriptor,
       STK_MAX_CONTROL_MSG, ranks_join, NULL, 0, STK__ROLE_CLIENT},
      {"/stoker.v1.Coordinator/WatchWorkers", &stoker__v1__watch_request__descriptor,
       STK_MAX_CONTROL_MSG, NULL, &watch_ops, 0, STK__ROLE_CLIENT},
      {"/stoker.v1.Coordinator/Finish", &stoker__v1__finish_request__descriptor,
       STK_MAX_CONTROL_MSG, ranks_finish, NULL, 0, STK__ROLE_CLIENT},
      {"/stoker.v1.Coordinator/Status", &stoker__v1__status_request__descriptor,
       /* the worker role gets the job's state only (a data host's launcher
        * waits on it); the job spec, every worker's address and bad-file
        * paths are for clients (status_handle) */
       STK_MAX_CONTROL_MSG, status_handle, NULL, 0, STK__ROLE_CLIENT | STK__ROLE_WORKER},
      {"/stoker.v1.Coordinator/ReportStats", &stoker__v1__client_stats__descriptor,
       STK_MAX_CONTROL_MSG, status_report_stats, NULL, 0, STK__ROLE_CLIENT},
      STK__HEALTH_METHODS,
  };
  int port = 0;
  stk__health_init("stoker.v1.Coordinator", opt.serve.health_watch_lease_s * 1000);
  if (stk__daemon_serve(opt.listen, methods, sizeof(methods) / sizeof(methods[0]),
                        opt.max_message_mb, token, &roles, C.tls, &opt.serve,
                        opt.port_file, srv, &port, err, errlen))
    return -1;
  /* Under C.mu: the server takes calls already, and a registering worker
   * may resolve the job's size meanwhile. */
  pthread_mutex_lock(&C.mu);
  LOG_INFO("job %s (hash %016" PRIx64
           ", world_size %u, batch_size %u, %s samples) "
           "listening on %s port %d (%s)",
           C.spec.name, C.hash, C.spec.world_size, C.spec.batch_size,
           C.resolved ? "known" : "unknown until a worker registers", opt.listen, port,
           stk__tls_describe(C.tls));
  /* The idle clock runs from here: a slow start (a journal replayed, a
   * loaded host) does not spend the time clients have to arrive. */
  state_touch_locked();
  pthread_mutex_unlock(&C.mu);
  stk__health_set(1); /* accepting joins (grpc.health.v1) until the shutdown */
  return 0;
}

/* --help-job-keys: the job keys from core's option table (stk_job_key),
 * one per line: name, type, meaning. */
static void print_job_keys(void) {
  const char *name, *type, *help;
  printf("job keys ('key = value' lines of --job FILE, or --set key=value):\n");
  for (size_t i = 0; stk_job_key(i, &name, &type, &help) == STK_OK; i++)
    printf("  %-20s %-14s %s\n", name, type, help);
}

int main(int argc, char **argv) {
  int pr = stk__daemon_init(
      PROGRAM, options, noptions, argc, argv,
      "Runs one stoker job: worker sessions, client joins, finish, status.",
      exit_codes_text);
  int code = pr == OPTS_EXIT_OK ? EXIT_OK : EXIT_USAGE;
  char err[600];
  if (pr != OPTS_RUN) goto out;
  if (opt.help_job_keys) {
    print_job_keys();
    code = EXIT_OK;
    goto out;
  }
  if (state_load_job(err, sizeof(err)) ||
      stk__daemon_tls(&opt.tls, "", &C.tls, err, sizeof(err))) {
    fprintf(stderr, PROGRAM ": %s\n", err);
    code = EXIT_USAGE;
    goto out;
  }
  if (opt.print_job) {
    printf("%s# hash = %016" PRIx64 "%s\n", C.canonical, C.hash,
           C.resolved ? "" : " (num_samples from the dataset: changes once known)");
    code = EXIT_OK;
    goto out;
  }
  if (stk__daemon_token(opt.token, opt.token_file, argc, argv, token, sizeof(token)) ||
      stk__daemon_role_tokens(opt.worker_token_file, opt.client_token_file,
                              opt.admin_token_file, &roles)) {
    code = EXIT_USAGE;
    goto out;
  }
  if (roles.n && *token)
    LOG_WARN(
        "role tokens are set and so is the shared token (--token-file, $STOKER_TOKEN): "
        "the shared one still grants every role");
  /* With role tokens, clients stream with per-worker tickets (tickets.c)
   * and workers never see the client token. */
  if (tickets_init(roles.n > 0, opt.ticket_ttl_s)) {
    LOG_ERROR("cannot draw the stream ticket key: getrandom failed");
    code = EXIT_FAIL;
    goto out;
  }
  /* Every rank holds a watch, and now and then a short call: a job of
   * thousands of ranks needs more open calls than the default table
   * holds. Left at its default, --max-calls grows with the job. */
  if (opt.serve.max_calls == STK__DEFAULT_MAX_CALLS &&
      2LL * C.spec.world_size + 1024 > STK__DEFAULT_MAX_CALLS) {
    opt.serve.max_calls = 2LL * C.spec.world_size + 1024;
    LOG_INFO(
        "--max-calls %lld for world_size %u (2 per rank + 1024; the default %d "
        "holds fewer)",
        opt.serve.max_calls, C.spec.world_size, STK__DEFAULT_MAX_CALLS);
  }
  stk__daemon_start();
  C.start_ms = C.last_touch_ms = stk__now_ms();
  /* List versions are never 0 (a watcher that knows nothing gets the list
   * at once) and start from the wall clock, so a restarted coordinator
   * does not reuse a version its clients saw with another list. */
  C.first_version = ((uint64_t)time(NULL) << 20) | 1;
  if (*opt.state_dir && (code = persist_open(err, sizeof(err))) != EXIT_OK) {
    LOG_ERROR("%s", err);
    goto out;
  }
  publish_tick(stk__now_ms()); /* the first version (empty) before any join */
  if (resolve_start((int)opt.resolve_threads, opt.resolve_timeout_ms)) {
    LOG_ERROR("cannot start the resolver threads");
    code = EXIT_FAIL;
    goto out;
  }
  stk__rpc_server *srv = NULL;
  if (start_server(&srv, err, sizeof(err))) {
    LOG_ERROR("%s", err);
    code = EXIT_FAIL;
    goto out;
  }
  /* /metrics names the workers (id, address) only to scrapes that could
   * read them from Status: with a token that may call it (the shared,
   * client or admin token), or, with no token, from loopback (everyone
   * under --insecure), as protected mode serves Status. */
  stk__metrics_access macc = {.open = opt.serve.insecure};
  if (*token) macc.tokens[macc.ntokens++] = token;
  for (size_t i = 0; i < roles.n; i++)
    if (roles.creds[i].roles & (STK__ROLE_CLIENT | STK__ROLE_ADMIN))
      macc.tokens[macc.ntokens++] = roles.creds[i].token;
  /* a worker token alone: nobody may call Status, nobody sees the names */
  macc.closed = roles.n && !macc.ntokens;
  stk__metrics_server *ms = NULL;
  if (stk__daemon_metrics(opt.metrics_listen, status_metrics, NULL, &macc, &ms)) {
    stk__rpc_server_stop(srv, 0);
    code = EXIT_FAIL;
    goto out;
  }
  stk__notify_ready("accepting workers and ranks");
  code = run_job(srv);
  shut_down_workers();
  stk__rpc_server_stop(srv, 1000);
  stk__metrics_stop(ms);
  if (persist_enabled()) {
    uint64_t jw, jn, by[3];
    persist_figures(&jw, &jn, by);
    LOG_INFO("state journal: %" PRIu64 " snapshots written by its writer thread, %" PRIu64
             " by main, %" PRIu64 " written or waited for by serving threads",
             by[0], by[2], by[1]);
  }
  LOG_INFO("exiting (code %d)", code);
out:
  /* First: the journal's writer may still list or unlist workers whose
   * sessions ended at the stop (coord_workers.c), which needs C whole. */
  resolve_stop(); /* after the server: no session holds a check */
  persist_close();
  stk__options_free(options, noptions);
  for (uint32_t r = 0; C.ranks && r < C.spec.world_size; r++) free(C.ranks[r].holder);
  free(C.canonical), free(C.joined), free(C.finished), free(C.ranks);
  stk__tls_free(C.tls);
  for (size_t i = 0; i < C.nexpect; i++) free(C.expect[i]);
  free(C.expect);
  for (uint32_t i = 0; C.classes && i < C.nclasses; i++) free(C.classes[i]);
  free(C.classes);
  publish_free();
  tickets_free();
  return code;
}
