/* metrics.c - the /metrics HTTP endpoint (libmicrohttpd, internal polling
 * thread) and the exposition-format writers (see metrics.h). Owns the
 * microhttpd daemon and a copy of the tokens that make a scrape full;
 * parses no HTTP itself. Answers GET /metrics only (404 for other paths,
 * 405 for other methods); holds at most METRICS_MAX_PER_ADDRESS
 * connections from one address. Must not log a token. */
#include "metrics.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <malloc.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/error.h"
#include "common/secret.h"
#include "daemon.h"
#include "daemon_log.h"

struct stk__metrics_server {
  struct MHD_Daemon *d;
  stk__metrics_fn fn;
  void *ud;
  int restricted;   /* 0: every scrape is full */
  int open, closed; /* stk__metrics_access's */
  char *tokens[4];
  size_t ntokens;
};

void stk__metrics_printf(stk__metrics_buf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 16384;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p, b->cap = cap;
  }
}

void stk__metrics_family(stk__metrics_buf *b, const char *name, const char *type,
                         const char *help) {
  stk__metrics_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void stk__metrics_sample(stk__metrics_buf *b, const char *name, const char *labels,
                         double value) {
  char v[64];
  if (isnan(value)) snprintf(v, sizeof(v), "NaN");
  else if (isinf(value)) snprintf(v, sizeof(v), value > 0 ? "+Inf" : "-Inf");
  else if (value == floor(value) && fabs(value) < 1e15)
    snprintf(v, sizeof(v), "%.0f", value);
  else snprintf(v, sizeof(v), "%.6g", value);
  if (labels && *labels) stk__metrics_printf(b, "%s{%s} %s\n", name, labels, v);
  else stk__metrics_printf(b, "%s %s\n", name, v);
}

char *stk__metrics_label(char *out, size_t len, const char *key, const char *value) {
  char esc[1100];
  stk__escape(esc, sizeof(esc), value ? value : "");
  size_t o = 0;
  int n = snprintf(out, len, "%s=\"", key);
  if (n < 0 || (size_t)n >= len) {
    if (len) out[0] = 0;
    return out;
  }
  o = (size_t)n;
  for (const char *p = esc; *p && o + 4 < len; p++) {
    if (*p == '\\' || *p == '"') out[o++] = '\\', out[o++] = *p;
    else if (*p == '\n') out[o++] = '\\', out[o++] = 'n';
    else out[o++] = *p;
  }
  out[o++] = '"';
  out[o] = 0;
  return out;
}

/* The process's own figures, the same for both daemons, so a long run can
 * be watched for growth: memory, CPU, descriptors, threads (/proc/self),
 * and what glibc's heap holds (mallinfo2, every arena): in use by the
 * program, and free but kept by the allocator. */
static void process_metrics(stk__metrics_buf *b) {
  long page = sysconf(_SC_PAGESIZE), ticks = sysconf(_SC_CLK_TCK);
  unsigned long long vsize = 0, rss_pages = 0, utime = 0, stime = 0;
  long threads = 0;
  FILE *f = fopen("/proc/self/stat", "r");
  if (f) {
    char line[1024];
    const char *p = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
    /* fields after the command: state(3) ... utime(14) stime(15) ...
     * num_threads(20) ... vsize(23) rss(24) */
    if (p &&
        sscanf(p + 1,
               " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
               "%ld %*d %*u %llu %llu",
               &utime, &stime, &threads, &vsize, &rss_pages) != 5)
      threads = 0;
    fclose(f);
  }
  long fds = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    for (struct dirent *e; (e = readdir(d));) fds += e->d_name[0] != '.';
    closedir(d);
    fds--; /* the directory's own */
  }
  struct rlimit rl = {0};
  getrlimit(RLIMIT_NOFILE, &rl);
  struct mallinfo2 mi = mallinfo2();
  stk__metrics_family(b, "process_resident_memory_bytes", "gauge",
                      "resident memory (RSS)");
  stk__metrics_sample(b, "process_resident_memory_bytes", NULL,
                      (double)rss_pages * (double)page);
  stk__metrics_family(b, "process_virtual_memory_bytes", "gauge", "virtual memory size");
  stk__metrics_sample(b, "process_virtual_memory_bytes", NULL, (double)vsize);
  stk__metrics_family(b, "process_cpu_seconds_total", "counter",
                      "user and system CPU time");
  stk__metrics_sample(b, "process_cpu_seconds_total", NULL,
                      ticks > 0 ? (double)(utime + stime) / (double)ticks : 0);
  stk__metrics_family(b, "process_open_fds", "gauge", "open file descriptors");
  stk__metrics_sample(b, "process_open_fds", NULL, (double)(fds > 0 ? fds : 0));
  stk__metrics_family(b, "process_max_fds", "gauge",
                      "the descriptor limit (RLIMIT_NOFILE soft)");
  stk__metrics_sample(b, "process_max_fds", NULL,
                      rl.rlim_cur == RLIM_INFINITY ? -1 : (double)rl.rlim_cur);
  stk__metrics_family(b, "process_threads", "gauge", "threads of the process");
  stk__metrics_sample(b, "process_threads", NULL, (double)threads);
  stk__metrics_family(
      b, "stoker_heap_bytes", "gauge",
      "glibc heap (mallinfo2, every arena): in_use by the program, free but "
      "held by the allocator");
  stk__metrics_sample(b, "stoker_heap_bytes", "state=\"in_use\"",
                      (double)mi.uordblks + (double)mi.hblkhd);
  stk__metrics_sample(b, "stoker_heap_bytes", "state=\"free\"", (double)mi.fordblks);
}

