/* test_aug_chain.c - op chains (pipeline = decode | ...) through the JPEG
 * sources on a generated dataset:
 *  - the chains that spell the named pipelines build their bytes exactly:
 *    `resize(256) | center_crop(224)` = eval, `random_resized_crop(224) |
 *    hflip(0.5)` = train without jitter (both sources, float32 NCHW);
 *  - a long chain with every op: same bytes from two builders and from
 *    stk_build_reference, other bytes for another seed, uint8 / float32 /
 *    bfloat16 and NHWC / NCHW agreeing through the normalize table;
 *  - the example plugin (build/plugins/cutout.so): loaded from the plugin
 *    directory, deterministic, changing the image; refused with a clear
 *    message when no directory is set, the library is missing, it was
 *    built for another ABI version (test_plugin_badabi.so) or it refuses
 *    its arguments;
 *  - views = 2, for a chain and for train: image0 equals the one-view
 *    job's image, image1 differs, the rest is the same;
 *  - views with chains of their own (view1 = ...): each view's tensor has
 *    its chain's size; a view's bytes equal the same view of a job whose
 *    pipeline is that chain, a view without one those of the pipeline;
 *    builders equal stk_build_reference; float32 normalizes every view;
 *    the job text round-trips and refuses what cannot work;
 *  - the hostile decode corpus (tests/fuzz/corpus/decode) through the long
 *    chain: every bad file substituted and reported, nothing crashes;
 *  - every op core's table names has its row of KERNELS[], found by name;
 *  - pad's pixels in each mode against the unpadded crop padded here.
 * PLUGIN_DIR and CORPUS_DIR come from the build.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "badlog.h"
#include "check.h"
#include "core/chain.h"
#include "gen.h"
#include "ops_kernels.h"
#include "stoker/augment.h"
#include "util.h"

static char root[4096];

static const char *LONG_CHAIN =
    "decode | resize(80) | random_crop(72, 64, padding=3) | rotate(0, 180) | "
    "random_resized_crop(48, 40, scale=0.3:1, ratio=0.8:1.25) | hflip(0.5) | "
    "vflip(0.3) | color_jitter(0.4, 0.4, 0.4, 0.1) | grayscale(0.2) | "
    "gaussian_blur(3, sigma=0.1:1.5) | center_crop(40) | rotate(90) | "
    "rand_augment(2, 9) | trivial_augment_wide | sharpness(1.5, p=0.5) | "
    "shear_y(0.2, p=0.5) | equalize(0.3) | aug_mix(severity=4, width=2)";

/* A job over ds/<dataset> with chain (or a named pipeline when chain is
 * NULL), then dtype/layout set. */
static void spec_of(stk_job_spec *s, int source, const char *chain, int named, int dtype,
                    int layout, uint32_t B) {
  tu_spec(s, source, source == STK_SOURCE_TAR ? "ds/shards" : "ds/imagefolder", named,
          STK_DTYPE_FLOAT32, STK_LAYOUT_NCHW, B, 224);
  if (chain) {
    char err[512];
    s->resize = 256;
    int rc = stk_job_spec_set(s, "pipeline", chain, err, sizeof(err));
    CHECK(rc == STK_OK);
    if (rc) fprintf(stderr, "%s\n", err);
  }
  s->dtype = dtype, s->layout = layout;
}

/* Build (epoch, step 0..steps-1) of s with a fresh dataset and builder;
 * returns the concatenated image tensors (caller frees), NULL on error
 * with err filled. */
static uint8_t *images(const stk_job_spec *s, const char *plugin_dir, uint64_t epoch,
                       uint64_t steps, size_t *len, char *err, size_t errlen) {
  *len = 0; /* also when it fails */
  stk_limits lim;
  memset(&lim, 0, sizeof(lim));
  lim.plugin_dir = plugin_dir;
  stk_dataset *ds;
  stk_builder *b;
  if (stk_dataset_open(s, root, &lim, &ds, err, errlen)) return NULL;
  if (stk_builder_create(ds, s, &b, err, errlen)) {
    stk_dataset_close(ds);
    return NULL;
  }
  stk_batch_layout L;
  stk_batch_layout_of(s, &L);
  uint8_t *buf = malloc(L.total_bytes);
  size_t img = L.tensors[STK_TENSOR_IMAGE].nbytes;
  uint8_t *out = malloc(img * steps);
  for (uint64_t st = 0; st < steps; st++) {
    stk_build_info info;
    int rc = stk_builder_build(b, epoch, 0, st, buf, L.total_bytes, &info);
    CHECK(rc == STK_OK);
    if (rc) fprintf(stderr, "build: %s\n", stk_builder_error(b));
    memcpy(out + img * st, buf + L.tensors[STK_TENSOR_IMAGE].offset, img);
  }
  *len = img * steps;
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  return out;
}

