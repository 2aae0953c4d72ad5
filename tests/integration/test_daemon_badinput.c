/* test_daemon_badinput.c - a coordinator (synthetic job) and one worker,
 * real processes on 127.0.0.1, fed bad input over the network: a wrong job
 * hash, addresses outside the job, too many outstanding requests, bytes
 * that are not a BatchRequest, bad joins and an unknown method. Each must
 * get the right gRPC status, and after each a fresh stream must still get
 * a valid batch, byte-identical to stk_build_reference.
 *
 * Also renders `stoker status` against the live job.
 *
 * usage: test_daemon_badinput <stoker-coordinator> <stoker-worker> [stoker]
 */
#include <signal.h>

#include "daemon_util.h"

#define STREAM "/stoker.v1.Worker/Stream"

static stk_job_spec spec;
static uint64_t job_hash, steps;

/* A fresh stream still serves a valid batch. */
static void check_still_serving(stk__rpc_channel *w, const char *after) {
  stk__rpc_stream *s = NULL;
  CHECK(stk__rpc_stream_open(w, STREAM, 20000, &s) == 0);
  if (!s) return;
  CHECK(du_send_request(s, job_hash, 0, 1, steps - 1) == 0);
  int rc = du_recv_batch_checked(s, &spec, 0, 1, steps - 1);
  if (rc) fprintf(stderr, "no valid batch after: %s\n", after);
  CHECK(rc == 0);
  CHECK(stk__rpc_stream_close_send(s) == 0);
  char det[256];
  int code = du_stream_end(s, det, sizeof(det));
  if (code) fprintf(stderr, "after %s: status %d %s\n", after, code, det);
  CHECK(code == GRPC_STATUS_OK);
  stk__rpc_stream_destroy(s);
}

/* One request on a new stream; the stream's final status. */
static int one_bad_request(stk__rpc_channel *w, uint64_t hash, uint64_t epoch,
                           uint32_t rank, uint64_t step, char *det, size_t dlen) {
  stk__rpc_stream *s = NULL;
  if (stk__rpc_stream_open(w, STREAM, 20000, &s)) return -1;
  du_send_request(s, hash, epoch, rank, step);
  int code = du_stream_end(s, det, dlen);
  stk__rpc_stream_destroy(s);
  return code;
}

static const unsigned char garbage[] = {0x0f, 0xff, 0xff, 0xff, 0x13, 0x00, 0x42};

