/* internal.h - libstoker's private structures, shared by the client's
 * subsystems (client.c API + lifecycle, join.c coordinator, stream.c worker
 * streams + scheduling, ring.c reorder + device slots, backend_*.c,
 * convert.c). Not installed; nothing here is ABI.
 *
 * Locking: one mutex per client (c->mu) guards every field below that more
 * than one thread touches, except the counters marked atomic. No thread
 * holds c->mu while it blocks in gRPC, CUDA or a memcpy of a payload.
 *
 * Request life (c->reqs, a fixed pool of `prefetch` receive buffers):
 *   FREE -> QUEUED (seq assigned, waiting for a worker)
 *        -> ISSUED (sent to worker w) -> RECEIVING (w's chunks arriving)
 *        -> DONE (payload complete, crc ok) -> FREE (copy thread took it)
 *   A broken stream sends its ISSUED/RECEIVING requests back to QUEUED;
 *   only the thread of the worker a request is assigned to ever writes its
 *   buffer, so a request is re-issued only once that thread has let go.
 *
 * Hedges (c->hedges, a fixed pool of receive buffers, stream.c): a request
 * that is late on its worker gets at most one second copy asked of another
 * worker. Hedge slot life:
 *   FREE -> ISSUED (to worker w for req) -> RECEIVING (w's chunks arriving)
 *        -> FREE (complete: won, or failed crc; or w's stream broke)
 *   ORPHAN: the other copy won while this slot's worker was writing its
 *   buffer; the slot holds that buffer until the writer is done.
 * The first crc-valid copy makes the request DONE (a winning hedge's buffer
 * is swapped into the request; the request's old buffer goes to the slot).
 * A losing copy not yet started is remembered in its worker's abandoned[]
 * list (it still counts as outstanding there; a copy never sent does not)
 * and dropped when it comes.
 * A receiver captures its destination buffer when the header arrives, and
 * a buffer being written never changes owner, only its slot's state: so
 * no one writes a buffer that someone else may hand out.
 */
#ifndef STOKER_CLIENT_INTERNAL_H
#define STOKER_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "rpc.h"
#include "wire_limits.h"
#include "stoker/client.h"

#define STK__MAX_WORKERS    256
#define STK__KEEP_DEPARTED  32          /* departed workers kept in the table (stats) */
#define STK__MAX_BANNED     64          /* ids of dropped workers remembered */
#define STK__LAT_SAMPLES    16          /* per-worker latencies for the hedge median */
#define STK__HEDGE_FLOOR_MS 100         /* never hedge a request younger than this */
#define STK__CRC_STREAK_MAX 3           /* consecutive bad crc32c before a drop */
#define STK__MAX_PER_WORKER 64          /* the worker's outstanding limit */
#define STK__STATE_MAGIC    0x534b5453u /* "STKS" little-endian */
#define STK__STATE_VERSION  2u          /* written; 1 and 2 are read (state.c) */
#define STK__STATE_SIZE     48u         /* version 2 */
#define STK__STATE_SIZE_V1  40u

enum { REQ_FREE, REQ_QUEUED, REQ_ISSUED, REQ_RECEIVING, REQ_DONE };
enum { HEDGE_FREE, HEDGE_ISSUED, HEDGE_RECEIVING, HEDGE_ORPHAN };
enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

typedef struct stk__req {
  int state;
  uint64_t seq;       /* linear step (state.c's plan maps it to an address) */
  int worker;         /* assigned worker, -1 */
  int avoid;          /* worker that sent a bad copy, -1 */
  unsigned char *buf; /* layout.total_bytes, owned by the pool */
  int u8;             /* buf holds the wire_u8 form (layout `wire`) */
  int64_t issued_ns;
  int hedge;  /* hedge slot holding this request's second copy, -1 */
  int hedged; /* a hedge was asked for (at most one per batch) */
} stk__req;

typedef struct stk__hedge {
  int state;          /* HEDGE_* */
  int req;            /* index into c->reqs (ISSUED/RECEIVING), -1 */
  uint64_t seq;       /* the batch */
  int worker;         /* the worker asked (or, ORPHAN, the one writing) */
  unsigned char *buf; /* layout.total_bytes, owned by the pool */
  int u8;             /* buf holds the wire_u8 form */
  int64_t issued_ns;
} stk__hedge;

