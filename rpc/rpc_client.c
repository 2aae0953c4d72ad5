/* rpc_client.c - the client side of the RPC layer: channels (with the
 * client's keepalive, backoff and fixed receive window), blocking unary
 * calls and streams, each with a pluck completion queue of its own, and
 * asynchronous streams whose events come on a completion queue the caller
 * shares between many calls (with a waker to interrupt its wait). The
 * event-driven server is in rpc_server.c, the helpers both share in
 * rpc_common.c.
 *
 * Owns: each channel, stream and its completion queue, until its
 * close/destroy. Must not: print, exit, or hold a lock while blocked in
 * gRPC.
 */
#include "rpc/rpc.h"

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_tsan.h"

#define DEFAULT_MAX_MSG (16u << 20)
/* The receive window of a client's streams (client_args). */
#define STK__RPC_WINDOW (1 << 20)

static gpr_timespec deadline_in(int ms) {
  if (ms < 0) return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* Start ops on call under tag and block until they complete: the one
 * "send and wait" step of every blocking client call and stream. 0 when the
 * batch succeeded, -1 when it could not start or failed (the call is
 * broken or cancelled). */
static int run_batch(grpc_call *call, grpc_completion_queue *cq, const grpc_op *ops,
                     size_t n, void *tag) {
  if (grpc_call_start_batch(call, ops, n, tag, NULL) != GRPC_CALL_OK) return -1;
  grpc_event ev =
      grpc_completion_queue_pluck(cq, tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
  return ev.success ? 0 : -1;
}

/* Send msg (taking ownership) on a client stream and wait for flow
 * control. 0 or -1. */
static int send_wait(grpc_call *call, grpc_completion_queue *cq, void *tag,
                     grpc_byte_buffer *msg) {
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = msg;
  int rc = run_batch(call, cq, &op, 1, tag);
  grpc_byte_buffer_destroy(msg);
  return rc;
}

static void copy_slice(grpc_slice s, char *out, size_t len) {
  if (!out || !len) return;
  size_t n = GRPC_SLICE_LENGTH(s);
  if (n >= len) n = len - 1;
  memcpy(out, GRPC_SLICE_START_PTR(s), n);
  out[n] = 0;
}

typedef struct int_arg {
  const char *key;
  int value;
} int_arg;

static const int_arg client_args[] = {
    {GRPC_ARG_KEEPALIVE_TIME_MS, 10000},
    /* A ping answered late on a busy host is not a dead peer: 20 s before the
     * connection is dropped ("keepalive watchdog timeout" was seen at 5 s
     * with hundreds of processes on 2 cores). */
    {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000},
    {GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1},
    {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100},
    /* Also gRPC's minimum time one connection attempt may take (TCP connect
     * plus the TLS and HTTP/2 handshakes): at 100 ms a TLS handshake on a
     * loaded 2-core host was cut off ("handshaker shutdown") on every
     * retry, and a client never joined. Retries still start 100 ms apart. */
    {GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10000},
    {GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000},
    /* Our own connection per channel, so one worker stream per TCP link. */
    {GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1},
    {GRPC_ARG_ENABLE_RETRIES, 0},
    /* A fixed receive window per stream. With BDP probing gRPC grows the
     * window from its bandwidth estimate and reads that far ahead of the
     * client into 64 KiB buffers: a rank streaming from 2 workers had 650
     * of them (42 MiB) in flight, and each new peak of that read-ahead
     * raised the rank's heap for good. A fixed window bounds what one
     * stream can have in flight at STK__RPC_WINDOW plus the message being
     * completed; at 1 MiB and a 1 ms round trip a stream still carries
     * ~1 GB/s (grpc-java and grpc-go use the same fixed 1 MiB window). */
    {GRPC_ARG_HTTP2_BDP_PROBE, 0},
    {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, STK__RPC_WINDOW},
};

#define MAX_ARGS 16

/* Fill a[MAX_ARGS] with the message size limits and the client's
 * settings above; *n gets the count. (The server's are in rpc_server.c.) */
static void make_args(grpc_arg *a, size_t *n, size_t max_msg) {
  const int_arg *set = client_args;
  size_t nset = sizeof(client_args) / sizeof(client_args[0]);
  size_t i = 0;
  a[i].type = GRPC_ARG_INTEGER, a[i].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
  a[i++].value.integer = max_msg > INT_MAX ? INT_MAX : (int)max_msg;
  a[i].type = GRPC_ARG_INTEGER, a[i].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
  a[i++].value.integer = max_msg > INT_MAX ? INT_MAX : (int)max_msg;
  for (size_t k = 0; k < nset && i < MAX_ARGS; k++, i++) {
    a[i].type = GRPC_ARG_INTEGER;
    a[i].key = (char *)set[k].key;
    a[i].value.integer = set[k].value;
  }
  *n = i;
}

/* ---- Client ------------------------------------------------------------ */

struct stk__rpc_channel {
  grpc_channel *channel;
  char *auth; /* "Bearer <token>" or NULL */
  size_t max_msg;
};

int stk__rpc_channel_open(const char *target, size_t max_msg, const char *token,
                          const stk__tls *tls, stk__rpc_channel **out) {
  *out = NULL;
  stk__rpc_channel *ch = calloc(1, sizeof(*ch));
  if (!ch) return -1;
  ch->max_msg = max_msg ? max_msg : DEFAULT_MAX_MSG;
  if (token && *token) {
    ch->auth = malloc(strlen(token) + 8);
    if (!ch->auth) {
      free(ch);
      return -1;
    }
    sprintf(ch->auth, "Bearer %s", token);
  }
  stk__rpc_init();
  grpc_arg a[MAX_ARGS];
  size_t na;
  make_args(a, &na, ch->max_msg);
  grpc_channel_args args = {na, a};
  grpc_channel_credentials *creds = stk__tls_channel_creds(tls);
  ch->channel = grpc_channel_create(target, creds, &args);
  grpc_channel_credentials_release(creds);
  *out = ch;
  return 0;
}

void stk__rpc_channel_close(stk__rpc_channel *ch) {
  if (!ch) return;
  grpc_channel_destroy(ch->channel);
  free(ch->auth);
  free(ch);
  stk__rpc_shutdown();
}

static void set_auth(stk__rpc_channel *ch, grpc_op *op, grpc_metadata *md) {
  op->op = GRPC_OP_SEND_INITIAL_METADATA;
  if (ch->auth) {
    md->key = grpc_slice_from_static_string("authorization");
    md->value = grpc_slice_from_static_string(ch->auth);
    op->data.send_initial_metadata.count = 1;
    op->data.send_initial_metadata.metadata = md;
  }
}

static grpc_call *new_call(stk__rpc_channel *ch, grpc_completion_queue *cq,
                           const char *method, int timeout_ms) {
  grpc_slice m = grpc_slice_from_copied_string(method);
  grpc_call *call = grpc_channel_create_call(
      ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL,
      timeout_ms > 0 ? deadline_in(timeout_ms) : gpr_inf_future(GPR_CLOCK_MONOTONIC),
      NULL);
  grpc_slice_unref(m);
  return call;
}

int stk__rpc_unary(stk__rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                   int timeout_ms, char *details, size_t dlen) {
  return stk__rpc_unary_stoppable(ch, method, req, resp_desc, resp, timeout_ms, details,
                                  dlen, NULL, NULL);
}

int stk__rpc_unary_stoppable(stk__rpc_channel *ch, const char *method,
                             const ProtobufCMessage *req,
                             const ProtobufCMessageDescriptor *resp_desc,
                             ProtobufCMessage **resp, int timeout_ms, char *details,
                             size_t dlen, int (*stop)(void *), void *stop_arg) {
  *resp = NULL;
  if (details && dlen) details[0] = 0;
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_call *call = new_call(ch, cq, method, timeout_ms);
  grpc_byte_buffer *send = stk__rpc_pack(req), *recv = NULL;
  grpc_metadata_array init_md, trail_md;
  grpc_metadata_array_init(&init_md);
  grpc_metadata_array_init(&trail_md);
  grpc_status_code status = GRPC_STATUS_UNKNOWN;
  grpc_slice det = grpc_empty_slice();
  grpc_metadata auth;
  grpc_op ops[6];
  memset(ops, 0, sizeof(ops));
  set_auth(ch, &ops[0], &auth);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trail_md;
  ops[5].data.recv_status_on_client.status = &status;
  ops[5].data.recv_status_on_client.status_details = &det;
  char tag;
  if (grpc_call_start_batch(call, ops, 6, &tag, NULL) == GRPC_CALL_OK) {
    /* Success or not, the status op reports the outcome. With stop: wait
     * in slices of STK__RPC_STOP_SLICE_MS and cancel the call once stop
     * says so (the status op then completes as CANCELLED). */
    int cancelled = 0;
    for (;;) {
      gpr_timespec until = stop && !cancelled ? deadline_in(STK__RPC_STOP_SLICE_MS)
                                              : gpr_inf_future(GPR_CLOCK_MONOTONIC);
      grpc_event ev = grpc_completion_queue_pluck(cq, &tag, until, NULL);
      if (ev.type != GRPC_QUEUE_TIMEOUT) break;
      if (!cancelled && stop(stop_arg)) {
        grpc_call_cancel_with_status(call, GRPC_STATUS_CANCELLED, "stopped by the caller",
                                     NULL);
        cancelled = 1;
      }
    }
    copy_slice(det, details, dlen);
    if (status == GRPC_STATUS_OK) {
      *resp = stk__rpc_unpack(resp_desc, recv, ch->max_msg);
      if (!*resp) {
        status = GRPC_STATUS_INTERNAL;
        if (details && dlen) snprintf(details, dlen, "malformed response");
      }
    }
  } else {
    status = GRPC_STATUS_INTERNAL;
  }
  grpc_slice_unref(det);
  if (send) grpc_byte_buffer_destroy(send);
  if (recv) grpc_byte_buffer_destroy(recv);
  grpc_metadata_array_destroy(&init_md);
  grpc_metadata_array_destroy(&trail_md);
  grpc_call_unref(call);
  grpc_completion_queue_shutdown(cq);
  grpc_completion_queue_destroy(cq);
  return (int)status;
}

struct stk__rpc_stream {
  stk__rpc_channel *ch;
  grpc_call *call;
  grpc_completion_queue *cq;
  int recv_pending, got_md, status_done;
  grpc_byte_buffer *recv_bb;
  grpc_metadata_array init_md, trail_md;
  grpc_status_code status;
  grpc_slice details;
  grpc_metadata auth;
  char tag_send, tag_recv, tag_status;
};

int stk__rpc_stream_open(stk__rpc_channel *ch, const char *method, int timeout_ms,
                         stk__rpc_stream **out) {
  *out = NULL;
  stk__rpc_stream *s = calloc(1, sizeof(*s));
  if (!s) return -1;
  s->ch = ch;
  s->cq = grpc_completion_queue_create_for_pluck(NULL);
  s->call = new_call(ch, s->cq, method, timeout_ms);
  grpc_metadata_array_init(&s->init_md);
  grpc_metadata_array_init(&s->trail_md);
  s->details = grpc_empty_slice();
  s->status = GRPC_STATUS_UNKNOWN;
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  op.data.recv_status_on_client.trailing_metadata = &s->trail_md;
  op.data.recv_status_on_client.status = &s->status;
  op.data.recv_status_on_client.status_details = &s->details;
  grpc_call_start_batch(s->call, &op, 1, &s->tag_status, NULL);
  memset(&op, 0, sizeof(op));
  set_auth(ch, &op, &s->auth);
  run_batch(s->call, s->cq, &op, 1, &s->tag_send); /* a failure shows in the status */
  *out = s;
  return 0;
}

int stk__rpc_stream_send(stk__rpc_stream *s, grpc_byte_buffer *msg) {
  return send_wait(s->call, s->cq, &s->tag_send, msg);
}

int stk__rpc_stream_send_msg(stk__rpc_stream *s, const ProtobufCMessage *m) {
  grpc_byte_buffer *bb = stk__rpc_pack(m);
  return bb ? stk__rpc_stream_send(s, bb) : -1;
}

/* A stream's next receive into ops[0..n): its initial metadata into md
 * first when got_md is 0, then one message into *bb (cleared). Returns n. */
static size_t recv_ops(grpc_op ops[2], int got_md, grpc_metadata_array *md,
                       grpc_byte_buffer **bb) {
  size_t n = 0;
  memset(ops, 0, 2 * sizeof(*ops));
  if (!got_md) {
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = md;
  }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n++].data.recv_message.recv_message = bb;
  *bb = NULL;
  return n;
}

int stk__rpc_stream_recv(stk__rpc_stream *s, grpc_byte_buffer **out, int timeout_ms) {
  *out = NULL;
  if (!s->recv_pending) {
    grpc_op ops[2];
    size_t n = recv_ops(ops, s->got_md, &s->init_md, &s->recv_bb);
    s->got_md = 1;
    if (grpc_call_start_batch(s->call, ops, n, &s->tag_recv, NULL) != GRPC_CALL_OK)
      return -1;
    s->recv_pending = 1;
  }
  grpc_event ev = grpc_completion_queue_pluck(
      s->cq, &s->tag_recv,
      timeout_ms < 0 ? gpr_inf_future(GPR_CLOCK_MONOTONIC) : deadline_in(timeout_ms),
      NULL);
  if (ev.type == GRPC_QUEUE_TIMEOUT) return -2;
  s->recv_pending = 0;
  if (!ev.success) {
    if (s->recv_bb) grpc_byte_buffer_destroy(s->recv_bb);
    s->recv_bb = NULL;
    return -1;
  }
  if (!s->recv_bb) return 0;
  *out = s->recv_bb;
  s->recv_bb = NULL;
  return 1;
}

int stk__rpc_stream_close_send(stk__rpc_stream *s) {
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  return run_batch(s->call, s->cq, &op, 1, &s->tag_send);
}

int stk__rpc_stream_status(stk__rpc_stream *s, int timeout_ms, char *details,
                           size_t dlen) {
  if (!s->status_done) {
    grpc_event ev = grpc_completion_queue_pluck(
        s->cq, &s->tag_status,
        timeout_ms < 0 ? gpr_inf_future(GPR_CLOCK_MONOTONIC) : deadline_in(timeout_ms),
        NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
      if (details && dlen) snprintf(details, dlen, "no status yet");
      return GRPC_STATUS_DEADLINE_EXCEEDED;
    }
    s->status_done = 1;
  }
  copy_slice(s->details, details, dlen);
  return (int)s->status;
}

void stk__rpc_stream_cancel(stk__rpc_stream *s) { grpc_call_cancel(s->call, NULL); }

void stk__rpc_stream_destroy(stk__rpc_stream *s) {
  if (!s) return;
  grpc_call_cancel(s->call, NULL);
  if (s->recv_pending) {
    grpc_completion_queue_pluck(s->cq, &s->tag_recv, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                NULL);
    if (s->recv_bb) grpc_byte_buffer_destroy(s->recv_bb);
  }
  if (!s->status_done)
    grpc_completion_queue_pluck(s->cq, &s->tag_status,
                                gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
  grpc_slice_unref(s->details);
  grpc_metadata_array_destroy(&s->init_md);
  grpc_metadata_array_destroy(&s->trail_md);
  grpc_call_unref(s->call);
  grpc_completion_queue_shutdown(s->cq);
  grpc_completion_queue_destroy(s->cq);
  free(s);
}

/* ---- Client, asynchronous streams -------------------------------------- */

#define ASTREAM_MAGIC 0x53544b41u /* "AKTS" */

/* The tag of one kind of operation: the queue hands it back in ev.tag. */
typedef struct atag {
  uint32_t magic;
  int kind;
  stk__rpc_astream *s; /* NULL for a waker's kick */
} atag;

struct stk__rpc_astream {
  grpc_call *call;
  void *user;
  int got_md;                /* the initial metadata was asked for */
  grpc_byte_buffer *recv_bb; /* the receive's message (RECV's thread) */
  grpc_byte_buffer *send_bb; /* the message in flight (freed at its SEND) */
  grpc_metadata_array init_md, trail_md;
  grpc_status_code status;
  grpc_slice details;
  grpc_metadata auth;
  atag tags[3]; /* RECV, SEND, STATUS */
};

static atag *atag_of(stk__rpc_astream *s, int kind) {
  return &s->tags[kind - STK__RPC_AS_RECV];
}

/* Before a batch of s starts (rpc_tsan.h): release on its tag, which the
 * event acquires first (to read the tag), and on s, which it acquires
 * next (for everything written before any of s's batches). */
static void astream_handover(stk__rpc_astream *s, int kind) {
  (void)s, (void)kind;
  TAG_HANDOVER(atag_of(s, kind));
  TAG_HANDOVER(s);
}

int stk__rpc_astream_open(stk__rpc_channel *ch, grpc_completion_queue *cq,
                          const char *method, void *user, stk__rpc_astream **out) {
  *out = NULL;
  stk__rpc_astream *s = calloc(1, sizeof(*s));
  if (!s) return -1;
  s->user = user;
  for (int k = STK__RPC_AS_RECV; k <= STK__RPC_AS_STATUS; k++)
    *atag_of(s, k) = (atag){ASTREAM_MAGIC, k, s};
  s->call = new_call(ch, cq, method, 0);
  if (!s->call) {
    free(s);
    return -1;
  }
  grpc_metadata_array_init(&s->init_md);
  grpc_metadata_array_init(&s->trail_md);
  s->details = grpc_empty_slice();
  s->status = GRPC_STATUS_UNKNOWN;
  /* The initial metadata and the status in one batch: its one event is
   * the call's end, and sends may start at once (gRPC orders them after
   * the metadata). */
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  set_auth(ch, &ops[0], &s->auth);
  ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[1].data.recv_status_on_client.trailing_metadata = &s->trail_md;
  ops[1].data.recv_status_on_client.status = &s->status;
  ops[1].data.recv_status_on_client.status_details = &s->details;
  grpc_call *call = s->call; /* nothing of s is read after the hand-over */
  astream_handover(s, STK__RPC_AS_STATUS);
  if (grpc_call_start_batch(call, ops, 2, atag_of(s, STK__RPC_AS_STATUS), NULL) !=
      GRPC_CALL_OK) {
    grpc_call_cancel(s->call, NULL);
    grpc_call_unref(s->call);
    grpc_metadata_array_destroy(&s->init_md);
    grpc_metadata_array_destroy(&s->trail_md);
    free(s);
    return -1;
  }
  *out = s;
  return 0;
}

int stk__rpc_astream_recv(stk__rpc_astream *s) {
  grpc_op ops[2];
  size_t n = recv_ops(ops, s->got_md, &s->init_md, &s->recv_bb);
  int had_md = s->got_md;
  s->got_md = 1; /* before the hand-over: the next receive may be elsewhere */
  grpc_call *call = s->call;
  astream_handover(s, STK__RPC_AS_RECV);
  if (grpc_call_start_batch(call, ops, n, atag_of(s, STK__RPC_AS_RECV), NULL) !=
      GRPC_CALL_OK) {
    s->got_md = had_md; /* no event comes: still ours */
    return -1;
  }
  return 0;
}

grpc_byte_buffer *stk__rpc_astream_recv_take(stk__rpc_astream *s) {
  grpc_byte_buffer *bb = s->recv_bb;
  s->recv_bb = NULL;
  return bb;
}

int stk__rpc_astream_send(stk__rpc_astream *s, grpc_byte_buffer *msg) {
  if (!msg) return -1;
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = msg;
  s->send_bb = msg;
  grpc_call *call = s->call;
  astream_handover(s, STK__RPC_AS_SEND);
  if (grpc_call_start_batch(call, &op, 1, atag_of(s, STK__RPC_AS_SEND), NULL) !=
      GRPC_CALL_OK) {
    s->send_bb = NULL;
    grpc_byte_buffer_destroy(msg);
    return -1;
  }
  return 0;
}

int stk__rpc_astream_send_msg(stk__rpc_astream *s, const ProtobufCMessage *m) {
  return stk__rpc_astream_send(s, stk__rpc_pack(m));
}

int stk__rpc_astream_close_send(stk__rpc_astream *s) {
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  grpc_call *call = s->call;
  astream_handover(s, STK__RPC_AS_SEND);
  return grpc_call_start_batch(call, &op, 1, atag_of(s, STK__RPC_AS_SEND), NULL) ==
                 GRPC_CALL_OK
             ? 0
             : -1;
}

void stk__rpc_astream_cancel(stk__rpc_astream *s) { grpc_call_cancel(s->call, NULL); }

/* One kick of a waker: a call on its lame channel, failing at once. */
typedef struct wake_op {
  atag t; /* first: the event's tag */
  grpc_call *call;
  grpc_metadata_array trail_md;
  grpc_status_code status;
  grpc_slice details;
} wake_op;

struct stk__rpc_waker {
  grpc_channel *lame;
  grpc_completion_queue *cq;
};

static void wake_op_free(wake_op *k) {
  grpc_call_unref(k->call);
  grpc_metadata_array_destroy(&k->trail_md);
  grpc_slice_unref(k->details);
  free(k);
}

int stk__rpc_waker_new(grpc_completion_queue *cq, stk__rpc_waker **out) {
  *out = NULL;
  stk__rpc_waker *w = calloc(1, sizeof(*w));
  if (!w) return -1;
  stk__rpc_init();
  w->cq = cq;
  w->lame =
      grpc_lame_client_channel_create("stoker-wake", GRPC_STATUS_UNAVAILABLE, "wake");
  if (!w->lame) {
    free(w);
    stk__rpc_shutdown();
    return -1;
  }
  *out = w;
  return 0;
}

int stk__rpc_waker_kick(stk__rpc_waker *w) {
  wake_op *k = calloc(1, sizeof(*k));
  if (!k) return -1;
  k->t = (atag){ASTREAM_MAGIC, STK__RPC_AS_WAKE, NULL};
  grpc_slice m = grpc_slice_from_static_string("/stoker.v1.Wake/Wake");
  k->call = grpc_channel_create_call(w->lame, NULL, GRPC_PROPAGATE_DEFAULTS, w->cq, m,
                                     NULL, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
  if (!k->call) {
    free(k);
    return -1;
  }
  grpc_metadata_array_init(&k->trail_md);
  k->details = grpc_empty_slice();
  grpc_op ops[2];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[1].data.recv_status_on_client.trailing_metadata = &k->trail_md;
  ops[1].data.recv_status_on_client.status = &k->status;
  ops[1].data.recv_status_on_client.status_details = &k->details;
  grpc_call *call = k->call; /* k may be freed once handed over */
  TAG_HANDOVER(k);
  if (grpc_call_start_batch(call, ops, 2, &k->t, NULL) != GRPC_CALL_OK) {
    wake_op_free(k);
    return -1;
  }
  return 0;
}

void stk__rpc_waker_free(stk__rpc_waker *w) {
  if (!w) return;
  grpc_channel_destroy(w->lame);
  free(w);
  stk__rpc_shutdown();
}

int stk__rpc_astream_event(const grpc_event *ev, stk__rpc_aevent *out) {
  if (ev->type != GRPC_OP_COMPLETE || !ev->tag) return -1;
  const atag *t = ev->tag;
  TAG_TAKEOVER(t); /* a wake_op's tag is its first member: the whole kick */
  if (t->magic != ASTREAM_MAGIC) return -1;
  if (t->kind == STK__RPC_AS_WAKE) {
    wake_op_free((wake_op *)ev->tag);
    memset(out, 0, sizeof(*out));
    out->kind = STK__RPC_AS_WAKE;
    out->ok = 1;
    return 0;
  }
  stk__rpc_astream *s = t->s;
  TAG_TAKEOVER(s); /* astream_handover */
  out->s = s;
  out->user = s->user;
  out->kind = t->kind;
  out->ok = ev->success;
  if (t->kind == STK__RPC_AS_SEND && s->send_bb) {
    grpc_byte_buffer_destroy(s->send_bb);
    s->send_bb = NULL;
  }
  if (t->kind == STK__RPC_AS_RECV && !ev->success && s->recv_bb) {
    grpc_byte_buffer_destroy(s->recv_bb);
    s->recv_bb = NULL;
  }
  return 0;
}

int stk__rpc_astream_status(stk__rpc_astream *s, char *details, size_t dlen) {
  copy_slice(s->details, details, dlen);
  return (int)s->status;
}

void stk__rpc_astream_destroy(stk__rpc_astream *s) {
  if (!s) return;
  if (s->recv_bb) grpc_byte_buffer_destroy(s->recv_bb);
  if (s->send_bb) grpc_byte_buffer_destroy(s->send_bb);
  grpc_slice_unref(s->details);
  grpc_metadata_array_destroy(&s->init_md);
  grpc_metadata_array_destroy(&s->trail_md);
  grpc_call_unref(s->call);
  free(s);
}
