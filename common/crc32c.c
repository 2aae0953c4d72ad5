/* crc32c.c - CRC-32C (Castagnoli), the checksum of every batch payload.
 * Uses the SSE4.2 crc32 instruction when the CPU has it, else a byte-wise
 * table. The instruction has a latency of three cycles and a throughput of
 * one, so one dependent chain runs at a third of what the unit can do
 * (about 9 GB/s here, more than the copy out of gRPC's buffers costs):
 * long buffers go through three independent lanes over consecutive blocks,
 * joined by "shift" operators (the effect of n zero bytes on the CRC
 * register, a linear map applied with four table lookups). Debian bookworm
 * ships no crc32c library. Lives in common/ because both rpc/ (receive
 * side) and the worker (send side) use it; its public declaration stays in
 * stoker/augment.h.
 */
#include "common/crc32c.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define POLY 0x82F63B78u /* reflected Castagnoli polynomial */

static uint32_t table[256];
static int table_ready;

static void make_table(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (POLY & (0u - (c & 1)));
    table[i] = c;
  }
  __atomic_store_n(&table_ready, 1, __ATOMIC_RELEASE);
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t n) {
  if (!__atomic_load_n(&table_ready, __ATOMIC_ACQUIRE)) make_table();
  while (n--) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
/* ---- shift operators: the CRC register after n zero bytes ------------- */

/* A linear map on 32-bit registers as 32 columns: m[k] is the image of
 * bit k. */
static uint32_t gf2_apply(const uint32_t m[32], uint32_t v) {
  uint32_t r = 0;
  for (int k = 0; v; k++, v >>= 1)
    if (v & 1) r ^= m[k];
  return r;
}

/* out = a after b (a and b powers of one map, so they commute). */
static void gf2_mul(uint32_t out[32], const uint32_t a[32], const uint32_t b[32]) {
  uint32_t t[32];
  for (int k = 0; k < 32; k++) t[k] = gf2_apply(a, b[k]);
  memcpy(out, t, sizeof(t));
}

/* The table form of "n zero bytes": shift(c) = t[0][c & 255] ^ t[1][c >> 8
 * & 255] ^ t[2][...] ^ t[3][c >> 24]. */
static void make_shift(uint32_t t[4][256], size_t n) {
  uint32_t bit[32], byte[32], r[32];
  bit[0] = POLY; /* one zero bit: c >> 1, with POLY when bit 0 was set */
  for (int k = 1; k < 32; k++) bit[k] = 1u << (k - 1);
  gf2_mul(byte, bit, bit);   /* 2 bits */
  gf2_mul(byte, byte, byte); /* 4 */
  gf2_mul(byte, byte, byte); /* 8: one byte */
  for (int k = 0; k < 32; k++) r[k] = 1u << k;
  for (; n; n >>= 1) { /* r = byte^n by squaring */
    if (n & 1) gf2_mul(r, r, byte);
    gf2_mul(byte, byte, byte);
  }
  for (int i = 0; i < 4; i++)
    for (uint32_t b = 0; b < 256; b++) t[i][b] = gf2_apply(r, b << (8 * i));
}

enum { LONG_LANE = 4096, SHORT_LANE = 256 }; /* bytes per lane of a block */
static uint32_t shift_long[4][256], shift_short[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;
static void make_shifts(void) {
  make_shift(shift_long, LONG_LANE);
  make_shift(shift_short, SHORT_LANE);
}

static inline uint32_t shift(const uint32_t t[4][256], uint32_t c) {
  return t[0][c & 255] ^ t[1][(c >> 8) & 255] ^ t[2][(c >> 16) & 255] ^ t[3][c >> 24];
}

/* Three lanes over the consecutive blocks p[0..L), p[L..2L), p[2L..3L)
 * (L a multiple of 8), joined: the register after A is c0; after A||B it
 * is shift_L(c0) ^ c1 (c1 = B from a zero register, by linearity); and so
 * on for C. */
__attribute__((target("sse4.2"))) static uint64_t crc_3lanes(uint64_t c,
                                                             const unsigned char *p,
                                                             size_t lane,
                                                             const uint32_t t[4][256]) {
  uint64_t c1 = 0, c2 = 0;
  for (size_t i = 0; i < lane; i += 8) {
    uint64_t v0, v1, v2;
    memcpy(&v0, p + i, 8);
    memcpy(&v1, p + lane + i, 8);
    memcpy(&v2, p + 2 * lane + i, 8);
    c = __builtin_ia32_crc32di(c, v0);
    c1 = __builtin_ia32_crc32di(c1, v1);
    c2 = __builtin_ia32_crc32di(c2, v2);
  }
  uint32_t r = shift(t, (uint32_t)c) ^ (uint32_t)c1;
  return shift(t, r) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc,
                                                         const unsigned char *p,
                                                         size_t n) {
  uint64_t c = crc;
  while (n && ((uintptr_t)p & 7)) c = __builtin_ia32_crc32qi((uint32_t)c, *p++), n--;
  if (n >= 3 * SHORT_LANE) {
    pthread_once(&shift_once, make_shifts);
    for (; n >= 3 * LONG_LANE; p += 3 * LONG_LANE, n -= 3 * LONG_LANE)
      c = crc_3lanes(c, p, LONG_LANE, (const uint32_t(*)[256])shift_long);
    for (; n >= 3 * SHORT_LANE; p += 3 * SHORT_LANE, n -= 3 * SHORT_LANE)
      c = crc_3lanes(c, p, SHORT_LANE, (const uint32_t(*)[256])shift_short);
  }
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8, n -= 8;
  }
  while (n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
  return (uint32_t)c;
}
#endif

uint32_t stk_crc32c(uint32_t crc, const void *buf, size_t len) {
  const unsigned char *p = buf;
  crc = ~crc;
#if defined(__x86_64__)
  static int hw = -1; /* -1 unknown; benign race: every thread computes 0/1 */
  int h = __atomic_load_n(&hw, __ATOMIC_RELAXED);
  if (h < 0) {
    h = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    __atomic_store_n(&hw, h, __ATOMIC_RELAXED);
  }
  if (h) return ~crc_hw(crc, p, len);
#endif
  return ~crc_sw(crc, p, len);
}
