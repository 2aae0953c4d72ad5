/* resample.c - the pipelines' resampler: Pillow's separable 8-bit
 * fixed-point resampling (Resample.c's precompute_coeffs,
 * normalize_coeffs_8bpc, ImagingResampleHorizontal_8bpc and _Vertical_8bpc)
 * of a box of an RGB image, so that a resize matches a PIL image resized
 * by torchvision byte for byte when both start from the same pixels.
 *
 * The horizontal pass runs first, over the source rows the vertical pass
 * needs, into 8-bit rows (rounded and clipped as PIL's intermediate image
 * is), mirrored as it writes when asked; the vertical pass then makes each
 * output row and either writes it to the caller's buffer or hands it to a
 * callback (the batch store) while it is in cache. Weights are Pillow's
 * doubles rounded to 22-bit fixed point; sums are exact in 32-bit integers,
 * so every code path (portable C; an AVX2 horizontal pass 8 outputs at a
 * time and vertical pass 32 bytes of a row at a time, 16 outputs and 64
 * bytes with AVX-512 on CPUs with AVX-512 F + BW; on x86-64 CPUs without
 * AVX2 SSE2 passes; chosen at run time) gives the same bytes.
 *
 * Owns nothing but the scratch it is handed (buffers only grow: no
 * allocation per image in steady state); thread-safe with one scratch per
 * thread.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "augment/prof.h"

#define PREC 22 /* Pillow's PRECISION_BITS: 32 - 8 - 2 */

/* Pillow's filters (Resample.c), with their supports. */
static double filter_bilinear(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}
static double filter_bicubic(double x) {
  const double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}
