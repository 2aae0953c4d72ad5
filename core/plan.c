/* plan.c - which samples a batch holds: the keyed epoch permutation
 * (Feistel network with cycle walking) or, with shuffle = false, the
 * identity, the steps of an epoch and
 * rank/step addressing, including an epoch resumed with another world
 * size (a sample offset, stk_resume_point). The randomness each sample
 * sees is rng.c's.
 *
 * Nothing here allocates or keeps state beyond the plain values it is
 * given, so every function is safe to call from any thread. Reads the job
 * spec's fields only: calls nothing in job_spec.c.
 */
#include <string.h>

#include "core/core_internal.h"

#define FEISTEL_ROUNDS 6

void stk_perm_init(stk_perm *p, uint64_t n, uint64_t seed, uint64_t epoch) {
  memset(p, 0, sizeof(*p));
  p->n = n;
  uint32_t bits = 2;
  while (bits < 64 && (1ull << bits) < n) bits++;
  p->half_bits = (bits + 1) / 2; /* domain 2^(2h) >= n, at most 4n */
  uint64_t k = stk__mix64(seed ^ 0x9e3779b97f4a7c15ull) ^
               stk__mix64(epoch + 0x632be59bd9b4e019ull);
  for (int r = 0; r < FEISTEL_ROUNDS; r++) {
    k = stk__mix64(k + 0x9e3779b97f4a7c15ull);
    p->keys[r] = k;
  }
}

void stk_job_perm_init(stk_perm *p, const stk_job_spec *s, uint64_t n, uint64_t epoch) {
  if (s->in_order) {
    /* The identity: half_bits 0 marks it (a keyed one has at least 1). */
    memset(p, 0, sizeof(*p));
    p->n = n;
    return;
  }
  stk_perm_init(p, n, s->seed, epoch);
}

static uint64_t feistel(const stk_perm *p, uint64_t x) {
  uint32_t h = p->half_bits;
  uint64_t mask = (h >= 64) ? ~0ull : ((1ull << h) - 1);
  uint64_t l = x >> h, r = x & mask;
  for (int i = 0; i < FEISTEL_ROUNDS; i++) {
    uint64_t f = stk__mix64(r ^ p->keys[i]) & mask;
    uint64_t t = l ^ f;
    l = r;
    r = t;
  }
  return (l << h) | r;
}

uint64_t stk_perm_apply(const stk_perm *p, uint64_t i) {
  if (p->n <= 1) return 0;
  if (p->half_bits == 0) return i % p->n; /* stk_job_perm_init's identity */
  uint64_t y = feistel(p, i);
  /* Cycle walking: the domain is < 4n, so a few rounds on average; the
   * walk terminates because the Feistel network is a bijection on the
   * domain and i < n lies on the same cycle. */
  while (y >= p->n) y = feistel(p, y);
  return y;
}

uint64_t stk_epoch_steps(const stk_job_spec *s, uint64_t n, uint64_t offset) {
  uint64_t per = (uint64_t)s->world_size * s->batch_size;
  if (per == 0 || offset >= n) return 0;
  uint64_t rest = n - offset;
  return s->drop_last ? rest / per : rest / per + (rest % per != 0);
}

uint64_t stk_steps_per_epoch(const stk_job_spec *s, uint64_t n) {
  return stk_epoch_steps(s, n, 0);
}

int stk_resume_point(const stk_job_spec *s, uint64_t n, uint64_t position,
                     uint64_t *offset, uint64_t *step) {
  uint64_t per = (uint64_t)s->world_size * s->batch_size;
  if (per == 0 || position >= n || !offset || !step) return STK_INVALID_ARGUMENT;
  *offset = position % per;
  *step = position / per;
  return STK_OK;
}

int stk_batch_samples_at(const stk_job_spec *s, uint64_t n, uint64_t epoch,
                         uint64_t offset, uint32_t rank, uint64_t step, uint64_t *indices,
                         uint8_t *mask) {
  uint64_t per = (uint64_t)s->world_size * s->batch_size;
  if (n == 0 || epoch >= s->epochs || rank >= s->world_size || offset >= per ||
      step >= stk_epoch_steps(s, n, offset))
    return STK_INVALID_ARGUMENT;
  stk_perm p;
  stk_job_perm_init(&p, s, n, epoch);
  uint64_t B = s->batch_size;
  uint64_t base = offset + (step * s->world_size + rank) * B;
  for (uint64_t j = 0; j < B; j++) {
    uint64_t pos = base + j;
    int valid = pos < n;
    indices[j] = stk_perm_apply(&p, valid ? pos : pos % n);
    if (mask) mask[j] = (uint8_t)valid;
  }
  return STK_OK;
}

int stk_batch_samples(const stk_job_spec *s, uint64_t n, uint64_t epoch, uint32_t rank,
                      uint64_t step, uint64_t *indices, uint8_t *mask) {
  return stk_batch_samples_at(s, n, epoch, 0, rank, step, indices, mask);
}
