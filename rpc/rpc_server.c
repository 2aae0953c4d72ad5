/* rpc_server.c - the event-driven gRPC server of both daemons (see the
 * "Server" section of rpc.h): one completion queue, a fixed set of threads
 * that take its events, and every call a small state machine driven by
 * five tags (new call, receive, send, status, close).
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
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/thread.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/secret.h"
#include "rpc/peer.h"
#include "rpc/rpc.h"
#include "rpc_tsan.h"
#include "rpc/ticket.h"

#define DEFAULT_MAX_MSG   (16u << 20)
#define DEFAULT_MAX_CALLS 4096
#define DEFAULT_THREADS   2
#define MAX_THREADS       64
#define PENDING_REQUESTS  16  /* grpc_server_request_call slots kept open */
#define SWEEP_MS          200 /* how often the deadlines are checked */

enum { TAG_NEW, TAG_RECV, TAG_SEND, TAG_STATUS, TAG_CLOSE, TAG_SHUTDOWN };

typedef struct tag {
  int kind;
  stk__rpc_call *c;
} tag;

typedef struct sendq {
  grpc_byte_buffer *bb;
  struct sendq *next;
} sendq;

struct stk__rpc_call {
  stk__rpc_server *srv;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array md;
  const stk__rpc_method *method;
  char *peer;      /* grpc_call_get_peer's text (gpr_free) */
  stk__peer pinfo; /* peer, parsed (peer.h): set in on_new */
  void *data;
  tag t_new, t_recv, t_send, t_status, t_close;
  pthread_mutex_t mu;
  /* under mu: */
  grpc_byte_buffer *recv_bb;
  grpc_byte_buffer *send_bb; /* in flight */
  sendq *q, *q_tail;
  int inflight;      /* operations started, their event not yet handled */
  int cancelled;     /* RECV_CLOSE_ON_SERVER's out parameter */
  int md_sent;       /* initial metadata went with a send or the status */
  int finished;      /* a status is queued, sent, or the call was cancelled */
  int status_queued; /* finished by stk__rpc_call_finish, status not started */
  int status_started;
  grpc_status_code status_code;
  grpc_slice status_details;
  int close_seen, got_message, broken, opened, done, counted;
  int counted_free;      /* under the server's mu: counts in open_free */
  struct peer_ent *pent; /* its peer's counts (under the server's mu); NULL = none */
  int aborted;           /* cancelled with a status by us: a later abort is a no-op */
  int deferred;          /* a unary handler holds it (stk__rpc_call_hold): no INTERNAL */
  unsigned roles;        /* call_roles at admission (stk__rpc_call_roles) */
  int64_t start_ms, send_since_ms;
  struct stk__rpc_call *prev, *next; /* the server's live list */
};

/* Open calls of one peer address (the IP, without the port), for the
 * per-peer caps. In the server's hash table while it has any. */
typedef struct peer_ent {
  char key[STK__PEER_TEXT]; /* stk__peer.key */
  size_t calls, free;       /* counted in open_calls / open_free */
  struct peer_ent *next;
} peer_ent;
#define PEER_BUCKETS 256

struct stk__rpc_server {
  grpc_server *server;
  grpc_completion_queue *cq;
  pthread_t threads[MAX_THREADS];
  int nthreads;
  stk__rpc_method *methods;
  size_t nmethods;
  stk__rpc_cred *creds; /* tokens owned (strdup), the legacy one first */
  size_t ncreds;
  int has_legacy; /* creds[0] is cfg->token (the shared one) */
  /* Stream tickets (stk__rpc_server_set_ticket_key, ticket.h), under mu:
   * the current key and the previous one (honoured until prev_until_ms),
   * NUL-terminated; "" = none. Once a key is set the legacy token grants
   * nothing. The coordinator's clock in ms = stk__now_ms() + clock_ms,
   * learnt at clock_at_ms (our monotonic clock). */
  char tkey[STK__TICKET_KEY_HEX + 1], prev_tkey[STK__TICKET_KEY_HEX + 1];
  unsigned ticket_roles;
  int64_t prev_until_ms, clock_ms, clock_at_ms;
  size_t max_calls, max_msg, max_free;
  size_t open_free; /* under mu: open calls of no_token methods */
  /* Per-peer caps: at most peer_calls of the call table and peer_free of
   * the health table per peer address; for every peer (peer_all) or only
   * those beyond loopback. */
  size_t peer_calls, peer_free;
  int peer_all;
  peer_ent *peers[PEER_BUCKETS]; /* under mu */
  int first_ms, stall_ms;
  int loopback_only;
  void (*on_refused)(const char *peer, uint64_t count);
  int64_t refused_told_ms; /* under mu: on_refused last called */
  tag t_shutdown;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a call was freed, or the shutdown tag came */
  /* under mu: */
  stk__rpc_call *live;
  size_t ncalls; /* objects in live */
  int stopping, shutdown_seen;
  int pending; /* request slots open */
  stk__rpc_server_stats st;
  int64_t next_sweep_ms; /* atomic */
  int started;           /* atomic: grpc_server_start has run (no sweep before) */
};

