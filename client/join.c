/* join.c - the client's side of the coordinator: Join with retries until
 * join_timeout_ms, parsing and verifying the job (canonical text + hash),
 * the watcher thread on WatchWorkers (reconnects with backoff; applies each
 * worker list or delta; shutting_down ends the job), and Finish.
 *
 * Worker lists: the watch says takes_deltas, so a coordinator that can
 * sends the changes since the client's version (WorkerList.delta): applied
 * when the client's list is at its base_version (upsert `workers`, unlist
 * `removed`), else the client watches again with known_version 0 and gets
 * the whole list. A whole list replaces the client's. Either way client_workers.c
 * then recomputes this rank's working set.
 *
 * Every watch re-announces the rank (job hash, client id, finished, rank 0
 * ending the job), so a coordinator restarted without its state journal
 * still learns what it missed. The coordinator ends each watch after its
 * lease (status OK): the watcher then opens the next one at once.
 *
 * Owns: c->coord (the coordinator channel, the watch stream destroyed only
 * by the watcher thread, the job's end); at open, c->job's spec and hash
 * from the coordinator. The worker list goes to client_workers.c. Must not: block
 * in gRPC holding c->mu.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/thread.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/text.h"
#include "client_internal.h"
#include "stoker.pb-c.h"
#include "stoker/version.h"

/* ---- Join ------------------------------------------------------------ */

/* 1 when a stream ticket can travel as a bearer token: printable ASCII
 * without spaces, shorter than STK_MAX_TICKET_BYTES. */
static int ticket_ok(const char *t) {
  size_t n = strlen(t);
  if (n >= STK_MAX_TICKET_BYTES) return 0;
  for (size_t i = 0; i < n; i++)
    if (t[i] <= ' ' || t[i] > '~') return 0;
  return 1;
}

/* Under mu: the id of list entry wi when it can be used, else NULL (the
 * entry is refused: counted and logged with why). Entries that are not
 * host:port, too long, or carry a ticket that cannot travel are refused. */
static const char *entry_id(stk_client *c, const Stoker__V1__WorkerInfo *wi) {
  if (!wi || !wi->address || !*wi->address) return NULL;
  const char *id = wi->worker_id && *wi->worker_id ? wi->worker_id : wi->address;
  size_t il = strlen(id), al = strlen(wi->address);
  if (il < STK_MAX_ID_BYTES && al < STK_MAX_ID_BYTES &&
      !stk__hostport_valid(wi->address)) {
    /* Dialled only as host:port: never a unix socket or other target a
     * coordinator (or a rogue worker through it) would point us at. */
    stk__workers_refuse(c, "worker list entry refused: its address is not host:port");
    return NULL;
  }
  if (il >= STK_MAX_ID_BYTES || al >= STK_MAX_ID_BYTES) {
    /* The coordinator refuses these at registration; a list that has one
     * anyway (another coordinator) loses that entry, never a truncated
     * id that could collide with another worker's. */
    char msg[sizeof(c->workers.refused_msg)];
    snprintf(msg, sizeof(msg), "worker list entry refused: %s of %zu bytes (at most %d)",
             il >= STK_MAX_ID_BYTES ? "id" : "address", il >= STK_MAX_ID_BYTES ? il : al,
             STK_MAX_ID_BYTES - 1);
    stk__workers_refuse(c, msg);
    return NULL;
  }
  const char *ticket = wi->stream_ticket;
  if (ticket && *ticket && !ticket_ok(ticket)) {
    /* Sent as a bearer token: never cut, never a header gRPC refuses. */
    stk__workers_refuse(c,
                        "worker list entry refused: its stream ticket is not "
                        "printable text of at most 127 bytes");
    return NULL;
  }
  return id;
}

/* Apply a whole worker list (the join's, or a watch's that is not a
 * delta): its usable entries are listed, everyone else unlisted, then the
 * working set is recomputed. 0, or -1 when out of memory (nothing
 * applied). Takes c->mu. */
