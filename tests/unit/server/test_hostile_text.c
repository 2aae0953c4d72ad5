/* test_hostile_text.c - the daemons' defences against hostile text and
 * hostile files (server/daemon_log.c, server/daemon.c):
 *  - stk__escape: printable ASCII kept (backslash too), every other byte
 *    \xNN, bounded output ending in "..." and never a cut escape;
 *  - a log line carrying a hostile id (newlines, ANSI/OSC sequences, BEL,
 *    CR) stays one line with no control byte in it;
 *  - --port-file: a symbolic link planted at the temp file is refused with
 *    a clear error and nothing is written through it; a stale regular temp
 *    file is replaced; a symlink at the port file itself is replaced, its
 *    target untouched;
 *  - stk__raise_nofile raises the soft RLIMIT_NOFILE to the hard one.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"
#include "daemon_log.h"

static const char hostile[] =
    "w1\n2026-01-01T00:00:00.000Z stoker-coordinator INFO forged line\r"
    "\x1b[31mred\x1b[0m\x1b]0;title\x07\\x41\xff";

static void check_escape(void) {
  char out[512];
  CHECK(!strcmp(stk__escape(out, sizeof(out), "host-1:8080"), "host-1:8080"));
  CHECK(!strcmp(stk__escape(out, sizeof(out), NULL), "(null)"));
  CHECK(!strcmp(stk__escape(out, sizeof(out), "a\nb\x1b[2J\\"), "a\\x0ab\\x1b[2J\\"));
  stk__escape(out, sizeof(out), hostile);
  printf("escaped hostile id: %s\n", out);
  for (const char *p = out; *p; p++) CHECK(*p >= 0x20 && *p <= 0x7e);
  CHECK(strstr(out, "w1\\x0a2026") && strstr(out, "\\x1b[31m") && strstr(out, "\\x07"));
  CHECK(strstr(out, "\\x41\\xff")); /* a backslash is kept, 0xff escaped */
  /* bounded: cut with "...", never inside an escape */
  char small[12];
  stk__escape(small, sizeof(small), "abc\x1b\x1b\x1b\x1b");
  printf("bounded to %zu bytes: %s\n", sizeof(small), small);
  CHECK(strlen(small) < sizeof(small));
  CHECK(!strcmp(small, "abc\\x1b..."));             /* 10 bytes + NUL */
  stk__escape(small, sizeof(small), "0123456789a"); /* exactly fits */
  CHECK(!strcmp(small, "0123456789a"));
  stk__escape(small, sizeof(small), "0123456789ab");
  CHECK(!strcmp(small, "01234567..."));
  char one[1] = {'x'};
  stk__escape(one, 1, "abc");
  CHECK(one[0] == 0);
  char four[4];
  stk__escape(four, sizeof(four), "abcdef");
  CHECK(!strcmp(four, "..."));
}

static void check_log_line(const char *dir) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/log", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int saved = dup(2);
  CHECK(fd >= 0 && saved >= 0);
  dup2(fd, 2);
  stk__log_init("stoker-coordinator");
  LOG_INFO("worker %s registered at %s (%u cores)", hostile, "127.0.0.1:1\r\x1b[2J", 1u);
  dup2(saved, 2);
  close(saved);
  close(fd);
  char buf[4096];
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  printf("log line: %s", buf);
  int newlines = 0, ctl = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)buf[i];
    if (c == '\n') newlines++;
    else if (c < 0x20 || c >= 0x7f) ctl++;
  }
  CHECK(newlines == 1 && buf[n - 1] == '\n'); /* one line, no forged second */
  CHECK(ctl == 0);                            /* no ESC, BEL, CR, 0xff */
  CHECK(strstr(buf, "forged line") && strstr(buf, "\\x1b[2J"));
}

static int read_text(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = 0;
  fclose(f);
  return 0;
}

static void check_port_file(const char *dir) {
  char port[4200], tmp[4300], victim[4200], err[512], got[64];
  snprintf(port, sizeof(port), "%s/port", dir);
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", port, (int)getpid());
  snprintf(victim, sizeof(victim), "%s/victim", dir);
  FILE *f = fopen(victim, "w");
  CHECK(f && fputs("precious\n", f) >= 0);
  if (f) fclose(f);
  /* 1. a symlink planted at the temp file: refused, victim untouched */
  CHECK(symlink(victim, tmp) == 0);
  err[0] = 0;
  CHECK(stk__write_port_file(port, 1234, err, sizeof(err)) == -1);
  printf("port file with a planted symlink: %s\n", err);
  CHECK(strstr(err, "symbolic link") != NULL);
  CHECK(read_text(victim, got, sizeof(got)) == 0 && !strcmp(got, "precious\n"));
  struct stat st;
  CHECK(lstat(port, &st) != 0); /* no port file either */
  CHECK(lstat(tmp, &st) == 0 && S_ISLNK(st.st_mode));
  unlink(tmp);
  /* 2. a stale regular temp file (an earlier process with our pid) */
  f = fopen(tmp, "w");
  if (f) fclose(f);
  CHECK(stk__write_port_file(port, 1234, err, sizeof(err)) == 0);
  CHECK(read_text(port, got, sizeof(got)) == 0 && !strcmp(got, "1234\n"));
  CHECK(lstat(tmp, &st) != 0);
  /* 3. a symlink at the port file itself is replaced, not written through */
  unlink(port);
  CHECK(symlink(victim, port) == 0);
  CHECK(stk__write_port_file(port, 4321, err, sizeof(err)) == 0);
  CHECK(lstat(port, &st) == 0 && S_ISREG(st.st_mode));
  CHECK(read_text(port, got, sizeof(got)) == 0 && !strcmp(got, "4321\n"));
  CHECK(read_text(victim, got, sizeof(got)) == 0 && !strcmp(got, "precious\n"));
  unlink(port);
  unlink(victim);
}

static void check_nofile(void) {
  struct rlimit rl;
  CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
  if (rl.rlim_max > 64) {
    struct rlimit low = {64, rl.rlim_max};
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
  }
  uint64_t soft = 0, hard = 0;
  CHECK(stk__raise_nofile(&soft, &hard) == 0);
  printf("RLIMIT_NOFILE after stk__raise_nofile: soft %llu hard %llu\n",
         (unsigned long long)soft, (unsigned long long)hard);
  CHECK(soft == hard);
  CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur == rl.rlim_max);
}

int main(void) {
  char dir[] = "/tmp/stoker-hostile-XXXXXX";
  if (!mkdtemp(dir)) return 77;
  check_escape();
  check_log_line(dir);
  check_port_file(dir);
  check_nofile();
  char p[4200];
  snprintf(p, sizeof(p), "%s/log", dir);
  unlink(p);
  rmdir(dir);
  CHECK_DONE();
}
