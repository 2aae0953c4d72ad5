/* test_aug_prepare.c - `stoker-dataset prepare` (tools/prepare.c): the
 * restart-interval rule, and a generated ImageFolder (baseline,
 * progressive, grayscale, CMYK files) transcoded into one whose JPEGs all
 * carry restart markers, decode to the same pixels as the originals, and
 * are kept as they are by a second run. Region decodes of the prepared
 * files (cut at restart markers) and of the originals (cropped decode)
 * give the same bytes as a full decode at the same scale, on random boxes,
 * for the exact and the fast decode; and the train and eval pipelines and
 * a chain build the same batches from both datasets, as the train
 * pipeline does from tar shards and their prepared copy. An awkward set
 * written here (MCUs per row prime, with few divisors or one; 4:2:0, 4:2:2,
 * 4:4:4, 4:4:0, 4:1:1, progressive, grayscale and CMYK files; originals
 * with restart markers of their own) and its copies prepared with
 * intervals of at most 8, 4 and 1 MCUs build byte-identical batches (every
 * tensor, no sample substituted) through train, eval and a chain with
 * rand_augment and normalize, uint8 and float32, and give the region
 * decodes of a full decode; STOKER_TEST_SCALE=N builds N times as many
 * batches (half as many under ASan). Prepared files with damaged bytes decode or fail
 * cleanly (run it under ASan). A tar shard with an 80 MiB member is
 * prepared (and kept by a second run) with the member streamed: the
 * process's peak RSS grows by far less than the member, and the copy is
 * exact. A link planted where the .stoker-prepared marker goes is
 * replaced by the marker, its target left as it was.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "check.h"
#include "files.h"
#include "decode.h"
#include "gen.h"
#include "prepare.h"
#include "util.h"

static stk_limits lims(void) {
  stk_limits l;
  memset(&l, 0, sizeof(l));
  l.max_file_bytes = 64 << 20, l.max_pixels = 100000000, l.max_dimension = 32768;
  l.max_scans = 500, l.max_decoder_bytes = 512 << 20;
  return l;
}

/* The restart interval a file declares (DRI), 0 without one. */
static unsigned dri(const uint8_t *p, size_t n) {
  for (size_t i = 2; i + 4 <= n && p[i] == 0xFF;) {
    unsigned m = p[i + 1], len = (unsigned)p[i + 2] << 8 | p[i + 3];
    if (m == 0xDD && i + 6 <= n) return (unsigned)p[i + 4] << 8 | p[i + 5];
    if (m == 0xDA) return 0;
    i += 2 + len;
  }
  return 0;
}

static void test_interval(void) {
  CHECK(stk__prepare_interval(32, 8) == 8);
  CHECK(stk__prepare_interval(30, 8) == 6);
  CHECK(stk__prepare_interval(35, 8) == 7);
  CHECK(stk__prepare_interval(31, 8) == 1); /* prime: every MCU */
  CHECK(stk__prepare_interval(5, 8) == 5);  /* shorter than 8: a row */
  CHECK(stk__prepare_interval(31, 1) == 1);
  CHECK(stk__prepare_interval(30, 4) == 3);
  CHECK(stk__prepare_interval(35, 4) == 1); /* 5 x 7: every MCU */
  CHECK(stk__prepare_interval(35, 8) == 7);
}

static char src[512], dst[512], base[256];

