/* bad_samples.c - the worker's record of bad samples (files that do not
 * decode, labels out of range, ...), which the dataset replaces with the
 * next good sample: counted by reason for the heartbeat (Status) and
 * /metrics, the last few kept as "path: reason", each logged once with its
 * dataset-relative path, at most --bad-log-per-10s lines per 10 s.
 * A sample the user's code failed on (a python or plugin op raised:
 * reason user_code) is one as well; the first one is kept whole (with
 * its traceback) for the heartbeat, where the coordinator applies the
 * job's bad_samples policy (by default it fails the job at the first).
 * Owns BAD and its lock; every function is thread-safe. Paths and reasons
 * reach the log through stk__log, which escapes them.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "daemon_log.h"
#include "metrics.h"
#include "worker.h"

/* Reasons a sample is bad, as metrics labels and in Status; the last one
 * catches every other decoder message. */
static const char *const bad_reasons[] = {
    "truncated", "not_jpeg",   "too_many_pixels", "too_many_scans", "too_large",
    "empty",     "unreadable", "bad_label",       "corrupt",        "user_code"};
#define NBAD       (sizeof(bad_reasons) / sizeof(bad_reasons[0]))
#define BAD_OTHER  8               /* corrupt: any other decoder message */
#define BAD_USER   9               /* user_code */
#define USER_PFX   "sample index " /* augment.h: how a user-code error starts */
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
  char first_user[3072]; /* the first user-code error, with its traceback */
  int user_fails;        /* the job's bad_samples fails at a user-code error */
  char policy[32];       /* the job's bad_samples, "" for the default */
} BAD = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The reason class of a builder's message (augment/decode.c, imgsrc.c). */
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
  if (!strncmp(why, USER_PFX, strlen(USER_PFX))) return BAD_USER;
  for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
    if (strstr(why, map[i].needle)) return map[i].cls;
  return BAD_OTHER;
}

/* stk_bad_sample_fn: the dataset calls it once per distinct bad sample
 * (any builder thread). Counted by reason, kept among the last few, and
 * logged once with its dataset-relative path unless the log window's
 * --bad-log-per-10s is used up. */
void on_bad_sample(void *ud, const char *path, const char *why) {
  (void)ud;
  size_t cls = bad_class(why);
  const char *rel = path;
  int64_t now = stk__now_ms();
  uint64_t suppressed = 0;
  /* a user-code error: "path (index N): python op ...", its first line
   * in the list, the traceback only in the first one kept */
  char idx[32] = "";
  const char *text = why;
  if (cls == BAD_USER) {
    const char *p = why + strlen(USER_PFX), *colon = strstr(p, ": ");
    if (colon && colon - p < 24) {
      snprintf(idx, sizeof(idx), " (index %.*s)", (int)(colon - p), p);
      text = colon + 2;
    }
  }
  size_t line1 = strcspn(text, "\n");
  int first_user = 0;
  pthread_mutex_lock(&BAD.mu);
  if (BAD.prefix_len && !strncmp(path, BAD.prefix, BAD.prefix_len)) rel += BAD.prefix_len;
  BAD.count[cls]++;
  if (cls == BAD_USER && !BAD.first_user[0]) {
    snprintf(BAD.first_user, sizeof(BAD.first_user), "%.400s%s: %s", rel, idx, text);
    first_user = 1;
  }
  int user_fails = BAD.user_fails;
  char policy[sizeof(BAD.policy)];
  memcpy(policy, BAD.policy, sizeof(policy));
  snprintf(BAD.recent[BAD.next], sizeof(BAD.recent[0]), "%.400s%s: %.*s", rel, idx,
           (int)(line1 < 180 ? line1 : 180), text);
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
  if (cls == BAD_USER && (log || first_user)) {
    /* the traceback (escaped into the one line) with the first only */
    if (user_fails)
      LOG_ERROR(
          "bad sample %s%s: %.*s (reason user_code; the job fails: bad_samples = "
          "%s)",
          rel, idx, first_user ? (int)strlen(text) : (int)line1, text,
          policy[0] ? policy : "fail for python and plugin op errors, the default");
    else
      LOG_WARN(
          "bad sample %s%s: %.*s (reason user_code; replaced by the next good "
          "sample, bad_samples = %s)",
          rel, idx, first_user ? (int)strlen(text) : (int)line1, text, policy);
  } else if (log && !strcmp(policy, "fail")) {
    LOG_ERROR("bad sample %s: %s (reason %s; the job fails: bad_samples = fail)", rel,
              why, bad_reasons[cls]);
  } else if (log) {
    LOG_WARN("bad sample %s: %s (reason %s; replaced by the next good sample)", rel, why,
             bad_reasons[cls]);
  }
}

/* Where bad-sample paths start being dataset-relative: the dataset's
 * directory as the source resolves it (realpath under --data-root). */
void bad_set_prefix(const stk_job_spec *spec) {
  char joined[4200], real[4200];
  snprintf(joined, sizeof(joined), "%s/%s", *opt.data_root ? opt.data_root : ".",
           spec->dataset);
  pthread_mutex_lock(&BAD.mu);
  snprintf(BAD.policy, sizeof(BAD.policy), "%.*s", (int)sizeof(spec->bad_samples),
           spec->bad_samples);
  /* a percentage is of the dataset's size, which this worker's index sets
   * (spec may say 0): only "fail", the default and substitute(0) fail at
   * the first user-code error */
  BAD.user_fails = stk_job_bad_samples_budget(spec, 1, UINT64_MAX / 4) == 0;
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
void bad_fill_stats(Stoker__V1__WorkerStats *out) {
  static Stoker__V1__BadSampleCount cnt[NBAD], *cntp[NBAD];
  static char recent[BAD_RECENT][600];
  static char *recentp[BAD_RECENT];
  static char first_user[sizeof(BAD.first_user)];
  pthread_mutex_lock(&BAD.mu);
  memcpy(first_user, BAD.first_user, sizeof(first_user));
  out->first_user_error = first_user;
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

/* GET /metrics (worker_metrics, stats.c): the bad samples by reason. */
void bad_metrics(stk__metrics_buf *b) {
  char lab[64];
  uint64_t cnt[NBAD];
  pthread_mutex_lock(&BAD.mu);
  memcpy(cnt, BAD.count, sizeof(cnt));
  pthread_mutex_unlock(&BAD.mu);
  stk__metrics_family(
      b, "stoker_worker_bad_samples_total", "counter",
      "distinct bad samples found (each replaced, logged once), by reason");
  for (size_t i = 0; i < NBAD; i++)
    stk__metrics_sample(b, "stoker_worker_bad_samples_total",
                        stk__metrics_label(lab, sizeof(lab), "reason", bad_reasons[i]),
                        (double)cnt[i]);
}
