/* client.c - libstoker's public API and the client's lifecycle: open
 * (config checks, backend, join or local job, buffers, threads), next /
 * release (the caller's side of the slot ring, stall measurement, epoch
 * boundaries), accessors, stats and close. The resume state and the step
 * plan (seq <-> address) are client_state.c's, finish is join.c's, errors are
 * errors.c's.
 *
 * Owns: the stk_client's memory, its config and lock (c->mu, the condition
 * variables, stopping), c->api, and c->job for a local job. Must not:
 * abort, exit, print, or block in gRPC/CUDA while holding c->mu.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/advice.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/secret.h"
#include "client_internal.h"
#include "rpc/memtune.h"

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

/* 1 when a coordinator target ends in a port (1..65535), as "host:port",
 * "[v6]:port" or "dns:///host:port" do; a gRPC unix: target needs none.
 * Without it gRPC would dial port 0 and retry until join_timeout_ms. */
static int coordinator_has_port(const char *t) {
  if (!strncmp(t, "unix:", 5) || !strncmp(t, "unix-abstract:", 14)) return 1;
  const char *colon = strrchr(t, ':');
  if (!colon || !colon[1] || strlen(colon + 1) > 5) return 0;
  unsigned port = 0;
  for (const char *p = colon + 1; *p; p++) {
    if (*p < '0' || *p > '9') return 0;
    port = port * 10 + (unsigned)(*p - '0');
  }
  return port >= 1 && port <= 65535;
}

/* STK_OK if cfg can open a client (local: open_local), else a status
 * with err. */
static int check_config(const stk_client_config *cfg, int local, char *err,
                        size_t errlen) {
  if (!cfg) return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "cfg is NULL");
  if (!local && (!cfg->coordinator || !*cfg->coordinator))
    return stk__errf(
        err, errlen, STK_INVALID_ARGUMENT,
        "no coordinator: set cfg.coordinator (host:port) or STOKER_COORDINATOR");
  if (!local && !coordinator_has_port(cfg->coordinator))
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "coordinator '%.200s' has no port: give host:port, the address "
                     "the coordinator listens on (its --listen, 127.0.0.1:7070 by "
                     "default)",
                     cfg->coordinator);
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
  if (cfg->working_set > 1024 || cfg->working_set_max > 1024)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "cfg.working_set and cfg.working_set_max must be at most 1024");
  if (cfg->working_set_max && cfg->working_set_max < cfg->working_set)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "cfg.working_set_max must be 0 or >= cfg.working_set");
  if (cfg->resume_state && cfg->resume_len == 0)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "cfg.resume_state given with resume_len 0");
  return STK_OK;
}

/* Free c and everything it owns; its threads are stopped (or never ran). */
static void client_free(stk_client *c) {
  if (!c) return;
  stk__ring_free(c);
  stk__workers_free(c);
  stk__coord_close(c);
  stk__cuda_close(c);
  stk_dataset_close(c->job.dataset);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv_sched);
  pthread_cond_destroy(&c->cv_copy);
  pthread_cond_destroy(&c->cv_next);
  pthread_cond_destroy(&c->cv_local);
  for (uint32_t i = 0; c->job.classes && i < c->job.nclasses; i++)
    free(c->job.classes[i]);
  free(c->job.classes);
  free(c->coordinator);
  free(c->token);
  stk__tls_free(c->tls);
  free(c->job.data_root);
  free(c);
}

/* A client for cfg with its own copies of the strings, its lock and
 * condition variables; no job, buffers or threads yet. NULL when out of
 * memory. */
