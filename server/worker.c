/* worker.c - stoker-worker, the data-group sidecar: registers with the
 * coordinator (session.c), serves Worker.Stream to many clients, builds
 * only requested batches with a pool of builder threads scheduled fairly
 * across streams (sched.c), and sends each batch as a header message plus
 * zero-copy payload chunks (wire.c).
 *
 * Per stream, event driven on the rpc layer's few threads (no thread per
 * stream): each BatchRequest (credit) is validated and queued; each
 * finished batch is sent, whole, in completion order. An invalid request
 * ends only that stream, with a gRPC status. Owns the job, the dataset and the scheduler.
 * Must not trust anything from the network.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/secret.h"
#include "daemon.h"
#include "health.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "options.h"
#include "msgcheck.h"
#include "rpc.h"
#include "worker/sched.h"
#include "worker/session.h"
#include "stoker/augment.h"
#include "stoker/version.h"
#include "wire.h"
#include "wire_limits.h"

#define PROGRAM "stoker-worker"

enum {
  EXIT_OK = 0,       /* Shutdown from the coordinator, or SIGTERM/SIGINT */
  EXIT_FAIL = 1,     /* cannot listen, cannot open the dataset, ... */
  EXIT_USAGE = 2,    /* bad option */
  EXIT_ORPHAN = 3,   /* coordinator unreachable past --orphan-timeout-s */
  EXIT_REJECTED = 4, /* the coordinator rejected this worker (job/dataset) */
  EXIT_ABORTED = 5   /* Shutdown{failed}: the job was aborted */
};

static const char exit_codes_text[] =
    "  0  shut down by the coordinator (job over), or SIGTERM/SIGINT, after draining\n"
    "  1  runtime failure (cannot listen, cannot open the dataset, ...)\n"
    "  2  usage error (bad option or config file)\n"
    "  3  orphaned: the coordinator was unreachable longer than --orphan-timeout-s\n"
    "  4  rejected by the coordinator (another job, dataset size or fingerprint "
    "differs,\n"
    "     protocol version, wrong token)\n"
    "  5  the job was aborted (a rank or `stoker abort` ended it as failed); the\n"
    "     worker drained (at most 2 s) and exited\n";

/* ---- Options ----------------------------------------------------------- */

static struct {
  char *coordinator, *listen, *advertise, *data_root, *token, *token_file, *port_file,
      *log_level, *metrics_listen, *client_token_file, *plugin_dir;
  stk__tls_opts tls;
  long long threads, batch_buffers, max_outstanding, chunk_bytes, drain_timeout_s,
      orphan_timeout_s, stats_interval_s, max_message_mb, max_file_mb, max_pixels,
      fault_transient_every, bad_log_per_10s;
  stk__serve_opts serve;
} opt;

static stk__option options[] = {
    {"coordinator", OPT_STR, "", stk__opt_hostport,
     "host:port of stoker-coordinator (required)", &opt.coordinator, 0, 0},
    {"listen", OPT_STR, "127.0.0.1:0", stk__opt_hostport,
     "address to serve Worker.Stream on (port 0 = any free port)", &opt.listen, 0, 0},
    {"advertise", OPT_STR, "", stk__opt_hostport,
     "host:port clients dial (default: the bound listen address; the host "
     "name when listening on all addresses)",
     &opt.advertise, 0, 0},
    {"data-root", OPT_STR, "", NULL,
     "directory file datasets are read under (never outside it)", &opt.data_root, 0, 0},
    {"plugin-dir", OPT_STR, "", NULL,
     "directory of plugin ops (a job's plugin = NAME loads DIR/NAME.so; default "
     "$STOKER_PLUGIN_DIR; none: jobs naming a plugin are refused)",
     &opt.plugin_dir, 0, 0},
    {"threads", OPT_INT, "0", NULL, "batch builder threads (0 = number of cores)",
     &opt.threads, 0, 1024},
    {"batch-buffers", OPT_INT, "0", NULL,
     "batch buffers, the bound on memory (0 = 2 * threads + 2)", &opt.batch_buffers, 0,
     4096},
    {"max-outstanding", OPT_INT, "64", NULL,
     "unanswered requests allowed per stream (past it: RESOURCE_EXHAUSTED)",
     &opt.max_outstanding, 1, 1 << 20},
    {"chunk-bytes", OPT_INT, "4194304", NULL, "payload bytes per chunk message",
     &opt.chunk_bytes, 4096, STK_MAX_CHUNK_BYTES},
    {"drain-timeout-s", OPT_INT, "10", NULL,
     "on shutdown, time to finish sending what was requested (a second "
     "SIGTERM/SIGINT cuts it short)",
     &opt.drain_timeout_s, 0, 3600},
    {"orphan-timeout-s", OPT_INT, "60", NULL,
     "exit (code 3) when the coordinator is unreachable this long", &opt.orphan_timeout_s,
     1, 86400 * 7},
    {"token-file", OPT_STR, "", NULL,
     "read the bearer token (every call must carry it; sent to the coordinator) "
     "from the first line of FILE (else $STOKER_TOKEN, else the file "
     "$STOKER_TOKEN_FILE names; none: no token)",
     &opt.token_file, 0, 0},
    {"token", OPT_STR, "", NULL,
     "the bearer token itself: visible to every local user in ps, prefer "
     "--token-file or $STOKER_TOKEN",
     &opt.token, 0, 0},
    {"client-token-file", OPT_STR, "", NULL,
     "role separation: streams need this token (the coordinator's "
     "--client-token-file); the worker's own token then only opens its session",
     &opt.client_token_file, 0, 0},
    STK__TLS_SERVER_OPTIONS(opt.tls),
    {"port-file", OPT_STR, "", NULL,
     "after binding, write the bound port here (decimal, newline; atomic rename)",
     &opt.port_file, 0, 0},
    {"stats-interval-s", OPT_INT, "10", NULL, "seconds between stats log lines",
     &opt.stats_interval_s, 1, 86400},
    {"max-message-mb", OPT_INT, "16", NULL,
     "largest gRPC message sent (chunks must fit); requests are received with their own "
     "small limits (docs/operations.md)",
     &opt.max_message_mb, 1, 1024},
    {"max-file-mb", OPT_INT, "64", NULL, "largest dataset file read", &opt.max_file_mb, 1,
     1 << 20},
    {"max-pixels", OPT_INT, "100000000", NULL, "largest decoded image (width*height)",
     &opt.max_pixels, 1, 1LL << 40},
    {"log-level", OPT_STR, "info", stk__opt_loglevel, "debug | info | warn | error",
     &opt.log_level, 0, 0},
    {"metrics-listen", OPT_STR, "", stk__opt_hostport,
     "serve Prometheus /metrics on this host:port (port 0 = any free one, logged); "
     "empty = off",
     &opt.metrics_listen, 0, 0},
    {"bad-log-per-10s", OPT_INT, "100", NULL,
     "at most this many bad-sample log lines per 10 s (each bad file is logged once; "
     "past the limit they are counted and the count logged)",
     &opt.bad_log_per_10s, 0, 1 << 20},
    {"fault-transient-every", OPT_INT, "0", NULL,
     "testing: every Nth batch fails as if out of file descriptors (the stream ends "
     "UNAVAILABLE, the client re-asks); 0 = off",
     &opt.fault_transient_every, 0, 1 << 30},
    STK__SERVE_OPTIONS(opt.serve),
};
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

