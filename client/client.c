/* client.c - libstoker's public API and the client's lifecycle: open
 * (config checks, backend, join or local job, buffers, threads), next /
 * release (the caller's side of the slot ring, stall measurement, epoch
 * boundaries), accessors, stats, finish and close. The resume state and
 * the step plan (seq <-> address) are state.c's.
 *
 * Owns: the stk_client and its lock. Must not: abort, exit, print, or block
 * in gRPC/CUDA while holding c->mu.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/advice.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/secret.h"
#include "internal.h"

void stk__set_fatal(stk_client *c, int status, const char *msg) {
  /* under mu */
  if (c->fatal) return;
  c->fatal = status;
  snprintf(c->fatal_msg, sizeof(c->fatal_msg), "%s", msg);
  pthread_cond_broadcast(&c->cv_next);
  pthread_cond_broadcast(&c->cv_copy);
  pthread_cond_broadcast(&c->cv_sched);
}

void stk__seterr(stk_client *c, const char *fmt, const char *arg) {
  snprintf(c->err, sizeof(c->err), fmt, arg);
}

void stk_client_config_defaults(stk_client_config *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof(*cfg));
  cfg->rank = STK_RANK_FROM_ENV;
  cfg->world_size = STK_WORLD_SIZE_FROM_ENV;
  cfg->cuda_device = STK_CUDA_DEVICE_FROM_ENV;
  cfg->prefetch = 8;
  cfg->slots = 2;
  cfg->device = STK_DEVICE_CPU;
  cfg->convert = STK_CONVERT_NONE;
  cfg->join_timeout_ms = 60000;
  cfg->verify_crc = 1;
}

size_t stk_client_struct_size(const char *name) {
  if (!name) return 0;
  if (!strcmp(name, "stk_client_config")) return sizeof(stk_client_config);
  if (!strcmp(name, "stk_tensor")) return sizeof(stk_tensor);
  if (!strcmp(name, "stk_stats")) return sizeof(stk_stats);
  if (!strcmp(name, "stk_worker_stats")) return sizeof(stk_worker_stats);
  if (!strcmp(name, "stk_job_spec")) return sizeof(stk_job_spec);
  return 0;
}

/* ---- open ------------------------------------------------------------ */

static int check_config(const stk_client_config *cfg, int local, char *err,
                        size_t errlen) {
  if (!cfg) return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "cfg is NULL");
  if (!local && (!cfg->coordinator || !*cfg->coordinator))
    return stk__errf(
        err, errlen, STK_INVALID_ARGUMENT,
        "no coordinator: set cfg.coordinator (host:port) or STOKER_COORDINATOR");
  if (cfg->world_size == 0)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "cfg.world_size is 0");
  if (cfg->rank >= cfg->world_size)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "cfg.rank must be < cfg.world_size");
  if (cfg->prefetch < 1 || cfg->prefetch > 1024)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "cfg.prefetch must be in 1..1024");
  if (cfg->slots < 2 || cfg->slots > 64)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "cfg.slots must be in 2..64");
  if (cfg->device != STK_DEVICE_CPU && cfg->device != STK_DEVICE_CUDA)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "cfg.device must be STK_DEVICE_CPU or STK_DEVICE_CUDA");
  if (cfg->convert < STK_CONVERT_NONE || cfg->convert > STK_CONVERT_BFLOAT16)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "cfg.convert is unknown");
  if (cfg->resume_state && cfg->resume_len == 0)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "cfg.resume_state given with resume_len 0");
  return STK_OK;
}

static void client_free(stk_client *c) {
  if (!c) return;
  stk__ring_free(c);
  if (c->workers) {
    for (uint32_t i = 0; i < c->nworkers; i++) {
      stk__rpc_channel_close(c->workers[i].ch);
      pthread_mutex_destroy(&c->workers[i].send_mu);
    }
    free(c->workers);
  }
  stk__rpc_channel_close(c->coord);
  stk__cuda_close(c);
  stk_dataset_close(c->dataset);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv_sched);
  pthread_cond_destroy(&c->cv_copy);
  pthread_cond_destroy(&c->cv_next);
  pthread_cond_destroy(&c->cv_local);
  for (uint32_t i = 0; c->classes && i < c->nclasses; i++) free(c->classes[i]);
  free(c->classes);
  free(c->coordinator);
  free(c->token);
  stk__tls_free(c->tls);
  free(c->data_root);
  free(c);
}

