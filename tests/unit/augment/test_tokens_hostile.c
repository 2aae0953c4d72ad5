/* test_tokens_hostile.c - the megatron source against hostile .idx/.bin
 * pairs: truncated, bad magic, bad version, bad or float dtype, counts
 * that do not match the file size or overflow, negative lengths and
 * pointers, sequences past the end of the .bin or unaligned, document
 * indices out of order, too few tokens, token ids a job cannot carry,
 * paths out of the root, bad blends.
 * Each must be refused by stk_dataset_open (or the build) with a clear
 * message, never a crash (the suite runs under ASan+UBSan). Then 3000
 * random mutations of a small .idx through the parser: whatever it
 * accepts must describe sequences inside the .bin. Also: builders moving
 * through six epochs, interleaved, equal fresh reference builds; an .idx
 * rewritten in place under an open dataset changes nothing (the dataset
 * reads its own copy of what it checked).
 *
 * `test_tokens_hostile --write-corpus DIR` writes seed inputs of the fuzz
 * target (tests/fuzz/fuzz_megatron_idx.c): 8 bytes of .bin size, then
 * the .idx.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "files.h"
#include "augment/megatron.h"
#include "stoker/augment.h"
#include "tokens.h"
#include "util.h"

static char root[4096];

static void put64(unsigned char *p, uint64_t v) {
  for (int k = 0; k < 8; k++) p[k] = (unsigned char)(v >> (8 * k));
}
static void put32(unsigned char *p, uint32_t v) {
  for (int k = 0; k < 4; k++) p[k] = (unsigned char)(v >> (8 * k));
}

static void job(stk_job_spec *s, const char *dataset) {
  stk_job_spec_defaults(s);
  s->source = STK_SOURCE_MEGATRON;
  snprintf(s->dataset, sizeof(s->dataset), "%s", dataset);
  s->seq_len = 4;
  s->batch_size = 2;
}

/* Write name.idx/.bin under root and open it: expect rc and a message
 * holding `want`. */
static void expect_open(const char *name, const void *idx, size_t idx_len,
                        const void *bin, size_t bin_len, int rc_want, const char *want) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/%s.idx", root, name);
  tu_write(path, idx, idx_len);
  snprintf(path, sizeof(path), "%s/%s.bin", root, name);
  tu_write(path, bin, bin_len);
  stk_job_spec s;
  job(&s, name);
  stk_dataset *ds = NULL;
  char err[512] = "";
  int rc = stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err));
  if (rc != rc_want || !strstr(err, want)) {
    fprintf(stderr, "%s: rc %d (%s), want %d with '%s'\n", name, rc, err, rc_want, want);
    check_failures++;
  }
  stk_dataset_close(ds);
}

/* The good pair: 3 documents of uint16 tokens. */
static unsigned char *good_idx, *good_bin;
static size_t good_idx_len, good_bin_len;

static void make_good(void) {
  char txt[4200], prefix[4200];
  snprintf(txt, sizeof(txt), "%s/docs.txt", root);
  const char *docs = "1 2 3 4 5 0\n6 7 8 0\n9 10 11 12 13 14 15 0\n";
  tu_write(txt, docs, strlen(docs));
  snprintf(prefix, sizeof(prefix), "%s/good", root);
  stk__tokens_opts o = {0};
  o.out = prefix, o.in = txt, o.code = stk__tokens_code("uint16");
  char err[256];
  uint64_t nd, nt;
  CHECK(stk__tokens_write(&o, &nd, &nt, err, sizeof(err)) == 0);
  CHECK_EQ_U64(nd, 3);
  CHECK_EQ_U64(nt, 18);
  char p[4300];
  snprintf(p, sizeof(p), "%s.idx", prefix);
  good_idx = (unsigned char *)files_slurp(p, &good_idx_len);
  snprintf(p, sizeof(p), "%s.bin", prefix);
  good_bin = (unsigned char *)files_slurp(p, &good_bin_len);
  CHECK(good_idx && good_bin);
  CHECK_EQ_U64(good_idx_len, 34 + 3 * 12 + 4 * 8);
  CHECK_EQ_U64(good_bin_len, 36);
}

