/* gen.c - procedural JPEG datasets for demos, tests and benchmarks.
 * Images are class-dependent (color scheme, shape, stripe orientation and
 * frequency) with per-sample placement and noise, so a small CNN can
 * learn them; sizes and aspect ratios are ImageNet-like (mean about
 * 400x350), with some progressive and some grayscale files.
 *
 * Writes only where it is told to; owns nothing after it returns.
 */
#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>

#include "gen.h"
#include "core/core_internal.h" /* stk__mix64 */

static uint64_t next(uint64_t *s) {
  *s += 0x9e3779b97f4a7c15ull;
  return stk__mix64(*s);
}
static double unif(uint64_t *s) { return (next(s) >> 11) * (1.0 / 9007199254740992.0); }

void stk__gen_image(uint8_t *rgb, uint32_t w, uint32_t h, uint32_t label, uint64_t seed) {
  uint64_t cs = stk__mix64(label * 0x51ull + 7), st = stk__mix64(seed) ^ cs;
  uint8_t fg[3], bg[3];
  for (int c = 0; c < 3; c++) {
    fg[c] = (uint8_t)(40 + next(&cs) % 200);
    bg[c] = (uint8_t)(next(&cs) % 256);
  }
  int shape = (int)(label % 4);            /* disc, square, ring, diamond */
  double freq = 0.02 + 0.01 * (label % 7); /* stripe frequency, per class */
  double ang = (label % 5) * 0.6283;       /* stripe orientation, per class */
  double ca = cos(ang), sa = sin(ang);
  double cx = w * (0.3 + 0.4 * unif(&st)), cy = h * (0.3 + 0.4 * unif(&st));
  double rad = (w < h ? w : h) * (0.2 + 0.15 * unif(&st));
  double phase = unif(&st) * 6.283;
  for (uint32_t y = 0; y < h; y++) {
    uint64_t ns = stk__mix64(seed * 1315423911u + y);
    for (uint32_t x = 0; x < w; x++) {
      double dx = x - cx, dy = y - cy, d;
      switch (shape) {
        case 0:
          d = sqrt(dx * dx + dy * dy) / rad;
          break;
        case 1:
          d = fmax(fabs(dx), fabs(dy)) / rad;
          break;
        case 2:
          d = fabs(sqrt(dx * dx + dy * dy) / rad - 0.7) * 3;
          break;
        default:
          d = (fabs(dx) + fabs(dy)) / rad;
          break;
      }
      double stripe = 0.5 + 0.5 * sin((x * ca + y * sa) * freq * 6.283 + phase);
      int inside = d < 1;
      if ((x & 7) == 0) ns = stk__mix64(ns + x);
      int noise = (int)((ns >> ((x & 7) * 8)) & 31) - 16;
      for (int c = 0; c < 3; c++) {
        double v = inside ? fg[c] * (0.75 + 0.25 * stripe)
                          : bg[c] * (0.6 + 0.4 * stripe) + 30 * (double)y / h;
        int iv = (int)v + noise;
        rgb[((size_t)y * w + x) * 3 + c] = (uint8_t)(iv < 0 ? 0 : iv > 255 ? 255 : iv);
      }
    }
  }
}

struct gen_err {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
};
static void gen_error_exit(j_common_ptr c) { longjmp(((struct gen_err *)c->err)->jb, 1); }
static void gen_emit(j_common_ptr c, int level) { (void)c, (void)level; }

int stk__encode_jpeg(const uint8_t *rgb, uint32_t w, uint32_t h, int color, int quality,
                     int progressive, uint8_t **out, size_t *len) {
  struct jpeg_compress_struct ci;
  struct gen_err je;
  unsigned char *volatile mem = NULL;
  unsigned long mlen = 0;
  uint8_t *volatile row = malloc((size_t)w * 4);
  *out = NULL;
  if (!row) return -1;
  ci.err = jpeg_std_error(&je.pub);
  je.pub.error_exit = gen_error_exit;
  je.pub.emit_message = gen_emit;
  if (setjmp(je.jb)) {
    jpeg_destroy_compress(&ci);
    free(mem);
    free(row);
    return -1;
  }
  jpeg_create_compress(&ci);
  jpeg_mem_dest(&ci, (unsigned char **)&mem, &mlen);
  ci.image_width = w;
  ci.image_height = h;
  ci.input_components = color == STK__GEN_GRAY ? 1 : color == STK__GEN_CMYK ? 4 : 3;
  ci.in_color_space = color == STK__GEN_GRAY   ? JCS_GRAYSCALE
                      : color == STK__GEN_CMYK ? JCS_CMYK
                                               : JCS_RGB;
  jpeg_set_defaults(&ci);
  if (color == STK__GEN_CMYK) {
    jpeg_set_colorspace(&ci, JCS_YCCK);
    ci.write_Adobe_marker = TRUE;
  }
  jpeg_set_quality(&ci, quality, TRUE);
  if (progressive) jpeg_simple_progression(&ci);
  jpeg_start_compress(&ci, TRUE);
  while (ci.next_scanline < h) {
    const uint8_t *s = rgb + (size_t)ci.next_scanline * w * 3;
    for (uint32_t x = 0; x < w; x++) {
      if (color == STK__GEN_GRAY)
        row[x] =
            (uint8_t)((299 * s[3 * x] + 587 * s[3 * x + 1] + 114 * s[3 * x + 2]) / 1000);
      else if (color == STK__GEN_CMYK) { /* Adobe inverted CMYK, K = 255 */
        row[4 * x] = s[3 * x], row[4 * x + 1] = s[3 * x + 1];
        row[4 * x + 2] = s[3 * x + 2], row[4 * x + 3] = 255;
      } else memcpy(row + 3 * x, s + 3 * x, 3);
    }
    JSAMPROW r = (JSAMPROW)row;
    jpeg_write_scanlines(&ci, &r, 1);
  }
  jpeg_finish_compress(&ci);
  jpeg_destroy_compress(&ci);
  free(row);
  *out = mem;
  *len = mlen;
  return 0;
}