static double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return sin(x) / x;
}
static double filter_lanczos(double x) {
  if (-3.0 <= x && x < 3.0) return sinc(x) * sinc(x / 3);
  return 0.0;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc for one axis: per
 * output, the first tap and the tap count (*bounds, 2 per output) and
 * ksize fixed-point weights (*kk + i * ksize, zero past the count; the
 * bounds follow the weights in the same block). *w_: one output's double
 * weights. 0, or -1 out of memory or an absurd support. */
static int coeffs(int32_t **bounds, int32_t **kk, size_t *cap, double **w_, size_t *wcap,
                  double in0, double in1, uint32_t size, uint32_t out, int filter,
                  int *ksize_out) {
  double (*f)(double) = filter == STK__FILTER_BICUBIC   ? filter_bicubic
                        : filter == STK__FILTER_LANCZOS ? filter_lanczos
                                                        : filter_bilinear;
  double fsupport = filter == STK__FILTER_BICUBIC   ? 2.0
                    : filter == STK__FILTER_LANCZOS ? 3.0
                                                    : 1.0;
  double scale = (in1 - in0) / out, filterscale = scale < 1.0 ? 1.0 : scale;
  double support = fsupport * filterscale;
  if (!(support < 1e6)) return -1; /* a box no sane job asks for */
  int ksize = (int)ceil(support) * 2 + 1;
  size_t need =
      (size_t)out * (size_t)ksize * sizeof(int32_t) + (size_t)out * 2 * sizeof(int32_t);
  if (stk__grow((void **)kk, cap, need) ||
      stk__grow((void **)w_, wcap, (size_t)ksize * sizeof(double)))
    return -1;
  int32_t *k = *kk, *b = k + (size_t)out * ksize;
  double *w = *w_;
  for (uint32_t i = 0; i < out; i++) {
    double center = in0 + (i + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
    double lo = center - support + 0.5, hi = center + support + 0.5;
    int xmin = lo < 0 ? 0 : (int)lo;
    int xmax = hi > (double)size ? (int)size : hi < 0 ? 0 : (int)hi;
    xmax -= xmin;
    if (xmax < 0) xmax = 0;
    if (xmax > ksize) xmax = ksize;
    for (int x = 0; x < xmax; x++) {
      double v = f((x + xmin - center + 0.5) * ss);
      w[x] = v;
      ww += v;
    }
    int32_t *ki = k + (size_t)i * ksize;
    for (int x = 0; x < xmax; x++) {
      double v = ww != 0.0 ? w[x] / ww : w[x];
      ki[x] =
          v < 0 ? (int32_t)(-0.5 + v * (1 << PREC)) : (int32_t)(0.5 + v * (1 << PREC));
    }
    for (int x = xmax; x < ksize; x++) ki[x] = 0;
    b[2 * i] = xmin;
    b[2 * i + 1] = xmax;
  }
  *bounds = b;
  *ksize_out = ksize;
  return 0;
}

static inline uint8_t clip8(uint32_t s) {
  int32_t v = (int32_t)s >> PREC; /* arithmetic: a negative sum clips to 0 */
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

typedef uint32_t v4su __attribute__((vector_size(16)));
typedef uint8_t v4qu __attribute__((vector_size(4)));

/* The loops, written once and compiled twice (portable and AVX2). */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Horizontal pass of rows [0, rows) of src (stride sst bytes) into dst
 * (ow RGB pixels a row, packed); output i goes to ow - 1 - i when flip.
 * Each tap loads 4 bytes (RGB + the next pixel's R, weighted into a lane
 * that is dropped): src must be readable 1 byte past each row's taps. The
 * sums wrap in unsigned 32-bit arithmetic, as the vertical pass's. */
ALWAYS_INLINE void hpass_body(uint8_t *restrict dst, const uint8_t *restrict src,
                              size_t sst, uint32_t rows, uint32_t ow,
                              const int32_t *restrict b, const int32_t *restrict kk,
                              int ksize, int flip) {
  for (uint32_t y = 0; y < rows; y++) {
    const uint8_t *in = src + (size_t)y * sst;
    uint8_t *o = dst + (size_t)y * ow * 3;
    for (uint32_t i = 0; i < ow; i++) {
      const int32_t *k = kk + (size_t)i * ksize;
      const uint8_t *p = in + (size_t)b[2 * i] * 3;
      int32_t n = b[2 * i + 1];
      v4su acc = {1u << (PREC - 1), 1u << (PREC - 1), 1u << (PREC - 1), 1u << (PREC - 1)};
      for (int32_t t = 0; t < n; t++, p += 3) {
        v4qu u;
        memcpy(&u, p, 4);
        acc += __builtin_convertvector(u, v4su) * (uint32_t)k[t];
      }
      uint8_t *q = o + 3 * (size_t)(flip ? ow - 1 - i : i);
      q[0] = clip8(acc[0]), q[1] = clip8(acc[1]), q[2] = clip8(acc[2]);
    }
  }
}

/* One output row of the vertical pass: n rows of `len` bytes, `st` apart,
 * from r, weighted by k, into o. acc: len int32 of scratch. The sums wrap
 * in unsigned 32-bit arithmetic: exact where Pillow's int32 sums are (a
 * box inside the source), defined where they would overflow (weights
 * normalized over a few taps of a box far outside it). */
ALWAYS_INLINE void vrow_body(uint8_t *restrict o, const uint8_t *restrict r, size_t st,
                             size_t len, const int32_t *restrict k, int32_t n,
                             int32_t *restrict acc) {
  uint32_t *restrict u = (uint32_t *)acc;
  uint32_t k0 = n > 0 ? (uint32_t)k[0] : 0;
  for (size_t i = 0; i < len; i++) u[i] = (1u << (PREC - 1)) + r[i] * k0;
  int32_t t = 1;
  for (; t + 1 < n; t += 2) { /* two taps a sweep: half the acc traffic */
    const uint8_t *restrict a = r + (size_t)t * st, *restrict c = a + st;
    uint32_t ka = (uint32_t)k[t], kc = (uint32_t)k[t + 1];
    for (size_t i = 0; i < len; i++) u[i] += a[i] * ka + c[i] * kc;
  }
  if (t < n) {
    const uint8_t *restrict a = r + (size_t)t * st;
    uint32_t ka = (uint32_t)k[t];
    for (size_t i = 0; i < len; i++) u[i] += a[i] * ka;
  }
  for (size_t i = 0; i < len; i++) {
    int32_t v = (int32_t)u[i] >> PREC;
    o[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
  }
}

static void hpass_c(uint8_t *restrict dst, const uint8_t *restrict src, size_t sst,
                    uint32_t rows, uint32_t ow, const int32_t *restrict b,
                    const int32_t *restrict kk, int ksize, int flip) {
  hpass_body(dst, src, sst, rows, ow, b, kk, ksize, flip);
}
static void vrow_c(uint8_t *restrict o, const uint8_t *restrict r, size_t st, size_t len,
                   const int32_t *restrict k, int32_t n, int32_t *restrict acc) {
  vrow_body(o, r, st, len, k, n, acc);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_BUILD 1
#include <immintrin.h>

/* AVX2 horizontal pass, exact, 8 output pixels at a time. Pillow's 22-bit
 * weights split as k = hi * 2^11 + lo (lo in [0, 2^11)), both halves
 * 16-bit, so vpmaddwd multiplies two taps of three channels at once. A
 * group of 8 output positions (in the order they are written: the
 * mirrored outputs when flip) runs in four vectors, vector m holding
 * position m in its low 128-bit lane and position 4 + m in its high lane
 * (lanes R, G, B, 0); each step adds one pair of taps to all 8 (as many
 * steps as the group's widest output has pairs; weights past an output's
 * taps are 0). The sums are rebuilt exactly as (sum_hi << 11) + sum_lo in
 * 32 bits, rounded, clipped and packed, and the 24 bytes written with two
 * 16-byte stores: a row's last group writes up to 28 bytes past its last
 * pixel (the next row's start, written later, or the buffer's spare
 * bytes). A step's 16-byte load reaches 10 bytes past its pair: a group
 * reads up to 6 * steps + 10 bytes from an output's first tap. */
typedef struct {
  int32_t off[16]; /* each position's first tap, in bytes from the row start */
  int32_t steps;   /* pairs of taps */
  int32_t vec;     /* its first weight vector: steps x 4 x (hi, lo) */
  int32_t pad[14]; /* 128 bytes: the vectors after the groups stay aligned */
} hgroup;

/* Per group of 4 * lanes positions (8 for the AVX2 and SSE2 passes, 16
 * for the AVX-512 one; ceil(ow / (4 * lanes)) groups) its hgroup in g and
 * its weight vectors in kv, from Pillow's bounds b and weights kk (ksize
 * a row); positions past ow (the last group's padding) and outputs
 * without taps read the row's start with weights 0. 0, or -1 when a
 * weight's high half does not fit 16 bits (|k| >= 2^26: only a box
 * reaching far outside the source, which Pillow refuses, normalizes a
 * few taps to such weights): then the portable pass runs. */
static int prep_groups(hgroup *g, int32_t *kv, const int32_t *b, const int32_t *kk,
                       int ksize, uint32_t ow, int flip, int lanes) {
  uint32_t gs = 4 * (uint32_t)lanes, ng = (ow + gs - 1) / gs;
  int32_t vec = 0;
  for (uint32_t gi = 0; gi < ng; gi++) {
    const int32_t *k[16];
    int32_t n[16], steps = 0;
    for (int q = 0; q < (int)gs; q++) {
      uint32_t j = gs * gi + (uint32_t)q, i = flip ? ow - 1 - j : j;
      n[q] = j < ow ? b[2 * i + 1] : 0;
      k[q] = n[q] ? kk + (size_t)i * ksize : NULL;
      g[gi].off[q] = n[q] ? b[2 * i] * 3 : 0;
      if ((n[q] + 1) / 2 > steps) steps = (n[q] + 1) / 2;
      for (int32_t t = 0; t < n[q]; t++)
        if (k[q][t] >> 11 > INT16_MAX || k[q][t] >> 11 < INT16_MIN) return -1;
    }
    g[gi].steps = steps;
    g[gi].vec = vec;
    for (int32_t t = 0; t < steps; t++)
      for (int m = 0; m < 4; m++) {
        int32_t *hi = kv + (size_t)(vec + (t * 4 + m) * 2) * 4 * lanes,
                *lo = hi + 4 * lanes;
        for (int lane = 0; lane < lanes; lane++) {
          int q = m + 4 * lane;
          int32_t k0 = 2 * t < n[q] ? k[q][2 * t] : 0;
          int32_t k1 = 2 * t + 1 < n[q] ? k[q][2 * t + 1] : 0;
          /* arithmetic shift: hi * 2^11 + (k & 2047) == k for negatives too */
          uint32_t h = (uint16_t)(int16_t)(k0 >> 11) |
                       (uint32_t)(uint16_t)(int16_t)(k1 >> 11) << 16;
          uint32_t l = (uint32_t)(k0 & 2047) | (uint32_t)(k1 & 2047) << 16;
          for (int c = 0; c < 4; c++)
            hi[4 * lane + c] = c < 3 ? (int32_t)h : 0,
                          lo[4 * lane + c] = c < 3 ? (int32_t)l : 0;
        }
      }
    vec += steps * 8;
  }
  return 0;
}

/* The bytes of weight vectors prep_groups may write for ow outputs of
 * ksize taps in groups of 4 * lanes positions. */
static size_t kv_bytes(uint32_t ow, int ksize, int lanes) {
  uint32_t gs = 4 * (uint32_t)lanes;
  return (size_t)((ow + gs - 1) / gs) * (size_t)((ksize + 1) / 2) * 8 * 16 *
         (size_t)lanes;
}

/* Two 16-byte loads, a in the low lane and c in the high one. */
#define LOAD2(a, c)                                                                      \
  _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a))), \
                          _mm_loadu_si128((const __m128i *)(c)), 1)

__attribute__((target("avx2"))) static void hpass_avx2(
    uint8_t *restrict dst, const uint8_t *restrict src, size_t sst, uint32_t rows,
    uint32_t ow, const hgroup *restrict gs, const __m256i *restrict kv) {
  /* a pair of taps: R0 R1 G0 G1 B0 B1 0 0 as 16-bit values, per lane */
  const __m256i shuf =
      _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1, 0, -1, 3,
                       -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  /* four RGB0 pixels to 12 packed bytes, per lane */
  const __m256i pack =
      _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0, 1, 2, 4,
                       5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m256i half = _mm256_set1_epi32(1 << (PREC - 1));
  uint32_t ng = (ow + 7) / 8;
  for (uint32_t y = 0; y < rows; y++) {
    const uint8_t *in = src + (size_t)y * sst;
    uint8_t *o = dst + (size_t)y * ow * 3;
    for (uint32_t gi = 0; gi < ng; gi++, o += 24) {
      const hgroup *g = gs + gi;
      const __m256i *k = kv + g->vec;
      const uint8_t *p0 = in + g->off[0], *p1 = in + g->off[1], *p2 = in + g->off[2],
                    *p3 = in + g->off[3], *p4 = in + g->off[4], *p5 = in + g->off[5],
                    *p6 = in + g->off[6], *p7 = in + g->off[7];
      __m256i h0 = _mm256_setzero_si256(), h1 = h0, h2 = h0, h3 = h0;
      __m256i l0 = h0, l1 = h0, l2 = h0, l3 = h0;
      for (int32_t t = 0, steps = g->steps; t < steps; t++, k += 8) {
        size_t d = (size_t)t * 6;
        __m256i x0 = _mm256_shuffle_epi8(LOAD2(p0 + d, p4 + d), shuf);
        __m256i x1 = _mm256_shuffle_epi8(LOAD2(p1 + d, p5 + d), shuf);
        __m256i x2 = _mm256_shuffle_epi8(LOAD2(p2 + d, p6 + d), shuf);
        __m256i x3 = _mm256_shuffle_epi8(LOAD2(p3 + d, p7 + d), shuf);
        h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(x0, _mm256_load_si256(k)));
        l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(x0, _mm256_load_si256(k + 1)));
        h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(x1, _mm256_load_si256(k + 2)));
        l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(x1, _mm256_load_si256(k + 3)));
        h2 = _mm256_add_epi32(h2, _mm256_madd_epi16(x2, _mm256_load_si256(k + 4)));
        l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(x2, _mm256_load_si256(k + 5)));
        h3 = _mm256_add_epi32(h3, _mm256_madd_epi16(x3, _mm256_load_si256(k + 6)));
        l3 = _mm256_add_epi32(l3, _mm256_madd_epi16(x3, _mm256_load_si256(k + 7)));
      }
      /* wrapping 32-bit sums: exact, as the whole fits in 32 bits */
