/* test_token_job.c - the token job keys and layout of core/ (source =
 * megatron): a spec with every token key set round-trips through the
 * canonical text and changes the hash; validation refuses inconsistent
 * keys (masks without eod_token, eod_mask_loss without loss_mask,
 * drop_last = false without loss_mask, token keys on an image job,
 * seq_len out of range, an eod id too large for int32); the layout holds
 * tokens and labels [B, seq_len], then loss_mask (float32), position_ids
 * and index as the job asks, 64-byte aligned, found by name; image jobs'
 * layout is unchanged.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "stoker/core.h"

static void token_spec(stk_job_spec *s) {
  stk_job_spec_defaults(s);
  s->source = STK_SOURCE_MEGATRON;
  snprintf(s->dataset, sizeof s->dataset, "lm/a:0.7, lm/b:0.3");
  s->seq_len = 2048;
  s->batch_size = 8;
}

static void test_text(void) {
  stk_job_spec a, b;
  token_spec(&a);
  uint64_t h0 = stk_job_spec_hash(&a);
  a.token_dtype = STK_DTYPE_INT32;
  a.eod_token = 50256;
  a.loss_mask = a.eod_mask_loss = a.position_ids = a.reset_position_ids = 1;
  a.seq_len = 4096;
  CHECK(stk_job_spec_hash(&a) != h0);
  char text[16384], err[256];
  stk_job_spec_format(&a, text, sizeof text);
  CHECK(strstr(text, "eod_token = 50256\n") != NULL);
  CHECK(strstr(text, "token_dtype = int32\n") != NULL);
  CHECK(strstr(text, "source = megatron\n") != NULL);
  stk_job_spec_defaults(&b);
  CHECK(stk_job_spec_parse(&b, text, err, sizeof err) == STK_OK);
  CHECK(memcmp(&a, &b, sizeof a) == 0);
  CHECK(stk_job_spec_hash(&a) == stk_job_spec_hash(&b));
  /* eod_token = none parses back to -1 */
  CHECK(stk_job_spec_set(&b, "eod_token", "none", err, sizeof err) == STK_OK);
  CHECK(b.eod_token == -1);
  CHECK(stk_job_spec_set(&b, "eod_token", "-3", err, sizeof err) == STK_INVALID_ARGUMENT);
  CHECK(stk_job_spec_set(&b, "token_dtype", "int16", err, sizeof err) ==
        STK_INVALID_ARGUMENT);
}

static void refused(const stk_job_spec *s, const char *needle) {
  char err[256] = "";
  int rc = stk_job_spec_validate(s, err, sizeof err);
  CHECK(rc == STK_INVALID_ARGUMENT);
  if (!strstr(err, needle)) {
    fprintf(stderr, "want '%s' in '%s'\n", needle, err);
    check_failures++;
  }
}

static void test_validate(void) {
  stk_job_spec s;
  char err[256];
  token_spec(&s);
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  s.eod_mask_loss = 1;
  refused(&s, "needs loss_mask");
  s.loss_mask = 1;
  refused(&s, "need eod_token");
  s.eod_token = 0;
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  s.reset_position_ids = 1;
  refused(&s, "needs position_ids");
  token_spec(&s);
  s.drop_last = 0;
  refused(&s, "loss_mask = true");
  token_spec(&s);
  s.seq_len = 0;
  refused(&s, "seq_len");
  s.seq_len = (1u << 20) + 1;
  refused(&s, "seq_len");
  token_spec(&s);
  s.token_dtype = STK_DTYPE_INT32;
  s.eod_token = (int64_t)1 << 31;
  refused(&s, "int32");
  token_spec(&s);
  s.batch_size = 65536, s.seq_len = 1 << 20;
  refused(&s, "2 GiB");
  token_spec(&s);
  s.dataset[0] = 0;
  refused(&s, "dataset");
  /* token keys on an image job */
  stk_job_spec_defaults(&s);
  s.num_samples = 100;
  CHECK(stk_job_spec_validate(&s, err, sizeof err) == STK_OK);
  s.loss_mask = 1;
  refused(&s, "source = megatron");
}

static void test_layout(void) {
  stk_job_spec s;
  stk_batch_layout L;
  token_spec(&s);
  CHECK(stk_batch_layout_of(&s, &L) == STK_OK);
  CHECK_EQ_U64(L.ntensors, 3);
  CHECK(stk_batch_layout_find(&L, "tokens") == 0 &&
        stk_batch_layout_find(&L, "labels") == 1);
  CHECK(stk_batch_layout_find(&L, "index") == 2);
  CHECK(stk_batch_layout_find(&L, "mask") == -1 &&
        stk_batch_layout_find(&L, "image") == -1);
  CHECK(L.tensors[0].ndim == 2 && L.tensors[0].shape[0] == 8 &&
        L.tensors[0].shape[1] == 2048);
  CHECK(L.tensors[0].dtype == STK_DTYPE_INT64);
  CHECK_EQ_U64(L.tensors[1].offset, 8 * 2048 * 8);
  CHECK_EQ_U64(L.total_bytes, 2 * 8 * 2048 * 8 + 64);
  s.token_dtype = STK_DTYPE_INT32;
  s.loss_mask = 1;
  CHECK(stk_batch_layout_of(&s, &L) == STK_OK);
  CHECK_EQ_U64(L.ntensors, 4);
  int lm = stk_batch_layout_find(&L, "loss_mask");
  CHECK(lm == 2 && L.tensors[lm].dtype == STK_DTYPE_FLOAT32);
  CHECK(stk_batch_layout_find(&L, "index") == 3);
  s.position_ids = 1;
  CHECK(stk_batch_layout_of(&s, &L) == STK_OK);
  CHECK_EQ_U64(L.ntensors, 4);
  CHECK(stk_batch_layout_find(&L, "position_ids") == 3);
  CHECK(stk_batch_layout_find(&L, "index") == -1);
  CHECK(L.tensors[3].dtype == STK_DTYPE_INT32);
  for (uint32_t t = 0; t < L.ntensors; t++) {
    CHECK(L.tensors[t].offset % 64 == 0);
    CHECK_EQ_U64(L.tensors[t].nbytes, 8 * 2048 * 4);
  }
  CHECK_EQ_U64(L.total_bytes, 4 * 8 * 2048 * 4);
  /* image jobs: the four tensors as before */
  stk_job_spec_defaults(&s);
  s.num_samples = 10;
  CHECK(stk_batch_layout_of(&s, &L) == STK_OK);
  CHECK_EQ_U64(L.ntensors, 4);
  CHECK(!strcmp(L.tensors[STK_TENSOR_IMAGE].name, "image"));
  CHECK(stk_batch_layout_find(&L, "index") == STK_TENSOR_INDEX);
  CHECK(stk_batch_layout_find(&L, "mask") == STK_TENSOR_MASK);
  CHECK(stk_batch_layout_find(NULL, "mask") == -1);
}

int main(void) {
  test_text();
  test_validate();
  test_layout();
  CHECK_DONE();
}