static void test_prepare_dir(void) {
  CHECK(tu_tmpdir(base, sizeof(base), "prep") == 0);
  stk__gen_opts o = {0};
  char out[300];
  snprintf(out, sizeof(out), "%s/gen", base);
  o.out = out, o.count = 48, o.seed = 3, o.classes = 4, o.imagefolder = 1, o.tar = 1;
  o.per_shard = 20;
  o.min_side = 40, o.max_side = 420;
  char err[256];
  CHECK(stk__gen_dataset(&o, err, sizeof(err)) == 0);
  snprintf(src, sizeof(src), "%s/imagefolder", out);
  snprintf(dst, sizeof(dst), "%s/prepared", base);
  CHECK(stk__prepare_dir(src, dst, 8, 2) == 0);
  stk_limits l = lims();
  stk__decoder *d;
  CHECK(stk__decoder_create(&d, &l) == STK_OK);
  int checked = 0;
  for (int c = 0; c < 4; c++)
    for (int i = 0; i < 48; i++) {
      char a[700], b[700];
      snprintf(a, sizeof(a), "%s/class%03d/img%08d.jpg", src, c, i);
      snprintf(b, sizeof(b), "%s/class%03d/img%08d.jpg", dst, c, i);
      size_t na, nb;
      uint8_t *pa = (uint8_t *)files_slurp(a, &na);
      if (!pa) continue;
      uint8_t *pb = (uint8_t *)files_slurp(b, &nb);
      CHECK(pb != NULL);
      if (!pb) {
        free(pa);
        continue;
      }
      CHECK(dri(pb, nb) > 0);
      uint32_t w, h, w2, h2;
      stk__roi ra, rb;
      CHECK(stk__decoder_header(d, pa, na, &w, &h, NULL, 0) == STK_OK);
      CHECK(stk__decoder_full(d, &ra, NULL, 0) == STK_OK);
      size_t bytes = (size_t)ra.w * ra.h * 3;
      uint8_t *copy = malloc(bytes);
      memcpy(copy, ra.px, bytes);
      CHECK(stk__decoder_header(d, pb, nb, &w2, &h2, NULL, 0) == STK_OK);
      CHECK(w == w2 && h == h2);
      CHECK(stk__decoder_full(d, &rb, NULL, 0) == STK_OK);
      CHECK(rb.w == ra.w && rb.h == ra.h && memcmp(rb.px, copy, bytes) == 0);
      free(copy), free(pa), free(pb);
      checked++;
    }
  CHECK(checked == 48);
  stk__decoder_destroy(d);
  /* a second run keeps every output */
  struct stat st0, st1;
  char one[700];
  snprintf(one, sizeof(one), "%s/class000/img%08d.jpg", dst, 0);
  CHECK(stat(one, &st0) == 0);
  CHECK(stk__prepare_dir(src, dst, 8, 1) == 0);
  CHECK(stat(one, &st1) == 0);
  CHECK(st0.st_ino == st1.st_ino);
  snprintf(one, sizeof(one), "%s/.stoker-prepared", dst);
  CHECK(stat(one, &st0) == 0);
}

/* A copy of a region decode. */
typedef struct reg {
  stk__roi r;
  uint8_t *px;
} reg;

static int region(stk__decoder *d, const uint8_t *data, size_t len, double bx0,
                  double by0, double bx1, double by1, uint32_t ow, uint32_t oh, int smax,
                  int fast, reg *out) {
  uint32_t w, h;
  char why[200];
  if (stk__decoder_header(d, data, len, &w, &h, why, sizeof(why)) != STK_OK) {
    fprintf(stderr, "header: %s\n", why);
    return -1;
  }
  if (bx1 < 0) bx0 = by0 = 0, bx1 = w, by1 = h;
  if (stk__decoder_roi(d, bx0, by0, bx1, by1, ow, oh, 0, smax, fast, &out->r, why,
                       sizeof(why))) {
    fprintf(stderr, "region %.0f,%.0f-%.0f,%.0f of %ux%u: %s\n", bx0, by0, bx1, by1, w, h,
            why);
    return -1;
  }
  size_t n = (size_t)out->r.w * out->r.h * 3;
  out->px = malloc(n);
  memcpy(out->px, out->r.px, n);
  return 0;
}

