/* test_chain.c - op chains in the job spec (core/chain.c, job_spec.c's
 * pipeline key): an example chain parses and sets dtype, layout,
 * mean/std and the output size; the canonical text round-trips and its
 * hash separates chains that build different bytes; the named pipelines
 * keep the hash they had; every refusal says which op and why (unknown op,
 * bad or extra argument, decode not first, an op after to, a size that
 * depends on the image, a size that disagrees with height/width, a plugin
 * op whose library is not named, the train keys set beside a chain); views
 * (image0.. tensors, only for random image pipelines); batch ops
 * (mixup, cutmix: the target tensor, floats on the wire, refusals); pad
 * (its forms, canonical text, size, refusals); and
 * thousands of mangled chains never crash the parser.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "stoker/core.h"

static int set(stk_job_spec *s, const char *key, const char *value, char *err,
               size_t errlen) {
  return stk_job_spec_set(s, key, value, err, errlen);
}

static void image_job(stk_job_spec *s) {
  stk_job_spec_defaults(s);
  s->source = STK_SOURCE_IMAGEFOLDER;
  snprintf(s->dataset, sizeof s->dataset, "ds");
}

static void test_issue_example(void) {
  stk_job_spec s;
  image_job(&s);
  char err[512] = "";
  int rc = set(&s, "pipeline",
               "decode | random_resized_crop(224, scale=0.08:1, ratio=0.75:1.333) | "
               "hflip(0.5) | color_jitter(0.4, 0.4, 0.4) | normalize(imagenet) | "
               "to(float32, nchw)",
               err, sizeof err);
  CHECK(rc == STK_OK);
  if (rc) fprintf(stderr, "%s\n", err);
  CHECK(s.pipeline == STK_PIPELINE_CHAIN);
  CHECK(s.dtype == STK_DTYPE_FLOAT32 && s.layout == STK_LAYOUT_NCHW);
  CHECK(s.height == 224 && s.width == 224);
  CHECK(s.mean[0] == 0.485f && s.std[2] == 0.225f);
  CHECK(strcmp(s.chain,
               "decode | random_resized_crop(224, 224, scale=0.0799999982:1, "
               "ratio=0.75:1.33299994) | hflip(0.5) | "
               "color_jitter(brightness=0.600000024:1.39999998, "
               "contrast=0.600000024:1.39999998, saturation=0.600000024:1.39999998, "
               "hue=0:0)") == 0);
  if (strncmp(s.chain, "decode", 6)) fprintf(stderr, "chain: %s\n", s.chain);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);

  /* canonical text -> parse -> same spec, same hash */
  static char t1[8192], t2[8192];
  stk_job_spec_format(&s, t1, sizeof t1);
  CHECK(strstr(t1, "\npipeline = decode | random_resized_crop(224, 224,") != NULL);
  CHECK(strstr(t1, "plugin =") == NULL); /* left out while empty */
  stk_job_spec b;
  stk_job_spec_defaults(&b);
  CHECK(stk_job_spec_parse(&b, t1, err, sizeof err) == STK_OK);
  stk_job_spec_format(&b, t2, sizeof t2);
  CHECK(strcmp(t1, t2) == 0);
  CHECK(stk_job_spec_hash(&s) == stk_job_spec_hash(&b));
  CHECK(stk_job_spec_validate(&b, err, sizeof err) == STK_OK);

  /* the same chain written differently: same canonical text */
  stk_job_spec c;
  image_job(&c);
  CHECK(
      set(&c, "pipeline",
          "random_resized_crop( 224 ,224,scale = 0.08:1 , ratio=0.75:1.333)|hflip(p=0.5)|"
          "color_jitter(brightness=0.4, contrast=0.6:1.4, saturation=0.4)|"
          "normalize(0.485, 0.456, 0.406, 0.229, 0.224, 0.225)|to(float32)",
          err, sizeof err) == STK_OK);
  CHECK(strcmp(c.chain, s.chain) == 0);
  CHECK(stk_job_spec_hash(&c) == stk_job_spec_hash(&s));
  /* a different parameter: a different hash */
  CHECK(set(&c, "pipeline",
            "random_resized_crop(224, scale=0.08:1, ratio=0.75:1.333) | hflip(0.4) | "
            "color_jitter(0.4, 0.4, 0.4) | to(float32)",
            err, sizeof err) == STK_OK);
  CHECK(stk_job_spec_hash(&c) != stk_job_spec_hash(&s));
  /* back to a named pipeline: the chain is gone */
  CHECK(set(&c, "pipeline", "train", err, sizeof err) == STK_OK);
  CHECK(c.pipeline == STK_PIPELINE_TRAIN && c.chain[0] == 0);
}

