/* common/advice.h - the verdict on a job's balance, in cores of the
 * job's pipeline: input-bound (how many more cores of data-worker CPU
 * would remove the stall), compute-bound (which workers could go), or
 * what figure is missing to say either. One module for libstoker's
 * stk_client_stats (what the train loop prints per rank) and the
 * job-wide verdict of `stoker status` (text, --json and /metrics). */
#ifndef STOKER_COMMON_ADVICE_H
#define STOKER_COMMON_ADVICE_H

#include <stddef.h>
#include <stdint.h>

/* Stall share of the loop time above which a rank counts as input-bound. */
#define STK_INPUT_BOUND_STALL 0.02
/* "could go" only while the remaining workers' measured capacity covers
 * the demand with this margin (1.25 = 25% to spare). */
#define STK_SPARE_MARGIN 1.25
/* A rank whose loop spends less than this per batch outside next() has
 * no step time to judge a stall against (a loop that only drains
 * batches: any supply stalls it). */
#define STK_MIN_STEP_MS 1.0

/* Per delivered batch a training loop spends `compute` (time between
 * next() calls, not blocked) plus `stall`; the workers deliver one batch
 * per (compute + stall), so matching one batch per compute needs
 * workers x (1 + stall / compute). compute below 1 counts as 1 (same unit
 * as stall). Pure. */
double stk__workers_needed(double workers, double stall, double compute);

/* The cores a worker can build with: the CPU it may use (cpu_cores: its
 * quota or affinity) capped by its builder threads (one core each at
 * most). cpu_cores 0 = not told: 0 (unknown); threads 0 = not told:
 * cpu_cores. Pure. */
double stk__worker_usable_cores(double cpu_cores, uint32_t threads);

/* One data worker as its heartbeat reports it. */
typedef struct stk__worker_fig {
  double cores; /* the CPU it can build with (stk__worker_usable_cores; 0 = not told) */
  double per_cpu_s; /* measured batches per CPU-second (0 = not yet) */
  double busy;      /* CPU used / cores, last interval */
} stk__worker_fig;

/* One rank as its stats report (ClientStats) says. */
typedef struct stk__rank_fig {
  double stall;         /* stall fraction of its loop time */
  double step_ms;       /* loop time per batch outside next() (0 = unknown) */
  double batches_per_s; /* batches its loop takes per second now */
} stk__rank_fig;

enum {
  STK_VERDICT_UNKNOWN = 0, /* a figure is missing: see missing */
  STK_VERDICT_INPUT_BOUND,
  STK_VERDICT_COMPUTE_BOUND,
  STK_VERDICT_BALANCED
};

typedef struct stk__verdict {
  int kind;               /* STK_VERDICT_* */
  uint32_t workers;       /* live workers counted */
  uint32_t nranks;        /* ranks counted */
  double max_stall;       /* the slowest rank's stall fraction */
  double step_ms;         /* that rank's step time outside next() */
  double demand_bps;      /* batches/s the ranks take with no stall */
  double cores;           /* the workers' usable cores, summed */
  double cores_needed;    /* input-bound: cores of this pipeline the demand needs */
  double cores_more;      /* input-bound: cores_needed - cores (0: the CPU is there) */
  double workers_needed;  /* cores_needed in workers of the current mean size */
  uint32_t workers_spare; /* compute-bound: workers that could go */
  double capacity_bps;    /* the workers' measured capacity, batches/s */
  double per_cpu_s;       /* the workers' batches per CPU-second (capacity / cores) */
  char missing[200];      /* UNKNOWN: what is missing, for "missing: ..." */
} stk__verdict;

/* The job-wide verdict from the figures of the live workers (w, nw) and
 * of the ranks that reported lately (r, nr). Synchronous training runs
 * at the slowest rank's pace: the stall judged is the largest, against
 * that rank's own step time.
 * - UNKNOWN with `missing` set when there is no live worker, no rank
 *   report, a worker that did not tell its cores, or (input-bound) no
 *   step time (below STK_MIN_STEP_MS) or no measured capacity.
 * - INPUT_BOUND above STK_INPUT_BOUND_STALL: the demand is one batch per
 *   step time per rank; cores_needed = demand / (batches per CPU-second).
 * - COMPUTE_BOUND when the workers with the largest measured capacity
 *   cover the demand (the ranks' batches/s) times STK_SPARE_MARGIN
 *   without the others (workers_spare of them); a worker with no
 *   measured capacity keeps every worker (BALANCED).
 * - BALANCED otherwise.
 * Pure; thread-safe. */
void stk__job_verdict(const stk__worker_fig *w, uint32_t nw, const stk__rank_fig *r,
                      uint32_t nr, stk__verdict *out);

/* The verdict as one sentence ("input-bound: about 1.2 more cores of
 * this pipeline's CPU ...", "missing: ..."), into buf (always
 * terminated). Pure. */
void stk__verdict_text(const stk__verdict *v, char *buf, size_t len);

/* Its --json / metrics name: "input-bound", "compute-bound", "balanced",
 * "unknown". */
const char *stk__verdict_name(int kind);

#endif
