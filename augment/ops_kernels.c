/* ops_kernels.c - what each op of the image pipeline does: the op
 * table KERNELS[] (one row per op kind: its step, and for an autoaugment
 * operation the `_apply_op` operation ops_policy.c runs), the steps (a
 * function per row: its random draws from the sample's stream, then the
 * geometry it asks of the runner or its pixel kernel) and the pixel
 * kernels, which follow torchvision on PIL images: ImageEnhance blends
 * for brightness/contrast/saturation, PIL's HSV round trip for hue, PIL's
 * luma for grayscale, torchvision's reflect-padded Gaussian kernel for
 * blur. ops_chain.c runs the chain and owns the buffers; a step works on
 * the runner's image (ops_kernels.h) and must not keep pointers into it.
 *
 * Adding an image op: its row of core/chain.c's OPS[] (grammar), its row
 * here with its step and pixel kernel, its tests and its row in
 * docs/pipelines.md (docs/architecture.md, "Where a change goes").
 *
 * One runner per builder: not thread-safe, needing no locks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chain.h"
#include "ops.h"
#include "ops_kernels.h"
#include "ops_policy.h"
#include "ops_python.h"

/* ---- pixel ops on the real image (PIL's integer and float recipes) ---- */

static inline uint8_t clip8(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* PIL's RGB -> HSV -> RGB with h shifted by `shift` (mod 256). */
static void hue(uint8_t *px, size_t n, uint8_t shift) {
  for (size_t i = 0; i < n; i++) {
    uint8_t *p = px + 3 * i, r = p[0], g = p[1], b = p[2];
    uint8_t mx = r > g ? (r > b ? r : b) : (g > b ? g : b);
    uint8_t mn = r < g ? (r < b ? r : b) : (g < b ? g : b);
    uint8_t uh = 0, us = 0, uv = mx;
    if (mx != mn) {
      float cr = (float)(mx - mn), s = cr / (float)mx;
      float rc = (float)(mx - r) / cr, gc = (float)(mx - g) / cr,
            bc = (float)(mx - b) / cr;
      float h;
      if (r == mx) h = bc - gc;
      else if (g == mx) h = (float)(2.0 + rc - bc);
      else h = (float)(4.0 + gc - rc);
      h = (float)fmod(h / 6.0 + 1.0, 1.0);
      uh = clip8((int)(h * 255.0));
      us = clip8((int)(s * 255.0));
    }
    uh = (uint8_t)(uh + shift);
    if (us == 0) {
      p[0] = p[1] = p[2] = uv;
      continue;
    }
    int k = (int)floor((float)uh * 6.0 / 255.0);
    float f = (float)((float)uh * 6.0 / 255.0 - (float)k);
    float fs = (float)((float)us / 255.0);
    uint8_t up = clip8((int)round((float)uv * (1.0 - fs)));
    uint8_t uq = clip8((int)round((float)uv * (1.0 - fs * f)));
    uint8_t ut = clip8((int)round((float)uv * (1.0 - fs * (1.0 - f))));
    uint8_t o[3];
    switch (k % 6) {
      case 0:
        o[0] = uv, o[1] = ut, o[2] = up;
        break;
      case 1:
        o[0] = uq, o[1] = uv, o[2] = up;
        break;
      case 2:
        o[0] = up, o[1] = uv, o[2] = ut;
        break;
      case 3:
        o[0] = up, o[1] = uq, o[2] = uv;
        break;
      case 4:
        o[0] = ut, o[1] = up, o[2] = uv;
        break;
      default:
        o[0] = uv, o[1] = up, o[2] = uq;
        break;
    }
    memcpy(p, o, 3);
  }
}

static inline uint32_t reflect(int64_t i, uint32_t n) {
  if (n == 1) return 0;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * ((int64_t)n - 1) - i;
  return (uint32_t)i;
}

/* torchvision's kernel: exp(-x^2 / (2 sigma^2)) at x = -(k-1)/2 .. (k-1)/2,
 * in float, divided by its sum. */
static void gauss_kernel(float *k, uint32_t n, float sigma) {
  float sum = 0, half = (float)(n - 1) * 0.5f;
  for (uint32_t i = 0; i < n; i++) {
    float x = ((float)i - half) / sigma;
    k[i] = expf(-0.5f * x * x);
    sum += k[i];
  }
  for (uint32_t i = 0; i < n; i++) k[i] /= sum;
}

static int blur(stk__chain_run *r, uint8_t *px, uint32_t w, uint32_t h, uint32_t kh,
                uint32_t kw, float sigma) {
  float kx[256], ky[256];
  gauss_kernel(kx, kw, sigma);
  gauss_kernel(ky, kh, sigma);
  size_t n = (size_t)w * h * 3;
  if (stk__grow((void **)&r->fb, &r->fcap, n * sizeof(float))) return -1;
  float *t = r->fb;
  int hx = (int)kw / 2, hy = (int)kh / 2;
  for (uint32_t y = 0; y < h; y++)
    for (uint32_t x = 0; x < w; x++)
      for (int c = 0; c < 3; c++) {
        float acc = 0;
        for (int k = 0; k < (int)kw; k++)
          acc += kx[k] * px[((size_t)y * w + reflect((int64_t)x + k - hx, w)) * 3 + c];
        t[((size_t)y * w + x) * 3 + c] = acc;
      }
  for (uint32_t y = 0; y < h; y++)
    for (uint32_t x = 0; x < w; x++)
      for (int c = 0; c < 3; c++) {
        float acc = 0;
        for (int k = 0; k < (int)kh; k++)
          acc += ky[k] * t[((size_t)reflect((int64_t)y + k - hy, h) * w + x) * 3 + c];
        float v = nearbyintf(acc); /* torch.round: half to even */
        px[((size_t)y * w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
  return 0;
}

void stk__flip_h(uint8_t *px, uint32_t w, uint32_t h) {
  for (uint32_t y = 0; y < h; y++) {
    uint8_t *row = px + (size_t)y * w * 3;
    for (uint32_t a = 0, b = w - 1; a < b; a++, b--) {
      uint8_t t[3];
      memcpy(t, row + 3 * a, 3), memcpy(row + 3 * a, row + 3 * b, 3),
          memcpy(row + 3 * b, t, 3);
    }
  }
}

static void flip_v(uint8_t *px, uint32_t w, uint32_t h) {
  size_t rl = (size_t)w * 3;
  for (uint32_t a = 0, b = h - 1; h && a < b; a++, b--) {
    uint8_t *ra = px + a * rl, *rb = px + b * rl;
    for (size_t i = 0; i < rl; i++) {
      uint8_t t = ra[i];
      ra[i] = rb[i], rb[i] = t;
    }
  }
}

/* torchvision's Pad on a PIL image: s (w x h) into o (ow x oh), its
 * top-left corner at (l, t). constant: fill in every channel (PIL's
 * ImageOps.expand); edge, reflect, symmetric: the pixel numpy's np.pad
 * takes in that mode, each axis on its own (reflect mirrors about the
 * edge pixel, symmetric repeats it; both go on mirroring past the far
 * side when the padding is wider than the image). */
static int64_t pad_at(int64_t i, uint32_t n, int mode) {
  if (i >= 0 && i < n) return i;
  if (mode == 0) return -1;
  if (mode == 1) return i < 0 ? 0 : (int64_t)n - 1;
  if (mode == 2) return reflect(i, n);
  int64_t p = 2 * (int64_t)n, m = ((i % p) + p) % p;
  return m < n ? m : p - 1 - m;
}

static void pad(const uint8_t *s, uint32_t w, uint32_t h, uint32_t l, uint32_t t,
                uint32_t ow, uint32_t oh, int mode, uint8_t fill, uint8_t *o) {
  for (uint32_t y = 0; y < oh; y++) {
    int64_t sy = pad_at((int64_t)y - t, h, mode);
    for (uint32_t x = 0; x < ow; x++) {
      int64_t sx = pad_at((int64_t)x - l, w, mode);
      uint8_t *d = o + ((size_t)y * ow + x) * 3;
      if (sy < 0 || sx < 0) d[0] = d[1] = d[2] = fill;
      else memcpy(d, s + ((size_t)sy * w + (size_t)sx) * 3, 3);
    }
  }
}

/* Rotate counter-clockwise by 90k degrees (PIL's transpose) into o. */
static void rotate(const uint8_t *s, uint32_t w, uint32_t h, int k, uint8_t *o) {
  uint32_t ow = k & 1 ? h : w, oh = k & 1 ? w : h;
  for (uint32_t y = 0; y < oh; y++)
    for (uint32_t x = 0; x < ow; x++) {
      uint32_t sx, sy;
      if (k == 1) sx = w - 1 - y, sy = x;
      else if (k == 2) sx = w - 1 - x, sy = h - 1 - y;
      else if (k == 3) sx = y, sy = h - 1 - x;
      else sx = x, sy = y;
      memcpy(o + ((size_t)y * ow + x) * 3, s + ((size_t)sy * w + sx) * 3, 3);
    }
}

/* train's jitter (STK__OP_TRAIN_JITTER): its draws, then the factors applied
 * to the real image. STK_OK, STK_NO_MEMORY or the decoder's error. */
static int train_jitter(stk__chain_run *r, stk__view *v, const stk__op *op,
                        stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  double u[3] = {stk_rng_uniform(rng), stk_rng_uniform(rng), stk_rng_uniform(rng)};
  float f[3];
  for (int k = 0; k < 3; k++) {
    float s = op->lo[k]; /* the job's strength; 1 - s and 1 + s in float */
    f[k] = s > 0 ? (float)(fmax(0, 1 - s) + u[k] * (1 + s - fmax(0, 1 - s))) : 1.f;
  }
  int rc = stk__view_real(r, v, dec, why, whylen);
  if (rc || (f[0] == 1 && f[1] == 1 && f[2] == 1)) return rc;
  if (stk__jitter8(&r->sc, r->buf[r->cur], (size_t)v->w * v->h, f[0], f[1], f[2]))
    return snprintf(why, whylen, "out of memory (jitter)"), STK_NO_MEMORY;
  return STK_OK;
}

/* ---- the steps (kernel_row.run): op, the chain's op i, on the image v,
 * drawing from rng; STK_OK, or an error with why ---- */

static int run_rrc(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
                   stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = STK_OK;
  if (stk__view_scaled(v) && (rc = stk__view_real(r, v, dec, why, whylen))) return rc;
  stk__box b = stk__rrc_box(v->w, v->h, op->lo[0], op->hi[0], op->lo[1], op->hi[1], rng);
  if (!(rc = stk__view_crop(r, v, dec, b.x, b.y, (uint32_t)b.w, (uint32_t)b.h, why,
                            whylen)))
    rc = stk__view_resize(r, v, dec, op->w, op->h, 1, why, whylen);
  return rc;
}

static int run_resize(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
                      stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  uint32_t nw = op->w, nh = op->h;
  if (!op->w) stk__resize_short(v->w, v->h, op->h, &nw, &nh);
  return stk__view_resize(r, v, dec, nw, nh, 0, why, whylen);
}

static int run_center_crop(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
                           stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  /* torchvision: pad to the crop's size if smaller, then
   * round((n - t) / 2) */
  int64_t y = op->h > v->h ? -(int64_t)((op->h - v->h) / 2)
                           : (int64_t)nearbyint(((double)v->h - op->h) / 2.0);
  int64_t x = op->w > v->w ? -(int64_t)((op->w - v->w) / 2)
                           : (int64_t)nearbyint(((double)v->w - op->w) / 2.0);
  return stk__view_crop(r, v, dec, x, y, op->w, op->h, why, whylen);
}

static int run_random_crop(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
                           stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  /* torchvision RandomCrop: pad, then top = randint(0, H' - h + 1),
   * left likewise (0 when the crop is larger: the rest is zero) */
  uint64_t ph = (uint64_t)v->h + 2 * op->pad, pw = (uint64_t)v->w + 2 * op->pad;
  double u1 = stk_rng_uniform(rng), u2 = stk_rng_uniform(rng);
  int64_t y = ph > op->h ? (int64_t)(u1 * (double)(ph - op->h + 1)) : 0;
  int64_t x = pw > op->w ? (int64_t)(u2 * (double)(pw - op->w + 1)) : 0;
  return stk__view_crop(r, v, dec, x - op->pad, y - op->pad, op->w, op->h, why, whylen);
}

static int run_hflip(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
                     stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = STK_OK;
  /* pending; over a pending resample too when the next op makes the
   * image real anyway (the end, train's jitter, another flip): the
   * resampler then writes the rows mirrored */
  double u = stk_rng_uniform(rng);
  int nk = i + 1 < r->c.n ? r->c.ops[i + 1].kind : (int)STK__OP_RANDOM_ERASING;
  if (nk != STK__OP_RANDOM_ERASING && nk != STK__OP_TRAIN_JITTER && nk != STK__OP_HFLIP &&
      (rc = stk__view_real(r, v, dec, why, whylen)))
    return rc;
  if (u < op->p) v->flip = !v->flip;
  return rc;
}

static int run_vflip_grayscale(stk__chain_run *r, stk__view *v, uint32_t i,
                               const stk__op *op, stk__decoder *dec, stk_rng *rng,
                               char *why, size_t whylen) {
  int rc = STK_OK;
  double u = stk_rng_uniform(rng);
  if ((rc = stk__view_real(r, v, dec, why, whylen))) return rc;
  if (u >= op->p) return rc;
  uint8_t *px = r->buf[r->cur];
  if (op->kind == STK__OP_VFLIP) flip_v(px, v->w, v->h);
  else
    for (size_t k = 0; k < (size_t)v->w * v->h; k++) {
      uint8_t *p = px + 3 * k;
      p[0] = p[1] = p[2] = stk__luma(p);
    }
  return rc;
}

static int run_rotate(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
                      stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = STK_OK;
  int ks[4], nk = 0;
  for (int k = 0; k < 4; k++)
    if (op->angles & (1u << k)) ks[nk++] = k;
  int k = ks[(int)(stk_rng_uniform(rng) * nk)];
  if ((rc = stk__view_real(r, v, dec, why, whylen)) || !k) return rc;
  uint8_t *o = stk__chain_buf(r, (size_t)v->w * v->h * 3);
  if (!o) {
    rc = STK_NO_MEMORY;
    snprintf(why, whylen, "out of memory (chain)");
    return rc;
  }
  rotate(r->buf[r->cur], v->w, v->h, k, o);
  r->cur = !r->cur;
  if (k & 1) {
    uint32_t t = v->w;
    v->w = v->sw = v->h, v->h = v->sh = t;
    v->x1 = v->w, v->y1 = v->h;
  }
  return rc;
}

static int run_color_jitter(stk__chain_run *r, stk__view *v, uint32_t i,
                            const stk__op *op, stk__decoder *dec, stk_rng *rng, char *why,
                            size_t whylen) {
  int rc = STK_OK;
  /* torchvision ColorJitter: a random order of the four, then the
   * factors */
  int order[4] = {0, 1, 2, 3};
  for (int k = 3; k > 0; k--) {
    int j = (int)(stk_rng_uniform(rng) * (k + 1));
    int t = order[k];
    order[k] = order[j], order[j] = t;
  }
  float f[4];
  for (int k = 0; k < 4; k++)
    f[k] = (float)(op->lo[k] + stk_rng_uniform(rng) * ((double)op->hi[k] - op->lo[k]));
  if ((rc = stk__view_real(r, v, dec, why, whylen))) return rc;
  uint8_t *px = r->buf[r->cur];
  size_t n = (size_t)v->w * v->h;
  for (int k = 0; k < 4; k++) {
    int which = order[k];
    if (op->lo[which] == op->hi[which] && op->lo[which] == (which == 3 ? 0.f : 1.f))
      continue; /* off */
    if (which == 0) stk__pil_brightness(px, n, f[0]);
    else if (which == 1) stk__pil_contrast(px, n, f[1]);
    else if (which == 2) stk__pil_color(px, n, f[2]);
    else hue(px, n, (uint8_t)(int32_t)((double)f[3] * 255));
  }
  return rc;
}

static int run_gaussian_blur(stk__chain_run *r, stk__view *v, uint32_t i,
                             const stk__op *op, stk__decoder *dec, stk_rng *rng,
                             char *why, size_t whylen) {
  int rc = STK_OK;
  float sigma =
      (float)(op->lo[0] + stk_rng_uniform(rng) * ((double)op->hi[0] - op->lo[0]));
  if ((rc = stk__view_real(r, v, dec, why, whylen))) return rc;
  if (blur(r, r->buf[r->cur], v->w, v->h, op->kh, op->kw, sigma)) {
    rc = STK_NO_MEMORY;
    snprintf(why, whylen, "out of memory (blur)");
  }
  return rc;
}

static int run_plugin(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
                      stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = STK_OK;
  uint64_t seed = (uint64_t)stk_rng_u32(rng) << 32;
  seed |= stk_rng_u32(rng);
  if ((rc = stk__view_real(r, v, dec, why, whylen))) return rc;
  stk_op_image img = {r->buf[r->cur], v->w, v->h, 3, (size_t)v->w * 3};
  char msg[160] = "";
  if (r->pinfo[i]->apply(r->pstate[i], &img, seed, msg, sizeof(msg))) {
    msg[sizeof(msg) - 1] = 0;
    snprintf(why, whylen, "plugin op %s failed: %s", op->name, msg[0] ? msg : "failed");
    rc = STK_USER_CODE;
  }
  return rc;
}

static int run_python(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
                      stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = STK_OK;
  /* a seed for the function's numpy Generator, drawn as a plugin
   * op's is; the output is op->h x op->w (0: the input's size) */
  uint64_t seed = (uint64_t)stk_rng_u32(rng) << 32;
  seed |= stk_rng_u32(rng);
  if ((rc = stk__view_real(r, v, dec, why, whylen))) return rc;
  uint32_t nw = op->h ? op->w : v->w, nh = op->h ? op->h : v->h;
  uint8_t *o = stk__chain_buf(r, (size_t)nw * nh * 3);
  if (!o) {
    rc = STK_NO_MEMORY;
    snprintf(why, whylen, "out of memory (chain)");
    return rc;
  }
  if ((rc = stk__pyop_apply(r->py, i, r->buf[r->cur], v->w, v->h, o, nw, nh, seed, why,
                            whylen)))
    return rc;
  r->cur = !r->cur;
  v->w = v->sw = nw, v->h = v->sh = nh;
  v->x1 = nw, v->y1 = nh;
  return rc;
}

static int run_eval_crop(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
                         stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = STK_OK;
  /* v is the virtual resize of the whole image (canonical_chain puts
   * this op right after it): the crop's box, in source pixels */
  double top = nearbyint(((double)v->h - op->h) / 2.0);
  double left = nearbyint(((double)v->w - op->w) / 2.0);
  double fx = (double)v->sw / v->w, fy = (double)v->sh / v->h;
  v->x0 = left * fx, v->x1 = (left + op->w) * fx;
  v->y0 = top * fy, v->y1 = (top + op->h) * fy;
  v->w = op->w, v->h = op->h;
  v->sup = fmax(fx, fy);
  return rc;
}

static int run_train_jitter(stk__chain_run *r, stk__view *v, uint32_t i,
                            const stk__op *op, stk__decoder *dec, stk_rng *rng, char *why,
                            size_t whylen) {
  return train_jitter(r, v, op, dec, rng, why, whylen);
}

static int run_pad(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
                   stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  uint32_t l = (uint32_t)op->lo[0], t = (uint32_t)op->lo[1];
  int rc = stk__view_real(r, v, dec, why, whylen);
  if (rc) return rc;
  uint32_t ow = v->w + l + (uint32_t)op->lo[2], oh = v->h + t + (uint32_t)op->lo[3];
  uint8_t *o = stk__chain_buf(r, (size_t)ow * oh * 3);
  if (!o) return snprintf(why, whylen, "out of memory (pad)"), STK_NO_MEMORY;
  pad(r->buf[r->cur], v->w, v->h, l, t, ow, oh, (int)op->kw, (uint8_t)op->kh, o);
  r->cur = !r->cur;
  v->w = v->sw = ow, v->h = v->sh = oh;
  v->x1 = ow, v->y1 = oh;
  return STK_OK;
}

static int run_policy(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
                      stk__decoder *dec, stk_rng *rng, char *why, size_t whylen);

/* What the runner does for each op (stk__kernel_row, ops_kernels.h):
 * one row per op, found by the name core/chain.c's OPS[] gives it (the
 * fused ops and plugin ops by names in parentheses). Adding an op: its
 * row here, its step above, its pixel kernel in the "pixel ops"
 * section. */

/* clang-format off */
static const stk__kernel_row KERNELS[] = {
  /* name                  run                  pa */
  {"decode",               NULL,                0},
  {"random_resized_crop",  run_rrc,             0},
  {"resize",               run_resize,          0},
  {"center_crop",          run_center_crop,     0},
  {"random_crop",          run_random_crop,     0},
  {"hflip",                run_hflip,           0},
  {"vflip",                run_vflip_grayscale, 0},
  {"rotate",               run_rotate,          0},
  {"color_jitter",         run_color_jitter,    0},
  {"grayscale",            run_vflip_grayscale, 0},
  {"gaussian_blur",        run_gaussian_blur,   0},
  {"(plugin)",             run_plugin,          0},
  {"shear_x",              run_policy,          STK__PA_SHEAR_X},
  {"shear_y",              run_policy,          STK__PA_SHEAR_Y},
  {"translate_x",          run_policy,          STK__PA_TRANSLATE_X},
  {"translate_y",          run_policy,          STK__PA_TRANSLATE_Y},
  {"rotate_by",            run_policy,          STK__PA_ROTATE},
  {"brightness",           run_policy,          STK__PA_BRIGHTNESS},
  {"color",                run_policy,          STK__PA_COLOR},
  {"contrast",             run_policy,          STK__PA_CONTRAST},
  {"sharpness",            run_policy,          STK__PA_SHARPNESS},
  {"posterize",            run_policy,          STK__PA_POSTERIZE},
  {"solarize",             run_policy,          STK__PA_SOLARIZE},
  {"autocontrast",         run_policy,          STK__PA_AUTOCONTRAST},
  {"equalize",             run_policy,          STK__PA_EQUALIZE},
  {"invert",               run_policy,          STK__PA_INVERT},
  {"identity",             run_policy,          STK__PA_IDENTITY},
  {"rand_augment",         run_policy,          0},
  {"trivial_augment_wide", run_policy,          0},
  {"auto_augment",         run_policy,          0},
  {"aug_mix",              run_policy,          0},
  {"random_erasing",       NULL,                0},
  {"mixup",                NULL,                0},
  {"cutmix",               NULL,                0},
  {"mixup_cutmix",         NULL,                0},
  {"pad",                  run_pad,             0},
  {"python",               run_python,          0},
  {"(train jitter)",       run_train_jitter,    0},
  {"(eval crop)",          run_eval_crop,       0},
};
/* clang-format on */
#define NKERNELS ((int)(sizeof(KERNELS) / sizeof(KERNELS[0])))

const stk__kernel_row *stk__kernel_of(int kind) {
  const char *name = kind == STK__OP_TRAIN_JITTER ? "(train jitter)"
                     : kind == STK__OP_EVAL_CROP  ? "(eval crop)"
                     : kind == STK__OP_PLUGIN     ? "(plugin)"
                                                  : stk__op_kind_name(kind);
  for (int k = 0; name && k < NKERNELS; k++)
    if (!strcmp(KERNELS[k].name, name)) return &KERNELS[k];
  return NULL;
}

/* the policies and their sub-ops (ops_policy.c) */
static int run_policy(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
                      stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = stk__view_real(r, v, dec, why, whylen);
  if (rc) return rc;
  if (stk__policy_run(&r->ps, op, r->k[i]->pa, r->buf[r->cur], v->w, v->h, rng)) {
    rc = STK_NO_MEMORY;
    snprintf(why, whylen, "out of memory (%s)", "augmentation policy");
  }
  return rc;
}