static uint64_t rng_next(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* Random boxes through the region decode of an original (pa) and its
 * prepared copy (pb), against a full decode at the same scale: counts
 * the boxes and those that differ. */
static void roi_file(stk__decoder *d, const char *name, const uint8_t *pa, size_t na,
                     const uint8_t *pb, size_t nb, int tries, uint64_t *seed, int *boxes,
                     int *bad) {
  uint32_t W, H;
  stk__roi whole;
  CHECK(stk__decoder_header(d, pa, na, &W, &H, NULL, 0) == STK_OK);
  CHECK(stk__decoder_full(d, &whole, NULL, 0) == STK_OK);
  for (int t = 0; t < tries; t++) {
    int fast = t & 1;
    double bw = 1 + (double)(rng_next(seed) % W), bh = 1 + (double)(rng_next(seed) % H);
    double bx0 = (double)(rng_next(seed) % (uint32_t)(W - bw + 1));
    double by0 = (double)(rng_next(seed) % (uint32_t)(H - bh + 1));
    uint32_t ow = 1 + (uint32_t)(rng_next(seed) % 256), oh = ow;
    reg ra, rb, rf;
    if (region(d, pa, na, bx0, by0, bx0 + bw, by0 + bh, ow, oh, 8, fast, &ra)) {
      CHECK(0);
      continue;
    }
    if (region(d, pb, nb, bx0, by0, bx0 + bw, by0 + bh, ow, oh, 8, fast, &rb)) {
      CHECK(0);
      free(ra.px);
      continue;
    }
    /* the whole image at the same scale */
    CHECK(region(d, pa, na, 0, 0, -1, 0, 1u << 20, 1u << 20, ra.r.scale_num, fast, &rf) ==
          0);
    CHECK(rf.r.scale_num == ra.r.scale_num && rb.r.scale_num == ra.r.scale_num);
    CHECK(ra.r.w == rb.r.w && ra.r.h == rb.r.h && ra.r.x0 == rb.r.x0 &&
          ra.r.y0 == rb.r.y0);
    int same_a = 1, same_b = 1;
    for (uint32_t y = 0; y < ra.r.h; y++) {
      const uint8_t *f = rf.px + (((size_t)ra.r.y0 + y) * rf.r.w + (size_t)ra.r.x0) * 3;
      same_a &= !memcmp(ra.px + (size_t)y * ra.r.w * 3, f, (size_t)ra.r.w * 3);
      same_b &= !memcmp(rb.px + (size_t)y * rb.r.w * 3, f, (size_t)rb.r.w * 3);
    }
    if ((!same_a || !same_b) && (*bad)++ < 5)
      fprintf(stderr,
              "%s: box %.0f,%.0f %.0fx%.0f out %u fast %d scale %d: cropped %s, cut %s\n",
              name, bx0, by0, bw, bh, ow, fast, ra.r.scale_num, same_a ? "ok" : "DIFFERS",
              same_b ? "ok" : "DIFFERS");
    (*boxes)++;
    free(ra.px), free(rb.px), free(rf.px);
  }
}

static void test_roi_exact(void) {
  stk_limits l = lims();
  stk__decoder *d;
  CHECK(stk__decoder_create(&d, &l) == STK_OK);
  uint64_t seed = 7;
  int boxes = 0, bad = 0;
  for (int c = 0; c < 4; c++)
    for (int i = 0; i < 48; i++) {
      char a[700], b[700];
      snprintf(a, sizeof(a), "%s/class%03d/img%08d.jpg", src, c, i);
      snprintf(b, sizeof(b), "%s/class%03d/img%08d.jpg", dst, c, i);
      size_t na, nb;
      uint8_t *pa = (uint8_t *)files_slurp(a, &na), *pb;
      if (!pa) continue;
      pb = (uint8_t *)files_slurp(b, &nb);
      CHECK(pb != NULL);
      if (pb) roi_file(d, a, pa, na, pb, nb, 40, &seed, &boxes, &bad);
      free(pa), free(pb);
    }
  printf("region decodes: %d boxes, %d differ from the full decode\n", boxes, bad);
  CHECK(boxes > 0 && bad == 0);
  stk__decoder_destroy(d);
}

/* Batches (epoch, steps 0..steps-1) of dataset `ds` under base with
 * pipeline `named` or `chain`: the image tensors, concatenated. */
static uint8_t *batches(const char *ds_name, int named, const char *chain,
                        uint64_t epochs, size_t *len) {
  stk_job_spec s;
  int tar = strstr(ds_name, "shards") != NULL;
  tu_spec(&s, tar ? STK_SOURCE_TAR : STK_SOURCE_IMAGEFOLDER, ds_name, named,
          STK_DTYPE_UINT8, STK_LAYOUT_NHWC, 8, 64);
  if (tar) s.num_classes = 4;
  s.epochs = (uint32_t)epochs;
  char err[512];
  if (chain) s.resize = 256; /* the default: a chain gives its own sizes */
  if (chain) CHECK(stk_job_spec_set(&s, "pipeline", chain, err, sizeof(err)) == STK_OK);
  stk_dataset *ds;
  stk_builder *b;
  if (stk_dataset_open(&s, base, NULL, &ds, err, sizeof(err))) {
    fprintf(stderr, "open: %s\n", err);
    return NULL;
  }
  CHECK(stk_builder_create(ds, &s, &b, err, sizeof(err)) == STK_OK);
  stk_batch_layout L;
  stk_batch_layout_of(&s, &L);
  size_t img = L.tensors[STK_TENSOR_IMAGE].nbytes;
  uint64_t steps = 48 / 8;
  uint8_t *buf = malloc(L.total_bytes), *out = malloc(img * steps * epochs);
  for (uint64_t e = 0; e < epochs; e++)
    for (uint64_t st = 0; st < steps; st++) {
      stk_build_info info;
      int rc = stk_builder_build(b, e, 0, st, buf, L.total_bytes, &info);
      CHECK(rc == STK_OK);
      static int said;
      if (rc && !said++) fprintf(stderr, "build: %s\n", stk_builder_error(b));
      memcpy(out + img * (e * steps + st), buf + L.tensors[STK_TENSOR_IMAGE].offset, img);
    }
  *len = img * steps * epochs;
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  return out;
}

static void test_batches(void) {
  static const struct {
    int named;
    const char *chain;
    uint64_t epochs;
  } jobs[] = {
      {STK_PIPELINE_TRAIN, NULL, 50},
      {STK_PIPELINE_EVAL, NULL, 10},
      {STK_PIPELINE_CHAIN,
       "decode | random_resized_crop(64, 56, scale=0.1:1) | hflip(0.5) | center_crop(48)",
       50},
  };
  for (size_t j = 0; j < sizeof(jobs) / sizeof(jobs[0]); j++) {
    size_t la = 0, lb = 0;
    uint8_t *a =
        batches("gen/imagefolder", jobs[j].named, jobs[j].chain, jobs[j].epochs, &la);
    uint8_t *b = batches("prepared", jobs[j].named, jobs[j].chain, jobs[j].epochs, &lb);
    CHECK(a && b && la == lb && la > 0 && memcmp(a, b, la) == 0);
    printf("pipeline %d: %llu batches of 8 identical from both datasets\n", jobs[j].named,
           (unsigned long long)(jobs[j].epochs * 6));
    free(a), free(b);
  }
  /* tar shards: prepared member by member */
  char sh[600], psh[600];
  snprintf(sh, sizeof(sh), "%s/gen/shards", base);
  snprintf(psh, sizeof(psh), "%s/prepared_shards", base);
  CHECK(stk__prepare_dir(sh, psh, 8, 2) == 0);
  CHECK(stk__prepare_dir(sh, psh, 8, 2) == 0); /* kept */
  size_t la = 0, lb = 0;
  uint8_t *a = batches("gen/shards", STK_PIPELINE_TRAIN, NULL, 20, &la);
  uint8_t *b = batches("prepared_shards", STK_PIPELINE_TRAIN, NULL, 20, &lb);
  CHECK(a && b && la == lb && la > 0 && memcmp(a, b, la) == 0);
  printf("tar shards, train: 120 batches of 8 identical from both datasets\n");
  free(a), free(b);
}

/* ---- byte identity on awkward files --------------------------------- */

/* How many times the identity test's batch counts are multiplied:
 * STOKER_TEST_SCALE (1..100), default 1 (about 20 s in release on a
 * 2-core VM). */
static unsigned test_scale(void) {
  const char *e = getenv("STOKER_TEST_SCALE");
  long v = e ? strtol(e, NULL, 10) : 1;
  return v < 1 ? 1 : v > 100 ? 100 : (unsigned)v;
}

/* Under ASan the batches run about 10x slower: half of them (still every
 * pipeline and copy) keep the test inside its limit on a loaded host. */
#if defined(__SANITIZE_ADDRESS__)
#define SAN_DIV 2
#else
#define SAN_DIV 1
#endif

/* Encode rgb (w x h) with libjpeg: `comps` 1 (gray) or 3 (YCbCr with luma
 * sampling hs x vs), progressive or not, a restart interval of rst MCUs
 * in the original (0: none). 0 or -1. */
static int encode(const uint8_t *rgb, uint32_t w, uint32_t h, int comps, int hs, int vs,
                  int progressive, unsigned rst, int quality, uint8_t **out,
                  size_t *len) {
  struct jpeg_compress_struct ci;
  struct jpeg_error_mgr je;
  unsigned char *mem = NULL;
  unsigned long mlen = 0;
  uint8_t *row = malloc((size_t)w * 3);
  if (!row) return -1;
  ci.err = jpeg_std_error(&je); /* errors exit: the test fails */
  jpeg_create_compress(&ci);
  jpeg_mem_dest(&ci, &mem, &mlen);
  ci.image_width = w, ci.image_height = h;
  ci.input_components = comps;
  ci.in_color_space = comps == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&ci);
  jpeg_set_quality(&ci, quality, TRUE);
  if (comps == 3) {
    ci.comp_info[0].h_samp_factor = hs, ci.comp_info[0].v_samp_factor = vs;
    for (int c = 1; c < 3; c++)
      ci.comp_info[c].h_samp_factor = ci.comp_info[c].v_samp_factor = 1;
  }
  if (progressive) jpeg_simple_progression(&ci);
  ci.restart_interval = rst;
  jpeg_start_compress(&ci, TRUE);
  while (ci.next_scanline < h) {
    const uint8_t *s = rgb + (size_t)ci.next_scanline * w * 3;
    for (uint32_t x = 0; x < w; x++)
      if (comps == 1)
        row[x] =
            (uint8_t)((299 * s[3 * x] + 587 * s[3 * x + 1] + 114 * s[3 * x + 2]) / 1000);
      else memcpy(row + 3 * x, s + 3 * x, 3);
    JSAMPROW r = row;
    jpeg_write_scanlines(&ci, &r, 1);
  }
  jpeg_finish_compress(&ci);
  jpeg_destroy_compress(&ci);
  free(row);
  *out = mem, *len = mlen;
  return 0;
}

