/* daemon_log.h - the daemons' log lines: "<UTC ISO time> <program> <LEVEL> msg"
 * on stderr, one write per line so threads never interleave a line; and
 * the one escaping helper for untrusted text (ids, addresses, names from
 * the network) on its way to a log line or a terminal. */
#ifndef STOKER_SERVER_DAEMON_LOG_H
#define STOKER_SERVER_DAEMON_LOG_H

#include <stddef.h>
#include <stdint.h>

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

/* A rate limit for one log call site (a static, zero-initialised): lines
 * the network or a failing disk can repeat without end (a bad stream, a
 * failed build) are written at most `per_min` times per minute, and the
 * first line after a minute with suppressed lines says how many were. */
typedef struct stk__log_limit {
  int64_t window_ms;   /* start of the current minute (0: none yet) */
  uint32_t logged;     /* lines written in it */
  uint64_t suppressed; /* lines not written in it */
} stk__log_limit;
#define STK_LOG_LIMIT_WINDOW_MS 60000
/* 1 when a line may be written at now_ms (then *suppressed is the count
 * of lines the previous window left out, to be said once), 0 when it is
 * over its limit (counted). Thread-safe (one lock for every site). */
int stk__log_allow(stk__log_limit *l, uint32_t per_min, int64_t now_ms,
                   uint64_t *suppressed);
/* stk__log at most per_min times a minute from this call site. */
#define LOG_LIMITED(level, per_min, ...)                                     \
  do {                                                                       \
    static stk__log_limit stk_ll_;                                           \
    uint64_t stk_sup_ = 0;                                                   \
    if (stk__log_allow(&stk_ll_, (per_min), stk__log_now_ms(), &stk_sup_)) { \
      if (stk_sup_)                                                          \
        stk__log((level),                                                    \
                 "%llu lines like the next were not logged (at most %u "     \
                 "a minute)",                                                \
                 (unsigned long long)stk_sup_, (unsigned)(per_min));         \
      stk__log((level), __VA_ARGS__);                                        \
    }                                                                        \
  } while (0)
/* CLOCK_MONOTONIC in ms (the limiter's clock). */
int64_t stk__log_now_ms(void);

#define LOG_DEBUG(...) stk__log(STK_LOG_DEBUG, __VA_ARGS__)
#define LOG_INFO(...)  stk__log(STK_LOG_INFO, __VA_ARGS__)
#define LOG_WARN(...)  stk__log(STK_LOG_WARN, __VA_ARGS__)
#define LOG_ERROR(...) stk__log(STK_LOG_ERROR, __VA_ARGS__)

#endif
