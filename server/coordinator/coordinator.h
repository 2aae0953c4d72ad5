/* coordinator.h - what the files of stoker-coordinator share (internal to
 * this one program, like the worker's session.h and fairsched.h): the options,
 * the one state struct C with the lock that guards each of its fields,
 * and the functions one file calls in another.
 *
 * The coordinator, one per job: loads the job spec, keeps worker sessions
 * (register, heartbeats, Drain/Shutdown commands; late heartbeats make a
 * worker suspect, a closed session or --heartbeat-lapse-s drops it), lets
 * client ranks join and watch the published worker list (versions and
 * deltas, each encoded once and shared: publish.c), tracks finished ranks,
 * answers Status,
 * and ends the job in order: when every rank has finished, rank 0 asks, a
 * signal arrives or no client touched the job for --idle-timeout-s, it
 * commands every worker to shut down, waits for them (bounded) and exits.
 * A rank may instead abort the job (Finish with abort_job): the job then
 * ends as failed (state "failed", workers told Shutdown{failed}, exit code
 * 4).
 *
 * With --state-dir, what a restart must not forget (the job's hash, the
 * dataset size and fingerprint, joined and finished ranks, the registered
 * workers, the job's end) is written to a state journal (persist.c, with
 * server/journal.c) before the call that changed it is answered (group
 * commits on the journal's own thread); a coordinator restarted with the
 * same job and state dir resumes from it.
 * Clients also re-announce themselves on every watch (rank, job hash,
 * finished), so even a restart on a fresh disk converges while the
 * ranks' clients are still open.
 *
 * The files (one concern each):
 *   coord_options.c  the option table, --help's exit codes
 *   coord_state.c    the job and C; loading the job, the helpers on C
 *   persist.c        --state-dir: journal snapshots (group commit),
 *                    resuming, workers expected back
 *   publish.c        the published worker list: versions, deltas, shared
 *                    encodings
 *   coord_workers.c  Coordinator.WorkerSession: register, heartbeats,
 *                    suspect, shutdown, drop
 *   tickets.c        the workers' stream tickets (minted, never stored or
 *                    logged)
 *   resolve.c        the advertised-address checks, on resolver threads of
 *                    their own (a cap on lookups at once, a timeout)
 *   ranks.c          Join, WatchWorkers (re-announcements), Finish (and abort)
 *   coord_status.c   ReportStats, Status, the stats line, /metrics
 *   coordinator.c    serving, the main loop, the orderly end, main()
 *
 * Threads and locks. Calls are event driven (rpc/include/rpc/rpc.h, "Server"):
 * handlers run on the rpc layer's threads and never block; sends only
 * queue, so they may be made under C.mu (lock order: C.mu, then the rpc
 * layer's own locks). The state journal has a thread of its own (the
 * writer, persist.c): Join of a new rank and Finish hold their call, and
 * a watch whose re-announcement taught something waits unstarted; they
 * are answered from it once their change is on disk (persist_after); so
 * is a worker's registration listed, and its departure unlisted, from it
 * (coord_workers.c). The main loop and an abort wait for it (persist_sync,
 * without C.mu). Advertised-address lookups run on resolver threads
 * (resolve.c; lock order: the resolver's lock, then C.mu). Its lock is taken
 * without C.mu. The main loop (coordinator.c: heartbeats, publication, watches,
 * timeouts) and the /metrics thread (coord_status.c, status_metrics) take C.mu
 * like any handler. A function named
 * *_locked is called with C.mu held; the rpc layer's handlers and
 * callbacks (handle_*, *_ops) and the functions whose comment says "call
 * without C.mu" take it themselves; the rest take no lock.
 *
 * Must not trust the network: every message is validated and a bad one
 * ends only its own call.
 */
#ifndef STOKER_SERVER_COORDINATOR_H
#define STOKER_SERVER_COORDINATOR_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "metrics.h"
#include "daemon_options.h"
#include "rpc/rpc.h"
#include "stoker.pb-c.h"
#include "stoker/core.h"
#include "rpc/ticket.h"
#include "rpc/wire_limits.h"

