/* pngdec.h - PNG decoding for the image sources (png.c, libpng), as
 * decode.c's decoder uses it: a header read from the IHDR chunk alone,
 * then the whole image decoded to RGB the way PIL's
 * Image.open(p).convert("RGB") makes it. Nothing outside augment/ (and
 * its tests) may include it.
 */
#ifndef STOKER_AUGMENT_PNGDEC_H
#define STOKER_AUGMENT_PNGDEC_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/augment.h" /* stk_limits */

/* 1 when data[0..len) starts with the PNG signature. */
int stk__png_sniff(const uint8_t *data, size_t len);

/* Width and height from the IHDR chunk, checked against lim (file size,
 * dimension, pixels) and for a valid bit depth / color type pair. STK_OK,
 * STK_CORRUPT or STK_LIMIT with why. Reads nothing else. Thread-safe. */
int stk__png_header(const uint8_t *data, size_t len, const stk_limits *lim, uint32_t *w,
                    uint32_t *h, char *why, size_t whylen);

/* Decode the whole image into *buf (w*h*3 bytes of RGB, row stride w*3;
 * *buf of *cap bytes is grown with realloc, never shrunk). As PIL 9.4
 * converts to RGB: gray (1, 2, 4 bits scaled to 8) replicated; 16-bit
 * gray clipped to 255 (PIL opens it as mode I and convert("RGB") clips);
 * 16-bit gray+alpha, RGB and RGBA take the high byte of each sample;
 * palettes looked up; alpha and tRNS dropped, not composited; no gamma or
 * color profile applied. Interlaced images work. STK_OK; STK_CORRUPT (any
 * libpng error or warning about the data, data cut short), STK_LIMIT (the
 * decoded image over lim->max_decoder_bytes) or STK_NO_MEMORY, with why.
 * Thread-safe (no shared state). */
int stk__png_decode(const uint8_t *data, size_t len, const stk_limits *lim, uint8_t **buf,
                    size_t *cap, uint32_t *w, uint32_t *h, char *why, size_t whylen);

#endif
