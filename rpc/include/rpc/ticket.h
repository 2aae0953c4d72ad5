/* ticket.h - stream tickets: what a coordinator mints for a worker and
 * what that worker checks on Worker.Stream, without asking anyone.
 *
 * A worker's ticket key is 32 random bytes in hex, drawn afresh for each
 * registration (the coordinator hands it to that worker alone, in
 * RegisterAck). A ticket is "<expiry>.<mac>": expiry in unix seconds on
 * the coordinator's clock, mac = hex HMAC-SHA256(key, "<expiry>"). So a
 * ticket names its own expiry, cannot be made without the key, and one
 * worker's key (or its id and address) says nothing of another's. Never
 * logged. */
#ifndef STK_PROTO_TICKET_H
#define STK_PROTO_TICKET_H

#include <stddef.h>
#include <stdint.h>

#define STK__TICKET_KEY_HEX 64 /* hex digits of a ticket key */
/* The longest ticket, with its NUL: 20 digits, '.', 64 hex digits. */
#define STK__TICKET_MAX 88
/* A worker judges expiry on the coordinator's clock as it learnt it at
 * registration (RegisterAck.coordinator_time_ms, carried on by its own
 * monotonic clock), and allows STK__TICKET_SKEW_MS, plus 1 ms per second
 * since it learnt it (0.1%: far beyond the rate error of a working
 * clock), at most STK__TICKET_SKEW_MAX_MS in all: a leaked ticket is good
 * for at most the TTL and that. A ticket from the coordinator's list has
 * half the TTL or more left, so a fresh one is taken even when the two
 * clocks have drifted further apart than the margin. */
#define STK__TICKET_SKEW_MS     5000
#define STK__TICKET_SKEW_MAX_MS 60000

/* The skew margin in ms after since_ms since the coordinator's clock was
 * learnt (negative counts as 0). Pure; thread-safe. */
int64_t stk__ticket_skew_ms(int64_t since_ms);

/* A fresh key: 32 random bytes (getrandom) in hex into out
 * (STK__TICKET_KEY_HEX digits and a NUL). 0, or -1 (no random bytes;
 * out = ""). Thread-safe. */
int stk__ticket_key_new(char out[STK__TICKET_KEY_HEX + 1]);
/* The ticket for key expiring at expiry_s (unix seconds) into out. 0, or
 * -1 (HMAC failed; out = ""). Thread-safe. */
int stk__ticket_mint(const char *key, uint64_t expiry_s, char out[STK__TICKET_MAX]);
/* Whether tok[0..n) is a ticket of key: 1 (its expiry in *expiry_s), or
 * 0 (not one: malformed, or another key's). The mac is compared in
 * constant time. Thread-safe. */
int stk__ticket_check(const char *key, const unsigned char *tok, size_t n,
                      uint64_t *expiry_s);

#endif
