/* test_common.c - common/: stk__errf (NULL buffer, truncation, the status
 * handed back), the monotonic clock, stk__sleep_ms, and timed waits on
 * CLOCK_MONOTONIC (a timeout, a wake-up before it, a deadline already
 * past). Time bounds are generous: the machine may be loaded. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "common/clock.h"
#include "common/error.h"
#include "stoker/status.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int flag;

static void *waker(void *arg) {
  (void)arg;
  stk__sleep_ms(20);
  pthread_mutex_lock(&mu);
  flag = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  return NULL;
}

int main(void) {
  char buf[16];
  CHECK(stk__errf(buf, sizeof(buf), STK_IO, "file %s: %d", "x", 42) == STK_IO);
  CHECK(strcmp(buf, "file x: 42") == 0);
  CHECK(stk__errf(buf, sizeof(buf), STK_LIMIT, "%s", "a message far too long") ==
        STK_LIMIT);
  CHECK(strlen(buf) == sizeof(buf) - 1 && memcmp(buf, "a message far t", 15) == 0);
  CHECK(stk__errf(NULL, 10, STK_CORRUPT, "ignored") == STK_CORRUPT);
  buf[0] = 'z';
  CHECK(stk__errf(buf, 0, STK_OK, "ignored") == STK_OK && buf[0] == 'z');

  int64_t t0 = stk__now_ms(), n0 = stk__now_ns();
  CHECK(t0 >= 0 && n0 >= 0);
  stk__sleep_ms(30);
  stk__sleep_ms(0);
  stk__sleep_ms(-5);
  int64_t t1 = stk__now_ms();
  CHECK(t1 - t0 >= 30); /* at least the time asked; no upper bound: a loaded machine */
  CHECK(stk__now_ns() - n0 >= 30 * 1000000LL);

  /* Nobody signals: the wait times out after about 50 ms. */
  pthread_mutex_lock(&mu);
  t0 = stk__now_ms();
  int rc = 0;
  while (rc == 0) rc = stk__cond_wait_until(&cv, &mu, t0 + 50);
  t1 = stk__now_ms();
  CHECK(rc == ETIMEDOUT);
  CHECK(t1 - t0 >= 50);
  /* A deadline already past (or negative) returns at once. */
  CHECK(stk__cond_wait_until(&cv, &mu, t0 - 1000) == ETIMEDOUT);
  CHECK(stk__cond_wait_until(&cv, &mu, -1) == ETIMEDOUT);
  CHECK(stk__cond_wait_ms(&cv, &mu, 0) == ETIMEDOUT);
  pthread_mutex_unlock(&mu);

  /* A signal ends the wait long before a 10 s timeout. */
  pthread_t th;
  CHECK(pthread_create(&th, NULL, waker, NULL) == 0);
  pthread_mutex_lock(&mu);
  t0 = stk__now_ms();
  while (!flag && stk__cond_wait_ms(&cv, &mu, 10000) == 0) {}
  t1 = stk__now_ms();
  CHECK(flag == 1);
  CHECK(t1 - t0 < 5000);
  pthread_mutex_unlock(&mu);
  pthread_join(th, NULL);
  CHECK_DONE();
}
