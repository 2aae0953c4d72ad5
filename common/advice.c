/* advice.c - input-bound / compute-bound verdicts in cores of the job's
 * pipeline (see advice.h). Pure arithmetic; owns nothing. */
#include "advice.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double stk__workers_needed(double workers, double stall, double compute) {
  if (compute < 1.0) compute = 1.0;
  return workers * (1.0 + stall / compute);
}

const char *stk__verdict_name(int kind) {
  switch (kind) {
    case STK_VERDICT_INPUT_BOUND:
      return "input-bound";
    case STK_VERDICT_COMPUTE_BOUND:
      return "compute-bound";
    case STK_VERDICT_BALANCED:
      return "balanced";
    default:
      return "unknown";
  }
}

/* finite and positive, else 0 (the figures come off the wire) */
static double pos(double x) { return isfinite(x) && x > 0 ? x : 0; }

static int by_capacity_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

double stk__worker_usable_cores(double cpu_cores, uint32_t threads) {
  if (!(cpu_cores > 0) || !isfinite(cpu_cores)) return 0; /* not told: unknown */
  return threads && (double)threads < cpu_cores ? (double)threads : cpu_cores;
}

void stk__job_verdict(const stk__worker_fig *w, uint32_t nw, const stk__rank_fig *r,
                      uint32_t nr, stk__verdict *out) {
  memset(out, 0, sizeof(*out));
  out->workers = nw, out->nranks = nr;
  if (!nw) {
    snprintf(out->missing, sizeof(out->missing), "a live worker");
    return;
  }
  if (!nr) {
    snprintf(out->missing, sizeof(out->missing),
             "the ranks' stall (no rank has reported; ranks report every 2 s)");
    return;
  }
  /* the slowest rank: the largest stall, judged against its own step */
  double stall = 0, step = 0, max_step = 0, bps = 0;
  for (uint32_t i = 0; i < nr; i++) {
    double s = pos(r[i].stall) > 1 ? 1 : pos(r[i].stall);
    if (i == 0 || s > stall) stall = s, step = pos(r[i].step_ms);
    if (pos(r[i].step_ms) > max_step) max_step = pos(r[i].step_ms);
    bps += pos(r[i].batches_per_s);
  }
  out->max_stall = stall, out->step_ms = step;
  uint32_t untold = 0, unmeasured = 0;
  double cap_cores = 0;
  for (uint32_t i = 0; i < nw; i++) {
    double c = pos(w[i].cores), p = pos(w[i].per_cpu_s);
    out->cores += c;
    untold += c == 0;
    unmeasured += p == 0;
    if (c > 0 && p > 0) out->capacity_bps += c * p, cap_cores += c;
  }
  if (cap_cores > 0) out->per_cpu_s = out->capacity_bps / cap_cores;
  if (untold) {
    snprintf(out->missing, sizeof(out->missing),
             "the usable cores of %u of %u workers (a stoker-worker that does not "
             "register them: upgrade it)",
             untold, nw);
    return;
  }
  if (stall > STK_INPUT_BOUND_STALL) {
    if (step < STK_MIN_STEP_MS) {
      if (step > 0)
        snprintf(out->missing, sizeof(out->missing),
                 "a step time: the slowest rank spends %.3f ms per batch outside next() "
                 "(a loop that only drains batches stalls on any supply; "
                 "stoker-train-loop: --step-ms)",
                 step);
      else
        snprintf(out->missing, sizeof(out->missing),
                 "the ranks' step time (a client that reports it; the slowest "
                 "rank stalls %.1f%%)",
                 100 * stall);
      return;
    }
    if (out->per_cpu_s <= 0) {
      snprintf(out->missing, sizeof(out->missing),
               "the workers' measured capacity (batches per CPU-second, measured "
               "after a few heartbeats of building); the slowest rank stalls %.1f%%",
               100 * stall);
      return;
    }
    /* synchronous ranks take one batch each per step of the slowest */
    out->kind = STK_VERDICT_INPUT_BOUND;
    out->demand_bps = (double)nr * 1000.0 / (max_step > step ? max_step : step);
    out->cores_needed = out->demand_bps / out->per_cpu_s;
    out->cores_more = out->cores_needed > out->cores ? out->cores_needed - out->cores : 0;
    out->workers_needed = out->cores_needed / (out->cores / (double)nw);
    return;
  }
  out->demand_bps = bps;
  if (unmeasured || bps <= 0) {
    /* no stall, and nothing to tell whether fewer workers would do */
    out->kind = STK_VERDICT_BALANCED;
    if (unmeasured)
      snprintf(out->missing, sizeof(out->missing),
               "the measured capacity of %u of %u workers", unmeasured, nw);
    else snprintf(out->missing, sizeof(out->missing), "the ranks' batch rate");
    return;
  }
  double *cap = malloc(nw * sizeof(*cap));
  if (!cap) {
    out->kind = STK_VERDICT_BALANCED;
    return;
  }
  for (uint32_t i = 0; i < nw; i++) cap[i] = pos(w[i].cores) * pos(w[i].per_cpu_s);
  qsort(cap, nw, sizeof(*cap), by_capacity_desc);
  double sum = 0, want = bps * STK_SPARE_MARGIN;
  uint32_t keep = 0;
  while (keep < nw && sum < want) sum += cap[keep++];
  free(cap);
  if (sum >= want && keep < nw) {
    out->kind = STK_VERDICT_COMPUTE_BOUND;
    out->workers_spare = nw - keep;
  } else {
    out->kind = STK_VERDICT_BALANCED;
  }
}

