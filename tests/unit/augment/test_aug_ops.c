/* test_aug_ops.c - each image op against an independent reference:
 * RandomResizedCrop's box rule (bounds, the center fallback, determinism
 * per (seed, epoch, index)), resampling against a plain transcription of
 * Pillow's fixed-point arithmetic (both kernel sets; flip and the row
 * callback) and within a level of a float64 filter, the row store against
 * the whole-image store, flip and normalize exactness,
 * bfloat16 rounding, and ROI decode against full decode + crop
 * (baseline, progressive, grayscale and CMYK inputs).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gen.h"
#include "decode.h"
#include "ops.h"

static void test_rrc(void) {
  int fallbacks = 0;
  for (uint64_t i = 0; i < 2000; i++) {
    stk_rng r, r2;
    stk_rng_init(&r, 5, 1, i);
    stk_rng_init(&r2, 5, 1, i);
    uint32_t W = 50 + (uint32_t)(i * 37 % 500), H = 50 + (uint32_t)(i * 91 % 400);
    stk__box b = stk__rrc_box(W, H, 0.08, 1, 3.0 / 4, 4.0 / 3, &r);
    stk__box c = stk__rrc_box(W, H, 0.08, 1, 3.0 / 4, 4.0 / 3, &r2);
    CHECK(!memcmp(&b, &c, sizeof(b)));
    CHECK(b.x >= 0 && b.y >= 0 && b.w >= 1 && b.h >= 1);
    CHECK(b.x + b.w <= (int32_t)W && b.y + b.h <= (int32_t)H);
  }
  /* impossible tries -> center fallback, torchvision's arithmetic */
  stk_rng r;
  stk_rng_init(&r, 1, 0, 0);
  stk__box b = stk__rrc_box(300, 300, 1, 1, 3, 4, &r);
  CHECK(b.w == 300 && b.h == 100 && b.x == 0 && b.y == 100);
  stk_rng_init(&r, 1, 0, 0);
  b = stk__rrc_box(300, 300, 1, 1, 0.25, 0.5, &r);
  CHECK(b.h == 300 && b.w == 150 && b.x == 75 && b.y == 0);
  stk_rng_init(&r, 1, 0, 0);
  b = stk__rrc_box(301, 100, 1, 1, 0.9, 1.1, &r); /* ratio 3.01 > 1.1 */
  CHECK(b.h == 100 && b.w == 110 && b.x == 95 && b.y == 0);
  (void)fallbacks;
}

/* float64 reference of the antialiased triangle filter */
static double tri(double x) {
  x = fabs(x);
  return x < 1 ? 1 - x : 0;
}
static void ref_weights(double in0, double in1, int size, int out, int i, double *w,
                        int *lo, int *n) {
  double scale = (in1 - in0) / out, fs = scale < 1 ? 1 : scale;
  double center = in0 + (i + 0.5) * scale;
  int a = (int)floor(center - fs + 0.5), b = (int)floor(center + fs + 0.5);
  if (a < 0) a = 0;
  if (b > size) b = size;
  double sum = 0;
  for (int k = a; k < b; k++) sum += w[k - a] = tri((k - center + 0.5) / fs);
  for (int k = a; k < b; k++) w[k - a] /= sum;
  *lo = a, *n = b - a;
}

/* Pillow's precompute_coeffs (Resample.c) for the bilinear filter. */
static void pil_weights(double in0, double in1, int size, int out, int i, double *w,
                        int *lo, int *n) {
  double scale = (in1 - in0) / out, fs = scale < 1 ? 1 : scale, ss = 1.0 / fs;
  double center = in0 + (i + 0.5) * scale, ww = 0;
  int xmin = (int)(center - fs + 0.5), xmax = (int)(center + fs + 0.5);
  if (xmin < 0) xmin = 0;
  if (xmax > size) xmax = size;
  xmax -= xmin;
  for (int x = 0; x < xmax; x++) ww += w[x] = tri((x + xmin - center + 0.5) * ss);
  for (int x = 0; x < xmax; x++)
    if (ww != 0.0) w[x] /= ww;
  *lo = xmin, *n = xmax;
}

/* Pillow's ImagingResample for RGB, bilinear, written plainly from
 * Resample.c: weights in 22-bit fixed point, the horizontal pass over all
 * source rows into 8 bits, then the vertical pass. */