/* Every op and its canonical form. */
static void test_every_op(void) {
  stk_job_spec s;
  image_job(&s);
  char err[512] = "";
  const char *in =
      "decode | resize(256) | center_crop(240) | random_crop(224, 200, padding=4) | "
      "vflip(0.25) | rotate(0, 180) | grayscale(0.1) | "
      "gaussian_blur(5, sigma=0.5:1.5) | gaussian_blur(3, 7, sigma=2) | rotate(90) | "
      "color_jitter(hue=0.1) | to(uint8, nhwc)";
  int rc = set(&s, "pipeline", in, err, sizeof err);
  CHECK(rc == STK_OK);
  if (rc) fprintf(stderr, "%s\n", err);
  CHECK(strcmp(s.chain,
               "decode | resize(256) | center_crop(240, 240) | random_crop(224, 200, "
               "padding=4) | vflip(0.25) | rotate(0, 180) | grayscale(0.100000001) | "
               "gaussian_blur(5, 5, sigma=0.5:1.5) | gaussian_blur(3, 7, sigma=2:2) | "
               "rotate(90) | color_jitter(brightness=1:1, contrast=1:1, saturation=1:1, "
               "hue=-0.100000001:0.100000001)") == 0);
  if (strncmp(s.chain, "decode | resize", 15)) fprintf(stderr, "chain: %s\n", s.chain);
  /* rotate(90) swaps 224x200 into 200x224 */
  CHECK(s.height == 200 && s.width == 224);
  CHECK(s.dtype == STK_DTYPE_UINT8 && s.layout == STK_LAYOUT_NHWC);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  /* resize(h, w) fixes the size by itself */
  CHECK(set(&s, "pipeline", "resize(100, 120)", err, sizeof err) == STK_OK);
  CHECK(s.height == 100 && s.width == 120);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
}

/* The augmentation policy ops and their canonical forms. */
static void test_policy_ops(void) {
  stk_job_spec s;
  image_job(&s);
  char err[512] = "";
  const char *in =
      "center_crop(224) | shear_x(0.3) | shear_y(-0.25, p=0.5) | translate_x(10) | "
      "translate_y(-7.5, 0.25) | rotate_by(-30) | brightness(1.5) | color(0.1) | "
      "contrast(2) | sharpness(0) | posterize(4) | solarize(128.5) | autocontrast | "
      "equalize(0.5) | invert(p=0.1) | identity | rand_augment | "
      "rand_augment(num_ops=1, magnitude=30) | "
      "trivial_augment_wide(num_magnitude_bins=11) | auto_augment | "
      "auto_augment(cifar10) | "
      "auto_augment(policy=svhn) | aug_mix | aug_mix(1, 16, 16, 0.5, 0) | "
      "aug_mix(depth=-1, alpha=1e-3, all_ops=1)";
  int rc = set(&s, "pipeline", in, err, sizeof err);
  CHECK(rc == STK_OK);
  if (rc) fprintf(stderr, "%s\n", err);
  const char *want =
      "decode | center_crop(224, 224) | shear_x(0.300000012, p=1) | shear_y(-0.25, "
      "p=0.5) | translate_x(10, p=1) | translate_y(-7.5, p=0.25) | rotate_by(-30, p=1) | "
      "brightness(1.5, p=1) | color(0.100000001, p=1) | contrast(2, p=1) | "
      "sharpness(0, p=1) | posterize(4, p=1) | solarize(128.5, p=1) | autocontrast(1) | "
      "equalize(0.5) | invert(0.100000001) | identity | rand_augment(2, 9, 31) | "
      "rand_augment(1, 30, 31) | trivial_augment_wide(11) | auto_augment(imagenet) | "
      "auto_augment(cifar10) | auto_augment(svhn) | "
      "aug_mix(severity=3, width=3, depth=-1, alpha=1, all_ops=1) | "
      "aug_mix(severity=1, width=16, depth=16, alpha=0.5, all_ops=0) | "
      "aug_mix(severity=3, width=3, depth=-1, alpha=0.00100000005, all_ops=1)";
  CHECK(strcmp(s.chain, want) == 0);
  if (strcmp(s.chain, want)) fprintf(stderr, "chain: %s\n", s.chain);
  CHECK(s.height == 224 && s.width == 224);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  /* the canonical text parses to itself */
  char again[sizeof s.chain];
  snprintf(again, sizeof again, "%s", s.chain);
  CHECK(set(&s, "pipeline", again, err, sizeof err) == STK_OK && !strcmp(s.chain, again));
  /* random_erasing: after normalize/to or before them, after the image ops */
  s.dtype = STK_DTYPE_FLOAT32;
  CHECK(stk_image_wire_spec(&s, NULL) == 1);
  rc = set(&s, "pipeline",
           "center_crop(224) | normalize(imagenet) | random_erasing(0.25) | "
           "random_erasing(p=1, scale=0.1:0.2, ratio=1:2, value=random) | to(bfloat16)",
           err, sizeof err);
  CHECK(rc == STK_OK);
  if (rc) fprintf(stderr, "%s\n", err);
  want =
      "decode | center_crop(224, 224) | random_erasing(p=0.25, "
      "scale=0.0199999996:0.330000013, "
      "ratio=0.300000012:3.29999995, value=0) | random_erasing(p=1, "
      "scale=0.100000001:0.200000003, ratio=1:2, value=random)";
  CHECK(strcmp(s.chain, want) == 0);
  if (strcmp(s.chain, want)) fprintf(stderr, "chain: %s\n", s.chain);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  /* its values are not 8-bit levels: the floats travel */
  CHECK(stk_image_wire_spec(&s, NULL) == 0);
  CHECK(set(&s, "pipeline", "center_crop(224) | random_erasing(value=-0.5)", err,
            sizeof err) == STK_OK);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
}

