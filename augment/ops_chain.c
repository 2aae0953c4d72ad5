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
 * `train` costs no flip pass.
 *
 * Random draws come from the sample's own stream (stk_rng keyed by seed,
 * epoch, sample index) in chain order; docs/pipelines.md lists each op's.
 *
 * What each op kind does is its row of ops_kernels.c's KERNELS[] (its
 * step and pixel kernel); this file only runs the chain: the view, the
 * geometry steps the kernels call (ops_kernels.h), the canonical chains,
 * the runner's lifetime and the store.
 *
 * Owns its buffers and the plugin ops' per-builder states; one run per
 * builder, so not thread-safe and needing no locks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "core/chain.h"
#include "decode.h"
#include "ops.h"
#include "ops_chain.h"
#include "ops_kernels.h"
#include "ops_policy.h"
#include "ops_python.h"
#include "plugin.h"
#include "augment/prof.h"
#include "stoker/op.h"

/* ---- the image between ops (ops_kernels.h) ---- */

uint8_t *stk__chain_buf(stk__chain_run *r, size_t bytes) {
  int n = !r->cur;
  if (stk__grow((void **)&r->buf[n], &r->cap[n], bytes ? bytes : 1)) return NULL;
  return r->buf[n];
}

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
static int materialize_to(stk__chain_run *r, stk__view *v, stk__decoder *dec,
                          row_store *rs, int *stored, char *why, size_t whylen) {
  int sub = v->x0 != 0 || v->y0 != 0 || v->x1 != v->sw || v->y1 != v->sh;
  if (v->real && !stk__view_scaled(v) && !sub) return STK_OK;
  size_t bytes = (size_t)v->w * v->h * 3;
  int to_batch = rs && (!v->real || stk__view_scaled(v));
  uint8_t *o = to_batch ? NULL : stk__chain_buf(r, bytes);
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
  if (v->real && !stk__view_scaled(v)) {
    /* a crop of a real image: copy the rows */
    for (uint32_t y = 0; y < v->h; y++)
      memcpy(o + (size_t)y * v->w * 3, src + (((size_t)by0 + y) * srcw + (size_t)bx0) * 3,
             (size_t)v->w * 3);
    if (v->flip) stk__flip_h(o, v->w, v->h);
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

int stk__view_real(stk__chain_run *r, stk__view *v, stk__decoder *dec, char *why,
                   size_t whylen) {
  return materialize_to(r, v, dec, NULL, NULL, why, whylen);
}

/* Crop (x, y, cw, ch) of the current w x h image; parts outside it are
 * zero (torchvision pads with 0 first). */
int stk__view_crop(stk__chain_run *r, stk__view *v, stk__decoder *dec, int64_t x,
                   int64_t y, uint32_t cw, uint32_t ch, char *why, size_t whylen) {
  int inside = x >= 0 && y >= 0 && x + cw <= v->w && y + ch <= v->h;
  if (inside && !stk__view_scaled(v)) {
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
  int rc = stk__view_real(r, v, dec, why, whylen);
  if (rc) return rc;
  uint8_t *o = stk__chain_buf(r, (size_t)cw * ch * 3);
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

int stk__view_resize(stk__chain_run *r, stk__view *v, stk__decoder *dec, uint32_t nw,
                     uint32_t nh, int fast, char *why, size_t whylen) {
  if (stk__view_scaled(v)) {
    int rc = stk__view_real(r, v, dec, why, whylen);
    if (rc) return rc;
  }
  v->w = nw, v->h = nh;
  v->fast = fast && !v->real;
  return STK_OK;
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
      op->kind = STK__OP_TRAIN_JITTER;
      op->lo[0] = s->brightness, op->lo[1] = s->contrast, op->lo[2] = s->saturation;
    }
  } else {
    op->kind = STK__OP_RESIZE, op->h = s->resize, op->w = 0;
    op++;
    op->kind = STK__OP_EVAL_CROP, op->h = s->height, op->w = s->width;
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
    if (!(r->k[i] = stk__kernel_of(op->kind))) { /* an op core has, augment not */
      rc = stk__errf(err, errlen, STK_INTERNAL,
                     "pipeline op %u (kind %d): no row of KERNELS[] (ops_kernels.c)",
                     i + 1, op->kind);
      stk__chain_run_free(r);
      return rc;
    }
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

int stk__chain_run_sample(stk__chain_run *r, stk__decoder *dec, uint32_t W, uint32_t H,
                          stk_rng *rng, void *out, char *why, size_t whylen) {
  stk__view v = {0, W, H, 0, 0, W, H, W, H, 0, 0, 0, 0};
  int rc = STK_OK;
  r->cur = 1; /* nothing is real yet: the first image made goes to buf[0],
                 the buffer the last sample's first one warmed */
  for (uint32_t i = 1; i < r->c.n && !rc; i++) {
    const stk__op *op = &r->c.ops[i];
    if (op->kind == STK__OP_RANDOM_ERASING || stk__op_is_batch(op->kind))
      break; /* the last ops: on the tensor, then on the batch */
    if (v.flip && op->kind != STK__OP_HFLIP && op->kind != STK__OP_TRAIN_JITTER) {
      /* the op reads the pixels: a pending resample or crop mirrors them */
      if ((rc = stk__view_real(r, &v, dec, why, whylen))) break;
      if (v.flip) stk__flip_h(r->buf[r->cur], v.w, v.h);
      v.flip = 0;
    }
    const stk__kernel_row *k = r->k[i];
    if (k->run) rc = k->run(r, &v, i, op, dec, rng, why, whylen);
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
