/* test_coordinator_set.c - stoker-coordinator's --set goes through the job
 * text parser (core/job_spec.c): spaces around '=' are fine, errors name the
 * key, and a key=value whose '=' lies past byte 1023 is a clear usage
 * error (exit 2), not the NULL dereference it once was. Runs the real
 * binary with --print-job, so nothing listens.
 *
 * usage: test_coordinator_set <stoker-coordinator>
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proc.h"

static char out[65536];

/* Run the coordinator with args + --print-job; its exit code, its output
 * (stdout and stderr) in out. */
static int run(const char *bin, const char *name, const char *a1, const char *a2) {
  char *argv[] = {(char *)bin, "--set",       (char *)a1, "--set",
                  (char *)a2,  "--print-job", NULL};
  stk_proc p;
  out[0] = 0;
  if (proc_spawn(&p, name, argv)) return -1;
  int code = proc_wait(&p, 20000);
  FILE *f = fopen(p.log, "r");
  if (f) {
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    fclose(f);
  }
  if (code != 0 && code != 2) proc_dump_log(&p);
  return code;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <stoker-coordinator>\n", argv[0]);
    return 2;
  }
  const char *bin = argv[1];

  CHECK(run(bin, "ok", " num_samples = 64 ", "batch_size=8") == 0);
  CHECK(strstr(out, "num_samples = 64\n") != NULL);
  CHECK(strstr(out, "batch_size = 8\n") != NULL);

  CHECK(run(bin, "unknown", "num_samples=64", "nosuch=1") == 2);
  CHECK(strstr(out, "--set nosuch=1") != NULL);
  CHECK(strstr(out, "unknown job key 'nosuch'") != NULL);

  CHECK(run(bin, "badvalue", "num_samples=64", "batch_size=many") == 2);
  CHECK(strstr(out, "'batch_size'") != NULL);

  /* '=' past byte 1023 of the option's value. */
  size_t n = 1100;
  char *kv = malloc(n + 3);
  memset(kv, 'k', n);
  memcpy(kv + n, "=1", 3);
  CHECK(run(bin, "long", "num_samples=64", kv) == 2);
  CHECK(strstr(out, "line too long") != NULL);
  free(kv);

  if (check_failures) proc_keep_tmp();
  CHECK_DONE();
}
