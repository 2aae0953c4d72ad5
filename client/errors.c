/* errors.c - how a client fails: the fatal status that ends it (any
 * thread, under c->mu) and the caller's last-error string.
 *
 * Owns: c->errs. Must not: take c->mu itself (its callers hold it where
 * the prototype says so), print, or abort.
 */
#include <pthread.h>
#include <stdio.h>

#include "client_internal.h"

void stk__set_fatal(stk_client *c, int status, const char *msg) {
  /* under mu */
  if (c->errs.fatal) return;
  c->errs.fatal = status;
  snprintf(c->errs.fatal_msg, sizeof(c->errs.fatal_msg), "%s", msg);
  pthread_cond_broadcast(&c->cv_next);
  pthread_cond_broadcast(&c->cv_copy);
  pthread_cond_broadcast(&c->cv_sched);
}

void stk__seterr(stk_client *c, const char *fmt, const char *arg) {
  snprintf(c->errs.last, sizeof(c->errs.last), fmt, arg);
}

int stk__fatal_check(stk_client *c) {
  /* under mu */
  if (c->errs.fatal)
    snprintf(c->errs.last, sizeof(c->errs.last), "%s", c->errs.fatal_msg);
  return c->errs.fatal;
}
