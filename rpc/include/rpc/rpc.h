/* rpc.h - a small layer over the gRPC C core, shared by the daemons
 * (server side, event driven: rpc_server.c) and libstoker (client side:
 * rpc_client.c); what both use (the status table, pack and bounded unpack)
 * is rpc_common.c. Memory tuning for gRPC's buffers: memtune.h.
 *
 * Client models: blocking calls (unary calls and streams), each with its
 * own pluck completion queue, so each operation is "start a batch, pluck
 * its tag": plain code for the coordinator calls. A blocking stream may
 * have one thread receiving and another sending at the same time; never
 * two of the same kind. Asynchronous streams (stk__rpc_astream) complete
 * on a completion queue the caller shares between many calls and serves
 * with its own few threads: the worker streams. Server model: see
 * "Server" below. Messages are protobuf-c messages packed into
 * grpc_byte_buffers.
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

#include "rpc/tls.h"

/* ---- Both sides (rpc_common.c) ---------------------------------------- */

/* grpc_init()/grpc_shutdown(), reference counted by gRPC itself. */
void stk__rpc_init(void);
void stk__rpc_shutdown(void);

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

/* ---- Server (rpc_server.c) ---------------------------------------------
 *
 * Event driven, no thread per call: one completion queue served by a fixed
 * set of threads (stk__rpc_server_config.threads). Every call is a small
 * state machine driven by its tags; the handler code sees callbacks:
 *
 *   unary methods   handler(call, request) once the request has arrived;
 *                   it answers with stk__rpc_call_reply / _finish.
 *   stream methods  open(call) when the call arrives, message(call, m) for
 *                   each message (one at a time, in order), half_close,
 *                   drained (every queued send went out), and closed (the
 *                   call is over; always the last callback).
 *
 * Callbacks run on the server's threads and must not block (take a mutex
 * for a short section, never wait for the network or for a build). Sends
 * never block: stk__rpc_call_send queues the message (ownership passes)
 * and gRPC takes the queue in order; the status goes after the queue.
 * Other threads may send, finish or abort a call until its closed callback
 * has returned (synchronise with it, e.g. a flag under the handler's own
 * mutex); after that the handle is gone.
 *
 * Bounds (all in stk__rpc_server_config): open calls per daemon and
 * streams per connection (RESOURCE_EXHAUSTED past the first; gRPC makes a
 * client wait past the second), a deadline for the first message of every
 * call, a bound on how long one send may wait for a peer that stopped
 * reading (then the call is cancelled and its queued messages freed), and
 * server keepalive pings, so dead peers are found. Per method
 * (stk__rpc_method.max_recv_bytes): a receive limit for one message, and
 * every message is unpacked under stk__rpc_unpack's parse budgets.
 */

typedef struct stk__rpc_server stk__rpc_server;
typedef struct stk__rpc_call stk__rpc_call;

/* A unary method's handler: req is the parsed request (owned by the rpc
 * layer, freed when the handler returns). It must end the call (reply or
 * finish) before it returns, or hold it (stk__rpc_call_hold) to answer
 * later; else the call ends INTERNAL. A request that
 * is refused (as for a stream's message below) never reaches it. */
typedef void (*stk__rpc_unary_fn)(stk__rpc_call *call, const ProtobufCMessage *req);

typedef struct stk__rpc_stream_ops {
  /* The call arrived. 0 to serve it (keep state with stk__rpc_call_set_data),
   * or end it with stk__rpc_call_finish and return -1: then no other
   * callback comes. */
  int (*open)(stk__rpc_call *call);
  /* One message, parsed (owned by the rpc layer, freed on return). m is
   * NULL when the message was refused: not a message of the method's type,
   * or over one of its limits (size, parse memory, unknown fields or
   * repeated sub-messages: see stk__rpc_unpack). The rpc layer has then
   * already ended the call with INVALID_ARGUMENT or RESOURCE_EXHAUSTED and
   * a reason naming the type and the limit; the handler only cleans up (its
   * own status is a no-op). No further message comes once the call is
   * finished. */
  void (*message)(stk__rpc_call *call, const ProtobufCMessage *m);
  /* The client half-closed (no more messages). May be NULL. */
  void (*half_close)(stk__rpc_call *call);
  /* Every queued send went out (the queue is empty again). May be NULL. */
  void (*drained)(stk__rpc_call *call);
  /* The call is over (status sent, cancelled, peer gone). The last
   * callback; the handle is invalid once it returns. */
  void (*closed)(stk__rpc_call *call);
} stk__rpc_stream_ops;

