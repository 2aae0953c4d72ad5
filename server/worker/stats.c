/* stats.c - what the worker reports about itself: the heartbeat's stats
 * (fill_stats, session thread), the periodic stats log line (stats_log),
 * GET /metrics (worker_metrics) and systemd's READY=1 / STATUS=
 * (notify_progress). Reads the scheduler's counters and W; owns W's
 * heartbeat bookkeeping (last_*, busy_fraction). Changes nothing it
 * reports on.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/cpulimit.h"
#include "daemon_log.h"
#include "notify.h"
#include "worker.h"

void fill_stats(Stoker__V1__WorkerStats *out) {
  sched *s = current_sched();
  if (!s) return;
  fairsched_stats st;
  fairsched_stats_get(s, &st);
  int64_t now = stk__now_ms();
  out->batches_built = st.batches_built;
  out->bytes_sent = fairsched_bytes_sent(s);
  out->samples_substituted = st.samples_substituted;
  out->active_streams = st.active_streams;
  out->queued_requests = st.queued_requests;
  out->free_buffers = st.free_buffers;
  out->nbuffers = st.nbuffers;
  bad_fill_stats(out);
  out->files_skipped = W.nskipped; /* set before the job was published */
  out->n_skipped_files = W.nskipped_ex;
  out->skipped_files = W.nskipped_ex ? W.skipped_ex : NULL;
  double cpu = stk__process_cpu_s();
  out->cpu_seconds = cpu;
  if (W.last_ms && now > W.last_ms) {
    double dt = (double)(now - W.last_ms) / 1000.0;
    uint64_t built = st.batches_built - W.last_built;
    double dcpu = cpu > W.last_cpu_s ? cpu - W.last_cpu_s : 0;
    out->batches_per_s = (double)built / dt;
    /* the CPU the process used against the CPU it may use (its quota or
     * affinity), not a builder thread's wall time: a throttled worker
     * that uses its whole quota is fully busy */
    double busy = W.cpu_cores > 0 ? dcpu / dt / W.cpu_cores : 0;
    out->busy_fraction = busy > 1 ? 1 : busy;
    /* capacity: batches per CPU-second over intervals that built
     * batches, set once at least a CPU-second (or 20 batches) is in */
    if (built) W.cap_built += built, W.cap_cpu_s += dcpu;
    if (W.cap_cpu_s > 0 && (W.cap_cpu_s >= 1.0 || W.cap_built >= 20)) {
      W.per_cpu_s = (double)W.cap_built / W.cap_cpu_s;
      W.cap_built = 0, W.cap_cpu_s = 0;
    }
    pthread_mutex_lock(&W.mu);
    W.busy_fraction = out->busy_fraction;
    W.per_cpu_s_shown = W.per_cpu_s;
    pthread_mutex_unlock(&W.mu);
  }
  out->batches_per_cpu_s = W.per_cpu_s;
  W.last_ms = now, W.last_built = st.batches_built, W.last_busy = st.busy_ns;
  W.last_cpu_s = cpu;
}

/* One stats line (greppable: "stats state=..."); *last carries the
 * previous line's time and counters for the rates. */
void stats_log(stk__rpc_server *srv, int64_t now, int lost, stats_mark *last) {
  sched *s = current_sched();
  fairsched_stats st;
  memset(&st, 0, sizeof(st));
  stk__rpc_server_stats rs;
  stk__rpc_server_stats_get(srv, &rs);
  uint64_t bytes = 0;
  if (s) fairsched_stats_get(s, &st), bytes = fairsched_bytes_sent(s);
  double dt = (double)(now - last->ms) / 1000.0;
  LOG_INFO(
      "stats state=%s streams=%u queued=%u free_buffers=%u/%u "
      "batches_built=%" PRIu64
      " batches_per_s=%.1f mb_per_s=%.1f "
      "substituted=%" PRIu64 " build_errors=%" PRIu64 " transient_errors=%" PRIu64
      " transient_retries=%" PRIu64 " reread=%" PRIu64 " stream_errors=%" PRIu64
      " calls=%" PRIu64 " calls_refused=%" PRIu64 " calls_evicted=%" PRIu64
      " first_msg_late=%" PRIu64 " send_stalled=%" PRIu64
      " coordinator=%s"
      " tickets_expired=%" PRIu64,
      s ? "serving" : "waiting", st.active_streams, st.queued_requests, st.free_buffers,
      st.nbuffers, st.batches_built, (double)(st.batches_built - last->built) / dt,
      (double)(bytes - last->bytes) / dt / 1e6, st.samples_substituted, st.build_errors,
      st.transient_errors, st.transient_retries, st.samples_reread,
      __atomic_load_n(&W.stream_errors, __ATOMIC_RELAXED), rs.open_calls, rs.refused_full,
      rs.evicted, rs.first_msg_late, rs.send_stalled + st.send_stalled,
      lost ? "lost" : "ok", rs.tickets_expired);
  last->bytes = bytes, last->built = st.batches_built, last->ms = now;
}