static int same(const stk_job_spec *a, const stk_job_spec *b, uint64_t epoch) {
  char err[512];
  size_t la, lb;
  uint8_t *x = images(a, NULL, epoch, 3, &la, err, sizeof(err));
  uint8_t *y = images(b, NULL, epoch, 3, &lb, err, sizeof(err));
  int eq = x && y && la == lb && memcmp(x, y, la) == 0;
  free(x), free(y);
  return eq;
}

static void test_named_equivalents(void) {
  for (int src = 0; src < 2; src++) {
    int source = src ? STK_SOURCE_TAR : STK_SOURCE_IMAGEFOLDER;
    stk_job_spec named, chain;
    spec_of(&named, source, NULL, STK_PIPELINE_EVAL, STK_DTYPE_FLOAT32, STK_LAYOUT_NCHW,
            4);
    named.resize = 256;
    spec_of(&chain, source, "resize(256) | center_crop(224)", 0, STK_DTYPE_FLOAT32,
            STK_LAYOUT_NCHW, 4);
    CHECK(same(&named, &chain, 0));
    /* train without jitter: the jitter factors are drawn after the flip,
     * so the two draw the same crop boxes and flips */
    spec_of(&named, source, NULL, STK_PIPELINE_TRAIN, STK_DTYPE_FLOAT32, STK_LAYOUT_NCHW,
            4);
    named.brightness = named.contrast = named.saturation = 0;
    spec_of(&chain, source,
            "random_resized_crop(224, scale=0.08:1, ratio=0.75:1.33333333) | hflip(0.5)",
            0, STK_DTYPE_FLOAT32, STK_LAYOUT_NCHW, 4);
    CHECK(same(&named, &chain, 1));
  }
}

static void test_long_chain(void) {
  stk_job_spec a, b;
  spec_of(&a, STK_SOURCE_IMAGEFOLDER, LONG_CHAIN, 0, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, 5);
  CHECK(a.height == 40 && a.width == 40);
  char err[512];
  CHECK(stk_job_spec_validate(&a, err, sizeof(err)) == STK_OK);
  /* two builders, two epochs */
  CHECK(same(&a, &a, 0) && same(&a, &a, 2));
  /* another seed: other bytes */
  b = a;
  b.seed = 43;
  CHECK(!same(&a, &b, 0));
  /* stk_build_reference equals a builder's batch */
  stk_batch_layout L;
  stk_batch_layout_of(&a, &L);
  uint8_t *ref = malloc(L.total_bytes);
  CHECK(stk_build_reference(&a, root, 0, 0, 1, ref, L.total_bytes, err, sizeof(err)) ==
        STK_OK);
  size_t len;
  uint8_t *bl = images(&a, NULL, 0, 2, &len, err, sizeof(err));
  size_t img = L.tensors[STK_TENSOR_IMAGE].nbytes;
  CHECK(bl && memcmp(bl + img, ref + L.tensors[STK_TENSOR_IMAGE].offset, img) == 0);
  free(bl);
  /* every dtype and layout: the same 8-bit image through the table */
  uint8_t *u8 = images(&a, NULL, 0, 1, &len, err, sizeof(err));
  float table[3][256];
  stk_normalize_table(&a, table);
  size_t hw = (size_t)a.height * a.width;
  for (int dt = 0; dt < 2; dt++)
    for (int lay = 0; lay < 2; lay++) {
      stk_job_spec f = a;
      f.dtype = dt ? STK_DTYPE_BFLOAT16 : STK_DTYPE_FLOAT32;
      f.layout = lay ? STK_LAYOUT_NCHW : STK_LAYOUT_NHWC;
      size_t flen;
      uint8_t *fl = images(&f, NULL, 0, 1, &flen, err, sizeof(err));
      int ok = fl != NULL;
      for (size_t s = 0; ok && s < a.batch_size; s++)
        for (size_t i = 0; ok && i < hw; i++)
          for (int c = 0; c < 3; c++) {
            uint8_t v = u8[(s * hw + i) * 3 + c];
            size_t at = s * hw * 3 + (lay ? (size_t)c * hw + i : i * 3 + (size_t)c);
            float want = table[c][v], got;
            if (dt) {
              uint16_t h;
              memcpy(&h, fl + at * 2, 2);
              uint32_t u = (uint32_t)h << 16;
              memcpy(&got, &u, 4);
              ok = fabsf(got - want) <= fabsf(want) / 128 + 1e-6f;
            } else {
              memcpy(&got, fl + at * 4, 4);
              ok = got == want;
            }
          }
      CHECK(ok);
      free(fl);
    }
  free(u8);
  free(ref);
}

/* random_erasing on the tensor: deterministic, stk_build_reference's
 * bytes, and in every dtype/layout it changes only rectangles of the
 * chain's output without it (the erasing draws come last). */
