/* ops_policy.h - what ops_policy.c offers the op chain runner: PIL's pixel
 * recipes (ImageEnhance blends, ImageOps lookup tables, nearest-neighbour
 * affine transforms) behind torchvision's autoaugment `_apply_op`, and the
 * augmentation policies built on them (RandAugment, TrivialAugmentWide,
 * AutoAugment; AugMix, ops_augmix.c), and random_erasing (ops_erase.c).
 * Private to augment/ (and its tests).
 */
#ifndef STOKER_AUGMENT_OPS_POLICY_H
#define STOKER_AUGMENT_OPS_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "core/chain.h"
#include "ops.h"         /* stk__box */
#include "stoker/core.h" /* stk_rng */

/* PIL's "L" conversion of one RGB pixel (ITU-R 601-2 luma, 16-bit fixed
 * point, rounded). */
static inline uint8_t stk__luma(const uint8_t *p) {
  return (uint8_t)((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
}

/* Image.blend(a, b, alpha) for one value: a + alpha (b - a) in float,
 * truncated, clipped when alpha leaves [0, 1]. */
static inline uint8_t stk__blend(int a, int b, float alpha) {
  float t = (float)((float)a + alpha * (float)(b - a));
  if (alpha >= 0 && alpha <= 1) return (uint8_t)t;
  return t <= 0 ? 0 : t >= 255 ? 255 : (uint8_t)t;
}

/* ImageEnhance.Brightness, Contrast and Color (torchvision's
 * adjust_brightness, adjust_contrast, adjust_saturation) on n RGB pixels
 * in place, factor f (1 = unchanged). */
void stk__pil_brightness(uint8_t *px, size_t n, float f);
void stk__pil_contrast(uint8_t *px, size_t n, float f);
void stk__pil_color(uint8_t *px, size_t n, float f);

/* Buffers the policy ops keep between samples (they only grow). Owned by
 * the chain run; stk__policy_scratch_free frees them. */
typedef struct stk__policy_scratch {
  uint8_t *tmp, *aug; /* tmp: an op's copy; aug: an aug_mix chain's image */
  float *mix;         /* aug_mix's float32 sum */
  size_t cap, acap, mcap;
} stk__policy_scratch;
void stk__policy_scratch_free(stk__policy_scratch *s);

/* torchvision's autoaugment operations, in the order of RandAugment's and
 * TrivialAugmentWide's augmentation space (the index a policy draws). */
enum {
  STK__PA_IDENTITY,
  STK__PA_SHEAR_X,
  STK__PA_SHEAR_Y,
  STK__PA_TRANSLATE_X,
  STK__PA_TRANSLATE_Y,
  STK__PA_ROTATE,
  STK__PA_BRIGHTNESS,
  STK__PA_COLOR,
  STK__PA_CONTRAST,
  STK__PA_SHARPNESS,
  STK__PA_POSTERIZE,
  STK__PA_SOLARIZE,
  STK__PA_AUTOCONTRAST,
  STK__PA_EQUALIZE,
  STK__PA_SPACE, /* the size of the augmentation space */
  STK__PA_INVERT = STK__PA_SPACE
};

/* torchvision's `_apply_op(img, op, magnitude)` on the w x h RGB image px,
 * in place (PIL backend, NEAREST, fill 0): shears take the shear factor,
 * translations pixels (truncated), rotate degrees counter-clockwise,
 * brightness/color/contrast/sharpness the factor minus 1, posterize bits
 * (truncated), solarize the threshold. 0, or -1 out of memory (px
 * untouched). */
int stk__policy_apply_op(stk__policy_scratch *s, uint8_t *px, uint32_t w, uint32_t h,
                         int pa, double magnitude);

/* torch.linspace(start, end, bins)[i] in float32 (the scalar formula:
 * start + step * i below the middle, end - step * (bins - 1 - i) from it). */
float stk__linspace(float start, float end, int bins, int i);

/* The magnitude of bin `bin` of op pa in a policy's space with `bins` bins
 * on a w x h image (torchvision's float32 linspace, computed as
 * start + step * i below the middle, end - step * (bins - 1 - i) from it);
 * wide: TrivialAugmentWide's ranges, else RandAugment's. *signed_out says
 * whether a drawn sign applies. */
double stk__policy_magnitude(int pa, int bin, int bins, uint32_t w, uint32_t h, int wide,
                             int *signed_out);

/* One sub-op a policy chose: the op, its bin and whether it is negated. */
typedef struct stk__policy_choice {
  int pa, bin, neg;
} stk__policy_choice;

/* The draws of a rand_augment (op->kind STK__OP_RAND_AUGMENT),
 * trivial_augment_wide or auto_augment op from rng into ch (at most
 * STK__POLICY_MAX_OPS): how many sub-ops it applies. rand_augment draws 2
 * uniforms per sub-op (op index, sign), trivial_augment_wide 3 (op index,
 * bin, sign), auto_augment 5 (the pair of its policy, two probabilities,
 * two signs); a sign is drawn even for an op that has none. */
#define STK__POLICY_MAX_OPS 16
int stk__policy_draw(const stk__op *op, stk_rng *rng, stk__policy_choice *ch);

/* Step i (0, 1) of row `row` (0..24) of AutoAugment policy `policy` (0
 * imagenet, 1 cifar10, 2 svhn): its operation, with its probability in *p
 * and magnitude bin in *bin (-1: none). */
int stk__auto_augment_step(int policy, int row, int i, float *p, int *bin);

/* Run a policy or sub-op (any kind stk__policy_kind accepts) on the real
 * image px (w x h RGB, size kept), drawing from rng. pa: a sub-op's
 * `_apply_op` operation (STK__PA_*, its row of ops_kernels.c's KERNELS[]),
 * ignored for the policies. 0, or -1 out of memory. */
int stk__policy_run(stk__policy_scratch *s, const stk__op *op, int pa, uint8_t *px,
                    uint32_t w, uint32_t h, stk_rng *rng);

/* A standard normal value, ops_erase.c (Box-Muller on two uniforms of rng; the second
 * of each pair waits in *spare while *have is 1: start with *have = 0). */
double stk__normal(stk_rng *rng, double *spare, int *have);

/* random_erasing (ops_erase.c). stk__erase_draw: op's draws on an oh x ow
 * output (one against p, up to 10 tries of scale and log ratio, then top
 * and left): 1 with the rectangle in *b, 0 when nothing is erased.
 * stk__erase_apply: write op's value (or, for value=random, standard
 * normal values drawn from rng channel by channel, row by row) over b in
 * the sample out (3 x oh x ow in dtype and layout). */
int stk__erase_draw(const stk__op *op, uint32_t oh, uint32_t ow, stk_rng *rng,
                    stk__box *b);
void stk__erase_apply(const stk__op *op, const stk__box *b, void *out, uint32_t oh,
                      uint32_t ow, int dtype, int layout, stk_rng *rng);

/* aug_mix (ops_augmix.c), torchvision's AugMix on the tensor kernels its
 * PIL input is converted to. STK__AUGMIX_SPACE: the size of its
 * augmentation space (the last four, brightness ... sharpness, only with
 * all_ops); STK__AUGMIX_MAX: the most chains, and ops per chain. */
#define STK__AUGMIX_SPACE 13
#define STK__AUGMIX_MAX   16

/* One aug_mix draw: the Beta weights of the original and the augmented
 * image (float32, as torch samples them), the Dirichlet weights of the
 * chains, and each chain's ops (pa, bin, neg). */
typedef struct stk__augmix {
  float m[2];
  float d[STK__AUGMIX_MAX];
  int width, depth[STK__AUGMIX_MAX];
  stk__policy_choice ch[STK__AUGMIX_MAX][STK__AUGMIX_MAX];
} stk__augmix;

/* The op (STK__PA_*) at index i of AugMix's augmentation space; -1 out of
 * range. */
int stk__augmix_space_op(int i);

/* The magnitude of bin `bin` (of AugMix's 10) of op pa on a w x h image. */
double stk__augmix_magnitude(int pa, int bin, uint32_t w, uint32_t h);

/* aug_mix op's draws from rng into *d, in torchvision's order: two
 * log-Gamma(alpha) draws (the Beta), width more (the Dirichlet), then per
 * chain its depth (one uniform, when op's depth is random) and per op one
 * uniform for the op, one for the bin (ops with bins) and one for the
 * sign (signed ops). */
void stk__augmix_draw(const stk__op *op, stk_rng *rng, stk__augmix *d);

/* One operation of AugMix's space as torchvision's tensor kernels apply
 * it (`_apply_op` on a uint8 tensor, bilinear, fill 0) to the w x h RGB
 * image px in place; magnitude as for stk__policy_apply_op. 0, or -1 out
 * of memory. */
int stk__augmix_apply_op(stk__policy_scratch *s, uint8_t *px, uint32_t w, uint32_t h,
                         int pa, double magnitude);

/* AugMix.forward with the draws *d on px (w x h RGB, in place). 0, or -1
 * out of memory (px untouched). */
int stk__augmix_mix(stk__policy_scratch *s, const stk__augmix *d, uint8_t *px, uint32_t w,
                    uint32_t h);

/* Draw and run aug_mix op on px. 0, or -1 out of memory. */
int stk__augmix_run(stk__policy_scratch *s, const stk__op *op, uint8_t *px, uint32_t w,
                    uint32_t h, stk_rng *rng);

/* Whether op kind k is one stk__policy_run runs. */
static inline int stk__policy_kind(int k) {
  return k >= STK__OP_SHEAR_X && k <= STK__OP_AUG_MIX;
}

#endif
