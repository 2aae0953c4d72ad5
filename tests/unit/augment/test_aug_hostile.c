/* test_aug_hostile.c - a corpus of hostile files (truncated, corrupt
 * entropy data, zero bytes, not JPEG, dimension bombs, progressive scan
 * bombs, decoder-memory bombs, over the size cap, unreadable, garbage
 * after the SOI marker: 220 bad files among 60 good ones, generated here)
 * run through the ImageFolder and tar pipelines. Nothing may crash or
 * leak (the suite runs under ASan+UBSan), every build succeeds with fixed
 * shapes, every bad sample is substituted and counted, and each bad path
 * is logged exactly once.
 *
 * `test_aug_hostile --write-corpus DIR` writes one small file of each kind
 * (the fuzz seed corpus).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "badlog.h"
#include "check.h"
#include "gen.h"
#include "stoker/augment.h"
#include "util.h"

static uint64_t rs = 12345;
static uint32_t rnd(void) {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return (uint32_t)rs;
}

static uint8_t *good_jpeg(uint32_t w, uint32_t h, int color, int prog, size_t *len) {
  uint8_t *rgb = malloc((size_t)w * h * 3), *j;
  stk__gen_image(rgb, w, h, rnd() % 4, rnd());
  if (stk__encode_jpeg(rgb, w, h, color, 85, prog, &j, len)) j = NULL;
  free(rgb);
  return j;
}

/* A progressive JPEG with 3 * 63 * 4 + 1 = 757 scans (successive
 * approximation on every AC coefficient of every component). */
static void silent(j_common_ptr c, int l) { (void)c, (void)l; }
static uint8_t *scan_bomb(size_t *len) {
  enum { W = 32, H = 32, NS = 1 + 3 * 63 * 4 };
  static jpeg_scan_info scans[NS];
  int k = 0;
  scans[k++] = (jpeg_scan_info){3, {0, 1, 2, 0}, 0, 0, 0, 0};
  for (int c = 0; c < 3; c++)
    for (int s = 1; s <= 63; s++) {
      scans[k++] = (jpeg_scan_info){1, {c, 0, 0, 0}, s, s, 0, 3};
      for (int al = 2; al >= 0; al--)
        scans[k++] = (jpeg_scan_info){1, {c, 0, 0, 0}, s, s, al + 1, al};
    }
  uint8_t rgb[W * H * 3];
  stk__gen_image(rgb, W, H, 1, 1);
  struct jpeg_compress_struct ci;
  struct jpeg_error_mgr je;
  unsigned char *mem = NULL;
  unsigned long mlen = 0;
  ci.err = jpeg_std_error(&je);
  je.emit_message = silent;
  jpeg_create_compress(&ci);
  jpeg_mem_dest(&ci, &mem, &mlen);
  ci.image_width = W, ci.image_height = H, ci.input_components = 3;
  ci.in_color_space = JCS_RGB;
  jpeg_set_defaults(&ci);
  ci.scan_info = scans, ci.num_scans = k;
  jpeg_start_compress(&ci, TRUE);
  for (int y = 0; y < H; y++) {
    JSAMPROW r = rgb + y * W * 3;
    jpeg_write_scanlines(&ci, &r, 1);
  }
  jpeg_finish_compress(&ci);
  jpeg_destroy_compress(&ci);
  *len = mlen;
  return mem;
}

static size_t find_marker(const uint8_t *p, size_t len, uint8_t m) {
  for (size_t i = 2; i + 1 < len; i++)
    if (p[i] == 0xFF && p[i + 1] == m) return i;
  return 0;
}

enum {
  K_GOOD,
  K_TRUNC,
  K_CORRUPT,
  K_ZERO,
  K_NOTJPEG,
  K_DIMBOMB,
  K_SCANBOMB,
  K_MEMBOMB,
  K_OVERSIZE,
  K_UNREADABLE,
  K_GARBAGE,
  K_NKINDS
};
static const char *kind_name[] = {"good",     "trunc",      "corrupt",  "zero",
                                  "notjpeg",  "dimbomb",    "scanbomb", "membomb",
                                  "oversize", "unreadable", "garbage"};
static const int kind_count[] = {60, 30, 30, 25, 25, 25, 20, 15, 15, 15, 20};

#define MAX_FILE (120u << 10)
#define MAX_DEC  (3u << 20)

static uint8_t *membomb_bytes, *scanbomb_bytes, *oversize_bytes;
static size_t membomb_len, scanbomb_len, oversize_len;

