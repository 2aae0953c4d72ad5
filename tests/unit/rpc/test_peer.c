/* test_peer.c - the one gRPC peer parser (rpc/peer.h) on every form gRPC
 * reports: IPv4, IPv6 with percent-encoded or plain brackets, a zone,
 * IPv4-mapped IPv6 (loopback and key as the IPv4 address), unix sockets,
 * and malformed text (never loopback, never an address, safe to log). */
#include <string.h>

#include "check.h"
#include "rpc/peer.h"

static stk__peer P(const char *s, int want_rc) {
  stk__peer p;
  int rc = stk__peer_parse(s, &p);
  if (rc != want_rc)
    fprintf(stderr, "peer %s: rc %d, want %d\n", s ? s : "(null)", rc, want_rc);
  CHECK(rc == want_rc);
  return p;
}

int main(void) {
  stk__peer p = P("ipv4:10.200.0.2:5555", 0);
  CHECK(p.kind == STK__PEER_IPV4 && !p.loopback && p.port == 5555);
  CHECK(!strcmp(p.addr, "10.200.0.2") && !strcmp(p.key, "ipv4:10.200.0.2"));
  CHECK(!strcmp(p.shown, "ipv4:10.200.0.2:5555"));
  CHECK(p.ip[10] == 0xff && p.ip[11] == 0xff && p.ip[12] == 10 && p.ip[15] == 2);

  p = P("ipv4:127.0.0.1:1", 0);
  CHECK(p.loopback && p.kind == STK__PEER_IPV4);
  p = P("ipv4:127.9.8.7:65535", 0);
  CHECK(p.loopback && p.port == 65535);

  /* IPv6 as gRPC reports it: percent-encoded brackets. */
  p = P("ipv6:%5B::1%5D:40000", 0);
  CHECK(p.kind == STK__PEER_IPV6 && p.loopback && p.port == 40000);
  CHECK(!strcmp(p.addr, "::1") && !strcmp(p.key, "ipv6:::1"));
  CHECK(!strcmp(p.shown, "ipv6:[::1]:40000"));
  p = P("ipv6:%5bfd00::1%5d:7", 0); /* lower-case escapes */
  CHECK(p.kind == STK__PEER_IPV6 && !p.loopback && !strcmp(p.key, "ipv6:fd00::1"));
  /* and with plain brackets; the same address gives the same key */
  p = P("ipv6:[fd00:0::1]:8", 0);
  CHECK(p.kind == STK__PEER_IPV6 && !p.loopback && !strcmp(p.key, "ipv6:fd00::1"));
  CHECK(!strcmp(p.shown, "ipv6:[fd00::1]:8"));
  p = P("ipv6:[::1]:5", 0);
  CHECK(p.loopback);
  /* a zone (percent-encoded as gRPC writes it) is dropped */
  p = P("ipv6:%5Bfe80::1%25eth0%5D:9", 0);
  CHECK(p.kind == STK__PEER_IPV6 && !p.loopback && !strcmp(p.addr, "fe80::1"));
  p = P("ipv6:[fe80::1%25lo]:9", 0);
  CHECK(!strcmp(p.key, "ipv6:fe80::1"));

  /* IPv4-mapped IPv6: the IPv4 address, loopback and key alike. */
  p = P("ipv6:%5B::ffff:127.0.0.1%5D:5", 0);
  CHECK(p.kind == STK__PEER_IPV4 && p.loopback && !strcmp(p.addr, "127.0.0.1"));
  CHECK(!strcmp(p.key, "ipv4:127.0.0.1") && !strcmp(p.shown, "ipv4:127.0.0.1:5"));
  p = P("ipv6:[::ffff:10.200.0.1]:6", 0);
  CHECK(p.kind == STK__PEER_IPV4 && !p.loopback && !strcmp(p.key, "ipv4:10.200.0.1"));
  stk__peer q = P("ipv4:10.200.0.1:7", 0);
  CHECK(!memcmp(p.ip, q.ip, 16) && !strcmp(p.key, q.key));
  /* ::1 is loopback, ::2 and :: are not */
  CHECK(!P("ipv6:[::2]:5", 0).loopback && !P("ipv6:[::]:5", 0).loopback);

  /* Local sockets: loopback, no port; the key is the text. */
  p = P("unix:/run/stoker.sock", 0);
  CHECK(p.kind == STK__PEER_LOCAL && p.loopback && p.port == 0 && !p.addr[0]);
  CHECK(!strcmp(p.key, "unix:/run/stoker.sock") && !strcmp(p.shown, p.key));
  p = P("unix-abstract:stoker", 0);
  CHECK(p.kind == STK__PEER_LOCAL && p.loopback);
  p = P("unix:", 0);
  CHECK(p.kind == STK__PEER_LOCAL);

  /* Malformed: never loopback, no address, printable text. */
  const char *bad[] = {"",
                       "127.0.0.1:5",
                       "ipv4:127.0.0.1",
                       "ipv4:127.0.0.1:",
                       "ipv4:127.0.0.1:65536",
                       "ipv4:127.0.0.1:5x",
                       "ipv4:127.1:5",
                       "ipv4:::1:5",
                       "ipv4::5",
                       "ipv6:::1:5",
                       "ipv6:[::1]5",
                       "ipv6:[::1]",
                       "ipv6:[::1:5",
                       "ipv6:%5B::1:5",
                       "ipv6:[]:5",
                       "ipv6:[127.0.0.1]:5",
                       "ipv6:%5B::1%5D:5%",
                       "ipv6:%5B::1%5D:%00",
                       "ipv6:%5G::1%5D:5",
                       "ipv6:[fe80::1%lo]:9", /* a bare '%' is no escape */
                       "IPV4:127.0.0.1:5",
                       "inproc",
                       "ipv6:[::1]:5\n\x01"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    p = P(bad[i], -1);
    CHECK(p.kind == STK__PEER_MALFORMED && !p.loopback && !p.addr[0] && p.port == 0);
    for (const char *c = p.shown; *c; c++) CHECK(*c >= 0x20 && *c < 0x7f);
  }
  p = P(NULL, -1);
  CHECK(!p.loopback && !strcmp(p.shown, "?"));
  char big[400];
  memset(big, '1', sizeof(big) - 1);
  big[sizeof(big) - 1] = 0;
  memcpy(big, "ipv4:", 5);
  p = P(big, -1);
  CHECK(!p.loopback && strlen(p.shown) < STK__PEER_TEXT);
  CHECK_DONE();
}
