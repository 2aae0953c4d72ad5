/* daemon.c - signals, the port file and starting the gRPC server for
 * stoker-coordinator and stoker-worker. Owns the signal flag. Must not log from a signal
 * handler. */
#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

int stk__write_port_file(const char *path, int port, char *err, size_t errlen) {
  char tmp[4200], text[32];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  int n = snprintf(text, sizeof(text), "%d\n", port);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    return -1;
  }
  int ok = write(fd, text, (size_t)n) == n && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

int stk__daemon_serve(const char *listen, const stk__rpc_method *methods, size_t nmethods,
                      long long max_message_mb, const char *token, const char *port_file,
                      stk__rpc_server **srv, int *port, char *err, size_t errlen) {
  stk__rpc_server_config sc;
  memset(&sc, 0, sizeof(sc));
  sc.listen = listen;
  sc.methods = methods;
  sc.nmethods = nmethods;
  sc.max_message_bytes = (size_t)max_message_mb << 20;
  sc.token = token && *token ? token : NULL;
  if (stk__rpc_server_start(&sc, srv, port, err, errlen)) return -1;
  if (port_file && *port_file && stk__write_port_file(port_file, *port, err, errlen)) {
    stk__rpc_server_stop(*srv, 0);
    *srv = NULL;
    return -1;
  }
  return 0;
}
