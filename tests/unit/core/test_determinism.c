/* test_determinism.c - the determinism contract of core/ (and the builder):
 * permutations are bijections, ranks cover disjoint samples, the same
 * address gives the same bytes across builders, threads and processes,
 * the RNG is a pure function of (seed, epoch, index), crc32c is right, and
 * the job spec round-trips through its canonical text.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "stoker/augment.h"

static void test_perm_bijection(void) {
  uint64_t sizes[] = {1, 2, 3, 5, 7, 100, 1000, 4096, 12345, 65537};
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    uint64_t n = sizes[k];
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
      stk_perm p;
      stk_perm_init(&p, n, 42, epoch);
      unsigned char *seen = calloc(n, 1);
      for (uint64_t i = 0; i < n; i++) {
        uint64_t y = stk_perm_apply(&p, i);
        CHECK(y < n);
        if (y < n) {
          CHECK(!seen[y]);
          seen[y] = 1;
        }
      }
      free(seen);
    }
  }
  /* Different epochs and seeds give different orders. */
  stk_perm a, b, c;
  stk_perm_init(&a, 1000, 1, 0);
  stk_perm_init(&b, 1000, 1, 1);
  stk_perm_init(&c, 1000, 2, 0);
  int same_ab = 0, same_ac = 0;
  for (uint64_t i = 0; i < 1000; i++) {
    same_ab += stk_perm_apply(&a, i) == stk_perm_apply(&b, i);
    same_ac += stk_perm_apply(&a, i) == stk_perm_apply(&c, i);
  }
  CHECK(same_ab < 20);
  CHECK(same_ac < 20);
}

static void test_rank_coverage(void) {
  stk_job_spec s;
  stk_job_spec_defaults(&s);
  s.num_samples = 1003;
  s.batch_size = 10;
  s.world_size = 4;
  s.epochs = 2;
  uint64_t steps = stk_steps_per_epoch(&s, s.num_samples);
  CHECK_EQ_U64(steps, 25); /* floor(1003 / 40) */
  unsigned char *seen = calloc(s.num_samples, 1);
  uint64_t idx[10];
  uint8_t mask[10];
  for (uint32_t r = 0; r < 4; r++)
    for (uint64_t st = 0; st < steps; st++) {
      CHECK(stk_batch_samples(&s, s.num_samples, 1, r, st, idx, mask) == STK_OK);
      for (int j = 0; j < 10; j++) {
        CHECK(mask[j] == 1);
        CHECK(!seen[idx[j]]);
        seen[idx[j]] = 1;
      }
    }
  free(seen);
  CHECK(stk_batch_samples(&s, s.num_samples, 0, 0, steps, idx, mask) ==
        STK_INVALID_ARGUMENT);
  CHECK(stk_batch_samples(&s, s.num_samples, 2, 0, 0, idx, mask) == STK_INVALID_ARGUMENT);
  CHECK(stk_batch_samples(&s, s.num_samples, 0, 4, 0, idx, mask) == STK_INVALID_ARGUMENT);
  /* Padding: ceil, the tail carries mask 0, every real sample once. */
  s.drop_last = 0;
  steps = stk_steps_per_epoch(&s, s.num_samples);
  CHECK_EQ_U64(steps, 26);
  uint64_t valid = 0;
  seen = calloc(s.num_samples, 1);
  for (uint32_t r = 0; r < 4; r++)
    for (uint64_t st = 0; st < steps; st++) {
      CHECK(stk_batch_samples(&s, s.num_samples, 0, r, st, idx, mask) == STK_OK);
      for (int j = 0; j < 10; j++)
        if (mask[j]) {
          CHECK(!seen[idx[j]]);
          seen[idx[j]] = 1;
          valid++;
        }
    }
  CHECK_EQ_U64(valid, 1003);
  free(seen);
}

/* shuffle = false: index order, DistributedSampler's partition (rank r's
 * step s holds samples (s*W + r)*B ..), the padded tail masked; the key is
 * left out of the canonical text (and the hash) while true. */
