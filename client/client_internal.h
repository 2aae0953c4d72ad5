/* client_internal.h - libstoker's private structures, shared by the client's
 * files. Not installed; nothing here is ABI.
 *
 * struct stk_client is split into parts, one embedded struct per concern.
 * Each part is declared below with its lock, the one file that writes it
 * and who reads it; other files go through the owner's functions (listed
 * at the end, per file) or read the fields its comment names as readable.
 *
 *   config          (top level)  fixed at open: client.c
 *   c->job          the job and its layouts, fixed at open: client.c, join.c
 *   c->plan         seq <-> batch address map, fixed at open: client_state.c
 *   lock            c->mu, the condition variables, stopping: client.c
 *   c->errs         fatal status and the last-error string: errors.c
 *   c->api          the caller's side (next/release, stall): client.c
 *   c->ring         slots and the copy thread: ring.c
 *   c->pool         receive and hedge buffers, their states: requests.c
 *   c->workers      the worker table, drops, refusals: client_workers.c
 *   c->sched        the scheduler thread: sched.c
 *   c->coord        coordinator channel, watch, job end: join.c
 *   c->io           the io threads, their queue, the runners: stream.c
 *   c->cuda         the CUDA backend: backend_cuda.c
 *
 * Threads: the caller's, the scheduler (sched.c), the copy thread
 * (ring.c), the coordinator watch (join.c), the local worker's builder
 * (local.c, stk_client_open_local only) and a fixed pool of io threads
 * (stream.c, at most 2) that serve every remote worker's stream from one
 * completion queue, however many workers there are; gRPC adds its own.
 *
 * Locking: one mutex per client (c->mu) guards every field that more than
 * one thread touches; fields fixed at open are read without it. There is
 * no other client lock. Under c->mu a thread may start gRPC operations
 * that never block (grpc_call_start_batch, cancel: the scheduler queues
 * and starts sends that way), but no thread holds c->mu while it waits
 * in gRPC (opening or closing a channel, taking events), CUDA or a memcpy
 * of a payload.
 *
 * Stream life (stream.c): each remote worker served is a runner, a state
 * machine driven by its call's events and a timer scan on the io threads:
 *   BACKOFF -> CONNECTING (its channel opened outside c->mu)
 *     -> OPEN (one receive in flight; sends queued, one in flight)
 *     -> CLOSING (receives over: requests re-queued; last events awaited)
 *     -> BACKOFF ... -> EXITING (channel closed) -> gone (thread_exited)
 * A runner ends when the worker is no longer wanted, or at stopping or a
 * fatal error.
 *
 * Request life (c->pool.reqs, a fixed pool of `prefetch` receive buffers):
 *   FREE -> QUEUED (seq assigned, waiting for a worker)
 *        -> ISSUED (sent to worker w) -> RECEIVING (w's chunks arriving)
 *        -> DONE (payload complete, crc ok) -> FREE (copy thread took it)
 *   A broken stream sends its ISSUED/RECEIVING requests back to QUEUED;
 *   only the receive of the stream a request is assigned to ever writes its
 *   buffer, and a stream has one receive in flight, handled by one io
 *   thread at a time: a request is re-issued only once its stream's
 *   receives have ended.
 *
 * Hedges (c->pool.hedges, a fixed pool of receive buffers): a request
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

#include "common/cpulimit.h"
#include "rpc/rpc.h"
#include "rpc/wire_limits.h"
#include "stoker/client.h"

#define STK__KEEP_DEPARTED  32          /* departed workers kept in the table (stats) */
#define STK__MAX_BANNED     64          /* ids of dropped workers remembered */
#define STK__LAT_SAMPLES    16          /* per-worker latencies for the hedge median */
#define STK__HEDGE_FLOOR_MS 100         /* never hedge a request younger than this */
#define STK__CRC_STREAK_MAX 3           /* consecutive bad crc32c before a drop */
#define STK__MAX_PER_WORKER 64          /* the worker's outstanding limit */
#define STK__STATE_MAGIC    0x534b5453u /* "STKS" little-endian */
#define STK__STATE_VERSION  2u          /* written; 1 and 2 are read (client_state.c) */
#define STK__STATE_SIZE     48u         /* version 2 */
#define STK__STATE_SIZE_V1  40u

/* The client's threads whose CPU is the receive path's (stk_stats.recv_cpu_s),
 * one slot each: the io threads by their index (at most 2), the copy
 * thread, the watch thread (with gRPC's default poll engine, epoll1, it
 * also reads the worker streams' sockets while it waits on its own call)
 * and the scheduler. */
enum {
  STK__CPU_IO0 = 0,
  STK__CPU_COPY = 2,
  STK__CPU_WATCH = 3,
  STK__CPU_SCHED = 4,
  STK__RECV_CPU_SLOTS = 5
};
#define STK__RECV_WINDOW_NS   5000000000ll /* the host share's window (5-10 s) */
#define STK__RECV_MIN_SPAN_NS 1000000000ll /* ... and its shortest span */

