/* bench_recipes.c - `stoker-bench augment DIR --recipes` and `--pyop`.
 *
 * --recipes: the recipe chains, each built in this process by one
 * stk_builder (float32 NCHW, one thread) over the files of a round, against
 * torchvision's same Compose on the same files (torchvision_baseline.py
 * --recipe NAME: one thread, after a warm-up pass); in each round every
 * recipe runs, stoker then torchvision. Images per CPU second (and per
 * wall second), per-round ratios, then medians. `mix` is timm's recipe
 * with `| mixup_cutmix(0.8, 1.0)` on each batch (soft targets over DIR's
 * classes), against the Compose, torch.stack and timm's Mixup formula.
 *
 * --pyop: a python op against the C op doing the same (invert): the chains
 * `decode | resize(224, 224)`, the same `| invert` and the same
 * `| python(stk_test_ops:invert)`, uint8 NHWC, one builder each, one
 * warm-up round (the python op's process starts in it) then alternating
 * rounds: wall and CPU microseconds per image (CPU: this thread plus the
 * python op's process, read from /proc), each chain's cost over the base
 * chain and python - C.
 *
 * It owns its datasets and builders; bench_augment.c parses the options
 * and picks the files (bench_augment.h). It prints, it does not check.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_augment.h"
#include "bench_util.h"

#define TIMM_RECIPE                                                                   \
  "random_resized_crop(224) | hflip(0.5) | rand_augment(2, 9) | normalize(imagenet) " \
  "| random_erasing(0.25)"

/* Each name is also a torchvision_baseline.py --recipe, the same Compose. */
static const struct {
  const char *name, *chain;
} recipes[] = {
    {"recipe", TIMM_RECIPE}, /* timm's ImageNet recipe */
    {"base", "random_resized_crop(224) | hflip(0.5) | normalize(imagenet)"},
    /* torchvision's ResNet-50 v2 image part */
    {"tawide",
     "random_resized_crop(176) | hflip(0.5) | trivial_augment_wide | normalize(imagenet) "
     "| random_erasing(0.1)"},
    {"autoaug",
     "random_resized_crop(224) | hflip(0.5) | auto_augment | normalize(imagenet)"},
    {"augmix", "random_resized_crop(224) | hflip(0.5) | aug_mix | normalize(imagenet)"},
    {"mix", TIMM_RECIPE " | mixup_cutmix(0.8, 1.0)"}, /* a batch op: soft targets */
};
enum { NRECIPES = sizeof(recipes) / sizeof(recipes[0]) };

unsigned ba_recipe_mask(const char *list) {
  if (!strcmp(list, "all")) return (1u << NRECIPES) - 1;
  unsigned mask = 0;
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    int k = 0;
    while (k < NRECIPES &&
           (strlen(recipes[k].name) != len || strncmp(p, recipes[k].name, len)))
      k++;
    if (k == NRECIPES) return 0;
    mask |= 1u << k;
    p += len + (p[len] == ',');
  }
  return mask;
}

/* One chain's builder over f's files: its dataset, builder and batch
 * buffer. */
typedef struct chain_builder {
  stk_dataset *ds;
  stk_builder *b;
  void *buf;
  size_t bytes;
} chain_builder;

/* Open c: chain with output dtype/layout over f's files (lim: the python
 * path, or NULL), warmed up by one batch. 0, or -1 with the error printed;
 * chain_close undoes it either way. */
static int chain_open(chain_builder *c, const ba_files *f, const char *chain,
                      const char *dtype, const char *layout, const stk_limits *lim) {
  stk_job_spec s;
  char err[512];
  memset(c, 0, sizeof(*c));
  ba_spec(f, &s);
  if (stk_job_spec_set(&s, "pipeline", chain, err, sizeof(err)) ||
      stk_job_spec_set(&s, "dtype", dtype, err, sizeof(err)) ||
      stk_job_spec_set(&s, "layout", layout, err, sizeof(err)))
    goto fail;
  if (strstr(chain, "mixup") || strstr(chain, "cutmix")) s.num_classes = f->classes;
  if (stk_job_spec_validate(&s, err, sizeof(err)) ||
      stk_dataset_open(&s, f->root, lim, &c->ds, err, sizeof(err)) ||
      stk_builder_create(c->ds, &s, &c->b, err, sizeof(err)))
    goto fail;
  stk_batch_layout L;
  stk_batch_layout_of(&s, &L);
  c->bytes = L.total_bytes;
  if (!(c->buf = malloc(c->bytes))) {
    snprintf(err, sizeof(err), "out of memory");
    goto fail;
  }
  memset(c->buf, 0, c->bytes); /* fault the pages in */
  stk_build_info info;         /* warm-up: one batch */
  if (stk_builder_build(c->b, 0, 0, 0, c->buf, c->bytes, &info)) {
    snprintf(err, sizeof(err), "%s", stk_builder_error(c->b));
    goto fail;
  }
  return 0;
fail:
  fprintf(stderr, "stoker-bench augment: %s: %s\n", chain, err);
  return -1;
}

