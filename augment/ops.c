/* ops.c - the image operations of the pipelines: torchvision's
 * RandomResizedCrop box sampling, antialiased resampling (PIL's separable
 * triangle filter whose support widens with the downscale factor), and the
 * final store: 8-bit quantization (as a PIL image would be), horizontal
 * flip, brightness/contrast/saturation, Normalize (through
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
  /* xb and yb live inside the xw and yw blocks */
  free(s->xw), free(s->yw), free(s->tmp), free(s->img), free(s->img8);
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

/* Taps of each of `out` outputs over [in0,in1) of an axis of `size`
 * pixels: bounds[2i] first tap, bounds[2i+1] count, ksize weights each. */
static int coeffs(int32_t **bounds, float **w, size_t *cap, double in0, double in1,
                  uint32_t size, uint32_t out, int *ksize_out) {
  double scale = (in1 - in0) / out;
  double fscale = scale < 1 ? 1 : scale;
  double support = fscale; /* triangle filter: support 1 */
  int ksize = (int)ceil(support) * 2 + 1;
  size_t need =
      (size_t)out * (size_t)ksize * sizeof(float) + (size_t)out * 2 * sizeof(int32_t);
  if (stk__grow((void **)w, cap, need)) return -1;
  *bounds = (int32_t *)(void *)((char *)*w + (size_t)out * ksize * sizeof(float));
  for (uint32_t i = 0; i < out; i++) {
    double center = in0 + (i + 0.5) * scale;
    double lo = floor(center - support + 0.5), hi = floor(center + support + 0.5);
    if (lo < 0) lo = 0;
    if (hi > size) hi = size;
    int xmin = (int)lo, n = hi > lo ? (int)(hi - lo) : 0;
    if (n > ksize) n = ksize;
    float *ww = *w + (size_t)i * ksize;
    double sum = 0;
    for (int k = 0; k < n; k++) {
      double x = (k + xmin - center + 0.5) / fscale;
      double v = x < 0 ? 1 + x : 1 - x;
      ww[k] = v > 0 ? (float)v : 0.f;
      sum += ww[k];
    }
    for (int k = 0; k < ksize; k++) ww[k] = k < n && sum > 0 ? (float)(ww[k] / sum) : 0.f;
    (*bounds)[2 * i] = xmin;
    (*bounds)[2 * i + 1] = sum > 0 ? n : 0;
  }
  *ksize_out = ksize;
  return 0;
}

typedef float v4f __attribute__((vector_size(16)));

void stk__quant8(uint8_t *restrict u, const float *restrict q, size_t n) {
  for (size_t i = 0; i < n; i++) { /* stk__q8, in a loop the compiler vectorizes */
    int v = (int)(q[i] + 0.5f);
    u[i] = (uint8_t)(v > 255 ? 255 : v);
  }
}