typedef struct stk__worker {
  int used;
  int idx;
  int local;                 /* in-process builder instead of a stream */
  char id[STK_MAX_ID_BYTES]; /* as listed: longer ones are refused, never cut */
  char address[STK_MAX_ID_BYTES];
  int listed; /* in the coordinator's current list */
  int thread_started, thread_exited;
  pthread_t thread;
  stk__rpc_channel *ch;    /* owned by the worker thread */
  stk__rpc_stream *stream; /* guarded by mu; destroyed by the worker thread */
  pthread_mutex_t send_mu; /* held while a request is being sent */
  int alive;               /* stream open and taking requests */
  int probing;             /* no message yet on this stream: at most 1 request */
  uint32_t outstanding;
  uint32_t cap; /* outstanding limit learnt from RESOURCE_EXHAUSTED, 0 = 64 */
  double rate;  /* batches/s, smoothed */
  int64_t last_done_ns;
  int64_t last_msg_ns;
  int64_t last_assigned_ns;
  uint64_t batches, bytes;
  uint64_t stream_batches;          /* completed on the current stream */
  uint32_t failures;                /* consecutive broken streams (backoff) */
  int dropped;                      /* not used again by this client (see stream.c) */
  uint32_t crc_streak;              /* consecutive batches with a bad crc32c */
  int late;                         /* has a request older than its hedge threshold */
  int64_t left_ns;                  /* when its thread exited (departed entries) */
  int64_t lat_ns[STK__LAT_SAMPLES]; /* recent issue-to-complete latencies */
  uint32_t nlat, lat_pos;
  uint64_t abandoned[STK__MAX_PER_WORKER]; /* losing copies still coming */
  uint32_t nabandoned;
  struct stk_client *c;
} stk__worker;

struct stk_batch {
  struct stk_client *c;
  int idx;
  int state;
  uint64_t seq;
  unsigned char *payload; /* host payload as sent (pool buffer, swapped in) */
  unsigned char *conv;    /* converted host tensors (convert, or wire_u8) */
  int u8;                 /* it came as 8-bit images: conv holds the job's payload */
  int conv_stale;         /* conv not rebuilt: the kernel converted on the device */
  void *dev;              /* device buffer (cuda) */
  void *dev_in;           /* cuda kernel: the 8-bit form on the device */
  void *ev_ready;         /* cuda: copy into dev done */
  void *ev_released;      /* cuda: caller's work on the slot done */
  int released_recorded, ready_recorded;
  stk_tensor tensors[STK_MAX_TENSORS];
};

struct stk__cuda;

struct stk_client {
  stk_client_config cfg;
  char *coordinator, *token;
  struct stk__tls *tls; /* cfg.tls_*, loaded at open; NULL = plaintext */
  int local;
  char *data_root;
  stk_dataset *dataset;

  stk_job_spec spec; /* as hashed: an ImageFolder's num_classes may be 0 */
  uint64_t job_hash, nsamples, spe, total;
  /* ImageFolder: the class count and names (join.c from the Join reply,
   * client.c from the local dataset); classes NULL when the names did not
   * travel (or local: read from dataset). Fixed at open: read without mu. */
  uint32_t nclasses;
  char **classes;
  /* The plan (state.c): epoch seg_epoch has seg_steps steps at sample
   * offset seg_offset (resumed with another world size), every other
   * epoch spe steps at offset 0. Fixed at open: read without mu. */
  uint64_t seg_epoch, seg_offset, seg_steps;
  stk_batch_layout layout; /* as the job builds it (what workers send) */
  stk_batch_layout out;    /* as handed out (after convert) */
  /* wire_u8: a float image job (stk_image_wire_spec) whose workers may
   * send the image as 8-bit values (BatchRequest.image_uint8), in layout
   * `wire`; the copy thread rebuilds the floats exactly. Fixed at open. */
  int wire_u8;
  stk_batch_layout wire;

  pthread_mutex_t mu;
  pthread_cond_t cv_sched, cv_copy, cv_next, cv_local;
  int stopping;
  int closed; /* stk_client_close ran while the caller held batches: the
                 last stk_batch_release frees the client (under mu) */
  int fatal;  /* stk_status that ends the client, 0 = none */
  char fatal_msg[256];
  int job_ended;
  int job_failed;           /* ended because it was aborted (abort_job) */
  char job_end_reason[256]; /* the coordinator's reason when it failed */

