/* batch.c - a batch, assembled in one place: which samples fill it (the
 * permutation, rank and step give the indices; the mask and index tensors,
 * the alignment padding zeroed), the source's samples (read, decoded and
 * augmented by the source the dataset opened with, which says which
 * sample filled each slot), their labels, the batch op (mixup, cutmix) over the whole
 * batch, and for a server the header facts: the indices and the payload's crc
 * (augment/batch.h). Also the one place every generator of a batch is seeded
 * (stk__rng_seed). The builder (stk_builder) lives here: create, build,
 * destroy, and the one-shot reference build.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/batch.h"
#include "common/error.h"
#include "core/core_internal.h"
#include "augment_internal.h"
#include "ops_mix.h"

void stk__rng_seed(stk_rng *r, uint64_t seed, uint32_t view, uint64_t epoch,
                   uint64_t key) {
  stk_rng_init(
      r, view == STK__RNG_BATCH ? stk__batch_seed(seed) : stk__view_seed(seed, view),
      epoch, key);
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
  b->filled = calloc(spec->batch_size, sizeof(uint64_t));
  if (!b->indices || !b->mask || !b->filled) {
    free(b->indices);
    free(b->mask);
    free(b->filled);
    free(b);
    return STK_NO_MEMORY;
  }
  rc = ds->ops->builder_init(b, err, errlen);
  if (rc) {
    free(b->indices);
    free(b->mask);
    free(b->filled);
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
  int rc = b->ds->ops->build(b, epoch, p, info);
  /* the labels: each slot's from the sample that filled it (a substitute's
   * own label), as the source says */
  int tl = b->ds->ops->label ? stk_batch_layout_find(&b->layout, "label") : -1;
  for (uint32_t k = 0; rc == STK_OK && tl >= 0 && k < b->spec.batch_size; k++) {
    int64_t label = b->ds->ops->label(b, b->filled[k]);
    memcpy(p + b->layout.tensors[tl].offset + 8ull * k, &label, 8);
  }
  /* the batch op (mixup, cutmix) on the whole batch, with its own draws,
   * once every sample is stored */
  if (rc == STK_OK && b->batch_op)
    stk__mix_batch(b->batch_op, &b->spec, &b->layout, epoch, b->pos0, p);
  return rc;
}

int stk__batch_assemble(stk_builder *b, uint64_t epoch, uint64_t offset, uint32_t rank,
                        uint64_t step, void *buf, size_t len, stk__batch_facts *out) {
  memset(out, 0, sizeof(*out));
  int rc = stk_builder_build_at(b, epoch, offset, rank, step, buf, len, &out->info);
  if (rc) return rc;
  out->indices = b->indices;
  out->total_bytes = b->layout.total_bytes;
  out->crc32c = stk_crc32c(0, buf, (size_t)b->layout.total_bytes);
  return STK_OK;
}

int stk_builder_io_mode(const stk_builder *b) { return b ? b->io_mode : 0; }

const char *stk_builder_error(const stk_builder *b) { return b ? b->err : ""; }

void stk_builder_destroy(stk_builder *b) {
  if (!b) return;
  b->ds->ops->builder_free(b);
  free(b->indices);
  free(b->mask);
  free(b->filled);
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