/* Offsets in the good .idx (S = 3, D = 4). */
#define LEN(i) (34 + 4 * (i))
#define PTR(i) (34 + 12 + 8 * (i))
#define DOC(i) (34 + 36 + 8 * (i))

static void test_hostile(void) {
  unsigned char *x = malloc(good_idx_len + 64);
  size_t n = good_idx_len;
#define RESET() memcpy(x, good_idx, good_idx_len)
  RESET();
  expect_open("ok", x, n, good_bin, good_bin_len, STK_OK, "");
  expect_open("short", x, 20, good_bin, good_bin_len, STK_CORRUPT, "shorter than");
  expect_open("empty", x, 0, good_bin, 0, STK_CORRUPT, "shorter than");
  expect_open("cut", x, n - 8, good_bin, good_bin_len, STK_CORRUPT, "truncated");
  expect_open("long", x, n + 4, good_bin, good_bin_len, STK_CORRUPT, "truncated");
  x[0] = 'X';
  expect_open("magic", x, n, good_bin, good_bin_len, STK_CORRUPT, "magic");
  RESET();
  put64(x + 9, 2);
  expect_open("version", x, n, good_bin, good_bin_len, STK_CORRUPT, "version 2");
  RESET();
  x[17] = 9;
  expect_open("dtype9", x, n, good_bin, good_bin_len, STK_CORRUPT, "unknown");
  x[17] = 0;
  expect_open("dtype0", x, n, good_bin, good_bin_len, STK_CORRUPT, "unknown");
  x[17] = 7;
  expect_open("dtypef32", x, n, good_bin, good_bin_len, STK_CORRUPT, "float");
  RESET();
  put64(x + 18, 1ull << 40);
  expect_open("nseq_huge", x, n, good_bin, good_bin_len, STK_CORRUPT, "claims");
  put64(x + 18, 1ull << 31);
  expect_open("nseq_big", x, n, good_bin, good_bin_len, STK_CORRUPT, "truncated");
  RESET();
  put64(x + 26, UINT64_MAX / 4);
  expect_open("ndoc_huge", x, n, good_bin, good_bin_len, STK_CORRUPT, "truncated");
  RESET();
  put64(x + 18, 2); /* 12 bytes fewer arrays than the file has, D then too big */
  expect_open("nseq_small", x, n, good_bin, good_bin_len, STK_CORRUPT, "truncated");
  RESET();
  put32(x + LEN(1), 0xffffffffu);
  expect_open("neglen", x, n, good_bin, good_bin_len, STK_CORRUPT, "negative length");
  RESET();
  put32(x + LEN(2), 0x7fffffffu);
  expect_open("hugelen", x, n, good_bin, good_bin_len, STK_CORRUPT, "past the end");
  RESET();
  put64(x + PTR(2), 1ull << 63);
  expect_open("negptr", x, n, good_bin, good_bin_len, STK_CORRUPT,
              "negative byte pointer");
  RESET();
  put64(x + PTR(2), (1ull << 62) + 2);
  expect_open("farptr", x, n, good_bin, good_bin_len, STK_CORRUPT, "past the end");
  RESET();
  put64(x + PTR(1), 13);
  expect_open("oddptr", x, n, good_bin, good_bin_len, STK_CORRUPT, "multiple");
  RESET();
  put64(x + PTR(2), 34); /* 8 tokens from byte 34 of 36 */
  expect_open("ptrend", x, n, good_bin, good_bin_len, STK_CORRUPT, "past the end");
  RESET();
  expect_open("shortbin", x, n, good_bin, good_bin_len - 2, STK_CORRUPT, "past the end");
  put64(x + DOC(0), 1);
  expect_open("doc0", x, n, good_bin, good_bin_len, STK_CORRUPT, "start at sequence 0");
  RESET();
  put64(x + DOC(1), 2), put64(x + DOC(2), 1);
  expect_open("docorder", x, n, good_bin, good_bin_len, STK_CORRUPT, "out of order");
  RESET();
  put64(x + DOC(3), 2);
  expect_open("doclast", x, n, good_bin, good_bin_len, STK_CORRUPT, "ends at 2");
  RESET();
  put64(x + DOC(3), UINT64_MAX);
  expect_open("docneg", x, n, good_bin, good_bin_len, STK_CORRUPT, "ends at");
  RESET();
  /* all lengths 0 but one of 4 tokens: fewer than seq_len + 1 = 5 */
  put32(x + LEN(0), 0), put32(x + LEN(2), 0);
  expect_open("fewtokens", x, n, good_bin, good_bin_len, STK_INVALID_ARGUMENT,
              "fewer than one sample");
  free(x);
}

