/* test_aug_png.c - PNG samples and the ImageFolder walk, in C (so the
 * sanitizer builds cover them; tests/python/test_imagefolder.py checks
 * the same against PIL and torchvision):
 *  - every PNG color type and bit depth, plain and interlaced, decodes
 *    through the decoder's header + region calls to the RGB pngdec.h
 *    describes (PIL's convert("RGB"): high byte, 16-bit gray clipped,
 *    alpha dropped, palette looked up);
 *  - damaged PNGs (a bad IDAT checksum, cut short, garbage after the
 *    signature, a bad IHDR) are STK_CORRUPT and oversized ones STK_LIMIT,
 *    with a reason, the decoder reusable afterwards;
 *  - the ImageFolder walk: nested folders in make_dataset's order, .png
 *    and .JPG taken, the rest skipped and counted (a .txt, a .bmp, a link
 *    to a folder that loops back, a file beside the class folders, a folder
 *    past the depth bound), class names in byte order, and num_classes
 *    refused unless 0 or the class count;
 *  - a flat dataset of JPEGs keeps the order and fingerprint it had before
 *    the walk went recursive (the value the earlier code computed).
 */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "gen.h"
#include "decode.h"
#include "util.h"

#define W 13
#define H 7

typedef struct mem {
  uint8_t *p;
  size_t n, cap;
} mem;

static void mem_write(png_structp png, png_bytep d, size_t n) {
  mem *m = png_get_io_ptr(png);
  if (m->n + n > m->cap) {
    m->cap = (m->n + n) * 2;
    m->p = realloc(m->p, m->cap);
  }
  memcpy(m->p + m->n, d, n);
  m->n += n;
}
static void mem_flush(png_structp png) { (void)png; }

static unsigned sample(int x, int y, int c, unsigned top) {
  return (unsigned)(x * 37 + y * 91 + c * 53 + x * y * 7) % top;
}

/* A W x H PNG of color type ct and depth bd (samples from sample()). */
static mem make_png(int ct, int bd, int interlace) {
  mem m = {0};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    free(m.p);
    memset(&m, 0, sizeof(m));
    return m;
  }
  png_set_write_fn(png, &m, mem_write, mem_flush);
  png_set_IHDR(png, info, W, H, bd, ct,
               interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_color pal[16];
  for (int i = 0; i < 16; i++)
    pal[i].red = (png_byte)(i * 40), pal[i].green = (png_byte)(i * 90 + 7),
    pal[i].blue = (png_byte)(255 - i * 13);
  png_byte trns[3] = {0, 64, 128};
  if (ct == PNG_COLOR_TYPE_PALETTE) {
    png_set_PLTE(png, info, pal, bd < 4 ? 1 << bd : 16);
    png_set_tRNS(png, info, trns, 3, NULL);
  }
  png_write_info(png, info);
  if (bd < 8) png_set_packing(png);
  int ch = ct == 0 || ct == 3 ? 1 : ct == 4 ? 2 : ct == 2 ? 3 : 4;
  unsigned top = ct == 3 && bd >= 4 ? 16 : 1u << bd;
  size_t bps = bd == 16 ? 2 : 1;
  uint8_t *img = malloc((size_t)W * H * ch * bps);
  png_bytep rows[H];
  for (int y = 0; y < H; y++) {
    rows[y] = img + (size_t)y * W * ch * bps;
    for (int x = 0; x < W; x++)
      for (int c = 0; c < ch; c++) {
        unsigned v = sample(x, y, c, top);
        if (ct == 0 && bd == 16 && x == 0) v = (unsigned)y * 40; /* some below 256 */
        uint8_t *p = rows[y] + ((size_t)x * ch + c) * bps;
        if (bps == 2) p[0] = (uint8_t)(v >> 8), p[1] = (uint8_t)v;
        else p[0] = (uint8_t)v;
      }
  }
  png_write_image(png, rows);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  free(img);
  return m;
}

/* The RGB PIL makes of pixel (x, y) of make_png(ct, bd). */
static void want_rgb(int ct, int bd, int x, int y, uint8_t out[3]) {
  int ch = ct == 0 || ct == 3 ? 1 : ct == 4 ? 2 : ct == 2 ? 3 : 4;
  unsigned top = ct == 3 && bd >= 4 ? 16 : 1u << bd;
  unsigned v[4];
  for (int c = 0; c < ch; c++) v[c] = sample(x, y, c, top);
  if (ct == 0 && bd == 16 && x == 0) v[0] = (unsigned)y * 40;
  if (ct == 3) {
    out[0] = (uint8_t)(v[0] * 40), out[1] = (uint8_t)(v[0] * 90 + 7);
    out[2] = (uint8_t)(255 - v[0] * 13);
    return;
  }
  for (int c = 0; c < 3; c++) {
    unsigned s = ch >= 3 ? v[c] : v[0];
    if (bd == 16) s = ct == 0 ? (s > 255 ? 255 : s) : s >> 8;
    else if (bd < 8) s = s * 255 / ((1u << bd) - 1);
    out[c] = (uint8_t)s;
  }
}

