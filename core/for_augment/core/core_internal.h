/* core/core_internal.h - the few helpers core/ shares with the libraries built
 * on it (augment/, tools/), which must compute these exactly as core does.
 * Part of core's interface for augment: on the include path only of what
 * links stoker_core_for_augment (core/CMakeLists.txt); not public API,
 * never installed. Static inline
 * so that core's files need not call each other for them (job_spec.c, plan.c,
 * rng.c and layout.c stay independent; layout.c alone calls into job_spec.c,
 * for validation).
 */
#ifndef STOKER_CORE_INTERNAL_H
#define STOKER_CORE_INTERNAL_H

#include "common/text.h"
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "stoker/core.h"

/* murmur3's 64-bit finalizer: a fast, well-mixed hash of one word. */
static inline uint64_t stk__mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

/* The seed of view v of an image job (views > 1): view 0 keeps the job's
 * seed, so it equals the one-view job; the others get independent
 * streams. */
static inline uint64_t stk__view_seed(uint64_t seed, uint32_t v) {
  return v ? stk__mix64(seed + 0x9e3779b97f4a7c15ull * v) : seed;
}

/* View v's op chain text: its own (job key "viewV") or the pipeline's.
 * For a spec that passed stk_job_spec_validate. */
static inline const char *stk__view_chain(const stk_job_spec *s, uint32_t v) {
  if (v >= 1 && v <= 3 && s->view_chain[v - 1] && s->view_chain[v - 1] < sizeof(s->chain))
    return s->chain + s->view_chain[v - 1];
  return s->chain;
}

/* View v's output size: its own chain's, or height x width. */
static inline void stk__view_hw(const stk_job_spec *s, uint32_t v, uint32_t *h,
                                uint32_t *w) {
  if (v >= 1 && v <= 3 && s->view_chain[v - 1]) {
    *h = s->view_height[v - 1], *w = s->view_width[v - 1];
  } else {
    *h = s->height, *w = s->width;
  }
}

/* The seed of a batch's own generator (the batch ops' draws), keyed with
 * (epoch, epoch position of the batch's first slot): a stream apart from
 * every sample's and view's. */
static inline uint64_t stk__batch_seed(uint64_t seed) {
  return stk__mix64(seed ^ 0x6d69787570626174ull); /* "mixupbat" */
}

/* stk__trim: common/text.h (the job text and the op chain grammar use it). */

/* Bytes per element of an stk_dtype (STK_DTYPE_MAP); 0 for an unknown
 * one. */
static inline size_t stk__dtype_size(int dtype) {
  switch (dtype) {
#define STK__DTYPE_SIZE(name, num, text, size, use) \
  case num:                                         \
    return size;
    STK_DTYPE_MAP(STK__DTYPE_SIZE)
#undef STK__DTYPE_SIZE
  }
  return 0;
}

/* 1 if dtype is an image tensor's type (STK_DTYPE_MAP's use IMAGE: the
 * job key dtype, the op chain's to(...)), else 0. */
static inline int stk__dtype_is_image(int dtype) {
  switch (dtype) {
#define STK__DTYPE_IMAGE_IMAGE(num) case num:
#define STK__DTYPE_IMAGE_TOKEN(num)
#define STK__DTYPE_IMAGE(name, num, text, size, use) STK__DTYPE_IMAGE_##use(num)
    STK_DTYPE_MAP(STK__DTYPE_IMAGE)
    return 1;
#undef STK__DTYPE_IMAGE
#undef STK__DTYPE_IMAGE_TOKEN
#undef STK__DTYPE_IMAGE_IMAGE
  }
  return 0;
}

#endif
