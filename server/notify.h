/* notify.h - the daemons' messages to systemd (sd_notify, libsystemd):
 * READY=1 once serving, STATUS= lines with the current rate, STOPPING=1
 * when the drain begins, and WATCHDOG=1 keep-alives when the unit sets
 * WatchdogSec= (systemd passes $WATCHDOG_USEC). Without $NOTIFY_SOCKET
 * (not started by systemd) every call is a cheap no-op. */
#ifndef STOKER_SERVER_NOTIFY_H
#define STOKER_SERVER_NOTIFY_H

#include <stdint.h>

/* Read $WATCHDOG_USEC once (call from main before threads start): from
 * then on stk__notify_tick sends WATCHDOG=1 every half of it. */
void stk__notify_init(void);
/* READY=1 with a STATUS= line (status may be NULL). Sent once; later
 * calls do nothing. Thread-safe. */
void stk__notify_ready(const char *status);
/* STATUS=status. Thread-safe. */
void stk__notify_status(const char *status);
/* STOPPING=1 with a STATUS= line (may be NULL). Thread-safe. */
void stk__notify_stopping(const char *status);
/* WATCHDOG=1 when the watchdog is on and half its interval has passed
 * since the last one; call it from the daemon's main loop (every few tens
 * of ms). A loop that hangs stops the keep-alives and systemd restarts the
 * unit. Not thread-safe: one caller (the main loop). */
void stk__notify_tick(int64_t now_ms);

#endif
