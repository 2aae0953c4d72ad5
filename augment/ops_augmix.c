/* ops_augmix.c - aug_mix: torchvision 0.14's AugMix. A PIL image given to
 * torchvision's AugMix is turned into a uint8 tensor and augmented by the
 * tensor kernels (functional_tensor.py), not PIL's, so this file follows
 * them: bilinear grid_sample affine transforms (shears, translations,
 * rotations, zero outside), float32 blends truncated to uint8
 * (brightness, color, contrast, sharpness, autocontrast), the integer
 * tables (posterize, solarize, equalize; shared with ops_policy.c, where
 * the PIL and tensor results are equal). The mix is computed as
 * AugMix.forward does on the float32 tensor: m0 * image, plus
 * (d_i * m1) * chain_i for each chain, truncated to uint8.
 *
 * Compiled without floating-point contraction (augment/CMakeLists.txt):
 * every product and sum rounds to float32 as torch's element-wise kernels
 * do.
 *
 * Owns nothing but the scratch it is handed; pure functions of their
 * arguments, so thread-safe with one scratch per thread.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "ops_mix.h" /* stk__log_gamma */
#include "ops_policy.h"

/* AugMix's augmentation space, in torchvision's order (its dict's key
 * order; the last four only with all_ops). */
static const int SPACE[STK__AUGMIX_SPACE] = {
    STK__PA_SHEAR_X,  STK__PA_SHEAR_Y,    STK__PA_TRANSLATE_X, STK__PA_TRANSLATE_Y,
    STK__PA_ROTATE,   STK__PA_POSTERIZE,  STK__PA_SOLARIZE,    STK__PA_AUTOCONTRAST,
    STK__PA_EQUALIZE, STK__PA_BRIGHTNESS, STK__PA_COLOR,       STK__PA_CONTRAST,
    STK__PA_SHARPNESS};

int stk__augmix_space_op(int i) {
  return i >= 0 && i < STK__AUGMIX_SPACE ? SPACE[i] : -1;
}

/* Whether op pa has magnitude bins (and a sign, for the first set). */
static int has_bins(int pa) {
  return pa != STK__PA_AUTOCONTRAST && pa != STK__PA_EQUALIZE;
}
static int is_signed(int pa) {
  return pa != STK__PA_POSTERIZE && pa != STK__PA_SOLARIZE && has_bins(pa);
}

double stk__augmix_magnitude(int pa, int bin, uint32_t w, uint32_t h) {
  const int bins = 10; /* AugMix's _PARAMETER_MAX */
  switch (pa) {
    case STK__PA_SHEAR_X:
    case STK__PA_SHEAR_Y:
      return stk__linspace(0.0f, 0.3f, bins, bin);
    case STK__PA_TRANSLATE_X:
      return stk__linspace(0.0f, (float)(w / 3.0), bins, bin);
    case STK__PA_TRANSLATE_Y:
      return stk__linspace(0.0f, (float)(h / 3.0), bins, bin);
    case STK__PA_ROTATE:
      return stk__linspace(0.0f, 30.0f, bins, bin);
    case STK__PA_POSTERIZE: /* 4 - (arange(10) / (9 / 4)).round().int() */
      return 4 - (int)nearbyintf((float)bin / 2.25f);
    case STK__PA_SOLARIZE:
      return stk__linspace(255.0f, 0.0f, bins, bin);
    case STK__PA_BRIGHTNESS:
    case STK__PA_COLOR:
    case STK__PA_CONTRAST:
    case STK__PA_SHARPNESS:
      return stk__linspace(0.0f, 0.9f, bins, bin);
    default:
      return 0;
  }
}

