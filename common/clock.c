/* clock.c - monotonic time, sleep and timed condition-variable waits (see
 * common/clock.h). Owns no state. pthread_cond_clockwait (glibc >= 2.30,
 * bookworm has 2.36) takes the clock per wait, so no condition variable in
 * the tree needs a pthread_condattr_setclock at init: a variable
 * initialised the plain way can never silently wait on CLOCK_REALTIME.
 */
#define _GNU_SOURCE /* pthread_cond_clockwait */
#include "common/clock.h"

#include <errno.h>
#include <time.h>

int64_t stk__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t stk__now_ms(void) { return stk__now_ns() / 1000000; }

void stk__sleep_ms(int64_t ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

int stk__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ms) {
  struct timespec ts = {(time_t)(deadline_ms / 1000),
                        (long)(deadline_ms % 1000) * 1000000};
  if (deadline_ms < 0) ts.tv_sec = 0, ts.tv_nsec = 0;
  int rc = pthread_cond_clockwait(cv, mu, CLOCK_MONOTONIC, &ts);
  return rc == ETIMEDOUT ? ETIMEDOUT : 0;
}

int stk__cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms) {
  return stk__cond_wait_until(cv, mu, stk__now_ms() + (ms > 0 ? ms : 0));
}
