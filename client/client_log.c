/* client_log.c - the client's log: the few lines in which libstoker says what it
 * leaves out (worker list entries it refused, the workers outside this
 * rank's working set, a worker it dropped or skipped), on stderr, one
 * write(2) per line so threads never interleave one. Callers rate-limit;
 * nothing here allocates or locks. Only when the host asked for it
 * (cfg.log 1, or cfg.log 0 and $STOKER_CLIENT_LOG 1/on): the library
 * prints nothing on its own. Text from the network in a line (ids, addresses) has every
 * byte outside printable ASCII replaced by '?', so it can neither forge a line nor send
 * terminal control sequences.
 *
 * Owns nothing. Must not: print anything but these lines (the library
 * otherwise reports through statuses, stk_client_error and stk_stats).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"

void stk__clog(const stk_client *c, const char *fmt, ...) {
  if (c->cfg.log == 2) return;
  if (c->cfg.log != 1) {
    const char *env = getenv("STOKER_CLIENT_LOG");
    if (!env || (strcmp(env, "1") != 0 && strcmp(env, "on") != 0)) return;
  }
  char line[1024], msg[900];
  struct timeval tv;
  struct tm tm;
  gettimeofday(&tv, NULL);
  gmtime_r(&tv.tv_sec, &tm);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (m < 0) return;
  for (char *p = msg; *p; p++)
    if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) *p = '?';
  int n = snprintf(line, sizeof(line),
                   "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ stoker-client[rank %u] INFO %s\n",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                   tm.tm_sec, (int)(tv.tv_usec / 1000), c->cfg.rank, msg);
  if (n <= 0) return;
  size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
  line[len - 1] = '\n';
  ssize_t w = write(2, line, len);
  (void)w;
}
