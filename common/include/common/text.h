/* text.h - the one reader of 'name = value' lines, shared by the job text
 * (core/job_spec.c: job files, --set, canonical text) and the daemons' --config
 * files (server/daemon_options.c), so comments and spaces behave the same in both:
 * a '#' starts a comment (values cannot hold one), white space around names
 * and values is dropped. Pure string functions; thread-safe.
 */
#ifndef STOKER_COMMON_TEXT_H
#define STOKER_COMMON_TEXT_H

#include <ctype.h>
#include <string.h>

/* Strip leading and trailing white space of the string p in place; returns
 * its first non-space byte. */
static inline char *stk__trim(char *p) {
  while (isspace((unsigned char)*p)) p++;
  char *e = p + strlen(p);
  while (e > p && isspace((unsigned char)e[-1])) *--e = 0;
  return p;
}

/* Split one line (without its '\n', modified in place): drop a '#' comment,
 * then "name = value" into *name and *value, both trimmed. Returns 1 for
 * such a line, 0 for a blank or comment-only one, -1 for a line without
 * '=' (*name then points at the trimmed text, for the message). */
static inline int stk__kv_split(char *line, char **name, char **value) {
  char *hash = strchr(line, '#');
  if (hash) *hash = 0;
  char *k = stk__trim(line);
  *name = k, *value = NULL;
  if (!*k) return 0;
  char *eq = strchr(k, '=');
  if (!eq) return -1;
  *eq = 0;
  *name = stk__trim(k);
  *value = stk__trim(eq + 1);
  return 1;
}

/* Edit distance (insert, delete, substitute) of a and b; 99 when either
 * is 64 bytes or longer. For "did you mean" in messages. */
static inline unsigned stk__edit_distance(const char *a, const char *b) {
  unsigned row[65];
  size_t na = strlen(a), nb = strlen(b);
  if (na >= 64 || nb >= 64) return 99;
  for (size_t j = 0; j <= nb; j++) row[j] = (unsigned)j;
  for (size_t i = 1; i <= na; i++) {
    unsigned diag = row[0];
    row[0] = (unsigned)i;
    for (size_t j = 1; j <= nb; j++) {
      unsigned up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up, row[j] = best;
    }
  }
  return row[nb];
}

/* 1 when a name of len bytes at edit distance d from a known one is near
 * enough to be a typo of it: at most 2 edits (3 past 9 bytes), and fewer
 * than its length. */
static inline int stk__typo_near(unsigned d, size_t len) {
  return d <= (len > 9 ? 3u : 2u) && d < len;
}

/* a is "host:port" as a worker advertises it: port 1..65535 in decimal;
 * host a DNS name or IPv4 address ([A-Za-z0-9.-], at most 253 bytes, not
 * starting with '-' or '.') or an IPv6 address in brackets ([hex:.%]).
 * Nothing else: no gRPC target schemes ("unix:/path", "dns:///..."), no
 * empty host, no spaces. 1 if so, else 0. */
static inline int stk__hostport_valid(const char *a) {
  if (!a) return 0;
  const char *colon = strrchr(a, ':');
  if (!colon || colon == a || !colon[1] || strlen(colon + 1) > 5) return 0;
  unsigned port = 0;
  for (const char *p = colon + 1; *p; p++) {
    if (*p < '0' || *p > '9') return 0;
    port = port * 10 + (unsigned)(*p - '0');
  }
  if (port < 1 || port > 65535) return 0;
  size_t n = (size_t)(colon - a);
  if (a[0] == '[') {
    if (n < 3 || a[n - 1] != ']') return 0;
    for (size_t i = 1; i + 1 < n; i++)
      if (!isxdigit((unsigned char)a[i]) && a[i] != ':' && a[i] != '.' && a[i] != '%')
        return 0;
    return 1;
  }
  if (n > 253 || a[0] == '-' || a[0] == '.') return 0;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)a[i]) && a[i] != '.' && a[i] != '-') return 0;
  return 1;
}

#endif