static void ref_pil(const uint8_t *src, int sw, int sh, double x0, double y0, double x1,
                    double y1, int ow, int oh, uint8_t *out) {
  uint8_t *mid = malloc((size_t)ow * sh * 3);
  double w[1024];
  for (int pass = 0; pass < 2; pass++) {
    int outn = pass ? oh : ow, size = pass ? sh : sw;
    double in0 = pass ? y0 : x0, in1 = pass ? y1 : x1;
    for (int i = 0; i < outn; i++) {
      int lo, n;
      pil_weights(in0, in1, size, outn, i, w, &lo, &n);
      int32_t k[1024];
      for (int t = 0; t < n; t++) k[t] = (int32_t)(0.5 + w[t] * (1 << 22));
      int lines = pass ? ow : sh;
      for (int l = 0; l < lines; l++)
        for (int c = 0; c < 3; c++) {
          int32_t acc = 1 << 21;
          for (int t = 0; t < n; t++)
            acc += k[t] * (pass ? mid[((size_t)(lo + t) * ow + l) * 3 + c]
                                : src[((size_t)l * sw + lo + t) * 3 + c]);
          acc >>= 22;
          uint8_t v = (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc);
          if (pass) out[((size_t)i * ow + l) * 3 + c] = v;
          else mid[((size_t)l * ow + i) * 3 + c] = v;
        }
    }
  }
  free(mid);
}

typedef struct {
  uint8_t *buf;
  uint32_t ow, rows;
} rows_seen;
static void collect(void *ctx, uint32_t y, const uint8_t *row) {
  rows_seen *rs = ctx;
  CHECK(y == rs->rows);
  memcpy(rs->buf + (size_t)y * rs->ow * 3, row, (size_t)rs->ow * 3);
  rs->rows++;
}