#define FINISH(h, l) \
  _mm256_srai_epi32( \
      _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h, 11), l), half), PREC)
      __m256i v0 = FINISH(h0, l0), v1 = FINISH(h1, l1), v2 = FINISH(h2, l2),
              v3 = FINISH(h3, l3);
#undef FINISH
      /* positions 0-3 in the low lane, 4-7 in the high one, clipped */
      __m256i v =
          _mm256_packus_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
      v = _mm256_shuffle_epi8(v, pack);
      _mm_storeu_si128((__m128i *)(void *)o, _mm256_castsi256_si128(v));
      _mm_storeu_si128((__m128i *)(void *)(o + 12), _mm256_extracti128_si256(v, 1));
    }
  }
}

/* AVX-512 (F + BW) horizontal pass, exact: hpass_avx2 on groups of 16
 * positions (prep_groups with 4 lanes), vector m holding positions m,
 * 4 + m, 8 + m and 12 + m in its four 128-bit lanes. The 48 bytes of a
 * group are gathered by one dword permute and written with a masked
 * store of the row's bytes only; its loads are hpass_avx2's. */
__attribute__((target("avx512f,avx512bw"))) static void hpass_avx512(
    uint8_t *restrict dst, const uint8_t *restrict src, size_t sst, uint32_t rows,
    uint32_t ow, const hgroup *restrict gs, const __m512i *restrict kv) {
  const __m512i shuf = _mm512_broadcast_i32x4(
      _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1));
  const __m512i pack = _mm512_broadcast_i32x4(
      _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
  const __m512i gather =
      _mm512_setr_epi32(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 0, 0, 0, 0);
  const __m512i half = _mm512_set1_epi32(1 << (PREC - 1));
  uint32_t ng = (ow + 15) / 16;
  for (uint32_t y = 0; y < rows; y++) {
    const uint8_t *in = src + (size_t)y * sst;
    uint8_t *o = dst + (size_t)y * ow * 3;
    for (uint32_t gi = 0; gi < ng; gi++, o += 48) {
      const hgroup *g = gs + gi;
      const __m512i *k = kv + g->vec;
      const uint8_t *p[16];
      for (int q = 0; q < 16; q++) p[q] = in + g->off[q];
      __m512i h0 = _mm512_setzero_si512(), h1 = h0, h2 = h0, h3 = h0;
      __m512i l0 = h0, l1 = h0, l2 = h0, l3 = h0;
#define LOAD4(a, b, c, e)                                                              \
  _mm512_inserti32x4(                                                                  \
      _mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(_mm_loadu_si128(    \
                                                (const __m128i *)(const void *)(a))),  \
                                            _mm_loadu_si128((const __m128i *)(b)), 1), \
                         _mm_loadu_si128((const __m128i *)(c)), 2),                    \
      _mm_loadu_si128((const __m128i *)(e)), 3)
      for (int32_t t = 0, steps = g->steps; t < steps; t++, k += 8) {
        size_t d = (size_t)t * 6;
        __m512i x0 =
            _mm512_shuffle_epi8(LOAD4(p[0] + d, p[4] + d, p[8] + d, p[12] + d), shuf);
        __m512i x1 =
            _mm512_shuffle_epi8(LOAD4(p[1] + d, p[5] + d, p[9] + d, p[13] + d), shuf);
        __m512i x2 =
            _mm512_shuffle_epi8(LOAD4(p[2] + d, p[6] + d, p[10] + d, p[14] + d), shuf);
        __m512i x3 =
            _mm512_shuffle_epi8(LOAD4(p[3] + d, p[7] + d, p[11] + d, p[15] + d), shuf);
        h0 = _mm512_add_epi32(h0, _mm512_madd_epi16(x0, _mm512_load_si512(k)));
        l0 = _mm512_add_epi32(l0, _mm512_madd_epi16(x0, _mm512_load_si512(k + 1)));
        h1 = _mm512_add_epi32(h1, _mm512_madd_epi16(x1, _mm512_load_si512(k + 2)));
        l1 = _mm512_add_epi32(l1, _mm512_madd_epi16(x1, _mm512_load_si512(k + 3)));
        h2 = _mm512_add_epi32(h2, _mm512_madd_epi16(x2, _mm512_load_si512(k + 4)));
        l2 = _mm512_add_epi32(l2, _mm512_madd_epi16(x2, _mm512_load_si512(k + 5)));
        h3 = _mm512_add_epi32(h3, _mm512_madd_epi16(x3, _mm512_load_si512(k + 6)));
        l3 = _mm512_add_epi32(l3, _mm512_madd_epi16(x3, _mm512_load_si512(k + 7)));
      }
#undef LOAD4
#define FINISH(h, l) \
  _mm512_srai_epi32( \
      _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(h, 11), l), half), PREC)
      __m512i v = _mm512_packus_epi16(_mm512_packs_epi32(FINISH(h0, l0), FINISH(h1, l1)),
                                      _mm512_packs_epi32(FINISH(h2, l2), FINISH(h3, l3)));
