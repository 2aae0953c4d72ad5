/* files.c - files_slurp (files.h): a whole file into memory, for tests. */
#include "files.h"

#include <stdio.h>
#include <stdlib.h>

char *files_slurp(const char *path, size_t *len) {
  if (len) *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t n = 0, cap = 1 << 16;
  char *buf = malloc(cap);
  for (size_t k; buf && (k = fread(buf + n, 1, cap - 1 - n, f)) > 0;) {
    n += k;
    if (n == cap - 1) { /* full: room for more and the NUL */
      char *nb = realloc(buf, cap * 2);
      if (!nb) free(buf);
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (!buf) return NULL;
  buf[n] = 0;
  if (len) *len = n;
  return buf;
}
