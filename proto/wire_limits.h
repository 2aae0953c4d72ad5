/* wire_limits.h - sizes of strings that every peer of the wire (the
 * coordinator, the worker, libstoker) agrees on, so that no side accepts
 * what another truncates. A string over its limit is refused with a clear
 * error, never truncated. Plain macros, no code.
 */
#ifndef STOKER_WIRE_LIMITS_H
#define STOKER_WIRE_LIMITS_H

/* Worker ids, worker addresses and client ids: bytes including the
 * terminating NUL, so at most STK_MAX_ID_BYTES - 1 = 255 bytes of text.
 * The coordinator refuses a longer one at registration (INVALID_ARGUMENT)
 * and at Join; libstoker skips a longer one in a worker list. */
#define STK_MAX_ID_BYTES 256

#endif