/* GET /metrics (metrics.c's HTTP thread): the scheduler's counters, the
 * build-time histogram, the bad samples by reason. */
void worker_metrics(stk__metrics_buf *b, int full, void *ud) {
  (void)full, (void)ud;
  sched *s = current_sched();
  fairsched_stats st;
  memset(&st, 0, sizeof(st));
  uint64_t bytes = 0;
  if (s) fairsched_stats_get(s, &st), bytes = fairsched_bytes_sent(s);
  pthread_mutex_lock(&W.mu);
  double busy = W.busy_fraction, per_cpu = W.per_cpu_s_shown;
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
       "CPU used over the CPU the worker may use (stoker_worker_cpu_cores), last "
       "heartbeat interval"},
      {"stoker_worker_cpu_cores", "gauge",
       "cores the worker may use: its cgroup CPU quota or affinity, the lower"},
      {"stoker_worker_cpu_seconds_total", "counter",
       "CPU seconds (user + system) the worker process used"},
      {"stoker_worker_batches_per_cpu_second", "gauge",
       "measured capacity: batches built per CPU-second (0 until measured)"},
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
                W.cpu_cores,
                stk__process_cpu_s(),
                per_cpu,
                W.threads,
                st.queued_requests,
                st.active_streams,
                st.free_buffers,
                st.nbuffers};
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
    stk__metrics_family(b, f[i].name, f[i].type, f[i].help);
    stk__metrics_sample(b, f[i].name, NULL, v[i]);
  }
  static const double le[SCHED_HIST_BOUNDS] = SCHED_HIST_LE;
  char lab[64];
  uint64_t cum = 0;
  stk__metrics_family(b, "stoker_worker_build_seconds", "histogram",
                      "time to build one batch (successful builds)");
  for (int i = 0; i <= SCHED_HIST_BOUNDS; i++) {
    cum += st.build_hist[i];
    if (i < SCHED_HIST_BOUNDS) snprintf(lab, sizeof(lab), "le=\"%g\"", le[i]);
    else snprintf(lab, sizeof(lab), "le=\"+Inf\"");
    stk__metrics_sample(b, "stoker_worker_build_seconds_bucket", lab, (double)cum);
  }
  stk__metrics_sample(b, "stoker_worker_build_seconds_sum", NULL,
                      (double)st.build_ns_sum / 1e9);
  stk__metrics_sample(b, "stoker_worker_build_seconds_count", NULL, (double)cum);
  bad_metrics(b);
}

/* systemd: READY=1 once registered with a job (and the dataset open);
 * STATUS= with the rate at every stats line. */
void notify_progress(session *sess, int stats_due) {
  static int ready;
  if (!ready && current_sched() && session_lost_ms(sess) == 0) {
    ready = 1;
    stk__notify_ready("registered; serving batches");
  }
  if (stats_due && ready) {
    sched *s = current_sched();
    fairsched_stats st;
    memset(&st, 0, sizeof(st));
    if (s) fairsched_stats_get(s, &st);
    char msg[160];
    snprintf(msg, sizeof(msg), "serving: %" PRIu64 " batches built, %u streams, %s",
             st.batches_built, st.active_streams,
             session_lost_ms(sess) ? "coordinator lost" : "coordinator ok");
    stk__notify_status(msg);
  }
}