static void test_erasing(void) {
  const char *base = "random_resized_crop(40) | rand_augment(2, 9)";
  char chain[512];
  snprintf(chain, sizeof(chain), "%s | random_erasing(0.7, value=random)", base);
  for (int dt = 0; dt < 3; dt++)
    for (int lay = 0; lay < 2; lay++) {
      int dtype = dt == 0   ? STK_DTYPE_FLOAT32
                  : dt == 1 ? STK_DTYPE_BFLOAT16
                            : STK_DTYPE_UINT8;
      int layout = lay ? STK_LAYOUT_NHWC : STK_LAYOUT_NCHW;
      stk_job_spec a, b;
      if (dtype == STK_DTYPE_UINT8)
        snprintf(chain, sizeof(chain), "%s | random_erasing(0.7, value=7)", base);
      spec_of(&a, STK_SOURCE_IMAGEFOLDER, chain, 0, dtype, layout, 4);
      spec_of(&b, STK_SOURCE_IMAGEFOLDER, base, 0, dtype, layout, 4);
      char err[512];
      CHECK(stk_job_spec_validate(&a, err, sizeof(err)) == STK_OK);
      CHECK(same(&a, &a, 1));
      stk_batch_layout L;
      stk_batch_layout_of(&a, &L);
      uint8_t *ref = malloc(L.total_bytes);
      CHECK(stk_build_reference(&a, root, 1, 0, 0, ref, L.total_bytes, err,
                                sizeof(err)) == STK_OK);
      size_t la, lb, img = L.tensors[STK_TENSOR_IMAGE].nbytes;
      uint8_t *x = images(&a, NULL, 1, 1, &la, err, sizeof(err));
      uint8_t *y = images(&b, NULL, 1, 1, &lb, err, sizeof(err));
      CHECK(x && y && la == lb && la == img);
      CHECK(x && memcmp(x, ref + L.tensors[STK_TENSOR_IMAGE].offset, img) == 0);
      /* per sample: the differing values lie in one rectangle, per plane */
      size_t esz = dtype == STK_DTYPE_FLOAT32 ? 4 : dtype == STK_DTYPE_BFLOAT16 ? 2 : 1;
      size_t per = img / 4 / esz, erased = 0;
      for (size_t smp = 0; x && y && smp < 4; smp++) {
        int x0 = 40, y0 = 40, x1 = -1, y1 = -1;
        size_t diff = 0;
        for (size_t k = 0; k < per; k++) {
          size_t o = (smp * per + k) * esz;
          if (!memcmp(x + o, y + o, esz)) continue;
          int px = lay ? (int)(k / 3 % 40) : (int)(k % 40);
          int py = lay ? (int)(k / 3 / 40) : (int)(k / 40 % 40);
          x0 = px < x0 ? px : x0, x1 = px > x1 ? px : x1;
          y0 = py < y0 ? py : y0, y1 = py > y1 ? py : y1;
          diff++;
        }
        /* nearly every value of the box differs (a random value may equal
         * the pixel's by chance; a constant 7 may too) */
        if (diff) {
          size_t box = (size_t)(x1 - x0 + 1) * (size_t)(y1 - y0 + 1) * 3;
          CHECK(diff <= box && diff * 10 >= box * (dtype == STK_DTYPE_UINT8 ? 5 : 9));
          erased++;
        }
      }
      CHECK(erased > 0);
      free(x), free(y), free(ref);
    }
}