  stk__req *reqs;
  uint32_t nreqs;
  uint64_t next_issue, next_copy, next_deliver;
  int eoe_pending;

  stk_batch *slots;
  uint32_t nslots, held;

  stk__worker *workers; /* STK__MAX_WORKERS entries; unused ones reused */
  uint32_t nworkers;    /* entries ever used (high-water mark) */
  int64_t no_worker_since_ns;
  uint64_t workers_refused; /* list entries refused (id/address too long) */
  char refused_msg[200];    /* why the last one was refused */
  char banned[STK__MAX_BANNED][STK_MAX_ID_BYTES]; /* dropped workers' ids */
  uint32_t nbanned;
  uint64_t workers_dropped; /* workers this client stopped using */
  int drop_status;          /* stk_status of the last drop */
  char drop_msg[300];       /* why the last one was dropped */

  stk__hedge *hedges; /* nhedges slots (0: hedging off), see above */
  uint32_t nhedges;

  stk__rpc_channel *coord;
  char client_id[128];    /* host:pid:rankR, set by join, then read-only */
  int finish_called;      /* stk_client_finish was called (re-announced); under mu */
  int end_job_called;     /* ... with shutdown_job; under mu */
  stk__rpc_stream *watch; /* guarded by mu */
  int watching;           /* watch request sent on c->watch; under mu */
  uint64_t list_version;
  pthread_t sched_thread, copy_thread, watch_thread;
  int sched_started, copy_started, watch_started;

  struct stk__cuda *cuda;

  /* counters (under mu) */
  uint64_t batches, bytes, stall_ns, reissued, duplicates, crc_errors, substituted;
  uint64_t hedges_sent, hedges_won, hedge_dropped;
  int64_t open_ns, first_next_ns, last_next_ns;

  uint64_t fault_crc_every, fault_count; /* $STOKER_FAULT_CRC_EVERY (local) */

  char err[512];
};

/* client.c */
void stk__set_fatal(stk_client *c, int status, const char *msg);
void stk__seterr(stk_client *c, const char *fmt, const char *arg);

/* state.c: the resume state and the plan */
typedef struct stk__resume {
  uint64_t job_hash, epoch, step;
  uint64_t position; /* version >= 2: global sample position in the epoch */
  uint32_t rank, world, version;
} stk__resume;
typedef struct stk__addr {
  uint64_t epoch, step, offset; /* offset: the epoch's sample offset */
} stk__addr;
/* Parse a saved state (versions 1 and 2). STK_OK or a status with err. */
int stk__state_parse(const void *buf, size_t len, stk__resume *rs, char *err,
                     size_t errlen);
/* Before joining: may cfg's rank resume from rs at all? */
int stk__state_check_rank(const stk_client_config *cfg, const stk__resume *rs, char *err,
                          size_t errlen);
/* With c->spec and c->job_hash known: steps, the plan and the start
 * position (rs NULL: the job's start). Checks rs against the job. */
int stk__plan_init(stk_client *c, const stk__resume *rs, char *err, size_t errlen);
void stk__seq_addr(const stk_client *c, uint64_t seq, stk__addr *a);
/* The seq of an address of this client's plan: 0, or -1 if the address is
 * not in the plan (wrong offset for its epoch, step out of range). */
int stk__addr_seq(const stk_client *c, uint64_t epoch, uint64_t step, uint64_t offset,
                  uint64_t *seq);
uint64_t stk__epoch_offset(const stk_client *c, uint64_t epoch);
/* 1 if seq is step 0 of an epoch (or the end of the job). */
int stk__seq_epoch_start(const stk_client *c, uint64_t seq);

/* join.c */
int stk__join(stk_client *c, char *err, size_t errlen);
int stk__watch_start(stk_client *c);
void stk__watch_stop(stk_client *c);

/* stream.c */
int stk__worker_add(stk_client *c, const char *id, const char *address,
                    int local); /* under mu; returns index or -1 */
void stk__worker_unlist_missing(stk_client *c, const char *const *ids,
                                size_t n); /* under mu */
/* Under mu: 1 when every listed worker was dropped by this client (and at
 * least one is listed): the client has nothing left to ask. */
