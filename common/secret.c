/* secret.c - read and pick the bearer token (see secret.h). Owns nothing;
 * never prints, and never puts a token's bytes into an error message. */
#include "common/secret.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int stk__token_read_file(const char *path, char *buf, size_t buflen, char *err,
                         size_t errlen) {
  if (!buf || buflen < 2) return stk__errf(err, errlen, -1, "no room for a token");
  buf[0] = 0;
  FILE *f = fopen(path, "re");
  if (!f) return stk__errf(err, errlen, -1, "token file %s: %s", path, strerror(errno));
  size_t n = 0;
  int c, rc = 0;
  while ((c = fgetc(f)) != EOF && c != '\n') {
    if (n + 1 >= buflen) {
      rc = stk__errf(err, errlen, -1, "token file %s: the token is longer than %zu bytes",
                     path, buflen - 1);
      break;
    }
    buf[n++] = (char)c;
  }
  if (!rc && ferror(f))
    rc = stk__errf(err, errlen, -1, "token file %s: cannot read", path);
  fclose(f);
  while (!rc && n && (buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t')) n--;
  if (!rc && !n)
    rc = stk__errf(err, errlen, -1, "token file %s: no token in its first line", path);
  for (size_t i = 0; !rc && i < n; i++)
    if ((unsigned char)buf[i] <= 0x20 || (unsigned char)buf[i] >= 0x7f)
      rc = stk__errf(err, errlen, -1,
                     "token file %s: byte %zu of the token is not printable ASCII "
                     "(or is a space)",
                     path, i + 1);
  if (rc) {
    memset(buf, 0, n < buflen ? n + 1 : buflen);
    return -1;
  }
  buf[n] = 0;
  return 0;
}

int stk__bearer_is(const unsigned char *p, size_t n, const char *token) {
  size_t want = strlen(token), got = n > 7 ? n - 7 : 0;
  unsigned char diff = (unsigned char)(n != want + 7);
  diff |= (unsigned char)(n < 7 || memcmp(p, "Bearer ", 7) != 0);
  for (size_t j = 0; j < want; j++)
    diff |= (unsigned char)((j < got ? p[7 + j] : 0) ^ (unsigned char)token[j]);
  return diff == 0;
}

int stk__token_resolve(const char *token, const char *token_file, char *buf,
                       size_t buflen, stk__token_source *src, char *err, size_t errlen) {
  *src = STK_TOKEN_NONE;
  if (!buf || buflen < 2) return stk__errf(err, errlen, -1, "no room for a token");
  buf[0] = 0;
  if (token && *token && token_file && *token_file)
    return stk__errf(err, errlen, -1, "give the token once: --token or --token-file");
  const char *env = getenv("STOKER_TOKEN"), *env_file = getenv("STOKER_TOKEN_FILE");
  const char *text = NULL;
  if (token && *token) text = token, *src = STK_TOKEN_ARGV;
  else if (token_file && *token_file) {
    if (stk__token_read_file(token_file, buf, buflen, err, errlen)) return -1;
    *src = STK_TOKEN_FILE;
    return 0;
  } else if (env && *env) text = env, *src = STK_TOKEN_ENV;
  else if (env_file && *env_file) {
    if (stk__token_read_file(env_file, buf, buflen, err, errlen)) return -1;
    *src = STK_TOKEN_ENV_FILE;
    return 0;
  }
  if (!text) return 0;
  size_t n = strlen(text);
  if (n >= buflen) {
    const char *from = stk__token_source_name(*src);
    *src = STK_TOKEN_NONE;
    return stk__errf(err, errlen, -1, "the token from %s is longer than %zu bytes", from,
                     buflen - 1);
  }
  memcpy(buf, text, n + 1);
  return 0;
}

const char *stk__token_source_name(stk__token_source src) {
  switch (src) {
    case STK_TOKEN_ARGV:
      return "--token";
    case STK_TOKEN_FILE:
      return "--token-file";
    case STK_TOKEN_ENV:
      return "STOKER_TOKEN";
    case STK_TOKEN_ENV_FILE:
      return "STOKER_TOKEN_FILE";
    case STK_TOKEN_NONE:
      break;
  }
  return "none";
}