static void test_plugin(void) {
  const char *with =
      "random_resized_crop(48) | hflip(0.5) | cutout(size=12, n=2, fill=7)";
  stk_job_spec a, plain;
  spec_of(&a, STK_SOURCE_IMAGEFOLDER, with, 0, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, 6);
  snprintf(a.plugin, sizeof(a.plugin), "cutout");
  spec_of(&plain, STK_SOURCE_IMAGEFOLDER, "random_resized_crop(48) | hflip(0.5)", 0,
          STK_DTYPE_UINT8, STK_LAYOUT_NHWC, 6);
  char err[512] = "";
  size_t l1, l2, l3;
  uint8_t *x = images(&a, PLUGIN_DIR, 0, 2, &l1, err, sizeof(err));
  if (!x) fprintf(stderr, "plugin: %s\n", err);
  uint8_t *y = images(&a, PLUGIN_DIR, 0, 2, &l2, err, sizeof(err));
  uint8_t *z = images(&plain, NULL, 0, 2, &l3, err, sizeof(err));
  CHECK(x && y && z && l1 == l2 && l1 == l3);
  if (x && y && z) {
    CHECK(memcmp(x, y, l1) == 0); /* deterministic */
    /* cutout only writes fill = 7: every byte equals the plain chain's or 7,
     * and some squares landed */
    size_t filled = 0, wrong = 0;
    for (size_t i = 0; i < l1; i++)
      if (x[i] != z[i]) x[i] == 7 ? filled++ : wrong++;
    CHECK(wrong == 0 && filled > 100);
  }
  free(x), free(y), free(z);

  /* refusals, each with its reason */
  struct {
    const char *dir, *plugin, *chain, *want;
  } bad[] = {
      {NULL, "cutout", with, "no plugin directory"},
      {"/nonexistent-dir", "cutout", with, "not found"},
      {PLUGIN_DIR, "test_plugin_badabi", "random_resized_crop(48) | test_plugin_badabi()",
       "ABI version 99"},
      {PLUGIN_DIR, "cutout", "random_resized_crop(48) | cutout(size=0)",
       "size is 1..4096"},
      {PLUGIN_DIR, "cutout", "random_resized_crop(48) | cutout(n=2)", "needs size"},
  };
  unsetenv("STOKER_PLUGIN_DIR");
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    stk_job_spec s;
    spec_of(&s, STK_SOURCE_IMAGEFOLDER, bad[i].chain, 0, STK_DTYPE_UINT8, STK_LAYOUT_NHWC,
            2);
    snprintf(s.plugin, sizeof(s.plugin), "%s", bad[i].plugin);
    size_t l;
    err[0] = 0;
    uint8_t *p = images(&s, bad[i].dir, 0, 1, &l, err, sizeof(err));
    CHECK(p == NULL && strstr(err, bad[i].want) != NULL);
    if (p || !strstr(err, bad[i].want))
      fprintf(stderr, "case %zu: '%s' (wanted '%s')\n", i, err, bad[i].want);
    free(p);
  }
  /* A plugin others may write, or a plugin directory others may write: the
   * worker would run their code; refused, saying so. */
  {
    char dir[] = "/tmp/stoker-plugin-mode-XXXXXX", so[200], src[600];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(so, sizeof so, "%s/cutout.so", dir);
    snprintf(src, sizeof src, "%s/cutout.so", PLUGIN_DIR);
    FILE *in = fopen(src, "rb"), *out = fopen(so, "wb");
    char buf[65536];
    size_t n;
    while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    if (in) fclose(in);
    if (out) fclose(out);
    for (int k = 0; k < 2; k++) {
      CHECK(chmod(so, k ? 0755 : 0757) == 0);
      CHECK(chmod(dir, k ? 0777 : 0700) == 0);
      stk_job_spec s;
      spec_of(&s, STK_SOURCE_IMAGEFOLDER, with, 0, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, 2);
      snprintf(s.plugin, sizeof(s.plugin), "cutout");
      size_t l;
      err[0] = 0;
      uint8_t *p = images(&s, dir, 0, 1, &l, err, sizeof(err));
      CHECK(p == NULL && strstr(err, "is writable by others") != NULL &&
            strstr(err, k ? dir : so) != NULL);
      if (p || !strstr(err, "writable by others"))
        fprintf(stderr, "mode case %d: %s\n", k, err);
      free(p);
    }
    chmod(dir, 0700);
    unlink(so);
    rmdir(dir);
  }
  /* $STOKER_PLUGIN_DIR stands in for the directory */
  setenv("STOKER_PLUGIN_DIR", PLUGIN_DIR, 1);
  size_t l;
  uint8_t *p = images(&a, NULL, 0, 1, &l, err, sizeof(err));
  CHECK(p != NULL);
  free(p);
  unsetenv("STOKER_PLUGIN_DIR");
}

/* views = 2: image0 is the one-view job's image, image1 the same samples
 * under other draws; label/mask/index as in the one-view job; for a chain
 * and for train. */
static void test_views(void) {
  for (int named = 0; named < 2; named++) {
    stk_job_spec one, two;
    if (named) {
      spec_of(&one, STK_SOURCE_TAR, NULL, STK_PIPELINE_TRAIN, STK_DTYPE_FLOAT32,
              STK_LAYOUT_NCHW, 4);
      one.brightness = 0.4f;
    } else {
      spec_of(&one, STK_SOURCE_IMAGEFOLDER, LONG_CHAIN, 0, STK_DTYPE_UINT8,
              STK_LAYOUT_NHWC, 4);
    }
    two = one;
    two.views = 2;
    char err[512];
    CHECK(stk_job_spec_validate(&two, err, sizeof(err)) == STK_OK);
    stk_batch_layout L1, L2;
    stk_batch_layout_of(&one, &L1);
    stk_batch_layout_of(&two, &L2);
    uint8_t *a = malloc(L1.total_bytes), *b = malloc(L2.total_bytes);
    CHECK(stk_build_reference(&one, root, 1, 0, 2, a, L1.total_bytes, err, sizeof(err)) ==
          STK_OK);
    CHECK(stk_build_reference(&two, root, 1, 0, 2, b, L2.total_bytes, err, sizeof(err)) ==
          STK_OK);
    size_t img = L1.tensors[0].nbytes;
    CHECK(memcmp(a + L1.tensors[0].offset, b + L2.tensors[0].offset, img) == 0);
    CHECK(memcmp(b + L2.tensors[0].offset, b + L2.tensors[1].offset, img) != 0);
    for (int t = 1; t < 4; t++) /* label, mask, index */
      CHECK(memcmp(a + L1.tensors[t].offset, b + L2.tensors[t + 1].offset,
                   L1.tensors[t].nbytes) == 0);
    /* a builder gives the reference's bytes */
    stk_dataset *ds;
    stk_builder *bl;
    CHECK(stk_dataset_open(&two, root, NULL, &ds, err, sizeof(err)) == STK_OK);
    CHECK(stk_builder_create(ds, &two, &bl, err, sizeof(err)) == STK_OK);
    uint8_t *c = malloc(L2.total_bytes);
    CHECK(stk_builder_build(bl, 1, 0, 2, c, L2.total_bytes, NULL) == STK_OK);
    CHECK(memcmp(b, c, L2.total_bytes) == 0);
    stk_builder_destroy(bl);
    stk_dataset_close(ds);
    free(a), free(b), free(c);
  }
}

