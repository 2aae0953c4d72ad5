/* coord_status.c - what the coordinator tells about the job: ranks' own figures
 * (Coordinator.ReportStats, kept in C.ranks), Coordinator.Status, the
 * periodic stats line with sd_notify's STATUS=, and GET /metrics with the
 * job-wide verdict. Owns the ranks' reported figures; reads everything
 * else under C.mu, and builds replies from copies so it answers after
 * releasing it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/advice.h"
#include "common/clock.h"
#include "coordinator.h"
#include "daemon_log.h"
#include "notify.h"

/* The ST_* states by name, as Status, the stats line and /metrics show them. */
static const char *const state_names[] = {"waiting", "running", "draining", "done",
                                          "failed"};

/* Coordinator.ReportStats: a rank's own figures (stall, rate), kept for
 * Status and /metrics. A report counts as the client touching the job. */
void status_report_stats(stk__rpc_call *call, const ProtobufCMessage *req) {
  const Stoker__V1__ClientStats *q = (const Stoker__V1__ClientStats *)req;
  pthread_mutex_lock(&C.mu);
  uint32_t W = C.spec.world_size;
  if (q->rank >= W) {
    pthread_mutex_unlock(&C.mu);
    char msg[120];
    snprintf(msg, sizeof(msg), "rank %u is outside the job's world_size %u", q->rank, W);
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, msg);
    return;
  }
  state_touch_locked();
  struct crank *r = &C.ranks[q->rank];
  r->at_ms = stk__now_ms();
  /* untrusted figures: a fraction in 0..1, a rate >= 0 (NaN counts as 0) */
  r->stall_fraction =
      q->stall_fraction > 0 ? (q->stall_fraction < 1 ? q->stall_fraction : 1) : 0;
  r->batches_per_s =
      q->batches_per_s > 0 && q->batches_per_s < 1e12 ? q->batches_per_s : 0;
  r->batches = q->batches;
  r->workers_alive = q->workers_alive;
  /* a day per batch, a million CPU-seconds: bounds no honest client meets */
  r->step_ms = q->step_ms > 0 && q->step_ms < 86400e3 ? q->step_ms : 0;
  r->recv_cpu_s = q->recv_cpu_s > 0 && q->recv_cpu_s < 1e12 ? q->recv_cpu_s : 0;
  r->recv_cpu_s_per_gb =
      q->recv_cpu_s_per_gb > 0 && q->recv_cpu_s_per_gb < 1e6 ? q->recv_cpu_s_per_gb : 0;
  r->recv_cpu_user_s =
      q->recv_cpu_user_s > 0 && q->recv_cpu_user_s < 1e12 ? q->recv_cpu_user_s : 0;
  r->recv_cpu_sys_s =
      q->recv_cpu_sys_s > 0 && q->recv_cpu_sys_s < 1e12 ? q->recv_cpu_sys_s : 0;
  r->recv_cpu_user_s_per_gb =
      q->recv_cpu_user_s_per_gb > 0 && q->recv_cpu_user_s_per_gb < 1e6
          ? q->recv_cpu_user_s_per_gb
          : 0;
  r->recv_cpu_sys_s_per_gb =
      q->recv_cpu_sys_s_per_gb > 0 && q->recv_cpu_sys_s_per_gb < 1e6
          ? q->recv_cpu_sys_s_per_gb
          : 0;
  /* a share of the process's cores (can pass 1 briefly: a quota's burst) */
  r->recv_host_share =
      q->recv_host_share > 0 && q->recv_host_share < 1e3 ? q->recv_host_share : 0;
  r->host_cores = q->host_cores > 0 && q->host_cores < 1e6 ? q->host_cores : 0;
  pthread_mutex_unlock(&C.mu);
  Stoker__V1__ReportStatsResponse resp = STOKER__V1__REPORT_STATS_RESPONSE__INIT;
  stk__rpc_call_reply(call, &resp.base);
}