void stk__verdict_text(const stk__verdict *v, char *buf, size_t len) {
  if (!len) return;
  switch (v->kind) {
    case STK_VERDICT_INPUT_BOUND:
      if (v->cores_more > 0)
        snprintf(buf, len,
                 "input-bound: about %.1f more cores of this pipeline's CPU would remove "
                 "the stall (%.1f batches/s for %u ranks at a %.1f ms step need about "
                 "%.1f cores at the measured %.2f batches per CPU-second; the %u workers "
                 "have %.2f; the slowest rank stalls %.1f%%)",
                 v->cores_more, v->demand_bps, v->nranks, v->step_ms, v->cores_needed,
                 v->per_cpu_s, v->workers, v->cores, 100 * v->max_stall);
      else
        snprintf(buf, len,
                 "input-bound, but not for want of worker CPU: the %u workers have %.2f "
                 "cores, the demand (%.1f batches/s) needs about %.1f; look at the link, "
                 "the receiving host's CPU and the prefetch depth (the slowest rank "
                 "stalls %.1f%%)",
                 v->workers, v->cores, v->demand_bps, v->cores_needed,
                 100 * v->max_stall);
      break;
    case STK_VERDICT_COMPUTE_BOUND:
      snprintf(buf, len,
               "compute-bound: %u of %u workers could go (the others' measured capacity "
               "covers the ranks' %.1f batches/s with %.0f%% to spare; ranks stall at "
               "most %.1f%%)",
               v->workers_spare, v->workers, v->demand_bps, 100 * (STK_SPARE_MARGIN - 1),
               100 * v->max_stall);
      break;
    case STK_VERDICT_BALANCED:
      if (v->missing[0])
        snprintf(buf, len,
                 "balanced: no rank stalls (at most %.1f%%); whether fewer workers would "
                 "do is not known (missing: %s)",
                 100 * v->max_stall, v->missing);
      else
        snprintf(buf, len,
                 "balanced: no rank stalls (at most %.1f%%) and every worker is needed "
                 "(fewer would not cover %.1f batches/s with %.0f%% to spare)",
                 100 * v->max_stall, v->demand_bps, 100 * (STK_SPARE_MARGIN - 1));
      break;
    default:
      snprintf(buf, len, "no verdict: missing: %s", v->missing);
      break;
  }
}
