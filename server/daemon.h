/* daemon.h - process plumbing the two daemons share: their start-up
 * (options, TLS material, signals, descriptor limit, sd_notify, /metrics),
 * termination signals turned into a flag, the --port-file protocol,
 * starting the server. */
#ifndef STOKER_SERVER_DAEMON_H
#define STOKER_SERVER_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include "common/secret.h"

#include "metrics.h"
#include "daemon_options.h"
#include "rpc/rpc.h"

/* SIGTERM/SIGINT set a flag (see stk__signal_pending); SIGPIPE ignored. */
void stk__signals_install(void);
/* The signal number received, or 0. Async-signal-safe to read. */
int stk__signal_pending(void);
/* How many SIGTERM/SIGINT arrived: a second one cuts a drain short. */
int stk__signal_count(void);

/* Write "<port>\n" to path atomically (path.tmp.<pid>, then rename), so a
 * reader never sees a partial file. The temp file is created with
 * O_EXCL|O_NOFOLLOW: a symbolic link (or anything but a stale regular
 * file) already there is refused and nothing is written through it. 0 or
 * -1 with err. */
int stk__write_port_file(const char *path, int port, char *err, size_t errlen);

/* The serving bounds both daemons share (rpc.h, "Server"), as option
 * rows: STK__SERVE_OPTIONS(o) expands to the rows of a stk__serve_opts o
 * inside a daemon's option table. */
typedef struct stk__serve_opts {
  long long threads, max_calls, max_streams_per_conn, first_message_s, send_stall_s,
      keepalive_s, health_watch_lease_s, max_calls_per_peer;
  int insecure; /* serve peers beyond loopback with no caller credential */
} stk__serve_opts;

/* --max-calls's default (the coordinator grows it with the job's
 * world_size when left at it). */
#define STK__DEFAULT_MAX_CALLS 4096
#define STK__XSTR(x)           STK__STR_(x)
#define STK__STR_(x)           #x

/* One row per line reads better than the formatter's layout of
 * initializers inside a macro. */
/* clang-format off */
#define STK__SERVE_OPTIONS(o)                                                          \
  {"serve-threads", OPT_INT, "2", NULL,                                                \
   "threads that drive every gRPC call (completion queue; no thread per call)",        \
   &(o).threads, 1, 64},                                                               \
  {"max-calls", OPT_INT, STK__XSTR(STK__DEFAULT_MAX_CALLS), NULL,                      \
   "open calls (streams) allowed in all; when full, a new call ends the oldest one "    \
   "that sent no request yet, else it is refused RESOURCE_EXHAUSTED (health calls "    \
   "have a table of their own, 64)",                                                   \
   &(o).max_calls, 1, 1 << 20},                                                        \
  {"max-calls-per-peer", OPT_INT, "0", NULL,                                           \
   "open calls one peer address may hold (more are refused RESOURCE_EXHAUSTED); "      \
   "0 = half of --max-calls (and of the health table) for each peer beyond "           \
   "loopback, this host's own processes unlimited; N = N for every peer, loopback "    \
   "included",                                                                         \
   &(o).max_calls_per_peer, 0, 1 << 20},                                               \
  {"max-streams-per-conn", OPT_INT, "100", NULL,                                       \
   "concurrent HTTP/2 streams per client connection (more wait for a slot)",           \
   &(o).max_streams_per_conn, 1, 1 << 20},                                             \
  {"first-message-s", OPT_INT, "30", NULL,                                             \
   "a call that has sent no request after this long ends DEADLINE_EXCEEDED",           \
   &(o).first_message_s, 1, 86400},                                                    \
  {"send-stall-s", OPT_INT, "10", NULL,                                                \
   "a send the client does not take within this long cancels its stream "              \
   "(UNAVAILABLE) and gives back what it held",                                        \
   &(o).send_stall_s, 1, 86400},                                                       \
  {"keepalive-s", OPT_INT, "30", NULL,                                                 \
   "ping every connection this often; one that does not answer within 20 s is closed", \
   &(o).keepalive_s, 1, 86400},                                                        \
  {"health-watch-lease-s", OPT_INT, "300", NULL,                                       \
   "a grpc.health.v1 Watch (no token needed) ends with OK after this long; the "       \
   "prober watches again",                                                             \
   &(o).health_watch_lease_s, 1, 86400},                                               \
  {"insecure", OPT_BOOL, "false", NULL,                                                \
   "serve peers beyond this host's loopback although there is no caller credential "  \
   "(no token, role tokens or --tls-require-client-cert; server-only TLS is none; "    \
   "without it, such a daemon refuses them: protected mode); only on a network "      \
   "nobody else can reach",                                                            \
   &(o).insecure, 0, 0}
