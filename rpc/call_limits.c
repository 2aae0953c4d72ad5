/* call_limits.c - how many calls the server holds open: the call table
 * (max_calls; when full, the oldest call that has sent no request is
 * evicted for a new one), the health table of no_token methods
 * (max_free_calls) and the per-peer caps, keyed by the peer's address
 * without its port (peer.h), so one host cannot take the whole table.
 * Asked by the call state machine when a call arrives and when it is
 * freed (server_internal.h).
 *
 * Owns: the per-peer entries (the server's hash table, under its mu).
 * Must not: block, or take the server's mu itself (every function here
 * runs under it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_internal.h"

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

void stk__rpc_limits_release_locked(stk__rpc_server *s, stk__rpc_call *c,
                                    int free_table) {
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
  stk__rpc_call_cancel_locked(
      v, GRPC_STATUS_RESOURCE_EXHAUSTED,
      "evicted: the server's call table was full and this call had sent no "
      "request");
  pthread_mutex_unlock(&v->mu);
  v->counted = 0;
  stk__rpc_limits_release_locked(s, v, 0);
  s->st.open_calls--;
  s->st.evicted++;
  return 1;
}

int stk__rpc_limits_admit_locked(stk__rpc_server *s, stk__rpc_call *c, size_t *peer_has) {
  int full, peer_full = 0;
  /* Per-peer caps: beyond loopback only, unless set for every peer. */
  int capped = c->method && (s->peer_all || !c->pinfo.loopback);
  peer_ent *pe = capped ? peer_get_locked(s, &c->pinfo) : NULL;
  if (c->method && c->method->no_token) { /* health: a small table of its own */
    peer_full = pe && pe->free >= s->peer_free;
    full = peer_full || s->open_free >= s->max_free;
    if (!full) s->open_free++, c->counted_free = 1;
    if (!full && pe) pe->free++, c->pent = pe;
    if (pe) *peer_has = pe->free;
  } else {
    peer_full = pe && pe->calls >= s->peer_calls;
    full = c->method &&
           (peer_full || (s->st.open_calls >= s->max_calls && !evict_locked(s, c)));
    if (!full && c->method) s->st.open_calls++, s->st.calls++, c->counted = 1;
    if (!full && pe) pe->calls++, c->pent = pe;
    if (pe) *peer_has = pe->calls;
  }
  if (pe && !pe->calls && !pe->free) { /* made for a call it refused */
    c->pent = pe, pe->calls = 1;
    stk__rpc_limits_release_locked(s, c, 0);
  }
  if (full) s->st.refused_full++;
  return peer_full ? STK__RPC_OVER_PEER : full ? STK__RPC_OVER_TABLE : 0;
}

void stk__rpc_limits_refusal(const stk__rpc_server *s, const stk__rpc_call *c, int over,
                             size_t peer_has, char *msg, size_t msglen) {
  if (over == STK__RPC_OVER_PEER)
    snprintf(msg, msglen,
             "too many open calls from this peer's address (%zu; at most %zu%s): "
             "close some, or raise --max-calls-per-peer",
             peer_has, c->method->no_token ? s->peer_free : s->peer_calls,
             c->method->no_token ? " health calls" : "");
  else
    snprintf(msg, msglen,
             "too many open calls on this server (%zu, or %zu without credentials): try "
             "again later or elsewhere",
             s->max_calls, s->max_free);
}