static char token[STK_TOKEN_MAX + 1]; /* resolved in main (stk__daemon_token) */

/* ---- State ------------------------------------------------------------- */

/* A layout's tensors as BatchHeader descriptors (pointing into it). */
typedef struct stk__tdescs {
  Stoker__V1__TensorDesc d[STK_MAX_TENSORS];
  Stoker__V1__TensorDesc *ptr[STK_MAX_TENSORS];
  uint64_t shapes[STK_MAX_TENSORS][STK_MAX_DIMS];
} stk__tdescs;

static struct {
  pthread_mutex_t mu;
  stk__tls *tls; /* --tls-*: serving and the coordinator session; NULL = plaintext */
  int have_job;
  stk_job_spec spec; /* resolved: num_samples = dataset size */
  uint64_t job_hash; /* hash of the resolved spec: what streams carry */
  uint64_t steps;    /* per epoch per rank */
  stk_batch_layout layout;
  stk__tdescs td;
  stk_batch_layout layout8; /* the uint8-image twin (image_uint8 requests) */
  stk__tdescs td8;
  stk_dataset *ds;
  sched *sch;
  int draining;              /* atomic */
  int shutdown_cmd;          /* atomic */
  int aborted;               /* atomic: the shutdown said the job failed */
  uint64_t dropped_requests; /* atomic: asked while draining */
  uint64_t stream_errors;    /* atomic */
  uint32_t threads;
  /* heartbeat rate bookkeeping (session thread only) */
  int64_t last_ms;
  uint64_t last_built, last_busy;
  double busy_fraction; /* the last heartbeat's, for /metrics (under mu) */
} W = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- Bad samples ------------------------------------------------------- */

/* Reasons a sample is bad, as metrics labels and in Status; the last one
 * catches every other decoder message. */
static const char *const bad_reasons[] = {
    "truncated", "not_jpeg",   "too_many_pixels", "too_many_scans", "too_large",
    "empty",     "unreadable", "bad_label",       "corrupt"};
#define NBAD       (sizeof(bad_reasons) / sizeof(bad_reasons[0]))
#define BAD_RECENT 8

static struct {
  pthread_mutex_t mu;
  uint64_t count[NBAD];
  char recent[BAD_RECENT][600]; /* ring: "path: reason", newest at next-1 */
  unsigned nrecent, next;
  int64_t window_ms;   /* start of the current 10 s log window */
  uint64_t logged;     /* lines in that window */
  uint64_t suppressed; /* bad samples not logged in that window */
  char prefix[4200];   /* "<dataset dir>/": cut from paths */
  size_t prefix_len;
} BAD = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The reason class of a builder's message (augment/decode.c, jpegsrc.c). */
static size_t bad_class(const char *why) {
  static const struct {
    const char *needle;
    size_t cls;
  } map[] = {{"truncated", 0},
             {"not a JPEG", 1},
             {"pixel limit", 2},
             {"scans", 3},
             {"size limit", 4},
             {"file over", 4},
             {"decoded region over", 4},
             {"empty file", 5},
             {"open:", 6},
             {"fstat:", 6},
             {"read:", 6},
             {"not a regular file", 6},
             {"label", 7}};
  for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
    if (strstr(why, map[i].needle)) return map[i].cls;
  return NBAD - 1;
}

/* stk_bad_sample_fn: the dataset calls it once per distinct bad sample
 * (any builder thread). Counted by reason, kept among the last few, and
 * logged once with its dataset-relative path unless the log window's
 * --bad-log-per-10s is used up. */
static void on_bad_sample(void *ud, const char *path, const char *why) {
  (void)ud;
  size_t cls = bad_class(why);
  const char *rel = path;
  int64_t now = stk__now_ms();
  uint64_t suppressed = 0;
  pthread_mutex_lock(&BAD.mu);
  if (BAD.prefix_len && !strncmp(path, BAD.prefix, BAD.prefix_len)) rel += BAD.prefix_len;
  BAD.count[cls]++;
  snprintf(BAD.recent[BAD.next], sizeof(BAD.recent[0]), "%.400s: %.190s", rel, why);
  BAD.next = (BAD.next + 1) % BAD_RECENT;
  if (BAD.nrecent < BAD_RECENT) BAD.nrecent++;
  if (now - BAD.window_ms >= 10000) {
    suppressed = BAD.suppressed;
    BAD.window_ms = now, BAD.logged = 0, BAD.suppressed = 0;
  }
  int log = BAD.logged < (uint64_t)opt.bad_log_per_10s;
  if (log) BAD.logged++;
  else BAD.suppressed++;
  pthread_mutex_unlock(&BAD.mu);
  if (suppressed)
    LOG_WARN("%" PRIu64 " more bad samples were not logged (--bad-log-per-10s %lld)",
             suppressed, opt.bad_log_per_10s);
  if (log)
    LOG_WARN("bad sample %s: %s (reason %s; replaced by the next good sample)", rel, why,
             bad_reasons[cls]);
}

/* Where bad-sample paths start being dataset-relative: the dataset's
 * directory as the source resolves it (realpath under --data-root). */
static void bad_set_prefix(const stk_job_spec *spec) {
  char joined[4200], real[4200];
  snprintf(joined, sizeof(joined), "%s/%s", *opt.data_root ? opt.data_root : ".",
           spec->dataset);
  pthread_mutex_lock(&BAD.mu);
  BAD.prefix_len = 0;
  size_t n = realpath(joined, real) ? strlen(real) : sizeof(BAD.prefix);
  if (n + 2 <= sizeof(BAD.prefix)) {
    memcpy(BAD.prefix, real, n);
    BAD.prefix[n] = '/', BAD.prefix[n + 1] = 0;
    BAD.prefix_len = n + 1;
  }
  pthread_mutex_unlock(&BAD.mu);
}