/* clang-format on */

/* The TLS options every binary that talks gRPC shares (--tls-ca,
 * --tls-cert, --tls-key, and for the daemons --tls-require-client-cert):
 * put STK__TLS_CLIENT_OPTIONS(x) or STK__TLS_SERVER_OPTIONS(x) in a
 * binary's option table, x being a stk__tls_opts, then load them with
 * stk__tls_load(&(stk__tls_files){x.ca, x.cert, x.key, x.require}, ...). */
typedef struct stk__tls_opts {
  char *ca, *cert, *key;
  int require;
} stk__tls_opts;

/* clang-format off */
#define STK__TLS_CLIENT_OPTIONS(x)                                                     \
  {"tls-ca", OPT_STR, "", NULL,                                                        \
   "PEM CA bundle that verifies the peers' certificates; with it, connections use TLS", \
   &(x).ca, 0, 0},                                                                     \
  {"tls-cert", OPT_STR, "", NULL,                                                      \
   "PEM certificate chain this process presents (with --tls-key)", &(x).cert, 0, 0},   \
  {"tls-key", OPT_STR, "", NULL, "PEM private key of --tls-cert", &(x).key, 0, 0}
#define STK__TLS_SERVER_OPTIONS(x)                                                     \
  STK__TLS_CLIENT_OPTIONS(x),                                                          \
  {"tls-require-client-cert", OPT_BOOL, "false", NULL,                                 \
   "mutual TLS: refuse peers without a certificate signed by --tls-ca",                \
   &(x).require, 0, 0}
/* clang-format on */

/* A token shorter than this draws a warning at start (it still works). */
#define STK__TOKEN_MIN_WARN 16

/* Role tokens (rpc.h, STK__ROLE_*): read from the files a daemon was
 * given (--worker-token-file, --client-token-file, --admin-token-file),
 * each granting its one role. */
typedef struct stk__role_tokens {
  char tok[3][STK_TOKEN_MAX + 1];
  stk__rpc_cred creds[3];
  size_t n;
} stk__role_tokens;
/* Warn (the log) when the secret file at path (a token, a TLS key) can be
 * read or written by its group or others. Never refuses: a Kubernetes
 * Secret volume is 0644 unless its defaultMode says otherwise. */
void stk__daemon_check_secret_mode(const char *what, const char *path);

/* Read the files that are non-empty (NULL or "" = that role has no token
 * of its own) into out; warn about a loose file mode or a token shorter
 * than STK__TOKEN_MIN_WARN bytes. 0, or -1 after logging why (the file is
 * named, never its content). */
int stk__daemon_role_tokens(const char *worker_file, const char *client_file,
                            const char *admin_file, stk__role_tokens *out);

/* Serve methods on listen with a receive limit of max_message_mb MiB, the
 * bearer token granting every role (none when empty), the role tokens
 * (NULL = none; with neither, calls need no token), TLS material (NULL = plaintext) and
 * the bounds in so, then write the bound port to port_file unless it is empty.
 * Protected mode: with neither token, role tokens nor TLS, and without
 * so->insecure, calls from peers beyond loopback are refused (logged once a
 * minute), and a listen address beyond loopback is warned about. 0 with
 * *srv (stop it with stk__rpc_server_stop) and *port, or -1 with err and nothing running.
 */
int stk__daemon_serve(const char *listen, const stk__rpc_method *methods, size_t nmethods,
                      long long max_message_mb, const char *token,
                      const stk__role_tokens *roles, const stk__tls *tls,
                      const stk__serve_opts *so, const char *port_file,
                      stk__rpc_server **srv, int *port, char *err, size_t errlen);

/* The host part of "host:port", "[v6]:port" (brackets dropped) or of a
 * bare host, into out. 0, or -1 when empty, malformed or too long. */
int stk__host_of(const char *hostport, char *out, size_t len);

/* Whether the host of addr ("host:port", "[v6]:port") resolves to the IP
 * address of peer (a gRPC peer string, parsed by stk__peer_parse: "ipv4:A:P",
 * "ipv6:%5BA%5D:P" or "ipv6:[A]:P"; an IPv4-mapped IPv6
 * peer counts as its IPv4 address; a loopback peer is this host, so a
 * loopback address or one of this host's interfaces matches it): 1 yes,
 * 0 no (resolved to the text of
 * up to four addresses in resolved, for the message), -1 when the host
 * does not resolve or either text is malformed (reason in resolved). A
 * unix socket peer matches any host; any other peer that is no IP is
 * malformed (-1). On 1, numeric (may
 * be NULL) gets the matching address with addr's port in numeric form
 * ("10.0.0.5:7000", "[fd00::5]:7000"; addr itself when the peer is no
 * IP): what clients dial, so they reach the address that was checked
 * without resolving the name again. May block on DNS (getaddrinfo): call
 * it off the serving threads; thread-safe. */
