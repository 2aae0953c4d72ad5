/* layout.c - the batch layout: where each tensor (image, label, mask,
 * index) sits in a batch payload, derived from a valid job spec alone, so
 * every batch of a job has the same shapes and offsets.
 *
 * Plain values, no allocation; safe from any thread.
 */
#include <stdio.h>
#include <string.h>

#include "core_internal.h"

int stk_batch_layout_of(const stk_job_spec *s, stk_batch_layout *L) {
  if (stk_job_spec_validate(s, NULL, 0) != STK_OK) return STK_INVALID_ARGUMENT;
  memset(L, 0, sizeof(*L));
  uint64_t B = s->batch_size, off = 0;
  static const char *names[] = {"image", "label", "mask", "index"};
  for (int t = 0; t < STK_MAX_TENSORS; t++) {
    stk_tensor_desc *d = &L->tensors[t];
    snprintf(d->name, sizeof(d->name), "%s", names[t]);
    d->shape[0] = B;
    if (t == STK_TENSOR_IMAGE) {
      d->dtype = s->dtype;
      d->ndim = 4;
      if (s->layout == STK_LAYOUT_NHWC)
        d->shape[1] = s->height, d->shape[2] = s->width, d->shape[3] = s->channels;
      else d->shape[1] = s->channels, d->shape[2] = s->height, d->shape[3] = s->width;
      d->nbytes = B * s->height * s->width * s->channels * stk__dtype_size(s->dtype);
    } else {
      d->dtype = t == STK_TENSOR_MASK ? STK_DTYPE_UINT8 : STK_DTYPE_INT64;
      d->ndim = 1;
      d->nbytes = B * stk__dtype_size(d->dtype);
    }
    d->offset = off;
    off += (d->nbytes + 63) & ~(uint64_t)63;
  }
  L->ntensors = STK_MAX_TENSORS;
  L->total_bytes = off;
  return STK_OK;
}
