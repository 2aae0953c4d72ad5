/* test_e2e.c - the whole path, real processes on 127.0.0.1: a coordinator,
 * two workers and two ranks (libstoker clients in this process). Every
 * delivered batch must equal the reference batch, each step exactly once
 * and in order over two epochs, and every process must exit 0 after
 * the last finish (a 60 s wait bounds a hang).
 *
 * Then the same with a bearer token on every call (and a client without
 * it refused at once), then with real JPEGs: a generated ImageFolder dataset, the train
 * pipeline, num_samples learnt from the workers' index, and both ranks
 * comparing every batch with the reference built from the same files: a
 * float32 NCHW job whose images travel as 8-bit values (the bytes
 * received say so), the same with floats on the wire
 * (STOKER_WIRE_UINT8=0), a bfloat16 NHWC job, and a job whose pipeline
 * is a user's op chain with a plugin op (examples/plugin_cutout.c) and
 * three views per sample, one with a chain and a size of its own. The
 * float32 NCHW, bfloat16 NHWC and three-view jobs run again with CUDA
 * slots on fake_cudart (a host-memory stand-in for the runtime and
 * driver): the 8-bit images go to the "device" and the conversion
 * kernel's body rebuilds the floats there; every tensor's device bytes
 * must equal the reference's.
 *
 * usage: test_e2e <stoker-coordinator> <stoker-worker> [<stoker-dataset>]
 */
#include "daemon_util.h"
#include "e2e_util.h"

/* Run one job: coordinator with `job` args, two workers with `wargs`, two
 * rank threads; checks as described above. wire_bytes (0: not checked):
 * what every batch weighs on the wire. */
static int cuda_slots; /* the ranks use CUDA slots on fake_cudart */

