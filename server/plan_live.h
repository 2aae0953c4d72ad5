/* plan_live.h - a running job's shape and measured figures, read from the
 * coordinator's Status reply, as the cost model's search (common/costmodel.h):
 * what `stoker plan --coordinator` prints and what `stoker status` turns
 * into a purchase ("add 2 x ml.c5.18xlarge ...: step 192 -> 88 ms, $/step
 * -45%"). Also where the CLI finds the shipped instance table. Pure except
 * stk__plan_table_load (reads files); owns nothing; the caller owns every
 * struct. Not thread-safe only where noted. */
#ifndef STOKER_SERVER_PLAN_LIVE_H
#define STOKER_SERVER_PLAN_LIVE_H

#include <stddef.h>
#include <stdint.h>

#include "common/costmodel.h"
#include "stoker.pb-c.h"
#include "stoker/core.h"

/* Load the shipped instance table (next to this program's install, else
 * the configured prefix, else the source tree's) onto *t, then the user's
 * file user (NULL or "" = none) over it. *shipped gets the path used (a
 * static buffer). 0, or -1 with "the shipped instance table: why" or
 * "--instances: why" in err. Not thread-safe (the static path). */
int stk__plan_table_load(stk__instance_table *t, const char *user, const char **shipped,
                         char *err, size_t errlen);

/* What the caller overrides; zero / "" = take it from the reply. */
typedef struct stk__live_opts {
  const char *accel;       /* the training hosts' type, instead of Status.accel_type */
  uint32_t accel_count;    /* instead of Status.accel_hosts (else world / accelerators) */
  const char *data;        /* candidate data-host types, comma-separated, besides the
                              live data workers' types and Status.data_type */
  const char *worker_type; /* the type of workers that did not tell theirs */
  double spare_cores;      /* per training host, for loading and receiving */
  double recv;             /* receiving cost CPU-s/GB, instead of the ranks' */
  uint32_t max_data_hosts; /* try up to this many (0 = 4); at least now + 3 */
  const char *const *rates; /* "TYPE=N": images per CPU-second calibrated on
                               TYPE (what one of its hosts serves), instead
                               of the workers' figure; nrates of them */
  size_t nrates;
} stk__live_opts;

/* The job as running, priced. */
typedef struct stk__live_plan {
  stk__cm_search s;
  stk_job_spec spec;
  const stk__instance *now_data; /* the data hosts' type now (NULL: none) */
  uint32_t now_data_count;       /* data hosts now (distinct worker hosts) */
  uint32_t local_workers, data_workers;
  uint32_t nranks;         /* ranks that reported in the last 30 s */
  double step_ms_measured; /* the slowest such rank's step (0: none) */
  double stall_measured;   /* its stall fraction */
  int spare_assumed, recv_assumed, accel_rate_assumed;
  char notes[512]; /* what was assumed, "; "-separated ("" = nothing) */
} stk__live_plan;

/* Fill *p from the Status reply r and the table t (which must outlive *p).
 * Figures: images per step and bytes per image from the job; the step's
 * compute time from the slowest reporting rank's step_ms (its loop time
 * outside next()); images per CPU-second per instance type from the
 * workers' batches_per_cpu_s (workers of the training hosts' type load
 * locally); data hosts = distinct hosts of the other workers, their cores
 * the workers' cpu_cores summed per host; the receiving cost the highest a
 * rank reported; the measured step 1000 / the slowest rank's batches per
 * second. Candidates: the live data workers' types (measured), then
 * Status.data_type and o->data (a type not measured takes the workers'
 * mean rate, said in notes); o->rates overrides a type's rate (said). A figure the model
 * needs and lacks stays missing (each option then says so). Returns 0, or -1 with
 * "missing:
 * ..." (no training hosts' type, an unknown type, no job) or the reason in
 * err. Pure. */
int stk__live_plan_build(const Stoker__V1__StatusResponse *r,
                         const stk__instance_table *t, const stk__live_opts *o,
                         stk__live_plan *p, char *err, size_t errlen);

/* The index of the running shape among the search's options (out, n), or
 * -1 when it is not one of them. Pure. */
int stk__live_current(const stk__live_plan *p, const stk__cm_option *out, size_t n);

/* The purchase in one sentence, into buf: "keep ...", "add K x TYPE to the
 * data hosts: step A -> B ms, $/step -P%", "remove ...", "go homogeneous",
 * "replace ...", with the binding term and where the link starts to bind;
 * or "missing: ..." when no option could be priced. best and cur as
 * stk__cm_search_run / stk__live_current gave them. Pure. */
void stk__live_purchase(const stk__live_plan *p, const stk__cm_option *out, size_t n,
                        int best, int cur, char *buf, size_t len);

/* "2 x ml.p4d.24xlarge + 3 x ml.c5.18xlarge" (homogeneous / larger
 * marked), into buf. Pure. */
void stk__plan_shape_label(const stk__cm_option *o, char *buf, size_t len);

#endif
