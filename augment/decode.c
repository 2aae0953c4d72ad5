/* decode.c - JPEG decoding for the pipeline with the libjpeg API of
 * libjpeg-turbo: header checks against stk_limits, then region-of-interest
 * decoding (DCT scaling, jpeg_crop_scanline, jpeg_skip_scanlines) so only
 * what a crop needs is decoded. Grayscale becomes RGB through libjpeg,
 * CMYK/YCCK through a conversion here; progressive files work.
 *
 * Owns one jpeg_decompress_struct per decoder, reused across images, and
 * the output buffer (which only grows). libjpeg errors and warnings never
 * reach stderr: errors and warnings (but for harmless extraneous bytes)
 * make the image bad, with the message in `why`. Not thread-safe: one
 * decoder per builder thread.
 *
 * PNG files (png.c) go through the same calls: the header from IHDR, and
 * any region request decodes the whole image at full size (roi = all).
 */
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "common/error.h"
#include "decode.h"
#include "ops.h" /* stk__grow */
#include "pngdec.h"

struct stk__decoder {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_error_mgr jerr;
  struct jpeg_progress_mgr prog;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
  stk_limits lim;
  int have_header;
  int live; /* cinfo is created (0 only after out of memory) */
  uint8_t *buf;
  size_t cap;
  const uint8_t *png; /* the PNG whose header was read, else NULL */
  size_t png_len;
};

/* A PNG after its header: decode it whole into d->buf (png.c). */
static int png_full(stk__decoder *d, stk__roi *roi, char *why, size_t whylen) {
  uint32_t w, h;
  const uint8_t *data = d->png;
  d->png = NULL, d->have_header = 0;
  int rc =
      stk__png_decode(data, d->png_len, &d->lim, &d->buf, &d->cap, &w, &h, why, whylen);
  if (rc) return rc;
  roi->px = d->buf, roi->w = w, roi->h = h;
  roi->x0 = roi->y0 = 0, roi->sx = roi->sy = 1, roi->scale_num = 8;
  return STK_OK;
}

static void dec_error_exit(j_common_ptr c) {
  stk__decoder *d = (stk__decoder *)c->client_data;
  c->err->format_message(c, d->msg);
  longjmp(d->jb, 1);
}

/* Warnings (level -1) mean corrupt data: libjpeg would fill the rest of the
 * image with gray. We stop instead, except for junk between markers, which
 * decodes fine. Trace messages (level >= 0) are dropped. */
static void dec_emit_message(j_common_ptr c, int level) {
  stk__decoder *d = (stk__decoder *)c->client_data;
  if (level >= 0) return;
  if (c->err->msg_code == JWRN_EXTRANEOUS_DATA) return;
  c->err->format_message(c, d->msg);
  longjmp(d->jb, 1);
}

static void dec_progress(j_common_ptr c) {
  stk__decoder *d = (stk__decoder *)c->client_data;
  if (c->is_decompressor) {
    j_decompress_ptr di = (j_decompress_ptr)c;
    if (di->input_scan_number > (int)d->lim.max_scans) {
      snprintf(d->msg, sizeof(d->msg), "more than %u scans", (unsigned)d->lim.max_scans);
      longjmp(d->jb, 1);
    }
  }
}

/* (Re)initialise the libjpeg object. Returns 0, or -1 out of memory (the
 * object is then left destroyed and d->live is 0). */
static int init_cinfo(stk__decoder *d) {
  d->cinfo.err = jpeg_std_error(&d->jerr);
  d->jerr.error_exit = dec_error_exit;
  d->jerr.emit_message = dec_emit_message;
  d->cinfo.client_data = d;
  if (setjmp(d->jb)) { /* only out of memory can fail here */
    jpeg_destroy_decompress(&d->cinfo);
    d->live = 0;
    return -1;
  }
  jpeg_create_decompress(&d->cinfo);
  d->prog.progress_monitor = dec_progress;
  d->cinfo.progress = &d->prog;
  d->live = 1;
  return 0;
}

