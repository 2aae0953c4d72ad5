/* ops.h - what ops.c offers the image pipeline: RandomResizedCrop box
 * sampling, antialiased resampling, 8-bit rounding and the fast store
 * (flip, train's jitter, normalize, dtype and layout). Private to
 * augment/ (and its tests).
 */
#ifndef STOKER_AUGMENT_OPS_H
#define STOKER_AUGMENT_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/core.h" /* stk_rng */

typedef struct stk__box {
  int32_t x, y, w, h;
} stk__box;

/* torchvision RandomResizedCrop.get_params with draws from r. */
stk__box stk__rrc_box(uint32_t W, uint32_t H, double scale_min, double scale_max,
                      double ratio_min, double ratio_max, stk_rng *r);

/* Grow the malloc'ed buffer *p of *cap bytes to at least need (doubling,
 * contents kept): 0, or -1 out of memory (*p untouched). The one buffer
 * rule of augment/: buffers only grow, so a steady state allocates
 * nothing. */
int stk__grow(void **p, size_t *cap, size_t need);

/* Scratch that resampling keeps between samples (no allocation per sample
 * in steady state: buffers only grow). */
typedef struct stk__scratch {
  int32_t *xb, *yb; /* per output column/row: first tap, tap count */
  float *xw, *yw;   /* weights, ksize per output */
  float *tmp;       /* horizontal pass */
  float *img;       /* oh*ow*3 resampled image, 0..255 */
  uint8_t *img8;    /* the same in 8-bit levels (stk__resample's out8) */
  size_t xcap, ycap, tcap, icap, i8cap;
} stk__scratch;
/* Free s's buffers (the struct itself is the caller's); zeroes them. */
void stk__scratch_free(stk__scratch *s);

/* Antialiased bilinear (triangle) resampling in PIL's manner of the box
 * [bx0,bx1)x[by0,by1) of src (sw x sh RGB, coordinates in src pixels)
 * into s->img (oh x ow x 3 floats, 0..255), or, with out8, each row
 * rounded to 8-bit levels (stk__q8) into out8 (oh x ow x 3 bytes) while it
 * is in cache, s->img then holding one row. Taps outside src are dropped;
 * an output pixel with no tap is 0. 0, or -1 out of memory. */
int stk__resample(stk__scratch *s, const uint8_t *src, uint32_t sw, uint32_t sh,
                  double bx0, double by0, double bx1, double by1, uint32_t ow,
                  uint32_t oh, uint8_t *out8);

/* Round a resampled value (>= 0) to the nearest 8-bit level, as the PIL
 * image torchvision resizes would hold it. */
static inline float stk__q8(float v) {
  v = (float)(int)(v + 0.5f);
  return v > 255 ? 255 : v;
}

/* stk__q8 of n values (each >= 0) into u. */
void stk__quant8(uint8_t *restrict u, const float *restrict q, size_t n);

typedef struct stk__post {
  int flip;                      /* mirror horizontally */
  float bright, contrast, satur; /* factors, 1 = unchanged */
  int dtype, layout;
  const float (*norm)[256]; /* stk_normalize_table of the job (float dtypes) */
} stk__post;
/* Whether p changes brightness, contrast or saturation (then the store
 * works on the float image; else it may take stk__resample's 8 bits). */
static inline int stk__post_jitter(const stk__post *p) {
  return p->bright != 1 || p->contrast != 1 || p->satur != 1;
}
/* Quantize s->img to 8 bits (or take img8, the 8-bit levels stk__resample
 * made: only without jitter), apply flip and jitter, write one sample
 * (oh x ow x 3) in p's dtype/layout at out (normalized unless uint8). */
void stk__post_store(stk__scratch *s, uint32_t ow, uint32_t oh, const stk__post *p,
                     const uint8_t *img8, void *out);
/* train's jitter on the real 8-bit image px (npix RGB pixels), in place:
 * brightness, contrast, saturation factors (1 = unchanged) in that fixed
 * order, as stk__post_store applies p's. 0, or -1 out of memory (s's
 * float buffer; px untouched). */
int stk__jitter8(stk__scratch *s, uint8_t *px, size_t npix, float bright, float contrast,
                 float satur);
/* f rounded to bfloat16, nearest even (NaN stays NaN). */
uint16_t stk__bf16(float f);

#endif
