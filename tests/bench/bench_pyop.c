/* bench_pyop.c - `bench_pyop`: the per-image cost of a python op against
 * the C op doing the same transform. Three chains over one generated
 * ImageFolder set (or DIR), uint8 NHWC, one builder each, in alternating
 * rounds of the same batches:
 *   base    decode | resize(224, 224)
 *   c       decode | resize(224, 224) | invert
 *   python  decode | resize(224, 224) | python(stk_test_ops:invert)
 * and prints each one's median wall and CPU microseconds per image (CPU:
 * the builder's thread plus the python op's process, read from /proc) and
 * the differences (c - base: the C op; python - base: the python op, its
 * round trip included), with the load average. The python op's module is
 * tests/data/pyops/stk_test_ops.py (PYOPS_DIR from the build).
 *
 * usage: bench_pyop [--rounds R] [--steps S] [--batch B] [--data DIR]
 *   DIR holds imagefolder/ (as `stoker-dataset gen` writes it); without
 *   it, 256 images are generated under $TMPDIR and removed after.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "gen.h"
#include "stoker/augment.h"

static const char *const CHAINS[3] = {
    "decode | resize(224, 224)",
    "decode | resize(224, 224) | invert",
    "decode | resize(224, 224) | python(stk_test_ops:invert)",
};
static const char *const NAMES[3] = {"base", "c", "python"};

/* CPU seconds of this thread's live child processes (the python op's
 * runner), from /proc/self/task/TID/children. */
static double children_cpu_s(void) {
  char path[96];
  snprintf(path, sizeof path, "/proc/self/task/%d/children",
           (int)getpid()); /* the builders run on the main thread */
  FILE *f = fopen(path, "r");
  double sum = 0;
  int pid;
  while (f && fscanf(f, "%d", &pid) == 1) sum += bu_proc_cpu_s(pid);
  if (f) fclose(f);
  return sum;
}

int main(int argc, char **argv) {
  int rounds = 7;
  uint64_t steps = 4;
  uint32_t B = 32;
  const char *data = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = strtoull(argv[++i], 0, 10);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc) B = (uint32_t)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
    else {
      fprintf(stderr,
              "usage: bench_pyop [--rounds R] [--steps S] [--batch B] [--data DIR]\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > 99 || !steps || !B) return 2;
  char tmp[4096] = "", err[512];
  if (!data) {
    const char *t = getenv("TMPDIR");
    snprintf(tmp, sizeof(tmp), "%s/stoker-bench-pyop-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;
    char out[4200];
    snprintf(out, sizeof(out), "%s/ds", tmp);
    stk__gen_opts o = {out, 256, 3, 4, 1, 0, 0, 0, 0};
    if (stk__gen_dataset(&o, err, sizeof(err)))
      return fprintf(stderr, "gen: %s\n", err), 1;
    data = tmp;
  }
  char root[4200];
  snprintf(root, sizeof(root), "%s%s", data, tmp[0] ? "/ds" : "");
  stk_limits lim;
  memset(&lim, 0, sizeof(lim));
  lim.python_path = PYOPS_DIR;
  stk_dataset *ds[3] = {0};
  stk_builder *b[3] = {0};
  stk_job_spec s[3];
  int rc = 0;
  for (int k = 0; k < 3 && !rc; k++) {
    stk_job_spec_defaults(&s[k]);
    s[k].source = STK_SOURCE_IMAGEFOLDER;
    s[k].num_classes = 0;
    snprintf(s[k].dataset, sizeof(s[k].dataset), "imagefolder");
    s[k].batch_size = B;
    rc = stk_job_spec_set(&s[k], "pipeline", CHAINS[k], err, sizeof(err));
    s[k].dtype = STK_DTYPE_UINT8, s[k].layout = STK_LAYOUT_NHWC;
    if (!rc) rc = stk_dataset_open(&s[k], root, &lim, &ds[k], err, sizeof(err));
    if (!rc) rc = stk_builder_create(ds[k], &s[k], &b[k], err, sizeof(err));
    if (rc) fprintf(stderr, "%s: %s\n", CHAINS[k], err);
  }
  stk_batch_layout L;
  stk_batch_layout_of(&s[0], &L);
  void *buf = malloc(L.total_bytes);
  double us[3][99], cpu[3][99];
  /* one warm-up round each (the python op's process starts in it) */
  for (int r = -1; r < rounds && !rc; r++)
    for (int k = 0; k < 3 && !rc; k++) {
      double t0 = bu_now_s(), c0 = bu_thread_cpu_s() + children_cpu_s();
      for (uint64_t st = 0; st < steps && !rc; st++) {
        stk_build_info info;
        if ((rc = stk_builder_build(b[k], 0, 0, st, buf, L.total_bytes, &info)))
          fprintf(stderr, "%s: %s\n", CHAINS[k], stk_builder_error(b[k]));
      }
      double n = (double)steps * B;
      if (r >= 0) us[k][r] = (bu_now_s() - t0) * 1e6 / n;
      if (r >= 0) cpu[k][r] = (bu_thread_cpu_s() + children_cpu_s() - c0) * 1e6 / n;
    }
  if (!rc) {
    double med[3], mc[3];
    FILE *la = fopen("/proc/loadavg", "r");
    char load[64] = "?";
    if (la && fgets(load, sizeof(load), la)) load[strcspn(load, "\n")] = 0;
    if (la) fclose(la);
    printf(
        "bench_pyop: %d rounds of %llu batches of %u 224x224 images (uint8 NHWC), "
        "one builder per chain, alternating; load average %s\n",
        rounds, (unsigned long long)steps, B, load);
    for (int k = 0; k < 3; k++) {
      med[k] = bu_median(us[k], rounds);
      mc[k] = bu_median(cpu[k], rounds);
      printf("  %-7s %-56s %8.1f us wall, %8.1f us CPU per image\n", NAMES[k], CHAINS[k],
             med[k], mc[k]);
    }
    printf("  C op invert:      %+8.1f us wall, %+8.1f us CPU per image over base\n",
           med[1] - med[0], mc[1] - mc[0]);
    printf("  python op invert: %+8.1f us wall, %+8.1f us CPU per image over base\n",
           med[2] - med[0], mc[2] - mc[0]);
  }
  free(buf);
  for (int k = 0; k < 3; k++) stk_builder_destroy(b[k]), stk_dataset_close(ds[k]);
  if (tmp[0]) {
    char cmd[4200 + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmp);
  }
  return rc ? 1 : 0;
}
