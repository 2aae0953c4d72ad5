/* test_counter_width.c - the counters a long job reads never wrap: every
 * event count and byte count of the public stats structs (stk_stats,
 * stk_worker_stats) is 64 bits wide, checked at compile time (this file
 * does not build otherwise); at a million events a second, 2^64 lasts
 * 584,000 years. Counts bounded by a table's size (workers_alive,
 * nworkers, working_set...) are not event counters and stay 32 bits.
 * The daemons' own counters (server/worker/worker.h: dropped_requests,
 * stream_errors; the /metrics *_total families) are uint64_t as well.
 */
#include <stdint.h>
#include <stdio.h>

#include "stoker/client.h"

#define WIDE(type, field) \
  _Static_assert(sizeof(((type *)0)->field) == 8, #type "." #field " is 64 bits")

WIDE(stk_stats, batches);
WIDE(stk_stats, bytes);
WIDE(stk_stats, stall_ns);
WIDE(stk_stats, wall_ns);
WIDE(stk_stats, reissued);
WIDE(stk_stats, duplicates);
WIDE(stk_stats, crc_errors);
WIDE(stk_stats, substituted);
WIDE(stk_stats, hedges_sent);
WIDE(stk_stats, hedges_won);
WIDE(stk_stats, hedge_dropped);
WIDE(stk_worker_stats, batches);
WIDE(stk_worker_stats, bytes);

int main(void) {
  printf("test_counter_width: ok (checked at compile time)\n");
  return 0;
}