/* Roles a credential grants (bit set). A method names the roles that may
 * call it; the admin role may call everything. */
enum {
  STK__ROLE_WORKER = 1u, /* a data worker: its coordinator session */
  STK__ROLE_CLIENT = 2u, /* a training process: join, watch, finish, stream */
  STK__ROLE_ADMIN = 4u,  /* an operator: everything */
  STK__ROLE_ANY = 7u
};

/* A bearer token and the roles it grants. */
typedef struct stk__rpc_cred {
  const char *token;
  unsigned roles;
} stk__rpc_cred;

typedef struct stk__rpc_method {
  const char *path;                          /* "/stoker.v1.Worker/Stream" */
  const ProtobufCMessageDescriptor *request; /* what the client sends */
  /* Largest request message this method accepts (wire_limits.h); 0 = the
   * server's max_message_bytes. The server's gRPC receive limit is the
   * largest of its methods', and each message is checked again against its
   * own method's limit (and the parse budgets of stk__rpc_unpack) when it
   * is unpacked. */
  size_t max_recv_bytes;
  stk__rpc_unary_fn unary;           /* a unary method, or */
  const stk__rpc_stream_ops *stream; /* a streaming one (either direction) */
  int no_token;   /* 1 = callable without the bearer token (the health service:
                     probes carry none, and it tells nothing secret) */
  unsigned roles; /* roles allowed to call it besides admin (STK__ROLE_*);
                     0 = any role. A call whose credential grants none of
                     them ends PERMISSION_DENIED. */
} stk__rpc_method;

typedef struct stk__rpc_server_config {
  const char *listen; /* "127.0.0.1:0" binds a free port */
  const stk__rpc_method *methods;
  size_t nmethods;
  size_t max_message_bytes;   /* send limit, and receive limit of a method
                                 without max_recv_bytes; 0 = 16 MiB */
  const char *token;          /* bearer token granting every role; NULL = none */
  const stk__rpc_cred *creds; /* more tokens, each with its roles (copied) */
  size_t ncreds;              /* with neither token nor creds, calls carry none */
  size_t max_calls;           /* open calls; 0 = 4096; when full, a new call evicts
                                 the oldest that has sent no request yet, else it
                                 ends RESOURCE_EXHAUSTED */
  size_t max_free_calls;      /* open calls of no_token methods (health), counted
                                 apart from max_calls; 0 = 64 */
  size_t max_calls_per_peer;  /* open calls one peer address (its IP) may hold,
                                 past which its new calls end RESOURCE_EXHAUSTED;
                                 0 = half of max_calls (and of the health table)
                                 for each peer beyond loopback, loopback peers
                                 (this host's own processes) unlimited; N > 0 =
                                 N for every peer, loopback included (and at most
                                 half the health table) */
  int max_streams_per_conn;   /* HTTP/2 concurrent streams per connection; 0 = 100 */
  int threads;                /* completion-queue threads; 0 = 2 */
  int first_message_ms;       /* a call whose first message has not come after
                                 this long ends DEADLINE_EXCEEDED; 0 = 30 s */
  int send_stall_ms;          /* a send that has not completed after this long
                                 (the peer stopped reading) cancels the call
                                 UNAVAILABLE; 0 = 10 s */
  int keepalive_ms;           /* server pings an idle connection this often;
                                 0 = 30 s */
  int keepalive_timeout_ms;   /* and drops it when the ping is not answered in
                                 this long; 0 = 20 s */
  const stk__tls *tls;        /* NULL = plaintext; else it must have a cert (tls.h) */
  /* Protected mode: a call from a peer that is not on this host's loopback
   * (127.0.0.0/8, ::1, or a unix socket) ends PERMISSION_DENIED saying
   * why, except methods marked no_token (health). For a daemon with no
   * caller credential: no token, no role tokens, no required client
   * certificate (server-only TLS is no caller credential). */
  int loopback_only;
  /* Told (at most once a minute, with the count since) of calls refused by
   * protected mode; NULL = nobody. Called on a serving thread: must not
   * block. */
  void (*on_refused)(const char *peer, uint64_t count);
} stk__rpc_server_config;