static stk_client *client_new(const stk_client_config *cfg, int local,
                              const char *data_root, uint32_t open_gen) {
  stk_client *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->open_gen = open_gen;
  c->cfg = *cfg;
  if (!c->cfg.no_worker_timeout_ms) c->cfg.no_worker_timeout_ms = cfg->join_timeout_ms;
  c->cfg.coordinator = NULL;
  c->cfg.token = NULL;
  c->cfg.tls_ca = c->cfg.tls_cert = c->cfg.tls_key = NULL;
  c->cfg.resume_state = NULL;
  c->local = local;
  c->coordinator = cfg->coordinator ? strdup(cfg->coordinator) : NULL;
  c->token = cfg->token ? strdup(cfg->token) : NULL;
  c->job.data_root = data_root ? strdup(data_root) : NULL;
  int wst = stk__workers_init(c);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv_sched, NULL);
  pthread_cond_init(&c->cv_copy, NULL);
  pthread_cond_init(&c->cv_next, NULL);
  pthread_cond_init(&c->cv_local, NULL);
  c->api.open_ns = stk__now_ns();
  /* the cores this process may use, for the receive path's host share */
  stk__cpu_limit lim;
  stk__cpu_limit_read("/", stk__affinity_cpus(), &lim);
  c->host_cores = lim.cores;
  const char *fault = getenv("STOKER_FAULT_CRC_EVERY");
  if (local && fault) c->fault_crc_every = strtoull(fault, NULL, 10);
  if ((cfg->coordinator && !c->coordinator) || (cfg->token && !c->token) ||
      (data_root && !c->job.data_root) || wst) {
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
  stk_job_spec_defaults(&c->job.spec);
  int st = stk_job_spec_parse(&c->job.spec, job_text, err, errlen);
  if (!st) st = stk_job_spec_validate(&c->job.spec, err, errlen);
  if (!st)
    st = stk_dataset_open(&c->job.spec, data_root, NULL, &c->job.dataset, err, errlen);
  if (st) return st;
  c->job.spec.num_samples = stk_dataset_size(c->job.dataset);
  c->job.hash = stk_job_spec_hash(&c->job.spec);
  c->job.nclasses = stk_dataset_num_classes(c->job.dataset);
  if (c->job.spec.world_size != c->cfg.world_size)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "cfg.world_size differs from the job's world_size");
  return STK_OK;
}

/* stk_client_open and stk_client_open_local: job_text NULL joins the
 * coordinator. STK_OK with *out, or a status with err (nothing left). */
