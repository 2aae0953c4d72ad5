/* health.h - the standard gRPC health service (grpc.health.v1.Health,
 * proto/health.proto) for both daemons: Check answers at once, Watch
 * streams every change. One process-wide status, named by the empty
 * service and by the daemon's own service ("stoker.v1.Worker",
 * "stoker.v1.Coordinator"); any other name is unknown (Check: NOT_FOUND,
 * Watch: SERVICE_UNKNOWN, as the protocol says). Health calls need no
 * bearer token (probes carry none; the status is not secret).
 *
 * Thread-safe: the daemons set the status from any thread; watchers get
 * the change on their streams at once.
 */
#ifndef STOKER_SERVER_HEALTH_H
#define STOKER_SERVER_HEALTH_H

#include <stdint.h>

#include "health.pb-c.h"
#include "rpc/rpc.h"

/* The daemon's service name (a static string) and how long one Watch may
 * stay open (lease_ms > 0), before serving. The status starts NOT_SERVING. */
void stk__health_init(const char *service, int64_t watch_lease_ms);
/* 1 = SERVING, 0 = NOT_SERVING; a change goes to every watcher. */
void stk__health_set(int serving);
/* End (status OK, "health watch lease over: watch again") every Watch
 * open for its lease by now_ms, so watches without a token cannot hold
 * the health table forever; a prober simply watches again. Called from a
 * daemon's main loop; thread-safe. */
void stk__health_tick(int64_t now_ms);

void stk__health_check(stk__rpc_call *call, const ProtobufCMessage *req);
extern const stk__rpc_stream_ops stk__health_watch_ops;

/* The two rows of a daemon's method table. */
#define STK__HEALTH_METHODS                                                              \
  {"/grpc.health.v1.Health/Check",                                                       \
   &grpc__health__v1__health_check_request__descriptor,                                  \
   1024,                                                                                 \
   stk__health_check,                                                                    \
   NULL,                                                                                 \
   1},                                                                                   \
  {                                                                                      \
    "/grpc.health.v1.Health/Watch", &grpc__health__v1__health_check_request__descriptor, \
        1024, NULL, &stk__health_watch_ops, 1                                            \
  }

#endif
