/* test_e2e_pyop.c - python ops through real daemons on 127.0.0.1: a
 * coordinator, two workers (--threads 2, --python-path tests/data/pyops)
 * and two ranks (libstoker clients in this process) comparing every
 * batch with the reference they build in-process (its python ops found
 * through $STOKER_PYTHON_PATH), over a generated ImageFolder set:
 *  - a chain with python(stk_test_ops:noise) between C ops: every batch
 *    delivered once, in order, equal to the reference;
 *  - python(stk_test_ops:crash, MARKER, 2, only=stoker-worker): the
 *    workers' runners exit twice (each time the sample is retried alone
 *    by a new runner; when both fall on one sample its build fails
 *    STK_UNAVAILABLE and the worker's scheduler asks again); still every
 *    batch equal to the reference (noise's bytes), the marker counting
 *    both crashes;
 * and after each job every process exits 0 and no runner is left (no
 * process whose command line names the job's python op).
 * Skipped (77) without /usr/bin/python3 and numpy.
 *
 * usage: test_e2e_pyop <stoker-coordinator> <stoker-worker> <stoker-dataset>
 */
#include <dirent.h>

#include "daemon_util.h"
#include "e2e_util.h"

/* Processes (other than this one) whose command line holds needle. */
static int count_procs(const char *needle) {
  DIR *d = opendir("/proc");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || atoi(e->d_name) == getpid()) continue;
    char path[300], buf[8192];
    snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    for (size_t i = 0; i < k; i++)
      if (!buf[i]) buf[i] = ' ';
    buf[k] = 0;
    n += strstr(buf, needle) != NULL;
  }
  if (d) closedir(d);
  return n;
}

static void pyop_job(const char *tag, const char *chain, const char *root,
                     const char *needle, uint64_t want_batches) {
  int before = check_failures;
  char pipeline[1024];
  snprintf(pipeline, sizeof pipeline, "pipeline=%s", chain);
  const char *job[] = {"--set", "source=imagefolder",
                       "--set", "dataset=imagefolder",
                       "--set", pipeline,
                       "--set", "batch_size=6",
                       "--set", "world_size=2",
                       "--set", "epochs=2",
                       "--set", "drop_last=false",
                       "--set", "seed=7",
                       NULL};
  const char *wargs[] = {"--threads",     "2",       "--data-root", root,
                         "--python-path", PYOPS_DIR, NULL};
  stk_proc p[3];
  int port = e2e_start(p, tag, job, NULL, 2, wargs);
  if (port <= 0) return;
  rank_run r[2];
  e2e_ranks(r, 2, port, tag, root, NULL, 0, want_batches, 2);
  for (int i = 0; i < 2; i++)
    fprintf(stderr, "%s rank %d: %llu batches, %u workers used\n", tag, i,
            (unsigned long long)r[i].delivered, r[i].stats.nworkers);
  e2e_wait_exit(p, 3);
  /* A runner left by a daemon's exit is killed by PR_SET_PDEATHSIG, which
   * the kernel delivers as the daemon goes: wait (bounded) for it. */
  int left = count_procs(needle);
  for (int i = 0; i < 600 && left; i++) { /* bounded: 30 s */
    stk__sleep_ms(50);
    left = count_procs(needle);
  }
  if (left) fprintf(stderr, "%s: %d runner processes left\n", tag, left);
  CHECK(left == 0);
  e2e_logs_if_failed(p, 3, before);
}

int main(int argc, char **argv) {
  if (system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
    printf("skip: /usr/bin/python3 with numpy is needed\n");
    return 77;
  }
  if (du_init(argc, argv) || argc < 4) return 2;
  char root[600];
  snprintf(root, sizeof root, "%s/data", proc_tmpdir());
  char *gen[] = {argv[3],      "gen",       "--out",      root,       "--count",
                 "24",         "--classes", "4",          "--layout", "imagefolder",
                 "--min-side", "60",        "--max-side", "160",      NULL};
  stk_proc g;
  CHECK(proc_spawn(&g, "gen", gen) == 0);
  CHECK(proc_wait(&g, 60000) == 0);
  setenv("STOKER_PYTHON_PATH", PYOPS_DIR, 1);
  /* 24 samples, 2 x 6 per step: 2 steps per epoch, 2 epochs */
  pyop_job("noise",
           "random_resized_crop(32, scale=0.3:1) | python(stk_test_ops:noise, 25) | "
           "hflip(0.5) | to(uint8, nhwc)",
           root, "stk_test_ops:noise", 2 * 2);
  char marker[700], chain[1200];
  snprintf(marker, sizeof marker, "%s/crash-marker", proc_tmpdir());
  snprintf(chain, sizeof chain,
           "resize(32, 32) | python(stk_test_ops:crash, %s, 2, only=stoker-worker) | "
           "to(uint8, nhwc)",
           marker);
  pyop_job("crash", chain, root, marker, 2 * 2);
  FILE *f = fopen(marker, "r");
  int crashes = -1;
  CHECK(f && fscanf(f, "%d", &crashes) == 1 && crashes == 2);
  if (f) fclose(f);
  CHECK_DONE();
}
