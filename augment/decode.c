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
 * Files with restart markers whose interval divides the MCUs per row (what
 * `stoker-dataset prepare` writes) take a shorter way: the restart
 * intervals covering the region (plus one pixel of context on each side,
 * for fancy upsampling) are cut out of the entropy-coded data into a
 * smaller JPEG (markers renumbered, SOF dimensions patched), which is
 * decoded instead; the pixels are the ones the whole file gives. Other
 * files, and files whose markers do not come out as declared, use
 * jpeg_crop_scanline/jpeg_skip_scanlines. Both give the pixels of a full
 * decode at the same scale: the cropped decode widens its columns by one
 * pixel of context for fancy upsampling, which otherwise repeats the edge
 * column at a crop's sides.
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
  const uint8_t *jpg; /* the JPEG whose header was read (the caller's bytes) */
  size_t jpg_len;
  uint8_t *sub; /* the cut JPEG (restart-interval path) */
  size_t subcap;
  size_t *seg; /* entropy-coded segments: start, end pairs */
  size_t segcap;
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
  free(d->sub);
  free(d->seg);
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
  d->png = NULL, d->jpg = NULL;
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
  d->jpg = data, d->jpg_len = len;
  d->have_header = 1;
  return STK_OK;
}

/* Grow *buf (capacity *cap) to at least need bytes. 0, or -1. */
static int grow_buf(uint8_t **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 1 << 16;
  while (c < need) c *= 2;
  uint8_t *p = realloc(*buf, c);
  if (!p) return -1;
  *buf = p, *cap = c;
  return 0;
}

static int grow(stk__decoder *d, size_t need) { return grow_buf(&d->buf, &d->cap, need); }

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

/* The width of an iMCU column at the output scale: jpeg_crop_scanline's
 * alignment, and the unit the regions below start at. */
static int imcu_width(const struct jpeg_decompress_struct *c) {
#if JPEG_LIB_VERSION >= 70
  int s = c->min_DCT_h_scaled_size;
#else
  int s = c->min_DCT_scaled_size;
#endif
  return c->num_components == 1 ? s : s * c->max_h_samp_factor;
}

/* Read output rows [y0, y1) of the started decompression into d->buf
 * (row stride c->output_width * components), skipping the rows above
 * through jpeg_skip_scanlines when skip, else reading them into scratch
 * rows past the region. Only called behind decode's setjmp. STK_OK or
 * STK_CORRUPT (message in d->msg). */
static int read_rows(stk__decoder *d, int y0, int y1, int skip) {
  struct jpeg_decompress_struct *c = &d->cinfo;
  size_t stride = (size_t)c->output_width * (size_t)c->output_components;
  if (skip && y0 > 0) {
    JDIMENSION want = (JDIMENSION)y0;
    while (want) {
      JDIMENSION got = jpeg_skip_scanlines(c, want);
      if (got == 0) {
        snprintf(d->msg, sizeof(d->msg), "skip_scanlines made no progress");
        return STK_CORRUPT;
      }
      want -= got;
    }
  }
  /* Several rows a call: with merged upsampling libjpeg makes two rows at
   * once, and asked for one it makes both and copies one out. */
  while (c->output_scanline < (JDIMENSION)y1) {
    JSAMPROW rows[16];
    JDIMENSION sl = c->output_scanline;
    JDIMENSION n = (JDIMENSION)y1 - sl;
    if (sl < (JDIMENSION)y0) n = (JDIMENSION)y0 - sl;
    if (n > 16) n = 16;
    for (JDIMENSION i = 0; i < n; i++)
      rows[i] = sl < (JDIMENSION)y0 ? d->buf + (size_t)(y1 - y0 + i) * stride
                                    : d->buf + (size_t)(sl + i - (JDIMENSION)y0) * stride;
    if (jpeg_read_scanlines(c, rows, n) == 0) {
      snprintf(d->msg, sizeof(d->msg), "read_scanlines made no progress");
      return STK_CORRUPT;
    }
  }
  return STK_OK;
}