/* rc must be INVALID_ARGUMENT at set (or, when at_set is 0, at validate)
 * and the message must hold `want`. */
static void refused(const char *chain, int at_set, const char *want) {
  stk_job_spec s;
  image_job(&s);
  char err[512] = "";
  int rc = set(&s, "pipeline", chain, err, sizeof err);
  if (!at_set) {
    CHECK(rc == STK_OK);
    if (rc) fprintf(stderr, "set refused '%s': %s\n", chain, err);
    rc = stk_job_spec_validate(&s, err, sizeof err);
  }
  CHECK(rc == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, want) != NULL);
  if (!strstr(err, want))
    fprintf(stderr, "'%s' -> '%s' (wanted '%s')\n", chain, err, want);
}

static void test_refusals(void) {
  refused("random_resized_crop(224) | cutout(8)", 0, "unknown op 'cutout'");
  refused("random_resized_crop(224) | CutOut(8)", 1, "op 2 'CutOut': unknown op");
  /* A typo is named as an unknown op, with the nearest name, before any
   * geometry check (the chain's size is unknown without its crop). */
  refused("decode | random_resize_crop(64)", 0,
          "unknown op 'random_resize_crop': did you mean 'random_resized_crop'?");
  refused("random_resized_crop(224) | hflp(0.5)", 0,
          "unknown op 'hflp': did you mean 'hflip'?");
  refused("random_resized_crop(224) | zzzz(1)", 0, "unknown op 'zzzz' (built in:");
  /* the names come from the op table, then the closing two */
  refused("random_resized_crop(224) | zzzz(1)", 0,
          "(built in: decode, random_resized_crop, ");
  refused("random_resized_crop(224) | zzzz(1)", 0,
          ", normalize, to; an op from a plugin needs plugin = zzzz)");
  refused("random_resized_crop(224, scale=0:1)", 1, "scale wants a:b");
  refused("random_resized_crop()", 1, "needs a size");
  refused("random_resized_crop(224) | hflip(2)", 1, "op 2 'hflip': p is a probability");
  refused("random_resized_crop(224) | hflip(0.5, 0.2)", 1, "too many arguments");
  refused("random_resized_crop(224) | hflip(q=0.5)", 1, "unknown parameter 'q'");
  refused("random_resized_crop(224) | decode", 1, "decode comes first");
  refused("random_resized_crop(224) | to(float32) | hflip", 1, "end the chain");
  refused("random_resized_crop(224) | to(float32) | normalize(imagenet)", 1,
          "normalize must come before to");
  refused("random_resized_crop(224) | to(float64)", 1, "dtype must be uint8");
  refused("random_resized_crop(224) | normalize(1, 2, 3)", 1, "six numbers");
  refused("random_resized_crop(224) | normalize(0, 0, 0, 1, 0, 1)", 1, "std > 0");
  refused("resize(256)", 0, "output size depends on the image");
  refused("resize(256) | hflip(0.5)", 0, "output size depends on the image");
  refused("center_crop(224, 200) | rotate(0, 90)", 0, "makes two output sizes");
  refused("center_crop(224) | rotate(45)", 1, "angles are 0, 90, 180 or 270");
  refused("center_crop(224) | gaussian_blur(4)", 1, "odd whole numbers");
  refused("center_crop(224) | color_jitter(hue=0.7)", 1, "hue must stay within");
  refused("center_crop(224) || hflip", 1, "op 2 is empty");
  refused("center_crop(224) | hflip(0.5", 1, "closing ')'");
  refused("center_crop(224) | hflip(0.5))", 1, "closing ')'");
  refused("center_crop(224) | hflip 0.5", 1, "unexpected");
  refused("center_crop(224) | hflip(, 0.5)", 1, "an argument is empty");
  refused("center_crop(0)", 1, "sizes are whole numbers");
  refused("center_crop(224.5)", 1, "sizes are whole numbers");
  refused("center_crop(224) | shear_x", 1, "op 2 'shear_x': wants a magnitude");
  refused("center_crop(224) | shear_x(11)", 1, "shear factor must be within");
  refused("center_crop(224) | shear_y(nan)", 1, "wants a magnitude");
  refused("center_crop(224) | translate_x(20000)", 1, "shift must be within");
  refused("center_crop(224) | rotate_by(400)", 1, "angle must be within");
  refused("center_crop(224) | brightness(-1)", 1, "factor must be within [0, 100]");
  refused("center_crop(224) | posterize(9)", 1, "bits is a whole number in 0..8");
  refused("center_crop(224) | posterize(2.5)", 1, "bits is a whole number");
  refused("center_crop(224) | solarize(300)", 1, "threshold must be within");
  refused("center_crop(224) | invert(2)", 1, "p is a probability");
  refused("center_crop(224) | contrast(1, p=1.5)", 1, "p is a probability");
  refused("center_crop(224) | identity(1)", 1, "too many arguments");
  refused("center_crop(224) | rand_augment(2, 31)", 1, "magnitude 31 is not below");
  refused("center_crop(224) | rand_augment(17)", 1, "num_ops is a whole number in 0..16");
  refused("center_crop(224) | rand_augment(2, 0, 1)", 1, "num_magnitude_bins");
  refused("center_crop(224) | trivial_augment_wide(31, 2)", 1, "too many arguments");
  refused("center_crop(224) | trivial_augment_wide(magnitude=3)", 1,
          "unknown parameter 'magnitude'");
  refused("center_crop(224) | rand_augmnt(2, 9)", 0, "did you mean 'rand_augment'");
  refused("center_crop(224) | random_erasing(0.5) | hflip", 1,
          "op 3 'hflip': random_erasing works on the output tensor");
  refused("center_crop(224) | normalize(imagenet) | hflip", 1, "end the chain");
  refused("center_crop(224) | random_erasing(1.5)", 1, "p is a probability");
  refused("center_crop(224) | aug_mix(11)", 1, "severity is a whole number in 1..10");
  refused("center_crop(224) | aug_mix(width=0)", 1, "width is a whole number in 1..16");
  refused("center_crop(224) | aug_mix(depth=0)", 1, "depth is -1");
  refused("center_crop(224) | aug_mix(alpha=0)", 1, "alpha must be in (0, 1000]");
  refused("center_crop(224) | aug_mix(all_ops=2)", 1, "all_ops is 0 or 1");
  refused("center_crop(224) | auto_augment(coco)", 1,
          "policy is imagenet, cifar10 or svhn, got 'coco'");
  refused("center_crop(224) | random_erasing(scale=0:0.3)", 1, "scale wants a:b");
  refused("center_crop(224) | random_erasing(ratio=3:1)", 1, "ratio wants a:b");
  refused("center_crop(224) | random_erasing(value=rand)", 1, "value is a number");
  refused("center_crop(224) | random_erasing(value=random) | to(uint8)", 0,
          "a uint8 image takes a value in 0..255");
  refused("center_crop(224) | random_erasing(value=0.5) | to(uint8)", 0,
          "a uint8 image takes a value in 0..255");

  /* height/width named after the chain must agree with it */
  stk_job_spec s;
  image_job(&s);
  char err[512] = "";
  CHECK(set(&s, "pipeline", "resize(256) | center_crop(224)", err, sizeof err) == STK_OK);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  s.height = 256;
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "makes 224x224 images, but height x width is 256x224") != NULL);
  s.height = 224;
  /* the named pipelines' keys beside a chain would do nothing */
  s.flip_p = 0.25f;
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "flip_p") != NULL);
  s.flip_p = 0.5f;
  /* a chain needs an image source */
  s.source = STK_SOURCE_SYNTHETIC, s.num_samples = 10;
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
  s.source = STK_SOURCE_IMAGEFOLDER;
  /* a stored chain that is not canonical (set behind the API's back) */
  snprintf(s.chain, sizeof s.chain, "decode|resize(256)|center_crop(224)");
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "canonical") != NULL);
  /* chain or plugin on a named pipeline */
  CHECK(set(&s, "pipeline", "eval", err, sizeof err) == STK_OK);
  snprintf(s.plugin, sizeof s.plugin, "x");
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
}