/* The heartbeat's bad-sample fields. The arrays are static: the session
 * thread packs the heartbeat before its next fill_stats. */
static void bad_fill_stats(Stoker__V1__WorkerStats *out) {
  static Stoker__V1__BadSampleCount cnt[NBAD], *cntp[NBAD];
  static char recent[BAD_RECENT][600];
  static char *recentp[BAD_RECENT];
  pthread_mutex_lock(&BAD.mu);
  for (size_t i = 0; i < NBAD; i++) {
    stoker__v1__bad_sample_count__init(&cnt[i]);
    cnt[i].reason = (char *)bad_reasons[i];
    cnt[i].count = BAD.count[i];
    cntp[i] = &cnt[i];
  }
  for (unsigned k = 0; k < BAD.nrecent; k++) {
    unsigned idx = (BAD.next + BAD_RECENT - BAD.nrecent + k) % BAD_RECENT;
    memcpy(recent[k], BAD.recent[idx], sizeof(recent[k]));
    recentp[k] = recent[k];
  }
  out->n_bad_recent = BAD.nrecent;
  pthread_mutex_unlock(&BAD.mu);
  out->n_bad_samples = NBAD;
  out->bad_samples = cntp;
  out->bad_recent = recentp;
}

static sched *current_sched(void) {
  pthread_mutex_lock(&W.mu);
  sched *s = W.have_job ? W.sch : NULL;
  pthread_mutex_unlock(&W.mu);
  return s;
}

static const char *dtype_name(int dt) {
  switch (dt) {
    case STK_DTYPE_UINT8:
      return "uint8";
    case STK_DTYPE_FLOAT32:
      return "float32";
    case STK_DTYPE_BFLOAT16:
      return "bfloat16";
    case STK_DTYPE_INT64:
      return "int64";
    case STK_DTYPE_INT32:
      return "int32";
  }
  return "unknown";
}

/* Fill td from layout L (the descriptors point into L, which must outlive
 * them: both live in W). */
static void fill_tdescs(const stk_batch_layout *L, stk__tdescs *td) {
  for (uint32_t i = 0; i < L->ntensors; i++) {
    const stk_tensor_desc *t = &L->tensors[i];
    Stoker__V1__TensorDesc *d = &td->d[i];
    stoker__v1__tensor_desc__init(d);
    d->name = (char *)t->name;
    d->dtype = (char *)dtype_name(t->dtype);
    for (uint32_t k = 0; k < t->ndim; k++) td->shapes[i][k] = t->shape[k];
    d->n_shape = t->ndim;
    d->shape = td->shapes[i];
    d->offset = t->offset;
    d->nbytes = t->nbytes;
    td->ptr[i] = d;
  }
}

/* session hook: the coordinator's job. */
static int on_job(const char *canonical, uint64_t hash, uint64_t *job_hash,
                  uint64_t *dataset_size, uint64_t *fp, char *err, size_t errlen) {
  stk_job_spec spec;
  char msg[512];
  stk_job_spec_defaults(&spec);
  if (stk_job_spec_parse(&spec, canonical, msg, sizeof(msg))) {
    return stk__errf(err, errlen, -1, "the coordinator's job does not parse: %s", msg);
  }
  if (stk_job_spec_hash(&spec) != hash) {
    snprintf(err, errlen,
             "the coordinator's job text does not match its hash "
             "(another stoker version?)");
    return -1;
  }
  pthread_mutex_lock(&W.mu);
  int have = W.have_job;
  pthread_mutex_unlock(&W.mu);
  if (have) {
    stk_job_spec resolved = spec;
    resolved.num_samples = stk_dataset_size(W.ds);
    if (stk_job_spec_hash(&resolved) != W.job_hash) {
      snprintf(err, errlen,
               "the coordinator now runs another job (hash "
               "%016" PRIx64 ", this worker serves %016" PRIx64 "); restart the worker",
               stk_job_spec_hash(&resolved), W.job_hash);
      return -1;
    }
  } else {
    stk_limits lim;
    memset(&lim, 0, sizeof(lim));
    lim.max_file_bytes = (uint64_t)opt.max_file_mb << 20;
    lim.max_pixels = (uint64_t)opt.max_pixels;
    lim.plugin_dir = *opt.plugin_dir ? opt.plugin_dir : NULL;
    stk_dataset *ds = NULL;
    if (stk_dataset_open(&spec, *opt.data_root ? opt.data_root : NULL, &lim, &ds, msg,
                         sizeof(msg))) {
      /* -2: this worker's own failure (exit 1), not a mismatch (4) */
      return stk__errf(err, errlen, -2, "cannot open the dataset: %s", msg);
    }
    bad_set_prefix(&spec);
    stk_dataset_set_log(ds, on_bad_sample, NULL);
    stk_job_spec resolved = spec;
    resolved.num_samples = stk_dataset_size(ds);
    int nbuf = opt.batch_buffers ? (int)opt.batch_buffers : 2 * (int)W.threads + 2;
    sched *sch = NULL;
    if (stk_batch_layout_of(&resolved, &W.layout) ||
        sched_create(&resolved, ds, (int)W.threads, nbuf, &sch, msg, sizeof(msg))) {
      snprintf(err, errlen, "cannot start the builders: %s", msg);
      stk_dataset_close(ds);
      return -2;
    }
    fill_tdescs(&W.layout, &W.td);
    stk_job_spec spec8;
    if (stk_image_wire_spec(&resolved, &spec8) &&
        !stk_batch_layout_of(&spec8, &W.layout8))
      fill_tdescs(&W.layout8, &W.td8);
    pthread_mutex_lock(&W.mu);
    W.ds = ds;
    W.spec = resolved;
    W.job_hash = stk_job_spec_hash(&resolved);
    W.steps = stk_steps_per_epoch(&resolved, resolved.num_samples);
    W.sch = sch;
    W.have_job = 1;
    if (opt.fault_transient_every)
      sched_set_fault_transient(sch, (uint32_t)opt.fault_transient_every);
    pthread_mutex_unlock(&W.mu);
    LOG_INFO("job %s loaded: hash=%016" PRIx64 " samples=%" PRIu64
             " steps_per_epoch=%" PRIu64 " batch_bytes=%" PRIu64 " buffers=%d",
             resolved.name, W.job_hash, resolved.num_samples, W.steps,
             W.layout.total_bytes, nbuf);
  }
  *job_hash = hash;
  *dataset_size = stk_dataset_size(W.ds);
  *fp = stk_dataset_fingerprint(W.ds);
  return 0;
}

