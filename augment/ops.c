/* ops.c - the image operations of the pipelines: torchvision's
 * RandomResizedCrop box sampling and the final store (resampling lives
 * in resample.c): horizontal flip, brightness/contrast/saturation,
 * Normalize (through
 * stk_normalize_table, so a client can rebuild the floats from the 8-bit
 * values exactly), and the output dtype/layout written straight into the
 * batch buffer.
 *
 * Owns nothing but the scratch buffers it is handed; pure functions of
 * their arguments, so thread-safe with one scratch per thread.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* Python's round(): half to even, which nearbyint gives in the default
 * rounding mode. */
static double pyround(double x) { return nearbyint(x); }

stk__box stk__rrc_box(uint32_t W, uint32_t H, double scale_min, double scale_max,
                      double ratio_min, double ratio_max, stk_rng *r) {
  stk__box b;
  double area = (double)W * H;
  double lr0 = log(ratio_min), lr1 = log(ratio_max);
  for (int t = 0; t < 10; t++) {
    double target = area * (scale_min + (scale_max - scale_min) * stk_rng_uniform(r));
    double ar = exp(lr0 + (lr1 - lr0) * stk_rng_uniform(r));
    double wf = pyround(sqrt(target * ar)), hf = pyround(sqrt(target / ar));
    if (wf > 0 && wf <= W && hf > 0 && hf <= H) {
      b.w = (int32_t)wf, b.h = (int32_t)hf;
      /* torch.randint(0, n + 1): uniform integer in [0, n] */
      b.y = (int32_t)(stk_rng_uniform(r) * (double)(H - (uint32_t)b.h + 1));
      b.x = (int32_t)(stk_rng_uniform(r) * (double)(W - (uint32_t)b.w + 1));
      return b;
    }
  }
  double in_ratio = (double)W / H;
  if (in_ratio < ratio_min) {
    b.w = (int32_t)W, b.h = (int32_t)pyround(W / ratio_min);
  } else if (in_ratio > ratio_max) {
    b.h = (int32_t)H, b.w = (int32_t)pyround(H * ratio_max);
  } else {
    b.w = (int32_t)W, b.h = (int32_t)H;
  }
  if (b.w < 1) b.w = 1;
  if (b.h < 1) b.h = 1;
  if (b.w > (int32_t)W) b.w = (int32_t)W;
  if (b.h > (int32_t)H) b.h = (int32_t)H;
  b.y = ((int32_t)H - b.h) / 2;
  b.x = ((int32_t)W - b.w) / 2;
  return b;
}

void stk__scratch_free(stk__scratch *s) {
  free(s->xk), free(s->yk), free(s->kw), free(s->tmp), free(s->acc), free(s->row);
  free(s->last), free(s->kv), free(s->img);
  memset(s, 0, sizeof(*s));
}

int stk__grow(void **p, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  void *q = realloc(*p, c);
  if (!q) return -1;
  *p = q, *cap = c;
  return 0;
}

void stk__quant8(uint8_t *restrict u, const float *restrict q, size_t n) {
  for (size_t i = 0; i < n; i++) { /* stk__q8, in a loop the compiler vectorizes */
    int v = (int)(q[i] + 0.5f);
    u[i] = (uint8_t)(v > 255 ? 255 : v);
  }
}

uint16_t stk__bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

