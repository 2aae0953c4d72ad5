/* test_elastic.c - elastic resume with real processes on 127.0.0.1: one
 * job restarted twice with another world size, each time a new
 * coordinator and two workers, libstoker ranks as threads here.
 *
 *   W=4: every rank takes 5 steps of epoch 0 and saves its state; rank 0
 *        ends the job (Finish shutdown_job) and every process exits 0.
 *   W=3: ranks 0..2 resume from the W=4 states (sample position 80: offset
 *        8, step 6 of W=3), take 7 steps, save; ended the same way. A raw
 *        request with a sample_offset >= W*B is refused INVALID_ARGUMENT.
 *   W=2: ranks resume from the W=3 states (position 164: offset 4, step
 *        20) and run to the end of the job (2 epochs), then finish.
 *
 * Over the three phases, the sample indices delivered in epoch 0 (the
 * batch's index tensor, mask 1) are the epoch's permutation, each exactly
 * once; epoch 1 likewise; each batch equals its reference built at its
 * address (stk_build_reference_at with the batch's sample offset) and its
 * indices those of stk_batch_samples_at.
 *
 * usage: test_elastic <stoker-coordinator> <stoker-worker> [...]
 */
#include <pthread.h>

#include "daemon_util.h"
#include "stoker/client.h"

#define N 600
#define B 4

typedef struct elastic_rank {
  int port;
  uint32_t rank, world;
  uint64_t steps; /* batches to take; UINT64_MAX: to the end, then finish */
  const unsigned char *state_in;
  size_t state_in_len;
  /* out */
  unsigned char state[64];
  size_t state_len;
  uint32_t seen[2][N];
  uint64_t taken, mismatches;
  int status;
  stk_job_spec spec;
  char error[512];
} elastic_rank;

static void *elastic_rank_main(void *arg) {
  elastic_rank *r = arg;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", r->port);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = addr;
  cfg.rank = r->rank, cfg.world_size = r->world, cfg.prefetch = 4;
  cfg.join_timeout_ms = 20000;
  cfg.resume_state = r->state_in, cfg.resume_len = r->state_in_len;
  stk_client *c = NULL;
  r->status = stk_client_open(&cfg, &c, r->error, sizeof r->error);
  if (r->status) return NULL;
  stk_client_job(c, &r->spec);
  stk_batch_layout L;
  stk_batch_layout_of(&r->spec, &L);
  unsigned char *ref = malloc(L.total_bytes);
  uint64_t want[B];
  uint8_t want_mask[B];
  while (r->taken < r->steps) {
    stk_batch *b = NULL;
    int s = stk_client_next(c, &b);
    if (s == STK_END_OF_EPOCH) continue;
    if (s != STK_OK) {
      if (s != STK_END_OF_DATA) {
        r->status = s;
        snprintf(r->error, sizeof r->error, "%s: %s", stk_strerror(s),
                 stk_client_error(c));
      }
      break;
    }
    uint64_t e = stk_batch_epoch(b), st = stk_batch_step(b);
    uint64_t off = stk_batch_sample_offset(b);
    size_t len = 0;
    const unsigned char *p = stk_batch_payload(b, &len);
    int bad = len != L.total_bytes || e >= 2 ||
              stk_batch_samples_at(&r->spec, N, e, off, r->rank, st, want, want_mask) ||
              stk_build_reference_at(&r->spec, NULL, e, off, r->rank, st, ref,
                                     L.total_bytes, NULL, 0) ||
              memcmp(p, ref, L.total_bytes) != 0;
    const unsigned char *ti = p + L.tensors[STK_TENSOR_INDEX].offset;
    const unsigned char *tm = p + L.tensors[STK_TENSOR_MASK].offset;
    for (uint32_t j = 0; !bad && j < B; j++) {
      int64_t v;
      memcpy(&v, ti + 8 * j, 8);
      if ((uint64_t)v != want[j] || tm[j] != want_mask[j] || v < 0 || v >= N) bad = 1;
      else if (tm[j]) r->seen[e][v]++;
    }
    r->mismatches += bad;
    stk_batch_release(b);
    r->taken++;
  }
  r->state_len = sizeof r->state;
  if (stk_client_save_state(c, r->state, &r->state_len) != STK_OK) r->state_len = 0;
  if (r->steps == UINT64_MAX && stk_client_finish(c, 0) != STK_OK && !r->error[0])
    snprintf(r->error, sizeof r->error, "finish: %s", stk_client_error(c));
  stk_client_close(c);
  free(ref);
  return NULL;
}

static uint32_t seen[2][N];

/* A raw stream to the worker at wport: a request whose sample_offset is not
 * below W*B is refused INVALID_ARGUMENT, naming the field. */
