/* worker.h - stoker-worker's internal header: its options, its state with
 * the rule that guards each field, and the functions one of its files
 * calls in another. Only the files of server/worker/ include it.
 *
 * Threads: main (options, start-up, the run loop, the drain), the session
 * thread (session.c: the job, the heartbeat's stats, the coordinator's
 * commands), the rpc layer's threads (streams.c), the builder threads
 * (fairsched.c: bad samples), the metrics thread (GET /metrics).
 */
#ifndef STOKER_SERVER_WORKER_WORKER_H
#define STOKER_SERVER_WORKER_WORKER_H

#include <pthread.h>
#include <stdint.h>

#include "daemon.h"
#include "metrics.h"
#include "rpc/rpc.h"
#include "fairsched.h"
#include "session.h"
#include "stoker/augment.h"
#include "stoker.pb-c.h"

/* ---- Options (worker.c) ------------------------------------------------
 *
 * Set by stk__options_parse in main before any other thread starts, read
 * only afterwards, so every thread reads them without a lock. */
typedef struct worker_opts {
  char *coordinator, *listen, *advertise, *data_root, *token, *token_file, *port_file,
      *log_level, *metrics_listen, *client_token_file, *plugin_dir, *python_path,
      *calibrate, *instance_type;
  stk__tls_opts tls;
  long long threads, batch_buffers, max_outstanding, chunk_bytes, drain_timeout_s,
      orphan_timeout_s, stats_interval_s, max_message_mb, max_file_mb, max_pixels,
      fault_transient_every, bad_log_per_10s, calibrate_s;
  stk__serve_opts serve;
} worker_opts;

extern worker_opts opt;

/* calibrate.c: `--calibrate JOB`: build the job's batches on this thread
 * for opt.calibrate_s seconds (dataset under opt.data_root, the worker's
 * limits) and print "images_per_cpu_s=N ..." on stdout. Returns the exit
 * code: 0 printed, 1 the dataset or a build failed, 2 a bad job file
 * (said on stderr). Call from main only, instead of serving. */
int worker_calibrate(void);

/* ---- State (defined in worker.c) -------------------------------------- */

/* A layout's tensors as BatchHeader descriptors (pointing into it). */
typedef struct stk__tdescs {
  Stoker__V1__TensorDesc d[STK_MAX_TENSORS];
  Stoker__V1__TensorDesc *ptr[STK_MAX_TENSORS];
  uint64_t shapes[STK_MAX_TENSORS][STK_MAX_DIMS];
} stk__tdescs;

typedef struct worker_state {
  pthread_mutex_t mu; /* guards have_job and busy_fraction */
  /* set by main before the server and the session start, read-only until
   * main frees it at exit */
  stk__tls *tls; /* --tls-*: serving and the coordinator session; NULL = plaintext */
  /* The Worker.Stream server, for the session thread to install the
   * coordinator's stream ticket in (worker.c's on_ticket). Under worker.c's
   * srv_mu: main sets it before the session starts and NULLs it before it
   * stops the server. */
  stk__rpc_server *srv;
  /* The job (worker_job.c, on_job on the session thread). Everything from spec
   * to sch is written once, before have_job is set under mu, and never
   * again: a thread that saw have_job (current_sched() != NULL) reads
   * them without a lock. main closes ds after the session stopped. */
  int have_job;
  stk_job_spec spec; /* resolved: num_samples = dataset size */
  uint64_t job_hash; /* hash of the resolved spec: what streams carry */
  uint64_t steps;    /* per epoch per rank */
  stk_batch_layout layout;
  stk__tdescs td;
  stk_batch_layout layout8; /* the uint8-image twin (image_uint8 requests) */
  stk__tdescs td8;
  stk_dataset *ds;
  char **class_ptrs; /* ImageFolder: ds's class names for the hello, or NULL */
  uint32_t nclasses; /* ds's class count (0: not an ImageFolder) */
  uint64_t nskipped; /* ds's skipped files, and the first few for Status */
  uint32_t nskipped_ex;
  char *skipped_ex[8];
  char skipped_buf[8][256];
  sched *sch;
  /* Run state: set by on_command (worker_job.c) and drain (worker.c), read
   * everywhere; atomics (release/acquire), never cleared. */
  int draining;     /* atomic */
  int shutdown_cmd; /* atomic */
  int aborted;      /* atomic: the shutdown said the job failed */
  /* streams.c's counters (relaxed atomics; the stats line and /metrics
   * read stream_errors) */
  uint64_t dropped_requests; /* atomic: asked while draining */
  uint64_t stream_errors;    /* atomic */
  uint32_t threads;          /* main, before the session starts; read-only afterwards */
  double cpu_cores;          /* usable cores (common/cpulimit.h): main, at start;
                                read-only afterwards */
  /* heartbeat rate bookkeeping (stats.c, fill_stats: session thread only) */
  int64_t last_ms;
  uint64_t last_built, last_busy;
  double last_cpu_s;  /* process CPU seconds at the last heartbeat */
  double per_cpu_s;   /* batches per CPU-second, the last measured */
  uint64_t cap_built; /* batches and CPU since per_cpu_s was last set */
  double cap_cpu_s;
  double busy_fraction;   /* the last heartbeat's, for /metrics (under mu) */
  double per_cpu_s_shown; /* per_cpu_s, for /metrics (under mu) */
} worker_state;

