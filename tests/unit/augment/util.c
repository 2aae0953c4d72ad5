/* util.c - see util.h. */
#define _GNU_SOURCE
#include "util.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tu_tmpdir(char *buf, size_t len, const char *tag) {
  const char *t = getenv("TMPDIR");
  snprintf(buf, len, "%s/stoker-%s-XXXXXX", t && *t ? t : "/tmp", tag);
  return mkdtemp(buf) ? 0 : -1;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
  (void)sb, (void)flag, (void)f;
  chmod(p, 0700);
  remove(p);
  return 0;
}

void tu_rmtree(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

void tu_spec(stk_job_spec *s, int source, const char *dataset, int pipeline, int dtype,
             int layout, uint32_t B, uint32_t size) {
  stk_job_spec_defaults(s);
  s->source = source;
  if (source == STK_SOURCE_IMAGEFOLDER) s->num_classes = 0; /* the folder count */
  snprintf(s->dataset, sizeof(s->dataset), "%s", dataset);
  s->num_samples = 0;
  s->pipeline = pipeline;
  s->dtype = dtype;
  s->layout = layout;
  s->batch_size = B;
  s->height = s->width = size;
  s->resize = size * 256 / 224;
  s->seed = 42;
  s->epochs = 4;
}

int tu_write(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int rc = fwrite(data, 1, len, f) == len ? 0 : -1;
  return fclose(f) || rc ? -1 : 0;
}
