/* png.c - PNG decoding with libpng (the Debian libpng16), to RGB exactly
 * as PIL's Image.open(p).convert("RGB") gives it (pngdec.h says how each kind
 * converts). The header comes from IHDR alone (the pipeline's header step
 * only needs the size); the image is decoded whole, since PNG has no cheap
 * region decoding, and the ops run on it as on a full JPEG decode.
 *
 * Owns nothing between calls: each decode makes and destroys its libpng
 * structs, and writes into the caller's growing buffer. libpng never
 * prints: its errors longjmp back here with the message, its warnings are
 * dropped (PIL ignores the same ancillary-chunk problems). Limits: the
 * caller's dimension and pixel limits (png_set_user_limits too), 8 MiB
 * for one ancillary chunk (compressed text, ICC profiles), and the decoded
 * rows within max_decoder_bytes.
 */
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pngdec.h"

#define CHUNK_MALLOC_MAX (8u << 20)

static const uint8_t SIG[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

int stk__png_sniff(const uint8_t *data, size_t len) {
  return len >= 8 && memcmp(data, SIG, 8) == 0;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int fail(char *why, size_t whylen, int rc, const char *msg) {
  if (why && whylen) snprintf(why, whylen, "%s", msg);
  return rc;
}

int stk__png_header(const uint8_t *data, size_t len, const stk_limits *lim, uint32_t *w,
                    uint32_t *h, char *why, size_t whylen) {
  char m[160];
  if (!stk__png_sniff(data, len)) return fail(why, whylen, STK_CORRUPT, "not a PNG file");
  if (len > lim->max_file_bytes) {
    snprintf(m, sizeof(m), "file over %llu bytes",
             (unsigned long long)lim->max_file_bytes);
    return fail(why, whylen, STK_LIMIT, m);
  }
  /* signature, then IHDR: length 13, type, width, height, depth, color */
  if (len < 8 + 8 + 13 + 4)
    return fail(why, whylen, STK_CORRUPT, "truncated (PNG header cut short)");
  const uint8_t *c = data + 8;
  if (be32(c) != 13 || memcmp(c + 4, "IHDR", 4))
    return fail(why, whylen, STK_CORRUPT, "PNG: the first chunk is not IHDR");
  uint32_t W = be32(c + 8), H = be32(c + 12);
  unsigned depth = c[16], color = c[17];
  int ok = (color == 0 &&
            (depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16)) ||
           (color == 3 && (depth == 1 || depth == 2 || depth == 4 || depth == 8)) ||
           ((color == 2 || color == 4 || color == 6) && (depth == 8 || depth == 16));
  if (!ok || W == 0 || H == 0 || W > 0x7fffffffu || H > 0x7fffffffu) {
    snprintf(m, sizeof(m), "PNG: bad IHDR (%ux%u, bit depth %u, color type %u)", W, H,
             depth, color);
    return fail(why, whylen, STK_CORRUPT, m);
  }
  if (W > lim->max_dimension || H > lim->max_dimension ||
      (uint64_t)W * H > lim->max_pixels) {
    snprintf(m, sizeof(m), "%ux%u exceeds the pixel limits", W, H);
    return fail(why, whylen, STK_LIMIT, m);
  }
  *w = W, *h = H;
  return STK_OK;
}

typedef struct src {
  const uint8_t *p;
  size_t len, at;
  char msg[200];
  int rc; /* the status an error maps to */
} src;

static void png_err(png_structp png, png_const_charp msg) {
  src *s = png_get_error_ptr(png);
  if (!s->msg[0]) snprintf(s->msg, sizeof(s->msg), "PNG: %s", msg);
  png_longjmp(png, 1);
}

static void png_warn(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static void png_read(png_structp png, png_bytep out, size_t n) {
  src *s = png_get_io_ptr(png);
  if (n > s->len - s->at) {
    snprintf(s->msg, sizeof(s->msg), "truncated (PNG data ends early)");
    png_error(png, s->msg);
  }
  memcpy(out, s->p + s->at, n);
  s->at += n;
}

static int grow(uint8_t **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 1 << 16;
  while (c < need) c *= 2;
  uint8_t *p = realloc(*buf, c);
  if (!p) return -1;
  *buf = p, *cap = c;
  return 0;
}

/* Pixel s (ch channels of 1 << deep bytes) as RGB into d (pngdec.h: PIL's
 * conversions). */
static inline void px_rgb(const uint8_t *s, int ch, int deep, uint8_t *d) {
  if (ch >= 3) {
    uint8_t r = s[0], g = s[1 << deep], b = s[2 << deep];
    d[0] = r, d[1] = g, d[2] = b;
    return;
  }
  /* gray: 16-bit without alpha is clipped (PIL mode I), else the high byte */
  uint8_t v = deep && ch == 1 ? (s[0] ? 255 : s[1]) : s[0];
  d[0] = d[1] = d[2] = v;
}

/* The decoded rows (npix pixels, contiguous) to RGB in place. */
static void to_rgb(uint8_t *b, size_t npix, int ch, int deep) {
  size_t in = (size_t)ch << deep;
  if (in >= 3) { /* forward: a pixel's output never passes its input */
    for (size_t i = 0; i < npix; i++) px_rgb(b + i * in, ch, deep, b + i * 3);
  } else { /* 1 or 2 bytes a pixel: backward, the output is the larger */
    for (size_t i = npix; i-- > 0;) px_rgb(b + i * in, ch, deep, b + i * 3);
  }
}

/* The libpng part, behind its own setjmp: no caller's locals live across
 * a longjmp but those that are volatile or set before it. */
static int decode_rows(png_structp png, png_infop info, src *s, const stk_limits *lim,
                       uint8_t **buf, size_t *cap, uint32_t *w, uint32_t *h,
                       png_bytep **rows) {
  if (setjmp(png_jmpbuf(png))) return s->rc ? s->rc : STK_CORRUPT;
  png_set_read_fn(png, s, png_read);
  png_set_user_limits(png, lim->max_dimension, lim->max_dimension);
  png_set_chunk_malloc_max(png, CHUNK_MALLOC_MAX);
  png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_DEFAULT);
  png_read_info(png, info);
  png_uint_32 W = png_get_image_width(png, info), H = png_get_image_height(png, info);
  int color = png_get_color_type(png, info);
  int depth = png_get_bit_depth(png, info);
  if ((uint64_t)W * H > lim->max_pixels) {
    snprintf(s->msg, sizeof(s->msg), "%ux%u exceeds the pixel limits", (unsigned)W,
             (unsigned)H);
    s->rc = STK_LIMIT;
    png_error(png, s->msg);
  }
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  int ch = png_get_channels(png, info);
  int deep = png_get_bit_depth(png, info) == 16;
  size_t rowbytes = png_get_rowbytes(png, info);
  if (ch < 1 || ch > 4 || rowbytes != ((size_t)W * ch << deep)) {
    snprintf(s->msg, sizeof(s->msg), "PNG: unexpected layout (%d channels)", ch);
    png_error(png, s->msg);
  }
  size_t need = rowbytes * H, out = (size_t)W * H * 3;
  if (out > need) need = out;
  if (need > lim->max_decoder_bytes) {
    snprintf(s->msg, sizeof(s->msg), "decoded region over max_decoder_bytes");
    s->rc = STK_LIMIT;
    png_error(png, s->msg);
  }
  if (grow(buf, cap, need) || !(*rows = malloc(H * sizeof(png_bytep)))) {
    snprintf(s->msg, sizeof(s->msg), "out of memory");
    s->rc = STK_NO_MEMORY;
    png_error(png, s->msg);
  }
  for (png_uint_32 y = 0; y < H; y++) (*rows)[y] = *buf + (size_t)y * rowbytes;
  png_read_image(png, *rows);
  to_rgb(*buf, (size_t)W * H, ch, deep);
  *w = W, *h = H;
  return STK_OK;
}

int stk__png_decode(const uint8_t *data, size_t len, const stk_limits *lim, uint8_t **buf,
                    size_t *cap, uint32_t *w, uint32_t *h, char *why, size_t whylen) {
  uint32_t hw, hh;
  int rc = stk__png_header(data, len, lim, &hw, &hh, why, whylen);
  if (rc) return rc;
  src s = {data, len, 0, "", 0};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_err, png_warn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
    return fail(why, whylen, STK_NO_MEMORY, "out of memory (libpng)");
  }
  png_bytep *rows = NULL;
  rc = decode_rows(png, info, &s, lim, buf, cap, w, h, &rows);
  free(rows);
  png_destroy_read_struct(&png, &info, NULL);
  if (rc) return fail(why, whylen, rc, s.msg[0] ? s.msg : "PNG: corrupt");
  return STK_OK;
}
