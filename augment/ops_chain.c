/* ops_chain.c - the image pipeline: running an op chain on one sample.
 * A job's chain is its `pipeline = decode | ...` text (parsed by
 * core/chain.c), or for the named pipelines the canonical chain they are:
 * `train` is random_resized_crop | hflip (| train's fused jitter), `eval`
 * is resize | eval's fused center crop (canonical_chain below).
 *
 * Geometry before the first pixel op stays virtual: crops only move a box
 * in the source's coordinates and a resize only sets the size the box will
 * be resampled to, so `resize(256) | center_crop(224)` decodes (with DCT
 * scaling and region of interest) and resamples only what the crop keeps,
 * as the eval pipeline does, and `random_resized_crop` decodes as train
 * does. The image is made real (decoded, resampled, rounded to 8 bits, as
 * a PIL image would be after each torchvision transform) before every
 * pixel op, before a second resize, before a crop that reaches outside the
 * image (zero fill) and at the end; at the end the resampler's rows go
 * straight into the batch (stk__store_row) while they are in cache. A
 * horizontal flip stays pending until an op reads the pixels: a resample
 * writes its rows mirrored (the horizontal pass), else the store does, so
 * `train` costs no flip pass. Pixel ops
 * follow torchvision on PIL
 * images: ImageEnhance blends for brightness/contrast/saturation, PIL's
 * HSV round trip for hue, PIL's luma for grayscale, torchvision's
 * reflect-padded Gaussian kernel for blur.
 *
 * Random draws come from the sample's own stream (stk_rng keyed by seed,
 * epoch, sample index) in chain order; docs/pipelines.md lists each op's.
 *
 * Each op kind's step is one row of KERNELS[]: a function defined just
 * above the table, which calls the op's pixel kernel (the "pixel ops"
 * section) or, for an autoaugment operation, ops_policy.c with the
 * `_apply_op` operation its row names.
 *
 * Owns its buffers and the plugin ops' per-builder states; one run per
 * builder, so not thread-safe and needing no locks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chain.h"
#include "common/error.h"
#include "decode.h"
#include "ops.h"
#include "ops_chain.h"
#include "ops_policy.h"
#include "ops_python.h"
#include "plugin.h"
#include "augment/prof.h"
#include "stoker/op.h"

/* Fused ops: steps of the named pipelines that no chain text spells,
 * kept as ops so that `train` and `eval` build the bytes they always have.
 * Numbered after core's stk__op_kind; only canonical_chain makes them. */
enum {
  /* train's ColorJitter (lo[0..2]: brightness, contrast, saturation
   * strengths, as the job's keys): 3 draws, the factors uniform in
   * [max(0, 1 - v), 1 + v], applied in that fixed order with torchvision's
   * tensor formulas (stk__jitter8); commutes with a pending flip */
  OP_TRAIN_JITTER = 64,
  /* eval's CenterCrop(h, w) right after resize(s): offsets rounded half
   * to even, and a crop larger than the resized image stays a box whose
   * taps outside the image are dropped by the resampler (no zero fill) */
  OP_EVAL_CROP
};
_Static_assert((int)OP_TRAIN_JITTER > (int)STK__OP_PYTHON,
               "fused ops after core's kinds");

struct stk__chain_run {
  stk__chain c;
  int dtype, layout;
  uint32_t oh, ow;
  float norm[3][256];
  uint8_t *buf[2];
  size_t cap[2];
  int cur; /* buf[cur] holds the real image */
  float *fb;
  size_t fcap;
  uint8_t *cb; /* the box a resize of a crop reads */
  size_t ccap;
  uint16_t tb[3][256]; /* bfloat16 tables of norm */
  stk__post post;      /* the store's settings (no flip, no jitter) */
  stk__scratch sc;
  stk__policy_scratch ps;
  const stk_op_info *pinfo[STK__CHAIN_MAX_OPS];
  void *pstate[STK__CHAIN_MAX_OPS];
  stk__pyop *py; /* the python ops' process (ops_python.c), NULL without one */
};

/* The image between ops: virtual (a box of the JPEG or of buf[cur] to be
 * resampled to w x h) or real (buf[cur], w x h, box = all of it). */
