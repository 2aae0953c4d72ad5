/* rpc.h - a small blocking layer over the gRPC C core, shared by the
 * daemons (server side) and libstoker (client side).
 *
 * Model: every call has its own pluck completion queue, so each operation
 * is "start a batch, pluck its tag": plain blocking code, one thread per
 * server call. A call may have one thread receiving and another sending at
 * the same time (bidirectional streams); never two of the same kind.
 * Messages are protobuf-c messages packed into grpc_byte_buffers.
 *
 * Nothing here prints, exits or aborts; errors come back as return values.
 */
#ifndef STOKER_RPC_H
#define STOKER_RPC_H

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

/* grpc_init()/grpc_shutdown(), reference counted by gRPC itself. */
void stk__rpc_init(void);
void stk__rpc_shutdown(void);

/* Keep glibc from handing gRPC's large receive buffers back to the kernel
 * after every message (mmap threshold 32 MiB, trim threshold 64 MiB), so
 * they are reused instead of being faulted in again. On this project's
 * 2-core VM that took the client from ~1.0 to ~0.33 CPU s per GB received
 * (docs/benchmarks.md, "Transport"). Process-wide: the daemons call it at
 * start; libstoker calls it when a client opens unless the environment has
 * STOKER_MALLOC_TUNING=0, and never overrides a MALLOC_MMAP_THRESHOLD_ or
 * MALLOC_TRIM_THRESHOLD_ the user set. Idempotent, thread-safe. Returns 1
 * if it changed the settings, 0 if it left them alone. */
int stk__rpc_tune_malloc(void);

/* What a gRPC status from a peer means to stoker: the stk_status to report
 * and, in *final (may be NULL), whether the refusal is final, i.e. retrying
 * the same call with the same credentials cannot succeed (1) or the caller
 * should back off and retry (0). One table for the client's join, finish
 * and worker streams and the worker's coordinator session. GRPC_STATUS_OK
 * gives STK_OK; a code outside gRPC's range gives STK_PROTOCOL, final.
 * Pure, thread-safe. */
int stk__rpc_status(int grpc_code, int *final);

/* Pack a protobuf-c message into a new byte buffer (caller destroys);
 * NULL on allocation failure. */
grpc_byte_buffer *stk__rpc_pack(const ProtobufCMessage *m);
/* Unpack a byte buffer (not consumed) of at most max_bytes; NULL when the
 * bytes are not a valid message of that type or break a limit of
 * wire_limits.h: over max_bytes, a parse that would allocate more than
 * STK_UNPACK_MEM_FACTOR * size + STK_UNPACK_MEM_SLACK, too many unknown
 * fields or repeated sub-messages. Free with
 * protobuf_c_message_free_unpacked(m, NULL). Thread-safe. */
ProtobufCMessage *stk__rpc_unpack(const ProtobufCMessageDescriptor *d,
                                  grpc_byte_buffer *bb, size_t max_bytes);
/* stk__rpc_unpack over plain bytes, with the allocation budget mem_budget
 * (0 = the default above). On failure NULL, and (each may be NULL) *code
 * gets the gRPC status a peer should get for it (INVALID_ARGUMENT: not a
 * message of that type, or too many unknown fields; RESOURCE_EXHAUSTED:
 * over a size or memory limit) and why a one-line reason naming the
 * message type and the limit. Pure, thread-safe. */
ProtobufCMessage *stk__rpc_unpack_bytes(const ProtobufCMessageDescriptor *d,
                                        const uint8_t *data, size_t len, size_t max_bytes,
                                        size_t mem_budget, int *code, char *why,
                                        size_t whylen);
/* As stk__rpc_unpack, with stk__rpc_unpack_bytes's budget and reasons. */
ProtobufCMessage *stk__rpc_unpack_ex(const ProtobufCMessageDescriptor *d,
                                     grpc_byte_buffer *bb, size_t max_bytes,
                                     size_t mem_budget, int *code, char *why,
                                     size_t whylen);

/* ---- Server ------------------------------------------------------------ */

typedef struct stk__rpc_server stk__rpc_server;
typedef struct stk__rpc_call stk__rpc_call;

/* Runs on a thread of its own for one incoming call. It must end the call
 * with stk__rpc_call_finish (or stk__rpc_call_abort) before returning; if it
 * does not, the call ends with INTERNAL. */
typedef void (*stk__rpc_handler_fn)(stk__rpc_call *call);

typedef struct stk__rpc_method {
  const char *path; /* "/stoker.v1.Worker/Stream" */
  stk__rpc_handler_fn fn;
  /* Largest request message this method accepts (wire_limits.h); 0 = the
   * server's max_message_bytes. The server's gRPC receive limit is the
   * largest of its methods', and stk__rpc_call_recv_msg checks each
   * message against its own method's. */
  size_t max_bytes;
} stk__rpc_method;

typedef struct stk__rpc_server_config {
  const char *listen; /* "127.0.0.1:0" binds a free port */
  const stk__rpc_method *methods;
  size_t nmethods;
  size_t max_message_bytes; /* send limit, and receive limit of a method
                               without max_bytes; 0 = 16 MiB */
  const char *token;        /* bearer token every call must carry; NULL = none */
  size_t max_calls;         /* concurrent calls; 0 = 4096; past it RESOURCE_EXHAUSTED */
} stk__rpc_server_config;

