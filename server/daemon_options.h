/* daemon_options.h - the daemons' option table: one row {name, type, default,
 * validator, help} per option, shared by the command line ("--name value"
 * or "--name=value") and the config file ("name = value" lines, '#'
 * comments), with --help and --print-config built from the same rows
 * (as Redis's static_configs). */
#ifndef STOKER_SERVER_DAEMON_OPTIONS_H
#define STOKER_SERVER_DAEMON_OPTIONS_H

#include <stddef.h>

typedef enum { OPT_STR = 1, OPT_INT, OPT_BOOL, OPT_LIST, OPT_DOUBLE } stk__opt_type;

/* Value of an OPT_LIST option: every occurrence, in order. */
typedef struct stk__strlist {
  char **v;
  size_t n;
} stk__strlist;

typedef struct stk__option stk__option;
/* Extra check of a value already parsed into o->dst; 0 or -1 with err. */
typedef int (*stk__opt_validator)(const stk__option *o, char *err, size_t errlen);

struct stk__option {
  const char *name; /* without the leading "--" */
  stk__opt_type type;
  const char *def; /* default as text (NULL = empty / none) */
  stk__opt_validator validate;
  const char *help;
  void *dst;          /* char ** | long long * | int * | stk__strlist * | double * */
  long long min, max; /* OPT_INT and OPT_DOUBLE bounds (inclusive) */
};

/* Outcome of stk__options_parse. */
enum { OPTS_RUN = 0, OPTS_EXIT_OK = 1, OPTS_USAGE = 2 };

/* Apply defaults, then --config FILE, then the command line. Handles
 * --help (prints the table, the synopsis and exit_codes text) and
 * --print-config (prints the effective "name = value" lines). Returns
 * OPTS_RUN, OPTS_EXIT_OK (help/print-config done) or OPTS_USAGE (message
 * printed to stderr). Not thread-safe; call once from main. */
int stk__options_parse(stk__option *opts, size_t n, int argc, char **argv,
                       const char *program, const char *synopsis, const char *exit_codes);
/* The --config file (as named on the command line) that holds a
 * `token = ...` line, or NULL; after stk__options_parse. The daemon
 * checks its mode as it does a token file's. Main thread only. */
const char *stk__options_token_config(void);
/* Print "name = value" for every option to stdout. */
void stk__options_print(const stk__option *opts, size_t n);
/* Free every string the table owns. */
void stk__options_free(stk__option *opts, size_t n);

/* Validator: "host:port" with a non-empty host and a port in 0..65535. */
int stk__opt_hostport(const stk__option *o, char *err, size_t errlen);
/* Validator: empty, or an instance type's name (stk__instance_name_ok:
 * what the instance table and `stoker plan` know it by). */
int stk__opt_instance_type(const stk__option *o, char *err, size_t errlen);
/* Validator: log level name. */
int stk__opt_loglevel(const stk__option *o, char *err, size_t errlen);

/* Rows both daemons' tables share (stk__options_parse); each takes the
 * field it fills, and where the daemons word a row differently, the part
 * that differs. Their text is what --help prints, which the docs quote
 * (test_docs_option_blocks): change it on purpose only. The TLS and
 * serving rows are STK__TLS_SERVER_OPTIONS and STK__SERVE_OPTIONS
 * (daemon.h). */
/* clang-format off */
#define STK__OPT_TOKEN_FILE(dst, what)                                                 \
  {"token-file", OPT_STR, "", NULL,                                                    \
   "read the bearer token " what " from the first line of FILE (else $STOKER_TOKEN, "  \
   "else the file $STOKER_TOKEN_FILE names; none: no token)",                          \
   &(dst), 0, 0}
#define STK__OPT_TOKEN(dst)                                                            \
  {"token", OPT_STR, "", NULL,                                                         \
   "the bearer token itself: visible to every local user in ps, prefer "               \
   "--token-file or $STOKER_TOKEN",                                                    \
   &(dst), 0, 0}
#define STK__OPT_PORT_FILE(dst)                                                        \
  {"port-file", OPT_STR, "", NULL,                                                     \
   "after binding, write the bound port here (decimal, newline; atomic rename)",       \
   &(dst), 0, 0}
#define STK__OPT_STATS_INTERVAL_S(dst)                                                 \
  {"stats-interval-s", OPT_INT, "10", NULL, "seconds between stats log lines",         \
   &(dst), 1, 86400}
#define STK__OPT_MAX_MESSAGE_MB(dst, def, help)                                        \
  {"max-message-mb", OPT_INT, def, NULL, help, &(dst), 1, 1024}
#define STK__OPT_LOG_LEVEL(dst)                                                        \
  {"log-level", OPT_STR, "info", stk__opt_loglevel, "debug | info | warn | error",     \
   &(dst), 0, 0}
#define STK__OPT_METRICS_LISTEN(dst)                                                   \
  {"metrics-listen", OPT_STR, "", stk__opt_hostport,                                   \
   "serve Prometheus /metrics on this host:port (port 0 = any free one, logged): "     \
   "loopback or a scrape network, not 0.0.0.0 (plain HTTP, 8 connections per "        \
   "address); empty = off",                                                            \
   &(dst), 0, 0}
/* clang-format on */

#endif
