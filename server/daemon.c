/* daemon.c - the start-up both daemons share (options, TLS material,
 * signals, the descriptor limit, sd_notify, /metrics), signals, the port
 * file and starting the gRPC server for stoker-coordinator and
 * stoker-worker. Owns the signal flag. Must not log from a signal
 * handler. */
#include "daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/secret.h"
#include "daemon_log.h"
#include "notify.h"
#include "rpc/memtune.h"
#include "rpc/peer.h"

static volatile sig_atomic_t signal_got, signal_count;

static void on_signal(int sig) {
  signal_got = sig;
  signal_count = signal_count + 1;
}

void stk__signals_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}

int stk__signal_pending(void) { return signal_got; }
int stk__signal_count(void) { return signal_count; }

/* Create `tmp` for writing, exclusively and without following a symbolic
 * link: a symlink planted there is refused (nothing is written through
 * it); a stale regular file of an earlier process with our pid is removed
 * and the creation tried once more. The fd, or -1 with err. */
static int create_excl(const char *tmp, char *err, size_t errlen) {
  for (int attempt = 0; attempt < 2; attempt++) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    int e = errno;
    struct stat st;
    if (e == EEXIST && attempt == 0 && lstat(tmp, &st) == 0 && S_ISREG(st.st_mode) &&
        unlink(tmp) == 0)
      continue;
    if (e == EEXIST || e == ELOOP)
      snprintf(
          err, errlen,
          "cannot create %s: something is already there (%s); refusing to "
          "write through an existing file or symbolic link",
          tmp,
          lstat(tmp, &st) == 0 && S_ISLNK(st.st_mode) ? "a symbolic link" : strerror(e));
    else snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(e));
    return -1;
  }
  return -1;
}

int stk__write_port_file(const char *path, int port, char *err, size_t errlen) {
  char tmp[4200], text[32];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  int n = snprintf(text, sizeof(text), "%d\n", port);
  int fd = create_excl(tmp, err, errlen);
  if (fd < 0) return -1;
  int ok = write(fd, text, (size_t)n) == n && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  /* rename replaces a symbolic link at path itself, never its target */
  if (!ok || rename(tmp, path) != 0) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* A call refused by protected mode (rpc_server.c tells at most once a
 * minute). */
static void refused_log(const char *peer, uint64_t count) {
  LOG_WARN("protected mode: refused a call from %s (%" PRIu64
           " refused so far): no caller credential, so only loopback peers are served; "
           "give --token-file, role tokens (--worker-/--client-/--admin-token-file) or "
           "--tls-require-client-cert with --tls-ca, or --insecure",
           peer, count);
}

/* The listen address binds loopback only (127.x, ::1, localhost). */
static int listen_is_loopback(const char *listen) {
  char host[256];
  if (!listen || stk__host_of(listen, host, sizeof(host))) return 0;
  if (!strcmp(host, "localhost") || !strcmp(host, "::1")) return 1;
  unsigned char a[4];
  return inet_pton(AF_INET, host, a) == 1 && a[0] == 127;
}

/* Before gRPC tries (it logs a long dump when it cannot bind): is the
 * listen address's port already taken? 0 when free (or port 0, or not an
 * address we can try), -1 with a one-line err when in use. */
static int port_in_use(const char *listen, char *err, size_t errlen) {
  char host[256];
  const char *colon = listen ? strrchr(listen, ':') : NULL;
  if (!colon || stk__host_of(listen, host, sizeof(host)) || !strcmp(colon + 1, "0"))
    return 0;
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  if (getaddrinfo(host, colon + 1, &hints, &res) || !res) return 0;
  int busy = 0;
  for (struct addrinfo *r = res; r && !busy; r = r->ai_next) {
    int fd = socket(r->ai_family, r->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1; /* as gRPC binds: a port in TIME_WAIT is not "in use" */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, r->ai_addr, r->ai_addrlen) != 0 && errno == EADDRINUSE) busy = 1;
    close(fd);
  }
  freeaddrinfo(res);
  if (busy)
    snprintf(err, errlen,
             "cannot listen on %s: the port is already in use (another stoker daemon or "
             "program holds it; choose another port)",
             listen);
  return busy ? -1 : 0;
}