/* After every image, a fresh libjpeg object instead of jpeg_abort: with
 * libjpeg-turbo 2.1.5, jpeg_skip_scanlines() on a reused object with
 * merged upsampling reads memory that the previous image's abort freed
 * (found with valgrind: the worker's batches then differed from the
 * reference). A new object per image costs a few small allocations
 * against a millisecond of decoding, and no state can cross images. */
static void reset(stk__decoder *d) {
  if (d->live) jpeg_destroy_decompress(&d->cinfo);
  d->live = 0;
  init_cinfo(d);
}

int stk__decoder_create(stk__decoder **out, const stk_limits *lim) {
  *out = NULL;
  stk__decoder *d = calloc(1, sizeof(*d));
  if (!d) return STK_NO_MEMORY;
  d->lim = *lim;
  if (init_cinfo(d)) {
    free(d);
    return STK_NO_MEMORY;
  }
  *out = d;
  return STK_OK;
}

void stk__decoder_destroy(stk__decoder *d) {
  if (!d) return;
  if (d->live) jpeg_destroy_decompress(&d->cinfo);
  free(d->buf);
  free(d);
}

static int fail(stk__decoder *d, int rc, char *why, size_t whylen) {
  stk__errf(why, whylen, 0, "%s", d->msg);
  reset(d);
  d->have_header = 0;
  return rc;
}

int stk__decoder_header(stk__decoder *d, const uint8_t *data, size_t len, uint32_t *w,
                        uint32_t *h, char *why, size_t whylen) {
  struct jpeg_decompress_struct *c = &d->cinfo;
  d->have_header = 0;
  d->msg[0] = 0;
  if (!d->live && init_cinfo(d)) {
    snprintf(d->msg, sizeof(d->msg), "out of memory (libjpeg)");
    return stk__errf(why, whylen, STK_NO_MEMORY, "%s", d->msg);
  }
  d->png = NULL;
  if (stk__png_sniff(data, len)) {
    int rc = stk__png_header(data, len, &d->lim, w, h, why, whylen);
    if (rc == STK_OK) d->png = data, d->png_len = len, d->have_header = 1;
    return rc;
  }
  if (len < 4 || data[0] != 0xFF || data[1] != 0xD8) {
    snprintf(d->msg, sizeof(d->msg), "not a JPEG or PNG file");
    return fail(d, STK_CORRUPT, why, whylen);
  }
  if (len > d->lim.max_file_bytes) {
    snprintf(d->msg, sizeof(d->msg), "file over %llu bytes",
             (unsigned long long)d->lim.max_file_bytes);
    return fail(d, STK_LIMIT, why, whylen);
  }
  /* A file cut short: the EOI marker must end it (allowing a little
   * padding). This makes truncation independent of the crop, which might
   * otherwise never reach the missing rows. */
  int eoi = 0;
  for (size_t k = len - 1; k >= 1 && len - k <= 64; k--)
    if (data[k - 1] == 0xFF && data[k] == 0xD9) {
      eoi = 1;
      break;
    }
  if (!eoi) {
    snprintf(d->msg, sizeof(d->msg), "truncated (no end-of-image marker)");
    return fail(d, STK_CORRUPT, why, whylen);
  }
  if (setjmp(d->jb)) return fail(d, STK_CORRUPT, why, whylen);
  c->mem->max_memory_to_use =
      (long)(d->lim.max_decoder_bytes > (1ull << 62) ? (1ull << 62)
                                                     : d->lim.max_decoder_bytes);
  jpeg_mem_src(c, data, (unsigned long)len);
  jpeg_read_header(c, TRUE);
  if (c->image_width > d->lim.max_dimension || c->image_height > d->lim.max_dimension ||
      (uint64_t)c->image_width * c->image_height > d->lim.max_pixels) {
    snprintf(d->msg, sizeof(d->msg), "%ux%u exceeds the pixel limits",
             (unsigned)c->image_width, (unsigned)c->image_height);
    return fail(d, STK_LIMIT, why, whylen);
  }
  if (c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK)
    c->out_color_space = JCS_CMYK;
  else if (c->num_components == 1 || c->num_components == 3)
    c->out_color_space = JCS_RGB; /* libjpeg-turbo expands grayscale */
  else {
    snprintf(d->msg, sizeof(d->msg), "%d color components", c->num_components);
    return fail(d, STK_CORRUPT, why, whylen);
  }
  *w = c->image_width;
  *h = c->image_height;
  d->have_header = 1;
  return STK_OK;
}

