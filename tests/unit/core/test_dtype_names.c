/* test_dtype_names.c - the one dtype table (STK_DTYPE_MAP, stoker/core.h)
 * and every place that reads it: stk_dtype_name and stk_dtype_from_name
 * agree both ways on every row and refuse what is no dtype; the element
 * sizes the batch layout uses come from the same rows; the job keys
 * dtype and token_dtype accept exactly the rows of their use and write
 * them back by the same text; the op chain's to(...) takes the image rows
 * and refuses the others; a batch layout's tensors name types that are
 * in the table.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "stoker/core.h"

typedef struct {
  int num;
  const char *text;
  unsigned size;
  int image;
} row;

#define IS_IMAGE_IMAGE 1
#define IS_IMAGE_TOKEN 0
static const row rows[] = {
#define ROW(name, num, text, size, use) {num, text, size, IS_IMAGE_##use},
    STK_DTYPE_MAP(ROW)
#undef ROW
};
enum { NROWS = sizeof(rows) / sizeof(rows[0]) };

static void test_both_ways(void) {
  CHECK(NROWS == 5);
  for (int i = 0; i < NROWS; i++) {
    CHECK(stk_dtype_name(rows[i].num) &&
          !strcmp(stk_dtype_name(rows[i].num), rows[i].text));
    CHECK(stk_dtype_from_name(rows[i].text) == rows[i].num);
    for (int j = 0; j < i; j++) /* numbers and texts are unique */
      CHECK(rows[j].num != rows[i].num && strcmp(rows[j].text, rows[i].text));
  }
  /* the enum's values are the table's */
  CHECK(stk_dtype_from_name("uint8") == STK_DTYPE_UINT8);
  CHECK(stk_dtype_from_name("float32") == STK_DTYPE_FLOAT32);
  CHECK(stk_dtype_from_name("bfloat16") == STK_DTYPE_BFLOAT16);
  CHECK(stk_dtype_from_name("int64") == STK_DTYPE_INT64);
  CHECK(stk_dtype_from_name("int32") == STK_DTYPE_INT32);
  /* what is no dtype */
  CHECK(stk_dtype_name(0) == NULL && stk_dtype_name(-1) == NULL &&
        stk_dtype_name(6) == NULL);
  CHECK(stk_dtype_from_name(NULL) == 0 && stk_dtype_from_name("") == 0);
  CHECK(stk_dtype_from_name("Float32") == 0 && stk_dtype_from_name("float") == 0);
  CHECK(stk_dtype_from_name("uint8 ") == 0 && stk_dtype_from_name("float16") == 0);
}

/* The job keys: dtype takes the IMAGE rows, token_dtype the TOKEN rows;
 * the canonical text writes each back by its table text. */
static void test_job_keys(void) {
  for (int i = 0; i < NROWS; i++) {
    stk_job_spec s;
    stk_job_spec_defaults(&s);
    char err[512] = "", text[8192];
    const char *key = rows[i].image ? "dtype" : "token_dtype";
    const char *other = rows[i].image ? "token_dtype" : "dtype";
    CHECK(stk_job_spec_set(&s, key, rows[i].text, err, sizeof err) == STK_OK);
    CHECK((rows[i].image ? s.dtype : s.token_dtype) == rows[i].num);
    if (!rows[i].image) { /* token keys are written for a token job */
      s.source = STK_SOURCE_MEGATRON;
      snprintf(s.dataset, sizeof s.dataset, "tok");
    }
    CHECK(stk_job_spec_format(&s, text, sizeof text) < sizeof text);
    char want[64];
    snprintf(want, sizeof want, "%s = %s\n", key, rows[i].text);
    if (!strstr(text, want)) fprintf(stderr, "no '%s' in:\n%s\n", key, text);
    CHECK(strstr(text, want) != NULL);
    err[0] = 0;
    CHECK(stk_job_spec_set(&s, other, rows[i].text, err, sizeof err) ==
          STK_INVALID_ARGUMENT);
    CHECK(strstr(err, rows[i].text) != NULL); /* names the refused value */
  }
}

/* to(...): the image rows, nothing else. */
static void test_chain_to(void) {
  for (int i = 0; i < NROWS; i++) {
    stk_job_spec s;
    stk_job_spec_defaults(&s);
    s.source = STK_SOURCE_IMAGEFOLDER;
    snprintf(s.dataset, sizeof s.dataset, "ds");
    char chain[128], err[512] = "";
    snprintf(chain, sizeof chain, "decode | resize(32, 32) | to(%s)", rows[i].text);
    int rc = stk_job_spec_set(&s, "pipeline", chain, err, sizeof err);
    if (rows[i].image) {
      if (rc) fprintf(stderr, "%s: %s\n", chain, err);
      CHECK(rc == STK_OK && s.dtype == rows[i].num);
    } else {
      CHECK(rc == STK_INVALID_ARGUMENT && strstr(err, "dtype must be") != NULL);
    }
  }
}

/* The layout's tensors: every dtype it names is a row of the table. */
static void test_layout_types(void) {
  stk_job_spec s;
  stk_job_spec_defaults(&s);
  char err[512] = "";
  CHECK(stk_job_spec_parse(&s,
                           "num_samples = 64\nheight = 8\nwidth = 8\nbatch_size = 4\n",
                           err, sizeof err) == STK_OK);
  stk_batch_layout L;
  CHECK(stk_batch_layout_of(&s, &L) == STK_OK);
  CHECK(L.ntensors >= 2);
  for (uint32_t i = 0; i < L.ntensors; i++) {
    const char *n = stk_dtype_name(L.tensors[i].dtype);
    CHECK(n != NULL);
    for (int r = 0; n && r < NROWS; r++)
      if (rows[r].num == L.tensors[i].dtype) {
        uint64_t elems = 1;
        for (uint32_t d = 0; d < L.tensors[i].ndim; d++)
          elems *= (uint64_t)L.tensors[i].shape[d];
        CHECK_EQ_U64(L.tensors[i].nbytes, elems * rows[r].size);
      }
  }
}

int main(void) {
  test_both_ways();
  test_job_keys();
  test_chain_to();
  test_layout_types();
  CHECK_DONE();
}
