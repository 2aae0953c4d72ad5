/* session.c - the worker's coordinator session (see session.h).
 *
 * One thread runs: connect, hello (job_hash 0), wait for RegisterAck, hand
 * the job to the worker (on_job), second hello with the job hash and the
 * dataset's size and fingerprint, then heartbeats every interval while
 * reading commands. On a break it backs off (100 ms doubling to 2 s) and
 * registers again. Owns the channel and the stream. Must not decide to
 * exit: main reads session_lost_ms/session_failed and decides.
 */
#include "common/thread.h"
#include "session.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "daemon.h"
#include "daemon_log.h"
#include "rpc/ticket.h"
#include "rpc/rpc.h"
#include "rpc/wire_limits.h"
#include "stoker/version.h"

struct session {
  session_config cfg;
  char *coordinator, *token, *worker_id, *address;
  session_hooks hooks;
  pthread_t thread;
  pthread_mutex_t mu;
  int stop;
  int64_t lost_since; /* 0 = healthy */
  int64_t warned_ms;  /* last "cannot reach" warning (session thread only) */
  char failed[1200];
  int has_failed;
  int failed_locally; /* on_job said -2 */
};

static int stopping(session *s) {
  pthread_mutex_lock(&s->mu);
  int v = s->stop;
  pthread_mutex_unlock(&s->mu);
  return v;
}

static void set_healthy(session *s, int healthy) {
  pthread_mutex_lock(&s->mu);
  if (healthy) s->lost_since = 0;
  else if (!s->lost_since) s->lost_since = stk__now_ms();
  pthread_mutex_unlock(&s->mu);
}

static void mark_failed(session *s, const char *why) {
  pthread_mutex_lock(&s->mu);
  snprintf(s->failed, sizeof(s->failed), "%s", why);
  s->has_failed = 1;
  pthread_mutex_unlock(&s->mu);
}

/* Tell the coordinator why this worker cannot serve its job (best effort:
 * the worker exits either way). */
static void send_failure(session *s, stk__rpc_stream *st, const char *why) {
  Stoker__V1__WorkerFailure f = STOKER__V1__WORKER_FAILURE__INIT;
  char reason[600];
  snprintf(reason, sizeof(reason), "%s", why);
  f.reason = reason;
  Stoker__V1__WorkerMessage m = STOKER__V1__WORKER_MESSAGE__INIT;
  m.kind_case = STOKER__V1__WORKER_MESSAGE__KIND_FAILURE;
  m.failure = &f;
  if (stk__rpc_stream_send_msg(st, &m.base) || stk__rpc_stream_close_send(st)) return;
  /* The coordinator ends the call once it has read it (bounded wait). */
  char det[64];
  stk__rpc_stream_status(st, 3000, det, sizeof(det));
  (void)s;
}

static int send_hello(session *s, stk__rpc_stream *st, uint64_t job_hash, uint64_t size,
                      uint64_t fp) {
  Stoker__V1__WorkerInfo info = STOKER__V1__WORKER_INFO__INIT;
  info.worker_id = s->worker_id;
  info.address = s->address;
  info.cores = s->cfg.cores;
  info.cpu_cores = s->cfg.cpu_cores;
  info.instance_type = (char *)(s->cfg.instance_type ? s->cfg.instance_type : "");
  Stoker__V1__Register reg = STOKER__V1__REGISTER__INIT;
  reg.worker = &info;
  reg.protocol_version = STK_PROTOCOL_VERSION;
  reg.job_hash = job_hash;
  reg.dataset_size = size;
  reg.dataset_fingerprint = fp;
  reg.takes_ticket = s->hooks.on_ticket != NULL;
  reg.checks_tickets = s->hooks.on_ticket != NULL;
  if (job_hash && s->hooks.fill_hello) s->hooks.fill_hello(&reg);
  Stoker__V1__WorkerMessage m = STOKER__V1__WORKER_MESSAGE__INIT;
  m.kind_case = STOKER__V1__WORKER_MESSAGE__KIND_HELLO;
  m.hello = &reg;
  return stk__rpc_stream_send_msg(st, &m.base);
}

/* Receive one command, polling the stop flag; 1 with *out, 0 end, -1 broken,
 * -3 stopped, -2 when until_ms passed (the receive stays pending). */
static int recv_cmd(session *s, stk__rpc_stream *st, int64_t until_ms,
                    Stoker__V1__CoordinatorCommand **out) {
  *out = NULL;
  for (;;) {
    if (stopping(s)) return -3;
    int64_t left = until_ms - stk__now_ms();
    if (left <= 0) return -2;
    grpc_byte_buffer *bb;
    int r = stk__rpc_stream_recv(st, &bb, left < 200 ? (int)left : 200);
    if (r == -2) continue;
    if (r <= 0) return r;
    *out = (Stoker__V1__CoordinatorCommand *)stk__rpc_unpack(
        &stoker__v1__coordinator_command__descriptor, bb, STK_MAX_COMMAND_MSG);
    grpc_byte_buffer_destroy(bb);
    if (!*out) return -1; /* garbage from the coordinator: reconnect */
    return 1;
  }
}

