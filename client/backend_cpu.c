/* backend_cpu.c - the CPU device backend: slots live in ordinary host
 * memory (64-byte aligned, so every tensor offset of the layout stays
 * aligned). Tensors handed out point straight into the payload buffer that
 * received the batch (or its converted copy): no copy on this path.
 *
 * Owns: nothing beyond the buffers it returns. Thread-safe.
 */
#include <stdlib.h>

#include "client_internal.h"

void *stk__host_alloc(stk_client *c, size_t n) {
  (void)c;
  size_t rounded = (n + 63) & ~(size_t)63;
  return aligned_alloc(64, rounded ? rounded : 64);
}

void stk__host_free(stk_client *c, void *p) {
  (void)c;
  free(p);
}
