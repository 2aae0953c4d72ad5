/* ticket.c - minting and checking stream tickets (ticket.h): the one
 * place that knows their format. Owns nothing; must not log a key or a
 * ticket. */
#include "rpc/ticket.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

static void to_hex(const unsigned char *p, size_t n, char *out) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hex[p[i] >> 4];
    out[2 * i + 1] = hex[p[i] & 15];
  }
  out[2 * n] = 0;
}

/* hex HMAC-SHA256(key[0..klen), in[0..n)) into out (65 bytes). 0 or -1. */
static int mac_hex(const void *key, size_t klen, const void *in, size_t n, char *out) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  out[0] = 0;
  if (!HMAC(EVP_sha256(), key, (int)klen, in, n, mac, &len) ||
      len * 2 < STK__TICKET_KEY_HEX)
    return -1;
  to_hex(mac, STK__TICKET_KEY_HEX / 2, out);
  OPENSSL_cleanse(mac, sizeof(mac));
  return 0;
}

int stk__ticket_key_new(char out[STK__TICKET_KEY_HEX + 1]) {
  unsigned char raw[STK__TICKET_KEY_HEX / 2];
  size_t got = 0;
  out[0] = 0;
  while (got < sizeof(raw)) {
    ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      OPENSSL_cleanse(raw, sizeof(raw));
      return -1;
    }
    got += (size_t)n;
  }
  to_hex(raw, sizeof(raw), out);
  OPENSSL_cleanse(raw, sizeof(raw));
  return 0;
}

int64_t stk__ticket_skew_ms(int64_t since_ms) {
  int64_t m = STK__TICKET_SKEW_MS + (since_ms > 0 ? since_ms / 1000 : 0);
  return m < STK__TICKET_SKEW_MAX_MS ? m : STK__TICKET_SKEW_MAX_MS;
}

int stk__ticket_mint(const char *key, uint64_t expiry_s, char out[STK__TICKET_MAX]) {
  char exp[24];
  int n = snprintf(exp, sizeof(exp), "%llu", (unsigned long long)expiry_s);
  char mac[STK__TICKET_KEY_HEX + 1];
  if (mac_hex(key, strlen(key), exp, (size_t)n, mac)) {
    out[0] = 0;
    return -1;
  }
  /* n <= 20 digits: n + 1 + 64 + 1 <= STK__TICKET_MAX */
  memcpy(out, exp, (size_t)n);
  out[n] = '.';
  memcpy(out + n + 1, mac, STK__TICKET_KEY_HEX + 1);
  OPENSSL_cleanse(mac, sizeof(mac));
  return 0;
}

int stk__ticket_check(const char *key, const unsigned char *tok, size_t n,
                      uint64_t *expiry_s) {
  /* "<1..20 digits>.<64 hex>" */
  size_t d = 0;
  uint64_t e = 0;
  while (d < n && d < 21 && tok[d] >= '0' && tok[d] <= '9') {
    if (e > (UINT64_MAX - 9) / 10) return 0;
    e = e * 10 + (uint64_t)(tok[d] - '0');
    d++;
  }
  if (d == 0 || d > 20 || (d > 1 && tok[0] == '0') || n != d + 1 + STK__TICKET_KEY_HEX ||
      tok[d] != '.')
    return 0;
  char mac[STK__TICKET_KEY_HEX + 1];
  if (mac_hex(key, strlen(key), tok, d, mac)) return 0;
  unsigned char diff = 0;
  for (size_t i = 0; i < STK__TICKET_KEY_HEX; i++)
    diff |= (unsigned char)(tok[d + 1 + i] ^ (unsigned char)mac[i]);
  OPENSSL_cleanse(mac, sizeof(mac));
  if (diff) return 0;
  *expiry_s = e;
  return 1;
}
