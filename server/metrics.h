/* metrics.h - the daemons' Prometheus endpoint: GET /metrics on
 * --metrics-listen, served by libmicrohttpd on its own thread, in the text
 * exposition format (version 0.0.4). The daemon supplies the figures with
 * a callback that writes them into a stk__metrics_buf with the helpers below,
 * so the format rules (HELP/TYPE lines, label escaping, histograms) live
 * here once. */
#ifndef STOKER_SERVER_METRICS_H
#define STOKER_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* A growing text buffer; on out of memory it stops growing and oom is set
 * (the scrape then answers 500). */
typedef struct stk__metrics_buf {
  char *p;
  size_t len, cap;
  int oom;
} stk__metrics_buf;

/* Append printf-style text. */
void stk__metrics_printf(stk__metrics_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "# HELP name help" and "# TYPE name type" (type: counter, gauge,
 * histogram); once per metric family, before its samples. */
void stk__metrics_family(stk__metrics_buf *b, const char *name, const char *type,
                         const char *help);
/* One sample "name{labels} value". labels is NULL or a preformatted
 * 'key="value",...' list (values escaped with stk__metrics_label). */
void stk__metrics_sample(stk__metrics_buf *b, const char *name, const char *labels,
                         double value);
/* Write key="value" into out (len bytes) with value made safe: bytes
 * outside printable ASCII as \xNN (stk__escape), then backslash, quote
 * and newline escaped as the format asks. Returns out. */
char *stk__metrics_label(char *out, size_t len, const char *key, const char *value);

/* Called for every scrape, on the HTTP thread: write every family of the
 * daemon. The endpoint adds the process's own after them (process_*:
 * resident and virtual memory, CPU seconds, open and max fds, threads;
 * stoker_heap_bytes{state="in_use"|"free"} from mallinfo2). full is 1
 * when the scrape may see what the daemon's Status withholds from the
 * worker role (workers' ids and addresses; see stk__metrics_access), else 0:
 * then fn leaves those samples out. */
typedef void (*stk__metrics_fn)(stk__metrics_buf *b, int full, void *ud);

/* Connections the endpoint holds at once, in all and from one address
 * (its IP): past the second, a new connection from that address is
 * closed as soon as it is accepted, so one address cannot starve the
 * scrapes of the others. An idle connection is closed after
 * METRICS_IDLE_S seconds. */
#define METRICS_MAX_CONNECTIONS 64
#define METRICS_MAX_PER_ADDRESS 8
#define METRICS_IDLE_S          10

/* Which scrapes are full (stk__metrics_fn). With tokens (ntokens > 0), a
 * scrape is full when it carries "Authorization: Bearer T" for one of
 * them (compared in constant time); with none, never when closed is 1,
 * else when open is 1 (the daemon serves every peer: --insecure) or the
 * scrape comes from a loopback address. */
typedef struct stk__metrics_access {
  const char *tokens[4]; /* copied by stk__metrics_start */
  size_t ntokens;
  int open, closed;
} stk__metrics_access;

typedef struct stk__metrics_server stk__metrics_server;

/* Serve /metrics on listen ("host:port"; port 0 = any free one) with the
 * connection limits above. access: who sees full scrapes (NULL = every
 * scrape is full: the daemon withholds nothing). 0 with *out and the
 * bound *port, or -1 with err. fn must be thread-safe with respect to the
 * daemon (it runs on the HTTP thread). */
int stk__metrics_start(const char *listen, stk__metrics_fn fn, void *ud,
                       const stk__metrics_access *access, stk__metrics_server **out,
                       int *port, char *err, size_t errlen);
/* Stop serving and free. Accepts NULL. */
void stk__metrics_stop(stk__metrics_server *m);

#endif