static void chain_close(chain_builder *c) {
  stk_builder_destroy(c->b);
  if (c->ds) stk_dataset_close(c->ds);
  free(c->buf);
  memset(c, 0, sizeof(*c));
}

/* The load average over 1, 5 and 15 minutes, "l1 l5 l15", in buf. */
static const char *loadavg(char buf[64]) {
  double l[3];
  FILE *fp = fopen("/proc/loadavg", "r");
  if (fp && fscanf(fp, "%lf %lf %lf", &l[0], &l[1], &l[2]) == 3)
    snprintf(buf, 64, "%.2f %.2f %.2f", l[0], l[1], l[2]);
  else snprintf(buf, 64, "?");
  if (fp) fclose(fp);
  return buf;
}

/* The smallest and the largest of v[0..n). */
static void range_of(const double *v, int n, double *lo, double *hi) {
  *lo = *hi = v[0];
  for (int i = 1; i < n; i++) {
    if (v[i] < *lo) *lo = v[i];
    if (v[i] > *hi) *hi = v[i];
  }
}

int ba_recipes(const ba_files *f, unsigned mask) {
  static double st[NRECIPES][BA_MAX_ROUNDS], tv[NRECIPES][BA_MAX_ROUNDS],
      ratio[NRECIPES][BA_MAX_ROUNDS];
  chain_builder cb[NRECIPES];
  char load[64];
  int rc = 1, have_tv = f->torch;
  uint64_t subst = 0;
  memset(cb, 0, sizeof(cb));
  for (int k = 0; k < NRECIPES; k++)
    if ((mask >> k & 1) &&
        chain_open(&cb[k], f, recipes[k].chain, "float32", "nchw", NULL))
      goto out;
  printf(
      "stoker-bench augment --recipes: %s, %llu samples; %zu images per round (%llu "
      "batches of %u), %d rounds, one thread each; stoker's chain (float32 NCHW) against "
      "torchvision's same Compose (torchvision_baseline.py --recipe NAME, after a "
      "warm-up "
      "pass), on the same files; load average %s:\n",
      f->real, (unsigned long long)f->n, f->nsel, (unsigned long long)f->steps, f->B,
      f->rounds, loadavg(load));
  for (int k = 0; k < NRECIPES; k++)
    if (mask >> k & 1) printf("  %-8s %s\n", recipes[k].name, recipes[k].chain);
  printf("images/s per CPU second of one thread (wall-clock rate in brackets):\n");
  for (int r = 0; r < f->rounds; r++)
    for (int k = 0; k < NRECIPES; k++) {
      if (!(mask >> k & 1)) continue;
      double sw = 0, tw = 0;
      st[k][r] = ba_pipeline_round(cb[k].b, f, cb[k].buf, cb[k].bytes, &sw, &subst);
      if (st[k][r] < 0) goto out;
      if (have_tv) {
        tv[k][r] = ba_torch_round(f, recipes[k].name, &tw);
        if (tv[k][r] < 0) goto out;
        if (tv[k][r] == 0) have_tv = 0; /* missing: said once, after the rounds */
      }
      printf("  round %d %-8s stoker %7.1f (%.1f)", r + 1, recipes[k].name, st[k][r], sw);
      if (have_tv) {
        ratio[k][r] = st[k][r] / tv[k][r];
        printf(" | torchvision %6.1f (%.1f) | stoker/torchvision %.2fx", tv[k][r], tw,
               ratio[k][r]);
      }
      printf("\n");
    }
  printf(
      "median of %d rounds, images/s per CPU second [%llu substituted; load average now "
      "%s]:\n",
      f->rounds, (unsigned long long)subst, loadavg(load));
  for (int k = 0; k < NRECIPES; k++) {
    if (!(mask >> k & 1)) continue;
    double s = bu_median(st[k], f->rounds);
    printf("  %-8s stoker %7.1f", recipes[k].name, s);
    if (have_tv) {
      double t = bu_median(tv[k], f->rounds), lo, hi;
      range_of(ratio[k], f->rounds, &lo, &hi);
      printf(
          " | torchvision %6.1f | ratio of medians %.2fx, median of the per-round ratios "
          "%.2fx (%.2f-%.2f)",
          t, s / t, bu_median(ratio[k], f->rounds), lo, hi);
    }
    printf("\n");
  }
  if (!have_tv)
    printf("  torchvision: %s; stoker's rates only\n",
           f->torch ? "not available (python3-torchvision not installed)"
                    : "not run (--no-torch)");
  rc = 0;
out:
  for (int k = 0; k < NRECIPES; k++) chain_close(&cb[k]);
  return rc;
}