/* pad: the padding written three ways, fill and mode, the canonical text
 * (which parses back to itself), the size it adds, and its refusals. */
static void test_pad(void) {
  stk_job_spec s, b;
  image_job(&s);
  char err[512] = "";
  CHECK(set(&s, "pipeline", "center_crop(10, 20) | pad(4)", err, sizeof err) == STK_OK);
  CHECK(!strcmp(s.chain,
                "decode | center_crop(10, 20) | pad(4, 4, 4, 4, fill=0, mode=constant)"));
  CHECK(s.height == 18 && s.width == 28);
  CHECK(set(&s, "pipeline", "center_crop(10, 20) | pad(1, 2, fill=7, mode=reflect)", err,
            sizeof err) == STK_OK);
  CHECK(!strcmp(s.chain,
                "decode | center_crop(10, 20) | pad(1, 2, 1, 2, fill=7, mode=reflect)"));
  CHECK(s.height == 14 && s.width == 22);
  CHECK(set(&s, "pipeline", "center_crop(10, 20) | pad(1, 2, 3, 4, mode=symmetric)", err,
            sizeof err) == STK_OK);
  CHECK(!strcmp(
      s.chain, "decode | center_crop(10, 20) | pad(1, 2, 3, 4, fill=0, mode=symmetric)"));
  CHECK(s.height == 16 && s.width == 24);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  image_job(&b);
  CHECK(set(&b, "pipeline", s.chain, err, sizeof err) == STK_OK);
  CHECK(!strcmp(b.chain, s.chain) && stk_job_spec_hash(&b) == stk_job_spec_hash(&s));
  CHECK(set(&b, "pipeline", "center_crop(10, 20) | pad(1, 2, 3, 4, mode=edge)", err,
            sizeof err) == STK_OK);
  CHECK(stk_job_spec_hash(&b) != stk_job_spec_hash(&s));
  refused("center_crop(10) | pad()", 1, "op 2 'pad': wants pad(p)");
  refused("center_crop(10) | pad(1, 2, 3)", 1, "wants pad(p)");
  refused("center_crop(10) | pad(1, 2, 3, 4, 5)", 1, "too many arguments");
  refused("center_crop(10) | pad(5000)", 1, "padding is a whole number in 0..4096");
  refused("center_crop(10) | pad(-1)", 1, "padding is a whole number in 0..4096");
  refused("center_crop(10) | pad(1, fill=256)", 1, "fill is a whole number in 0..255");
  refused("center_crop(10) | pad(1, mode=wrap)", 1, "mode is constant, edge, reflect");
  refused("resize(256) | pad(4)", 0, "output size depends on the image");
}

