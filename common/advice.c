/* advice.c - input-bound / compute-bound verdicts (see advice.h). Pure
 * arithmetic; owns nothing. */
#include "advice.h"

#include <math.h>

double stk__workers_needed(double workers, double stall, double compute) {
  if (compute < 1.0) compute = 1.0;
  return workers * (1.0 + stall / compute);
}

void stk__job_verdict(uint32_t workers, double busy_sum, uint32_t nranks,
                      double max_stall_fraction, stk__verdict *out) {
  out->kind = STK_VERDICT_UNKNOWN;
  out->workers_needed = 0;
  out->workers_spare = 0;
  if (!workers || !nranks) return;
  double f = max_stall_fraction < 0       ? 0
             : max_stall_fraction > 0.999 ? 0.999
                                          : max_stall_fraction;
  if (f > STK_INPUT_BOUND_STALL) {
    out->kind = STK_VERDICT_INPUT_BOUND;
    /* in fractions of the loop time: stall f, compute 1 - f (scaled up so
     * the floor of 1 in stk__workers_needed never bites) */
    out->workers_needed = stk__workers_needed(workers, f * 1e9, (1.0 - f) * 1e9);
    return;
  }
  double need = ceil(busy_sum / STK_WORKER_TARGET_BUSY);
  if (need < 1) need = 1;
  if (need < (double)workers) {
    out->kind = STK_VERDICT_COMPUTE_BOUND;
    out->workers_spare = (uint32_t)((double)workers - need);
  } else {
    out->kind = STK_VERDICT_BALANCED;
  }
}
