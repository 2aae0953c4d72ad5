/* session.h - the worker's session with its coordinator: register (two
 * hellos around opening the dataset), heartbeat with stats, receive
 * Drain/Shutdown, and reconnect with backoff when the session breaks.
 * Runs on a thread of its own; the hooks run on that thread. */
#ifndef STOKER_SERVER_SESSION_H
#define STOKER_SERVER_SESSION_H

#include <stdint.h>

#include "stoker.pb-c.h"
#include "rpc/tls.h"

/* SESSION_CMD_ABORT: Shutdown with failed set (the job was aborted). */
enum { SESSION_CMD_DRAIN = 1, SESSION_CMD_SHUTDOWN = 2, SESSION_CMD_ABORT = 3 };

typedef struct session_hooks {
  /* The coordinator's job (canonical text + hash). Load it (first time) or
   * check it is the one already loaded (re-registration). Fill the second
   * hello's fields. 0, or with err: -1 a fatal mismatch with the
   * coordinator's job, -2 this worker cannot serve it (its dataset cannot
   * be opened). Either way the coordinator is told why (WorkerFailure), the
   * session stops and session_failed() says why and which. */
  int (*on_job)(const char *canonical, uint64_t hash, uint64_t *job_hash,
                uint64_t *dataset_size, uint64_t *fingerprint, char *err, size_t errlen);
  /* Fill the stats of a heartbeat. */
  void (*fill_stats)(Stoker__V1__WorkerStats *st);
  /* A command; reason (SESSION_CMD_ABORT only, else NULL) is the
   * coordinator's text, untrusted, valid during the call. */
  void (*on_command)(int cmd, const char *reason);
  /* NULL, or: add what else the second hello says (the class names); the
   * pointers it sets must stay valid while the job is loaded. */
  void (*fill_hello)(Stoker__V1__Register *reg);
  /* NULL, or: the key of this worker's stream tickets (rpc/include/rpc/ticket.h)
   * and the coordinator's clock (unix ms; 0 = not sent), from every
   * RegisterAck (key "" when it carries none: a coordinator without role
   * tokens; else 64 hex digits, checked). Valid during the call; never
   * log the key. */
  void (*on_ticket)(const char *key, uint64_t coordinator_ms);
} session_hooks;

typedef struct session session;

typedef struct session_config {
  const char *coordinator; /* host:port */
  const char *token;
  const stk__tls *tls; /* NULL = plaintext; kept alive by the caller */
  const char *worker_id, *address;
  uint32_t cores;            /* builder threads */
  double cpu_cores;          /* usable cores (common/cpulimit.h) */
  const char *instance_type; /* --instance-type, "" = not told */
} session_config;

/* Start the session thread (it connects on its own). 0 or -1. */
int session_start(const session_config *cfg, const session_hooks *hooks, session **out);
/* Milliseconds since the session was last healthy (registered and
 * streaming), counting from start before the first registration; 0 while
 * it is healthy. Thread-safe. */
int64_t session_lost_ms(session *s);
/* Non-NULL once the coordinator rejected this worker for good (job or
 * dataset mismatch): the reason. Thread-safe. */
const char *session_failed(session *s);
/* After session_failed: 1 when on_job said -2 (a local failure), 0 for a
 * mismatch or a refusal by the coordinator. */
int session_failed_locally(session *s);
/* Stop the thread and free. Accepts NULL. */
void session_stop(session *s);

#endif