int stk__workers_all_dropped(stk_client *c);
int stk__sched_start(stk_client *c);
void stk__streams_stop(stk_client *c); /* joins sched + worker threads */

/* ring.c */
int stk__ring_init(stk_client *c, char *err, size_t errlen);
int stk__copy_start(stk_client *c);
void stk__ring_free(stk_client *c);
/* Free the receive and hedge buffers (not the slots): at a close that
 * leaves held slots behind. Threads stopped. */
void stk__ring_free_transfer(stk_client *c);
/* stk_batch_payload's bytes: as received, or the float job rebuilt on the
 * host (at the first call, for a batch the kernel converted on the device;
 * NULL if that buffer cannot be allocated). Caller holds b. */
const unsigned char *stk__batch_host_payload(stk_batch *b);

/* backend_cpu.c: host buffers for payloads */
void *stk__host_alloc(stk_client *c, size_t n);
void stk__host_free(stk_client *c, void *p);

/* backend_cuda.c */
int stk__cuda_open(stk_client *c, char *err, size_t errlen);
int stk__cuda_slot_init(stk_client *c, stk_batch *s, char *err, size_t errlen);
void *stk__cuda_host_alloc(stk_client *c, size_t n);
void stk__cuda_host_free(stk_client *c, void *p);
/* Before reusing s's host buffers: wait for the previous copy from them. */
int stk__cuda_before_fill(stk_client *c, stk_batch *s);
/* Queue host -> device copy of src (n bytes) into s->dev, record ready. */
int stk__cuda_fill(stk_client *c, stk_batch *s, const void *src, size_t n);
/* The conversion kernel (convert_kernel.h), for a client whose images
 * arrive as 8-bit values to be converted (cfg.convert, or wire_u8): load
 * it and upload its table, after the layouts are set and before the ring.
 * $STOKER_CUDA_CONVERT: "cpu" never, "gpu" always (failing to load it is
 * STK_UNSUPPORTED, with why in err), else (auto) when it loads, otherwise
 * the CPU converter. */
int stk__cuda_kernel_init(stk_client *c, char *err, size_t errlen);
/* 1 when this client converts on the device. */
int stk__cuda_kernel(const stk_client *c);
/* Queue the 8-bit payload src (layout in, images in the job's layout) to
 * the device and convert it there into s->dev (layout out, images NHWC if
 * out_nhwc else NCHW), then record ready. */
int stk__cuda_fill_convert(stk_client *c, stk_batch *s, const stk_batch_layout *in,
                           const unsigned char *src, const stk_batch_layout *out,
                           int out_nhwc);
int stk__cuda_on_next(stk_client *c, stk_batch *s);
void stk__cuda_on_release(stk_client *c, stk_batch *s);
void stk__cuda_slot_free(stk_client *c, stk_batch *s);
/* Wait for everything queued on the backend's stream. */
void stk__cuda_sync(stk_client *c);
void stk__cuda_close(stk_client *c);
const char *stk__cuda_error(stk_client *c);

/* convert.c */
/* Layout of the converted batch (image dtype/NCHW changed, others same). */
int stk__convert_layout(const stk_job_spec *spec, int convert, stk_batch_layout *out);
/* src: payload in `in` layout (its image uint8 in spec's layout); dst:
 * buffer in `out` layout, its image in convert's dtype, NHWC if out_nhwc
 * (the wire_u8 rebuild of an NHWC job) else NCHW (cfg.convert). */
/* The image tensors of a job: the first views (1..4) ones. */
uint32_t stk__image_tensors(const stk_job_spec *spec);
/* The conversion that rebuilds a float job's images from their 8-bit wire
 * form: STK_CONVERT_FLOAT32 or STK_CONVERT_BFLOAT16, the job's dtype. */
int stk__wire_convert(const stk_job_spec *spec);
/* The output value of every (channel, byte) that stk__convert_batch makes,
 * as a [4][256] table of float32 (convert STK_CONVERT_FLOAT32, 4 KiB) or
 * bfloat16 bits (STK_CONVERT_BFLOAT16, 2 KiB): the CUDA kernel's table. */
void stk__convert_table(const stk_job_spec *spec, int convert, void *table);
void stk__convert_batch(const stk_job_spec *spec, int convert, const stk_batch_layout *in,
                        const unsigned char *src, const stk_batch_layout *out,
                        unsigned char *dst, int out_nhwc);

#endif