static inline float clamp01(float v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

#define q8 stk__q8

/* train's ColorJitter on img, npix RGB pixels holding 8-bit levels as
 * floats, in place: fixed order brightness, contrast, saturation, on the
 * 0..1 scale (torchvision's tensor formulas; it also shuffles the order),
 * each clamped, then rounded back to levels. */
static void jitter_levels(float *img, size_t npix, float bright, float contrast,
                          float satur) {
  for (size_t i = 0; i < npix * 3; i++) img[i] = clamp01(img[i] * (1.f / 255.f) * bright);
  if (contrast != 1) {
    double m = 0;
    for (size_t i = 0; i < npix; i++)
      m += 0.299 * img[3 * i] + 0.587 * img[3 * i + 1] + 0.114 * img[3 * i + 2];
    float mean = (float)(m / (double)npix);
    for (size_t i = 0; i < npix * 3; i++)
      img[i] = clamp01(mean + contrast * (img[i] - mean));
  }
  if (satur != 1)
    for (size_t i = 0; i < npix; i++) {
      float *q = img + 3 * i;
      float g = 0.299f * q[0] + 0.587f * q[1] + 0.114f * q[2];
      for (int c = 0; c < 3; c++) q[c] = clamp01(g + satur * (q[c] - g));
    }
  for (size_t i = 0; i < npix * 3; i++) img[i] = (float)(int)(img[i] * 255.f + 0.5f);
}

int stk__jitter8(stk__scratch *s, uint8_t *px, size_t npix, float bright, float contrast,
                 float satur) {
  if (stk__grow((void **)&s->img, &s->icap, npix * 3 * sizeof(float))) return -1;
  float *img = s->img;
  for (size_t i = 0; i < npix * 3; i++) img[i] = px[i];
  jitter_levels(img, npix, bright, contrast, satur);
  for (size_t i = 0; i < npix * 3; i++) px[i] = (uint8_t)img[i];
  return 0;
}

/* The float32 values of n RGB pixels: (float)v * a[c] + b[c], the
 * product rounded to float before the sum (the file is built without
 * contraction into fused multiply-adds), so equal to the job's table.
 * plane: NCHW's plane stride, or 0 for NHWC. The portable loop (and the
 * AVX2 stores' last pixels); store_f32_avx2 computes the same values. */
#define ALWAYS_INLINE static inline __attribute__((always_inline))
ALWAYS_INLINE void store_f32_body(const uint8_t *restrict u, uint32_t n,
                                  float *restrict o, size_t plane, const float *a,
                                  const float *b) {
  float a0 = a[0], a1 = a[1], a2 = a[2], b0 = b[0], b1 = b[1], b2 = b[2];
  if (plane) {
    float *restrict o0 = o, *restrict o1 = o + plane, *restrict o2 = o + 2 * plane;
    for (uint32_t k = 0; k < n; k++) {
      float p0 = (float)u[3 * k] * a0, p1 = (float)u[3 * k + 1] * a1,
            p2 = (float)u[3 * k + 2] * a2;
      o0[k] = p0 + b0, o1[k] = p1 + b1, o2[k] = p2 + b2;
    }
  } else {
    for (uint32_t k = 0; k < n; k++) {
      float p0 = (float)u[3 * k] * a0, p1 = (float)u[3 * k + 1] * a1,
            p2 = (float)u[3 * k + 2] * a2;
      o[3 * k] = p0 + b0, o[3 * k + 1] = p1 + b1, o[3 * k + 2] = p2 + b2;
    }
  }
}
static void store_f32_c(const uint8_t *restrict u, uint32_t n, float *restrict o,
                        size_t plane, const float *a, const float *b) {
  store_f32_body(u, n, o, plane, a, b);
}
static void store_u8_planar_c(const uint8_t *restrict u, uint32_t n, uint8_t *restrict o,
                              size_t plane) {
  for (uint32_t k = 0; k < n; k++)
    o[k] = u[3 * k], o[plane + k] = u[3 * k + 1], o[2 * plane + k] = u[3 * k + 2];
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* AVX2 stores, chosen with the resampler's kernels: 16 RGB pixels (48
 * bytes, three 16-byte loads) split into their three channels by byte
 * shuffles, then each channel stored as bytes, or widened to float and
 * normalized as v * a + b (a multiply, then an add: the portable loop's
 * roundings); NHWC float32 8 pixels (24 values) at a time with the
 * coefficients repeated in threes. The last n % 16 (n % 8) pixels go
 * through the portable loops. */
/* byte j of the shuffle that takes channel c's values out of load q */
#define DI(c, q, j)                                               \
  ((3 * (j) + (c)-16 * (q)) >= 0 && (3 * (j) + (c)-16 * (q)) < 16 \
       ? 3 * (j) + (c)-16 * (q)                                   \
       : -1)
#define DI16(c, q)                                                                    \
  _mm_setr_epi8(DI(c, q, 0), DI(c, q, 1), DI(c, q, 2), DI(c, q, 3), DI(c, q, 4),      \
                DI(c, q, 5), DI(c, q, 6), DI(c, q, 7), DI(c, q, 8), DI(c, q, 9),      \
                DI(c, q, 10), DI(c, q, 11), DI(c, q, 12), DI(c, q, 13), DI(c, q, 14), \
                DI(c, q, 15))
__attribute__((target("avx2"), always_inline)) static inline __m128i deint(__m128i a0,
                                                                           __m128i a1,
                                                                           __m128i a2,
                                                                           int c) {
  __m128i m0 = c == 0 ? DI16(0, 0) : c == 1 ? DI16(1, 0) : DI16(2, 0);
  __m128i m1 = c == 0 ? DI16(0, 1) : c == 1 ? DI16(1, 1) : DI16(2, 1);
  __m128i m2 = c == 0 ? DI16(0, 2) : c == 1 ? DI16(1, 2) : DI16(2, 2);
  return _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a0, m0), _mm_shuffle_epi8(a1, m1)),
                      _mm_shuffle_epi8(a2, m2));
}
#undef DI16
#undef DI