/* Raw bytes (not a protobuf message) to any method; its final status. */
static int raw_call(stk__rpc_channel *ch, const char *method, int half_close) {
  stk__rpc_stream *s = NULL;
  if (stk__rpc_stream_open(ch, method, 20000, &s)) return -1;
  grpc_slice sl = grpc_slice_from_copied_buffer((const char *)garbage, sizeof(garbage));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
  grpc_slice_unref(sl);
  CHECK(stk__rpc_stream_send(s, bb) == 0);
  if (half_close) stk__rpc_stream_close_send(s);
  char det[256];
  int code = du_stream_end(s, det, sizeof(det));
  stk__rpc_stream_destroy(s);
  return code;
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  stk_proc coord, worker;
  const char *cargs[] = {"--set",
                         "num_samples=64",
                         "--set",
                         "batch_size=4",
                         "--set",
                         "height=32",
                         "--set",
                         "width=32",
                         "--set",
                         "world_size=2",
                         "--set",
                         "epochs=2",
                         "--set",
                         "seed=7",
                         "--set",
                         "name=badinput",
                         "--idle-timeout-s",
                         "60",
                         NULL};
  int cport = du_start_coordinator(&coord, "coordinator", cargs);
  CHECK(cport > 0);
  if (cport <= 0) return 1;
  const char *wargs[] = {"--threads", "2", "--max-outstanding", "4", "--chunk-bytes",
                         "4096",      NULL};
  int wport = du_start_worker(&worker, "worker", cport, wargs);
  CHECK(wport > 0);
  if (wport <= 0) return 1;
  stk__rpc_channel *c = du_channel(cport), *w = du_channel(wport);
  CHECK(du_wait_workers(c, 1, 10000) == 0);

  /* Joins: a good one gives the job; bad ones get clear errors. */
  char det[512];
  Stoker__V1__JoinResponse *jr = NULL;
  int code = du_join(c, 0, 2, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det));
  CHECK(code == GRPC_STATUS_OK);
  if (code || !jr || !jr->job) {
    fprintf(stderr, "join failed: %d %s\n", code, det);
    proc_dump_log(&coord);
    return 1;
  }
  stk_job_spec_defaults(&spec);
  CHECK(stk_job_spec_parse(&spec, jr->job->canonical, NULL, 0) == STK_OK);
  job_hash = jr->job->hash;
  CHECK(stk_job_spec_hash(&spec) == job_hash);
  CHECK_EQ_U64(jr->n_workers, 1);
  CHECK(jr->n_workers == 1 &&
        !strcmp(jr->workers[0]->address,
                (snprintf(det, sizeof(det), "127.0.0.1:%d", wport), det)));
  protobuf_c_message_free_unpacked(&jr->base, NULL);
  steps = stk_steps_per_epoch(&spec, spec.num_samples);
  CHECK_EQ_U64(steps, 8);

  jr = NULL;
  CHECK(du_join(c, 2, 2, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det)) ==
        GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(det, "rank 2") != NULL);
  CHECK(du_join(c, 0, 3, STK_PROTOCOL_VERSION, 0, &jr, det, sizeof(det)) ==
        GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(det, "world_size") != NULL);
  CHECK(du_join(c, 0, 2, 99, 0, &jr, det, sizeof(det)) ==
        GRPC_STATUS_FAILED_PRECONDITION);
  CHECK(du_join(c, 0, 2, STK_PROTOCOL_VERSION, job_hash ^ 1, &jr, det, sizeof(det)) ==
        GRPC_STATUS_FAILED_PRECONDITION);
  CHECK(strstr(det, "resume") != NULL);
  CHECK(jr == NULL);

  check_still_serving(w, "start");

  /* Wrong job hash. */
  code = one_bad_request(w, job_hash ^ 0x5a5a, 0, 0, 0, det, sizeof(det));
  CHECK(code == GRPC_STATUS_FAILED_PRECONDITION);
  CHECK(strstr(det, "job hash") != NULL);
  check_still_serving(w, "wrong job hash");

  /* Addresses outside the job. */
  code = one_bad_request(w, job_hash, 0, 0, steps, det, sizeof(det));
  CHECK(code == GRPC_STATUS_OUT_OF_RANGE);
  code = one_bad_request(w, job_hash, 2, 0, 0, det, sizeof(det));
  CHECK(code == GRPC_STATUS_OUT_OF_RANGE);
  code = one_bad_request(w, job_hash, 0, 2, 0, det, sizeof(det));
  CHECK(code == GRPC_STATUS_INVALID_ARGUMENT);
  check_still_serving(w, "out-of-range addresses");

  /* Far more than --max-outstanding (4) requests, never reading. */
  stk__rpc_stream *s = NULL;
  CHECK(stk__rpc_stream_open(w, STREAM, 20000, &s) == 0);
  for (int i = 0; i < 2000; i++)
    if (du_send_request(s, job_hash, 0, 0, (uint64_t)i % steps)) break;
  code = du_stream_end(s, det, sizeof(det));
  CHECK(code == GRPC_STATUS_RESOURCE_EXHAUSTED);
  if (code != GRPC_STATUS_RESOURCE_EXHAUSTED)
    fprintf(stderr, "flood: %d %s\n", code, det);
  stk__rpc_stream_destroy(s);
  check_still_serving(w, "too many outstanding requests");

  /* Bytes that are not a BatchRequest (wire type 7 does not exist). */
  CHECK(raw_call(w, STREAM, 0) == GRPC_STATUS_INVALID_ARGUMENT);
  check_still_serving(w, "garbage bytes");

  /* Several batches on one stream, all checked (completion order). */
  s = NULL;
  CHECK(stk__rpc_stream_open(w, STREAM, 20000, &s) == 0);
  CHECK(du_send_request(s, job_hash, 1, 0, 3) == 0);
  CHECK(du_recv_batch_checked(s, &spec, 1, 0, 3) == 0);
  CHECK(stk__rpc_stream_close_send(s) == 0);
  CHECK(du_stream_end(s, det, sizeof(det)) == GRPC_STATUS_OK);
  stk__rpc_stream_destroy(s);

  /* Two ranks at once, each keeping exactly --max-outstanding (4) credits
   * in flight and sending the next as soon as a batch is whole: every
   * batch arrives whole and right, with neither rank starved. */
  stk__rpc_stream *rs[2] = {NULL, NULL};
  uint64_t next[2] = {0, 0};
  for (uint32_t r = 0; r < 2; r++) {
    CHECK(stk__rpc_stream_open(w, STREAM, 20000, &rs[r]) == 0);
    for (; next[r] < 4; next[r]++)
      CHECK(du_send_request(rs[r], job_hash, 1, r, next[r]) == 0);
  }
  uint32_t seen[2] = {0, 0};
  for (uint64_t k = 0; k < steps; k++)
    for (uint32_t r = 0; r < 2; r++) {
      uint64_t got = 0;
      CHECK(du_recv_batch_any(rs[r], &spec, 1, r, 0, &got) == 0);
      if (got < 32) seen[r] |= 1u << got;
      if (next[r] < steps) CHECK(du_send_request(rs[r], job_hash, 1, r, next[r]++) == 0);
    }
  for (uint32_t r = 0; r < 2; r++) {
    CHECK_EQ_U64(seen[r], (1u << steps) - 1);
    CHECK(stk__rpc_stream_close_send(rs[r]) == 0);
    CHECK(du_stream_end(rs[r], det, sizeof(det)) == GRPC_STATUS_OK);
    stk__rpc_stream_destroy(rs[r]);
  }

  /* Unknown methods. */
  Stoker__V1__StatusRequest sq = STOKER__V1__STATUS_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  code = stk__rpc_unary(w, "/stoker.v1.Worker/Nope", &sq.base,
                        &stoker__v1__status_response__descriptor, &resp, 5000, det,
                        sizeof(det));
  CHECK(code == GRPC_STATUS_UNIMPLEMENTED);
  code = stk__rpc_unary(c, "/stoker.v1.Coordinator/Nope", &sq.base,
                        &stoker__v1__status_response__descriptor, &resp, 5000, det,
                        sizeof(det));
  CHECK(code == GRPC_STATUS_UNIMPLEMENTED);
  /* An empty message to Join parses as a JoinRequest with protocol 0. */
  code = stk__rpc_unary(c, "/stoker.v1.Coordinator/Join", (ProtobufCMessage *)&sq.base,
                        &stoker__v1__join_response__descriptor, &resp, 5000, det,
                        sizeof(det));
  CHECK(code == GRPC_STATUS_FAILED_PRECONDITION);
  /* Garbage to every coordinator method. */
  CHECK(raw_call(c, "/stoker.v1.Coordinator/Join", 1) == GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(raw_call(c, "/stoker.v1.Coordinator/Finish", 1) == GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(raw_call(c, "/stoker.v1.Coordinator/Status", 1) == GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(raw_call(c, "/stoker.v1.Coordinator/WatchWorkers", 1) ==
        GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(raw_call(c, "/stoker.v1.Coordinator/WorkerSession", 0) ==
        GRPC_STATUS_INVALID_ARGUMENT);
  CHECK(du_wait_workers(c, 1, 1000) == 0);
  check_still_serving(w, "unknown methods and garbage");

  /* `stoker status` renders the job. */
  if (argc > 3) {
    char target[64];
    snprintf(target, sizeof(target), "127.0.0.1:%d", cport);
    char *sargv[] = {argv[3], "status", "--coordinator", target, NULL};
    stk_proc cli;
    CHECK(proc_spawn(&cli, "stoker-status", sargv) == 0);
    CHECK(proc_wait(&cli, 10000) == 0);
    FILE *f = fopen(cli.log, "r");
    char out[8192] = "";
    size_t n = f ? fread(out, 1, sizeof(out) - 1, f) : 0;
    out[n] = 0;
    if (f) fclose(f);
    char waddr[64];
    snprintf(waddr, sizeof(waddr), "127.0.0.1:%d", wport);
    CHECK(strstr(out, "badinput") != NULL);
    CHECK(strstr(out, "running") != NULL);
    CHECK(strstr(out, waddr) != NULL);
    CHECK(strstr(out, "ranks joined     1/2") != NULL);
    if (check_failures) fputs(out, stderr);
  }

  /* A second worker asked to listen on the first one's port: one clear
   * line and exit 1 (not gRPC's multi-line dump). */
  {
    char taken[64];
    snprintf(taken, sizeof(taken), "127.0.0.1:%d", wport);
    const char *targs[] = {"--listen", taken, "--threads", "1", NULL};
    stk_proc dup;
    char target[64];
    snprintf(target, sizeof(target), "127.0.0.1:%d", cport);
    char *dargv[] = {
        (char *)worker_bin, "--coordinator",  target,           (char *)targs[0],
        (char *)targs[1],   (char *)targs[2], (char *)targs[3], NULL};
    CHECK(proc_spawn(&dup, "worker-port-taken", dargv) == 0);
    CHECK(proc_wait(&dup, 20000) == 1);
    CHECK(proc_log_count(&dup, "the port is already in use") == 1);
    CHECK(proc_log_count(&dup, "UNKNOWN") == 0);
    if (check_failures) proc_dump_log(&dup);
  }

  /* Orderly end: SIGTERM to the coordinator shuts the worker down too. */
  stk__rpc_channel_close(c);
  stk__rpc_channel_close(w);
  proc_signal(&coord, SIGTERM);
  int cc = proc_wait(&coord, 10000), wc = proc_wait(&worker, 10000);
  CHECK(cc == 0);
  CHECK(wc == 0);
  if (check_failures) {
    proc_dump_log(&coord);
    proc_dump_log(&worker);
    proc_keep_tmp();
  }
  stk__rpc_shutdown();
  CHECK_DONE();
}
