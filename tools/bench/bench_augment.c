/* bench_augment.c - `stoker-bench augment DIR`: single-thread images/s of
 * the train pipeline (RandomResizedCrop(224) + horizontal flip + Normalize
 * to float32 NCHW) over the ImageFolder dataset DIR, and in the same run
 * two baselines over the same files (the samples of the batches the
 * pipeline builds): (a) libjpeg-turbo full-size decode (TurboJPEG, the
 * physical reference: what any pipeline that decodes the whole image
 * pays), and (b) torchvision's RandomResizedCrop(224), RandomHorizontalFlip,
 * ToTensor, Normalize on PIL images, one thread (OMP_NUM_THREADS=1), after
 * a warm-up pass, run by tests/bench/torchvision_baseline.py with
 * /usr/bin/python3 when torchvision is installed. The three alternate for
 * --rounds rounds (a noisy neighbour then hurts each alike); per-round
 * ratios and medians are printed. --worker adds a real stoker-worker with
 * 1 and 2 builder threads (alternating) serving the same pipeline to
 * libstoker in this process: images/s and the scaling from 1 to 2.
 * --prepared PDIR adds the pipeline over PDIR, the same dataset after
 * `stoker-dataset prepare` (restart markers: the region decode cuts the
 * intervals a crop needs), in the same alternation; its ratio is against
 * the full decode of the original files. --profile adds rounds with the
 * pipeline's part timers on (augment/prof.h), alternating with the full
 * decode: each part's time per image and its fraction of a full decode.
 * --recipes and --pyop run instead of all that (bench_recipes.c): the
 * recipe chains against torchvision's same Compose, and a python op
 * against its C twin, over the same files in the same alternation. This
 * file parses the options and picks the files (bench_augment.h).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "bench_augment.h"
#include "bench_util.h"
#include "augment/prof.h"
#include "stoker/augment.h"
#include "stoker/client.h"

#ifndef STOKER_BENCH_DIR
#define STOKER_BENCH_DIR "tests/bench"
#endif
#ifndef PYOPS_DIR /* tests/data/pyops: stk_test_ops.py for --pyop */
#define PYOPS_DIR "tests/data/pyops"
#endif

enum { MAX_ROUNDS = BA_MAX_ROUNDS };

/* Rates are per CPU second of the working thread (the machine is shared,
 * so wall time would measure the neighbours); wall-clock rates are printed
 * alongside. */
static double last_wall_rate;

