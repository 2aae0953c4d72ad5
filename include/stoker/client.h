/* stoker/client.h - libstoker, the client library linked into a training
 * process (one client per training rank).
 *
 * It joins a job at the coordinator, streams this rank's batches from a
 * bounded working set of the live workers (cfg.working_set; at most
 * `prefetch` requests outstanding, spread by shortest queue weighted by
 * each worker's observed rate), puts them back into step
 * order, and fills a ring of device slots from a copy thread while the
 * caller trains on the previous slot. If a worker fails, its outstanding
 * requests go to the others and duplicates are dropped: every step arrives
 * exactly once, in order, byte-identical to the reference batch.
 *
 * Rules: every call returns an stk_status (0 = STK_OK); the library never
 * aborts, exits or prints; per-handle error text via stk_client_error().
 * Unless a comment says otherwise, calls on one stk_client must not run
 * concurrently (one training loop drives one client); stk_client_stats()
 * may be called from any thread.
 */
#ifndef STOKER_CLIENT_H
#define STOKER_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/augment.h"
#include "stoker/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct stk_client stk_client;
typedef struct stk_batch stk_batch;

typedef enum stk_device {
  STK_DEVICE_CPU = 1, /* host memory slots (the default) */
  STK_DEVICE_CUDA = 2 /* device memory slots; CUDA runtime loaded at run time */
} stk_device;

typedef enum stk_convert {
  STK_CONVERT_NONE = 0,    /* tensors as the workers built them */
  STK_CONVERT_FLOAT32 = 1, /* uint8 image -> float32 NCHW, normalized */
  STK_CONVERT_BFLOAT16 = 2 /* uint8 image -> bfloat16 NCHW, normalized */
} stk_convert;

/* "Not given" values of stk_client_config: stk_client_open then takes the
 * field from the environment (stk_client_config_from_env). */
#define STK_RANK_FROM_ENV        UINT32_MAX /* cfg.rank */
#define STK_WORLD_SIZE_FROM_ENV  0u         /* cfg.world_size */
#define STK_CUDA_DEVICE_FROM_ENV (-1)       /* cfg.cuda_device */

/* Plain value; fill with stk_client_config_defaults() then override. The
 * strings are copied by stk_client_open. The defaults leave coordinator,
 * rank, world_size and cuda_device "not given", so a process started by a
 * launcher needs no arguments at all (see stk_client_config_from_env). */