int stk__daemon_serve(const char *listen, const stk__rpc_method *methods, size_t nmethods,
                      long long max_message_mb, const char *token,
                      const stk__role_tokens *roles, const stk__tls *tls,
                      const stk__serve_opts *so, const char *port_file,
                      stk__rpc_server **srv, int *port, char *err, size_t errlen) {
  stk__rpc_server_config sc;
  memset(&sc, 0, sizeof(sc));
  sc.listen = listen;
  sc.methods = methods;
  sc.nmethods = nmethods;
  sc.max_message_bytes = (size_t)max_message_mb << 20;
  sc.token = token && *token ? token : NULL;
  if (roles) sc.creds = roles->creds, sc.ncreds = roles->n;
  sc.tls = tls;
  /* TLS authenticates this server to its callers, not the callers to it:
   * only a token, role tokens or required client certificates say who
   * calls. Server-only TLS is protected mode like plaintext. */
  int secured = sc.token || sc.ncreds || stk__tls_requires_client_cert(tls);
  sc.loopback_only = !secured && !(so && so->insecure);
  sc.on_refused = refused_log;
  const char *shown = listen ? listen : "(no address)";
  if (sc.loopback_only && !listen_is_loopback(listen) && tls)
    LOG_WARN(
        "protected mode: TLS with a server certificate only authenticates this daemon, "
        "not its callers, so only peers on this host's loopback are served although %s "
        "listens beyond it; add --token-file, role tokens "
        "(--worker-/--client-/--admin-token-file) or --tls-require-client-cert with "
        "--tls-ca, or --insecure on a network only you can reach",
        shown);
  else if (sc.loopback_only && !listen_is_loopback(listen))
    LOG_WARN(
        "protected mode: no token and no TLS, so only peers on this host's loopback "
        "are served although %s listens beyond it; give --token-file, role tokens "
        "(--worker-/--client-/--admin-token-file) or TLS with "
        "--tls-require-client-cert, or --insecure on a network only you can reach",
        shown);
  else if (!secured && !listen_is_loopback(listen))
    LOG_WARN(
        "INSECURE: %s serves every peer that can reach it with no caller credential%s "
        "(--insecure): anyone on this network can read every batch and end the job",
        shown, tls ? " (TLS authenticates only this daemon)" : " and no TLS");
  if (so) {
    sc.threads = (int)so->threads;
    sc.max_calls = (size_t)so->max_calls;
    sc.max_calls_per_peer = (size_t)so->max_calls_per_peer;
    sc.max_streams_per_conn = (int)so->max_streams_per_conn;
    sc.first_message_ms = (int)(so->first_message_s * 1000);
    sc.send_stall_ms = (int)(so->send_stall_s * 1000);
    sc.keepalive_ms = (int)(so->keepalive_s * 1000);
  }
  if (port_in_use(listen, err, errlen)) return -1;
  if (stk__rpc_server_start(&sc, srv, port, err, errlen)) return -1;
  if (port_file && *port_file && stk__write_port_file(port_file, *port, err, errlen)) {
    stk__rpc_server_stop(*srv, 0);
    *srv = NULL;
    return -1;
  }
  return 0;
}

int stk__raise_nofile(uint64_t *soft, uint64_t *hard) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  int rc = 0;
  if (rl.rlim_cur < rl.rlim_max) {
    struct rlimit want = {rl.rlim_max, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl.rlim_cur = rl.rlim_max;
    else rc = -1;
  }
  *soft = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
  *hard = rl.rlim_max == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_max;
  return rc;
}

void stk__daemon_raise_nofile(void) {
  uint64_t soft, hard;
  if (stk__raise_nofile(&soft, &hard))
    LOG_WARN("cannot raise the open-file limit (RLIMIT_NOFILE): %s", strerror(errno));
  else
    LOG_INFO("open-file limit (RLIMIT_NOFILE) soft %" PRIu64 " hard %" PRIu64
             " (soft raised to hard)",
             soft, hard);
}

void stk__daemon_check_secret_mode(const char *what, const char *path) {
  struct stat st;
  if (!path || !*path || stat(path, &st) != 0 || !(st.st_mode & 077)) return;
  LOG_WARN(
      "%s %s can be read or written by its group or others (mode %04o): anyone "
      "who reads it holds the credential; chmod 600 it",
      what, path, (unsigned)(st.st_mode & 07777));
}

/* Warn when a token is too short to resist guessing (what: which one). */
static void warn_short_token(const char *what, const char *tok) {
  size_t n = strlen(tok);
  if (n && n < STK__TOKEN_MIN_WARN)
    LOG_WARN(
        "%s is %zu bytes: a token shorter than %d bytes can be guessed; use a long "
        "random one (e.g. openssl rand -hex 32 > FILE; chmod 600 FILE)",
        what, n, STK__TOKEN_MIN_WARN);
}