/* One tensor of a built batch. */
static const uint8_t *tensor(const uint8_t *buf, const stk_batch_layout *L,
                             const char *name, uint64_t *nbytes) {
  int t = stk_batch_layout_find(L, name);
  CHECK(t >= 0);
  if (t < 0) return buf;
  *nbytes = L->tensors[t].nbytes;
  return buf + L->tensors[t].offset;
}

static const char *VIEW_P = "decode | random_resized_crop(40, scale=0.3:1) | hflip(0.5)";
static const char *VIEW_X =
    "decode | random_resized_crop(24, 16, scale=0.05:0.4) | hflip(0.5) | "
    "color_jitter(0.4, 0.4, 0.2, 0.1) | grayscale(0.2) | gaussian_blur(3, sigma=0.1:2)";

/* A 3-view job over ds/imagefolder: pipeline VIEW_P; view1 = VIEW_X when
 * x1, view2 = VIEW_X when x2 (NULL: the pipeline's). */
static void view_job(stk_job_spec *s, int dtype, const char *x1, const char *x2) {
  char err[512];
  spec_of(s, STK_SOURCE_IMAGEFOLDER, VIEW_P, 0, dtype, STK_LAYOUT_NCHW, 4);
  s->views = 3;
  if (x1) CHECK(stk_job_spec_set(s, "view1", x1, err, sizeof(err)) == STK_OK);
  if (x2) CHECK(stk_job_spec_set(s, "view2", x2, err, sizeof(err)) == STK_OK);
  int rc = stk_job_spec_validate(s, err, sizeof(err));
  CHECK(rc == STK_OK);
  if (rc) fprintf(stderr, "view_job: %s\n", err);
}

/* Built (epoch 1, step st) with a fresh builder; caller frees. */
static uint8_t *built(const stk_job_spec *s, uint64_t st, stk_batch_layout *L) {
  char err[512];
  stk_dataset *ds;
  stk_builder *bl;
  stk_batch_layout_of(s, L);
  uint8_t *buf = calloc(1, L->total_bytes);
  CHECK(stk_dataset_open(s, root, NULL, &ds, err, sizeof(err)) == STK_OK);
  CHECK(stk_builder_create(ds, s, &bl, err, sizeof(err)) == STK_OK);
  CHECK(stk_builder_build(bl, 1, 0, st, buf, L->total_bytes, NULL) == STK_OK);
  stk_builder_destroy(bl);
  stk_dataset_close(ds);
  return buf;
}