static void fill_stats(Stoker__V1__WorkerStats *out) {
  sched *s = current_sched();
  if (!s) return;
  sched_stats st;
  sched_stats_get(s, &st);
  int64_t now = stk__now_ms();
  out->batches_built = st.batches_built;
  out->bytes_sent = sched_bytes_sent(s);
  out->samples_substituted = st.samples_substituted;
  out->active_streams = st.active_streams;
  out->queued_requests = st.queued_requests;
  out->free_buffers = st.free_buffers;
  out->nbuffers = st.nbuffers;
  bad_fill_stats(out);
  if (W.last_ms && now > W.last_ms) {
    double dt = (double)(now - W.last_ms) / 1000.0;
    out->batches_per_s = (double)(st.batches_built - W.last_built) / dt;
    out->busy_fraction = (double)(st.busy_ns - W.last_busy) / 1e9 / dt / W.threads;
    pthread_mutex_lock(&W.mu);
    W.busy_fraction = out->busy_fraction;
    pthread_mutex_unlock(&W.mu);
  }
  W.last_ms = now, W.last_built = st.batches_built, W.last_busy = st.busy_ns;
}

static void on_command(int cmd, const char *reason) {
  if (cmd == SESSION_CMD_ABORT) {
    char esc[256 * 4 + 8]; /* untrusted text */
    stk__escape(esc, sizeof(esc), reason);
    LOG_ERROR("coordinator says the job failed: %s", *esc ? esc : "(no reason)");
    __atomic_store_n(&W.aborted, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&W.shutdown_cmd, 1, __ATOMIC_RELEASE);
  } else if (cmd == SESSION_CMD_SHUTDOWN) {
    LOG_INFO("coordinator says shut down");
    __atomic_store_n(&W.shutdown_cmd, 1, __ATOMIC_RELEASE);
  } else {
    LOG_INFO("coordinator says drain");
  }
  __atomic_store_n(&W.draining, 1, __ATOMIC_RELEASE);
  sched *s = current_sched();
  if (s) sched_drain(s);
}

/* ---- Worker.Stream ----------------------------------------------------
 *
 * Event driven (proto/rpc.h, "Server"): a request arrives -> validate and
 * queue it (stream_message); a batch is built -> the scheduler's ready
 * hook queues its header and chunks on the call at once (pump); the
 * call's send queue drained -> the batch is released and the next one
 * goes (stream_drained). One batch in flight per stream, so the messages
 * of two batches never interleave. A send the client does not take within
 * --send-stall-s cancels the stream in the rpc layer (its chunks go back
 * to the pool), and stream_closed gives back the rest.
 */

typedef struct wstream {
  stk__rpc_call *call; /* valid until stream_closed (ended) */
  sched_stream *st;
  pthread_mutex_t mu;
  int ended;       /* stream_closed ran: never touch call again */
  int over;        /* a status was given */
  int bad;         /* ended by an invalid request */
  sched_done *cur; /* the batch being sent */
  uint64_t batches, bytes;
} wstream;

/* The messages of one batch: the header, then its payload in chunks that
 * point into the batch buffer (one buffer reference each). 0 with *n, or
 * -1 (everything made so far destroyed). */
static int batch_messages(sched_done *d, grpc_byte_buffer **v, size_t max, size_t *n) {
  uint32_t B = W.spec.batch_size;
  const stk_batch_layout *L = d->u8 ? &W.layout8 : &W.layout;
  *n = 0;
  uint64_t *idx = malloc(B * sizeof(uint64_t));
  if (!idx) return -1;
  /* The sample ids: the index tensor, or (a token job without one) the
   * addressing itself, which the index tensor always equals. */
  int ti = stk_batch_layout_find(L, "index");
  if (ti < 0) {
    stk_batch_samples(&W.spec, W.spec.num_samples, d->epoch, d->rank, d->step, idx, NULL);
  } else {
    for (uint32_t j = 0; j < B; j++) {
      int64_t v;
      memcpy(&v, d->data + L->tensors[ti].offset + 8ull * j, 8);
      idx[j] = (uint64_t)v;
    }
  }
  Stoker__V1__BatchHeader h = STOKER__V1__BATCH_HEADER__INIT;
  h.epoch = d->epoch;
  h.rank = d->rank;
  h.step = d->step;
  h.sample_offset = d->offset;
  h.n_tensors = L->ntensors;
  h.tensors = d->u8 ? W.td8.ptr : W.td.ptr;
  h.n_sample_indices = B;
  h.sample_indices = idx;
  h.crc32c = d->crc32c;
  h.total_bytes = L->total_bytes;
  h.substituted = d->substituted;
  Stoker__V1__BatchResponse r = STOKER__V1__BATCH_RESPONSE__INIT;
  r.header = &h;
  v[(*n)++] = stk__rpc_pack(&r.base);
  free(idx);
  if (!v[0]) goto fail;
  uint64_t total = L->total_bytes, chunk = (uint64_t)opt.chunk_bytes;
  for (uint64_t off = 0; off < total; off += chunk) {
    size_t len = (size_t)(total - off < chunk ? total - off : chunk);
    if (*n >= max) goto fail;
    sched_buf_ref(d->buf);
    grpc_byte_buffer *bb =
        stk__wire_chunk(off, d->data + off, len, sched_buf_unref, d->buf);
    if (!bb) {
      sched_buf_unref(d->buf);
      goto fail;
    }
    v[(*n)++] = bb;
  }
  return 0;
fail:
  for (size_t i = 0; i < *n; i++)
    if (v[i]) grpc_byte_buffer_destroy(v[i]);
  *n = 0;
  return -1;
}

/* End the stream with a status (under x->mu). */
static void end_locked(wstream *x, grpc_status_code code, const char *msg, int abort) {
  x->over = 1;
  if (abort) stk__rpc_call_abort(x->call, code, msg);
  else stk__rpc_call_finish(x->call, code, msg);
}

/* Send the next finished batch unless one is in flight, or end the stream
 * when the scheduler says so. Any thread; never blocks. */