static int apply_list(stk_client *c, Stoker__V1__WorkerInfo **ws, size_t n) {
  const char **ids = malloc((n ? n : 1) * sizeof(*ids));
  if (!ids) return -1;
  pthread_mutex_lock(&c->mu);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const char *id = entry_id(c, ws[i]);
    if (!id) continue;
    ids[k++] = id;
    stk__worker_add(c, id, ws[i]->address, ws[i]->stream_ticket, ws[i]->cores, 0);
  }
  stk__worker_unlist_missing(c, ids, k);
  stk__workers_changed(c);
  pthread_mutex_unlock(&c->mu);
  free(ids);
  return 0;
}

/* Apply a delta (the list at base_version -> version): upsert its entries,
 * unlist `removed`, recompute the working set. Touches only the entries
 * it names (plus the set's O(M log k)). Takes c->mu. */
static void apply_delta(stk_client *c, const Stoker__V1__WorkerList *wl) {
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < wl->n_workers; i++) {
    const char *id = entry_id(c, wl->workers[i]);
    if (id)
      stk__worker_add(c, id, wl->workers[i]->address, wl->workers[i]->stream_ticket,
                      wl->workers[i]->cores, 0);
  }
  for (size_t i = 0; i < wl->n_removed; i++)
    if (wl->removed[i] && strlen(wl->removed[i]) < STK_MAX_ID_BYTES)
      stk__worker_unlist(c, wl->removed[i]);
  stk__workers_changed(c);
  pthread_mutex_unlock(&c->mu);
}

#define JOIN_LOG_MS 4000 /* the waiting line's period: never 5 s silent */

/* Ask the coordinator to join until it answers with a job, refuses for
 * good, or join_timeout_ms passes; stk_interrupt ends it
 * (STK_INTERRUPTED). One log line every JOIN_LOG_MS says what it waits
 * for. STK_OK with *out (caller frees), or a status with err. */