static void test_resample(void) {
  enum { SW = 173, SH = 131 };
  uint8_t *src = malloc(SW * SH * 3);
  stk__gen_image(src, SW, SH, 3, 99);
  stk__scratch sc;
  memset(&sc, 0, sizeof(sc));
  struct {
    double x0, y0, x1, y1;
    uint32_t ow, oh;
  } cases[] = {
      {0, 0, SW, SH, 64, 48}, /* downscale */
      {10.5, 7.25, 90.5, 100, 40, 40},
      {20, 20, 50, 40, 96, 64},  /* upscale */
      {0, 0, SW, SH, SW, SH},    /* identity */
      {3, 1, 170, 130, 17, 111}, /* mixed */
      {0, 0, SW, SH, 5, 3},
      {0, 0, SW, SH, 1, 1},   /* far down */
      {0, 0, SW, SH, 700, 9}, /* wide */
  };
  double wx[1024], wy[1024];
  int kernels = 0;
  for (int use_c = 0; use_c < 2; use_c++) {
    stk__resample_force_c(use_c);
    printf("resample: kernels %s\n", stk__resample_kernels());
    kernels += use_c || strcmp(stk__resample_kernels(), "c") != 0;
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
      uint32_t ow = cases[t].ow, oh = cases[t].oh;
      size_t vals = (size_t)ow * oh * 3;
      uint8_t *o8 = malloc(vals), *fl = malloc(vals), *ref = malloc(vals),
              *em = malloc(vals);
      CHECK(stk__resample(&sc, src, SW, SH, cases[t].x0, cases[t].y0, cases[t].x1,
                          cases[t].y1, ow, oh, 0, o8) == 0);
      ref_pil(src, SW, SH, cases[t].x0, cases[t].y0, cases[t].x1, cases[t].y1, (int)ow,
              (int)oh, ref);
      size_t differ = 0;
      for (size_t i = 0; i < vals; i++) differ += o8[i] != ref[i];
      if (differ)
        fprintf(stderr, "case %zu: %zu values differ from Pillow's\n", t, differ);
      CHECK(differ == 0);
      /* mirrored, through the row callback too */
      rows_seen rs = {em, ow, 0};
      CHECK(stk__resample_rows(&sc, src, SW, SH, cases[t].x0, cases[t].y0, cases[t].x1,
                               cases[t].y1, ow, oh, STK__FILTER_BILINEAR, 1, fl, collect,
                               &rs) == 0);
      CHECK(rs.rows == oh && memcmp(fl, em, vals) == 0);
      int bad = 0;
      for (uint32_t y = 0; y < oh; y++)
        for (uint32_t x = 0; x < ow; x++)
          bad += memcmp(fl + ((size_t)y * ow + x) * 3,
                        o8 + ((size_t)y * ow + ow - 1 - x) * 3, 3) != 0;
      CHECK(bad == 0);
      /* within a level of the float64 filter (8-bit rounding twice) */
      double maxd = 0;
      for (uint32_t y = 0; y < oh; y++) {
        int ya, yn;
        ref_weights(cases[t].y0, cases[t].y1, SH, (int)oh, (int)y, wy, &ya, &yn);
        for (uint32_t x = 0; x < ow; x++) {
          int xa, xn;
          ref_weights(cases[t].x0, cases[t].x1, SW, (int)ow, (int)x, wx, &xa, &xn);
          for (int c = 0; c < 3; c++) {
            double v = 0;
            for (int j = 0; j < yn; j++)
              for (int i = 0; i < xn; i++)
                v += wy[j] * wx[i] * src[((size_t)(ya + j) * SW + xa + i) * 3 + c];
            double d = fabs(v - o8[((size_t)y * ow + x) * 3 + c]);
            if (d > maxd) maxd = d;
          }
        }
      }
      if (maxd > 1.0) fprintf(stderr, "case %zu: max diff %g from float64\n", t, maxd);
      CHECK(maxd <= 1.0);
      free(o8), free(fl), free(ref), free(em);
    }
  }
  stk__resample_force_c(0);
  printf("resample: %zu boxes exact against Pillow's arithmetic, %d kernel sets\n",
         sizeof(cases) / sizeof(cases[0]), kernels);
  /* identity resampling returns the source exactly */
  uint8_t *img8 = malloc(SW * SH * 3);
  CHECK(stk__resample(&sc, src, SW, SH, 0, 0, SW, SH, SW, SH, 0, img8) == 0);
  CHECK(memcmp(img8, src, SW * SH * 3) == 0);
  uint8_t *out = malloc(SW * SH * 3);
  stk__post p = {.flip = 0,
                 .bright = 1,
                 .contrast = 1,
                 .satur = 1,
                 .dtype = STK_DTYPE_UINT8,
                 .layout = STK_LAYOUT_NHWC};
  CHECK(stk__post_store(&sc, SW, SH, &p, img8, out) == 0);
  CHECK(memcmp(out, src, SW * SH * 3) == 0);
  /* the store's flip is an exact mirror */
  uint8_t *fl = malloc(SW * SH * 3);
  p.flip = 1;
  CHECK(stk__post_store(&sc, SW, SH, &p, img8, fl) == 0);
  int bad = 0;
  for (int y = 0; y < SH; y++)
    for (int x = 0; x < SW; x++)
      bad += memcmp(fl + ((size_t)y * SW + x) * 3,
                    src + ((size_t)y * SW + SW - 1 - x) * 3, 3) != 0;
  CHECK(bad == 0);
  /* normalize: float32 NCHW = (v/255 - mean)/std within float rounding */
  float *f = malloc(sizeof(float) * SW * SH * 3);
  stk_job_spec js; /* ImageNet mean/std */
  stk_job_spec_defaults(&js);
  float norm[3][256];
  stk_normalize_table(&js, norm);
  stk__post q = {.flip = 0,
                 .bright = 1,
                 .contrast = 1,
                 .satur = 1,
                 .dtype = STK_DTYPE_FLOAT32,
                 .layout = STK_LAYOUT_NCHW,
                 .norm = (const float(*)[256])norm};
  CHECK(stk__post_store(&sc, SW, SH, &q, img8, f) == 0);
  double maxe = 0;
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < SW * SH; i++) {
      double want = (src[i * 3 + c] / 255.0 - js.mean[c]) / js.std[c];
      double e = fabs(f[c * SW * SH + i] - want);
      if (e > maxe) maxe = e;
    }
  CHECK(maxe < 1e-5);
  /* jitter with brightness 0.5 halves */
  stk__post jb = {.flip = 0,
                  .bright = 0.5f,
                  .contrast = 1,
                  .satur = 1,
                  .dtype = STK_DTYPE_UINT8,
                  .layout = STK_LAYOUT_NHWC};
  CHECK(stk__post_store(&sc, SW, SH, &jb, img8, out) == 0);
  bad = 0;
  for (int i = 0; i < SW * SH * 3; i++)
    bad += abs(out[i] - (int)floor(src[i] * 0.5 + 0.5)) > 1;
  CHECK(bad == 0);
  free(f), free(fl), free(out), free(src), free(img8);
  stk__scratch_free(&sc);
}

