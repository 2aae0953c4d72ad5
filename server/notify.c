/* notify.c - sd_notify for stoker-coordinator and stoker-worker (see
 * notify.h). Owns the watchdog clock. Must not block: sd_notify sends one
 * datagram and returns. */
#include "notify.h"

#include <pthread.h>
#include <stdio.h>
#include <systemd/sd-daemon.h>

#include "daemon_log.h"

static int64_t watchdog_half_ms, watchdog_last_ms;
static int ready_sent; /* under ready_mu */
static pthread_mutex_t ready_mu = PTHREAD_MUTEX_INITIALIZER;

void stk__notify_init(void) {
  uint64_t usec = 0;
  /* 0 = keep $WATCHDOG_USEC: the keep-alives are ours to send. */
  int r = sd_watchdog_enabled(0, &usec);
  if (r > 0 && usec >= 2000) {
    watchdog_half_ms = (int64_t)(usec / 2000);
    LOG_INFO("systemd watchdog: keep-alive every %lld ms", (long long)watchdog_half_ms);
  }
}

static void notify_send(const char *state, const char *status) {
  char msg[600];
  if (status && *status)
    snprintf(msg, sizeof(msg), "%s%sSTATUS=%s", state ? state : "", state ? "\n" : "",
             status);
  else snprintf(msg, sizeof(msg), "%s", state ? state : "");
  if (*msg) sd_notify(0, msg);
}

void stk__notify_ready(const char *status) {
  pthread_mutex_lock(&ready_mu);
  int first = !ready_sent;
  ready_sent = 1;
  pthread_mutex_unlock(&ready_mu);
  if (first) notify_send("READY=1", status);
}

void stk__notify_status(const char *status) { notify_send(NULL, status); }

void stk__notify_stopping(const char *status) { notify_send("STOPPING=1", status); }

void stk__notify_tick(int64_t now_ms) {
  if (!watchdog_half_ms || now_ms - watchdog_last_ms < watchdog_half_ms) return;
  watchdog_last_ms = now_ms;
  sd_notify(0, "WATCHDOG=1");
}
