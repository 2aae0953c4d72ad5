/* synthetic.c - the synthetic source: sample i is a deterministic
 * pseudo-random image whose per-channel tint depends on its label, so a
 * model can learn it, plus label = i mod num_classes. An optional CPU cost
 * per sample (busy thread CPU time) stands in for decode work, so the
 * whole serving path is real before JPEGs arrive.
 *
 * Content depends on (seed, i) only: the raw pipeline has no augmentation.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core_internal.h"
#include "augment_internal.h"

static int syn_open(stk_dataset *ds, char *err, size_t errlen) {
  (void)err, (void)errlen;
  ds->n = ds->spec.num_samples;
  ds->fingerprint = stk__mix64(ds->n ^ 0x73796e7468657469ull);
  return STK_OK;
}
static void syn_close(stk_dataset *ds) { (void)ds; }
static int syn_binit(stk_builder *b, char *err, size_t errlen) {
  (void)b, (void)err, (void)errlen;
  return STK_OK;
}
static void syn_bfree(stk_builder *b) { (void)b; }

static double thread_cpu_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void burn(uint32_t us) {
  if (!us) return;
  double until = thread_cpu_us() + us;
  volatile uint64_t x = 1;
  while (thread_cpu_us() < until)
    for (int i = 0; i < 256; i++) x = stk__mix64(x);
}

/* One sample's image. Per channel, a noise row of W + 256 bytes (already
 * tinted) is drawn from the sample's own xorshift stream; image row y is
 * that row read from a pseudo-random shift in [0, 256). Rows are memcpy
 * speed, so a worker's build cost stays far below the transport's (the
 * transport benchmark measures the wire, not pixel generation). Values
 * are a function of (seed, index, c, y, x) in any layout. */
static void fill_image(const stk_job_spec *s, uint64_t idx, uint64_t label,
                       unsigned char *out) {
  uint32_t H = s->height, W = s->width, C = s->channels;
  unsigned char noise[8192 + 256];
  uint64_t x = stk__mix64(s->seed ^ stk__mix64(idx + 1)) | 1;
  for (uint32_t c = 0; c < C; c++) {
    unsigned tint = (unsigned)(stk__mix64(label * 3 + c + 1) & 0x7f);
    for (uint32_t i = 0; i < W + 256; i += 8) {
      x ^= x >> 12, x ^= x << 25, x ^= x >> 27; /* xorshift64* */
      uint64_t r = x * 0x2545F4914F6CDD1Dull;
      for (uint32_t k = 0; k < 8; k++)
        noise[i + k] = (unsigned char)(((r >> (8 * k)) & 0x7f) + tint);
    }
    for (uint32_t y = 0; y < H; y++) {
      const unsigned char *src = noise + (stk__mix64(x ^ ((uint64_t)y << 20 | c)) & 0xff);
      if (s->layout == STK_LAYOUT_NCHW) {
        memcpy(out + ((size_t)c * H + y) * W, src, W);
      } else {
        unsigned char *row = out + (size_t)y * W * C + c;
        for (uint32_t i = 0; i < W; i++) row[(size_t)i * C] = src[i];
      }
    }
  }
}

static int syn_build(stk_builder *b, uint64_t epoch, unsigned char *buf,
                     stk_build_info *info) {
  (void)epoch, (void)info;
  const stk_job_spec *s = &b->spec;
  const stk_tensor_desc *ti = &b->layout.tensors[STK_TENSOR_IMAGE];
  size_t per = ti->nbytes / s->batch_size;
  for (uint32_t j = 0; j < s->batch_size; j++) {
    uint64_t idx = b->indices[j];
    int64_t label = (int64_t)(idx % s->num_classes);
    fill_image(s, idx, (uint64_t)label, buf + ti->offset + per * j);
    b->filled[j] = idx;
    burn(s->synthetic_cost_us);
  }
  return STK_OK;
}

static int64_t syn_label(const stk_builder *b, uint64_t i) {
  return (int64_t)(i % b->spec.num_classes);
}

const stk__source_ops stk__synthetic_source = {
    "synthetic", syn_open, syn_close, syn_binit, syn_bfree, syn_build, NULL, syn_label};