static const char *help =
    "usage: stoker-bench augment DIR [options]\n"
    "DIR is an ImageFolder dataset (e.g. from `stoker-dataset gen`, its\n"
    "imagefolder/ directory). One thread each, over the same files (the samples\n"
    "of the batches the pipeline builds), alternating: stoker's train pipeline\n"
    "(RandomResizedCrop(224)+flip+Normalize, float32 NCHW, and the same with\n"
    "uint8 output, what a worker builds on the 8-bit wire), a libjpeg-turbo full\n"
    "decode, and torchvision (if installed). Prints images/s per CPU second and\n"
    "the ratios of each round, then medians.\n"
    "  --images N    about N images per round (whole batches; default 1000, 256\n"
    "                with --recipes or --pyop)\n"
    "  --batch B     samples per batch (default 32)\n"
    "  --rounds R    alternating rounds (default 3, at most 15)\n"
    "  --no-torch    skip torchvision\n"
    "  --prepared PDIR  also the pipeline over PDIR, DIR after `stoker-dataset\n"
    "                prepare` (same files, restart markers), against the full\n"
    "                decode of DIR's files\n"
    "  --profile     then R more rounds with the pipeline's part timers on:\n"
    "                per image, the time of reading, header + region decode,\n"
    "                the horizontal and vertical resampling passes, the store\n"
    "                (dtype, layout, normalize) and the rest, and each as a\n"
    "                fraction of a full decode (the rates above run without\n"
    "                timers)\n"
    "  --worker      also a real stoker-worker with --threads 1 and 2,\n"
    "                alternating R rounds each, serving the pipeline with uint8\n"
    "                output to libstoker here: images/s (wall) and 2 / 1 threads\n"
    "  --bindir DIR  where stoker-coordinator and stoker-worker are (default:\n"
    "                next to this binary, ../../server, PATH)\n"
    "Instead of the above (either or both):\n"
    "  --recipes [NAME,...]  the recipe chains, one builder each (float32 NCHW),\n"
    "                against torchvision's same Compose (torchvision_baseline.py\n"
    "                --recipe NAME), every recipe in each round, stoker then\n"
    "                torchvision: images/s per CPU second (wall), per-round ratios,\n"
    "                medians. NAMEs (default all; a directory named like one is\n"
    "                DIR when no other DIR is given): recipe (timm's: random_resized_\n"
    "                crop(224) | hflip(0.5) | rand_augment(2, 9) | normalize(imagenet)\n"
    "                | random_erasing(0.25)), base (the same without the two\n"
    "                policies), tawide (torchvision's ResNet-50 v2: random_resized_\n"
    "                crop(176), trivial_augment_wide, random_erasing(0.1)), autoaug\n"
    "                (auto_augment), augmix (aug_mix), mix (recipe | mixup_cutmix(0.8,\n"
    "                1.0) per batch, against timm's Mixup formula in torch)\n"
    "  --pyop        decode | resize(224, 224) alone, | invert (C) and\n"
    "                | python(stk_test_ops:invert), uint8 NHWC, one builder each,\n"
    "                alternating after a warm-up round: wall and CPU (this thread\n"
    "                plus the python process) us per image, each over the first,\n"
    "                python - C\n"
    "  --python-path DIR  where --pyop's stk_test_ops.py is (default: the source\n"
    "                tree's tests/data/pyops)\n";

/* Full-size decode of files paths[0..n) under dir with TurboJPEG: images
 * per CPU second (last_wall_rate: per wall second). */
static double full_decode(const char *dir, char *const *paths, size_t n) {
  tjhandle tj = tjInitDecompress();
  unsigned char *file = NULL, *rgb = NULL;
  size_t fcap = 0, rcap = 0;
  double t0 = bu_thread_cpu_s(), w0 = bu_now_s();
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
  double dt = bu_thread_cpu_s() - t0;
  last_wall_rate = done / (bu_now_s() - w0);
  tjDestroy(tj);
  free(file), free(rgb);
  return done / dt;
}

void ba_spec(const ba_files *f, stk_job_spec *s) {
  stk_job_spec_defaults(s);
  s->source = STK_SOURCE_IMAGEFOLDER;
  s->num_classes = 0;
  snprintf(s->dataset, sizeof(s->dataset), "%s", f->name);
  s->num_samples = 0;
  s->batch_size = f->B;
  s->seed = 1;
}

double ba_pipeline_round(stk_builder *b, const ba_files *f, void *buf, size_t bytes,
                         double *wall_rate, uint64_t *subst) {
  stk_build_info info;
  double t0 = bu_thread_cpu_s(), w0 = bu_now_s();
  for (uint64_t st = 0; st < f->steps; st++) {
    if (stk_builder_build(b, 0, 0, st, buf, bytes, &info)) {
      fprintf(stderr, "build: %s\n", stk_builder_error(b));
      return -1;
    }
    *subst += info.substituted;
  }
  double imgs = (double)f->nsel;
  *wall_rate = imgs / (bu_now_s() - w0);
  return imgs / (bu_thread_cpu_s() - t0);
}

/* The profile's columns: the parts of augment/prof.h, the rest, the whole. */
enum { PROF_REST = STK__PROF_N, PROF_ALL, PROF_ROWS };

/* One round of the pipeline with the part timers on: CPU microseconds per
 * image of each part, the rest and the whole (us), or -1 on a build error.
 * The parts are timed on the thread's CPU clock (augment/prof.h), the
 * whole by the round's CPU time. */