static void pump(wstream *x) {
  pthread_mutex_lock(&x->mu);
  while (!x->ended && !x->over && !x->cur) {
    int why;
    sched_done *d = sched_stream_poll(x->st, &why);
    if (!d) {
      if (why == SCHED_END_DONE) end_locked(x, GRPC_STATUS_OK, "", 0);
      else if (why == SCHED_END_DRAINED)
        end_locked(x, GRPC_STATUS_UNAVAILABLE, "worker is draining: ask another worker",
                   0);
      else if (why == SCHED_END_DEAD) /* a no-op when the call already ended; else
                                         the scheduler gave up on it (out of memory) */
        end_locked(x, GRPC_STATUS_RESOURCE_EXHAUSTED,
                   "worker out of memory: ask another worker", 1);
      break;
    }
    if (d->status) {
      end_locked(x, GRPC_STATUS_INTERNAL, d->err, 1);
      sched_stream_sent(x->st, d, 0);
      sched_stream_kill(x->st);
      break;
    }
    size_t max = 2 + (size_t)(W.layout.total_bytes / (uint64_t)opt.chunk_bytes);
    grpc_byte_buffer *stackv[64], **v = max <= 64 ? stackv : calloc(max, sizeof(*v));
    size_t n = 0;
    int rc = v ? batch_messages(d, v, max, &n) : -1;
    if (!rc) rc = stk__rpc_call_sendv(x->call, v, n);
    if (v != stackv) free(v);
    if (rc) {
      sched_stream_sent(x->st, d, 0);
      sched_stream_kill(x->st);
      end_locked(x, GRPC_STATUS_RESOURCE_EXHAUSTED, "worker out of memory", 1);
      break;
    }
    x->cur = d;
  }
  pthread_mutex_unlock(&x->mu);
}

static void stream_ready(void *arg) { pump(arg); }

static void stream_released(void *arg) {
  wstream *x = arg;
  pthread_mutex_destroy(&x->mu);
  free(x);
}

/* sched_reap: end the stream if its send has waited wait_ms (a client that
 * stopped reading holds a buffer another stream waits for). The client,
 * if it reads after all, asks again. */
static int stream_stalled(void *arg, int64_t now_ms, int wait_ms) {
  wstream *x = arg;
  int ended = 0;
  pthread_mutex_lock(&x->mu);
  if (!x->ended && !x->over && stk__rpc_call_send_wait_ms(x->call, now_ms) >= wait_ms) {
    end_locked(x, GRPC_STATUS_UNAVAILABLE,
               "the client stopped reading while other streams waited for a batch "
               "buffer; stream cancelled, ask again",
               1);
    ended = 1;
  }
  pthread_mutex_unlock(&x->mu);
  return ended;
}

static const sched_stream_hooks stream_hooks = {stream_ready, stream_released,
                                                stream_stalled};