int stk__host_is_peer(const char *addr, const char *peer, char *resolved, size_t len,
                      char *numeric, size_t nlen);

/* 1 when the host of addr ("host:port", "[v6]:port") is a numeric IPv4 or
 * IPv6 address, so stk__host_is_peer answers it without any lookup (no
 * DNS, only this host's interface list): it may then run on a serving
 * thread. 0 for a name or a malformed address. Pure; thread-safe. */
int stk__host_is_numeric(const char *addr);

/* The bearer token of a daemon or CLI command, per stk__token_resolve
 * (common/secret.h): token (--token), else token_file (--token-file),
 * else $STOKER_TOKEN, else $STOKER_TOKEN_FILE; written into buf ("" =
 * none). A token from --token is logged as a warning (every local user
 * sees it in ps) and its bytes in argv are overwritten with 'x', so
 * /proc/PID/cmdline stops showing it once this returns. Logs where the
 * token came from (never its value) at info; warns about a token shorter
 * than STK__TOKEN_MIN_WARN bytes, and checks the mode of a token file or
 * of the --config file that holds `token =` (stk__daemon_check_secret_mode).
 * 0, or -1 after logging why. Call once from main, before threads start
 * (it writes argv), after stk__options_parse. */
int stk__daemon_token(const char *token, const char *token_file, int argc, char **argv,
                      char *buf, size_t buflen);

/* Raise the soft RLIMIT_NOFILE to the hard limit (daemons call it at
 * start and log the result: builders, streams and sessions all take
 * descriptors). Fills the limits in force after the call (UINT64_MAX =
 * unlimited). 0, or -1 when they could not be read or raised. */
int stk__raise_nofile(uint64_t *soft, uint64_t *hard);
/* stk__raise_nofile, then log what it did (a warning when it failed). */
void stk__daemon_raise_nofile(void);

/* ---- Start-up, in the order a daemon's main calls them ----------------- */

/* The first step of a daemon's main: name the log lines after program
 * (stk__log_init), let gRPC reuse its message buffers
 * (stk__rpc_tune_malloc), then stk__options_parse(opts, nopts, argc, argv,
 * program, synopsis, exit_codes). Returns what stk__options_parse does:
 * OPTS_RUN, OPTS_EXIT_OK (--help, --print-config done) or OPTS_USAGE
 * (message printed). The table keeps its strings until
 * stk__options_free. Not thread-safe: once, from main, before threads. */
int stk__daemon_init(const char *program, stk__option *opts, size_t nopts, int argc,
                     char **argv, const char *synopsis, const char *exit_codes);

/* The serving TLS material of a daemon's --tls-* rows (x filled by
 * STK__TLS_SERVER_OPTIONS): stk__tls_load into *tls (NULL = plaintext);
 * material without this side's certificate is refused, "TLS needs
 * --tls-cert and --tls-key" followed by need_cert_why ("" or e.g. " (the
 * worker serves clients with them)"); then a group- or world-readable
 * --tls-key is warned about (stk__daemon_check_secret_mode). 0 with *tls
 * (the caller frees it with stk__tls_free), or -1 with err and *tls NULL
 * (the caller prints err: a usage error). Once, from main. */
int stk__daemon_tls(const stk__tls_opts *x, const char *need_cert_why, stk__tls **tls,
                    char *err, size_t errlen);

/* Process-wide set-up once the options are good and before serving:
 * stk__signals_install, stk__daemon_raise_nofile (logged),
 * stk__notify_init. Once, from main, before threads start. */
void stk__daemon_start(void);

/* --metrics-listen: serve Prometheus /metrics on listen with fn (run on
 * the HTTP thread: it must take the daemon's locks itself) and access
 * (who sees full scrapes; NULL = everyone, metrics.h), and log the bound
 * port ("metrics on http://LISTEN/metrics (port N)"). 0 with *ms (stop it
 * with stk__metrics_stop), also when listen is empty (off: *ms NULL); -1 after
 * logging why, *ms NULL. */
int stk__daemon_metrics(const char *listen, stk__metrics_fn fn, void *ud,
                        const stk__metrics_access *access, stk__metrics_server **ms);

#endif