/* The coordinator ended the stream with a status: a final refusal (see
 * stk__rpc_status: job mismatch, bad hello, wrong token) stops the session
 * for good, since retrying cannot help; anything else is logged and the
 * session reconnects. */
static void session_ended(session *s, stk__rpc_stream *st) {
  char det[1024], why[1100];
  int final, code = stk__rpc_stream_status(st, 1000, det, sizeof(det));
  stk__rpc_status(code, &final);
  if (final) {
    snprintf(why, sizeof(why), "coordinator rejected this worker: %s", det);
    mark_failed(s, why);
  } else {
    LOG_WARN("coordinator %s ended the session: status %d: %s%s", s->cfg.coordinator,
             code, det, stk__tls_hint(s->cfg.tls, det));
  }
}

/* The session broke before registering (no coordinator there, or the
 * connection failed): warn at the first failure and then every 30 s, so a
 * worker that cannot reach its coordinator says why without flooding. */
static void session_unreachable(session *s, stk__rpc_stream *st) {
  int64_t now = stk__now_ms();
  if (s->warned_ms && now - s->warned_ms < 30000) return;
  s->warned_ms = now;
  char det[256];
  int code = stk__rpc_stream_status(st, 200, det, sizeof(det));
  LOG_WARN("cannot register with coordinator %s: status %d: %s%s (retrying)",
           s->cfg.coordinator, code, det, stk__tls_hint(s->cfg.tls, det));
}

/* 1 when t is a stream ticket key: STK__TICKET_KEY_HEX lowercase hex digits. */
static int ticket_key_ok(const char *t) {
  size_t n = strlen(t);
  if (n != STK__TICKET_KEY_HEX) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f'))) return 0;
  return 1;
}

/* Register: first hello, the coordinator's ack with the job, the worker
 * loads (or checks) the job, second hello with the job hash and dataset.
 * Returns the heartbeat interval in ms, or 0 when the session broke or
 * failed for good. */
static int64_t session_register(session *s, stk__rpc_stream *st) {
  Stoker__V1__CoordinatorCommand *cmd = NULL;
  if (send_hello(s, st, 0, 0, 0)) {
    session_unreachable(s, st);
    return 0;
  }
  int r = recv_cmd(s, st, stk__now_ms() + 5000, &cmd);
  if (r != 1 || cmd->kind_case != STOKER__V1__COORDINATOR_COMMAND__KIND_ACK ||
      !cmd->ack->job) {
    if (r == 0) session_ended(s, st);
    else if (r == -1) session_unreachable(s, st);
    if (cmd) protobuf_c_message_free_unpacked(&cmd->base, NULL);
    return 0;
  }
  /* The coordinator answered: not an orphan, even if opening the dataset
   * (on_job, first time) takes long. */
  set_healthy(s, 1);
  s->warned_ms = 0;
  uint64_t job_hash = 0, size = 0, fp = 0;
  char err[512];
  const char *key = cmd->ack->stream_ticket_key ? cmd->ack->stream_ticket_key : "";
  if (s->hooks.on_ticket) {
    if (!*key || ticket_key_ok(key))
      s->hooks.on_ticket(key, cmd->ack->coordinator_time_ms);
    else
      LOG_WARN(
          "the coordinator's stream ticket key is not %d hex digits: ignored (clients "
          "that present its tickets will be refused)",
          STK__TICKET_KEY_HEX);
  }
  int64_t interval = cmd->ack->heartbeat_interval_ms;
  if (interval < 50) interval = 50;
  if (interval > 60000) interval = 60000;
  int jr = s->hooks.on_job(cmd->ack->job->canonical, cmd->ack->job->hash, &job_hash,
                           &size, &fp, err, sizeof(err));
  if (jr) {
    send_failure(s, st, err);
    pthread_mutex_lock(&s->mu);
    s->failed_locally = jr == -2;
    pthread_mutex_unlock(&s->mu);
    mark_failed(s, err);
    interval = 0;
  }
  protobuf_c_message_free_unpacked(&cmd->base, NULL);
  if (!interval || send_hello(s, st, job_hash, size, fp)) return 0;
  return interval;
}

static int send_heartbeat(session *s, stk__rpc_stream *st) {
  Stoker__V1__WorkerStats stats = STOKER__V1__WORKER_STATS__INIT;
  s->hooks.fill_stats(&stats);
  Stoker__V1__Heartbeat hb = STOKER__V1__HEARTBEAT__INIT;
  hb.stats = &stats;
  Stoker__V1__WorkerMessage m = STOKER__V1__WORKER_MESSAGE__INIT;
  m.kind_case = STOKER__V1__WORKER_MESSAGE__KIND_HEARTBEAT;
  m.heartbeat = &hb;
  return stk__rpc_stream_send_msg(st, &m.base);
}