static int profile_round(stk_builder *b, const ba_files *f, void *buf, size_t bytes,
                         double us[PROF_ROWS]) {
  stk__prof p;
  uint64_t subst = 0;
  double wall;
  stk__prof_take(&p); /* zero the sums */
  stk__prof_enable(1);
  double rate = ba_pipeline_round(b, f, buf, bytes, &wall, &subst);
  stk__prof_enable(0);
  stk__prof_take(&p);
  if (rate <= 0) return -1;
  double per = 1e6 / rate, sum = 0, imgs = (double)f->nsel;
  for (int k = 0; k < STK__PROF_N; k++) {
    us[k] = (double)p.ns[k] / 1e3 / imgs;
    sum += us[k];
  }
  us[PROF_REST] = per - sum;
  us[PROF_ALL] = per;
  return 0;
}

/* --profile: R rounds of every pipeline with the part timers on, each
 * round followed by a full decode of the same files; prints the medians
 * of each part's time per image and of its per-round fraction of a full
 * decode. pbs: the builders (ncol of them, named cols). 0, or -1. */
static int profile_rounds(stk_builder *const *pbs, const char *const *cols, int ncol,
                          const ba_files *f, void *buf, size_t bytes) {
  int rounds = f->rounds;
  static const char *names[PROF_ROWS] = {"read (open, stat, batched read)",
                                         "JPEG header + region decode",
                                         "resample, horizontal pass",
                                         "resample, vertical pass",
                                         "store (dtype, layout, normalize)",
                                         "the rest (chain, batch, ...)",
                                         "whole pipeline"};
  static double us[4][PROF_ROWS][MAX_ROUNDS], fr[4][PROF_ROWS][MAX_ROUNDS];
  double fd[MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    double one[PROF_ROWS];
    for (int c = 0; c < ncol; c++) {
      if (profile_round(pbs[c], f, buf, bytes, one)) return -1;
      for (int k = 0; k < PROF_ROWS; k++) us[c][k][r] = one[k];
    }
    fd[r] = 1e6 / full_decode(f->real, f->sel, f->nsel);
    for (int c = 0; c < ncol; c++)
      for (int k = 0; k < PROF_ROWS; k++) fr[c][k][r] = us[c][k][r] / fd[r];
  }
  printf(
      "profile, %d rounds with the part timers on: CPU microseconds per image and the "
      "fraction of one full decode of the original files (medians of the per-round "
      "values):\n",
      rounds);
  printf("  %-34s", "part");
  for (int c = 0; c < ncol; c++) printf(" | %18s", cols[c]);
  printf("\n");
  for (int k = 0; k < PROF_ROWS; k++) {
    printf("  %-34s", names[k]);
    for (int c = 0; c < ncol; c++)
      printf(" | %8.1f us %5.3f", bu_median(us[c][k], rounds),
             bu_median(fr[c][k], rounds));
    printf("\n");
  }
  printf("  %-34s   %8.1f us 1.000\n", "full decode (TurboJPEG, with read)",
         bu_median(fd, rounds));
  return 0;
}

double ba_torch_round(const ba_files *f, const char *recipe, double *wall_rate) {
  char cmd[PATH_MAX * 2], opt[96] = "";
  if (recipe) snprintf(opt, sizeof(opt), " --recipe %s --batch %u", recipe, f->B);
  snprintf(cmd, sizeof(cmd),
           "OMP_NUM_THREADS=1 /usr/bin/python3 %s/torchvision_baseline.py --list '%s'%s "
           "2>&1",
           STOKER_BENCH_DIR, f->list, opt);
  FILE *p = popen(cmd, "r");
  char line[1024];
  double tv = 0, tw = 0;
  while (p && fgets(line, sizeof(line), p)) {
    if (sscanf(line, "images_per_s=%lf wall=%lf", &tv, &tw) >= 1) continue;
    fputs("  torchvision: ", stdout);
    fputs(line, stdout);
  }
  int rc = p ? pclose(p) : -1;
  if (rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 77) return 0;
  if (rc != 0 || tv <= 0) {
    fprintf(stderr, "stoker-bench augment: %s failed (status %d)\n", cmd, rc);
    return -1;
  }
  *wall_rate = tw;
  return tv;
}

