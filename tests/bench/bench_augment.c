/* bench_augment.c - `stoker-bench augment DIR`: single-thread images/s of
 * the train pipeline (RandomResizedCrop(224) + horizontal flip + Normalize
 * to float32 NCHW) over the ImageFolder dataset DIR, and in the same run
 * two baselines over the same files: (a) libjpeg-turbo full-size decode
 * (TurboJPEG, the physical reference: what any pipeline that decodes the
 * whole image pays), and (b) torchvision's RandomResizedCrop(224),
 * RandomHorizontalFlip, ToTensor, Normalize on PIL images, single thread,
 * run by tests/bench/torchvision_baseline.py with /usr/bin/python3 when
 * torchvision is installed. Prints both ratios.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "stoker/augment.h"

#ifndef STOKER_BENCH_DIR
#define STOKER_BENCH_DIR "tests/bench"
#endif

/* Rates are per CPU second of this thread (the machine is shared, so
 * wall time would measure the neighbours); wall-clock rates are printed
 * alongside. */
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double last_wall_rate;

static const char *help =
    "usage: stoker-bench augment DIR [--images N] [--batch B] [--no-torch]\n"
    "DIR is an ImageFolder dataset (e.g. from `stoker-dataset gen`, its\n"
    "imagefolder/ directory). Runs single-threaded: stoker's train pipeline,\n"
    "a libjpeg-turbo full decode, and torchvision (if installed) over the\n"
    "first N images (default 1000), and prints images/s and the ratios.\n";

/* Full-size decode of every sample file with TurboJPEG. */
static double full_decode(const char *dir, char **paths, size_t n) {
  tjhandle tj = tjInitDecompress();
  unsigned char *file = NULL, *rgb = NULL;
  size_t fcap = 0, rcap = 0;
  double t0 = now(), w0 = wall();
  size_t done = 0;
  for (size_t i = 0; i < n; i++) {
    char p[PATH_MAX * 2];
    snprintf(p, sizeof(p), "%s/%s", dir, paths[i]);
    int fd = open(p, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
      if (fd >= 0) close(fd);
      continue;
    }
    if ((size_t)st.st_size > fcap) file = realloc(file, fcap = (size_t)st.st_size);
    ssize_t got = pread(fd, file, (size_t)st.st_size, 0);
    close(fd);
    int w, h, ss, cs;
    if (got != st.st_size ||
        tjDecompressHeader3(tj, file, (unsigned long)got, &w, &h, &ss, &cs))
      continue;
    if ((size_t)w * h * 3 > rcap) rgb = realloc(rgb, rcap = (size_t)w * h * 3);
    if (tjDecompress2(tj, file, (unsigned long)got, rgb, w, 0, h, TJPF_RGB, 0) == 0)
      done++;
  }
  double dt = now() - t0;
  last_wall_rate = done / (wall() - w0);
  tjDestroy(tj);
  free(file), free(rgb);
  return done / dt;
}

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ImageFolder order: sorted classes, sorted files (as the dataset). */
static size_t list_files(const char *dir, char ***out, size_t max) {
  char cmd[PATH_MAX + 64];
  snprintf(cmd, sizeof(cmd), "cd '%s' && ls -1 */*.jpg */*.jpeg 2>/dev/null", dir);
  FILE *f = popen(cmd, "r");
  char **v = NULL;
  size_t n = 0, cap = 0;
  char line[PATH_MAX];
  while (f && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = 0;
    if (n == cap) v = realloc(v, (cap = cap ? cap * 2 : 1024) * sizeof(*v));
    v[n++] = strdup(line);
  }
  if (f) pclose(f);
  if (n) qsort(v, n, sizeof(*v), cmp);
  if (n > max) {
    for (size_t i = max; i < n; i++) free(v[i]);
    n = max;
  }
  *out = v;
  return n;
}