static void test_plugins(void) {
  stk_job_spec s;
  image_job(&s);
  char err[512] = "";
  CHECK(
      stk_job_spec_parse(&s,
                         "plugin = cutout,noise\n"
                         "pipeline = center_crop(64) | cutout(size=8, n = 2) | noise()\n",
                         err, sizeof err) == STK_OK);
  CHECK(strcmp(s.chain, "decode | center_crop(64, 64) | cutout(size=8, n=2) | noise()") ==
        0);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  static char t[8192];
  stk_job_spec_format(&s, t, sizeof t);
  CHECK(strstr(t, "\nplugin = cutout,noise\n") != NULL);
  /* the plugin name is part of the hash */
  uint64_t h = stk_job_spec_hash(&s);
  snprintf(s.plugin, sizeof s.plugin, "noise,cutout");
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  CHECK(stk_job_spec_hash(&s) != h);
  const char *bad[] = {"cutout, noise", "cutout,", "Cutout,noise", "cut-out,noise",
                       ",noise"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(s.plugin, sizeof s.plugin, "%s", bad[i]);
    CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
  }
  snprintf(s.plugin, sizeof s.plugin, "cutout");
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "unknown op 'noise'") && strstr(err, "plugin = noise"));
  /* arguments that would break the job text */
  CHECK(set(&s, "pipeline", "center_crop(64) | noise(a#b)", err, sizeof err) ==
        STK_INVALID_ARGUMENT);
}

