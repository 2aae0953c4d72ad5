/* common/error.h - the one printf-style error setter. Functions across the
 * tree report failures as (status, message in a caller's err/errlen
 * buffer); this fills the buffer and hands the status back, so a failure
 * path is one line: `return stk__errf(err, errlen, STK_IO, "...", ...);`.
 */
#ifndef STOKER_COMMON_ERROR_H
#define STOKER_COMMON_ERROR_H

#include <stddef.h>

/* Format fmt into err (truncated to errlen - 1 bytes, always terminated)
 * when err is non-NULL and errlen > 0; do nothing to err otherwise.
 * Returns status unchanged. err must not overlap an argument. Thread-safe
 * (touches only err). */
int stk__errf(char *err, size_t errlen, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
