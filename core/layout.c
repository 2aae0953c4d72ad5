/* layout.c - the batch layout: where each tensor sits in a batch payload
 * (image jobs: image (or image0..image{V-1}, each view of its own chain's
 * size), label, mask, index, and
 * target when the chain ends in a batch op; token
 * jobs: tokens, labels and
 * the optional loss_mask, position_ids, index), derived from a valid job
 * spec alone, so every batch of a job has the same shapes and offsets.
 *
 * Plain values, no allocation; safe from any thread.
 */
#include <stdio.h>
#include <string.h>

#include "core/chain.h"
#include "core/core_internal.h"

static void add_tensor(stk_batch_layout *L, const char *name, int dtype, uint32_t ndim,
                       uint64_t d0, uint64_t d1) {
  stk_tensor_desc *d = &L->tensors[L->ntensors++];
  snprintf(d->name, sizeof(d->name), "%s", name);
  d->dtype = dtype;
  d->ndim = ndim;
  d->shape[0] = d0;
  d->shape[1] = d1;
  d->nbytes = d0 * (ndim > 1 ? d1 : 1) * stk__dtype_size(dtype);
  d->offset = L->total_bytes;
  L->total_bytes += (d->nbytes + 63) & ~(uint64_t)63;
}

/* Token jobs: tokens, labels, [loss_mask], [position_ids], [index]. */
static void token_layout(const stk_job_spec *s, stk_batch_layout *L) {
  uint64_t B = s->batch_size, S = s->seq_len;
  add_tensor(L, "tokens", s->token_dtype, 2, B, S);
  add_tensor(L, "labels", s->token_dtype, 2, B, S);
  if (s->loss_mask) add_tensor(L, "loss_mask", STK_DTYPE_FLOAT32, 2, B, S);
  if (s->position_ids) add_tensor(L, "position_ids", s->token_dtype, 2, B, S);
  if (L->ntensors < 4) add_tensor(L, "index", STK_DTYPE_INT64, 1, B, 0);
}

int stk_batch_layout_of(const stk_job_spec *s, stk_batch_layout *L) {
  if (stk_job_spec_validate(s, NULL, 0) != STK_OK) return STK_INVALID_ARGUMENT;
  memset(L, 0, sizeof(*L));
  if (s->source == STK_SOURCE_MEGATRON) {
    token_layout(s, L);
    return STK_OK;
  }
  uint64_t B = s->batch_size;
  uint32_t V = s->views > 1 ? s->views : 1;
  for (uint32_t v = 0; v < V; v++) {
    char name[16];
    if (V > 1) snprintf(name, sizeof(name), "image%u", v);
    else snprintf(name, sizeof(name), "image");
    uint32_t h, w; /* the view's own chain may make another size */
    stk__view_hw(s, v, &h, &w);
    /* B x (one sample's elements), then the shape proper */
    add_tensor(L, name, s->dtype, 4, B, (uint64_t)h * w * s->channels);
    stk_tensor_desc *d = &L->tensors[L->ntensors - 1];
    if (s->layout == STK_LAYOUT_NHWC)
      d->shape[1] = h, d->shape[2] = w, d->shape[3] = s->channels;
    else d->shape[1] = s->channels, d->shape[2] = h, d->shape[3] = w;
  }
  add_tensor(L, "label", STK_DTYPE_INT64, 1, B, 0);
  add_tensor(L, "mask", STK_DTYPE_UINT8, 1, B, 0);
  add_tensor(L, "index", STK_DTYPE_INT64, 1, B, 0);
  /* a batch op (mixup, cutmix) mixes the labels into soft targets */
  if (s->pipeline == STK_PIPELINE_CHAIN && stk__chain_text_mixes(s->chain))
    add_tensor(L, "target", STK_DTYPE_FLOAT32, 2, B, s->num_classes);
  return STK_OK;
}

int stk_batch_layout_find(const stk_batch_layout *L, const char *name) {
  if (!L || !name) return -1;
  for (uint32_t t = 0; t < L->ntensors && t < STK_MAX_TENSORS; t++)
    if (!strncmp(L->tensors[t].name, name, sizeof(L->tensors[t].name))) return (int)t;
  return -1;
}

int stk_image_wire_spec(const stk_job_spec *s, stk_job_spec *wire) {
  if (!((s->source == STK_SOURCE_IMAGEFOLDER || s->source == STK_SOURCE_TAR) &&
        (s->dtype == STK_DTYPE_FLOAT32 || s->dtype == STK_DTYPE_BFLOAT16)))
    return 0;
  /* random_erasing and the batch ops write values no 8-bit level stands
   * for: floats travel */
  if (!memchr(s->chain, 0, sizeof(s->chain))) return 0;
  for (uint32_t v = 0; v < 4; v++) {
    const char *c = stk__view_chain(s, v);
    if (!memchr(c, 0, sizeof(s->chain) - (size_t)(c - s->chain))) return 0;
    if (strstr(c, "| random_erasing(") || stk__chain_text_mixes(c)) return 0;
  }
  if (wire) {
    *wire = *s;
    wire->dtype = STK_DTYPE_UINT8;
  }
  return 1;
}

void stk_normalize_coeffs(const stk_job_spec *s, float a[3], float b[3]) {
  for (int c = 0; c < 3; c++) {
    a[c] = 1.f / (255.f * s->std[c]);
    b[c] = -s->mean[c] / s->std[c];
  }
}

void stk_normalize_table(const stk_job_spec *s, float table[3][256]) {
  float a[3], b[3];
  stk_normalize_coeffs(s, a, b);
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) {
      /* volatile: the product is rounded to float before the sum on every
       * compiler and flag set, so worker and client agree to the bit */
      volatile float p = (float)v * a[c];
      table[c][v] = p + b[c];
    }
}
