/* health.c - grpc.health.v1.Health for the daemons (see health.h). */
#include "health.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

typedef struct watcher {
  stk__rpc_call *call;
  int known;      /* asked for "" or our service */
  int64_t end_ms; /* the lease: ended at this time (stk__health_tick) */
  struct watcher *next;
} watcher;

static struct {
  pthread_mutex_t mu;
  const char *service;
  int serving;
  int64_t lease_ms;
  watcher *watchers;
} H = {PTHREAD_MUTEX_INITIALIZER, "", 0, 300000, NULL};

typedef Grpc__Health__V1__HealthCheckResponse__ServingStatus health_status;

static int known(const char *name) {
  return !name || !*name || (H.service && !strcmp(name, H.service));
}

static health_status status_locked(int is_known) {
  if (!is_known)
    return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
  return H.serving ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                   : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
}

static void send_status(stk__rpc_call *call, health_status st) {
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = st;
  stk__rpc_call_send_msg(call, &r.base); /* never blocks; fails only once it is over */
}

void stk__health_init(const char *service, int64_t watch_lease_ms) {
  pthread_mutex_lock(&H.mu);
  H.service = service;
  H.serving = 0;
  if (watch_lease_ms > 0) H.lease_ms = watch_lease_ms;
  pthread_mutex_unlock(&H.mu);
}

void stk__health_set(int serving) {
  pthread_mutex_lock(&H.mu);
  if (H.serving != !!serving) {
    H.serving = !!serving;
    for (watcher *w = H.watchers; w; w = w->next)
      if (w->known) send_status(w->call, status_locked(1));
  }
  pthread_mutex_unlock(&H.mu);
}

void stk__health_check(stk__rpc_call *call, const ProtobufCMessage *req) {
  const Grpc__Health__V1__HealthCheckRequest *q =
      (const Grpc__Health__V1__HealthCheckRequest *)req;
  if (!q) {
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "not a HealthCheckRequest");
    return;
  }
  if (!known(q->service)) {
    stk__rpc_call_finish(call, GRPC_STATUS_NOT_FOUND, "unknown service");
    return;
  }
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  pthread_mutex_lock(&H.mu);
  r.status = status_locked(1);
  pthread_mutex_unlock(&H.mu);
  stk__rpc_call_reply(call, &r.base);
}

void stk__health_tick(int64_t now_ms) {
  pthread_mutex_lock(&H.mu);
  for (watcher *w = H.watchers; w; w = w->next)
    if (now_ms >= w->end_ms) /* again on later ticks until closed: harmless */
      stk__rpc_call_finish(w->call, GRPC_STATUS_OK,
                           "health watch lease over: watch again");
  pthread_mutex_unlock(&H.mu);
}

/* ---- Watch: one request, then every status (the current one first) ---- */

static int watch_open(stk__rpc_call *call) {
  (void)call;
  return 0;
}

static void watch_message(stk__rpc_call *call, const ProtobufCMessage *m) {
  const Grpc__Health__V1__HealthCheckRequest *q =
      (const Grpc__Health__V1__HealthCheckRequest *)m;
  if (!q) {
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "not a HealthCheckRequest");
    return;
  }
  if (stk__rpc_call_data(call)) {
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "one request per Watch");
    return;
  }
  watcher *w = calloc(1, sizeof(*w));
  if (!w) {
    stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  w->call = call;
  w->known = known(q->service);
  stk__rpc_call_set_data(call, w);
  pthread_mutex_lock(&H.mu);
  w->end_ms = stk__now_ms() + H.lease_ms;
  w->next = H.watchers;
  H.watchers = w;
  send_status(call, status_locked(w->known));
  pthread_mutex_unlock(&H.mu);
}

static void watch_closed(stk__rpc_call *call) {
  watcher *w = stk__rpc_call_data(call);
  if (!w) return;
  pthread_mutex_lock(&H.mu);
  for (watcher **p = &H.watchers; *p; p = &(*p)->next)
    if (*p == w) {
      *p = w->next;
      break;
    }
  pthread_mutex_unlock(&H.mu);
  free(w);
}

const stk__rpc_stream_ops stk__health_watch_ops = {watch_open, watch_message, NULL, NULL,
                                                   watch_closed};