void stk__augmix_draw(const stk__op *op, stk_rng *rng, stk__augmix *d) {
  memset(d, 0, sizeof(*d));
  double a = op->lo[0];
  uint32_t width = op->kw < STK__AUGMIX_MAX ? op->kw : STK__AUGMIX_MAX;
  /* Beta(alpha, alpha) as a Dirichlet of two, then Dirichlet(alpha x width):
   * Gamma draws normalized in log space (small alphas stay finite) */
  double g0 = stk__log_gamma(rng, a), g1 = stk__log_gamma(rng, a);
  double mx = g0 > g1 ? g0 : g1, e0 = exp(g0 - mx), e1 = exp(g1 - mx);
  d->m[0] = (float)(e0 / (e0 + e1)), d->m[1] = (float)(e1 / (e0 + e1));
  double lg[STK__AUGMIX_MAX], sum = 0;
  mx = -HUGE_VAL;
  for (uint32_t i = 0; i < width; i++) {
    lg[i] = stk__log_gamma(rng, a);
    if (lg[i] > mx) mx = lg[i];
  }
  for (uint32_t i = 0; i < width; i++) sum += exp(lg[i] - mx);
  for (uint32_t i = 0; i < width; i++) d->d[i] = (float)(exp(lg[i] - mx) / sum);
  d->width = (int)width;
  int nops = op->lo[1] != 0 ? STK__AUGMIX_SPACE : STK__AUGMIX_SPACE - 4;
  for (uint32_t i = 0; i < width; i++) {
    int depth = op->pad ? (int)op->pad : 1 + (int)(stk_rng_uniform(rng) * 3);
    if (depth > STK__AUGMIX_MAX) depth = STK__AUGMIX_MAX;
    d->depth[i] = depth;
    for (int k = 0; k < depth; k++) {
      stk__policy_choice *c = &d->ch[i][k];
      c->pa = SPACE[(int)(stk_rng_uniform(rng) * nops)];
      c->bin = has_bins(c->pa) ? (int)(stk_rng_uniform(rng) * op->kh) : 0;
      c->neg = is_signed(c->pa) ? stk_rng_uniform(rng) < 0.5 : 0;
    }
  }
}

/* ---- torchvision's tensor kernels on an RGB image (HWC) --------------- */

/* rgb_to_grayscale: (0.2989 r + 0.587 g + 0.114 b), truncated. */
static inline uint8_t gray(const uint8_t *p) {
  float l = 0.2989f * (float)p[0] + 0.587f * (float)p[1];
  l = l + 0.114f * (float)p[2];
  return (uint8_t)l;
}

/* _blend(img, other, f) for one value: f x + (1 - f) o in float32,
 * clamped, truncated. */
static inline uint8_t blend(float x, float o, float f, float g) {
  float t = f * x + g * o;
  return (uint8_t)(t <= 0 ? 0 : t >= 255 ? 255 : t);
}

/* _get_inverse_affine_matrix(center, angle, translate, 1, shear), as
 * torchvision computes it in doubles. */
static void inverse_affine(double m[6], double cx, double cy, double angle, double tx,
                           double ty, double shx, double shy) {
  const double rad = M_PI / 180.0;
  double rot = angle * rad, sx = shx * rad, sy = shy * rad;
  double a = cos(rot - sy) / cos(sy);
  double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
  double c = sin(rot - sy) / cos(sy);
  double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
  m[0] = d, m[1] = -b, m[2] = 0.0, m[3] = -c, m[4] = a, m[5] = 0.0;
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
}

/* F_t.affine / F_t.rotate with bilinear interpolation and zeros outside:
 * _gen_affine_grid's float32 grid (theta rescaled by half the size, x r0 +
 * y r1, then + r2), then grid_sample(align_corners=False) as torch's AVX2
 * kernel computes it (GCC fuses its unnormalize and its four-corner sum
 * into multiply-adds: fmaf here), rounded half to even. src and dst are
 * w x h, distinct. */