static int join_ask(stk_client *c, Stoker__V1__JoinResponse **out, char *err,
                    size_t errlen) {
  char host[64] = "host";
  gethostname(host, sizeof(host) - 1);
  snprintf(c->coord.client_id, sizeof(c->coord.client_id), "%s:%d:rank%u", host,
           (int)getpid(), c->cfg.rank);
  int64_t start = stk__now_ms(), deadline = start + c->cfg.join_timeout_ms;
  int64_t log_at = start + JOIN_LOG_MS;
  stk__intr_ctx ictx = {c, c->open_gen};
  char details[700] = "";
  int backoff = 50;
  /* One attempt's deadline: 5 s, doubled after each attempt that got no
   * answer in time (a coordinator that is reachable but slow, e.g. with
   * thousands of ranks joining on a busy host: a shorter attempt would
   * only queue the same Join again behind the first). */
  int try_ms = 5000;
  *out = NULL;
  for (;;) {
    Stoker__V1__JoinRequest req = STOKER__V1__JOIN_REQUEST__INIT;
    req.rank = c->cfg.rank;
    req.world_size = c->cfg.world_size;
    req.client_id = c->coord.client_id;
    req.protocol_version = STK_PROTOCOL_VERSION;
    req.expect_job_hash = c->job.hash; /* set by open from resume_state */
    int64_t left = deadline - stk__now_ms();
    int tmo = left < 200 ? 200 : (left > try_ms ? try_ms : (int)left);
    ProtobufCMessage *m = NULL;
    int code =
        stk__rpc_unary_stoppable(c->coord.ch, "/stoker.v1.Coordinator/Join", &req.base,
                                 &stoker__v1__join_response__descriptor, &m, tmo, details,
                                 sizeof(details), stk__intr_stop, &ictx);
    if (stk__interrupted(NULL, c->open_gen)) {
      if (m) protobuf_c_message_free_unpacked(m, NULL);
      return stk__errf(err, errlen, STK_INTERRUPTED,
                       "interrupted while joining the job at %s (after %.1f s)",
                       c->coordinator, (double)(stk__now_ms() - start) / 1000.0);
    }
    if (code == GRPC_STATUS_DEADLINE_EXCEEDED && try_ms < 60000) try_ms *= 2;
    int final, st = stk__rpc_status(code, &final);
    if (code == GRPC_STATUS_OK) {
      Stoker__V1__JoinResponse *resp = (Stoker__V1__JoinResponse *)m;
      if (resp->job && resp->job->canonical && *resp->job->canonical) {
        *out = resp;
        return STK_OK;
      }
      protobuf_c_message_free_unpacked(m, NULL);
      snprintf(details, sizeof(details), "coordinator sent no job yet");
    } else if (final) {
      /* FAILED_PRECONDITION: resume state from another job (MISMATCH), a
       * protocol version the coordinator does not speak, or a job that is
       * already over. */
      if (code == GRPC_STATUS_FAILED_PRECONDITION && !c->job.hash)
        st = strstr(details, "protocol") ? STK_PROTOCOL : STK_CANCELLED;
      /* The rank is another live process's, or finished in this job:
       * refused at once, the coordinator's words say which. */
      if (code == GRPC_STATUS_FAILED_PRECONDITION &&
          (strstr(details, " is held by client ") ||
           strstr(details, " has finished in job ")))
        return stk__errf(err, errlen, STK_STATE, "could not join the job at %s: %s",
                         c->coordinator, details);
      /* The coordinator holds a worker's failure and no worker came since:
       * nothing will serve this job until someone fixes it. */
      if (code == GRPC_STATUS_FAILED_PRECONDITION &&
          !strncmp(details, STK_NO_WORKER_CAN_SERVE, strlen(STK_NO_WORKER_CAN_SERVE)))
        return stk__errf(err, errlen, STK_UNAVAILABLE, "could not join the job at %s: %s",
                         c->coordinator, details);
      int cred =
          code == GRPC_STATUS_UNAUTHENTICATED || code == GRPC_STATUS_PERMISSION_DENIED;
      return stk__errf(err, errlen, st, "join refused%s: %s", cred ? " (token)" : "",
                       details);
    }
    /* UNAVAILABLE (no coordinator yet, or no worker registered), deadline,
     * anything transient: retry until join_timeout_ms. */
    if (stk__now_ms() >= deadline) {
      const char *hint =
          code == GRPC_STATUS_UNAVAILABLE ? stk__tls_hint(c->tls, details) : "";
      return stk__errf(
          err, errlen, STK_UNAVAILABLE,
          "could not join the job at %s within %u ms (last: gRPC status %d%s%s)%s",
          c->coordinator, c->cfg.join_timeout_ms, code, details[0] ? ": " : "", details,
          hint);
    }
    if (stk__now_ms() >= log_at) {
      /* One line every JOIN_LOG_MS: what it waits for, since when. */
      log_at = stk__now_ms() + JOIN_LOG_MS;
      stk__clog(c,
                "waiting to join the job at %s for %.0f s (gives up after "
                "join_timeout_ms %u): gRPC status %d%s%s",
                c->coordinator, (double)(stk__now_ms() - start) / 1000.0,
                c->cfg.join_timeout_ms, code, details[0] ? ": " : "", details);
    }
    if (stk__intr_sleep_ms(NULL, c->open_gen, backoff))
      return stk__errf(err, errlen, STK_INTERRUPTED,
                       "interrupted while joining the job at %s (after %.1f s)",
                       c->coordinator, (double)(stk__now_ms() - start) / 1000.0);
    if (backoff < 500) backoff *= 2;
  }
}

/* Check the coordinator's job against what this client was opened with
 * and adopt it (spec, hash, worker list). STK_OK or a status with err. */