#undef FINISH
      /* lane L: positions 4L..4L+3 as 12 bytes, then the four lanes packed */
      v = _mm512_permutexvar_epi32(gather, _mm512_shuffle_epi8(v, pack));
      uint32_t left = ow - 16 * gi, nb = left >= 16 ? 48 : 3 * left;
      _mm512_mask_storeu_epi8(o, ((__mmask64)1 << nb) - 1, v);
    }
  }
}

/* SSE2 horizontal pass, exact, on prep_groups's groups and weights (for
 * x86-64 CPUs without AVX2): the same arithmetic as hpass_avx2, one output
 * position per 128-bit vector (lanes R, G, B, 0), four at a time, the
 * group's half of each weight vector. SSE2 has no byte shuffle, so a pair
 * of taps is interleaved by unpacking: each tap's 4 bytes (RGB and the
 * next pixel's R, weighted 0) widened to 16 bits, then the two taps'
 * words interleaved (R0 R1 G0 G1 B0 B1 x x). Its loads reach 7 bytes past
 * a pair's first byte, within hpass_avx2's bound; its writes are
 * hpass_avx2's (24 bytes a group). */
static inline __m128i sse2_pair(const uint8_t *p) {
  int32_t a, b;
  memcpy(&a, p, 4);
  memcpy(&b, p + 3, 4);
  const __m128i z = _mm_setzero_si128();
  __m128i x = _mm_unpacklo_epi8(_mm_cvtsi32_si128(a), z);
  __m128i y = _mm_unpacklo_epi8(_mm_cvtsi32_si128(b), z);
  return _mm_unpacklo_epi16(x, y);
}

