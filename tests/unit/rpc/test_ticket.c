/* test_ticket.c - the stream ticket format (rpc/ticket.h) without a
 * peer: a minted ticket checks under its key with its expiry and under no
 * other key, malformed or altered tickets are refused, fresh keys are 64
 * hex digits and differ, and the clock-skew margin a worker allows grows
 * with the time since it learnt the coordinator's clock but stops at
 * STK__TICKET_SKEW_MAX_MS. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "rpc/ticket.h"

static void test_skew(void) {
  CHECK(stk__ticket_skew_ms(-5) == STK__TICKET_SKEW_MS);
  CHECK(stk__ticket_skew_ms(0) == STK__TICKET_SKEW_MS);
  CHECK(stk__ticket_skew_ms(999) == STK__TICKET_SKEW_MS);
  /* 1 ms per second: an hour adds 3.6 s */
  CHECK(stk__ticket_skew_ms(3600 * 1000LL) == STK__TICKET_SKEW_MS + 3600);
  /* a week, a year, the largest value: capped */
  CHECK(stk__ticket_skew_ms(7 * 86400 * 1000LL) == STK__TICKET_SKEW_MAX_MS);
  CHECK(stk__ticket_skew_ms(365 * 86400 * 1000LL) == STK__TICKET_SKEW_MAX_MS);
  CHECK(stk__ticket_skew_ms(INT64_MAX) == STK__TICKET_SKEW_MAX_MS);
  /* never decreasing on the way to the cap */
  int64_t last = 0;
  for (int64_t t = 0; t < 200000000; t += 997003) {
    int64_t m = stk__ticket_skew_ms(t);
    CHECK(m >= last && m <= STK__TICKET_SKEW_MAX_MS);
    last = m;
  }
}

static void test_mint_check(void) {
  const char *key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  const char *other = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
  char t[STK__TICKET_MAX];
  CHECK(stk__ticket_mint(key, 1700000000, t) == 0);
  uint64_t e = 0;
  CHECK(stk__ticket_check(key, (const unsigned char *)t, strlen(t), &e) == 1 &&
        e == 1700000000);
  CHECK(stk__ticket_check(other, (const unsigned char *)t, strlen(t), &e) == 0);
  char bad[STK__TICKET_MAX];
  memcpy(bad, t, sizeof(bad));
  bad[0] = bad[0] == '1' ? '2' : '1'; /* another expiry, the same mac */
  CHECK(stk__ticket_check(key, (const unsigned char *)bad, strlen(bad), &e) == 0);
  CHECK(stk__ticket_check(key, (const unsigned char *)t, strlen(t) - 1, &e) == 0);
  CHECK(stk__ticket_check(key, (const unsigned char *)"", 0, &e) == 0);
  CHECK(stk__ticket_check(key, (const unsigned char *)"12.", 3, &e) == 0);
}

static void test_key_new(void) {
  char a[STK__TICKET_KEY_HEX + 1], b[STK__TICKET_KEY_HEX + 1];
  CHECK(stk__ticket_key_new(a) == 0 && stk__ticket_key_new(b) == 0);
  CHECK(strlen(a) == STK__TICKET_KEY_HEX && strlen(b) == STK__TICKET_KEY_HEX);
  CHECK(strspn(a, "0123456789abcdef") == STK__TICKET_KEY_HEX);
  CHECK(strcmp(a, b) != 0);
  char t[STK__TICKET_MAX];
  uint64_t e;
  CHECK(stk__ticket_mint(a, 42, t) == 0);
  CHECK(stk__ticket_check(a, (const unsigned char *)t, strlen(t), &e) == 1 && e == 42);
  CHECK(stk__ticket_check(b, (const unsigned char *)t, strlen(t), &e) == 0);
}

int main(void) {
  test_skew();
  test_key_new();
  test_mint_check();
  CHECK_DONE();
}