static int join_adopt(stk_client *c, const Stoker__V1__JoinResponse *resp, char *err,
                      size_t errlen) {
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  int st = stk_job_spec_parse(&spec, resp->job->canonical, err, errlen);
  if (st) return st;
  if (stk_job_spec_hash(&spec) != resp->job->hash)
    return stk__errf(err, errlen, STK_PROTOCOL,
                     "the coordinator's job text does not hash to its job hash "
                     "(protocol or version mismatch)");
  st = stk_job_spec_validate(&spec, err, errlen);
  if (st) return st;
  if (c->job.hash && c->job.hash != resp->job->hash)
    return stk__errf(err, errlen, STK_MISMATCH,
                     "resume_state belongs to another job (job hash differs)");
  if (spec.world_size != c->cfg.world_size)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "cfg.world_size %u differs from the job's world_size %u",
                     c->cfg.world_size, spec.world_size);
  if (spec.num_samples == 0)
    return stk__errf(err, errlen, STK_PROTOCOL, "the job has no samples");
  /* ImageFolder: the classes, when the coordinator knows them (a job with
   * only workers that do not report them answers 0: Loader.classes None) */
  if (spec.source == STK_SOURCE_IMAGEFOLDER && resp->num_classes) {
    if ((spec.num_classes && spec.num_classes != resp->num_classes) ||
        (resp->n_classes && resp->n_classes != resp->num_classes))
      return stk__errf(err, errlen, STK_PROTOCOL,
                       "the coordinator's class count %u does not fit the job "
                       "(num_classes %u, %zu names)",
                       resp->num_classes, spec.num_classes, resp->n_classes);
    if (resp->n_classes) {
      char **v = calloc(resp->n_classes, sizeof(*v));
      for (size_t i = 0; v && i < resp->n_classes; i++)
        if (!(v[i] = strdup(resp->classes[i]))) {
          for (size_t k = 0; k < i; k++) free(v[k]);
          free(v), v = NULL;
        }
      if (!v) return stk__errf(err, errlen, STK_NO_MEMORY, "out of memory");
      c->job.classes = v;
    }
    c->job.nclasses = resp->num_classes;
  }
  c->job.spec = spec;
  c->job.hash = resp->job->hash;
  if (apply_list(c, resp->workers, resp->n_workers))
    return stk__errf(err, errlen, STK_NO_MEMORY, "out of memory");
  c->coord.list_version = resp->list_version;
  pthread_mutex_lock(&c->mu);
  stk__sched_no_worker_from(c, stk__now_ns());
  pthread_mutex_unlock(&c->mu);
  return STK_OK;
}

int stk__join(stk_client *c, char *err, size_t errlen) {
  if (stk__rpc_channel_open(c->coordinator, STK_MAX_JOIN_MSG, c->token, c->tls,
                            &c->coord.ch))
    return stk__errf(err, errlen, STK_NO_MEMORY, "out of memory");
  Stoker__V1__JoinResponse *resp = NULL;
  int st = join_ask(c, &resp, err, errlen);
  if (st) return st;
  st = join_adopt(c, resp, err, errlen);
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  return st;
}

/* ---- WatchWorkers ---------------------------------------------------- */

/* c->stopping, read under c->mu. */
static int stopping(stk_client *c) {
  pthread_mutex_lock(&c->mu);
  int s = c->stopping;
  pthread_mutex_unlock(&c->mu);
  return s;
}

/* This rank's figures for the coordinator (ReportStats), every
 * REPORT_MS from the watch thread, so `stoker status` and /metrics show
 * the job's stall. Best effort: a failure is dropped and doubles the
 * pause before the next report, up to REPORT_MAX_MS (a coordinator behind
 * its load is not asked for more); UNIMPLEMENTED (an older coordinator)
 * stops the reports. */
#define REPORT_MS     2000
#define REPORT_MAX_MS 32000
typedef struct report_state {
  int64_t next_ms, last_ms;
  uint64_t last_batches;
  int off;
  int every_ms; /* the pause now: REPORT_MS, doubled per failure */
} report_state;