typedef struct {
  int real;        /* 0: the source is the JPEG, 1: buf[cur] */
  uint32_t sw, sh; /* the source's size */
  double x0, y0, x1, y1;
  uint32_t w, h;
  int fast;   /* the pending resize comes from random_resized_crop: decode
                 as the train pipeline does */
  int flip;   /* to be mirrored horizontally (pending hflip): by the
                 resample or crop that makes it real, else by the store */
  double sup; /* > 0: the resampling support to size the decode margin
                 by (eval's crop sets it as eval always computed it) */
  int clip;   /* a crop came before the pending resize: the resize reads
                 only the box (torchvision resizes the cropped image), else
                 all of the source (a crop of a resized image) */
} view;

static uint8_t *next_buf(stk__chain_run *r, size_t bytes) {
  int n = !r->cur;
  if (stk__grow((void **)&r->buf[n], &r->cap[n], bytes ? bytes : 1)) return NULL;
  return r->buf[n];
}

static int scaled(const view *v) {
  return v->x1 - v->x0 != v->w || v->y1 - v->y0 != v->h;
}

static void flip_h(uint8_t *px, uint32_t w, uint32_t h);

/* The sample's last rows: each resampled row stored into the batch. */
typedef struct {
  stk__chain_run *r;
  stk__post p;
  void *out;
} row_store;

static void store_row_cb(void *ctx, uint32_t y, const uint8_t *row) {
  row_store *rs = ctx;
  stk__store_row(&rs->p, (const uint16_t(*)[256])rs->r->tb, rs->r->ow, rs->r->oh, y, row,
                 rs->out);
}

/* Make v real in buf[cur], mirrored when v->flip (then cleared) if it
 * resamples or crops; nothing to do leaves the flip pending. With rs, a
 * resample writes its rows into the batch instead (*stored = 1, buf
 * untouched). STK_OK, STK_NO_MEMORY or the decoder's error. */
