/* fairsched.h - the worker's fair batch scheduler: a fixed pool of batch
 * buffers, a pool of builder threads (one stk_builder each), and per-stream
 * request queues that the builders serve round-robin so no stream (rank)
 * starves. A stream's owner takes finished batches in completion order:
 * it is told (a callback) when there is something to take, and never
 * waits here (streams.c drives the sends from gRPC's events).
 *
 * Memory is bounded by construction: a builder holds a buffer only while
 * it builds, and a batch keeps its buffer until the last chunk referencing
 * it is released by gRPC; builders wait for a free buffer.
 * Every function is thread-safe unless noted.
 */
#ifndef STOKER_SERVER_WORKER_FAIRSCHED_H
#define STOKER_SERVER_WORKER_FAIRSCHED_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/augment.h"

/* Retries of a build that failed with a transient error (STK_UNAVAILABLE)
 * before the stream is told to ask again. */
#define SCHED_TRANSIENT_RETRIES 2

typedef struct sched sched;
typedef struct fairsched_stream fairsched_stream;
typedef struct fairsched_buf fairsched_buf;

/* A finished batch, handed to the stream's sender: the payload and its
 * header facts as the assembler returned them (augment/batch.h). */
typedef struct fairsched_done {
  fairsched_buf *buf;           /* one reference, owned by this item */
  const uint8_t *data;          /* payload, total_bytes long */
  uint64_t total_bytes;         /* the layout of the job, or of its uint8 twin (u8) */
  uint64_t epoch, step, offset; /* offset: the request's sample_offset */
  uint32_t rank;
  uint32_t substituted;
  int u8; /* the image went as 8-bit values (an image_u8 request of a float job) */
  uint32_t crc32c; /* stk_crc32c(0, data, total_bytes) */
  int status;      /* STK_OK, else err says why the build failed;
                      STK_UNAVAILABLE: transient (retried, then ask again);
                      STK_USER_CODE: the job's own op failed on a sample and
                      its bad_samples policy fails the job at the first such
                      error: err is "the job failed: ..." (never sent) */
  char err[3400];
  struct fairsched_done *next;
  uint64_t indices[]; /* batch_size sample indices (status STK_OK) */
} fairsched_done;

/* Upper bounds (seconds) of the build-time histogram buckets; the last
 * bucket (index SCHED_HIST_BOUNDS) counts everything above. */
#define SCHED_HIST_BOUNDS 11
#define SCHED_HIST_LE \
  { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 }

typedef struct fairsched_stats {
  uint64_t batches_built, samples_substituted, build_errors;
  uint64_t transient_errors;  /* builds failed STK_UNAVAILABLE after retries */
  uint64_t transient_retries; /* retries of builds that failed transiently */
  uint64_t samples_reread;    /* read again alone after a transient error */
  uint32_t active_streams, queued_requests, free_buffers, nbuffers;
  uint64_t busy_ns; /* builder time spent building, cumulative */
  /* Successful builds by build time (not cumulative: bucket i counts
   * times in (LE[i-1], LE[i]]), and their total time. */
  uint64_t build_hist[SCHED_HIST_BOUNDS + 1];
  uint64_t build_ns_sum;
  uint64_t send_stalled; /* streams ended by fairsched_reap */
} fairsched_stats;

/* Start `threads` builders over ds (spec resolved: num_samples = N) and
 * `nbuffers` buffers of the job's batch size. 0 or -1 with err. */
int fairsched_create(const stk_job_spec *spec, stk_dataset *ds, int threads, int nbuffers,
                     sched **out, char *err, size_t errlen);
/* Stop and join the builders, wait up to wait_ms for buffers that gRPC
 * still holds, free everything. All streams must be closed. Accepts NULL. */
void fairsched_destroy(sched *s, int wait_ms);
void fairsched_stats_get(sched *s, fairsched_stats *out);
/* Fault injection for tests: every `every`th batch (0 = off) fails all its
 * build attempts with STK_UNAVAILABLE, as if out of descriptors, so the
 * stream ends UNAVAILABLE and the client must re-ask. */
void fairsched_set_fault_transient(sched *s, uint32_t every);
/* Stop taking new streams; open streams end once their requests are sent. */
void fairsched_drain(sched *s);

/* Buffer references for zero-copy chunks (release callbacks). */
void fairsched_buf_ref(fairsched_buf *b);
void fairsched_buf_unref(void *b);