/* What Status adds beyond the worker table: per worker the bad samples
 * and buffers, per rank its reported figures. Freed by
 * status_extras_free after the reply. */
typedef struct status_extras {
  Stoker__V1__WorkerStats **copies;
  size_t ncopies;
  Stoker__V1__RankStatus *rs, **rsp;
  Stoker__V1__ClientStats *cs;
} status_extras;

/* Fill the extras into resp and wt (the response's worker stats, in
 * C.workers order). 1, or 0 when out of memory. Under C.mu. */
static int status_extras_locked(Stoker__V1__StatusResponse *resp,
                                Stoker__V1__WorkerStats *wt, int64_t now,
                                status_extras *ex) {
  memset(ex, 0, sizeof(*ex));
  size_t nw = resp->n_workers, i = 0;
  if (!(ex->copies = calloc(nw ? nw : 1, sizeof(*ex->copies)))) return 0;
  for (cworker *w = C.workers; w && i < nw; w = w->next, i++) {
    const Stoker__V1__WorkerStats *s = w->hb;
    if (!s) continue;
    Stoker__V1__WorkerStats *cp = stats_copy(s);
    if (!cp) return 0;
    ex->copies[ex->ncopies++] = cp;
    wt[i].free_buffers = cp->free_buffers;
    wt[i].nbuffers = cp->nbuffers;
    wt[i].n_bad_samples = cp->n_bad_samples;
    wt[i].bad_samples = cp->bad_samples;
    wt[i].n_bad_recent = cp->n_bad_recent;
    wt[i].bad_recent = cp->bad_recent;
    wt[i].files_skipped = cp->files_skipped;
    wt[i].cpu_seconds = cp->cpu_seconds;
    wt[i].batches_per_cpu_s = cp->batches_per_cpu_s;
    wt[i].n_skipped_files = cp->n_skipped_files;
    wt[i].skipped_files = cp->skipped_files;
  }
  uint32_t W = C.spec.world_size, n = 0;
  for (uint32_t r = 0; r < W; r++) n += C.ranks[r].at_ms != 0;
  ex->rs = calloc(n ? n : 1, sizeof(*ex->rs));
  ex->rsp = calloc(n ? n : 1, sizeof(*ex->rsp));
  ex->cs = calloc(n ? n : 1, sizeof(*ex->cs));
  if (!ex->rs || !ex->rsp || !ex->cs) return 0;
  for (uint32_t r = 0, k = 0; r < W; r++) {
    const struct crank *c = &C.ranks[r];
    if (!c->at_ms) continue;
    stoker__v1__rank_status__init(&ex->rs[k]);
    stoker__v1__client_stats__init(&ex->cs[k]);
    ex->cs[k].rank = r;
    ex->cs[k].stall_fraction = c->stall_fraction;
    ex->cs[k].batches_per_s = c->batches_per_s;
    ex->cs[k].batches = c->batches;
    ex->cs[k].workers_alive = c->workers_alive;
    ex->cs[k].step_ms = c->step_ms;
    ex->cs[k].recv_cpu_s = c->recv_cpu_s;
    ex->cs[k].recv_cpu_s_per_gb = c->recv_cpu_s_per_gb;
    ex->cs[k].recv_cpu_user_s = c->recv_cpu_user_s;
    ex->cs[k].recv_cpu_sys_s = c->recv_cpu_sys_s;
    ex->cs[k].recv_cpu_user_s_per_gb = c->recv_cpu_user_s_per_gb;
    ex->cs[k].recv_cpu_sys_s_per_gb = c->recv_cpu_sys_s_per_gb;
    ex->cs[k].recv_host_share = c->recv_host_share;
    ex->cs[k].host_cores = c->host_cores;
    ex->rs[k].rank = r;
    ex->rs[k].stats = &ex->cs[k];
    ex->rs[k].last_report_ms_ago = (uint64_t)(now - c->at_ms);
    ex->rsp[k] = &ex->rs[k];
    k++;
  }
  resp->n_ranks = n;
  resp->ranks = ex->rsp;
  return 1;
}