/* d->buf holds rows of `have` pixels starting at column hx0; keep columns
 * [x0, x1) of each, packed, as RGB. */
static void keep_columns(stk__decoder *d, size_t have, int hx0, int x0, int x1,
                         size_t rows, size_t comps) {
  size_t w = (size_t)(x1 - x0);
  if (w != have)
    for (size_t y = 0; y < rows; y++)
      memmove(d->buf + y * w * comps, d->buf + (y * have + (size_t)(x0 - hx0)) * comps,
              w * comps);
  if (comps == 4) cmyk_to_rgb(d->buf, w * rows);
}

/* Room in d->buf for `rows` rows of `stride` bytes plus 16 scratch rows. */
static int room(stk__decoder *d, size_t stride, size_t rows, char *why, size_t whylen) {
  if (stride * rows > d->lim.max_decoder_bytes) {
    snprintf(d->msg, sizeof(d->msg), "decoded region over max_decoder_bytes");
    return fail(d, STK_LIMIT, why, whylen);
  }
  if (grow(d, stride * (rows + 16) + 64)) {
    snprintf(d->msg, sizeof(d->msg), "out of memory");
    return fail(d, STK_NO_MEMORY, why, whylen);
  }
  return STK_OK;
}

/* Output columns [x0, x1) (x0 a multiple of imcu_width), rows [y0, y1)
 * of the image whose header d holds, by jpeg_crop_scanline and
 * jpeg_skip_scanlines. */
static int decode_rows(stk__decoder *d, int x0, int x1, int y0, int y1, stk__roi *roi,
                       char *why, size_t whylen) {
  struct jpeg_decompress_struct *c = &d->cinfo;
  if (setjmp(d->jb)) return fail(d, STK_CORRUPT, why, whylen);
  jpeg_start_decompress(c);
  /* one column of context each side for fancy upsampling */
  int ctx = c->do_fancy_upsampling ? 1 : 0, W = (int)c->output_width;
  int cx0 = x0 - ctx < 0 ? 0 : x0 - ctx, cx1 = x1 + ctx > W ? W : x1 + ctx;
  JDIMENSION xoff = (JDIMENSION)cx0, cw = (JDIMENSION)(cx1 - cx0);
  if (xoff != 0 || cw != c->output_width) jpeg_crop_scanline(c, &xoff, &cw);
  if ((int)xoff > x0 || (int)(xoff + c->output_width) < x1) {
    snprintf(d->msg, sizeof(d->msg), "crop_scanline left the region");
    return fail(d, STK_INTERNAL, why, whylen);
  }
  size_t comps = (size_t)c->output_components;
  size_t rows = (size_t)(y1 - y0);
  int rc = room(d, (size_t)c->output_width * comps, rows, why, whylen);
  if (rc) return rc;
  if ((rc = read_rows(d, y0, y1, 1))) return fail(d, rc, why, whylen);
  keep_columns(d, c->output_width, (int)xoff, x0, x1, rows, comps);
  roi->px = d->buf;
  roi->w = (uint32_t)(x1 - x0);
  roi->h = (uint32_t)rows;
  roi->x0 = x0;
  roi->y0 = y0;
  reset(d); /* rows below the crop are never decoded */
  d->have_header = 0;
  return STK_OK;
}

/* ---- the restart-interval path ---------------------------------------- */

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }

/* Append n bytes to the cut JPEG. 0, or -1 out of memory. */
static int put(stk__decoder *d, size_t *at, const void *p, size_t n) {
  if (*at + n > d->subcap && grow_buf(&d->sub, &d->subcap, *at + n)) return -1;
  memcpy(d->sub + *at, p, n);
  *at += n;
  return 0;
}

/* Find the start and end of entropy-coded segments [0, nseg) after the
 * scan header (at pos) into d->seg: each ends at a restart marker whose
 * number follows the sequence, the last at one or EOI. 0, or -1 when the
 * data does not have them. */
