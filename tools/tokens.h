/* tokens.h - the Megatron indexed-dataset writer, checker and sample
 * dumper behind `stoker-dataset tokens` (tokens.c). Tooling only.
 */
#ifndef STOKER_TOOLS_TOKENS_H
#define STOKER_TOOLS_TOKENS_H

#include <stdint.h>
#include <stdio.h>

#include "stoker/augment.h"

typedef struct stk__tokens_opts {
  const char *out;    /* PREFIX: writes PREFIX.bin and PREFIX.idx */
  const char *in;     /* text, one document a line ("-" = stdin); or: */
  uint64_t synthetic; /* > 0: this many generated documents */
  int code;           /* .bin dtype code (stk__tokens_code) */
  uint64_t seed, vocab, min_len, max_len;
  int64_t eod; /* synthetic: appended to every document; -1 = none */
} stk__tokens_opts;

/* dtype code of a name (uint8 int8 int16 int32 int64 uint16), 0 if unknown. */
int stk__tokens_code(const char *name);

/* Write the pair; *docs and *tokens say what was written. 0, or -1 with a
 * message in err (a token that does not fit the dtype, a bad line, I/O). */
int stk__tokens_write(const stk__tokens_opts *o, uint64_t *docs, uint64_t *tokens,
                      char *err, size_t errlen);

/* Parse PREFIX.idx against PREFIX.bin with the worker's parser; print a
 * summary line to out (may be NULL). 0, or -1 with a message in err. */
int stk__tokens_check(const char *prefix, FILE *out, char *err, size_t errlen);

/* Print every sample of `epoch` of a token job as the worker builds it:
 * "samples N seq_len S", one "prefix d start A count C order q0 q1 ..."
 * line per blend prefix (its document order this epoch), then per sample
 * "sample P rank R step T" (P: its position in [0, N), from the
 * addressing), "index I" if the batch has an index tensor, then one line
 * per [B, seq_len] tensor ("tokens t0 t1 ...", "labels ...", "loss_mask
 * ...", "position_ids ...").
 * Returns an stk_status (message in err). */
int stk__tokens_dump(const stk_job_spec *spec, const char *root, uint64_t epoch,
                     FILE *out, char *err, size_t errlen);

#endif
