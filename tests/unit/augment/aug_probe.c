/* aug_probe.c - helper of test_aug_parity.py, exposing what the Python
 * side compares with torchvision:
 *   aug_probe boxes W H N SEED   RandomResizedCrop boxes "x y w h" of
 *                                samples 0..N-1 (epoch 0), default params
 *   aug_probe eval ROOT DATASET OUT
 *                                Resize(256)+CenterCrop(224)+Normalize,
 *                                float32 NCHW, every sample of an
 *                                ImageFolder dataset: OUT holds per sample
 *                                int64 index + 3*224*224 float32
 *   aug_probe chain ROOT DATASET CHAIN OUT
 *                                the op chain CHAIN (to uint8 NHWC), every
 *                                sample: OUT holds per sample int64 index +
 *                                h*w*3 bytes (h, w printed on stdout)
 *   aug_probe policy OP W H N SEED
 *                                the draws of the policy op OP (e.g.
 *                                "rand_augment(2, 9)") on a W x H image as
 *                                the first drawing op of samples 0..N-1
 *                                (epoch 0): per sample one line of
 *                                "op bin neg magnitude" groups, ';'-joined
 *   aug_probe chainf ROOT DATASET CHAIN OUT
 *                                as chain, float32 NCHW (normalized)
 *   aug_probe aa_table imagenet|cifar10|svhn
 *                                AutoAugment's policy table: 25 rows of
 *                                two "op p bin" steps
 *   aug_probe mix ROOT DATASET CHAIN DTYPE LAYOUT NCLASSES B STEPS OUT
 *                                steps 0..STEPS-1 of epoch 0 (world 1,
 *                                batch B) of the chain in DTYPE/LAYOUT: OUT
 *                                holds per step the image, label and (when
 *                                the chain ends in a batch op) target
 *                                tensors; stdout "H W", then per step the
 *                                batch op's draws as mixdraws prints them
 *                                (pair and elem modes: each row's draw,
 *                                stk__mix_row, ';'-joined)
 *   aug_probe mixdraws OP H W N SEED
 *                                the draws of batch op OP on an H x W batch
 *                                at epoch positions 0..N-1 of epoch 0:
 *                                "mixed cutmix lam weight cy cx y0 y1 x0 x1"
 *   aug_probe augmix OP W H N SEED
 *                                the draws of aug_mix op OP on a W x H
 *                                image as the first drawing op of samples
 *                                0..N-1 (epoch 0): per sample one line
 *                                "m0 m1/d0 d1 .../chain/chain...", a chain
 *                                being ','-joined "op bin neg magnitude"
 *   aug_probe tensor_op OP MAGNITUDE W H IN OUT
 *                                aug_mix's tensor kernel of op OP (an
 *                                STK__PA_* number) on each W x H RGB image
 *                                of the file IN, written to OUT
 *   aug_probe erasing OP W H N SEED
 *                                the rectangles "x y w h" (or "-": none)
 *                                random_erasing OP draws on a W x H output
 *                                as the only drawing op of samples 0..N-1
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chain.h"
#include "ops.h"
#include "ops_mix.h"
#include "ops_policy.h"
#include "util.h"

/* Build every sample of s (batch_size 1, epoch 0) from root into out:
 * per sample int64 index + the image tensor. 0, or 1 with a message. */
static int dump(const stk_job_spec *s, const char *root, const char *out) {
  stk_dataset *ds;
  stk_builder *b;
  char err[512];
  if (stk_dataset_open(s, root, NULL, &ds, err, sizeof(err)) ||
      stk_builder_create(ds, s, &b, err, sizeof(err))) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  stk_batch_layout L;
  stk_batch_layout_of(s, &L);
  uint8_t *buf = malloc(L.total_bytes);
  FILE *f = fopen(out, "wb");
  int rc = !buf || !f;
  for (uint64_t st = 0; !rc && st < stk_dataset_size(ds); st++) {
    stk_build_info info;
    if (stk_builder_build(b, 0, 0, st, buf, L.total_bytes, &info) || info.substituted) {
      fprintf(stderr, "build %llu failed: %s\n", (unsigned long long)st,
              stk_builder_error(b));
      rc = 1;
      break;
    }
    fwrite(buf + L.tensors[STK_TENSOR_INDEX].offset, 8, 1, f);
    fwrite(buf + L.tensors[STK_TENSOR_IMAGE].offset, 1, L.tensors[0].nbytes, f);
  }
  if (f) fclose(f);
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  return rc;
}