static int find_segments(stk__decoder *d, size_t pos, size_t nseg) {
  const uint8_t *p = d->jpg, *end = d->jpg + d->jpg_len;
  if (2 * nseg * sizeof(size_t) > d->segcap &&
      grow_buf((uint8_t **)&d->seg, &d->segcap, 2 * nseg * sizeof(size_t)))
    return -1;
  size_t k = 0, start = pos;
  const uint8_t *q = p + pos;
  while (k < nseg) {
    q = memchr(q, 0xFF, (size_t)(end - q));
    if (!q || q + 1 >= end) return -1;
    uint8_t m = q[1];
    if (m == 0x00 || m == 0xFF) {
      q += m == 0x00 ? 2 : 1;
      continue;
    }
    int rst = m >= 0xD0 && m <= 0xD7;
    if (!(rst && (size_t)(m - 0xD0) == k % 8) && m != 0xD9) return -1;
    d->seg[2 * k] = start, d->seg[2 * k + 1] = (size_t)(q - p);
    k++;
    if (m == 0xD9 && k < nseg) return -1;
    q += 2;
    start = (size_t)(q - p);
  }
  return 0;
}

/* Decode output columns [x0, x1), rows [y0, y1) by cutting the restart
 * intervals they need (with a pixel of context for fancy upsampling) into
 * d->sub and decoding that. 1 when the file has no usable restart
 * interval (d untouched: the caller goes on with decode_rows), else STK_OK
 * or an error as decode_rows. */