typedef struct stk_client_config {
  const char *coordinator;  /* "host:port" of stoker-coordinator; NULL or ""
                               = $STOKER_COORDINATOR */
  uint32_t rank;            /* this training rank, < world_size; default
                               STK_RANK_FROM_ENV */
  uint32_t world_size;      /* must equal the job's world_size; default 0 =
                               STK_WORLD_SIZE_FROM_ENV */
  uint32_t prefetch;        /* outstanding batch requests, default 8 */
  uint32_t slots;           /* device ring slots, >= 2, default 2 */
  int32_t device;           /* stk_device, default STK_DEVICE_CPU */
  int32_t cuda_device;      /* CUDA ordinal; default STK_CUDA_DEVICE_FROM_ENV
                               ($LOCAL_RANK, else 0) */
  void *cuda_stream;        /* the caller's cudaStream_t (NULL = legacy
                               default stream): batches are ordered
                               before work on it, see stk_client_next */
  int32_t convert;          /* stk_convert, default NONE */
  const char *token;        /* bearer token; NULL or "" = $STOKER_TOKEN, else
                               the first line of the file $STOKER_TOKEN_FILE
                               names, else none */
  const void *resume_state; /* from stk_client_save_state, NULL = start;
                               may come from a job of another world_size
                               (elastic resume, see save_state) */
  size_t resume_len;
  uint32_t join_timeout_ms; /* keep trying to join this long, default 60000 */
  uint32_t verify_crc;      /* check each payload's crc32c, default 1 */
  /* TLS: PEM file paths, read once at open. With tls_ca (or a cert+key)
   * every connection (coordinator and workers) uses TLS, verifying the
   * daemons against tls_ca (NULL: the system roots); tls_cert + tls_key
   * are presented when the daemons require client certificates (mTLS).
   * NULL or "" = $STOKER_TLS_CA / $STOKER_TLS_CERT / $STOKER_TLS_KEY, else
   * plaintext. */
  const char *tls_ca, *tls_cert, *tls_key;
  /* The working set: this rank streams from working_set workers (0 =
   * $STOKER_WORKING_SET, else 8), chosen by rendezvous hashing of (job,
   * rank, worker id) weighted by each worker's cores, plus the workers
   * this rank must cover so that every worker serves some rank; an
   * input-bound rank grows its set one worker a second up to
   * working_set_max (0 = 4 x working_set; both at most 1024) and shrinks
   * it back after 10 s without a stall. A job with few workers (<= the
   * set) streams from all of them. docs/operations.md, "Working set". */
  uint32_t working_set;
  uint32_t working_set_max;
  /* The client's log: a few lines on stderr saying what it leaves out
   * (worker list entries it refused, the workers outside this rank's
   * working set, a worker it dropped or could not reach), rate-limited.
   * The library prints nothing unless the host asks: 1 = on, 2 = off,
   * 0 = $STOKER_CLIENT_LOG ("1"/"on" on, else off). The Python Loader and
   * stoker-train-loop turn it on. */
  uint32_t log;
  /* How long stk_client_next waits with no live worker (none listed, none
   * reachable, every one refusing) before it fails with the reason: 0 =
   * $STOKER_NO_WORKER_TIMEOUT_MS, else join_timeout_ms. While it waits
   * (more than 5 s), the client's log (cfg.log) says what for and since
   * when, one line every 4 s. docs/operations.md, "When a rank waits". */
  uint32_t no_worker_timeout_ms;
  uint8_t reserved[88];
} stk_client_config;

STK_EXPORT void stk_client_config_defaults(stk_client_config *cfg);

/* Fill the fields of *cfg left "not given" from the environment, in place;
 * fields the caller set are never touched (explicit arguments win).
 * stk_client_open and stk_client_open_local call this on their own copy, so
 * a caller needs it only to learn the effective values (e.g. to print its
 * rank). Precedence, first match wins:
 *   coordinator  cfg.coordinator, else $STOKER_COORDINATOR (else left NULL:
 *                stk_client_open then fails, open_local does not need it)
 *   rank and     cfg.rank / cfg.world_size, else one launcher's pair:
 *   world_size     RANK / WORLD_SIZE            (stoker-launch, torchrun)
 *                  OMPI_COMM_WORLD_RANK / _SIZE (Open MPI mpirun)
 *                  SLURM_PROCID / SLURM_NTASKS  (srun)
 *                the first pair with either variable set is used for both
 *                fields; with none set, rank 0 of world size 1
 *   token        cfg.token, else $STOKER_TOKEN (non-empty); stk_client_open
 *                then falls back to $STOKER_TOKEN_FILE (first line)
 *   working_set  cfg.working_set, else $STOKER_WORKING_SET (1..1024), else 8
 *   no_worker_   cfg.no_worker_timeout_ms, else $STOKER_NO_WORKER_TIMEOUT_MS
 *   timeout_ms     (>= 1), else (at open) join_timeout_ms
 *   cuda_device  cfg.cuda_device, else (CUDA clients only) $LOCAL_RANK,
 *                else the chosen pair's local rank (OMPI_COMM_WORLD_
 *                LOCAL_RANK, SLURM_LOCALID), else 0
 * Errors, STK_INVALID_ARGUMENT with a message naming the variable: a value
 * that is not a plain non-negative decimal or is out of range, an empty
 * STOKER_COORDINATOR, WORLD_SIZE 0, half of a pair missing when both
 * fields are wanted, rank >= world size. On error *cfg may be partly
 * filled. The strings put into cfg point into the environment: valid until
 * it changes. Thread-safe as far as getenv is (no concurrent setenv). */
