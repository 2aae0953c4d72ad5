/* ops_mix.c - the batch ops: mixup, cutmix and timm's switch between them
 * (mixup_cutmix), as timm.data.Mixup does them in its batch, pair and
 * elem modes, with cutmix_minmax, and torchvision v2's MixUp/CutMix
 * formulas as the special cases.
 *
 * After every sample of a batch is stored (normalized, erased), one set of
 * draws for the whole batch from the batch's own generator (keyed by the
 * job's seed, the epoch and the epoch position of the batch's first slot,
 * so a pure function of the batch address): row i is mixed with row
 * B-1-i (timm's x.flip(0)), by a Beta(alpha, alpha) weight (mixup) or by
 * pasting a box of the paired row whose area follows the weight (cutmix,
 * the weight then corrected to the box's area), and the target tensor gets
 * timm's mixup_target: weight * smoothed one-hot(label_i) + (1 - weight) *
 * smoothed one-hot(label_{B-1-i}). In pair mode each pair (i, B-1-i), in
 * elem mode each row, has draws of its own, from the generator of its
 * slot's epoch position (pos0 + i; pair: the pair's first row), its
 * weight kept in float32 as timm's lam_batch; a row mixes with its
 * partner's values from before the mix.
 *
 * Arithmetic is timm's on the tensor's dtype, operation by operation
 * (compiled without floating-point contraction: no fused multiply-add may
 * change a rounding): float32 x * w + flip(x) * (1 - w), each product and
 * the sum rounded to float32, w and 1 - w rounded to float32 first (torch
 * multiplies a float tensor by a Python float in float32); bfloat16 that
 * float32 formula on the bfloat16 values, rounded once to bfloat16 (as
 * mixing x.float() and casting back; torch's own in-place ops on a
 * bfloat16 tensor round w to bfloat16 and each step, up to one bfloat16
 * step away); uint8 as FastCollateMixup: the float32 sum rounded half to
 * even.
 *
 * Pure functions of their arguments; thread-safe.
 */
#include "ops_mix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "augment_internal.h" /* stk__rng_seed */
#include "ops.h"              /* stk__bf16 */
#include "ops_policy.h"       /* stk__normal */

void stk__mix_rng(stk_rng *r, uint64_t seed, uint64_t epoch, uint64_t pos0) {
  stk__rng_seed(r, seed, STK__RNG_BATCH, epoch, pos0);
}

double stk__log_gamma(stk_rng *rng, double a) {
  double boost = 0;
  if (a < 1) {
    double u = 1.0 - stk_rng_uniform(rng); /* (0, 1] */
    boost = log(u) / a;
    a += 1;
  }
  double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d), spare = 0;
  int have = 0;
  for (int t = 0; t < 1000; t++) { /* accepts with probability > 0.95 per try */
    double x = stk__normal(rng, &spare, &have), v = 1 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = 1.0 - stk_rng_uniform(rng); /* (0, 1] */
    if (u < 1 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1 - v + log(v)))
      return log(d * v) + boost;
  }
  return log(d) + boost; /* never reached in practice; stays deterministic */
}

double stk__beta_sym(stk_rng *rng, double a) {
  double lx = stk__log_gamma(rng, a), ly = stk__log_gamma(rng, a);
  return 1.0 / (1.0 + exp(ly - lx)); /* X / (X + Y) */
}

static uint32_t clip_box(int64_t v, uint32_t n) {
  return v < 0 ? 0 : v > (int64_t)n ? n : (uint32_t)v;
}

/* The shortest decimal that gives back the float32 x, as a double: the
 * number the user wrote (0.7, not 0.699999988), as timm holds it. */
static double written(float x) {
  char b[32];
  for (int p = 1; p < 10; p++) {
    snprintf(b, sizeof(b), "%.*g", p, (double)x);
    double d = strtod(b, NULL);
    if ((float)d == x) return d;
  }
  return x;
}

/* numpy.random.randint(lo, hi) from one uniform: lo when the range is
 * empty (where numpy would raise). */
static int64_t randint(stk_rng *rng, int64_t lo, int64_t hi) {
  return hi > lo ? lo + (int64_t)(stk_rng_uniform(rng) * (double)(hi - lo)) : lo;
}

