/* fuzz_job.c - libFuzzer target for the job-spec parser (core/job_spec.c):
 * any text through stk_job_spec_parse must end with a status, never a
 * crash; a text that parses and validates must survive the canonical
 * round trip (format, parse again: same hash), since every process of a
 * job compares hashes of that form. stk_job_text_get reads the same text.
 *
 * Built as a libFuzzer binary with clang and STOKER_FUZZ=ON; always built
 * as a replay program (replay_main.c) that ctest runs over corpus/job/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/core.h"
#include "stoker/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (64u << 10)) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  char err[256], v[128];
  stk_job_text_get(text, "batch_size", v, sizeof(v));
  stk_job_text_get(text, "dataset", v, 8);
  stk_job_spec a;
  stk_job_spec_defaults(&a);
  if (stk_job_spec_parse(&a, text, err, sizeof(err)) == STK_OK &&
      stk_job_spec_validate(&a, err, sizeof(err)) == STK_OK) {
    size_t n = stk_job_spec_format(&a, NULL, 0);
    char *canon = malloc(n + 1);
    if (canon) {
      stk_job_spec_format(&a, canon, n + 1);
      stk_job_spec b;
      stk_job_spec_defaults(&b);
      if (stk_job_spec_parse(&b, canon, err, sizeof(err)) != STK_OK ||
          stk_job_spec_hash(&a) != stk_job_spec_hash(&b))
        abort(); /* the canonical form must parse back to the same job */
      free(canon);
    }
  }
  free(text);
  return 0;
}