static void check_bad_offset(int wport, const stk_job_spec *spec) {
  stk__rpc_channel *w = du_channel(wport);
  stk__rpc_stream *s = NULL;
  CHECK(w && stk__rpc_stream_open(w, "/stoker.v1.Worker/Stream", 20000, &s) == 0);
  if (s) {
    Stoker__V1__BatchRequest q = STOKER__V1__BATCH_REQUEST__INIT;
    q.job_hash = stk_job_spec_hash(spec);
    q.sample_offset = (uint64_t)spec->world_size * spec->batch_size;
    CHECK(stk__rpc_stream_send_msg(s, &q.base) == 0);
    char det[256] = "";
    CHECK(du_stream_end(s, det, sizeof det) == GRPC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(det, "sample_offset") != NULL);
    stk__rpc_stream_destroy(s);
  }
  stk__rpc_channel_close(w);
}

/* One phase: a coordinator for world `world`, two workers, `world` ranks
 * (rank r resumes from states[r % nstates], if any), each taking `steps`
 * batches; then the job is ended. The states saved go to out[]. */
static void phase(uint32_t world, uint64_t steps, elastic_rank *prev, uint32_t nprev,
                  elastic_rank *out) {
  int before = check_failures;
  char ws[32], name[64];
  snprintf(ws, sizeof ws, "world_size=%u", world);
  const char *job[] = {"--set", "num_samples=600",
                       "--set", "batch_size=4",
                       "--set", "height=16",
                       "--set", "width=16",
                       "--set", ws,
                       "--set", "epochs=2",
                       "--set", "drop_last=false",
                       "--set", "seed=13",
                       NULL};
  const char *wargs[] = {"--threads", "1", NULL};
  stk_proc p[3];
  snprintf(name, sizeof name, "w%u-coordinator", world);
  int port = du_start_coordinator(&p[0], name, job);
  CHECK(port > 0);
  if (port <= 0) return;
  int wport = 0;
  for (int i = 1; i < 3; i++) {
    snprintf(name, sizeof name, "w%u-worker%d", world, i);
    int wp = du_start_worker(&p[i], name, port, wargs);
    CHECK(wp > 0);
    if (i == 1) wport = wp;
  }
  pthread_t t[8];
  for (uint32_t r = 0; r < world; r++) {
    memset(&out[r], 0, sizeof out[r]);
    out[r].port = port, out[r].rank = r, out[r].world = world, out[r].steps = steps;
    if (prev) {
      out[r].state_in = prev[r % nprev].state;
      out[r].state_in_len = prev[r % nprev].state_len;
    }
    pthread_create(&t[r], NULL, elastic_rank_main, &out[r]);
  }
  for (uint32_t r = 0; r < world; r++) pthread_join(t[r], NULL);
  for (uint32_t r = 0; r < world; r++) {
    elastic_rank *x = &out[r];
    if (x->error[0]) fprintf(stderr, "W=%u rank %u: %s\n", world, r, x->error);
    CHECK(x->status == STK_OK);
    CHECK_EQ_U64(x->mismatches, 0);
    CHECK(x->state_len == 48);
    if (steps != UINT64_MAX) CHECK_EQ_U64(x->taken, steps);
    for (int e = 0; e < 2; e++)
      for (int i = 0; i < N; i++) seen[e][i] += x->seen[e][i];
    fprintf(stderr, "W=%u rank %u: %llu batches\n", world, r,
            (unsigned long long)x->taken);
  }
  if (world == 3 && out[0].status == STK_OK) check_bad_offset(wport, &out[0].spec);
  if (steps != UINT64_MAX) { /* the job is not over: rank 0 ends it */
    stk__rpc_channel *ch = du_channel(port);
    char det[256];
    CHECK(ch && du_finish(ch, 0, 1, NULL, det, sizeof det) == GRPC_STATUS_OK);
    stk__rpc_channel_close(ch);
  }
  for (int i = 0; i < 3; i++) {
    int code = proc_wait(&p[i], 15000);
    if (code != 0) fprintf(stderr, "%s: exit %d\n", p[i].name, code);
    CHECK(code == 0);
  }
  if (check_failures != before) {
    for (int i = 0; i < 3; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  static elastic_rank a[4], b[3], c[2];
  phase(4, 5, NULL, 0, a);
  phase(3, 7, a, 4, b);
  phase(2, UINT64_MAX, b, 3, c);
  for (int e = 0; e < 2; e++) {
    uint64_t once = 0, more = 0, never = 0;
    for (int i = 0; i < N; i++) {
      once += seen[e][i] == 1;
      more += seen[e][i] > 1;
      never += seen[e][i] == 0;
    }
    fprintf(stderr,
            "epoch %d over W=4 -> 3 -> 2: %llu samples once, %llu more than once, "
            "%llu never (of %d)\n",
            e, (unsigned long long)once, (unsigned long long)more,
            (unsigned long long)never, N);
    CHECK_EQ_U64(once, N);
  }
  CHECK_DONE();
}
