/* ops_mix.h - what ops_mix.c offers the JPEG builder and the tests: the
 * batch ops (mixup, cutmix, mixup_cutmix), timm's Mixup: in its default
 * batch mode one draw per batch from the batch's own generator, in pair
 * and elem modes one per pair or row; row i mixed with row B-1-i, the
 * labels turned into soft targets. Private to augment/ (and its tests).
 */
#ifndef STOKER_AUGMENT_OPS_MIX_H
#define STOKER_AUGMENT_OPS_MIX_H

#include <stdint.h>

#include "core/chain.h"
#include "stoker/core.h"

/* One batch's draws. */
typedef struct stk__mix {
  int mixed;               /* 0: images left as they are (lam = 1) */
  int cutmix;              /* 1: a box of the paired row pasted, 0: blended */
  double lam;              /* the Beta draw (1 when not mixed) */
  double weight;           /* the row's own label's weight in the targets: lam,
                              or 1 - box area / image area for cutmix */
  uint32_t y0, y1, x0, x1; /* cutmix's box, rows [y0, y1) x columns [x0, x1) */
  uint32_t cy, cx;         /* cutmix's box centre as drawn */
} stk__mix;

/* The generator of the batch whose first slot is at epoch position pos0
 * (offset + (step * W + rank) * B) of epoch `epoch` of a job seeded
 * `seed`. */
void stk__mix_rng(stk_rng *r, uint64_t seed, uint64_t epoch, uint64_t pos0);

/* The log of a Gamma(a, 1) draw from rng: Marsaglia and Tsang's method
 * for a >= 1; below 1, Gamma(a + 1) * U^(1/a); a in (0, 1000]. */
double stk__log_gamma(stk_rng *rng, double a);

/* A Beta(a, a) draw from rng (two Gamma(a) draws, Marsaglia-Tsang, in
 * log space so that small alphas stay finite); a in (0, 1000]. */
double stk__beta_sym(stk_rng *rng, double a);

/* op's draws for an h x w batch (or row, in pair and elem modes), in
 * timm's order (Mixup._params_per_batch, then rand_bbox): 1 against p;
 * when both alphas are on, 1 against the switch probability; the Beta
 * draw; for cutmix the box centre (row, then column), or with minmax
 * (rand_bbox_minmax) the cut's height, width, top and left (then in cy,
 * cx: the top and left). */
void stk__mix_draw(const stk__op *op, uint32_t h, uint32_t w, stk_rng *rng, stk__mix *m);

/* The draw that applies to row i of a B-row h x w batch at pos0 of epoch
 * of a job seeded `seed`, in op's pair or elem mode: row i's own draws
 * (stk__mix_draw) from the generator of epoch position pos0 + i (elem), or
 * row min(i, B-1-i)'s (pair; the middle row of an odd batch: none). With
 * these modes lam and the weight are float32 values, as timm's lam_batch. */
void stk__mix_row(const stk__op *op, uint32_t B, uint32_t h, uint32_t w, uint64_t seed,
                  uint64_t epoch, uint64_t pos0, uint32_t i, stk__mix *m);

/* Apply m to the batch in buf (layout L of spec, whose chain ends in op,
 * batch mode):
 * the image tensor mixed in place, pairs (i, B-1-i), and the target
 * tensor written from the label tensor (labels outside [0, num_classes)
 * get no on-value). Float32 as timm's Mixup computes it on a float32
 * tensor, bfloat16 as that on the bfloat16 values rounded once to
 * bfloat16, uint8 as FastCollateMixup (rounded half to even).
 * Thread-safe (writes buf only). */
void stk__mix_apply(const stk__op *op, const stk__mix *m, const stk_job_spec *spec,
                    const stk_batch_layout *L, unsigned char *buf);

/* Draw and apply op for the batch at pos0 of epoch: what a builder runs
 * after every sample of the batch is stored. In pair and elem modes each
 * pair of rows (i, B-1-i) is mixed under its rows' own draws (timm's
 * _mix_pair, _mix_elem; FastCollateMixup's for uint8), element by
 * element, and each row's target gets its own weight. */
void stk__mix_batch(const stk__op *op, const stk_job_spec *spec,
                    const stk_batch_layout *L, uint64_t epoch, uint64_t pos0,
                    unsigned char *buf);

#endif