/* The bytes of one file of a kind (malloc'd). */
static uint8_t *make(int kind, size_t *len) {
  uint8_t *p;
  switch (kind) {
    case K_GOOD:
      return good_jpeg(48 + rnd() % 200, 48 + rnd() % 200,
                       rnd() % 5 == 0   ? STK__GEN_GRAY
                       : rnd() % 7 == 0 ? STK__GEN_CMYK
                                        : STK__GEN_RGB,
                       rnd() % 3 == 0, len);
    case K_TRUNC:
      p = good_jpeg(64 + rnd() % 100, 64 + rnd() % 100, STK__GEN_RGB, rnd() % 2, len);
      *len = *len * (10 + rnd() % 85) / 100;
      return p;
    case K_CORRUPT: {
      int prog = rnd() % 2;
      p = good_jpeg(64 + rnd() % 100, 64 + rnd() % 100, STK__GEN_RGB, prog, len);
      size_t sos = find_marker(p, *len, 0xDA);
      size_t span = *len - sos - 20;
      for (int i = 0; i < 12; i++)
        p[sos + 16 + rnd() % span] ^= (uint8_t)(1 + rnd() % 255);
      /* and a burst of 0xFF bytes, which libjpeg always notices */
      memset(p + sos + 16 + span / 4 + rnd() % (span / 2), 0xFF, 8);
      return p;
    }
    case K_ZERO:
      *len = 0;
      return malloc(1);
    case K_NOTJPEG: {
      *len = 10 + rnd() % 4000;
      p = malloc(*len);
      for (size_t i = 0; i < *len; i++) p[i] = (uint8_t)rnd();
      if (rnd() % 2) memcpy(p, "\x89PNG\r\n\x1a\n", 8);
      return p;
    }
    case K_DIMBOMB: {
      p = good_jpeg(32, 32, STK__GEN_RGB, rnd() % 2, len);
      size_t sof = find_marker(p, *len, 0xC0);
      if (!sof) sof = find_marker(p, *len, 0xC2);
      uint16_t hh = (uint16_t)(rnd() % 2 ? 65500 : 40000 + rnd() % 20000), ww = 65500;
      p[sof + 5] = hh >> 8, p[sof + 6] = hh & 255;
      p[sof + 7] = ww >> 8, p[sof + 8] = ww & 255;
      return p;
    }
    case K_SCANBOMB:
      *len = scanbomb_len;
      return memcpy(malloc(*len), scanbomb_bytes, *len);
    case K_MEMBOMB:
      *len = membomb_len;
      return memcpy(malloc(*len), membomb_bytes, *len);
    case K_OVERSIZE:
      *len = oversize_len;
      return memcpy(malloc(*len), oversize_bytes, *len);
    case K_UNREADABLE:
      return good_jpeg(64, 64, STK__GEN_RGB, 0, len);
    case K_GARBAGE: {
      *len = 100 + rnd() % 3000;
      p = malloc(*len);
      for (size_t i = 0; i < *len; i++) p[i] = (uint8_t)rnd();
      p[0] = 0xFF, p[1] = 0xD8, p[2] = 0xFF;
      p[*len - 2] = 0xFF, p[*len - 1] = 0xD9;
      return p;
    }
  }
  return NULL;
}

static void prepare_bombs(void) {
  /* 1600x1200 progressive: ~11 MB of coefficients > MAX_DEC */
  uint8_t *rgb = malloc(1600 * 1200 * 3);
  memset(rgb, 128, 1600 * 1200 * 3);
  for (size_t i = 0; i < 1600 * 1200 * 3; i += 97) rgb[i] = (uint8_t)i;
  stk__encode_jpeg(rgb, 1600, 1200, STK__GEN_RGB, 30, 1, &membomb_bytes, &membomb_len);
  free(rgb);
  scanbomb_bytes = scan_bomb(&scanbomb_len);
  /* a valid picture above MAX_FILE: noise at quality 100 */
  rgb = malloc(400 * 400 * 3);
  for (size_t i = 0; i < 400 * 400 * 3; i++) rgb[i] = (uint8_t)rnd();
  stk__encode_jpeg(rgb, 400, 400, STK__GEN_RGB, 100, 0, &oversize_bytes, &oversize_len);
  free(rgb);
}

/* ---- the run ------------------------------------------------------------ */

static badlog blog; /* what the datasets report (tests/badlog.h) */

static char root[4096];