/* One real-worker round: a coordinator and a stoker-worker with `threads`
 * builder threads serving spec (uint8 output) to a client here; images per
 * wall second over `batches` batches after 2 of warm-up, or -1. */
static double worker_round(const stk_job_spec *spec, const char *root, const char *bindir,
                           int threads, int batches) {
  char tbuf[16];
  snprintf(tbuf, sizeof tbuf, "%d", threads);
  char *wextra[] = {"--threads", tbuf, "--data-root", (char *)root, NULL};
  bu_job job;
  if (bu_job_start(&job, spec, bindir, NULL, wextra)) return -1;
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = job.addr;
  cfg.rank = 0;
  cfg.world_size = 1;
  stk_client *cl = NULL;
  char err[512];
  double rate = -1, t0 = 0;
  if (stk_client_open(&cfg, &cl, err, sizeof err)) {
    fprintf(stderr, "client: %s\n", err);
    goto out;
  }
  for (int i = 0; i < batches + 2; i++) {
    if (i == 2) t0 = bu_now_s();
    stk_batch *b;
    int s = stk_client_next(cl, &b);
    if (s == STK_END_OF_EPOCH) { /* the rounds span epochs */
      i--;
      continue;
    }
    if (s != STK_OK) {
      fprintf(stderr, "next: %s: %s\n", stk_strerror(s), stk_client_error(cl));
      goto out;
    }
    stk_batch_release(b);
  }
  rate = (double)batches * spec->batch_size / (bu_now_s() - t0);
  stk_client_finish(cl, 1);
out:
  stk_client_close(cl);
  if (bu_job_stop(&job, rate > 0)) rate = -1;
  return rate;
}

/* Fill f's files for spec s (f->n samples in f->real): the samples of
 * epoch 0's first batches, about nimg images in whole batches (ImageFolder
 * order is sorted classes, sorted files, as bu_list_jpegs), the file
 * listing them and DIR's class count. 0, or -1 with a message; call
 * files_free either way. */
static int files_pick(ba_files *f, const stk_job_spec *s, size_t nimg) {
  uint32_t B = f->B;
  uint64_t per_epoch = stk_steps_per_epoch(s, f->n);
  f->steps = nimg / B ? nimg / B : 1;
  if (f->steps > per_epoch) f->steps = per_epoch;
  f->nall = bu_list_jpegs(f->real, &f->all, f->n);
  if (f->nall != f->n || f->steps == 0) {
    fprintf(stderr,
            "stoker-bench augment: %s: %zu .jpg/.jpeg files one level down, the dataset "
            "has %llu samples (and %u per batch)\n",
            f->real, f->nall, (unsigned long long)f->n, B);
    return -1;
  }
  f->nsel = (size_t)(f->steps * B);
  f->sel = calloc(f->nsel, sizeof(*f->sel));
  uint64_t *idx = calloc(B, sizeof(*idx));
  uint8_t *mask = calloc(B, 1);
  snprintf(f->list, sizeof(f->list), "/tmp/stoker-bench-files-XXXXXX");
  int lfd = mkstemp(f->list);
  if (lfd < 0) f->list[0] = 0;
  FILE *lf = lfd >= 0 ? fdopen(lfd, "w") : NULL;
  if (!f->sel || !idx || !mask || !lf) {
    fprintf(stderr, "stoker-bench augment: out of memory or no temp file\n");
    if (lf) fclose(lf);
    free(idx), free(mask);
    return -1;
  }
  for (uint64_t st = 0; st < f->steps; st++) {
    stk_batch_samples(s, f->n, 0, 0, st, idx, mask);
    for (uint32_t j = 0; j < B; j++) {
      f->sel[st * B + j] = f->all[idx[j]];
      fprintf(lf, "%s/%s\n", f->real, f->all[idx[j]]);
    }
  }
  fclose(lf);
  free(idx), free(mask);
  f->classes = 0; /* the paths are CLASS/FILE, sorted */
  for (size_t i = 0; i < f->nall; i++) {
    size_t len = strcspn(f->all[i], "/");
    if (!i || len != strcspn(f->all[i - 1], "/") ||
        strncmp(f->all[i], f->all[i - 1], len))
      f->classes++;
  }
  return 0;
}

