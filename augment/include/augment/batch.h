/* augment/batch.h - what batch.c offers outside augment/: one call that
 * assembles a batch end to end and returns the payload with the facts its
 * header carries (the sample indices, the crc, the build counters), so
 * that a server only asks for a batch and sends it. The worker's
 * interface (server/worker/fairsched.c); on the include path of whatever
 * links stoker_augment (augment/include/). Not public API, never
 * installed.
 */
#ifndef STOKER_AUGMENT_BATCH_H
#define STOKER_AUGMENT_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/augment.h" /* stk_builder, stk_build_info */

/* A built batch's header facts. */
typedef struct stk__batch_facts {
  /* batch_size sample indices the batch was addressed with, in slot order
   * (the index tensor's values when the layout has one; a substituted
   * slot keeps its addressed index). Owned by the builder: valid until
   * its next build or destroy. */
  const uint64_t *indices;
  uint32_t crc32c;      /* stk_crc32c(0, payload, total_bytes) */
  uint64_t total_bytes; /* the payload: the builder's layout */
  stk_build_info info;  /* substituted, reread, bytes read, user_code */
} stk__batch_facts;

/* stk_builder_build_at (stoker/augment.h: same arguments, same errors,
 * same bytes in buf), and on STK_OK the header facts in *out (zeroed
 * first). Not thread-safe: one builder per thread. */
int stk__batch_assemble(stk_builder *b, uint64_t epoch, uint64_t offset, uint32_t rank,
                        uint64_t step, void *buf, size_t len, stk__batch_facts *out);

#endif