/* The awkward set: MCUs per row prime (a restart interval of one MCU),
 * with few divisors or one MCU; every chroma sampling libjpeg writes;
 * progressive, grayscale and CMYK files; originals that already have
 * restart markers (an interval that divides the row and one that does
 * not). comps 4 = CMYK (through gen.c's encoder). */
static const struct awk {
  uint32_t w, h;
  int comps, hs, vs, progressive;
  unsigned rst;
} awkward[] = {
    {500, 375, 3, 2, 2, 0, 0}, /* 32 MCUs per row */
    {375, 500, 3, 2, 2, 0, 0}, /* 24 */
    {208, 150, 3, 2, 2, 0, 0}, /* 13: prime */
    {449, 611, 3, 2, 2, 0, 0}, /* 29: prime */
    {593, 333, 3, 2, 2, 0, 0}, /* 38 = 2 x 19 */
    {143, 401, 3, 2, 2, 0, 0}, /* 9 = 3 x 3 */
    {800, 201, 3, 2, 2, 0, 0}, /* 50 = 2 x 5 x 5 */
    {17, 9, 3, 2, 2, 0, 0},    /* 2, one MCU row */
    {16, 16, 3, 2, 2, 0, 0},   /* 1 */
    {7, 300, 3, 2, 2, 0, 0},   /* 1, a column */
    {357, 263, 3, 2, 2, 1, 0}, /* progressive, 23 */
    {481, 300, 3, 2, 2, 0, 3}, /* markers every 3 of 31 MCUs */
    {512, 384, 3, 2, 2, 0, 4}, /* markers every 4 of 32 */
    {330, 247, 3, 2, 1, 0, 0}, /* 4:2:2, 21 = 3 x 7 */
    {240, 161, 3, 2, 1, 1, 0}, /* 4:2:2 progressive, 15 */
    {301, 199, 3, 1, 1, 0, 0}, /* 4:4:4, 38 */
    {97, 413, 3, 1, 1, 0, 0},  /* 4:4:4, 13 */
    {222, 180, 3, 1, 2, 0, 0}, /* 4:4:0, 28 */
    {300, 200, 3, 4, 1, 0, 0}, /* 4:1:1, 10 */
    {375, 500, 1, 1, 1, 0, 0}, /* gray, 47: prime */
    {120, 88, 1, 1, 1, 0, 0},  /* gray, 15 */
    {200, 150, 1, 1, 1, 1, 0}, /* gray progressive, 25 */
    {260, 190, 4, 2, 2, 0, 0}, /* CMYK (YCCK), 17 */
    {333, 444, 3, 2, 2, 1, 0}, /* progressive, 21 */
};
#define NAWK (sizeof(awkward) / sizeof(awkward[0]))