void stk__mix_draw(const stk__op *op, uint32_t h, uint32_t w, stk_rng *rng, stk__mix *m) {
  memset(m, 0, sizeof(*m));
  m->lam = m->weight = 1;
  double ma = op->lo[0], ca = op->lo[1];
  if (!(stk_rng_uniform(rng) < op->p)) return;
  if (ma > 0 && ca > 0) {
    m->cutmix = stk_rng_uniform(rng) < op->lo[2];
    m->lam = stk__beta_sym(rng, m->cutmix ? ca : ma);
  } else if (ma > 0) {
    m->lam = stk__beta_sym(rng, ma);
  } else {
    m->cutmix = 1;
    m->lam = stk__beta_sym(rng, ca);
  }
  if (op->kh) m->lam = (float)m->lam; /* pair, elem: timm's lam_batch is float32 */
  if (m->lam == 1.0) {                /* timm: nothing to mix */
    m->cutmix = 0;
    return;
  }
  m->mixed = 1;
  m->weight = m->lam;
  if (!m->cutmix) return;
  if (op->hi[1] > 0) {
    /* rand_bbox_minmax: the cut's height and width drawn within the
     * minmax fractions, then its top and left */
    double lo = written(op->hi[0]), hi = written(op->hi[1]);
    int64_t ch = randint(rng, (int64_t)(h * lo), (int64_t)(h * hi));
    int64_t cw = randint(rng, (int64_t)(w * lo), (int64_t)(w * hi));
    int64_t y0 = randint(rng, 0, (int64_t)h - ch), x0 = randint(rng, 0, (int64_t)w - cw);
    m->cy = (uint32_t)y0, m->cx = (uint32_t)x0;
    m->y0 = clip_box(y0, h), m->y1 = clip_box(y0 + ch, h);
    m->x0 = clip_box(x0, w), m->x1 = clip_box(x0 + cw, w);
  } else {
    /* rand_bbox: cut = int(side * sqrt(1 - lam)), centre randint(0, side),
     * the box clipped to the image */
    double ratio = sqrt(1.0 - m->lam);
    int64_t ch = (int64_t)(h * ratio), cw = (int64_t)(w * ratio);
    int64_t cy = (int64_t)(stk_rng_uniform(rng) * h),
            cx = (int64_t)(stk_rng_uniform(rng) * w);
    m->cy = (uint32_t)cy, m->cx = (uint32_t)cx;
    m->y0 = clip_box(cy - ch / 2, h), m->y1 = clip_box(cy + ch / 2, h);
    m->x0 = clip_box(cx - cw / 2, w), m->x1 = clip_box(cx + cw / 2, w);
  }
  /* then the weight is the part kept */
  m->weight =
      1.0 - (double)((uint64_t)(m->y1 - m->y0) * (m->x1 - m->x0)) / (double)(h * w);
  if (op->kh) m->weight = (float)m->weight;
}

void stk__mix_row(const stk__op *op, uint32_t B, uint32_t h, uint32_t w, uint64_t seed,
                  uint64_t epoch, uint64_t pos0, uint32_t i, stk__mix *m) {
  uint32_t src = i;
  if (op->kh == 1) { /* pair: row B-1-i takes row i's draw; an odd middle none */
    src = i < B - 1 - i ? i : B - 1 - i;
    if (src == B - 1 - src) {
      memset(m, 0, sizeof(*m));
      m->lam = m->weight = 1;
      return;
    }
  }
  stk_rng r;
  stk__mix_rng(&r, seed, epoch, pos0 + src);
  stk__mix_draw(op, h, w, &r, m);
}

static inline float bf16_float(uint16_t v) {
  uint32_t u = (uint32_t)v << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Blend rows a and b (n elements each, in place): a' = a*l + b*r and
 * b' = b*l + a*r from the old values (a == b for the middle row of an odd
 * batch: a*l + a*r). */
static void blend(int dtype, void *a, void *b, size_t n, float l, float r) {
  if (dtype == STK_DTYPE_FLOAT32) {
    float *x = a, *y = b;
    for (size_t k = 0; k < n; k++) {
      float xa = x[k], yb = y[k];
      float nx = xa * l + yb * r, ny = yb * l + xa * r;
      x[k] = nx, y[k] = ny;
    }
  } else if (dtype == STK_DTYPE_BFLOAT16) {
    uint16_t *x = a, *y = b;
    for (size_t k = 0; k < n; k++) {
      float xa = bf16_float(x[k]), yb = bf16_float(y[k]);
      uint16_t nx = stk__bf16(xa * l + yb * r), ny = stk__bf16(yb * l + xa * r);
      x[k] = nx, y[k] = ny;
    }
  } else {
    uint8_t *x = a, *y = b;
    for (size_t k = 0; k < n; k++) {
      float xa = x[k], yb = y[k];
      float nx = nearbyintf(xa * l + yb * r), ny = nearbyintf(yb * l + xa * r);
      x[k] = (uint8_t)(nx < 0 ? 0 : nx > 255 ? 255 : nx);
      y[k] = (uint8_t)(ny < 0 ? 0 : ny > 255 ? 255 : ny);
    }
  }
}

