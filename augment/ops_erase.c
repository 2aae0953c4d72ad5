/* ops_erase.c - torchvision's RandomErasing on the output tensor: the
 * rectangle drawn as RandomErasing.get_params draws it, then erased in the
 * sample's place in the batch, after Normalize, in the job's dtype and
 * layout (a constant, or standard normal values drawn from the sample's
 * generator).
 *
 * Pure functions of their arguments; thread-safe.
 */
#include <math.h>
#include <string.h>

#include "ops.h"
#include "ops_policy.h"

int stk__erase_draw(const stk__op *op, uint32_t oh, uint32_t ow, stk_rng *rng,
                    stk__box *b) {
  if (!(stk_rng_uniform(rng) < op->p)) return 0;
  double area = (double)oh * ow;
  double lr0 = log((double)op->lo[1]), lr1 = log((double)op->hi[1]);
  for (int t = 0; t < 10; t++) {
    double ea =
        area * (op->lo[0] + ((double)op->hi[0] - op->lo[0]) * stk_rng_uniform(rng));
    double ar = exp(lr0 + (lr1 - lr0) * stk_rng_uniform(rng));
    double h = nearbyint(sqrt(ea * ar)), w = nearbyint(sqrt(ea / ar)); /* round() */
    if (!(h < oh && w < ow)) continue;
    b->h = (int32_t)h, b->w = (int32_t)w;
    /* torch.randint(0, n + 1): uniform integer in [0, n] */
    b->y = (int32_t)(stk_rng_uniform(rng) * (double)(oh - (uint32_t)b->h + 1));
    b->x = (int32_t)(stk_rng_uniform(rng) * (double)(ow - (uint32_t)b->w + 1));
    return 1;
  }
  return 0; /* torchvision returns the image as it is */
}

double stk__normal(stk_rng *rng, double *spare, int *have) {
  if (*have) {
    *have = 0;
    return *spare;
  }
  double u1 = 1.0 - stk_rng_uniform(rng), u2 = stk_rng_uniform(rng); /* u1 in (0, 1] */
  double r = sqrt(-2.0 * log(u1)), a = 2.0 * M_PI * u2;
  *spare = r * sin(a), *have = 1;
  return r * cos(a);
}

void stk__erase_apply(const stk__op *op, const stk__box *b, void *out, uint32_t oh,
                      uint32_t ow, int dtype, int layout, stk_rng *rng) {
  (void)oh;
  size_t plane = (size_t)oh * ow;
  double spare = 0;
  int have = 0;
  /* torchvision's value tensor is [C, h, w]: channel by channel, row by row */
  for (int c = 0; c < 3; c++)
    for (int32_t y = b->y; y < b->y + b->h; y++)
      for (int32_t x = b->x; x < b->x + b->w; x++) {
        float v = op->kh ? (float)stk__normal(rng, &spare, &have) : op->lo[2];
        size_t k = layout == STK_LAYOUT_NCHW
                       ? (size_t)c * plane + (size_t)y * ow + (size_t)x
                       : ((size_t)y * ow + (size_t)x) * 3 + (size_t)c;
        if (dtype == STK_DTYPE_FLOAT32) ((float *)out)[k] = v;
        else if (dtype == STK_DTYPE_BFLOAT16) ((uint16_t *)out)[k] = stk__bf16(v);
        else ((uint8_t *)out)[k] = (uint8_t)v; /* a level 0..255 (job validation) */
      }
}
