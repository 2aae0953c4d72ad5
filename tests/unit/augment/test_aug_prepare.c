/* test_aug_prepare.c - `stoker-dataset prepare` (tools/prepare.c): the
 * restart-interval rule, and a generated ImageFolder (baseline,
 * progressive, grayscale, CMYK files) transcoded into one whose JPEGs all
 * carry restart markers, decode to the same pixels as the originals, and
 * are kept as they are by a second run.
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

static char src[512], dst[512];

static void test_prepare_dir(void) {
  char base[256];
  CHECK(tu_tmpdir(base, sizeof(base), "prep") == 0);
  stk__gen_opts o = {0};
  char out[300];
  snprintf(out, sizeof(out), "%s/gen", base);
  o.out = out, o.count = 48, o.seed = 3, o.classes = 4, o.imagefolder = 1;
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
  (void)base;
}

int main(void) {
  test_interval();
  test_prepare_dir();
  char base[600];
  snprintf(base, sizeof(base), "%s", dst);
  *strrchr(base, '/') = 0;
  tu_rmtree(base);
  CHECK_DONE();
}
