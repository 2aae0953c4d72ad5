/* plan_cli.h - `stoker plan` (plan_cli.c), a subcommand of the stoker CLI
 * (stoker_cli.c): what to buy for a job, offline, from the cost model. */
#ifndef STOKER_SERVER_PLAN_CLI_H
#define STOKER_SERVER_PLAN_CLI_H

/* Run `stoker plan` with argv[0] = "plan"; prints the plan (or --help) to
 * stdout, errors to stderr. Returns the exit code: 0 plan printed, 1 no
 * option could be priced (what is missing printed), 2 usage error. Not
 * thread-safe (its option table is static); call once from main. */
int stk__cli_plan(int argc, char **argv);

#endif
