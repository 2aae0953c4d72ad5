/* common/crc32c.h - CRC-32C for code that must not include the augment
 * API (rpc/). The same function is declared publicly in
 * stoker/augment.h (libstoker and libstoker-augment export it).
 */
#ifndef STOKER_COMMON_CRC32C_H
#define STOKER_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/status.h" /* STK_EXPORT */

/* CRC-32C (Castagnoli) of buf, continuing from crc (start with 0). Uses
 * SSE4.2 when the CPU has it. Thread-safe; never fails. */
STK_EXPORT uint32_t stk_crc32c(uint32_t crc, const void *buf, size_t len);

#endif