/* The row store (what the chain's last resample feeds: flip done by the
 * resampler, float32 computed from the normalize coefficients) writes the
 * bytes stk__post_store writes from the whole image (flip by the store,
 * float32 from the table), for every dtype, layout and flip, over scales
 * down, up and mixed. */
typedef struct {
  stk__post *p;
  const uint16_t (*tb)[256];
  uint32_t ow, oh;
  void *out;
} row_ctx;
static void row_to_store(void *ctx, uint32_t y, const uint8_t *row) {
  row_ctx *c = ctx;
  stk__store_row(c->p, c->tb, c->ow, c->oh, y, row, c->out);
}

static void test_resample8(void) {
  enum { SW = 301, SH = 203 };
  uint8_t *src = malloc(SW * SH * 3);
  stk__gen_image(src, SW, SH, 3, 7);
  stk_job_spec js;
  stk_job_spec_defaults(&js);
  float norm[3][256];
  stk_normalize_table(&js, norm);
  uint16_t tb[3][256];
  stk__bf16_tables((const float(*)[256])norm, tb);
  float na[3], nb[3];
  stk_normalize_coeffs(&js, na, nb);
  const uint32_t sizes[][2] = {{224, 224}, {300, 17}, {33, 410}, {600, 250}};
  const int dtypes[] = {STK_DTYPE_UINT8, STK_DTYPE_FLOAT32, STK_DTYPE_BFLOAT16};
  stk__scratch a;
  memset(&a, 0, sizeof(a));
  int bad = 0, n = 0;
  for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
    uint32_t ow = sizes[z][0], oh = sizes[z][1];
    size_t vals = (size_t)ow * oh * 3;
    uint8_t *img8 = malloc(vals), *o1 = malloc(vals * 4), *o2 = malloc(vals * 4);
    for (size_t d = 0; d < 3; d++)
      for (int lay = 0; lay < 2; lay++)
        for (int flip = 0; flip < 2; flip++, n++) {
          stk__post p = {.flip = flip,
                         .bright = 1,
                         .contrast = 1,
                         .satur = 1,
                         .dtype = dtypes[d],
                         .layout = lay ? STK_LAYOUT_NHWC : STK_LAYOUT_NCHW,
                         .norm = (const float(*)[256])norm};
          CHECK(stk__resample(&a, src, SW, SH, 5.5, 3, 290, 200.5, ow, oh, 0, img8) == 0);
          CHECK(stk__post_store(&a, ow, oh, &p, img8, o1) == 0);
          /* flip fused into the resampler, the rows stored as they come */
          stk__post q = p;
          q.flip = 0;
          stk__post_affine(&q, na, nb); /* float32 computed, not looked up */
          CHECK(q.affine);
          row_ctx c = {&q, (const uint16_t(*)[256])tb, ow, oh, o2};
          CHECK(stk__resample_rows(&a, src, SW, SH, 5.5, 3, 290, 200.5, ow, oh,
                                   STK__FILTER_BILINEAR, flip, NULL, row_to_store,
                                   &c) == 0);
          size_t bytes = vals * (dtypes[d] == STK_DTYPE_UINT8     ? 1
                                 : dtypes[d] == STK_DTYPE_FLOAT32 ? 4
                                                                  : 2);
          bad += memcmp(o1, o2, bytes) != 0;
        }
    free(img8), free(o1), free(o2);
  }
  printf("resample8 (%s): %d of %d dtype/layout/flip/size cases differ\n",
         stk__resample_kernels(), bad, n);
  CHECK(bad == 0);
  stk__scratch_free(&a), free(src);
}

/* The chosen (AVX2 or SSE2) and the portable kernels give the same bytes
 * over random sources (1 to 400 pixels wide, exactly allocated: a
 * sanitizer build sees any read past them), boxes (inside, at the edges,
 * partly outside), output sizes (multiples of the 8 positions of a group
 * and not; rows of every length modulo the vector widths), every filter
 * (negative weights, up to 2 * 3 * scale + 1 taps: over 128 on the
 * tallest sources, past the AVX-512 vertical pass's register of pairs)
 * and flip. */
