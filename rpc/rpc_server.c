/* rpc_server.c - the event-driven gRPC server of both daemons (see the
 * "Server" section of rpc.h): one completion queue, a fixed set of threads
 * that take its events, and every call a small state machine driven by
 * five tags (new call, receive, send, status, close). Who may call is
 * auth.c's verdict, how many calls a peer and the server may hold
 * call_limits.c's; their shared state is server_internal.h.
 *
 * Owns: the grpc_server, its completion queue and threads, every call
 * object (freed once its last operation completed and its closed callback
 * returned). Lock order: server mutex, then a call's mutex; no lock of
 * ours is held while a handler callback runs. Must not: print, exit, or
 * block a server thread.
 */
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/thread.h"
#include "common/clock.h"
#include "common/error.h"
#include "rpc/peer.h"
#include "rpc/rpc.h"
#include "rpc_tsan.h"
#include "server_internal.h"

#define DEFAULT_MAX_MSG   (16u << 20)
#define DEFAULT_MAX_CALLS 4096
#define DEFAULT_THREADS   2
#define PENDING_REQUESTS  16  /* grpc_server_request_call slots kept open */
#define SWEEP_MS          200 /* how often the deadlines are checked */

/* ---- Call objects ------------------------------------------------------ */

static stk__rpc_call *call_new(stk__rpc_server *s) {
  stk__rpc_call *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->srv = s;
  grpc_call_details_init(&c->details);
  grpc_metadata_array_init(&c->md);
  pthread_mutex_init(&c->mu, NULL);
  c->t_new = (tag){TAG_NEW, c};
  c->t_recv = (tag){TAG_RECV, c};
  c->t_send = (tag){TAG_SEND, c};
  c->t_status = (tag){TAG_STATUS, c};
  c->t_close = (tag){TAG_CLOSE, c};
  c->status_details = grpc_empty_slice();
  return c;
}

static void drop_queue_locked(stk__rpc_call *c) {
  for (sendq *n = c->q, *next; n; n = next) {
    next = n->next;
    grpc_byte_buffer_destroy(n->bb);
    free(n);
  }
  c->q = c->q_tail = NULL;
}

