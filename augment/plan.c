/* plan.c - which samples a batch holds and the randomness each sample
 * sees: the keyed epoch permutation (Feistel network with cycle walking),
 * rank/step addressing, and the Philox4x32-10 counter-based generator.
 *
 * Nothing here allocates or keeps state beyond the plain values it is
 * given, so every function is safe to call from any thread.
 */
#include <string.h>

#include "internal.h"

uint64_t stk__mix64(uint64_t x) { /* murmur3 fmix64 */
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

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
  uint64_t y = feistel(p, i);
  /* Cycle walking: the domain is < 4n, so a few rounds on average; the
   * walk terminates because the Feistel network is a bijection on the
   * domain and i < n lies on the same cycle. */
  while (y >= p->n) y = feistel(p, y);
  return y;
}

int stk_batch_samples(const stk_job_spec *s, uint64_t n, uint64_t epoch, uint32_t rank,
                      uint64_t step, uint64_t *indices, uint8_t *mask) {
  if (n == 0 || epoch >= s->epochs || rank >= s->world_size ||
      step >= stk_steps_per_epoch(s, n))
    return STK_INVALID_ARGUMENT;
  stk_perm p;
  stk_perm_init(&p, n, s->seed, epoch);
  uint64_t B = s->batch_size;
  uint64_t base = (step * s->world_size + rank) * B;
  for (uint64_t j = 0; j < B; j++) {
    uint64_t pos = base + j;
    int valid = pos < n;
    indices[j] = stk_perm_apply(&p, valid ? pos : pos % n);
    if (mask) mask[j] = (uint8_t)valid;
  }
  return STK_OK;
}

/* ---- Philox4x32-10 (Salmon et al., SC'11) ------------------------------ */

static void philox_block(const uint32_t key_in[2], const uint32_t ctr_in[4],
                         uint32_t out[4]) {
  uint32_t k0 = key_in[0], k1 = key_in[1];
  uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0, c1 = (uint32_t)p1, c2 = n2, c3 = (uint32_t)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

void stk_rng_init(stk_rng *r, uint64_t seed, uint64_t epoch, uint64_t index) {
  r->key[0] = (uint32_t)seed;
  r->key[1] = (uint32_t)(seed >> 32);
  r->ctr[0] = 0; /* block counter within the sample */
  r->ctr[1] = (uint32_t)index;
  r->ctr[2] = (uint32_t)(index >> 32);
  r->ctr[3] = (uint32_t)epoch;
  r->used = 4;
}

uint32_t stk_rng_u32(stk_rng *r) {
  if (r->used == 4) {
    philox_block(r->key, r->ctr, r->out);
    r->ctr[0]++;
    r->used = 0;
  }
  return r->out[r->used++];
}

double stk_rng_uniform(stk_rng *r) {
  uint64_t hi = stk_rng_u32(r) >> 5, lo = stk_rng_u32(r) >> 6; /* 27 + 26 */
  return (double)(hi * 67108864.0 + lo) / 9007199254740992.0;
}
