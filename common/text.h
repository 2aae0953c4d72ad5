/* text.h - the one reader of 'name = value' lines, shared by the job text
 * (core/job.c: job files, --set, canonical text) and the daemons' --config
 * files (server/options.c), so comments and spaces behave the same in both:
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

#endif