static char awk_src[300];

/* Write the awkward set under base/awk (two classes) and prepare it with
 * restart intervals of at most 8, 4 and 1 MCUs. */
static void make_awkward(void) {
  snprintf(awk_src, sizeof(awk_src), "%s/awk", base);
  for (int c = 0; c < 2; c++) {
    char d[1024];
    snprintf(d, sizeof(d), "%s/class%03d", awk_src, c);
    CHECK(mkdir(awk_src, 0755) == 0 || c == 1);
    CHECK(mkdir(d, 0755) == 0);
  }
  for (size_t i = 0; i < NAWK; i++) {
    const struct awk *a = &awkward[i];
    uint8_t *rgb = malloc((size_t)a->w * a->h * 3), *jpg = NULL;
    size_t len = 0;
    stk__gen_image(rgb, a->w, a->h, (uint32_t)i % 4, 100 + i);
    int q = 75 + (int)(i * 7 % 21);
    if (a->comps == 4)
      CHECK(stk__encode_jpeg(rgb, a->w, a->h, STK__GEN_CMYK, q, 0, &jpg, &len) == 0);
    else
      CHECK(encode(rgb, a->w, a->h, a->comps, a->hs, a->vs, a->progressive, a->rst, q,
                   &jpg, &len) == 0);
    char p[1024];
    snprintf(p, sizeof(p), "%s/class%03d/a%02zu.jpg", awk_src, (int)(i % 2), i);
    CHECK(jpg && tu_write(p, jpg, len) == 0);
    free(rgb), free(jpg);
  }
  static const unsigned ns[] = {8, 4, 1};
  for (size_t k = 0; k < 3; k++) {
    char d[1024];
    snprintf(d, sizeof(d), "%s/awk%u", base, ns[k]);
    CHECK(stk__prepare_dir(awk_src, d, ns[k], 2) == 0);
    /* every output has markers at the rule's interval for its MCUs per
     * row, whatever the original had */
    for (size_t i = 0; i < NAWK; i++) {
      const struct awk *a = &awkward[i];
      char pb[1100];
      snprintf(pb, sizeof(pb), "%s/class%03d/a%02zu.jpg", d, (int)(i % 2), i);
      size_t nb = 0;
      uint8_t *b = (uint8_t *)files_slurp(pb, &nb);
      unsigned mw = a->comps == 1 ? 8 : 8 * (unsigned)a->hs;
      unsigned want = stk__prepare_interval((a->w + mw - 1) / mw, ns[k]);
      CHECK(b != NULL);
      if (b && dri(b, nb) != want)
        fprintf(stderr, "%s: restart interval %u, not %u\n", pb, dri(b, nb), want);
      CHECK(b && dri(b, nb) == want);
      free(b);
    }
  }
}

