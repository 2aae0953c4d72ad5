/* convert.c - uint8 image -> float32 / bfloat16 NCHW, normalized with the
 * job's mean/std (stk_normalize_table: (x/255 - mean[c]) / std[c], the
 * pipeline's own numbers), on the CPU in the copy thread for both
 * backends: for cfg.convert (a uint8 job), and to rebuild a float job's
 * image that came as 8-bit values (wire_u8; the input layout is then the
 * wire one, the output the job's). A 256-entry table per channel turns it
 * into a lookup per pixel. Every image tensor (image, or image0.. with
 * views) is converted; label/mask/index tensors are copied unchanged.
 *
 * Pure functions: no state, thread-safe.
 */
#include <string.h>

#include "client_internal.h"

uint32_t stk__image_tensors(const stk_job_spec *spec) {
  return spec->views > 1 ? spec->views : 1;
}

void stk__image_hw(const stk_tensor_desc *d, int layout, uint32_t *h, uint32_t *w) {
  *h = (uint32_t)(layout == STK_LAYOUT_NHWC ? d->shape[1] : d->shape[2]);
  *w = (uint32_t)(layout == STK_LAYOUT_NHWC ? d->shape[2] : d->shape[3]);
}

int stk__wire_convert(const stk_job_spec *spec) {
  return spec->dtype == STK_DTYPE_FLOAT32 ? STK_CONVERT_FLOAT32 : STK_CONVERT_BFLOAT16;
}

int stk__convert_layout(const stk_job_spec *spec, int convert, stk_batch_layout *out) {
  int st = stk_batch_layout_of(spec, out);
  if (st || convert == STK_CONVERT_NONE) return st;
  /* an image conversion: a token job has no image to convert */
  if (spec->dtype != STK_DTYPE_UINT8 || spec->source == STK_SOURCE_MEGATRON)
    return STK_INVALID_ARGUMENT;
  uint64_t esz = convert == STK_CONVERT_FLOAT32 ? 4 : 2;
  for (uint32_t v = 0; v < stk__image_tensors(spec); v++) {
    stk_tensor_desc *img = &out->tensors[v];
    uint32_t h, w; /* a view's own chain may make another size */
    stk__image_hw(img, spec->layout, &h, &w);
    img->dtype = convert == STK_CONVERT_FLOAT32 ? STK_DTYPE_FLOAT32 : STK_DTYPE_BFLOAT16;
    img->shape[1] = spec->channels;
    img->shape[2] = h;
    img->shape[3] = w;
    img->nbytes = (uint64_t)spec->batch_size * spec->channels * h * w * esz;
  }
  uint64_t off = 0;
  for (uint32_t t = 0; t < out->ntensors; t++) {
    out->tensors[t].offset = off;
    off += (out->tensors[t].nbytes + 63) & ~(uint64_t)63;
  }
  out->total_bytes = off;
  return STK_OK;
}

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) return 0x7fc0; /* NaN */
  u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

/* One image tensor, img (the wire or uint8 form, described by d) into o. */
static void convert_image(const stk_job_spec *spec, const stk_tensor_desc *d, int convert,
                          const float lut[4][256], const unsigned char *img,
                          unsigned char *o, int out_nhwc) {
  uint32_t B = spec->batch_size, C = spec->channels, H, W;
  stk__image_hw(d, spec->layout, &H, &W);
  int nhwc = spec->layout == STK_LAYOUT_NHWC;
  size_t plane = (size_t)H * W, per = plane * C;
  if (convert == STK_CONVERT_FLOAT32 && !nhwc && !out_nhwc && C == 3) {
    /* The common case, NCHW to NCHW float32: v * a + b per element, which
     * vectorizes (a table lookup does not). This file is built with
     * -ffp-contract=off, so the product is rounded before the sum, exactly
     * as stk_normalize_table does: the same floats to the bit. */
    float a[3], bias[3];
    stk_normalize_coeffs(spec, a, bias);
    for (size_t pl = 0; pl < (size_t)B * C; pl++) {
      const unsigned char *restrict si = img + plane * pl;
      float *restrict fo = (float *)(void *)(o + 4 * plane * pl); /* 64-byte aligned */
      float ac = a[pl % C], bc = bias[pl % C];
      for (size_t p = 0; p < plane; p++) fo[p] = (float)si[p] * ac + bc;
    }
  } else
    for (uint32_t b = 0; b < B; b++) {
      const unsigned char *si = img + per * b;
      for (uint32_t c = 0; c < C && c < 4; c++) {
        for (size_t p = 0; p < plane; p++) {
          unsigned char v = nhwc ? si[p * C + c] : si[plane * c + p];
          size_t at = per * b + (out_nhwc ? p * C + c : plane * c + p);
          float f = lut[c][v];
          if (convert == STK_CONVERT_FLOAT32) {
            memcpy(o + 4 * at, &f, 4);
          } else {
            uint16_t h = to_bf16(f);
            memcpy(o + 2 * at, &h, 2);
          }
        }
      }
    }
}

/* The per-channel lookup table stk__convert_batch uses: the pipeline's
 * stk_normalize_table for channels 0-2, v / 255 for a fourth. */
static void float_table(const stk_job_spec *spec, float lut[4][256]) {
  stk_normalize_table(spec, lut);
  for (int v = 0; v < 256; v++) lut[3][v] = (float)v / 255.f;
}

void stk__convert_table(const stk_job_spec *spec, int convert, void *table) {
  float lut[4][256];
  float_table(spec, lut);
  if (convert == STK_CONVERT_FLOAT32) {
    memcpy(table, lut, sizeof(lut));
    return;
  }
  uint16_t *h = table;
  for (int c = 0; c < 4; c++)
    for (int v = 0; v < 256; v++) h[c * 256 + v] = to_bf16(lut[c][v]);
}

void stk__convert_batch(const stk_job_spec *spec, int convert, const stk_batch_layout *in,
                        const unsigned char *src, const stk_batch_layout *out,
                        unsigned char *dst, int out_nhwc) {
  /* the pipeline's own table: a uint8 job converted here equals the same
   * job with a float dtype, and a float job's 8-bit wire form is rebuilt
   * exactly (stk_normalize_table) */
  float lut[4][256];
  float_table(spec, lut);
  uint32_t nimg = stk__image_tensors(spec);
  for (uint32_t t = 0; t < nimg; t++)
    convert_image(spec, &in->tensors[t], convert, lut, src + in->tensors[t].offset,
                  dst + out->tensors[t].offset, out_nhwc);
  for (uint32_t t = nimg; t < in->ntensors && t < out->ntensors; t++)
    memcpy(dst + out->tensors[t].offset, src + in->tensors[t].offset,
           (size_t)in->tensors[t].nbytes);
  /* the padding between tensors is zero, as in every built payload (a
   * rebuilt one must equal stk_build_reference's to the byte) */
  for (uint32_t t = 0; t < out->ntensors; t++) {
    uint64_t end = out->tensors[t].offset + out->tensors[t].nbytes;
    uint64_t next = t + 1 < out->ntensors ? out->tensors[t + 1].offset : out->total_bytes;
    if (next > end) memset(dst + end, 0, (size_t)(next - end));
  }
}
