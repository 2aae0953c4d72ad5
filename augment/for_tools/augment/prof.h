/* prof.h - the image pipeline's part timers, for `stoker-bench augment
 * --profile`: the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID, so
 * time spent waiting for a core is not counted) spent in each part of a
 * sample's work, summed per thread. Parts that run per row (the vertical
 * pass and the store, interleaved) are timed together on the CPU clock and
 * split in the ratio of their time-stamp-counter ticks. Off unless
 * stk__prof_enable(1); off, a part costs one test of a global flag.
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
  uint64_t ns[STK__PROF_N]; /* CPU nanoseconds per part */
} stk__prof;

extern int stk__prof_on;
extern __thread stk__prof stk__prof_acc;

/* Turn the timers on (1) or off (0), for every thread. */
void stk__prof_enable(int on);
/* The calling thread's sums into *out, then zeroed. */
void stk__prof_take(stk__prof *out);

/* The calling thread's CPU time in nanoseconds (never 0). */
static inline uint64_t stk__prof_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) | 1;
}

/* A cheap counter for splitting a part in two: the time-stamp counter, a
 * monotonic clock's nanoseconds where there is none. */
static inline uint64_t stk__prof_ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

/* A part's start: the CPU time when the timers are on, else 0. */
static inline uint64_t stk__prof_start(void) {
  return __builtin_expect(__atomic_load_n(&stk__prof_on, __ATOMIC_RELAXED), 0)
             ? stk__prof_cpu_ns()
             : 0;
}

/* The part started at *t (from stk__prof_start; 0: timers off, nothing
 * done) ends now: its CPU time goes to `part`, and *t becomes now, the
 * start of whatever follows. */
static inline void stk__prof_lap(int part, uint64_t *t) {
  if (__builtin_expect(*t != 0, 0)) {
    uint64_t now = stk__prof_cpu_ns();
    stk__prof_acc.ns[part] += now - *t;
    *t = now;
  }
}

/* As stk__prof_lap, the CPU time split between parts a and b in the
 * ratio ta : tb (their ticks). */
static inline void stk__prof_split(int a, int b, uint64_t *t, uint64_t ta, uint64_t tb) {
  if (__builtin_expect(*t != 0, 0)) {
    uint64_t now = stk__prof_cpu_ns(), d = now - *t;
    uint64_t da = ta + tb ? (uint64_t)((double)d * (double)ta / (double)(ta + tb)) : d;
    stk__prof_acc.ns[a] += da;
    stk__prof_acc.ns[b] += d - da;
    *t = now;
  }
}

#endif