static void status_extras_free(status_extras *ex) {
  for (size_t i = 0; i < ex->ncopies; i++)
    protobuf_c_message_free_unpacked(&ex->copies[i]->base, NULL);
  free(ex->copies), free(ex->rs), free(ex->rsp), free(ex->cs);
}

/* Status for a caller with the worker token only (role tokens): the
 * job's state, uptime and end reason, which a data host's launcher waits
 * on; no job spec, worker addresses, ranks or bad-file paths. */
static void handle_status_worker(stk__rpc_call *call) {
  Stoker__V1__StatusResponse resp = STOKER__V1__STATUS_RESPONSE__INIT;
  char reason[sizeof(C.shutdown_reason)] = "";
  pthread_mutex_lock(&C.mu);
  resp.state = (char *)state_names[state_locked()];
  resp.uptime_ms = (uint64_t)(stk__now_ms() - C.start_ms);
  if (C.shutdown_req) snprintf(reason, sizeof(reason), "%s", C.shutdown_reason);
  pthread_mutex_unlock(&C.mu);
  resp.end_reason = reason;
  stk__rpc_call_reply(call, &resp.base);
}

void status_handle(stk__rpc_call *call, const ProtobufCMessage *req) {
  (void)req; /* StatusRequest has no fields */
  if (!(stk__rpc_call_roles(call) & (STK__ROLE_CLIENT | STK__ROLE_ADMIN))) {
    handle_status_worker(call);
    return;
  }
  Stoker__V1__StatusResponse resp = STOKER__V1__STATUS_RESPONSE__INIT;
  Stoker__V1__JobSpec job = STOKER__V1__JOB_SPEC__INIT;
  pthread_mutex_lock(&C.mu);
  int64_t now = stk__now_ms();
  job.canonical = strdup(C.canonical);
  job.hash = C.hash;
  resp.job = &job;
  resp.state = (char *)state_names[state_locked()];
  resp.uptime_ms = (uint64_t)(now - C.start_ms);
  resp.dataset_size = C.resolved ? C.spec.num_samples : 0;
  resp.end_reason = C.shutdown_req ? C.shutdown_reason : "";
  size_t nw = state_nworkers_locked(), i = 0;
  Stoker__V1__WorkerStatus *ws = calloc(nw ? nw : 1, sizeof(*ws));
  Stoker__V1__WorkerStatus **wsp = calloc(nw ? nw : 1, sizeof(*wsp));
  Stoker__V1__WorkerInfo *wi = calloc(nw ? nw : 1, sizeof(*wi));
  Stoker__V1__WorkerStats *wt = calloc(nw ? nw : 1, sizeof(*wt));
  uint32_t W = C.spec.world_size;
  uint32_t *jr = calloc(W, sizeof(uint32_t)), *fr = calloc(W, sizeof(uint32_t));
  int ok = job.canonical && ws && wsp && wi && wt && jr && fr;
  if (ok) {
    for (cworker *w = C.workers; w; w = w->next, i++) {
      stoker__v1__worker_status__init(&ws[i]);
      stoker__v1__worker_info__init(&wi[i]);
      stoker__v1__worker_stats__init(&wt[i]);
      wi[i].worker_id = strdup(w->id);
      wi[i].address = strdup(w->address);
      wi[i].cores = w->cores;
      wi[i].cpu_cores = w->cpu_cores;
      wi[i].instance_type = strdup(w->instance_type);
      wt[i].batches_built = w->stats.batches_built;
      wt[i].bytes_sent = w->stats.bytes_sent;
      wt[i].samples_substituted = w->stats.samples_substituted;
      wt[i].active_streams = w->stats.active_streams;
      wt[i].queued_requests = w->stats.queued_requests;
      wt[i].busy_fraction = w->stats.busy_fraction;
      wt[i].batches_per_s = w->stats.batches_per_s;
      ws[i].worker = &wi[i];
      ws[i].stats = &wt[i];
      ws[i].last_heartbeat_ms_ago = (uint64_t)(now - w->last_hb_ms);
      ws[i].suspect = w->suspect;
      wsp[i] = &ws[i];
      if (!wi[i].worker_id || !wi[i].address || !wi[i].instance_type) ok = 0;
    }
    resp.n_workers = i;
    resp.workers = wsp;
    for (uint32_t r = 0; r < W; r++) {
      if (C.joined[r]) jr[resp.n_joined_ranks++] = r;
      if (C.finished[r]) fr[resp.n_finished_ranks++] = r;
    }
    resp.joined_ranks = jr;
    resp.finished_ranks = fr;
  }
  status_extras ex = {0};
  if (ok && !status_extras_locked(&resp, wt, now, &ex)) ok = 0;
  char fail_text[MAX_FAILURES][900], *fail_p[MAX_FAILURES];
  uint32_t nf = C.nfails < MAX_FAILURES ? C.nfails : MAX_FAILURES;
  for (uint32_t k = 0; k < nf; k++) { /* oldest first */
    const struct wfail *e = &C.fails[(C.nfails - nf + k) % MAX_FAILURES];
    snprintf(fail_text[k], sizeof(fail_text[k]), "%s, %.0f s ago", e->text,
             (double)(now - e->at_ms) / 1000.0);
    fail_p[k] = fail_text[k];
  }
  resp.n_worker_failures = nf;
  resp.worker_failures = fail_p;
  /* the fleet as told (options: set once in main, read-only after) */
  resp.accel_type = opt.accel_type ? opt.accel_type : "";
  resp.accel_hosts = (uint32_t)opt.accel_hosts;
  resp.data_type = opt.data_type ? opt.data_type : "";
  pthread_mutex_unlock(&C.mu);
  if (ok) stk__rpc_call_reply(call, &resp.base);
  else stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t k = 0; k < i; k++)
    free(wi[k].worker_id), free(wi[k].address), free(wi[k].instance_type);
  free(ws), free(wsp), free(wi), free(wt), free(jr), free(fr);
  free(job.canonical);
  status_extras_free(&ex);
}