static void kernels_against_c(void) {
  stk__resample_force_c(0);
  const char *kn = stk__resample_kernels();
  if (!strcmp(kn, "c")) {
    printf("resample kernels: only the portable ones here, nothing to compare\n");
    return;
  }
  stk__scratch a, c;
  memset(&a, 0, sizeof(a));
  memset(&c, 0, sizeof(c));
  uint64_t st = 12345;
#define RND(n) \
  ((uint32_t)((st = st * 6364136223846793005ull + 1442695040888963407ull) >> 33) % (n))
  int cases = 0, bad = 0;
  for (int it = 0; it < 600; it++) {
    uint32_t sw = 1 + RND(it % 3 ? 400 : 12), sh = 1 + RND(it % 11 == 0 ? 400
                                                           : it % 5     ? 120
                                                                        : 6);
    uint8_t *src = malloc((size_t)sw * sh * 3);
    stk__gen_image(src, sw, sh, 3, (uint32_t)it);
    double x0 = RND(sw * 4) / 4.0, y0 = RND(sh * 4) / 4.0;
    double x1 = x0 + (1 + RND(sw * 4)) / 4.0, y1 = y0 + (1 + RND(sh * 4)) / 4.0;
    if (it % 7 == 0) x0 = 0, x1 = sw, y0 = 0, y1 = sh; /* the whole source */
    uint32_t ow = 1 + RND(it % 4 ? 300 : 17), oh = 1 + RND(40);
    int filter = (int)RND(3), flip = (int)RND(2);
    size_t vals = (size_t)ow * oh * 3;
    uint8_t *o1 = malloc(vals), *o2 = malloc(vals);
    stk__resample_force_c(0);
    CHECK(stk__resample_rows(&a, src, sw, sh, x0, y0, x1, y1, ow, oh, filter, flip, o1,
                             NULL, NULL) == 0);
    stk__resample_force_c(1);
    CHECK(stk__resample_rows(&c, src, sw, sh, x0, y0, x1, y1, ow, oh, filter, flip, o2,
                             NULL, NULL) == 0);
    if (memcmp(o1, o2, vals)) {
      fprintf(stderr,
              "kernels differ: %ux%u box %g,%g,%g,%g to %ux%u filter %d flip %d\n", sw,
              sh, x0, y0, x1, y1, ow, oh, filter, flip);
      bad++;
    }
    cases++;
    free(o1), free(o2), free(src);
  }
#undef RND
  stk__resample_force_c(0);
  printf("resample kernels: %d of %d random cases differ between %s and C\n", bad, cases,
         kn);
  CHECK(bad == 0);
  stk__scratch_free(&a), stk__scratch_free(&c);
}

/* The run time's choice (AVX-512 or AVX2 where the CPU has it), then
 * AVX2 and SSE2 as STOKER_RESAMPLE=avx2 and =sse2 pick them, each against
 * the portable kernels: every path this CPU has. */
static void test_resample_kernels(void) {
  kernels_against_c();
  const char *paths[] = {"avx2", "sse2"};
  for (int i = 0; i < 2; i++) {
    stk__resample_force_c(0);
    const char *best = stk__resample_kernels();
    setenv("STOKER_RESAMPLE", paths[i], 1);
    stk__resample_force_c(0);
    const char *kn = stk__resample_kernels();
    /* =avx2 on a CPU without it runs the best it has (SSE2, or C off x86-64) */
    CHECK(strcmp(kn, paths[i]) == 0 ||
          (i == 0 && strcmp(best, "avx512") != 0 && strcmp(kn, best) == 0) ||
          strcmp(kn, "c") == 0);
    kernels_against_c();
    unsetenv("STOKER_RESAMPLE");
  }
  stk__resample_force_c(0);
}

static void test_bf16(void) {
  CHECK(stk__bf16(1.0f) == 0x3f80);
  CHECK(stk__bf16(-2.0f) == 0xc000);
  float x;
  uint32_t u = 0x3f808000; /* exactly half way: rounds to even (0x3f80) */
  memcpy(&x, &u, 4);
  CHECK(stk__bf16(x) == 0x3f80);
  u = 0x3f818000; /* half way, odd below: rounds up */
  memcpy(&x, &u, 4);
  CHECK(stk__bf16(x) == 0x3f82);
}

