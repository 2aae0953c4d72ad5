/* prepare.h - `stoker-dataset prepare` (prepare.c): the lossless transcode
 * of an ImageFolder's or tar shards' JPEGs into files with restart markers every
 * few MCUs, which the worker's region decode cuts at. Not thread-safe per
 * call, but calls may run in parallel (no shared state).
 */
#ifndef STOKER_TOOLS_PREPARE_H
#define STOKER_TOOLS_PREPARE_H

#include <stddef.h>
#include <stdint.h>

/* The restart interval for a row of mcus_per_row MCUs: the whole row when
 * it has at most max_interval MCUs, else the largest N in
 * [2, max_interval] dividing it, else 1 (every MCU). The worker's region
 * decode cuts only at intervals that divide the row. */
unsigned stk__prepare_interval(unsigned mcus_per_row, unsigned max_interval);

/* Transcode in[0..inlen) losslessly (same DCT coefficients, sequential,
 * optimized Huffman tables, APPn/COM kept) with a restart interval from
 * stk__prepare_interval. *out is malloc'd (the caller frees). 0, or -1
 * when libjpeg refuses the file or warns about corrupt data. */
int stk__prepare_jpeg(const uint8_t *in, size_t inlen, unsigned max_interval,
                      uint8_t **out, size_t *outlen);

/* Prepare every file under src into dst (same relative paths) with
 * `threads` threads: JPEGs, and the JPEG members of *.tar shards,
 * transcoded and verified (the output decodes to the input's pixels),
 * other files copied; outputs that exist and
 * verify are kept. Writes dst/.stoker-prepared. Prints a progress line
 * and errors to stderr. 0, or -1 when a file could not be read or
 * written. */
int stk__prepare_dir(const char *src, const char *dst, unsigned interval,
                     unsigned threads);

#endif