static int decode_cut(stk__decoder *d, int x0, int x1, int y0, int y1, stk__roi *roi,
                      char *why, size_t whylen) {
  struct jpeg_decompress_struct *c = &d->cinfo;
  if (!d->jpg || c->progressive_mode || c->arith_code || !c->restart_interval ||
      c->comps_in_scan != c->num_components)
    return 1;
  uint32_t W = c->image_width, H = c->image_height;
  uint32_t mw = c->num_components == 1 ? 8 : 8u * (uint32_t)c->max_h_samp_factor;
  uint32_t mh = c->num_components == 1 ? 8 : 8u * (uint32_t)c->max_v_samp_factor;
  uint32_t M = (W + mw - 1) / mw, R = (H + mh - 1) / mh, ri = c->restart_interval;
  if (M % ri) return 1;
  uint32_t K = M / ri; /* intervals per MCU row */
  /* the header: every segment up to the scan's, but for metadata */
  const uint8_t *p = d->jpg;
  size_t len = d->jpg_len, pos = 2, sof = 0, sos_end = 0;
  while (pos + 4 <= len && p[pos] == 0xFF) {
    uint8_t m = p[pos + 1];
    if (m == 0xFF) {
      pos++;
      continue;
    }
    size_t l = be16(p + pos + 2);
    if (l < 2 || pos + 2 + l > len) return 1;
    if (m == 0xC0 || m == 0xC1) sof = pos;
    else if ((m >= 0xC2 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) || m == 0xDC)
      return 1; /* another coding, or DNL */
    pos += 2 + l;
    if (m == 0xDA) {
      sos_end = pos;
      break;
    }
  }
  if (!sof || !sos_end) return 1;
  /* the region, with context, in MCUs at the output scale */
  int s = c->scale_num * 8 / (int)c->scale_denom, ctx = c->do_fancy_upsampling ? 1 : 0;
  int omw = (int)mw * s / 8, omh = (int)mh * s / 8;
  int Wo = (int)c->output_width, Ho = (int)c->output_height;
  int cx0 = x0 - ctx < 0 ? 0 : x0 - ctx, cx1 = x1 - 1 + ctx >= Wo ? Wo - 1 : x1 - 1 + ctx;
  int cy0 = y0 - ctx < 0 ? 0 : y0 - ctx, cy1 = y1 - 1 + ctx >= Ho ? Ho - 1 : y1 - 1 + ctx;
  uint32_t i0 = (uint32_t)(cx0 / omw) / ri, i1 = (uint32_t)(cx1 / omw) / ri;
  uint32_t r0 = (uint32_t)(cy0 / omh), r1 = (uint32_t)(cy1 / omh);
  if (i1 >= K || r1 >= R) return 1;
  if (find_segments(d, sos_end, (size_t)(r1 + 1) * K)) return 1;
  uint32_t X0 = i0 * ri * mw, Y0 = r0 * mh;
  uint32_t sw = ((i1 + 1) * ri * mw < W ? (i1 + 1) * ri * mw : W) - X0;
  uint32_t sh = ((r1 + 1) * mh < H ? (r1 + 1) * mh : H) - Y0;
  /* cut: SOI, the header (SOF patched), the intervals, EOI */
  size_t at = 0;
  static const uint8_t soi[2] = {0xFF, 0xD8}, eoi[2] = {0xFF, 0xD9};
  if (put(d, &at, soi, 2)) return 1;
  for (pos = 2; pos < sos_end;) {
    if (p[pos + 1] == 0xFF) {
      pos++;
      continue;
    }
    uint8_t m = p[pos + 1];
    size_t l = 2 + be16(p + pos + 2);
    int meta = (m >= 0xE1 && m <= 0xED) || m == 0xEF || m == 0xFE;
    if (!meta) {
      size_t here = at;
      if (put(d, &at, p + pos, l)) return 1;
      if (pos == sof) {
        d->sub[here + 5] = (uint8_t)(sh >> 8), d->sub[here + 6] = (uint8_t)sh;
        d->sub[here + 7] = (uint8_t)(sw >> 8), d->sub[here + 8] = (uint8_t)sw;
      }
    }
    pos += l;
  }
  uint32_t n = 0, last = (r1 - r0 + 1) * (i1 - i0 + 1);
  for (uint32_t r = r0; r <= r1; r++)
    for (uint32_t i = i0; i <= i1; i++) {
      size_t k = (size_t)r * K + i;
      if (put(d, &at, p + d->seg[2 * k], d->seg[2 * k + 1] - d->seg[2 * k])) return 1;
      if (++n < last) {
        uint8_t rst[2] = {0xFF, (uint8_t)(0xD0 + (n - 1) % 8)};
        if (put(d, &at, rst, 2)) return 1;
      }
    }
  if (put(d, &at, eoi, 2)) return 1;
  /* decode the cut with the settings the caller chose */
  J_DCT_METHOD dct = c->dct_method;
  boolean fancy = c->do_fancy_upsampling;
  J_COLOR_SPACE out = c->out_color_space;
  unsigned num = c->scale_num, den = c->scale_denom;
  reset(d);
  if (!d->live) {
    snprintf(d->msg, sizeof(d->msg), "out of memory (libjpeg)");
    return fail(d, STK_NO_MEMORY, why, whylen);
  }
  if (setjmp(d->jb)) return fail(d, STK_CORRUPT, why, whylen);
  c->mem->max_memory_to_use =
      (long)(d->lim.max_decoder_bytes > (1ull << 62) ? (1ull << 62)
                                                     : d->lim.max_decoder_bytes);
  jpeg_mem_src(c, d->sub, (unsigned long)at);
  jpeg_read_header(c, TRUE);
  c->out_color_space = out, c->dct_method = dct, c->do_fancy_upsampling = fancy;
  c->scale_num = num, c->scale_denom = den;
  jpeg_start_decompress(c);
  int ox0 = (int)X0 * s / 8, oy0 = (int)Y0 * s / 8, sw0 = (int)c->output_width;
  /* the intervals' extra columns are Huffman-decoded, not transformed */
  int lx0 = x0 - ctx - ox0 < 0 ? 0 : x0 - ctx - ox0;
  int lx1 = x1 + ctx - ox0 > sw0 ? sw0 : x1 + ctx - ox0;
  JDIMENSION xoff = (JDIMENSION)lx0, cw = (JDIMENSION)(lx1 - lx0);
  if (lx1 > lx0 && (xoff != 0 || cw != c->output_width))
    jpeg_crop_scanline(c, &xoff, &cw);
  int hx0 = ox0 + (int)xoff;
  if (hx0 > x0 || hx0 + (int)c->output_width < x1 || oy0 + (int)c->output_height < y1) {
    snprintf(d->msg, sizeof(d->msg), "restart-interval cut left the region");
    return fail(d, STK_INTERNAL, why, whylen);
  }
  size_t comps = (size_t)c->output_components;
  size_t rows = (size_t)(y1 - y0);
  int rc = room(d, (size_t)c->output_width * comps, rows, why, whylen);
  if (rc) return rc;
  if ((rc = read_rows(d, y0 - oy0, y1 - oy0, 0))) return fail(d, rc, why, whylen);
  keep_columns(d, c->output_width, hx0, x0, x1, rows, comps);
  roi->px = d->buf;
  roi->w = (uint32_t)(x1 - x0);
  roi->h = (uint32_t)rows;
  roi->x0 = x0;
  roi->y0 = y0;
  reset(d);
  d->have_header = 0;
  return STK_OK;
}

