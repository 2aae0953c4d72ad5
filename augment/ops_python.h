/* ops_python.h - what ops_python.c offers the image pipeline: the
 * `python(module:function, ...)` op, run in a Python process of the
 * builder's own (docs/pipelines.md, "Python ops"). Private to augment/
 * (and its tests).
 */
#ifndef STOKER_AUGMENT_OPS_PYTHON_H
#define STOKER_AUGMENT_OPS_PYTHON_H

#include <stddef.h>
#include <stdint.h>

#include "core/chain.h"

typedef struct stk__pyop stk__pyop;

/* The Python path of a process: limits_path if set, else
 * $STOKER_PYTHON_PATH, else NULL. */
const char *stk__pyop_path(const char *limits_path);

/* Check chain c's python ops once, at dataset open: a Python path is
 * given (path, directories joined by ':'), and a runner started with it
 * imports every op's module from those directories and finds its
 * function. STK_OK (also for a chain without python ops), or
 * STK_INVALID_ARGUMENT / STK_UNAVAILABLE (the interpreter did not start
 * or answer) with a message. Leaves no process behind. Thread-safe. */
int stk__pyop_check(const stk__chain *c, const char *path, char *err, size_t errlen);

/* The runner of chain c's python ops for one builder (NULL *out when c
 * has none: no cost). No process is started until the first
 * stk__pyop_apply. STK_OK, STK_NO_MEMORY, or STK_INVALID_ARGUMENT (no
 * Python path) with err. */
int stk__pyop_create(stk__pyop **out, const stk__chain *c, const char *path, char *err,
                     size_t errlen);
/* Stop its process (killed and reaped) and free it; NULL is fine. */
void stk__pyop_free(stk__pyop *p);

/* Run python op number `op` of the chain (its index in c->ops) on the RGB
 * image in (w x h x 3) with a numpy Generator seeded with seed, writing
 * the ow x oh x 3 result at out (not overlapping in). Starts (or
 * restarts) the process when needed. STK_OK; STK_USER_CODE when the
 * function raised or returned the wrong shape or dtype, or its module no
 * longer imports (why: "python op MOD:FN raised TYPE: MESSAGE", a line
 * break, then the traceback's last 2 KiB); STK_UNAVAILABLE when the
 * process crashed, exited, did not start or did not answer within the
 * timeout (it is killed and reaped, and the next call starts a new one:
 * ask again); STK_NO_MEMORY. One caller at a time (a builder's thread). */
int stk__pyop_apply(stk__pyop *p, uint32_t op, const uint8_t *in, uint32_t w, uint32_t h,
                    uint8_t *out, uint32_t ow, uint32_t oh, uint64_t seed, char *why,
                    size_t whylen);

/* Processes started by p so far (1 after the first call, +1 per restart);
 * for tests. */
uint64_t stk__pyop_starts(const stk__pyop *p);

#endif