/* Counters of a server (all cumulative except open_calls). */
typedef struct stk__rpc_server_stats {
  uint64_t open_calls;      /* now */
  uint64_t calls;           /* accepted */
  uint64_t refused_full;    /* RESOURCE_EXHAUSTED: max_calls (or the no-token
                               cap) reached and nothing to evict */
  uint64_t evicted;         /* silent calls ended to make room (max_calls) */
  uint64_t first_msg_late;  /* ended by the first-message deadline */
  uint64_t send_stalled;    /* cancelled by the send-stall bound */
  uint64_t refused_remote;  /* PERMISSION_DENIED: protected mode, not loopback */
  uint64_t shed;            /* unary calls whose deadline passed before a
                               serving thread took them: not handled */
  uint64_t tickets_expired; /* UNAUTHENTICATED: a stream ticket of ours, expired */
} stk__rpc_server_stats;

/* Bind and start serving. *port gets the bound port. Returns 0, or -1 with
 * a message in err (address in use, bad address, out of memory). */
int stk__rpc_server_start(const stk__rpc_server_config *cfg, stk__rpc_server **out,
                          int *port, char *err, size_t errlen);
/* Stop accepting calls, give open calls grace_ms to end, cancel the rest,
 * wait until every call is over (its closed callback returned), join the
 * server's threads and free it. Not from a callback. Accepts NULL. */
void stk__rpc_server_stop(stk__rpc_server *s, int grace_ms);
/* Stream tickets (a worker's, from its coordinator; format in ticket.h):
 * from now on a call whose bearer is a ticket of key (64 hex digits) that
 * has not expired grants roles, and so does one of the previous key for
 * grace_ms more (clients of a coordinator that restarted); an expired
 * one is refused UNAUTHENTICATED, saying so. coordinator_ms (0 = keep
 * what we had): the coordinator's clock, unix ms, as it is now; expiry
 * is judged on that clock carried on by ours, with the margin of
 * ticket.h. The server's token (stk__rpc_server_config.token, the shared
 * one) no longer grants anything, its creds still do. The same key again
 * changes only the clock; "" ends tickets (the previous key still holds
 * for grace_ms, and the token grants again) and returns 1 when there was
 * none. key is copied; 0, or -1 when it is NULL or not 64 bytes (nothing
 * changed). Never logged. Thread-safe. */
int stk__rpc_server_set_ticket_key(stk__rpc_server *s, const char *key, unsigned roles,
                                   int grace_ms, uint64_t coordinator_ms);
/* 1 when the calling thread is one of a server's serving threads (where
 * every callback runs), else 0: for checks that a serving thread never
 * blocks on something slow. Any thread. */
int stk__rpc_server_on_thread(void);
/* Thread-safe snapshot of the counters. */
void stk__rpc_server_stats_get(stk__rpc_server *s, stk__rpc_server_stats *out);

/* A byte buffer over n slices that are already encoded messages (or
 * parts of one): gRPC takes a reference on each slice, the caller keeps
 * its own. The way to send the same bytes to many calls without copying
 * or encoding them again (one refcounted slice, a buffer per send). NULL
 * on allocation failure. Thread-safe. */
grpc_byte_buffer *stk__rpc_shared_buffer(grpc_slice *slices, size_t n);
/* From a unary handler: answer later, from any thread. The handler
 * returns without a status; the call stays valid (not freed, even when
 * the peer goes away meanwhile) until stk__rpc_call_release, before which
 * the holder ends it (reply, finish or abort: sends to a call that is
 * already over fail harmlessly). Release exactly once; after it the handle
 * is gone. stk__rpc_server_stop waits for held calls to be released.
 * Thread-safe. */
void stk__rpc_call_hold(stk__rpc_call *c);
void stk__rpc_call_release(stk__rpc_call *c);
/* Queue a message (ownership passes, also on failure). 0, or -1 when the
 * call is already finished or over. Never blocks; thread-safe. */
int stk__rpc_call_send(stk__rpc_call *c, grpc_byte_buffer *msg);
int stk__rpc_call_send_msg(stk__rpc_call *c, const ProtobufCMessage *m);
/* Queue n messages at once (ownership of all passes, also on failure), so
 * no `drained` can come between them. 0 or -1 as above. */
int stk__rpc_call_sendv(stk__rpc_call *c, grpc_byte_buffer **msgs, size_t n);
/* End the call with a status once every queued message went out. The
 * first status wins; a later one is a no-op (0). -1 when the call is
 * over. Never blocks; thread-safe. */