/* 1 when sa is a loopback address (127.0.0.0/8, ::1, ::ffff:127.x). */
static int is_loopback(const struct sockaddr *sa) {
  if (!sa) return 0;
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family != AF_INET6) return 0;
  const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

/* Whether this scrape may see everything (stk__metrics_access). Every token is
 * compared, so the time does not tell which one matched. */
static int scrape_full(stk__metrics_server *m, struct MHD_Connection *conn) {
  if (!m->restricted) return 1;
  if (m->ntokens) {
    const char *auth =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!auth) return 0;
    int ok = 0;
    for (size_t i = 0; i < m->ntokens; i++)
      ok |= stk__bearer_is((const unsigned char *)auth, strlen(auth), m->tokens[i]);
    return ok;
  }
  if (m->closed) return 0;
  if (m->open) return 1;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  return ci && is_loopback(ci->client_addr);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_len, void **con_cls) {
  stk__metrics_server *m = cls;
  unsigned code = MHD_HTTP_OK;
  stk__metrics_buf b = {0};
  const char *type = "text/plain; version=0.0.4; charset=utf-8";
  if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
    code = MHD_HTTP_METHOD_NOT_ALLOWED;
    stk__metrics_printf(&b, "only GET\n");
  } else if (strcmp(url, "/metrics")) {
    code = MHD_HTTP_NOT_FOUND;
    stk__metrics_printf(&b, "not found: try /metrics\n");
  } else {
    m->fn(&b, scrape_full(m, conn), m->ud);
    process_metrics(&b);
  }
  if (b.oom) {
    free(b.p);
    return MHD_NO; /* closes the connection */
  }
  struct MHD_Response *r = MHD_create_response_from_buffer(
      b.len, b.p ? b.p : (char *)"",
      b.p ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!r) {
    free(b.p);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(r, "Allow", "GET, HEAD");
  enum MHD_Result ret = MHD_queue_response(conn, code, r);
  MHD_destroy_response(r);
  return ret;
}

/* host:port into a socket address (numeric or a name, IPv4 or IPv6). */
static int resolve(const char *listen, struct sockaddr_storage *sa, char *err,
                   size_t errlen) {
  const char *colon = strrchr(listen, ':');
  if (!colon || colon == listen)
    return stk__errf(err, errlen, -1, "--metrics-listen '%s' is not host:port", listen);
  char host[256];
  if (stk__host_of(listen, host, sizeof(host)))
    return stk__errf(err, errlen, -1, "--metrics-listen '%s': bad or too long host",
                     listen);
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  int r = getaddrinfo(host, colon + 1, &hints, &ai);
  if (r || !ai)
    return stk__errf(err, errlen, -1, "--metrics-listen %s: %s", listen, gai_strerror(r));
  memcpy(sa, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  return 0;
}

static void server_free(stk__metrics_server *m) {
  for (size_t i = 0; i < m->ntokens; i++) {
    memset(m->tokens[i], 0, strlen(m->tokens[i]));
    free(m->tokens[i]);
  }
  free(m);
}

int stk__metrics_start(const char *listen, stk__metrics_fn fn, void *ud,
                       const stk__metrics_access *access, stk__metrics_server **out,
                       int *port, char *err, size_t errlen) {
  *out = NULL;
  struct sockaddr_storage sa;
  memset(&sa, 0, sizeof(sa));
  if (resolve(listen, &sa, err, errlen)) return -1;
  stk__metrics_server *m = calloc(1, sizeof(*m));
  if (!m) return stk__errf(err, errlen, -1, "out of memory");
  m->fn = fn, m->ud = ud;
  if (access) {
    m->restricted = 1, m->open = access->open, m->closed = access->closed;
    for (size_t i = 0; i < access->ntokens && i < 4; i++) {
      if (!access->tokens[i] || !*access->tokens[i]) continue;
      if (!(m->tokens[m->ntokens] = strdup(access->tokens[i]))) {
        server_free(m);
        return stk__errf(err, errlen, -1, "out of memory");
      }
      m->ntokens++;
    }
  }
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
  if (sa.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
  /* The global cap, and the per-address one under it: one address that
   * opens connections and sends nothing holds at most its share, and a
   * scrape from anywhere else is served meanwhile. */
  m->d = MHD_start_daemon(
      flags, 0, NULL, NULL, answer, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_MAX_CONNECTIONS,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)METRICS_MAX_PER_ADDRESS,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_IDLE_S, MHD_OPTION_END);
  if (!m->d) {
    server_free(m);
    return stk__errf(err, errlen, -1,
                     "cannot serve metrics on %s (address in use or not local?)", listen);
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
  *port = info ? info->port : 0;
  *out = m;
  return 0;
}

void stk__metrics_stop(stk__metrics_server *m) {
  if (!m) return;
  MHD_stop_daemon(m->d);
  server_free(m);
}