int stk__tar_member(FILE *f, const char *name, const void *data, size_t len) {
  unsigned char h[512];
  memset(h, 0, sizeof(h));
  if (strlen(name) >= 100) return -1;
  memcpy(h, name, strlen(name));
  snprintf((char *)h + 100, 8, "%07o", 0644);
  snprintf((char *)h + 108, 8, "%07o", 0);
  snprintf((char *)h + 116, 8, "%07o", 0);
  snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)len);
  snprintf((char *)h + 136, 12, "%011o", 0);
  h[156] = '0';
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);
  h[155] = ' ';
  static const unsigned char zero[512];
  if (fwrite(h, 1, 512, f) != 512 || fwrite(data, 1, len, f) != len) return -1;
  size_t pad = (512 - len % 512) % 512;
  return fwrite(zero, 1, pad, f) == pad ? 0 : -1;
}

int stk__tar_end(FILE *f) {
  static const unsigned char zero[1024];
  return fwrite(zero, 1, 1024, f) == 1024 ? 0 : -1;
}

static int mkdirp(const char *p) {
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s", p);
  for (char *s = tmp + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
      *s = '/';
    }
  return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

int stk__gen_dataset(const stk__gen_opts *o, char *err, size_t errlen) {
  uint32_t K = o->classes ? o->classes : 10;
  uint32_t per = o->per_shard ? o->per_shard : 1000;
  uint32_t lo = o->min_side ? o->min_side : 250, hi = o->max_side ? o->max_side : 600;
  if (hi < lo) hi = lo;
  if (hi > 8192 || K > 100000) {
    snprintf(err, errlen, "sizes up to 8192, classes up to 100000");
    return -1;
  }
  char path[4096];
  if (mkdirp(o->out)) goto ioerr;
  if (o->imagefolder)
    for (uint32_t c = 0; c < K; c++) {
      snprintf(path, sizeof(path), "%s/imagefolder/class%03u", o->out, c);
      if (mkdirp(path)) goto ioerr;
    }
  if (o->tar) {
    snprintf(path, sizeof(path), "%s/shards", o->out);
    if (mkdirp(path)) goto ioerr;
  }
  uint8_t *rgb = malloc((size_t)hi * hi * 3);
  if (!rgb) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  FILE *tf = NULL;
  int rc = 0;
  static const double aspects[] = {4.0 / 3, 3.0 / 4,  1.0,    3.0 / 2,
                                   2.0 / 3, 16.0 / 9, 5.0 / 4};
  for (uint64_t i = 0; i < o->count && !rc; i++) {
    uint64_t s = stk__mix64(o->seed ^ stk__mix64(i + 1));
    uint32_t label = (uint32_t)(i % K);
    double ar = aspects[next(&s) % 7];
    uint32_t lng = lo + (uint32_t)(next(&s) % (hi - lo + 1));
    uint32_t w = ar >= 1 ? lng : (uint32_t)(lng * ar),
             h = ar >= 1 ? (uint32_t)(lng / ar) : lng;
    if (w < 8) w = 8;
    if (h < 8) h = 8;
    uint64_t r = next(&s);
    int progressive = r % 8 == 0,
        color = (r >> 8) % 16 == 0 ? STK__GEN_GRAY : STK__GEN_RGB;
    int quality = 80 + (int)((r >> 16) % 16);
    stk__gen_image(rgb, w, h, label, s);
    uint8_t *jpg;
    size_t len;
    if (stk__encode_jpeg(rgb, w, h, color, quality, progressive, &jpg, &len)) {
      snprintf(err, errlen, "encode failed");
      rc = -1;
      break;
    }
    if (o->imagefolder) {
      snprintf(path, sizeof(path), "%s/imagefolder/class%03u/img%08llu.jpg", o->out,
               label, (unsigned long long)i);
      FILE *f = fopen(path, "wb");
      if (!f || fwrite(jpg, 1, len, f) != len) rc = -1;
      if (f && fclose(f)) rc = -1;
    }
    if (o->tar && !rc) {
      if (i % per == 0) {
        if (tf && (stk__tar_end(tf) || fclose(tf))) rc = -1;
        snprintf(path, sizeof(path), "%s/shards/shard-%06llu.tar", o->out,
                 (unsigned long long)(i / per));
        tf = rc ? NULL : fopen(path, "wb");
        if (!tf) rc = -1;
      }
      char name[64], cls[32];
      snprintf(name, sizeof(name), "%08llu.jpg", (unsigned long long)i);
      int cl = snprintf(cls, sizeof(cls), "%u", label);
      if (!rc && (stk__tar_member(tf, name, jpg, len) ||
                  (snprintf(name, sizeof(name), "%08llu.cls", (unsigned long long)i),
                   stk__tar_member(tf, name, cls, (size_t)cl))))
        rc = -1;
    }
    free(jpg);
    if (rc) snprintf(err, errlen, "writing %s: %s", path, strerror(errno));
  }
  if (tf && (stk__tar_end(tf) | fclose(tf)) && !rc) {
    snprintf(err, errlen, "writing shard: %s", strerror(errno));
    rc = -1;
  }
  free(rgb);
  return rc;
ioerr:
  snprintf(err, errlen, "mkdir under %s: %s", o->out, strerror(errno));
  return -1;
}
