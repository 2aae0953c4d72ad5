/* plugin_cutout.c - an example plugin op (stoker/op.h): Cutout (DeVries &
 * Taylor, 2017), which blanks `n` squares of side `size` pixels at random
 * places, filled with `fill` (0..255). Built into cutout.so (build
 * folder plugins/); a job uses it as
 *
 *   plugin = cutout
 *   pipeline = random_resized_crop(224) | hflip(0.5) | cutout(size=32, n=1) | to(float32)
 *
 * and a worker started with --plugin-dir build/plugins loads it. Squares
 * may reach past the border (clipped there), as in the paper.
 *
 * Deterministic: the squares are a function of the seed stoker passes in
 * (64 bits of the sample's random stream), never of time or thread.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/op.h"

typedef struct {
  unsigned size, n, fill;
} cutout;

/* SplitMix64: a small, well-mixed generator seeded by stoker's seed. */
static uint64_t next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* args: "size=S[, n=N][, fill=F]" (stoker passes each argument trimmed,
 * joined by ", "). */
static int create(const char *args, void **state, char *err, size_t errlen) {
  cutout c = {0, 1, 0};
  char buf[200];
  snprintf(buf, sizeof(buf), "%s", args);
  char *save = NULL;
  for (char *a = strtok_r(buf, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
    while (*a == ' ') a++;
    unsigned v;
    char key[16];
    if (sscanf(a, "%15[a-z]=%u", key, &v) != 2) {
      snprintf(err, errlen, "arguments are size=S, n=N, fill=F; got '%s'", a);
      return -1;
    }
    if (!strcmp(key, "size") && v >= 1 && v <= 4096) c.size = v;
    else if (!strcmp(key, "n") && v <= 64) c.n = v;
    else if (!strcmp(key, "fill") && v <= 255) c.fill = v;
    else {
      snprintf(err, errlen, "'%s': size is 1..4096, n 0..64, fill 0..255", a);
      return -1;
    }
  }
  if (!c.size) {
    snprintf(err, errlen, "needs size=S (the side of a square, pixels)");
    return -1;
  }
  cutout *p = malloc(sizeof(*p));
  if (!p) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  *p = c;
  *state = p;
  return 0;
}

static int apply(void *state, stk_op_image *img, uint64_t seed, char *err,
                 size_t errlen) {
  const cutout *c = state;
  (void)err, (void)errlen;
  for (unsigned k = 0; k < c->n; k++) {
    /* the square's centre, uniform over the image */
    long cx = (long)(next(&seed) % img->width), cy = (long)(next(&seed) % img->height);
    long x0 = cx - (long)c->size / 2, y0 = cy - (long)c->size / 2;
    long x1 = x0 + (long)c->size, y1 = y0 + (long)c->size;
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > (long)img->width) x1 = (long)img->width;
    if (y1 > (long)img->height) y1 = (long)img->height;
    for (long y = y0; y < y1; y++)
      memset(img->px + (size_t)y * img->stride + (size_t)x0 * img->channels, (int)c->fill,
             (size_t)(x1 - x0) * img->channels);
  }
  return 0;
}

static void destroy(void *state) { free(state); }

static const stk_op_info info = {STK_OP_ABI_VERSION, "cutout", create, apply, destroy};

__attribute__((visibility("default"))) const stk_op_info *stoker_op_info(void) {
  return &info;
}
