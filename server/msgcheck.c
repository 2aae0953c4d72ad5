/* msgcheck.c - request checks shared by the daemons and their fuzz
 * targets (see msgcheck.h). Pure: reads the message and the job view,
 * writes only msg. */
#include "msgcheck.h"

#include <grpc/status.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/costmodel.h"
#include "common/text.h"
#include "rpc/rpc.h"
#include "stoker/version.h"
#include "rpc/wire_limits.h"

int stk__check_batch_request(const stk__job_view *j, const Stoker__V1__BatchRequest *q,
                             char *msg, size_t len) {
  const stk_job_spec *s = j->spec;
  if (q->job_hash != j->job_hash) {
    snprintf(msg, len,
             "job hash %016" PRIx64 " does not match this worker's job %016" PRIx64
             " (%s)",
             q->job_hash, j->job_hash, s->name);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  if (q->rank >= s->world_size) {
    snprintf(msg, len, "rank %u is outside the job's world_size %u", q->rank,
             s->world_size);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (q->epoch >= s->epochs) {
    snprintf(msg, len, "epoch %" PRIu64 " is past the job's %u epochs", q->epoch,
             s->epochs);
    return GRPC_STATUS_OUT_OF_RANGE;
  }
  uint64_t per = (uint64_t)s->world_size * s->batch_size;
  if (q->sample_offset >= per) {
    snprintf(msg, len,
             "sample_offset %" PRIu64 " is not below world_size*batch_size %" PRIu64,
             q->sample_offset, per);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  uint64_t steps = stk_epoch_steps(s, s->num_samples, q->sample_offset);
  if (q->step >= steps) {
    snprintf(msg, len,
             "step %" PRIu64 " is past the epoch's %" PRIu64
             " steps (sample offset %" PRIu64 ")",
             q->step, steps, q->sample_offset);
    return GRPC_STATUS_OUT_OF_RANGE;
  }
  return 0;
}

int stk__parse_batch_request(const stk__job_view *j, const uint8_t *data, size_t len,
                             Stoker__V1__BatchRequest **out, char *msg, size_t mlen) {
  int code = GRPC_STATUS_INVALID_ARGUMENT;
  *out = (Stoker__V1__BatchRequest *)stk__rpc_unpack_bytes(
      &stoker__v1__batch_request__descriptor, data, len, STK_MAX_REQUEST_MSG, 0, &code,
      msg, mlen);
  if (!*out) return code;
  code = stk__check_batch_request(j, *out, msg, mlen);
  if (code) {
    protobuf_c_message_free_unpacked(&(*out)->base, NULL);
    *out = NULL;
  }
  return code;
}

int stk__check_hello(const Stoker__V1__Register *h, char *msg, size_t len) {
  if (h->protocol_version != STK_PROTOCOL_VERSION) {
    snprintf(msg, len, "worker speaks protocol %u, this coordinator %u",
             h->protocol_version, STK_PROTOCOL_VERSION);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  const Stoker__V1__WorkerInfo *w = h->worker;
  if (!w || !w->worker_id || !*w->worker_id || !w->address || !*w->address ||
      strlen(w->worker_id) >= STK_MAX_ID_BYTES ||
      strlen(w->address) >= STK_MAX_ID_BYTES) {
    snprintf(msg, len,
             "hello needs worker.worker_id and worker.address, each at most %d bytes",
             STK_MAX_ID_BYTES - 1);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (!stk__hostport_valid(w->address)) {
    snprintf(msg, len,
             "worker.address is not host:port (a DNS name, an IPv4 address or [IPv6], "
             "and a port 1-65535; no unix: or other targets)");
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (w->instance_type && *w->instance_type && !stk__instance_name_ok(w->instance_type)) {
    snprintf(msg, len,
             "worker.instance_type is not an instance type name (at most %d letters, "
             "digits and . _ - : / +)",
             STK_INSTANCE_NAME_MAX - 1);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  return 0;
}
