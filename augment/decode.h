/* decode.h - what decode.c offers: a libjpeg-turbo decoder that reads a
 * header and decodes only a region of interest, at a DCT scale. Private
 * to augment/ (and its tests and fuzz targets).
 */
#ifndef STOKER_AUGMENT_DECODE_H
#define STOKER_AUGMENT_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/augment.h" /* stk_limits */

typedef struct stk__decoder stk__decoder;

/* The decoded part of an image: RGB rows, and where they sit. */
typedef struct stk__roi {
  const uint8_t *px; /* w*h*3 bytes, row stride w*3 */
  uint32_t w, h;
  double x0, y0; /* origin of px in decoded (scaled) pixel coordinates */
  double sx, sy; /* decoded pixels per original pixel (DCT scaling) */
  int scale_num; /* the scale_num/8 used */
} stk__roi;

/* A decoder enforcing *lim (copied, defaults already filled in): STK_OK, or
 * STK_NO_MEMORY. One per thread; the caller owns it. */
int stk__decoder_create(stk__decoder **out, const stk_limits *lim);
/* Free d and what it decoded (NULL is fine). */
void stk__decoder_destroy(stk__decoder *d);
/* Read the header of data[0..len): fills *w, *h. Checks size, dimension
 * and pixel limits. STK_OK, STK_CORRUPT or STK_LIMIT with why filled. The
 * decoder stays positioned for stk__decoder_roi or is reset on failure. */
int stk__decoder_header(stk__decoder *d, const uint8_t *data, size_t len, uint32_t *w,
                        uint32_t *h, char *why, size_t whylen);
/* Decode the box [bx0,bx1)x[by0,by1) (original pixels) plus `margin`
 * decoded pixels around it, at the smallest DCT scale that keeps the box
 * at least ow x oh (scale_max caps it; 8 = full size). Only the rows and
 * columns the box needs are decoded. fast: SIMD-friendly scales only, the
 * fast integer IDCT and merged upsampling (the train pipeline); else the
 * libjpeg defaults PIL uses (exact IDCT, fancy upsampling). The result
 * stays valid until the next call on d. Always leaves the decoder
 * reusable. */
int stk__decoder_roi(stk__decoder *d, double bx0, double by0, double bx1, double by1,
                     uint32_t ow, uint32_t oh, int margin, int scale_max, int fast,
                     stk__roi *roi, char *why, size_t whylen);
/* Decode the whole image at full size (the benchmark's reference). */
int stk__decoder_full(stk__decoder *d, stk__roi *roi, char *why, size_t whylen);

#endif
