/* common/costmodel.h - the price-performance model: what a training step
 * costs on a given shape (accelerator instances plus data hosts), from
 * measured figures only, and the search over shapes behind `stoker plan`.
 * Also the instance table (types, vCPU, accelerators, network, $/h) it
 * prices shapes with: deploy/instances.tsv, overridable by a user file.
 *
 * The model, one formula (docs/price-performance.md):
 *
 *   step = max(compute, I / D)
 *   D    = min(R, L / b, S / (b c)) x (1 - r_a b c) + r_a S   (local loading)
 *   D    = min(R, L / b, S / (b c))                          (data hosts only)
 *   D    = r_a S                                             (homogeneous)
 *
 * I images per step; b bytes per image on the wire; S the cores the
 * accelerator hosts spare for loading and receiving; r_a images per
 * CPU-second on the accelerator host's CPU; R = data hosts x usable cores
 * x their images per CPU-second; L the link (min of the accelerator hosts'
 * and the data hosts' NICs, bytes/s); c the accelerator host's receiving
 * cost (CPU-seconds per byte). The term that sets the step is named:
 * compute, data supply, link, or receive.
 *
 * Pure arithmetic plus one file reader (stk__instances_load, stdio); owns
 * nothing, allocates nothing (the caller owns every struct); every
 * function is thread-safe on distinct arguments. */
#ifndef STOKER_COMMON_COSTMODEL_H
#define STOKER_COMMON_COSTMODEL_H

#include <stddef.h>
#include <stdint.h>

/* ---- the instance table ------------------------------------------- */

#define STK_INSTANCE_NAME_MAX 48
#define STK_INSTANCES_MAX     256

typedef struct stk__instance {
  char name[STK_INSTANCE_NAME_MAX]; /* "ml.p4d.24xlarge" */
  char accel_kind[24];              /* "A100-40GB", "-" for CPU types */
  double vcpu;                      /* may be fractional (a CPU quota) */
  uint32_t accelerators;            /* 0 for CPU types */
  double nic_gbps;                  /* network, Gbit/s (burst: "up to") */
  double usd_per_hour;              /* on-demand price of one instance */
  int approx;                       /* 1: the price is approximate */
  int burst;                        /* 1: the network figure is "up to" */
} stk__instance;

typedef struct stk__instance_table {
  stk__instance v[STK_INSTANCES_MAX];
  size_t n;
} stk__instance_table;

/* Parse instance-table text onto *t: one type per line, fields separated
 * by blanks or tabs, '#' to the end of the line a comment, blank lines
 * skipped:
 *   name  vcpu  accelerators  accel_kind  gbit  usd_per_hour  flags
 * accel_kind "-" for CPU types; usd_per_hour a number ($ per instance-hour)
 * or "N/core" ($ per core-hour, times vcpu: on-prem); flags "-" or a comma
 * list of "approx" (the price is approximate) and "burst" (the network is
 * "up to" gbit). A name already in *t is replaced (a user file overrides
 * the shipped one), else appended. label names the text in messages
 * ("instances.tsv"). Returns 0, or STK_INVALID_ARGUMENT with "label:line:
 * why" in err (lines before the bad one are kept), or when the table is
 * full. Thread-safe on distinct tables. */
int stk__instances_parse(stk__instance_table *t, const char *text, const char *label,
                         char *err, size_t errlen);

/* stk__instances_parse of a file (at most 1 MiB), label = path. STK_IO
 * with the reason in err when it cannot be read. */
int stk__instances_load(stk__instance_table *t, const char *path, char *err,
                        size_t errlen);

/* The type called name, or NULL. The pointer lives as long as *t. */
const stk__instance *stk__instances_find(const stk__instance_table *t, const char *name);

/* ---- the model ----------------------------------------------------- */

/* Binding terms, in the order their ties are broken. */
enum {
  STK_CM_BIND_NONE = 0, /* no answer (figures missing) */
  STK_CM_BIND_COMPUTE,  /* the accelerators: the step is their compute time */
  STK_CM_BIND_SUPPLY,   /* the CPUs that build batches */
  STK_CM_BIND_LINK,     /* the network between data hosts and accelerators */
  STK_CM_BIND_RECEIVE   /* the accelerator host's CPU taking batches in */
};
/* "compute", "data supply", "link", "receive", or "-". */
const char *stk__cm_bind_name(int bind);

/* The job and the accelerator side, measured. A figure <= 0 is missing
 * (recv_cpu_s_per_gb: < 0 missing, 0 allowed). */