static int decode(stk__decoder *d, const mem *m, uint32_t *w, uint32_t *h, stk__roi *roi,
                  char *why, size_t whylen) {
  int rc = stk__decoder_header(d, m->p, m->n, w, h, why, whylen);
  if (rc) return rc;
  return stk__decoder_roi(d, 1, 1, 4, 4, 3, 3, 0, 8, 1, roi, why, whylen);
}

static void test_variants(stk__decoder *d) {
  static const int kinds[][2] = {{0, 1},  {0, 2},  {0, 4}, {0, 8},  {0, 16},
                                 {4, 8},  {4, 16}, {2, 8}, {2, 16}, {6, 8},
                                 {6, 16}, {3, 1},  {3, 2}, {3, 4},  {3, 8}};
  int n = 0;
  for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
    for (int il = 0; il < 2; il++) {
      int ct = kinds[k][0], bd = kinds[k][1];
      mem m = make_png(ct, bd, il);
      CHECK(m.p != NULL);
      if (!m.p) continue;
      uint32_t w = 0, h = 0;
      stk__roi roi;
      char why[256] = "";
      int rc = decode(d, &m, &w, &h, &roi, why, sizeof(why));
      if (rc) fprintf(stderr, "type %d depth %d interlace %d: %s\n", ct, bd, il, why);
      CHECK(rc == STK_OK && w == W && h == H);
      if (rc == STK_OK) {
        /* the whole image comes back, at full size, from the origin */
        CHECK(roi.w == W && roi.h == H && roi.x0 == 0 && roi.y0 == 0 && roi.sx == 1);
        int bad = 0;
        for (int y = 0; y < H; y++)
          for (int x = 0; x < W; x++) {
            uint8_t e[3];
            want_rgb(ct, bd, x, y, e);
            bad += memcmp(roi.px + ((size_t)y * W + x) * 3, e, 3) != 0;
          }
        if (bad)
          fprintf(stderr, "type %d depth %d interlace %d: %d pixels differ\n", ct, bd, il,
                  bad);
        CHECK(bad == 0);
        n++;
      }
      free(m.p);
    }
  printf("%d PNG kinds decoded as PIL converts them\n", n);
}

static void test_damaged(stk__decoder *d) {
  mem m = make_png(2, 8, 0);
  uint32_t w, h;
  stk__roi roi;
  char why[256];
  /* a bad IDAT checksum */
  uint8_t *bad = malloc(m.n);
  memcpy(bad, m.p, m.n);
  uint8_t *idat = NULL;
  for (size_t k = 0; k + 4 <= m.n && !idat; k++)
    if (!memcmp(bad + k, "IDAT", 4)) idat = bad + k;
  CHECK(idat != NULL);
  if (idat) idat[6] ^= 0x55;
  mem b = {bad, m.n, m.n};
  int rc = decode(d, &b, &w, &h, &roi, why, sizeof(why));
  printf("bad checksum: %d %s\n", rc, why);
  CHECK(rc == STK_CORRUPT && why[0]);
  /* cut short, at several places */
  for (size_t cut = 10; cut < m.n; cut += m.n / 7) {
    mem c = {m.p, cut, cut};
    rc = decode(d, &c, &w, &h, &roi, why, sizeof(why));
    CHECK(rc == STK_CORRUPT && why[0]);
  }
  /* a bad IHDR: depth 3 */
  memcpy(bad, m.p, m.n);
  bad[24] = 3;
  rc = decode(d, &b, &w, &h, &roi, why, sizeof(why));
  printf("bad IHDR: %d %s\n", rc, why);
  CHECK(rc == STK_CORRUPT && strstr(why, "IHDR"));
  /* garbage after the signature */
  memcpy(bad, m.p, m.n);
  memset(bad + 8, 0x42, m.n - 8);
  rc = decode(d, &b, &w, &h, &roi, why, sizeof(why));
  CHECK(rc == STK_CORRUPT);
  free(bad);
  /* the decoder is still good */
  rc = decode(d, &m, &w, &h, &roi, why, sizeof(why));
  CHECK(rc == STK_OK);
  free(m.p);
  /* over the pixel limit: refused at the header */
  stk_limits lim;
  memset(&lim, 0, sizeof(lim));
  lim.max_file_bytes = 1 << 20;
  lim.max_pixels = 50;
  lim.max_dimension = 1000;
  lim.max_decoder_bytes = 1 << 20;
  stk__decoder *small;
  CHECK(stk__decoder_create(&small, &lim) == STK_OK);
  m = make_png(0, 8, 0);
  rc = stk__decoder_header(small, m.p, m.n, &w, &h, why, sizeof(why));
  printf("over max_pixels: %d %s\n", rc, why);
  CHECK(rc == STK_LIMIT && strstr(why, "pixel limits"));
  lim.max_pixels = 1000;
  lim.max_file_bytes = 20;
  stk__decoder_destroy(small);
  CHECK(stk__decoder_create(&small, &lim) == STK_OK);
  rc = stk__decoder_header(small, m.p, m.n, &w, &h, why, sizeof(why));
  CHECK(rc == STK_LIMIT && strstr(why, "file over"));
  stk__decoder_destroy(small);
  free(m.p);
}