enum { REQ_FREE, REQ_QUEUED, REQ_ISSUED, REQ_RECEIVING, REQ_DONE };
enum { HEDGE_FREE, HEDGE_ISSUED, HEDGE_RECEIVING, HEDGE_ORPHAN };
enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

/* One receive buffer of c->pool (its life: above). Written under c->mu by
 * requests.c; buf moves between the pool and the slots (ring.c swaps it
 * while the request is DONE, which only the copy thread touches). */
typedef struct stk__req {
  int state;
  uint64_t seq;       /* linear step (client_state.c's plan maps it to an address) */
  int worker;         /* assigned worker, -1 */
  int avoid;          /* worker that sent a bad copy, -1 */
  unsigned char *buf; /* layout.total_bytes, owned by the pool */
  int u8;             /* buf holds the wire_u8 form (layout `wire`) */
  int64_t issued_ns;
  int hedge;  /* hedge slot holding this request's second copy, -1 */
  int hedged; /* a hedge was asked for (at most one per batch) */
} stk__req;

/* One hedge slot of c->pool (its life: above). Written under c->mu by
 * requests.c only. */
typedef struct stk__hedge {
  int state;          /* HEDGE_* */
  int req;            /* index into c->pool.reqs (ISSUED/RECEIVING), -1 */
  uint64_t seq;       /* the batch */
  int worker;         /* the worker asked (or, ORPHAN, the one writing) */
  unsigned char *buf; /* layout.total_bytes, owned by the pool */
  int u8;             /* buf holds the wire_u8 form */
  int64_t issued_ns;
} stk__hedge;

/* One entry of the worker table (c->workers.table). Every field is under
 * c->mu unless it says otherwise; which file writes it is grouped below.
 * Every file may read an entry under c->mu. */
typedef struct stk__worker {
  /* The table (client_workers.c; thread_exited and left_ns are the runner's or
   * local thread's last writes, stream.c/local.c). thread_started: served
   * by a runner (remote, stk__stream_start) or a thread (local, `thread`);
   * thread_exited: that runner or thread has ended. */
  int used;
  int idx;
  int local;     /* in-process builder instead of a stream */
  char *id;      /* as listed (< STK_MAX_ID_BYTES: longer ones are refused,
                    never cut); owned by the entry, changed only by client_workers.c
                    while no thread of the entry runs */
  char *address; /* host:port, as id (a re-listed address: see client_workers.c) */
  /* The bearer for Worker.Stream calls to it: its stream ticket as last
   * listed ("" = none: the client token, an older coordinator or worker).
   * Never logged. ticket_new: it changed since the runner opened its
   * channel; the runner reopens the channel with it (and clears it)
   * before its next stream. */
  char ticket[STK_MAX_TICKET_BYTES];
  int ticket_new;
  /* The worker refused this ticket as expired: the runner waits for the
   * list's next one (ticket_new) before it opens another stream. */
  int ticket_expired;
  int listed;  /* in the coordinator's current list */
  int dropped; /* not used again by this client (client_workers.c, stk__worker_drop) */
  /* The working set (client_workers.c, stk__workers_tick / recompute): see
   * client_workers.c's header. wset: 0 out, else why it is in (WSET_*). */
  int wset;
  uint32_t cores;        /* as listed (>= 1) */
  uint64_t id_hash;      /* FNV-1a of id */
  double score;          /* weighted HRW score for this rank (higher = first) */
  int coverage;          /* hash(id, job) mod world_size == rank */
  int64_t down_since_ns; /* in the set, no live stream since (0 = alive) */
  int64_t skip_until_ns; /* failed to connect: out of the set until then */
  uint32_t hnext;        /* id index chain (idx + 1, 0 = end) */
  int mark;              /* client_workers.c scratch (a whole list's members) */
  int thread_started, thread_exited;
  pthread_t thread;
  int64_t left_ns; /* when its runner or thread ended (departed entries) */
  struct stk_client *c;

  /* The stream (stream.c's runner; local.c for failures). */
  stk__rpc_channel *ch;    /* owned by the runner: opened and closed by the io
                              thread that scans, outside c->mu */
  struct stk__runner *run; /* stream.c's state machine (NULL: not served) */
  int alive;               /* stream open and taking requests */
  int probing;             /* no message yet on this stream: at most 1 request */
  int64_t last_msg_ns;     /* also requests.c when a first request goes */
  uint32_t failures;       /* consecutive broken streams (backoff) */
  uint32_t cap;            /* outstanding limit learnt from RESOURCE_EXHAUSTED, 0 = 64 */

  /* Load, latency and hedging (requests.c; `late` is set by sched.c's
   * hedge scan and cleared by requests.c). */
  uint32_t outstanding;
  double rate; /* batches/s, smoothed */
  int64_t last_done_ns;
  int64_t last_assigned_ns;
  uint64_t batches, bytes;
  uint64_t stream_batches; /* completed on the current stream (stream.c resets) */
  uint32_t crc_streak;     /* consecutive batches with a bad crc32c */
  int late;                /* has a request older than its hedge threshold */
  int64_t hedge_after_ns;  /* sched.c's hedge_scan scratch (-1 = not yet) */
  /* lat_ns[STK__LAT_SAMPLES] and abandoned[STK__MAX_PER_WORKER]: one block
   * that client_workers.c allocates when the entry's runner first starts (so a
   * listed worker outside the working set costs no room for them) and
   * frees with the entry; nobody touches them before (no request). */
  int64_t *lat_ns; /* recent issue-to-complete latencies */
  uint32_t nlat, lat_pos;
  uint64_t *abandoned; /* losing copies still coming */
  uint32_t nabandoned;
} stk__worker;