__attribute__((target("avx2"))) static void store_u8_planar_avx2(
    const uint8_t *restrict u, uint32_t n, uint8_t *restrict o, size_t plane) {
  uint32_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const uint8_t *p = u + 3 * (size_t)k;
    __m128i a0 = _mm_loadu_si128((const __m128i *)(const void *)p),
            a1 = _mm_loadu_si128((const __m128i *)(const void *)(p + 16)),
            a2 = _mm_loadu_si128((const __m128i *)(const void *)(p + 32));
    _mm_storeu_si128((__m128i *)(void *)(o + k), deint(a0, a1, a2, 0));
    _mm_storeu_si128((__m128i *)(void *)(o + plane + k), deint(a0, a1, a2, 1));
    _mm_storeu_si128((__m128i *)(void *)(o + 2 * plane + k), deint(a0, a1, a2, 2));
  }
  store_u8_planar_c(u + 3 * (size_t)k, n - k, o + k, plane);
}

/* 8 levels (the low 8 bytes of v) as v * a + b */
__attribute__((target("avx2"), always_inline)) static inline __m256i norm8(__m128i v,
                                                                           __m256 a,
                                                                           __m256 b) {
  __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
  return _mm256_castps_si256(_mm256_add_ps(_mm256_mul_ps(f, a), b));
}

