/* ops_policy.c - torchvision's automatic augmentation on PIL images: the
 * operations of autoaugment.py's `_apply_op` (PIL's nearest-neighbour
 * affine transforms with their 16.16 fixed-point and floating paths,
 * ImageEnhance blends, the SMOOTH filter behind Sharpness, ImageOps
 * lookup tables) and the policies that choose among them (RandAugment,
 * TrivialAugmentWide, AutoAugment's learned tables), drawing from the
 * sample's generator.
 *
 * Owns nothing but the scratch it is handed; pure functions of their
 * arguments, so thread-safe with one scratch per thread.
 */
#include "ops_policy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

void stk__pil_brightness(uint8_t *px, size_t n, float f) {
  for (size_t i = 0; i < n * 3; i++) px[i] = stk__blend(0, px[i], f);
}

void stk__pil_contrast(uint8_t *px, size_t n, float f) {
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += stk__luma(px + 3 * i);
  int mean = (int)(sum / (double)n + 0.5);
  for (size_t i = 0; i < n * 3; i++) px[i] = stk__blend(mean, px[i], f);
}

void stk__pil_color(uint8_t *px, size_t n, float f) {
  for (size_t i = 0; i < n; i++) {
    uint8_t *p = px + 3 * i, g = stk__luma(p);
    for (int c = 0; c < 3; c++) p[c] = stk__blend(g, p[c], f);
  }
}

void stk__policy_scratch_free(stk__policy_scratch *s) {
  free(s->tmp);
  free(s->aug);
  free(s->mix);
  memset(s, 0, sizeof(*s));
}

/* ---- geometry: Image.transform(AFFINE, NEAREST) ---------------------- */

/* PIL's COORD: the source index of a coordinate (-1 left of 0). */
static inline int coord(double v) { return v < 0.0 ? -1 : (int)v; }

