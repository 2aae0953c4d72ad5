/* test_client_wset.c - the working set's arithmetic (client/wset.c, compiled
 * into this test): N ranks each pick their k workers of M by weighted
 * rendezvous hashing plus coverage, exactly as client_workers.c does, and this
 * checks the properties the design rests on:
 *   - stk__wset_top is the top t by score, best first (against a sort);
 *   - determinism: the same (job, rank, id, cores) always scores the same,
 *     and another job hash picks other sets;
 *   - weighting: with k = 1, a worker is the top of a share of ranks
 *     proportional to its cores (within 15%);
 *   - stability: a worker joining moves only the ranks whose set it
 *     enters (each swaps exactly one worker for it), about N*k/(M+1) of
 *     them; a worker leaving moves only the ranks that had it;
 *   - coverage: every worker is in some rank's set, for (N, M) = (2, 300),
 *     (512, 32), (3, 6), (1000, 1000), (64, 1) and (1, 5).
 * Prints the figures it checks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "client/wset.h"

#define JOB 0x1234abcd5678ef01ull

/* Worker i's id as a coordinator makes them (host:pid:start). */
static uint64_t wid(int i) {
  char id[64];
  snprintf(id, sizeof(id), "data-%d.example:%d:17000%05d", i / 8, 4000 + i, i);
  return stk__wset_id_hash(id);
}

/* Rank r's set over workers ids[0..m) with cores[]: in[i] = 1 if i is in
 * it (the top k, plus every worker r covers). Returns its size. */
static uint32_t rank_set(uint64_t job, uint32_t r, uint32_t world, const uint64_t *ids,
                         const uint32_t *cores, uint32_t m, uint32_t k,
                         unsigned char *in) {
  double *score = calloc(m ? m : 1, sizeof(*score));
  uint32_t *top = calloc(k ? k : 1, sizeof(*top));
  if (!score || !top) {
    free(score), free(top);
    return 0;
  }
  for (uint32_t i = 0; i < m; i++) {
    score[i] = stk__wset_score(job, r, ids[i], cores ? cores[i] : 1);
    in[i] = (unsigned char)stk__wset_covers(job, r, world, ids[i]);
  }
  uint32_t n = stk__wset_top(score, m, k, top);
  for (uint32_t j = 0; j < n; j++) in[top[j]] = 1;
  uint32_t size = 0;
  for (uint32_t i = 0; i < m; i++) size += in[i];
  free(score);
  free(top);
  return size;
}

static int cmp_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void test_top(void) {
  srand(7);
  for (int round = 0; round < 200; round++) {
    uint32_t n = (uint32_t)(rand() % 50), t = (uint32_t)(rand() % 60);
    double s[50], sorted[50];
    uint32_t top[60];
    for (uint32_t i = 0; i < n; i++) sorted[i] = s[i] = (double)(rand() % 1000);
    qsort(sorted, n, sizeof(double), cmp_desc);
    uint32_t got = stk__wset_top(s, n, t, top);
    CHECK(got == (t < n ? t : n));
    for (uint32_t j = 0; j < got; j++) CHECK(s[top[j]] == sorted[j]);
    for (uint32_t j = 0; j + 1 < got; j++)
      if (s[top[j]] == s[top[j + 1]]) CHECK(top[j] < top[j + 1]); /* ties: lower index */
  }
}

static void test_determinism(void) {
  uint64_t a = wid(3), b = wid(4);
  CHECK(a != b);
  CHECK(stk__wset_score(JOB, 5, a, 2) == stk__wset_score(JOB, 5, a, 2));
  CHECK(stk__wset_score(JOB, 5, a, 2) > 0);
  CHECK(stk__wset_score(JOB, 5, a, 0) == stk__wset_score(JOB, 5, a, 1));
  CHECK(stk__wset_covers(JOB, 0, 1, a) == 1);
  /* another job (or rank) gives other sets */
  uint64_t ids[100];
  for (int i = 0; i < 100; i++) ids[i] = wid(i);
  unsigned char x[100], y[100], z[100];
  rank_set(JOB, 1, 1000, ids, NULL, 100, 8, x);
  rank_set(JOB, 1, 1000, ids, NULL, 100, 8, y);
  CHECK(memcmp(x, y, sizeof(x)) == 0);
  rank_set(JOB ^ 1, 1, 1000, ids, NULL, 100, 8, z);
  CHECK(memcmp(x, z, sizeof(x)) != 0);
}