/* Columns [x0, x1) rounded out to whole iMCUs on the left, rows [y0, y1):
 * through the restart intervals when the file allows, else decode_rows. */
static int decode_region(stk__decoder *d, int x0, int x1, int y0, int y1, stk__roi *roi,
                         char *why, size_t whylen) {
  int a = imcu_width(&d->cinfo);
  if (a > 0) x0 = x0 / a * a;
  if (x0 == 0 && y0 == 0 && x1 == (int)d->cinfo.output_width &&
      y1 == (int)d->cinfo.output_height)
    return decode_rows(d, x0, x1, y0, y1, roi, why, whylen);
  int rc = decode_cut(d, x0, x1, y0, y1, roi, why, whylen);
  return rc == 1 ? decode_rows(d, x0, x1, y0, y1, roi, why, whylen) : rc;
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
     * chroma IDCTs they imply, are plain C) and merged upsampling: a few
     * levels off PIL on some pixels, no bias. The IDCT stays the exact
     * one: the fast integer IDCT (JDCT_IFAST) cost the same with
     * libjpeg-turbo's SIMD (0.75 against 0.76 s for 300 photos x 5) but
     * darkened red and blue by about one level on average (-0.97 / -1.2
     * over 200 photos: a model trained on it sees other colours than at
     * evaluation). */
    s = s > 4 ? 8 : s > 2 ? 4 : s;
    c->dct_method = JDCT_ISLOW;
    c->do_fancy_upsampling = FALSE;
  } else {
    c->dct_method = JDCT_ISLOW;
    c->do_fancy_upsampling = TRUE;
  }
  c->scale_num = (unsigned)s;
  c->scale_denom = 8;
  if (calc_dims(d)) return fail(d, STK_CORRUPT, why, whylen);
  /* Each 8x8 block decodes to s x s pixels: the scale is exactly s/8 on
   * both axes. output_width / image_width is not (the last block column
   * is rounded up: 1101 px at 2/8 give 276, not 275.25), and using it
   * shifted the box by up to a pixel across the image. */
  double sx = s / 8.0, sy = s / 8.0;
  int W = (int)c->output_width, H = (int)c->output_height;
  int x0 = (int)floor(bx0 * sx) - margin, x1 = (int)ceil(bx1 * sx) + margin;
  int y0 = (int)floor(by0 * sy) - margin, y1 = (int)ceil(by1 * sy) + margin;
  x0 = x0 < 0 ? 0 : x0 > W - 1 ? W - 1 : x0;
  y0 = y0 < 0 ? 0 : y0 > H - 1 ? H - 1 : y0;
  x1 = x1 > W ? W : x1 <= x0 ? x0 + 1 : x1;
  y1 = y1 > H ? H : y1 <= y0 ? y0 + 1 : y1;
  roi->sx = sx, roi->sy = sy, roi->scale_num = s;
  return decode_region(d, x0, x1, y0, y1, roi, why, whylen);
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
  c->scale_num = c->scale_denom = 8;
  if (calc_dims(d)) return fail(d, STK_CORRUPT, why, whylen);
  return decode_region(d, 0, (int)c->image_width, 0, (int)c->image_height, roi, why,
                       whylen);
}