/* One job over the original dataset `orig` and each of the `n` copies
 * (names under base): `nb` batches (epochs in turn, rank 0, batch 8)
 * built from all of them in lockstep, every tensor compared byte for
 * byte, no sample substituted. Returns the batches compared per copy. */
static uint64_t same_batches(const char *orig, const char *const *copies, size_t n,
                             int named, const char *chain, int dtype, int layout,
                             uint32_t size, uint64_t nb) {
  enum { MAXC = 4 };
  stk_job_spec s[MAXC + 1];
  stk_dataset *ds[MAXC + 1] = {0};
  stk_builder *b[MAXC + 1] = {0};
  uint8_t *buf[MAXC + 1] = {0};
  char err[512];
  uint64_t done = 0;
  if (n > MAXC) return 0;
  for (size_t k = 0; k <= n; k++) {
    tu_spec(&s[k], STK_SOURCE_IMAGEFOLDER, k ? copies[k - 1] : orig, named, dtype, layout,
            8, size);
    s[k].epochs = 1000;
    if (chain) s[k].resize = 256; /* the default: a chain gives its own sizes */
    if (chain)
      CHECK(stk_job_spec_set(&s[k], "pipeline", chain, err, sizeof(err)) == STK_OK);
    if (stk_dataset_open(&s[k], base, NULL, &ds[k], err, sizeof(err))) {
      fprintf(stderr, "open %s: %s\n", s[k].dataset, err);
      CHECK(0);
      goto out;
    }
    CHECK(stk_builder_create(ds[k], &s[k], &b[k], err, sizeof(err)) == STK_OK);
    if (!b[k]) goto out;
  }
  stk_batch_layout L;
  CHECK(stk_batch_layout_of(&s[0], &L) == STK_OK);
  uint64_t steps = stk_dataset_size(ds[0]) / 8;
  CHECK(steps > 0);
  if (!steps) goto out;
  for (size_t k = 0; k <= n; k++) buf[k] = malloc(L.total_bytes);
  for (uint64_t i = 0; i < nb; i++) {
    uint64_t e = i / steps, st = i % steps;
    for (size_t k = 0; k <= n; k++) {
      stk_build_info info;
      int rc = stk_builder_build(b[k], e, 0, st, buf[k], L.total_bytes, &info);
      if (rc || info.substituted) {
        fprintf(stderr, "%s batch %llu/%llu: %s (%u substituted)\n", s[k].dataset,
                (unsigned long long)e, (unsigned long long)st,
                rc ? stk_builder_error(b[k]) : "ok", info.substituted);
        CHECK(0);
        goto out;
      }
    }
    for (size_t k = 1; k <= n; k++)
      for (uint32_t t = 0; t < L.ntensors; t++) {
        const stk_tensor_desc *T = &L.tensors[t];
        if (memcmp(buf[0] + T->offset, buf[k] + T->offset, T->nbytes)) {
          fprintf(stderr, "%s: batch %llu/%llu, tensor %s differs from %s's\n",
                  copies[k - 1], (unsigned long long)e, (unsigned long long)st, T->name,
                  orig);
          CHECK(0);
          goto out;
        }
      }
    done++;
  }
out:
  for (size_t k = 0; k <= n; k++) {
    free(buf[k]);
    stk_builder_destroy(b[k]);
    stk_dataset_close(ds[k]);
  }
  return done;
}

/* The awkward set and its three prepared copies through each named
 * pipeline and a chain, as uint8 and float32 in both layouts. */
static void test_identity(void) {
  make_awkward();
  static const char *const copies[] = {"awk8", "awk4", "awk1"};
  static const struct {
    const char *what;
    int named;
    const char *chain;
    int dtype, layout;
    uint32_t size, batches;
  } jobs[] = {
      {"train", STK_PIPELINE_TRAIN, NULL, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, 96, 100},
      {"train", STK_PIPELINE_TRAIN, NULL, STK_DTYPE_FLOAT32, STK_LAYOUT_NCHW, 160, 100},
      {"eval", STK_PIPELINE_EVAL, NULL, STK_DTYPE_FLOAT32, STK_LAYOUT_NCHW, 96, 100},
      {"eval", STK_PIPELINE_EVAL, NULL, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, 200, 100},
      {"chain", STK_PIPELINE_CHAIN,
       "random_resized_crop(128) | hflip(0.5) | rand_augment(2, 9) | normalize(imagenet) "
       "| "
       "to(float32, nchw)",
       STK_DTYPE_FLOAT32, STK_LAYOUT_NCHW, 128, 200},
  };
  uint64_t total = 0;
  for (size_t j = 0; j < sizeof(jobs) / sizeof(jobs[0]); j++) {
    uint64_t per = (uint64_t)jobs[j].batches * test_scale() / SAN_DIV;
    uint64_t got = same_batches("awk", copies, 3, jobs[j].named, jobs[j].chain,
                                jobs[j].dtype, jobs[j].layout, jobs[j].size, per);
    CHECK(got == per);
    printf(
        "%s %s %s %u: %llu batches of 8 identical from the original and its copies "
        "with restart intervals <= 8, 4, 1\n",
        jobs[j].what, jobs[j].dtype == STK_DTYPE_UINT8 ? "uint8" : "float32",
        jobs[j].layout == STK_LAYOUT_NHWC ? "nhwc" : "nchw", jobs[j].size,
        (unsigned long long)got);
    total += got;
  }
  printf("awkward set: %llu batches per copy, %llu compared\n", (unsigned long long)total,
         (unsigned long long)total * 3);
}

