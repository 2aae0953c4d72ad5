/* common/advice.h - the verdict on a job's balance: input-bound (how many
 * data workers would remove the stall) or compute-bound (how many could
 * go). One formula for libstoker's stk_client_stats (what the train loop
 * prints per rank) and the job-wide verdict of `stoker status`. */
#ifndef STOKER_COMMON_ADVICE_H
#define STOKER_COMMON_ADVICE_H

#include <stdint.h>

/* Stall share of the loop time above which a rank counts as input-bound. */
#define STK_INPUT_BOUND_STALL 0.02
/* Busy share a data worker should stay under when sizing the fleet down. */
#define STK_WORKER_TARGET_BUSY 0.8

/* Per delivered batch a training loop spends `compute` (time between
 * next() calls, not blocked) plus `stall`; the workers deliver one batch
 * per (compute + stall), so matching one batch per compute needs
 * workers x (1 + stall / compute). compute below 1 counts as 1 (same unit
 * as stall). */
double stk__workers_needed(double workers, double stall, double compute);

enum {
  STK_VERDICT_UNKNOWN = 0,
  STK_VERDICT_INPUT_BOUND,
  STK_VERDICT_COMPUTE_BOUND,
  STK_VERDICT_BALANCED
};

typedef struct stk__verdict {
  int kind;               /* STK_VERDICT_* */
  double workers_needed;  /* input-bound: workers that would remove the stall */
  uint32_t workers_spare; /* compute-bound: workers that could go */
} stk__verdict;

/* The job-wide verdict from the reported figures: `workers` live data
 * workers whose busy fractions sum to busy_sum, and the largest stall
 * fraction of any rank (synchronous training runs at the slowest rank's
 * pace); nranks == 0 or workers == 0 gives UNKNOWN. Input-bound when the
 * stall is above STK_INPUT_BOUND_STALL (workers_needed by
 * stk__workers_needed); else compute-bound when fewer workers, each at
 * most STK_WORKER_TARGET_BUSY busy, would carry the load (workers_spare);
 * else balanced. Pure; thread-safe. */
void stk__job_verdict(uint32_t workers, double busy_sum, uint32_t nranks,
                      double max_stall_fraction, stk__verdict *out);

#endif