static int materialize_to(stk__chain_run *r, view *v, stk__decoder *dec, row_store *rs,
                          int *stored, char *why, size_t whylen) {
  int sub = v->x0 != 0 || v->y0 != 0 || v->x1 != v->sw || v->y1 != v->sh;
  if (v->real && !scaled(v) && !sub) return STK_OK;
  size_t bytes = (size_t)v->w * v->h * 3;
  int to_batch = rs && (!v->real || scaled(v));
  uint8_t *o = to_batch ? NULL : next_buf(r, bytes);
  if (!o && !to_batch)
    return snprintf(why, whylen, "out of memory (chain)"), STK_NO_MEMORY;
  const uint8_t *src;
  uint32_t srcw, srch;
  double bx0 = v->x0, by0 = v->y0, bx1 = v->x1, by1 = v->y1; /* in src pixels */
  if (!v->real) {
    /* as the named pipelines: the fast decode (DCT-scaled to the output
     * size, no margin) for a random_resized_crop, else the exact one: the
     * box at full size, as PIL decodes it (no DCT scaling: a scaled IDCT
     * is a filter of its own, 3-9 levels off PIL's full decode and
     * resample on large images, and its odd scales run without SIMD, so
     * skipping it cost only ~10% more CPU on 3-12 MP photos), with a
     * margin so that the box's edge pixels (chroma upsampling, filter
     * taps) come out as in a full decode */
    double sup =
        v->sup > 0 ? v->sup : fmax((v->x1 - v->x0) / v->w, (v->y1 - v->y0) / v->h);
    int margin = v->fast ? 0 : (int)ceil(sup < 1 ? 1 : sup) + 1;
    uint32_t ow = v->fast ? v->w : UINT32_MAX, oh = v->fast ? v->h : UINT32_MAX;
    stk__roi roi;
    uint64_t t = stk__prof_start();
    int rc = stk__decoder_roi(dec, v->x0, v->y0, v->x1, v->y1, ow, oh, margin, 8, v->fast,
                              &roi, why, whylen);
    stk__prof_lap(STK__PROF_DECODE, &t);
    if (rc) return rc;
    src = roi.px, srcw = roi.w, srch = roi.h;
    bx0 = v->x0 * roi.sx - roi.x0, bx1 = v->x1 * roi.sx - roi.x0;
    by0 = v->y0 * roi.sy - roi.y0, by1 = v->y1 * roi.sy - roi.y0;
  } else {
    src = r->buf[r->cur], srcw = v->sw, srch = v->sh;
  }
  if (v->clip && !v->fast) {
    /* a resize of a crop reads the crop alone: copy the box (whole
     * pixels; rounded where DCT scaling made its edges fractional) out */
    uint32_t cx0 = (uint32_t)fmax(0, nearbyint(bx0)),
             cy0 = (uint32_t)fmax(0, nearbyint(by0));
    uint32_t cx1 = (uint32_t)fmin(srcw, nearbyint(bx1)),
             cy1 = (uint32_t)fmin(srch, nearbyint(by1));
    if (cx1 <= cx0) cx1 = cx0 + 1 <= srcw ? cx0 + 1 : srcw, cx0 = cx1 - 1;
    if (cy1 <= cy0) cy1 = cy0 + 1 <= srch ? cy0 + 1 : srch, cy0 = cy1 - 1;
    uint32_t cw = cx1 - cx0, ch = cy1 - cy0;
    if (stk__grow((void **)&r->cb, &r->ccap, (size_t)cw * ch * 3))
      return snprintf(why, whylen, "out of memory (chain)"), STK_NO_MEMORY;
    for (uint32_t y = 0; y < ch; y++)
      memcpy(r->cb + (size_t)y * cw * 3, src + ((size_t)(cy0 + y) * srcw + cx0) * 3,
             (size_t)cw * 3);
    src = r->cb, srcw = cw, srch = ch;
    bx0 -= cx0, bx1 -= cx0, by0 -= cy0, by1 -= cy0;
  }
  if (v->real && !scaled(v)) {
    /* a crop of a real image: copy the rows */
    for (uint32_t y = 0; y < v->h; y++)
      memcpy(o + (size_t)y * v->w * 3, src + (((size_t)by0 + y) * srcw + (size_t)bx0) * 3,
             (size_t)v->w * 3);
    if (v->flip) flip_h(o, v->w, v->h);
  } else {
    if (stk__resample_rows(&r->sc, src, srcw, srch, bx0, by0, bx1, by1, v->w, v->h,
                           STK__FILTER_BILINEAR, v->flip, o, rs ? store_row_cb : NULL,
                           rs))
      return snprintf(why, whylen, "out of memory (resampling)"), STK_NO_MEMORY;
  }
  v->flip = 0;
  if (to_batch) {
    *stored = 1;
    return STK_OK;
  }
  r->cur = !r->cur;
  v->real = 1, v->sw = v->w, v->sh = v->h, v->fast = v->clip = 0, v->sup = 0;
  v->x0 = v->y0 = 0, v->x1 = v->w, v->y1 = v->h;
  return STK_OK;
}

static int materialize(stk__chain_run *r, view *v, stk__decoder *dec, char *why,
                       size_t whylen) {
  return materialize_to(r, v, dec, NULL, NULL, why, whylen);
}

/* Crop (x, y, cw, ch) of the current w x h image; parts outside it are
 * zero (torchvision pads with 0 first). */
