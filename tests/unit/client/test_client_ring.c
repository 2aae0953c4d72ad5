/* test_client_ring.c - slot ring and epoch semantics, through the local
 * (in-process) source so no daemon is needed:
 *  - every step exactly once, in order, equal to the reference batch;
 *    END_OF_EPOCH once per epoch, then END_OF_DATA;
 *  - a held slot is never overwritten; release order may differ from
 *    acquisition; holding slots-1 batches and asking again is STK_STATE;
 *  - a client whose caller holds a slot forever blocks only itself;
 *  - batches held at stk_client_close stay valid (bytes and accessors)
 *    until released, the last release (from another thread too) frees the
 *    client (ASan and valgrind see neither a leak nor a use after free);
 *  - convert=float32 gives (x/255 - mean)/std in NCHW. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "stoker/client.h"

static const char *JOB =
    "source = synthetic\nnum_samples = 64\nheight = 8\nwidth = 8\n"
    "batch_size = 4\nworld_size = 2\nepochs = 2\nseed = 7\nlayout = nhwc\n";

static stk_client *open_local(uint32_t rank, uint32_t slots, int convert) {
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.world_size = 2;
  cfg.rank = rank;
  cfg.slots = slots;
  cfg.prefetch = 3;
  cfg.convert = convert;
  stk_client *c = NULL;
  char err[512] = "";
  int st = stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err));
  if (st) fprintf(stderr, "open_local: %s\n", err);
  return c;
}

static int same_as_reference(stk_client *c, stk_batch *b) {
  size_t len = 0;
  const void *p = stk_batch_payload(b, &len);
  void *ref = malloc(len);
  int ok = stk_client_reference(c, stk_batch_epoch(b), stk_batch_step(b), NULL, ref,
                                len) == STK_OK &&
           memcmp(p, ref, len) == 0;
  free(ref);
  return ok;
}

static void full_run(void) {
  stk_client *c = open_local(1, 2, 0);
  CHECK(c != NULL);
  if (!c) return;
  uint64_t spe = stk_client_steps_per_epoch(c);
  CHECK_EQ_U64(spe, 8);
  for (uint64_t e = 0; e < 2; e++) {
    for (uint64_t s = 0; s < spe; s++) {
      stk_batch *b = NULL;
      CHECK(stk_client_next(c, &b) == STK_OK);
      if (!b) return;
      CHECK_EQ_U64(stk_batch_epoch(b), e);
      CHECK_EQ_U64(stk_batch_step(b), s);
      CHECK(same_as_reference(c, b));
      stk_tensor t;
      CHECK(stk_batch_tensor(b, STK_TENSOR_IMAGE, &t) == STK_OK);
      CHECK(t.ndim == 4 && t.shape[0] == 4 && t.shape[3] == 3);
      CHECK(stk_batch_tensor(b, 9, &t) == STK_INVALID_ARGUMENT);
      stk_batch_release(b);
    }
    stk_batch *b = NULL;
    CHECK(stk_client_next(c, &b) == STK_END_OF_EPOCH);
    CHECK(b == NULL);
  }
  stk_batch *b = NULL;
  CHECK(stk_client_next(c, &b) == STK_END_OF_DATA);
  CHECK(stk_client_next(c, &b) == STK_END_OF_DATA);
  stk_stats st;
  stk_client_stats(c, &st);
  CHECK_EQ_U64(st.batches, 16);
  CHECK(st.nworkers == 1);
  /* the receive path's CPU: user + system is the total, the usable cores
   * are known from open, the share is a share (a local client has only
   * its copy and scheduler threads in it) */
  CHECK(st.recv_cpu_user_s >= 0 && st.recv_cpu_sys_s >= 0);
  CHECK(st.recv_cpu_user_s + st.recv_cpu_sys_s <= st.recv_cpu_s + 1e-9 &&
        st.recv_cpu_user_s + st.recv_cpu_sys_s >= st.recv_cpu_s - 1e-9);
  CHECK(st.host_cores > 0 && st.recv_host_share >= 0);
  CHECK(st.recv_cpu_user_s_per_gb >= 0 && st.recv_cpu_sys_s_per_gb >= 0);
  CHECK(stk_client_finish(c, 0) == STK_OK);
  stk_client_close(c);
}