STK_EXPORT int stk_client_config_from_env(stk_client_config *cfg, char *err,
                                          size_t errlen);

/* Join the job and start streaming. Fields of cfg left "not given" come
 * from the environment first (stk_client_config_from_env; *cfg itself is
 * not changed). On success *out owns the client (close
 * with stk_client_close). Errors: STK_INVALID_ARGUMENT (bad config, rank out
 * of range, world_size differs from the job's, a resume state that is
 * malformed or past the end of the job), STK_UNAVAILABLE (no coordinator
 * within join_timeout_ms), STK_MISMATCH (resume state from another job, or
 * from another rank of the same world size), STK_UNSUPPORTED (CUDA asked
 * for where there is none, a resume state of an unknown version),
 * STK_UNAVAILABLE at once when no worker can serve the job (the
 * coordinator holds a worker's failure, e.g. a dataset it cannot open,
 * and no worker came within a few seconds: err carries the worker's
 * reason), STK_STATE at once when another live process holds this rank
 * (err names it: HOST:PID:rankR) or the rank has finished in this job (a
 * finished rank is not served again), STK_INTERRUPTED (stk_interrupt
 * during the join), with a
 * message in err. While it waits to join, the client's log (cfg.log) says
 * what for and since when, one line every 4 s. Thread-safe (separate clients are
 * independent). Side effect, process-wide: raises glibc's mmap and trim thresholds (32
 * and 64 MiB) so gRPC's receive buffers are reused instead of being returned to the
 * kernel and faulted in again after every message; that cuts the client's CPU per GB
 * about fourfold (docs/benchmarks.md). Set the environment variable
 * STOKER_MALLOC_TUNING=0 to leave malloc alone; a MALLOC_MMAP_THRESHOLD_ or
 * MALLOC_TRIM_THRESHOLD_ you set is never overridden. */
STK_EXPORT int stk_client_open(const stk_client_config *cfg, stk_client **out, char *err,
                               size_t errlen);

/* The next batch of this rank, in step order. Blocks until it is ready in a
 * slot; the time blocked is the input stall (see stk_stats). Wakes for
 * stk_client_interrupt / stk_interrupt (STK_INTERRUPTED). Returns:
 *   STK_OK           *out is a ready slot; release it with stk_batch_release.
 *   STK_END_OF_EPOCH the epoch's last step was handed out; call again for
 *                    the next epoch.
 *   STK_END_OF_DATA  every epoch of the job was delivered; every later
 *                    call returns it again (the client log says so once:
 *                    a loop past the job's last epoch gets nothing).
 *   other            a failure that retries cannot mend (every worker gone
 *                    for longer than the job allows, job ended by rank 0);
 *                    stk_client_error() says why. In this library:
 *                    STK_CANCELLED the job ended (coordinator shutting it
 *                    down), STK_UNAVAILABLE no live worker for
 *                    no_worker_timeout_ms; STK_MISMATCH / STK_PROTOCOL /
 *                    STK_CORRUPT / STK_INVALID_ARGUMENT the same, when
 *                    every listed worker was dropped by this client
 *                    (refused our job, protocol or token, malformed
 *                    messages, 3 bad crc32c in a row: see
 *                    stk_stats.workers_dropped); one bad worker among
 *                    good ones is dropped, never fatal.
 *   STK_INTERRUPTED  stk_client_interrupt / stk_interrupt woke the wait;
 *                    not fatal: call again to go on.
 * The caller may hold at most slots-1 batches at once (the copy thread
 * needs a free slot); asking for more returns STK_STATE.
 * CUDA: the slot's copy is ordered before later work on cfg.cuda_stream
 * (the library makes that stream wait on the slot's ready event), so
 * kernels launched on it may read the tensors at once. */
STK_EXPORT int stk_client_next(stk_client *c, stk_batch **out);

/* stk_client_next that blocks at most timeout_ms: STK_TIMEOUT (nothing
 * consumed, the client intact, stk_client_error "") when the batch is not
 * ready by then; call again. Lets a host language run its own signal
 * handlers between short waits (the Python Loader waits in 200 ms
 * slices); the input stall and the no-worker limit count across calls.
 * timeout_ms UINT32_MAX: no limit (stk_client_next). */