static void swap_bytes(unsigned char *a, unsigned char *b, size_t n) {
  for (size_t k = 0; k < n; k++) {
    unsigned char t = a[k];
    a[k] = b[k], b[k] = t;
  }
}

static void targets(const stk__op *op, const stk__mix *m, const stk_job_spec *spec,
                    const stk_batch_layout *L, unsigned char *buf);

void stk__mix_apply(const stk__op *op, const stk__mix *m, const stk_job_spec *spec,
                    const stk_batch_layout *L, unsigned char *buf) {
  uint32_t B = spec->batch_size, H = spec->height, W = spec->width;
  size_t es = stk__dtype_size(spec->dtype), n = (size_t)H * W * 3, per = n * es;
  unsigned char *img = buf + L->tensors[STK_TENSOR_IMAGE].offset;
  float l = (float)m->weight, r = (float)(1.0 - m->weight);
  for (uint32_t i = 0; m->mixed && i <= (B - 1) / 2; i++) {
    uint32_t j = B - 1 - i;
    unsigned char *a = img + per * i, *b = img + per * j;
    if (!m->cutmix) {
      blend(spec->dtype, a, b, n, l, r);
      continue;
    }
    if (i == j) continue; /* pasting a row's own box changes nothing */
    for (uint32_t y = m->y0; y < m->y1; y++) {
      if (spec->layout == STK_LAYOUT_NHWC) {
        size_t o = ((size_t)y * W + m->x0) * 3 * es;
        swap_bytes(a + o, b + o, (size_t)(m->x1 - m->x0) * 3 * es);
      } else {
        for (int c = 0; c < 3; c++) {
          size_t o = ((size_t)c * H * W + (size_t)y * W + m->x0) * es;
          swap_bytes(a + o, b + o, (size_t)(m->x1 - m->x0) * es);
        }
      }
    }
  }
  targets(op, m, spec, L, buf);
}

/* Row i's soft target: weight l of its own label li, r of its partner's
 * lj (y1 * w + y2 * (1 - w), element by element, as torch computes it). */
static void target_row(float *row, uint32_t C, int64_t li, int64_t lj, float on,
                       float off, float l, float r) {
  float base = off * l + off * r;
  for (uint32_t c = 0; c < C; c++) row[c] = base;
  if (li >= 0 && li < C) row[li] = on * l + (li == lj ? on : off) * r;
  if (lj >= 0 && lj < C && lj != li) row[lj] = off * l + on * r;
}

/* The target tensor from the label tensor, every row weighted by m. */
static void targets(const stk__op *op, const stk__mix *m, const stk_job_spec *spec,
                    const stk_batch_layout *L, unsigned char *buf) {
  int tt = stk_batch_layout_find(L, "target"), tl = stk_batch_layout_find(L, "label");
  if (tt < 0 || tl < 0) return;
  uint32_t B = spec->batch_size, C = spec->num_classes;
  double s = op->lo[3], offd = s / C;
  float off = (float)offd, on = (float)(1.0 - s + offd);
  float *t = (float *)(buf + L->tensors[tt].offset);
  const unsigned char *lab = buf + L->tensors[tl].offset;
  for (uint32_t i = 0; i < B; i++) {
    int64_t li, lj;
    memcpy(&li, lab + 8ull * i, 8);
    memcpy(&lj, lab + 8ull * (B - 1 - i), 8);
    target_row(t + (size_t)i * C, C, li, lj, on, off, (float)m->weight,
               (float)(1.0 - m->weight));
  }
}

static inline float load(int dtype, const unsigned char *p, size_t k) {
  if (dtype == STK_DTYPE_FLOAT32) {
    float v;
    memcpy(&v, p + 4 * k, 4);
    return v;
  }
  if (dtype == STK_DTYPE_BFLOAT16) {
    uint16_t v;
    memcpy(&v, p + 2 * k, 2);
    return bf16_float(v);
  }
  return p[k];
}

static inline void put(int dtype, unsigned char *p, size_t k, float v) {
  if (dtype == STK_DTYPE_FLOAT32) {
    memcpy(p + 4 * k, &v, 4);
  } else if (dtype == STK_DTYPE_BFLOAT16) {
    uint16_t b = stk__bf16(v);
    memcpy(p + 2 * k, &b, 2);
  } else {
    p[k] = (uint8_t)v; /* a level, or a blend rounded and clipped */
  }
}

