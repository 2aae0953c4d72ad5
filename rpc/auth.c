/* auth.c - who may call the server: the bearer tokens and their roles
 * (each compared in constant time, every one of them, so the time does
 * not tell which matched), the worker's stream tickets (the current and
 * the previous ticket key, expiry judged on the coordinator's clock) and
 * protected mode (no caller credential: loopback peers only). The ticket
 * format itself is ticket.c's; the call state machine asks here once per
 * call (stk__rpc_auth_admit, server_internal.h).
 *
 * Owns: the server's copies of its tokens and its ticket keys (under the
 * server's mu; wiped from the stack after each check). Must not: log or
 * print a token or key, or hold the server's mu while comparing.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/secret.h"
#include "rpc/ticket.h"
#include "server_internal.h"

int stk__rpc_auth_init(stk__rpc_server *s, const stk__rpc_server_config *cfg) {
  s->creds = calloc(cfg->ncreds + 1, sizeof(stk__rpc_cred));
  if (!s->creds) return -1;
  for (size_t i = 0; i <= cfg->ncreds; i++) {
    const stk__rpc_cred *in = i ? &cfg->creds[i - 1] : NULL;
    const char *t = in ? in->token : cfg->token;
    if (!t || !*t) continue;
    stk__rpc_cred *o = &s->creds[s->ncreds++];
    o->roles = in ? in->roles : STK__ROLE_ANY;
    if (!in) s->has_legacy = 1;
    if (!(o->token = strdup(t))) return -1;
  }
  return 0;
}

void stk__rpc_auth_free(stk__rpc_server *s) {
  for (size_t i = 0; s->creds && i < s->ncreds; i++) free((char *)s->creds[i].token);
  free(s->creds);
}

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

const char *stk__rpc_auth_admit(stk__rpc_server *s, stk__rpc_call *c,
                                grpc_status_code *code, char *msg, size_t msglen) {
  snprintf(msg, msglen, "missing or wrong bearer token");
  unsigned roles = !c->method->no_token ? call_roles(s, &c->md, msg, msglen) : 0;
  c->roles = roles;
  if (s->loopback_only && !c->method->no_token && !c->pinfo.loopback) {
    refused_remote(s, c->pinfo.shown);
    *code = GRPC_STATUS_PERMISSION_DENIED;
    return "protected mode: this daemon has no caller credential (a token, role "
           "tokens or required client certificates; TLS alone authenticates only the "
           "server), so it serves only peers on its own host's loopback; start it with "
           "--token-file, role tokens or --tls-require-client-cert, or with --insecure "
           "on a network only you can reach";
  }
  if (!c->method->no_token && !roles) {
    *code = GRPC_STATUS_UNAUTHENTICATED;
    return msg;
  }
  if (!c->method->no_token && c->method->roles &&
      !(roles & (c->method->roles | STK__ROLE_ADMIN))) {
    snprintf(msg, msglen,
             "this token may not call %s: it needs %s token (roles: docs/operations.md)",
             c->method->path, role_names(c->method->roles));
    *code = GRPC_STATUS_PERMISSION_DENIED;
    return msg;
  }
  return NULL;
}
