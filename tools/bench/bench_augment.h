/* bench_augment.h - what the two files of `stoker-bench augment` share:
 * bench_augment.c (the options, the files a round builds, the train
 * pipeline against a full decode and torchvision, --worker, --profile)
 * and bench_recipes.c (--recipes: the recipe chains against torchvision's
 * same Compose; --pyop: a python op against its C twin).
 *
 * Single-threaded use: call from the bench's main thread.
 */
#ifndef STOKER_BENCH_AUGMENT_H
#define STOKER_BENCH_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/augment.h"

enum { BA_MAX_ROUNDS = 15 };

/* The files a round builds: the samples of epoch 0's first `steps`
 * batches of a job over DIR (ImageFolder order: sorted classes, sorted
 * files). bench_augment.c fills it and owns its memory. */
typedef struct ba_files {
  const char *real; /* DIR, resolved */
  const char *root; /* its parent: stk_dataset_open's root */
  const char *name; /* its last component: the spec's dataset */
  uint64_t n;       /* samples in DIR */
  uint64_t steps;   /* batches per round */
  uint32_t B;       /* samples per batch */
  uint32_t classes; /* class folders of DIR */
  char **sel;       /* the steps * B files, relative to real, in batch order */
  size_t nsel;      /* steps * B */
  char list[64];    /* a file naming them (full paths), one a line; "": none */
  int rounds;       /* alternating rounds, 1..BA_MAX_ROUNDS */
  int torch;        /* 0: --no-torch */
  char **all;       /* DIR's files (sel points into them) */
  size_t nall;
} ba_files;

/* A job spec over f's dataset that picks f's samples (source, dataset,
 * batch size, seed 1), every other key at its default: set the pipeline
 * and the dtype on it. */
void ba_spec(const ba_files *f, stk_job_spec *s);

/* One round of a builder: f->steps batches of epoch 0 into buf (bytes):
 * images per CPU second of this thread (*wall_rate: per wall second;
 * *subst: += the samples substituted), or -1 on a build error (printed). */
double ba_pipeline_round(stk_builder *b, const ba_files *f, void *buf, size_t bytes,
                         double *wall_rate, uint64_t *subst);

/* One run of torchvision_baseline.py over f's files (recipe NULL: the
 * train pipeline's Compose; else --recipe recipe, in batches of f->B):
 * images per CPU second (*wall_rate: per wall second); 0 when torch or
 * torchvision is missing (exit 77), -1 on another failure. What the
 * script prints besides its figures is passed on, each line prefixed
 * with "  torchvision: ". */
double ba_torch_round(const ba_files *f, const char *recipe, double *wall_rate);

/* --recipes: the recipes named in mask (bits of ba_recipe_mask), f->rounds
 * alternating rounds against torchvision. 0, or 1 on an error (printed). */
int ba_recipes(const ba_files *f, unsigned mask);
/* The recipes a comma-separated list names ("all": every one) as a bit
 * mask, or 0 when one of the names is unknown. */
unsigned ba_recipe_mask(const char *list);

/* --pyop: base / C invert / python(stk_test_ops:invert) over f's files,
 * uint8 NHWC, f->rounds alternating rounds after one warm-up round; the
 * python op's module is imported from python_path. 0, or 1 on an error. */
int ba_pyop(const ba_files *f, const char *python_path);

#endif