/* One slot of the ring (c->ring.slots). state is under c->mu: ring.c
 * fills FREE -> FILLING -> READY, client.c's next/release go through
 * ring.c's stk__slot_take / stk__slot_give_back. The rest is written by
 * the copy thread while FILLING (no lock) and by backend_cuda.c; the
 * caller reads it while HELD. */
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

/* c->job: the job this client reads and its layouts. Written only while
 * open runs, before any thread reads it: client.c (a local job, the
 * layouts, wire_u8) and join.c's stk__join (the coordinator's spec and
 * hash). Read-only afterwards, by every file, without c->mu. */
typedef struct stk__job {
  stk_job_spec spec; /* as hashed: an ImageFolder's num_classes may be 0 */
  uint64_t hash;
  /* ImageFolder: the class count and names (join.c from the Join reply,
   * client.c from the local dataset); classes NULL when the names did not
   * travel (or local: read from the dataset). */
  uint32_t nclasses;
  char **classes;
  char *data_root;         /* open_local's data root (stk_client_reference) */
  stk_dataset *dataset;    /* open_local: the in-process dataset */
  stk_batch_layout layout; /* as the job builds it (what workers send) */
  stk_batch_layout out;    /* as handed out (after convert) */
  /* wire_u8: a float image job (stk_image_wire_spec) whose workers may
   * send the image as 8-bit values (BatchRequest.image_uint8), in layout
   * `wire`; the copy thread rebuilds the floats exactly. */
  int wire_u8;
  stk_batch_layout wire;
} stk__job;

/* c->plan (client_state.c): epoch seg_epoch has seg_steps steps at sample offset
 * seg_offset (resumed with another world size), every other epoch spe
 * steps at offset 0; `total` seqs in all, the first one this client
 * delivers is `start`. Written only by stk__plan_init at open; read by
 * every file without c->mu. */
typedef struct stk__plan {
  uint64_t nsamples, spe, total, start;
  uint64_t seg_epoch, seg_offset, seg_steps;
} stk__plan;

/* c->errs (errors.c): the status that ends the client and the caller's
 * last-error string. fatal/fatal_msg: under c->mu, written only by
 * stk__set_fatal, read by every thread under c->mu. last: written on the
 * caller's thread by the public API functions (through errors.c's
 * setters or stk__errf into it), returned by stk_client_error. */
typedef struct stk__errors {
  int fatal; /* stk_status that ends the client, 0 = none */
  char fatal_msg[256];
  char last[4352]; /* room for the job's end reason and a traceback */
} stk__errors;

/* c->api (client.c): the caller's side. Under c->mu; written only by
 * client.c (next, release, close); client_state.c reads next_deliver under
 * c->mu (save_state, position); open_ns is fixed at open. */
typedef struct stk__api {
  uint64_t next_deliver; /* starts at c->plan.start */
  int eoe_pending;
  uint32_t eod_returned; /* STK_END_OF_DATA returns so far (the second one,
                            a loop past the last epoch, is logged once) */
  uint32_t held;         /* slots the caller holds */
  int closed;            /* stk_client_close ran while the caller held batches: the
                            last stk_batch_release frees the client (under mu) */
  uint64_t batches, stall_ns;
  int64_t open_ns, first_next_ns, last_next_ns;
  double step_ms_told; /* stk_client_set_step_ms (0 = measure) */
  /* next's wait for wait_seq: since when, and its last log line (client.c's
   * wait_log; wait_since_ns 0 = not waiting) */
  uint64_t wait_seq;
  int64_t wait_since_ns, wait_log_ns;
} stk__api;

/* c->ring (ring.c): the slots and the copy thread. slots[].state and
 * next_copy are under c->mu and written only by ring.c (client.c moves
 * slots READY -> HELD -> FREE through ring.c's functions); slots/nslots
 * are fixed once stk__ring_init returns; thread/started belong to the
 * opening and closing thread. */
typedef struct stk__ring {
  stk_batch *slots;
  uint32_t nslots;
  uint64_t next_copy; /* starts at c->plan.start */
  pthread_t thread;
  int started;
} stk__ring;

/* c->pool: the receive buffers (reqs) and the hedge slots. The arrays are
 * allocated, published under c->mu and freed (threads stopped) by ring.c;
 * every state change of an entry is requests.c's, under c->mu; other files
 * read entries under c->mu. The one write elsewhere: ring.c's copy thread
 * swaps a DONE request's buf with a slot's outside the lock (nobody else
 * touches a DONE request). The counters are under c->mu and written only
 * by requests.c; client.c reads them under c->mu (stats). */
