/* memtune.c - the process's malloc settings for gRPC's traffic: larger
 * mmap and trim thresholds and a cap on glibc's arenas (once per
 * process, stk__rpc_tune_malloc), and the daemons' periodic trim
 * (stk__rpc_malloc_tick). Why and the figures: rpc/memtune.h.
 *
 * Owns: two process-wide words (whether stoker tuned malloc, when the
 * next trim is due), both atomic. Must not: print, exit, or override a
 * setting the user made in the environment.
 */
#include "rpc/memtune.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

static int malloc_tuned;         /* stk__rpc_tune_malloc changed the settings */
static int64_t malloc_next_trim; /* stk__rpc_malloc_tick's next trim, ms */

int stk__rpc_tune_malloc(int max_arenas) {
  const char *opt = getenv("STOKER_MALLOC_TUNING");
  if ((opt && strcmp(opt, "0") == 0) || getenv("MALLOC_MMAP_THRESHOLD_") ||
      getenv("MALLOC_TRIM_THRESHOLD_"))
    return 0;
#ifdef M_MMAP_THRESHOLD
  if (__atomic_exchange_n(&malloc_tuned, 1, __ATOMIC_ACQ_REL)) return 1;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  if (!getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, max_arenas > 0 ? max_arenas : 1);
  return 1;
#else
  return 0;
#endif
}

void stk__rpc_malloc_tick(int64_t now_ms) {
  if (!__atomic_load_n(&malloc_tuned, __ATOMIC_ACQUIRE)) return;
  int64_t next = __atomic_load_n(&malloc_next_trim, __ATOMIC_ACQUIRE);
  if (now_ms < next) return;
  /* one caller per period, whichever thread (or client) gets there first */
  if (!__atomic_compare_exchange_n(&malloc_next_trim, &next, now_ms + STK__MALLOC_TRIM_MS,
                                   0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return;
  if (next == 0) return; /* the first tick only starts the clock */
  malloc_trim(0);
}