static int stream_open(stk__rpc_call *call) {
  sched *s = current_sched();
  if (!s) {
    stk__rpc_call_finish(call, GRPC_STATUS_UNAVAILABLE,
                         "worker has no job yet (not registered with its coordinator)");
    return -1;
  }
  wstream *x = calloc(1, sizeof(*x));
  if (!x) {
    stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  x->call = call;
  pthread_mutex_init(&x->mu, NULL);
  /* Once open, the scheduler may call our hooks (a drain: ready -> pump)
   * on another thread before x->st is set here: they take x->mu first. */
  pthread_mutex_lock(&x->mu);
  int refused = __atomic_load_n(&W.draining, __ATOMIC_ACQUIRE) ||
                !(x->st = sched_stream_open(s, &stream_hooks, x));
  pthread_mutex_unlock(&x->mu);
  if (refused) {
    pthread_mutex_destroy(&x->mu);
    free(x);
    stk__rpc_call_finish(call, GRPC_STATUS_UNAVAILABLE,
                         "worker is draining: ask another worker");
    return -1;
  }
  stk__rpc_call_set_data(call, x);
  LOG_DEBUG("stream from %s opened", stk__rpc_call_peer(call));
  return 0;
}

/* Validate one request (msgcheck.c): 0, or a gRPC status code with msg. */
static int check_request(const Stoker__V1__BatchRequest *q, char *msg, size_t len) {
  stk__job_view j = {W.job_hash, &W.spec};
  return stk__check_batch_request(&j, q, msg, len);
}

static void stream_message(stk__rpc_call *call, const ProtobufCMessage *m) {
  wstream *x = stk__rpc_call_data(call);
  const Stoker__V1__BatchRequest *q = (const Stoker__V1__BatchRequest *)m;
  char msg[512];
  int code = 0;
  if (!q) {
    /* refused by the rpc layer, which told the peer which limit */
    code = GRPC_STATUS_INVALID_ARGUMENT;
    snprintf(msg, sizeof(msg),
             "malformed BatchRequest, or over a receive limit (the peer was told which)");
  } else {
    code = check_request(q, msg, sizeof(msg));
    if (!code && __atomic_load_n(&W.draining, __ATOMIC_ACQUIRE)) {
      /* Not queued: the stream ends UNAVAILABLE once what was asked
       * before the drain is sent, and the client asks elsewhere. */
      __atomic_add_fetch(&W.dropped_requests, 1, __ATOMIC_RELAXED);
    } else if (!code &&
               sched_stream_push(x->st, q->epoch, q->rank, q->step, q->sample_offset,
                                 q->image_uint8, (uint32_t)opt.max_outstanding)) {
      code = GRPC_STATUS_RESOURCE_EXHAUSTED;
      snprintf(msg, sizeof(msg),
               "more than %lld unanswered requests on this "
               "stream (--max-outstanding)",
               opt.max_outstanding);
    }
  }
  if (code) {
    LOG_WARN("stream from %s: %s", stk__rpc_call_peer(call), msg);
    __atomic_add_fetch(&W.stream_errors, 1, __ATOMIC_RELAXED);
    sched_stream_kill(x->st);
    pthread_mutex_lock(&x->mu);
    x->bad = 1;
    end_locked(x, (grpc_status_code)code, msg, 1);
    pthread_mutex_unlock(&x->mu);
  }
}

static void stream_half_close(stk__rpc_call *call) {
  wstream *x = stk__rpc_call_data(call);
  sched_stream_half_close(x->st);
  pump(x);
}

/* The batch in flight went out whole: release it, send the next. */
static void stream_drained(stk__rpc_call *call) {
  wstream *x = stk__rpc_call_data(call);
  pthread_mutex_lock(&x->mu);
  sched_done *d = x->cur;
  x->cur = NULL;
  if (d) {
    uint64_t sent = d->total_bytes; /* d is freed by sched_stream_sent */
    sched_stream_sent(x->st, d, sent);
    x->batches++;
    x->bytes += sent;
  }
  pthread_mutex_unlock(&x->mu);
  pump(x);
}

static void stream_closed(stk__rpc_call *call) {
  wstream *x = stk__rpc_call_data(call);
  pthread_mutex_lock(&x->mu);
  x->ended = 1;
  sched_done *d = x->cur;
  x->cur = NULL;
  if (d) sched_stream_sent(x->st, d, 0); /* cancelled mid-batch */
  LOG_DEBUG("stream from %s ended (%s): %" PRIu64 " batches, %" PRIu64 " bytes",
            stk__rpc_call_peer(call),
            x->bad    ? "error"
            : x->over ? "status"
                      : "cancelled",
            x->batches, x->bytes);
  sched_stream *st = x->st;
  pthread_mutex_unlock(&x->mu);
  sched_stream_close(st); /* frees x, maybe later (stream_released) */
}

static const stk__rpc_stream_ops stream_ops = {
    stream_open, stream_message, stream_half_close, stream_drained, stream_closed};

/* ---- main -------------------------------------------------------------- */

static void default_advertise(char *out, size_t len, int port) {
  const char *l = opt.listen;
  const char *colon = strrchr(l, ':');
  size_t hlen = colon ? (size_t)(colon - l) : strlen(l);
  char host[256];
  snprintf(host, sizeof(host), "%.*s", (int)(hlen < 255 ? hlen : 255), l);
  if (!*host || !strcmp(host, "0.0.0.0") || !strcmp(host, "[::]") ||
      !strcmp(host, "::")) {
    if (gethostname(host, sizeof(host) - 1)) snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = 0;
  }
  snprintf(out, len, "%s:%d", host, port);
}

/* The options that no single option's validator can check. 0, or -1
 * after saying why on stderr. */
static int check_usage(void) {
  if (!*opt.coordinator) {
    fprintf(stderr, PROGRAM ": --coordinator host:port is required (see --help)\n");
    return -1;
  }
  if ((opt.chunk_bytes + (64 << 10)) > (opt.max_message_mb << 20)) {
    fprintf(stderr,
            PROGRAM
            ": --chunk-bytes %lld does not fit in --max-message-mb %lld "
            "(with 64 KiB for framing)\n",
            opt.chunk_bytes, opt.max_message_mb);
    return -1;
  }
  return 0;
}

/* One stats line (greppable: "stats state=..."); *last carries the
 * previous line's time and counters for the rates. */
typedef struct stats_mark {
  int64_t ms;
  uint64_t bytes, built;
} stats_mark;

static void log_stats(stk__rpc_server *srv, int64_t now, int lost, stats_mark *last) {
  sched *s = current_sched();
  sched_stats st;
  memset(&st, 0, sizeof(st));
  stk__rpc_server_stats rs;
  stk__rpc_server_stats_get(srv, &rs);
  uint64_t bytes = 0;
  if (s) sched_stats_get(s, &st), bytes = sched_bytes_sent(s);
  double dt = (double)(now - last->ms) / 1000.0;
  LOG_INFO(
      "stats state=%s streams=%u queued=%u free_buffers=%u/%u "
      "batches_built=%" PRIu64
      " batches_per_s=%.1f mb_per_s=%.1f "
      "substituted=%" PRIu64 " build_errors=%" PRIu64 " transient_errors=%" PRIu64
      " transient_retries=%" PRIu64 " reread=%" PRIu64 " stream_errors=%" PRIu64
      " calls=%" PRIu64 " calls_refused=%" PRIu64 " calls_evicted=%" PRIu64
      " first_msg_late=%" PRIu64 " send_stalled=%" PRIu64 " coordinator=%s",
      s ? "serving" : "waiting", st.active_streams, st.queued_requests, st.free_buffers,
      st.nbuffers, st.batches_built, (double)(st.batches_built - last->built) / dt,
      (double)(bytes - last->bytes) / dt / 1e6, st.samples_substituted, st.build_errors,
      st.transient_errors, st.transient_retries, st.samples_reread,
      __atomic_load_n(&W.stream_errors, __ATOMIC_RELAXED), rs.open_calls, rs.refused_full,
      rs.evicted, rs.first_msg_late, rs.send_stalled + st.send_stalled,
      lost ? "lost" : "ok");
  last->bytes = bytes, last->built = st.batches_built, last->ms = now;
}

/* GET /metrics (metrics.c's HTTP thread): the scheduler's counters, the
 * build-time histogram, the bad samples by reason. */
static void worker_metrics(metrics_buf *b, void *ud) {
  (void)ud;
  sched *s = current_sched();
  sched_stats st;
  memset(&st, 0, sizeof(st));
  uint64_t bytes = 0;
  if (s) sched_stats_get(s, &st), bytes = sched_bytes_sent(s);
  pthread_mutex_lock(&W.mu);
  double busy = W.busy_fraction;
  pthread_mutex_unlock(&W.mu);
  int draining = __atomic_load_n(&W.draining, __ATOMIC_ACQUIRE);
  static const struct {
    const char *name, *type, *help;
  } f[] = {
      {"stoker_worker_serving", "gauge",
       "1 once the worker has its job and is not draining"},
      {"stoker_worker_batches_built_total", "counter", "batches built"},
      {"stoker_worker_bytes_sent_total", "counter",
       "batch payload bytes sent to clients"},
      {"stoker_worker_samples_substituted_total", "counter",
       "bad samples replaced in built batches (a sample counts in every batch it is in)"},
      {"stoker_worker_build_errors_total", "counter", "batches that could not be built"},
      {"stoker_worker_transient_errors_total", "counter",
       "batches failed transiently after retries (the client asks again)"},
      {"stoker_worker_stream_errors_total", "counter", "streams ended by a bad request"},
      {"stoker_worker_busy_seconds_total", "counter",
       "builder thread time spent building"},
      {"stoker_worker_busy_fraction", "gauge",
       "builder threads' busy share over the last heartbeat interval"},
      {"stoker_worker_builder_threads", "gauge", "batch builder threads"},
      {"stoker_worker_queued_requests", "gauge", "requests queued or building"},
      {"stoker_worker_open_streams", "gauge", "open Worker.Stream calls"},
      {"stoker_worker_free_buffers", "gauge", "batch buffers free"},
      {"stoker_worker_buffers", "gauge", "batch buffers in all (the memory bound)"},
  };
  double v[] = {s && !draining,
                (double)st.batches_built,
                (double)bytes,
                (double)st.samples_substituted,
                (double)st.build_errors,
                (double)st.transient_errors,
                (double)__atomic_load_n(&W.stream_errors, __ATOMIC_RELAXED),
                (double)st.busy_ns / 1e9,
                busy,
                W.threads,
                st.queued_requests,
                st.active_streams,
                st.free_buffers,
                st.nbuffers};
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
    metrics_family(b, f[i].name, f[i].type, f[i].help);
    metrics_sample(b, f[i].name, NULL, v[i]);
  }
  static const double le[SCHED_HIST_BOUNDS] = SCHED_HIST_LE;
  char lab[64];
  uint64_t cum = 0;
  metrics_family(b, "stoker_worker_build_seconds", "histogram",
                 "time to build one batch (successful builds)");
  for (int i = 0; i <= SCHED_HIST_BOUNDS; i++) {
    cum += st.build_hist[i];
    if (i < SCHED_HIST_BOUNDS) snprintf(lab, sizeof(lab), "le=\"%g\"", le[i]);
    else snprintf(lab, sizeof(lab), "le=\"+Inf\"");
    metrics_sample(b, "stoker_worker_build_seconds_bucket", lab, (double)cum);
  }
  metrics_sample(b, "stoker_worker_build_seconds_sum", NULL,
                 (double)st.build_ns_sum / 1e9);
  metrics_sample(b, "stoker_worker_build_seconds_count", NULL, (double)cum);
  uint64_t cnt[NBAD];
  pthread_mutex_lock(&BAD.mu);
  memcpy(cnt, BAD.count, sizeof(cnt));
  pthread_mutex_unlock(&BAD.mu);
  metrics_family(b, "stoker_worker_bad_samples_total", "counter",
                 "distinct bad samples found (each replaced, logged once), by reason");
  for (size_t i = 0; i < NBAD; i++)
    metrics_sample(b, "stoker_worker_bad_samples_total",
                   metrics_label(lab, sizeof(lab), "reason", bad_reasons[i]),
                   (double)cnt[i]);
}