static int fixed_ok(const double a[6], double x, double y) {
  return fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 &&
         fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

static inline int fix16(double v) { return (int)floor(v * 65536.0 + 0.5); }

/* Output pixel (x, y) takes input a * (x + 0.5, y + 0.5) (nearest), 0
 * outside, as PIL's ImagingTransformAffine: the scaling path when the
 * matrix has no cross terms, 16.16 fixed point when every corner maps
 * within +-32768, else doubles. dst is w x h, zeroed here. */
static void pil_affine(const uint8_t *src, uint8_t *dst, uint32_t w, uint32_t h,
                       const double a[6]) {
  memset(dst, 0, (size_t)w * h * 3);
  int W = (int)w, H = (int)h;
  if (a[1] == 0 && a[3] == 0) {
    double yo = a[5] + a[4] * 0.5;
    for (int y = 0; y < H; y++, yo += a[4]) {
      int yi = coord(yo);
      if (yi < 0 || yi >= H) continue;
      double xo = a[2] + a[0] * 0.5;
      for (int x = 0; x < W; x++, xo += a[0]) {
        int xi = coord(xo);
        if (xi >= 0 && xi < W)
          memcpy(dst + ((size_t)y * w + x) * 3, src + ((size_t)yi * w + xi) * 3, 3);
      }
    }
    return;
  }
  if (fixed_ok(a, 0, 0) && fixed_ok(a, w, h) && fixed_ok(a, 0, h) && fixed_ok(a, w, 0)) {
    int a0 = fix16(a[0]), a1 = fix16(a[1]), a3 = fix16(a[3]), a4 = fix16(a[4]);
    int a2 = fix16(a[2] + a[0] * 0.5 + a[1] * 0.5);
    int a5 = fix16(a[5] + a[3] * 0.5 + a[4] * 0.5);
    for (int y = 0; y < H; y++, a2 += a1, a5 += a4) {
      int xx = a2, yy = a5;
      for (int x = 0; x < W; x++, xx += a0, yy += a3) {
        int xi = xx >> 16, yi = yy >> 16;
        if (xi >= 0 && xi < W && yi >= 0 && yi < H)
          memcpy(dst + ((size_t)y * w + x) * 3, src + ((size_t)yi * w + xi) * 3, 3);
      }
    }
    return;
  }
  double xo = a[2] + a[1] * 0.5 + a[0] * 0.5, yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
  for (int y = 0; y < H; y++, xo += a[1], yo += a[4]) {
    double xx = xo, yy = yo;
    for (int x = 0; x < W; x++, xx += a[0], yy += a[3]) {
      int xi = coord(xx), yi = coord(yy);
      if (xi >= 0 && xi < W && yi >= 0 && yi < H)
        memcpy(dst + ((size_t)y * w + x) * 3, src + ((size_t)yi * w + xi) * 3, 3);
    }
  }
}

/* Python's round(x, 15): correctly rounded through the decimal text. */
static double round15(double x) {
  char b[64];
  snprintf(b, sizeof(b), "%.15f", x);
  return strtod(b, NULL);
}

/* Python's float % 360.0 (the result takes the divisor's sign). */
static double pymod360(double x) {
  double m = fmod(x, 360.0);
  if (m != 0) {
    if (m < 0) m += 360.0;
  } else {
    m = 0.0;
  }
  return m;
}

/* PIL's transpose by 90k degrees counter-clockwise of a square or any
 * image for 180 (size kept) from src into dst. */
static void transpose(const uint8_t *s, uint8_t *o, uint32_t w, uint32_t h, int k) {
  for (uint32_t y = 0; y < h; y++)
    for (uint32_t x = 0; x < w; x++) {
      uint32_t sx, sy;
      if (k == 1) sx = w - 1 - y, sy = x;
      else if (k == 2) sx = w - 1 - x, sy = h - 1 - y;
      else sx = y, sy = h - 1 - x;
      memcpy(o + ((size_t)y * w + x) * 3, s + ((size_t)sy * w + sx) * 3, 3);
    }
}

/* The inverse matrix torchvision's F.affine hands PIL for a shear of
 * atan(m) (x: sx, y: sy) about center (0, 0) or a translation (tx, ty)
 * about the image center, as _get_inverse_affine_matrix computes it. */
static void affine_matrix(double a[6], double cx, double cy, double tx, double ty,
                          double shx, double shy) {
  double rot = 0.0, sx = shx * (M_PI / 180.0), sy = shy * (M_PI / 180.0);
  double A = cos(rot - sy) / cos(sy);
  double B = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
  double C = sin(rot - sy) / cos(sy);
  double D = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
  double m[6] = {D, -B, 0.0, -C, A, 0.0};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  memcpy(a, m, sizeof(m));
}

/* ---- pixels: ImageEnhance.Sharpness and ImageOps tables -------------- */

/* ImageFilter.SMOOTH (3x3 kernel 1 1 1 / 1 5 1 / 1 1 1, / 13) as PIL's
 * ImagingFilter3x3 computes it: float weights, rows y+1, y, y-1 summed in
 * that order onto 0.5, truncated; the border pixels copied. */
static void smooth(const uint8_t *s, uint8_t *o, uint32_t w, uint32_t h) {
  memcpy(o, s, (size_t)w * h * 3);
  if (w < 3 || h < 3) return;
  const float k1 = 1.f / 13.f, k5 = 5.f / 13.f;
  size_t rl = (size_t)w * 3;
  for (uint32_t y = 1; y + 1 < h; y++) {
    const uint8_t *r_1 = s + (y - 1) * rl, *r0 = s + y * rl, *r1 = s + (y + 1) * rl;
    uint8_t *out = o + y * rl;
    for (uint32_t x = 1; x + 1 < w; x++)
      for (int c = 0; c < 3; c++) {
        size_t i = (size_t)x * 3 + (size_t)c;
        float ss = 0.5f;
        ss += (float)r1[i - 3] * k1 + (float)r1[i] * k1 + (float)r1[i + 3] * k1;
        ss += (float)r0[i - 3] * k1 + (float)r0[i] * k5 + (float)r0[i + 3] * k1;
        ss += (float)r_1[i - 3] * k1 + (float)r_1[i] * k1 + (float)r_1[i + 3] * k1;
        out[i] = ss <= 0 ? 0 : ss >= 255 ? 255 : (uint8_t)ss;
      }
  }
}

static void apply_lut(uint8_t *px, size_t n, const uint8_t lut[3][256]) {
  for (size_t i = 0; i < n; i++)
    for (int c = 0; c < 3; c++) px[3 * i + c] = lut[c][px[3 * i + c]];
}

/* ImageOps.autocontrast (cutoff 0) or equalize: per channel tables from
 * its histogram. */
static void histogram_op(uint8_t *px, size_t n, int equalize) {
  uint8_t lut[3][256];
  for (int c = 0; c < 3; c++) {
    size_t hist[256] = {0};
    for (size_t i = 0; i < n; i++) hist[px[3 * i + c]]++;
    for (int v = 0; v < 256; v++) lut[c][v] = (uint8_t)v;
    if (!equalize) {
      int lo = 0, hi = 255;
      while (lo < 255 && !hist[lo]) lo++;
      while (hi > 0 && !hist[hi]) hi--;
      if (hi <= lo) continue;
      double scale = 255.0 / (hi - lo), offset = -lo * scale;
      for (int v = 0; v < 256; v++) {
        double t = v * scale + offset;
        int iv = (int)t; /* Python's int(): toward zero */
        lut[c][v] = (uint8_t)(iv < 0 ? 0 : iv > 255 ? 255 : iv);
      }
    } else {
      size_t total = 0, last = 0, used = 0;
      for (int v = 0; v < 256; v++)
        if (hist[v]) total += hist[v], last = hist[v], used++;
      if (used <= 1) continue;
      size_t step = (total - last) / 255;
      if (!step) continue;
      size_t acc = step / 2;
      for (int v = 0; v < 256; v++) {
        size_t q = acc / step;
        lut[c][v] = (uint8_t)(q > 255 ? 255 : q); /* PIL's point() clips */
        acc += hist[v];
      }
    }
  }
  apply_lut(px, n, (const uint8_t(*)[256])lut);
}

/* ---- _apply_op -------------------------------------------------------- */

int stk__policy_apply_op(stk__policy_scratch *s, uint8_t *px, uint32_t w, uint32_t h,
                         int pa, double mag) {
  size_t n = (size_t)w * h, bytes = n * 3;
  switch (pa) {
    case STK__PA_SHEAR_X:
    case STK__PA_SHEAR_Y:
    case STK__PA_TRANSLATE_X:
    case STK__PA_TRANSLATE_Y:
    case STK__PA_ROTATE:
    case STK__PA_SHARPNESS:
      if (stk__grow((void **)&s->tmp, &s->cap, bytes ? bytes : 1)) return -1;
      break;
    default:
      break;
  }
  double a[6];
  switch (pa) {
    case STK__PA_SHEAR_X:
    case STK__PA_SHEAR_Y: {
      /* shear = math.degrees(math.atan(m)), center (0, 0) */
      double deg = atan(mag) * (180.0 / M_PI);
      affine_matrix(a, 0, 0, 0, 0, pa == STK__PA_SHEAR_X ? deg : 0.0,
                    pa == STK__PA_SHEAR_Y ? deg : 0.0);
      memcpy(s->tmp, px, bytes);
      pil_affine(s->tmp, px, w, h, a);
      break;
    }
    case STK__PA_TRANSLATE_X:
    case STK__PA_TRANSLATE_Y: {
      double t = trunc(mag); /* int(magnitude) */
      affine_matrix(a, w * 0.5, h * 0.5, pa == STK__PA_TRANSLATE_X ? t : 0,
                    pa == STK__PA_TRANSLATE_Y ? t : 0, 0, 0);
      memcpy(s->tmp, px, bytes);
      pil_affine(s->tmp, px, w, h, a);
      break;
    }
    case STK__PA_ROTATE: {
      /* Image.rotate(angle), expand off, center (w / 2, h / 2) */
      double ang = pymod360(mag);
      if (ang == 0) break;
      if (ang == 180 || ((ang == 90 || ang == 270) && w == h)) {
        memcpy(s->tmp, px, bytes);
        transpose(s->tmp, px, w, h, ang == 90 ? 1 : ang == 180 ? 2 : 3);
        break;
      }
      double r = -(ang * (M_PI / 180.0)), cx = w / 2.0, cy = h / 2.0;
      double m[6] = {round15(cos(r)),  round15(sin(r)), 0.0,
                     round15(-sin(r)), round15(cos(r)), 0.0};
      double m2 = m[0] * -cx + m[1] * -cy + m[2], m5 = m[3] * -cx + m[4] * -cy + m[5];
      m[2] = m2 + cx, m[5] = m5 + cy;
      memcpy(s->tmp, px, bytes);
      pil_affine(s->tmp, px, w, h, m);
      break;
    }
    case STK__PA_BRIGHTNESS:
      stk__pil_brightness(px, n, (float)(1.0 + mag));
      break;
    case STK__PA_COLOR:
      stk__pil_color(px, n, (float)(1.0 + mag));
      break;
    case STK__PA_CONTRAST:
      stk__pil_contrast(px, n, (float)(1.0 + mag));
      break;
    case STK__PA_SHARPNESS: {
      float f = (float)(1.0 + mag);
      smooth(px, s->tmp, w, h);
      for (size_t i = 0; i < bytes; i++) px[i] = stk__blend(s->tmp[i], px[i], f);
      break;
    }
    case STK__PA_POSTERIZE: {
      int bits = (int)mag; /* int(magnitude) */
      uint8_t lut[3][256], mask = (uint8_t)(bits >= 8 ? 0xff : ~((1u << (8 - bits)) - 1));
      for (int v = 0; v < 256; v++)
        lut[0][v] = lut[1][v] = lut[2][v] = (uint8_t)(v & mask);
      apply_lut(px, n, (const uint8_t(*)[256])lut);
      break;
    }
    case STK__PA_SOLARIZE: {
      uint8_t lut[3][256];
      for (int v = 0; v < 256; v++)
        lut[0][v] = lut[1][v] = lut[2][v] = (uint8_t)(v < mag ? v : 255 - v);
      apply_lut(px, n, (const uint8_t(*)[256])lut);
      break;
    }
    case STK__PA_AUTOCONTRAST:
    case STK__PA_EQUALIZE:
      histogram_op(px, n, pa == STK__PA_EQUALIZE);
      break;
    case STK__PA_INVERT:
      for (size_t i = 0; i < bytes; i++) px[i] = (uint8_t)(255 - px[i]);
      break;
    default: /* identity */
      break;
  }
  return 0;
}

float stk__linspace(float start, float end, int bins, int i) {
  float step = (end - start) / (float)(bins - 1);
  return i < bins / 2 ? start + step * (float)i : end - step * (float)(bins - 1 - i);
}

double stk__policy_magnitude(int pa, int bin, int bins, uint32_t w, uint32_t h, int wide,
                             int *signed_out) {
  *signed_out = 0;
  float top;
  switch (pa) {
    case STK__PA_SHEAR_X:
    case STK__PA_SHEAR_Y:
      top = wide ? 0.99f : 0.3f;
      break;
    case STK__PA_TRANSLATE_X:
    case STK__PA_TRANSLATE_Y:
      top = wide ? 32.0f
                 : (float)(150.0 / 331.0 *
                           (pa == STK__PA_TRANSLATE_X ? (double)w : (double)h));
      break;
    case STK__PA_ROTATE:
      top = wide ? 135.0f : 30.0f;
      break;
    case STK__PA_BRIGHTNESS:
    case STK__PA_COLOR:
    case STK__PA_CONTRAST:
    case STK__PA_SHARPNESS:
      top = wide ? 0.99f : 0.9f;
      break;
    case STK__PA_POSTERIZE: {
      /* 8 - (arange(bins) / ((bins - 1) / k)).round().int(): float32
       * division, round half to even */
      float d = (float)((double)(bins - 1) / (wide ? 6.0 : 4.0));
      return 8 - (int)nearbyintf((float)bin / d);
    }
    case STK__PA_SOLARIZE:
      return stk__linspace(255.0f, 0.0f, bins, bin);
    default:
      return 0;
  }
  *signed_out = 1;
  return stk__linspace(0.0f, top, bins, bin);
}

/* AutoAugment's learned policies (torchvision's _get_policies, in its
 * order): 25 pairs of (operation, probability, magnitude bin of 10; -1 for
 * none) per policy: imagenet, cifar10, svhn. */
typedef struct {
  int8_t pa;
  float p;
  int8_t bin;
} aa_step;
static const aa_step AA_POLICIES[3][25][2] = {
    {
        {{STK__PA_POSTERIZE, 0.4f, 8}, {STK__PA_ROTATE, 0.6f, 9}},
        {{STK__PA_SOLARIZE, 0.6f, 5}, {STK__PA_AUTOCONTRAST, 0.6f, -1}},
        {{STK__PA_EQUALIZE, 0.8f, -1}, {STK__PA_EQUALIZE, 0.6f, -1}},
        {{STK__PA_POSTERIZE, 0.6f, 7}, {STK__PA_POSTERIZE, 0.6f, 6}},
        {{STK__PA_EQUALIZE, 0.4f, -1}, {STK__PA_SOLARIZE, 0.2f, 4}},
        {{STK__PA_EQUALIZE, 0.4f, -1}, {STK__PA_ROTATE, 0.8f, 8}},
        {{STK__PA_SOLARIZE, 0.6f, 3}, {STK__PA_EQUALIZE, 0.6f, -1}},
        {{STK__PA_POSTERIZE, 0.8f, 5}, {STK__PA_EQUALIZE, 1.0f, -1}},
        {{STK__PA_ROTATE, 0.2f, 3}, {STK__PA_SOLARIZE, 0.6f, 8}},
        {{STK__PA_EQUALIZE, 0.6f, -1}, {STK__PA_POSTERIZE, 0.4f, 6}},
        {{STK__PA_ROTATE, 0.8f, 8}, {STK__PA_COLOR, 0.4f, 0}},
        {{STK__PA_ROTATE, 0.4f, 9}, {STK__PA_EQUALIZE, 0.6f, -1}},
        {{STK__PA_EQUALIZE, 0.0f, -1}, {STK__PA_EQUALIZE, 0.8f, -1}},
        {{STK__PA_INVERT, 0.6f, -1}, {STK__PA_EQUALIZE, 1.0f, -1}},
        {{STK__PA_COLOR, 0.6f, 4}, {STK__PA_CONTRAST, 1.0f, 8}},
        {{STK__PA_ROTATE, 0.8f, 8}, {STK__PA_COLOR, 1.0f, 2}},
        {{STK__PA_COLOR, 0.8f, 8}, {STK__PA_SOLARIZE, 0.8f, 7}},
        {{STK__PA_SHARPNESS, 0.4f, 7}, {STK__PA_INVERT, 0.6f, -1}},
        {{STK__PA_SHEAR_X, 0.6f, 5}, {STK__PA_EQUALIZE, 1.0f, -1}},
        {{STK__PA_COLOR, 0.4f, 0}, {STK__PA_EQUALIZE, 0.6f, -1}},
        {{STK__PA_EQUALIZE, 0.4f, -1}, {STK__PA_SOLARIZE, 0.2f, 4}},
        {{STK__PA_SOLARIZE, 0.6f, 5}, {STK__PA_AUTOCONTRAST, 0.6f, -1}},
        {{STK__PA_INVERT, 0.6f, -1}, {STK__PA_EQUALIZE, 1.0f, -1}},
        {{STK__PA_COLOR, 0.6f, 4}, {STK__PA_CONTRAST, 1.0f, 8}},
        {{STK__PA_EQUALIZE, 0.8f, -1}, {STK__PA_EQUALIZE, 0.6f, -1}},
    },
    {
        {{STK__PA_INVERT, 0.1f, -1}, {STK__PA_CONTRAST, 0.2f, 6}},
        {{STK__PA_ROTATE, 0.7f, 2}, {STK__PA_TRANSLATE_X, 0.3f, 9}},
        {{STK__PA_SHARPNESS, 0.8f, 1}, {STK__PA_SHARPNESS, 0.9f, 3}},
        {{STK__PA_SHEAR_Y, 0.5f, 8}, {STK__PA_TRANSLATE_Y, 0.7f, 9}},
        {{STK__PA_AUTOCONTRAST, 0.5f, -1}, {STK__PA_EQUALIZE, 0.9f, -1}},
        {{STK__PA_SHEAR_Y, 0.2f, 7}, {STK__PA_POSTERIZE, 0.3f, 7}},
        {{STK__PA_COLOR, 0.4f, 3}, {STK__PA_BRIGHTNESS, 0.6f, 7}},
        {{STK__PA_SHARPNESS, 0.3f, 9}, {STK__PA_BRIGHTNESS, 0.7f, 9}},
        {{STK__PA_EQUALIZE, 0.6f, -1}, {STK__PA_EQUALIZE, 0.5f, -1}},
        {{STK__PA_CONTRAST, 0.6f, 7}, {STK__PA_SHARPNESS, 0.6f, 5}},
        {{STK__PA_COLOR, 0.7f, 7}, {STK__PA_TRANSLATE_X, 0.5f, 8}},
        {{STK__PA_EQUALIZE, 0.3f, -1}, {STK__PA_AUTOCONTRAST, 0.4f, -1}},
        {{STK__PA_TRANSLATE_Y, 0.4f, 3}, {STK__PA_SHARPNESS, 0.2f, 6}},
        {{STK__PA_BRIGHTNESS, 0.9f, 6}, {STK__PA_COLOR, 0.2f, 8}},
        {{STK__PA_SOLARIZE, 0.5f, 2}, {STK__PA_INVERT, 0.0f, -1}},
        {{STK__PA_EQUALIZE, 0.2f, -1}, {STK__PA_AUTOCONTRAST, 0.6f, -1}},
        {{STK__PA_EQUALIZE, 0.2f, -1}, {STK__PA_EQUALIZE, 0.6f, -1}},
        {{STK__PA_COLOR, 0.9f, 9}, {STK__PA_EQUALIZE, 0.6f, -1}},
        {{STK__PA_AUTOCONTRAST, 0.8f, -1}, {STK__PA_SOLARIZE, 0.2f, 8}},
        {{STK__PA_BRIGHTNESS, 0.1f, 3}, {STK__PA_COLOR, 0.7f, 0}},
        {{STK__PA_SOLARIZE, 0.4f, 5}, {STK__PA_AUTOCONTRAST, 0.9f, -1}},
        {{STK__PA_TRANSLATE_Y, 0.9f, 9}, {STK__PA_TRANSLATE_Y, 0.7f, 9}},
        {{STK__PA_AUTOCONTRAST, 0.9f, -1}, {STK__PA_SOLARIZE, 0.8f, 3}},
        {{STK__PA_EQUALIZE, 0.8f, -1}, {STK__PA_INVERT, 0.1f, -1}},
        {{STK__PA_TRANSLATE_Y, 0.7f, 9}, {STK__PA_AUTOCONTRAST, 0.9f, -1}},
    },
    {
        {{STK__PA_SHEAR_X, 0.9f, 4}, {STK__PA_INVERT, 0.2f, -1}},
        {{STK__PA_SHEAR_Y, 0.9f, 8}, {STK__PA_INVERT, 0.7f, -1}},
        {{STK__PA_EQUALIZE, 0.6f, -1}, {STK__PA_SOLARIZE, 0.6f, 6}},
        {{STK__PA_INVERT, 0.9f, -1}, {STK__PA_EQUALIZE, 0.6f, -1}},
        {{STK__PA_EQUALIZE, 0.6f, -1}, {STK__PA_ROTATE, 0.9f, 3}},
        {{STK__PA_SHEAR_X, 0.9f, 4}, {STK__PA_AUTOCONTRAST, 0.8f, -1}},
        {{STK__PA_SHEAR_Y, 0.9f, 8}, {STK__PA_INVERT, 0.4f, -1}},
        {{STK__PA_SHEAR_Y, 0.9f, 5}, {STK__PA_SOLARIZE, 0.2f, 6}},
        {{STK__PA_INVERT, 0.9f, -1}, {STK__PA_AUTOCONTRAST, 0.8f, -1}},
        {{STK__PA_EQUALIZE, 0.6f, -1}, {STK__PA_ROTATE, 0.9f, 3}},
        {{STK__PA_SHEAR_X, 0.9f, 4}, {STK__PA_SOLARIZE, 0.3f, 3}},
        {{STK__PA_SHEAR_Y, 0.8f, 8}, {STK__PA_INVERT, 0.7f, -1}},
        {{STK__PA_EQUALIZE, 0.9f, -1}, {STK__PA_TRANSLATE_Y, 0.6f, 6}},
        {{STK__PA_INVERT, 0.9f, -1}, {STK__PA_EQUALIZE, 0.6f, -1}},
        {{STK__PA_CONTRAST, 0.3f, 3}, {STK__PA_ROTATE, 0.8f, 4}},
        {{STK__PA_INVERT, 0.8f, -1}, {STK__PA_TRANSLATE_Y, 0.0f, 2}},
        {{STK__PA_SHEAR_Y, 0.7f, 6}, {STK__PA_SOLARIZE, 0.4f, 8}},
        {{STK__PA_INVERT, 0.6f, -1}, {STK__PA_ROTATE, 0.8f, 4}},
        {{STK__PA_SHEAR_Y, 0.3f, 7}, {STK__PA_TRANSLATE_X, 0.9f, 3}},
        {{STK__PA_SHEAR_X, 0.1f, 6}, {STK__PA_INVERT, 0.6f, -1}},
        {{STK__PA_SOLARIZE, 0.7f, 2}, {STK__PA_TRANSLATE_Y, 0.6f, 7}},
        {{STK__PA_SHEAR_Y, 0.8f, 4}, {STK__PA_INVERT, 0.8f, -1}},
        {{STK__PA_SHEAR_X, 0.7f, 9}, {STK__PA_TRANSLATE_Y, 0.8f, 3}},
        {{STK__PA_SHEAR_Y, 0.8f, 5}, {STK__PA_AUTOCONTRAST, 0.7f, -1}},
        {{STK__PA_SHEAR_X, 0.7f, 2}, {STK__PA_INVERT, 0.1f, -1}},
    },
};

int stk__policy_draw(const stk__op *op, stk_rng *rng, stk__policy_choice *ch) {
  if (op->kind == STK__OP_AUTO_AUGMENT) {
    /* get_params: the pair, two probabilities, two signs (a signed
     * operation is negated when its sign is 0: u < 0.5) */
    int id = (int)(stk_rng_uniform(rng) * 25);
    double pr[2] = {stk_rng_uniform(rng), stk_rng_uniform(rng)};
    double sg[2] = {stk_rng_uniform(rng), stk_rng_uniform(rng)};
    int n = 0;
    for (int i = 0; i < 2; i++) {
      const aa_step *st = &AA_POLICIES[op->kw < 3 ? op->kw : 0][id][i];
      if (!(pr[i] <= (double)st->p)) continue;
      ch[n].pa = st->pa, ch[n].bin = st->bin < 0 ? 0 : st->bin, ch[n].neg = sg[i] < 0.5;
      n++;
    }
    return n;
  }
  int wide = op->kind == STK__OP_TRIVIAL_AUGMENT_WIDE;
  int n = wide ? 1 : (int)op->kh;
  if (n > STK__POLICY_MAX_OPS) n = STK__POLICY_MAX_OPS;
  for (int i = 0; i < n; i++) {
    int pa = (int)(stk_rng_uniform(rng) * STK__PA_SPACE);
    int bin = (int)op->kw;
    if (wide) bin = (int)(stk_rng_uniform(rng) * op->pad);
    int neg = stk_rng_uniform(rng) >= 0.5;
    ch[i].pa = pa, ch[i].bin = bin, ch[i].neg = neg;
  }
  return n;
}

int stk__auto_augment_step(int policy, int row, int i, float *p, int *bin) {
  const aa_step *st = &AA_POLICIES[policy][row][i];
  *p = st->p, *bin = st->bin;
  return st->pa;
}

int stk__policy_run(stk__policy_scratch *s, const stk__op *op, int pa, uint8_t *px,
                    uint32_t w, uint32_t h, stk_rng *rng) {
  if (op->kind == STK__OP_RAND_AUGMENT || op->kind == STK__OP_TRIVIAL_AUGMENT_WIDE ||
      op->kind == STK__OP_AUTO_AUGMENT) {
    int wide = op->kind == STK__OP_TRIVIAL_AUGMENT_WIDE;
    stk__policy_choice ch[STK__POLICY_MAX_OPS];
    int n = stk__policy_draw(op, rng, ch);
    for (int i = 0; i < n; i++) {
      int sg;
      double m =
          stk__policy_magnitude(ch[i].pa, ch[i].bin, (int)op->pad, w, h, wide, &sg);
      if (sg && ch[i].neg) m = -m;
      if (stk__policy_apply_op(s, px, w, h, ch[i].pa, m)) return -1;
    }
    return 0;
  }
  if (op->kind == STK__OP_IDENTITY) return 0;
  if (op->kind == STK__OP_AUG_MIX) return stk__augmix_run(s, op, px, w, h, rng);
  /* a sub-op: one draw against p, then the op with its magnitude; the
   * enhance factors are 1 + _apply_op's magnitude */
  if (stk_rng_uniform(rng) >= op->p) return 0;
  double m = op->lo[0];
  if (pa >= STK__PA_BRIGHTNESS && pa <= STK__PA_SHARPNESS) m -= 1.0;
  return stk__policy_apply_op(s, px, w, h, pa, m);
}
