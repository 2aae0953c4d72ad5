/* stoker_cli.c - the `stoker` command-line tool. Subcommands:
 *   stoker status --coordinator host:port   render the job's Status RPC
 *   stoker abort  --coordinator host:port   end the job as failed
 *   stoker wait   --coordinator host:port   block until the job ends
 * Others may add subcommands to the table in main. Owns nothing beyond one
 * call; prints to stdout, errors to stderr.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "options.h"
#include "rpc.h"
#include "stoker.pb-c.h"
#include "stoker/core.h"

static struct {
  char *coordinator, *token, *log_level, *reason;
  long long timeout_ms, rank, timeout_s;
} opt;

static stk__option status_options[] = {
    {"coordinator", OPT_STR, "127.0.0.1:7070", stk__opt_hostport,
     "host:port of stoker-coordinator", &opt.coordinator, 0, 0},
    {"token", OPT_STR, "", NULL, "bearer token", &opt.token, 0, 0},
    {"timeout-ms", OPT_INT, "5000", NULL, "give up after this long", &opt.timeout_ms, 1,
     3600000},
    {"log-level", OPT_STR, "warn", stk__opt_loglevel, "debug | info | warn | error",
     &opt.log_level, 0, 0},
};
#define NSTATUS (sizeof(status_options) / sizeof(status_options[0]))

static const char status_exit_codes[] =
    "  0  status printed\n  1  the coordinator could not be reached or answered an "
    "error\n"
    "  2  usage error\n";

static stk__option abort_options[] = {
    {"coordinator", OPT_STR, "127.0.0.1:7070", stk__opt_hostport,
     "host:port of stoker-coordinator", &opt.coordinator, 0, 0},
    {"rank", OPT_INT, "0", NULL, "the rank that aborts (any rank < world_size)",
     &opt.rank, 0, 0xffffffffLL},
    {"reason", OPT_STR, "aborted with stoker abort", NULL,
     "why (logged by the coordinator and shown to every rank; at most 255 bytes)",
     &opt.reason, 0, 0},
    {"token", OPT_STR, "", NULL, "bearer token", &opt.token, 0, 0},
    {"timeout-ms", OPT_INT, "5000", NULL, "give up after this long", &opt.timeout_ms, 1,
     3600000},
    {"log-level", OPT_STR, "warn", stk__opt_loglevel, "debug | info | warn | error",
     &opt.log_level, 0, 0},
};
#define NABORT (sizeof(abort_options) / sizeof(abort_options[0]))

static const char abort_exit_codes[] =
    "  0  the coordinator took the abort (or the job was already ending: it logs that)\n"
    "  1  the coordinator could not be reached or answered an error\n"
    "  2  usage error\n";

static stk__option wait_options[] = {
    {"coordinator", OPT_STR, "127.0.0.1:7070", stk__opt_hostport,
     "host:port of stoker-coordinator", &opt.coordinator, 0, 0},
    {"timeout-s", OPT_INT, "60", NULL,
     "give up (exit 1) once the coordinator was unreachable this long in a row",
     &opt.timeout_s, 1, 86400 * 30},
    {"token", OPT_STR, "", NULL, "bearer token", &opt.token, 0, 0},
    {"log-level", OPT_STR, "warn", stk__opt_loglevel, "debug | info | warn | error",
     &opt.log_level, 0, 0},
};
#define NWAIT (sizeof(wait_options) / sizeof(wait_options[0]))

enum { WAIT_DONE = 0, WAIT_UNREACHABLE = 1, WAIT_USAGE = 2, WAIT_FAILED = 4 };

static const char wait_exit_codes[] =
    "  0  the job ended normally (every rank finished, rank 0 ended it, or the\n"
    "     coordinator was stopped with a signal)\n"
    "  1  the coordinator was unreachable for longer than --timeout-s (never up, or\n"
    "     gone before this command saw how the job ended), or refused the call\n"
    "     (e.g. a wrong --token)\n"
    "  2  usage error\n"
    "  4  the job failed: it was aborted (the coordinator's abort code)\n";

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

static int cmd_status(int argc, char **argv) {
  int pr = stk__options_parse(
      status_options, NSTATUS, argc, argv, "stoker status",
      "Prints the job, its state, the live workers and the ranks.", status_exit_codes);
  if (pr != OPTS_RUN) {
    stk__options_free(status_options, NSTATUS);
    return pr == OPTS_EXIT_OK ? 0 : 2;
  }
  stk_rpc_channel *ch = NULL;
  int rc = 1;
  if (stk_rpc_channel_open(opt.coordinator, 0, opt.token, &ch)) {
    fprintf(stderr, "stoker status: cannot create a channel\n");
    goto out;
  }
  Stoker__V1__StatusRequest q = STOKER__V1__STATUS_REQUEST__INIT;
  Stoker__V1__StatusResponse *r = NULL;
  char det[512];
  int code =
      stk_rpc_unary(ch, "/stoker.v1.Coordinator/Status", &q.base,
                    &stoker__v1__status_response__descriptor, (ProtobufCMessage **)&r,
                    (int)opt.timeout_ms, det, sizeof(det));
  if (code != GRPC_STATUS_OK) {
    fprintf(stderr, "stoker status: %s: gRPC status %d%s%s\n", opt.coordinator, code,
            *det ? ": " : "", det);
    goto out;
  }
  const char *canon = r->job && r->job->canonical ? r->job->canonical : "";
  char name[128], source[64], dataset[600], bs[32], ws[32], epochs[32], pipeline[32];
  stk_job_text_get(canon, "name", name, sizeof(name));
  stk_job_text_get(canon, "source", source, sizeof(source));
  stk_job_text_get(canon, "dataset", dataset, sizeof(dataset));
  stk_job_text_get(canon, "batch_size", bs, sizeof(bs));
  stk_job_text_get(canon, "world_size", ws, sizeof(ws));
  stk_job_text_get(canon, "epochs", epochs, sizeof(epochs));
  stk_job_text_get(canon, "pipeline", pipeline, sizeof(pipeline));
  uint32_t world = (uint32_t)strtoul(ws, NULL, 10);
  printf("coordinator      %s\n", opt.coordinator);
  printf("job              %s  (hash %016" PRIx64 ")\n", *name ? name : "(unnamed)",
         r->job ? r->job->hash : 0);
  printf("dataset          %s %s, %" PRIu64 " samples%s\n", source, dataset,
         r->dataset_size, r->dataset_size ? "" : " (not known yet)");
  printf("pipeline         %s, batch_size %s, world_size %s, epochs %s\n", pipeline, bs,
         ws, epochs);
  printf("state            %s  (up %.1f s)\n", r->state ? r->state : "?",
         (double)r->uptime_ms / 1000.0);
  if (r->end_reason && *r->end_reason) printf("ending           %s\n", r->end_reason);
  print_ranks("ranks joined", r->joined_ranks, r->n_joined_ranks, world);
  print_ranks("ranks finished", r->finished_ranks, r->n_finished_ranks, world);
  printf("workers          %zu live\n\n", r->n_workers);
  if (r->n_workers) {
    printf("%-24s %5s %7s %8s %7s %10s %10s %6s %6s %9s\n", "ADDRESS", "CORES", "STREAMS",
           "QUEUED", "BUSY", "BATCHES", "SENT", "B/S", "SUBST", "HEARTBEAT");
    for (size_t i = 0; i < r->n_workers; i++) {
      const Stoker__V1__WorkerStatus *w = r->workers[i];
      const Stoker__V1__WorkerStats *s = w->stats;
      char sent[32], hb[32];
      human_bytes(s ? s->bytes_sent : 0, sent, sizeof(sent));
      snprintf(hb, sizeof(hb), "%.1fs ago", (double)w->last_heartbeat_ms_ago / 1000.0);
      printf("%-24s %5u %7u %8u %6.0f%% %10" PRIu64 " %10s %6.1f %6" PRIu64 " %9s\n",
             w->worker && w->worker->address ? w->worker->address : "?",
             w->worker ? w->worker->cores : 0, s ? s->active_streams : 0,
             s ? s->queued_requests : 0, s ? s->busy_fraction * 100 : 0.0,
             s ? s->batches_built : 0, sent, s ? s->batches_per_s : 0.0,
             s ? s->samples_substituted : 0, hb);
    }
    printf("\n%-24s %s\n", "ADDRESS", "WORKER ID");
    for (size_t i = 0; i < r->n_workers; i++) {
      const Stoker__V1__WorkerInfo *wi = r->workers[i]->worker;
      printf("%-24s %s\n", wi && wi->address ? wi->address : "?",
             wi && wi->worker_id ? wi->worker_id : "?");
    }
  }
  protobuf_c_message_free_unpacked(&r->base, NULL);
  rc = 0;
out:
  stk_rpc_channel_close(ch);
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
  int rc = 1;
  stk_rpc_channel *ch = NULL;
  if (strlen(opt.reason) > 255) {
    fprintf(stderr, "stoker abort: --reason is longer than 255 bytes\n");
    rc = 2;
    goto out;
  }
  if (stk_rpc_channel_open(opt.coordinator, 0, opt.token, &ch)) {
    fprintf(stderr, "stoker abort: cannot create a channel\n");
    goto out;
  }
  Stoker__V1__FinishRequest q = STOKER__V1__FINISH_REQUEST__INIT;
  q.rank = (uint32_t)opt.rank;
  q.abort_job = 1;
  q.reason = opt.reason;
  Stoker__V1__FinishResponse *r = NULL;
  char det[512];
  int code =
      stk_rpc_unary(ch, "/stoker.v1.Coordinator/Finish", &q.base,
                    &stoker__v1__finish_response__descriptor, (ProtobufCMessage **)&r,
                    (int)opt.timeout_ms, det, sizeof(det));
  if (code != GRPC_STATUS_OK) {
    fprintf(stderr, "stoker abort: %s: gRPC status %d%s%s\n", opt.coordinator, code,
            *det ? ": " : "", det);
    goto out;
  }
  protobuf_c_message_free_unpacked(&r->base, NULL);
  rc = 0;
out:
  stk_rpc_channel_close(ch);
  stk__options_free(abort_options, NABORT);
  return rc;
}

/* One WatchWorkers stream until its last list: WAIT_DONE or WAIT_FAILED
 * (the reason printed), WAIT_UNREACHABLE when the coordinator refused the
 * call for good (wrong token: retrying cannot help), or -1 when the stream
 * broke or never opened. */