/* One row's new value under its draw d: a its own old value, b its
 * partner's, inside: the element lies in d's box. */
static inline float row_value(int dtype, const stk__mix *d, float a, float b, int inside,
                              float l, float r) {
  if (!d->mixed) return a;
  if (d->cutmix) return inside ? b : a;
  float v = a * l + b * r;
  if (dtype == STK_DTYPE_UINT8) {
    v = nearbyintf(v);
    v = v < 0 ? 0 : v > 255 ? 255 : v;
  }
  return v;
}

static inline int in_box(const stk__mix *d, uint32_t y, uint32_t x) {
  return y >= d->y0 && y < d->y1 && x >= d->x0 && x < d->x1;
}

/* Rows a and b (a == b: the middle row of an odd batch) mixed each under
 * its own draw, from both rows' old values, element by element. */
static void mix_two(const stk_job_spec *spec, unsigned char *a, unsigned char *b,
                    const stk__mix *da, const stk__mix *db) {
  uint32_t H = spec->height, W = spec->width;
  int dt = spec->dtype, nhwc = spec->layout == STK_LAYOUT_NHWC;
  float la = (float)da->weight, ra = (float)(1.0 - da->weight);
  float lb = (float)db->weight, rb = (float)(1.0 - db->weight);
  if (!da->mixed && (a == b || !db->mixed)) return;
  for (uint32_t y = 0; y < H; y++)
    for (uint32_t x = 0; x < W; x++) {
      int ia = in_box(da, y, x), ib = in_box(db, y, x);
      for (uint32_t c = 0; c < 3; c++) {
        size_t k = nhwc ? ((size_t)y * W + x) * 3 + c : ((size_t)c * H + y) * W + x;
        float va = load(dt, a, k), vb = load(dt, b, k);
        put(dt, a, k, row_value(dt, da, va, vb, ia, la, ra));
        if (a != b) put(dt, b, k, row_value(dt, db, vb, va, ib, lb, rb));
      }
    }
}

/* pair and elem modes: each row (pair) drawn from its own generator
 * (stk__mix_row), the rows mixed pair by pair, the targets row by row. */
static void mix_rows(const stk__op *op, const stk_job_spec *spec,
                     const stk_batch_layout *L, uint64_t epoch, uint64_t pos0,
                     unsigned char *buf) {
  uint32_t B = spec->batch_size, H = spec->height, W = spec->width;
  size_t per = (size_t)H * W * 3 * stk__dtype_size(spec->dtype);
  unsigned char *img = buf + L->tensors[STK_TENSOR_IMAGE].offset;
  int tt = stk_batch_layout_find(L, "target"), tl = stk_batch_layout_find(L, "label");
  uint32_t C = spec->num_classes;
  double s = op->lo[3], offd = s / C;
  float off = (float)offd, on = (float)(1.0 - s + offd);
  for (uint32_t i = 0; i <= (B - 1) / 2; i++) {
    uint32_t j = B - 1 - i;
    stk__mix di, dj;
    stk__mix_row(op, B, H, W, spec->seed, epoch, pos0, i, &di);
    stk__mix_row(op, B, H, W, spec->seed, epoch, pos0, j, &dj);
    mix_two(spec, img + per * i, img + per * j, &di, &dj);
    if (tt < 0 || tl < 0) continue;
    float *t = (float *)(buf + L->tensors[tt].offset);
    const unsigned char *lab = buf + L->tensors[tl].offset;
    int64_t li, lj;
    memcpy(&li, lab + 8ull * i, 8);
    memcpy(&lj, lab + 8ull * j, 8);
    target_row(t + (size_t)i * C, C, li, lj, on, off, (float)di.weight,
               (float)(1.0 - di.weight));
    if (j != i)
      target_row(t + (size_t)j * C, C, lj, li, on, off, (float)dj.weight,
                 (float)(1.0 - dj.weight));
  }
}

void stk__mix_batch(const stk__op *op, const stk_job_spec *spec,
                    const stk_batch_layout *L, uint64_t epoch, uint64_t pos0,
                    unsigned char *buf) {
  stk_rng r;
  stk__mix m;
  if (op->kh) {
    mix_rows(op, spec, L, epoch, pos0, buf);
    return;
  }
  stk__mix_rng(&r, spec->seed, epoch, pos0);
  stk__mix_draw(op, spec->height, spec->width, &r, &m);
  stk__mix_apply(op, &m, spec, L, buf);
}
