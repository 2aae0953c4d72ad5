/* util.h - helpers shared by the augment unit tests: temporary dataset
 * directories, removing them, and a default train/eval spec. */
#ifndef STOKER_TEST_AUG_UTIL_H
#define STOKER_TEST_AUG_UTIL_H
#include <stddef.h>
#include <stdint.h>

#include "stoker/augment.h"

/* mkdtemp under $TMPDIR (or /tmp); fills buf. 0 or -1. */
int tu_tmpdir(char *buf, size_t len, const char *tag);
/* rm -r path (no symlink following). */
void tu_rmtree(const char *path);
/* A spec for a file source over `dataset` (relative to the root). */
void tu_spec(stk_job_spec *s, int source, const char *dataset, int pipeline, int dtype,
             int layout, uint32_t B, uint32_t size);
int tu_write(const char *path, const void *data, size_t len);
#endif
