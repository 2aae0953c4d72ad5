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

/* Scratch that resampling and the store keep between samples (no
 * allocation per sample in steady state: buffers only grow). */
typedef struct stk__scratch {
  int32_t *xk, *yk; /* fixed-point weights, then bounds (resample.c) */
  double *kw;       /* one output's weights in double */
  uint8_t *tmp;     /* the horizontal pass's rows */
  int32_t *acc;     /* one row of vertical sums */
  uint8_t *row;     /* one output row, for a row callback */
  uint8_t *last;    /* the source's last row with spare bytes */
  void *kv;         /* the AVX2 kernel's weight vectors */
  float *img;       /* float image of the jitter paths, 0..255 */
  size_t xcap, ycap, kwcap, tcap, acap, rcap, lcap, kvcap, icap;
} stk__scratch;
/* Free s's buffers (the struct itself is the caller's); zeroes them. */
void stk__scratch_free(stk__scratch *s);

/* Resampling filters, as Pillow's (Image.BILINEAR, BICUBIC, LANCZOS). */
enum { STK__FILTER_BILINEAR, STK__FILTER_BICUBIC, STK__FILTER_LANCZOS };

/* Called with each output row (ow x 3 bytes, valid during the call) as
 * the resampler makes it, y from 0 up. */
typedef void (*stk__row_fn)(void *ctx, uint32_t y, const uint8_t *row);

/* Pillow's resampling (ImagingResample on an RGB image with `filter`,
 * 8-bit fixed point, horizontal pass first) of the box [bx0,bx1)x[by0,by1)
 * of src (sw x sh RGB, packed rows, coordinates in src pixels, taps
 * outside src dropped) to ow x oh, mirrored left-right when flip. Each
 * output row is written to out8 (oh x ow x 3 bytes) when out8 is not
 * NULL, and handed to emit when emit is not NULL. Bytes equal PIL's
 * `im.resize((ow, oh), filter, box)` for an integral box. 0, or -1 out of
 * memory (s's buffers) or an absurd box. Thread-safe with one scratch per
 * thread; the kernels (portable C, SSE2, AVX2 or AVX-512, chosen once per
 * process at the first call; STOKER_RESAMPLE=c forces C, =avx2 and =sse2
 * those) give the same bytes. */
int stk__resample_rows(stk__scratch *s, const uint8_t *src, uint32_t sw, uint32_t sh,
                       double bx0, double by0, double bx1, double by1, uint32_t ow,
                       uint32_t oh, int filter, int flip, uint8_t *out8, stk__row_fn emit,
                       void *ctx);
/* stk__resample_rows with the bilinear filter into out8. */
int stk__resample(stk__scratch *s, const uint8_t *src, uint32_t sw, uint32_t sh,
                  double bx0, double by0, double bx1, double by1, uint32_t ow,
                  uint32_t oh, int flip, uint8_t *out8);
/* Which kernels stk__resample_rows runs on this CPU: "c", "sse2", "avx2"
 * or "avx512" (the AVX-512 passes, AVX2's stores). Thread-safe; the
 * string is static. */
const char *stk__resample_kernels(void);
/* Tests and benchmarks: on, the portable C kernels from now on; off, the
 * choice is made again at the next call. Not for use while resampling. */
void stk__resample_force_c(int on);

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
  /* set by stk__post_affine: norm[c][v] == (float)v * na[c] + nb[c] (the
   * product rounded to float first) for every v, so the float32 store
   * computes the values in vectors instead of looking them up */
  int affine;
  float na[3], nb[3];
} stk__post;
/* Check that p->norm is v * a[c] + b[c] (stk_normalize_coeffs' a, b;
 * the product rounded first, as stk_normalize_table makes it) for all 768
 * entries and set p->affine accordingly. */
void stk__post_affine(stk__post *p, const float a[3], const float b[3]);
/* Whether p changes brightness, contrast or saturation. */
static inline int stk__post_jitter(const stk__post *p) {
  return p->bright != 1 || p->contrast != 1 || p->satur != 1;
}
/* Write one sample from img8 (oh x ow x 3 levels) at out in p's
 * dtype/layout (normalized unless uint8), mirrored when p->flip, with p's
 * jitter (on a float copy in s). 0, or -1 out of memory (jitter only). */
int stk__post_store(stk__scratch *s, uint32_t ow, uint32_t oh, const stk__post *p,
                    const uint8_t *img8, void *out);
/* The bfloat16 tables of a job's float normalize tables (norm). */
void stk__bf16_tables(const float (*norm)[256], uint16_t tb[3][256]);
/* Store output row y (0 <= y < oh) of an ow x oh sample from u (ow x 3
 * levels, read backwards when p->flip) at out, in p's dtype/layout; tb:
 * stk__bf16_tables of p->norm (bfloat16 only). No jitter; no allocation. */
void stk__store_row(const stk__post *p, const uint16_t (*tb)[256], uint32_t ow,
                    uint32_t oh, uint32_t y, const uint8_t *u, void *out);
/* train's jitter on the real 8-bit image px (npix RGB pixels), in place:
 * brightness, contrast, saturation factors (1 = unchanged) in that fixed
 * order, as stk__post_store applies p's. 0, or -1 out of memory (s's
 * float buffer; px untouched). */
int stk__jitter8(stk__scratch *s, uint8_t *px, size_t npix, float bright, float contrast,
                 float satur);
/* f rounded to bfloat16, nearest even (NaN stays NaN). */
uint16_t stk__bf16(float f);

#endif