/* One stats line (greppable: "stats state=..."); *last_ms and *last_bytes
 * carry the previous line's time and byte count for the rate. */
void status_log_stats(int64_t now, int64_t *last_ms, uint64_t *last_bytes) {
  pthread_mutex_lock(&C.mu);
  double bps = 0;
  uint64_t bytes = 0;
  for (cworker *w = C.workers; w; w = w->next)
    bps += w->stats.batches_per_s, bytes += w->stats.bytes_sent;
  double dt = (double)(now - *last_ms) / 1000.0;
  double mbps = bytes >= *last_bytes ? (double)(bytes - *last_bytes) / dt / 1e6 : 0;
  LOG_INFO(
      "stats state=%s workers=%zu ranks_joined=%u ranks_finished=%u "
      "watchers=%d batches_per_s=%.1f mb_per_s=%.1f idle_s=%lld",
      state_names[state_locked()], state_nworkers_locked(), C.njoined, C.nfinished,
      C.watchers, bps, mbps,
      ranks_watch_holds_locked(now) ? 0LL : (long long)((now - C.last_touch_ms) / 1000));
  char st[200];
  snprintf(st, sizeof(st), "%s: %zu workers, %.1f batches/s, ranks %u joined %u finished",
           state_names[state_locked()], state_nworkers_locked(), bps, C.njoined,
           C.nfinished);
  pthread_mutex_unlock(&C.mu);
  stk__notify_status(st);
  *last_bytes = bytes, *last_ms = now;
}

/* The job-wide verdict from the workers' and ranks' last figures (ranks
 * that reported in the last 30 s). Under C.mu. */