/* Files that are not there, not regular, or outside the root. */
static void test_paths(void) {
  stk_job_spec s;
  stk_dataset *ds = NULL;
  char err[512] = "", p[4200], q[4200];
  job(&s, "missing");
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_NOT_FOUND);
  CHECK(strstr(err, "missing.idx") != NULL);
  snprintf(p, sizeof(p), "%s/dir.idx", root);
  mkdir(p, 0700);
  snprintf(p, sizeof(p), "%s/dir.bin", root);
  tu_write(p, good_bin, good_bin_len);
  job(&s, "dir");
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) != STK_OK);
  CHECK(strstr(err, "not a regular file") != NULL);
  /* a symbolic link out of the root */
  snprintf(p, sizeof(p), "%s/sub", root);
  mkdir(p, 0700);
  snprintf(p, sizeof(p), "%s/sub/esc.idx", root);
  snprintf(q, sizeof(q), "%s/good.idx", root);
  CHECK(symlink(q, p) == 0);
  snprintf(p, sizeof(p), "%s/sub/esc.bin", root);
  tu_write(p, good_bin, good_bin_len);
  snprintf(p, sizeof(p), "%s/sub", root);
  job(&s, "esc");
  CHECK(stk_dataset_open(&s, p, NULL, &ds, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "outside the data root") != NULL);
  /* blends that do not parse */
  job(&s, "good:0.5, good");
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "every prefix a weight") != NULL);
  job(&s, "good:-1");
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  job(&s, "good:0.5, /etc/good:0.5");
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "relative to the data root") != NULL);
  job(&s, "good:0.5, , good:0.5");
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  job(&s, "good");
  s.num_samples = 1000;
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_MISMATCH);
  job(&s, "good:1");
  s.num_samples = 1000;
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "does not repeat") != NULL);
  CHECK(ds == NULL);
}

/* Token ids the job cannot carry: the build fails, clearly, never crashes. */
static void test_bad_tokens(void) {
  char txt[4200], prefix[4200];
  snprintf(txt, sizeof(txt), "%s/neg.txt", root);
  const char *docs = "1 2 3 -5 4 5 6 7 8 9\n";
  tu_write(txt, docs, strlen(docs));
  snprintf(prefix, sizeof(prefix), "%s/neg", root);
  stk__tokens_opts o = {0};
  o.out = prefix, o.in = txt, o.code = stk__tokens_code("int16");
  char err[256];
  CHECK(stk__tokens_write(&o, NULL, NULL, err, sizeof(err)) == 0);
  snprintf(txt, sizeof(txt), "%s/big.txt", root);
  docs = "1 2 3 4 5 6 7 4294967296 8 9\n";
  tu_write(txt, docs, strlen(docs));
  snprintf(prefix, sizeof(prefix), "%s/big", root);
  o.out = prefix, o.in = txt, o.code = stk__tokens_code("int64");
  CHECK(stk__tokens_write(&o, NULL, NULL, err, sizeof(err)) == 0);
  /* a token that does not fit the dtype is refused by the writer */
  o.code = stk__tokens_code("uint8");
  snprintf(prefix, sizeof(prefix), "%s/bad8", root);
  CHECK(stk__tokens_write(&o, NULL, NULL, err, sizeof(err)) != 0);
  CHECK(strstr(err, "does not fit") != NULL);
  const char *names[] = {"neg", "big"};
  for (int k = 0; k < 2; k++) {
    stk_job_spec s;
    job(&s, names[k]);
    s.seq_len = 8, s.batch_size = 1;
    s.token_dtype = STK_DTYPE_INT32;
    stk_dataset *ds = NULL;
    stk_builder *b = NULL;
    CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_OK);
    if (!ds) continue;
    CHECK(stk_builder_create(ds, &s, &b, err, sizeof(err)) == STK_OK);
    unsigned char buf[4096];
    int rc = b ? stk_builder_build(b, 0, 0, 0, buf, sizeof(buf), NULL) : -1;
    CHECK(rc == STK_CORRUPT);
    CHECK(b && strstr(stk_builder_error(b), "is not a token id") != NULL);
    stk_builder_destroy(b);
    stk_dataset_close(ds);
  }
}

