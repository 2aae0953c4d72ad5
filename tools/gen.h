/* gen.h - the demo/test dataset generator (gen.c) of tools/, for
 * stoker-dataset, the tests and the benchmarks; never part of a shipped
 * library: procedural class-dependent images, JPEG encoding
 * (baseline, progressive, grayscale, CMYK), ustar members, and a whole
 * dataset in both layouts.
 */
#ifndef STOKER_TOOLS_GEN_H
#define STOKER_TOOLS_GEN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* w*h*3 RGB of class `label`: a per-class color scheme, shape and stripe
 * texture, placed and perturbed by `seed`, plus noise. */
void stk__gen_image(uint8_t *rgb, uint32_t w, uint32_t h, uint32_t label, uint64_t seed);

enum { STK__GEN_RGB = 0, STK__GEN_GRAY = 1, STK__GEN_CMYK = 2 };
/* Encode rgb (w*h*3) as JPEG; *out is malloc'd (caller frees). color:
 * STK__GEN_*. Returns 0 or -1. */
int stk__encode_jpeg(const uint8_t *rgb, uint32_t w, uint32_t h, int color, int quality,
                     int progressive, uint8_t **out, size_t *len);

/* Append one regular-file member to a tar stream. 0 or -1. */
int stk__tar_member(FILE *f, const char *name, const void *data, size_t len);
/* Two zero blocks. */
int stk__tar_end(FILE *f);

typedef struct stk__gen_opts {
  const char *out; /* directory; created */
  uint64_t count;
  uint64_t seed;
  uint32_t classes;
  int imagefolder, tar;
  uint32_t per_shard;          /* samples per tar shard */
  uint32_t min_side, max_side; /* longer side range, default 250..600 */
} stk__gen_opts;
/* Write out/imagefolder/classNNN/imgNNNNNNNN.jpg and/or out/shards/shard-NNNNNN.tar.
 * Sample i: label = i mod classes, size/aspect/progressive/grayscale from
 * (seed, i). Returns 0, or -1 with a message in err. */
int stk__gen_dataset(const stk__gen_opts *o, char *err, size_t errlen);

#endif