static int crop(stk__chain_run *r, view *v, stk__decoder *dec, int64_t x, int64_t y,
                uint32_t cw, uint32_t ch, char *why, size_t whylen) {
  int inside = x >= 0 && y >= 0 && x + cw <= v->w && y + ch <= v->h;
  if (inside && !scaled(v)) {
    /* no resize pending: the box shrinks, and a resize after it will
     * read this box only */
    v->x0 += (double)x, v->x1 = v->x0 + cw;
    v->y0 += (double)y, v->y1 = v->y0 + ch;
    v->w = cw, v->h = ch;
    v->clip = v->x0 != 0 || v->y0 != 0 || v->x1 != v->sw || v->y1 != v->sh;
    return STK_OK;
  }
  if (inside && !v->clip) {
    /* a crop of the resized source: resample only what it keeps (taps
     * still reach outside it, as in the resized whole) */
    double fx = (v->x1 - v->x0) / v->w, fy = (v->y1 - v->y0) / v->h;
    double x0 = v->x0, y0 = v->y0;
    v->x0 = x0 + (double)x * fx, v->x1 = x0 + (double)(x + cw) * fx;
    v->y0 = y0 + (double)y * fy, v->y1 = y0 + (double)(y + ch) * fy;
    v->w = cw, v->h = ch;
    return STK_OK;
  }
  int rc = materialize(r, v, dec, why, whylen);
  if (rc) return rc;
  uint8_t *o = next_buf(r, (size_t)cw * ch * 3);
  if (!o) return snprintf(why, whylen, "out of memory (chain)"), STK_NO_MEMORY;
  const uint8_t *s = r->buf[r->cur];
  memset(o, 0, (size_t)cw * ch * 3);
  for (uint32_t j = 0; j < ch; j++) {
    int64_t sy = y + j;
    if (sy < 0 || sy >= v->h) continue;
    int64_t a = x < 0 ? -x : 0, b = x + cw > v->w ? (int64_t)v->w - x : cw;
    if (b > a)
      memcpy(o + ((size_t)j * cw + (size_t)a) * 3,
             s + ((size_t)sy * v->w + (size_t)(x + a)) * 3, (size_t)(b - a) * 3);
  }
  r->cur = !r->cur;
  v->w = v->sw = cw, v->h = v->sh = ch;
  v->x0 = v->y0 = 0, v->x1 = cw, v->y1 = ch;
  return STK_OK;
}

static int resize_to(stk__chain_run *r, view *v, stk__decoder *dec, uint32_t nw,
                     uint32_t nh, int fast, char *why, size_t whylen) {
  if (scaled(v)) {
    int rc = materialize(r, v, dec, why, whylen);
    if (rc) return rc;
  }
  v->w = nw, v->h = nh;
  v->fast = fast && !v->real;
  return STK_OK;
}

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