/* Callbacks of a stream's owner. ready(arg): a batch finished, the stream
 * was killed, or the worker began to drain: call fairsched_stream_poll. Runs
 * on a builder (or the draining) thread with no lock of the scheduler
 * held; must not block. released(arg): the stream is freed (after
 * fairsched_stream_close, once no builder holds it); the last call for arg. */
typedef struct fairsched_stream_hooks {
  void (*ready)(void *arg);
  void (*released)(void *arg);
  /* stalled(arg, now_ms, wait_ms) (fairsched_reap): when the stream's current
   * send has waited at least wait_ms, cancel the call (so gRPC lets go of
   * the buffers; the client asks again) and return 1, else 0. Same rules
   * as ready. */
  int (*stalled)(void *arg, int64_t now_ms, int wait_ms);
} fairsched_stream_hooks;

/* A new stream; NULL when draining (or out of memory). hooks must outlive
 * the stream. */
fairsched_stream *fairsched_stream_open(sched *s, const fairsched_stream_hooks *hooks,
                                        void *arg);
/* Queue a request for batch (epoch, rank, step) of an epoch starting at
 * sample offset `offset` (0 but in an epoch resumed with another world
 * size; stk_builder_build_at). image_u8: the client rebuilds float images,
 * so a job whose image is float (stk_image_wire_spec) builds it as 8-bit
 * values (fairsched_done.u8 says which form was built). 0, or -1 when the
 * stream would then have more than max_outstanding requests whose batch
 * is not yet being sent. */
int fairsched_stream_push(fairsched_stream *st, uint64_t epoch, uint32_t rank,
                          uint64_t step, uint64_t offset, int image_u8,
                          uint32_t max_outstanding);

/* Why fairsched_stream_poll returned NULL. */
enum {
  SCHED_END_NONE = 0,
  SCHED_END_DEAD = 1,
  SCHED_END_DONE = 2,
  SCHED_END_DRAINED = 3
};
/* Never blocks: the next finished batch (caller owns it), or NULL with
 * *why = NONE (nothing yet: ready comes later), DEAD (killed), DONE
 * (half-closed and everything sent) or DRAINED (worker draining and
 * everything sent). */
fairsched_done *fairsched_stream_poll(fairsched_stream *st, int *why);
/* The owner is done with d (sent or not): frees d and drops its buffer
 * reference (the request stopped counting as outstanding when
 * fairsched_stream_poll handed it out). bytes: sent whole (0: not sent); the
 * stream's probation ends after SCHED_PROVEN_BYTES of them: until then
 * it owns at most one buffer (fairsched.c, pick). */
void fairsched_stream_sent(fairsched_stream *st, fairsched_done *d, uint64_t bytes);
/* The client half-closed: end once everything asked for is sent. */
void fairsched_stream_half_close(fairsched_stream *st);
/* Kill: drop queued requests; poll says DEAD. */
void fairsched_stream_kill(fairsched_stream *st);
/* Kill and forget the stream: never blocks; it is freed (and released
 * called) once no builder holds it, maybe before this returns. No other
 * fairsched_stream_* call on st afterwards. */
void fairsched_stream_close(fairsched_stream *st);

/* A stream is on probation until this many bytes of its batches went out
 * whole: more than the socket buffers and HTTP/2 windows can hold, so its
 * client reads (a stream that asks and never reads can have a few batches
 * "sent" into the windows). */
#define SCHED_PROVEN_BYTES (64ull << 20)
/* The least time a send of a stream on probation may wait while another
 * stream waits for a buffer (fairsched_reap). */
#define SCHED_SUSPECT_MS 250

/* While a stream with requests owns no buffer at all, end every stream on
 * probation that owns one and whose current send has waited (the stalled
 * hook tells) at least max(stall_ms / 8, SCHED_SUSPECT_MS): a client that
 * never reads pins a buffer for a fraction of --send-stall-s, not all of
 * it, while a client that reads keeps the send moving (at 16 MB/s, a 4 MiB
 * chunk takes 250 ms). Calls the hooks with no lock held; returns how many
 * streams it ended. Any thread; call it every 50-100 ms. */
int fairsched_reap(sched *s, int64_t now_ms, int stall_ms);

/* Bytes sent by all streams, cumulative. */
uint64_t fairsched_bytes_sent(sched *s);

#endif
