/* coord_options.c - stoker-coordinator's option table ({name, type, default,
 * validator, help} per row: the command line, --config, --help and
 * --print-config all read it) and the exit codes --help prints. Owns opt
 * (coordinator.h), filled once by stk__daemon_init in main. Only data: no
 * function, no state. Rows both daemons share come from daemon_options.h
 * (STK__OPT_*) and daemon.h (TLS, serving bounds). */
#include "coordinator.h"

const char exit_codes_text[] =
    "  0  the job ended: every rank finished, rank 0 asked, or SIGTERM/SIGINT\n"
    "  1  runtime failure (cannot listen, cannot write the port file, cannot use\n"
    "     --state-dir: locked by another coordinator, unreadable, damaged state)\n"
    "  2  usage error (bad option, config file or job spec; --state-dir holds\n"
    "     another job's state)\n"
    "  3  idle timeout: no client touched the job for --idle-timeout-s "
    "(workers were still shut down)\n"
    "  4  the job was aborted: a rank (or stoker abort) asked with Finish.abort_job;\n"
    "     workers were told the job failed and exit with their own abort code\n";

coord_opts opt; /* filled from options[] */

stk__option options[] = {
    {"listen", OPT_STR, "127.0.0.1:7070", stk__opt_hostport,
     "address to listen on (port 0 = any free port)", &opt.listen, 0, 0},
    {"job", OPT_STR, "", NULL, "job spec file ('key = value' lines)", &opt.job, 0, 0},
    {"set", OPT_LIST, NULL, NULL,
     "override one job key (the keys --print-job shows), e.g. --set "
     "batch_size=64; applied after --job",
     &opt.set, 0, 0},
    {"print-job", OPT_BOOL, "false", NULL,
     "print the job's canonical text and hash, then exit", &opt.print_job, 0, 0},
    {"help-job-keys", OPT_BOOL, "false", NULL,
     "print every job key (what --job lines and --set take) with its type and "
     "meaning, then exit",
     &opt.help_job_keys, 0, 0},
    {"accel-type", OPT_STR, "", stk__opt_instance_type,
     "the instance type of the training (accelerator) hosts, e.g. ml.p4d.24xlarge "
     "(stoker-launch passes what the scheduler says): stoker status prices its "
     "verdict with it, stoker plan --coordinator plans from it",
     &opt.accel_type, 0, 0},
    {"accel-hosts", OPT_INT, "0", NULL,
     "how many training hosts the job has (0 = world_size / the type's accelerators)",
     &opt.accel_hosts, 0, 100000},
    {"data-type", OPT_STR, "", stk__opt_instance_type,
     "the instance type to price data hosts as where none runs yet (a homogeneous job; "
     "the data workers' own --instance-type otherwise)",
     &opt.data_type, 0, 0},
    {"idle-timeout-s", OPT_INT, "600", NULL,
     "end the job when no client touched it this long (a call, an open watch "
     "within its lease, or batches flowing from a worker count)",
     &opt.idle_timeout_s, 1, 86400 * 30},
    {"watch-lease-s", OPT_INT, "60", NULL,
     "end each WatchWorkers call (OK) after this long; libstoker opens a new one "
     "at once, a watcher on a dead host does not, so it stops keeping the job "
     "from its idle timeout",
     &opt.watch_lease_s, 1, 86400},
    {"state-dir", OPT_STR, "", NULL,
     "directory (created if missing) for the job's state journal: job hash, "
     "dataset size and fingerprint, joined and finished ranks, workers, the "
     "job's end; a coordinator restarted with the same job and state dir resumes "
     "where it was. Empty = no journal (clients still re-announce themselves)",
     &opt.state_dir, 0, 0},
    {"rejoin-wait-s", OPT_INT, "10", NULL,
     "after a restart with --state-dir, how long (from the start) the end of the "
     "job waits for workers registered before the restart to come back and take "
     "their Shutdown; a live worker re-registers within a few seconds (its "
     "reconnect backoff is at most 1 s), a gone one never does",
     &opt.rejoin_wait_s, 0, 3600},
    {"discard-state", OPT_BOOL, "false", NULL,
     "start afresh when --state-dir holds another job's state or a damaged "
     "file (it is overwritten; logged)",
     &opt.discard_state, 0, 0},
    {"heartbeat-interval-ms", OPT_INT, "1000", NULL, "how often workers heartbeat",
     &opt.heartbeat_interval_ms, 50, 60000},
    {"heartbeat-misses", OPT_INT, "3", NULL,
     "missed heartbeats before a worker is shown suspect (it stays listed while its "
     "session is open)",
     &opt.heartbeat_misses, 1, 1000},
    {"heartbeat-lapse-s", OPT_INT, "60", NULL,
     "a worker without a heartbeat for this long (and for more than "
     "--heartbeat-misses intervals) is dropped from the list and its session "
     "ended, even though the session is open",
     &opt.heartbeat_lapse_s, 1, 86400},
    STK__OPT_STATS_INTERVAL_S(opt.stats_interval_s),
    {"shutdown-grace-s", OPT_INT, "15", NULL,
     "on shutdown, how long to wait for workers to drain and disconnect, and "
     "for workers registered before a restart (--state-dir, --rejoin-wait-s) to "
     "come back and be told (a second SIGTERM/SIGINT cuts it short)",
     &opt.shutdown_grace_s, 0, 3600},
    {"linger-s", OPT_INT, "10", NULL,
     "when a job that began before this coordinator started (it was restarted) "
     "ends, stay up this long telling every worker that comes back to shut down "
     "(workers retry every 1-3 s) and every rank that the job ended",
     &opt.linger_s, 0, 3600},
    STK__OPT_TOKEN_FILE(opt.token_file, "every call must carry"),
    STK__OPT_TOKEN(opt.token),
    {"worker-token-file", OPT_STR, "", NULL,
     "role separation: a token (first line of FILE) that may only open worker "
     "sessions (each registered worker gets its own stream ticket, which opens "
     "streams on that worker only) and read the job's state (Status without the "
     "job, workers or ranks)",
     &opt.worker_token_file, 0, 0},
    {"client-token-file", OPT_STR, "", NULL,
     "role separation: a token that may only join, watch, finish, report and read "
     "Status; clients stream with the workers' tickets, so workers need not have it",
     &opt.client_token_file, 0, 0},
    {"admin-token-file", OPT_STR, "", NULL,
     "role separation: a token that may call everything (stoker abort, status)",
     &opt.admin_token_file, 0, 0},
    {"ticket-ttl-s", OPT_INT, "3600", NULL,
     "with role tokens: a stream ticket's lifetime; the worker list carries a fresh "
     "one from half-way through, and workers refuse a ticket past its expiry (on "
     "this coordinator's clock, with a margin of 5 s for clock skew) when a stream "
     "opens",
     &opt.ticket_ttl_s, 2, 30 * 86400},
    {"trust-worker-addresses", OPT_BOOL, "false", NULL,
     "accept a worker whose advertised host does not resolve to the address its "
     "session comes from (behind NAT or a proxy)",
     &opt.trust_worker_addresses, 0, 0},
    {"resolve-threads", OPT_INT, "4", NULL,
     "threads that look up workers' advertised host names (off the RPC threads; a "
     "numeric address is checked at once, without them): at most this many lookups "
     "at once, and 16 per thread waiting; past that a worker is told to retry "
     "(UNAVAILABLE)",
     &opt.resolve_threads, 1, 64},
    {"resolve-timeout-ms", OPT_INT, "5000", NULL,
     "a worker whose advertised host name has not resolved after this long is told "
     "to retry (UNAVAILABLE)",
     &opt.resolve_timeout_ms, 10, 600000},
    STK__TLS_SERVER_OPTIONS(opt.tls),
    STK__OPT_PORT_FILE(opt.port_file),
    STK__OPT_MAX_MESSAGE_MB(opt.max_message_mb, "4",
                            "largest gRPC message sent (requests are received with "
                            "their own small limits: docs/operations.md)"),
    STK__OPT_LOG_LEVEL(opt.log_level),
    STK__SERVE_OPTIONS(opt.serve),
    STK__OPT_METRICS_LISTEN(opt.metrics_listen),
    {"metrics-rank-series", OPT_INT, "64", NULL,
     "/metrics: per-rank series (stoker_rank_*) for ranks below this only, so a job of "
     "thousands of ranks keeps a bounded number of series; 0 = none",
     &opt.metrics_rank_series, 0, 1000000},
    {"max-bad-fraction", OPT_DOUBLE, "0", NULL,
     "fail the job (as an abort: exit 4, workers exit 5) once a worker has found more "
     "than this fraction of the dataset's samples bad; 0 = off (bad samples are "
     "replaced)",
     &opt.max_bad_fraction, 0, 1},
};
const size_t noptions = sizeof(options) / sizeof(options[0]);