static void test_in_order(void) {
  stk_job_spec s;
  stk_job_spec_defaults(&s);
  s.num_samples = 103;
  s.batch_size = 10;
  s.world_size = 2;
  s.epochs = 2;
  char err[256], text[8192];
  uint64_t h0 = stk_job_spec_hash(&s);
  stk_job_spec_format(&s, text, sizeof text);
  CHECK(strstr(text, "shuffle") == NULL);
  CHECK(stk_job_spec_set(&s, "shuffle", "maybe", err, sizeof err) ==
        STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "shuffle") != NULL);
  CHECK(stk_job_spec_set(&s, "shuffle", "true", err, sizeof err) == STK_OK);
  CHECK(stk_job_spec_hash(&s) == h0);
  CHECK(stk_job_spec_set(&s, "shuffle", "false", err, sizeof err) == STK_OK);
  CHECK(s.in_order == 1);
  CHECK(stk_job_spec_hash(&s) != h0);
  stk_job_spec_format(&s, text, sizeof text);
  CHECK(strstr(text, "shuffle = false\n") != NULL);
  stk_job_spec back;
  stk_job_spec_defaults(&back);
  CHECK(stk_job_spec_parse(&back, text, err, sizeof err) == STK_OK);
  CHECK(back.in_order == 1 && stk_job_spec_hash(&back) == stk_job_spec_hash(&s));
  s.drop_last = 0;
  uint64_t steps = stk_steps_per_epoch(&s, s.num_samples);
  CHECK_EQ_U64(steps, 6);
  uint64_t idx[10];
  uint8_t mask[10];
  for (uint64_t e = 0; e < 2; e++)
    for (uint32_t r = 0; r < 2; r++)
      for (uint64_t st = 0; st < steps; st++) {
        CHECK(stk_batch_samples(&s, s.num_samples, e, r, st, idx, mask) == STK_OK);
        for (uint64_t j = 0; j < 10; j++) {
          uint64_t pos = (st * 2 + r) * 10 + j;
          CHECK(mask[j] == (pos < 103));
          CHECK_EQ_U64(idx[j], pos % 103);
        }
      }
}

static void test_rng(void) {
  stk_rng a, b, c;
  stk_rng_init(&a, 7, 1, 99);
  stk_rng_init(&b, 7, 1, 99);
  stk_rng_init(&c, 7, 2, 99);
  int diff = 0;
  for (int i = 0; i < 100; i++) {
    uint32_t x = stk_rng_u32(&a), y = stk_rng_u32(&b), z = stk_rng_u32(&c);
    CHECK(x == y);
    diff += x != z;
  }
  CHECK(diff > 90);
  double sum = 0;
  for (int i = 0; i < 10000; i++) {
    double u = stk_rng_uniform(&a);
    CHECK(u >= 0 && u < 1);
    sum += u;
  }
  CHECK(sum / 10000 > 0.48 && sum / 10000 < 0.52);
  /* Philox4x32-10 known answer (Random123 kat_vectors: ctr=0, key=0). */
  stk_rng k;
  stk_rng_init(&k, 0, 0, 0);
  CHECK(stk_rng_u32(&k) == 0x6627e8d5u);
  CHECK(stk_rng_u32(&k) == 0xe169c58du);
  CHECK(stk_rng_u32(&k) == 0xbc57ac4cu);
  CHECK(stk_rng_u32(&k) == 0x9b00dbd8u);
}

/* CRC-32C bit by bit, from the definition: the reference for the table
 * and the three-lane instruction paths. */
static uint32_t crc_bitwise(uint32_t crc, const unsigned char *p, size_t n) {
  crc = ~crc;
  while (n--) {
    crc ^= *p++;
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
  }
  return ~crc;
}

static void test_crc(void) {
  CHECK(stk_crc32c(0, "123456789", 9) == 0xE3069283u);
  /* every path (lane blocks of 3 x 4096 and 3 x 256 bytes, the tail,
   * unaligned starts) against the definition */
  size_t big = 3 * 4096 * 2 + 3 * 256 + 100;
  unsigned char *r = malloc(big + 8);
  for (size_t i = 0; i < big + 8; i++) r[i] = (unsigned char)(i * 131 + (i >> 7) * 17);
  int bad = 0;
  static const size_t lens[] = {
      0, 1, 7, 8, 767, 768, 769, 3 * 4096 - 1, 12288, 12289, 13056, 24576, 25000, 25444};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
    for (size_t off = 0; off < 8; off++)
      if (lens[li] + off <= big + 8)
        bad += stk_crc32c(0x1234u, r + off, lens[li]) !=
               crc_bitwise(0x1234u, r + off, lens[li]);
  CHECK(bad == 0);
  free(r);
  unsigned char buf[1000];
  for (int i = 0; i < 1000; i++) buf[i] = (unsigned char)(i * 7);
  uint32_t whole = stk_crc32c(0, buf, 1000);
  uint32_t part = stk_crc32c(stk_crc32c(0, buf, 333), buf + 333, 667);
  CHECK(whole == part);
  CHECK(stk_crc32c(0, buf + 1, 999) != stk_crc32c(0, buf, 999));
}

