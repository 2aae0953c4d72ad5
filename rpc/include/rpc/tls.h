/* tls.h - TLS and mutual TLS material for the gRPC layer (rpc/): PEM
 * files read once at start, credentials made from memory for every server
 * port and channel, so a file removed or rotated mid-job cannot break a
 * reconnect.
 *
 * One stk__tls describes one side's material: the CA bundle that verifies
 * the peer, and this side's own certificate chain and key. A server needs
 * cert+key; with a CA it verifies client certificates when presented, and
 * with require_client_cert it refuses clients without one (mTLS). A
 * client uses TLS when it has a CA (or a cert+key: then the system roots
 * verify the server), and presents its cert+key when given (mTLS).
 *
 * Immutable after stk__tls_load: share it between threads freely.
 */
#ifndef STOKER_TLS_H
#define STOKER_TLS_H

#include <grpc/grpc_security.h>
#include <stddef.h>

typedef struct stk__tls stk__tls;

/* Paths as the user gave them (NULL or "" = not given). */
typedef struct stk__tls_files {
  const char *ca, *cert, *key;
  int require_client_cert; /* servers only; needs ca */
} stk__tls_files;

/* Read the files named in f. *out is NULL when none is given (plaintext).
 * Returns 0, or -1 with a message naming the file and the reason (missing,
 * unreadable, larger than 1 MiB, not PEM, cert without key or the reverse,
 * require_client_cert without a CA). Caller frees with stk__tls_free. */
int stk__tls_load(const stk__tls_files *f, stk__tls **out, char *err, size_t errlen);
void stk__tls_free(stk__tls *t); /* accepts NULL */

/* 1 when t has this side's certificate and key. */
int stk__tls_has_cert(const stk__tls *t);

/* 1 when a server with t refuses clients without a certificate its CA
 * signed (mTLS): the only TLS setting that authenticates callers, so the
 * only one that counts as a caller credential. Thread-safe. */
int stk__tls_requires_client_cert(const stk__tls *t);

/* Credentials for a listening port: insecure when t is NULL. The caller
 * releases them (grpc_server_credentials_release). NULL when t has no
 * certificate (a server cannot do TLS without one). */
grpc_server_credentials *stk__tls_server_creds(const stk__tls *t);
/* Credentials for a channel: insecure when t is NULL. Caller releases. */
grpc_channel_credentials *stk__tls_channel_creds(const stk__tls *t);

/* A hint to append to a connection failure's gRPC details (see tls.c) when
 * they look like a TLS mismatch; "" otherwise. Static text. */
const char *stk__tls_hint(const stk__tls *t, const char *details);

/* "plaintext", "TLS" or "mTLS (client certificates required)" for logs. */
const char *stk__tls_describe(const stk__tls *t);

#endif