int stk__rpc_call_finish(stk__rpc_call *c, grpc_status_code code, const char *details);
/* Send m, then status OK. 0 or -1. */
int stk__rpc_call_reply(stk__rpc_call *c, const ProtobufCMessage *m);
/* End the call now with a status, dropping queued messages and failing
 * what is pending. A no-op when the status already left or the call was
 * already aborted (the first abort's status is the one the peer gets: a
 * message refused by the rpc layer keeps its reason). Thread-safe. */
void stk__rpc_call_abort(stk__rpc_call *c, grpc_status_code code, const char *details);
/* How long the message being sent now has waited for the peer, in ms at
 * now_ms (stk__now_ms); 0 when no send is waiting. Thread-safe. */
int64_t stk__rpc_call_send_wait_ms(stk__rpc_call *c, int64_t now_ms);
/* The peer's address, canonical (peer.h: "ipv4:127.0.0.1:5555",
 * "ipv6:[fd00::5]:5555", "unix:/path"; a malformed peer's text as given,
 * made printable); valid for the call's life. */
const char *stk__rpc_call_peer(stk__rpc_call *c);
/* The handler's own pointer (NULL until set). */
void stk__rpc_call_set_data(stk__rpc_call *c, void *data);
void *stk__rpc_call_data(stk__rpc_call *c);
/* The roles (STK__ROLE_*) the call's credentials granted when it was
 * admitted: STK__ROLE_ANY where the server has no tokens (or the shared
 * token), 0 for a method that takes no token. Fixed for the call's life;
 * thread-safe. */
unsigned stk__rpc_call_roles(stk__rpc_call *c);

/* How a coordinator's Join refusal (FAILED_PRECONDITION) starts when no
 * worker is live and the newest worker failure came after the last one
 * left: the client then fails at once with that text (the worker's
 * reason follows). */
#define STK_NO_WORKER_CAN_SERVE "no worker can serve the job: "

/* ---- Client (rpc_client.c) --------------------------------------------- */

typedef struct stk__rpc_channel stk__rpc_channel;

/* A channel to target ("host:port"); connects lazily and reconnects with a
 * short backoff. max_message_bytes (0 = 16 MiB) is the largest message the
 * channel sends or receives: the largest response its calls may
 * legitimately get (wire_limits.h); stk__rpc_unary unpacks a response
 * with that limit. tls: NULL = plaintext, else TLS with that material (the
 * caller keeps it alive while the channel lives). 0, or -1 on allocation
 * failure. */
int stk__rpc_channel_open(const char *target, size_t max_message_bytes, const char *token,
                          const stk__tls *tls, stk__rpc_channel **out);
void stk__rpc_channel_close(stk__rpc_channel *ch); /* accepts NULL */

/* Unary call: returns the gRPC status code (0 = OK, then *resp is set and
 * owned by the caller) and copies the status details into details. A
 * response that does not parse is GRPC_STATUS_INTERNAL. */
int stk__rpc_unary(stk__rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                   int timeout_ms, char *details, size_t dlen);
/* stk__rpc_unary that also ends early when stop(stop_arg) returns non-zero:
 * stop is polled every STK__RPC_STOP_SLICE_MS while the call is in flight
 * (on the calling thread; it must not block), and the call is then
 * cancelled (GRPC_STATUS_CANCELLED, details "stopped by the caller").
 * stop NULL: exactly stk__rpc_unary. Thread-safe as stk__rpc_unary. */
#define STK__RPC_STOP_SLICE_MS 100
int stk__rpc_unary_stoppable(stk__rpc_channel *ch, const char *method,
                             const ProtobufCMessage *req,
                             const ProtobufCMessageDescriptor *resp_desc,
                             ProtobufCMessage **resp, int timeout_ms, char *details,
                             size_t dlen, int (*stop)(void *), void *stop_arg);

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

/* ---- Client, asynchronous streams (rpc_client.c) -----------------------
 *
 * A streaming call whose operations complete on a completion queue the
 * caller owns and shares between many calls (created with
 * grpc_completion_queue_create_for_next, served by the caller's threads
 * with grpc_completion_queue_next). Nothing here blocks: each start
 * function either starts an operation, and then exactly one event for it
 * comes on the queue later (success or failure), or returns -1 and no
 * event comes. The caller gives every event of the queue to
 * stk__rpc_astream_event, which says whose and of what kind it is.
 *
 * At most one receive and one send (a message or the half-close) are in
 * flight per call at a time, as gRPC requires; a receive, a send, a cancel
 * and event handling may run on different threads at once. The caller
 * counts the events still to come (one per started operation, plus the
 * status from open) and destroys the stream once none is.
 */

