/* daemon.h - process plumbing the two daemons share: termination signals
 * turned into a flag, the --port-file protocol, starting the server. */
#ifndef STOKER_SERVER_DAEMON_H
#define STOKER_SERVER_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include "rpc.h"

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

/* Serve methods on listen with a receive limit of max_message_mb MiB and
 * the bearer token (none when empty), then write the bound port to
 * port_file unless it is empty. 0 with *srv (stop it with
 * stk__rpc_server_stop) and *port, or -1 with err and nothing running. */
int stk__daemon_serve(const char *listen, const stk__rpc_method *methods, size_t nmethods,
                      long long max_message_mb, const char *token, const char *port_file,
                      stk__rpc_server **srv, int *port, char *err, size_t errlen);

/* The bearer token of a daemon or CLI command, per stk__token_resolve
 * (common/secret.h): token (--token), else token_file (--token-file),
 * else $STOKER_TOKEN, else $STOKER_TOKEN_FILE; written into buf ("" =
 * none). A token from --token is logged as a warning (every local user
 * sees it in ps) and its bytes in argv are overwritten with 'x', so
 * /proc/PID/cmdline stops showing it once this returns. Logs where the
 * token came from (never its value) at info. 0, or -1 after logging why.
 * Call once from main, before threads start (it writes argv). */
int stk__daemon_token(const char *token, const char *token_file, int argc, char **argv,
                      char *buf, size_t buflen);

/* Raise the soft RLIMIT_NOFILE to the hard limit (daemons call it at
 * start and log the result: builders, streams and sessions all take
 * descriptors). Fills the limits in force after the call (UINT64_MAX =
 * unlimited). 0, or -1 when they could not be read or raised. */
int stk__raise_nofile(uint64_t *soft, uint64_t *hard);
/* stk__raise_nofile, then log what it did (a warning when it failed). */
void stk__daemon_raise_nofile(void);

#endif