/* A client for cfg with its own copies of the strings, its lock and
 * condition variables; no job, buffers or threads yet. NULL when out of
 * memory. */
static stk_client *client_new(const stk_client_config *cfg, int local,
                              const char *data_root) {
  stk_client *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->cfg = *cfg;
  c->cfg.coordinator = NULL;
  c->cfg.token = NULL;
  c->cfg.tls_ca = c->cfg.tls_cert = c->cfg.tls_key = NULL;
  c->cfg.resume_state = NULL;
  c->local = local;
  c->coordinator = cfg->coordinator ? strdup(cfg->coordinator) : NULL;
  c->token = cfg->token ? strdup(cfg->token) : NULL;
  c->data_root = data_root ? strdup(data_root) : NULL;
  c->workers = calloc(STK__MAX_WORKERS, sizeof(stk__worker));
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv_sched, NULL);
  pthread_cond_init(&c->cv_copy, NULL);
  pthread_cond_init(&c->cv_next, NULL);
  pthread_cond_init(&c->cv_local, NULL);
  c->open_ns = stk__now_ns();
  const char *fault = getenv("STOKER_FAULT_CRC_EVERY");
  if (local && fault) c->fault_crc_every = strtoull(fault, NULL, 10);
  if ((cfg->coordinator && !c->coordinator) || (cfg->token && !c->token) ||
      (data_root && !c->data_root) || !c->workers) {
    client_free(c);
    return NULL;
  }
  return c;
}

/* The job: parsed here with its dataset opened in-process (open_local,
 * job_text set), or received from the coordinator (join). */
static int client_job(stk_client *c, const char *job_text, const char *data_root,
                      char *err, size_t errlen) {
  if (!job_text) return stk__join(c, err, errlen);
  stk_job_spec_defaults(&c->spec);
  int st = stk_job_spec_parse(&c->spec, job_text, err, errlen);
  if (!st) st = stk_job_spec_validate(&c->spec, err, errlen);
  if (!st) st = stk_dataset_open(&c->spec, data_root, NULL, &c->dataset, err, errlen);
  if (st) return st;
  c->spec.num_samples = stk_dataset_size(c->dataset);
  c->job_hash = stk_job_spec_hash(&c->spec);
  c->nclasses = stk_dataset_num_classes(c->dataset);
  if (c->spec.world_size != c->cfg.world_size)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "cfg.world_size differs from the job's world_size");
  return STK_OK;
}