/* One epoch through every step; returns the crc of all batches. */
static uint32_t run_epoch(stk_job_spec *s, int io_mode, uint64_t *subst,
                          uint64_t *addressed_bad, uint64_t *nbad) {
  stk_limits lim;
  memset(&lim, 0, sizeof(lim));
  lim.max_file_bytes = MAX_FILE;
  lim.max_decoder_bytes = MAX_DEC;
  lim.io_mode = io_mode;
  stk_dataset *ds;
  stk_builder *b;
  char err[256];
  *subst = *addressed_bad = 0;
  int n0 = 0;
  for (int k = 0; k < K_UNREADABLE; k++) n0 += kind_count[k];
  for (int i = 0; i < kind_count[K_UNREADABLE]; i++) { /* (re)create them */
    char p[4400];
    snprintf(p, sizeof(p), "%s/hf/c%d/unreadable%03d.jpg", root, (n0 + i) % 4, i);
    tu_write(p, "\xff\xd8", 2);
  }
  if (stk_dataset_open(s, root, &lim, &ds, err, sizeof(err))) {
    fprintf(stderr, "open: %s\n", err);
    CHECK(0);
    return 0;
  }
  stk_dataset_set_log(ds, badlog_fn, &blog);
  if (stk_builder_create(ds, s, &b, err, sizeof(err))) {
    fprintf(stderr, "builder: %s\n", err);
    CHECK(0);
    stk_dataset_close(ds);
    return 0;
  }
  /* the unreadable files vanish after indexing (as root, chmod 000 does
   * not stop reads) */
  for (int i = 0; i < kind_count[K_UNREADABLE]; i++) {
    char p[4400];
    snprintf(p, sizeof(p), "%s/hf/c%d/unreadable%03d.jpg", root, (n0 + i) % 4, i);
    unlink(p);
  }
  stk_batch_layout L;
  stk_batch_layout_of(s, &L);
  uint8_t *buf = malloc(L.total_bytes);
  uint64_t steps = stk_steps_per_epoch(s, stk_dataset_size(ds));
  uint32_t crc = 0;
  for (uint64_t st = 0; st < steps; st++) {
    stk_build_info info;
    int rc = stk_builder_build(b, 0, 0, st, buf, L.total_bytes, &info);
    if (rc)
      fprintf(stderr, "build %llu: %s\n", (unsigned long long)st, stk_builder_error(b));
    CHECK(rc == STK_OK);
    *subst += info.substituted;
    crc = stk_crc32c(crc, buf, L.total_bytes);
  }
  *nbad = stk_dataset_bad_samples(ds);
  (void)addressed_bad;
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  return crc;
}

static void write_files(void) {
  char p[4400];
  for (int c = 0; c < 4; c++) {
    snprintf(p, sizeof(p), "%s/hf/c%d", root, c);
    mkdir(p, 0755);
  }
  snprintf(p, sizeof(p), "%s/ht", root);
  mkdir(p, 0755);
  snprintf(p, sizeof(p), "%s/ht/a.tar", root);
  FILE *tar = fopen(p, "wb");
  int n = 0;
  for (int k = 0; k < K_NKINDS; k++)
    for (int i = 0; i < kind_count[k]; i++, n++) {
      size_t len;
      uint8_t *d = make(k, &len);
      snprintf(p, sizeof(p), "%s/hf/c%d/%s%03d.jpg", root, n % 4, kind_name[k], i);
      CHECK(tu_write(p, d, len) == 0);
      if (k != K_UNREADABLE) {
        char name[64], cls[8];
        snprintf(name, sizeof(name), "%s%03d.jpg", kind_name[k], i);
        CHECK(stk__tar_member(tar, name, d, len) == 0);
        snprintf(name, sizeof(name), "%s%03d.cls", kind_name[k], i);
        snprintf(cls, sizeof(cls), "%d", n % 4);
        CHECK(stk__tar_member(tar, name, cls, strlen(cls)) == 0);
      }
      free(d);
    }
  stk__tar_end(tar);
  fclose(tar);
  /* a second shard cut in the middle of a member */
  snprintf(p, sizeof(p), "%s/ht/b.tar", root);
  tar = fopen(p, "wb");
  for (int i = 0; i < 3; i++) {
    size_t len;
    uint8_t *d = make(K_GOOD, &len);
    char name[64];
    snprintf(name, sizeof(name), "cut%03d.jpg", i);
    stk__tar_member(tar, name, d, len);
    snprintf(name, sizeof(name), "cut%03d.cls", i);
    stk__tar_member(tar, name, "1", 1);
    free(d);
  }
  long end = ftell(tar);
  fclose(tar);
  CHECK(truncate(p, end - 700) == 0);
}