#define PROGRAM "stoker-coordinator"

enum {
  EXIT_OK = 0,     /* the job ended: all ranks finished, rank 0 asked, or a signal */
  EXIT_FAIL = 1,   /* cannot listen, cannot write the port file, state dir */
  EXIT_USAGE = 2,  /* bad option, config file or job spec; another job's state */
  EXIT_IDLE = 3,   /* no client touched the job for --idle-timeout-s */
  EXIT_ABORTED = 4 /* a rank aborted the job (Finish.abort_job) */
};

#define MAX_STR \
  STK_MAX_ID_BYTES     /* worker ids and addresses (rpc/include/rpc/wire_limits.h) */
#define MAX_FAILURES 8 /* worker failures kept for Status */
/* The worker list's publication (publish.c): at most one version per
 * PUB_MIN_MS, and the deltas of the last PUB_HISTORY versions kept while
 * they fit PUB_HISTORY_BYTES (a watcher further behind gets the whole
 * list). */
#define PUB_MIN_MS        250
#define PUB_HISTORY       64
#define PUB_HISTORY_BYTES (4u << 20)

/* ---- Options (coord_options.c) -------------------------------------------
 * Filled by stk__daemon_init in main before any thread starts; read-only
 * afterwards, so every thread reads them without a lock. */

typedef struct coord_opts {
  char *listen, *job, *token, *token_file, *port_file, *log_level, *metrics_listen,
      *state_dir, *worker_token_file, *client_token_file, *admin_token_file, *accel_type,
      *data_type;
  int trust_worker_addresses;
  stk__tls_opts tls;
  stk__strlist set;
  long long idle_timeout_s, heartbeat_interval_ms, heartbeat_misses, heartbeat_lapse_s,
      stats_interval_s, shutdown_grace_s, max_message_mb, watch_lease_s, rejoin_wait_s,
      linger_s, metrics_rank_series, resolve_threads, resolve_timeout_ms, ticket_ttl_s,
      accel_hosts;
  int print_job, help_job_keys, discard_state;
  stk__serve_opts serve;
  double max_bad_fraction;
} coord_opts;

extern coord_opts opt;
/* The option table that fills opt (noptions rows), for stk__daemon_init
 * and stk__options_free. */
extern stk__option options[];
extern const size_t noptions;
/* The exit codes as --help prints them. */
extern const char exit_codes_text[];

/* ---- State (coord_state.c) ----------------------------------------------- */

/* A persist_after callback (persist.c). */
typedef void (*persist_done_fn)(void *arg);
/* A place in the journal's queue, embedded in the object that waits (so
 * queueing never allocates and cannot fail). The journal owns it from
 * persist_after until just before fn runs (fn may free its object). */
typedef struct journal_waiter {
  persist_done_fn fn;
  void *arg;
  struct journal_waiter *next;
} journal_waiter;

/* The phases of a worker session (Coordinator.WorkerSession). */
enum { WS_HELLO, WS_CHECKING, WS_HELLO2, WS_ADMITTING, WS_SERVING, WS_OVER };

/* One worker session (coord_workers.c). Allocated by session_open, freed by
 * session_closed; linked into C.workers while registered (live). Fields
 * without a note are under C.mu once the worker is linked. */