static int open_common(const stk_client_config *cfg, const char *job_text,
                       const char *data_root, stk_client **out, char *err,
                       size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out) return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "out is NULL");
  *out = NULL;
  int local = job_text != NULL;
  stk_client_config resolved; /* "not given" fields from the environment */
  if (cfg) {
    resolved = *cfg;
    int est = stk_client_config_from_env(&resolved, err, errlen);
    if (est) return est;
    cfg = &resolved;
  }
  char token[STK_TOKEN_MAX + 1]; /* $STOKER_TOKEN_FILE's token (copied by client_new) */
  if (cfg && !local && (!cfg->token || !*cfg->token) && getenv("STOKER_TOKEN_FILE") &&
      *getenv("STOKER_TOKEN_FILE")) {
    if (stk__token_read_file(getenv("STOKER_TOKEN_FILE"), token, sizeof(token), err,
                             errlen))
      return STK_INVALID_ARGUMENT;
    resolved.token = token;
  }
  int st = check_config(cfg, local, err, errlen);
  if (st) return st;
  if (!local) stk__rpc_tune_malloc(); /* opt out: STOKER_MALLOC_TUNING=0 */
  stk__resume rs;
  memset(&rs, 0, sizeof(rs));
  if (cfg->resume_state) {
    st = stk__state_parse(cfg->resume_state, cfg->resume_len, &rs, err, errlen);
    if (!st) st = stk__state_check_rank(cfg, &rs, err, errlen);
    if (st) return st;
  }

  stk_client *c = client_new(cfg, local, data_root);
  if (!c) return stk__errf(err, errlen, STK_NO_MEMORY, "out of memory");
  /* The device first: asking for CUDA where there is none fails at once,
   * before any network wait. */
  if (cfg->device == STK_DEVICE_CUDA) {
    st = stk__cuda_open(c, err, errlen);
    if (st) goto fail;
  }
  if (!local) {
    stk__tls_files tf = {cfg->tls_ca, cfg->tls_cert, cfg->tls_key, 0};
    char terr[400];
    if (stk__tls_load(&tf, &c->tls, terr, sizeof(terr))) {
      st = stk__errf(err, errlen, STK_INVALID_ARGUMENT, "%s", terr);
      goto fail;
    }
  }
  /* expect_job_hash: the coordinator refuses another job. A state of
   * another world size has another hash: stk__plan_init checks it. */
  if (!local && cfg->resume_state && rs.world == cfg->world_size)
    c->job_hash = rs.job_hash;
  st = client_job(c, job_text, data_root, err, errlen);
  if (!st) st = stk__plan_init(c, cfg->resume_state ? &rs : NULL, err, errlen);
  if (st) goto fail;
  st = stk_batch_layout_of(&c->spec, &c->layout);
  if (!st) st = stk__convert_layout(&c->spec, cfg->convert, &c->out);
  if (st) {
    stk__errf(err, errlen, st, "cfg.convert needs a job whose image tensor is uint8");
    goto fail;
  }
  /* A float image job: workers may send 8-bit images, rebuilt here
   * (STOKER_WIRE_UINT8=0 asks for the job's dtype on the wire instead). */
  const char *wu8 = getenv("STOKER_WIRE_UINT8");
  stk_job_spec s8;
  if (!local && cfg->convert == STK_CONVERT_NONE && !(wu8 && !strcmp(wu8, "0")) &&
      stk_image_wire_spec(&c->spec, &s8))
    c->wire_u8 = stk_batch_layout_of(&s8, &c->wire) == STK_OK;
  if (c->cuda) {
    st = stk__cuda_kernel_init(c, err, errlen);
    if (st) goto fail;
  }
  st = stk__ring_init(c, err, errlen);
  if (st) goto fail;
  pthread_mutex_lock(&c->mu);
  if (local) stk__worker_add(c, "local", "in-process", 1);
  pthread_mutex_unlock(&c->mu);
  if (stk__sched_start(c) || stk__copy_start(c) || (!local && stk__watch_start(c))) {
    stk_client_close(c); /* threads may run: the full close */
    return stk__errf(err, errlen, STK_INTERNAL, "cannot start a thread");
  }
  *out = c;
  return STK_OK;
fail:
  client_free(c);
  return st;
}

int stk_client_open(const stk_client_config *cfg, stk_client **out, char *err,
                    size_t errlen) {
  return open_common(cfg, NULL, NULL, out, err, errlen);
}

int stk_client_open_local(const stk_client_config *cfg, const char *job_text,
                          const char *data_root, stk_client **out, char *err,
                          size_t errlen) {
  if (!job_text) return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "job_text is NULL");
  return open_common(cfg, job_text, data_root, out, err, errlen);
}

/* ---- next / release -------------------------------------------------- */

static stk_batch *ready_slot(stk_client *c) {
  for (uint32_t i = 0; i < c->nslots; i++)
    if (c->slots[i].state == SLOT_READY && c->slots[i].seq == c->next_deliver)
      return &c->slots[i];
  return NULL;
}

static uint32_t alive_workers(stk_client *c) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < c->nworkers; i++) n += c->workers[i].alive ? 1 : 0;
  return n;
}