static int grow(stk__decoder *d, size_t need) {
  if (need <= d->cap) return 0;
  size_t cap = d->cap ? d->cap : 1 << 16;
  while (cap < need) cap *= 2;
  uint8_t *p = realloc(d->buf, cap);
  if (!p) return -1;
  d->buf = p, d->cap = cap;
  return 0;
}

/* CMYK as libjpeg delivers Adobe files (inverted) to RGB, in place:
 * R = C*K/255 on the inverted values, as PIL does. */
static void cmyk_to_rgb(uint8_t *p, size_t npix) {
  const uint8_t *s = p;
  for (size_t i = 0; i < npix; i++, s += 4, p += 3) {
    unsigned k = s[3];
    uint8_t r = (uint8_t)((s[0] * k + 127) / 255);
    uint8_t g = (uint8_t)((s[1] * k + 127) / 255);
    uint8_t b = (uint8_t)((s[2] * k + 127) / 255);
    p[0] = r, p[1] = g, p[2] = b;
  }
}

static int decode_rows(stk__decoder *d, int x0, int x1, int y0, int y1, stk__roi *roi,
                       char *why, size_t whylen) {
  struct jpeg_decompress_struct *c = &d->cinfo;
  if (setjmp(d->jb)) return fail(d, STK_CORRUPT, why, whylen);
  jpeg_start_decompress(c);
  JDIMENSION xoff = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
  if (xoff != 0 || cw != c->output_width) jpeg_crop_scanline(c, &xoff, &cw);
  size_t comps = (size_t)c->output_components;
  size_t stride = (size_t)c->output_width * comps;
  size_t rows = (size_t)(y1 - y0);
  if (stride * rows > d->lim.max_decoder_bytes) {
    snprintf(d->msg, sizeof(d->msg), "decoded region over max_decoder_bytes");
    return fail(d, STK_LIMIT, why, whylen);
  }
  if (grow(d, stride * rows + 64)) {
    snprintf(d->msg, sizeof(d->msg), "out of memory");
    return fail(d, STK_NO_MEMORY, why, whylen);
  }
  if (y0 > 0) {
    JDIMENSION want = (JDIMENSION)y0;
    while (want) {
      JDIMENSION got = jpeg_skip_scanlines(c, want);
      if (got == 0) {
        snprintf(d->msg, sizeof(d->msg), "skip_scanlines made no progress");
        return fail(d, STK_CORRUPT, why, whylen);
      }
      want -= got;
    }
  }
  /* Several rows a call: with merged upsampling libjpeg makes two rows at
   * once, and asked for one it makes both and copies one out. */
  while (c->output_scanline < (JDIMENSION)y1) {
    JSAMPROW rows[16];
    JDIMENSION left = (JDIMENSION)y1 - c->output_scanline, n = left < 16 ? left : 16;
    for (JDIMENSION i = 0; i < n; i++)
      rows[i] = d->buf + (size_t)(c->output_scanline + i - (JDIMENSION)y0) * stride;
    if (jpeg_read_scanlines(c, rows, n) == 0) {
      snprintf(d->msg, sizeof(d->msg), "read_scanlines made no progress");
      return fail(d, STK_CORRUPT, why, whylen);
    }
  }
  if (comps == 4) cmyk_to_rgb(d->buf, (size_t)c->output_width * rows);
  roi->px = d->buf;
  roi->w = c->output_width;
  roi->h = (uint32_t)rows;
  roi->x0 = xoff;
  roi->y0 = y0;
  reset(d); /* rows below the crop are never decoded */
  d->have_header = 0;
  return STK_OK;
}

