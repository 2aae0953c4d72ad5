/* files.h - reading a whole file in a test: a log, a journal, a dataset
 * file to compare or corrupt. Test code only.
 *
 * Thread-safe (no shared state).
 */
#ifndef STOKER_TEST_FILES_H
#define STOKER_TEST_FILES_H

#include <stddef.h>

/* The whole of path (a regular file, or one of /proc's that do not say
 * their size), read to its end, with a NUL after the last byte so text can
 * be searched as a string. *len (may be NULL) gets the byte count, the NUL
 * not counted. The caller frees the result. NULL when path cannot be
 * opened or memory runs out (*len is then 0). */
char *files_slurp(const char *path, size_t *len);

#endif
