/* daemon_log.c - timestamped, levelled log lines on stderr for the daemons and
 * the stoker CLI, and the per-call-site rate limit (LOG_LIMITED). Owns
 * the program name, the level threshold and the limiter's lock. stk__log
 * must not allocate or take locks: a whole line goes out in one write(2);
 * stk__log_allow holds its lock only to count. */
#include "daemon_log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char *log_program = "stoker";
static int log_level = STK_LOG_INFO;
static const char *const log_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void stk__log_init(const char *program) { log_program = program; }
void stk__log_set_level(int level) { log_level = level; }

int stk__log_level_parse(const char *name) {
  static const char *const lower[] = {"debug", "info", "warn", "error"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(name, lower[i])) return i;
  return -1;
}

/* The escaped form of byte c in enc (up to 4 bytes); its length. */
static size_t escape_byte(unsigned char c, char *enc) {
  static const char hex[] = "0123456789abcdef";
  if (c >= 0x20 && c <= 0x7e) return enc[0] = (char)c, 1;
  enc[0] = '\\', enc[1] = 'x', enc[2] = hex[c >> 4], enc[3] = hex[c & 15];
  return 4;
}

const char *stk__escape(char *out, size_t outlen, const char *in) {
  if (!out || !outlen) return out;
  if (!in) in = "(null)";
  const unsigned char *s = (const unsigned char *)in;
  char enc[4];
  size_t total = 0;
  for (const unsigned char *p = s; *p; p++) total += escape_byte(*p, enc);
  /* all of it, or as much as fits before "..." (an escape is never cut) */
  size_t room = total < outlen ? outlen - 1 : (outlen > 4 ? outlen - 4 : 0);
  size_t o = 0;
  for (const unsigned char *p = s; *p; p++) {
    size_t k = escape_byte(*p, enc);
    if (o + k > room) break;
    memcpy(out + o, enc, k);
    o += k;
  }
  if (total >= outlen)
    for (int d = 0; d < 3 && o + 1 < outlen; d++) out[o++] = '.';
  out[o] = 0;
  return out;
}

void stk__log(int level, const char *fmt, ...) {
  if (level < log_level) return;
  if (level < 0 || level > STK_LOG_ERROR) level = STK_LOG_ERROR;
  char line[2048], msg[1536];
  struct timeval tv;
  struct tm tm;
  gettimeofday(&tv, NULL);
  gmtime_r(&tv.tv_sec, &tm);
  int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s %s ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                   tm.tm_sec, (int)(tv.tv_usec / 1000), log_program, log_names[level]);
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (m < 0) msg[0] = 0;
  stk__escape(line + n, sizeof(line) - (size_t)n - 1, msg);
  size_t len = strlen(line);
  line[len++] = '\n';
  ssize_t w = write(2, line, len);
  (void)w;
}

static pthread_mutex_t limit_mu = PTHREAD_MUTEX_INITIALIZER;

int stk__log_allow(stk__log_limit *l, uint32_t per_min, int64_t now_ms,
                   uint64_t *suppressed) {
  int ok = 0;
  pthread_mutex_lock(&limit_mu);
  *suppressed = 0;
  if (!l->window_ms || now_ms - l->window_ms >= STK_LOG_LIMIT_WINDOW_MS) {
    *suppressed = l->suppressed;
    l->window_ms = now_ms ? now_ms : 1, l->logged = 0, l->suppressed = 0;
  }
  if (l->logged < per_min) l->logged++, ok = 1;
  else l->suppressed++;
  pthread_mutex_unlock(&limit_mu);
  return ok;
}

int64_t stk__log_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