static void print_mix(const stk__mix *m, char end) {
  printf("%d %d %.17g %.17g %u %u %u %u %u %u%c", m->mixed, m->cutmix, m->lam, m->weight,
         m->cy, m->cx, m->y0, m->y1, m->x0, m->x1, end);
}

/* aug_probe mix: see the top of the file. 0, or 1 with a message. */
static int mix_dump(char **argv) {
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_IMAGEFOLDER, argv[3], STK_PIPELINE_EVAL, STK_DTYPE_UINT8,
          STK_LAYOUT_NHWC, 1, 224);
  char err[512];
  if (stk_job_spec_set(&s, "pipeline", argv[4], err, sizeof(err)) ||
      stk_job_spec_set(&s, "dtype", argv[5], err, sizeof(err)) ||
      stk_job_spec_set(&s, "layout", argv[6], err, sizeof(err)) ||
      stk_job_spec_set(&s, "num_classes", argv[7], err, sizeof(err)) ||
      stk_job_spec_set(&s, "batch_size", argv[8], err, sizeof(err)) ||
      stk_job_spec_set(&s, "drop_last", "false", err, sizeof(err)) ||
      stk_job_spec_validate(&s, err, sizeof(err))) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  stk__chain c;
  if (stk__chain_parse(s.chain, &c, NULL, err, sizeof(err))) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  const stk__op *op = stk__op_is_batch(c.ops[c.n - 1].kind) ? &c.ops[c.n - 1] : NULL;
  stk_dataset *ds;
  stk_builder *b;
  if (stk_dataset_open(&s, argv[2], NULL, &ds, err, sizeof(err)) ||
      stk_builder_create(ds, &s, &b, err, sizeof(err))) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  printf("%u %u\n", s.height, s.width);
  stk_batch_layout L;
  stk_batch_layout_of(&s, &L);
  uint8_t *buf = malloc(L.total_bytes);
  FILE *f = fopen(argv[10], "wb");
  int rc = !buf || !f;
  long steps = atol(argv[9]);
  for (long st = 0; !rc && st < steps; st++) {
    if (stk_builder_build(b, 0, 0, (uint64_t)st, buf, L.total_bytes, NULL)) {
      fprintf(stderr, "build %ld failed: %s\n", st, stk_builder_error(b));
      rc = 1;
      break;
    }
    for (uint32_t t = 0; t < L.ntensors; t++)
      if (strcmp(L.tensors[t].name, "mask") && strcmp(L.tensors[t].name, "index"))
        fwrite(buf + L.tensors[t].offset, 1, L.tensors[t].nbytes, f);
    if (op && op->kh) { /* pair, elem: each row's draw, ';'-joined */
      for (uint32_t i = 0; i < s.batch_size; i++) {
        stk__mix m;
        stk__mix_row(op, s.batch_size, s.height, s.width, s.seed, 0,
                     (uint64_t)st * s.batch_size, i, &m);
        print_mix(&m, i + 1 < s.batch_size ? ';' : '\n');
      }
    } else if (op) {
      stk_rng r;
      stk__mix m;
      stk__mix_rng(&r, s.seed, 0, (uint64_t)st * s.batch_size);
      stk__mix_draw(op, s.height, s.width, &r, &m);
      print_mix(&m, '\n');
    }
  }
  if (f) fclose(f);
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 11 && !strcmp(argv[1], "mix")) return mix_dump(argv);
  if (argc == 7 && !strcmp(argv[1], "mixdraws")) {
    stk__chain c;
    char err[512];
    if (stk__chain_parse(argv[2], &c, NULL, err, sizeof(err)) || c.n != 2 ||
        !stk__op_is_batch(c.ops[1].kind)) {
      fprintf(stderr, "%s\n", c.n == 2 ? err : "one batch op expected");
      return 1;
    }
    uint32_t H = (uint32_t)atoi(argv[3]), W = (uint32_t)atoi(argv[4]);
    long n = atol(argv[5]);
    uint64_t seed = strtoull(argv[6], NULL, 10);
    for (long i = 0; i < n; i++) {
      stk_rng r;
      stk__mix m;
      stk__mix_rng(&r, seed, 0, (uint64_t)i);
      stk__mix_draw(&c.ops[1], H, W, &r, &m);
      print_mix(&m, '\n');
    }
    return 0;
  }
  if (argc == 6 && !strcmp(argv[1], "boxes")) {
    uint32_t W = (uint32_t)atoi(argv[2]), H = (uint32_t)atoi(argv[3]);
    long n = atol(argv[4]);
    uint64_t seed = strtoull(argv[5], NULL, 10);
    for (long i = 0; i < n; i++) {
      stk_rng r;
      stk_rng_init(&r, seed, 0, (uint64_t)i);
      stk__box b = stk__rrc_box(W, H, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &r);
      printf("%d %d %d %d\n", b.x, b.y, b.w, b.h);
    }
    return 0;
  }
  if (argc == 5 && !strcmp(argv[1], "eval")) {
    stk_job_spec s;
    tu_spec(&s, STK_SOURCE_IMAGEFOLDER, argv[3], STK_PIPELINE_EVAL, STK_DTYPE_FLOAT32,
            STK_LAYOUT_NCHW, 1, 224);
    s.resize = 256;
    s.epochs = 1;
    return dump(&s, argv[2], argv[4]);
  }
  if (argc == 6 && (!strcmp(argv[1], "chain") || !strcmp(argv[1], "chainf"))) {
    stk_job_spec s;
    tu_spec(&s, STK_SOURCE_IMAGEFOLDER, argv[3], STK_PIPELINE_EVAL, STK_DTYPE_UINT8,
            STK_LAYOUT_NHWC, 1, 224);
    char err[512];
    int f = argv[1][5] == 'f';
    if (stk_job_spec_set(&s, "pipeline", argv[4], err, sizeof(err)) ||
        stk_job_spec_set(&s, "dtype", f ? "float32" : "uint8", err, sizeof(err)) ||
        stk_job_spec_set(&s, "layout", f ? "nchw" : "nhwc", err, sizeof(err)) ||
        (f && stk_job_spec_validate(&s, err, sizeof(err)))) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    printf("%u %u\n", s.height, s.width);
    fflush(stdout);
    return dump(&s, argv[2], argv[5]);
  }
  if (argc == 3 && !strcmp(argv[1], "aa_table")) {
    int pol = !strcmp(argv[2], "imagenet") ? 0 : !strcmp(argv[2], "cifar10") ? 1 : 2;
    for (int row = 0; row < 25; row++) {
      for (int i = 0; i < 2; i++) {
        float p;
        int bin, pa = stk__auto_augment_step(pol, row, i, &p, &bin);
        printf("%s%d %.9g %d", i ? " " : "", pa, (double)p, bin);
      }
      printf("\n");
    }
    return 0;
  }
  if (argc == 7 && !strcmp(argv[1], "erasing")) {
    stk__chain c;
    char err[512];
    if (stk__chain_parse(argv[2], &c, NULL, err, sizeof(err)) || c.n != 2 ||
        c.ops[1].kind != STK__OP_RANDOM_ERASING) {
      fprintf(stderr, "%s\n", c.n == 2 ? err : "one random_erasing op expected");
      return 1;
    }
    uint32_t W = (uint32_t)atoi(argv[3]), H = (uint32_t)atoi(argv[4]);
    long n = atol(argv[5]);
    uint64_t seed = strtoull(argv[6], NULL, 10);
    for (long i = 0; i < n; i++) {
      stk_rng r;
      stk_rng_init(&r, seed, 0, (uint64_t)i);
      stk__box b;
      if (stk__erase_draw(&c.ops[1], H, W, &r, &b))
        printf("%d %d %d %d\n", b.x, b.y, b.w, b.h);
      else printf("-\n");
    }
    return 0;
  }
  if (argc == 7 && !strcmp(argv[1], "augmix")) {
    stk__chain c;
    char err[512];
    if (stk__chain_parse(argv[2], &c, NULL, err, sizeof(err)) || c.n != 2 ||
        c.ops[1].kind != STK__OP_AUG_MIX) {
      fprintf(stderr, "%s\n", c.n == 2 ? err : "one aug_mix op expected");
      return 1;
    }
    uint32_t W = (uint32_t)atoi(argv[3]), H = (uint32_t)atoi(argv[4]);
    long n = atol(argv[5]);
    uint64_t seed = strtoull(argv[6], NULL, 10);
    for (long i = 0; i < n; i++) {
      stk_rng r;
      stk__augmix d;
      stk_rng_init(&r, seed, 0, (uint64_t)i);
      stk__augmix_draw(&c.ops[1], &r, &d);
      printf("%.9g %.9g/", (double)d.m[0], (double)d.m[1]);
      for (int k = 0; k < d.width; k++) printf("%s%.9g", k ? " " : "", (double)d.d[k]);
      for (int k = 0; k < d.width; k++) {
        printf("/");
        for (int j = 0; j < d.depth[k]; j++) {
          const stk__policy_choice *ch = &d.ch[k][j];
          printf("%s%d %d %d %.17g", j ? "," : "", ch->pa, ch->bin, ch->neg,
                 stk__augmix_magnitude(ch->pa, ch->bin, W, H));
        }
      }
      printf("\n");
    }
    return 0;
  }
  if (argc == 8 && !strcmp(argv[1], "tensor_op")) {
    int pa = atoi(argv[2]);
    double mag = strtod(argv[3], NULL);
    uint32_t W = (uint32_t)atoi(argv[4]), H = (uint32_t)atoi(argv[5]);
    size_t bytes = (size_t)W * H * 3;
    FILE *in = fopen(argv[6], "rb"), *out = fopen(argv[7], "wb");
    uint8_t *px = malloc(bytes ? bytes : 1);
    stk__policy_scratch ps = {0};
    int rc = !in || !out || !px;
    while (!rc && fread(px, 1, bytes, in) == bytes) {
      rc = stk__augmix_apply_op(&ps, px, W, H, pa, mag) != 0;
      if (!rc) rc = fwrite(px, 1, bytes, out) != bytes;
    }
    stk__policy_scratch_free(&ps);
    free(px);
    if (in) fclose(in);
    if (out && fclose(out)) rc = 1;
    return rc;
  }
  if (argc == 7 && !strcmp(argv[1], "policy")) {
    stk__chain c;
    char err[512];
    if (stk__chain_parse(argv[2], &c, NULL, err, sizeof(err)) || c.n != 2 ||
        !stk__policy_kind(c.ops[1].kind)) {
      fprintf(stderr, "%s\n", c.n == 2 ? err : "one policy op expected");
      return 1;
    }
    uint32_t W = (uint32_t)atoi(argv[3]), H = (uint32_t)atoi(argv[4]);
    long n = atol(argv[5]);
    uint64_t seed = strtoull(argv[6], NULL, 10);
    int wide = c.ops[1].kind == STK__OP_TRIVIAL_AUGMENT_WIDE;
    for (long i = 0; i < n; i++) {
      stk_rng r;
      stk_rng_init(&r, seed, 0, (uint64_t)i);
      stk__policy_choice ch[STK__POLICY_MAX_OPS];
      int k = stk__policy_draw(&c.ops[1], &r, ch);
      for (int j = 0; j < k; j++) {
        int sg;
        double m = stk__policy_magnitude(ch[j].pa, ch[j].bin, (int)c.ops[1].pad, W, H,
                                         wide, &sg);
        printf("%s%d %d %d %.17g", j ? ";" : "", ch[j].pa, ch[j].bin, sg && ch[j].neg, m);
      }
      printf("\n");
    }
    return 0;
  }
  fprintf(
      stderr,
      "usage: aug_probe boxes W H N SEED | eval ROOT DATASET OUT | chain ROOT DATASET "
      "CHAIN OUT | chainf ... | policy OP W H N SEED | aa_table POLICY | erasing OP W H "
      "N SEED | augmix OP W H N SEED | tensor_op OP MAGNITUDE W H IN OUT\n");
  return 2;
}
