/* test_host_peer.c - the coordinator's worker address check
 * (stk__host_is_peer, server/daemon.c) over every peer form gRPC reports,
 * read through the one peer parser: IPv4, IPv6 with percent-encoded or
 * plain brackets, IPv4-mapped IPv6, unix sockets, malformed. Numeric
 * hosts only: no DNS. */
#include <string.h>

#include "check.h"
#include "daemon.h"

static int is_peer(const char *addr, const char *peer, char *numeric) {
  char resolved[256];
  return stk__host_is_peer(addr, peer, resolved, sizeof(resolved), numeric, 64);
}

int main(void) {
  char num[64];
  CHECK(is_peer("10.200.0.2:7000", "ipv4:10.200.0.2:41000", num) == 1);
  CHECK(!strcmp(num, "10.200.0.2:7000"));
  CHECK(is_peer("10.200.0.3:7000", "ipv4:10.200.0.2:41000", num) == 0);

  /* IPv6 as gRPC reports it, and with plain brackets */
  CHECK(is_peer("[fd00::1]:7000", "ipv6:%5Bfd00::1%5D:41000", num) == 1);
  CHECK(!strcmp(num, "[fd00::1]:7000"));
  CHECK(is_peer("[fd00::1]:7000", "ipv6:[fd00::1]:41000", num) == 1);
  CHECK(is_peer("[fd00::2]:7000", "ipv6:%5Bfd00::1%5D:41000", num) == 0);

  /* IPv4-mapped IPv6 is its IPv4 address */
  CHECK(is_peer("10.200.0.2:7000", "ipv6:%5B::ffff:10.200.0.2%5D:41000", num) == 1);
  CHECK(!strcmp(num, "10.200.0.2:7000"));

  /* a loopback peer is this host: a loopback address matches */
  CHECK(is_peer("[::1]:7000", "ipv6:%5B::1%5D:41000", num) == 1);
  CHECK(is_peer("127.0.0.1:7000", "ipv6:%5B::1%5D:41000", num) == 1);

  /* a unix socket matches any host; the address is kept as given */
  CHECK(is_peer("example.invalid:7000", "unix:/run/s.sock", num) == 1);
  CHECK(!strcmp(num, "example.invalid:7000"));

  /* malformed: refused, never a match */
  CHECK(is_peer("10.200.0.2:7000", "ipv6:::1:5", num) == -1);
  CHECK(is_peer("10.200.0.2:7000", "inproc", num) == -1);
  CHECK(is_peer("10.200.0.2:7000", "", num) == -1);
  CHECK(is_peer("[fd00::1:7000", "ipv6:%5Bfd00::1%5D:41000", num) == -1);
  CHECK_DONE();
}
