/* test_aug_memcheck.c - the JPEG train and eval pipelines under valgrind
 * memcheck (registered with valgrind as the test command).
 *
 * ASan cannot see into libjpeg-turbo, which is not instrumented: a stale
 * pointer inside libjpeg once made jpeg_skip_scanlines() read memory freed
 * by the previous image's jpeg_abort, so a worker's long-lived builder
 * produced bytes that differed from the reference. memcheck sees those
 * accesses. One builder builds several different addresses of both
 * pipelines, through pread (valgrind does not model io_uring's writes), and
 * every output byte is handed to write(2) so an uninitialised byte in a
 * batch is reported too. The same over the dataset's copy made by
 * `stoker-dataset prepare` (restart markers: the region decode cuts the
 * intervals it needs into a smaller JPEG).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gen.h"
#include "prepare.h"
#include "util.h"

static void run(const char *root, const char *dataset, int pipeline) {
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_IMAGEFOLDER, dataset, pipeline, STK_DTYPE_FLOAT32,
          STK_LAYOUT_NCHW, 4, 64);
  s.world_size = 2;
  stk_limits lim;
  memset(&lim, 0, sizeof lim);
  lim.io_mode = 1;
  char err[256];
  stk_dataset *ds = NULL;
  stk_builder *b = NULL;
  CHECK(stk_dataset_open(&s, root, &lim, &ds, err, sizeof err) == STK_OK);
  if (!ds) return;
  CHECK(stk_builder_create(ds, &s, &b, err, sizeof err) == STK_OK);
  stk_job_spec r = s;
  r.num_samples = stk_dataset_size(ds);
  stk_batch_layout L;
  stk_batch_layout_of(&r, &L);
  unsigned char *buf = malloc(L.total_bytes);
  int fd = open("/dev/null", O_WRONLY);
  for (uint32_t k = 0; k < 6 && b; k++) {
    CHECK(stk_builder_build(b, k % 2, k % 2, k, buf, L.total_bytes, NULL) == STK_OK);
    CHECK(write(fd, buf, L.total_bytes) == (ssize_t)L.total_bytes);
  }
  close(fd);
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
}

int main(void) {
  char root[512];
  if (tu_tmpdir(root, sizeof root, "memcheck")) return 1;
  stk__gen_opts o;
  memset(&o, 0, sizeof o);
  o.out = root;
  o.count = 48;
  o.classes = 3;
  o.imagefolder = 1;
  o.min_side = 120, o.max_side = 320; /* small: valgrind is slow */
  char err[256];
  CHECK(stk__gen_dataset(&o, err, sizeof err) == 0);
  run(root, "imagefolder", STK_PIPELINE_TRAIN);
  run(root, "imagefolder", STK_PIPELINE_EVAL);
  char src[600], dst[600];
  snprintf(src, sizeof src, "%s/imagefolder", root);
  snprintf(dst, sizeof dst, "%s/prepared", root);
  CHECK(stk__prepare_dir(src, dst, 8, 1) == 0);
  run(root, "prepared", STK_PIPELINE_TRAIN);
  run(root, "prepared", STK_PIPELINE_EVAL);
  tu_rmtree(root);
  CHECK_DONE();
}