typedef struct stk__pool {
  stk__req *reqs;
  uint32_t nreqs;
  stk__hedge *hedges; /* nhedges slots (0: hedging off) */
  uint32_t nhedges;
  uint64_t bytes, reissued, duplicates, crc_errors, substituted;
  uint64_t hedges_sent, hedges_won, hedge_dropped;
} stk__pool;

/* c->workers (client_workers.c): the worker table and what this client refused
 * or dropped. Under c->mu; written only by client_workers.c (entries: see
 * stk__worker); every file may read it under c->mu (client.c: next's
 * error, stats; sched.c: picking a worker). */
typedef struct stk__workers {
  /* Entry i is table[i], allocated once and never moved (a thread keeps
   * its pointer); the array of pointers grows. Every table[i] with i < n
   * is allocated; unused ones (used == 0) are reused. */
  stk__worker **table;
  uint32_t n;      /* entries ever used (high-water mark) */
  uint32_t cap;    /* room in table */
  uint32_t *index; /* id -> entry: hash buckets (idx + 1, 0 = none) */
  uint32_t nindex; /* buckets (a power of two, 0 = none yet) */
  /* This rank's working set (client_workers.c): k and its cap from the config,
   * extra = workers grown beyond k, size = entries in the set now. */
  uint32_t wset_k, wset_max, wset_extra, wset_size, wset_cover, listed;
  int64_t wset_changed_ns; /* last grow, shrink or replacement */
  int64_t wset_tick_ns;    /* last stk__workers_tick */
  int64_t wset_calm_ns;    /* since when the stall stayed under 1% */
  uint64_t wset_stall_ns;  /* c->api.stall_ns at the last tick */
  int64_t wset_stall_span; /* c->api.last_next_ns at the last tick */
  int wset_log_pending;    /* a set change not logged yet */
  int64_t wset_log_ns;     /* last working-set log line */
  int64_t refused_log_ns;  /* last refused-entry log line */
  uint64_t refused_logged; /* refused count at that line */
  uint64_t refused;        /* list entries refused (id/address too long) */
  char refused_msg[200];   /* why the last one was refused */
  char banned[STK__MAX_BANNED][STK_MAX_ID_BYTES]; /* dropped workers' ids */
  uint32_t nbanned;
  uint64_t dropped;   /* workers this client stopped using */
  int drop_status;    /* stk_status of the last drop */
  char drop_msg[300]; /* why the last one was dropped */
  /* the last stream that ended with an error or the last worker the
   * coordinator unlisted: "ADDRESS closed (...)" (stk__workers_stream_end,
   * stk__worker_unlist*), for the waiting line and next's error */
  char last_end[200];
} stk__workers;

/* c->sched (sched.c): the scheduler thread. next_issue and
 * no_worker_since_ns are under c->mu and written only by sched.c;
 * client.c reads no_worker_since_ns under c->mu (next's timeout).
 * thread/started belong to the opening and closing thread. */
typedef struct stk__sched {
  uint64_t next_issue; /* starts at c->plan.start */
  int64_t no_worker_since_ns;
  pthread_t thread;
  int started;
} stk__sched;

/* c->coord (join.c): the coordinator. client_id and list_version are
 * written by join.c only (client_id at join, then read-only;
 * list_version by the join and then the watch thread alone); the rest is
 * under c->mu and written only by join.c; client.c reads job_* (next) and
 * watching (stats) under c->mu. ch is opened by the join, used without
 * c->mu (a gRPC channel is thread-safe) and closed by stk__coord_close
 * once the threads are stopped. */
typedef struct stk__coord {
  stk__rpc_channel *ch;
  char client_id[128]; /* host:pid:rankR */
  uint64_t list_version;
  int finish_called;      /* stk_client_finish was called (re-announced) */
  int end_job_called;     /* ... with shutdown_job */
  stk__rpc_stream *watch; /* the watch stream, destroyed by the watch thread */
  int watching;           /* watch request sent on watch */
  int job_ended;
  int job_failed; /* ended because it was aborted (abort_job) */
  /* the coordinator's reason when it failed (a python op's traceback
   * included: printable ASCII and line breaks) */
  char job_end_reason[4096];
  pthread_t thread;
  int started;
} stk__coord;

struct stk_client {
  /* stk_client_interrupt's request (interrupt.c): an atomic flag set from
   * any thread or signal handler, cleared by the blocking call that
   * returns STK_INTERRUPTED for it. Never under c->mu. open_gen: the
   * process-wide interrupt generation when stk_client_open started (its
   * join is interrupted once it moves); fixed at open. */
  int intr_pending;
  uint32_t open_gen;
  /* config: fixed at open (client.c), read by every file without c->mu. */
  stk_client_config cfg;
  char *coordinator, *token;
  struct stk__tls *tls; /* cfg.tls_*, loaded at open; NULL = plaintext */
  int local;
  uint64_t fault_crc_every; /* $STOKER_FAULT_CRC_EVERY (local) */

