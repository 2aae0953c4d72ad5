/* bench_decode.c - `stoker-bench decode-modes DIR`: how much of a JPEG
 * decode is upsampling and colour conversion, the part that decoding to
 * planar YCbCr (libjpeg's raw_data_out) would leave out. It times, over
 * the same files held in memory, alternating rounds, one thread:
 *   rgb: the whole image to interleaved RGB with the train path's settings
 *        (fast integer IDCT, merged upsampling), as augment/decode.c;
 *   ycc: the same images to planar Y, Cb, Cr at their own resolutions
 *        (raw_data_out: no upsampling, no colour conversion).
 * Images that are not 3-component YCbCr (grayscale, CMYK) decode the same
 * way in both. The ycc / rgb time is an upper bound on what a decode that
 * stays in YCbCr saves in the decoder; the ROI decode
 * converts only the crop's rows and columns, so it saves less there.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>

#include "bench_util.h"

static const char usage[] =
    "usage: stoker-bench decode-modes DIR [options]\n"
    "DIR is an ImageFolder dataset (e.g. from `stoker-dataset gen`, its\n"
    "imagefolder/ directory). Its files are read into memory, then decoded\n"
    "whole on one thread in alternating rounds: to RGB with the train path's\n"
    "settings (fast IDCT, merged upsampling), and to planar YCbCr\n"
    "(raw_data_out: no upsampling, no colour conversion). Prints images/s per\n"
    "CPU second of each round, the ycc / rgb time, and medians: the most a\n"
    "decode that stays in YCbCr could save in libjpeg.\n"
    "  --images N    at most N files (default 1000)\n"
    "  --rounds R    alternating rounds (default 3, at most 15)\n";

typedef struct blob {
  unsigned char *data;
  size_t len;
} blob;

typedef struct err_mgr {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
} err_mgr;

static void on_error(j_common_ptr c) { longjmp(((err_mgr *)c->err)->jb, 1); }
static void on_message(j_common_ptr c) { (void)c; }

/* Decode f whole; planar: to Y, Cb, Cr when it is YCbCr. rows: scratch of
 * at least 3 x 32 rows of `stride` bytes. 1 when it decoded, 0 if not. */
static int decode(const blob *f, int planar, unsigned char *rows, size_t stride,
                  int *was_planar) {
  struct jpeg_decompress_struct c;
  err_mgr e;
  c.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = on_error;
  e.pub.output_message = on_message;
  jpeg_create_decompress(&c);
  if (setjmp(e.jb)) {
    jpeg_destroy_decompress(&c);
    return 0;
  }
  jpeg_mem_src(&c, f->data, (unsigned long)f->len);
  jpeg_read_header(&c, TRUE);
  if ((unsigned long long)c.image_width * c.image_height > (1ull << 28)) {
    jpeg_destroy_decompress(&c); /* over 268 megapixels: not timed */
    return 0;
  }
  c.dct_method = JDCT_IFAST;
  c.do_fancy_upsampling = FALSE;
  int raw = planar && c.num_components == 3 && c.jpeg_color_space == JCS_YCbCr &&
            c.max_v_samp_factor <= 4;
  if (raw) {
    c.raw_data_out = TRUE;
    c.out_color_space = JCS_YCbCr;
  } else if (c.num_components == 1) c.out_color_space = JCS_GRAYSCALE;
  else if (c.jpeg_color_space != JCS_CMYK && c.jpeg_color_space != JCS_YCCK)
    c.out_color_space = JCS_RGB;
  jpeg_start_decompress(&c);
  if ((size_t)c.output_width * (size_t)c.output_components > stride) {
    jpeg_destroy_decompress(&c);
    return 0; /* wider than the scratch rows: not timed */
  }
  if (raw) {
    JSAMPROW prow[3][32];
    JSAMPARRAY planes[3];
    for (int ci = 0; ci < 3; ci++) {
      for (int r = 0; r < 32; r++) prow[ci][r] = rows + (size_t)(ci * 32 + r) * stride;
      planes[ci] = prow[ci];
    }
    JDIMENSION step = (JDIMENSION)c.max_v_samp_factor * DCTSIZE;
    while (c.output_scanline < c.output_height)
      if (jpeg_read_raw_data(&c, planes, step) == 0) break;
  } else {
    JSAMPROW r16[16];
    for (int r = 0; r < 16; r++) r16[r] = rows + (size_t)r * stride;
    while (c.output_scanline < c.output_height)
      if (jpeg_read_scanlines(&c, r16, 16) == 0) break;
  }
  int ok = c.output_scanline >= c.output_height; /* raw: whole iMCU rows */
  if (ok) jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  *was_planar += raw && ok;
  return ok;
}