static void hpass_sse2(uint8_t *restrict dst, const uint8_t *restrict src, size_t sst,
                       uint32_t rows, uint32_t ow, const hgroup *restrict gs,
                       const __m256i *restrict kv) {
  const __m128i half = _mm_set1_epi32(1 << (PREC - 1));
  uint32_t ng = (ow + 7) / 8;
  for (uint32_t y = 0; y < rows; y++) {
    const uint8_t *in = src + (size_t)y * sst;
    uint8_t *o = dst + (size_t)y * ow * 3;
    for (uint32_t gi = 0; gi < ng; gi++, o += 24) {
      const hgroup *g = gs + gi;
      for (int lane = 0; lane < 2; lane++) {
        /* positions 4 * lane + m: lane `lane` of the weight vectors */
        const __m128i *k = (const __m128i *)(const void *)(kv + g->vec) + lane;
        const uint8_t *p0 = in + g->off[4 * lane], *p1 = in + g->off[4 * lane + 1],
                      *p2 = in + g->off[4 * lane + 2], *p3 = in + g->off[4 * lane + 3];
        __m128i h0 = _mm_setzero_si128(), h1 = h0, h2 = h0, h3 = h0;
        __m128i l0 = h0, l1 = h0, l2 = h0, l3 = h0;
        for (int32_t t = 0, steps = g->steps; t < steps; t++, k += 16) {
          size_t d = (size_t)t * 6;
          __m128i x0 = sse2_pair(p0 + d), x1 = sse2_pair(p1 + d);
          __m128i x2 = sse2_pair(p2 + d), x3 = sse2_pair(p3 + d);
          /* vector j of the step (j = 2m hi, 2m + 1 lo) is 2 __m128i */
          h0 = _mm_add_epi32(h0, _mm_madd_epi16(x0, _mm_load_si128(k)));
          l0 = _mm_add_epi32(l0, _mm_madd_epi16(x0, _mm_load_si128(k + 2)));
          h1 = _mm_add_epi32(h1, _mm_madd_epi16(x1, _mm_load_si128(k + 4)));
          l1 = _mm_add_epi32(l1, _mm_madd_epi16(x1, _mm_load_si128(k + 6)));
          h2 = _mm_add_epi32(h2, _mm_madd_epi16(x2, _mm_load_si128(k + 8)));
          l2 = _mm_add_epi32(l2, _mm_madd_epi16(x2, _mm_load_si128(k + 10)));
          h3 = _mm_add_epi32(h3, _mm_madd_epi16(x3, _mm_load_si128(k + 12)));
          l3 = _mm_add_epi32(l3, _mm_madd_epi16(x3, _mm_load_si128(k + 14)));
        }
#define FINISH(h, l) \
  _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(h, 11), l), half), PREC)
        __m128i v = _mm_packus_epi16(_mm_packs_epi32(FINISH(h0, l0), FINISH(h1, l1)),
                                     _mm_packs_epi32(FINISH(h2, l2), FINISH(h3, l3)));
#undef FINISH
        uint8_t px[16];
        _mm_storeu_si128((__m128i *)(void *)px, v);
        uint8_t *q = o + 12 * lane;
        memcpy(q, px, 3), memcpy(q + 3, px + 4, 3);
        memcpy(q + 6, px + 8, 3), memcpy(q + 9, px + 12, 3);
      }
    }
  }
}

/* SSE2 vertical pass row (vrow_body's sums): 16 bytes of the row at a
 * time, their sums kept in registers over all taps, two taps a step with
 * pmaddwd on the weights' 11-bit halves (as the horizontal passes), the
 * last odd tap paired with a weight of 0; the row's last len % 16 bytes
 * as vrow_body. A weight whose high half does not fit 16 bits (see
 * prep_groups) sends the row to vrow_body. */
static void vrow_sse2(uint8_t *restrict o, const uint8_t *restrict r, size_t st,
                      size_t len, const int32_t *restrict k, int32_t n,
                      int32_t *restrict acc) {
  for (int32_t t = 0; t < n; t++)
    if (k[t] >> 11 > INT16_MAX || k[t] >> 11 < INT16_MIN) {
      vrow_body(o, r, st, len, k, n, acc);
      return;
    }
  const __m128i z = _mm_setzero_si128(), half = _mm_set1_epi32(1 << (PREC - 1));
  size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    __m128i s0 = half, s1 = half, s2 = half, s3 = half;
    for (int32_t t = 0; t < n; t += 2) {
      int32_t k0 = k[t], k1 = t + 1 < n ? k[t + 1] : 0;
      const uint8_t *pa = r + (size_t)t * st + i, *pc = t + 1 < n ? pa + st : pa;
      __m128i kh =
          _mm_set1_epi32((int32_t)((uint32_t)(uint16_t)(int16_t)(k0 >> 11) |
                                   (uint32_t)(uint16_t)(int16_t)(k1 >> 11) << 16));
      __m128i kl =
          _mm_set1_epi32((int32_t)((uint32_t)(k0 & 2047) | (uint32_t)(k1 & 2047) << 16));
      __m128i a = _mm_loadu_si128((const __m128i *)(const void *)pa);
      __m128i c = _mm_loadu_si128((const __m128i *)(const void *)pc);
      __m128i lo = _mm_unpacklo_epi8(a, c), hi = _mm_unpackhi_epi8(a, c);
      __m128i w0 = _mm_unpacklo_epi8(lo, z), w1 = _mm_unpackhi_epi8(lo, z);
      __m128i w2 = _mm_unpacklo_epi8(hi, z), w3 = _mm_unpackhi_epi8(hi, z);
#define STEP(sum, w)                                                                \
  sum = _mm_add_epi32(sum, _mm_add_epi32(_mm_slli_epi32(_mm_madd_epi16(w, kh), 11), \
                                         _mm_madd_epi16(w, kl)))
      STEP(s0, w0);
      STEP(s1, w1);
      STEP(s2, w2);
      STEP(s3, w3);
#undef STEP
    }
    s0 = _mm_srai_epi32(s0, PREC), s1 = _mm_srai_epi32(s1, PREC);
    s2 = _mm_srai_epi32(s2, PREC), s3 = _mm_srai_epi32(s3, PREC);
    _mm_storeu_si128((__m128i *)(void *)(o + i),
                     _mm_packus_epi16(_mm_packs_epi32(s0, s1), _mm_packs_epi32(s2, s3)));
  }
  if (i < len) vrow_body(o + i, r + i, st, len - i, k, n, acc);
}

