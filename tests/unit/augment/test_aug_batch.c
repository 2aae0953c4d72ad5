/* test_aug_batch.c - a batch assembled in one place (augment/batch.c):
 * stk__batch_assemble builds the same bytes as stk_builder_build_at and
 * returns the header facts the worker sends: the crc32c of the payload,
 * its size, and the sample indices the batch was addressed with (the
 * index tensor's values where the layout has one; stk_batch_samples_at,
 * the sample offset included, where it has none). Jobs: ImageFolder with
 * mixup_cutmix (the batch op batch.c runs), tar with cutmix in pair mode
 * as uint8, and a Megatron token job of four tensors (no index tensor),
 * at sample offsets 0 and 1. Real files in a temporary directory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/batch.h"
#include "check.h"
#include "gen.h"
#include "stoker/augment.h"
#include "tokens.h"
#include "util.h"

static char root[4096];

static const char *JOBS[] = {
    "source = imagefolder\ndataset = gen/imagefolder\nnum_classes = 4\n"
    "pipeline = random_resized_crop(24) | hflip | normalize(imagenet) | "
    "mixup_cutmix(0.8, 1.0)\ndtype = float32\nbatch_size = 6\nworld_size = 2\n"
    "epochs = 2\ndrop_last = false\nseed = 27\n",
    "source = tar\ndataset = gen/shards\nnum_classes = 4\n"
    "pipeline = random_resized_crop(24) | normalize(imagenet) | cutmix(1.0, mode=pair)\n"
    "dtype = uint8\nbatch_size = 5\nworld_size = 3\nepochs = 2\ndrop_last = false\nseed "
    "= 3\n",
    "source = megatron\ndataset = tok\nseq_len = 16\nbatch_size = 4\nworld_size = "
    "2\nepochs = 2\n"
    "drop_last = false\ntoken_dtype = int32\nloss_mask = true\nposition_ids = true\n"
    "eod_token = 0\nseed = 5\n",
};

static void check_job(const char *text) {
  stk_job_spec spec;
  char err[512];
  stk_job_spec_defaults(&spec);
  CHECK(stk_job_spec_parse(&spec, text, err, sizeof(err)) == STK_OK);
  stk_dataset *ds = NULL;
  stk_builder *b = NULL;
  if (stk_dataset_open(&spec, root, NULL, &ds, err, sizeof(err)))
    fprintf(stderr, "open: %s\n", err);
  CHECK(ds && stk_builder_create(ds, &spec, &b, err, sizeof(err)) == STK_OK);
  stk_job_spec rs = spec;
  rs.num_samples = stk_dataset_size(ds);
  stk_batch_layout L;
  CHECK(stk_batch_layout_of(&rs, &L) == STK_OK);
  unsigned char *want = malloc(L.total_bytes), *got = malloc(L.total_bytes);
  uint64_t *idx = malloc(rs.batch_size * sizeof(uint64_t));
  CHECK(want && got && idx);
  int ti = stk_batch_layout_find(&L, "index");
  unsigned n = 0;
  for (uint64_t off = 0; off < 2; off++)
    for (uint32_t r = 0; r < rs.world_size; r++)
      for (uint64_t st = 0; st < stk_epoch_steps(&rs, rs.num_samples, off) && st < 3;
           st++) {
        memset(want, 0x5a, L.total_bytes);
        memset(got, 0xa5, L.total_bytes);
        CHECK(stk_builder_build_at(b, 1, off, r, st, want, L.total_bytes, NULL) ==
              STK_OK);
        stk__batch_facts f;
        int rc = stk__batch_assemble(b, 1, off, r, st, got, L.total_bytes, &f);
        CHECK(rc == STK_OK);
        if (rc) continue;
        CHECK(memcmp(want, got, L.total_bytes) == 0);
        CHECK(f.crc32c == stk_crc32c(0, got, L.total_bytes));
        CHECK_EQ_U64(f.total_bytes, L.total_bytes);
        CHECK(stk_batch_samples_at(&rs, rs.num_samples, 1, off, r, st, idx, NULL) ==
              STK_OK);
        CHECK(memcmp(f.indices, idx, rs.batch_size * sizeof(uint64_t)) == 0);
        for (uint32_t j = 0; ti >= 0 && j < rs.batch_size; j++) {
          int64_t v;
          memcpy(&v, got + L.tensors[ti].offset + 8ull * j, 8);
          CHECK_EQ_U64((uint64_t)v, f.indices[j]);
        }
        n++;
      }
  CHECK(n >= 8);
  /* an address outside the job: the builder's error, no facts */
  stk__batch_facts f;
  CHECK(stk__batch_assemble(b, 0, 0, rs.world_size, 0, got, L.total_bytes, &f) ==
        STK_INVALID_ARGUMENT);
  CHECK(f.indices == NULL && f.crc32c == 0);
  free(want), free(got), free(idx);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
}

int main(void) {
  if (tu_tmpdir(root, sizeof(root), "batch")) return 77;
  char out[4200], err[256];
  stk__gen_opts g;
  memset(&g, 0, sizeof(g));
  snprintf(out, sizeof(out), "%s/gen", root);
  g.out = out, g.count = 40, g.seed = 1, g.classes = 4;
  g.imagefolder = 1, g.tar = 1, g.per_shard = 10;
  g.min_side = 40, g.max_side = 64;
  CHECK(stk__gen_dataset(&g, err, sizeof(err)) == 0);
  stk__tokens_opts t;
  memset(&t, 0, sizeof(t));
  snprintf(out, sizeof(out), "%s/tok", root);
  t.out = out, t.synthetic = 100, t.code = stk__tokens_code("int32");
  t.seed = 1, t.vocab = 1000, t.min_len = 1, t.max_len = 40, t.eod = 0;
  uint64_t docs, toks;
  CHECK(stk__tokens_write(&t, &docs, &toks, err, sizeof(err)) == 0);
  for (size_t i = 0; i < sizeof(JOBS) / sizeof(JOBS[0]); i++) check_job(JOBS[i]);
  tu_rmtree(root);
  CHECK_DONE();
}