int bench_augment_main(int argc, char **argv) {
  const char *dir = NULL;
  size_t nimg = 1000;
  uint32_t B = 32;
  int torch = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(help, stdout);
      return 0;
    } else if (!strcmp(argv[i], "--images") && i + 1 < argc)
      nimg = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      B = (uint32_t)strtoul(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--no-torch")) torch = 0;
    else if (!dir) dir = argv[i];
    else {
      fputs(help, stderr);
      return 2;
    }
  }
  if (!dir || !nimg || !B) {
    fputs(help, stderr);
    return 2;
  }
  char real[PATH_MAX], parent[PATH_MAX], base[PATH_MAX];
  if (!realpath(dir, real)) {
    perror(dir);
    return 1;
  }
  snprintf(parent, sizeof(parent), "%s", real);
  snprintf(base, sizeof(base), "%s", real);
  const char *root = dirname(parent), *name = basename(base);

  stk_job_spec s;
  stk_job_spec_defaults(&s);
  s.source = STK_SOURCE_IMAGEFOLDER;
  snprintf(s.dataset, sizeof(s.dataset), "%s", name);
  s.num_samples = 0;
  s.pipeline = STK_PIPELINE_TRAIN;
  s.dtype = STK_DTYPE_FLOAT32;
  s.layout = STK_LAYOUT_NCHW;
  s.height = s.width = 224;
  s.batch_size = B;
  s.flip_p = 0.5f;
  s.seed = 1;
  stk_dataset *ds;
  stk_builder *b;
  char err[512];
  if (stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) ||
      stk_builder_create(ds, &s, &b, err, sizeof(err))) {
    fprintf(stderr, "stoker-bench augment: %s\n", err);
    return 1;
  }
  uint64_t n = stk_dataset_size(ds);
  if (nimg > n) nimg = n;
  uint64_t steps = nimg / B ? nimg / B : 1;
  stk_batch_layout L;
  stk_batch_layout_of(&s, &L);
  void *buf = malloc(L.total_bytes);
  /* the epoch permutation visits the files in random order; step through
   * the batches that cover ~nimg samples. Warm the page cache first. */
  char **paths;
  size_t nf = list_files(real, &paths, n);
  double full0 = full_decode(real, paths, nf < nimg ? nf : nimg);
  (void)full0;
  stk_build_info info;
  stk_builder_build(b, 0, 0, 0, buf, L.total_bytes, &info); /* warm-up */
  uint64_t subst = 0, imgs = 0;
  double t0 = now(), w0 = wall();
  for (uint64_t st = 0; st < steps && st < stk_steps_per_epoch(&s, n); st++) {
    if (stk_builder_build(b, 0, 0, st, buf, L.total_bytes, &info)) {
      fprintf(stderr, "build: %s\n", stk_builder_error(b));
      return 1;
    }
    subst += info.substituted;
    imgs += B;
  }
  double ours = imgs / (now() - t0), ours_wall = imgs / (wall() - w0);
  int io = stk_builder_io_mode(b);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  free(buf);

  /* the decode baseline over the files the pipeline read (about nimg) */
  double full = full_decode(real, paths, nf < imgs ? nf : imgs);
  double full_wall = last_wall_rate;
  for (size_t i = 0; i < nf; i++) free(paths[i]);
  free(paths);

  printf("stoker-bench augment: %s, %llu samples, single thread, batch %u\n", real,
         (unsigned long long)n, B);
  printf("images/s per CPU second of one thread (wall-clock rate in brackets)\n");
  printf(
      "  stoker RandomResizedCrop(224)+flip+Normalize f32 NCHW: %8.1f (%.1f)"
      " [%llu images, %llu substituted, %s]\n",
      ours, ours_wall, (unsigned long long)imgs, (unsigned long long)subst,
      io == 2 ? "io_uring" : "pread");
  printf("  libjpeg-turbo full-size decode (TurboJPEG, RGB):       %8.1f (%.1f)\n", full,
         full_wall);
  double tv = 0, tv_wall = 0;
  if (torch) {
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/python3 %s/torchvision_baseline.py '%s' --images %llu 2>&1",
             STOKER_BENCH_DIR, real, (unsigned long long)imgs);
    FILE *f = popen(cmd, "r");
    char line[1024];
    while (f && fgets(line, sizeof(line), f)) {
      if (sscanf(line, "images_per_s=%lf wall=%lf", &tv, &tv_wall) >= 1) continue;
      fputs("  torchvision: ", stdout);
      fputs(line, stdout);
    }
    int rc = f ? pclose(f) : -1;
    if (rc != 0 || tv <= 0) tv = 0;
  }
  if (tv > 0)
    printf("  torchvision RandomResizedCrop+Flip+ToTensor+Normalize: %8.1f (%.1f)\n", tv,
           tv_wall);
  else printf("  torchvision: not available (python3-torchvision not installed)\n");
  printf("ratio stoker / full decode:  %.2fx\n", ours / full);
  if (tv > 0) printf("ratio stoker / torchvision:  %.2fx\n", ours / tv);
  return 0;
}