/* Send this rank's figures if REPORT_MS have passed (watch thread). */
static void report_stats(stk_client *c, report_state *rs) {
  int64_t now = stk__now_ms();
  if (rs->off || now < rs->next_ms) return;
  if (!rs->every_ms) rs->every_ms = REPORT_MS;
  rs->next_ms = now + rs->every_ms;
  uint64_t batches = 0;
  double stall_fraction = 0;
  uint32_t alive = 0;
  double step_ms = 0;
  stk__recv_figures rf;
  stk__report_figures(c, &batches, &stall_fraction, &alive, &step_ms, &rf);
  Stoker__V1__ClientStats q = STOKER__V1__CLIENT_STATS__INIT;
  q.rank = c->cfg.rank;
  q.stall_fraction = stall_fraction;
  q.batches = batches;
  q.workers_alive = alive;
  q.step_ms = step_ms;
  q.recv_cpu_s = rf.cpu_s;
  q.recv_cpu_s_per_gb = rf.per_gb;
  q.recv_cpu_user_s = rf.user_s;
  q.recv_cpu_sys_s = rf.sys_s;
  q.recv_cpu_user_s_per_gb = rf.user_per_gb;
  q.recv_cpu_sys_s_per_gb = rf.sys_per_gb;
  q.recv_host_share = rf.host_share;
  q.host_cores = rf.host_cores;
  if (rs->last_ms && now > rs->last_ms && batches >= rs->last_batches)
    q.batches_per_s =
        (double)(batches - rs->last_batches) * 1000.0 / (double)(now - rs->last_ms);
  rs->last_ms = now, rs->last_batches = batches;
  ProtobufCMessage *resp = NULL;
  char det[128];
  int code = stk__rpc_unary(c->coord.ch, "/stoker.v1.Coordinator/ReportStats", &q.base,
                            &stoker__v1__report_stats_response__descriptor, &resp, 1000,
                            det, sizeof(det));
  if (resp) protobuf_c_message_free_unpacked(resp, NULL);
  if (code == GRPC_STATUS_UNIMPLEMENTED) rs->off = 1;
  if (code == GRPC_STATUS_OK) rs->every_ms = REPORT_MS;
  else if (rs->every_ms < REPORT_MAX_MS) rs->every_ms *= 2;
}

/* The watch thread: WatchWorkers until stopping, reopened with backoff;
 * each list goes to the table, shutting_down ends the job. */
static void *watch_main(void *arg) {
  stk_client *c = arg;
  stk__thread_name("stk-watch");
  /* its CPU clock, so stk_client_stats can read what it used since its
   * last note (it waits up to REPORT_MS in gRPC, which may read the
   * worker streams meanwhile) */
  clockid_t cid;
  if (!pthread_getcpuclockid(pthread_self(), &cid)) {
    __atomic_store_n(&c->watch_clock, (int)cid, __ATOMIC_RELAXED);
    __atomic_store_n(&c->watch_clock_set, 1, __ATOMIC_RELEASE);
  }
  int backoff = 100;
  report_state rs = {0};
  while (!stopping(c)) {
    stk__rpc_stream *s = NULL;
    if (stk__rpc_stream_open(c->coord.ch, "/stoker.v1.Coordinator/WatchWorkers", 0, &s)) {
      stk__sleep_ms(backoff);
      continue;
    }
    pthread_mutex_lock(&c->mu);
    int stop = c->stopping;
    if (!stop) c->coord.watch = s;
    pthread_mutex_unlock(&c->mu);
    if (stop) {
      stk__rpc_stream_destroy(s);
      break;
    }
    Stoker__V1__WatchRequest req = STOKER__V1__WATCH_REQUEST__INIT;
    req.rank = c->cfg.rank;
    req.known_version = c->coord.list_version;
    req.job_hash = c->job.hash;
    req.client_id = c->coord.client_id;
    req.takes_deltas = 1;
    pthread_mutex_lock(&c->mu);
    req.finished = c->coord.finish_called;
    req.end_job = c->coord.end_job_called;
    pthread_mutex_unlock(&c->mu);
    int ok = stk__rpc_stream_send_msg(s, &req.base) == 0;
    if (ok) stk__rpc_stream_close_send(s);
    pthread_mutex_lock(&c->mu);
    c->coord.watching = ok;
    pthread_mutex_unlock(&c->mu);
    while (ok) {
      /* this thread's CPU so far: part of the receive path's (gRPC's
       * default poll engine reads the worker streams here too) */
      stk__recv_cpu_note(c, STK__CPU_WATCH);
      report_stats(c, &rs);
      grpc_byte_buffer *bb = NULL;
      int rc = stk__rpc_stream_recv(s, &bb, REPORT_MS); /* stop cancels the stream */
      if (rc == -2) {
        if (stopping(c)) break;
        continue;
      }
      if (rc == 0) {
        /* Ended with a status: OK is the end of the watch's lease (or of
         * the job, seen above): watch again at once. */
        char det[128];
        int code = stk__rpc_stream_status(s, 1000, det, sizeof(det));
        pthread_mutex_lock(&c->mu);
        if (code == GRPC_STATUS_OK && !c->coord.job_ended) backoff = 50;
        pthread_mutex_unlock(&c->mu);
        break;
      }
      if (rc != 1) break;
      Stoker__V1__WorkerList *wl = (Stoker__V1__WorkerList *)stk__rpc_unpack(
          &stoker__v1__worker_list__descriptor, bb, STK_MAX_LIST_MSG);
      grpc_byte_buffer_destroy(bb);
      if (!wl) break;
      backoff = 100;
      if (wl->delta && wl->base_version != c->coord.list_version) {
        /* A delta from a list this client does not have: watch again for
         * the whole list (known_version 0). */
        protobuf_c_message_free_unpacked(&wl->base, NULL);
        c->coord.list_version = 0;
        backoff = 25; /* doubled below: watch again in 50 ms */
        break;
      }
      if (wl->delta) apply_delta(c, wl);
      else if (apply_list(c, wl->workers, wl->n_workers)) {
        protobuf_c_message_free_unpacked(&wl->base, NULL);
        c->coord.list_version = 0;
        break;
      }
      c->coord.list_version = wl->version;
      if (wl->shutting_down) {
        pthread_mutex_lock(&c->mu);
        stk__coord_job_ended_locked(c, wl->failed, wl->reason ? wl->reason : "");
        pthread_mutex_unlock(&c->mu);
      }
      protobuf_c_message_free_unpacked(&wl->base, NULL);
    }
    pthread_mutex_lock(&c->mu);
    c->coord.watch = NULL;
    c->coord.watching = 0;
    pthread_mutex_unlock(&c->mu);
    stk__rpc_stream_destroy(s);
    for (int waited = 0; waited < backoff && !stopping(c); waited += 50)
      stk__sleep_ms(50);
    if (backoff < 2000) backoff *= 2;
  }
  return NULL;
}

