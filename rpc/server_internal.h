/* server_internal.h - the server's state, shared by the three files of
 * the event-driven server and by nothing else (private to rpc/): the
 * call state machine (rpc_server.c), who may call (auth.c) and the
 * bounds on open calls (call_limits.c).
 *
 * Locks: the server's mu guards what its struct marks "under mu"; a
 * call's mu what its struct marks "under mu". Lock order: server mutex,
 * then a call's mutex; no lock of ours is held while a handler callback
 * runs.
 */
#ifndef STOKER_RPC_SERVER_INTERNAL_H
#define STOKER_RPC_SERVER_INTERNAL_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/peer.h"
#include "rpc/rpc.h"
#include "rpc/ticket.h"

#define MAX_THREADS 64

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
  unsigned roles;        /* auth.c's verdict at admission (stk__rpc_call_roles) */
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

/* ---- rpc_server.c ------------------------------------------------------ */

/* Cancel c with a status now: queued sends dropped, later statuses
 * no-ops. Under c->mu, the call not done. */
void stk__rpc_call_cancel_locked(stk__rpc_call *c, grpc_status_code code,
                                 const char *why);

/* ---- auth.c: who may call ---------------------------------------------- */

/* Copy cfg's tokens (the shared one first, then each role token) into s.
 * 0, or -1 out of memory (what was copied is freed by
 * stk__rpc_auth_free). Before the server starts. */
int stk__rpc_auth_init(stk__rpc_server *s, const stk__rpc_server_config *cfg);
/* Free the copied tokens. Accepts a server whose init failed. */
void stk__rpc_auth_free(stk__rpc_server *s);
/* Admit new call c (its method known) on its credentials: sets c->roles
 * (the roles its bearer token or stream ticket grants) and returns NULL,
 * or the reason the call must end with status *code: protected mode
 * (PERMISSION_DENIED, a call from beyond loopback to a daemon without
 * caller credentials: counted and told to on_refused), no or a wrong
 * token, or an expired stream ticket (UNAUTHENTICATED), a token whose
 * roles do not include the method's (PERMISSION_DENIED). The reason is a
 * constant or msg (msglen bytes). Takes s->mu briefly: call without it;
 * tokens are compared in constant time. */
const char *stk__rpc_auth_admit(stk__rpc_server *s, stk__rpc_call *c,
                                grpc_status_code *code, char *msg, size_t msglen);

/* ---- call_limits.c: the bounds on open calls --------------------------- */

enum { STK__RPC_OVER_PEER = 1, STK__RPC_OVER_TABLE = 2 };
/* Count new call c against the call table (evicting the oldest silent
 * call when it is full), the health table for no_token methods, and the
 * per-peer caps of its address. 0 when it fits (it is counted until
 * stk__rpc_limits_release_locked), STK__RPC_OVER_PEER when its peer
 * holds its share (*peer_has: the peer's open calls), STK__RPC_OVER_TABLE
 * when the server's table is full. Under s->mu. */
int stk__rpc_limits_admit_locked(stk__rpc_server *s, stk__rpc_call *c, size_t *peer_has);
/* c no longer counts toward its peer (as a call, or a health call when
 * free_table); the peer's entry goes once it has none. Under s->mu. */
void stk__rpc_limits_release_locked(stk__rpc_server *s, stk__rpc_call *c, int free_table);
/* The message of a refusal by stk__rpc_limits_admit_locked (over, with
 * its peer_has) into msg (msglen bytes), saying what to do. Pure. */
void stk__rpc_limits_refusal(const stk__rpc_server *s, const stk__rpc_call *c, int over,
                             size_t peer_has, char *msg, size_t msglen);

#endif
