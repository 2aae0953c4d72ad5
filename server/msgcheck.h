/* msgcheck.h - the checks a daemon makes on a request message before it
 * acts on it, as pure functions of the message and the job (no network,
 * no daemon state), so that the daemons and the fuzz targets
 * (tests/fuzz/fuzz_worker_requests.c, fuzz_coordinator_msgs.c) run the
 * same code. Each returns 0, or the gRPC status code for the peer with a
 * one-line reason in msg. Thread-safe.
 */
#ifndef STOKER_SERVER_MSGCHECK_H
#define STOKER_SERVER_MSGCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "stoker.pb-c.h"
#include "stoker/core.h"

/* What a worker knows of its job to judge a BatchRequest. */
typedef struct stk__job_view {
  uint64_t job_hash;        /* hash of the resolved spec */
  const stk_job_spec *spec; /* the resolved spec (num_samples set) */
} stk__job_view;

/* A BatchRequest against the job: hash (FAILED_PRECONDITION), rank and
 * sample_offset (INVALID_ARGUMENT: the offset must be below
 * world_size*batch_size), epoch and step (OUT_OF_RANGE: the step must be
 * below stk_epoch_steps at the request's offset). */
int stk__check_batch_request(const stk__job_view *j, const Stoker__V1__BatchRequest *q,
                             char *msg, size_t len);

/* One BatchRequest as Worker.Stream receives it: its bytes unpacked under
 * the request limits (rpc/include/rpc/wire_limits.h), then checked as above. 0 with
 * *out (free with protobuf_c_message_free_unpacked(.., NULL)), or a
 * status with msg and *out NULL. */
int stk__parse_batch_request(const stk__job_view *j, const uint8_t *data, size_t len,
                             Stoker__V1__BatchRequest **out, char *msg, size_t mlen);

/* A worker session's hello: protocol version (FAILED_PRECONDITION), a
 * worker id and an address, each non-empty and under STK_MAX_ID_BYTES
 * (INVALID_ARGUMENT). */
int stk__check_hello(const Stoker__V1__Register *h, char *msg, size_t len);

#endif