/* Undo files_pick: the list file and the arrays. */
static void files_free(ba_files *f) {
  if (f->list[0]) unlink(f->list);
  for (size_t i = 0; i < f->nall; i++) free(f->all[i]);
  free(f->all), free(f->sel);
  f->all = f->sel = NULL, f->nall = f->nsel = 0, f->list[0] = 0;
}

/* 1 when argv[from..argc) holds a positional argument (not an option and
 * not the value of one of this subcommand's options taking a value). */
static int later_positional(char **argv, int from, int argc) {
  static const char *const valued[] = {"--images", "--batch",    "--rounds",
                                       "--bindir", "--prepared", "--python-path"};
  for (int j = from; j < argc; j++) {
    if (argv[j][0] != '-') return 1;
    for (size_t k = 0; k < sizeof valued / sizeof *valued; k++)
      if (!strcmp(argv[j], valued[k])) {
        j++;
        break;
      }
  }
  return 0;
}

int bench_augment_main(int argc, char **argv) {
  const char *dir = NULL, *bindir = NULL, *pdir = NULL, *pypath = PYOPS_DIR;
  size_t nimg = SIZE_MAX; /* not given */
  uint32_t B = 32;
  int torch = 1, rounds = 3, worker = 0, profile = 0, pyop = 0;
  unsigned recipes = 0;
  setvbuf(stdout, NULL, _IOLBF, 0); /* each round's line as it comes, also into a pipe */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(help, stdout);
      return 0;
    } else if (!strcmp(argv[i], "--images") && i + 1 < argc)
      nimg = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      B = (uint32_t)strtoul(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--bindir") && i + 1 < argc) bindir = argv[++i];
    else if (!strcmp(argv[i], "--prepared") && i + 1 < argc) pdir = argv[++i];
    else if (!strcmp(argv[i], "--no-torch")) torch = 0;
    else if (!strcmp(argv[i], "--worker")) worker = 1;
    else if (!strcmp(argv[i], "--profile")) profile = 1;
    else if (!strcmp(argv[i], "--recipes")) {
      /* an optional list: the next argument when it names recipes only
       * (or names something else, DIR being given already). A name of
       * recipes with no DIR before or after it is DIR (a dataset directory
       * named like a recipe, after a bare --recipes). */
      const char *next = i + 1 < argc && argv[i + 1][0] != '-' ? argv[i + 1] : NULL;
      if (next && !dir && !later_positional(argv, i + 2, argc)) next = NULL;
      if (next && (recipes = ba_recipe_mask(next))) i++;
      else if (next && dir) {
        fprintf(stderr,
                "stoker-bench augment: --recipes %s: the recipes are recipe, base, "
                "tawide, autoaug, augmix, mix (or all)\n",
                next);
        return 2;
      } else recipes = ba_recipe_mask("all");
    } else if (!strcmp(argv[i], "--pyop")) pyop = 1;
    else if (!strcmp(argv[i], "--python-path") && i + 1 < argc) pypath = argv[++i];
    else if (!dir && argv[i][0] != '-') dir = argv[i];
    else {
      fputs(help, stderr);
      return 2;
    }
  }
  if (nimg == SIZE_MAX) nimg = recipes || pyop ? 256 : 1000;
  if (!dir || !nimg || !B || rounds < 1 || rounds > MAX_ROUNDS) {
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
  ba_files f = {.real = real, .root = dirname(parent), .name = basename(base), .B = B};
  f.rounds = rounds, f.torch = torch;
  const char *root = f.root;

  stk_job_spec s;
  ba_spec(&f, &s);
  s.pipeline = STK_PIPELINE_TRAIN;
  s.dtype = STK_DTYPE_FLOAT32;
  s.layout = STK_LAYOUT_NCHW;
  s.height = s.width = 224;
  s.flip_p = 0.5f;
  /* The same pipeline with 8-bit output: what a worker builds for a float
   * job whose client takes the 8-bit wire (libstoker's default). */
  stk_job_spec s8 = s;
  s8.dtype = STK_DTYPE_UINT8;
  stk_dataset *ds;
  char err[512];
  if (stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err))) {
    fprintf(stderr, "stoker-bench augment: %s\n", err);
    return 1;
  }
  f.n = stk_dataset_size(ds);
  if (files_pick(&f, &s, nimg)) {
    files_free(&f);
    return 1;
  }
  full_decode(real, f.sel, f.nsel); /* warm-up: the page cache */
  if (recipes || pyop) {
    int rc = recipes ? ba_recipes(&f, recipes) : 0;
    if (!rc && pyop) rc = ba_pyop(&f, pypath);
    files_free(&f);
    stk_dataset_close(ds);
    return rc;
  }
  uint64_t n = f.n, steps = f.steps;
  size_t nsel = f.nsel;
  char **sel = f.sel;
  stk_builder *b, *b8;
  if (stk_builder_create(ds, &s, &b, err, sizeof(err)) ||
      stk_builder_create(ds, &s8, &b8, err, sizeof(err))) {
    fprintf(stderr, "stoker-bench augment: %s\n", err);
    return 1;
  }
  /* the prepared copy: a dataset of its own under its parent directory */
  stk_dataset *pds = NULL;
  stk_builder *pb = NULL, *pb8 = NULL;
  stk_job_spec ps = s, ps8 = s8;
  if (pdir) {
    char preal[PATH_MAX], pparent[PATH_MAX], pbase[PATH_MAX];
    if (!realpath(pdir, preal)) {
      perror(pdir);
      return 1;
    }
    snprintf(pparent, sizeof(pparent), "%s", preal);
    snprintf(pbase, sizeof(pbase), "%s", preal);
    snprintf(ps.dataset, sizeof(ps.dataset), "%s", basename(pbase));
    snprintf(ps8.dataset, sizeof(ps8.dataset), "%s", ps.dataset);
    if (stk_dataset_open(&ps, dirname(pparent), NULL, &pds, err, sizeof(err)) ||
        stk_builder_create(pds, &ps, &pb, err, sizeof(err)) ||
        stk_builder_create(pds, &ps8, &pb8, err, sizeof(err))) {
      fprintf(stderr, "stoker-bench augment: %s: %s\n", pdir, err);
      return 1;
    }
    if (stk_dataset_size(pds) != n) {
      fprintf(stderr, "stoker-bench augment: %s has %llu samples, %s %llu\n", pdir,
              (unsigned long long)stk_dataset_size(pds), dir, (unsigned long long)n);
      return 1;
    }
  }
  stk_batch_layout L;
  stk_batch_layout_of(&s, &L);
  void *buf = malloc(L.total_bytes);
  memset(buf, 0, L.total_bytes); /* fault the pages in */
  /* Warm-up: the builders (the page cache: above). */
  stk_build_info info;
  stk_builder_build(b, 0, 0, 0, buf, L.total_bytes, &info);
  stk_builder_build(b8, 0, 0, 0, buf, L.total_bytes, &info);
  if (pb) stk_builder_build(pb, 0, 0, 0, buf, L.total_bytes, &info);
  if (pb8) stk_builder_build(pb8, 0, 0, 0, buf, L.total_bytes, &info);

  printf(
      "stoker-bench augment: %s, %llu samples; %zu images per round (%llu batches of "
      "%u), %d rounds, one thread each\n",
      real, (unsigned long long)n, nsel, (unsigned long long)steps, B, rounds);
  printf("images/s per CPU second of one thread (wall-clock rate in brackets):\n");
  double ours[MAX_ROUNDS], full[MAX_ROUNDS], tv[MAX_ROUNDS], rf[MAX_ROUNDS],
      rt[MAX_ROUNDS], ours8[MAX_ROUNDS], rf8[MAX_ROUNDS], rt8[MAX_ROUNDS],
      prep[MAX_ROUNDS], prep8[MAX_ROUNDS], rp[MAX_ROUNDS], rp8[MAX_ROUNDS],
      rpo[MAX_ROUNDS];
  uint64_t subst = 0;
  int have_tv = torch;
  for (int r = 0; r < rounds; r++) {
    double ow = 0, ow8 = 0, fw = 0, tw = 0;
    ours[r] = ba_pipeline_round(b, &f, buf, L.total_bytes, &ow, &subst);
    ours8[r] = ba_pipeline_round(b8, &f, buf, L.total_bytes, &ow8, &subst);
    if (ours[r] < 0 || ours8[r] < 0) return 1;
    double pw = 0, pw8 = 0;
    if (pb) {
      prep[r] = ba_pipeline_round(pb, &f, buf, L.total_bytes, &pw, &subst);
      prep8[r] = ba_pipeline_round(pb8, &f, buf, L.total_bytes, &pw8, &subst);
      if (prep[r] < 0 || prep8[r] < 0) return 1;
    }
    full[r] = full_decode(real, sel, nsel);
    fw = last_wall_rate;
    tv[r] = have_tv ? ba_torch_round(&f, NULL, &tw) : 0;
    if (tv[r] <= 0) have_tv = 0;
    rf[r] = ours[r] / full[r];
    rt[r] = have_tv ? ours[r] / tv[r] : 0;
    rf8[r] = ours8[r] / full[r];
    rt8[r] = have_tv ? ours8[r] / tv[r] : 0;
    printf("  round %d: stoker %7.1f (%.1f) | u8 %7.1f (%.1f) | full decode %7.1f (%.1f)",
           r + 1, ours[r], ow, ours8[r], ow8, full[r], fw);
    if (pb) {
      rp[r] = prep[r] / full[r], rp8[r] = prep8[r] / full[r], rpo[r] = prep[r] / ours[r];
      printf(" | prepared %7.1f (%.1f) u8 %7.1f (%.1f) | prepared/full %.2fx (u8 %.2fx)",
             prep[r], pw, prep8[r], pw8, rp[r], rp8[r]);
    }
    if (have_tv) printf(" | torchvision %6.1f (%.1f)", tv[r], tw);
    printf(" | stoker/full %.2fx (u8 %.2fx)", rf[r], rf8[r]);
    if (have_tv) printf(", stoker/torchvision %.2fx (u8 %.2fx)", rt[r], rt8[r]);
    printf("\n");
  }
  if (profile) {
    stk_builder *pbs[4] = {b, b8, pb, pb8};
    const char *cols[4] = {"f32", "u8", "prepared f32", "prepared u8"};
    if (profile_rounds(pbs, cols, pb ? 4 : 2, &f, buf, L.total_bytes)) return 1;
  }
  int io = stk_builder_io_mode(b);
  stk_builder_destroy(b);
  stk_builder_destroy(b8);
  stk_dataset_close(ds);
  stk_builder_destroy(pb);
  stk_builder_destroy(pb8);
  if (pds) stk_dataset_close(pds);
  free(buf);
  printf("median of %d rounds [%llu substituted, %s]:\n", rounds,
         (unsigned long long)subst, io == 2 ? "io_uring" : "pread");
  printf("  stoker RandomResizedCrop(224)+flip+Normalize f32 NCHW: %8.1f\n",
         bu_median(ours, rounds));
  printf("  the same, uint8 NCHW (a worker's work on the 8-bit wire): %7.1f\n",
         bu_median(ours8, rounds));
  printf("  libjpeg-turbo full-size decode (TurboJPEG, RGB):       %8.1f\n",
         bu_median(full, rounds));
  if (have_tv)
    printf("  torchvision RandomResizedCrop+Flip+ToTensor+Normalize: %8.1f\n",
           bu_median(tv, rounds));
  else if (torch)
    printf("  torchvision: not available (python3-torchvision not installed)\n");
  printf(
      "ratio stoker / full decode:  %.2fx (median of the per-round ratios %.2fx; "
      "target >= 1.3x)\n",
      bu_median(ours, rounds) / bu_median(full, rounds), bu_median(rf, rounds));
  printf("  uint8 output:               %.2fx (per-round %.2fx)\n",
         bu_median(ours8, rounds) / bu_median(full, rounds), bu_median(rf8, rounds));
  if (pb) {
    printf("  stoker on the prepared files, f32: %8.1f, uint8: %8.1f\n",
           bu_median(prep, rounds), bu_median(prep8, rounds));
    printf(
        "ratio stoker on prepared files / full decode of the originals: %.2fx (per-round "
        "%.2fx; u8 %.2fx); prepared / original files %.2fx\n",
        bu_median(prep, rounds) / bu_median(full, rounds), bu_median(rp, rounds),
        bu_median(rp8, rounds), bu_median(rpo, rounds));
  }
  if (have_tv) {
    printf(
        "ratio stoker / torchvision:  %.2fx (median of the per-round ratios %.2fx; "
        "target >= 4x)\n",
        bu_median(ours, rounds) / bu_median(tv, rounds), bu_median(rt, rounds));
    printf("  uint8 output:               %.2fx (per-round %.2fx)\n",
           bu_median(ours8, rounds) / bu_median(tv, rounds), bu_median(rt8, rounds));
  }
  files_free(&f);

  if (worker) {
    /* The same pipeline with uint8 output (4x fewer bytes for the client
     * here to take in: it shares the cores with the builders), enough
     * epochs for every round. */
    stk_job_spec ws = s;
    ws.dtype = STK_DTYPE_UINT8;
    snprintf(ws.name, sizeof ws.name, "bench-augment");
    int wb = 3 * (int)steps; /* batches per round: long enough that the
                                 start of each job's stream does not count */
    uint64_t per_epoch = stk_steps_per_epoch(&ws, n);
    ws.epochs = (uint32_t)((uint64_t)(wb + 2) / per_epoch + 1);
    double w1[MAX_ROUNDS], w2[MAX_ROUNDS], wx[MAX_ROUNDS];
    printf(
        "real worker, train pipeline to uint8 NCHW, %d batches of %u per round "
        "(images/s, wall clock, received by the client):\n",
        wb, B);
    for (int r = 0; r < rounds; r++) {
      w1[r] = worker_round(&ws, root, bindir, 1, wb);
      w2[r] = worker_round(&ws, root, bindir, 2, wb);
      if (w1[r] <= 0 || w2[r] <= 0) return 1;
      wx[r] = w2[r] / w1[r];
      printf("  round %d: 1 thread %7.1f | 2 threads %7.1f | 2/1 %.2fx\n", r + 1, w1[r],
             w2[r], wx[r]);
    }
    printf(
        "median of %d rounds: 1 thread %.1f, 2 threads %.1f images/s; 2/1 %.2fx "
        "(median of the per-round ratios %.2fx; target >= 1.8x on %ld cores)\n",
        rounds, bu_median(w1, rounds), bu_median(w2, rounds),
        bu_median(w2, rounds) / bu_median(w1, rounds), bu_median(wx, rounds),
        sysconf(_SC_NPROCESSORS_ONLN));
  }
  return 0;
}
