/* augment_internal.h - what dataset.c and batch.c offer the sources, and nothing
 * outside augment/ may use: the dataset and builder structs, the source
 * vtable through which each dataset kind (synthetic, ImageFolder, tar
 * shards, Megatron token data) plugs in, and the seeding of a batch's
 * generators.
 */
#ifndef STOKER_AUGMENT_INTERNAL_H
#define STOKER_AUGMENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/augment.h"

struct stk_op_info;
struct stk__op;

#define STK_SKIPPED_EXAMPLES 8 /* skipped files a dataset names */

/* A plugin library the job names (plugin.c), loaded at open. */
typedef struct stk__plugin {
  char name[32];
  void *handle; /* dlopen's */
  const struct stk_op_info *info;
} stk__plugin;

struct stk_dataset {
  stk_job_spec spec; /* as opened; num_samples resolved to n */
  stk_limits limits; /* defaults filled in */
  char root[4096];   /* data root, "" for synthetic */
  uint64_t n;        /* samples */
  uint64_t fingerprint;
  const struct stk__source_ops *ops;
  void *impl;               /* the source's own index */
  stk_bad_sample_fn log_fn; /* stk_dataset_set_log; NULL = silent */
  void *log_ud;
  stk__plugin *plugins; /* the job's plugin libraries, loaded at open */
  uint32_t nplugins;
  char python_path[4096]; /* python ops' module path (ops_python.c), "" none */
  /* ImageFolder: the class folder names in label order (set by its open,
   * freed by stk_dataset_close); NULL and 0 for other sources. */
  char **classes;
  uint32_t nclasses;
  /* ImageFolder: files that are not samples (stk_dataset_skipped_files)
   * and the first few, "path: why" in byte order (freed at close). */
  uint64_t nskipped;
  char *skipped[STK_SKIPPED_EXAMPLES];
};

struct stk_builder {
  stk_dataset *ds;
  stk_job_spec spec; /* ds->spec with the caller's pipeline fields */
  stk_batch_layout layout;
  uint64_t *indices; /* batch_size sample indices of the batch */
  uint8_t *mask;     /* batch_size validity flags */
  uint64_t *filled;  /* per slot: the sample whose pixels the source put
                        there (indices[k], or its substitute), for labels */
  uint64_t pos0;     /* epoch position of indices[0]; slot j is at
                        (pos0 + j) mod n, for substitution */
  void *impl;        /* the source's per-thread state */
  /* the job's batch op (mixup, cutmix), run by batch.c after the source
   * filled the batch; set by the source's builder_init (the op lives in
   * its state), NULL for none */
  const struct stk__op *batch_op;
  int io_mode; /* 1 pread, 2 io_uring, 0 no files */
  /* the last error; after a build with stk_build_info.user_code > 0, the
   * first such sample's path and its op's error with the traceback */
  char err[3072];
};

/* A dataset kind. open fills ds->n, ds->fingerprint and ds->impl (message in
 * err on failure); build fills the tensors of b->indices other than index,
 * mask and label, which batch.c writes when the layout has them (and runs
 * b->batch_op after), sets b->filled, and counts substituted samples in
 * info. label gives sample i's label (NULL: the source has no label
 * tensor, build fills its own tensors). */
typedef struct stk__source_ops {
  const char *name;
  int (*open)(stk_dataset *ds, char *err, size_t errlen);
  void (*close)(stk_dataset *ds);
  int (*builder_init)(stk_builder *b, char *err, size_t errlen);
  void (*builder_free)(stk_builder *b);
  int (*build)(stk_builder *b, uint64_t epoch, unsigned char *buf, stk_build_info *info);
  uint64_t (*bad_samples)(const stk_dataset *ds); /* NULL: none can be bad */
  int64_t (*label)(const stk_builder *b, uint64_t i);
} stk__source_ops;

/* Each source file defines its own table. */
extern const stk__source_ops stk__synthetic_source;   /* synthetic.c */
extern const stk__source_ops stk__imagefolder_source; /* source_folder.c */
extern const stk__source_ops stk__tar_source;         /* source_tar.c */
extern const stk__source_ops stk__megatron_source;    /* source_megatron.c */

/* Every generator a batch draws from, seeded here alone: view `view` of
 * sample `key` (the sample index; view 0 keeps the job's seed,
 * stk__view_seed), or with view = STK__RNG_BATCH the batch's own
 * generator (stk__batch_seed) at epoch position `key` (the batch's first
 * slot, or a row's in pair and elem modes: ops_mix.c). Of epoch `epoch`
 * of a job seeded `seed`. Pure; thread-safe. */
#define STK__RNG_BATCH UINT32_MAX
void stk__rng_seed(stk_rng *r, uint64_t seed, uint32_t view, uint64_t epoch,
                   uint64_t key);

#endif