static int write_corpus(const char *dir) {
  prepare_bombs();
  mkdir(dir, 0755);
  for (int k = 0; k < K_NKINDS; k++) {
    if (k == K_MEMBOMB || k == K_OVERSIZE || k == K_UNREADABLE) continue;
    for (int i = 0; i < (k == K_GOOD ? 6 : 2); i++) {
      size_t len;
      uint8_t *d = make(k, &len);
      char p[4400];
      snprintf(p, sizeof(p), "%s/%s-%d.jpg", dir, kind_name[k], i);
      if (tu_write(p, d, len)) return 1;
      free(d);
    }
  }
  free(membomb_bytes), free(scanbomb_bytes), free(oversize_bytes);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--write-corpus")) return write_corpus(argv[2]);
  badlog_init(&blog);
  if (tu_tmpdir(root, sizeof(root), "hostile")) return 77;
  char p[4200];
  snprintf(p, sizeof(p), "%s/hf", root);
  mkdir(p, 0755);
  prepare_bombs();
  CHECK(membomb_len < MAX_FILE && scanbomb_len < MAX_FILE && oversize_len > MAX_FILE);
  write_files();
  int nbadfiles = 0;
  for (int k = 1; k < K_NKINDS; k++) nbadfiles += kind_count[k];
  CHECK(nbadfiles >= 200);

  /* ImageFolder, eval pipeline, every step of epoch 0, padded */
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_IMAGEFOLDER, "hf", STK_PIPELINE_EVAL, STK_DTYPE_UINT8,
          STK_LAYOUT_NCHW, 16, 32);
  s.drop_last = 0;
  uint64_t subst, ab, nbad;
  /* both I/O paths; io_uring first (the files vanish during that run) */
  uint32_t crc1 = run_epoch(&s, 0, &subst, &ab, &nbad);
  fprintf(stderr, "imagefolder: %llu substituted, %llu bad, %d logged\n",
          (unsigned long long)subst, (unsigned long long)nbad, blog.n);
  CHECK(blog.dups == 0);
  CHECK_EQ_U64(nbad, (uint64_t)blog.n);
  /* every bad file but the corrupt-entropy kind is bad for any crop */
  for (int k = 1; k < K_NKINDS; k++) {
    if (k == K_CORRUPT) continue;
    for (int i = 0; i < kind_count[k]; i++) {
      char suf[64];
      snprintf(suf, sizeof(suf), "/%s%03d.jpg", kind_name[k], i);
      if (!badlog_has(&blog, suf)) {
        fprintf(stderr, "not reported: %s\n", suf);
        CHECK(0);
      }
    }
  }
  for (int i = 0; i < kind_count[K_GOOD]; i++) {
    char suf[64];
    snprintf(suf, sizeof(suf), "/good%03d.jpg", i);
    CHECK(!badlog_has(&blog, suf));
  }
  /* one epoch addresses each sample once (+ padding): each bad one is
   * substituted at least once */
  CHECK(subst >= nbad);
  CHECK(nbad >= (uint64_t)(nbadfiles - kind_count[K_CORRUPT]));
  badlog_clear(&blog);
  uint64_t subst2, nbad2;
  uint32_t crc2 = run_epoch(&s, 1, &subst2, &ab, &nbad2);
  CHECK(crc1 == crc2);
  CHECK_EQ_U64(subst, subst2);
  badlog_clear(&blog);

  /* train pipeline, float32 */
  s.pipeline = STK_PIPELINE_TRAIN;
  s.dtype = STK_DTYPE_FLOAT32;
  s.flip_p = 0.5f, s.brightness = 0.3f, s.saturation = 0.3f, s.contrast = 0.3f;
  run_epoch(&s, 0, &subst, &ab, &nbad);
  CHECK(nbad >= (uint64_t)(nbadfiles - kind_count[K_CORRUPT]));
  CHECK(subst >= nbad && blog.dups == 0);
  badlog_clear(&blog);

  /* tar shards: the same bad members (no unreadable ones), a cut shard */
  s.source = STK_SOURCE_TAR;
  s.num_classes = 1000; /* tar checks labels against it */
  snprintf(s.dataset, sizeof(s.dataset), "ht");
  run_epoch(&s, 0, &subst, &ab, &nbad);
  fprintf(stderr, "tar: %llu substituted, %llu bad\n", (unsigned long long)subst,
          (unsigned long long)nbad);
  CHECK(nbad >= (uint64_t)(nbadfiles - kind_count[K_CORRUPT] - kind_count[K_UNREADABLE]));
  CHECK(subst >= nbad && blog.dups == 0);
  CHECK(!badlog_has(&blog, ":cut000") && !badlog_has(&blog, ":cut001"));
  badlog_clear(&blog);

  free(membomb_bytes), free(scanbomb_bytes), free(oversize_bytes);
  tu_rmtree(root);
  CHECK_DONE();
}
