/* dataset.c - opening a dataset and the generic batch builder: resolves the
 * spec, picks the source kind, computes each batch's samples from its
 * address and lets the source fill images and labels.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "internal.h"
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

int stk_builder_create(stk_dataset *ds, const stk_job_spec *spec, stk_builder **out,
                       char *err, size_t errlen) {
  *out = NULL;
  stk_builder *b = calloc(1, sizeof(*b));
  if (!b) return STK_NO_MEMORY;
  b->ds = ds;
  b->spec = *spec;
  b->spec.num_samples = ds->n;
  int rc = stk_batch_layout_of(&b->spec, &b->layout);
  if (rc) {
    stk__errf(err, errlen, 0, "invalid job spec");
    free(b);
    return rc;
  }
  b->indices = calloc(spec->batch_size, sizeof(uint64_t));
  b->mask = calloc(spec->batch_size, 1);
  if (!b->indices || !b->mask) {
    free(b->indices);
    free(b->mask);
    free(b);
    return STK_NO_MEMORY;
  }
  rc = ds->ops->builder_init(b, err, errlen);
  if (rc) {
    free(b->indices);
    free(b->mask);
    free(b);
    return rc;
  }
  *out = b;
  return STK_OK;
}

int stk_builder_build(stk_builder *b, uint64_t epoch, uint32_t rank, uint64_t step,
                      void *buf, size_t len, stk_build_info *info) {
  return stk_builder_build_at(b, epoch, 0, rank, step, buf, len, info);
}

int stk_builder_build_at(stk_builder *b, uint64_t epoch, uint64_t offset, uint32_t rank,
                         uint64_t step, void *buf, size_t len, stk_build_info *info) {
  stk_build_info local;
  if (!info) info = &local;
  memset(info, 0, sizeof(*info));
  b->err[0] = 0;
  if (len < b->layout.total_bytes) {
    snprintf(b->err, sizeof(b->err), "buffer of %zu bytes < batch of %llu", len,
             (unsigned long long)b->layout.total_bytes);
    return STK_INVALID_ARGUMENT;
  }
  if (stk_batch_samples_at(&b->spec, b->ds->n, epoch, offset, rank, step, b->indices,
                           b->mask) != STK_OK) {
    snprintf(b->err, sizeof(b->err),
             "address (epoch %llu, rank %u, step %llu, sample offset %llu) is outside "
             "the job",
             (unsigned long long)epoch, rank, (unsigned long long)step,
             (unsigned long long)offset);
    return STK_INVALID_ARGUMENT;
  }
  b->pos0 = offset + (step * b->spec.world_size + rank) * (uint64_t)b->spec.batch_size;
  unsigned char *p = buf;
  /* index and mask are looked up by name: token jobs may have no mask and
   * no index tensor (core/layout.c) */
  int ti = stk_batch_layout_find(&b->layout, "index");
  int tm = stk_batch_layout_find(&b->layout, "mask");
  for (uint32_t j = 0; ti >= 0 && j < b->spec.batch_size; j++) {
    int64_t v = (int64_t)b->indices[j];
    memcpy(p + b->layout.tensors[ti].offset + 8ull * j, &v, 8);
  }
  if (tm >= 0) memcpy(p + b->layout.tensors[tm].offset, b->mask, b->spec.batch_size);
  /* Zero the alignment padding so the payload (and its crc) is a function
   * of the address alone. */
  for (uint32_t t = 0; t < b->layout.ntensors; t++) {
    const stk_tensor_desc *d = &b->layout.tensors[t];
    uint64_t end = d->offset + d->nbytes;
    uint64_t next = t + 1 < b->layout.ntensors ? b->layout.tensors[t + 1].offset
                                               : b->layout.total_bytes;
    if (next > end) memset(p + end, 0, next - end);
  }
  return b->ds->ops->build(b, epoch, p, info);
}

int stk_builder_io_mode(const stk_builder *b) { return b ? b->io_mode : 0; }

const char *stk_builder_error(const stk_builder *b) { return b ? b->err : ""; }

void stk_builder_destroy(stk_builder *b) {
  if (!b) return;
  b->ds->ops->builder_free(b);
  free(b->indices);
  free(b->mask);
  free(b);
}

int stk_build_reference(const stk_job_spec *spec, const char *data_root, uint64_t epoch,
                        uint32_t rank, uint64_t step, void *buf, size_t len, char *err,
                        size_t errlen) {
  return stk_build_reference_at(spec, data_root, epoch, 0, rank, step, buf, len, err,
                                errlen);
}

int stk_build_reference_at(const stk_job_spec *spec, const char *data_root,
                           uint64_t epoch, uint64_t offset, uint32_t rank, uint64_t step,
                           void *buf, size_t len, char *err, size_t errlen) {
  stk_dataset *ds;
  stk_builder *b;
  int rc = stk_dataset_open(spec, data_root, NULL, &ds, err, errlen);
  if (rc) return rc;
  rc = stk_builder_create(ds, spec, &b, err, errlen);
  if (rc) {
    stk_dataset_close(ds);
    return rc;
  }
  rc = stk_builder_build_at(b, epoch, offset, rank, step, buf, len, NULL);
  if (rc) stk__errf(err, errlen, rc, "%s", stk_builder_error(b));
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  return rc;
}