int stk__resample(stk__scratch *s, const uint8_t *src, uint32_t sw, uint32_t sh,
                  double bx0, double by0, double bx1, double by1, uint32_t ow,
                  uint32_t oh, uint8_t *out8) {
  int kx, ky;
  if (coeffs(&s->xb, &s->xw, &s->xcap, bx0, bx1, sw, ow, &kx)) return -1;
  if (coeffs(&s->yb, &s->yw, &s->ycap, by0, by1, sh, oh, &ky)) return -1;
  /* columns the horizontal pass touches */
  int32_t c0 = INT32_MAX, c1 = 0;
  for (uint32_t i = 0; i < ow; i++) {
    int32_t a = s->xb[2 * i], n = s->xb[2 * i + 1];
    if (!n) continue;
    if (a < c0) c0 = a;
    if (a + n > c1) c1 = a + n;
  }
  if (c1 <= c0) c0 = c1 = 0;
  size_t cols = (size_t)(c1 - c0) * 3;
  /* +4 floats of slack: the horizontal pass loads and stores 4 lanes */
  size_t rows_kept = out8 ? 1 : oh;
  if (stk__grow((void **)&s->tmp, &s->tcap, (cols + 4) * sizeof(float)) ||
      stk__grow((void **)&s->img, &s->icap, (rows_kept * ow * 3 + 4) * sizeof(float)))
    return -1;
  float *restrict t = s->tmp;
  memset(t + cols, 0, 4 * sizeof(float));
  size_t rowlen = (size_t)ow * 3;
  /* Vertical pass first, straight from the decoded 8-bit rows (contiguous,
   * so it vectorizes), then the horizontal pass one RGB pixel per 4-lane
   * vector. */
  for (uint32_t j = 0; j < oh; j++) {
    int32_t a = s->yb[2 * j], n = s->yb[2 * j + 1];
    const float *w = s->yw + (size_t)j * ky;
    float *o = out8 ? s->img : s->img + j * rowlen;
    if (!n) {
      if (out8) memset(out8 + j * rowlen, 0, rowlen);
      else memset(o, 0, rowlen * sizeof(float));
      continue;
    }
    const uint8_t *restrict r = src + (size_t)a * sw * 3 + (size_t)c0 * 3;
    float w0 = w[0];
    for (size_t i = 0; i < cols; i++) t[i] = w0 * r[i];
    for (int32_t k = 1; k < n; k++) {
      const uint8_t *restrict rk = r + (size_t)k * sw * 3;
      float wk = w[k];
      for (size_t i = 0; i < cols; i++) t[i] += wk * rk[i];
    }
    for (uint32_t i = 0; i < ow; i++) {
      int32_t xa = s->xb[2 * i], xn = s->xb[2 * i + 1];
      const float *xw = s->xw + (size_t)i * kx;
      const float *p = t + (size_t)(xa - c0) * 3;
      v4f acc = {0, 0, 0, 0};
      for (int32_t k = 0; k < xn; k++, p += 3) {
        v4f v;
        memcpy(&v, p, sizeof(v));
        acc += xw[k] * v;
      }
      memcpy(o + 3 * (size_t)i, &acc, sizeof(acc)); /* lane 4 is rewritten next */
    }
    if (out8) stk__quant8(out8 + j * rowlen, o, rowlen);
  }
  return 0;
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

enum { QCHUNK = 256 }; /* pixels quantized at a time, on the stack */

/* Store output pixels [x0, x0+n) of one row from u, the 8-bit RGB levels
 * of the source pixels they come from (in source order, so read backwards
 * when flip), in the output's dtype and layout. orow is the row's first
 * value (NCHW: of channel 0, the planes `plane` values apart); tb holds
 * the bfloat16 tables. */
static void store_px(const stk__post *p, const uint8_t *restrict u, uint32_t n, int flip,
                     void *orow, size_t x0, size_t plane,
                     const uint16_t (*restrict tb)[256]) {
  const float(*t)[256] = p->norm;
  int nchw = p->layout == STK_LAYOUT_NCHW;
  for (int c = 0; c < 3; c++) {
    /* value k of channel c goes to o[k * step] */
    size_t base = nchw ? (size_t)c * plane + x0 : 3 * x0 + (size_t)c, step = nchw ? 1 : 3;
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

void stk__post_store(stk__scratch *s, uint32_t ow, uint32_t oh, const stk__post *p,
                     const uint8_t *img8, void *out) {
  size_t npix = (size_t)ow * oh;
  float *img = s->img;
  int jitter = stk__post_jitter(p);
  /* 8-bit quantization, as the PIL image torchvision resizes would be
   * (the triangle filter's weights are >= 0, so values are too); without
   * jitter it happened in stk__resample (img8) or happens in the store
   * loop */
  if (jitter) {
    for (size_t i = 0; i < npix * 3; i++) img[i] = q8(img[i]);
    jitter_levels(img, npix, p->bright, p->contrast, p->satur);
  }
  /* bfloat16: the channel tables once, not a conversion per value */
  uint16_t tb[3][256];
  if (p->dtype != STK_DTYPE_UINT8 && p->dtype != STK_DTYPE_FLOAT32)
    for (int c = 0; c < 3; c++)
      for (int v = 0; v < 256; v++) tb[c][v] = stk__bf16(p->norm[c][v]);
  size_t esz = p->dtype == STK_DTYPE_UINT8 ? 1 : p->dtype == STK_DTYPE_FLOAT32 ? 4 : 2;
  size_t plane = (size_t)oh * ow;
  uint8_t u[3 * QCHUNK];
  for (uint32_t y = 0; y < oh; y++) {
    const float *row = img8 ? NULL : img + (size_t)y * ow * 3;
    char *orow = (char *)out + esz * (p->layout == STK_LAYOUT_NCHW ? (size_t)y * ow
                                                                   : (size_t)y * ow * 3);
    for (uint32_t x0 = 0; x0 < ow; x0 += QCHUNK) {
      uint32_t n = ow - x0 < QCHUNK ? ow - x0 : QCHUNK;
      /* output pixels x0.. come from source pixels src0.. (reversed when
       * flipped) */
      uint32_t src0 = p->flip ? ow - x0 - n : x0;
      const uint8_t *lv = u;
      if (img8) lv = img8 + ((size_t)y * ow + src0) * 3;
      else stk__quant8(u, row + 3 * (size_t)src0, 3 * (size_t)n);
      store_px(p, lv, n, p->flip, orow, x0, plane, tb);
    }
  }
}
