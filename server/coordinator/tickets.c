/* tickets.c - the stream tickets the coordinator mints for its workers
 * (format: rpc/include/rpc/ticket.h): with role tokens, a client presents worker
 * w's ticket (WorkerInfo.stream_ticket) on its Worker.Stream calls to w,
 * so no worker ever receives the client or admin token, and w checks it
 * with its ticket key (RegisterAck.stream_ticket_key), expiry included.
 * A key is 32 random bytes drawn for each registration and kept only in
 * memory (the worker's entry): a worker that registers again, after a
 * reconnect or with the same id and address from another process, gets
 * a new one, so holding the worker token and knowing a worker's id and
 * address mints nothing for it. The worker keeps taking its previous
 * key's tickets for a while, and the list carries the new ticket as soon
 * as it is listed again, so its clients reopen streams as after a
 * coordinator restart; one worker's key or ticket says nothing of
 * another's.
 *
 * Expiry: time is cut into periods of half --ticket-ttl-s on the
 * coordinator's clock (its wall clock at start carried on by its
 * monotonic clock, so a wall-clock step does not move it); a ticket
 * minted in period k expires at the end of period k + 1, so it has half
 * to all of the TTL left, and every ticket is minted again (and listed,
 * tickets_tick) when a period begins, half a TTL before the previous one
 * expires. Owns no key (each is in its worker's entry); must not log a
 * key or a ticket. */
#include <openssl/crypto.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "coordinator.h"

static int enabled;           /* written once by tickets_init, before serving */
static int64_t clock_base_ms; /* idem: unix ms at start minus stk__now_ms() */
static uint64_t period_s = 1; /* idem: half the TTL, at least 1 */

int tickets_init(int on, long long ttl_s) {
  enabled = 0;
  if (!on) return 0;
  char probe[STK__TICKET_KEY_HEX + 1]; /* fail at start, not at a registration */
  if (stk__ticket_key_new(probe)) return -1;
  OPENSSL_cleanse(probe, sizeof(probe));
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  clock_base_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - stk__now_ms();
  period_s = ttl_s >= 2 ? (uint64_t)ttl_s / 2 : 1;
  enabled = 1;
  return 0;
}

uint64_t tickets_clock_ms(void) {
  int64_t t = stk__now_ms() + clock_base_ms;
  return t > 0 ? (uint64_t)t : 0;
}

int tickets_key_new(char out[STK__TICKET_KEY_HEX + 1]) {
  out[0] = 0;
  return enabled ? stk__ticket_key_new(out) : 0;
}

int tickets_mint(const char *key, char out[STK__TICKET_MAX], uint64_t *expiry_s) {
  out[0] = 0;
  *expiry_s = 0;
  if (!enabled || !*key) return 0;
  uint64_t k = tickets_clock_ms() / 1000 / period_s;
  *expiry_s = (k + 2) * period_s;
  return stk__ticket_mint(key, *expiry_s, out);
}

void tickets_tick(void) {
  if (!enabled) return;
  uint64_t due = (tickets_clock_ms() / 1000 / period_s + 2) * period_s;
  pthread_mutex_lock(&C.mu);
  /* Every listed worker whose ticket is of an earlier period (one listed
   * just now may have been minted in the previous one). */
  for (cworker *w = C.workers; w; w = w->next) {
    if (!w->key[0] || w->ticket_expiry == due) continue;
    char t[STK__TICKET_MAX];
    uint64_t e;
    if (tickets_mint(w->key, t, &e)) continue; /* keeps the one it has */
    memcpy(w->ticket, t, sizeof(t));
    w->ticket_expiry = e;
    OPENSSL_cleanse(t, sizeof(t));
    publish_change_locked(w, 0);
  }
  pthread_mutex_unlock(&C.mu);
}

int tickets_on(void) { return enabled; }

void tickets_free(void) { enabled = 0; }