static stk_limits lims(void) {
  stk_limits l;
  memset(&l, 0, sizeof(l));
  l.max_file_bytes = 64 << 20, l.max_pixels = 100000000, l.max_dimension = 32768;
  l.max_scans = 500, l.max_decoder_bytes = 512 << 20;
  return l;
}

/* ROI decode equals full decode + crop (same scale) up to upsampling at
 * the crop edges. */
static void test_roi(void) {
  enum { W = 333, H = 257 };
  uint8_t *rgb = malloc(W * H * 3);
  stk__gen_image(rgb, W, H, 2, 5);
  stk_limits l = lims();
  stk__decoder *d;
  CHECK(stk__decoder_create(&d, &l) == STK_OK);
  for (int kind = 0; kind < 4; kind++) {
    uint8_t *jpg;
    size_t len;
    int color = kind == 2 ? STK__GEN_GRAY : kind == 3 ? STK__GEN_CMYK : STK__GEN_RGB;
    CHECK(stk__encode_jpeg(rgb, W, H, color, 90, kind == 1, &jpg, &len) == 0);
    for (int s = 8; s >= 3; s -= 5) {
      uint32_t w, h;
      stk__roi full, roi;
      CHECK(stk__decoder_header(d, jpg, len, &w, &h, NULL, 0) == STK_OK);
      CHECK(w == W && h == H);
      /* full decode at scale s: a box of the whole image */
      CHECK(stk__decoder_roi(d, 0, 0, W, H, W * s / 8, H * s / 8, 0, 8, 0, &full, NULL,
                             0) == STK_OK);
      CHECK(full.scale_num == s);
      size_t fw = full.w, fh = full.h;
      uint8_t *copy = malloc(fw * fh * 3);
      memcpy(copy, full.px, fw * fh * 3);
      CHECK(stk__decoder_header(d, jpg, len, &w, &h, NULL, 0) == STK_OK);
      CHECK(stk__decoder_roi(d, 101, 77, 260, 200, 159 * s / 8, 123 * s / 8, 0, 8, 0,
                             &roi, NULL, 0) == STK_OK);
      CHECK(roi.scale_num == full.scale_num);
      CHECK(roi.w >= (uint32_t)ceil(159 * roi.sx) &&
            roi.h >= (uint32_t)ceil(123 * roi.sy));
      double sum = 0;
      int maxd = 0;
      for (uint32_t y = 0; y < roi.h; y++)
        for (uint32_t x = 0; x < roi.w * 3; x++) {
          int a = roi.px[(size_t)y * roi.w * 3 + x];
          int b = copy[((size_t)(y + (uint32_t)roi.y0) * fw + (uint32_t)roi.x0) * 3 + x];
          int dd = abs(a - b);
          sum += dd;
          if (dd > maxd) maxd = dd;
        }
      double mean = sum / (roi.w * roi.h * 3.0);
      if (mean > 0.05 || maxd > 32)
        fprintf(stderr, "kind %d scale %d: mean %g max %d\n", kind, s, mean, maxd);
      CHECK(mean <= 0.05 && maxd <= 32); /* chroma upsampling at crop edges */
      /* color conversion: gray is R=G=B; CMYK and RGB close to the source */
      if (s == 8) {
        double e = 0;
        for (size_t i = 0; i < fw * fh; i++) {
          if (kind == 2)
            CHECK(copy[3 * i] == copy[3 * i + 1] && copy[3 * i] == copy[3 * i + 2]);
          if (kind != 2) e += abs(copy[3 * i] - rgb[3 * i]);
        }
        if (kind != 2 && e / (fw * fh) >= 12)
          fprintf(stderr, "kind %d err %g\n", kind, e / (fw * fh));
        if (kind != 2) CHECK(e / (fw * fh) < 12);
      }
      free(copy);
    }
    free(jpg);
  }
  stk__decoder_destroy(d);
  free(rgb);
}

int main(void) {
  test_rrc();
  test_resample();
  test_resample8();
  stk__resample_force_c(1); /* the portable resampler and stores too */
  test_resample8();
  stk__resample_force_c(0);
  test_resample_kernels();
  test_bf16();
  test_roi();
  CHECK_DONE();
}
