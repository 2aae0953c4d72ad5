/* log.h - the daemons' log lines: "<UTC ISO time> <program> <LEVEL> msg"
 * on stderr, one write per line so threads never interleave a line; and
 * the one escaping helper for untrusted text (ids, addresses, names from
 * the network) on its way to a log line or a terminal. */
#ifndef STOKER_SERVER_LOG_H
#define STOKER_SERVER_LOG_H

#include <stddef.h>

enum { STK_LOG_DEBUG = 0, STK_LOG_INFO = 1, STK_LOG_WARN = 2, STK_LOG_ERROR = 3 };

/* Set the program name printed on every line (kept by pointer). */
void stk__log_init(const char *program);
/* "debug" | "info" | "warn" | "error"; -1 for an unknown name. */
int stk__log_level_parse(const char *name);
void stk__log_set_level(int level);
/* Format and write one line. The message is escaped with stk__escape, so
 * text from the network in it (worker ids, addresses, peers, client ids)
 * can neither start a forged line nor send terminal control sequences. */
void stk__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copy in (NULL reads as "(null)") into out[outlen] with every byte
 * outside printable ASCII 0x20..0x7e written as \xNN, so the result is one
 * line of plain text with no control sequence. A backslash stays as it is:
 * text that was escaped once already (an abort reason the coordinator
 * escaped) is not escaped twice, at the price of a literal "\x41" in an id
 * reading like an escape. When it does not fit, it ends with "..." (bounded length).
 * Always NUL-terminates when outlen > 0; returns out. Thread-safe, no
 * allocation. */
const char *stk__escape(char *out, size_t outlen, const char *in);
/* Room for an escaped id or address in output (longer ones end in "..."). */
#define STK_ESCAPED_ID 300

#define LOG_DEBUG(...) stk__log(STK_LOG_DEBUG, __VA_ARGS__)
#define LOG_INFO(...)  stk__log(STK_LOG_INFO, __VA_ARGS__)
#define LOG_WARN(...)  stk__log(STK_LOG_WARN, __VA_ARGS__)
#define LOG_ERROR(...) stk__log(STK_LOG_ERROR, __VA_ARGS__)

#endif
