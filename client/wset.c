/* wset.c - the working set's arithmetic (wset.h: the formulas and why).
 * Owns nothing; pure functions, thread-safe. Must not: depend on the
 * client's structures (the unit test compiles this file alone). */
#include "wset.h"

#include <math.h>

uint64_t stk__wset_id_hash(const char *id) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *p = (const unsigned char *)id; *p; p++) {
    h ^= *p;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t stk__wset_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double stk__wset_score(uint64_t job_hash, uint32_t rank, uint64_t id_hash,
                       uint32_t cores) {
  uint64_t h = stk__wset_mix(id_hash ^ stk__wset_mix(job_hash ^ stk__wset_mix(rank)));
  double u = ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); /* (0, 1) */
  return -(double)(cores ? cores : 1) / log(u);
}

int stk__wset_covers(uint64_t job_hash, uint32_t rank, uint32_t world, uint64_t id_hash) {
  if (world <= 1) return 1;
  return stk__wset_mix(id_hash ^ job_hash) % world == rank;
}

/* a ranks before b: a higher score, or the same and a lower index. */
static int before(const double *score, uint32_t a, uint32_t b) {
  return score[a] > score[b] || (score[a] == score[b] && a < b);
}

/* Sift heap[i] down in a heap of n whose root is the worst kept. */
static void sift_down(const double *score, uint32_t *heap, uint32_t n, uint32_t i) {
  for (;;) {
    uint32_t l = 2 * i + 1, r = l + 1, w = i;
    if (l < n && before(score, heap[w], heap[l])) w = l;
    if (r < n && before(score, heap[w], heap[r])) w = r;
    if (w == i) return;
    uint32_t t = heap[i];
    heap[i] = heap[w], heap[w] = t;
    i = w;
  }
}

uint32_t stk__wset_top(const double *score, uint32_t n, uint32_t t, uint32_t *top) {
  uint32_t m = 0;
  if (!t) return 0;
  for (uint32_t i = 0; i < n; i++) {
    if (m < t) {
      /* sift up: the root stays the worst kept */
      uint32_t j = m++;
      top[j] = i;
      while (j > 0) {
        uint32_t p = (j - 1) / 2;
        if (!before(score, top[p], top[j])) break;
        uint32_t x = top[p];
        top[p] = top[j], top[j] = x;
        j = p;
      }
    } else if (before(score, i, top[0])) {
      top[0] = i;
      sift_down(score, top, m, 0);
    }
  }
  /* heap sort: the worst to the end, so top ends best first */
  for (uint32_t end = m; end > 1; end--) {
    uint32_t x = top[0];
    top[0] = top[end - 1], top[end - 1] = x;
    sift_down(score, top, end - 1, 0);
  }
  return m;
}
