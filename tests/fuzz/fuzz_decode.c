/* fuzz_decode.c - libFuzzer target for the decode path: header checks,
 * RandomResizedCrop box, ROI decode at a DCT scale, antialiased resample
 * and the float32 store, plus a full-size decode, then one of a few op
 * chains (pipeline = decode | ..., every built-in op) on the same input.
 * Any input must come back with a status, never a crash, leak or
 * undefined behaviour.
 *
 * Built as a libFuzzer binary with clang and STOKER_FUZZ=ON; always built
 * as a replay program (replay_main.c) that ctest runs over the corpus.
 */
#include <stdint.h>
#include <string.h>

#include "decode.h"
#include "ops.h"
#include "ops_chain.h"

static const char *const chains[] = {
    "decode | resize(40) | random_crop(32, 24, padding=4) | rotate(0, 90, 180, 270)"
    " | hflip(0.5) | vflip(0.5) | center_crop(24)",
    "decode | random_resized_crop(24, 32, scale=0.05:1) | color_jitter(0.8, 0.8, 0.8, "
    "0.5)"
    " | grayscale(0.5) | gaussian_blur(5, sigma=0.1:3)",
    "decode | center_crop(48) | resize(16, 20) | color_jitter(hue=0.5) | rotate(90)",
    "decode | random_resized_crop(20, 18) | rand_augment(4, 30) | trivial_augment_wide | "
    "auto_augment(svhn) | sharpness(1.9, p=0.5) | rotate_by(45) | random_erasing(0.5, "
    "value=random)",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static stk__decoder *d;
  static stk__scratch sc;
  static float out[32 * 32 * 3];
  static uint8_t img8[32 * 32 * 3];
  if (!d) {
    stk_limits l;
    memset(&l, 0, sizeof(l));
    l.max_file_bytes = 1 << 20;
    l.max_pixels = 4u << 20;
    l.max_dimension = 8192;
    l.max_scans = 100;
    l.max_decoder_bytes = 64u << 20;
    if (stk__decoder_create(&d, &l)) return 0;
  }
  uint32_t w, h;
  if (stk__decoder_header(d, data, size, &w, &h, NULL, 0) != STK_OK) return 0;
  stk_rng r;
  stk_rng_init(&r, size, 0, data[size / 2]);
  stk__box b = stk__rrc_box(w, h, 0.08, 1, 0.75, 4.0 / 3, &r);
  uint32_t ow = 1 + (data[size - 3] & 31), oh = 1 + (data[size - 4] & 31);
  stk__roi roi;
  if (stk__decoder_roi(d, b.x, b.y, b.x + b.w, b.y + b.h, ow, oh, data[2] & 3, 8,
                       data[1] & 1, &roi, NULL, 0) == STK_OK) {
    if (stk__resample(&sc, roi.px, roi.w, roi.h, b.x * roi.sx - roi.x0,
                      b.y * roi.sy - roi.y0, (b.x + b.w) * roi.sx - roi.x0,
                      (b.y + b.h) * roi.sy - roi.y0, ow, oh, data[3] >> 1 & 1,
                      img8) == 0) {
      static float norm[3][256];
      if (norm[0][1] == 0) { /* mean 0.5, std 0.25 */
        stk_job_spec js;
        stk_job_spec_defaults(&js);
        for (int c = 0; c < 3; c++) js.mean[c] = 0.5f, js.std[c] = 0.25f;
        stk_normalize_table(&js, norm);
      }
      stk__post p = {.flip = data[3] & 1,
                     .bright = 1.2f,
                     .contrast = 0.8f,
                     .satur = 1.1f,
                     .dtype = STK_DTYPE_FLOAT32,
                     .layout = STK_LAYOUT_NCHW,
                     .norm = (const float(*)[256])norm};
      (void)stk__post_store(&sc, ow, oh, &p, img8, out);
    }
  }
  if (stk__decoder_header(d, data, size, &w, &h, NULL, 0) == STK_OK) {
    stk__roi full;
    stk__decoder_full(d, &full, NULL, 0);
  }
  static stk__chain_run *runs[sizeof(chains) / sizeof(chains[0])];
  static float chain_out[48 * 48 * 3];
  size_t k = data[size - 1] % (sizeof(chains) / sizeof(chains[0]));
  if (!runs[k]) {
    stk_job_spec js;
    stk_job_spec_defaults(&js);
    js.source = STK_SOURCE_IMAGEFOLDER;
    js.num_classes = 0;
    if (stk_job_spec_set(&js, "pipeline", chains[k], NULL, 0) ||
        stk_job_spec_set(&js, "dtype", "float32", NULL, 0) ||
        stk__chain_run_create(&runs[k], NULL, &js, NULL, 0))
      return 0;
  }
  if (stk__decoder_header(d, data, size, &w, &h, NULL, 0) == STK_OK)
    stk__chain_run_sample(runs[k], d, w, h, &r, chain_out, (char[64]){0}, 64);
  return 0;
}