/* Named pipelines: the canonical text has no plugin line, so their hash is
 * what it was before chains (a saved client state still resumes). */
static void test_named_hash_unchanged(void) {
  stk_job_spec s;
  image_job(&s);
  s.pipeline = STK_PIPELINE_TRAIN;
  static char t[8192];
  stk_job_spec_format(&s, t, sizeof t);
  CHECK(strstr(t, "plugin") == NULL && strstr(t, "chain") == NULL);
  CHECK(strstr(t, "\npipeline = train\n") != NULL);
}

/* views = V: V image tensors image0.. then label, mask, index; left out of
 * the canonical text while 1; only for a random image pipeline. */
static void test_views(void) {
  stk_job_spec s;
  image_job(&s);
  char err[512] = "";
  CHECK(stk_job_spec_parse(&s,
                           "views = 2\npipeline = random_resized_crop(32) | hflip(0.5) | "
                           "to(float32)\nbatch_size = 3\n",
                           err, sizeof err) == STK_OK);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  static char t[8192];
  stk_job_spec_format(&s, t, sizeof t);
  CHECK(strstr(t, "\nviews = 2\n") != NULL);
  stk_batch_layout L;
  CHECK(stk_batch_layout_of(&s, &L) == STK_OK);
  CHECK_EQ_U64(L.ntensors, 5);
  const char *names[] = {"image0", "image1", "label", "mask", "index"};
  for (int i = 0; i < 5; i++) CHECK(strcmp(L.tensors[i].name, names[i]) == 0);
  CHECK_EQ_U64(L.tensors[1].nbytes, 3ull * 3 * 32 * 32 * 4);
  CHECK(L.tensors[1].shape[1] == 3 && L.tensors[1].shape[2] == 32);
  CHECK_EQ_U64(L.tensors[1].offset, L.tensors[0].offset + 3ull * 3 * 32 * 32 * 4);
  CHECK(stk_batch_layout_find(&L, "label") == 2);
  s.views = 4;
  CHECK(stk_batch_layout_of(&s, &L) == STK_OK && L.ntensors == 7);
  s.views = 5;
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
  s.views = 0;
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
  /* a pipeline without randomness, or no image source: refused */
  s.views = 2;
  CHECK(set(&s, "pipeline", "eval", err, sizeof err) == STK_OK);
  s.height = s.width = 224;
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "views > 1") != NULL);
  s.pipeline = STK_PIPELINE_TRAIN;
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  s.views = 1;
  stk_job_spec_format(&s, t, sizeof t);
  CHECK(strstr(t, "views") == NULL);
}

/* Batch ops: canonical text, the target tensor in the layout, floats on
 * the wire, and the refusals (not last, a second one, no num_classes,
 * views, bad arguments). */