extern worker_state W;

/* ---- The job and the coordinator's commands (worker_job.c) ------------- */

/* The dataset limits the worker's options set (--max-file-mb,
 * --max-pixels, --plugin-dir, --python-path): what worker_job.c and calibrate.c
 * open the dataset with. Pure; the strings point into opt. */
void worker_limits(stk_limits *lim);
/* The scheduler once the job is loaded, else NULL. The scheduler lives
 * until main destroys it at exit. Any thread (takes W.mu). */
sched *current_sched(void);
/* session_hooks.on_job: load the coordinator's job (the dataset, the
 * builders) the first time, check it is the same job afterwards. 0; -1
 * with err for another job, -2 when this worker cannot open the dataset
 * or start the builders (nothing is kept then). Session thread only. */
int on_job(const char *canonical, uint64_t hash, uint64_t *job_hash,
           uint64_t *dataset_size, uint64_t *fp, char *err, size_t errlen);
/* session_hooks.fill_hello: the dataset's class count and names (the
 * names while they fit the wire limits), pointing into W's dataset and
 * W.class_ptrs. Session thread, after on_job. */
void fill_hello(Stoker__V1__Register *reg);
/* session_hooks.on_command: Drain, Shutdown or Shutdown{failed} (reason:
 * untrusted, escaped before it is logged). Sets W.draining (and
 * W.shutdown_cmd, W.aborted) and drains the scheduler. Session thread. */
void on_command(int cmd, const char *reason);

/* ---- Worker.Stream (streams.c) ----------------------------------------- */

/* The rpc layer's handlers for /stoker.v1.Worker/Stream; they run on the
 * rpc layer's threads and never block. */
extern const stk__rpc_stream_ops stream_ops;

/* ---- Stats: heartbeat, stats line, /metrics (stats.c) ------------------ */

/* session_hooks.fill_stats: the heartbeat's stats, rates since the last
 * heartbeat; nothing before the job is loaded. Session thread only
 * (W.last_*). out's bad-sample fields point at static arrays, valid until
 * the next call. */
void fill_stats(Stoker__V1__WorkerStats *out);

/* One stats line (greppable: "stats state=..."); *last carries the
 * previous line's time and counters for the rates. */
typedef struct stats_mark {
  int64_t ms;
  uint64_t bytes, built;
} stats_mark;

/* Log one stats line at time now (lost: the coordinator is unreachable).
 * main thread (the caller owns *last). */
void stats_log(stk__rpc_server *srv, int64_t now, int lost, stats_mark *last);
/* stk__metrics_fn for GET /metrics (metrics.c's HTTP thread): the scheduler's
 * counters, the build-time histogram, the bad samples by reason. Nothing
 * in it is withheld from anyone (full is ignored). */
void worker_metrics(stk__metrics_buf *b, int full, void *ud);
/* systemd: READY=1 once registered with a job (and the dataset open);
 * STATUS= with the rate when stats_due. main thread only. */
void notify_progress(session *sess, int stats_due);

/* ---- Bad samples (bad_samples.c) ----------------------------------------
 *
 * The counts by reason, the last few bad samples and the log rate limit
 * live in bad_samples.c under its own lock; every function here is
 * thread-safe. */

/* stk_bad_sample_fn: the dataset calls it once per distinct bad sample
 * (any builder thread). Counted, kept among the last few, logged within
 * --bad-log-per-10s. */
void on_bad_sample(void *ud, const char *path, const char *why);
/* Cut the dataset's directory (realpath under --data-root) from the
 * paths of bad samples from now on, and take the job's bad_samples
 * policy for the log's words. */
void bad_set_prefix(const stk_job_spec *spec);
/* The heartbeat's bad-sample fields. They point at static arrays: the
 * session thread only, and valid until its next call. */
void bad_fill_stats(Stoker__V1__WorkerStats *out);
/* Append stoker_worker_bad_samples_total{reason} to b. */
void bad_metrics(stk__metrics_buf *b);

#endif
