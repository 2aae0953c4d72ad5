/* test_client_cuda_emulated.c - the CUDA backend's protocol on a machine
 * without a GPU: libstoker loads fake_cudart (a lazy host-memory stand-in,
 * see fake_cudart.c) through $STOKER_CUDART. Copies run only when someone
 * waits for them, so every batch's device bytes equal its reference only
 * if next() makes the caller's stream wait on the slot's ready event
 * (removing that wait makes this test fail). Also checks copies stay inside
 * device blocks and nothing leaks after close. Limits: the fake's
 * cudaStreamWaitEvent blocks the host (stronger than CUDA), so the copy
 * thread's wait before reusing a slot's pinned buffers is not exercised;
 * this does not prove the code on real hardware (docs/gpu.md).
 *
 * The conversion kernel: fake_cudart stands in for the driver too
 * ($STOKER_CUDA_DRIVER) and runs the kernel's body (convert_kernel.h) over
 * each launch grid. Every converted job is run twice, converted on the CPU
 * (STOKER_CUDA_CONVERT=cpu) and on the "device" (=gpu), and the device
 * bytes of every tensor of every batch must be equal. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proc.h"
#include "stoker/client.h"

static const char *JOB =
    "source = synthetic\nnum_samples = 96\nheight = 8\nwidth = 8\n"
    "batch_size = 4\nworld_size = 1\nepochs = 2\nseed = 3\n";

static void run(uint32_t slots, int convert) {
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.world_size = 1;
  cfg.slots = slots;
  cfg.prefetch = 5;
  cfg.device = STK_DEVICE_CUDA;
  cfg.convert = convert;
  stk_client *c = NULL;
  char err[512] = "";
  int st = stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err));
  if (st) fprintf(stderr, "open: %s\n", err);
  CHECK(st == STK_OK);
  if (!c) return;
  stk_job_spec spec;
  stk_client_job(c, &spec);
  size_t plen = (size_t)stk_client_payload_bytes(c);
  unsigned char *ref = malloc(plen);
  uint64_t n = 0;
  stk_batch *held = NULL;
  for (;;) {
    stk_batch *b = NULL;
    st = stk_client_next(c, &b);
    if (st == STK_END_OF_EPOCH) continue;
    if (st != STK_OK) break;
    stk_tensor img, lab;
    stk_batch_tensor(b, STK_TENSOR_IMAGE, &img);
    stk_batch_tensor(b, STK_TENSOR_LABEL, &lab);
    CHECK(img.device == STK_DEVICE_CUDA);
    CHECK(stk_client_reference(c, stk_batch_epoch(b), stk_batch_step(b), NULL, ref,
                               plen) == 0);
    CHECK(memcmp(stk_batch_payload(b, NULL), ref, plen) == 0);
    if (!convert) {
      CHECK(memcmp(img.data, ref, (size_t)img.nbytes) == 0); /* device bytes */
    } else {
      const float *f = img.data; /* NCHW from NCHW uint8 */
      int bad = 0;
      for (size_t i = 0; i < 4 * 3 * 64; i++) {
        size_t ch = (i / 64) % 3;
        float want = (ref[i] / 255.f - spec.mean[ch]) / spec.std[ch];
        if (f[i] - want > 1e-5f || want - f[i] > 1e-5f) bad++;
      }
      CHECK(bad == 0);
    }
    CHECK(memcmp(lab.data, ref + 64 * ((4 * 3 * 64 + 63) / 64), 32) == 0);
    /* hold every other batch across the next one (slots >= 3) */
    if (slots >= 3 && !held) {
      held = b;
    } else {
      stk_batch_release(b);
      if (held) {
        stk_batch_release(held);
        held = NULL;
      }
    }
    n++;
  }
  stk_batch_release(held);
  CHECK(st == STK_END_OF_DATA);
  CHECK_EQ_U64(n, 2 * stk_client_steps_per_epoch(c));
  stk_client_close(c);
  free(ref);
}

static long (*launches)(void);

/* Every tensor's device bytes of every batch of job (cfg.convert =
 * convert), appended to *out; returns the bytes. Converted on the device
 * when gpu, else on the CPU. */
static size_t device_bytes(const char *job, const char *root, int convert, int gpu,
                           unsigned char **out) {
  setenv("STOKER_CUDA_CONVERT", gpu ? "gpu" : "cpu", 1);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.world_size = 1;
  cfg.slots = 3;
  cfg.prefetch = 4;
  cfg.device = STK_DEVICE_CUDA;
  cfg.convert = convert;
  stk_client *c = NULL;
  char err[512] = "";
  long before = launches(); /* the copy thread starts filling slots at open */
  int st = stk_client_open_local(&cfg, job, root, &c, err, sizeof(err));
  if (st) fprintf(stderr, "open (%s): %s\n", gpu ? "gpu" : "cpu", err);
  CHECK(st == STK_OK);
  if (!c) return 0;
  stk_stats ss;
  stk_client_stats(c, &ss);
  CHECK_EQ_U64(ss.device_convert, (uint64_t)gpu);
  size_t len = 0, cap = 0;
  uint64_t nb = 0, nimg = 0;
  for (;;) {
    stk_batch *b = NULL;
    st = stk_client_next(c, &b);
    if (st == STK_END_OF_EPOCH) continue;
    if (st != STK_OK) break;
    for (uint32_t i = 0; i < stk_batch_num_tensors(b); i++) {
      stk_tensor t;
      stk_batch_tensor(b, i, &t);
      CHECK(t.device == STK_DEVICE_CUDA);
      if (!strncmp(t.name, "image", 5)) nimg += nb == 0;
      if (len + t.nbytes > cap) {
        cap = 2 * (len + (size_t)t.nbytes);
        *out = realloc(*out, cap);
      }
      memcpy(*out + len, t.data,
             (size_t)t.nbytes); /* fake device memory is host memory */
      len += (size_t)t.nbytes;
    }
    stk_batch_release(b);
    nb++;
  }
  CHECK(st == STK_END_OF_DATA);
  CHECK(nb > 0);
  /* one launch per image tensor of every batch on the device, none on the CPU */
  CHECK_EQ_U64((uint64_t)(launches() - before), gpu ? nb * nimg : 0);
  stk_client_close(c);
  return len;
}