  stk__job job;
  stk__plan plan;

  /* The lock (client.c: init, destroy, stopping). stopping is under mu,
   * set once by stk_client_close and read by every thread. */
  pthread_mutex_t mu;
  pthread_cond_t cv_sched, cv_copy, cv_next, cv_local;
  int stopping;

  stk__errors errs;
  stk__api api;
  stk__ring ring;
  stk__pool pool;
  stk__workers workers;
  stk__sched sched;
  stk__coord coord;

  struct stk__cuda *cuda; /* backend_cuda.c */
  struct stk__io *io;     /* stream.c: the io threads and their queue (under mu;
                             NULL until the first remote worker) */
  /* The receive path's CPU (stk_stats.recv_cpu_s): the user and system
   * CPU time, ns, of each of its threads (STK__CPU_*), stored by that
   * thread as it goes (stk__recv_cpu_note; relaxed atomics; read by
   * stk_client_stats). */
  uint64_t recv_cpu_user_ns[STK__RECV_CPU_SLOTS];
  uint64_t recv_cpu_sys_ns[STK__RECV_CPU_SLOTS];
  /* The watch thread's CPU clock (pthread_getcpuclockid), stored by that
   * thread at its start; watch_clock_set 1 once it is (relaxed atomics). */
  int watch_clock, watch_clock_set;
  double host_cores;           /* CPUs this process may use (quota, affinity), at open */
  stk__cpu_window recv_window; /* the host share's recent window (under mu) */
};

/* ---- interrupt.c: waking the blocking calls ---------------------------- */

/* How often a blocking wait looks for an interrupt (at most). */
#define STK__INTR_POLL_MS 100
/* The process-wide interrupt generation now (a blocking call takes it when
 * it starts). Any thread; lock-free. */
uint32_t stk__intr_gen(void);
/* 1 when the call that started at generation gen is interrupted:
 * stk_interrupt ran since, or c (NULL: none) has stk_client_interrupt's
 * request pending. Does not take the request. Any thread; lock-free. */
int stk__interrupted(const stk_client *c, uint32_t gen);
/* The blocking call returns STK_INTERRUPTED: c's pending request is taken
 * (NULL-safe). */
void stk__intr_take(stk_client *c);
/* stk__rpc_unary_stoppable's stop callback: arg is an stk__intr_ctx. */
typedef struct stk__intr_ctx {
  const stk_client *c;
  uint32_t gen;
} stk__intr_ctx;
int stk__intr_stop(void *arg);
/* Sleep ms in STK__INTR_POLL_MS pieces; 1 as soon as interrupted (as
 * stk__interrupted), else 0 after ms. */
int stk__intr_sleep_ms(const stk_client *c, uint32_t gen, int ms);

/* ---- errors.c: the fatal status and the last-error string ------------ */

/* Under mu: end the client with status (a stk_status) and msg, unless it
 * has ended already (the first reason stays); wakes every waiting thread. */
void stk__set_fatal(stk_client *c, int status, const char *msg);
/* On the caller's thread: the last-error string, fmt with one %s (arg). */
void stk__seterr(stk_client *c, const char *fmt, const char *arg);
/* Under mu: the fatal status (0 = none); when there is one, it is also
 * copied into the last-error string for the caller. */
int stk__fatal_check(stk_client *c);

/* ---- client.c ----------------------------------------------------------- */

/* The receive path's figures, as stk_stats's fields of the same names
 * say: CPU seconds (user + system, and each), per GB of payload, the
 * host's usable cores and the path's share of them. */
typedef struct stk__recv_figures {
  double cpu_s, user_s, sys_s;
  double per_gb, user_per_gb, sys_per_gb;
  double host_cores, host_share;
} stk__recv_figures;

/* This rank's figures for the coordinator's ReportStats, computed as
 * stk_client_stats computes them (step_ms and the receive figures as
 * its fields say). Takes c->mu; any thread. */
void stk__report_figures(stk_client *c, uint64_t *batches, double *stall_fraction,
                         uint32_t *workers_alive, double *step_ms, stk__recv_figures *rf);

/* On one of the receive path's threads: store its CPU time so far (user
 * and system) in slot (STK__CPU_*), for stk_client_stats. Lock-free;
 * one syscall (getrusage). */
void stk__recv_cpu_note(stk_client *c, int slot);

/* ---- client_state.c: the resume state and the plan ---------------------- */
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
/* At open, with c->job known: steps, the plan and its start seq
 * (rs NULL: the job's start) into c->plan. Checks rs against the job.
 * STK_OK or a status with err. */
int stk__plan_init(stk_client *c, const stk__resume *rs, char *err, size_t errlen);
/* The batch address of seq. Reads only c->plan: any thread, no lock. */
void stk__seq_addr(const stk_client *c, uint64_t seq, stk__addr *a);
/* The seq of an address of this client's plan: 0, or -1 if the address is
 * not in the plan (wrong offset for its epoch, step out of range). */
