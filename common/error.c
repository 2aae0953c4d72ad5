/* error.c - stk__errf, the printf-style error setter (see common/error.h).
 * Owns nothing; never allocates or prints. */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>

int stk__errf(char *err, size_t errlen, int status, const char *fmt, ...) {
  if (!err || !errlen) return status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return status;
}
