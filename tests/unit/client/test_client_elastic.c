/* test_client_elastic.c - elastic resume through the client library, with
 * local clients (stk_client_open_local: the same plan, state and
 * pool/reorder/ring code as networked clients, batches built in-process).
 *
 * W=4 ranks consume 5 steps of epoch 0 and save; from those states jobs
 * with W=2 and W=3 consume the rest; W=3 also saves mid-epoch (in its
 * shifted epoch) and W=4 and W=2 resume from that. For every chain the
 * union of delivered sample indices (the batch's index tensor, mask 1)
 * over epoch 0 equals the permutation, each exactly once; epoch 1 is the
 * new world's ordinary epoch; every batch's indices match its address
 * (stk_batch_samples_at) and its bytes the reference. Also: a version 1
 * (40-byte) state still loads, and a state whose job differs in more than
 * world_size is STK_MISMATCH with a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "stoker/client.h"

#define N 1000
#define B 8
/* pad + mask (drop_last false): every sample of the epoch is delivered */
#define JOB_FMT                                                              \
  "source = synthetic\nnum_samples = 1000\nheight = 8\nwidth = 8\n"          \
  "batch_size = 8\nworld_size = %u\nepochs = 2\nseed = 21\ndrop_last = %s\n" \
  "%s"

static uint32_t seen[2][N]; /* per epoch: times sample i was delivered */

static void job_text(char *buf, size_t len, uint32_t world, int drop, const char *extra) {
  snprintf(buf, len, JOB_FMT, world, drop ? "true" : "false", extra ? extra : "");
}

static stk_client *open_rank(uint32_t world, uint32_t rank, int drop, const void *state,
                             size_t state_len, const char *extra, int *status, char *err,
                             size_t errlen) {
  char job[512];
  job_text(job, sizeof job, world, drop, extra);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.rank = rank, cfg.world_size = world, cfg.prefetch = 4, cfg.slots = 2;
  cfg.resume_state = state, cfg.resume_len = state_len;
  stk_client *c = NULL;
  *status = stk_client_open_local(&cfg, job, NULL, &c, err, errlen);
  return c;
}

/* Take up to `steps` batches (UINT64_MAX: until the end of data) from c,
 * tallying valid indices into seen[epoch] and checking each batch against
 * its address and the reference. Returns batches taken. */
static uint64_t consume(stk_client *c, uint32_t rank, uint64_t steps) {
  stk_job_spec spec;
  stk_client_job(c, &spec);
  size_t plen = (size_t)stk_client_payload_bytes(c);
  unsigned char *ref = malloc(plen);
  uint64_t want[B];
  uint8_t want_mask[B];
  uint64_t got = 0;
  while (got < steps) {
    stk_batch *b = NULL;
    int st = stk_client_next(c, &b);
    if (st == STK_END_OF_EPOCH) continue;
    if (st == STK_END_OF_DATA) break;
    CHECK(st == STK_OK);
    if (st != STK_OK) {
      fprintf(stderr, "next: %s\n", stk_client_error(c));
      break;
    }
    uint64_t e = stk_batch_epoch(b), s = stk_batch_step(b),
             off = stk_batch_sample_offset(b);
    stk_tensor ti, tm;
    CHECK(stk_batch_tensor(b, 3, &ti) == STK_OK && stk_batch_tensor(b, 2, &tm) == STK_OK);
    const int64_t *idx = ti.data;
    const uint8_t *mask = tm.data;
    CHECK(stk_batch_samples_at(&spec, N, e, off, rank, s, want, want_mask) == STK_OK);
    for (uint32_t j = 0; j < B; j++) {
      CHECK((uint64_t)idx[j] == want[j] && mask[j] == want_mask[j]);
      if (mask[j] && e < 2 && idx[j] >= 0 && idx[j] < N) seen[e][idx[j]]++;
    }
    size_t len = 0;
    const void *p = stk_batch_payload(b, &len);
    CHECK(len == plen && stk_client_reference(c, e, s, NULL, ref, plen) == STK_OK &&
          memcmp(p, ref, plen) == 0);
    stk_batch_release(b);
    got++;
  }
  free(ref);
  return got;
}