typedef struct stk__cm_job {
  double images_per_step;   /* global batch: batch_size x world_size */
  double bytes_per_image;   /* on the wire (the batch payload / batch) */
  uint64_t samples;         /* per epoch; 0 = unknown ($/epoch missing) */
  double compute_s;         /* step compute time: step minus stall */
  double recv_cpu_s_per_gb; /* the training host's receiving cost */
} stk__cm_job;

/* One shape: accel_count hosts of accel, each sparing local_cores cores
 * for loading and receiving (loading with them in the homogeneous shape,
 * and in heterogeneous shapes when local_loading is set) at accel_rate
 * images per CPU-second; data_count hosts of data (NULL when 0), each
 * with data_cores usable cores (<= 0: all its vCPU) at data_rate. */
typedef struct stk__cm_shape {
  const stk__instance *accel;
  uint32_t accel_count;
  double local_cores;
  double accel_rate;
  int local_loading;
  const stk__instance *data;
  uint32_t data_count;
  double data_cores;
  double data_rate;
} stk__cm_shape;

typedef struct stk__cm_result {
  int ok;                          /* 0: missing says what is missing; nothing else set */
  char missing[256];               /* "missing: ..." */
  int bind;                        /* STK_CM_BIND_* */
  double step_s;                   /* max(compute, data) */
  double compute_s, data_s;        /* the two sides of the max */
  double supply_s, link_s, recv_s; /* I / each bound alone (0: no bound) */
  double util;                     /* compute / step */
  double usd_per_hour, usd_per_step;
  double usd_per_epoch;   /* < 0 when the job's samples are unknown */
  double steps_per_epoch; /* 0 when unknown */
  double local_images_per_s, remote_images_per_s; /* at full supply */
} stk__cm_result;

/* Predict one shape. Always fills *out; out->ok = 0 with out->missing
 * naming the first figure the answer needs and lacks (the step compute
 * time, a price, an images-per-CPU-second rate, the batch bytes, the
 * receiving cost), never a guess. Returns out->ok. Pure; thread-safe. */
int stk__cm_predict(const stk__cm_job *job, const stk__cm_shape *shape,
                    stk__cm_result *out);

/* ---- the search ---------------------------------------------------- */

#define STK_CM_CANDIDATES_MAX 16

typedef struct stk__cm_candidate {
  const stk__instance *type; /* a CPU type that could be a data host */
  double rate;               /* images per CPU-second on it; <= 0 missing */
  double cores;              /* usable cores per host; <= 0: all its vCPU */
} stk__cm_candidate;

typedef struct stk__cm_search {
  stk__cm_job job;
  stk__cm_shape base;               /* the accelerator side (its data fields ignored) */
  const stk__instance_table *table; /* for larger types of accel's family */
  stk__cm_candidate cand[STK_CM_CANDIDATES_MAX];
  size_t ncand;
  uint32_t max_data_hosts; /* 0..N of each candidate */
} stk__cm_search;

typedef struct stk__cm_option {
  stk__cm_shape shape;
  stk__cm_result r;
  int larger; /* 1: homogeneous on a larger type of the same family */
  int cheapest;
} stk__cm_option;

/* Every option, in this order: homogeneous on base.accel; homogeneous on
 * each larger type of its family in the table (same name up to the last
 * '.', more vCPU: the same accelerators busy on as few of them as hold
 * them, the same cores per busy accelerator taken by training, the rest
 * of their vCPU spare); then for
 * each candidate, 1..max_data_hosts data hosts. Writes at most cap options
 * to out and returns how many there are in all; marks the one with the
 * lowest $/step among those with an answer (ties: the fewer hosts, the
 * earlier) and sets *cheapest to its index, or -1 when none has an answer.
 * Pure; thread-safe. */
size_t stk__cm_search_run(const stk__cm_search *s, stk__cm_option *out, size_t cap,
                          int *cheapest);

/* 1 when name can be an instance type's name: 1..STK_INSTANCE_NAME_MAX-1
 * bytes of letters, digits and ". _ - : / +" (what the table, the daemons'
 * --instance-type / --accel-type / --data-type and a worker's hello
 * accept); 0 otherwise (NULL too). Pure. */
int stk__instance_name_ok(const char *name);

/* "ml.p3" for "ml.p3.2xlarge" (up to the last '.'), into buf. */
void stk__instance_family(const char *name, char *buf, size_t len);

#endif
