/* worker_job.c - what the worker's coordinator tells it, as session.c's hooks
 * (session thread): the job (on_job: parse and check the canonical text,
 * open the dataset under --data-root, start the scheduler, fill the
 * layouts' tensor descriptors, all published in W under W.mu), and the
 * coordinator's commands (on_command: drain, shut down, abort).
 * Owns W's job fields; must not trust the coordinator's text (parsed,
 * hash-checked; the abort reason is escaped before it is logged).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "daemon_log.h"
#include "rpc/wire_limits.h"
#include "worker.h"

void worker_limits(stk_limits *lim) {
  memset(lim, 0, sizeof(*lim));
  lim->max_file_bytes = (uint64_t)opt.max_file_mb << 20;
  lim->max_pixels = (uint64_t)opt.max_pixels;
  lim->plugin_dir = *opt.plugin_dir ? opt.plugin_dir : NULL;
  lim->python_path = *opt.python_path ? opt.python_path : NULL;
}

sched *current_sched(void) {
  pthread_mutex_lock(&W.mu);
  sched *s = W.have_job ? W.sch : NULL;
  pthread_mutex_unlock(&W.mu);
  return s;
}

/* The dtype's text from the one table (stoker/core.h). */
static const char *dtype_name(int dt) {
  const char *n = stk_dtype_name(dt);
  return n ? n : "unknown";
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

/* ds's class names as the hello's array (pointing into ds), when they fit
 * the wire limits; NULL otherwise (the hello then says the count only). */
static char **class_list(const stk_dataset *ds) {
  uint32_t n = stk_dataset_num_classes(ds);
  size_t bytes = 0;
  for (uint32_t i = 0; i < n; i++) bytes += strlen(stk_dataset_class_name(ds, i));
  if (!n) return NULL;
  if (n > STK_MAX_CLASS_NAMES || bytes > STK_MAX_CLASS_BYTES) {
    LOG_WARN(
        "%u class folders with %zu bytes of names: over the wire limits (%u names, "
        "%u bytes); clients get the class count only",
        n, bytes, STK_MAX_CLASS_NAMES, STK_MAX_CLASS_BYTES);
    return NULL;
  }
  char **v = malloc(n * sizeof(*v));
  for (uint32_t i = 0; v && i < n; i++) v[i] = (char *)stk_dataset_class_name(ds, i);
  return v;
}

/* The dataset's skipped files: logged once, and kept in W (each example
 * cut to 255 bytes) for the heartbeats that Status shows. Before have_job
 * is set. */
static void skipped_report(const stk_dataset *ds) {
  W.nskipped = stk_dataset_skipped_files(ds);
  W.nskipped_ex = 0;
  char line[8 * 260] = "", esc[1100];
  size_t at = 0;
  const char *ex;
  for (uint32_t i = 0; i < 8 && (ex = stk_dataset_skipped_file(ds, i)); i++) {
    snprintf(W.skipped_buf[i], sizeof(W.skipped_buf[i]), "%s", ex);
    W.skipped_ex[W.nskipped_ex++] = W.skipped_buf[i];
    stk__escape(esc, sizeof(esc), W.skipped_buf[i]);
    int k = snprintf(line + at, sizeof(line) - at, "%s%.255s", i ? "; " : "", esc);
    if (k > 0) at += (size_t)k < sizeof(line) - at ? (size_t)k : sizeof(line) - at - 1;
  }
  if (W.nskipped)
    LOG_WARN("dataset: %" PRIu64
             " files skipped (not .jpg, .jpeg or .png samples in a class folder)%s%s%s",
             W.nskipped, W.nskipped_ex ? ", e.g. " : "", line,
             W.nskipped > W.nskipped_ex ? "; ..." : "");
}

void fill_hello(Stoker__V1__Register *reg) {
  pthread_mutex_lock(&W.mu);
  if (W.have_job) {
    reg->num_classes = W.nclasses;
    reg->n_classes = W.class_ptrs ? W.nclasses : 0;
    reg->classes = W.class_ptrs;
  }
  pthread_mutex_unlock(&W.mu);
}

/* session hook: the coordinator's job. */
int on_job(const char *canonical, uint64_t hash, uint64_t *job_hash,
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
    worker_limits(&lim);
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
        fairsched_create(&resolved, ds, (int)W.threads, nbuf, &sch, msg, sizeof(msg))) {
      snprintf(err, errlen, "cannot start the builders: %s", msg);
      stk_dataset_close(ds);
      return -2;
    }
    fill_tdescs(&W.layout, &W.td);
    char **cls = class_list(ds);
    stk_job_spec spec8;
    if (stk_image_wire_spec(&resolved, &spec8) &&
        !stk_batch_layout_of(&spec8, &W.layout8))
      fill_tdescs(&W.layout8, &W.td8);
    pthread_mutex_lock(&W.mu);
    W.ds = ds;
    skipped_report(ds);
    W.class_ptrs = cls;
    W.nclasses = stk_dataset_num_classes(ds);
    W.spec = resolved;
    W.job_hash = stk_job_spec_hash(&resolved);
    W.steps = stk_steps_per_epoch(&resolved, resolved.num_samples);
    W.sch = sch;
    W.have_job = 1;
    if (opt.fault_transient_every)
      fairsched_set_fault_transient(sch, (uint32_t)opt.fault_transient_every);
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

void on_command(int cmd, const char *reason) {
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
  if (s) fairsched_drain(s);
}