typedef struct stk__rpc_astream stk__rpc_astream;

/* What completed (stk__rpc_aevent.kind). */
enum {
  STK__RPC_AS_RECV = 1, /* a receive: take its message, NULL at the end */
  STK__RPC_AS_SEND,     /* a send or the half-close: ok says it went out */
  STK__RPC_AS_STATUS,   /* the call is over: read stk__rpc_astream_status */
  STK__RPC_AS_WAKE      /* a waker's kick (s and user NULL) */
};

typedef struct stk__rpc_aevent {
  stk__rpc_astream *s;
  void *user; /* as given to stk__rpc_astream_open */
  int kind;   /* STK__RPC_AS_* */
  int ok;     /* the operation succeeded (gRPC's success bit) */
} stk__rpc_aevent;

/* Start a streaming call of method on ch whose events come on cq (the
 * channel's auth metadata goes with it; no deadline). user is handed back
 * with every event. 0 with *out: the call's STATUS event will come once
 * (whatever happens); -1 (out of memory, gRPC refused) with *out NULL and
 * no event. ch and cq must outlive the stream. Thread-safe. */
int stk__rpc_astream_open(stk__rpc_channel *ch, grpc_completion_queue *cq,
                          const char *method, void *user, stk__rpc_astream **out);
/* Start receiving the next message (the first also takes the initial
 * metadata). 0: one RECV event comes; -1: none (a receive is already in
 * flight, or gRPC refused). Not concurrently with another receive. */
int stk__rpc_astream_recv(stk__rpc_astream *s);
/* After a RECV event: its message (the caller destroys it), or NULL at
 * the end of the stream or when the receive failed. Once per RECV event,
 * on the thread handling it. */
grpc_byte_buffer *stk__rpc_astream_recv_take(stk__rpc_astream *s);
/* Start sending msg (ownership passes, also on failure; it is freed when
 * its SEND event is decoded). 0: one SEND event comes; -1: none. Not
 * while another send or half-close is in flight. */
int stk__rpc_astream_send(stk__rpc_astream *s, grpc_byte_buffer *msg);
/* stk__rpc_astream_send of m packed (-1 too when it cannot be packed). */
int stk__rpc_astream_send_msg(stk__rpc_astream *s, const ProtobufCMessage *m);
/* Start the half-close (no more sends). 0: one SEND event comes; -1: none.
 * Not while another send is in flight. */
int stk__rpc_astream_close_send(stk__rpc_astream *s);
/* Cancel the call: what is in flight completes (failed) and the STATUS
 * event comes (CANCELLED, unless the status had arrived). Any thread, any
 * number of times, until the stream is destroyed. */
void stk__rpc_astream_cancel(stk__rpc_astream *s);
/* Decode ev, taken from the caller's queue: 0 with *out filled when it is
 * an operation of an astream (a SEND's message is freed here), -1 when it
 * is not (a timeout, shutdown, or another tag). Thread-safe. */
int stk__rpc_astream_event(const grpc_event *ev, stk__rpc_aevent *out);
/* After the STATUS event: the call's gRPC status code, its details copied
 * into details (NULL-safe). */
int stk__rpc_astream_status(stk__rpc_astream *s, char *details, size_t dlen);
/* Free the stream. Only once no event of it is still to come (the owner
 * counts them); accepts NULL. */
void stk__rpc_astream_destroy(stk__rpc_astream *s);

/* A waker posts an event on a completion queue on demand, so a thread
 * waiting in grpc_completion_queue_next wakes at once (gRPC core has no
 * public alarm: a kick is a call on a lame channel, which fails at once).
 * stk__rpc_astream_event decodes its events as STK__RPC_AS_WAKE (and
 * frees what the kick held). */
typedef struct stk__rpc_waker stk__rpc_waker;
/* A waker for cq (which must outlive it). 0, or -1 (out of memory). */
int stk__rpc_waker_new(grpc_completion_queue *cq, stk__rpc_waker **out);
/* Post one WAKE event on the waker's queue. 0, or -1 (then none comes).
 * Thread-safe, never blocks. */
int stk__rpc_waker_kick(stk__rpc_waker *w);
/* Free the waker once no kick's event is still to come (its queue is
 * drained, e.g. shut down and emptied). Accepts NULL. */
void stk__rpc_waker_free(stk__rpc_waker *w);

#endif