/* --metrics-listen: serve /metrics. 0 (also when off), or -1 logged. */
static int start_metrics(metrics_server **ms) {
  *ms = NULL;
  if (!*opt.metrics_listen) return 0;
  char err[300];
  int port = 0;
  if (metrics_start(opt.metrics_listen, worker_metrics, NULL, ms, &port, err,
                    sizeof(err))) {
    LOG_ERROR("%s", err);
    return -1;
  }
  LOG_INFO("metrics on http://%s/metrics (port %d)", opt.metrics_listen, port);
  return 0;
}

/* systemd: READY=1 once registered with a job (and the dataset open);
 * STATUS= with the rate at every stats line. */
static void notify_progress(session *sess, int stats_due) {
  static int ready;
  if (!ready && current_sched() && session_lost_ms(sess) == 0) {
    ready = 1;
    stk__notify_ready("registered; serving batches");
  }
  if (stats_due && ready) {
    sched *s = current_sched();
    sched_stats st;
    memset(&st, 0, sizeof(st));
    if (s) sched_stats_get(s, &st);
    char msg[160];
    snprintf(msg, sizeof(msg), "serving: %" PRIu64 " batches built, %u streams, %s",
             st.batches_built, st.active_streams,
             session_lost_ms(sess) ? "coordinator lost" : "coordinator ok");
    stk__notify_status(msg);
  }
}

/* Serve until a signal, the coordinator's Shutdown, a rejection or the
 * orphan timeout; returns the exit code. */
static int run_worker(session *sess, stk__rpc_server *srv) {
  int64_t next_stats = stk__now_ms() + opt.stats_interval_s * 1000;
  stats_mark last = {stk__now_ms(), 0, 0};
  int64_t orphan_ms = opt.orphan_timeout_s * 1000;
  for (;;) {
    int sig = stk__signal_pending();
    if (sig) {
      LOG_INFO("signal %d: draining and exiting", sig);
      return EXIT_OK;
    }
    if (__atomic_load_n(&W.shutdown_cmd, __ATOMIC_ACQUIRE))
      return __atomic_load_n(&W.aborted, __ATOMIC_ACQUIRE) ? EXIT_ABORTED : EXIT_OK;
    const char *why = session_failed(sess);
    if (why) {
      int local = session_failed_locally(sess);
      LOG_ERROR("%s (exiting %d)", why, local ? EXIT_FAIL : EXIT_REJECTED);
      return local ? EXIT_FAIL : EXIT_REJECTED;
    }
    int64_t lost = session_lost_ms(sess);
    if (lost > orphan_ms) {
      LOG_ERROR(
          "coordinator %s unreachable for %lld s (--orphan-timeout-s %lld): "
          "exiting as an orphan (code %d)",
          opt.coordinator, (long long)(lost / 1000), opt.orphan_timeout_s, EXIT_ORPHAN);
      return EXIT_ORPHAN;
    }
    /* grpc.health.v1: SERVING while registered with a job whose dataset
     * is open, NOT_SERVING before, while the coordinator is lost, and
     * from the drain on */
    stk__health_set(current_sched() != NULL && lost == 0 &&
                    !__atomic_load_n(&W.draining, __ATOMIC_ACQUIRE));
    int64_t now = stk__now_ms();
    sched *s = current_sched();
    if (s) sched_reap(s, now, (int)(opt.serve.send_stall_s * 1000));
    int stats_due = now >= next_stats;
    notify_progress(sess, stats_due);
    stk__notify_tick(now);
    if (stats_due) {
      log_stats(srv, now, lost != 0, &last);
      next_stats = now + opt.stats_interval_s * 1000;
    }
    stk__sleep_ms(50);
  }
}

/* Drain: no new streams; open streams finish what they were asked, for up
 * to --drain-timeout-s (2 s when the job failed: nobody is left to serve). */
static void drain(sched *s, int code) {
  __atomic_store_n(&W.draining, 1, __ATOMIC_RELEASE);
  stk__notify_stopping("draining");
  stk__health_set(0);
  if (!s) return;
  sched_drain(s);
  long long drain_s =
      code == EXIT_ABORTED && opt.drain_timeout_s > 2 ? 2 : opt.drain_timeout_s;
  int64_t until = stk__now_ms() + drain_s * 1000;
  sched_stats st;
  for (;;) {
    sched_stats_get(s, &st);
    if (!st.active_streams || stk__now_ms() >= until) break;
    stk__notify_tick(stk__now_ms());
    if (stk__signal_count() >= 2) {
      LOG_WARN("second signal: not waiting for the drain");
      break;
    }
    stk__sleep_ms(20);
  }
  if (st.active_streams)
    LOG_WARN("drain timeout: cancelling %u streams", st.active_streams);
}

