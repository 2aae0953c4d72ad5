/* test_rpc_status.c - the one gRPC-status-to-stk_status table
 * (stk__rpc_status): every code's status, which refusals are final, and
 * the rule the worker session and the client share: a wrong token
 * (UNAUTHENTICATED, PERMISSION_DENIED) and a peer that does not serve the
 * method (UNIMPLEMENTED) are final, an absent or overloaded peer is not. */
#include <grpc/status.h>

#include "check.h"
#include "rpc/rpc.h"
#include "stoker/status.h"

static int final_of(int code) {
  int final = -1;
  stk__rpc_status(code, &final);
  return final;
}

int main(void) {
  CHECK(stk__rpc_status(GRPC_STATUS_OK, NULL) == STK_OK);
  CHECK(final_of(GRPC_STATUS_OK) == 0);

  /* Final: only a change on our side (job, request, credentials) helps. */
  CHECK(stk__rpc_status(GRPC_STATUS_FAILED_PRECONDITION, NULL) == STK_MISMATCH);
  CHECK(stk__rpc_status(GRPC_STATUS_INVALID_ARGUMENT, NULL) == STK_INVALID_ARGUMENT);
  CHECK(stk__rpc_status(GRPC_STATUS_OUT_OF_RANGE, NULL) == STK_INVALID_ARGUMENT);
  CHECK(stk__rpc_status(GRPC_STATUS_UNAUTHENTICATED, NULL) == STK_INVALID_ARGUMENT);
  CHECK(stk__rpc_status(GRPC_STATUS_PERMISSION_DENIED, NULL) == STK_INVALID_ARGUMENT);
  CHECK(stk__rpc_status(GRPC_STATUS_UNIMPLEMENTED, NULL) == STK_UNSUPPORTED);
  const int finals[] = {GRPC_STATUS_FAILED_PRECONDITION, GRPC_STATUS_INVALID_ARGUMENT,
                        GRPC_STATUS_OUT_OF_RANGE,        GRPC_STATUS_UNAUTHENTICATED,
                        GRPC_STATUS_PERMISSION_DENIED,   GRPC_STATUS_UNIMPLEMENTED};
  for (size_t i = 0; i < sizeof(finals) / sizeof(finals[0]); i++)
    CHECK(final_of(finals[i]) == 1);

  /* Transient: back off and retry. */
  CHECK(stk__rpc_status(GRPC_STATUS_UNAVAILABLE, NULL) == STK_UNAVAILABLE);
  CHECK(stk__rpc_status(GRPC_STATUS_DEADLINE_EXCEEDED, NULL) == STK_TIMEOUT);
  CHECK(stk__rpc_status(GRPC_STATUS_RESOURCE_EXHAUSTED, NULL) == STK_LIMIT);
  CHECK(stk__rpc_status(GRPC_STATUS_CANCELLED, NULL) == STK_CANCELLED);
  CHECK(stk__rpc_status(GRPC_STATUS_INTERNAL, NULL) == STK_INTERNAL);
  const int transient[] = {GRPC_STATUS_CANCELLED,         GRPC_STATUS_UNKNOWN,
                           GRPC_STATUS_DEADLINE_EXCEEDED, GRPC_STATUS_NOT_FOUND,
                           GRPC_STATUS_ALREADY_EXISTS,    GRPC_STATUS_RESOURCE_EXHAUSTED,
                           GRPC_STATUS_ABORTED,           GRPC_STATUS_INTERNAL,
                           GRPC_STATUS_UNAVAILABLE,       GRPC_STATUS_DATA_LOSS};
  for (size_t i = 0; i < sizeof(transient) / sizeof(transient[0]); i++)
    CHECK(final_of(transient[i]) == 0);

  /* Every code maps to a real, non-OK status; a code outside gRPC's range
   * is a final protocol error, never an out-of-bounds read. */
  for (int code = 1; code <= GRPC_STATUS_UNAUTHENTICATED; code++) {
    int st = stk__rpc_status(code, NULL);
    CHECK(st > STK_OK && st <= STK_INTERNAL);
  }
  CHECK(stk__rpc_status(-1, NULL) == STK_PROTOCOL && final_of(-1) == 1);
  CHECK(stk__rpc_status(17, NULL) == STK_PROTOCOL && final_of(17) == 1);
  CHECK(stk__rpc_status(1 << 30, NULL) == STK_PROTOCOL);
  CHECK_DONE();
}