/* Region decodes of the awkward set's three copies against the originals. */
static void test_roi_awkward(void) {
  stk_limits l = lims();
  stk__decoder *d;
  CHECK(stk__decoder_create(&d, &l) == STK_OK);
  uint64_t seed = 9;
  int boxes = 0, bad = 0;
  static const unsigned ns[] = {8, 4, 1};
  for (size_t i = 0; i < NAWK; i++) {
    char a[1024];
    snprintf(a, sizeof(a), "%s/class%03d/a%02zu.jpg", awk_src, (int)(i % 2), i);
    size_t na;
    uint8_t *pa = (uint8_t *)files_slurp(a, &na);
    CHECK(pa != NULL);
    for (size_t k = 0; pa && k < 3; k++) {
      char b[1024];
      snprintf(b, sizeof(b), "%s/awk%u/class%03d/a%02zu.jpg", base, ns[k], (int)(i % 2),
               i);
      size_t nb;
      uint8_t *pb = (uint8_t *)files_slurp(b, &nb);
      CHECK(pb != NULL);
      if (pb) roi_file(d, b, pa, na, pb, nb, 30, &seed, &boxes, &bad);
      free(pb);
    }
    free(pa);
  }
  printf("awkward set, region decodes: %d boxes, %d differ from the full decode\n", boxes,
         bad);
  CHECK(boxes > 0 && bad == 0);
  stk__decoder_destroy(d);
}

/* The fingerprint of a dataset `ds_name` under base (0 on failure). */
static uint64_t fingerprint(const char *ds_name) {
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_IMAGEFOLDER, ds_name, STK_PIPELINE_TRAIN, STK_DTYPE_UINT8,
          STK_LAYOUT_NHWC, 8, 64);
  stk_dataset *ds;
  char err[512];
  if (stk_dataset_open(&s, base, NULL, &ds, err, sizeof(err))) return 0;
  uint64_t fp = stk_dataset_fingerprint(ds);
  stk_dataset_close(ds);
  return fp;
}

/* The prepared copy's .stoker-prepared record is part of its fingerprint:
 * without it (the same files) the fingerprint differs, with it back it is
 * the same again. */
static void test_fingerprint(void) {
  char mark[600], moved[600];
  snprintf(mark, sizeof(mark), "%s/prepared/.stoker-prepared", base);
  snprintf(moved, sizeof(moved), "%s/stoker-prepared.away", base);
  uint64_t with = fingerprint("prepared");
  CHECK(with != 0 && rename(mark, moved) == 0);
  uint64_t without = fingerprint("prepared");
  CHECK(rename(moved, mark) == 0);
  CHECK(without != 0 && without != with && fingerprint("prepared") == with);
  CHECK(fingerprint("gen/imagefolder") != with);
  printf("fingerprint: prepared %016llx, without its record %016llx\n",
         (unsigned long long)with, (unsigned long long)without);
}

/* Damaged prepared files (bytes changed in and after the header, the
 * file cut short) through the region decode: any result but a crash. */
static void test_damaged(void) {
  char b[700];
  snprintf(b, sizeof(b), "%s/class001/img%08d.jpg", dst, 1);
  size_t n;
  uint8_t *p = (uint8_t *)files_slurp(b, &n);
  CHECK(p != NULL);
  if (!p) return;
  stk_limits l = lims();
  stk__decoder *d;
  CHECK(stk__decoder_create(&d, &l) == STK_OK);
  uint8_t *q = malloc(n);
  uint64_t seed = 11;
  int ok = 0, failed = 0;
  for (int t = 0; t < 400; t++) {
    memcpy(q, p, n);
    size_t len = n;
    int k = 1 + (int)(rng_next(&seed) % 4);
    for (int i = 0; i < k; i++) {
      size_t at = rng_next(&seed) % n;
      q[at] = (uint8_t)(t % 3 == 0   ? 0xFF
                        : t % 3 == 1 ? 0xD0 + rng_next(&seed) % 8
                                     : rng_next(&seed));
    }
    if (t % 5 == 0) len = n - 2 - rng_next(&seed) % (n / 2);
    if (t % 5 == 0) q[len - 2] = 0xFF, q[len - 1] = 0xD9;
    uint32_t w, h;
    stk__roi r;
    if (stk__decoder_header(d, q, len, &w, &h, NULL, 0) != STK_OK) {
      failed++;
      continue;
    }
    double x0 = (double)(rng_next(&seed) % w), y0 = (double)(rng_next(&seed) % h);
    if (stk__decoder_roi(d, x0, y0, w, h, 64, 64, 0, 8, t & 1, &r, NULL, 0) == STK_OK)
      ok++;
    else failed++;
  }
  printf("damaged prepared files: %d decoded, %d refused\n", ok, failed);
  CHECK(ok + failed == 400);
  free(q), free(p);
  stk__decoder_destroy(d);
}