static int wait_watch(stk_rpc_channel *ch, int *connected) {
  stk_rpc_stream *s = NULL;
  int rc = -1;
  if (stk_rpc_stream_open(ch, "/stoker.v1.Coordinator/WatchWorkers", 0, &s)) return -1;
  Stoker__V1__WatchRequest req = STOKER__V1__WATCH_REQUEST__INIT;
  if (stk_rpc_stream_send_msg(s, &req.base) || stk_rpc_stream_close_send(s)) goto out;
  for (;;) {
    grpc_byte_buffer *bb = NULL;
    int r = stk_rpc_stream_recv(s, &bb, 1000);
    if (r == -2) continue; /* no change yet; the coordinator is up */
    if (r == 0) {          /* ended with a status: a refusal is final */
      char det[256];
      int code = stk_rpc_stream_status(s, 1000, det, sizeof(det));
      if (code == GRPC_STATUS_UNAUTHENTICATED || code == GRPC_STATUS_PERMISSION_DENIED ||
          code == GRPC_STATUS_INVALID_ARGUMENT || code == GRPC_STATUS_UNIMPLEMENTED) {
        fprintf(stderr, "stoker wait: %s: gRPC status %d%s%s\n", opt.coordinator, code,
                *det ? ": " : "", det);
        rc = WAIT_UNREACHABLE;
      }
      break;
    }
    if (r != 1) break;
    Stoker__V1__WorkerList *wl = (Stoker__V1__WorkerList *)stk_rpc_unpack(
        &stoker__v1__worker_list__descriptor, bb, 1 << 22);
    grpc_byte_buffer_destroy(bb);
    if (!wl) break;
    *connected = 1;
    int end = wl->shutting_down, failed = wl->failed;
    if (failed) {
      char esc[256];
      size_t o = 0;
      for (const char *p = wl->reason ? wl->reason : ""; *p && o + 1 < sizeof(esc); p++)
        esc[o++] = *p >= 0x20 && *p < 0x7f ? *p : '?';
      esc[o] = 0;
      printf("failed: %s\n", esc);
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
  stk_rpc_stream_destroy(s);
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
  int rc = WAIT_UNREACHABLE;
  stk_rpc_channel *ch = NULL;
  if (stk_rpc_channel_open(opt.coordinator, 0, opt.token, &ch)) {
    fprintf(stderr, "stoker wait: cannot create a channel\n");
    goto out;
  }
  /* Watch the worker list: its last message says whether the job failed.
   * A broken or refused stream is retried every 200 ms; the clock of
   * --timeout-s restarts whenever a stream got through. */
  int64_t lost_since = stk_rpc_now_ms();
  for (;;) {
    int connected = 0;
    int r = wait_watch(ch, &connected);
    if (r >= 0) {
      rc = r;
      break;
    }
    int64_t now = stk_rpc_now_ms();
    if (connected) lost_since = now;
    if (now - lost_since > opt.timeout_s * 1000) {
      fprintf(stderr, "stoker wait: %s unreachable for %lld s\n", opt.coordinator,
              opt.timeout_s);
      break;
    }
    stk__sleep_ms(200);
  }
out:
  stk_rpc_channel_close(ch);
  stk__options_free(wait_options, NWAIT);
  return rc;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: stoker <command> [options]\n\n"
          "commands:\n"
          "  status   show a job: state, workers and their stats, ranks joined/finished\n"
          "           (stoker status --coordinator host:port; --help for its options)\n"
          "  abort    end the job as failed (stoker abort --coordinator host:port\n"
          "           [--rank R] [--reason TEXT])\n"
          "  wait     block until the job ends: 0 done, 4 failed, 1 unreachable\n"
          "           (stoker wait --coordinator host:port [--timeout-s S])\n\n"
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
  } commands[] = {{"status", cmd_status}, {"abort", cmd_abort}, {"wait", cmd_wait}};
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "stoker: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