void stk__coord_job_ended_locked(stk_client *c, int failed, const char *reason) {
  c->coord.job_ended = 1;
  if (failed && !c->coord.job_failed) {
    /* Untrusted text: printable ASCII and line breaks (a python op's
     * traceback) only, bounded. The first reason stays. */
    size_t o = 0;
    for (; reason[o] && o + 1 < sizeof(c->coord.job_end_reason); o++)
      c->coord.job_end_reason[o] =
          reason[o] == '\n' || (reason[o] >= 0x20 && reason[o] < 0x7f) ? reason[o] : '?';
    c->coord.job_end_reason[o] = 0;
    c->coord.job_failed = 1;
  }
  pthread_cond_broadcast(&c->cv_next);
}

int stk__watch_start(stk_client *c) {
  if (pthread_create(&c->coord.thread, NULL, watch_main, c)) return -1;
  c->coord.started = 1;
  return 0;
}

void stk__watch_stop(stk_client *c) {
  if (!c->coord.started) return;
  pthread_mutex_lock(&c->mu);
  if (c->coord.watch) stk__rpc_stream_cancel(c->coord.watch);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->coord.thread, NULL);
  c->coord.started = 0;
}

void stk__coord_close(stk_client *c) {
  stk__rpc_channel_close(c->coord.ch);
  c->coord.ch = NULL;
}

/* ---- Finish ---------------------------------------------------------- */

#define FINISH_MS      30000 /* keep trying Finish this long */
#define FINISH_SLOW_MS 60000 /* ... or this long once an attempt timed out */
#define FINISH_TRY_MS  5000  /* the first attempt's deadline */

