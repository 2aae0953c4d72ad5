/* test_aug_prepare.c - `stoker-dataset prepare` (tools/prepare.c): the
 * restart-interval rule, and a generated ImageFolder (baseline,
 * progressive, grayscale, CMYK files) transcoded into one whose JPEGs all
 * carry restart markers, decode to the same pixels as the originals, and
 * are kept as they are by a second run. Region decodes of the prepared
 * files (cut at restart markers) and of the originals (cropped decode)
 * give the same bytes as a full decode at the same scale, on random boxes,
 * for the exact and the fast decode; and the train and eval pipelines and
 * a chain build the same batches from both datasets, as the train
 * pipeline does from tar shards and their prepared copy. Prepared files with
 * damaged bytes decode or fail cleanly (run it under ASan).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
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

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc(*len + 1);
  if (p && fread(p, 1, *len, f) != *len) free(p), p = NULL;
  fclose(f);
  return p;
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
  CHECK(stk__prepare_interval(31, 8) == 31); /* prime: a row */
  CHECK(stk__prepare_interval(5, 8) == 5);   /* shorter than 8: a row */
  CHECK(stk__prepare_interval(31, 1) == 1);
  CHECK(stk__prepare_interval(30, 4) == 3);
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
      uint8_t *pa = slurp(a, &na);
      if (!pa) continue;
      uint8_t *pb = slurp(b, &nb);
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
      uint8_t *pa = slurp(a, &na), *pb;
      if (!pa) continue;
      pb = slurp(b, &nb);
      uint32_t W, H;
      stk__roi whole;
      CHECK(stk__decoder_header(d, pa, na, &W, &H, NULL, 0) == STK_OK);
      CHECK(stk__decoder_full(d, &whole, NULL, 0) == STK_OK);
      for (int t = 0; t < 40; t++) {
        int fast = t & 1;
        double bw = 1 + (double)(rng_next(&seed) % W),
               bh = 1 + (double)(rng_next(&seed) % H);
        double bx0 = (double)(rng_next(&seed) % (uint32_t)(W - bw + 1));
        double by0 = (double)(rng_next(&seed) % (uint32_t)(H - bh + 1));
        uint32_t ow = 1 + (uint32_t)(rng_next(&seed) % 256), oh = ow;
        reg ra, rb, rf;
        CHECK(region(d, pa, na, bx0, by0, bx0 + bw, by0 + bh, ow, oh, 8, fast, &ra) == 0);
        CHECK(region(d, pb, nb, bx0, by0, bx0 + bw, by0 + bh, ow, oh, 8, fast, &rb) == 0);
        /* the whole image at the same scale */
        CHECK(region(d, pa, na, 0, 0, -1, 0, 1u << 20, 1u << 20, ra.r.scale_num, fast,
                     &rf) == 0);
        CHECK(rf.r.scale_num == ra.r.scale_num && rb.r.scale_num == ra.r.scale_num);
        CHECK(ra.r.w == rb.r.w && ra.r.h == rb.r.h && ra.r.x0 == rb.r.x0 &&
              ra.r.y0 == rb.r.y0);
        int same_a = 1, same_b = 1;
        for (uint32_t y = 0; y < ra.r.h; y++) {
          const uint8_t *f =
              rf.px + (((size_t)ra.r.y0 + y) * rf.r.w + (size_t)ra.r.x0) * 3;
          same_a &= !memcmp(ra.px + (size_t)y * ra.r.w * 3, f, (size_t)ra.r.w * 3);
          same_b &= !memcmp(rb.px + (size_t)y * rb.r.w * 3, f, (size_t)rb.r.w * 3);
        }
        if (!same_a || !same_b) {
          if (bad++ < 5)
            fprintf(
                stderr,
                "%s: box %.0f,%.0f %.0fx%.0f out %u fast %d scale %d: cropped %s, cut "
                "%s\n",
                a, bx0, by0, bw, bh, ow, fast, ra.r.scale_num, same_a ? "ok" : "DIFFERS",
                same_b ? "ok" : "DIFFERS");
        }
        boxes++;
        free(ra.px), free(rb.px), free(rf.px);
      }
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
  uint8_t *p = slurp(b, &n);
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

int main(void) {
  test_interval();
  test_prepare_dir();
  test_roi_exact();
  test_batches();
  test_fingerprint();
  test_damaged();
  tu_rmtree(base);
  CHECK_DONE();
}