static void held_slots(void) {
  stk_client *c = open_local(0, 3, 0);
  CHECK(c != NULL);
  if (!c) return;
  stk_batch *a = NULL, *b = NULL, *x = NULL;
  CHECK(stk_client_next(c, &a) == STK_OK);
  CHECK(stk_client_next(c, &b) == STK_OK);
  size_t len;
  const void *pa = stk_batch_payload(a, &len);
  void *copy = malloc(len);
  memcpy(copy, pa, len);
  CHECK(stk_client_next(c, &x) == STK_STATE);
  CHECK(x == NULL);
  CHECK(strstr(stk_client_error(c), "release") != NULL);
  usleep(100 * 1000); /* the copy thread has had time to fill the free slot */
  CHECK(memcmp(stk_batch_payload(a, NULL), copy, len) == 0);
  CHECK_EQ_U64(stk_batch_step(a), 0);
  CHECK_EQ_U64(stk_batch_step(b), 1);
  stk_batch_release(b); /* out of acquisition order */
  CHECK(stk_client_next(c, &x) == STK_OK);
  CHECK_EQ_U64(stk_batch_step(x), 2);
  usleep(50 * 1000);
  CHECK(memcmp(stk_batch_payload(a, NULL), copy, len) == 0);
  CHECK(same_as_reference(c, a));
  stk_batch_release(a);
  stk_batch_release(a); /* a second release is ignored */
  stk_batch_release(x);
  for (int i = 3; i < 8; i++) {
    CHECK(stk_client_next(c, &x) == STK_OK);
    CHECK_EQ_U64(stk_batch_step(x), (uint64_t)i);
    stk_batch_release(x);
  }
  free(copy);
  stk_client_close(c);
}

static void *release_in_thread(void *b) {
  stk_batch_release(b);
  return NULL;
}

static void held_past_close(void) {
  stk_client *c = open_local(0, 3, 0);
  CHECK(c != NULL);
  if (!c) return;
  stk_batch *a = NULL, *b = NULL;
  CHECK(stk_client_next(c, &a) == STK_OK);
  CHECK(stk_client_next(c, &b) == STK_OK);
  if (!a || !b) return;
  size_t len = 0;
  const unsigned char *pa = stk_batch_payload(a, &len), *pb = stk_batch_payload(b, NULL);
  unsigned char *ref = malloc(2 * len);
  CHECK(stk_client_reference(c, 0, 0, NULL, ref, len) == STK_OK);
  CHECK(stk_client_reference(c, 0, 1, NULL, ref + len, len) == STK_OK);
  stk_client_close(c); /* a and b are still held */
  CHECK(memcmp(pa, ref, len) == 0);
  CHECK(memcmp(pb, ref + len, len) == 0);
  CHECK_EQ_U64(stk_batch_step(b), 1);
  stk_tensor t;
  CHECK(stk_batch_tensor(a, STK_TENSOR_IMAGE, &t) == STK_OK && t.data == pa);
  ((unsigned char *)t.data)[0] ^= 0xff; /* the caller's memory until released */
  stk_batch_release(a);
  pthread_t th; /* the last release, on another thread, frees the client */
  CHECK(pthread_create(&th, NULL, release_in_thread, b) == 0);
  pthread_join(th, NULL);
  free(ref);
}

typedef struct {
  stk_client *c;
  int done, ok;
} runner;