/* AVX-512 (F + BW) vertical pass row (vrow_body's sums), for Intel's
 * AVX-512 CPUs and AMD's Zen 4 and later: vrow_sse2's arithmetic on 64
 * bytes of the row at a time, their sums in 8 registers over all taps
 * (the weights' 11-bit halves summed apart, two taps a step, and joined
 * once at the end: (sum_hi << 11) + sum_lo wraps in 32 bits as the
 * reference's sums do). The row's last len % 64 bytes go through masked
 * loads and stores (no read or write past the row). Rows of over 128 taps,
 * or a weight whose high half does not fit 16 bits, go to vrow_body. */
#define VPAIRS 64

/* The n weights of a vertical row (n <= 2 * VPAIRS) as (n + 1) / 2 pairs
 * of taps, each pair's 11-bit high and low halves packed as two 16-bit
 * words into kh[p] and kl[p] (the last odd tap paired with 0). 0, or -1
 * when a high half does not fit 16 bits (see prep_groups). */
static int split_pairs(uint32_t *kh, uint32_t *kl, const int32_t *k, int32_t n) {
  for (int32_t p = 0; 2 * p < n; p++) {
    int32_t k0 = k[2 * p], k1 = 2 * p + 1 < n ? k[2 * p + 1] : 0;
    if (k0 >> 11 > INT16_MAX || k0 >> 11 < INT16_MIN || k1 >> 11 > INT16_MAX ||
        k1 >> 11 < INT16_MIN)
      return -1;
    kh[p] = (uint32_t)(uint16_t)(int16_t)(k0 >> 11) |
            (uint32_t)(uint16_t)(int16_t)(k1 >> 11) << 16;
    kl[p] = (uint32_t)(k0 & 2047) | (uint32_t)(k1 & 2047) << 16;
  }
  return 0;
}

__attribute__((target("avx512f,avx512bw"))) static void vrow_avx512(
    uint8_t *restrict o, const uint8_t *restrict r, size_t st, size_t len,
    const int32_t *restrict k, int32_t n, int32_t *restrict acc) {
  int32_t np = (n + 1) / 2;
  uint32_t kh[VPAIRS], kl[VPAIRS];
  if (np > VPAIRS || split_pairs(kh, kl, k, n)) {
    vrow_body(o, r, st, len, k, n, acc);
    return;
  }
  const __m512i z = _mm512_setzero_si512(), half = _mm512_set1_epi32(1 << (PREC - 1));
  for (size_t i = 0; i < len; i += 64) {
    __mmask64 m = len - i >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (len - i)) - 1;
    __m512i h0 = z, h1 = z, h2 = z, h3 = z, l0 = z, l1 = z, l2 = z, l3 = z;
    for (int32_t p = 0; p < np; p++) {
      const uint8_t *pa = r + (size_t)(2 * p) * st + i;
      const uint8_t *pc = 2 * p + 1 < n ? pa + st : pa; /* weight 0 when odd */
      __m512i a = _mm512_maskz_loadu_epi8(m, pa), c = _mm512_maskz_loadu_epi8(m, pc);
      __m512i vh = _mm512_set1_epi32((int32_t)kh[p]),
              vl = _mm512_set1_epi32((int32_t)kl[p]);
      __m512i lo = _mm512_unpacklo_epi8(a, c), hi = _mm512_unpackhi_epi8(a, c);
      __m512i w0 = _mm512_unpacklo_epi8(lo, z), w1 = _mm512_unpackhi_epi8(lo, z);
      __m512i w2 = _mm512_unpacklo_epi8(hi, z), w3 = _mm512_unpackhi_epi8(hi, z);
      h0 = _mm512_add_epi32(h0, _mm512_madd_epi16(w0, vh));
      l0 = _mm512_add_epi32(l0, _mm512_madd_epi16(w0, vl));
      h1 = _mm512_add_epi32(h1, _mm512_madd_epi16(w1, vh));
      l1 = _mm512_add_epi32(l1, _mm512_madd_epi16(w1, vl));
      h2 = _mm512_add_epi32(h2, _mm512_madd_epi16(w2, vh));
      l2 = _mm512_add_epi32(l2, _mm512_madd_epi16(w2, vl));
      h3 = _mm512_add_epi32(h3, _mm512_madd_epi16(w3, vh));
      l3 = _mm512_add_epi32(l3, _mm512_madd_epi16(w3, vl));
    }
#define FINISH(h, l) \
  _mm512_srai_epi32( \
      _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(h, 11), l), half), PREC)
    /* per 128-bit lane, as vrow_sse2: bytes 0-3, 4-7, 8-11, 12-15 */
    __m512i v = _mm512_packus_epi16(_mm512_packs_epi32(FINISH(h0, l0), FINISH(h1, l1)),
                                    _mm512_packs_epi32(FINISH(h2, l2), FINISH(h3, l3)));
