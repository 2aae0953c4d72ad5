/* rng.c - the randomness a sample sees: Philox4x32-10, a counter-based
 * generator keyed by (seed, epoch, sample index), so a sample's draws
 * depend on nothing else (no thread, worker or order of builds).
 *
 * Plain values only: every function is safe to call from any thread on
 * its own stk_rng.
 */
#include "stoker/core.h"

/* Philox4x32-10 (Salmon et al., SC'11): ten rounds of multiply-xor over a
 * 128-bit counter with a 64-bit key and Weyl key schedule. */
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