/* Bind and start serving. *port gets the bound port. Returns 0, or -1 with
 * a message in err (address in use, bad address). */
int stk__rpc_server_start(const stk__rpc_server_config *cfg, stk__rpc_server **out,
                          int *port, char *err, size_t errlen);
/* Stop accepting calls, give running calls grace_ms to end, cancel the
 * rest, join every handler thread and free the server. Accepts NULL. */
void stk__rpc_server_stop(stk__rpc_server *s, int grace_ms);
/* Calls currently running. */
size_t stk__rpc_server_active(stk__rpc_server *s);

/* Blocking receive: 1 with *out (caller destroys), 0 when the client
 * half-closed, -1 when the call is cancelled or broken. One receiver at a
 * time. */
int stk__rpc_call_recv(stk__rpc_call *c, grpc_byte_buffer **out);
/* Unpack-or-fail convenience: 1 with a message, 0 half-close, -1 broken,
 * -2 when the message is malformed or over one of the method's limits
 * (size, parse memory, unknown fields: see stk__rpc_unpack). On -2 the
 * call has already been ended with INVALID_ARGUMENT or RESOURCE_EXHAUSTED
 * and a message naming the type and the limit; the caller's own status is
 * then a no-op. */
int stk__rpc_call_recv_msg(stk__rpc_call *c, const ProtobufCMessageDescriptor *d,
                           ProtobufCMessage **out);
/* Blocking send (waits for flow control). Takes ownership of msg. 0 or -1
 * when the call is cancelled or broken. One sender at a time. */
int stk__rpc_call_send(stk__rpc_call *c, grpc_byte_buffer *msg);
int stk__rpc_call_send_msg(stk__rpc_call *c, const ProtobufCMessage *m);
/* End the call with a status. Call once, from the sending thread (or when
 * no send is in flight). Returns 0 or -1. */
int stk__rpc_call_finish(stk__rpc_call *c, grpc_status_code code, const char *details);
/* End the call with a status from any thread, failing the other thread's
 * pending receive or send (thread-safe). */
void stk__rpc_call_abort(stk__rpc_call *c, grpc_status_code code, const char *details);
/* Non-blocking: 1 once the call is over (the client cancelled or went
 * away, or a status was sent), else 0. For handlers that wait on something
 * other than gRPC (a server-streaming call between messages) and want to
 * notice a vanished client. Call from the handler thread only. */
int stk__rpc_call_closed(stk__rpc_call *c);
/* The peer's address ("ipv4:127.0.0.1:5555"); valid for the call's life. */
const char *stk__rpc_call_peer(stk__rpc_call *c);

/* ---- Client ------------------------------------------------------------ */

typedef struct stk__rpc_channel stk__rpc_channel;

/* A channel to target ("host:port"); connects lazily and reconnects with a
 * short backoff. max_message_bytes (0 = 16 MiB) is the largest message the
 * channel sends or receives: the largest response its calls may
 * legitimately get (wire_limits.h); stk__rpc_unary unpacks a response
 * with that limit. 0, or -1 on allocation failure. */
int stk__rpc_channel_open(const char *target, size_t max_message_bytes, const char *token,
                          stk__rpc_channel **out);
void stk__rpc_channel_close(stk__rpc_channel *ch); /* accepts NULL */

/* Unary call: returns the gRPC status code (0 = OK, then *resp is set and
 * owned by the caller) and copies the status details into details. A
 * response that does not parse is GRPC_STATUS_INTERNAL. */
int stk__rpc_unary(stk__rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                   int timeout_ms, char *details, size_t dlen);

typedef struct stk__rpc_stream stk__rpc_stream;

/* Start a streaming call; timeout_ms <= 0 means no deadline. 0 or -1. */
int stk__rpc_stream_open(stk__rpc_channel *ch, const char *method, int timeout_ms,
                         stk__rpc_stream **out);
/* Takes ownership of msg. 0, or -1 when the stream is broken. */
int stk__rpc_stream_send(stk__rpc_stream *s, grpc_byte_buffer *msg);
int stk__rpc_stream_send_msg(stk__rpc_stream *s, const ProtobufCMessage *m);
/* 1 with *out (caller destroys), 0 at the end of the stream (read the
 * status), -1 broken, -2 timeout (the receive stays pending: call again).
 * timeout_ms < 0 waits forever. */
int stk__rpc_stream_recv(stk__rpc_stream *s, grpc_byte_buffer **out, int timeout_ms);
/* Half-close: no more sends. 0 or -1. */
int stk__rpc_stream_close_send(stk__rpc_stream *s);
/* Wait up to timeout_ms for the final status; returns the code (or
 * GRPC_STATUS_DEADLINE_EXCEEDED if it did not come) and its details. */
int stk__rpc_stream_status(stk__rpc_stream *s, int timeout_ms, char *details,
                           size_t dlen);
/* Cancel from any thread; pending send/recv fail. */
void stk__rpc_stream_cancel(stk__rpc_stream *s);
/* Cancel if still open, wait for every pending op, free. Accepts NULL. */
void stk__rpc_stream_destroy(stk__rpc_stream *s);

#endif