/* jpeg_calc_output_dimensions behind its own setjmp, so no caller's locals
 * live across a longjmp. 0, or -1 when libjpeg raised an error. */
static int calc_dims(stk__decoder *d) {
  if (setjmp(d->jb)) return -1;
  jpeg_calc_output_dimensions(&d->cinfo);
  return 0;
}

int stk__decoder_roi(stk__decoder *d, double bx0, double by0, double bx1, double by1,
                     uint32_t ow, uint32_t oh, int margin, int scale_max, int fast,
                     stk__roi *roi, char *why, size_t whylen) {
  struct jpeg_decompress_struct *c = &d->cinfo;
  if (!d->have_header) {
    snprintf(d->msg, sizeof(d->msg), "no header");
    return fail(d, STK_INTERNAL, why, whylen);
  }
  if (d->png) return png_full(d, roi, why, whylen);
  int s = 1, smax = scale_max < 1 || scale_max > 8 ? 8 : scale_max;
  while (s < smax && ((bx1 - bx0) * s / 8 < ow || (by1 - by0) * s / 8 < oh)) s++;
  if (fast) {
    /* The scales with SIMD IDCTs (8/8, 4/8, 2/8, 1/8; others, and the
     * chroma IDCTs they imply, are plain C), the fast integer IDCT and
     * merged upsampling: about twice the speed, differences of a few
     * levels that augmentation does not care about. */
    s = s > 4 ? 8 : s > 2 ? 4 : s;
    c->dct_method = JDCT_IFAST;
    c->do_fancy_upsampling = FALSE;
  } else {
    c->dct_method = JDCT_ISLOW;
    c->do_fancy_upsampling = TRUE;
  }
  c->scale_num = (unsigned)s;
  c->scale_denom = 8;
  if (calc_dims(d)) return fail(d, STK_CORRUPT, why, whylen);
  double sx = (double)c->output_width / c->image_width;
  double sy = (double)c->output_height / c->image_height;
  int W = (int)c->output_width, H = (int)c->output_height;
  int x0 = (int)floor(bx0 * sx) - margin, x1 = (int)ceil(bx1 * sx) + margin;
  int y0 = (int)floor(by0 * sy) - margin, y1 = (int)ceil(by1 * sy) + margin;
  x0 = x0 < 0 ? 0 : x0 > W - 1 ? W - 1 : x0;
  y0 = y0 < 0 ? 0 : y0 > H - 1 ? H - 1 : y0;
  x1 = x1 > W ? W : x1 <= x0 ? x0 + 1 : x1;
  y1 = y1 > H ? H : y1 <= y0 ? y0 + 1 : y1;
  roi->sx = sx, roi->sy = sy, roi->scale_num = s;
  return decode_rows(d, x0, x1, y0, y1, roi, why, whylen);
}

int stk__decoder_full(stk__decoder *d, stk__roi *roi, char *why, size_t whylen) {
  struct jpeg_decompress_struct *c = &d->cinfo;
  if (!d->have_header) {
    snprintf(d->msg, sizeof(d->msg), "no header");
    return fail(d, STK_INTERNAL, why, whylen);
  }
  if (d->png) return png_full(d, roi, why, whylen);
  roi->sx = roi->sy = 1, roi->scale_num = 8;
  c->dct_method = JDCT_ISLOW;
  c->do_fancy_upsampling = TRUE;
  return decode_rows(d, 0, (int)c->image_width, 0, (int)c->image_height, roi, why,
                     whylen);
}
