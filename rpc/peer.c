/* peer.c - the one parser of gRPC peer strings (peer.h): IPv4, IPv6 with
 * plain or percent-encoded brackets, IPv4-mapped IPv6, local sockets.
 * Owns nothing; no lookups, no allocation. */
#include "rpc/peer.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

/* Copy s into out (len bytes, cut), bytes outside printable ASCII as '?':
 * a malformed peer's text is safe to log. */
static void copy_printable(char *out, size_t len, const char *s) {
  size_t i = 0;
  for (; s && s[i] && i + 1 < len; i++)
    out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
  out[i] = 0;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* s with its %XX escapes decoded into out (len bytes). -1 when an escape
 * is incomplete, decodes to NUL, or out is too small. */
static int unescape(const char *s, char *out, size_t len) {
  size_t o = 0;
  for (; *s; s++) {
    char c = *s;
    if (c == '%') {
      int h = hexval(s[1]), l = h < 0 ? -1 : hexval(s[2]);
      if (l < 0 || (h == 0 && l == 0)) return -1;
      c = (char)(h * 16 + l);
      s += 2;
    }
    if (o + 1 >= len) return -1;
    out[o++] = c;
  }
  out[o] = 0;
  return 0;
}

/* A decimal port 0..65535 filling all of s. */
static int parse_port(const char *s, unsigned *port) {
  unsigned v = 0;
  if (!*s) return -1;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    v = v * 10 + (unsigned)(*s - '0');
    if (v > 65535) return -1;
  }
  *port = v;
  return 0;
}

/* stk__peer_parse's work; on -1, out is left half filled. */
static int parse(const char *s, stk__peer *out) {
  static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static const unsigned char lo6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  char buf[STK__PEER_TEXT], host[STK__PEER_TEXT];
  if (!s || strlen(s) >= sizeof(buf)) return -1;
  if (!strncmp(s, "unix:", 5) || !strncmp(s, "unix-abstract:", 14)) {
    out->kind = STK__PEER_LOCAL;
    out->loopback = 1;
    return 0;
  }
  if (unescape(s, buf, sizeof(buf))) return -1;
  const char *h, *e, *p;
  int v6 = 0;
  if (!strncmp(buf, "ipv4:", 5)) {
    h = buf + 5, e = strrchr(h, ':'), p = e;
  } else if (!strncmp(buf, "ipv6:[", 6)) {
    h = buf + 6, e = strchr(h, ']'), p = e ? e + 1 : NULL, v6 = 1;
    if (p && *p != ':') return -1;
  } else {
    return -1;
  }
  if (!e || e == h || !p || parse_port(p + 1, &out->port)) return -1;
  memcpy(host, h, (size_t)(e - h));
  host[e - h] = 0;
  if (v6) {
    char *zone = strchr(host, '%'); /* fe80::1%eth0: the zone is no part of it */
    if (zone) *zone = 0;
    if (inet_pton(AF_INET6, host, out->ip) != 1) return -1;
  } else {
    memcpy(out->ip, mapped, 12);
    if (inet_pton(AF_INET, host, out->ip + 12) != 1) return -1;
  }
  if (!memcmp(out->ip, mapped, 12)) {
    out->kind = STK__PEER_IPV4;
    out->loopback = out->ip[12] == 127;
    inet_ntop(AF_INET, out->ip + 12, out->addr, sizeof(out->addr));
    snprintf(out->key, sizeof(out->key), "ipv4:%s", out->addr);
    snprintf(out->shown, sizeof(out->shown), "ipv4:%s:%u", out->addr, out->port);
  } else {
    out->kind = STK__PEER_IPV6;
    out->loopback = !memcmp(out->ip, lo6, 16);
    inet_ntop(AF_INET6, out->ip, out->addr, sizeof(out->addr));
    snprintf(out->key, sizeof(out->key), "ipv6:%s", out->addr);
    snprintf(out->shown, sizeof(out->shown), "ipv6:[%s]:%u", out->addr, out->port);
  }
  return 0;
}

int stk__peer_parse(const char *s, stk__peer *out) {
  memset(out, 0, sizeof(*out));
  copy_printable(out->key, sizeof(out->key), s ? s : "?");
  copy_printable(out->shown, sizeof(out->shown), s ? s : "?");
  if (parse(s, out) == 0) return 0;
  memset(out, 0, sizeof(*out));
  copy_printable(out->key, sizeof(out->key), s ? s : "?");
  copy_printable(out->shown, sizeof(out->shown), s ? s : "?");
  return -1;
}