static void *run_epoch(void *arg) {
  runner *r = arg;
  for (int i = 0; i < 8; i++) {
    stk_batch *b = NULL;
    if (stk_client_next(r->c, &b) != STK_OK) return NULL;
    stk_batch_release(b);
  }
  stk_batch *b = NULL;
  r->ok = stk_client_next(r->c, &b) == STK_END_OF_EPOCH;
  __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void independent_clients(void) {
  stk_client *c0 = open_local(0, 2, 0), *c1 = open_local(1, 2, 0);
  CHECK(c0 && c1);
  if (!c0 || !c1) return;
  stk_batch *held = NULL;
  CHECK(stk_client_next(c0, &held) == STK_OK); /* held "too long" */
  runner r = {c1, 0, 0};
  pthread_t t;
  pthread_create(&t, NULL, run_epoch, &r);
  for (int i = 0; i < 500 && !__atomic_load_n(&r.done, __ATOMIC_ACQUIRE); i++)
    usleep(10 * 1000);
  CHECK(__atomic_load_n(&r.done, __ATOMIC_ACQUIRE));
  pthread_join(t, NULL);
  CHECK(r.ok);
  stk_batch *x = NULL;
  CHECK(stk_client_next(c0, &x) == STK_STATE); /* only c0 is stuck */
  stk_batch_release(held);
  CHECK(stk_client_next(c0, &x) == STK_OK);
  stk_batch_release(x);
  stk_client_close(c0);
  stk_client_close(c1);
}

static void convert_f32(void) {
  stk_client *c = open_local(0, 2, STK_CONVERT_FLOAT32);
  CHECK(c != NULL);
  if (!c) return;
  stk_job_spec spec;
  stk_client_job(c, &spec);
  stk_batch *b = NULL;
  CHECK(stk_client_next(c, &b) == STK_OK);
  stk_tensor img, lab;
  stk_batch_tensor(b, STK_TENSOR_IMAGE, &img);
  stk_batch_tensor(b, STK_TENSOR_LABEL, &lab);
  CHECK(img.dtype == STK_DTYPE_FLOAT32);
  CHECK(img.shape[1] == 3 && img.shape[2] == 8 && img.shape[3] == 8);
  const unsigned char *raw = stk_batch_payload(b, NULL);
  const float *f = img.data;
  int bad = 0;
  for (int n = 0; n < 4; n++)
    for (int ch = 0; ch < 3; ch++)
      for (int p = 0; p < 64; p++) {
        float want = (raw[(n * 64 + p) * 3 + ch] / 255.f - spec.mean[ch]) / spec.std[ch];
        float got = f[(n * 3 + ch) * 64 + p];
        if (got - want > 1e-5f || want - got > 1e-5f) bad++;
      }
  CHECK(bad == 0);
  stk_batch_release(b);
  stk_client_close(c);
}

/* Every 3rd batch fails its crc32c (fault injection): it is re-requested,
 * counted, and the caller still sees every step once, in order, intact. */
static void crc_reissue(void) {
  setenv("STOKER_FAULT_CRC_EVERY", "3", 1);
  stk_client *c = open_local(0, 2, 0);
  unsetenv("STOKER_FAULT_CRC_EVERY");
  CHECK(c != NULL);
  if (!c) return;
  for (uint64_t s = 0; s < 8; s++) {
    stk_batch *b = NULL;
    CHECK(stk_client_next(c, &b) == STK_OK);
    if (!b) break;
    CHECK_EQ_U64(stk_batch_step(b), s);
    CHECK(same_as_reference(c, b));
    stk_batch_release(b);
  }
  stk_stats st;
  stk_client_stats(c, &st);
  CHECK(st.crc_errors >= 2);
  CHECK(st.reissued == st.crc_errors);
  CHECK_EQ_U64(st.batches, 8);
  stk_client_close(c);
}

int main(void) {
  full_run();
  crc_reissue();
  held_slots();
  held_past_close();
  independent_clients();
  convert_f32();
  CHECK_DONE();
}