static void grid_affine(const uint8_t *src, uint8_t *dst, uint32_t w, uint32_t h,
                        const double m[6]) {
  float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
  float r00 = (float)m[0] / hw, r10 = (float)m[1] / hw, r20 = (float)m[2] / hw;
  float r01 = (float)m[3] / hh, r11 = (float)m[4] / hh, r21 = (float)m[5] / hh;
  float sw = (float)w / 2, sh = (float)h / 2;
  int W = (int)w, H = (int)h;
  for (int y = 0; y < H; y++) {
    float by = (float)(-(double)h * 0.5 + 0.5) + (float)y;
    for (int x = 0; x < W; x++) {
      float bx = (float)(-(double)w * 0.5 + 0.5) + (float)x;
      float gx = bx * r00 + by * r10;
      gx = gx + r20;
      float gy = bx * r01 + by * r11;
      gy = gy + r21;
      float ix = fmaf(gx + 1.0f, sw, -0.5f), iy = fmaf(gy + 1.0f, sh, -0.5f);
      float fx = floorf(ix), fy = floorf(iy);
      float we = ix - fx, e = 1.0f - we, n = iy - fy, s = 1.0f - n;
      float nw = s * e, ne = s * we, sw_ = n * e, se = n * we;
      int x0 = (int)fx, y0 = (int)fy;
      int okw = x0 >= 0 && x0 < W, oke = x0 + 1 >= 0 && x0 + 1 < W;
      int okn = y0 >= 0 && y0 < H, oks = y0 + 1 >= 0 && y0 + 1 < H;
      uint8_t *o = dst + ((size_t)y * w + (size_t)x) * 3;
      for (int c = 0; c < 3; c++) {
        float vnw = okn && okw ? src[((size_t)y0 * w + (size_t)x0) * 3 + c] : 0;
        float vne = okn && oke ? src[((size_t)y0 * w + (size_t)x0 + 1) * 3 + c] : 0;
        float vsw = oks && okw ? src[((size_t)(y0 + 1) * w + (size_t)x0) * 3 + c] : 0;
        float vse = oks && oke ? src[((size_t)(y0 + 1) * w + (size_t)x0 + 1) * 3 + c] : 0;
        float v = fmaf(vse, se, fmaf(vsw, sw_, fmaf(vne, ne, vnw * nw)));
        v = nearbyintf(v);
        o[c] = (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : v);
      }
    }
  }
}

/* _blurred_degenerate_image: the 3x3 kernel 1 1 1 / 1 5 1 / 1 1 1 over 13
 * in float32, rounded half to even; the border rows and columns kept. */
static void blurred(const uint8_t *s, uint8_t *o, uint32_t w, uint32_t h) {
  memcpy(o, s, (size_t)w * h * 3);
  const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
  size_t rl = (size_t)w * 3;
  for (uint32_t y = 1; y + 1 < h; y++) {
    const uint8_t *r0 = s + (y - 1) * rl, *r1 = s + y * rl, *r2 = s + (y + 1) * rl;
    for (uint32_t x = 1; x + 1 < w; x++)
      for (int c = 0; c < 3; c++) {
        size_t i = (size_t)x * 3 + (size_t)c;
        float v = (float)r0[i - 3] * k1;
        v = v + (float)r0[i] * k1;
        v = v + (float)r0[i + 3] * k1;
        v = v + (float)r1[i - 3] * k1;
        v = v + (float)r1[i] * k5;
        v = v + (float)r1[i + 3] * k1;
        v = v + (float)r2[i - 3] * k1;
        v = v + (float)r2[i] * k1;
        v = v + (float)r2[i + 3] * k1;
        v = nearbyintf(v);
        o[y * rl + i] = (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : v);
      }
  }
}

