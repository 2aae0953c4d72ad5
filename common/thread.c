/* thread.c - stk__thread_name (see common/thread.h). */
#define _GNU_SOURCE /* pthread_setname_np */
#include "common/thread.h"

#include <pthread.h>
#include <string.h>

void stk__thread_name(const char *name) {
  char n[16]; /* the kernel's limit, with the terminating NUL */
  size_t len = strlen(name);
  if (len > sizeof(n) - 1) len = sizeof(n) - 1;
  memcpy(n, name, len);
  n[len] = 0;
  (void)pthread_setname_np(pthread_self(), n);
}