/* ---- Call objects ------------------------------------------------------ */

static void peer_put_locked(stk__rpc_server *s, stk__rpc_call *c, int free_table);

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

/* Cancel with a status now (under c->mu, the call not done). */
static void cancel_locked(stk__rpc_call *c, grpc_status_code code, const char *why) {
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
  if (c->counted) s->st.open_calls--, peer_put_locked(s, c, 0);
  if (c->counted_free) s->open_free--, peer_put_locked(s, c, 1);
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
    cancel_locked(c, code, details ? details : "");
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

/* The roles the call's bearer token grants: every role when the server
 * has no token, 0 when it carries none or an unknown one. Every token is
 * compared, so the time does not tell which one matched. A stream ticket
 * of ours that has expired grants nothing, is counted, and says so in
 * why (whylen bytes; else why is left as it is). */
static unsigned call_roles(stk__rpc_server *s, grpc_metadata_array *md, char *why,
                           size_t whylen) {
  char cur[STK__TICKET_KEY_HEX + 1], prev[STK__TICKET_KEY_HEX + 1];
  pthread_mutex_lock(&s->mu);
  int64_t now = stk__now_ms();
  memcpy(cur, s->tkey, sizeof(cur));
  int prev_ok = s->prev_tkey[0] && now < s->prev_until_ms;
  memcpy(prev, prev_ok ? s->prev_tkey : "", prev_ok ? sizeof(prev) : 1);
  unsigned troles = s->ticket_roles;
  int64_t coord_ms = now + s->clock_ms, since_ms = now - s->clock_at_ms;
  pthread_mutex_unlock(&s->mu);
  unsigned roles = 0;
  if (!s->ncreds && !cur[0]) return STK__ROLE_ANY;
  /* With a ticket key the shared token (the worker's own) opens nothing. */
  size_t first = cur[0] && s->has_legacy ? 1 : 0;
  for (size_t i = 0; i < md->count; i++) {
    grpc_slice k = md->metadata[i].key, v = md->metadata[i].value;
    if (GRPC_SLICE_LENGTH(k) != 13 ||
        memcmp(GRPC_SLICE_START_PTR(k), "authorization", 13))
      continue;
    const unsigned char *p = GRPC_SLICE_START_PTR(v);
    size_t n = GRPC_SLICE_LENGTH(v);
    for (size_t j = first; j < s->ncreds; j++)
      if (stk__bearer_is(p, n, s->creds[j].token)) roles |= s->creds[j].roles;
    uint64_t exp = 0;
    int is_ticket = 0;
    if (n > 7 && !memcmp(p, "Bearer ", 7)) {
      uint64_t e;
      if (cur[0] && stk__ticket_check(cur, p + 7, n - 7, &e)) is_ticket = 1, exp = e;
      if (prev[0] && stk__ticket_check(prev, p + 7, n - 7, &e)) is_ticket = 1, exp = e;
    }
    if (is_ticket) {
      /* Expired when its expiry, plus the skew margin, is behind the
       * coordinator's clock as we carry it on (ticket.h). */
      int64_t margin = stk__ticket_skew_ms(since_ms);
      if (exp <= (uint64_t)INT64_MAX / 2000 && (int64_t)exp * 1000 + margin >= coord_ms) {
        roles |= troles;
      } else {
        pthread_mutex_lock(&s->mu);
        s->st.tickets_expired++;
        pthread_mutex_unlock(&s->mu);
        snprintf(why, whylen,
                 "stream ticket expired: valid until %" PRIu64
                 " (unix s, the coordinator's clock), now %" PRId64 " (allowing %" PRId64
                 " ms of clock skew): open the stream with the "
                 "fresh ticket of the coordinator's worker list (Join or WatchWorkers)",
                 exp, coord_ms / 1000, margin);
      }
    }
    break;
  }
  explicit_bzero(cur, sizeof(cur));
  explicit_bzero(prev, sizeof(prev));
  return roles;
}

int stk__rpc_server_set_ticket_key(stk__rpc_server *s, const char *key, unsigned roles,
                                   int grace_ms, uint64_t coordinator_ms) {
  if (!key || (*key && strlen(key) != STK__TICKET_KEY_HEX)) return -1;
  size_t n = strlen(key);
  pthread_mutex_lock(&s->mu);
  if (!n && !s->tkey[0]) {
    pthread_mutex_unlock(&s->mu);
    return 1;
  }
  int64_t now = stk__now_ms();
  if (strcmp(s->tkey, key) != 0) {
    memcpy(s->prev_tkey, s->tkey, sizeof(s->prev_tkey));
    s->prev_until_ms = now + (grace_ms > 0 ? grace_ms : 0);
    memcpy(s->tkey, key, n + 1);
  }
  if (coordinator_ms && coordinator_ms < (uint64_t)INT64_MAX / 2) {
    s->clock_ms = (int64_t)coordinator_ms - now;
    s->clock_at_ms = now;
  }
  s->ticket_roles = roles;
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static const char *role_names(unsigned roles) {
  switch (roles & ~STK__ROLE_ADMIN) {
    case STK__ROLE_WORKER:
      return "a worker or admin";
    case STK__ROLE_CLIENT:
      return "a client or admin";
    default:
      return "another";
  }
}

/* Protected mode refused a call from peer: count it, and tell the owner
 * at most once a minute. */
static void refused_remote(stk__rpc_server *s, const char *peer) {
  int64_t now = stk__now_ms();
  pthread_mutex_lock(&s->mu);
  uint64_t n = ++s->st.refused_remote;
  int tell = s->on_refused && (!s->refused_told_ms || now - s->refused_told_ms >= 60000);
  if (tell) s->refused_told_ms = now;
  pthread_mutex_unlock(&s->mu);
  if (tell) s->on_refused(peer, n);
}

/* The entry of c's peer, made when it has none (NULL when out of memory:
 * the call is then not capped). Under s->mu. */
static peer_ent *peer_get_locked(stk__rpc_server *s, const stk__peer *peer) {
  const char *key = peer->key;
  uint32_t h = 2166136261u;
  for (const char *p = key; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
  peer_ent **b = &s->peers[h % PEER_BUCKETS];
  for (peer_ent *e = *b; e; e = e->next)
    if (!strcmp(e->key, key)) return e;
  peer_ent *e = calloc(1, sizeof(*e));
  if (!e) return NULL;
  snprintf(e->key, sizeof(e->key), "%s", key);
  e->next = *b;
  *b = e;
  return e;
}

/* c no longer counts toward its peer (as a call or a health call); the
 * entry goes once its peer has none. Under s->mu. */
static void peer_put_locked(stk__rpc_server *s, stk__rpc_call *c, int free_table) {
  peer_ent *e = c->pent;
  if (!e) return;
  if (free_table) e->free--;
  else e->calls--;
  if (e->calls || e->free) return;
  c->pent = NULL;
  for (size_t i = 0; i < PEER_BUCKETS; i++)
    for (peer_ent **pp = &s->peers[i]; *pp; pp = &(*pp)->next)
      if (*pp == e) {
        *pp = e->next;
        free(e);
        return;
      }
}

/* The call table is full and `nc` wants in: end the oldest counted call
 * that has sent no request yet (it holds a slot doing nothing; a real
 * client's first request follows its call at once) and give its slot to
 * nc. 1 if one was evicted. Under s->mu. */
static int evict_locked(stk__rpc_server *s, stk__rpc_call *nc) {
  stk__rpc_call *v = NULL;
  for (stk__rpc_call *c = s->live; c; c = c->next) {
    if (c == nc || !c->counted) continue;
    pthread_mutex_lock(&c->mu);
    int silent = !c->got_message && !c->done && !c->close_seen && !c->broken &&
                 !c->aborted && !c->status_started && c->inflight;
    pthread_mutex_unlock(&c->mu);
    if (silent && (!v || c->start_ms < v->start_ms)) v = c;
  }
  if (!v) return 0;
  pthread_mutex_lock(&v->mu);
  cancel_locked(v, GRPC_STATUS_RESOURCE_EXHAUSTED,
                "evicted: the server's call table was full and this call had sent no "
                "request");
  pthread_mutex_unlock(&v->mu);
  v->counted = 0;
  peer_put_locked(s, v, 0);
  s->st.open_calls--;
  s->st.evicted++;
  return 1;
}

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
  int full, peer_full = 0;
  /* Per-peer caps: beyond loopback only, unless set for every peer. */
  int capped = c->method && (s->peer_all || !c->pinfo.loopback);
  size_t peer_has = 0;
  pthread_mutex_lock(&s->mu);
  s->pending--;
  c->next = s->live;
  if (s->live) s->live->prev = c;
  s->live = c;
  s->ncalls++;
  peer_ent *pe = capped ? peer_get_locked(s, &c->pinfo) : NULL;
  if (c->method && c->method->no_token) { /* health: a small table of its own */
    peer_full = pe && pe->free >= s->peer_free;
    full = peer_full || s->open_free >= s->max_free;
    if (!full) s->open_free++, c->counted_free = 1;
    if (!full && pe) pe->free++, c->pent = pe;
    if (pe) peer_has = pe->free;
  } else {
    peer_full = pe && pe->calls >= s->peer_calls;
    full = c->method &&
           (peer_full || (s->st.open_calls >= s->max_calls && !evict_locked(s, c)));
    if (!full && c->method) s->st.open_calls++, s->st.calls++, c->counted = 1;
    if (!full && pe) pe->calls++, c->pent = pe;
    if (pe) peer_has = pe->calls;
  }
  if (pe && !pe->calls && !pe->free) { /* made for a call it refused */
    c->pent = pe, pe->calls = 1;
    peer_put_locked(s, c, 0);
  }
  if (full) s->st.refused_full++;
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

  char msg[400] = "missing or wrong bearer token";
  unsigned roles =
      c->method && !c->method->no_token ? call_roles(s, &c->md, msg, sizeof(msg)) : 0;
  c->roles = roles;
  if (!c->method) {
    stk__rpc_call_finish(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
  } else if (s->loopback_only && !c->method->no_token && !c->pinfo.loopback) {
    refused_remote(s, c->pinfo.shown);
    stk__rpc_call_finish(
        c, GRPC_STATUS_PERMISSION_DENIED,
        "protected mode: this daemon has no caller credential (a token, role tokens or "
        "required client certificates; TLS alone authenticates only the server), so it "
        "serves only peers on its own host's loopback; start it with --token-file, "
        "role tokens or --tls-require-client-cert, or with --insecure on a network only "
        "you can reach");
  } else if (!c->method->no_token && !roles) {
    stk__rpc_call_finish(c, GRPC_STATUS_UNAUTHENTICATED, msg);
  } else if (!c->method->no_token && c->method->roles &&
             !(roles & (c->method->roles | STK__ROLE_ADMIN))) {
    snprintf(msg, sizeof(msg),
             "this token may not call %s: it needs %s token (roles: docs/operations.md)",
             c->method->path, role_names(c->method->roles));
    stk__rpc_call_finish(c, GRPC_STATUS_PERMISSION_DENIED, msg);
  } else if (peer_full) {
    snprintf(msg, sizeof(msg),
             "too many open calls from this peer's address (%zu; at most %zu%s): "
             "close some, or raise --max-calls-per-peer",
             peer_has, c->method->no_token ? s->peer_free : s->peer_calls,
             c->method->no_token ? " health calls" : "");
    stk__rpc_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
  } else if (full) {
    snprintf(msg, sizeof(msg),
             "too many open calls on this server (%zu, or %zu without credentials): try "
             "again later or elsewhere",
             s->max_calls, s->max_free);
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
        cancel_locked(c, GRPC_STATUS_UNAVAILABLE, why);
        s->st.send_stalled++;
      } else if (s->first_ms > 0 && !c->got_message && !c->status_started &&
                 now - c->start_ms > s->first_ms) {
        snprintf(why, sizeof(why), "no request within %d ms of the call's start",
                 s->first_ms);
        cancel_locked(c, GRPC_STATUS_DEADLINE_EXCEEDED, why);
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

static void creds_free(stk__rpc_server *s) {
  for (size_t i = 0; s->creds && i < s->ncreds; i++) free((char *)s->creds[i].token);
  free(s->creds);
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
  s->creds = calloc(cfg->ncreds + 1, sizeof(stk__rpc_cred));
  if (!s->methods || !s->creds) {
    stk__errf(err, errlen, 0, "out of memory");
    goto fail;
  }
  for (size_t i = 0; i <= cfg->ncreds; i++) {
    const stk__rpc_cred *in = i ? &cfg->creds[i - 1] : NULL;
    const char *t = in ? in->token : cfg->token;
    if (!t || !*t) continue;
    stk__rpc_cred *o = &s->creds[s->ncreds++];
    o->roles = in ? in->roles : STK__ROLE_ANY;
    if (!in) s->has_legacy = 1;
    if (!(o->token = strdup(t))) {
      stk__errf(err, errlen, 0, "out of memory");
      goto fail;
    }
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
  creds_free(s);
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
  creds_free(s);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
  stk__rpc_shutdown();
}