static void call_free(stk__rpc_call *c) {
  drop_queue_locked(c);
  if (c->recv_bb) grpc_byte_buffer_destroy(c->recv_bb);
  if (c->send_bb) grpc_byte_buffer_destroy(c->send_bb);
  grpc_slice_unref(c->status_details);
  grpc_metadata_array_destroy(&c->md);
  grpc_call_details_destroy(&c->details);
  if (c->call) grpc_call_unref(c->call);
  if (c->peer) gpr_free(c->peer);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* Start ops under t; counts as in flight. 0, or -1 (nothing started). */
static int start_locked(stk__rpc_call *c, const grpc_op *ops, size_t n, tag *t) {
  TAG_HANDOVER(t);
  if (grpc_call_start_batch(c->call, ops, n, t, NULL) != GRPC_CALL_OK) return -1;
  c->inflight++;
  return 0;
}

static void start_recv_locked(stk__rpc_call *c) {
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &c->recv_bb;
  c->recv_bb = NULL;
  if (start_locked(c, &op, 1, &c->t_recv)) c->broken = 1;
}

static void start_status_locked(stk__rpc_call *c) {
  grpc_op ops[2];
  size_t n = 0;
  memset(ops, 0, sizeof(ops));
  if (!c->md_sent) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = c->status_code;
  ops[n++].data.send_status_from_server.status_details = &c->status_details;
  c->status_queued = 0;
  c->status_started = 1;
  c->md_sent = 1;
  if (start_locked(c, ops, n, &c->t_status)) c->broken = 1;
}

/* Start the next queued message, or the queued status when the queue is
 * empty. 1 when the queue just became empty with nothing started (the
 * caller delivers `drained`), else 0. */
static int pump_send_locked(stk__rpc_call *c) {
  if (c->send_bb || c->broken || c->close_seen) return 0;
  sendq *n = c->q;
  if (!n) {
    if (c->status_queued) start_status_locked(c);
    return 0;
  }
  c->q = n->next;
  if (!c->q) c->q_tail = NULL;
  c->send_bb = n->bb;
  free(n);
  grpc_op ops[2];
  size_t k = 0;
  memset(ops, 0, sizeof(ops));
  if (!c->md_sent) ops[k++].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[k].op = GRPC_OP_SEND_MESSAGE;
  ops[k++].data.send_message.send_message = c->send_bb;
  c->md_sent = 1;
  c->send_since_ms = stk__now_ms();
  if (start_locked(c, ops, k, &c->t_send)) {
    grpc_byte_buffer_destroy(c->send_bb);
    c->send_bb = NULL;
    c->broken = 1;
    drop_queue_locked(c);
  }
  return 0;
}

void stk__rpc_call_cancel_locked(stk__rpc_call *c, grpc_status_code code,
                                 const char *why) {
  c->finished = 1;
  c->aborted = 1;
  c->status_queued = 0;
  drop_queue_locked(c);
  grpc_call_cancel_with_status(c->call, code, why, NULL);
}

/* One operation of c was handled: drop it from the count and, when the
 * call is over (close seen, nothing in flight), deliver `closed` and free
 * the call. */
static void op_done(stk__rpc_call *c) {
  pthread_mutex_lock(&c->mu);
  c->inflight--;
  int last = c->close_seen && c->inflight == 0 && !c->done;
  if (last) c->done = 1;
  pthread_mutex_unlock(&c->mu);
  if (!last) return;
  if (c->opened && c->method->stream->closed) c->method->stream->closed(c);
  stk__rpc_server *s = c->srv;
  pthread_mutex_lock(&s->mu);
  if (c->prev) c->prev->next = c->next;
  else s->live = c->next;
  if (c->next) c->next->prev = c->prev;
  s->ncalls--;
  if (c->counted) s->st.open_calls--, stk__rpc_limits_release_locked(s, c, 0);
  if (c->counted_free) s->open_free--, stk__rpc_limits_release_locked(s, c, 1);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  call_free(c);
}

/* ---- The public call API ----------------------------------------------- */

int stk__rpc_call_sendv(stk__rpc_call *c, grpc_byte_buffer **msgs, size_t n) {
  sendq *first = NULL, *last = NULL;
  int ok = 1;
  for (size_t i = 0; i < n; i++) {
    sendq *e = msgs[i] ? malloc(sizeof(*e)) : NULL;
    if (!e) {
      ok = 0;
      break;
    }
    e->bb = msgs[i];
    e->next = NULL;
    if (last) last->next = e;
    else first = e;
    last = e;
  }
  pthread_mutex_lock(&c->mu);
  if (ok && first && !c->finished && !c->broken && !c->close_seen && !c->done) {
    if (c->q_tail) c->q_tail->next = first;
    else c->q = first;
    c->q_tail = last;
    pump_send_locked(c);
    ok = !c->broken;
    pthread_mutex_unlock(&c->mu);
    return ok ? 0 : -1;
  }
  pthread_mutex_unlock(&c->mu);
  for (sendq *e = first, *next; e; e = next) next = e->next, free(e);
  for (size_t i = 0; i < n; i++)
    if (msgs[i]) grpc_byte_buffer_destroy(msgs[i]);
  return -1;
}

int stk__rpc_call_send(stk__rpc_call *c, grpc_byte_buffer *msg) {
  return stk__rpc_call_sendv(c, &msg, 1);
}

int stk__rpc_call_send_msg(stk__rpc_call *c, const ProtobufCMessage *m) {
  grpc_byte_buffer *bb = stk__rpc_pack(m);
  return bb ? stk__rpc_call_send(c, bb) : -1;
}

int stk__rpc_call_finish(stk__rpc_call *c, grpc_status_code code, const char *details) {
  pthread_mutex_lock(&c->mu);
  int rc = 0;
  if (c->done || c->close_seen) rc = -1;
  else if (!c->finished) {
    c->finished = 1;
    c->status_queued = 1;
    c->status_code = code;
    grpc_slice_unref(c->status_details);
    c->status_details = grpc_slice_from_copied_string(details ? details : "");
    pump_send_locked(c);
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

grpc_byte_buffer *stk__rpc_shared_buffer(grpc_slice *slices, size_t n) {
  return grpc_raw_byte_buffer_create(slices, n);
}

void stk__rpc_call_hold(stk__rpc_call *c) {
  pthread_mutex_lock(&c->mu);
  c->inflight++;
  c->deferred = 1;
  pthread_mutex_unlock(&c->mu);
}

void stk__rpc_call_release(stk__rpc_call *c) { op_done(c); }

int stk__rpc_call_reply(stk__rpc_call *c, const ProtobufCMessage *m) {
  if (stk__rpc_call_send_msg(c, m)) {
    stk__rpc_call_abort(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "cannot send the reply");
    return -1;
  }
  return stk__rpc_call_finish(c, GRPC_STATUS_OK, "");
}

void stk__rpc_call_abort(stk__rpc_call *c, grpc_status_code code, const char *details) {
  pthread_mutex_lock(&c->mu);
  if (!c->done && !c->close_seen && !c->status_started && !c->broken && !c->aborted)
    stk__rpc_call_cancel_locked(c, code, details ? details : "");
  else c->finished = 1;
  pthread_mutex_unlock(&c->mu);
}

int64_t stk__rpc_call_send_wait_ms(stk__rpc_call *c, int64_t now_ms) {
  pthread_mutex_lock(&c->mu);
  int64_t w =
      c->send_since_ms && now_ms > c->send_since_ms ? now_ms - c->send_since_ms : 0;
  pthread_mutex_unlock(&c->mu);
  return w;
}

const char *stk__rpc_call_peer(stk__rpc_call *c) {
  return c->pinfo.shown[0] ? c->pinfo.shown : "?";
}
void stk__rpc_call_set_data(stk__rpc_call *c, void *data) { c->data = data; }
void *stk__rpc_call_data(stk__rpc_call *c) { return c->data; }
unsigned stk__rpc_call_roles(stk__rpc_call *c) { return c->roles; }

/* ---- Events -------------------------------------------------------------- */

/* Open one slot for a new call. 0, or -1 (retried by the sweep; none once
 * the server is stopping). Under s->mu with the stopping check, so no
 * request can reach gRPC during or after stk__rpc_server_stop's shutdown
 * and destroy (found by TSan: a SEGV in grpc_server_request_call from a
 * sweep racing the stop). gRPC calls nothing of ours synchronously from
 * it, so holding the lock cannot deadlock. */
static int request_one(stk__rpc_server *s) {
  stk__rpc_call *c = call_new(s);
  if (!c) return -1;
  pthread_mutex_lock(&s->mu);
  grpc_call_error e = GRPC_CALL_ERROR;
  if (!s->stopping) {
    s->pending++;
    TAG_HANDOVER(&c->t_new);
    e = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq, s->cq,
                                 &c->t_new);
    if (e != GRPC_CALL_OK) s->pending--;
  }
  pthread_mutex_unlock(&s->mu);
  if (e != GRPC_CALL_OK) {
    c->call = NULL;
    call_free(c);
    return -1;
  }
  return 0;
}

/* A new call: watch for its end, check method, token and the limit, then
 * hand it to its handler. The reference of the event is held until the
 * end of this function (inflight starts at 1). */
static void on_new(stk__rpc_call *c) {
  stk__rpc_server *s = c->srv;
  c->start_ms = stk__now_ms();
  c->peer = grpc_call_get_peer(c->call);
  stk__peer_parse(c->peer, &c->pinfo); /* malformed: never loopback */
  for (size_t i = 0; i < s->nmethods; i++) {
    size_t n = strlen(s->methods[i].path);
    if (GRPC_SLICE_LENGTH(c->details.method) == n &&
        !memcmp(GRPC_SLICE_START_PTR(c->details.method), s->methods[i].path, n))
      c->method = &s->methods[i];
  }
  size_t peer_has = 0;
  pthread_mutex_lock(&s->mu);
  s->pending--;
  c->next = s->live;
  if (s->live) s->live->prev = c;
  s->live = c;
  s->ncalls++;
  int over = stk__rpc_limits_admit_locked(s, c, &peer_has);
  int stopping = s->stopping;
  pthread_mutex_unlock(&s->mu);
  if (!stopping) request_one(s);

  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->cancelled;
  pthread_mutex_lock(&c->mu);
  c->inflight = 1;                                             /* this event */
  if (start_locked(c, &op, 1, &c->t_close)) c->close_seen = 1; /* cannot happen */
  pthread_mutex_unlock(&c->mu);

  char msg[400];
  grpc_status_code code = GRPC_STATUS_OK;
  const char *why = NULL;
  if (!c->method) {
    stk__rpc_call_finish(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
  } else if ((why = stk__rpc_auth_admit(s, c, &code, msg, sizeof(msg)))) {
    stk__rpc_call_finish(c, code, why);
  } else if (over) {
    stk__rpc_limits_refusal(s, c, over, peer_has, msg, sizeof(msg));
    stk__rpc_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
  } else {
    /* `closed` cannot come before this event is done (inflight). */
    c->opened = c->method->stream != NULL;
    if (c->opened && c->method->stream->open(c) != 0) {
      c->opened = 0;
      stk__rpc_call_finish(c, GRPC_STATUS_INTERNAL, "refused"); /* no-op if finished */
    }
    pthread_mutex_lock(&c->mu);
    if (!c->finished && !c->close_seen) start_recv_locked(c);
    pthread_mutex_unlock(&c->mu);
  }
  op_done(c);
}

static void on_recv(stk__rpc_call *c, int success) {
  const stk__rpc_method *m = c->method;
  stk__rpc_server *s = c->srv;
  pthread_mutex_lock(&c->mu);
  grpc_byte_buffer *bb = success ? c->recv_bb : NULL;
  if (!success && c->recv_bb) grpc_byte_buffer_destroy(c->recv_bb);
  c->recv_bb = NULL;
  if (bb) c->got_message = 1;
  pthread_mutex_unlock(&c->mu);
  ProtobufCMessage *msg = NULL;
  int had = bb != NULL;
  char why[300];
  if (bb) {
    /* The method's own limit and the parse budgets; a refusal ends the
     * call here, once for every handler, saying which type and which
     * limit (INVALID_ARGUMENT or RESOURCE_EXHAUSTED). */
    int code = GRPC_STATUS_INVALID_ARGUMENT;
    msg = stk__rpc_unpack_ex(m->request, bb,
                             m->max_recv_bytes ? m->max_recv_bytes : s->max_msg, 0, &code,
                             why, sizeof(why));
    grpc_byte_buffer_destroy(bb);
    if (!msg) stk__rpc_call_abort(c, (grpc_status_code)code, why);
  }
  if (m->unary) {
    if (!success || (had && !msg)) {
      /* broken (the close event ends it), or refused above */
    } else if (!had) {
      snprintf(why, sizeof(why), "no request: a %s was expected", m->request->name);
      stk__rpc_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, why);
    } else if (gpr_time_cmp(c->details.deadline,
                            gpr_now(c->details.deadline.clock_type)) < 0) {
      /* The caller stopped waiting while the call sat in the queue (a
       * server behind its load): its answer would reach nobody, and the
       * caller asks again. Shed it instead of doing the work. */
      s->st.shed++;
      stk__rpc_call_finish(c, GRPC_STATUS_DEADLINE_EXCEEDED,
                           "the call waited past its deadline for a serving thread");
    } else {
      m->unary(c, msg);
      pthread_mutex_lock(&c->mu);
      int deferred = c->deferred;
      pthread_mutex_unlock(&c->mu);
      if (!deferred)
        stk__rpc_call_finish(c, GRPC_STATUS_INTERNAL, "handler ended without status");
    }
  } else if (success && !had) {
    if (m->stream->half_close) m->stream->half_close(c);
  } else if (success) {
    m->stream->message(c, msg);
    pthread_mutex_lock(&c->mu);
    if (!c->finished && !c->close_seen && !c->broken) start_recv_locked(c);
    pthread_mutex_unlock(&c->mu);
  }
  if (msg) protobuf_c_message_free_unpacked(msg, NULL);
  op_done(c);
}

static void on_send(stk__rpc_call *c, int success) {
  pthread_mutex_lock(&c->mu);
  if (c->send_bb) grpc_byte_buffer_destroy(c->send_bb);
  c->send_bb = NULL;
  c->send_since_ms = 0;
  if (!success) {
    c->broken = 1;
    drop_queue_locked(c);
  }
  int drained = success && !c->q && !c->status_queued && !c->finished;
  pump_send_locked(c);
  pthread_mutex_unlock(&c->mu);
  if (drained && c->opened && c->method->stream->drained) c->method->stream->drained(c);
  op_done(c);
}

static void on_close(stk__rpc_call *c) {
  pthread_mutex_lock(&c->mu);
  c->close_seen = 1;
  c->finished = 1;
  c->status_queued = 0;
  drop_queue_locked(c);
  pthread_mutex_unlock(&c->mu);
  op_done(c);
}

/* End calls past a deadline: no first message within first_ms, or a send
 * waiting on the peer longer than stall_ms. */
static void sweep(stk__rpc_server *s, int64_t now) {
  char why[160];
  pthread_mutex_lock(&s->mu);
  for (stk__rpc_call *c = s->live; c; c = c->next) {
    pthread_mutex_lock(&c->mu);
    if (!c->done && !c->close_seen && !c->broken && !c->aborted && c->inflight) {
      if (s->stall_ms > 0 && c->send_since_ms && now - c->send_since_ms > s->stall_ms) {
        snprintf(why, sizeof(why),
                 "the client stopped reading: a send waited over %d ms; stream "
                 "cancelled, ask again",
                 s->stall_ms);
        stk__rpc_call_cancel_locked(c, GRPC_STATUS_UNAVAILABLE, why);
        s->st.send_stalled++;
      } else if (s->first_ms > 0 && !c->got_message && !c->status_started &&
                 now - c->start_ms > s->first_ms) {
        snprintf(why, sizeof(why), "no request within %d ms of the call's start",
                 s->first_ms);
        stk__rpc_call_cancel_locked(c, GRPC_STATUS_DEADLINE_EXCEEDED, why);
        s->st.first_msg_late++;
      }
    }
    pthread_mutex_unlock(&c->mu);
  }
  pthread_mutex_unlock(&s->mu);
}

static void maybe_sweep(stk__rpc_server *s) {
  /* The threads run before grpc_server_start (below): asking gRPC for a
   * call before it crashes it (seen on a loaded host starting 64 workers). */
  if (!__atomic_load_n(&s->started, __ATOMIC_ACQUIRE)) return;
  int64_t now = stk__now_ms();
  int64_t next = __atomic_load_n(&s->next_sweep_ms, __ATOMIC_RELAXED);
  if (now < next) return;
  if (!__atomic_compare_exchange_n(&s->next_sweep_ms, &next, now + SWEEP_MS, 0,
                                   __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    return;
  sweep(s, now);
  /* Keep PENDING_REQUESTS slots open (one was lost to an allocation
   * failure). */
  for (;;) {
    pthread_mutex_lock(&s->mu);
    int more = !s->stopping && s->pending < PENDING_REQUESTS;
    pthread_mutex_unlock(&s->mu);
    if (!more || request_one(s)) break;
  }
}

static __thread int on_server_thread; /* 1 on a server's threads (cq_main) */

int stk__rpc_server_on_thread(void) { return on_server_thread; }

static void *cq_main(void *arg) {
  stk__rpc_server *s = arg;
  stk__thread_name("stk-rpc");
  on_server_thread = 1;
  for (;;) {
    gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                   gpr_time_from_millis(SWEEP_MS, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_next(s->cq, dl, NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type == GRPC_OP_COMPLETE) {
      tag *t = ev.tag;
      TAG_TAKEOVER(t);
      stk__rpc_call *c = t->c;
      switch (t->kind) {
        case TAG_NEW:
          if (ev.success) {
            on_new(c);
          } else { /* the server is shutting down: no call */
            pthread_mutex_lock(&s->mu);
            s->pending--;
            pthread_mutex_unlock(&s->mu);
            c->call = NULL;
            call_free(c);
          }
          break;
        case TAG_RECV:
          on_recv(c, ev.success);
          break;
        case TAG_SEND:
          on_send(c, ev.success);
          break;
        case TAG_STATUS:
          op_done(c);
          break;
        case TAG_CLOSE:
          on_close(c);
          break;
        case TAG_SHUTDOWN:
          pthread_mutex_lock(&s->mu);
          s->shutdown_seen = 1;
          pthread_cond_broadcast(&s->cv);
          pthread_mutex_unlock(&s->mu);
          break;
      }
    }
    maybe_sweep(s);
  }
  return NULL;
}

/* ---- Start and stop ------------------------------------------------------ */

static void add_int(grpc_arg *a, size_t *n, const char *key, int v) {
  a[*n].type = GRPC_ARG_INTEGER;
  a[*n].key = (char *)key;
  a[*n].value.integer = v;
  (*n)++;
}

int stk__rpc_server_start(const stk__rpc_server_config *cfg, stk__rpc_server **out,
                          int *port, char *err, size_t errlen) {
  *out = NULL;
  stk__rpc_server *s = calloc(1, sizeof(*s));
  if (!s) return stk__errf(err, errlen, -1, "out of memory");
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->t_shutdown = (tag){TAG_SHUTDOWN, NULL};
  s->max_msg = cfg->max_message_bytes ? cfg->max_message_bytes : DEFAULT_MAX_MSG;
  s->max_calls = cfg->max_calls ? cfg->max_calls : DEFAULT_MAX_CALLS;
  s->max_free = cfg->max_free_calls ? cfg->max_free_calls : 64;
  s->peer_all = cfg->max_calls_per_peer > 0;
  s->peer_calls = s->peer_all ? cfg->max_calls_per_peer : (s->max_calls + 1) / 2;
  s->peer_free = (s->max_free + 1) / 2;
  if (s->peer_all && s->peer_free > s->peer_calls) s->peer_free = s->peer_calls;
  s->first_ms = cfg->first_message_ms ? cfg->first_message_ms : 30000;
  s->stall_ms = cfg->send_stall_ms ? cfg->send_stall_ms : 10000;
  s->loopback_only = cfg->loopback_only;
  s->on_refused = cfg->on_refused;
  int nthreads = cfg->threads > 0 ? cfg->threads : DEFAULT_THREADS;
  if (nthreads > MAX_THREADS) nthreads = MAX_THREADS;
  s->nmethods = cfg->nmethods;
  s->methods = calloc(cfg->nmethods ? cfg->nmethods : 1, sizeof(stk__rpc_method));
  if (!s->methods || stk__rpc_auth_init(s, cfg)) {
    stk__errf(err, errlen, 0, "out of memory");
    goto fail;
  }
  memcpy(s->methods, cfg->methods, cfg->nmethods * sizeof(stk__rpc_method));
  for (size_t i = 0; i < s->nmethods; i++)
    if (!s->methods[i].request || !s->methods[i].unary == !s->methods[i].stream ||
        (s->methods[i].stream &&
         (!s->methods[i].stream->open || !s->methods[i].stream->message))) {
      stk__errf(err, errlen, 0, "method %s: bad table entry", s->methods[i].path);
      goto fail;
    }
  /* gRPC's receive limit is per server: the largest any method takes.
   * Each message is checked against its own method's in on_recv. */
  size_t max_recv = 0;
  for (size_t i = 0; i < s->nmethods; i++) {
    size_t m = s->methods[i].max_recv_bytes ? s->methods[i].max_recv_bytes : s->max_msg;
    if (m > max_recv) max_recv = m;
  }
  if (!max_recv) max_recv = s->max_msg;
  grpc_arg a[16];
  size_t na = 0;
  add_int(a, &na, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
          max_recv > INT_MAX ? INT_MAX : (int)max_recv);
  add_int(a, &na, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
          s->max_msg > INT_MAX ? INT_MAX : (int)s->max_msg);
  add_int(a, &na, GRPC_ARG_MAX_CONCURRENT_STREAMS,
          cfg->max_streams_per_conn > 0 ? cfg->max_streams_per_conn : 100);
  /* Clients ping every 10 s; let them, with or without calls. A peer that
   * pings more often than every 5 s while nothing is sent gets a strike;
   * past gRPC's default 2 strikes its connection ends (GOAWAY
   * ENHANCE_YOUR_CALM "too_many_pings"), so a PING flood costs nothing. */
  add_int(a, &na, GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  add_int(a, &na, GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  /* Our own pings find dead peers (a watcher or worker on a host that
   * vanished), also on connections without calls. */
  add_int(a, &na, GRPC_ARG_KEEPALIVE_TIME_MS,
          cfg->keepalive_ms > 0 ? cfg->keepalive_ms : 30000);
  /* 20 s to answer: a ping waits behind whatever the peer's machine is
   * busy with, and a connection dropped for a late answer costs far more
   * (every stream on it re-opened) than finding a dead peer later. */
  add_int(a, &na, GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
          cfg->keepalive_timeout_ms > 0 ? cfg->keepalive_timeout_ms : 20000);
  add_int(a, &na, GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  add_int(a, &na, GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  /* A connection that never completes its HTTP/2 preface is closed. */
  add_int(a, &na, GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 20000);
  /* No SO_REUSEPORT (gRPC's default on Linux): with it a second process of
   * the same user binding the same port explicitly (a daemon restarted on
   * its old port that another one took meanwhile) silently shares it, and
   * the kernel splits new connections between the two. */
  add_int(a, &na, GRPC_ARG_ALLOW_REUSEPORT, 0);
  grpc_channel_args args = {na, a};
  stk__rpc_init();
  s->server = grpc_server_create(&args, NULL);
  s->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(s->server, s->cq, NULL);
  grpc_server_credentials *creds = stk__tls_server_creds(cfg->tls);
  int p = creds ? grpc_server_add_http2_port(s->server, cfg->listen, creds) : 0;
  if (creds) grpc_server_credentials_release(creds);
  if (p <= 0) {
    if (cfg->tls)
      stk__errf(err, errlen, 0,
                "cannot listen on %s with TLS (address in use or not an address, or "
                "the certificate and key do not load or do not match)",
                cfg->listen);
    else
      stk__errf(err, errlen, 0, "cannot listen on %s (in use, or not an address)",
                cfg->listen);
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
               .type != GRPC_QUEUE_SHUTDOWN) {}
    grpc_completion_queue_destroy(s->cq);
    stk__rpc_shutdown();
    goto fail;
  }
  /* The threads first: without one, nothing is started. */
  for (int i = 0; i < nthreads; i++) {
    if (pthread_create(&s->threads[i], NULL, cq_main, s) != 0) break;
    s->nthreads++;
  }
  if (s->nthreads == 0) {
    stk__errf(err, errlen, 0, "cannot start a thread");
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
               .type != GRPC_QUEUE_SHUTDOWN) {}
    grpc_completion_queue_destroy(s->cq);
    stk__rpc_shutdown();
    goto fail;
  }
  grpc_server_start(s->server);
  for (int i = 0; i < PENDING_REQUESTS; i++) request_one(s);
  __atomic_store_n(&s->started, 1, __ATOMIC_RELEASE);
  if (port) *port = p;
  *out = s;
  return 0;
fail:
  free(s->methods);
  stk__rpc_auth_free(s);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
  return -1;
}

void stk__rpc_server_stats_get(stk__rpc_server *s, stk__rpc_server_stats *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->st;
  pthread_mutex_unlock(&s->mu);
}

void stk__rpc_server_stop(stk__rpc_server *s, int grace_ms) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  pthread_mutex_unlock(&s->mu);
  grpc_server_shutdown_and_notify(s->server, s->cq, &s->t_shutdown);
  int64_t until = stk__now_ms() + (grace_ms > 0 ? grace_ms : 0);
  pthread_mutex_lock(&s->mu);
  while (s->ncalls > 0 && !stk__cond_wait_until(&s->cv, &s->mu, until)) {}
  pthread_mutex_unlock(&s->mu);
  grpc_server_cancel_all_calls(s->server);
  /* Every call now ends; wait for their last events and the shutdown tag. */
  pthread_mutex_lock(&s->mu);
  while (s->ncalls > 0 || !s->shutdown_seen) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  grpc_server_destroy(s->server);
  grpc_completion_queue_shutdown(s->cq);
  for (int i = 0; i < s->nthreads; i++) pthread_join(s->threads[i], NULL);
  grpc_completion_queue_destroy(s->cq);
  free(s->methods);
  stk__rpc_auth_free(s);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
  stk__rpc_shutdown();
}
