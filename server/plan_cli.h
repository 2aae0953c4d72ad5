/* plan_cli.h - `stoker plan` (plan_cli.c), a subcommand of the stoker CLI
 * (stoker_cli.c): what to buy for a job, from the cost model: offline, or
 * live from a running job's coordinator; and the Status call it borrows
 * from stoker_cli.c for that. */
#ifndef STOKER_SERVER_PLAN_CLI_H
#define STOKER_SERVER_PLAN_CLI_H

#include "daemon.h"
#include "stoker.pb-c.h"

/* How a subcommand reaches the coordinator (its parsed options). */
typedef struct stk__cli_conn {
  const char *coordinator, *token, *token_file;
  stk__tls_opts tls;
  long long timeout_ms;
} stk__cli_conn;

/* stoker_cli.c: one Status call for subcommand cmd ("stoker plan") with
 * conn's token (resolved as every subcommand does, argv for the checks)
 * and TLS files. 0 with *r (free with protobuf_c_message_free_unpacked),
 * or -1 after saying why on stderr. Main thread only. */
int stk__cli_status_fetch(const char *cmd, const stk__cli_conn *conn, int argc,
                          char **argv, Stoker__V1__StatusResponse **r);

/* Run `stoker plan` with argv[0] = "plan"; prints the plan (or --help) to
 * stdout, errors to stderr. Returns the exit code: 0 plan printed, 1 no
 * option could be priced (what is missing printed), 2 usage error. Not
 * thread-safe (its option table is static); call once from main. */
int stk__cli_plan(int argc, char **argv);

#endif
