/* stoker_cli.c - the `stoker` command-line tool. Subcommands:
 *   stoker status --coordinator host:port   render the job's Status RPC
 *   stoker abort  --coordinator host:port   end the job as failed
 *   stoker finish --coordinator host:port --ranks R  count ranks as done
 *   stoker wait   --coordinator host:port   block until the job ends
 *   stoker plan   --job FILE --accel TYPE ...  what to buy (plan_cli.c);
 *                 --coordinator host:port: from the running job
 * Others may add subcommands to the table in main. Owns nothing beyond one
 * call; prints to stdout, errors to stderr.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/advice.h"
#include "common/clock.h"
#include "common/secret.h"
#include "daemon.h"
#include "daemon_log.h"
#include "daemon_options.h"
#include "plan_cli.h"
#include "plan_live.h"
#include "rpc/rpc.h"
#include "rpc/wire_limits.h"
#include "stoker.pb-c.h"
#include "stoker/core.h"

static struct {
  char *coordinator, *token, *token_file, *log_level, *reason, *ranks, *instances, *data;
  stk__strlist rates;
  double spare_cores;
  long long timeout_ms, rank, timeout_s;
  stk__tls_opts tls;
  stk__tls *tls_loaded; /* from opt.tls, loaded by open_channel */
  int json;
} opt;

/* Rows every subcommand's table shares. */
#define OPT_COORDINATOR                                           \
  {                                                               \
    "coordinator", OPT_STR, "127.0.0.1:7070", stk__opt_hostport,  \
        "host:port of stoker-coordinator", &opt.coordinator, 0, 0 \
  }
#define OPT_TOKEN                                                                     \
  {"token-file",                                                                      \
   OPT_STR,                                                                           \
   "",                                                                                \
   NULL,                                                                              \
   "read the bearer token from the first line of FILE (else $STOKER_TOKEN, else the " \
   "file $STOKER_TOKEN_FILE names)",                                                  \
   &opt.token_file,                                                                   \
   0,                                                                                 \
   0},                                                                                \
  {                                                                                   \
    "token", OPT_STR, "", NULL,                                                       \
        "the bearer token itself (visible in ps: prefer "                             \
        "--token-file or $STOKER_TOKEN)",                                             \
        &opt.token, 0, 0                                                              \
  }
#define OPT_TIMEOUT_MS                                                                  \
  {                                                                                     \
    "timeout-ms", OPT_INT, "5000", NULL, "give up after this long", &opt.timeout_ms, 1, \
        3600000                                                                         \
  }
#define OPT_LOG_LEVEL                                                               \
  {                                                                                 \
    "log-level", OPT_STR, "warn", stk__opt_loglevel, "debug | info | warn | error", \
        &opt.log_level, 0, 0                                                        \
  }

static stk__option status_options[] = {
    OPT_COORDINATOR,
    {"json", OPT_BOOL, "false", NULL,
     "print one JSON object (job, state, workers, ranks, bad samples, verdict) instead "
     "of the table",
     &opt.json, 0, 0},
    {"instances", OPT_STR, "", NULL,
     "an instance table of your own over the shipped one (as stoker plan's): what the "
     "purchase line prices the job's shape with",
     &opt.instances, 0, 0},
    {"data", OPT_STR, "", NULL,
     "data-host types to price besides the running ones and the coordinator's "
     "--data-type, comma-separated",
     &opt.data, 0, 0},
    {"spare-cores", OPT_DOUBLE, "0", NULL,
     "cores each training host spares for loading and receiving; 0 = its workers' "
     "cores, else its vCPU minus one per rank (said so)",
     &opt.spare_cores, 0, 100000},
    {"rate", OPT_LIST, "", NULL,
     "TYPE=N: images per CPU-second one host of TYPE serves (a calibration run), "
     "instead of what the running workers measure or, for a type none runs, their mean "
     "(repeatable)",
     &opt.rates, 0, 0},
    OPT_TOKEN,
    STK__TLS_CLIENT_OPTIONS(opt.tls),
    OPT_TIMEOUT_MS,
    OPT_LOG_LEVEL,
};
#define NSTATUS (sizeof(status_options) / sizeof(status_options[0]))

static const char status_exit_codes[] =
    "  0  status printed\n  1  the coordinator could not be reached or answered an "
    "error\n"
    "  2  usage error\n";

static stk__option abort_options[] = {
    OPT_COORDINATOR,
    {"rank", OPT_INT, "0", NULL, "the rank that aborts (any rank < world_size)",
     &opt.rank, 0, 0xffffffffLL},
    {"reason", OPT_STR, "aborted with stoker abort", NULL,
     "why (logged by the coordinator and shown to every rank; at most 255 bytes)",
     &opt.reason, 0, 0},
    OPT_TOKEN,
    STK__TLS_CLIENT_OPTIONS(opt.tls),
    OPT_TIMEOUT_MS,
    OPT_LOG_LEVEL,
};
#define NABORT (sizeof(abort_options) / sizeof(abort_options[0]))

static const char abort_exit_codes[] =
    "  0  the coordinator took the abort (or the job was already ending: it logs that)\n"
    "  1  the coordinator could not be reached or answered an error\n"
    "  2  usage error\n";

static stk__option finish_options[] = {
    OPT_COORDINATOR,
    {"ranks", OPT_STR, "", NULL,
     "the ranks that are done: a list of ranks and ranges, e.g. 0,1,4-7 (required)",
     &opt.ranks, 0, 0},
    OPT_TOKEN,
    STK__TLS_CLIENT_OPTIONS(opt.tls),
    OPT_TIMEOUT_MS,
    OPT_LOG_LEVEL,
};
#define NFINISH (sizeof(finish_options) / sizeof(finish_options[0]))

static const char finish_exit_codes[] =
    "  0  the coordinator counted every listed rank as finished (a rank that had\n"
    "     finished already counts once)\n"
    "  1  the coordinator could not be reached or refused a rank (outside the\n"
    "     job's world_size, a wrong token)\n"
    "  2  usage error\n";

