/* peer.h - the one parser of gRPC peer strings (grpc_call_get_peer): what
 * protected mode, the per-peer caps, the coordinator's worker address check
 * and the logs read of a caller.
 *
 * Forms understood:
 *   "ipv4:1.2.3.4:5"                      IPv4
 *   "ipv6:%5B::1%5D:5", "ipv6:[::1]:5"    IPv6 (gRPC percent-encodes the
 *                                          brackets; a zone "%25eth0" is
 *                                          dropped)
 *   "ipv6:[::ffff:127.0.0.1]:5"           IPv4-mapped IPv6: taken as the
 *                                          IPv4 address it carries
 *   "unix:/path", "unix-abstract:name"    a local socket
 * Anything else is malformed: never loopback, never an address.
 *
 * Pure string work (no lookups, no allocation, no global state):
 * thread-safe.
 */
#ifndef STOKER_PEER_H
#define STOKER_PEER_H

#include <stddef.h>

typedef enum stk__peer_kind {
  STK__PEER_MALFORMED = 0,
  STK__PEER_IPV4, /* also an IPv4-mapped IPv6 peer */
  STK__PEER_IPV6,
  STK__PEER_LOCAL /* unix: or unix-abstract: */
} stk__peer_kind;

/* Room for any text below: a peer string longer than this is malformed. */
#define STK__PEER_TEXT 128

typedef struct stk__peer {
  stk__peer_kind kind;
  int loopback;               /* 127.0.0.0/8, ::1, IPv4-mapped 127.x, a local socket */
  unsigned port;              /* 0 for a local socket or a malformed peer */
  unsigned char ip[16];       /* the address, IPv4 as IPv4-mapped IPv6; zeros else */
  char addr[48];              /* numeric, no brackets, no port ("10.0.0.5",
                                 "fd00::5"); "" for a local or malformed peer */
  char key[STK__PEER_TEXT];   /* the per-address key, without the port:
                                 "ipv4:10.0.0.5", "ipv6:fd00::5", the local
                                 socket's text; the text as given (cut) when
                                 malformed */
  char shown[STK__PEER_TEXT]; /* for logs, canonical: "ipv4:10.0.0.5:5",
                                 "ipv6:[fd00::5]:5", "unix:/path"; the text as
                                 given (cut, bytes outside printable ASCII as
                                 '?') when malformed */
} stk__peer;

/* Parse the gRPC peer string s (NULL is malformed) into *out, which is
 * always filled. Returns 0, or -1 when s is malformed (out->kind is then
 * STK__PEER_MALFORMED, out->loopback 0). Thread-safe. */
int stk__peer_parse(const char *s, stk__peer *out);

#endif
