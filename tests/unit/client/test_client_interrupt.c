/* test_client_interrupt.c - the blocking calls wake for a signal handler:
 *  - stk_client_open joining a coordinator that is not there (join
 *    timeout 120 s): a SIGALRM handler calling stk_interrupt() ends it
 *    with STK_INTERRUPTED, saying it was joining (not UNAVAILABLE, the
 *    timeout's outcome), and leaves no client behind;
 *  - stk_client_next on a local client whose batches take seconds (a
 *    synthetic job with a CPU cost per sample): a SIGALRM handler calling
 *    stk_client_interrupt(c) ends the wait with STK_INTERRUPTED; the
 *    client is intact: next_timed with a short limit is STK_TIMEOUT with
 *    no error text, and next then hands out step 0 (nothing lost);
 *  - a request made while no call blocks is taken by the next call that
 *    would block, once.
 * The timer repeats until the call returns, so the test never depends on
 * when the signal lands.
 */
#include <signal.h>
#include <string.h>
#include <sys/time.h>

#include "check.h"
#include "stoker/client.h"

static stk_client *volatile g_client; /* NULL: the handler interrupts all */

static void on_alarm(int sig) {
  (void)sig;
  if (g_client) stk_client_interrupt(g_client);
  else stk_interrupt();
}

static void timer_every_ms(int ms) {
  struct itimerval it;
  memset(&it, 0, sizeof(it));
  it.it_value.tv_usec = it.it_interval.tv_usec = ms * 1000;
  setitimer(ITIMER_REAL, &it, NULL);
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);

  /* 1. the join, through stk_interrupt */
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = "127.0.0.1:1"; /* nothing listens there */
  cfg.rank = 0, cfg.world_size = 1;
  cfg.join_timeout_ms = 120000;
  stk_client *c = NULL;
  char err[512] = "";
  timer_every_ms(300);
  int st = stk_client_open(&cfg, &c, err, sizeof(err));
  timer_every_ms(0);
  fprintf(stderr, "open: %s: %s\n", stk_strerror(st), err);
  CHECK(st == STK_INTERRUPTED);
  CHECK(c == NULL);
  CHECK(strstr(err, "interrupted while joining the job at 127.0.0.1:1") != NULL);

  /* 2. next, through stk_client_interrupt: 4 samples x 0.3 s a batch */
  const char *job =
      "source = synthetic\nnum_samples = 64\nheight = 8\nwidth = 8\n"
      "batch_size = 4\nworld_size = 1\nepochs = 1\nseed = 7\n"
      "synthetic_cost_us = 300000\n";
  cfg.prefetch = 1;
  st = stk_client_open_local(&cfg, job, NULL, &c, err, sizeof(err));
  CHECK(st == STK_OK);
  if (st != STK_OK) CHECK_DONE();
  g_client = c;
  stk_batch *b = NULL;
  timer_every_ms(100);
  st = stk_client_next(c, &b);
  timer_every_ms(0);
  g_client = NULL;
  fprintf(stderr, "next: %s: %s\n", stk_strerror(st), stk_client_error(c));
  CHECK(st == STK_INTERRUPTED && b == NULL);
  CHECK(strstr(stk_client_error(c), "interrupted while waiting for epoch 0 step 0") !=
        NULL);
  st = stk_client_next_timed(c, &b, 1);
  CHECK((st == STK_TIMEOUT && b == NULL && !*stk_client_error(c)) || st == STK_OK);
  if (st == STK_TIMEOUT) st = stk_client_next(c, &b);
  CHECK(st == STK_OK && b != NULL);
  if (b) {
    CHECK_EQ_U64(stk_batch_step(b), 0);
    stk_batch_release(b);
  }

  /* 3. a request while nothing blocks: the next call that would block
   * takes it, once (the following one waits for its batch) */
  stk_client_interrupt(c);
  b = NULL;
  st = stk_client_next(c, &b);
  for (int i = 0; i < 16 && st == STK_OK; i++) { /* ready ones come first */
    stk_batch_release(b);
    st = stk_client_next(c, &b);
  }
  CHECK(st == STK_INTERRUPTED);
  st = stk_client_next(c, &b);
  CHECK(st == STK_OK && b != NULL);
  if (st == STK_OK) stk_batch_release(b);
  stk_client_close(c);
  CHECK_DONE();
}
