/* calibrate.c - `stoker-worker --calibrate JOB`: the job's own pipeline
 * on this host, one builder thread, for --calibrate-s seconds; prints the
 * images it built per CPU-second of that thread (the figure `stoker plan`
 * prices data hosts with; `stoker plan --calibrate` runs this). Opens the
 * dataset under --data-root with the worker's own limits, builds the form
 * a worker serves (the uint8 wire form of a float image job), and owns
 * nothing past the call. No network, no coordinator. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "stoker/augment.h"
#include "worker.h"

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int worker_calibrate(void) {
  char err[512];
  stk_job_spec spec, wire;
  stk_job_spec_defaults(&spec);
  if (stk_job_spec_load(&spec, opt.calibrate, err, sizeof(err))) {
    fprintf(stderr, "stoker-worker --calibrate: %s\n", err);
    return 2;
  }
  stk_limits lim;
  worker_limits(&lim);
  stk_dataset *ds = NULL;
  stk_builder *b = NULL;
  void *buf = NULL;
  int rc = 1;
  if (stk_dataset_open(&spec, *opt.data_root ? opt.data_root : NULL, &lim, &ds, err,
                       sizeof(err))) {
    fprintf(stderr, "stoker-worker --calibrate: cannot open the dataset: %s\n", err);
    return 1;
  }
  spec.num_samples = stk_dataset_size(ds);
  int u8 = stk_image_wire_spec(&spec, &wire);
  const stk_job_spec *s = u8 ? &wire : &spec;
  stk_batch_layout lay;
  uint64_t steps = stk_epoch_steps(s, spec.num_samples, 0);
  if (stk_batch_layout_of(s, &lay) || !steps) {
    fprintf(stderr,
            "stoker-worker --calibrate: the job makes no batch of %" PRIu64
            " samples (batch_size x world_size too large?)\n",
            spec.num_samples);
    goto out;
  }
  if (stk_builder_create(ds, s, &b, err, sizeof(err))) {
    fprintf(stderr, "stoker-worker --calibrate: %s\n", err);
    goto out;
  }
  if (!(buf = aligned_alloc(64, lay.total_bytes))) {
    fprintf(stderr, "stoker-worker --calibrate: out of memory\n");
    goto out;
  }
  /* one batch to warm up (file cache, decoder state), then the timed ones:
   * rank 0's steps of epoch 0, then epoch 1, ... (round again past the
   * job's last epoch) until the time is up */
  stk_build_info info;
  uint64_t epoch = 0, step = 0, batches = 0, subst = 0;
  if (stk_builder_build(b, 0, 0, 0, buf, lay.total_bytes, &info)) {
    fprintf(stderr, "stoker-worker --calibrate: build: %s\n", stk_builder_error(b));
    goto out;
  }
  double c0 = thread_cpu_s();
  int64_t w0 = stk__now_ms(), deadline = w0 + (int64_t)opt.calibrate_s * 1000;
  do {
    if (++step == steps) {
      step = 0;
      if (++epoch >= s->epochs) epoch = 0; /* the job's epochs, round again */
    }
    int st = stk_builder_build(b, epoch, 0, step, buf, lay.total_bytes, &info);
    if (st == STK_UNAVAILABLE) continue; /* transient: the same call may succeed */
    if (st) {
      fprintf(stderr, "stoker-worker --calibrate: build: %s\n", stk_builder_error(b));
      goto out;
    }
    batches++;
    subst += info.substituted;
  } while (stk__now_ms() < deadline);
  double cpu = thread_cpu_s() - c0, wall = (double)(stk__now_ms() - w0) / 1e3;
  double images = (double)batches * spec.batch_size;
  printf("images_per_cpu_s=%.1f images=%.0f batches=%" PRIu64
         " cpu_s=%.3f wall_s=%.3f "
         "batch_bytes=%" PRIu64 " wire=%s substituted=%" PRIu64 "\n",
         cpu > 0 ? images / cpu : 0, images, batches, cpu, wall, lay.total_bytes,
         u8 ? stk_dtype_name(STK_DTYPE_UINT8) : "as-job", subst);
  fflush(stdout);
  rc = 0;
out:
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  return rc;
}