int stk__augmix_apply_op(stk__policy_scratch *s, uint8_t *px, uint32_t w, uint32_t h,
                         int pa, double mag) {
  size_t n = (size_t)w * h, bytes = n * 3;
  double m[6];
  switch (pa) {
    case STK__PA_SHEAR_X:
    case STK__PA_SHEAR_Y:
    case STK__PA_TRANSLATE_X:
    case STK__PA_TRANSLATE_Y:
    case STK__PA_ROTATE:
      if (stk__grow((void **)&s->tmp, &s->cap, bytes ? bytes : 1)) return -1;
      if (pa == STK__PA_SHEAR_X || pa == STK__PA_SHEAR_Y) {
        /* center (0, 0): relative to the image center, (-w/2, -h/2) */
        double deg = atan(mag) * (180.0 / M_PI);
        inverse_affine(m, -(double)w * 0.5, -(double)h * 0.5, 0, 0, 0,
                       pa == STK__PA_SHEAR_X ? deg : 0.0,
                       pa == STK__PA_SHEAR_Y ? deg : 0.0);
      } else if (pa == STK__PA_ROTATE) {
        inverse_affine(m, 0, 0, -mag, 0, 0, 0, 0);
      } else {
        double t = trunc(mag); /* int(magnitude) */
        inverse_affine(m, 0, 0, 0, pa == STK__PA_TRANSLATE_X ? t : 0,
                       pa == STK__PA_TRANSLATE_Y ? t : 0, 0, 0);
      }
      memcpy(s->tmp, px, bytes);
      grid_affine(s->tmp, px, w, h, m);
      return 0;
    case STK__PA_BRIGHTNESS: {
      float f = (float)(1.0 + mag), g = (float)(1.0 - (1.0 + mag));
      for (size_t i = 0; i < bytes; i++) px[i] = blend(px[i], 0.0f, f, g);
      return 0;
    }
    case STK__PA_COLOR: {
      float f = (float)(1.0 + mag), g = (float)(1.0 - (1.0 + mag));
      for (size_t i = 0; i < n; i++) {
        uint8_t *p = px + 3 * i;
        float l = gray(p);
        for (int c = 0; c < 3; c++) p[c] = blend(p[c], l, f, g);
      }
      return 0;
    }
    case STK__PA_CONTRAST: {
      /* the mean of the truncated grayscale, as a float32 sum (exact below
       * 2^24) over the pixel count */
      uint64_t sum = 0;
      for (size_t i = 0; i < n; i++) sum += gray(px + 3 * i);
      float mean = (float)sum / (float)n;
      float f = (float)(1.0 + mag), g = (float)(1.0 - (1.0 + mag));
      for (size_t i = 0; i < bytes; i++) px[i] = blend(px[i], mean, f, g);
      return 0;
    }
    case STK__PA_SHARPNESS: {
      if (w <= 2 || h <= 2) return 0;
      if (stk__grow((void **)&s->tmp, &s->cap, bytes)) return -1;
      blurred(px, s->tmp, w, h);
      float f = (float)(1.0 + mag), g = (float)(1.0 - (1.0 + mag));
      for (size_t i = 0; i < bytes; i++) px[i] = blend(px[i], s->tmp[i], f, g);
      return 0;
    }
    case STK__PA_AUTOCONTRAST: {
      for (int c = 0; c < 3; c++) {
        uint8_t lo = 255, hi = 0;
        for (size_t i = 0; i < n; i++) {
          uint8_t v = px[3 * i + c];
          lo = v < lo ? v : lo, hi = v > hi ? v : hi;
        }
        float mn = lo, scale = 1.0f;
        /* bound / (max - min): torch's reciprocal, then times 255 */
        if (hi > lo) scale = (1.0f / ((float)hi - (float)lo)) * 255.0f;
        else mn = 0;
        uint8_t lut[256];
        for (int v = 0; v < 256; v++) {
          float t = ((float)v - mn) * scale;
          lut[v] = (uint8_t)(t <= 0 ? 0 : t >= 255 ? 255 : t);
        }
        for (size_t i = 0; i < n; i++) px[3 * i + c] = lut[px[3 * i + c]];
      }
      return 0;
    }
    default: /* posterize, solarize, equalize: PIL's tables are the tensor's */
      return stk__policy_apply_op(s, px, w, h, pa, mag);
  }
}

int stk__augmix_run(stk__policy_scratch *s, const stk__op *op, uint8_t *px, uint32_t w,
                    uint32_t h, stk_rng *rng) {
  stk__augmix d;
  stk__augmix_draw(op, rng, &d);
  return stk__augmix_mix(s, &d, px, w, h);
}

int stk__augmix_mix(stk__policy_scratch *s, const stk__augmix *d, uint8_t *px, uint32_t w,
                    uint32_t h) {
  size_t bytes = (size_t)w * h * 3;
  if (stk__grow((void **)&s->aug, &s->acap, bytes ? bytes : 1) ||
      stk__grow((void **)&s->mix, &s->mcap, (bytes ? bytes : 1) * sizeof(float)))
    return -1;
  for (size_t i = 0; i < bytes; i++) s->mix[i] = d->m[0] * (float)px[i];
  for (int c = 0; c < d->width; c++) {
    memcpy(s->aug, px, bytes);
    for (int k = 0; k < d->depth[c]; k++) {
      const stk__policy_choice *ch = &d->ch[c][k];
      double mag = stk__augmix_magnitude(ch->pa, ch->bin, w, h);
      if (ch->neg) mag = -mag;
      if (stk__augmix_apply_op(s, s->aug, w, h, ch->pa, mag)) return -1;
    }
    float cw = d->d[c] * d->m[1];
    for (size_t i = 0; i < bytes; i++) s->mix[i] = s->mix[i] + cw * (float)s->aug[i];
  }
  for (size_t i = 0; i < bytes; i++) {
    float v = s->mix[i];
    px[i] = (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : v);
  }
  return 0;
}