int main(int argc, char **argv) {
  stk__log_init(PROGRAM);
  stk__rpc_tune_malloc(); /* reuse gRPC's message buffers (rpc.h) */
  int pr =
      stk__options_parse(options, NOPTIONS, argc, argv, PROGRAM,
                         "Serves batches of the coordinator's job to training clients "
                         "(Worker.Stream).",
                         exit_codes_text);
  int code = pr == OPTS_EXIT_OK ? EXIT_OK : EXIT_USAGE;
  if (pr != OPTS_RUN) goto out;
  if (check_usage()) {
    code = EXIT_USAGE;
    goto out;
  }
  if (stk__daemon_token(opt.token, opt.token_file, argc, argv, token, sizeof(token))) {
    code = EXIT_USAGE;
    goto out;
  }
  {
    char terr[512];
    stk__tls_files tf = {opt.tls.ca, opt.tls.cert, opt.tls.key, opt.tls.require};
    if (stk__tls_load(&tf, &W.tls, terr, sizeof(terr))) {
      fprintf(stderr, PROGRAM ": %s\n", terr);
      code = EXIT_USAGE;
      goto out;
    }
    stk__daemon_check_secret_mode("--tls-key", opt.tls.key);
    if (W.tls && !stk__tls_has_cert(W.tls)) {
      fprintf(stderr, PROGRAM
              ": TLS needs --tls-cert and --tls-key (the worker serves "
              "clients with them)\n");
      code = EXIT_USAGE;
      goto out;
    }
  }
  stk__signals_install();
  stk__daemon_raise_nofile();
  stk__notify_init();
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  W.threads = opt.threads ? (uint32_t)opt.threads : (uint32_t)(ncpu > 0 ? ncpu : 1);
  {
    /* builders hold up to STK_BUILDER_MAX_FILES each; gRPC, clients and
     * the session need more. Below that, builds slow down (one file at a
     * time) or fail transiently (clients re-ask); never wrong data. */
    uint64_t soft, hard, want = (uint64_t)W.threads * (STK_BUILDER_MAX_FILES + 1) + 256;
    if (stk__raise_nofile(&soft, &hard) == 0 && soft < want)
      LOG_WARN("open-file limit %" PRIu64 " is low for %u builder threads (about %" PRIu64
               " wanted): reads will slow down under descriptor pressure; raise "
               "`ulimit -n` (hard) or LimitNOFILE",
               soft, W.threads, want);
  }

  /* {path, request type, receive limit, unary, stream, no_token, roles} */
  static const stk__rpc_method methods[] = {
      {"/stoker.v1.Worker/Stream", &stoker__v1__batch_request__descriptor,
       STK_MAX_REQUEST_MSG, NULL, &stream_ops, 0, STK__ROLE_CLIENT},
      STK__HEALTH_METHODS,
  };
  stk__health_init("stoker.v1.Worker");
  stk__rpc_server *srv = NULL;
  int port = 0;
  char err[512];
  /* With --client-token-file, streams need the clients' token: the
   * worker's own (its coordinator credential) no longer opens them. */
  stk__role_tokens roles;
  if (stk__daemon_role_tokens(NULL, opt.client_token_file, NULL, &roles)) {
    code = EXIT_USAGE;
    goto out;
  }
  if (stk__daemon_serve(opt.listen, methods, sizeof(methods) / sizeof(methods[0]),
                        opt.max_message_mb, roles.n ? NULL : token, &roles, W.tls,
                        &opt.serve, opt.port_file, &srv, &port, err, sizeof(err))) {
    LOG_ERROR("%s", err);
    code = EXIT_FAIL;
    goto out;
  }
  char advertise[300], host[256], worker_id[400];
  if (*opt.advertise) snprintf(advertise, sizeof(advertise), "%s", opt.advertise);
  else default_advertise(advertise, sizeof(advertise), port);
  if (gethostname(host, sizeof(host) - 1)) snprintf(host, sizeof(host), "localhost");
  host[sizeof(host) - 1] = 0;
  snprintf(worker_id, sizeof(worker_id), "%s:%d:%lld", host, (int)getpid(),
           (long long)stk__now_ms());
  if (strlen(advertise) >= STK_MAX_ID_BYTES || strlen(worker_id) >= STK_MAX_ID_BYTES) {
    LOG_ERROR(
        "the advertised address or worker id is over %d bytes (the coordinator "
        "would refuse it): %.60s...",
        STK_MAX_ID_BYTES - 1,
        strlen(advertise) >= STK_MAX_ID_BYTES ? advertise : worker_id);
    stk__rpc_server_stop(srv, 0);
    code = EXIT_USAGE;
    goto out;
  }
  LOG_INFO(
      "listening on %s port %d (%s), advertising %s, %u builder threads, "
      "coordinator %s",
      opt.listen, port, stk__tls_describe(W.tls), advertise, W.threads, opt.coordinator);

  session_config cfg = {opt.coordinator, token, W.tls, worker_id, advertise, W.threads};
  session_hooks hooks = {on_job, fill_stats, on_command};
  session *sess = NULL;
  if (session_start(&cfg, &hooks, &sess)) {
    LOG_ERROR("cannot start the coordinator session");
    stk__rpc_server_stop(srv, 0);
    code = EXIT_FAIL;
    goto out;
  }
  metrics_server *ms = NULL;
  code = start_metrics(&ms) ? EXIT_FAIL : run_worker(sess, srv);
  sched *s = current_sched();
  drain(s, code);
  stk__rpc_server_stop(srv, 500);
  session_stop(sess);
  metrics_stop(ms);
  if (s) {
    sched_stats st;
    sched_stats_get(s, &st);
    LOG_INFO("exiting (code %d): %" PRIu64 " batches built, %" PRIu64
             " bytes sent; substituted=%" PRIu64 " transient_errors=%" PRIu64
             " transient_retries=%" PRIu64 " reread=%" PRIu64,
             code, st.batches_built, sched_bytes_sent(s), st.samples_substituted,
             st.transient_errors, st.transient_retries, st.samples_reread);
  } else {
    LOG_INFO("exiting (code %d)", code);
  }
  sched_destroy(s, 2000);
  stk_dataset_close(W.ds);
out:
  stk__tls_free(W.tls);
  stk__options_free(options, NOPTIONS);
  return code;
}