int stk_client_finish(stk_client *c, int shutdown_job) {
  if (!c) return STK_INVALID_ARGUMENT;
  c->errs.last[0] = 0;
  if (c->local) return STK_OK;
  Stoker__V1__FinishRequest req = STOKER__V1__FINISH_REQUEST__INIT;
  req.rank = c->cfg.rank;
  req.shutdown_job = shutdown_job ? 1 : 0;
  req.job_hash = c->job.hash;
  /* Re-announced on every later watch, so the job learns of it even when
   * the coordinator restarts (or is down) around this call. */
  pthread_mutex_lock(&c->mu);
  c->coord.finish_called = 1;
  if (shutdown_job && c->cfg.rank == 0) c->coord.end_job_called = 1;
  pthread_mutex_unlock(&c->mu);
  char details[256] = "";
  /* Thousands of ranks may finish at once against a busy coordinator: each
   * attempt gets FINISH_TRY_MS, and the attempts go on for FINISH_MS with a
   * growing, jittered pause between them (spread, not synchronised); an
   * attempt that got no answer in time doubles the next one's deadline
   * (slow is not gone: see join_ask). A Finish lost here leaves the
   * job's end to the coordinator's idle timeout, so against a coordinator
   * that answers late the attempts go on for a minute; against one that is
   * gone (refused connections) for 30 s; after the job has ended (the
   * watch said so) not at all: there is nothing left to finish. They stay on the rank's
   * own connection: a new one needs a handshake, which a coordinator starved of CPU
   * completes last
   * ("connection attempt timed out before receiving SETTINGS frame" on
   * every fresh connection while the established one still delivered). */
  int64_t start = stk__now_ms(), deadline = start + FINISH_MS;
  int pause = 200, attempt = 0, try_ms = FINISH_TRY_MS;
  stk__intr_ctx ictx = {c, stk__intr_gen()};
  for (;;) {
    int64_t left = deadline - stk__now_ms();
    int tmo = left < 500 ? 500 : (left > try_ms ? try_ms : (int)left);
    attempt++;
    ProtobufCMessage *m = NULL;
    int code =
        stk__rpc_unary_stoppable(c->coord.ch, "/stoker.v1.Coordinator/Finish", &req.base,
                                 &stoker__v1__finish_response__descriptor, &m, tmo,
                                 details, sizeof(details), stk__intr_stop, &ictx);
    if (m) protobuf_c_message_free_unpacked(m, NULL);
    if (code != GRPC_STATUS_OK && stk__interrupted(c, ictx.gen)) {
      stk__intr_take(c);
      return stk__errf(c->errs.last, sizeof(c->errs.last), STK_INTERRUPTED,
                       "finish interrupted (attempt %d); the watch still re-announces "
                       "it, or call finish again",
                       attempt);
    }
    if (code == GRPC_STATUS_DEADLINE_EXCEEDED)
      try_ms *= 2, deadline = start + FINISH_SLOW_MS;
    int final;
    stk__rpc_status(code, &final);
    if (code == GRPC_STATUS_OK) return STK_OK;
    if (final) /* a refusal is the caller's mistake (rank, token): one status */
      return stk__errf(c->errs.last, sizeof(c->errs.last), STK_INVALID_ARGUMENT,
                       "finish refused: %s", details);
    stk__clog(c, "Finish attempt %d failed: gRPC status %d (%s)", attempt, code, details);
    pthread_mutex_lock(&c->mu);
    int ended = c->coord.job_ended, failed = c->coord.job_failed;
    pthread_mutex_unlock(&c->mu);
    if (ended && !failed) return STK_OK; /* the job is over: nothing to finish */
    if (ended)
      return stk__errf(c->errs.last, sizeof(c->errs.last), STK_CANCELLED,
                       "finish: the job already ended as failed (%s)",
                       c->coord.job_end_reason);
    if (stk__now_ms() >= deadline) {
      snprintf(
          c->errs.last, sizeof(c->errs.last),
          "finish: coordinator %s unreachable (%s); its idle timeout will end the job",
          c->coordinator, details);
      return STK_UNAVAILABLE;
    }
    if (stk__intr_sleep_ms(
            c, ictx.gen,
            pause / 2 + (int)((uint64_t)stk__now_ns() % (uint64_t)(pause / 2 + 1)))) {
      stk__intr_take(c);
      return stk__errf(c->errs.last, sizeof(c->errs.last), STK_INTERRUPTED,
                       "finish interrupted (after %d attempts); the watch still "
                       "re-announces it, or call finish again",
                       attempt);
    }
    if (pause < 2000) pause *= 2;
  }
}