/* Every sample of epoch e delivered exactly once (or, with `upto` < N, the
 * epoch's first `upto` positions: drop_last). */
static int epoch_exact(int e, const char *what) {
  uint64_t once = 0, twice = 0, never = 0;
  for (int i = 0; i < N; i++) {
    once += seen[e][i] == 1;
    twice += seen[e][i] > 1;
    never += seen[e][i] == 0;
  }
  fprintf(stderr, "%s: epoch %d: %llu samples once, %llu more than once, %llu never\n",
          what, e, (unsigned long long)once, (unsigned long long)twice,
          (unsigned long long)never);
  return once == N;
}

/* Save the states of `world` open clients into st[r] (48 bytes each). */
static void save_all(stk_client **c, uint32_t world, unsigned char st[][64],
                     size_t *len) {
  for (uint32_t r = 0; r < world; r++) {
    len[r] = 64;
    CHECK(stk_client_save_state(c[r], st[r], &len[r]) == STK_OK);
  }
}

/* Phase A: W=4, 5 steps each; states into a_st. Tallies into seen. */
static unsigned char a_st[4][64];
static size_t a_len[4];
static void phase_a(int drop) {
  memset(seen, 0, sizeof(seen));
  stk_client *c[4];
  char err[512];
  int st;
  for (uint32_t r = 0; r < 4; r++) {
    c[r] = open_rank(4, r, drop, NULL, 0, NULL, &st, err, sizeof err);
    CHECK(st == STK_OK);
    if (st) {
      fprintf(stderr, "open: %s\n", err);
      exit(1);
    }
    CHECK_EQ_U64(consume(c[r], r, 5), 5);
  }
  save_all(c, 4, a_st, a_len);
  for (uint32_t r = 0; r < 4; r++) stk_client_close(c[r]);
}

/* Open `world` ranks from states (rank r gets states[r % nstates]), take
 * `steps` each (UINT64_MAX: to the end), optionally save, close. */
static void resume(uint32_t world, int drop, unsigned char states[][64], size_t *lens,
                   uint32_t nstates, uint64_t steps, unsigned char out[][64],
                   size_t *out_len) {
  stk_client *c[8];
  char err[512];
  int st;
  for (uint32_t r = 0; r < world; r++) {
    c[r] = open_rank(world, r, drop, states[r % nstates], lens[r % nstates], NULL, &st,
                     err, sizeof err);
    CHECK(st == STK_OK);
    if (st) {
      fprintf(stderr, "resume W=%u rank %u: %s\n", world, r, err);
      exit(1);
    }
    uint64_t got = consume(c[r], r, steps);
    if (steps != UINT64_MAX) CHECK_EQ_U64(got, steps);
  }
  if (out) save_all(c, world, out, out_len);
  for (uint32_t r = 0; r < world; r++) stk_client_close(c[r]);
}