STK_EXPORT int stk_client_next_timed(stk_client *c, stk_batch **out, uint32_t timeout_ms);

/* Interrupting a blocking call. Both only store to a lock-free atomic:
 * async-signal-safe, callable from a signal handler or any thread.
 *
 * stk_client_interrupt(c): the blocking call of c in progress (next,
 * next_timed, finish), or else c's next call that would block, returns
 * STK_INTERRUPTED within about 100 ms (stk_client_error says where it
 * was). The request is taken by that one call. The client stays intact:
 * next again resumes where it was (no batch lost or repeated); the
 * daemons keep serving the other ranks. NULL is ignored.
 *
 * stk_interrupt(): every blocking call of libstoker in progress in this
 * process returns STK_INTERRUPTED within about 100 ms -- including
 * stk_client_open's join, which has no handle yet (open then fails,
 * leaving nothing behind). Calls that start afterwards are not affected.
 *
 * A C program's SIGINT handler calls one of them (and sets its own flag,
 * for a signal that comes between two calls); the loop then ends on
 * STK_INTERRUPTED. stk_client_close never blocks for long: it cancels. */
STK_EXPORT void stk_client_interrupt(stk_client *c);
STK_EXPORT void stk_interrupt(void);

/* Give the slot back. CUDA: the slot is reused only after the work queued
 * on cfg.cuda_stream before this call has finished (an event is recorded).
 * Accepts NULL. May come after stk_client_close (the batch stayed valid):
 * the last such release frees what the close left. Thread-safe; once per
 * batch. */
STK_EXPORT void stk_batch_release(stk_batch *b);

typedef struct stk_tensor {
  const char *name; /* image jobs: "image" (views > 1: "image0", "image1",
                       ...), "label", "mask", "index"; token
                       jobs: "tokens", "labels", then "loss_mask",
                       "position_ids", "index" as the job asks (look tensors
                       up by name: stk_batch_layout_find) */
  int32_t dtype;    /* stk_dtype */
  uint32_t ndim;
  int64_t shape[STK_MAX_DIMS];
  void *data; /* host pointer (cpu) or device pointer (cuda) */
  uint64_t nbytes;
  int32_t device; /* stk_device where data lives */
} stk_tensor;

/* Batch accessors; valid until stk_batch_release. */
STK_EXPORT uint64_t stk_batch_epoch(const stk_batch *b);
STK_EXPORT uint64_t stk_batch_step(const stk_batch *b);
/* The sample offset of the batch's epoch: 0, except in an epoch resumed
 * with another world size (see stk_client_save_state), where step s of
 * rank r holds the epoch's samples from position
 * offset + (s * world_size + r) * batch_size on (stk_batch_samples_at). */
STK_EXPORT uint64_t stk_batch_sample_offset(const stk_batch *b);
STK_EXPORT uint32_t stk_batch_num_tensors(const stk_batch *b);
/* Fill *out for tensor i (STK_TENSOR_IMAGE, ...). STK_INVALID_ARGUMENT if
 * i is out of range. */
STK_EXPORT int stk_batch_tensor(const stk_batch *b, uint32_t i, stk_tensor *out);
/* Host copy of the batch payload in the job's layout, as the workers built
 * it, before any cfg.convert (a float image that travelled as its 8-bit
 * values is the float one rebuilt, byte for byte): for verification
 * against stk_build_reference. Valid until release. */
STK_EXPORT const void *stk_batch_payload(const stk_batch *b, size_t *len);

/* The job as the coordinator defines it (num_samples resolved, and an
 * ImageFolder job's num_classes: the dataset's class count). */
STK_EXPORT int stk_client_job(const stk_client *c, stk_job_spec *out);
/* ImageFolder jobs: the class count, and the name of class i (label i:
 * the class folders sorted by bytes, as torchvision's ImageFolder sorts
 * them), valid until stk_client_close. 0 / NULL for other sources, for i
 * out of range, and for names the dataset had too many of to send (over
 * 32768 names or 256 KiB). Thread-safe. */