typedef struct cworker {
  /* Written by the session's own callbacks before it is linked (they
   * come one at a time); read-only once linked. */
  char id[MAX_STR], address[MAX_STR];
  uint32_t cores;
  double cpu_cores;       /* usable cores it registered (0 = not told) */
  char instance_type[48]; /* its host's type as it named it ("" = not told) */
  /* Its stream ticket key (tickets.c; "" = none: no role tokens), written
   * before it is linked like the above; and its current ticket, minted
   * from the key, under C.mu once linked (tickets_tick mints it again
   * every half TTL). Listed to clients, never logged. */
  char key[STK__TICKET_KEY_HEX + 1];
  char ticket[STK__TICKET_MAX];
  uint64_t ticket_expiry; /* of ticket: unix s, the coordinator's clock */
  stk__rpc_call *call; /* its session; valid until session_closed (NULLed under C.mu) */
  int phase;           /* WS_*: under C.mu. Moved by the call's callbacks, and
                          from WS_CHECKING by the address check's answer
                          (resolve.c), from WS_ADMITTING once the worker is
                          journaled (persist_after) */
  int journal_wait;    /* a persist_after callback will come for it (under C.mu) */
  journal_waiter jw;   /* its place in the journal's queue: an admission or a
                          leave, never both at once */
  int gone;            /* its session is over: whoever holds it last frees it
                          (under C.mu) */
  int expect_added;    /* admission added it to the workers expected back */
  struct resolve_job *check; /* the pending or answered address check (resolve.c);
                                released by the session's callbacks */
  uint64_t ack_hash; /* the job hash the RegisterAck carried (set under C.mu, read by
                        the session's own callbacks) */
  int live;          /* in C.workers */
  int leaving;       /* session over: no longer journaled, unlink next */
  int shutdown_sent;
  int64_t registered_ms, last_hb_ms;
  /* Its heartbeats are late (over --heartbeat-misses intervals) while its
   * session is open: still listed, shown in Status and /metrics; since
   * when (workers_check_heartbeats sets it, a heartbeat clears it). */
  int suspect;
  int64_t suspect_since_ms;
  struct {
    uint64_t batches_built, bytes_sent, samples_substituted;
    uint32_t active_streams, queued_requests;
    double busy_fraction, batches_per_s;
  } stats;
  Stoker__V1__WorkerStats *hb; /* the last heartbeat's stats, whole (under C.mu) */
  struct cworker *next;
} cworker;

/* The job's state as Status and /metrics name it (state_locked). */
enum { ST_WAITING, ST_RUNNING, ST_DRAINING, ST_DONE, ST_FAILED };

struct watcher; /* an open WatchWorkers call (ranks.c) */

/* A change of the live list, recorded for the next publication
 * (publish_change_locked): a copy, so the worker may be freed meanwhile. */
typedef struct pub_change {
  char id[MAX_STR], address[MAX_STR], ticket[STK__TICKET_MAX];
  uint32_t cores;
  int removed; /* the id left the list (else: listed with these fields) */
  size_t seq;  /* its order among the changes (publish.c) */
} pub_change;

/* The coordinator's state: one daemon, one job, one mutex. Before the
 * server starts, main (state_load_job, persist_open) fills it without the lock;
 * from then on every field is under C.mu unless its note says otherwise.
 * Owner: the file that writes a field (named per group); the others read
 * it under C.mu. */