int stk__addr_seq(const stk_client *c, uint64_t epoch, uint64_t step, uint64_t offset,
                  uint64_t *seq);
/* The sample offset of epoch in this client's plan. Any thread, no lock. */
uint64_t stk__epoch_offset(const stk_client *c, uint64_t epoch);
/* 1 if seq is step 0 of an epoch (or the end of the job). */
int stk__seq_epoch_start(const stk_client *c, uint64_t seq);

/* ---- join.c: the coordinator -------------------------------------------- */

/* At open: Join (with retries until join_timeout_ms) and adopt the job
 * into c->job, its worker list into the table. STK_OK or a status with
 * err. Caller's thread; takes c->mu to add the workers. */
int stk__join(stk_client *c, char *err, size_t errlen);
/* Start the watch thread (WatchWorkers). 0, or -1 if no thread. */
int stk__watch_start(stk_client *c);
/* With c->stopping set: cancel the watch and join its thread (nothing if
 * it never started). Takes c->mu briefly. */
void stk__watch_stop(stk_client *c);
/* Close the coordinator channel (threads stopped); idempotent. */
void stk__coord_close(stk_client *c);
/* The job ended (failed: with reason, untrusted text kept as printable
 * ASCII and line breaks, bounded): every wait in next wakes and returns
 * STK_CANCELLED with it. From the watch (the coordinator's shutdown) or a
 * worker stream that ended "the job failed: ..." (stream.c). Under c->mu. */
void stk__coord_job_ended_locked(stk_client *c, int failed, const char *reason);

/* ---- client_workers.c: the worker table and the working set ----------- */

/* At open: an empty table, the working set's k and cap from c->cfg
 * (working_set, working_set_max). 0 (nothing to fail). */
int stk__workers_init(stk_client *c);
/* Close every entry's channel and free the entries and the table
 * (stopping the runners first if a failed open left them running).
 * NULL-safe on a table that was never allocated. */
void stk__workers_free(stk_client *c);
/* Threads stopped: close every entry's channel (a close that leaves held
 * slots behind keeps the table itself). */
void stk__workers_close_channels(stk_client *c);
/* Under mu: list (or re-list) worker id at address with cores (0 = 1) and
 * its stream ticket (NULL or "" = none; shorter than STK_MAX_TICKET_BYTES,
 * checked by the caller); a changed ticket makes its runner reopen its
 * channel with it. A remote worker's runner is started by
 * stk__workers_changed when it is in the working set; the local worker's
 * at once. Returns its index or -1 (banned, or out of memory: refused and
 * logged). */
int stk__worker_add(stk_client *c, const char *id, const char *address,
                    const char *ticket, uint32_t cores, int local);
/* Under mu: w's stream ended with gRPC code (details det): remembered as
 * the last end (code OK: nothing) for the waiting line. */
void stk__workers_stream_end(stk_client *c, const stk__worker *w, int code,
                             const char *det);
/* Under mu: worker id (if known) is no longer listed. */
void stk__worker_unlist(stk_client *c, const char *id);
/* Under mu: every remote worker not among ids[0..n) is no longer listed.
 * O(entries + n). */
void stk__worker_unlist_missing(stk_client *c, const char *const *ids, size_t n);
/* Under mu: the list changed (after adds and unlists): recompute this
 * rank's working set, start the runners of workers that entered it (those
 * that left end by themselves), log the set when it changed. */
void stk__workers_changed(stk_client *c);
/* Under mu: 1 if w should be served: listed, not dropped, and in this
 * rank's working set (the local worker always). A runner ends once this
 * is 0 and it holds no request (or has been idle 1 s); pick() gives new
 * requests only to wanted workers. */
int stk__worker_wanted(const stk_client *c, const stk__worker *w);
/* Under mu, from the scheduler thread (runs at most every 250 ms; cheap
 * otherwise): the working set's policy -- grow when input-bound, shrink
 * when calm, replace members that cannot be reached (client_workers.c). */
void stk__workers_tick(stk_client *c, int64_t now);
/* Under mu: count a worker list entry refused, with why (msg); logged
 * (rate-limited). */
void stk__workers_refuse(stk_client *c, const char *msg);
/* Under mu: 1 when every listed worker was dropped by this client (and at
 * least one is listed): the client has nothing left to ask. */
int stk__workers_all_dropped(stk_client *c);
/* Under mu: the entries whose stream is alive (or local). */
uint32_t stk__workers_alive(stk_client *c);
/* Under mu: stop using w for the rest of this client's life (status and
 * why become the client's error if no worker is left). Its runner sees
 * `dropped`, cancels its stream and ends; its requests are re-asked; the
 * working set takes the next worker in its order instead. */
void stk__worker_drop(stk_client *c, stk__worker *w, int status, const char *why);
/* Under mu: free departed entries, oldest first, until at most keep are
 * left. */
void stk__workers_reclaim(stk_client *c, uint32_t keep);
/* With c->stopping set and the scheduler joined: end every runner
 * (stk__stream_stop_all), wake the local worker and join its thread.
 * Takes c->mu briefly. */
