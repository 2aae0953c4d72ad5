/* ops_kernels.h - what the image pipeline's runner (ops_chain.c) and its
 * op kernels (ops_kernels.c) share: the runner's per-builder state, the
 * image between ops (stk__view), the runner's geometry steps a kernel
 * calls (make the image real, crop, resize), and the kernel table's row
 * for an op kind. Private to augment/ (and its tests).
 *
 * Everything here works on one runner, used by one thread at a time: not
 * thread-safe, needing no locks.
 */
#ifndef STOKER_AUGMENT_OPS_KERNELS_H
#define STOKER_AUGMENT_OPS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "core/chain.h"
#include "decode.h"
#include "ops.h"
#include "ops_chain.h"
#include "ops_policy.h"
#include "ops_python.h"
#include "stoker/op.h"

/* Fused ops: steps of the named pipelines that no chain text spells,
 * kept as ops so that `train` and `eval` build the bytes they always have.
 * Numbered after core's stk__op_kind; only ops_chain.c's canonical_chain
 * makes them. */
enum {
  /* train's ColorJitter (lo[0..2]: brightness, contrast, saturation
   * strengths, as the job's keys): 3 draws, the factors uniform in
   * [max(0, 1 - v), 1 + v], applied in that fixed order with torchvision's
   * tensor formulas (stk__jitter8); commutes with a pending flip */
  STK__OP_TRAIN_JITTER = STK__OP_KINDS_MAX,
  /* eval's CenterCrop(h, w) right after resize(s): offsets rounded half
   * to even, and a crop larger than the resized image stays a box whose
   * taps outside the image are dropped by the resampler (no zero fill) */
  STK__OP_EVAL_CROP
};

typedef struct stk__kernel_row stk__kernel_row;

/* The runner's state, one per builder (ops_chain.c creates and frees it;
 * the kernels use its buffers). */
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
  const stk__kernel_row *k[STK__CHAIN_MAX_OPS]; /* each op's row of KERNELS[] */
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
} stk__view;

/* 1 when a resample is pending (the box is not the image's size). */
static inline int stk__view_scaled(const stk__view *v) {
  return v->x1 - v->x0 != v->w || v->y1 - v->y0 != v->h;
}

/* ---- the runner's steps (ops_chain.c) ---- */

/* The buffer that is not buf[cur], grown to bytes (owned by r; a kernel
 * writes its output there, then sets r->cur to it). NULL when out of
 * memory. */
uint8_t *stk__chain_buf(stk__chain_run *r, size_t bytes);
/* Make v real in buf[cur] (decode, resample, crop as pending; mirrored
 * when v->flip, which is then cleared). STK_OK, STK_NO_MEMORY or the
 * decoder's error with why. */
int stk__view_real(stk__chain_run *r, stk__view *v, stk__decoder *dec, char *why,
                   size_t whylen);
/* Crop (x, y, cw, ch) of the current w x h image, virtual when it can
 * be; parts outside the image are zero (torchvision pads with 0 first).
 * Errors as stk__view_real. */
int stk__view_crop(stk__chain_run *r, stk__view *v, stk__decoder *dec, int64_t x,
                   int64_t y, uint32_t cw, uint32_t ch, char *why, size_t whylen);
/* Resize to nw x nh (pending until the image is made real; fast: decode
 * as the train pipeline does). Errors as stk__view_real. */
int stk__view_resize(stk__chain_run *r, stk__view *v, stk__decoder *dec, uint32_t nw,
                     uint32_t nh, int fast, char *why, size_t whylen);

/* ---- the kernels (ops_kernels.c) ---- */

/* Mirror a w x h RGB image horizontally in place. */
void stk__flip_h(uint8_t *px, uint32_t w, uint32_t h);

/* What the runner does for an op kind (a row of ops_kernels.c's
 * KERNELS[]). name: the op's name in core/chain.c's OPS[] (for a fused op
 * or plugin ops, a name in parentheses no chain can write). run: its step
 * before the store, op being the chain's op i, on the image v, drawing
 * from rng; STK_OK, or an error with why (NULL: no step; random_erasing
 * and the batch ops run after the store). pa: a policy sub-op's
 * `_apply_op` operation (ops_policy.h). */
struct stk__kernel_row {
  const char *name;
  int (*run)(stk__chain_run *r, stk__view *v, uint32_t i, const stk__op *op,
             stk__decoder *dec, stk_rng *rng, char *why, size_t whylen);
  int pa;
};

/* The row of op kind (found by its name), NULL for a kind without one.
 * A linear search: the runner looks each op up once, at its creation. */
const stk__kernel_row *stk__kernel_of(int kind);

#endif