static void test_spec_roundtrip(void) {
  stk_job_spec a, b;
  stk_job_spec_defaults(&a);
  char err[256];
  CHECK(stk_job_spec_validate(&a, err, sizeof err) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "num_samples") != NULL);
  a.num_samples = 1000;
  CHECK(stk_job_spec_set(&a, "batch_size", "17", err, sizeof err) == STK_OK);
  CHECK(stk_job_spec_set(&a, "mean", "0.5,0.25,0.125", err, sizeof err) == STK_OK);
  CHECK(stk_job_spec_set(&a, "drop_last", "false", err, sizeof err) == STK_OK);
  CHECK(stk_job_spec_set(&a, "nosuch", "1", err, sizeof err) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "nosuch") != NULL);
  CHECK(stk_job_spec_set(&a, "batch_size", "-1", err, sizeof err) ==
        STK_INVALID_ARGUMENT);
  CHECK(stk_job_spec_set(&a, "batch_size", "99999999999", err, sizeof err) ==
        STK_INVALID_ARGUMENT);
  CHECK(stk_job_spec_set(&a, "source", "floppy", err, sizeof err) ==
        STK_INVALID_ARGUMENT);
  CHECK(stk_job_spec_validate(&a, err, sizeof err) == STK_OK);
  char text[8192];
  size_t n = stk_job_spec_format(&a, text, sizeof text);
  CHECK(n < sizeof text);
  /* Parse the text back (tests/unit/core/test_job_text.c tests the grammar). */
  stk_job_spec_defaults(&b);
  CHECK(stk_job_spec_parse(&b, text, err, sizeof err) == STK_OK);
  CHECK(stk_job_spec_hash(&a) == stk_job_spec_hash(&b));
  b.seed++;
  CHECK(stk_job_spec_hash(&a) != stk_job_spec_hash(&b));
  stk_job_spec bad = a;
  bad.world_size = 0;
  CHECK(stk_job_spec_validate(&bad, err, sizeof err) == STK_INVALID_ARGUMENT);
}

typedef struct {
  stk_job_spec spec;
  uint32_t crc;
} thread_arg;

static uint32_t build_crc(const stk_job_spec *s, uint64_t e, uint32_t r, uint64_t st) {
  stk_batch_layout L;
  stk_batch_layout_of(s, &L);
  void *buf = malloc(L.total_bytes);
  char err[256];
  int rc = stk_build_reference(s, NULL, e, r, st, buf, L.total_bytes, err, sizeof err);
  uint32_t crc = rc == STK_OK ? stk_crc32c(0, buf, L.total_bytes) : 0;
  free(buf);
  return crc;
}

static void *thread_main(void *p) {
  thread_arg *a = p;
  a->crc = build_crc(&a->spec, 1, 1, 3);
  return NULL;
}

static void test_same_bytes(void) {
  stk_job_spec s;
  stk_job_spec_defaults(&s);
  s.num_samples = 500;
  s.batch_size = 8;
  s.world_size = 2;
  s.epochs = 2;
  s.height = s.width = 32;
  uint32_t here = build_crc(&s, 1, 1, 3);
  CHECK(here != 0);
  CHECK(build_crc(&s, 1, 1, 3) == here);
  CHECK(build_crc(&s, 1, 1, 4) != here);
  CHECK(build_crc(&s, 0, 1, 3) != here);
  thread_arg args[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    args[i].spec = s;
    pthread_create(&t[i], NULL, thread_main, &args[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    CHECK(args[i].crc == here);
  }
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    uint32_t c = build_crc(&s, 1, 1, 3);
    ssize_t w = write(fds[1], &c, 4);
    _exit(w == 4 ? 0 : 1);
  }
  uint32_t child = 0;
  CHECK(read(fds[0], &child, 4) == 4);
  int st;
  waitpid(pid, &st, 0);
  close(fds[0]);
  close(fds[1]);
  CHECK(child == here);
  /* The NHWC layout holds the same pixels as NCHW, transposed. */
  stk_job_spec t2 = s;
  t2.layout = STK_LAYOUT_NHWC;
  stk_batch_layout L1, L2;
  stk_batch_layout_of(&s, &L1);
  stk_batch_layout_of(&t2, &L2);
  unsigned char *b1 = malloc(L1.total_bytes), *b2 = malloc(L2.total_bytes);
  CHECK(stk_build_reference(&s, NULL, 0, 0, 0, b1, L1.total_bytes, NULL, 0) == 0);
  CHECK(stk_build_reference(&t2, NULL, 0, 0, 0, b2, L2.total_bytes, NULL, 0) == 0);
  int mism = 0;
  for (int c = 0; c < 3; c++)
    for (int y = 0; y < 32; y++)
      for (int x = 0; x < 32; x++)
        mism += b1[(c * 32 + y) * 32 + x] != b2[(y * 32 + x) * 3 + c];
  CHECK(mism == 0);
  free(b1);
  free(b2);
}

int main(void) {
  test_perm_bijection();
  test_rank_coverage();
  test_in_order();
  test_rng();
  test_crc();
  test_spec_roundtrip();
  test_same_bytes();
  CHECK_DONE();
}