__attribute__((target("avx2"))) static void store_f32_avx2(const uint8_t *restrict u,
                                                           uint32_t n, float *restrict o,
                                                           size_t plane, const float *a,
                                                           const float *b) {
  uint32_t k = 0;
  if (plane) {
    const __m256 a0 = _mm256_set1_ps(a[0]), a1 = _mm256_set1_ps(a[1]),
                 a2 = _mm256_set1_ps(a[2]), b0 = _mm256_set1_ps(b[0]),
                 b1 = _mm256_set1_ps(b[1]), b2 = _mm256_set1_ps(b[2]);
    for (; k + 16 <= n; k += 16) {
      const uint8_t *p = u + 3 * (size_t)k;
      __m128i x0 = _mm_loadu_si128((const __m128i *)(const void *)p),
              x1 = _mm_loadu_si128((const __m128i *)(const void *)(p + 16)),
              x2 = _mm_loadu_si128((const __m128i *)(const void *)(p + 32));
      __m128i r = deint(x0, x1, x2, 0), g = deint(x0, x1, x2, 1),
              bl = deint(x0, x1, x2, 2);
      float *q = o + k;
      _mm256_storeu_si256((__m256i *)(void *)q, norm8(r, a0, b0));
      _mm256_storeu_si256((__m256i *)(void *)(q + 8),
                          norm8(_mm_srli_si128(r, 8), a0, b0));
      q += plane;
      _mm256_storeu_si256((__m256i *)(void *)q, norm8(g, a1, b1));
      _mm256_storeu_si256((__m256i *)(void *)(q + 8),
                          norm8(_mm_srli_si128(g, 8), a1, b1));
      q += plane;
      _mm256_storeu_si256((__m256i *)(void *)q, norm8(bl, a2, b2));
      _mm256_storeu_si256((__m256i *)(void *)(q + 8),
                          norm8(_mm_srli_si128(bl, 8), a2, b2));
    }
    store_f32_body(u + 3 * (size_t)k, n - k, o + k, plane, a, b);
  } else {
    /* the coefficients of values 0-7, 8-15 and 16-23 of 8 pixels */
    const __m256 ca = _mm256_setr_ps(a[0], a[1], a[2], a[0], a[1], a[2], a[0], a[1]),
                 cb = _mm256_setr_ps(a[2], a[0], a[1], a[2], a[0], a[1], a[2], a[0]),
                 cc = _mm256_setr_ps(a[1], a[2], a[0], a[1], a[2], a[0], a[1], a[2]),
                 da = _mm256_setr_ps(b[0], b[1], b[2], b[0], b[1], b[2], b[0], b[1]),
                 db = _mm256_setr_ps(b[2], b[0], b[1], b[2], b[0], b[1], b[2], b[0]),
                 dc = _mm256_setr_ps(b[1], b[2], b[0], b[1], b[2], b[0], b[1], b[2]);
    for (; k + 8 <= n; k += 8) {
      const uint8_t *p = u + 3 * (size_t)k;
      float *q = o + 3 * (size_t)k;
      _mm256_storeu_si256(
          (__m256i *)(void *)q,
          norm8(_mm_loadl_epi64((const __m128i *)(const void *)p), ca, da));
      _mm256_storeu_si256(
          (__m256i *)(void *)(q + 8),
          norm8(_mm_loadl_epi64((const __m128i *)(const void *)(p + 8)), cb, db));
      _mm256_storeu_si256(
          (__m256i *)(void *)(q + 16),
          norm8(_mm_loadl_epi64((const __m128i *)(const void *)(p + 16)), cc, dc));
    }
    store_f32_body(u + 3 * (size_t)k, n - k, o + 3 * (size_t)k, 0, a, b);
  }
}
static int store_avx2(void) {
  const char *k = stk__resample_kernels();
  return !strcmp(k, "avx2") || !strcmp(k, "avx512");
}
static void store_f32(const uint8_t *restrict u, uint32_t n, float *restrict o,
                      size_t plane, const float *a, const float *b) {
  if (store_avx2()) store_f32_avx2(u, n, o, plane, a, b);
  else store_f32_c(u, n, o, plane, a, b);
}
static void store_u8_planar(const uint8_t *restrict u, uint32_t n, uint8_t *restrict o,
                            size_t plane) {
  if (store_avx2()) store_u8_planar_avx2(u, n, o, plane);
  else store_u8_planar_c(u, n, o, plane);
}
#else
#define store_f32       store_f32_c
#define store_u8_planar store_u8_planar_c
#endif

void stk__post_affine(stk__post *p, const float a[3], const float b[3]) {
  p->affine = 0;
  if (!p->norm) return;
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) {
      volatile float q = (float)v * a[c];
      float want = q + b[c];
      if (memcmp(&want, &p->norm[c][v], sizeof(float))) return;
    }
  for (int c = 0; c < 3; c++) p->na[c] = a[c], p->nb[c] = b[c];
  p->affine = 1;
}

/* Store the n output pixels of one row from u, the 8-bit RGB levels of
 * the source pixels they come from (in source order, so read backwards
 * when flip), in the output's dtype and layout. orow is the row's first
 * value (NCHW: of channel 0, the planes `plane` values apart); tb holds
 * the bfloat16 tables. */