static void test_view_chains(void) {
  char err[512];
  stk_job_spec own, same, allx;
  view_job(&own, STK_DTYPE_UINT8, VIEW_X, NULL); /* view1 its own, view2 the pipeline's */
  view_job(&same, STK_DTYPE_UINT8, NULL, NULL);  /* every view the pipeline's */
  view_job(&allx, STK_DTYPE_UINT8, VIEW_X, VIEW_X); /* views 1 and 2 X */
  stk_batch_layout L, Ls, Lx;
  uint8_t *a = built(&own, 2, &L), *b = built(&same, 2, &Ls), *c = built(&allx, 2, &Lx);
  /* shapes: image0 and image2 40x40, image1 24x16, NCHW */
  CHECK(L.ntensors == 6);
  CHECK(L.tensors[0].shape[2] == 40 && L.tensors[0].shape[3] == 40);
  CHECK(L.tensors[1].shape[1] == 3 && L.tensors[1].shape[2] == 24 &&
        L.tensors[1].shape[3] == 16);
  CHECK(L.tensors[1].nbytes == 4ull * 3 * 24 * 16);
  CHECK(L.tensors[2].shape[2] == 40 && L.tensors[2].shape[3] == 40);
  /* view 0 and view 2 (the pipeline's) as in the job with no own chains;
   * view 1 (X) as view 1 of the job whose views 1 and 2 run X */
  uint64_t n0, n1, n2, m;
  const uint8_t *i0 = tensor(a, &L, "image0", &n0), *i1 = tensor(a, &L, "image1", &n1),
                *i2 = tensor(a, &L, "image2", &n2);
  CHECK(memcmp(i0, tensor(b, &Ls, "image0", &m), n0) == 0 && m == n0);
  CHECK(memcmp(i2, tensor(b, &Ls, "image2", &m), n2) == 0 && m == n2);
  CHECK(memcmp(i1, tensor(c, &Lx, "image1", &m), n1) == 0 && m == n1);
  const uint8_t *x2 = tensor(c, &Lx, "image2", &m); /* X too, its own draws */
  CHECK(m == n1 && memcmp(x2, i1, n1) != 0);
  const char *rest[] = {"label", "mask", "index"};
  for (int t = 0; t < 3; t++) {
    uint64_t na = 0, nb = 1; /* set by tensor(), which may fail */
    const uint8_t *x = tensor(a, &L, rest[t], &na), *y = tensor(b, &Ls, rest[t], &nb);
    CHECK(na == nb && memcmp(x, y, na) == 0);
  }
  /* the reference builder gives the builders' bytes */
  uint8_t *r = malloc(L.total_bytes);
  CHECK(stk_build_reference(&own, root, 1, 0, 2, r, L.total_bytes, err, sizeof(err)) ==
        STK_OK);
  CHECK(memcmp(r, a, L.total_bytes) == 0);
  /* float32: every view normalized with the pipeline's numbers (a table
   * lookup of the uint8 view) */
  stk_job_spec f;
  view_job(&f, STK_DTYPE_FLOAT32, VIEW_X, NULL);
  stk_batch_layout Lf;
  uint8_t *fb = built(&f, 2, &Lf);
  float table[3][256];
  stk_normalize_table(&f, table);
  uint64_t nf;
  const float *f1 = (const float *)(const void *)tensor(fb, &Lf, "image1", &nf);
  CHECK(nf == n1 * 4);
  size_t plane = 24 * 16, bad = 0;
  for (size_t e = 0; e < n1; e++) bad += f1[e] != table[(e / plane) % 3][i1[e]];
  CHECK(bad == 0);
  free(a), free(b), free(c), free(r), free(fb);

  /* the job text: round trip, the hash, order, refusals */
  char t1[16384], t2[16384];
  stk_job_spec_format(&own, t1, sizeof(t1));
  CHECK(strstr(t1, "\nview1 = decode | random_resized_crop(24, 16") != NULL);
  CHECK(strstr(t1, "view2 =") == NULL);
  stk_job_spec p;
  stk_job_spec_defaults(&p);
  CHECK(stk_job_spec_parse(&p, t1, err, sizeof(err)) == STK_OK);
  stk_job_spec_format(&p, t2, sizeof(t2));
  CHECK(strcmp(t1, t2) == 0 && memcmp(&p, &own, sizeof(p)) == 0);
  CHECK(stk_job_spec_hash(&own) != stk_job_spec_hash(&same));
  /* the pipeline set after view1 keeps view1's chain */
  stk_job_spec q = own;
  CHECK(stk_job_spec_set(&q, "pipeline", VIEW_P, err, sizeof(err)) == STK_OK);
  CHECK(memcmp(&q, &own, sizeof(q)) == 0);
  /* view1 = pipeline takes it back */
  CHECK(stk_job_spec_set(&q, "view1", "pipeline", err, sizeof(err)) == STK_OK);
  CHECK(memcmp(&q, &same, sizeof(q)) == 0);
  /* normalize/to in a view's chain, no fixed size, a batch op, a view the
   * job does not have, a named pipeline */
  q = own;
  CHECK(stk_job_spec_set(&q, "view1", "random_crop(8) | normalize(imagenet)", err,
                         sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "view1: normalize and to apply to every view") != NULL);
  CHECK(stk_job_spec_set(&q, "view2", "hflip", err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "view2") == err);
  CHECK(stk_job_spec_set(&q, "view2", "random_crop(8) | noise", err, sizeof(err)) ==
        STK_OK); /* a plugin op: checked against plugin = at validation */
  CHECK(stk_job_spec_validate(&q, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "view2 op 3: unknown op 'noise'") == err);
  q.num_classes = 7;
  CHECK(stk_job_spec_set(&q, "view1", "random_crop(8) | mixup(0.2)", err, sizeof(err)) ==
        STK_OK);
  CHECK(stk_job_spec_validate(&q, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "view1 op 3: a batch op needs views = 1") != NULL);
  q = own;
  q.views = 2;
  CHECK(stk_job_spec_validate(&q, err, sizeof(err)) == STK_OK);
  q.views = 1;
  CHECK(stk_job_spec_validate(&q, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "view1 has a chain of its own, but views = 1") != NULL);
  q = own;
  CHECK(stk_job_spec_set(&q, "pipeline", "train", err, sizeof(err)) == STK_OK);
  CHECK(stk_job_spec_validate(&q, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "needs the pipeline given as an op chain") != NULL);
  /* a stored chain out of place or a forged size */
  q = own;
  q.view_chain[0] = 3;
  CHECK(stk_job_spec_validate(&q, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  q = own;
  q.view_height[0]++;
  CHECK(stk_job_spec_validate(&q, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "view1 makes 24x16 images, but its stored size is 25x16") != NULL);
  q = same;
  q.view_width[2] = 5;
  CHECK(stk_job_spec_validate(&q, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  /* the texts together must fit the chain buffer */
  char longc[700], longer[900];
  snprintf(longc, sizeof(longc), "decode | random_crop(8)");
  for (int k = 0; k < 8; k++) /* canonical: about 380 bytes */
    strcat(longc, " | gaussian_blur(3, sigma=0.1:2)");
  snprintf(longer, sizeof(longer), "%s", longc);
  for (int k = 0; k < 6; k++) /* about 640 */
    strcat(longer, " | gaussian_blur(3, sigma=0.1:2)");
  q = own;
  CHECK(stk_job_spec_set(&q, "view2", longc, err, sizeof(err)) == STK_OK);
  CHECK(stk_job_spec_validate(&q, err, sizeof(err)) == STK_OK);
  CHECK(stk_job_spec_set(&q, "view1", longer, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "together are over") != NULL);
  /* views with equal chains store the text once */
  CHECK(stk_job_spec_set(&q, "view1", longc, err, sizeof(err)) == STK_OK);
  CHECK(q.view_chain[0] == q.view_chain[1] && q.view_chain[0] != 0);
  CHECK(stk_job_spec_validate(&q, err, sizeof(err)) == STK_OK);
  stk_job_spec_format(&q, t1, sizeof(t1));
  stk_job_spec_defaults(&p);
  CHECK(stk_job_spec_parse(&p, t1, err, sizeof(err)) == STK_OK);
  CHECK(memcmp(&p, &q, sizeof(p)) == 0);
  CHECK(stk_job_spec_validate(&q, err, sizeof(err)) == STK_OK); /* unchanged */
}

/* The hostile decode corpus as one ImageFolder class, through the long
 * chain with float output: bad files are substituted and reported. */
static void test_hostile_corpus(void) {
  char dir[4200], p[4400];
  snprintf(dir, sizeof(dir), "%s/hostile", root);
  mkdir(dir, 0755);
  snprintf(dir, sizeof(dir), "%s/hostile/c0", root);
  mkdir(dir, 0755);
  DIR *d = opendir(CORPUS_DIR);
  CHECK(d != NULL);
  if (!d) return;
  unsigned n = 0;
  struct dirent *e;
  static uint8_t data[1 << 20];
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof(p), "%s/%s", CORPUS_DIR, e->d_name);
    FILE *f = fopen(p, "rb");
    if (!f) continue;
    size_t len = fread(data, 1, sizeof(data), f);
    fclose(f);
    snprintf(p, sizeof(p), "%s/%04u.jpg", dir, n++);
    tu_write(p, data, len);
  }
  closedir(d);
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_IMAGEFOLDER, "hostile", STK_PIPELINE_EVAL, STK_DTYPE_FLOAT32,
          STK_LAYOUT_NCHW, 4, 224);
  s.resize = 256;
  char err[512];
  CHECK(stk_job_spec_set(&s, "pipeline", LONG_CHAIN, err, sizeof(err)) == STK_OK);
  s.dtype = STK_DTYPE_FLOAT32;
  stk_dataset *ds;
  stk_builder *b;
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_OK);
  badlog log;
  badlog_init(&log);
  stk_dataset_set_log(ds, badlog_fn, &log);
  CHECK(stk_builder_create(ds, &s, &b, err, sizeof(err)) == STK_OK);
  stk_batch_layout L;
  stk_batch_layout_of(&s, &L);
  uint8_t *buf = malloc(L.total_bytes);
  uint64_t steps = stk_steps_per_epoch(&s, stk_dataset_size(ds)), subst = 0, ok = 0;
  for (uint64_t st = 0; st < steps; st++) {
    stk_build_info info;
    int rc = stk_builder_build(b, 0, 0, st, buf, L.total_bytes, &info);
    /* all bad: a batch may find no substitute at all (STK_CORRUPT) */
    CHECK(rc == STK_OK || rc == STK_CORRUPT);
    if (rc == STK_OK) ok++, subst += info.substituted;
  }
  printf(
      "hostile corpus through the long chain: %u files, %llu steps built, %llu "
      "substituted, %u reported bad\n",
      n, (unsigned long long)ok, (unsigned long long)subst, log.n);
  CHECK(log.n > 0 && stk_dataset_bad_samples(ds) == (uint64_t)log.n);
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  badlog_clear(&log);
}