int stk_client_next(stk_client *c, stk_batch **out) {
  if (!c || !out) return STK_INVALID_ARGUMENT;
  *out = NULL;
  pthread_mutex_lock(&c->mu);
  c->err[0] = 0;
  int64_t t0 = stk__now_ns();
  if (!c->first_next_ns) c->first_next_ns = t0;
  int st = STK_OK;
  stk_batch *s = NULL;
  if (c->fatal) {
    st = c->fatal;
    snprintf(c->err, sizeof(c->err), "%s", c->fatal_msg);
  } else if (c->eoe_pending) {
    c->eoe_pending = 0;
    st = STK_END_OF_EPOCH;
  } else if (c->next_deliver >= c->total) {
    st = STK_END_OF_DATA;
  } else if (c->held + 1 >= c->nslots) {
    st = STK_STATE;
    snprintf(c->err, sizeof(c->err),
             "the caller holds %u batches: release one first (at most slots-1 = %u)",
             c->held, c->nslots - 1);
  } else {
    while (!(s = ready_slot(c))) {
      if (c->fatal) {
        st = c->fatal;
        snprintf(c->err, sizeof(c->err), "%s", c->fatal_msg);
        break;
      }
      if (c->job_ended) {
        st = STK_CANCELLED;
        if (c->job_failed)
          snprintf(c->err, sizeof(c->err), "the job failed: %s", c->job_end_reason);
        else
          snprintf(c->err, sizeof(c->err),
                   "the job ended: the coordinator is shutting it down");
        break;
      }
      int64_t now = stk__now_ns();
      if (!c->local && alive_workers(c) == 0 && c->no_worker_since_ns &&
          now - c->no_worker_since_ns > (int64_t)c->cfg.join_timeout_ms * 1000000) {
        /* Every worker listed refused us (stream.c drops them): their
         * reason is the error, else plain unavailability. */
        st = stk__workers_all_dropped(c) ? c->drop_status : STK_UNAVAILABLE;
        snprintf(c->err, sizeof(c->err),
                 "no live worker for %u ms (join_timeout_ms)%s%.240s%s%.150s",
                 c->cfg.join_timeout_ms, c->workers_dropped ? "; " : "", c->drop_msg,
                 c->workers_refused ? "; " : "", c->refused_msg);
        break;
      }
      stk__cond_wait_ms(&c->cv_next, &c->mu, 100);
    }
    int64_t t1 = stk__now_ns();
    c->stall_ns += (uint64_t)(t1 - t0);
    c->last_next_ns = t1;
    if (s) {
      s->state = SLOT_HELD;
      c->held++;
      c->next_deliver++;
      c->batches++;
      if (stk__seq_epoch_start(c, c->next_deliver)) c->eoe_pending = 1;
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (s && c->cuda) {
    int cst = stk__cuda_on_next(c, s);
    if (cst) {
      snprintf(c->err, sizeof(c->err), "CUDA: %s", stk__cuda_error(c));
      stk_batch_release(s);
      return cst;
    }
  }
  if (s) *out = s;
  else if (st != STK_END_OF_EPOCH && st != STK_END_OF_DATA && !c->err[0])
    snprintf(c->err, sizeof(c->err), "%s", stk_strerror(st));
  return st;
}

void stk_batch_release(stk_batch *b) {
  if (!b) return;
  stk_client *c = b->c;
  if (c->cuda && b->state == SLOT_HELD) stk__cuda_on_release(c, b);
  pthread_mutex_lock(&c->mu);
  if (b->state == SLOT_HELD) {
    b->state = SLOT_FREE;
    c->held--;
    pthread_cond_broadcast(&c->cv_copy);
  }
  int last = c->closed && c->held == 0; /* closed before this release */
  pthread_mutex_unlock(&c->mu);
  if (last) client_free(c);
}

uint64_t stk_batch_epoch(const stk_batch *b) {
  stk__addr a = {0, 0, 0};
  if (b) stk__seq_addr(b->c, b->seq, &a);
  return a.epoch;
}

uint64_t stk_batch_step(const stk_batch *b) {
  stk__addr a = {0, 0, 0};
  if (b) stk__seq_addr(b->c, b->seq, &a);
  return a.step;
}

uint64_t stk_batch_sample_offset(const stk_batch *b) {
  stk__addr a = {0, 0, 0};
  if (b) stk__seq_addr(b->c, b->seq, &a);
  return a.offset;
}
uint32_t stk_batch_num_tensors(const stk_batch *b) { return b ? b->c->out.ntensors : 0; }

int stk_batch_tensor(const stk_batch *b, uint32_t i, stk_tensor *out) {
  if (!b || !out || i >= b->c->out.ntensors) return STK_INVALID_ARGUMENT;
  *out = b->tensors[i];
  return STK_OK;
}

const void *stk_batch_payload(const stk_batch *b, size_t *len) {
  if (!b) return NULL;
  if (len) *len = (size_t)b->c->layout.total_bytes;
  /* the float image rebuilt on the host when it came as 8-bit values */
  return stk__batch_host_payload((stk_batch *)b);
}

/* ---- job, state, stats ----------------------------------------------- */

int stk_client_job(const stk_client *c, stk_job_spec *out) {
  if (!c || !out) return STK_INVALID_ARGUMENT;
  *out = c->spec;
  if (!out->num_classes) out->num_classes = c->nclasses;
  return STK_OK;
}

uint32_t stk_client_num_classes(const stk_client *c) { return c ? c->nclasses : 0; }

const char *stk_client_class_name(const stk_client *c, uint32_t i) {
  if (!c || i >= c->nclasses) return NULL;
  if (c->local) return stk_dataset_class_name(c->dataset, i);
  return c->classes ? c->classes[i] : NULL;
}

uint64_t stk_client_payload_bytes(const stk_client *c) {
  return c ? c->layout.total_bytes : 0;
}

uint64_t stk_client_steps_per_epoch(const stk_client *c) { return c ? c->spe : 0; }

int stk_client_reference(stk_client *c, uint64_t epoch, uint64_t step,
                         const char *data_root, void *buf, size_t len) {
  if (!c || !buf) return STK_INVALID_ARGUMENT;
  char err[256] = "";
  int st = stk_build_reference_at(&c->spec, data_root ? data_root : c->data_root, epoch,
                                  stk__epoch_offset(c, epoch), c->cfg.rank, step, buf,
                                  len, err, sizeof(err));
  if (st) stk__seterr(c, "reference: %s", err);
  return st;
}

void stk_client_stats(stk_client *c, stk_stats *o) {
  if (!o) return;
  memset(o, 0, sizeof(*o));
  if (!c) return;
  int64_t now = stk__now_ns();
  pthread_mutex_lock(&c->mu);
  o->batches = c->batches;
  o->bytes = c->bytes;
  o->stall_ns = c->stall_ns;
  o->wall_ns = (uint64_t)(now - c->open_ns);
  int64_t span = c->last_next_ns - c->first_next_ns;
  o->stall_fraction = span > 0 ? (double)c->stall_ns / (double)span : 0.0;
  if (o->stall_fraction > 1.0) o->stall_fraction = 1.0;
  o->reissued = c->reissued;
  o->duplicates = c->duplicates;
  o->crc_errors = c->crc_errors;
  o->substituted = c->substituted;
  o->workers_dropped = (uint32_t)c->workers_dropped;
  o->hedges_sent = c->hedges_sent;
  o->hedges_won = c->hedges_won;
  o->hedge_dropped = c->hedge_dropped;
  o->device_convert = (uint32_t)stk__cuda_kernel(c);
  uint32_t alive = 0;
  for (uint32_t i = 0; i < c->nworkers; i++) {
    stk__worker *w = &c->workers[i];
    if (!w->used) continue; /* an entry free for reuse */
    alive += w->alive ? 1 : 0;
    if (o->nworkers < STK_MAX_WORKER_STATS) {
      stk_worker_stats *ws = &o->workers[o->nworkers++];
      size_t al = strnlen(w->address, sizeof(ws->address) - 1);
      memcpy(ws->address, w->address, al);
      ws->address[al] = 0;
      ws->batches = w->batches;
      ws->bytes = w->bytes;
      ws->batches_per_s = w->rate;
      ws->outstanding = w->outstanding;
      ws->alive = (uint32_t)w->alive;
    }
  }
  o->workers_alive = alive;
  o->coordinator_watching = (uint32_t)c->watching;
  /* Input-bound estimate (common/advice.h, shared with stoker status):
   * workers x (1 + stall/compute), reported only when the stall is above
   * STK_INPUT_BOUND_STALL (2%) of the loop time (else 0: not input-bound). */
  if (o->stall_fraction > STK_INPUT_BOUND_STALL && span > 0 && alive > 0) {
    double stall = (double)c->stall_ns;
    o->workers_needed = stk__workers_needed(alive, stall, (double)span - stall);
  }
  pthread_mutex_unlock(&c->mu);
}

const char *stk_client_error(const stk_client *c) { return c ? c->err : ""; }

void stk_client_close(stk_client *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->stopping = 1;
  pthread_cond_broadcast(&c->cv_sched);
  pthread_cond_broadcast(&c->cv_copy);
  pthread_cond_broadcast(&c->cv_next);
  pthread_cond_broadcast(&c->cv_local);
  pthread_mutex_unlock(&c->mu);
  if (c->watch_started) stk__watch_stop(c);
  stk__streams_stop(c);
  if (c->copy_started) pthread_join(c->copy_thread, NULL);
  /* Every thread is gone. Batches the caller still holds stay valid: then
   * only the slots (and this struct) outlive the close, and the last
   * stk_batch_release frees them. */
  pthread_mutex_lock(&c->mu);
  int held = c->held != 0;
  if (held) c->closed = 1;
  pthread_mutex_unlock(&c->mu);
  if (!held) {
    client_free(c);
    return;
  }
  stk__ring_free_transfer(c);
  for (uint32_t i = 0; c->workers && i < c->nworkers; i++) {
    stk__rpc_channel_close(c->workers[i].ch);
    c->workers[i].ch = NULL;
  }
  stk__rpc_channel_close(c->coord);
  c->coord = NULL;
}