static char root[4096];

static void put(const char *rel, const void *data, size_t n) {
  char p[8192];
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
    *s = 0;
    mkdir(p, 0755);
    *s = '/';
  }
  CHECK(tu_write(p, data, n) == 0);
}

static void test_walk(void) {
  CHECK(tu_tmpdir(root, sizeof(root), "png") == 0);
  mem m = make_png(2, 8, 1);
  const char *samples[] = {
      /* in make_dataset's order: by folder path, then name */
      "ds/Zebra/a.png",      "ds/Zebra/b.JPG",    "ds/cat/c0.png",
      "ds/cat/sub x/c1.png", "ds/cat/sub/c3.PNG", "ds/cat/sub/deeper/c2.jpeg",
      "ds/dog/d.png",
  };
  const int labels[] = {0, 0, 1, 1, 1, 1, 2};
  for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++)
    put(samples[i], m.p, m.n);
  put("ds/cat/notes.txt", "x", 1);
  put("ds/cat/sub/pic.bmp", "BM", 2);
  put("ds/README", "x", 1);
  char p[8192], deep[8192];
  snprintf(p, sizeof(p), "%s/ds/empty", root); /* a class without samples */
  mkdir(p, 0755);
  snprintf(p, sizeof(p), "%s/ds/cat/sub/loop", root); /* a link back up: not followed */
  CHECK(symlink("..", p) == 0);
  /* a folder 40 levels deep: walked to 32 */
  size_t at = (size_t)snprintf(deep, sizeof(deep), "ds/dog");
  for (int i = 0; i < 40; i++) at += (size_t)snprintf(deep + at, sizeof(deep) - at, "/d");
  snprintf(deep + at, sizeof(deep) - at, "/far.png");
  put(deep, m.p, m.n);

  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_IMAGEFOLDER, "ds", STK_PIPELINE_EVAL, STK_DTYPE_UINT8,
          STK_LAYOUT_NHWC, 1, 8);
  s.resize = 8;
  stk_dataset *ds = NULL;
  char err[512];
  int rc = stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err));
  if (rc) fprintf(stderr, "open: %s\n", err);
  CHECK(rc == STK_OK);
  if (rc) return;
  CHECK_EQ_U64(stk_dataset_size(ds), 7);
  CHECK_EQ_U64(stk_dataset_num_classes(ds), 4);
  const char *cls[] = {"Zebra", "cat", "dog", "empty"};
  for (uint32_t i = 0; i < 4; i++)
    CHECK(stk_dataset_class_name(ds, i) &&
          !strcmp(stk_dataset_class_name(ds, i), cls[i]));
  CHECK(stk_dataset_class_name(ds, 4) == NULL);
  /* skipped: the .txt, the .bmp, README, the link, the folder past depth 32 */
  printf("skipped %llu:\n", (unsigned long long)stk_dataset_skipped_files(ds));
  for (uint32_t i = 0; stk_dataset_skipped_file(ds, i); i++)
    printf("  %s\n", stk_dataset_skipped_file(ds, i));
  CHECK_EQ_U64(stk_dataset_skipped_files(ds), 5);
  CHECK(stk_dataset_skipped_file(ds, 0) &&
        !strncmp(stk_dataset_skipped_file(ds, 0), "README: ", 8));
  CHECK(stk_dataset_skipped_file(ds, 5) == NULL);
  /* labels in sample order: build every sample with its index */
  stk_builder *b = NULL;
  s.num_samples = 7;
  CHECK(stk_builder_create(ds, &s, &b, err, sizeof(err)) == STK_OK);
  stk_batch_layout L;
  CHECK(stk_batch_layout_of(&s, &L) == STK_OK);
  uint8_t *buf = malloc(L.total_bytes);
  for (uint64_t i = 0; b && i < 7; i++) {
    stk_build_info info;
    memset(&info, 0, sizeof(info));
    /* epoch order is a permutation: find the step holding sample i */
    for (uint64_t step = 0; step < 7; step++) {
      CHECK(stk_builder_build(b, 0, 0, step, buf, L.total_bytes, &info) == STK_OK);
      int64_t idx = -1, lab = -1;
      for (uint32_t t = 0; t < L.ntensors; t++) {
        if (!strcmp(L.tensors[t].name, "index"))
          memcpy(&idx, buf + L.tensors[t].offset, 8);
        if (!strcmp(L.tensors[t].name, "label"))
          memcpy(&lab, buf + L.tensors[t].offset, 8);
      }
      if (idx == (int64_t)i) {
        CHECK(lab == labels[i]);
        CHECK(info.substituted == 0);
        break;
      }
    }
  }
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  /* num_classes: 0 or the count; anything else is refused, saying both */
  s.num_samples = 0;
  s.num_classes = 4;
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_OK);
  stk_dataset_close(ds);
  s.num_classes = 1000;
  rc = stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err));
  printf("num_classes 1000: %d %s\n", rc, err);
  CHECK(rc == STK_INVALID_ARGUMENT && strstr(err, "num_classes = 1000") &&
        strstr(err, "4 class folders"));
  free(m.p);
  tu_rmtree(root);
}