int stk__daemon_role_tokens(const char *worker_file, const char *client_file,
                            const char *admin_file, stk__role_tokens *out) {
  const char *files[3] = {worker_file, client_file, admin_file};
  static const unsigned role[3] = {STK__ROLE_WORKER, STK__ROLE_CLIENT, STK__ROLE_ADMIN};
  static const char *const name[3] = {"worker", "client", "admin"};
  char err[600];
  memset(out, 0, sizeof(*out));
  for (int i = 0; i < 3; i++) {
    if (!files[i] || !*files[i]) continue;
    if (stk__token_read_file(files[i], out->tok[i], sizeof(out->tok[i]), err,
                             sizeof(err))) {
      LOG_ERROR("--%s-token-file: %s", name[i], err);
      return -1;
    }
    out->creds[out->n++] = (stk__rpc_cred){out->tok[i], role[i]};
    LOG_INFO("%s token from %s", name[i], files[i]);
    stk__daemon_check_secret_mode("token file", files[i]);
    char what[32];
    snprintf(what, sizeof(what), "the %s token", name[i]);
    warn_short_token(what, out->tok[i]);
  }
  return 0;
}

/* An address as 16 bytes, IPv4 as IPv4-mapped IPv6. */
static void ip16(const struct sockaddr *sa, unsigned char out[16]) {
  if (sa->sa_family == AF_INET) {
    memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
  } else {
    memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
  }
}

int stk__host_of(const char *a, char *out, size_t len) {
  size_t n;
  if (*a == '[') {
    const char *e = strchr(a, ']');
    if (!e) return -1;
    a++, n = (size_t)(e - a);
  } else {
    const char *c = strrchr(a, ':');
    n = c ? (size_t)(c - a) : strlen(a);
  }
  if (!n || n >= len) return -1;
  memcpy(out, a, n);
  out[n] = 0;
  return 0;
}

static int is_loopback16(const unsigned char a[16]) {
  static const unsigned char v6lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return !memcmp(a, v6lo, 16) || (!memcmp(a, mapped, 12) && a[12] == 127);
}

/* An address of one of this host's interfaces. */
static int is_local16(const unsigned char a[16]) {
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs)) return 0;
  int found = 0;
  unsigned char b[16];
  for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr ||
        (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
      continue;
    ip16(i->ifa_addr, b);
    found = !memcmp(a, b, 16);
  }
  freeifaddrs(ifs);
  return found;
}

int stk__host_is_peer(const char *addr, const char *peer, char *resolved, size_t len,
                      char *numeric, size_t nlen) {
  char host[256];
  struct addrinfo hints, *res = NULL;
  stk__peer p;
  *resolved = 0;
  if (numeric && nlen) *numeric = 0;
  int pok = stk__peer_parse(peer, &p) == 0;
  if (pok && p.kind == STK__PEER_LOCAL) { /* unix socket: nothing to compare */
    if (numeric && nlen) snprintf(numeric, nlen, "%s", addr);
    return 1;
  }
  if (!pok) {
    snprintf(resolved, len, "malformed peer address");
    return -1;
  }
  if (stk__host_of(addr, host, sizeof(host))) {
    snprintf(resolved, len, "malformed address");
    return -1;
  }
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  unsigned char want[16], got[16];
  memcpy(want, p.ip, 16); /* IPv4 as IPv4-mapped, as ip16 makes it */
  hints.ai_flags = stk__host_is_numeric(addr) ? AI_NUMERICHOST : 0; /* no DNS */
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc || !res) {
    snprintf(resolved, len, "does not resolve: %s", gai_strerror(rc));
    return -1;
  }
  /* A session over loopback comes from this host: any address of this
   * host is the worker's own (hosts simulated with 127.x aliases, a
   * worker that reaches its coordinator through 127.0.0.1). */
  int here = is_loopback16(want), match = 0, shown = 0;
  size_t o = 0;
  for (struct addrinfo *r = res; r; r = r->ai_next) {
    if (r->ai_family != AF_INET && r->ai_family != AF_INET6) continue;
    ip16(r->ai_addr, got);
    char t[INET6_ADDRSTRLEN];
    const void *ap = r->ai_family == AF_INET
                         ? (const void *)&((struct sockaddr_in *)r->ai_addr)->sin_addr
                         : (const void *)&((struct sockaddr_in6 *)r->ai_addr)->sin6_addr;
    if (!match &&
        (!memcmp(got, want, 16) || (here && (is_loopback16(got) || is_local16(got))))) {
      match = 1;
      /* the first address that matched, with addr's port */
      const char *port = addr[0] == '[' ? strchr(addr, ']') : addr;
      port = port ? strrchr(port, ':') : NULL;
      if (numeric && nlen && inet_ntop(r->ai_family, ap, t, sizeof(t)))
        snprintf(numeric, nlen, r->ai_family == AF_INET6 ? "[%s]%s" : "%s%s", t,
                 port ? port : "");
    }
    if (shown < 4 && inet_ntop(r->ai_family, ap, t, sizeof(t)) && o < len &&
        !strstr(resolved, t)) {
      o += (size_t)snprintf(resolved + o, len - o, "%s%s", shown ? ", " : "", t);
      shown++;
    }
  }
  freeaddrinfo(res);
  return match;
}