/* Registered: heartbeat every interval, pass commands to the worker.
 * Returns when the session breaks or the worker stops. */
static void session_serve(session *s, stk__rpc_stream *st, int64_t interval) {
  int64_t next_hb = stk__now_ms() + interval;
  for (;;) {
    Stoker__V1__CoordinatorCommand *cmd = NULL;
    int r = recv_cmd(s, st, next_hb, &cmd);
    if (r == -3) return;
    if (r == -2) {
      if (send_heartbeat(s, st)) return;
      next_hb += interval;
      if (next_hb < stk__now_ms()) next_hb = stk__now_ms() + interval;
      continue;
    }
    if (r == 0) {
      session_ended(s, st);
      return;
    }
    if (r < 0) {
      LOG_WARN("session with coordinator %s broke", s->cfg.coordinator);
      return;
    }
    if (cmd->kind_case == STOKER__V1__COORDINATOR_COMMAND__KIND_SHUTDOWN) {
      const Stoker__V1__Shutdown *sd = cmd->shutdown;
      if (sd && sd->failed)
        s->hooks.on_command(SESSION_CMD_ABORT, sd->reason ? sd->reason : "");
      else s->hooks.on_command(SESSION_CMD_SHUTDOWN, NULL);
    } else if (cmd->kind_case == STOKER__V1__COORDINATOR_COMMAND__KIND_DRAIN) {
      s->hooks.on_command(SESSION_CMD_DRAIN, NULL);
    }
    protobuf_c_message_free_unpacked(&cmd->base, NULL);
  }
}

/* One session; returns when it breaks or the worker stops. */
static void run_once(session *s, stk__rpc_channel *ch) {
  stk__rpc_stream *st = NULL;
  if (stk__rpc_stream_open(ch, "/stoker.v1.Coordinator/WorkerSession", 0, &st)) return;
  int64_t interval = session_register(s, st);
  if (interval > 0) {
    LOG_INFO("registered with coordinator %s (heartbeat every %lld ms)",
             s->cfg.coordinator, (long long)interval);
    set_healthy(s, 1);
    session_serve(s, st, interval);
  }
  set_healthy(s, 0);
  stk__rpc_stream_destroy(st);
}

static void *session_main(void *arg) {
  session *s = arg;
  stk__thread_name("stk-session");
  stk__rpc_channel *ch = NULL;
  if (stk__rpc_channel_open(s->coordinator, STK_MAX_COMMAND_MSG, s->token, s->cfg.tls,
                            &ch)) {
    mark_failed(s, "cannot create a channel to the coordinator");
    return NULL;
  }
  int64_t backoff = 100;
  while (!stopping(s)) {
    int64_t t0 = stk__now_ms();
    run_once(s, ch);
    pthread_mutex_lock(&s->mu);
    int done = s->stop || s->has_failed;
    pthread_mutex_unlock(&s->mu);
    if (done) break;
    if (stk__now_ms() - t0 > 10000) backoff = 100; /* it had been healthy */
    for (int64_t waited = 0; waited < backoff && !stopping(s); waited += 50)
      stk__sleep_ms(50);
    backoff = backoff * 2 > 1000 ? 1000 : backoff * 2; /* back within about 1 s */
  }
  stk__rpc_channel_close(ch);
  return NULL;
}

int session_start(const session_config *cfg, const session_hooks *hooks, session **out) {
  *out = NULL;
  session *s = calloc(1, sizeof(*s));
  if (!s) return -1;
  s->cfg = *cfg;
  s->hooks = *hooks;
  s->coordinator = strdup(cfg->coordinator);
  s->token = cfg->token && *cfg->token ? strdup(cfg->token) : NULL;
  s->worker_id = strdup(cfg->worker_id);
  s->address = strdup(cfg->address);
  s->cfg.coordinator = s->coordinator;
  s->lost_since = stk__now_ms();
  pthread_mutex_init(&s->mu, NULL);
  if (!s->coordinator || !s->worker_id || !s->address ||
      pthread_create(&s->thread, NULL, session_main, s)) {
    free(s->coordinator), free(s->token), free(s->worker_id), free(s->address);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return -1;
  }
  *out = s;
  return 0;
}

int64_t session_lost_ms(session *s) {
  pthread_mutex_lock(&s->mu);
  int64_t v = s->lost_since ? stk__now_ms() - s->lost_since : 0;
  pthread_mutex_unlock(&s->mu);
  return v;
}

int session_failed_locally(session *s) {
  pthread_mutex_lock(&s->mu);
  int v = s->has_failed && s->failed_locally;
  pthread_mutex_unlock(&s->mu);
  return v;
}

const char *session_failed(session *s) {
  pthread_mutex_lock(&s->mu);
  const char *v = s->has_failed ? s->failed : NULL;
  pthread_mutex_unlock(&s->mu);
  return v;
}

void session_stop(session *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  free(s->coordinator), free(s->token), free(s->worker_id), free(s->address);
  pthread_mutex_destroy(&s->mu);
  free(s);
}