static void flip_h(uint8_t *px, uint32_t w, uint32_t h) {
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

/* ---- the run ---------------------------------------------------------- */

/* The chain a named pipeline is, from the job's keys: `train` is
 * random_resized_crop(height, width, scale, ratio) | hflip(flip_p), then
 * its jitter when any strength is on; `eval` (any other pipeline, as the
 * JPEG sources have always read it) is resize(resize) | eval's crop. */
static void canonical_chain(const stk_job_spec *s, stk__chain *c) {
  memset(c, 0, sizeof(*c));
  c->ops[0].kind = STK__OP_DECODE;
  stk__op *op = &c->ops[1];
  if (s->pipeline == STK_PIPELINE_TRAIN) {
    op->kind = STK__OP_RRC, op->h = s->height, op->w = s->width;
    op->lo[0] = s->scale_min, op->hi[0] = s->scale_max;
    op->lo[1] = s->ratio_min, op->hi[1] = s->ratio_max;
    op++;
    op->kind = STK__OP_HFLIP, op->p = s->flip_p;
    if (s->brightness > 0 || s->contrast > 0 || s->saturation > 0) {
      op++;
      op->kind = OP_TRAIN_JITTER;
      op->lo[0] = s->brightness, op->lo[1] = s->contrast, op->lo[2] = s->saturation;
    }
  } else {
    op->kind = STK__OP_RESIZE, op->h = s->resize, op->w = 0;
    op++;
    op->kind = OP_EVAL_CROP, op->h = s->height, op->w = s->width;
  }
  c->n = (uint32_t)(op - c->ops) + 1;
}

int stk__chain_run_create(stk__chain_run **out, const stk_dataset *ds,
                          const stk_job_spec *spec, char *err, size_t errlen) {
  *out = NULL;
  stk__chain_run *r = calloc(1, sizeof(*r));
  if (!r) return STK_NO_MEMORY;
  int rc = STK_OK;
  if (spec->pipeline == STK_PIPELINE_CHAIN)
    rc = stk__chain_parse(spec->chain, &r->c, NULL, err, errlen);
  else canonical_chain(spec, &r->c);
  if (rc) {
    free(r);
    return rc;
  }
  r->dtype = spec->dtype, r->layout = spec->layout;
  r->oh = spec->height, r->ow = spec->width;
  stk_normalize_table(spec, r->norm);
  stk__bf16_tables((const float(*)[256])r->norm, r->tb);
  r->post.bright = r->post.contrast = r->post.satur = 1;
  r->post.dtype = r->dtype, r->post.layout = r->layout;
  r->post.norm = (const float(*)[256])r->norm;
  float na[3], nb[3];
  stk_normalize_coeffs(spec, na, nb);
  stk__post_affine(&r->post, na, nb);
  if ((rc = stk__pyop_create(&r->py, &r->c, stk__pyop_path(ds ? ds->python_path : NULL),
                             err, errlen))) {
    stk__chain_run_free(r);
    return rc;
  }
  for (uint32_t i = 0; i < r->c.n; i++) {
    const stk__op *op = &r->c.ops[i];
    if (op->kind != STK__OP_PLUGIN) continue;
    const stk_op_info *info = stk__plugin_find(ds, op->name);
    if (!info) { /* the message first: op points into r */
      rc = stk__errf(err, errlen, STK_INVALID_ARGUMENT, "plugin op '%s' is not loaded",
                     op->name);
      stk__chain_run_free(r);
      return rc;
    }
    char why[200] = "";
    if (info->create(op->args, &r->pstate[i], why, sizeof(why))) {
      why[sizeof(why) - 1] = 0;
      rc = stk__errf(err, errlen, STK_INVALID_ARGUMENT, "plugin op %s(%s): %s", op->name,
                     op->args, why[0] ? why : "refused its arguments");
      stk__chain_run_free(r);
      return rc;
    }
    r->pinfo[i] = info;
  }
  *out = r;
  return STK_OK;
}

const stk__op *stk__chain_run_batch_op(const stk__chain_run *r) {
  const stk__op *last = &r->c.ops[r->c.n - 1]; /* a batch op ends the chain */
  return stk__op_is_batch(last->kind) ? last : NULL;
}

void stk__chain_run_free(stk__chain_run *r) {
  if (!r) return;
  for (uint32_t i = 0; i < r->c.n; i++)
    if (r->pinfo[i] && r->pinfo[i]->destroy) r->pinfo[i]->destroy(r->pstate[i]);
  stk__pyop_free(r->py);
  free(r->buf[0]), free(r->buf[1]), free(r->fb), free(r->cb);
  stk__scratch_free(&r->sc);
  stk__policy_scratch_free(&r->ps);
  free(r);
}

/* Write the real image px (w x h, mirrored when flip) into the sample's
 * place in the batch: the 8-bit fast store, rows mirrored as they are
 * written. */
static void store(stk__chain_run *r, const uint8_t *px, int flip, void *out) {
  stk__post p = r->post;
  p.flip = flip;
  for (uint32_t y = 0; y < r->oh; y++)
    stk__store_row(&p, (const uint16_t(*)[256])r->tb, r->ow, r->oh, y,
                   px + (size_t)y * r->ow * 3, out);
}

/* train's jitter (OP_TRAIN_JITTER): its draws, then the factors applied
 * to the real image. STK_OK, STK_NO_MEMORY or the decoder's error. */
static int train_jitter(stk__chain_run *r, view *v, const stk__op *op, stk__decoder *dec,
                        stk_rng *rng, char *why, size_t whylen) {
  double u[3] = {stk_rng_uniform(rng), stk_rng_uniform(rng), stk_rng_uniform(rng)};
  float f[3];
  for (int k = 0; k < 3; k++) {
    float s = op->lo[k]; /* the job's strength; 1 - s and 1 + s in float */
    f[k] = s > 0 ? (float)(fmax(0, 1 - s) + u[k] * (1 + s - fmax(0, 1 - s))) : 1.f;
  }
  int rc = materialize(r, v, dec, why, whylen);
  if (rc || (f[0] == 1 && f[1] == 1 && f[2] == 1)) return rc;
  if (stk__jitter8(&r->sc, r->buf[r->cur], (size_t)v->w * v->h, f[0], f[1], f[2]))
    return snprintf(why, whylen, "out of memory (jitter)"), STK_NO_MEMORY;
  return STK_OK;
}

/* ---- the steps (kernel_row.run): op, the chain's op i, on the image v,
 * drawing from rng; STK_OK, or an error with why ---- */

static int run_rrc(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                   stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = STK_OK;
  if (scaled(v) && (rc = materialize(r, v, dec, why, whylen))) return rc;
  stk__box b = stk__rrc_box(v->w, v->h, op->lo[0], op->hi[0], op->lo[1], op->hi[1], rng);
  if (!(rc = crop(r, v, dec, b.x, b.y, (uint32_t)b.w, (uint32_t)b.h, why, whylen)))
    rc = resize_to(r, v, dec, op->w, op->h, 1, why, whylen);
  return rc;
}

static int run_resize(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                      stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  uint32_t nw = op->w, nh = op->h;
  if (!op->w) stk__resize_short(v->w, v->h, op->h, &nw, &nh);
  return resize_to(r, v, dec, nw, nh, 0, why, whylen);
}

static int run_center_crop(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                           stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  /* torchvision: pad to the crop's size if smaller, then
   * round((n - t) / 2) */
  int64_t y = op->h > v->h ? -(int64_t)((op->h - v->h) / 2)
                           : (int64_t)nearbyint(((double)v->h - op->h) / 2.0);
  int64_t x = op->w > v->w ? -(int64_t)((op->w - v->w) / 2)
                           : (int64_t)nearbyint(((double)v->w - op->w) / 2.0);
  return crop(r, v, dec, x, y, op->w, op->h, why, whylen);
}

static int run_random_crop(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                           stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  /* torchvision RandomCrop: pad, then top = randint(0, H' - h + 1),
   * left likewise (0 when the crop is larger: the rest is zero) */
  uint64_t ph = (uint64_t)v->h + 2 * op->pad, pw = (uint64_t)v->w + 2 * op->pad;
  double u1 = stk_rng_uniform(rng), u2 = stk_rng_uniform(rng);
  int64_t y = ph > op->h ? (int64_t)(u1 * (double)(ph - op->h + 1)) : 0;
  int64_t x = pw > op->w ? (int64_t)(u2 * (double)(pw - op->w + 1)) : 0;
  return crop(r, v, dec, x - op->pad, y - op->pad, op->w, op->h, why, whylen);
}

static int run_hflip(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                     stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = STK_OK;
  /* pending; over a pending resample too when the next op makes the
   * image real anyway (the end, train's jitter, another flip): the
   * resampler then writes the rows mirrored */
  double u = stk_rng_uniform(rng);
  int nk = i + 1 < r->c.n ? r->c.ops[i + 1].kind : (int)STK__OP_RANDOM_ERASING;
  if (nk != STK__OP_RANDOM_ERASING && nk != OP_TRAIN_JITTER && nk != STK__OP_HFLIP &&
      (rc = materialize(r, v, dec, why, whylen)))
    return rc;
  if (u < op->p) v->flip = !v->flip;
  return rc;
}

static int run_vflip_grayscale(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                               stk__decoder *dec, stk_rng *rng, char *why,
                               size_t whylen) {
  int rc = STK_OK;
  double u = stk_rng_uniform(rng);
  if ((rc = materialize(r, v, dec, why, whylen))) return rc;
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

static int run_rotate(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                      stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = STK_OK;
  int ks[4], nk = 0;
  for (int k = 0; k < 4; k++)
    if (op->angles & (1u << k)) ks[nk++] = k;
  int k = ks[(int)(stk_rng_uniform(rng) * nk)];
  if ((rc = materialize(r, v, dec, why, whylen)) || !k) return rc;
  uint8_t *o = next_buf(r, (size_t)v->w * v->h * 3);
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

static int run_color_jitter(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                            stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
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
  if ((rc = materialize(r, v, dec, why, whylen))) return rc;
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

static int run_gaussian_blur(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                             stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = STK_OK;
  float sigma =
      (float)(op->lo[0] + stk_rng_uniform(rng) * ((double)op->hi[0] - op->lo[0]));
  if ((rc = materialize(r, v, dec, why, whylen))) return rc;
  if (blur(r, r->buf[r->cur], v->w, v->h, op->kh, op->kw, sigma)) {
    rc = STK_NO_MEMORY;
    snprintf(why, whylen, "out of memory (blur)");
  }
  return rc;
}

static int run_plugin(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                      stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = STK_OK;
  uint64_t seed = (uint64_t)stk_rng_u32(rng) << 32;
  seed |= stk_rng_u32(rng);
  if ((rc = materialize(r, v, dec, why, whylen))) return rc;
  stk_op_image img = {r->buf[r->cur], v->w, v->h, 3, (size_t)v->w * 3};
  char msg[160] = "";
  if (r->pinfo[i]->apply(r->pstate[i], &img, seed, msg, sizeof(msg))) {
    msg[sizeof(msg) - 1] = 0;
    snprintf(why, whylen, "plugin op %s failed: %s", op->name, msg[0] ? msg : "failed");
    rc = STK_USER_CODE;
  }
  return rc;
}

static int run_python(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                      stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = STK_OK;
  /* a seed for the function's numpy Generator, drawn as a plugin
   * op's is; the output is op->h x op->w (0: the input's size) */
  uint64_t seed = (uint64_t)stk_rng_u32(rng) << 32;
  seed |= stk_rng_u32(rng);
  if ((rc = materialize(r, v, dec, why, whylen))) return rc;
  uint32_t nw = op->h ? op->w : v->w, nh = op->h ? op->h : v->h;
  uint8_t *o = next_buf(r, (size_t)nw * nh * 3);
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

static int run_eval_crop(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
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

static int run_train_jitter(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                            stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  return train_jitter(r, v, op, dec, rng, why, whylen);
}

static int run_policy(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                      stk__decoder *dec, stk_rng *rng, char *why, size_t whylen);

/* What the runner does for an op kind: one row per kind, indexed by it
 * (core's kinds, core/chain.c's OPS[], then the fused ops). run: its step
 * before the store (NULL: none; random_erasing and the batch ops run
 * after it); pa: a policy sub-op's `_apply_op` operation (ops_policy.h).
 * Adding an op: its row here, its step, its pixel kernel above. */
typedef struct {
  int (*run)(stk__chain_run *r, view *v, uint32_t i, const stk__op *op, stk__decoder *dec,
             stk_rng *rng, char *why, size_t whylen);
  int pa;
} kernel_row;

/* clang-format off */
static const kernel_row KERNELS[] = {
  [STK__OP_RRC]                  = {run_rrc,             0},
  [STK__OP_RESIZE]               = {run_resize,          0},
  [STK__OP_CENTER_CROP]          = {run_center_crop,     0},
  [STK__OP_RANDOM_CROP]          = {run_random_crop,     0},
  [STK__OP_HFLIP]                = {run_hflip,           0},
  [STK__OP_VFLIP]                = {run_vflip_grayscale, 0},
  [STK__OP_ROTATE]               = {run_rotate,          0},
  [STK__OP_COLOR_JITTER]         = {run_color_jitter,    0},
  [STK__OP_GRAYSCALE]            = {run_vflip_grayscale, 0},
  [STK__OP_GAUSSIAN_BLUR]        = {run_gaussian_blur,   0},
  [STK__OP_PLUGIN]               = {run_plugin,          0},
  [STK__OP_SHEAR_X]              = {run_policy,          STK__PA_SHEAR_X},
  [STK__OP_SHEAR_Y]              = {run_policy,          STK__PA_SHEAR_Y},
  [STK__OP_TRANSLATE_X]          = {run_policy,          STK__PA_TRANSLATE_X},
  [STK__OP_TRANSLATE_Y]          = {run_policy,          STK__PA_TRANSLATE_Y},
  [STK__OP_ROTATE_BY]            = {run_policy,          STK__PA_ROTATE},
  [STK__OP_BRIGHTNESS]           = {run_policy,          STK__PA_BRIGHTNESS},
  [STK__OP_COLOR]                = {run_policy,          STK__PA_COLOR},
  [STK__OP_CONTRAST]             = {run_policy,          STK__PA_CONTRAST},
  [STK__OP_SHARPNESS]            = {run_policy,          STK__PA_SHARPNESS},
  [STK__OP_POSTERIZE]            = {run_policy,          STK__PA_POSTERIZE},
  [STK__OP_SOLARIZE]             = {run_policy,          STK__PA_SOLARIZE},
  [STK__OP_AUTOCONTRAST]         = {run_policy,          STK__PA_AUTOCONTRAST},
  [STK__OP_EQUALIZE]             = {run_policy,          STK__PA_EQUALIZE},
  [STK__OP_INVERT]               = {run_policy,          STK__PA_INVERT},
  [STK__OP_IDENTITY]             = {run_policy,          STK__PA_IDENTITY},
  [STK__OP_RAND_AUGMENT]         = {run_policy,          0},
  [STK__OP_TRIVIAL_AUGMENT_WIDE] = {run_policy,          0},
  [STK__OP_AUTO_AUGMENT]         = {run_policy,          0},
  [STK__OP_AUG_MIX]              = {run_policy,          0},
  [STK__OP_PYTHON]               = {run_python,          0},
  [OP_TRAIN_JITTER]              = {run_train_jitter,    0},
  [OP_EVAL_CROP]                 = {run_eval_crop,       0},
};
/* clang-format on */
#define NKERNELS ((int)(sizeof(KERNELS) / sizeof(KERNELS[0])))

/* the policies and their sub-ops (ops_policy.c) */
static int run_policy(stk__chain_run *r, view *v, uint32_t i, const stk__op *op,
                      stk__decoder *dec, stk_rng *rng, char *why, size_t whylen) {
  int rc = materialize(r, v, dec, why, whylen);
  if (rc) return rc;
  if (stk__policy_run(&r->ps, op, KERNELS[op->kind].pa, r->buf[r->cur], v->w, v->h,
                      rng)) {
    rc = STK_NO_MEMORY;
    snprintf(why, whylen, "out of memory (%s)", "augmentation policy");
  }
  return rc;
}

int stk__chain_run_sample(stk__chain_run *r, stk__decoder *dec, uint32_t W, uint32_t H,
                          stk_rng *rng, void *out, char *why, size_t whylen) {
  view v = {0, W, H, 0, 0, W, H, W, H, 0, 0, 0, 0};
  int rc = STK_OK;
  r->cur = 1; /* nothing is real yet: the first image made goes to buf[0],
                 the buffer the last sample's first one warmed */
  for (uint32_t i = 1; i < r->c.n && !rc; i++) {
    const stk__op *op = &r->c.ops[i];
    if (op->kind == STK__OP_RANDOM_ERASING || stk__op_is_batch(op->kind))
      break; /* the last ops: on the tensor, then on the batch */
    if (v.flip && op->kind != STK__OP_HFLIP && op->kind != OP_TRAIN_JITTER) {
      /* the op reads the pixels: a pending resample or crop mirrors them */
      if ((rc = materialize(r, &v, dec, why, whylen))) break;
      if (v.flip) flip_h(r->buf[r->cur], v.w, v.h);
      v.flip = 0;
    }
    const kernel_row *k =
        op->kind >= 0 && op->kind < NKERNELS ? &KERNELS[op->kind] : NULL;
    if (k && k->run) rc = k->run(r, &v, i, op, dec, rng, why, whylen);
  }
  if (rc) return rc;
  if (v.w != r->ow || v.h != r->oh) {
    snprintf(why, whylen, "chain made %ux%u, the job wants %ux%u", v.h, v.w, r->oh,
             r->ow);
    return STK_INTERNAL;
  }
  /* the last resample writes its rows straight into the batch */
  row_store rs = {r, r->post, out};
  int stored = 0;
  if ((rc = materialize_to(r, &v, dec, &rs, &stored, why, whylen))) return rc;
  if (!stored) store(r, r->buf[r->cur], v.flip, out);
  for (uint32_t i = 1; i < r->c.n; i++) {
    const stk__op *op = &r->c.ops[i];
    stk__box b;
    if (op->kind == STK__OP_RANDOM_ERASING && stk__erase_draw(op, r->oh, r->ow, rng, &b))
      stk__erase_apply(op, &b, out, r->oh, r->ow, r->dtype, r->layout, rng);
  }
  return STK_OK;
}