/* Builders that move through epochs (the prefix sums cache drops old
 * epochs) and interleave: every batch equals a fresh reference build. */
static void test_epochs(void) {
  stk_job_spec s;
  job(&s, "good");
  s.epochs = 6, s.batch_size = 1;
  s.loss_mask = s.position_ids = 1;
  char err[256];
  stk_dataset *ds = NULL;
  stk_builder *b[2] = {NULL, NULL};
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_OK);
  if (!ds) return;
  for (int k = 0; k < 2; k++)
    CHECK(stk_builder_create(ds, &s, &b[k], err, sizeof(err)) == STK_OK);
  unsigned char got[1024], want[1024];
  int same = 0;
  for (uint64_t e = 0; e < 6; e++)
    for (uint64_t st = 0; st < 4; st++) {
      stk_builder *bb = b[(e + st) % 2 && e < 5 ? 1 : 0];
      if (!bb) continue;
      memset(got, 0, sizeof(got));
      memset(want, 0, sizeof(want));
      CHECK(stk_builder_build(bb, e, 0, st, got, sizeof(got), NULL) == STK_OK);
      CHECK(stk_build_reference(&s, root, e, 0, st, want, sizeof(want), err,
                                sizeof(err)) == STK_OK);
      same += memcmp(got, want, sizeof(got)) == 0;
    }
  CHECK_EQ_U64(same, 24);
  for (int k = 0; k < 2; k++) stk_builder_destroy(b[k]);
  stk_dataset_close(ds);
}

/* The .idx rewritten in place (same size) under an open dataset, its
 * pointers now past the end of the .bin: the dataset holds its own copy
 * of the index it checked, so the next build is unaffected (the bytes it
 * gave before the rewrite) and reads nothing outside the .bin mapping
 * (ASan would see it). */
static void test_rewritten_in_place(void) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/live.idx", root);
  tu_write(path, good_idx, good_idx_len);
  char bpath[4200];
  snprintf(bpath, sizeof(bpath), "%s/live.bin", root);
  tu_write(bpath, good_bin, good_bin_len);
  stk_job_spec s;
  job(&s, "live");
  s.batch_size = 1;
  char err[256];
  stk_dataset *ds = NULL;
  stk_builder *b = NULL;
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_OK);
  if (ds) CHECK(stk_builder_create(ds, &s, &b, err, sizeof(err)) == STK_OK);
  if (!b) {
    stk_dataset_close(ds);
    return;
  }
  unsigned char got[1024], before[1024];
  memset(got, 0, sizeof(got)), memset(before, 0, sizeof(before));
  CHECK(stk_builder_build(b, 0, 0, 0, got, sizeof(got), NULL) == STK_OK);
  CHECK(stk_builder_build(b, 0, 0, 1, before, sizeof(before), NULL) == STK_OK);
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL);
  for (int i = 0; f && i < 3; i++) {
    unsigned char p8[8];
    put64(p8, (uint64_t)1 << 40);
    CHECK(fseek(f, PTR(i), SEEK_SET) == 0 && fwrite(p8, 1, 8, f) == 8);
  }
  if (f) fclose(f);
  memset(got, 0, sizeof(got));
  int rc = stk_builder_build(b, 0, 0, 1, got, sizeof(got), NULL);
  printf("rewritten in place: rc %d\n", rc);
  CHECK(rc == STK_OK && memcmp(got, before, sizeof(got)) == 0);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
}