static stk__option wait_options[] = {
    OPT_COORDINATOR,
    {"timeout-s", OPT_INT, "60", NULL,
     "give up (exit 1) once the coordinator was unreachable this long in a row",
     &opt.timeout_s, 1, 86400 * 30},
    OPT_TOKEN,
    STK__TLS_CLIENT_OPTIONS(opt.tls),
    OPT_LOG_LEVEL,
};
#define NWAIT (sizeof(wait_options) / sizeof(wait_options[0]))

enum { WAIT_DONE = 0, WAIT_UNREACHABLE = 1, WAIT_USAGE = 2, WAIT_FAILED = 4 };

static const char wait_exit_codes[] =
    "  0  the job ended normally (every rank finished, rank 0 ended it, or the\n"
    "     coordinator was stopped with a signal)\n"
    "  1  the coordinator was unreachable for longer than --timeout-s (never up, or\n"
    "     gone before this command saw how the job ended), or refused the call\n"
    "     (e.g. a wrong token)\n"
    "  2  usage error\n"
    "  4  the job failed: it was aborted (the coordinator's abort code)\n";

static char token[STK_TOKEN_MAX + 1]; /* cli_token() */

/* Resolve the token of a parsed subcommand (stk__daemon_token). 0, or -1
 * after saying why. */
static int cli_token(int argc, char **argv) {
  return stk__daemon_token(opt.token, opt.token_file, argc, argv, token, sizeof(token));
}

