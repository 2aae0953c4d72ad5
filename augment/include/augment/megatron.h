/* augment/megatron.h - what source_megatron.c offers outside augment/:
 * the Megatron-LM/NeMo indexed dataset format (PREFIX.idx + PREFIX.bin)
 * as the megatron source reads it, the .idx parser, which checks every
 * field against the file sizes, and a description of an open token
 * dataset's blend. The interface of the stoker-dataset tool (tools/), the
 * fuzz target and the token tests; on the include path of whatever links
 * stoker_augment (augment/include/). Not public API, never installed.
 *
 * The .idx, all little-endian, no padding:
 *   offset 0   9 bytes  magic "MMIDIDX\0\0"
 *          9   u64      version, 1
 *         17   u8       dtype code of the .bin tokens (STK__MG_* below)
 *         18   u64      sequence count S
 *         26   u64      document count D (entries of the document index)
 *         34   int32[S] sequence lengths, in tokens
 *              int64[S] sequence pointers, byte offsets into the .bin
 *              int64[D] document index: sequence numbers where documents
 *                       start, from 0 up to S, non-decreasing
 * and the file ends there. The .bin holds the tokens, sequence i being
 * lengths[i] tokens of the dtype at byte pointers[i].
 */
#ifndef STOKER_AUGMENT_MEGATRON_H
#define STOKER_AUGMENT_MEGATRON_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/augment.h" /* stk_dataset */

#define STK__MG_HEADER_BYTES  34
#define STK__MG_MAX_SEQUENCES (1ull << 32)

/* .bin dtype codes */
enum {
  STK__MG_U8 = 1,
  STK__MG_I8 = 2,
  STK__MG_I16 = 3,
  STK__MG_I32 = 4,
  STK__MG_I64 = 5,
  STK__MG_F64 = 6,
  STK__MG_F32 = 7,
  STK__MG_U16 = 8
};

/* A parsed .idx: views into the caller's bytes (arrays may be unaligned:
 * read them with stk__mg_len / stk__mg_ptr / stk__mg_doc). */
typedef struct stk__mg_index {
  int code;                  /* STK__MG_* (an integer type) */
  size_t itemsize;           /* bytes per token */
  uint64_t nseq, ndoc;       /* S and D of the header */
  const unsigned char *lens; /* int32[S] */
  const unsigned char *ptrs; /* int64[S] */
  const unsigned char *docs; /* int64[D] */
  uint64_t tokens;           /* sum of the lengths */
} stk__mg_index;

/* Parse and check idx[0..idx_len) for a .bin of bin_len bytes: magic,
 * version 1, an integer dtype, the file size equal to what the counts
 * say, lengths >= 0, every sequence aligned and inside the .bin, the
 * document index from 0 to S and non-decreasing, at most
 * STK__MG_MAX_SEQUENCES sequences. All arithmetic is overflow-checked.
 * Returns 0 and fills *out (views into idx), or -1 with a message in err.
 * Thread-safe; does not allocate. */
int stk__mg_parse(const unsigned char *idx, size_t idx_len, uint64_t bin_len,
                  stk__mg_index *out, char *err, size_t errlen);

/* Bytes per token of a dtype code, 0 for an unknown code. */
size_t stk__mg_itemsize(int code);

static inline uint32_t stk__mg_len(const stk__mg_index *x, uint64_t i) {
  const unsigned char *p = x->lens + 4 * i;
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}
static inline uint64_t stk__mg_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; k--) v = v << 8 | p[k];
  return v;
}
static inline uint64_t stk__mg_ptr(const stk__mg_index *x, uint64_t i) {
  return stk__mg_u64(x->ptrs + 8 * i);
}
static inline uint64_t stk__mg_doc(const stk__mg_index *x, uint64_t i) {
  return stk__mg_u64(x->docs + 8 * i);
}

/* Token t (as a signed 64-bit value) of a .bin region p of dtype code. */
static inline int64_t stk__mg_token(const unsigned char *p, int code, uint64_t t) {
  switch (code) {
    case STK__MG_U8:
      return p[t];
    case STK__MG_I8:
      return (int8_t)p[t];
    case STK__MG_I16:
      return (int16_t)(uint16_t)(p[2 * t] | p[2 * t + 1] << 8);
    case STK__MG_U16:
      return (uint16_t)(p[2 * t] | p[2 * t + 1] << 8);
    case STK__MG_I32: {
      const unsigned char *q = p + 4 * t;
      return (int32_t)((uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                       (uint32_t)q[3] << 24);
    }
    case STK__MG_I64:
      return (int64_t)stk__mg_u64(p + 8 * t);
  }
  return 0;
}

/* For tools and tests of the megatron source: the blend range [start,
 * start + count) of prefix d, its sequence count, and (order non-NULL,
 * nseq entries) its document order in epoch. STK_INVALID_ARGUMENT for
 * another source, STK_NOT_FOUND past the last prefix. Thread-safe. */
int stk__megatron_describe(const stk_dataset *ds, uint64_t epoch, uint32_t d,
                           uint64_t *start, uint64_t *count, uint64_t *order,
                           uint64_t *nseq);

#endif