/* Random mutations through the parser; what it accepts is in bounds. */
static void test_mutations(void) {
  uint64_t rs = 0x1234567;
  unsigned char *x = malloc(good_idx_len);
  int accepted = 0;
  for (int it = 0; it < 3000; it++) {
    memcpy(x, good_idx, good_idx_len);
    int flips = 1 + (int)(rs % 4);
    for (int f = 0; f < flips; f++) {
      rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
      x[rs % good_idx_len] ^= (unsigned char)(1u << ((rs >> 20) % 8));
    }
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    size_t len = rs % 7 == 0 ? (size_t)(rs >> 8) % good_idx_len : good_idx_len;
    uint64_t bin_len = rs % 5 == 0 ? (rs >> 16) % 64 : good_bin_len;
    stk__mg_index ix;
    char err[256];
    if (stk__mg_parse(x, len, bin_len, &ix, err, sizeof(err)) != 0) {
      CHECK(err[0] != 0);
      continue;
    }
    accepted++;
    for (uint64_t i = 0; i < ix.nseq; i++) {
      uint64_t end = stk__mg_ptr(&ix, i) + (uint64_t)stk__mg_len(&ix, i) * ix.itemsize;
      CHECK(end <= bin_len);
    }
  }
  CHECK(accepted > 0); /* flips in token lengths/pointers that stay valid */
  free(x);
}

static int write_corpus(const char *dir) {
  mkdir(dir, 0755);
  unsigned char *x = malloc(8 + good_idx_len);
  struct {
    const char *name;
    size_t at;
    uint64_t v;
    int width;
  } seeds[] = {{"good", 0, 0, 0},
               {"badmagic", 8, 0x58, 1},
               {"version2", 8 + 9, 2, 8},
               {"dtype9", 8 + 17, 9, 1},
               {"nseqhuge", 8 + 18, 1ull << 40, 8},
               {"neglen", 8 + LEN(1), 0xffffffffu, 4},
               {"farptr", 8 + PTR(2), 1ull << 62, 8},
               {"docorder", 8 + DOC(2), 0, 8}};
  for (size_t k = 0; k < sizeof(seeds) / sizeof(seeds[0]); k++) {
    put64(x, good_bin_len);
    memcpy(x + 8, good_idx, good_idx_len);
    if (seeds[k].width == 8) put64(x + seeds[k].at, seeds[k].v);
    else if (seeds[k].width == 4) put32(x + seeds[k].at, (uint32_t)seeds[k].v);
    else if (seeds[k].width == 1) x[seeds[k].at] = (unsigned char)seeds[k].v;
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", dir, seeds[k].name);
    tu_write(p, x, 8 + good_idx_len);
  }
  free(x);
  return 0;
}

int main(int argc, char **argv) {
  if (tu_tmpdir(root, sizeof(root), "tokens-hostile")) return 1;
  make_good();
  int rc = 0;
  if (argc == 3 && !strcmp(argv[1], "--write-corpus")) {
    rc = write_corpus(argv[2]);
  } else {
    test_hostile();
    test_paths();
    test_bad_tokens();
    test_epochs();
    test_rewritten_in_place();
    test_mutations();
  }
  free(good_idx);
  free(good_bin);
  tu_rmtree(root);
  if (rc) return rc;
  CHECK_DONE();
}