STK_EXPORT uint32_t stk_client_num_classes(const stk_client *c);
STK_EXPORT const char *stk_client_class_name(const stk_client *c, uint32_t i);
/* Steps of an ordinary epoch of this rank. An epoch resumed with another
 * world size (stk_client_save_state) may have one step fewer. */
STK_EXPORT uint64_t stk_client_steps_per_epoch(const stk_client *c);

/* Resume state: a few integers (job hash, rank, world size, epoch, next
 * step, and the epoch's global sample position: the samples the whole job
 * consumed before that step, in epoch order), 48 bytes, versioned (version
 * 2; version 1 states of 40 bytes still load). With buf == NULL or *len
 * too small, sets *len to the size needed and returns STK_LIMIT.
 *
 * Opening a client with this state (cfg.resume_state):
 * - same world size: each rank takes its own state and continues exactly
 *   at its next undelivered step, byte-identical to the uninterrupted run;
 * - another world size (elastic resume): the job must be the same but for
 *   world_size (else STK_MISMATCH); any old rank's state may be given, and
 *   the new rank continues the epoch at the state's sample position, so
 *   over all new ranks every remaining sample of the epoch comes exactly
 *   once (drop_last: up to the new world's last full step). Every new rank
 *   must be given a state of the same position: in a synchronous loop all
 *   ranks save at the same step. That epoch's addresses carry a sample
 *   offset (stk_batch_sample_offset) and its steps count on from the
 *   position (the first is position / (world_size * batch_size)); the
 *   next epochs are ordinary. docs/operations.md, "Elastic resume".
 * Thread-safe with respect to next(). */
STK_EXPORT int stk_client_save_state(stk_client *c, void *buf, size_t *len);

/* Where the stream is: the epoch and step of the next batch
 * stk_client_next will deliver (epoch = the job's epochs at the end).
 * Thread-safe with respect to next(). */
STK_EXPORT int stk_client_position(stk_client *c, uint64_t *epoch, uint64_t *step);

/* A resume state for this client's rank positioned at the first step of
 * `epoch` (epochs = the end of the job), as stk_client_save_state would
 * have written it there: reopen with it to start an epoch over or to skip
 * ahead (what the Python Loader's set_epoch does). Same buffer rules as
 * stk_client_save_state; STK_INVALID_ARGUMENT if epoch > the job's epochs.
 * Pure with respect to the stream: thread-safe. */
STK_EXPORT int stk_client_state_at(const stk_client *c, uint64_t epoch, void *buf,
                                   size_t *len);

/* Tell the coordinator this rank has finished. When all ranks have, the
 * coordinator shuts every worker down and the job ends (every daemon exits
 * 0). With shutdown_job non-zero (rank 0 only), end the whole job now.
 * Retried with jittered pauses for up to 30 s, or 60 s once an attempt
 * got no answer in time (the first attempt waits 5 s, each one after a
 * timeout twice as long), so thousands of ranks ending at once against a
 * busy coordinator get through; STK_UNAVAILABLE if it cannot be reached in
 * that time (the job's idle timeout still ends it). Once the job has ended
 * (the coordinator said so), a failed attempt is not retried: STK_OK, or
 * STK_CANCELLED with the reason if the job ended as failed.
 * What ends a rank: this call, and nothing else in the C API -- not
 * STK_END_OF_DATA, not stk_client_close. Call it once the rank is done,
 * whether it consumed every epoch or stopped early (max steps, early
 * stopping); calling it again is harmless. The Python Loader calls it at
 * the end of the data by itself, and stoker-launch calls it (`stoker
 * finish`) for every rank of a host whose training command exited 0. A
 * rank that never finishes keeps the job, and its CPU hosts, up until the
 * coordinator's idle timeout. Wakes for stk_client_interrupt /
 * stk_interrupt: STK_INTERRUPTED (the finish is still re-announced by the
 * client's watch while it stays open; call again to make sure).
 * Thread-safe. */