/* CPU seconds of this thread's live child processes (the python op's
 * runner, which the builder on this thread starts), from
 * /proc/self/task/TID/children. */
static double children_cpu_s(void) {
  char path[96];
  snprintf(path, sizeof path, "/proc/self/task/%d/children",
           (int)getpid()); /* the builders run on the main thread */
  FILE *fp = fopen(path, "r");
  double sum = 0;
  int pid;
  while (fp && fscanf(fp, "%d", &pid) == 1) sum += bu_proc_cpu_s(pid);
  if (fp) fclose(fp);
  return sum;
}

int ba_pyop(const ba_files *f, const char *python_path) {
  static const char *const chains[3] = {
      "decode | resize(224, 224)",
      "decode | resize(224, 224) | invert",
      "decode | resize(224, 224) | python(stk_test_ops:invert)",
  };
  static const char *const names[3] = {"base", "c", "python"};
  double us[3][BA_MAX_ROUNDS], cpu[3][BA_MAX_ROUNDS], imgs = (double)f->nsel;
  char load[64];
  stk_limits lim;
  memset(&lim, 0, sizeof(lim));
  lim.python_path = python_path;
  chain_builder cb[3];
  int rc = 1;
  uint64_t subst = 0;
  memset(cb, 0, sizeof(cb));
  for (int k = 0; k < 3; k++)
    if (chain_open(&cb[k], f, chains[k], "uint8", "nhwc", &lim)) goto out;
  printf(
      "stoker-bench augment --pyop: %s; %zu images per round (%llu batches of %u, "
      "224x224 uint8 NHWC), %d rounds after a warm-up round, one builder per chain, "
      "alternating; python ops from %s; load average %s\n",
      f->real, f->nsel, (unsigned long long)f->steps, f->B, f->rounds, python_path,
      loadavg(load));
  for (int k = 0; k < 3; k++) printf("  %-7s %s\n", names[k], chains[k]);
  printf(
      "microseconds per image, wall and CPU (this thread plus the python op's "
      "process):\n");
  for (int r = -1; r < f->rounds; r++) {
    for (int k = 0; k < 3; k++) {
      double wall, c0 = bu_thread_cpu_s() + children_cpu_s(), w0 = bu_now_s();
      if (ba_pipeline_round(cb[k].b, f, cb[k].buf, cb[k].bytes, &wall, &subst) < 0)
        goto out;
      if (r < 0) continue;
      us[k][r] = (bu_now_s() - w0) * 1e6 / imgs;
      cpu[k][r] = (bu_thread_cpu_s() + children_cpu_s() - c0) * 1e6 / imgs;
    }
    if (r < 0) continue;
    printf("  round %d:", r + 1);
    for (int k = 0; k < 3; k++)
      printf("%s %s %7.1f wall %7.1f CPU", k ? " |" : "", names[k], us[k][r], cpu[k][r]);
    printf(" | python - c %+7.1f CPU\n", cpu[2][r] - cpu[1][r]);
  }
  double med[3], mc[3];
  printf("median of %d rounds, per image [%llu substituted; load average now %s]:\n",
         f->rounds, (unsigned long long)subst, loadavg(load));
  for (int k = 0; k < 3; k++) {
    med[k] = bu_median(us[k], f->rounds);
    mc[k] = bu_median(cpu[k], f->rounds);
    printf("  %-7s %8.1f us wall, %8.1f us CPU\n", names[k], med[k], mc[k]);
  }
  printf("  C op invert:      %+8.1f us wall, %+8.1f us CPU over base\n", med[1] - med[0],
         mc[1] - mc[0]);
  printf("  python op invert: %+8.1f us wall, %+8.1f us CPU over base\n", med[2] - med[0],
         mc[2] - mc[0]);
  printf("  python - C:       %+8.1f us wall, %+8.1f us CPU\n", med[2] - med[1],
         mc[2] - mc[1]);
  rc = 0;
out:
  for (int k = 0; k < 3; k++) chain_close(&cb[k]);
  return rc;
}
