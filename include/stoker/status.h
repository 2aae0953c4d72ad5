/* stoker/status.h - the one status enum shared by every stoker library.
 *
 * Every public call returns an stk_status (0 = OK). The enum and
 * stk_strerror() are generated from one X-macro so they cannot drift.
 * Codes are only ever appended: their numbers are part of the ABI (the
 * Python binding and other FFIs compare against them).
 */
#ifndef STOKER_STATUS_H
#define STOKER_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(STK_BUILDING_LIBRARY)
#define STK_EXPORT __attribute__((visibility("default")))
#else
#define STK_EXPORT
#endif

/* X(name, number, message) */
#define STK_STATUS_MAP(X)                                                   \
  X(OK, 0, "ok")                                                            \
  X(END_OF_EPOCH, 1, "end of epoch")                                        \
  X(END_OF_DATA, 2, "end of data: every epoch of the job was delivered")    \
  X(INVALID_ARGUMENT, 3, "invalid argument")                                \
  X(NO_MEMORY, 4, "out of memory")                                          \
  X(IO, 5, "input/output error")                                            \
  X(CORRUPT, 6, "corrupt or unsupported input")                             \
  X(LIMIT, 7, "a configured limit was exceeded")                            \
  X(UNAVAILABLE, 8, "service unavailable")                                  \
  X(TIMEOUT, 9, "timed out")                                                \
  X(MISMATCH, 10, "job spec hash mismatch")                                 \
  X(PROTOCOL, 11, "protocol error from peer")                               \
  X(CANCELLED, 12, "cancelled")                                             \
  X(UNSUPPORTED, 13, "not supported here")                                  \
  X(STATE, 14, "call not valid in the current state")                       \
  X(NOT_FOUND, 15, "not found")                                             \
  X(INTERNAL, 16, "internal error")                                         \
  X(INTERRUPTED, 17, "interrupted (stk_interrupt or stk_client_interrupt)") \
  X(USER_CODE, 18, "user code failed (a python or plugin op raised)")

typedef enum stk_status {
#define STK__STATUS_ENUM(name, num, msg) STK_##name = num,
  STK_STATUS_MAP(STK__STATUS_ENUM)
#undef STK__STATUS_ENUM
} stk_status;

/* Static English text for a status code; never NULL ("unknown status" for
 * a number outside the map). Thread-safe. */
STK_EXPORT const char *stk_strerror(int status);

#ifdef __cplusplus
}
#endif
#endif