typedef struct coord_state {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* the live list changed, or shutting down (broadcast
                        under C.mu; nothing waits on it today) */
  stk__tls *tls;     /* --tls-*, loaded at start; NULL = plaintext. Read-only
                        once the server starts: no lock */

  /* The job (coord_state.c; the dataset's size and fingerprint: coord_workers.c,
   * from the first worker, and persist.c, at start). */
  stk_job_spec spec; /* spec.world_size never changes after state_load_job: read
                        without C.mu too */
  int resolved;      /* num_samples known */
  char *canonical;
  uint64_t hash;
  uint64_t config_hash; /* of the job as configured: the state journal's key.
                           Set once by state_load_job: no lock */
  uint64_t fingerprint;
  int have_fp;
  /* ImageFolder: the class count and names (coord_workers.c, from the first
   * worker; not journaled: after a restart, Join waits for a worker). */
  int have_classes;
  uint32_t nclasses;
  char **classes; /* nclasses names, or NULL when the dataset sent none */

  /* The live worker list (coord_workers.c). Clients never see it directly:
   * they see the versions publish.c makes of it. */
  cworker *workers; /* live ones */
  /* Its changes since the last publication (publish.c owns them; any
   * file adds with publish_change_locked). changes_lost: one could not be
   * recorded (out of memory), so the next publication reads the whole
   * list. */
  pub_change *changes;
  size_t nchanges, changes_cap;
  int changes_lost;
  /* The first published version: from the wall clock (main, before the
   * server starts; read-only after), so a restarted coordinator never
   * reuses a version its clients saw with another list. Never 0. */
  uint64_t first_version;

  /* Ranks (ranks.c): joined[r], finished[r] for r < world_size. */
  uint8_t *joined, *finished;
  uint32_t njoined, nfinished;

  /* The end of the job: requested with state_request_shutdown_locked (ranks.c,
   * coord_workers.c, coordinator.c; persist.c at start, from the journal), carried out
   * by coordinator.c (shutting_down, done). */
  int shutting_down;
  int shutdown_req; /* exit code to use once requested, +1 */
  /* room for a user-code error's traceback and the list of bad samples */
  char shutdown_reason[4096];
  int failed; /* the job was aborted; shutdown_reason says why */
  /* The job began before this coordinator started (a restart): a rank it
   * never saw join re-announced itself or finished, or the state journal
   * resumed it. Workers of the earlier coordinator may still be in their
   * reconnect backoff when the job ends: the end lingers (--linger-s). */
  int seen_earlier;
  int by_signal; /* the shutdown was asked by a signal: no linger */
  /* Workers that could not serve the job and said why (WorkerFailure):
   * the last MAX_FAILURES, for Status and waiting ranks (coord_workers.c). */
  struct wfail {
    char text[800]; /* "worker ID (ADDRESS): REASON", escaped */
    int64_t at_ms;
  } fails[MAX_FAILURES];
  uint32_t nfails; /* ever recorded; the newest is fails[(nfails - 1) % MAX] */
  /* The last time a worker was listed or left the list (coord_workers.c,
   * coord_state.c's state_unlink_locked): a failure newer than this, with no worker
   * listed, is what Join answers (workers_none_can_serve_locked). */
  int64_t workers_seen_ms;
  /* start_ms: set in main before the server starts, read-only after (no
   * lock); last_touch_ms: state_touch_locked, from any file. */
  int64_t start_ms, last_touch_ms;
  int watchers;               /* started watches (ranks.c) */
  struct watcher *watch_list; /* open WatchWorkers calls (ranks.c) */
  int done;                   /* every worker told and gone (coordinator.c) */
  struct crank {   /* the figures a rank last reported (ReportStats: coord_status.c) */
    int64_t at_ms; /* 0 = never */
    /* The process that holds the rank (one per rank, ranks.c): its client
     * id (NULL = none known), where it joined from and when, its open
     * watches and when one was last seen (holder_live). */
    char *holder;
    char holder_peer[64];
    int64_t holder_since_ms, holder_seen_ms;
    int holder_watches;
    uint64_t holder_gen; /* changes with the holder (a watch counts for one) */
    double stall_fraction, batches_per_s;
    uint64_t batches;
    uint32_t workers_alive;
    double step_ms, recv_cpu_s, recv_cpu_s_per_gb; /* 0 = not reported */
    double recv_cpu_user_s, recv_cpu_sys_s;        /* recv_cpu_s split */
    double recv_cpu_user_s_per_gb, recv_cpu_sys_s_per_gb;
    double recv_host_share, host_cores; /* share of the rank's usable cores */
  } * ranks;
  /* From the state journal (persist.c): ids of workers registered before a
   * restart and not back yet; the end of the job waits (bounded) for them
   * too. */
  char **expect;
  size_t nexpect;
} coord_state;

extern coord_state C;

/* Mark the job as touched by a client now (the idle timeout's clock).
 * Under C.mu. */
void state_touch_locked(void);
/* Ask for the end of the job with exit code code and reason why (copied);
 * the first request wins, later ones do nothing. The main loop (coordinator.c)
 * sees it within a tick. Under C.mu. */
void state_request_shutdown_locked(int code, const char *why);
/* The job's state now, ST_*. Under C.mu. */
int state_locked(void);
/* Recompute C.canonical and C.hash after a change of C.spec. 0, or -1 when
 * out of memory (the old text kept). Under C.mu (or before the server
 * starts). */