static void test_batch_ops(void) {
  stk_job_spec s;
  image_job(&s);
  s.num_classes = 1000;
  s.batch_size = 64;
  char err[512] = "";
  int rc =
      set(&s, "pipeline",
          "random_resized_crop(224) | hflip | rand_augment(2, 9) | normalize(imagenet) "
          "| random_erasing(0.25) | to(float32) | mixup_cutmix(0.8, 1.0)",
          err, sizeof err);
  CHECK(rc == STK_OK);
  if (rc) fprintf(stderr, "%s\n", err);
  const char *want =
      "decode | random_resized_crop(224, 224, scale=0.0799999982:1, "
      "ratio=0.75:1.33333337) | hflip(0.5) | rand_augment(2, 9, 31) | "
      "random_erasing(p=0.25, scale=0.0199999996:0.330000013, "
      "ratio=0.300000012:3.29999995, value=0) | mixup_cutmix(mixup=0.800000012, "
      "cutmix=1, "
      "p=1, switch=0.5, smoothing=0.100000001)";
  CHECK(strcmp(s.chain, want) == 0);
  if (strcmp(s.chain, want)) fprintf(stderr, "chain: %s\n", s.chain);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  stk_batch_layout L;
  CHECK(stk_batch_layout_of(&s, &L) == STK_OK);
  CHECK_EQ_U64(L.ntensors, 5);
  CHECK(stk_batch_layout_find(&L, "target") == STK_TENSOR_TARGET);
  CHECK(stk_batch_layout_find(&L, "label") == STK_TENSOR_LABEL);
  const stk_tensor_desc *t = &L.tensors[STK_TENSOR_TARGET];
  CHECK(t->dtype == STK_DTYPE_FLOAT32 && t->ndim == 2 && t->shape[0] == 64 &&
        t->shape[1] == 1000 && t->nbytes == 64ull * 1000 * 4 && t->offset % 64 == 0);
  CHECK(stk_image_wire_spec(&s, NULL) == 0); /* mixed values: the floats travel */
  /* the canonical text parses to itself; mixup and cutmix spelled out */
  char again[sizeof s.chain];
  snprintf(again, sizeof again, "%s", s.chain);
  CHECK(set(&s, "pipeline", again, err, sizeof err) == STK_OK && !strcmp(s.chain, again));
  CHECK(set(&s, "pipeline", "center_crop(32) | mixup(0.2, p=0.5, smoothing=0)", err,
            sizeof err) == STK_OK);
  CHECK(strcmp(s.chain,
               "decode | center_crop(32, 32) | mixup(0.200000003, p=0.5, "
               "smoothing=0)") == 0);
  CHECK(set(&s, "pipeline", "center_crop(32) | to(uint8) | cutmix", err, sizeof err) ==
        STK_OK);
  CHECK(strcmp(s.chain,
               "decode | center_crop(32, 32) | cutmix(1, p=1, smoothing=0.100000001)") ==
        0);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  CHECK(stk_batch_layout_of(&s, &L) == STK_OK && L.ntensors == 5);
  /* timm's modes and cutmix_minmax (which sets cutmix's alpha to 1); the
   * defaults (batch, no minmax) stay unwritten */
  CHECK(set(&s, "pipeline", "center_crop(32) | cutmix(0.5, mode=pair, minmax=0.2:0.8)",
            err, sizeof err) == STK_OK);
  CHECK(strcmp(s.chain,
               "decode | center_crop(32, 32) | cutmix(1, p=1, smoothing=0.100000001, "
               "mode=pair, minmax=0.200000003:0.800000012)") == 0);
  snprintf(again, sizeof again, "%s", s.chain);
  CHECK(set(&s, "pipeline", again, err, sizeof err) == STK_OK && !strcmp(s.chain, again));
  CHECK(set(&s, "pipeline",
            "center_crop(32) | mixup_cutmix(0.8, 0, 1, 0.5, 0.1, elem, 0:1)", err,
            sizeof err) == STK_OK);
  CHECK(strcmp(s.chain,
               "decode | center_crop(32, 32) | mixup_cutmix(mixup=0.800000012, cutmix=1, "
               "p=1, switch=0.5, smoothing=0.100000001, mode=elem, minmax=0:1)") == 0);
  CHECK(set(&s, "pipeline", "center_crop(32) | mixup(0.2, mode=batch)", err,
            sizeof err) == STK_OK);
  CHECK(strcmp(s.chain,
               "decode | center_crop(32, 32) | mixup(0.200000003, p=1, "
               "smoothing=0.100000001)") == 0);
  refused("center_crop(32) | mixup(0.2, mode=pairs)", 1, "mode is batch, pair or elem");
  refused("center_crop(32) | mixup(0.2, minmax=0.2:0.8)", 1,
          "unknown parameter 'minmax'");
  refused("center_crop(32) | cutmix(minmax=0.5:0.5)", 1, "minmax wants a:b");
  refused("center_crop(32) | cutmix(minmax=0.5:1.5)", 1, "minmax wants a:b");
  /* without a batch op: four tensors, as before */
  CHECK(set(&s, "pipeline", "center_crop(32)", err, sizeof err) == STK_OK);
  CHECK(stk_batch_layout_of(&s, &L) == STK_OK && L.ntensors == 4);

  refused("center_crop(32) | mixup(0.2) | hflip", 1,
          "op 3 'hflip': a batch op (mixup, cutmix, mixup_cutmix) ends the chain");
  refused("center_crop(32) | mixup(0.2) | normalize(imagenet)", 1, "ends the chain");
  refused("center_crop(32) | mixup(0.2) | cutmix", 1, "ends the chain");
  refused("center_crop(32) | mixup(0)", 1, "alpha must be in (0, 1000]");
  refused("center_crop(32) | mixup_cutmix(0, 0)", 1, "needs an alpha > 0");
  refused("center_crop(32) | mixup_cutmix(0.8, 1, switch=2)", 1,
          "switch is a probability");
  refused("center_crop(32) | cutmix(1, smoothing=1)", 1, "smoothing must be in [0, 1)");
  refused("center_crop(32) | mixup(1, q=2)", 1, "unknown parameter 'q'");
  /* imagefolder's num_classes 0 (from the data) cannot size the targets */
  image_job(&s);
  s.num_classes = 0;
  CHECK(set(&s, "pipeline", "center_crop(32) | mixup(0.2)", err, sizeof err) == STK_OK);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "op 3 'mixup': soft targets need num_classes") != NULL);
  image_job(&s);
  s.num_classes = 10;
  s.views = 2;
  CHECK(set(&s, "pipeline", "random_crop(32) | cutmix", err, sizeof err) == STK_OK);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "a batch op needs views = 1") != NULL);
  s.views = 1, s.num_classes = 100000, s.batch_size = 4096;
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "at most 1 GiB") != NULL);
}

