/* memtune.h - glibc malloc settings for a process that moves gRPC
 * traffic (memtune.c): the daemons and libstoker call it once at start;
 * the daemons also trim periodically. Part of the RPC layer (rpc/).
 *
 * Nothing here prints, exits or aborts.
 */
#ifndef STOKER_RPC_MEMTUNE_H
#define STOKER_RPC_MEMTUNE_H

#include <stdint.h>

/* Keep glibc from handing gRPC's receive buffers back to the kernel after
 * every message (mmap threshold 32 MiB, trim threshold 64 MiB), so they
 * are reused instead of being faulted in again, and cap glibc's arenas
 * at max_arenas unless MALLOC_ARENA_MAX is set. On this project's 2-core
 * VM the thresholds took a client from ~1.0 to ~0.33 CPU s per GB received
 * (docs/benchmarks.md, "Transport"). The arena cap decides how much free
 * heap a process holds: gRPC reads into 64 KiB buffers on its own threads
 * and they are freed on others, so every arena those threads use keeps a
 * pool of free buffers of its own, each as large as the most that arena
 * ever had in flight, and the sum grows for an hour as bursts land in
 * different arenas (a rank with 4 arenas held 60-110 MiB free, its RSS
 * rising in steps; with one arena its free heap stays below the batches
 * it can have in flight: docs/operations.md, "Multi-day jobs").
 * libstoker passes STK__MALLOC_ARENAS_CLIENT (a few io threads and
 * gRPC's); the daemons pass STK__MALLOC_ARENAS_DAEMON (a worker's builder
 * threads allocate per image in parallel and would queue on one arena's
 * lock) and trim (stk__rpc_malloc_tick). Process-wide and set once: the
 * daemons call it at start; libstoker calls it when a networked client
 * opens unless the environment has STOKER_MALLOC_TUNING=0, and never
 * overrides a MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ the user
 * set. The first call decides; later ones return 1 and change nothing.
 * Thread-safe. Returns 1 if the settings are stoker's, 0 if it left them
 * alone. */
#define STK__MALLOC_ARENAS_CLIENT 1
#define STK__MALLOC_ARENAS_DAEMON 4
int stk__rpc_tune_malloc(int max_arenas);

/* The daemons' half of the tuning: every STK__MALLOC_TRIM_MS,
 * malloc_trim(0) hands the free pages inside every arena back to the
 * kernel (the thresholds above keep up to 64 MiB free per arena
 * otherwise, and free chunks between used ones are never returned by
 * themselves). A trim costs a walk of the free lists plus, later,
 * faulting in again the pages that are reused: every 10 s that is well
 * under 0.1 % of a core. libstoker does not trim: with its one arena the
 * free heap is bounded by what can be in flight, and a trim would only
 * turn its RSS into a saw-tooth (pages handed back, faulted in again by
 * the next burst). Call it from a thread that wakes periodically anyway
 * (the daemons' main loop) with stk__now_ms(); process-wide, at most one
 * trim per period whoever calls, nothing unless stk__rpc_tune_malloc
 * changed the settings. Thread-safe. */
#define STK__MALLOC_TRIM_MS 10000
void stk__rpc_malloc_tick(int64_t now_ms);

#endif