static void test_weighting(void) {
  enum { M = 12, N = 60000 };
  uint64_t ids[M];
  uint32_t cores[M], total = 0, wins[M] = {0};
  for (int i = 0; i < M; i++) {
    ids[i] = wid(i);
    cores[i] = (uint32_t)(1 + i % 4); /* 1, 2, 3, 4 cores */
    total += cores[i];
  }
  for (uint32_t r = 0; r < N; r++) {
    double best = -1;
    int bi = 0;
    for (int i = 0; i < M; i++) {
      double s = stk__wset_score(JOB, r, ids[i], cores[i]);
      if (s > best) best = s, bi = i;
    }
    wins[bi]++;
  }
  double worst = 0;
  for (int i = 0; i < M; i++) {
    double want = (double)N * cores[i] / total, ratio = wins[i] / want;
    if (ratio < 1 && 1 / ratio > worst) worst = 1 / ratio;
    if (ratio > worst) worst = ratio;
    CHECK(ratio > 0.85 && ratio < 1.15);
  }
  printf("weighting: %d ranks, %d workers of 1-4 cores: worst share / cores ratio %.3f\n",
         N, M, worst);
}

static void test_stability(void) {
  enum { N = 1000, M = 100, K = 8 };
  uint64_t ids[M + 1];
  for (int i = 0; i <= M; i++) ids[i] = wid(i);
  /* coverage left out (world = 1 would cover everything): the HRW part */
  unsigned char *before = malloc((size_t)N * (M + 1)),
                *after = malloc((size_t)N * (M + 1));
  int moved = 0, bad = 0;
  for (uint32_t r = 0; r < N; r++) {
    unsigned char *b = before + (size_t)r * (M + 1), *a = after + (size_t)r * (M + 1);
    double s[M + 1];
    uint32_t top[K];
    memset(b, 0, M + 1);
    memset(a, 0, M + 1);
    for (int i = 0; i <= M; i++) s[i] = stk__wset_score(JOB, r, ids[i], 1);
    uint32_t n = stk__wset_top(s, M, K, top); /* without worker M */
    for (uint32_t j = 0; j < n; j++) b[top[j]] = 1;
    n = stk__wset_top(s, M + 1, K, top); /* worker M joined */
    for (uint32_t j = 0; j < n; j++) a[top[j]] = 1;
    if (!memcmp(a, b, M + 1)) continue;
    moved++;
    /* it entered this set and pushed out exactly one worker */
    int out = 0;
    for (int i = 0; i < M; i++) out += b[i] && !a[i];
    if (!a[M] || out != 1) bad++;
  }
  double expect = (double)N * K / (M + 1);
  printf(
      "stability: a worker joining %d workers moved %d of %d ranks (N*k/(M+1) = %.1f)\n",
      M, moved, N, expect);
  CHECK(bad == 0);
  CHECK(moved > 0.6 * expect && moved < 1.4 * expect);
  /* leaving: removing worker 0 changes only the ranks that had it */
  int left_moved = 0, left_bad = 0;
  for (uint32_t r = 0; r < N; r++) {
    unsigned char *b = before + (size_t)r * (M + 1);
    double s[M];
    uint32_t top[K];
    unsigned char a[M];
    memset(a, 0, sizeof(a));
    for (int i = 0; i < M; i++) s[i] = i == 0 ? -1 : stk__wset_score(JOB, r, ids[i], 1);
    uint32_t n = stk__wset_top(s, M, K, top);
    for (uint32_t j = 0; j < n; j++) a[top[j]] = 1;
    a[0] = b[0]; /* compare the others */
    int changed = memcmp(a, b, M) != 0;
    left_moved += changed;
    if (changed != b[0]) left_bad++;
  }
  printf("stability: a worker leaving moved %d ranks (those that had it)\n", left_moved);
  CHECK(left_bad == 0);
  free(before);
  free(after);
}

static void test_coverage(void) {
  static const uint32_t cases[][3] = {{2, 300, 8},     {512, 32, 8}, {3, 6, 2},
                                      {1000, 1000, 8}, {64, 1, 8},   {1, 5, 2}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    uint32_t n = cases[c][0], m = cases[c][1], k = cases[c][2];
    uint64_t *ids = malloc(m * sizeof(*ids));
    unsigned char *in = malloc(m), *any = calloc(m, 1);
    for (uint32_t i = 0; i < m; i++) ids[i] = wid((int)i);
    uint32_t maxsize = 0;
    uint64_t total = 0;
    for (uint32_t r = 0; r < n; r++) {
      uint32_t size = rank_set(JOB, r, n, ids, NULL, m, k, in);
      total += size;
      if (size > maxsize) maxsize = size;
      for (uint32_t i = 0; i < m; i++) any[i] |= in[i];
    }
    uint32_t covered = 0;
    for (uint32_t i = 0; i < m; i++) covered += any[i];
    printf(
        "coverage: N=%u M=%u k=%u: %u/%u workers in some set; set size mean %.1f, "
        "max %u\n",
        n, m, k, covered, m, (double)total / n, maxsize);
    CHECK(covered == m);
    free(ids);
    free(in);
    free(any);
  }
}

int main(void) {
  test_top();
  test_determinism();
  test_weighting();
  test_stability();
  test_coverage();
  CHECK_DONE();
}