/* Mangled chains: every byte position cut, flipped or doubled; the parser
 * answers OK or INVALID_ARGUMENT with a message, and an accepted chain's
 * canonical text parses back to itself. */
static void test_mangled(void) {
  const char *base =
      "decode | random_resized_crop(224, 200, scale=0.08:1, ratio=0.75:1.3) | hflip(0.5) "
      "| "
      "rotate(0, 180) | color_jitter(0.4, 0.4, 0.4, 0.1) | gaussian_blur(5, sigma=0.1:2) "
      "| "
      "random_crop(200, 180, padding=4) | grayscale(0.2) | p1(a=1, b) | "
      "normalize(imagenet) | "
      "to(bfloat16, nhwc)";
  size_t n = strlen(base);
  static const char subs[] = "|(),=:# 0a.-\t9";
  unsigned accepted = 0;
  for (size_t i = 0; i < n; i++) {
    for (size_t k = 0; k < sizeof subs; k++) {
      char m[512];
      memcpy(m, base, n + 1);
      if (k == sizeof subs - 1) memmove(m + i, m + i + 1, n - i); /* cut */
      else m[i] = subs[k];
      stk_job_spec s;
      image_job(&s);
      char err[512] = "x";
      int rc = set(&s, "pipeline", m, err, sizeof err);
      CHECK(rc == STK_OK || (rc == STK_INVALID_ARGUMENT && err[0]));
      if (rc != STK_OK) continue;
      accepted++;
      char chain1[sizeof s.chain];
      memcpy(chain1, s.chain, sizeof chain1);
      stk_job_spec b;
      image_job(&b);
      CHECK(set(&b, "pipeline", chain1, err, sizeof err) == STK_OK);
      CHECK(strcmp(b.chain, chain1) == 0);
      (void)stk_job_spec_validate(&s, err, sizeof err);
    }
  }
  CHECK(accepted > 0);
}

int main(void) {
  test_issue_example();
  test_every_op();
  test_policy_ops();
  test_refusals();
  test_pad();
  test_plugins();
  test_named_hash_unchanged();
  test_views();
  test_batch_ops();
  test_mangled();
  CHECK_DONE();
}
