/* daemon.h - process plumbing the two daemons share: termination signals
 * turned into a flag, and the --port-file protocol. */
#ifndef STOKER_SERVER_DAEMON_H
#define STOKER_SERVER_DAEMON_H

#include <stddef.h>
#include <stdint.h>

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

/* Raise the soft RLIMIT_NOFILE to the hard limit (daemons call it at
 * start and log the result: builders, streams and sessions all take
 * descriptors). Fills the limits in force after the call (UINT64_MAX =
 * unlimited). 0, or -1 when they could not be read or raised. */
int stk__raise_nofile(uint64_t *soft, uint64_t *hard);

void stk__sleep_ms(int64_t ms);

#endif