static int open_common(const stk_client_config *cfg, const char *job_text,
                       const char *data_root, stk_client **out, char *err,
                       size_t errlen) {
  uint32_t gen = stk__intr_gen(); /* stk_interrupt from now on ends the join */
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
  if (!local)
    stk__rpc_tune_malloc(STK__MALLOC_ARENAS_CLIENT); /* opt out: STOKER_MALLOC_TUNING=0 */
  stk__resume rs;
  memset(&rs, 0, sizeof(rs));
  if (cfg->resume_state) {
    st = stk__state_parse(cfg->resume_state, cfg->resume_len, &rs, err, errlen);
    if (!st) st = stk__state_check_rank(cfg, &rs, err, errlen);
    if (st) return st;
  }

  stk_client *c = client_new(cfg, local, data_root, gen);
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
    c->job.hash = rs.job_hash;
  st = client_job(c, job_text, data_root, err, errlen);
  if (!st) st = stk__plan_init(c, cfg->resume_state ? &rs : NULL, err, errlen);
  if (st) goto fail;
  c->api.next_deliver = c->plan.start;
  st = stk_batch_layout_of(&c->job.spec, &c->job.layout);
  if (!st) st = stk__convert_layout(&c->job.spec, cfg->convert, &c->job.out);
  if (st) {
    stk__errf(err, errlen, st, "cfg.convert needs a job whose image tensor is uint8");
    goto fail;
  }
  /* A float image job: workers may send 8-bit images, rebuilt here
   * (STOKER_WIRE_UINT8=0 asks for the job's dtype on the wire instead). */
  const char *wu8 = getenv("STOKER_WIRE_UINT8");
  stk_job_spec s8;
  if (!local && cfg->convert == STK_CONVERT_NONE && !(wu8 && !strcmp(wu8, "0")) &&
      stk_image_wire_spec(&c->job.spec, &s8))
    c->job.wire_u8 = stk_batch_layout_of(&s8, &c->job.wire) == STK_OK;
  if (c->cuda) {
    st = stk__cuda_kernel_init(c, err, errlen);
    if (st) goto fail;
  }
  st = stk__ring_init(c, err, errlen);
  if (st) goto fail;
  pthread_mutex_lock(&c->mu);
  if (local) stk__worker_add(c, "local", "in-process", NULL, 1, 1);
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

/* Under mu, while next waits for seq: the client's log line, every
 * WAIT_LOG_MS once it has waited that long (across next_timed calls),
 * saying what it waits for and since when. */
#define WAIT_LOG_MS 4000
static void wait_log(stk_client *c, int64_t now) {
  stk__api *a = &c->api;
  if (a->wait_seq != a->next_deliver || !a->wait_since_ns) {
    a->wait_seq = a->next_deliver;
    a->wait_since_ns = a->wait_log_ns = now;
    return;
  }
  if (now - a->wait_log_ns < (int64_t)WAIT_LOG_MS * 1000000) return;
  a->wait_log_ns = now;
  stk__addr ad;
  stk__seq_addr(c, a->next_deliver, &ad);
  double waited = (double)(now - a->wait_since_ns) / 1e9;
  uint32_t alive = c->local ? 1 : stk__workers_alive(c);
  int64_t none_since = c->sched.no_worker_since_ns;
  const stk__workers *ws = &c->workers;
  if (!alive && none_since) {
    stk__clog(c,
              "waiting for a worker: none alive for %.0f s (listed %u; fails after "
              "no_worker_timeout_ms %u)%s%.200s%s",
              (double)(now - none_since) / 1e9, ws->listed, c->cfg.no_worker_timeout_ms,
              ws->last_end[0] ? " (last: " : "", ws->last_end,
              ws->last_end[0] ? ")" : "");
    return;
  }
  stk__clog(c,
            "waiting for epoch %llu step %llu for %.0f s: %u of %u listed workers "
            "alive, none delivered it yet%s%.200s%s",
            (unsigned long long)ad.epoch, (unsigned long long)ad.step, waited, alive,
            ws->listed, ws->last_end[0] ? " (last: " : "", ws->last_end,
            ws->last_end[0] ? ")" : "");
}

int stk_client_next(stk_client *c, stk_batch **out) {
  return stk_client_next_timed(c, out, UINT32_MAX);
}

int stk_client_next_timed(stk_client *c, stk_batch **out, uint32_t timeout_ms) {
  if (!c || !out) return STK_INVALID_ARGUMENT;
  *out = NULL;
  uint32_t gen = stk__intr_gen();
  pthread_mutex_lock(&c->mu);
  char *err = c->errs.last;
  size_t errlen = sizeof(c->errs.last);
  err[0] = 0;
  int64_t t0 = stk__now_ns();
  if (!c->api.first_next_ns) c->api.first_next_ns = t0;
  int st = STK_OK;
  stk_batch *s = NULL;
  if (c->errs.fatal) {
    st = stk__fatal_check(c);
  } else if (c->api.eoe_pending) {
    c->api.eoe_pending = 0;
    st = STK_END_OF_EPOCH;
  } else if (c->api.next_deliver >= c->plan.total) {
    st = STK_END_OF_DATA;
    /* The first one is the normal end; asking again means a loop that
     * runs past the job's last epoch and gets nothing: say it once. */
    if (++c->api.eod_returned == 2)
      stk__clog(c,
                "next after the end of the data: the job has %u epoch%s, all handed "
                "out to this rank; later epochs get no batches (loop over the job's "
                "epochs)",
                c->job.spec.epochs, c->job.spec.epochs == 1 ? "" : "s");
  } else if (c->api.held + 1 >= c->ring.nslots) {
    st = STK_STATE;
    snprintf(err, errlen,
             "the caller holds %u batches: release one first (at most slots-1 = %u)",
             c->api.held, c->ring.nslots - 1);
  } else {
    while (!(s = stk__slot_take(c, c->api.next_deliver))) {
      if (c->errs.fatal) {
        st = stk__fatal_check(c);
        break;
      }
      if (c->coord.job_ended) {
        st = STK_CANCELLED;
        if (c->coord.job_failed)
          snprintf(err, errlen, "the job failed: %s", c->coord.job_end_reason);
        else snprintf(err, errlen, "the job ended: the coordinator is shutting it down");
        break;
      }
      int64_t now = stk__now_ns();
      int64_t none_since = c->sched.no_worker_since_ns;
      if (!c->local && stk__workers_alive(c) == 0 && none_since &&
          now - none_since > (int64_t)c->cfg.no_worker_timeout_ms * 1000000) {
        /* Every worker listed refused us (client_workers.c drops them): their
         * reason is the error, else plain unavailability. */
        const stk__workers *ws = &c->workers;
        st = stk__workers_all_dropped(c) ? ws->drop_status : STK_UNAVAILABLE;
        int n = snprintf(
            err, errlen,
            "no live worker for %u ms (no_worker_timeout_ms; %u listed)%s%.200s%s%.100s"
            "%s%.100s",
            c->cfg.no_worker_timeout_ms, ws->listed, ws->dropped ? "; " : "",
            ws->drop_msg, ws->refused ? "; " : "", ws->refused_msg,
            !ws->dropped && ws->last_end[0] ? "; last: " : "",
            !ws->dropped ? ws->last_end : "");
        (void)n; /* cut to err's size: the parts are bounded above */
        break;
      }
      if (stk__interrupted(c, gen)) {
        stk__intr_take(c);
        stk__addr ad;
        stk__seq_addr(c, c->api.next_deliver, &ad);
        st = STK_INTERRUPTED;
        snprintf(err, errlen,
                 "interrupted while waiting for epoch %llu step %llu: the client is "
                 "intact (next again goes on)",
                 (unsigned long long)ad.epoch, (unsigned long long)ad.step);
        break;
      }
      wait_log(c, now);
      int64_t left_ms = timeout_ms == UINT32_MAX
                            ? STK__INTR_POLL_MS
                            : (int64_t)timeout_ms - (now - t0) / 1000000;
      if (left_ms <= 0) {
        st = STK_TIMEOUT; /* not an error: err stays "" */
        break;
      }
      stk__cond_wait_ms(&c->cv_next, &c->mu,
                        left_ms < STK__INTR_POLL_MS ? left_ms : STK__INTR_POLL_MS);
    }
    int64_t t1 = stk__now_ns();
    c->api.stall_ns += (uint64_t)(t1 - t0);
    c->api.last_next_ns = t1;
    if (s) {
      c->api.wait_since_ns = 0;
      c->api.held++;
      c->api.next_deliver++;
      c->api.batches++;
      if (stk__seq_epoch_start(c, c->api.next_deliver)) c->api.eoe_pending = 1;
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (s && c->cuda) {
    int cst = stk__cuda_on_next(c, s);
    if (cst) {
      snprintf(err, errlen, "CUDA: %s", stk__cuda_error(c));
      stk_batch_release(s);
      return cst;
    }
  }
  if (s) *out = s;
  else if (st != STK_END_OF_EPOCH && st != STK_END_OF_DATA && st != STK_TIMEOUT &&
           !err[0])
    snprintf(err, errlen, "%s", stk_strerror(st));
  return st;
}

void stk_batch_release(stk_batch *b) {
  if (!b) return;
  stk_client *c = b->c;
  if (c->cuda && b->state == SLOT_HELD) stk__cuda_on_release(c, b);
  pthread_mutex_lock(&c->mu);
  if (stk__slot_give_back(c, b)) c->api.held--;
  int last = c->api.closed && c->api.held == 0; /* closed before this release */
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
uint32_t stk_batch_num_tensors(const stk_batch *b) {
  return b ? b->c->job.out.ntensors : 0;
}

int stk_batch_tensor(const stk_batch *b, uint32_t i, stk_tensor *out) {
  if (!b || !out || i >= b->c->job.out.ntensors) return STK_INVALID_ARGUMENT;
  *out = b->tensors[i];
  return STK_OK;
}

const void *stk_batch_payload(const stk_batch *b, size_t *len) {
  if (!b) return NULL;
  if (len) *len = (size_t)b->c->job.layout.total_bytes;
  /* the float image rebuilt on the host when it came as 8-bit values */
  return stk__batch_host_payload((stk_batch *)b);
}

/* ---- job, state, stats ----------------------------------------------- */

int stk_client_job(const stk_client *c, stk_job_spec *out) {
  if (!c || !out) return STK_INVALID_ARGUMENT;
  *out = c->job.spec;
  if (!out->num_classes) out->num_classes = c->job.nclasses;
  return STK_OK;
}

uint32_t stk_client_num_classes(const stk_client *c) { return c ? c->job.nclasses : 0; }

const char *stk_client_class_name(const stk_client *c, uint32_t i) {
  if (!c || i >= c->job.nclasses) return NULL;
  if (c->local) return stk_dataset_class_name(c->job.dataset, i);
  return c->job.classes ? c->job.classes[i] : NULL;
}

uint64_t stk_client_payload_bytes(const stk_client *c) {
  return c ? c->job.layout.total_bytes : 0;
}

uint64_t stk_client_steps_per_epoch(const stk_client *c) { return c ? c->plan.spe : 0; }

int stk_client_reference(stk_client *c, uint64_t epoch, uint64_t step,
                         const char *data_root, void *buf, size_t len) {
  if (!c || !buf) return STK_INVALID_ARGUMENT;
  char err[256] = "";
  int st = stk_build_reference_at(&c->job.spec, data_root ? data_root : c->job.data_root,
                                  epoch, stk__epoch_offset(c, epoch), c->cfg.rank, step,
                                  buf, len, err, sizeof(err));
  if (st) stk__seterr(c, "reference: %s", err);
  return st;
}

/* Under mu: the caller's stall as a fraction of the time between its
 * first and its last next (0 before two calls), at most 1; *span_out gets
 * that time (ns). */
static double stall_fraction(const stk_client *c, int64_t *span_out) {
  int64_t span = c->api.last_next_ns - c->api.first_next_ns;
  double f = span > 0 ? (double)c->api.stall_ns / (double)span : 0.0;
  if (f > 1.0) f = 1.0;
  *span_out = span;
  return f;
}

/* Under mu: the listed entries' count of live streams (entries free for
 * reuse left out), as the stats report it. */
static uint32_t used_alive(const stk_client *c) {
  uint32_t alive = 0;
  for (uint32_t i = 0; i < c->workers.n; i++) {
    const stk__worker *w = c->workers.table[i];
    if (w->used) alive += w->alive ? 1 : 0;
  }
  return alive;
}

void stk__recv_cpu_note(stk_client *c, int slot) {
  unsigned long long u, s;
  stk__thread_cpu_split_ns(&u, &s);
  __atomic_store_n(&c->recv_cpu_user_ns[slot], (uint64_t)u, __ATOMIC_RELAXED);
  __atomic_store_n(&c->recv_cpu_sys_ns[slot], (uint64_t)s, __ATOMIC_RELAXED);
}

/* Under mu: the loop's time per batch outside next() (ms; 0 before two
 * batches) and the receive path's figures: its CPU seconds, its cost per
 * GB (0 before 1 MB came), its share of the host's usable cores over the
 * recent window (0 before a second of it; feeds the window). */
static void loop_figures(stk_client *c, double *step_ms, stk__recv_figures *rf) {
  int64_t span = c->api.last_next_ns - c->api.first_next_ns;
  double outside = (double)span - (double)c->api.stall_ns;
  *step_ms = c->api.step_ms_told > 0 ? c->api.step_ms_told
             : c->api.batches >= 2 && outside > 0
                 ? outside / (double)(c->api.batches - 1) / 1e6
                 : 0;
  uint64_t u = 0, s = 0;
  for (int i = 0; i < STK__RECV_CPU_SLOTS; i++) {
    u += __atomic_load_n(&c->recv_cpu_user_ns[i], __ATOMIC_RELAXED);
    s += __atomic_load_n(&c->recv_cpu_sys_ns[i], __ATOMIC_RELAXED);
  }
  /* The watch thread notes its CPU between waits up to 2 s long: what it
   * used since comes from its CPU clock now, split as its last note. */
  struct timespec ts;
  if (__atomic_load_n(&c->watch_clock_set, __ATOMIC_ACQUIRE) &&
      !clock_gettime((clockid_t)__atomic_load_n(&c->watch_clock, __ATOMIC_RELAXED),
                     &ts)) {
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint64_t wu = __atomic_load_n(&c->recv_cpu_user_ns[STK__CPU_WATCH], __ATOMIC_RELAXED);
    uint64_t ws = __atomic_load_n(&c->recv_cpu_sys_ns[STK__CPU_WATCH], __ATOMIC_RELAXED);
    if (now > wu + ws) {
      uint64_t more = now - (wu + ws);
      uint64_t more_u =
          wu + ws ? (uint64_t)((double)more * (double)wu / (double)(wu + ws)) : more / 2;
      u += more_u;
      s += more - more_u;
    }
  }
  memset(rf, 0, sizeof(*rf));
  rf->user_s = (double)u / 1e9;
  rf->sys_s = (double)s / 1e9;
  rf->cpu_s = rf->user_s + rf->sys_s;
  if (c->pool.bytes >= 1000000) {
    double gb = (double)c->pool.bytes / 1e9;
    rf->per_gb = rf->cpu_s / gb;
    rf->user_per_gb = rf->user_s / gb;
    rf->sys_per_gb = rf->sys_s / gb;
  }
  rf->host_cores = c->host_cores;
  double rate = stk__cpu_window_rate(&c->recv_window, stk__now_ns(), rf->cpu_s,
                                     STK__RECV_WINDOW_NS, STK__RECV_MIN_SPAN_NS);
  rf->host_share = rate >= 0 ? stk__cpu_share(rate, 1.0, c->host_cores) : 0;
}

void stk__report_figures(stk_client *c, uint64_t *batches, double *stall_frac,
                         uint32_t *workers_alive, double *step_ms,
                         stk__recv_figures *rf) {
  int64_t span;
  pthread_mutex_lock(&c->mu);
  *batches = c->api.batches;
  *stall_frac = stall_fraction(c, &span);
  *workers_alive = used_alive(c);
  loop_figures(c, step_ms, rf);
  pthread_mutex_unlock(&c->mu);
}

int stk_client_set_step_ms(stk_client *c, double ms) {
  if (!c || !isfinite(ms) || ms < 0 || ms > 1e7) return STK_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->mu);
  c->api.step_ms_told = ms;
  pthread_mutex_unlock(&c->mu);
  return STK_OK;
}

void stk_client_stats(stk_client *c, stk_stats *o) {
  if (!o) return;
  memset(o, 0, sizeof(*o));
  if (!c) return;
  int64_t now = stk__now_ns();
  pthread_mutex_lock(&c->mu);
  o->batches = c->api.batches;
  o->bytes = c->pool.bytes;
  o->stall_ns = c->api.stall_ns;
  o->wall_ns = (uint64_t)(now - c->api.open_ns);
  int64_t span;
  o->stall_fraction = stall_fraction(c, &span);
  o->reissued = c->pool.reissued;
  o->duplicates = c->pool.duplicates;
  o->crc_errors = c->pool.crc_errors;
  o->substituted = c->pool.substituted;
  o->workers_dropped = (uint32_t)c->workers.dropped;
  o->hedges_sent = c->pool.hedges_sent;
  o->hedges_won = c->pool.hedges_won;
  o->hedge_dropped = c->pool.hedge_dropped;
  o->device_convert = (uint32_t)stk__cuda_kernel(c);
  o->working_set = c->workers.wset_size;
  o->workers_listed = c->workers.listed;
  /* The workers this rank streams from (or did) first, then the others
   * it knows: with hundreds listed, the 32 rows show the ones that serve. */
  for (uint32_t pass = 0; pass < 2; pass++)
    for (uint32_t i = 0; i < c->workers.n; i++) {
      const stk__worker *w = c->workers.table[i];
      if (!w->used) continue; /* an entry free for reuse */
      int serving = w->local || w->wset || w->alive || w->batches || w->outstanding;
      if (serving != (pass == 0)) continue;
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
  uint32_t alive = used_alive(c);
  o->workers_alive = alive;
  o->coordinator_watching = (uint32_t)c->coord.watching;
  double step_ms;
  stk__recv_figures rf;
  loop_figures(c, &step_ms, &rf);
  o->step_ms = (float)step_ms;
  o->recv_cpu_s = rf.cpu_s;
  o->recv_cpu_s_per_gb = (float)rf.per_gb;
  o->recv_cpu_user_s_per_gb = (float)rf.user_per_gb;
  o->recv_cpu_sys_s_per_gb = (float)rf.sys_per_gb;
  o->recv_cpu_user_s = rf.user_s;
  o->recv_cpu_sys_s = rf.sys_s;
  o->host_cores = rf.host_cores;
  o->recv_host_share = rf.host_share;
  /* Input-bound estimate (common/advice.h): workers x (1 + stall/compute),
   * reported only when the stall is above STK_INPUT_BOUND_STALL (2%) of
   * the loop time and the loop has a step time (STK_MIN_STEP_MS per batch
   * outside next(); a loop that only drains batches has none): else 0. */
  if (o->stall_fraction > STK_INPUT_BOUND_STALL && span > 0 && alive > 0 &&
      step_ms >= STK_MIN_STEP_MS) {
    double stall = (double)c->api.stall_ns;
    o->workers_needed = stk__workers_needed(alive, stall, (double)span - stall);
  }
  pthread_mutex_unlock(&c->mu);
}

const char *stk_client_error(const stk_client *c) { return c ? c->errs.last : ""; }

void stk_client_close(stk_client *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->stopping = 1;
  pthread_cond_broadcast(&c->cv_sched);
  pthread_cond_broadcast(&c->cv_copy);
  pthread_cond_broadcast(&c->cv_next);
  pthread_cond_broadcast(&c->cv_local);
  pthread_mutex_unlock(&c->mu);
  stk__watch_stop(c);
  stk__streams_stop(c);
  stk__copy_stop(c);
  /* Every thread is gone. Batches the caller still holds stay valid: then
   * only the slots (and this struct) outlive the close, and the last
   * stk_batch_release frees them. */
  pthread_mutex_lock(&c->mu);
  int held = c->api.held != 0;
  if (held) c->api.closed = 1;
  pthread_mutex_unlock(&c->mu);
  if (!held) {
    client_free(c);
    return;
  }
  stk__ring_free_transfer(c);
  stk__workers_close_channels(c);
  stk__coord_close(c);
}