STK_EXPORT int stk_client_finish(stk_client *c, int shutdown_job);

#define STK_MAX_WORKER_STATS 32

typedef struct stk_worker_stats {
  char address[64];
  uint64_t batches;
  uint64_t bytes;
  double batches_per_s; /* observed rate, smoothed */
  uint32_t outstanding; /* requests in flight now */
  uint32_t alive;
} stk_worker_stats;

typedef struct stk_stats {
  uint64_t batches;      /* handed to the caller */
  uint64_t bytes;        /* payload bytes received */
  uint64_t stall_ns;     /* time next() blocked */
  uint64_t wall_ns;      /* since open */
  double stall_fraction; /* stall_ns / time between first and last next() */
  uint64_t reissued;     /* requests moved to another worker */
  uint64_t duplicates;   /* batches dropped because they came twice */
  uint64_t crc_errors;   /* payloads that failed crc32c (re-requested) */
  uint64_t substituted;  /* bad samples replaced by workers */
  uint32_t workers_alive;
  uint32_t nworkers;     /* entries in workers[] */
  double workers_needed; /* estimate of workers that would remove the
                            stall (0 when not input-bound): with
                            compute = (time between the first and last
                            next()) - stall_ns, it is workers_alive x
                            (1 + stall_ns / compute), reported when
                            stall_fraction > 2% and step_ms >= 1 (a
                            loop with no step time has no figure);
                            `stoker status` says it in cores */
  stk_worker_stats workers[STK_MAX_WORKER_STATS];
  uint32_t coordinator_watching; /* 1 while this client's watch stream to the
                                    coordinator is open and its request sent:
                                    worker-list changes and the end of the
                                    job reach it (0 while reconnecting) */
  uint32_t workers_dropped;      /* workers this client stopped using for good:
                                    one that refused its stream (INVALID_ARGUMENT,
                                    OUT_OF_RANGE, FAILED_PRECONDITION,
                                    UNAUTHENTICATED, PERMISSION_DENIED), sent a
                                    malformed message, or sent 3 batches in a
                                    row with a bad crc32c; its requests went to
                                    the others (docs/operations.md) */
  uint64_t hedges_sent;          /* hedged requests: a request late on its worker
                                    (3x that worker's median latency, at least
                                    100 ms) asked of a second worker too */
  uint64_t hedges_won;           /* ... whose hedge copy arrived first */
  uint64_t hedge_dropped;        /* copies of hedged batches that came after the
                                    other copy had won and were dropped (also
                                    counted in duplicates) */
  uint32_t device_convert;       /* 1: 8-bit images are converted to the job's
                                    floats on the GPU (CUDA backend, its kernel
                                    loaded); 0: on the CPU, or nothing to convert
                                    (docs/gpu.md, STOKER_CUDA_CONVERT) */
  uint32_t working_set;          /* workers this rank streams from now (its
                                    working set, coverage workers included;
                                    0 for a local client) */
  uint32_t workers_listed;       /* workers the coordinator lists */
  float step_ms;                 /* the loop's time per batch outside next()
                                    (or what stk_client_set_step_ms told):
                                    its step time minus the stall, ms (0 before
                                    two batches); what the stall is judged
                                    against (docs/operations.md) */
  float recv_cpu_s_per_gb;       /* the receiving cost on this host: recv_cpu_s
                                    per GB of payload received (0 before 1 MB) */
  double recv_cpu_s;             /* CPU seconds (user + system) this client's
                                    receive path used: its io threads (gRPC
                                    receive, the copy out of gRPC's buffers,
                                    crc32c), its copy thread (into the slots,
                                    conversion), its watch thread (which, with
                                    gRPC's default poll engine, also reads the
                                    streams' sockets) and its scheduler; not
                                    gRPC's own executor and timer threads
                                    (docs/operations.md, "stoker status") */
  uint8_t reserved[4];
  float recv_cpu_user_s_per_gb; /* recv_cpu_s_per_gb's user-space part ... */
  float recv_cpu_sys_s_per_gb;  /* ... and its kernel part (socket reads,
                                   wake-ups); their sum is recv_cpu_s_per_gb */
  double recv_cpu_user_s;       /* recv_cpu_s split: user ... */
  double recv_cpu_sys_s;        /* ... and system CPU seconds */
  double host_cores;            /* CPUs this process may use: min(its cgroup's
                                   CPU quota, its affinity CPUs), read at open */
  double recv_host_share;       /* the receive path's share of host_cores over
                                   the last 5-10 s: its CPU seconds per second
                                   / host_cores (0.5: half of what the process
                                   may use; 0 before a second of data) */
} stk_stats;