static void store_px(const stk__post *p, const uint8_t *restrict u, uint32_t n, int flip,
                     void *orow, size_t plane, const uint16_t (*restrict tb)[256]) {
  const float(*t)[256] = p->norm;
  int nchw = p->layout == STK_LAYOUT_NCHW;
  if (!flip && !nchw && p->dtype == STK_DTYPE_UINT8) {
    memcpy(orow, u, (size_t)n * 3);
    return;
  }
  if (!flip && p->affine && p->dtype == STK_DTYPE_FLOAT32) {
    store_f32(u, n, (float *)orow, nchw ? plane : 0, p->na, p->nb);
    return;
  }
  if (!flip && nchw && p->dtype == STK_DTYPE_UINT8) {
    store_u8_planar(u, n, (uint8_t *)orow, plane);
    return;
  }
  for (int c = 0; c < 3; c++) {
    /* value k of channel c goes to o[k * step] */
    size_t base = nchw ? (size_t)c * plane : (size_t)c, step = nchw ? 1 : 3;
    const uint8_t *src = u + c + (flip ? 3 * (size_t)(n - 1) : 0);
    ptrdiff_t d = flip ? -3 : 3;
    if (p->dtype == STK_DTYPE_UINT8) {
      uint8_t *o = (uint8_t *)orow + base;
      for (uint32_t k = 0; k < n; k++) o[k * step] = src[(ptrdiff_t)k * d];
    } else if (p->dtype == STK_DTYPE_FLOAT32) {
      float *o = (float *)orow + base;
      const float *tc = t[c];
      for (uint32_t k = 0; k < n; k++) o[k * step] = tc[src[(ptrdiff_t)k * d]];
    } else {
      uint16_t *o = (uint16_t *)orow + base;
      const uint16_t *tc = tb[c];
      for (uint32_t k = 0; k < n; k++) o[k * step] = tc[src[(ptrdiff_t)k * d]];
    }
  }
}

void stk__bf16_tables(const float (*norm)[256], uint16_t tb[3][256]) {
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) tb[c][v] = stk__bf16(norm[c][v]);
}

void stk__store_row(const stk__post *p, const uint16_t (*tb)[256], uint32_t ow,
                    uint32_t oh, uint32_t y, const uint8_t *u, void *out) {
  size_t esz = p->dtype == STK_DTYPE_UINT8 ? 1 : p->dtype == STK_DTYPE_FLOAT32 ? 4 : 2;
  char *orow = (char *)out +
               esz * (p->layout == STK_LAYOUT_NCHW ? (size_t)y * ow : (size_t)y * ow * 3);
  store_px(p, u, ow, p->flip, orow, (size_t)oh * ow, tb);
}

int stk__post_store(stk__scratch *s, uint32_t ow, uint32_t oh, const stk__post *p,
                    const uint8_t *img8, void *out) {
  size_t npix = (size_t)ow * oh;
  if (stk__post_jitter(p)) {
    /* on a float copy, rounded back to levels */
    if (stk__grow((void **)&s->img, &s->icap, npix * 3 * sizeof(float))) return -1;
    for (size_t i = 0; i < npix * 3; i++) s->img[i] = img8[i];
    jitter_levels(s->img, npix, p->bright, p->contrast, p->satur);
  }
  /* bfloat16: the channel tables once, not a conversion per value */
  uint16_t tb[3][256];
  if (p->dtype != STK_DTYPE_UINT8 && p->dtype != STK_DTYPE_FLOAT32)
    stk__bf16_tables(p->norm, tb);
  uint8_t u[3 * 256];
  for (uint32_t y = 0; y < oh; y++) {
    const uint8_t *row = img8 + (size_t)y * ow * 3;
    if (stk__post_jitter(p)) { /* levels in pieces on the stack */
      size_t esz = p->dtype == STK_DTYPE_UINT8     ? 1
                   : p->dtype == STK_DTYPE_FLOAT32 ? 4
                                                   : 2;
      int nchw = p->layout == STK_LAYOUT_NCHW;
      char *orow = (char *)out + esz * (nchw ? (size_t)y * ow : (size_t)y * ow * 3);
      for (uint32_t x0 = 0; x0 < ow; x0 += 256) {
        uint32_t n = ow - x0 < 256 ? ow - x0 : 256;
        uint32_t src0 = p->flip ? ow - x0 - n : x0;
        stk__quant8(u, s->img + ((size_t)y * ow + src0) * 3, 3 * (size_t)n);
        store_px(p, u, n, p->flip, orow + esz * (nchw ? x0 : 3 * (size_t)x0), npix, tb);
      }
    } else {
      stk__store_row(p, (const uint16_t(*)[256])tb, ow, oh, y, row, out);
    }
  }
  return 0;
}
