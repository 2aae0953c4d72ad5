/* dataset.c - opening a dataset: resolves the spec, picks the source
 * kind, loads the job's plugins and checks its python ops; the dataset's
 * queries and close. Batches are built in batch.c.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "augment_internal.h"
#include "ops_python.h"
#include "plugin.h"

static void limits_defaults(stk_limits *l) {
  if (!l->max_file_bytes) l->max_file_bytes = 64ull << 20;
  if (!l->max_pixels) l->max_pixels = 100ull * 1000 * 1000;
  if (!l->max_dimension) l->max_dimension = 32768;
  if (!l->max_scans) l->max_scans = 500;
  if (!l->max_decoder_bytes) l->max_decoder_bytes = 512ull << 20;
}

/* The job's python ops (ops_python.c): the Python path kept (the
 * caller's limits are read during open only), and every op's module and
 * function found once, so that a missing one refuses the job here. */
static int python_ops_check(stk_dataset *ds, char *err, size_t errlen) {
  const char *path = stk__pyop_path(ds->limits.python_path);
  ds->limits.python_path = NULL;
  if (path && strlen(path) >= sizeof(ds->python_path))
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "Python path too long");
  snprintf(ds->python_path, sizeof(ds->python_path), "%s", path ? path : "");
  if (ds->spec.pipeline != STK_PIPELINE_CHAIN) return STK_OK;
  static _Thread_local stk__chain c;
  int rc = stk__chain_parse(ds->spec.chain, &c, NULL, err, errlen);
  return rc ? rc : stk__pyop_check(&c, ds->python_path, err, errlen);
}

int stk_dataset_open(const stk_job_spec *spec, const char *data_root,
                     const stk_limits *limits, stk_dataset **out, char *err,
                     size_t errlen) {
  *out = NULL;
  int rc = stk_job_spec_validate(spec, err, errlen);
  if (rc) return rc;
  /* validate admits these four kinds only */
  const stk__source_ops *ops =
      spec->source == STK_SOURCE_TAR           ? &stk__tar_source
      : spec->source == STK_SOURCE_IMAGEFOLDER ? &stk__imagefolder_source
      : spec->source == STK_SOURCE_MEGATRON    ? &stk__megatron_source
                                               : &stk__synthetic_source;
  if (spec->source != STK_SOURCE_SYNTHETIC) {
    if (!data_root || !*data_root) {
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                       "a file dataset needs a data root (--data-root)");
    }
    if (strlen(data_root) >= sizeof(((stk_dataset *)0)->root)) {
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "data root path too long");
    }
  }
  stk_dataset *ds = calloc(1, sizeof(*ds));
  if (!ds) return STK_NO_MEMORY;
  ds->spec = *spec;
  if (limits) ds->limits = *limits;
  limits_defaults(&ds->limits);
  if (data_root) snprintf(ds->root, sizeof(ds->root), "%s", data_root);
  ds->ops = ops;
  rc = stk__plugins_load(ds, err, errlen);
  if (!rc) rc = python_ops_check(ds, err, errlen);
  if (rc) {
    stk__plugins_unload(ds);
    free(ds);
    return rc;
  }
  rc = ops->open(ds, err, errlen);
  if (rc) {
    stk__plugins_unload(ds);
    free(ds);
    return rc;
  }
  if (spec->num_samples && spec->num_samples != ds->n &&
      spec->source != STK_SOURCE_SYNTHETIC) {
    stk__errf(err, errlen, 0, "job says num_samples = %llu but the dataset has %llu",
              (unsigned long long)spec->num_samples, (unsigned long long)ds->n);
    stk_dataset_close(ds);
    return STK_MISMATCH;
  }
  ds->spec.num_samples = ds->n;
  if (ds->nclasses && !ds->spec.num_classes) ds->spec.num_classes = ds->nclasses;
  if (stk_steps_per_epoch(&ds->spec, ds->n) == 0) {
    stk__errf(err, errlen, 0,
              "%llu samples give no full step of world_size*batch_size = %llu",
              (unsigned long long)ds->n,
              (unsigned long long)spec->world_size * spec->batch_size);
    stk_dataset_close(ds);
    return STK_INVALID_ARGUMENT;
  }
  *out = ds;
  return STK_OK;
}

uint64_t stk_dataset_size(const stk_dataset *ds) { return ds ? ds->n : 0; }
uint64_t stk_dataset_fingerprint(const stk_dataset *ds) {
  return ds ? ds->fingerprint : 0;
}

void stk_dataset_set_log(stk_dataset *ds, stk_bad_sample_fn fn, void *ud) {
  if (!ds) return;
  ds->log_fn = fn;
  ds->log_ud = ud;
}

uint64_t stk_dataset_bad_samples(const stk_dataset *ds) {
  if (!ds || !ds->ops->bad_samples) return 0;
  return ds->ops->bad_samples(ds);
}

uint32_t stk_dataset_num_classes(const stk_dataset *ds) { return ds ? ds->nclasses : 0; }

const char *stk_dataset_class_name(const stk_dataset *ds, uint32_t i) {
  return ds && i < ds->nclasses ? ds->classes[i] : NULL;
}

uint64_t stk_dataset_skipped_files(const stk_dataset *ds) {
  return ds ? ds->nskipped : 0;
}

const char *stk_dataset_skipped_file(const stk_dataset *ds, uint32_t i) {
  return ds && i < STK_SKIPPED_EXAMPLES ? ds->skipped[i] : NULL;
}

void stk_dataset_close(stk_dataset *ds) {
  if (!ds) return;
  ds->ops->close(ds);
  stk__plugins_unload(ds);
  for (uint32_t i = 0; i < ds->nclasses; i++) free(ds->classes[i]);
  free(ds->classes);
  for (int i = 0; i < STK_SKIPPED_EXAMPLES; i++) free(ds->skipped[i]);
  free(ds);
}
