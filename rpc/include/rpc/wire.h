/* wire.h - the hot path of the batch stream: BatchResponse chunk messages
 * encoded and decoded without copying the payload through protobuf-c.
 *
 * A chunk message is an ordinary BatchResponse {chunk_offset, chunk}; any
 * protobuf library reads it. The encoder emits the two field prefixes by
 * hand and hands gRPC a slice that points into the caller's batch buffer
 * (zero copy); the decoder recognises that shape and copies the bytes once,
 * straight into the destination. Any other encoding falls back to a full
 * protobuf-c unpack, so messages from other encoders still work.
 */
#ifndef STOKER_WIRE_H
#define STOKER_WIRE_H

#include <grpc/byte_buffer.h>
#include <stddef.h>
#include <stdint.h>

#include "stoker.pb-c.h"

/* A chunk message over data[0..len) at payload offset `offset`, without
 * copying data: release(ud) runs once gRPC is done with the bytes. NULL on
 * allocation failure (release is not called then). */
grpc_byte_buffer *stk__wire_chunk(uint64_t offset, const void *data, size_t len,
                                  void (*release)(void *), void *ud);

typedef struct stk__wire_msg {
  Stoker__V1__BatchResponse *msg; /* set for a header (or fallback chunk) */
  int is_chunk;
  uint64_t offset, len; /* chunk position and size */
  size_t data_start;    /* fast path: where the bytes begin */
} stk__wire_msg;

/* Decode a BatchResponse of at most max_bytes. Returns 0 and fills *m, or
 * -1 for a malformed message or one over a limit (a header over
 * STK_MAX_HEADER_MSG, a parse over its memory budget: wire_limits.h).
 * Release with stk__wire_msg_free. */
int stk__wire_decode(grpc_byte_buffer *bb, size_t max_bytes, stk__wire_msg *m);
/* As stk__wire_decode; on -1, why (may be NULL) gets a one-line reason. */
int stk__wire_decode_ex(grpc_byte_buffer *bb, size_t max_bytes, stk__wire_msg *m,
                        char *why, size_t whylen);
/* Copy a chunk's m->len bytes to dest (the caller has bounds-checked
 * offset + len against its buffer). */
void stk__wire_copy_chunk(grpc_byte_buffer *bb, const stk__wire_msg *m, void *dest);
/* As stk__wire_copy_chunk, and returns the CRC-32C of the chunk's bytes
 * continued from crc (stk_crc32c semantics): each piece is checksummed
 * right after it is copied, while it is still in cache, instead of in a
 * second pass over the whole batch. */
uint32_t stk__wire_copy_chunk_crc(grpc_byte_buffer *bb, const stk__wire_msg *m,
                                  void *dest, uint32_t crc);
void stk__wire_msg_free(stk__wire_msg *m);

#endif
