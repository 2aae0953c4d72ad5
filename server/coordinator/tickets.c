/* tickets.c - the stream tickets the coordinator mints for its workers
 * (RegisterAck.stream_ticket, WorkerInfo.stream_ticket): with role tokens,
 * a client presents worker w's ticket on its Worker.Stream calls to w, so
 * no worker ever receives the client or admin token. A ticket is
 * HMAC-SHA256(key, worker id NUL address) in hex, the key 32 random bytes
 * drawn at start and kept only in memory: the same worker gets the same
 * ticket for the coordinator's life (a re-registration after a reconnect
 * keeps it), one that takes over its id from another address gets
 * another, a restarted coordinator mints new ones (clients reopen with
 * those), and a ticket of one worker says nothing of another's. Owns the key; must not
 * log a ticket or the key. */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>
#include <sys/random.h>

#include "coordinator.h"

static unsigned char key[32]; /* written once by tickets_init, before serving */
static int enabled;           /* idem */

int tickets_init(int on) {
  enabled = 0;
  if (!on) return 0;
  size_t got = 0;
  while (got < sizeof(key)) {
    ssize_t n = getrandom(key + got, sizeof(key) - got, 0);
    if (n < 0) return -1; /* EINTR included: once at start, fail loudly */
    got += (size_t)n;
  }
  enabled = 1;
  return 0;
}

int ticket_for(const char *worker_id, const char *address, char out[TICKET_HEX + 1]) {
  out[0] = 0;
  if (!enabled) return 0;
  /* id NUL address: no two (id, address) pairs give the same input */
  unsigned char in[2 * MAX_STR];
  size_t il = strlen(worker_id), al = strlen(address);
  if (il >= MAX_STR || al >= MAX_STR) return -1;
  memcpy(in, worker_id, il + 1);
  memcpy(in + il + 1, address, al);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key, (int)sizeof(key), in, il + 1 + al, mac, &len) ||
      len * 2 < TICKET_HEX)
    return -1;
  static const char hex[] = "0123456789abcdef";
  for (unsigned i = 0; i < TICKET_HEX / 2; i++) {
    out[2 * i] = hex[mac[i] >> 4];
    out[2 * i + 1] = hex[mac[i] & 15];
  }
  out[TICKET_HEX] = 0;
  OPENSSL_cleanse(mac, sizeof(mac));
  return 0;
}

int tickets_on(void) { return enabled; }

void tickets_free(void) {
  OPENSSL_cleanse(key, sizeof(key));
  enabled = 0;
}
