/* fuzz_worker_requests.c - libFuzzer target for the worker's request
 * handling: the input is a stream of BatchRequest messages, each framed by
 * a 2-byte little-endian length (a length past the input's end takes the
 * rest), and each goes through what Worker.Stream does with it before it
 * is queued (server/msgcheck.c: the bounded unpack of rpc/rpc_common.c with the
 * request limits, then the job checks), against a fixed job. The
 * per-stream bound of outstanding requests is kept as the worker keeps it.
 * Any input must end with statuses, never a crash or a leak.
 *
 * Built as a libFuzzer binary with clang and STOKER_FUZZ=ON; always built
 * as a replay program (replay_main.c) that ctest runs over
 * corpus/worker_requests/.
 */
#include <grpc/status.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/msgcheck.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_OUTSTANDING 64 /* the worker's --max-outstanding default */

/* The job: 4 ranks, batches of 2, 2 epochs of 128 samples (16 steps per
 * rank at sample offset 0, offsets below 8). */
static const stk_job_spec *fuzz_spec(void) {
  static stk_job_spec s;
  static int ready;
  if (!ready) {
    stk_job_spec_defaults(&s);
    snprintf(s.name, sizeof(s.name), "fuzz");
    s.num_samples = 128, s.batch_size = 2, s.world_size = 4, s.epochs = 2;
    s.drop_last = 1;
    ready = 1;
  }
  return &s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const stk__job_view job = {0x0123456789abcdefull, fuzz_spec()};
  const stk_job_spec *js = job.spec;
  unsigned outstanding = 0;
  char msg[512];
  while (size >= 2) {
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    data += 2, size -= 2;
    if (n > size) n = size;
    Stoker__V1__BatchRequest *q = NULL;
    int code = stk__parse_batch_request(&job, data, n, &q, msg, sizeof(msg));
    data += n, size -= n;
    if (code) {
      if (q || !msg[0]) abort(); /* a refusal always says why */
      if (code != GRPC_STATUS_INVALID_ARGUMENT &&
          code != GRPC_STATUS_RESOURCE_EXHAUSTED &&
          code != GRPC_STATUS_FAILED_PRECONDITION && code != GRPC_STATUS_OUT_OF_RANGE)
        abort();
      break; /* the worker ends the stream at the first bad request */
    }
    if (!q || q->job_hash != job.job_hash || q->rank >= js->world_size ||
        q->epoch >= js->epochs ||
        q->sample_offset >= (uint64_t)js->world_size * js->batch_size ||
        q->step >= stk_epoch_steps(js, js->num_samples, q->sample_offset))
      abort(); /* an accepted request is inside the job */
    protobuf_c_message_free_unpacked(&q->base, NULL);
    if (++outstanding > MAX_OUTSTANDING) break; /* RESOURCE_EXHAUSTED */
  }
  return 0;
}