static void human_bytes(uint64_t b, char *out, size_t len) {
  const char *u[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1000 && i < 5) v /= 1000, i++;
  snprintf(out, len, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

static void print_ranks(const char *label, const uint32_t *r, size_t n, uint32_t world) {
  printf("%-16s %zu/%u", label, n, world);
  if (n) {
    printf("  [");
    for (size_t i = 0; i < n && i < 64; i++) printf("%s%u", i ? " " : "", r[i]);
    if (n > 64) printf(" ...");
    printf("]");
  }
  printf("\n");
}

/* A channel to the coordinator with --token and the --tls-* files (read
 * once per process), receiving messages of at most max_msg (the largest
 * response the command expects: wire_limits.h). 0, or -1 after saying why
 * on stderr. */
static int open_channel(const char *cmd, size_t max_msg, stk__rpc_channel **ch) {
  char err[512];
  stk__tls_files tf = {opt.tls.ca, opt.tls.cert, opt.tls.key, 0};
  if (!opt.tls_loaded && stk__tls_load(&tf, &opt.tls_loaded, err, sizeof(err))) {
    fprintf(stderr, "%s: %s\n", cmd, err);
    return -1;
  }
  if (stk__rpc_channel_open(opt.coordinator, max_msg, token, opt.tls_loaded, ch)) {
    fprintf(stderr, "%s: cannot create a channel\n", cmd);
    return -1;
  }
  return 0;
}

/* One unary call to the coordinator for subcommand cmd ("stoker status"):
 * 0 with *resp (free with protobuf_c_message_free_unpacked), or -1 after
 * saying why on stderr (the coordinator's details escaped). */
static int cli_unary(const char *cmd, const char *method, const ProtobufCMessage *req,
                     const ProtobufCMessageDescriptor *resp_desc,
                     ProtobufCMessage **resp) {
  stk__rpc_channel *ch = NULL;
  *resp = NULL;
  if (open_channel(cmd, STK_MAX_STATUS_MSG, &ch)) return -1;
  char det[512], edet[600];
  int code = stk__rpc_unary(ch, method, req, resp_desc, resp, (int)opt.timeout_ms, det,
                            sizeof(det));
  stk__rpc_channel_close(ch);
  if (code == GRPC_STATUS_OK) return 0;
  fprintf(stderr, "%s: %s: gRPC status %d%s%s\n", cmd, opt.coordinator, code,
          *det ? ": " : "", stk__escape(edet, sizeof(edet), det));
  return -1;
}

int stk__cli_status_fetch(const char *cmd, const stk__cli_conn *conn, int argc,
                          char **argv, Stoker__V1__StatusResponse **r) {
  *r = NULL;
  opt.coordinator = (char *)conn->coordinator;
  opt.token = (char *)conn->token;
  opt.token_file = (char *)conn->token_file;
  opt.tls = conn->tls;
  opt.timeout_ms = conn->timeout_ms;
  int rc = -1;
  if (!cli_token(argc, argv)) {
    Stoker__V1__StatusRequest q = STOKER__V1__STATUS_REQUEST__INIT;
    rc = cli_unary(cmd, "/stoker.v1.Coordinator/Status", &q.base,
                   &stoker__v1__status_response__descriptor, (ProtobufCMessage **)r);
  }
  /* the strings stay the caller's (its option table frees them) */
  opt.coordinator = opt.token = opt.token_file = NULL;
  memset(&opt.tls, 0, sizeof(opt.tls));
  return rc;
}

/* ---- the purchase: the running shape priced (plan_live.c) -------------- */

typedef struct purchase {
  int ok;         /* 1: priced (now and best set), 0: text says what is missing */
  char text[800]; /* the sentence (stk__live_purchase) */
  char now[200];  /* the running shape, "" when not among the options */
  char best[200]; /* the cheapest $/step */
  double now_ms, best_ms, change; /* model step times; $/step change, fraction */
} purchase;

static stk__instance_table ptable;   /* 25 KB */
static stk__cm_option poptions[512]; /* the shapes tried */
static stk__live_plan plive;

/* Price the job's shape from a Status reply: what stoker status prints on
 * its purchase line (and --json's "purchase"). */
static void status_purchase(const Stoker__V1__StatusResponse *r, purchase *pu) {
  memset(pu, 0, sizeof(*pu));
  const char *shipped = NULL;
  char err[640];
  if (stk__plan_table_load(&ptable, opt.instances, &shipped, err, sizeof(err))) {
    snprintf(pu->text, sizeof(pu->text), "missing: %s", err);
    return;
  }
  stk__live_opts lo = {"",
                       0,
                       opt.data,
                       "",
                       opt.spare_cores,
                       0,
                       0,
                       (const char *const *)opt.rates.v,
                       opt.rates.n};
  if (stk__live_plan_build(r, &ptable, &lo, &plive, err, sizeof(err))) {
    snprintf(pu->text, sizeof(pu->text), "%s", err);
    return;
  }
  int best;
  size_t cap = sizeof(poptions) / sizeof(poptions[0]);
  size_t n = stk__cm_search_run(&plive.s, poptions, cap, &best);
  if (n > cap) n = cap;
  int cur = stk__live_current(&plive, poptions, n);
  stk__live_purchase(&plive, poptions, n, best, cur, pu->text, sizeof(pu->text));
  if (best < 0 || cur < 0 || !poptions[cur].r.ok) return;
  pu->ok = 1;
  stk__plan_shape_label(&poptions[cur], pu->now, sizeof(pu->now));
  stk__plan_shape_label(&poptions[best], pu->best, sizeof(pu->best));
  pu->now_ms = poptions[cur].r.step_s * 1e3;
  pu->best_ms = poptions[best].r.step_s * 1e3;
  pu->change = poptions[best].r.usd_per_step / poptions[cur].r.usd_per_step - 1;
}

/* ---- status: ranks, bad samples, verdict, --json ------------------------ */

/* The job-wide verdict from a Status reply (common/advice.h): the live
 * workers' cores and measured capacity, the figures of every rank that
 * reported in the last 30 s. *text gets its sentence. */
static void status_verdict(const Stoker__V1__StatusResponse *r, stk__verdict *v,
                           char *text, size_t len) {
  size_t nw = r->n_workers, nr = r->n_ranks;
  stk__worker_fig *wf = calloc(nw ? nw : 1, sizeof(*wf));
  stk__rank_fig *rf = calloc(nr ? nr : 1, sizeof(*rf));
  uint32_t n = 0;
  if (wf && rf) {
    for (size_t i = 0; i < nw; i++) {
      const Stoker__V1__WorkerStatus *w = r->workers[i];
      wf[i].cores = w->worker
                        ? stk__worker_usable_cores(w->worker->cpu_cores, w->worker->cores)
                        : 0;
      wf[i].per_cpu_s = w->stats ? w->stats->batches_per_cpu_s : 0;
      wf[i].busy = w->stats ? w->stats->busy_fraction : 0;
    }
    for (size_t i = 0; i < nr; i++) {
      const Stoker__V1__RankStatus *k = r->ranks[i];
      if (!k->stats || k->last_report_ms_ago > 30000) continue;
      rf[n].stall = k->stats->stall_fraction;
      rf[n].step_ms = k->stats->step_ms;
      rf[n].batches_per_s = k->stats->batches_per_s;
      n++;
    }
    stk__job_verdict(wf, (uint32_t)nw, rf, n, v);
  } else {
    stk__job_verdict(NULL, 0, NULL, 0, v);
  }
  free(wf), free(rf);
  stk__verdict_text(v, text, len);
}

/* The table's additions: bad samples per worker, the ranks' figures, the
 * verdict. Network text escaped. */
/* Files of the dataset that are not samples, per worker (ImageFolder:
 * found when the worker opened its dataset). Network text escaped. */
static void status_print_skipped(const Stoker__V1__StatusResponse *r) {
  int any = 0;
  for (size_t i = 0; i < r->n_workers; i++) {
    const Stoker__V1__WorkerStats *s = r->workers[i]->stats;
    if (!s || !s->files_skipped) continue;
    char addr[STK_ESCAPED_ID], e[1100];
    if (!any)
      printf("\nskipped files (not samples: other extensions or formats, links)\n");
    any = 1;
    printf("  %s: %" PRIu64 "\n",
           stk__escape(addr, sizeof(addr),
                       r->workers[i]->worker ? r->workers[i]->worker->address : "?"),
           s->files_skipped);
    for (size_t k = 0; k < s->n_skipped_files; k++)
      printf("    %s\n", stk__escape(e, sizeof(e), s->skipped_files[k]));
    if (s->files_skipped > s->n_skipped_files) printf("    ...\n");
  }
}

static void status_print_more(const Stoker__V1__StatusResponse *r) {
  status_print_skipped(r);
  int any_bad = 0;
  for (size_t i = 0; i < r->n_workers; i++) {
    const Stoker__V1__WorkerStats *s = r->workers[i]->stats;
    if (!s) continue;
    uint64_t total = 0;
    for (size_t k = 0; k < s->n_bad_samples; k++) total += s->bad_samples[k]->count;
    if (!total) continue;
    char addr[STK_ESCAPED_ID], e[700];
    if (!any_bad)
      printf(
          "\nbad samples (each counted once per worker; user_code: a python or plugin op "
          "failed on it, the others: the file)\n");
    any_bad = 1;
    printf("  %s: %" PRIu64 " (",
           stk__escape(addr, sizeof(addr),
                       r->workers[i]->worker ? r->workers[i]->worker->address : "?"),
           total);
    int first = 1;
    for (size_t k = 0; k < s->n_bad_samples; k++) {
      if (!s->bad_samples[k]->count) continue;
      printf("%s%s %" PRIu64, first ? "" : ", ",
             stk__escape(e, 64, s->bad_samples[k]->reason), s->bad_samples[k]->count);
      first = 0;
    }
    printf(")\n");
    for (size_t k = 0; k < s->n_bad_recent; k++)
      printf("    %s\n", stk__escape(e, sizeof(e), s->bad_recent[k]));
  }
  if (r->n_ranks) {
    printf("\n%-6s %8s %8s %10s %10s %8s %9s %11s %13s %10s\n", "RANK", "STALL", "STEP",
           "BATCH/S", "BATCHES", "WORKERS", "RECV-CPU", "USER+SYS", "HOST-SHARE",
           "REPORTED");
    for (size_t i = 0; i < r->n_ranks; i++) {
      const Stoker__V1__RankStatus *k = r->ranks[i];
      const Stoker__V1__ClientStats *c = k->stats;
      char ago[32];
      snprintf(ago, sizeof(ago), "%.1fs ago", (double)k->last_report_ms_ago / 1000.0);
      /* Ranks report every few seconds: one silent for 30 s has stopped
       * (its rate is what it last said, not what it does now). */
      /* STEP: its loop time per batch outside next(); RECV-CPU: its
       * receiving cost, CPU seconds per GB ("-" until reported) */
      /* USER+SYS: RECV-CPU split; HOST-SHARE: the receive path's share
       * of the cores the rank's process may use (quota-aware), and them */
      char step[16] = "-", recv[16] = "-", split[24] = "-", share[32] = "-";
      if (c && c->step_ms > 0) snprintf(step, sizeof(step), "%.1fms", c->step_ms);
      if (c && c->recv_cpu_s_per_gb > 0)
        snprintf(recv, sizeof(recv), "%.2fs/GB", c->recv_cpu_s_per_gb);
      if (c && c->recv_cpu_user_s_per_gb + c->recv_cpu_sys_s_per_gb > 0)
        snprintf(split, sizeof(split), "%.2f+%.2f", c->recv_cpu_user_s_per_gb,
                 c->recv_cpu_sys_s_per_gb);
      if (c && c->host_cores > 0)
        snprintf(share, sizeof(share), "%.0f%% of %.2g", 100 * c->recv_host_share,
                 c->host_cores);
      printf("%-6u %7.1f%% %8s %10.1f %10" PRIu64 " %8u %9s %11s %13s %10s%s\n", k->rank,
             c ? 100 * c->stall_fraction : 0.0, step, c ? c->batches_per_s : 0.0,
             c ? c->batches : 0, c ? c->workers_alive : 0, recv, split, share, ago,
             k->last_report_ms_ago > 30000 ? "  stopped reporting" : "");
    }
  }
  stk__verdict v;
  char text[600];
  status_verdict(r, &v, text, sizeof(text));
  printf("\nverdict          %s\n", text);
  purchase pu;
  status_purchase(r, &pu);
  char e_pu[1700];
  printf("purchase         %s\n", stk__escape(e_pu, sizeof(e_pu), pu.text));
}

/* A JSON string: the text escaped to printable ASCII (stk__escape), then
 * quote and backslash escaped as JSON asks. */
static void json_str(const char *s) {
  char e[2600];
  stk__escape(e, sizeof(e), s ? s : "");
  putchar('"');
  for (const char *p = e; *p; p++) {
    if (*p == '"' || *p == '\\') putchar('\\');
    putchar(*p);
  }
  putchar('"');
}

static void json_num(double v) {
  if (v != v || v > 1e300 || v < -1e300) v = 0; /* JSON has no NaN/Inf */
  printf("%.6g", v);
}

static void json_u32s(const uint32_t *v, size_t n) {
  putchar('[');
  for (size_t i = 0; i < n; i++) printf("%s%u", i ? ", " : "", v[i]);
  putchar(']');
}

/* stoker status --json: one object, keys documented in docs/operations.md. */
static void status_print_json(const Stoker__V1__StatusResponse *r, const char *canon) {
  static const char *const keys[] = {"name",       "source", "dataset", "batch_size",
                                     "world_size", "epochs", "pipeline"};
  printf("{\"coordinator\": ");
  json_str(opt.coordinator);
  printf(", \"job\": {\"hash\": \"%016" PRIx64 "\"", r->job ? r->job->hash : 0);
  for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
    char v[600];
    stk_job_text_get(canon, keys[i], v, sizeof(v));
    printf(", \"%s\": ", keys[i]);
    json_str(v);
  }
  printf("}, \"accel_type\": ");
  json_str(r->accel_type);
  printf(", \"accel_hosts\": %u, \"data_type\": ", r->accel_hosts);
  json_str(r->data_type);
  printf(", \"state\": ");
  json_str(r->state);
  printf(", \"uptime_s\": ");
  json_num((double)r->uptime_ms / 1000.0);
  printf(", \"end_reason\": ");
  json_str(r->end_reason);
  printf(", \"worker_failures\": [");
  for (size_t k = 0; k < r->n_worker_failures; k++) {
    if (k) printf(", ");
    json_str(r->worker_failures[k]);
  }
  printf("]");
  printf(", \"dataset_size\": %" PRIu64 ", \"ranks_joined\": ", r->dataset_size);
  json_u32s(r->joined_ranks, r->n_joined_ranks);
  printf(", \"ranks_finished\": ");
  json_u32s(r->finished_ranks, r->n_finished_ranks);
  printf(", \"workers\": [");
  for (size_t i = 0; i < r->n_workers; i++) {
    const Stoker__V1__WorkerStatus *w = r->workers[i];
    const Stoker__V1__WorkerStats *s = w->stats;
    Stoker__V1__WorkerStats zero = STOKER__V1__WORKER_STATS__INIT;
    if (!s) s = &zero;
    printf("%s{\"address\": ", i ? ", " : "");
    json_str(w->worker ? w->worker->address : "");
    printf(", \"worker_id\": ");
    json_str(w->worker ? w->worker->worker_id : "");
    printf(", \"instance_type\": ");
    json_str(w->worker && w->worker->instance_type ? w->worker->instance_type : "");
    printf(", \"cores\": %u, \"cpu_cores\": ", w->worker ? w->worker->cores : 0);
    json_num(w->worker ? w->worker->cpu_cores : 0);
    printf(", \"cpu_seconds\": ");
    json_num(s->cpu_seconds);
    printf(", \"batches_per_cpu_s\": ");
    json_num(s->batches_per_cpu_s);
    printf(", \"streams\": %u, \"queued\": %u, \"busy_fraction\": ", s->active_streams,
           s->queued_requests);
    json_num(s->busy_fraction);
    printf(", \"batches_per_s\": ");
    json_num(s->batches_per_s);
    printf(", \"batches_built\": %" PRIu64 ", \"bytes_sent\": %" PRIu64
           ", \"samples_substituted\": %" PRIu64
           ", \"free_buffers\": %u, \"buffers\": %u, \"last_heartbeat_s\": ",
           s->batches_built, s->bytes_sent, s->samples_substituted, s->free_buffers,
           s->nbuffers);
    json_num((double)w->last_heartbeat_ms_ago / 1000.0);
    printf(", \"suspect\": %s", w->suspect ? "true" : "false");
    printf(", \"bad_samples\": {");
    for (size_t k = 0; k < s->n_bad_samples; k++) {
      printf("%s", k ? ", " : "");
      json_str(s->bad_samples[k]->reason);
      printf(": %" PRIu64, s->bad_samples[k]->count);
    }
    printf("}, \"bad_recent\": [");
    for (size_t k = 0; k < s->n_bad_recent; k++) {
      printf("%s", k ? ", " : "");
      json_str(s->bad_recent[k]);
    }
    printf("], \"files_skipped\": %" PRIu64 ", \"skipped_files\": [", s->files_skipped);
    for (size_t k = 0; k < s->n_skipped_files; k++) {
      printf("%s", k ? ", " : "");
      json_str(s->skipped_files[k]);
    }
    printf("]}");
  }
  printf("], \"ranks\": [");
  for (size_t i = 0; i < r->n_ranks; i++) {
    const Stoker__V1__RankStatus *k = r->ranks[i];
    const Stoker__V1__ClientStats *c = k->stats;
    printf("%s{\"rank\": %u, \"stall_fraction\": ", i ? ", " : "", k->rank);
    json_num(c ? c->stall_fraction : 0);
    printf(", \"batches_per_s\": ");
    json_num(c ? c->batches_per_s : 0);
    printf(", \"step_ms\": ");
    json_num(c ? c->step_ms : 0);
    printf(", \"recv_cpu_s\": ");
    json_num(c ? c->recv_cpu_s : 0);
    printf(", \"recv_cpu_s_per_gb\": ");
    json_num(c ? c->recv_cpu_s_per_gb : 0);
    printf(", \"recv_cpu_user_s\": ");
    json_num(c ? c->recv_cpu_user_s : 0);
    printf(", \"recv_cpu_sys_s\": ");
    json_num(c ? c->recv_cpu_sys_s : 0);
    printf(", \"recv_cpu_user_s_per_gb\": ");
    json_num(c ? c->recv_cpu_user_s_per_gb : 0);
    printf(", \"recv_cpu_sys_s_per_gb\": ");
    json_num(c ? c->recv_cpu_sys_s_per_gb : 0);
    printf(", \"recv_host_share\": ");
    json_num(c ? c->recv_host_share : 0);
    printf(", \"host_cores\": ");
    json_num(c ? c->host_cores : 0);
    printf(", \"batches\": %" PRIu64 ", \"workers_alive\": %u, \"last_report_s\": ",
           c ? c->batches : 0, c ? c->workers_alive : 0);
    json_num((double)k->last_report_ms_ago / 1000.0);
    printf("}");
  }
  stk__verdict v;
  char text[600];
  status_verdict(r, &v, text, sizeof(text));
  /* workers_more: whole workers of the current mean size (input-bound) */
  double more = v.kind == STK_VERDICT_INPUT_BOUND && v.cores_more > 0 && v.workers
                    ? ceil(v.workers_needed - 1e-9) - (double)v.workers
                    : 0;
  printf("], \"verdict\": {\"kind\": \"%s\", \"workers\": %zu, \"workers_needed\": ",
         stk__verdict_name(v.kind), r->n_workers);
  json_num(v.kind == STK_VERDICT_INPUT_BOUND ? v.workers_needed : 0);
  printf(", \"workers_more\": %u, \"workers_spare\": %u, \"max_stall_fraction\": ",
         more > 0 ? (uint32_t)more : 0, v.workers_spare);
  json_num(v.max_stall);
  printf(", \"step_ms\": ");
  json_num(v.step_ms);
  printf(", \"demand_batches_per_s\": ");
  json_num(v.demand_bps);
  printf(", \"worker_cores\": ");
  json_num(v.cores);
  printf(", \"cores_needed\": ");
  json_num(v.kind == STK_VERDICT_INPUT_BOUND ? v.cores_needed : 0);
  printf(", \"cores_more\": ");
  json_num(v.kind == STK_VERDICT_INPUT_BOUND ? v.cores_more : 0);
  printf(", \"capacity_batches_per_s\": ");
  json_num(v.capacity_bps);
  printf(", \"batches_per_cpu_s\": ");
  json_num(v.per_cpu_s);
  printf(", \"missing\": ");
  json_str(v.missing);
  printf(", \"text\": ");
  json_str(text);
  purchase pu;
  status_purchase(r, &pu);
  printf("}, \"purchase\": {\"priced\": %s, \"now\": ", pu.ok ? "true" : "false");
  json_str(pu.now);
  printf(", \"cheapest\": ");
  json_str(pu.best);
  printf(", \"now_step_ms\": ");
  json_num(pu.now_ms);
  printf(", \"cheapest_step_ms\": ");
  json_num(pu.best_ms);
  printf(", \"usd_per_step_change\": ");
  json_num(pu.change);
  printf(", \"text\": ");
  json_str(pu.text);
  printf("}}\n");
}

static int cmd_status(int argc, char **argv) {
  int pr = stk__options_parse(
      status_options, NSTATUS, argc, argv, "stoker status",
      "Prints the job, its state, the live workers and the ranks, the verdict (input- "
      "or\n"
      "compute-bound) and the purchase: the job's shape priced with the cost model\n"
      "(what to keep, add or remove), once the coordinator knows the fleet's instance\n"
      "types (stoker-coordinator --accel-type, stoker-worker --instance-type).",
      status_exit_codes);
  if (pr != OPTS_RUN) {
    stk__options_free(status_options, NSTATUS);
    return pr == OPTS_EXIT_OK ? 0 : 2;
  }
  for (size_t i = 0; i < opt.rates.n; i++) {
    const char *r = opt.rates.v[i], *eq = strchr(r, '=');
    char *end = NULL;
    double x = eq ? strtod(eq + 1, &end) : 0;
    if (!eq || eq == r || end == eq + 1 || *end || !(x > 0) || !isfinite(x)) {
      char e[200];
      fprintf(stderr,
              "stoker status: --rate %s: want TYPE=N, N images per CPU-second > 0\n",
              stk__escape(e, sizeof(e), r));
      stk__options_free(status_options, NSTATUS);
      return 2;
    }
  }
  if (cli_token(argc, argv)) {
    stk__options_free(status_options, NSTATUS);
    return 2;
  }
  int rc = 1;
  Stoker__V1__StatusRequest q = STOKER__V1__STATUS_REQUEST__INIT;
  Stoker__V1__StatusResponse *r = NULL;
  if (cli_unary("stoker status", "/stoker.v1.Coordinator/Status", &q.base,
                &stoker__v1__status_response__descriptor, (ProtobufCMessage **)&r))
    goto out;
  const char *canon = r->job && r->job->canonical ? r->job->canonical : "";
  if (opt.json) {
    status_print_json(r, canon);
    goto done;
  }
  char name[128], source[64], dataset[600], bs[32], ws[32], epochs[32], pipeline[1024];
  stk_job_text_get(canon, "name", name, sizeof(name));
  stk_job_text_get(canon, "source", source, sizeof(source));
  stk_job_text_get(canon, "dataset", dataset, sizeof(dataset));
  stk_job_text_get(canon, "batch_size", bs, sizeof(bs));
  stk_job_text_get(canon, "world_size", ws, sizeof(ws));
  stk_job_text_get(canon, "epochs", epochs, sizeof(epochs));
  stk_job_text_get(canon, "pipeline", pipeline, sizeof(pipeline));
  uint32_t world = (uint32_t)strtoul(ws, NULL, 10);
  /* Everything below came from the network: escaped (stk__escape), so a
   * hostile coordinator or worker cannot send terminal control sequences
   * or forge lines of this output. */
  char e_name[200], e_source[100], e_dataset[700], e_bs[64], e_ws[64], e_epochs[64],
      e_pipeline[1100], e_state[100];
  stk__escape(e_name, sizeof(e_name), name);
  stk__escape(e_source, sizeof(e_source), source);
  stk__escape(e_dataset, sizeof(e_dataset), dataset);
  stk__escape(e_bs, sizeof(e_bs), bs);
  stk__escape(e_ws, sizeof(e_ws), ws);
  stk__escape(e_epochs, sizeof(e_epochs), epochs);
  stk__escape(e_pipeline, sizeof(e_pipeline), pipeline);
  stk__escape(e_state, sizeof(e_state), r->state ? r->state : "?");
  printf("coordinator      %s\n", opt.coordinator);
  printf("job              %s  (hash %016" PRIx64 ")\n", *name ? e_name : "(unnamed)",
         r->job ? r->job->hash : 0);
  printf("dataset          %s %s, %" PRIu64 " samples%s\n", e_source, e_dataset,
         r->dataset_size, r->dataset_size ? "" : " (not known yet)");
  /* The whole pipeline (an op chain can be long), on a line of its own. */
  printf("pipeline         %s\n", e_pipeline);
  printf("batches          batch_size %s, world_size %s, epochs %s\n", e_bs, e_ws,
         e_epochs);
  printf("state            %s  (up %.1f s)\n", e_state, (double)r->uptime_ms / 1000.0);
  if (r->end_reason && *r->end_reason) {
    char e_reason[600];
    printf("ending           %s\n",
           stk__escape(e_reason, sizeof(e_reason), r->end_reason));
  }
  for (size_t k = 0; k < r->n_worker_failures; k++) {
    char e_fail[1200];
    printf("worker failed    %s\n",
           stk__escape(e_fail, sizeof(e_fail), r->worker_failures[k]));
  }
  if (r->accel_type && *r->accel_type) {
    char e_acc[200], e_data[200];
    printf("hosts            training: %u x %s", r->accel_hosts,
           stk__escape(e_acc, sizeof(e_acc), r->accel_type));
    if (r->data_type && *r->data_type)
      printf("; data hosts priced as %s",
             stk__escape(e_data, sizeof(e_data), r->data_type));
    printf("\n");
  }
  print_ranks("ranks joined", r->joined_ranks, r->n_joined_ranks, world);
  print_ranks("ranks finished", r->finished_ranks, r->n_finished_ranks, world);
  printf("workers          %zu live\n\n", r->n_workers);
  if (r->n_workers) {
    printf("%-24s %5s %7s %8s %7s %10s %10s %6s %6s %9s\n", "ADDRESS", "CORES", "STREAMS",
           "QUEUED", "BUSY", "BATCHES", "SENT", "B/S", "SUBST", "HEARTBEAT");
    for (size_t i = 0; i < r->n_workers; i++) {
      const Stoker__V1__WorkerStatus *w = r->workers[i];
      const Stoker__V1__WorkerStats *s = w->stats;
      char sent[32], hb[32], addr[STK_ESCAPED_ID];
      human_bytes(s ? s->bytes_sent : 0, sent, sizeof(sent));
      snprintf(hb, sizeof(hb), "%.1fs ago", (double)w->last_heartbeat_ms_ago / 1000.0);
      /* CORES: the CPU the worker may use (its quota or affinity), else
       * (a worker that does not tell) its builder threads */
      char cores[16];
      double cc = w->worker ? w->worker->cpu_cores : 0;
      if (cc > 0) snprintf(cores, sizeof(cores), "%.2f", cc);
      else snprintf(cores, sizeof(cores), "%u", w->worker ? w->worker->cores : 0);
      printf("%-24s %5s %7u %8u %6.0f%% %10" PRIu64 " %10s %6.1f %6" PRIu64 " %9s\n",
             stk__escape(addr, sizeof(addr), w->worker ? w->worker->address : "?"), cores,
             s ? s->active_streams : 0, s ? s->queued_requests : 0,
             s ? s->busy_fraction * 100 : 0.0, s ? s->batches_built : 0, sent,
             s ? s->batches_per_s : 0.0, s ? s->samples_substituted : 0, hb);
      if (w->suspect) printf("%-24s suspect: heartbeats late, still listed\n", "");
    }
    /* TYPE: the instance type the worker named (--instance-type) */
    printf("\n%-24s %-20s %s\n", "ADDRESS", "TYPE", "WORKER ID");
    for (size_t i = 0; i < r->n_workers; i++) {
      const Stoker__V1__WorkerInfo *wi = r->workers[i]->worker;
      char addr[STK_ESCAPED_ID], id[STK_ESCAPED_ID], ty[200];
      const char *t =
          wi && wi->instance_type && *wi->instance_type ? wi->instance_type : "-";
      printf("%-24s %-20s %s\n", stk__escape(addr, sizeof(addr), wi ? wi->address : "?"),
             stk__escape(ty, sizeof(ty), t),
             stk__escape(id, sizeof(id), wi ? wi->worker_id : "?"));
    }
  }
  status_print_more(r);
done:
  protobuf_c_message_free_unpacked(&r->base, NULL);
  rc = 0;
out:
  stk__options_free(status_options, NSTATUS);
  return rc;
}

static int cmd_abort(int argc, char **argv) {
  int pr =
      stk__options_parse(abort_options, NABORT, argc, argv, "stoker abort",
                         "Ends the job as failed: workers exit with their abort code, "
                         "every rank gets an error, the coordinator exits 4.",
                         abort_exit_codes);
  if (pr != OPTS_RUN) {
    stk__options_free(abort_options, NABORT);
    return pr == OPTS_EXIT_OK ? 0 : 2;
  }
  if (cli_token(argc, argv)) {
    stk__options_free(abort_options, NABORT);
    return 2;
  }
  int rc = 1;
  if (strlen(opt.reason) > 255) {
    fprintf(stderr, "stoker abort: --reason is longer than 255 bytes\n");
    rc = 2;
    goto out;
  }
  Stoker__V1__FinishRequest q = STOKER__V1__FINISH_REQUEST__INIT;
  q.rank = (uint32_t)opt.rank;
  q.abort_job = 1;
  q.reason = opt.reason;
  Stoker__V1__FinishResponse *r = NULL;
  if (cli_unary("stoker abort", "/stoker.v1.Coordinator/Finish", &q.base,
                &stoker__v1__finish_response__descriptor, (ProtobufCMessage **)&r))
    goto out;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  rc = 0;
out:
  stk__options_free(abort_options, NABORT);
  return rc;
}

/* The next rank range of a list "0,1,4-7" at *p: [*lo, *hi], *p moved past
 * it. 0, or -1 when the text is not such a list. */
static int finish_next_range(const char **p, unsigned long *lo, unsigned long *hi) {
  char *end;
  if (**p < '0' || **p > '9') return -1;
  *lo = *hi = strtoul(*p, &end, 10);
  if (*end == '-') {
    if (end[1] < '0' || end[1] > '9') return -1;
    *hi = strtoul(end + 1, &end, 10);
  }
  if (*lo > 0xfffffffeUL || *hi > 0xfffffffeUL || *hi < *lo || *hi - *lo > 1000000 ||
      (*end && *end != ','))
    return -1;
  *p = *end ? end + 1 : end;
  return 0;
}

/* stoker finish: what a rank's own stk_client_finish does, for ranks whose
 * process ended without it (stoker-launch runs it for the ranks of a host
 * whose training command exited 0, e.g. a script that stopped early). */
static int cmd_finish(int argc, char **argv) {
  int pr = stk__options_parse(finish_options, NFINISH, argc, argv, "stoker finish",
                              "Tells the coordinator that these ranks are done, as each "
                              "rank's own finish would; once every rank of the job has "
                              "finished, the job ends and every worker exits 0.",
                              finish_exit_codes);
  if (pr != OPTS_RUN) {
    stk__options_free(finish_options, NFINISH);
    return pr == OPTS_EXIT_OK ? 0 : 2;
  }
  int rc = 2;
  unsigned long lo, hi;
  const char *p = opt.ranks;
  if (!*p) {
    fprintf(stderr, "stoker finish: --ranks is required (e.g. --ranks 0,1,4-7)\n");
    goto out;
  }
  while (*p)
    if (finish_next_range(&p, &lo, &hi)) {
      fprintf(stderr, "stoker finish: --ranks '%s' is not a list of ranks like 0,1,4-7\n",
              opt.ranks);
      goto out;
    }
  if (cli_token(argc, argv)) goto out;
  rc = 0;
  for (p = opt.ranks; *p && rc == 0;) {
    finish_next_range(&p, &lo, &hi);
    for (unsigned long r = lo; r <= hi; r++) {
      Stoker__V1__FinishRequest q = STOKER__V1__FINISH_REQUEST__INIT;
      q.rank = (uint32_t)r;
      Stoker__V1__FinishResponse *resp = NULL;
      if (cli_unary("stoker finish", "/stoker.v1.Coordinator/Finish", &q.base,
                    &stoker__v1__finish_response__descriptor,
                    (ProtobufCMessage **)&resp)) {
        rc = 1;
        break;
      }
      printf("rank %lu finished (%u/%u)\n", r, resp->ranks_finished, resp->world_size);
      protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
  }
out:
  stk__options_free(finish_options, NFINISH);
  return rc;
}

/* One WatchWorkers stream until its last list: WAIT_DONE or WAIT_FAILED
 * (the reason printed), WAIT_UNREACHABLE when the coordinator refused the
 * call for good (stk__rpc_status: wrong token, not a coordinator; retrying
 * cannot help), or -1 when the stream broke or never opened. */
static int wait_watch(stk__rpc_channel *ch, int *connected) {
  stk__rpc_stream *s = NULL;
  int rc = -1;
  if (stk__rpc_stream_open(ch, "/stoker.v1.Coordinator/WatchWorkers", 0, &s)) return -1;
  Stoker__V1__WatchRequest req = STOKER__V1__WATCH_REQUEST__INIT;
  if (stk__rpc_stream_send_msg(s, &req.base) || stk__rpc_stream_close_send(s)) goto out;
  for (;;) {
    grpc_byte_buffer *bb = NULL;
    int r = stk__rpc_stream_recv(s, &bb, 1000);
    if (r == -2) continue; /* no change yet; the coordinator is up */
    if (r == 0) {          /* ended with a status: a refusal is final */
      char det[256];
      int final, code = stk__rpc_stream_status(s, 1000, det, sizeof(det));
      stk__rpc_status(code, &final);
      if (final) {
        char edet[600];
        fprintf(stderr, "stoker wait: %s: gRPC status %d%s%s\n", opt.coordinator, code,
                *det ? ": " : "", stk__escape(edet, sizeof(edet), det));
        rc = WAIT_UNREACHABLE;
      }
      break;
    }
    if (r != 1) break;
    Stoker__V1__WorkerList *wl = (Stoker__V1__WorkerList *)stk__rpc_unpack(
        &stoker__v1__worker_list__descriptor, bb, STK_MAX_LIST_MSG);
    grpc_byte_buffer_destroy(bb);
    if (!wl) break;
    *connected = 1;
    int end = wl->shutting_down, failed = wl->failed;
    if (failed) {
      char esc[600]; /* the reason came from the network: escaped */
      printf("failed: %s\n", stk__escape(esc, sizeof(esc), wl->reason ? wl->reason : ""));
    } else if (end) {
      printf("done\n");
    }
    protobuf_c_message_free_unpacked(&wl->base, NULL);
    if (end) {
      rc = failed ? WAIT_FAILED : WAIT_DONE;
      break;
    }
  }
out:
  stk__rpc_stream_destroy(s);
  return rc;
}

static int cmd_wait(int argc, char **argv) {
  int pr = stk__options_parse(
      wait_options, NWAIT, argc, argv, "stoker wait",
      "Blocks until the job ends and says how (prints 'done' or 'failed: REASON').",
      wait_exit_codes);
  if (pr != OPTS_RUN) {
    stk__options_free(wait_options, NWAIT);
    return pr == OPTS_EXIT_OK ? 0 : WAIT_USAGE;
  }
  if (cli_token(argc, argv)) {
    stk__options_free(wait_options, NWAIT);
    return WAIT_USAGE;
  }
  int rc = WAIT_UNREACHABLE;
  stk__rpc_channel *ch = NULL;
  if (open_channel("stoker wait", STK_MAX_LIST_MSG, &ch)) {
    goto out;
  }
  /* Watch the worker list: its last message says whether the job failed.
   * A broken or refused stream is retried every 200 ms; the clock of
   * --timeout-s restarts whenever a stream got through. */
  int64_t lost_since = stk__now_ms();
  for (;;) {
    int connected = 0;
    int r = wait_watch(ch, &connected);
    if (r >= 0) {
      rc = r;
      break;
    }
    int64_t now = stk__now_ms();
    if (connected) lost_since = now;
    if (now - lost_since > opt.timeout_s * 1000) {
      fprintf(stderr, "stoker wait: %s unreachable for %lld s\n", opt.coordinator,
              opt.timeout_s);
      break;
    }
    stk__sleep_ms(200);
  }
out:
  stk__rpc_channel_close(ch);
  stk__options_free(wait_options, NWAIT);
  return rc;
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: stoker <command> [options]\n\n"
      "commands:\n"
      "  status   show a job: state, workers and their stats, bad samples, ranks\n"
      "           and their stall, the verdict (input- or compute-bound), what\n"
      "           to buy (the purchase line)\n"
      "           (stoker status --coordinator host:port [--json]; --help for more)\n"
      "  abort    end the job as failed (stoker abort --coordinator host:port\n"
      "           [--rank R] [--reason TEXT])\n"
      "  finish   count ranks as done, as their own finish would (stoker finish\n"
      "           --coordinator host:port --ranks 0,1,4-7)\n"
      "  wait     block until the job ends: 0 done, 4 failed, 1 unreachable\n"
      "           (stoker wait --coordinator host:port [--timeout-s S])\n"
      "  plan     what to buy: step time and $/step of each shape (homogeneous,\n"
      "           + N data hosts), the cheapest marked, offline from a job file\n"
      "           and measured figures (stoker plan --job FILE --accel TYPE\n"
      "           --step-ms MS --stall-pct P --images-per-cpu-s N), or live from a\n"
      "           running job (stoker plan --coordinator host:port); --help for more\n\n"
      "every command (plan with --coordinator) takes --token-file FILE (the bearer\n"
      "token, first line; else $STOKER_TOKEN, else the file $STOKER_TOKEN_FILE\n"
      "names); --token TOKEN works too but shows the token to every local user (ps)\n\n"
      "exit codes: 0 ok, 1 the command failed, 2 usage error\n");
}

int main(int argc, char **argv) {
  stk__log_init("stoker");
  stk__log_set_level(STK_LOG_WARN);
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
      !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  static const struct {
    const char *name;
    int (*fn)(int, char **);
  } commands[] = {{"status", cmd_status},
                  {"abort", cmd_abort},
                  {"finish", cmd_finish},
                  {"wait", cmd_wait},
                  {"plan", stk__cli_plan}};
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    if (!strcmp(argv[1], commands[i].name)) {
      int rc = commands[i].fn(argc - 1, argv + 1);
      stk__tls_free(opt.tls_loaded);
      return rc;
    }
  fprintf(stderr, "stoker: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