#undef FINISH
    _mm512_mask_storeu_epi8(o + i, m, v);
  }
}

/* AVX2 vertical pass row: vrow_avx512's arithmetic on 32 bytes of the
 * row at a time (sums in 8 registers over all taps); the row's last
 * len % 32 bytes, rows of over 128 taps and weights whose high half does
 * not fit 16 bits as vrow_body. */
__attribute__((target("avx2"))) static void vrow_avx2(uint8_t *restrict o,
                                                      const uint8_t *restrict r,
                                                      size_t st, size_t len,
                                                      const int32_t *restrict k,
                                                      int32_t n, int32_t *restrict acc) {
  int32_t np = (n + 1) / 2;
  uint32_t kh[VPAIRS], kl[VPAIRS];
  if (np > VPAIRS || split_pairs(kh, kl, k, n)) {
    vrow_body(o, r, st, len, k, n, acc);
    return;
  }
  const __m256i z = _mm256_setzero_si256(), half = _mm256_set1_epi32(1 << (PREC - 1));
  size_t i = 0;
  for (; i + 32 <= len; i += 32) {
    __m256i h0 = z, h1 = z, h2 = z, h3 = z, l0 = z, l1 = z, l2 = z, l3 = z;
    for (int32_t p = 0; p < np; p++) {
      const uint8_t *pa = r + (size_t)(2 * p) * st + i;
      const uint8_t *pc = 2 * p + 1 < n ? pa + st : pa; /* weight 0 when odd */
      __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)pa);
      __m256i c = _mm256_loadu_si256((const __m256i *)(const void *)pc);
      __m256i vh = _mm256_set1_epi32((int32_t)kh[p]);
      __m256i vl = _mm256_set1_epi32((int32_t)kl[p]);
      __m256i lo = _mm256_unpacklo_epi8(a, c), hi = _mm256_unpackhi_epi8(a, c);
      __m256i w0 = _mm256_unpacklo_epi8(lo, z), w1 = _mm256_unpackhi_epi8(lo, z);
      __m256i w2 = _mm256_unpacklo_epi8(hi, z), w3 = _mm256_unpackhi_epi8(hi, z);
      h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(w0, vh));
      l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(w0, vl));
      h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(w1, vh));
      l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(w1, vl));
      h2 = _mm256_add_epi32(h2, _mm256_madd_epi16(w2, vh));
      l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(w2, vl));
      h3 = _mm256_add_epi32(h3, _mm256_madd_epi16(w3, vh));
      l3 = _mm256_add_epi32(l3, _mm256_madd_epi16(w3, vl));
    }
#define FINISH(h, l) \
  _mm256_srai_epi32( \
      _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h, 11), l), half), PREC)
    __m256i v = _mm256_packus_epi16(_mm256_packs_epi32(FINISH(h0, l0), FINISH(h1, l1)),
                                    _mm256_packs_epi32(FINISH(h2, l2), FINISH(h3, l3)));
#undef FINISH
    _mm256_storeu_si256((__m256i *)(void *)(o + i), v);
  }
  if (i < len) vrow_body(o + i, r + i, st, len - i, k, n, acc);
}
#undef VPAIRS
#endif

static int chosen; /* 0 unknown, 1 C, 2 AVX2, 3 SSE2, 4 AVX-512 */

void stk__resample_force_c(int on) {
  __atomic_store_n(&chosen, on ? 1 : 0, __ATOMIC_RELAXED);
}

/* 4 where the AVX-512 (F + BW) passes run (the stores stay AVX2), else
 * 2 where the AVX2 kernels run, else 3 (SSE2: every x86-64 CPU).
 * STOKER_RESAMPLE=c picks 1 (portable), =sse2 3, =avx2 2 (on a CPU that
 * has it). Chosen on first use (again after stk__resample_force_c(0)); a
 * race picks the same. */
static int pick(void) {
#ifdef HAVE_AVX2_BUILD
  int k = __atomic_load_n(&chosen, __ATOMIC_RELAXED);
  if (!k) {
    const char *e = getenv("STOKER_RESAMPLE");
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2");
    int avx512 =
        avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    k = e && !strcmp(e, "c")                   ? 1
        : (e && !strcmp(e, "sse2")) || !avx2   ? 3
        : (e && !strcmp(e, "avx2")) || !avx512 ? 2
                                               : 4;
    __atomic_store_n(&chosen, k, __ATOMIC_RELAXED);
  }
  return k;
#else
  return 1;
#endif
}

const char *stk__resample_kernels(void) {
  int k = pick();
  return k == 4 ? "avx512" : k == 2 ? "avx2" : k == 3 ? "sse2" : "c";
}