/* Snapshot of the counters. Thread-safe. */
STK_EXPORT void stk_client_stats(stk_client *c, stk_stats *out);

/* Tell the library the loop's own compute time per step, ms (e.g. the
 * accelerator's time measured with CUDA events, or a simulated step): from
 * then on stk_stats.step_ms and the figures sent to the coordinator (its
 * verdict, `stoker status`'s purchase, `stoker plan --coordinator`) use it
 * instead of the loop's measured time outside next(). On a host whose CPU
 * is throttled (a cgroup quota shared with loading) that measured time
 * includes the waits for CPU, which hide how fast the accelerator could
 * go. 0 = measure again. STK_INVALID_ARGUMENT for c NULL or ms not a
 * finite number in 0..1e7. Thread-safe. */
STK_EXPORT int stk_client_set_step_ms(stk_client *c, double ms);

/* Last error text of this client ("" if none). Valid until the next call
 * on the client. */
STK_EXPORT const char *stk_client_error(const stk_client *c);

/* ---- additions ------------------------------------------------------- */

/* Like stk_client_open, but without daemons: batches are built in-process
 * by one builder thread from job_text ("key = value" lines, as a job file or
 * the coordinator's canonical form) with files under data_root (NULL for
 * synthetic). Everything else (prefetch pool, reorder, slots, convert,
 * epochs, save_state, CUDA) is the same code path as a networked client.
 * For tests, debugging and single-machine runs. cfg->coordinator is
 * ignored. Errors as stk_client_open, plus those of stk_job_spec_set and
 * stk_dataset_open. Thread-safe (separate clients are independent). */
STK_EXPORT int stk_client_open_local(const stk_client_config *cfg, const char *job_text,
                                     const char *data_root, stk_client **out, char *err,
                                     size_t errlen);

/* Build the reference batch (epoch, step) of this client's rank in-process
 * (stk_build_reference_at with the client's job and that epoch's sample
 * offset, 0 unless the epoch was resumed with another world size) into buf (len >= the
 * payload size, stk_batch_payload's len). data_root NULL: the local client's root, or
 * none (synthetic). Slow; for verification. Errors as stk_build_reference, text in
 * stk_client_error. Not thread-safe with other calls on c (it sets the error text). */
STK_EXPORT int stk_client_reference(stk_client *c, uint64_t epoch, uint64_t step,
                                    const char *data_root, void *buf, size_t len);

/* Bytes of one batch payload as the workers send it (the job's layout
 * total_bytes; stk_batch_payload's len). 0 for NULL. Thread-safe. */
STK_EXPORT uint64_t stk_client_payload_bytes(const stk_client *c);

/* sizeof a public struct by name ("stk_client_config", "stk_tensor",
 * "stk_stats", "stk_worker_stats", "stk_job_spec"); 0 for an unknown name.
 * Lets FFI bindings check their struct mirrors. Thread-safe. */
STK_EXPORT size_t stk_client_struct_size(const char *name);

/* Stop streaming, cancel requests, free everything. Does not call finish
 * (stk_client_finish says what ends a rank). Accepts NULL.
 * Batches the caller still holds stay valid (their memory and accessors)
 * until each is released with stk_batch_release; the last release frees
 * them and the client. No other call on c after this one. */
STK_EXPORT void stk_client_close(stk_client *c);

#ifdef __cplusplus
}
#endif
#endif