/* A ustar header for a regular member name of size bytes. */
static void tar_header(uint8_t h[512], const char *name, uint64_t size) {
  memset(h, 0, 512);
  snprintf((char *)h, 100, "%s", name);
  memcpy(h + 100, "0000644", 8);
  memcpy(h + 108, "0000000", 8);
  memcpy(h + 116, "0000000", 8);
  snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
  memcpy(h + 136, "00000000000", 12);
  h[156] = '0';
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);
}

static long peak_rss_kb(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

/* First, while the process is small: an 80 MiB member (zeros but for its
 * last bytes; the source shard sparse) is streamed through, not held. */
static void test_big_member(void) {
  char dir[300], in[400], outdir[400], shard[500], mark[500], victim[400];
  CHECK(tu_tmpdir(dir, sizeof(dir), "prepbig") == 0);
  snprintf(in, sizeof(in), "%s/in", dir);
  snprintf(outdir, sizeof(outdir), "%s/out", dir);
  CHECK(mkdir(in, 0755) == 0 && mkdir(outdir, 0755) == 0);
  snprintf(shard, sizeof(shard), "%s/shard-0000.tar", in);
  const uint64_t size = (80ull << 20) + 123; /* odd: padding and chunk ends */
  uint8_t h[512];
  tar_header(h, "big.bin", size);
  int fd = open(shard, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0);
  const char tail[] = "the end";
  CHECK(pwrite(fd, h, 512, 0) == 512);
  CHECK(pwrite(fd, tail, 7, (off_t)(512 + size - 7)) == 7);
  CHECK(ftruncate(fd, (off_t)(512 + (size + 511) / 512 * 512 + 1024)) == 0);
  close(fd);
  /* a link where the marker goes, to a file outside the output */
  snprintf(victim, sizeof(victim), "%s/victim", dir);
  CHECK(tu_write(victim, "keep", 4) == 0);
  snprintf(mark, sizeof(mark), "%s/.stoker-prepared", outdir);
  CHECK(symlink(victim, mark) == 0);

  long before = peak_rss_kb();
  CHECK(stk__prepare_dir(in, outdir, 8, 1) == 0);
  char out[600];
  snprintf(out, sizeof(out), "%s/shard-0000.tar", outdir);
  struct stat st0, st1;
  CHECK(stat(out, &st0) == 0);
  CHECK(stk__prepare_dir(in, outdir, 8, 1) == 0); /* kept: compared in pieces */
  CHECK(stat(out, &st1) == 0 && st0.st_ino == st1.st_ino);
  long grew = peak_rss_kb() - before;
  printf("80 MiB tar member: peak RSS grew by %ld KiB\n", grew);
  CHECK(before > 0 && grew < 32 * 1024);

  FILE *f = fopen(out, "rb");
  uint8_t oh[512];
  CHECK(f && fread(oh, 1, 512, f) == 512 && memcmp(oh, h, 512) == 0);
  static uint8_t buf[1 << 20];
  uint64_t left = size, nonzero = 0;
  while (f && left > 7) {
    size_t k = left - 7 < sizeof(buf) ? (size_t)(left - 7) : sizeof(buf);
    CHECK(fread(buf, 1, k, f) == k);
    for (size_t i = 0; i < k; i++) nonzero += buf[i] != 0;
    left -= k;
  }
  char end[8] = "";
  CHECK(f && fread(end, 1, 7, f) == 7 && memcmp(end, tail, 7) == 0);
  CHECK(nonzero == 0);
  if (f) fclose(f);
  CHECK(st0.st_size == (off_t)(512 + (size + 511) / 512 * 512 + 1024));

  struct stat ms;
  uint8_t *v = NULL;
  size_t vn = 0;
  CHECK(lstat(mark, &ms) == 0 && S_ISREG(ms.st_mode));
  CHECK((v = (uint8_t *)files_slurp(victim, &vn)) != NULL && vn == 4 &&
        memcmp(v, "keep", 4) == 0);
  free(v);
  tu_rmtree(dir);
}

int main(void) {
  test_big_member();
  test_interval();
  test_prepare_dir();
  test_roi_exact();
  test_batches();
  test_identity();
  test_roi_awkward();
  test_fingerprint();
  test_damaged();
  tu_rmtree(base);
  CHECK_DONE();
}