int state_job_publish_locked(void);
/* Take w off the live list (recorded for the next publication, C.cv
 * broadcast). 1 when it was on it, 0 when not. Does not free w. Under
 * C.mu. */
int state_unlink_locked(cworker *w);
/* Workers on the live list. Under C.mu. */
size_t state_nworkers_locked(void);
/* Load the job from --job and --set into C.spec, check it, publish its
 * text and hash and allocate the rank tables. 0, or -1 with err (a usage
 * error). From main, before the server starts. */
int state_load_job(char *err, size_t errlen);

/* ---- State journal, --state-dir (persist.c) ------------------------------ */

/* Open --state-dir and resume from its journal (or start one): takes over
 * the dataset, the ranks, the end of the job and the workers to expect
 * back into C. EXIT_OK, or an exit code (EXIT_FAIL, EXIT_USAGE) with err.
 * From main, before the server starts. */
int persist_open(char *err, size_t errlen);
/* 1 when a state journal is kept (--state-dir), else 0. Any thread. */
int persist_enabled(void);
/* Put the state as of now in the journal (nothing without --state-dir):
 * returns once a snapshot holding every change made before the call is on
 * disk. Joins the writer thread's next group commit. A failed write is
 * logged and the job goes on. Blocks on a file write + fsync: for the
 * main loop only (a serving thread uses persist_after). Call without
 * C.mu. */
void persist_sync(void);
/* fn(arg) once a snapshot holding every change made before this call is
 * on disk (or its write failed: logged, the job goes on). Runs on the
 * journal's writer thread, without C.mu, in the order queued; fn must not
 * block (it may take C.mu, answer a held call, log). Without --state-dir
 * fn runs at once, on the caller's thread. jw: not queued already. Never
 * writes on the caller's thread while the server runs. Call without
 * C.mu. */
void persist_after(journal_waiter *jw, persist_done_fn fn, void *arg);
/* Snapshots written since start and callers they answered (group
 * commit), for the figures; and the snapshots written on each kind of
 * thread: by[0] the journal's writer, by[2] any other (main, at start and
 * at the end), by[1] the snapshots written or waited for (persist_sync)
 * on a serving (RPC) thread, which never happens (the tests check it).
 * Any thread. */
void persist_figures(uint64_t *writes, uint64_t *waiters, uint64_t by[3]);
/* Stop the writer (after it answered everything queued) and release the
 * state dir (its lock). From main, after the server stopped. */
void persist_close(void);
/* Journal id as a worker to expect back, unless it is already: 1 when
 * added, 0 when it was there or on allocation failure. Under C.mu. */
int persist_expect_add_locked(const char *id);
/* A worker id registered again: no longer expected back. Under C.mu. */
void persist_expect_remove_locked(const char *id);
/* Once --rejoin-wait-s has passed since the start, stop waiting for the
 * journal's workers that did not come back (logged, journaled). Call
 * without C.mu (main loop). */
void persist_expect_expire(void);

/* ---- Stream tickets (tickets.c) ------------------------------------------ */

/* Turn tickets on (role tokens are set); off, tickets_key_new and
 * tickets_mint give "". ttl_s: --ticket-ttl-s. 0, or -1 when the system
 * gave no random bytes. From main, before the server starts. */
int tickets_init(int on, long long ttl_s);
/* The coordinator's clock in unix ms: its wall clock at tickets_init
 * carried on by the monotonic clock (what ticket expiries and
 * RegisterAck.coordinator_time_ms use). Any thread after tickets_init. */
uint64_t tickets_clock_ms(void);
/* A fresh ticket key for one registration into out ("" when tickets are
 * off): random, unrelated to the worker's id and address or any other
 * key. 0, or -1 (out "") when the system gave no random bytes. Any
 * thread after tickets_init; never logs it. */
int tickets_key_new(char out[STK__TICKET_KEY_HEX + 1]);
/* A ticket of key (from tickets_key_new; "" gives "") valid for half to
 * all of --ticket-ttl-s from now, the same for every call in the same
 * half TTL; its expiry (unix s) in *expiry_s. 0, or -1 (out "") when the
 * MAC failed. Any thread after tickets_init; never logs it. */