int main(void) {
  /* 4 -> 2 and 4 -> 3, each to the end of the job. */
  phase_a(0);
  resume(2, 0, a_st, a_len, 4, UINT64_MAX, NULL, NULL);
  CHECK(epoch_exact(0, "4 -> 2"));
  CHECK(epoch_exact(1, "4 -> 2"));
  phase_a(0);
  resume(3, 0, a_st, a_len, 1, UINT64_MAX, NULL, NULL); /* every rank: rank 0's state */
  CHECK(epoch_exact(0, "4 -> 3"));
  CHECK(epoch_exact(1, "4 -> 3"));

  /* 4 -> 3 (7 steps, saved inside its shifted epoch) -> 4 and -> 2. */
  unsigned char b_st[3][64];
  size_t b_len[3];
  phase_a(0);
  resume(3, 0, a_st, a_len, 4, 7, b_st, b_len);
  uint32_t saved_a[2][N];
  memcpy(saved_a, seen, sizeof(seen));
  resume(4, 0, b_st, b_len, 3, UINT64_MAX, NULL, NULL);
  CHECK(epoch_exact(0, "4 -> 3 -> 4"));
  CHECK(epoch_exact(1, "4 -> 3 -> 4"));
  memcpy(seen, saved_a, sizeof(seen));
  resume(2, 0, b_st, b_len, 3, UINT64_MAX, NULL, NULL);
  CHECK(epoch_exact(0, "4 -> 3 -> 2"));
  CHECK(epoch_exact(1, "4 -> 3 -> 2"));
  /* The same world again from the shifted epoch: each rank its own state. */
  memcpy(seen, saved_a, sizeof(seen));
  resume(3, 0, b_st, b_len, 3, UINT64_MAX, NULL, NULL);
  CHECK(epoch_exact(0, "4 -> 3 -> 3"));

  /* drop_last: nothing twice; epoch 0 ends at W''s last full step. */
  phase_a(1);
  resume(3, 1, a_st, a_len, 4, UINT64_MAX, NULL, NULL);
  uint64_t once = 0, more = 0;
  for (int i = 0; i < N; i++) once += seen[0][i] == 1, more += seen[0][i] > 1;
  fprintf(stderr, "4 -> 3 drop_last: %llu once, %llu more than once\n",
          (unsigned long long)once, (unsigned long long)more);
  /* 160 consumed by W=4, then (1000-16)/24 = 41 steps of 24 from offset 16:
   * positions [0, 16 + 41*24) = [0, 1000): nothing dropped here. */
  CHECK(more == 0 && once == 16 + 41 * 24);

  /* Refusals: another batch size or seed is another job. */
  phase_a(0);
  char err[512];
  int st;
  stk_client *c =
      open_rank(3, 0, 0, a_st[0], a_len[0], "batch_size = 4\n", &st, err, sizeof err);
  CHECK(st == STK_MISMATCH && c == NULL && strstr(err, "world_size") != NULL);
  c = open_rank(3, 0, 0, a_st[0], a_len[0], "seed = 22\n", &st, err, sizeof err);
  CHECK(st == STK_MISMATCH && c == NULL);
  /* Same world, another rank's state: refused as before. */
  c = open_rank(4, 1, 0, a_st[0], a_len[0], NULL, &st, err, sizeof err);
  CHECK(st == STK_MISMATCH && c == NULL);
  /* A version 2 state cut short. */
  c = open_rank(3, 0, 0, a_st[0], 44, NULL, &st, err, sizeof err);
  CHECK(st == STK_INVALID_ARGUMENT && c == NULL);

  /* A version 1 state (40 bytes, no position) still loads, with the same
   * and with another world size: step 5 of W=4 is position 160. */
  unsigned char v1[40];
  memcpy(v1, a_st[0], 40);
  v1[4] = 1;
  c = open_rank(4, 0, 0, v1, 40, NULL, &st, err, sizeof err);
  CHECK(st == STK_OK);
  stk_batch *b = NULL;
  if (c && stk_client_next(c, &b) == STK_OK) {
    CHECK_EQ_U64(stk_batch_step(b), 5);
    CHECK_EQ_U64(stk_batch_sample_offset(b), 0);
    stk_batch_release(b);
  }
  stk_client_close(c);
  c = open_rank(3, 2, 0, v1, 40, NULL, &st, err, sizeof err);
  CHECK(st == STK_OK);
  if (c && stk_client_next(c, &b) == STK_OK) {
    CHECK_EQ_U64(stk_batch_step(b), 6); /* 160 = 16 + 6 * 24 */
    CHECK_EQ_U64(stk_batch_sample_offset(b), 16);
    stk_batch_release(b);
  }
  stk_client_close(c);
  CHECK_DONE();
}
