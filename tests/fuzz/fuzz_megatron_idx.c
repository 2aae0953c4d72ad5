/* fuzz_megatron_idx.c - libFuzzer target for the Megatron .idx parser
 * (augment/source_megatron.c, stk__mg_parse). The input is 8 bytes of
 * .bin size (little-endian, taken modulo 1 MiB) and then the .idx. Any
 * input must come back with an error message or an index whose every
 * sequence lies inside the .bin: the target reads the first and last
 * token of each from a heap buffer of that size, so ASan sees a read
 * past it. Never a crash, leak or undefined behaviour.
 *
 * Built as a libFuzzer binary with clang and STOKER_FUZZ=ON; always built
 * as a replay program (replay_main.c) that ctest runs over corpus/idx/
 * (seeds: `test_tokens_hostile --write-corpus DIR`).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "augment/megatron.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 8) return 0;
  uint64_t bin_len = stk__mg_u64(data) % (1u << 20);
  stk__mg_index x;
  char err[256];
  if (stk__mg_parse(data + 8, size - 8, bin_len, &x, err, sizeof(err))) {
    if (!err[0]) abort(); /* a refusal always says why */
    return 0;
  }
  unsigned char *bin = calloc(1, bin_len ? bin_len : 1);
  if (!bin) return 0;
  volatile int64_t sink = 0;
  for (uint64_t i = 0; i < x.nseq; i++) {
    uint32_t n = stk__mg_len(&x, i);
    if (!n) continue;
    const unsigned char *p = bin + stk__mg_ptr(&x, i);
    sink += stk__mg_token(p, x.code, 0) + stk__mg_token(p, x.code, n - 1);
  }
  for (uint64_t i = 1; i < x.ndoc; i++)
    if (stk__mg_doc(&x, i) < stk__mg_doc(&x, i - 1)) abort();
  (void)sink;
  free(bin);
  return 0;
}