static void verdict_locked(int64_t now, stk__verdict *v) {
  uint32_t nw = 0, n = 0;
  for (cworker *w = C.workers; w; w = w->next) nw++;
  for (uint32_t r = 0; r < C.spec.world_size; r++)
    n += C.ranks[r].at_ms && now - C.ranks[r].at_ms <= 30000;
  stk__worker_fig *wf = calloc(nw ? nw : 1, sizeof(*wf));
  stk__rank_fig *rf = calloc(n ? n : 1, sizeof(*rf));
  if (!wf || !rf) {
    free(wf), free(rf);
    stk__job_verdict(NULL, 0, NULL, 0, v);
    return;
  }
  uint32_t i = 0;
  for (cworker *w = C.workers; w; w = w->next, i++) {
    wf[i].cores = stk__worker_usable_cores(w->cpu_cores, w->cores);
    wf[i].per_cpu_s = w->hb ? w->hb->batches_per_cpu_s : 0;
    wf[i].busy = w->stats.busy_fraction;
  }
  i = 0;
  for (uint32_t r = 0; r < C.spec.world_size; r++) {
    const struct crank *c = &C.ranks[r];
    if (!c->at_ms || now - c->at_ms > 30000) continue;
    rf[i].stall = c->stall_fraction;
    rf[i].step_ms = c->step_ms;
    rf[i].batches_per_s = c->batches_per_s;
    i++;
  }
  stk__job_verdict(wf, nw, rf, n, v);
  free(wf), free(rf);
}

/* GET /metrics (metrics.c's HTTP thread): the job, the workers as their
 * heartbeats report them (each by id and address only in a full scrape:
 * an anonymous one gets the counts), the ranks as they report
 * themselves. */
