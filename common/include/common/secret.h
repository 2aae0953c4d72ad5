/* common/secret.h - the bearer token from where it may come: a file
 * (--token-file, $STOKER_TOKEN_FILE), the environment ($STOKER_TOKEN), or,
 * visible to every local user in ps, the command line (--token). One rule
 * for the daemons, the stoker CLI and libstoker, so they cannot drift.
 */
#ifndef STOKER_COMMON_SECRET_H
#define STOKER_COMMON_SECRET_H

#include <stddef.h>

/* The longest token accepted, in bytes (without the terminating NUL). */
#define STK_TOKEN_MAX 1024

/* Read a token from the first line of path into buf (buflen >= 2): the
 * line without its "\n" or "\r\n" and trailing blanks. Refused, -1 with a
 * message in err that names the file but never shows its content: a file
 * that cannot be opened, an empty first line, a line longer than
 * buflen - 1 bytes, bytes outside printable ASCII or a space inside (a
 * token travels in an HTTP/2 header). On failure buf is cleared. Touches
 * only buf and err; thread-safe. */
int stk__token_read_file(const char *path, char *buf, size_t buflen, char *err,
                         size_t errlen);

/* Where a resolved token came from. */
typedef enum {
  STK_TOKEN_NONE = 0, /* no token: calls carry none */
  STK_TOKEN_ARGV,     /* the token argument itself (--token: visible in ps) */
  STK_TOKEN_FILE,     /* the token_file argument (--token-file) */
  STK_TOKEN_ENV,      /* $STOKER_TOKEN */
  STK_TOKEN_ENV_FILE  /* the file $STOKER_TOKEN_FILE names */
} stk__token_source;

/* Pick the token, first match wins: token (non-empty), token_file
 * (non-empty), $STOKER_TOKEN (non-empty), $STOKER_TOKEN_FILE (non-empty).
 * Giving both token and token_file is an error. Writes the token into buf
 * ("" for none) and where it came from into *src. 0, or -1 with err (a
 * file that cannot be used; never the token's value). Thread-safe as far
 * as getenv is. */
int stk__token_resolve(const char *token, const char *token_file, char *buf,
                       size_t buflen, stk__token_source *src, char *err, size_t errlen);

/* 1 when the header value p[0..n) is "Bearer <token>", else 0. Constant
 * time in the token's length whatever was sent: no early return on a
 * wrong length or a differing byte. token is NUL-terminated and non-empty.
 * Pure; thread-safe. */
int stk__bearer_is(const unsigned char *p, size_t n, const char *token);

/* "--token", "--token-file", "STOKER_TOKEN", "STOKER_TOKEN_FILE" or "none". */
const char *stk__token_source_name(stk__token_source src);

#endif