int stk__host_is_numeric(const char *addr) {
  char host[256];
  unsigned char b[16];
  if (stk__host_of(addr, host, sizeof(host))) return 0;
  return inet_pton(AF_INET, host, b) == 1 || inet_pton(AF_INET6, host, b) == 1;
}

/* Overwrite the value of every --token in argv (both "--token V" and
 * "--token=V") with 'x': what /proc/PID/cmdline and ps show afterwards. */
static int scrub_token_argv(int argc, char **argv) {
  int found = 0;
  for (int i = 1; i < argc; i++) {
    char *v = NULL;
    if (!strcmp(argv[i], "--token") && i + 1 < argc) v = argv[++i];
    else if (!strncmp(argv[i], "--token=", 8)) v = argv[i] + 8;
    if (v) memset(v, 'x', strlen(v)), found = 1;
  }
  return found;
}

int stk__daemon_token(const char *token, const char *token_file, int argc, char **argv,
                      char *buf, size_t buflen) {
  stk__token_source src;
  char err[600];
  int rc = stk__token_resolve(token, token_file, buf, buflen, &src, err, sizeof(err));
  int on_argv = scrub_token_argv(argc, argv);
  if (rc) {
    LOG_ERROR("%s", err);
    return -1;
  }
  if (src == STK_TOKEN_ARGV && !on_argv)
    LOG_INFO("bearer token from the config file (token = ...)");
  else if (src == STK_TOKEN_ARGV)
    LOG_WARN(
        "the token was given with --token: every local user can read it (ps, "
        "/proc); use --token-file FILE or $STOKER_TOKEN instead");
  else if (src != STK_TOKEN_NONE)
    LOG_INFO("bearer token from %s", stk__token_source_name(src));
  if (src == STK_TOKEN_FILE) stk__daemon_check_secret_mode("token file", token_file);
  if (src == STK_TOKEN_ENV_FILE)
    stk__daemon_check_secret_mode("token file", getenv("STOKER_TOKEN_FILE"));
  /* a config file that holds the token is a key file too, whichever
   * token won */
  stk__daemon_check_secret_mode("config file (it holds token =)",
                                stk__options_token_config());
  warn_short_token("the bearer token", buf);
  return 0;
}

/* ---- Start-up ------------------------------------------------------------ */

int stk__daemon_init(const char *program, stk__option *opts, size_t nopts, int argc,
                     char **argv, const char *synopsis, const char *exit_codes) {
  stk__log_init(program);
  /* reuse gRPC's buffers (rpc/memtune.h) */
  stk__rpc_tune_malloc(STK__MALLOC_ARENAS_DAEMON);
  return stk__options_parse(opts, nopts, argc, argv, program, synopsis, exit_codes);
}

int stk__daemon_tls(const stk__tls_opts *x, const char *need_cert_why, stk__tls **tls,
                    char *err, size_t errlen) {
  stk__tls_files tf = {x->ca, x->cert, x->key, x->require};
  if (stk__tls_load(&tf, tls, err, errlen)) return -1;
  if (*tls && !stk__tls_has_cert(*tls)) {
    stk__tls_free(*tls);
    *tls = NULL;
    return stk__errf(err, errlen, -1, "TLS needs --tls-cert and --tls-key%s",
                     need_cert_why);
  }
  stk__daemon_check_secret_mode("--tls-key", x->key);
  return 0;
}

void stk__daemon_start(void) {
  stk__signals_install();
  stk__daemon_raise_nofile();
  stk__notify_init();
}

int stk__daemon_metrics(const char *listen, stk__metrics_fn fn, void *ud,
                        const stk__metrics_access *access, stk__metrics_server **ms) {
  *ms = NULL;
  if (!*listen) return 0;
  char err[300];
  int port = 0;
  if (stk__metrics_start(listen, fn, ud, access, ms, &port, err, sizeof(err))) {
    LOG_ERROR("%s", err);
    return -1;
  }
  LOG_INFO("metrics on http://%s/metrics (port %d)", listen, port);
  return 0;
}
