/* test_elastic_plan.c - the addressing of an epoch resumed with another
 * world size (core/plan.c: stk_resume_point, stk_epoch_steps,
 * stk_batch_samples_at). For many (N, B, W, W', drop_last) and resume
 * steps k: the old world's first k steps of every rank plus the new
 * world's steps from the resume point hold every epoch position exactly
 * once (without drop_last: all N; with it: a prefix that ends at the new
 * world's last full step), padding is masked, offset 0 is the classic
 * address, and addresses out of range are refused.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "stoker/core.h"

#define MAXN 1000

static uint64_t inv[MAXN];  /* epoch position of sample index i */
static uint32_t seen[MAXN]; /* times position p was delivered (mask 1) */
static uint64_t idx[64], idx0[64];
static uint8_t mask[64], mask0[64];

/* Deliver every batch of (W = s->world_size) steps [from, to) at offset
 * off into seen[]; returns the number of padded slots. */
static uint64_t deliver(const stk_job_spec *s, uint64_t n, uint64_t off, uint64_t from,
                        uint64_t to) {
  uint64_t pads = 0;
  for (uint64_t st = from; st < to; st++)
    for (uint32_t r = 0; r < s->world_size; r++) {
      int rc = stk_batch_samples_at(s, n, 0, off, r, st, idx, mask);
      CHECK(rc == STK_OK);
      if (rc) return pads;
      for (uint32_t j = 0; j < s->batch_size; j++) {
        uint64_t pos = off + (st * s->world_size + r) * s->batch_size + j;
        if (!mask[j]) {
          CHECK(pos >= n);
          pads++;
          continue;
        }
        CHECK(pos < n && inv[idx[j]] == pos);
        seen[inv[idx[j]]]++;
      }
    }
  return pads;
}

static void one_case(uint64_t n, uint32_t B, uint32_t W, uint32_t W2, int drop,
                     uint64_t k) {
  stk_job_spec a, b;
  stk_job_spec_defaults(&a);
  a.num_samples = n, a.batch_size = B, a.world_size = W, a.drop_last = drop;
  a.seed = 5;
  b = a;
  b.world_size = W2;
  uint64_t g = k * W * B;
  if (g >= n) return;
  memset(seen, 0, sizeof(seen));
  deliver(&a, n, 0, 0, k);
  uint64_t off = 99, s0 = 99;
  CHECK(stk_resume_point(&b, n, g, &off, &s0) == STK_OK);
  CHECK(off < (uint64_t)W2 * B && off + s0 * W2 * B == g);
  uint64_t steps = stk_epoch_steps(&b, n, off);
  CHECK(s0 <= steps);
  deliver(&b, n, off, s0, steps);
  uint64_t end = drop ? off + steps * W2 * B : n;
  if (!drop) CHECK(steps == (n - off + (uint64_t)W2 * B - 1) / ((uint64_t)W2 * B));
  CHECK(end >= g && end <= n && n - end < (uint64_t)W2 * B);
  int bad = 0;
  for (uint64_t p = 0; p < n; p++) bad += seen[p] != (p < end ? 1u : 0u);
  if (bad)
    fprintf(stderr, "N=%llu B=%u W=%u->%u drop=%d k=%llu: %d positions wrong\n",
            (unsigned long long)n, B, W, W2, drop, (unsigned long long)k, bad);
  CHECK(bad == 0);
  /* Beyond the last step, and offsets not below W*B, are refused. */
  CHECK(stk_batch_samples_at(&b, n, 0, off, 0, steps, idx, mask) == STK_INVALID_ARGUMENT);
  CHECK(stk_batch_samples_at(&b, n, 0, (uint64_t)W2 * B, 0, 0, idx, mask) ==
        STK_INVALID_ARGUMENT);
}

int main(void) {
  static const uint64_t ns[] = {1000, 997, 64, 33};
  for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
    uint64_t n = ns[ni];
    stk_perm p;
    stk_perm_init(&p, n, 5, 0);
    for (uint64_t i = 0; i < n; i++) inv[stk_perm_apply(&p, i)] = i;
    static const uint32_t bs[] = {1, 3, 8};
    for (size_t bi = 0; bi < 3; bi++)
      for (uint32_t W = 1; W <= 5; W++)
        for (uint32_t W2 = 1; W2 <= 5; W2++)
          for (int drop = 0; drop <= 1; drop++) {
            stk_job_spec a;
            stk_job_spec_defaults(&a);
            a.batch_size = bs[bi], a.world_size = W, a.drop_last = drop;
            uint64_t spe = stk_steps_per_epoch(&a, n);
            uint64_t ks[] = {0, 1, spe / 2, spe ? spe - 1 : 0};
            for (int i = 0; i < 4; i++)
              if (ks[i] < spe) one_case(n, bs[bi], W, W2, drop, ks[i]);
          }
  }

  /* Offset 0 is the classic address; steps at offset 0 are the classic
   * count; positions at or past N have no resume point. */
  stk_job_spec s;
  stk_job_spec_defaults(&s);
  s.num_samples = 100, s.batch_size = 4, s.world_size = 3, s.drop_last = 0;
  s.epochs = 2;
  CHECK(stk_epoch_steps(&s, 100, 0) == stk_steps_per_epoch(&s, 100));
  CHECK(stk_epoch_steps(&s, 100, 100) == 0);
  for (uint64_t st = 0; st < stk_steps_per_epoch(&s, 100); st++)
    for (uint32_t r = 0; r < 3; r++) {
      CHECK(stk_batch_samples(&s, 100, 1, r, st, idx0, mask0) == STK_OK);
      CHECK(stk_batch_samples_at(&s, 100, 1, 0, r, st, idx, mask) == STK_OK);
      CHECK(memcmp(idx, idx0, 4 * sizeof(uint64_t)) == 0 && memcmp(mask, mask0, 4) == 0);
    }
  uint64_t off, st;
  CHECK(stk_resume_point(&s, 100, 100, &off, &st) == STK_INVALID_ARGUMENT);
  CHECK(stk_resume_point(&s, 100, 99, &off, &st) == STK_OK && off == 3 && st == 8);
  CHECK(stk_batch_samples_at(&s, 100, 2, 3, 0, 0, idx, mask) == STK_INVALID_ARGUMENT);
  CHECK(stk_batch_samples_at(&s, 100, 0, 3, 3, 0, idx, mask) == STK_INVALID_ARGUMENT);
  CHECK_DONE();
}