int stk__resample_rows(stk__scratch *s, const uint8_t *src, uint32_t sw, uint32_t sh,
                       double bx0, double by0, double bx1, double by1, uint32_t ow,
                       uint32_t oh, int filter, int flip, uint8_t *out8, stk__row_fn emit,
                       void *ctx) {
  if (!ow || !oh || !sw || !sh) return 0;
  uint64_t t = stk__prof_start();
  int kn = pick();
  int kx, ky;
  int32_t *xb, *yb;
  if (coeffs(&xb, &s->xk, &s->xcap, &s->kw, &s->kwcap, bx0, bx1, sw, ow, filter, &kx))
    return -1;
  if (coeffs(&yb, &s->yk, &s->ycap, &s->kw, &s->kwcap, by0, by1, sh, oh, filter, &ky))
    return -1;
  /* the source rows the vertical pass reads (Pillow's ybox) */
  int32_t y0 = INT32_MAX, y1 = 0;
  for (uint32_t j = 0; j < oh; j++) {
    if (!yb[2 * j + 1]) continue;
    if (yb[2 * j] < y0) y0 = yb[2 * j];
    if (yb[2 * j] + yb[2 * j + 1] > y1) y1 = yb[2 * j] + yb[2 * j + 1];
  }
  if (y1 <= y0) y0 = y1 = 0;
  size_t rowlen = (size_t)ow * 3, rows = (size_t)(y1 - y0), sst = (size_t)sw * 3;
  /* bytes a horizontal pass may read past a row's last tap (the C loop 1,
   * the AVX2 and AVX-512 ones, which load the same 16-byte pieces,
   * 6 * steps + 10 from an output's first tap) */
  size_t over = (size_t)3 * kx + 16;
  if (stk__grow((void **)&s->tmp, &s->tcap, rows * rowlen + 32) ||
      stk__grow((void **)&s->acc, &s->acap, rowlen * sizeof(int32_t)) ||
      stk__grow((void **)&s->row, &s->rcap, rowlen + 1) ||
      stk__grow((void **)&s->last, &s->lcap, sst + over))
    return -1;
#ifdef HAVE_AVX2_BUILD
  hgroup *hg = NULL;
  __m256i *kv = NULL;
  if (kn >= 2) {
    /* the groups, then the vectors, 32-byte aligned inside the block */
    int lanes = kn == 4 ? 4 : 2;
    size_t ng = (ow + 4 * lanes - 1) / (4 * lanes);
    size_t bytes = ng * sizeof(hgroup) + kv_bytes(ow, kx, lanes) + 64;
    if (stk__grow((void **)&s->kv, &s->kvcap, bytes)) return -1;
    hg = (hgroup *)(void *)(((uintptr_t)s->kv + 63) & ~(uintptr_t)63);
    kv = (__m256i *)(void *)(hg + ng);
    if (prep_groups(hg, (int32_t *)(void *)kv, xb, s->xk, kx, ow, flip, lanes)) hg = NULL;
  }
#define HPASS(d, sp, n)                                                               \
  (hg && kn == 4   ? hpass_avx512(d, sp, sst, n, ow, hg, (const __m512i *)(void *)kv) \
   : hg && kn == 2 ? hpass_avx2(d, sp, sst, n, ow, hg, kv)                            \
   : hg            ? hpass_sse2(d, sp, sst, n, ow, hg, kv)                            \
                   : hpass_c(d, sp, sst, n, ow, xb, s->xk, kx, flip))
#define VROW(...)                       \
  (kn == 4   ? vrow_avx512(__VA_ARGS__) \
   : kn == 2 ? vrow_avx2(__VA_ARGS__)   \
   : kn == 3 ? vrow_sse2(__VA_ARGS__)   \
             : vrow_c(__VA_ARGS__))
#else
#define HPASS(d, sp, n) hpass_c(d, sp, sst, n, ow, xb, s->xk, kx, flip)
#define VROW(...)       vrow_c(__VA_ARGS__)
#endif
  if (rows) {
    /* a row's loads may reach `over` bytes past its last tap: the rows
     * within that of the source's end go through a copy with spare bytes,
     * one at a time */
    size_t tail = (over + sst - 1) / sst;
    uint32_t safe = sh > tail ? sh - (uint32_t)tail : 0;
    uint32_t direct = (uint32_t)y1 <= safe  ? (uint32_t)rows
                      : safe > (uint32_t)y0 ? safe - (uint32_t)y0
                                            : 0;
    HPASS(s->tmp, src + (size_t)y0 * sst, direct);
    for (uint32_t r = direct; r < rows; r++) {
      memcpy(s->last, src + (size_t)(y0 + r) * sst, sst);
      memset(s->last + sst, 0, over);
      HPASS(s->tmp + r * rowlen, s->last, 1);
    }
  }
  stk__prof_lap(STK__PROF_HPASS, &t);
  /* the vertical pass and the store, row by row: timed together, split
   * by their ticks */
  uint64_t tv = 0, ts = 0, c = t ? stk__prof_ticks() : 0;
  for (uint32_t j = 0; j < oh; j++) {
    uint8_t *o = out8 ? out8 + (size_t)j * rowlen : s->row;
    int32_t n = yb[2 * j + 1];
    if (!n) memset(o, 0, rowlen); /* no tap: Pillow's empty sum, 0 */
    else
      VROW(o, s->tmp + (size_t)(yb[2 * j] - y0) * rowlen, rowlen, rowlen,
           s->yk + (size_t)j * ky, n, s->acc);
    if (t) {
      uint64_t now = stk__prof_ticks();
      tv += now - c, c = now;
    }
    if (emit) {
      emit(ctx, j, o);
      if (t) {
        uint64_t now = stk__prof_ticks();
        ts += now - c, c = now;
      }
    }
  }
  stk__prof_split(STK__PROF_VPASS, STK__PROF_STORE, &t, tv, ts);
  return 0;
}

int stk__resample(stk__scratch *s, const uint8_t *src, uint32_t sw, uint32_t sh,
                  double bx0, double by0, double bx1, double by1, uint32_t ow,
                  uint32_t oh, int flip, uint8_t *out8) {
  return stk__resample_rows(s, src, sw, sh, bx0, by0, bx1, by1, ow, oh,
                            STK__FILTER_BILINEAR, flip, out8, NULL, NULL);
}
