/* test_client_cuda_emulated.c - the CUDA backend's protocol on a machine
 * without a GPU: libstoker loads fake_cudart (a lazy host-memory stand-in,
 * see fake_cudart.c) through $STOKER_CUDART. Copies run only when someone
 * waits for them, so every batch's device bytes equal its reference only
 * if next() makes the caller's stream wait on the slot's ready event
 * (removing that wait makes this test fail). Also checks copies stay inside
 * device blocks and nothing leaks after close. Limits: the fake's
 * cudaStreamWaitEvent blocks the host (stronger than CUDA), so the copy
 * thread's wait before reusing a slot's pinned buffers is not exercised;
 * this does not prove the code on real hardware (docs/gpu.md). */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
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

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  setenv("STOKER_CUDART", argv[1], 1);
  run(2, 0);
  run(3, 0);
  run(3, STK_CONVERT_FLOAT32);
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
  CHECK(h != NULL);
  if (h) {
    long (*live)(void) = (long (*)(void))dlsym(h, "fake_cudart_live");
    long (*bad)(void) = (long (*)(void))dlsym(h, "fake_cudart_bad_copies");
    CHECK(live && live() == 0);
    CHECK(bad && bad() == 0);
    dlclose(h);
  }
  CHECK_DONE();
}
