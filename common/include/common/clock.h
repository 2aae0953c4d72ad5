/* common/clock.h - the one monotonic clock, sleep and timed
 * condition-variable wait of the tree. Every deadline is on
 * CLOCK_MONOTONIC, so a wall-clock jump (NTP step, manual date change)
 * never stretches or shortens a wait.
 */
#ifndef STOKER_COMMON_CLOCK_H
#define STOKER_COMMON_CLOCK_H

#include <pthread.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds / milliseconds (arbitrary origin, only
 * differences mean anything). Thread-safe, never fail. */
int64_t stk__now_ns(void);
int64_t stk__now_ms(void);

/* Sleep ms milliseconds (nothing for ms <= 0), resuming after a signal
 * handler interrupts it, so the whole time passes. Thread-safe. */
void stk__sleep_ms(int64_t ms);

/* With mu held, wait on cv until it is signalled (or wakes spuriously) or
 * until the monotonic clock reaches deadline_ms (a stk__now_ms() value).
 * Works on any condition variable, PTHREAD_COND_INITIALIZER included: the
 * clock is chosen per wait (pthread_cond_clockwait), not at init. Returns
 * 0 when woken, ETIMEDOUT when the deadline passed. Callers re-check their
 * predicate either way. */
int stk__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ms);
/* The same with a relative timeout of ms milliseconds from now. */
int stk__cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);

#endif