/* Every op core's table names has a row of KERNELS[] under that name, and
 * so do plugin ops and the fused ops; kind 0 and a kind past the table
 * have none. */
static void test_kernel_rows(void) {
  int named = 0;
  for (int k = 1; k < STK__OP_KINDS_MAX; k++) {
    const char *name = stk__op_kind_name(k);
    if (!name) continue;
    named++;
    const stk__kernel_row *row = stk__kernel_of(k);
    CHECK(row && !strcmp(row->name, name));
    if (!row) fprintf(stderr, "op '%s' (kind %d) has no row of KERNELS[]\n", name, k);
  }
  CHECK(named > 30);
  CHECK(stk__kernel_of(STK__OP_PLUGIN) && stk__kernel_of(STK__OP_PLUGIN)->run);
  CHECK(stk__kernel_of(STK__OP_TRAIN_JITTER) && stk__kernel_of(STK__OP_EVAL_CROP));
  CHECK(!stk__kernel_of(0) && !stk__kernel_of(STK__OP_KINDS_MAX - 1));
}

/* Where pad's output pixel i (an offset from the image's first pixel on
 * one axis of n) comes from: -1 for the fill. Written apart from the
 * kernel, as np.pad's modes define it: edge clamps; reflect is periodic
 * over 2(n - 1), the edge pixel once; symmetric over 2n, the edge twice. */
