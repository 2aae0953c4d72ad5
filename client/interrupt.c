/* interrupt.c - waking libstoker's blocking calls: stk_interrupt (every
 * call in progress in the process) and stk_client_interrupt (one client's,
 * sticky until a blocking call of that client takes it). Both only store
 * to a lock-free atomic, so a signal handler may call them; the blocking
 * waits (next's, the join's, finish's) poll stk__interrupted at least
 * every STK__INTR_POLL_MS and return STK_INTERRUPTED.
 *
 * Owns: the process-wide interrupt generation and c->intr_pending. Must
 * not: lock, allocate or call anything that is not async-signal-safe in
 * the two public functions.
 */
#include "common/clock.h"
#include "client_internal.h"

/* stk_interrupt's count: a call snapshots it when it starts and is
 * interrupted once it moves. 32 bits: lock-free everywhere. */
static uint32_t g_intr_gen;

void stk_interrupt(void) { __atomic_add_fetch(&g_intr_gen, 1, __ATOMIC_SEQ_CST); }

void stk_client_interrupt(stk_client *c) {
  if (c) __atomic_store_n(&c->intr_pending, 1, __ATOMIC_SEQ_CST);
}

uint32_t stk__intr_gen(void) { return __atomic_load_n(&g_intr_gen, __ATOMIC_SEQ_CST); }

int stk__interrupted(const stk_client *c, uint32_t gen) {
  if (__atomic_load_n(&g_intr_gen, __ATOMIC_SEQ_CST) != gen) return 1;
  return c && __atomic_load_n(&c->intr_pending, __ATOMIC_SEQ_CST);
}

void stk__intr_take(stk_client *c) {
  if (c) __atomic_store_n(&c->intr_pending, 0, __ATOMIC_SEQ_CST);
}

int stk__intr_stop(void *arg) {
  const stk__intr_ctx *x = arg;
  return stk__interrupted(x->c, x->gen);
}

int stk__intr_sleep_ms(const stk_client *c, uint32_t gen, int ms) {
  while (ms > 0) {
    if (stk__interrupted(c, gen)) return 1;
    int step = ms < STK__INTR_POLL_MS ? ms : STK__INTR_POLL_MS;
    stk__sleep_ms(step);
    ms -= step;
  }
  return stk__interrupted(c, gen);
}