/* One round: images per CPU second, or 0 when none decoded. */
static double round_rate(const blob *f, size_t n, int planar, unsigned char *rows,
                         size_t stride, size_t *done, int *nplanar) {
  double t0 = bu_thread_cpu_s();
  *done = 0, *nplanar = 0;
  for (size_t i = 0; i < n; i++)
    *done += (size_t)decode(&f[i], planar, rows, stride, nplanar);
  double dt = bu_thread_cpu_s() - t0;
  return *done && dt > 0 ? (double)*done / dt : 0;
}

static int read_all(const char *path, blob *b) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t cap = 1 << 16, n = 0;
  unsigned char *d = malloc(cap);
  size_t got;
  while (d && (got = fread(d + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      unsigned char *g = realloc(d, cap * 2);
      if (!g) break;
      d = g, cap *= 2;
    }
  }
  int bad = ferror(f) || !d || n == 0;
  fclose(f);
  if (bad) {
    free(d);
    return -1;
  }
  b->data = d, b->len = n;
  return 0;
}

int bench_decode_main(int argc, char **argv) {
  const char *dir = NULL;
  size_t max = 1000;
  int rounds = 3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(argv[i], "--images") && i + 1 < argc) {
      max = strtoul(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = atoi(argv[++i]);
    } else if (argv[i][0] != '-' && !dir) {
      dir = argv[i];
    } else {
      fprintf(stderr, "stoker-bench decode-modes: bad argument %s\n%s", argv[i], usage);
      return 2;
    }
  }
  if (!dir || max == 0 || rounds < 1 || rounds > 15) {
    fputs(usage, stderr);
    return 2;
  }
  char **paths = NULL;
  size_t np = bu_list_jpegs(dir, &paths, max), n = 0;
  blob *files = calloc(np ? np : 1, sizeof(*files));
  for (size_t i = 0; i < np; i++) {
    char p[PATH_MAX * 2];
    snprintf(p, sizeof(p), "%s/%s", dir, paths[i]);
    if (files && read_all(p, &files[n]) == 0) n++;
    free(paths[i]);
  }
  free(paths);
  if (n == 0) {
    fprintf(stderr, "stoker-bench decode-modes: no readable .jpg under %s/*/\n", dir);
    free(files);
    return 1;
  }
  size_t stride = (size_t)3 * 65536; /* widest row decoded: 65536 px x 3 */
  unsigned char *rows = malloc(stride * 96);
  if (!rows) {
    fprintf(stderr, "stoker-bench decode-modes: out of memory\n");
    return 1;
  }
  printf("stoker-bench decode-modes: %s, %zu files in memory, %d rounds, one thread\n",
         dir, n, rounds);
  double rgb[15], ycc[15], ratio[15];
  size_t done = 0;
  int nplanar = 0;
  round_rate(files, n, 1, rows, stride, &done, &nplanar); /* warm-up */
  for (int r = 0; r < rounds; r++) {
    rgb[r] = round_rate(files, n, 0, rows, stride, &done, &nplanar);
    ycc[r] = round_rate(files, n, 1, rows, stride, &done, &nplanar);
    ratio[r] = ycc[r] > 0 ? rgb[r] / ycc[r] : 0;
    printf(
        "  round %d: rgb %8.1f | ycc %8.1f images/s per CPU second | ycc / rgb time "
        "%.3f\n",
        r + 1, rgb[r], ycc[r], ratio[r]);
  }
  printf("decoded %zu of %zu files; %d as planar YCbCr (the rest decode alike)\n", done,
         n, nplanar);
  printf(
      "median: rgb %.1f, ycc %.1f; ycc / rgb time %.3f (per-round median): upsampling\n"
      "and colour conversion are %.0f%% of a whole-image decode\n",
      bu_median(rgb, rounds), bu_median(ycc, rounds), bu_median(ratio, rounds),
      100.0 * (1.0 - bu_median(ratio, rounds)));
  for (size_t i = 0; i < n; i++) free(files[i].data);
  free(files);
  free(rows);
  return 0;
}