/* The job text: an imagefolder job's num_classes defaults to 0 (the class
 * count), in either order of the keys; other sources keep 1000. */
static void test_job_default(void) {
  stk_job_spec s;
  char err[256];
  stk_job_spec_defaults(&s);
  CHECK(stk_job_spec_parse(&s, "num_classes = 1000\nsource = imagefolder\ndataset = d\n",
                           err, sizeof(err)) == STK_OK);
  CHECK(s.num_classes == 1000);
  stk_job_spec_defaults(&s);
  CHECK(stk_job_spec_parse(&s, "source = imagefolder\ndataset = d\n", err, sizeof(err)) ==
        STK_OK);
  CHECK(s.num_classes == 0);
  s.pipeline = STK_PIPELINE_EVAL;
  CHECK(stk_job_spec_validate(&s, err, sizeof(err)) == STK_OK);
  CHECK(stk_job_spec_set(&s, "source", "tar", err, sizeof(err)) == STK_OK);
  CHECK(s.num_classes == 1000);
  s.num_classes = 0;
  CHECK(stk_job_spec_validate(&s, err, sizeof(err)) == STK_INVALID_ARGUMENT);
}

/* A flat ImageFolder of JPEGs (tools/'s generator: 40 samples, 4
 * classes) has the fingerprint the flat-only walk gave it, so workers of
 * both versions agree and existing jobs keep their sample order. */
static void test_flat_fingerprint(void) {
  CHECK(tu_tmpdir(root, sizeof(root), "pngflat") == 0);
  char err[512];
  stk__gen_opts o = {root, 40, 7, 4, 1, 0, 16, 32, 64};
  CHECK(stk__gen_dataset(&o, err, sizeof(err)) == 0);
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_IMAGEFOLDER, "imagefolder", STK_PIPELINE_EVAL, STK_DTYPE_UINT8,
          STK_LAYOUT_NHWC, 4, 16);
  stk_dataset *ds = NULL;
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_OK);
  CHECK_EQ_U64(stk_dataset_size(ds), 40);
  CHECK_EQ_U64(stk_dataset_fingerprint(ds), 0x7599949bd5699eb6ull);
  CHECK_EQ_U64(stk_dataset_skipped_files(ds), 0);
  stk_dataset_close(ds);
  tu_rmtree(root);
}

int main(void) {
  stk_limits lim;
  memset(&lim, 0, sizeof(lim));
  lim.max_file_bytes = 1 << 20;
  lim.max_pixels = 1 << 20;
  lim.max_dimension = 4096;
  lim.max_scans = 100;
  lim.max_decoder_bytes = 64 << 20;
  stk__decoder *d;
  CHECK(stk__decoder_create(&d, &lim) == STK_OK);
  test_variants(d);
  test_damaged(d);
  stk__decoder_destroy(d);
  test_walk();
  test_flat_fingerprint();
  test_job_default();
  CHECK_DONE();
}