void status_metrics(stk__metrics_buf *b, int full, void *ud) {
  (void)ud;
  char lab[1500];
  pthread_mutex_lock(&C.mu);
  int64_t now = stk__now_ms();
  stk__metrics_family(b, "stoker_coordinator_up", "gauge",
                      "1 while the coordinator serves");
  stk__metrics_sample(b, "stoker_coordinator_up", NULL, 1);
  stk__metrics_family(b, "stoker_coordinator_uptime_seconds", "gauge",
                      "seconds since start");
  stk__metrics_sample(b, "stoker_coordinator_uptime_seconds", NULL,
                      (double)(now - C.start_ms) / 1e3);
  stk__metrics_family(b, "stoker_coordinator_job_state", "gauge",
                      "1 for the job's current state, 0 for the others");
  int st = state_locked();
  for (int i = 0; i <= ST_FAILED; i++)
    stk__metrics_sample(b, "stoker_coordinator_job_state",
                        stk__metrics_label(lab, sizeof(lab), "state", state_names[i]),
                        i == st);
  stk__metrics_family(b, "stoker_coordinator_live_workers", "gauge",
                      "workers on the live list");
  stk__metrics_sample(b, "stoker_coordinator_live_workers", NULL,
                      (double)state_nworkers_locked());
  uint32_t nsuspect = 0;
  for (cworker *w = C.workers; w; w = w->next) nsuspect += w->suspect != 0;
  stk__metrics_family(b, "stoker_coordinator_suspect_workers", "gauge",
                      "listed workers whose heartbeats are late (session open)");
  stk__metrics_sample(b, "stoker_coordinator_suspect_workers", NULL, nsuspect);
  uint64_t lv, lpub, ldelta, lwhole;
  size_t lhist;
  publish_figures_locked(&lv, &lpub, &ldelta, &lwhole, &lhist);
  stk__metrics_family(b, "stoker_coordinator_list_versions_total", "counter",
                      "worker list versions published (at most 4 a second)");
  stk__metrics_sample(b, "stoker_coordinator_list_versions_total", NULL, (double)lpub);
  stk__metrics_family(b, "stoker_coordinator_list_whole_bytes", "gauge",
                      "the published worker list, encoded whole");
  stk__metrics_sample(b, "stoker_coordinator_list_whole_bytes", NULL, (double)lwhole);
  stk__metrics_family(b, "stoker_coordinator_list_delta_bytes", "gauge",
                      "the last published change of the worker list, encoded as a delta");
  stk__metrics_sample(b, "stoker_coordinator_list_delta_bytes", NULL, (double)ldelta);
  stk__metrics_family(b, "stoker_coordinator_world_size", "gauge", "ranks of the job");
  stk__metrics_sample(b, "stoker_coordinator_world_size", NULL, C.spec.world_size);
  stk__metrics_family(b, "stoker_coordinator_ranks_joined", "gauge", "ranks that joined");
  stk__metrics_sample(b, "stoker_coordinator_ranks_joined", NULL, C.njoined);
  stk__metrics_family(b, "stoker_coordinator_ranks_finished", "gauge",
                      "ranks that finished");
  stk__metrics_sample(b, "stoker_coordinator_ranks_finished", NULL, C.nfinished);
  stk__metrics_family(b, "stoker_coordinator_watchers", "gauge",
                      "open WatchWorkers streams");
  stk__metrics_sample(b, "stoker_coordinator_watchers", NULL, C.watchers);
  stk__metrics_family(b, "stoker_coordinator_dataset_samples", "gauge",
                      "samples in the dataset (0 until a worker told)");
  stk__metrics_sample(b, "stoker_coordinator_dataset_samples", NULL,
                      C.resolved ? (double)C.spec.num_samples : 0);
  static const struct {
    const char *name, *help;
  } wf[] = {{"stoker_coordinator_worker_batches_per_second",
             "a worker's build rate (heartbeat)"},
            {"stoker_coordinator_worker_busy_fraction",
             "a worker's CPU used over the CPU it may use (heartbeat)"},
            {"stoker_coordinator_worker_suspect",
             "1 while a listed worker's heartbeats are late (its session open)"}};
  for (int k = 0; k < 3; k++) {
    stk__metrics_family(b, wf[k].name, "gauge", wf[k].help);
    for (cworker *w = full ? C.workers : NULL; w; w = w->next) {
      /* the id is unique among live workers; the address may repeat */
      char id[700], addr[700];
      snprintf(lab, sizeof(lab), "%s,%s",
               stk__metrics_label(id, sizeof(id), "worker", w->id),
               stk__metrics_label(addr, sizeof(addr), "address", w->address));
      stk__metrics_sample(b, wf[k].name, lab,
                          k == 2   ? (double)(w->suspect != 0)
                          : k == 1 ? w->stats.busy_fraction
                                   : w->stats.batches_per_s);
    }
  }
  static const struct {
    const char *name, *type, *help;
  } rf[] = {{"stoker_rank_stall_fraction", "gauge",
             "share of a rank's loop time spent waiting for input (client report)"},
            {"stoker_rank_batches_per_second", "gauge",
             "batches a rank's loop takes per second (client report)"},
            {"stoker_rank_batches_total", "counter", "batches handed to a rank's loop"},
            {"stoker_rank_step_seconds", "gauge",
             "a rank's loop time per batch outside next(): its step time minus the "
             "stall (client report; 0 before two batches)"},
            {"stoker_rank_receive_cpu_seconds_per_gigabyte", "gauge",
             "CPU seconds a rank's client spends receiving per GB (its io, copy, "
             "watch and scheduler threads; client report; 0 before data came)"},
            {"stoker_rank_receive_cpu_user_seconds_per_gigabyte", "gauge",
             "the user-space part of a rank's receiving CPU per GB (client report)"},
            {"stoker_rank_receive_cpu_system_seconds_per_gigabyte", "gauge",
             "the kernel part of a rank's receiving CPU per GB: socket reads, "
             "wake-ups (client report)"},
            {"stoker_rank_receive_host_cpu_share", "gauge",
             "a rank's receiving CPU as a share of the CPU its process may use "
             "(cgroup quota or affinity; over the last 5-10 s; client report)"}};
  /* (the rank's usable cores are in Status only: a series per rank is
   * what /metrics bounds) */
  for (int k = 0; k < 8; k++) {
    stk__metrics_family(b, rf[k].name, rf[k].type, rf[k].help);
    /* bounded: ranks below --metrics-rank-series only (stable series) */
    uint32_t nrank = C.spec.world_size;
    if ((long long)nrank > opt.metrics_rank_series)
      nrank = (uint32_t)opt.metrics_rank_series;
    for (uint32_t r = 0; r < nrank; r++) {
      const struct crank *c = &C.ranks[r];
      if (!c->at_ms) continue;
      char rank[16];
      snprintf(rank, sizeof(rank), "%u", r);
      stk__metrics_sample(b, rf[k].name,
                          stk__metrics_label(lab, sizeof(lab), "rank", rank),
                          k == 0   ? c->stall_fraction
                          : k == 1 ? c->batches_per_s
                          : k == 2 ? (double)c->batches
                          : k == 3 ? c->step_ms / 1e3
                          : k == 4 ? c->recv_cpu_s_per_gb
                          : k == 5 ? c->recv_cpu_user_s_per_gb
                          : k == 6 ? c->recv_cpu_sys_s_per_gb
                                   : c->recv_host_share);
    }
  }
  stk__verdict v;
  verdict_locked(now, &v);
  pthread_mutex_unlock(&C.mu);
  uint64_t jwrites, jwaiters, jby[3];
  persist_figures(&jwrites, &jwaiters, jby);
  stk__metrics_family(b, "stoker_coordinator_journal_writes_total", "counter",
                      "state journal snapshots written (--state-dir; group commits)");
  stk__metrics_sample(b, "stoker_coordinator_journal_writes_total", NULL,
                      (double)jwrites);
  stk__metrics_family(b, "stoker_coordinator_journal_waiters_total", "counter",
                      "calls answered after a journal write (several share one write)");
  stk__metrics_sample(b, "stoker_coordinator_journal_waiters_total", NULL,
                      (double)jwaiters);
  stk__metrics_family(
      b, "stoker_coordinator_journal_snapshots_total", "counter",
      "state journal snapshots by the thread that wrote them: the journal's "
      "writer, main (at start and at the end), rpc (written or waited for on a "
      "serving thread: never)");
  static const char *const jkind[3] = {"thread=\"writer\"", "thread=\"rpc\"",
                                       "thread=\"main\""};
  for (int k = 0; k < 3; k++)
    stk__metrics_sample(b, "stoker_coordinator_journal_snapshots_total", jkind[k],
                        (double)jby[k]);
  stk__metrics_family(
      b, "stoker_job_workers_needed", "gauge",
      "input-bound: data workers of the current mean size that would remove "
      "the stall (0 otherwise, or when a figure is missing)");
  stk__metrics_sample(b, "stoker_job_workers_needed", NULL,
                      v.kind == STK_VERDICT_INPUT_BOUND ? v.workers_needed : 0);
  stk__metrics_family(
      b, "stoker_job_cores_more", "gauge",
      "input-bound: more cores of this pipeline's data-worker CPU that would "
      "remove the stall (0 otherwise, or when a figure is missing)");
  stk__metrics_sample(b, "stoker_job_cores_more", NULL,
                      v.kind == STK_VERDICT_INPUT_BOUND ? v.cores_more : 0);
  stk__metrics_family(
      b, "stoker_job_worker_cores", "gauge",
      "the live workers' usable cores (cgroup quota or affinity), summed");
  stk__metrics_sample(b, "stoker_job_worker_cores", NULL, v.cores);
  stk__metrics_family(b, "stoker_job_workers_spare", "gauge",
                      "compute-bound: data workers that could go (0 otherwise)");
  stk__metrics_sample(b, "stoker_job_workers_spare", NULL, v.workers_spare);
}