static void kernel_vs_cpu(const char *job, const char *root, int convert) {
  unsigned char *a = NULL, *b = NULL;
  size_t na = device_bytes(job, root, convert, 0, &a);
  size_t nb = device_bytes(job, root, convert, 1, &b);
  CHECK(na > 0);
  CHECK_EQ_U64(na, nb);
  CHECK(na == nb && memcmp(a, b, na) == 0);
  free(a);
  free(b);
}

/* No driver to load the kernel with: auto converts on the CPU, "gpu"
 * refuses to open and says why; a job with nothing to convert opens. */
static int no_driver(const char *fake) {
  setenv("STOKER_CUDART", fake, 1);
  setenv("STOKER_CUDA_DRIVER", "/nonexistent/libcuda.so.9", 1);
  unsetenv("STOKER_CUDA_CONVERT");
  run(3, STK_CONVERT_FLOAT32); /* the values are checked */
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.world_size = 1;
  cfg.device = STK_DEVICE_CUDA;
  cfg.convert = STK_CONVERT_FLOAT32;
  stk_client *c = NULL;
  char err[512] = "";
  CHECK(stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err)) == STK_OK);
  if (c) {
    stk_stats ss;
    stk_client_stats(c, &ss);
    CHECK_EQ_U64(ss.device_convert, 0);
    stk_client_close(c);
  }
  setenv("STOKER_CUDA_CONVERT", "gpu", 1);
  c = NULL;
  int st = stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err));
  printf("STOKER_CUDA_CONVERT=gpu without a driver: %s: %s\n", stk_strerror(st), err);
  CHECK(st == STK_UNSUPPORTED && c == NULL);
  CHECK(strstr(err, "STOKER_CUDA_CONVERT=gpu") && strstr(err, "libcuda.so.9"));
  cfg.convert = STK_CONVERT_NONE;
  CHECK(stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err)) == STK_OK);
  stk_client_close(c);
  CHECK_DONE();
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "--no-driver")) return argc > 2 ? no_driver(argv[2]) : 2;
  setenv("STOKER_CUDART", argv[1], 1);
  setenv("STOKER_CUDA_DRIVER", argv[1], 1);
  setenv("STOKER_CUDA_CONVERT", "cpu", 1);
  run(2, 0);
  run(3, 0);
  run(3, STK_CONVERT_FLOAT32);
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
  CHECK(h != NULL);
  if (!h) CHECK_DONE();
  launches = (long (*)(void))dlsym(h, "fake_cuda_launches");
  CHECK(launches != NULL);
  if (!launches) CHECK_DONE();
  /* the kernel path: the same run, converted on the device */
  setenv("STOKER_CUDA_CONVERT", "gpu", 1);
  run(3, STK_CONVERT_FLOAT32);
  /* the kernel against the CPU converter, to the byte: NCHW and NHWC in,
   * float32 and bfloat16 out, images of more than one block of threads
   * (8 x 40 = 320 pixels) */
  char job[1024];
  for (int nhwc = 0; nhwc < 2; nhwc++)
    for (int cv = STK_CONVERT_FLOAT32; cv <= STK_CONVERT_BFLOAT16; cv++) {
      snprintf(job, sizeof(job),
               "source = synthetic\nnum_samples = 40\nheight = 8\nwidth = 40\n"
               "batch_size = 4\nworld_size = 1\nepochs = 1\nseed = 5\n"
               "dtype = uint8\nlayout = %s\n",
               nhwc ? "nhwc" : "nchw");
      kernel_vs_cpu(job, NULL, cv);
    }
  /* real JPEGs, the train pipeline with two views (image0, image1) */
  if (argc > 2) {
    const char *root = proc_tmpdir(); /* removed at exit */
    char out[600];
    snprintf(out, sizeof(out), "%s/gen", root);
    char *gen[] = {argv[2],      "gen",      "--out",       out,          "--count",
                   "24",         "--layout", "imagefolder", "--min-side", "24",
                   "--max-side", "48",       NULL};
    stk_proc g;
    CHECK(proc_spawn(&g, "gen", gen) == 0);
    CHECK(proc_wait(&g, 60000) == 0);
    snprintf(job, sizeof(job),
             "source = imagefolder\ndataset = gen/imagefolder\nnum_samples = 0\n"
             "pipeline = train\nviews = 2\nheight = 16\nwidth = 16\nbatch_size = 4\n"
             "world_size = 1\nepochs = 1\nseed = 3\ndtype = uint8\n");
    kernel_vs_cpu(job, root, STK_CONVERT_FLOAT32);
    kernel_vs_cpu(job, root, STK_CONVERT_BFLOAT16);
  }
  {
    long (*live)(void) = (long (*)(void))dlsym(h, "fake_cudart_live");
    long (*bad)(void) = (long (*)(void))dlsym(h, "fake_cudart_bad_copies");
    CHECK(live && live() == 0);
    CHECK(bad && bad() == 0);
    dlclose(h);
  }
  CHECK_DONE();
}