int tickets_mint(const char *key, char out[STK__TICKET_MAX], uint64_t *expiry_s);
/* Mint again, and publish, the ticket of every listed worker whose
 * ticket is of an earlier half TTL (C.mu taken here). Main loop only. */
void tickets_tick(void);
/* 1 when tickets are minted (role tokens are set). Any thread after
 * tickets_init. */
int tickets_on(void);
/* Wipe the key. From main, after the server stopped. */
void tickets_free(void);

/* ---- Advertised-address checks (resolve.c) -------------------------------
 * A worker's advertised host is looked up (stk__host_is_peer) on resolver
 * threads, never on the rpc layer's: a slow name delays only its own
 * session. Thread-safe; call without C.mu. */

typedef struct resolve_job resolve_job;
/* A check's answer: match as stk__host_is_peer's (1, 0, -1) or
 * RESOLVE_TIMEOUT; numeric is the checked address in numeric form (on 1),
 * resolved the addresses or the reason (for the message). Runs on a
 * resolver thread under the resolver's lock: must not block; may take C.mu
 * and send or finish calls; must not call resolve_*. */
typedef void (*resolve_done_fn)(void *arg, int match, const char *numeric,
                                const char *resolved);
enum { RESOLVE_TIMEOUT = -2, RESOLVE_QUEUE_PER_THREAD = 16 };
/* threads resolver threads (lookups at once), a check unanswered after
 * timeout_ms is answered RESOLVE_TIMEOUT. Before serving. 0, or -1 (no
 * thread). */
int resolve_start(int threads, long long timeout_ms);
/* After the server stopped: ends the threads (waits at most 2 s; a thread
 * stuck in a lookup is left to the process's end). */
void resolve_stop(void);
/* Queue a check of addr against peer (both copied); done(arg, ...) comes
 * exactly once, unless resolve_release comes first. NULL when the queue is
 * full (RESOLVE_QUEUE_PER_THREAD per thread), stopping, or out of memory. */
resolve_job *resolve_submit(const char *addr, const char *peer, resolve_done_fn done,
                            void *arg);
/* The owner is done with j (exactly once; not from done): after it returns
 * done does not come. Accepts NULL. */
void resolve_release(resolve_job *j);
/* Checks not answered yet (queued or being looked up). */
size_t resolve_pending(void);

/* ---- Worker sessions (coord_workers.c) ----------------------------------- */

/* Coordinator.WorkerSession's callbacks (the rpc layer calls them, one at
 * a time per call). */
extern const stk__rpc_stream_ops session_ops;
/* A deep copy of a worker's stats; the caller owns it
 * (protobuf_c_message_free_unpacked). NULL when out of memory. Any
 * thread; s must not change meanwhile (the caller owns it or holds C.mu). */
Stoker__V1__WorkerStats *stats_copy(const Stoker__V1__WorkerStats *s);
/* The newest worker failure as "; a worker could not serve the job: TEXT
 * (N s ago)" in buf (for a waiting rank's message), or "" (none). Returns
 * buf or "". Under C.mu. */
const char *workers_last_failure_locked(char *buf, size_t len);
/* Join's answer while no worker can serve the job: no worker is listed
 * and the newest failure came after the last worker was listed or left,
 * at least FAIL_GRACE_MS ago (a good worker starting beside a bad one
 * gets that long). 1 with STK_NO_WORKER_CAN_SERVE + the failure + what to
 * do in buf, else 0. Under C.mu. */
#define FAIL_GRACE_MS 2000
int workers_none_can_serve_locked(char *buf, size_t len);
/* Send Shutdown to every live worker that has not had it yet (queued
 * only). Call without C.mu (main loop). */
void workers_send_shutdowns(void);
/* Heartbeats: a worker whose last one is older than --heartbeat-misses
 * intervals becomes suspect (still listed; logged once, and once when it
 * recovers); one whose lapse reaches --heartbeat-lapse-s is dropped from
 * the list and its session aborted. Call without C.mu (main loop). */
void workers_check_heartbeats(void);