void stk__workers_stop(stk_client *c);

/* ---- client_log.c: the client's log ----------------------------------- */

/* One line "<UTC time> stoker-client[rank R] INFO <msg>" on stderr in one
 * write (bytes outside printable ASCII in msg become '?'), unless
 * $STOKER_CLIENT_LOG is "0" or "off". Only for what the client leaves
 * out (refused list entries, the workers outside its working set); callers
 * rate-limit. Any thread; takes no lock. */
void stk__clog(const stk_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- stream.c, local.c: the remote workers' runners, the local thread --- */

typedef struct stk__runner stk__runner;
typedef struct stk__io stk__io;

/* Under mu: serve remote worker w with a runner on the io threads (started
 * with the first): its stream, reconnects, receiving and verifying its
 * batches, until the worker is no longer wanted (or stopping, fatal).
 * Sets w->thread_started; the runner's end sets w->thread_exited and
 * left_ns and broadcasts cv_sched. 0, or -1 (out of memory, no thread:
 * w stays unserved, thread_started 0). */
int stk__stream_start(stk__worker *w);
/* Under mu: send w the request for seq (r, or the hedge h) on its stream:
 * queued, and sent when the send before it has gone out, unless it was
 * taken back meanwhile (then stk__req_unsent). Never blocks. Nothing if
 * w's stream is not open (its requests were re-queued). */
void stk__stream_send(stk_client *c, stk__worker *w, uint64_t seq, stk__req *r,
                      stk__hedge *h);
/* With c->stopping set (not under mu; the scheduler joined): cancel every
 * stream, wait until every runner has ended, join the io threads and
 * free the queue. Nothing if none started. */
void stk__stream_stop_all(stk_client *c);
/* Thread body of the local worker (arg: its stk__worker): builds the
 * requests assigned to it in-process. */
void *stk__local_main(void *arg);

/* ---- requests.c: request and hedge states (all under mu) ---------------- */

/* Give every FREE request the next seq, from *next up to end (QUEUED). */
void stk__req_fill(stk_client *c, uint64_t *next, uint64_t end);
/* The QUEUED request with the lowest seq, or NULL. */
stk__req *stk__req_first_queued(stk_client *c);
/* r (QUEUED) is sent to w: ISSUED, counted outstanding on w. */
void stk__req_issue(stk_client *c, stk__req *r, stk__worker *w);
/* A FREE hedge slot, or NULL. */
stk__hedge *stk__hedge_find_free(stk_client *c);
/* Hedge slot h (FREE) asks w for the late request r's batch too, at now. */
void stk__hedge_issue(stk_client *c, stk__hedge *h, stk__req *r, stk__worker *w,
                      int64_t now);
/* 1 if w still owes the copy of seq that r (or, r NULL, hedge h) was
 * issued to it for: it should still be sent. */
int stk__req_still_issued(const stk__worker *w, uint64_t seq, const stk__req *r,
                          const stk__hedge *h);
/* seq will not be sent to w after all (the other copy won first): if it
 * was abandoned, it no longer counts against w. */
void stk__req_unsent(stk__worker *w, uint64_t seq);
/* Which buffer w's batch seq goes to (the request or hedge now
 * RECEIVING), or NULL: nobody wants it (counted as a duplicate). */
unsigned char *stk__req_claim(stk_client *c, stk__worker *w, uint64_t seq);
/* A batch no request wants (another rank's, or not in the plan). */
void stk__pool_duplicate(stk_client *c);
/* n payload bytes received (every copy, wanted or not). */
void stk__pool_bytes(stk_client *c, uint64_t n);
/* A copy of seq from w (nbytes) is complete in its claimed buffer: make
 * the batch DONE if this copy wins, else drop it; a bad crc re-asks (and
 * may drop w after STK__CRC_STREAK_MAX). Updates w's rate and latency. */
void stk__req_complete(stk_client *c, stk__worker *w, uint64_t seq, uint64_t nbytes,
                       int crc_ok, uint32_t substituted, int u8);
/* w's stream is over: send its requests back to the queue (a hedge in
 * flight elsewhere takes over instead) and free its hedges. */
void stk__req_requeue_worker(stk_client *c, stk__worker *w);
/* Entry idx is reused: no request avoids it any more. */
void stk__req_forget_worker(stk_client *c, int idx);
/* The local worker w's lowest ISSUED request, now RECEIVING, or NULL. */
stk__req *stk__req_local_take(stk_client *c, stk__worker *w);
/* The local worker's build of r failed transiently: back to QUEUED. */
void stk__req_local_retry(stk_client *c, stk__worker *w, stk__req *r);
/* The DONE request holding seq, or NULL (copy thread). */
stk__req *stk__req_done(stk_client *c, uint64_t seq);
/* The copy thread moved r's batch into a slot: r is FREE again. */
void stk__req_recycle(stk_client *c, stk__req *r);

/* ---- sched.c: the scheduler --------------------------------------------- */

/* At open: start the scheduler thread (from c->plan.start). 0 or -1. */
int stk__sched_start(stk_client *c);
/* With c->stopping set: join the scheduler, then end every worker's runner
 * or thread (stk__workers_stop). */
void stk__streams_stop(stk_client *c);
/* Under mu: no worker is alive yet as of now (the join's start of the
 * join_timeout_ms clock). */
void stk__sched_no_worker_from(stk_client *c, int64_t now);

/* ---- ring.c: buffers, slots and the copy thread ------------------------- */

/* At open: allocate the pool (c->pool, published under mu) and the slots.
 * STK_OK or a status with err; on failure stk__ring_free frees the rest. */
int stk__ring_init(stk_client *c, char *err, size_t errlen);
/* Start the copy thread. 0, or -1 if no thread. */
int stk__copy_start(stk_client *c);
/* With c->stopping set: join the copy thread (if it started). */
void stk__copy_stop(stk_client *c);
/* Threads stopped: free the pool and the slots. */
void stk__ring_free(stk_client *c);
/* Free the receive and hedge buffers (not the slots): at a close that
 * leaves held slots behind. Threads stopped. */
void stk__ring_free_transfer(stk_client *c);
/* Under mu: the READY slot holding seq, now HELD by the caller; NULL if
 * it is not ready yet. */
stk_batch *stk__slot_take(stk_client *c, uint64_t seq);
/* Under mu: b goes back to the ring if the caller held it (1), else 0. */
int stk__slot_give_back(stk_client *c, stk_batch *b);
/* stk_batch_payload's bytes: as received, or the float job rebuilt on the
 * host (at the first call, for a batch the kernel converted on the device;
 * NULL if that buffer cannot be allocated). Caller holds b. */
const unsigned char *stk__batch_host_payload(stk_batch *b);

/* ---- backend_cpu.c: host buffers for payloads --------------------------- */

/* n bytes of host memory for a payload (NULL when out of memory). */
void *stk__host_alloc(stk_client *c, size_t n);
/* Free what stk__host_alloc returned (NULL-safe). */
void stk__host_free(stk_client *c, void *p);

/* ---- backend_cuda.c: the CUDA backend (owns c->cuda) -------------------- */

/* At open: load the CUDA runtime and pick cfg.cuda_device into c->cuda.
 * STK_OK or a status with err (no runtime, no such device). */
int stk__cuda_open(stk_client *c, char *err, size_t errlen);
/* At open: s's device buffers, events. STK_OK or a status with err. */
int stk__cuda_slot_init(stk_client *c, stk_batch *s, char *err, size_t errlen);
/* Pinned host memory for a payload (NULL when out of memory). */
void *stk__cuda_host_alloc(stk_client *c, size_t n);
/* Free what stk__cuda_host_alloc returned. */
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
/* next hands out s: the caller's stream waits for its copy. */
int stk__cuda_on_next(stk_client *c, stk_batch *s);
/* The caller releases s: record where its work on s ends. */
void stk__cuda_on_release(stk_client *c, stk_batch *s);
/* Free s's device buffers and events. */
void stk__cuda_slot_free(stk_client *c, stk_batch *s);
/* Wait for everything queued on the backend's stream. */
void stk__cuda_sync(stk_client *c);
/* Free c->cuda (NULL-safe). */
void stk__cuda_close(stk_client *c);
/* The last CUDA error's text. */
const char *stk__cuda_error(stk_client *c);

/* ---- convert.c: 8-bit images to float ---------------------------------- */

/* Layout of the converted batch (image dtype/NCHW changed, others same). */
int stk__convert_layout(const stk_job_spec *spec, int convert, stk_batch_layout *out);
/* The image tensors of a job: the first views (1..4) ones. */
uint32_t stk__image_tensors(const stk_job_spec *spec);
/* The height and width of image tensor d in the given stk_layout (views may
 * differ in size). */
void stk__image_hw(const stk_tensor_desc *d, int layout, uint32_t *h, uint32_t *w);
/* The conversion that rebuilds a float job's images from their 8-bit wire
 * form: STK_CONVERT_FLOAT32 or STK_CONVERT_BFLOAT16, the job's dtype. */
int stk__wire_convert(const stk_job_spec *spec);
/* The output value of every (channel, byte) that stk__convert_batch makes,
 * as a [4][256] table of float32 (convert STK_CONVERT_FLOAT32, 4 KiB) or
 * bfloat16 bits (STK_CONVERT_BFLOAT16, 2 KiB): the CUDA kernel's table. */
void stk__convert_table(const stk_job_spec *spec, int convert, void *table);
/* src: payload in `in` layout (its image uint8 in spec's layout); dst:
 * buffer in `out` layout, its image in convert's dtype, NHWC if out_nhwc
 * (the wire_u8 rebuild of an NHWC job) else NCHW (cfg.convert). */
void stk__convert_batch(const stk_job_spec *spec, int convert, const stk_batch_layout *in,
                        const unsigned char *src, const stk_batch_layout *out,
                        unsigned char *dst, int out_nhwc);

#endif
