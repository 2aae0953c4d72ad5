/* prof.c - the image pipeline's part timers (prof.h): the process-wide
 * switch and each thread's sums. */
#include "augment/prof.h"

#include <string.h>

int stk__prof_on;
__thread stk__prof stk__prof_acc;

void stk__prof_enable(int on) {
  __atomic_store_n(&stk__prof_on, on ? 1 : 0, __ATOMIC_RELAXED);
}

void stk__prof_take(stk__prof *out) {
  *out = stk__prof_acc;
  memset(&stk__prof_acc, 0, sizeof(stk__prof_acc));
}