/* ---- The published worker list (publish.c) ------------------------------
 *
 * Versions: the first is C.first_version, each later one +1; a version is
 * made only when the list as clients see it changed, at most one per
 * PUB_MIN_MS (changes in between are coalesced into one). Each version's
 * whole list, its delta from the previous one and Join's entries are
 * encoded once, outside C.mu, into refcounted slices that every send
 * shares. */

/* Record that w was listed (removed 0: with its id, address, cores and
 * ticket as they are now) or left (removed 1). O(1): a copy into
 * C.changes. Under C.mu. */
void publish_change_locked(const cworker *w, int removed);
/* Publish the recorded changes as the next version when PUB_MIN_MS have
 * passed since the last one (or nothing was published yet), and the last
 * list (shutting_down) once the job ends. The only caller is the main
 * loop's thread (run_job, shut_down_workers); call without C.mu. */
void publish_tick(int64_t now);
/* The published version (0 before the first publication). Under C.mu. */
uint64_t publish_version_locked(void);
/* What a watcher that knows version known needs, as byte buffers over the
 * shared encodings (the caller owns the buffers: send or destroy them):
 * with final, the last list once it is encoded (else nothing); else
 * nothing when known is the published version, the deltas from known on
 * (deltas set and known's successor still in the history, at most max), or
 * the whole list. The number of buffers in out (0 = nothing to send, *version
 * untouched), or -1 when out of memory. *version: the version they bring
 * the watcher to. Under C.mu. */
int publish_messages_locked(uint64_t known, int deltas, int final, grpc_byte_buffer **out,
                            size_t max, uint64_t *version);
/* Join's reply as a byte buffer (the caller owns it): the job part (packed
 * again only when the job changed), the published version and the
 * published entries, all shared slices: O(1) per join. *version gets the
 * version. NULL when out of memory. Under C.mu. */
grpc_byte_buffer *publish_join_reply_locked(uint64_t *version);
/* Figures for /metrics: the version, versions published, the last
 * delta's and whole list's sizes in bytes, deltas held. Under C.mu. */
void publish_figures_locked(uint64_t *version, uint64_t *published, uint64_t *delta_bytes,
                            uint64_t *whole_bytes, size_t *history);
/* Free it all. From main, after the server stopped. */
void publish_free(void);

/* ---- Ranks (ranks.c) ----------------------------------------------------- */

/* Coordinator.Join (unary handler: answers or finishes the call). */
void ranks_join(stk__rpc_call *call, const ProtobufCMessage *req);
/* Coordinator.WatchWorkers' callbacks. */
extern const stk__rpc_stream_ops watch_ops;
/* Coordinator.Finish (also abort_job). Journals before it answers. */
void ranks_finish(stk__rpc_call *call, const ProtobufCMessage *req);
/* Open watches that keep the job from its idle timeout now. Under C.mu. */
int ranks_watch_holds_locked(int64_t now);
/* Send every watcher the list if it changed, end those whose lease is
 * over. Call without C.mu (main loop). */
void ranks_watch_pump_all(void);

/* ---- Status and figures (coord_status.c) --------------------------------- */

/* Coordinator.ReportStats (unary handler). */
void status_report_stats(stk__rpc_call *call, const ProtobufCMessage *req);
/* Coordinator.Status (unary handler): everything to a client or admin
 * caller; only the state, uptime and end reason to a worker-token one. */
void status_handle(stk__rpc_call *call, const ProtobufCMessage *req);
/* One stats line ("stats state=...") and the sd_notify STATUS=; *last_ms
 * and *last_bytes carry the previous line's time and byte count for the
 * rate. Call without C.mu (main loop). */
void status_log_stats(int64_t now, int64_t *last_ms, uint64_t *last_bytes);
/* GET /metrics (stk__metrics_fn): the job, workers and ranks. The per-worker
 * samples (labelled with the worker's id and address, which Status
 * withholds from the worker role) only when full. Takes C.mu; runs on
 * metrics.c's HTTP thread. */
void status_metrics(stk__metrics_buf *b, int full, void *ud);

#endif
