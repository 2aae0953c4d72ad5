/* tls.c - loading PEM material and making gRPC credentials (see tls.h). */
#include "rpc/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"

#define MAX_PEM_BYTES (1u << 20)

struct stk__tls {
  char *ca, *cert, *key; /* PEM text, NUL-terminated; NULL = not given */
  int require_client_cert;
};

static int given(const char *s) { return s && *s; }

/* Read a whole PEM file of at most MAX_PEM_BYTES that holds a block of
 * the wanted kind ("CERTIFICATE", "PRIVATE KEY" matches every key form). */
static int read_pem(const char *what, const char *path, const char *kind, char **out,
                    char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) return stk__errf(err, errlen, -1, "%s %s: %s", what, path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
      (unsigned long long)st.st_size > MAX_PEM_BYTES) {
    fclose(f);
    return stk__errf(err, errlen, -1, "%s %s: not a regular file of 1 byte to 1 MiB",
                     what, path);
  }
  char *buf = malloc((size_t)st.st_size + 1);
  size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
  fclose(f);
  if (!buf || n != (size_t)st.st_size) {
    free(buf);
    return stk__errf(err, errlen, -1, "%s %s: cannot read it", what, path);
  }
  buf[n] = 0;
  if (strlen(buf) != n || !strstr(buf, "-----BEGIN ") || !strstr(buf, kind)) {
    free(buf);
    return stk__errf(err, errlen, -1, "%s %s: not a PEM file with a %s block", what, path,
                     kind);
  }
  *out = buf;
  return 0;
}

int stk__tls_load(const stk__tls_files *f, stk__tls **out, char *err, size_t errlen) {
  *out = NULL;
  if (!f || (!given(f->ca) && !given(f->cert) && !given(f->key))) {
    if (f && f->require_client_cert)
      return stk__errf(err, errlen, -1,
                       "--tls-require-client-cert needs --tls-ca (the CA that signs "
                       "the client certificates) and --tls-cert/--tls-key");
    return 0;
  }
  if (given(f->cert) != given(f->key))
    return stk__errf(err, errlen, -1, "give both a TLS certificate and its key, not one");
  if (f->require_client_cert && !given(f->ca))
    return stk__errf(err, errlen, -1,
                     "--tls-require-client-cert needs --tls-ca (the CA that signs the "
                     "client certificates)");
  stk__tls *t = calloc(1, sizeof(*t));
  if (!t) return stk__errf(err, errlen, -1, "out of memory");
  t->require_client_cert = f->require_client_cert;
  if ((given(f->ca) &&
       read_pem("TLS CA file", f->ca, "CERTIFICATE", &t->ca, err, errlen)) ||
      (given(f->cert) &&
       read_pem("TLS certificate", f->cert, "CERTIFICATE", &t->cert, err, errlen)) ||
      (given(f->key) &&
       read_pem("TLS key", f->key, "PRIVATE KEY", &t->key, err, errlen))) {
    stk__tls_free(t);
    return -1;
  }
  *out = t;
  return 0;
}

void stk__tls_free(stk__tls *t) {
  if (!t) return;
  free(t->ca);
  free(t->cert);
  if (t->key) {
    /* the key must not linger in freed heap memory */
    volatile char *p = t->key;
    while (*p) *p++ = 0;
    free(t->key);
  }
  free(t);
}

int stk__tls_has_cert(const stk__tls *t) { return t && t->cert && t->key; }

int stk__tls_requires_client_cert(const stk__tls *t) {
  return t && t->require_client_cert && t->ca;
}

grpc_server_credentials *stk__tls_server_creds(const stk__tls *t) {
  if (!t) return grpc_insecure_server_credentials_create();
  if (!stk__tls_has_cert(t)) return NULL;
  grpc_ssl_pem_key_cert_pair pair = {t->key, t->cert};
  grpc_ssl_client_certificate_request_type req =
      t->require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
      : t->ca                ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
                             : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  return grpc_ssl_server_credentials_create_ex(t->ca, &pair, 1, req, NULL);
}

grpc_channel_credentials *stk__tls_channel_creds(const stk__tls *t) {
  if (!t) return grpc_insecure_credentials_create();
  grpc_ssl_pem_key_cert_pair pair = {t->key, t->cert};
  return grpc_ssl_credentials_create(t->ca, stk__tls_has_cert(t) ? &pair : NULL, NULL,
                                     NULL);
}

/* gRPC reports a failed TLS handshake as a plain connection failure
 * (UNAVAILABLE, "Socket closed", "...handshake..."), and neither side can
 * tell the other what it expected, so say what to check. */
const char *stk__tls_hint(const stk__tls *t, const char *details) {
  if (!details || (!strstr(details, "andshake") && !strstr(details, "Socket closed")))
    return "";
  return t ? " - if the peer is up, check the TLS setup: it must use TLS with a "
             "certificate signed by our TLS CA (--tls-ca / STOKER_TLS_CA) that names "
             "the address dialled, and under mTLS our certificate and key must be "
             "signed by its CA"
           : " - if the peer is up, it may expect TLS: give the TLS CA (--tls-ca / "
             "STOKER_TLS_CA)";
}

const char *stk__tls_describe(const stk__tls *t) {
  if (!t) return "plaintext";
  return t->require_client_cert ? "mTLS (client certificates required)" : "TLS";
}
