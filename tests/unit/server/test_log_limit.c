/* test_log_limit.c - the log rate limit (server/daemon_log.c, LOG_LIMITED): a
 * call site repeated without end (a hostile client's bad streams, a disk
 * failing every build) writes at most its limit of lines a minute, counts
 * the rest and says how many once the next minute starts; two sites are
 * limited apart. The limiter is driven with made-up times
 * (stk__log_allow), so nothing waits a minute; the macro is run once for
 * real with stderr in a file, 1,000 times in a loop, and must write 5.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "daemon_log.h"

static void limiter(void) {
  stk__log_limit a = {0}, b = {0};
  uint64_t sup = 0;
  int allowed = 0;
  for (int i = 0; i < 1000; i++) allowed += stk__log_allow(&a, 5, 1000 + i, &sup);
  CHECK_EQ_U64(allowed, 5);
  CHECK_EQ_U64(a.suppressed, 995);
  CHECK(stk__log_allow(&b, 5, 1500, &sup) == 1 && sup == 0); /* another site */
  /* still the same minute: refused */
  CHECK(stk__log_allow(&a, 5, 1000 + STK_LOG_LIMIT_WINDOW_MS - 1, &sup) == 0);
  /* the next minute: allowed, and told what the last one left out */
  CHECK(stk__log_allow(&a, 5, 1000 + STK_LOG_LIMIT_WINDOW_MS, &sup) == 1);
  CHECK_EQ_U64(sup, 996);
  CHECK(stk__log_allow(&a, 5, 1000 + STK_LOG_LIMIT_WINDOW_MS + 1, &sup) == 1 && sup == 0);
  /* a clock at 0 still opens a window */
  stk__log_limit z = {0};
  CHECK(stk__log_allow(&z, 1, 0, &sup) == 1);
  CHECK(stk__log_allow(&z, 1, 0, &sup) == 0);
}

static void macro(void) {
  char path[] = "/tmp/stoker-log-limit.XXXXXX";
  int fd = mkstemp(path);
  int saved = dup(2);
  CHECK(fd >= 0 && saved >= 0);
  if (fd < 0 || saved < 0) return;
  dup2(fd, 2);
  stk__log_init("stoker-worker");
  for (int i = 0; i < 1000; i++)
    LOG_LIMITED(STK_LOG_WARN, 5, "stream from peer %d: bad", i);
  dup2(saved, 2);
  close(saved);
  close(fd);
  FILE *f = fopen(path, "r");
  int lines = 0;
  char buf[512];
  while (f && fgets(buf, sizeof(buf), f))
    lines += strstr(buf, "stream from peer") != NULL;
  if (f) fclose(f);
  unlink(path);
  CHECK_EQ_U64(lines, 5);
}

int main(void) {
  limiter();
  macro();
  if (!check_failures) printf("test_log_limit: ok\n");
  CHECK_DONE();
}
