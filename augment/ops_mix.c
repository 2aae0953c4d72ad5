/* ops_mix.c - the batch ops: mixup, cutmix and timm's switch between them
 * (mixup_cutmix), as timm.data.Mixup does them in its default batch mode,
 * with torchvision v2's MixUp/CutMix formulas as the special cases.
 *
 * After every sample of a batch is stored (normalized, erased), one set of
 * draws for the whole batch from the batch's own generator (keyed by the
 * job's seed, the epoch and the epoch position of the batch's first slot,
 * so a pure function of the batch address): row i is mixed with row
 * B-1-i (timm's x.flip(0)), by a Beta(alpha, alpha) weight (mixup) or by
 * pasting a box of the paired row whose area follows the weight (cutmix,
 * the weight then corrected to the box's area), and the target tensor gets
 * timm's mixup_target: weight * smoothed one-hot(label_i) + (1 - weight) *
 * smoothed one-hot(label_{B-1-i}).
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
#include <string.h>

#include "core_internal.h"
#include "ops.h"        /* stk__bf16 */
#include "ops_policy.h" /* stk__normal */

void stk__mix_rng(stk_rng *r, uint64_t seed, uint64_t epoch, uint64_t pos0) {
  stk_rng_init(r, stk__batch_seed(seed), epoch, pos0);
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
  if (m->lam == 1.0) { /* timm: nothing to mix */
    m->cutmix = 0;
    return;
  }
  m->mixed = 1;
  m->weight = m->lam;
  if (!m->cutmix) return;
  /* rand_bbox: cut = int(side * sqrt(1 - lam)), centre randint(0, side),
   * the box clipped to the image; then the weight is the part kept */
  double ratio = sqrt(1.0 - m->lam);
  int64_t ch = (int64_t)(h * ratio), cw = (int64_t)(w * ratio);
  int64_t cy = (int64_t)(stk_rng_uniform(rng) * h),
          cx = (int64_t)(stk_rng_uniform(rng) * w);
  m->cy = (uint32_t)cy, m->cx = (uint32_t)cx;
  m->y0 = clip_box(cy - ch / 2, h), m->y1 = clip_box(cy + ch / 2, h);
  m->x0 = clip_box(cx - cw / 2, w), m->x1 = clip_box(cx + cw / 2, w);
  m->weight =
      1.0 - (double)((uint64_t)(m->y1 - m->y0) * (m->x1 - m->x0)) / (double)(h * w);
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
  int tt = stk_batch_layout_find(L, "target"), tl = stk_batch_layout_find(L, "label");
  if (tt < 0 || tl < 0) return;
  uint32_t C = spec->num_classes;
  double s = op->lo[3], offd = s / C;
  float off = (float)offd, on = (float)(1.0 - s + offd);
  float *t = (float *)(buf + L->tensors[tt].offset);
  const unsigned char *lab = buf + L->tensors[tl].offset;
  float offl = off * l, offr = off * r, base = offl + offr;
  for (uint32_t i = 0; i < B; i++) {
    int64_t li, lj;
    memcpy(&li, lab + 8ull * i, 8);
    memcpy(&lj, lab + 8ull * (B - 1 - i), 8);
    float *row = t + (size_t)i * C;
    for (uint32_t c = 0; c < C; c++) row[c] = base;
    /* y1 * w + y2 * (1 - w), element by element, as torch computes it */
    if (li >= 0 && li < C) row[li] = on * l + (li == lj ? on : off) * r;
    if (lj >= 0 && lj < C && lj != li) row[lj] = off * l + on * r;
  }
}

void stk__mix_batch(const stk__op *op, const stk_job_spec *spec,
                    const stk_batch_layout *L, uint64_t epoch, uint64_t pos0,
                    unsigned char *buf) {
  stk_rng r;
  stk__mix m;
  stk__mix_rng(&r, spec->seed, epoch, pos0);
  stk__mix_draw(op, spec->height, spec->width, &r, &m);
  stk__mix_apply(op, &m, spec, L, buf);
}
