/* fuzz_coordinator_msgs.c - libFuzzer target for the messages the
 * coordinator receives: the first byte picks the method (WorkerSession,
 * Join, WatchWorkers, Finish, Status), the rest is one request, unpacked
 * as the coordinator unpacks it (rpc/rpc_common.c: its method's limit, the
 * parse memory budget, the unknown-field budget) and, for a worker's
 * hello, checked by server/msgcheck.c; what parses is packed and parsed
 * again. Any input must end with a status, never a crash or a leak.
 *
 * Built as a libFuzzer binary with clang and STOKER_FUZZ=ON; always built
 * as a replay program (replay_main.c) that ctest runs over
 * corpus/coordinator_msgs/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/msgcheck.h"
#include "rpc/rpc.h"
#include "rpc/wire_limits.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const ProtobufCMessageDescriptor *const methods[] = {
      &stoker__v1__worker_message__descriptor, &stoker__v1__join_request__descriptor,
      &stoker__v1__watch_request__descriptor, &stoker__v1__finish_request__descriptor,
      &stoker__v1__status_request__descriptor};
  if (size < 1) return 0;
  const ProtobufCMessageDescriptor *d = methods[data[0] % 5];
  int code = 0;
  char why[300] = "";
  ProtobufCMessage *m = stk__rpc_unpack_bytes(d, data + 1, size - 1, STK_MAX_CONTROL_MSG,
                                              0, &code, why, sizeof(why));
  if (!m) {
    if (!code || !why[0]) abort(); /* a refusal always says why */
    return 0;
  }
  if (d == &stoker__v1__worker_message__descriptor) {
    const Stoker__V1__WorkerMessage *w = (const Stoker__V1__WorkerMessage *)m;
    char msg[300];
    if (w->kind_case == STOKER__V1__WORKER_MESSAGE__KIND_HELLO && w->hello)
      stk__check_hello(w->hello, msg, sizeof(msg));
  }
  /* Pack what parsed (unknown fields included) and parse it again: no
   * crash either way. The result need not parse: protobuf-c keeps an
   * unknown field whose tag was a padded varint of field number 0 and
   * writes it back as a plain 0, which no parser accepts
   * (corpus/coordinator_msgs/crash-repack-field0; the daemons never
   * repack what they receive). */
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(n ? n : 1);
  if (buf) {
    protobuf_c_message_pack(m, buf);
    ProtobufCMessage *again =
        stk__rpc_unpack_bytes(d, buf, n, n, 0, &code, why, sizeof(why));
    protobuf_c_message_free_unpacked(again, NULL);
    free(buf);
  }
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}
