/* log.h - the daemons' log lines: "<UTC ISO time> <program> <LEVEL> msg"
 * on stderr, one write per line so threads never interleave a line. */
#ifndef STOKER_SERVER_LOG_H
#define STOKER_SERVER_LOG_H

enum { STK_LOG_DEBUG = 0, STK_LOG_INFO = 1, STK_LOG_WARN = 2, STK_LOG_ERROR = 3 };

/* Set the program name printed on every line (kept by pointer). */
void stk__log_init(const char *program);
/* "debug" | "info" | "warn" | "error"; -1 for an unknown name. */
int stk__log_level_parse(const char *name);
void stk__log_set_level(int level);
void stk__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOG_DEBUG(...) stk__log(STK_LOG_DEBUG, __VA_ARGS__)
#define LOG_INFO(...)  stk__log(STK_LOG_INFO, __VA_ARGS__)
#define LOG_WARN(...)  stk__log(STK_LOG_WARN, __VA_ARGS__)
#define LOG_ERROR(...) stk__log(STK_LOG_ERROR, __VA_ARGS__)

#endif