static void e2e_job(const char *tag, const char *const *job, const char *const *wargs,
                    const char *data_root, const char *token, uint64_t want_batches,
                    uint64_t wire_bytes) {
  int before = check_failures;
  stk_proc p[3];
  const char *tok[] = {"--token", token, NULL};
  int port = e2e_start(p, tag, job, token ? tok : NULL, 2, wargs);
  if (port <= 0) return;
  if (token) { /* a client without the token is refused at once, clearly */
    char addr[64], err[512];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    stk_client_config cfg;
    stk_client_config_defaults(&cfg);
    cfg.coordinator = addr;
    cfg.world_size = 2;
    cfg.join_timeout_ms = 20000;
    stk_client *c = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(stk_client_open(&cfg, &c, err, sizeof err) == STK_INVALID_ARGUMENT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(strstr(err, "token") != NULL);
    CHECK(ts_diff_s(t1, t0) < 5.0);
    stk_client_close(c);
  }

  rank_run r[2];
  e2e_ranks(r, 2, port, tag, data_root, token, cuda_slots, want_batches, 2);
  for (int i = 0; i < 2; i++) {
    CHECK(r[i].stats.crc_errors == 0);
    if (cuda_slots) CHECK_EQ_U64(r[i].stats.device_convert, 1);
    if (wire_bytes) { /* every batch received (duplicates too) weighed that */
      CHECK(r[i].stats.bytes % wire_bytes == 0);
      CHECK(r[i].stats.bytes / wire_bytes >= r[i].delivered);
    }
    fprintf(
        stderr,
        "%s rank %d: %llu batches, %llu bytes received, stall %.1f%%, %u workers used\n",
        tag, i, (unsigned long long)r[i].delivered, (unsigned long long)r[i].stats.bytes,
        100 * r[i].stats.stall_fraction, r[i].stats.nworkers);
  }
  struct timespec last = ts_diff_s(r[0].finished_at, r[1].finished_at) > 0
                             ? r[0].finished_at
                             : r[1].finished_at;
  e2e_wait_exit(p, 3);
  struct timespec now; /* the last of them exited soon after the last finish */
  clock_gettime(CLOCK_MONOTONIC, &now);
  CHECK(ts_diff_s(now, last) < 10.0);
  e2e_logs_if_failed(p, 3, before);
}

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2; /* argv[3]: stoker-dataset, optional */
  const char *syn[] = {"--set", "num_samples=600", "--set", "batch_size=8",
                       "--set", "height=32",       "--set", "width=32",
                       "--set", "world_size=2",    "--set", "epochs=2",
                       "--set", "seed=11",         NULL};
  const char *w1[] = {"--threads", "1", NULL};
  e2e_job("synthetic", syn, w1, NULL, NULL, 2 * 37, 0); /* floor(600 / 16) x 2 epochs */
  /* The same with a bearer token on every call: Join, watch, streams. */
  const char *w1t[] = {"--threads", "1", "--token", "s3cret-t0ken", NULL};
  e2e_job("token", syn, w1t, NULL, "s3cret-t0ken", 2 * 37, 0);

  if (argc < 4) {
    fprintf(stderr, "no stoker-dataset given: JPEG phase skipped\n");
    CHECK_DONE();
  }
  char root[600];
  snprintf(root, sizeof root, "%s/data", proc_tmpdir());
  char *gen[] = {argv[3],      "gen",       "--out",      root,       "--count",
                 "120",        "--classes", "4",          "--layout", "imagefolder",
                 "--min-side", "120",       "--max-side", "360",      NULL};
  stk_proc g;
  CHECK(proc_spawn(&g, "gen", gen) == 0);
  CHECK(proc_wait(&g, 60000) == 0);
  const char *jpg[] = {"--set", "source=imagefolder",
                       "--set", "dataset=imagefolder",
                       "--set", "pipeline=train",
                       "--set", "height=64",
                       "--set", "width=64",
                       "--set", "dtype=float32",
                       "--set", "batch_size=6",
                       "--set", "world_size=2",
                       "--set", "epochs=2",
                       "--set", "drop_last=false",
                       "--set", "seed=3",
                       NULL};
  const char *w2[] = {"--threads", "1", "--data-root", root, NULL};
  /* A float job's images travel as their 8-bit values and come out as the
   * reference's floats, byte for byte (BatchRequest.image_uint8); with
   * STOKER_WIRE_UINT8=0 the floats travel. */
  stk_job_spec js;
  stk_job_spec_defaults(&js);
  js.source = STK_SOURCE_IMAGEFOLDER, js.num_classes = 0, js.height = js.width = 64,
  js.batch_size = 6;
  js.drop_last = 0, js.pipeline = STK_PIPELINE_TRAIN;
  snprintf(js.dataset, sizeof js.dataset, "imagefolder");
  js.dtype = STK_DTYPE_UINT8;
  stk_batch_layout l8, l32;
  CHECK(stk_batch_layout_of(&js, &l8) == STK_OK);
  js.dtype = STK_DTYPE_FLOAT32;
  CHECK(stk_batch_layout_of(&js, &l32) == STK_OK);
  e2e_job("jpeg", jpg, w2, root, NULL, 2 * 10, l8.total_bytes); /* ceil(120 / 12) x 2 */
  setenv("STOKER_WIRE_UINT8", "0", 1);
  e2e_job("jpeg-f32-wire", jpg, w2, root, NULL, 2 * 10, l32.total_bytes);
  unsetenv("STOKER_WIRE_UINT8");
  const char *jpg16[] = {"--set", "source=imagefolder", "--set", "dataset=imagefolder",
                         "--set", "pipeline=train",     "--set", "height=64",
                         "--set", "width=64",           "--set", "dtype=bfloat16",
                         "--set", "layout=nhwc",        "--set", "batch_size=6",
                         "--set", "world_size=2",       "--set", "epochs=2",
                         "--set", "drop_last=false",    "--set", "seed=3",
                         NULL};
  e2e_job("jpeg-bf16-nhwc", jpg16, w2, root, NULL, 2 * 10, l8.total_bytes);
  /* the same two jobs into CUDA slots, converted by the kernel's body */
  setenv("STOKER_CUDART", FAKE_CUDART, 1);
  setenv("STOKER_CUDA_DRIVER", FAKE_CUDART, 1);
  setenv("STOKER_CUDA_CONVERT", "gpu", 1);
  cuda_slots = 1;
  e2e_job("jpeg-cuda", jpg, w2, root, NULL, 2 * 10, l8.total_bytes);
  e2e_job("jpeg-bf16-nhwc-cuda", jpg16, w2, root, NULL, 2 * 10, l8.total_bytes);
  cuda_slots = 0;
  unsetenv("STOKER_CUDA_CONVERT");
  unsetenv("STOKER_CUDA_DRIVER");
  unsetenv("STOKER_CUDART");
  /* A user's op chain with a plugin op (examples/plugin_cutout.c), three
   * views per sample (image0..image2), view 1 with a chain and a size of
   * its own (32x24, float32 from 8-bit values on the wire like the
   * others): the workers load the plugin from --plugin-dir, the ranks'
   * references from $STOKER_PLUGIN_DIR; every batch equals the
   * reference. */
  const char *chain[] = {
      "--set",
      "source=imagefolder",
      "--set",
      "dataset=imagefolder",
      "--set",
      "plugin=cutout",
      "--set",
      "pipeline=random_resized_crop(64, scale=0.2:1) | hflip(0.5) | "
      "color_jitter(0.4, 0.4, 0.4, 0.1) | rotate(0, 90, 180, 270) | "
      "gaussian_blur(3, sigma=0.1:1) | cutout(size=16, n=2) | normalize(imagenet) | "
      "to(float32, nchw)",
      "--set",
      "batch_size=6",
      "--set",
      "world_size=2",
      "--set",
      "epochs=2",
      "--set",
      "drop_last=false",
      "--set",
      "seed=5",
      "--set",
      "views=3",
      "--set",
      "view1=random_resized_crop(32, 24, scale=0.05:0.4) | hflip(0.5) | grayscale(0.2) | "
      "cutout(size=4, n=1)",
      NULL};
  const char *w3[] = {"--threads",    "1",        "--data-root", root,
                      "--plugin-dir", PLUGIN_DIR, NULL};
  setenv("STOKER_PLUGIN_DIR", PLUGIN_DIR, 1);
  /* the wire layout: uint8 images, view 1 of its own size */
  char jerr[256];
  js.pipeline = STK_PIPELINE_CHAIN, js.plugin[0] = 0;
  CHECK(stk_job_spec_parse(&js,
                           "plugin = cutout\n"
                           "pipeline = random_resized_crop(64) | cutout(size=16, n=2)\n"
                           "views = 3\n"
                           "view1 = random_resized_crop(32, 24) | cutout(size=4, n=1)\n",
                           jerr, sizeof jerr) == STK_OK);
  js.dtype = STK_DTYPE_UINT8;
  stk_batch_layout l8v;
  CHECK(stk_batch_layout_of(&js, &l8v) == STK_OK);
  CHECK(l8v.ntensors == 6 && l8v.tensors[1].nbytes == 6ull * 3 * 32 * 24);
  e2e_job("jpeg-chain-plugin", chain, w3, root, NULL, 2 * 10, l8v.total_bytes);
  /* the same on CUDA slots: each view converted at its own size */
  setenv("STOKER_CUDART", FAKE_CUDART, 1);
  setenv("STOKER_CUDA_DRIVER", FAKE_CUDART, 1);
  setenv("STOKER_CUDA_CONVERT", "gpu", 1);
  cuda_slots = 1;
  e2e_job("jpeg-chain-plugin-cuda", chain, w3, root, NULL, 2 * 10, l8v.total_bytes);
  cuda_slots = 0;
  unsetenv("STOKER_CUDA_CONVERT");
  unsetenv("STOKER_CUDA_DRIVER");
  unsetenv("STOKER_CUDART");
  unsetenv("STOKER_PLUGIN_DIR");
  CHECK_DONE();
}
