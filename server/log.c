/* log.c - timestamped, levelled log lines on stderr for the daemons and
 * the stoker CLI. Owns only the program name and the level threshold.
 * Must not allocate or take locks: a whole line goes out in one write(2). */
#include "log.h"

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

void stk__log(int level, const char *fmt, ...) {
  if (level < log_level) return;
  if (level < 0 || level > STK_LOG_ERROR) level = STK_LOG_ERROR;
  char line[2048];
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
  int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof(line) - 2) len = sizeof(line) - 2;
  line[len++] = '\n';
  ssize_t w = write(2, line, len);
  (void)w;
}
