/* prof.h - the image pipeline's part timers, for `stoker-bench augment
 * --profile`: ticks of the CPU's time-stamp counter (a monotonic clock's
 * nanoseconds where there is none) spent in each part of a sample's work,
 * summed per thread. Off unless stk__prof_enable(1): then every part's
 * start and end read the counter; off, a part costs one test of a global
 * flag.
 *
 * Thread-safety: each thread sums into its own counters (stk__prof_take
 * reads the calling thread's); the flag is process-wide.
 */
#ifndef STOKER_AUGMENT_PROF_H
#define STOKER_AUGMENT_PROF_H

#include <stdint.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

/* The parts: reading the files (open, stat, the batched read), the JPEG
 * header and region decode, the resampler's horizontal pass (with its
 * weights) and vertical pass, and the store into the batch (dtype,
 * layout, normalize). */
enum {
  STK__PROF_READ,
  STK__PROF_DECODE,
  STK__PROF_HPASS,
  STK__PROF_VPASS,
  STK__PROF_STORE,
  STK__PROF_N
};

typedef struct stk__prof {
  uint64_t ticks[STK__PROF_N];
} stk__prof;

extern int stk__prof_on;
extern __thread stk__prof stk__prof_acc;

/* Turn the timers on (1) or off (0), for every thread. */
void stk__prof_enable(int on);
/* The calling thread's sums into *out, then zeroed. */
void stk__prof_take(stk__prof *out);

/* The counter now (never 0). */
static inline uint64_t stk__prof_ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc() | 1;
#else
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) | 1;
#endif
}

/* A part's start: the counter when the timers are on, else 0. */
static inline uint64_t stk__prof_start(void) {
  return __builtin_expect(__atomic_load_n(&stk__prof_on, __ATOMIC_RELAXED), 0)
             ? stk__prof_ticks()
             : 0;
}

/* The part started at *t (from stk__prof_start; 0: timers off, nothing
 * done) ends now: its ticks go to `part`, and *t becomes now, the start of
 * whatever follows. */
static inline void stk__prof_lap(int part, uint64_t *t) {
  if (__builtin_expect(*t != 0, 0)) {
    uint64_t now = stk__prof_ticks();
    stk__prof_acc.ticks[part] += now - *t;
    *t = now;
  }
}

#endif