static int64_t pad_ref(int64_t i, int64_t n, int mode) {
  if (i >= 0 && i < n) return i;
  int64_t p = mode == 2 ? 2 * (n - 1) : 2 * n, m = ((i % p) + p) % p;
  if (mode == 0) return -1;
  if (mode == 1) return i < 0 ? 0 : n - 1;
  if (mode == 2) return m < n ? m : p - m;
  return m < n ? m : p - 1 - m;
}

/* pad(3, 1, 30, 5) of a 24 x 24 crop in each mode: every byte equals the
 * crop's own pixels padded by pad_ref (the right side is wider than the
 * crop, so reflect and symmetric go round more than once). */
static void test_pad(void) {
  static const char *const modes[] = {"constant", "edge", "reflect", "symmetric"};
  const int64_t S = 24, L = 3, T = 1, W = 24 + 3 + 30, H = 24 + 1 + 5;
  char err[512], chain[200];
  size_t la, lb;
  stk_job_spec a, b;
  spec_of(&a, STK_SOURCE_IMAGEFOLDER, "decode | center_crop(24)", 0, STK_DTYPE_UINT8,
          STK_LAYOUT_NHWC, 4);
  uint8_t *base = images(&a, NULL, 0, 2, &la, err, sizeof(err));
  CHECK(base && la == 8 * S * S * 3);
  for (int mode = 0; base && mode < 4; mode++) {
    snprintf(chain, sizeof(chain),
             "decode | center_crop(24) | pad(3, 1, 30, 5, fill=7, mode=%s)", modes[mode]);
    spec_of(&b, STK_SOURCE_IMAGEFOLDER, chain, 0, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, 4);
    CHECK(b.height == H && b.width == W);
    uint8_t *got = images(&b, NULL, 0, 2, &lb, err, sizeof(err));
    CHECK(got && lb == 8 * (size_t)(H * W * 3));
    size_t bad = 0;
    for (int64_t k = 0; got && k < 8; k++)
      for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++) {
          int64_t sy = pad_ref(y - T, S, mode), sx = pad_ref(x - L, S, mode);
          for (int c = 0; c < 3; c++) {
            uint8_t want = sy < 0 || sx < 0 ? 7 : base[((k * S + sy) * S + sx) * 3 + c];
            bad += got[((k * H + y) * W + x) * 3 + c] != want;
          }
        }
    CHECK(bad == 0);
    if (bad) fprintf(stderr, "pad mode %s: %zu bytes differ\n", modes[mode], bad);
    else
      printf("pad mode %s: 8 samples 24x24 -> %dx%d, every byte as padded here\n",
             modes[mode], (int)H, (int)W);
    free(got);
  }
  free(base);
}

int main(void) {
  test_kernel_rows();
  if (tu_tmpdir(root, sizeof(root), "chain")) return 77;
  char ds[4200], err[256];
  snprintf(ds, sizeof(ds), "%s/ds", root);
  stk__gen_opts o = {ds, 40, 7, 4, 1, 1, 16, 120, 260};
  if (stk__gen_dataset(&o, err, sizeof(err))) {
    fprintf(stderr, "gen: %s\n", err);
    return 1;
  }
  test_named_equivalents();
  test_long_chain();
  test_erasing();
  test_plugin();
  test_views();
  test_view_chains();
  test_hostile_corpus();
  test_pad();
  tu_rmtree(root);
  CHECK_DONE();
}
