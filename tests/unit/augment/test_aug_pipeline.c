/* test_aug_pipeline.c - the JPEG sources end to end on a generated
 * dataset: ImageFolder and tar indexes (order, labels, cache), the data
 * root guard, determinism across builders and both I/O paths (pread and
 * io_uring, each forced), all dtypes/layouts agreeing with each other, and
 * the train pipeline's RNG determinism per (seed, epoch, index), builders
 * on several threads sharing one dataset, and the automatic fallback to
 * pread when a seccomp filter denies io_uring_setup (as in gVisor or with
 * kernel.io_uring_disabled).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "gen.h"
#include "stoker/augment.h"
#include "util.h"

static char root[4096];

static uint8_t *build(const stk_job_spec *s, int io_mode, uint64_t epoch, uint64_t step,
                      stk_build_info *info, int *mode_used, size_t *len) {
  stk_limits lim;
  memset(&lim, 0, sizeof(lim));
  lim.io_mode = io_mode;
  stk_dataset *ds;
  stk_builder *b;
  char err[256];
  int rc = stk_dataset_open(s, root, &lim, &ds, err, sizeof(err));
  if (rc) {
    fprintf(stderr, "open: %s\n", err);
    return NULL;
  }
  rc = stk_builder_create(ds, s, &b, err, sizeof(err));
  if (rc == STK_UNSUPPORTED && io_mode == 2) {
    fprintf(stderr, "io_uring unavailable here: %s\n", err);
    stk_dataset_close(ds);
    return NULL;
  }
  CHECK(rc == STK_OK);
  stk_batch_layout L;
  stk_batch_layout_of(s, &L);
  uint8_t *buf = malloc(L.total_bytes);
  rc = stk_builder_build(b, epoch, 0, step, buf, L.total_bytes, info);
  if (rc) fprintf(stderr, "build: %s\n", stk_builder_error(b));
  CHECK(rc == STK_OK);
  if (mode_used) *mode_used = stk_builder_io_mode(b);
  *len = L.total_bytes;
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  return buf;
}

static void test_index(void) {
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_IMAGEFOLDER, "ds/imagefolder", STK_PIPELINE_EVAL,
          STK_DTYPE_UINT8, STK_LAYOUT_NHWC, 4, 32);
  stk_dataset *a, *t;
  char err[256];
  CHECK(stk_dataset_open(&s, root, NULL, &a, err, sizeof(err)) == STK_OK);
  s.source = STK_SOURCE_TAR;
  s.num_classes = 1000; /* tar checks labels against it */
  snprintf(s.dataset, sizeof(s.dataset), "ds/shards");
  CHECK(stk_dataset_open(&s, root, NULL, &t, err, sizeof(err)) == STK_OK);
  CHECK_EQ_U64(stk_dataset_size(a), 40);
  CHECK_EQ_U64(stk_dataset_size(t), 40);
  CHECK(stk_dataset_fingerprint(a) != stk_dataset_fingerprint(t));
  stk_dataset_close(a);
  stk_dataset_close(t);
  /* the cache was written and a second open reads it with the same index */
  char p[4200];
  snprintf(p, sizeof(p), "%s/ds/shards/.stoker-index", root);
  struct stat st;
  CHECK(stat(p, &st) == 0);
  CHECK(stk_dataset_open(&s, root, NULL, &t, err, sizeof(err)) == STK_OK);
  uint64_t fp1 = stk_dataset_fingerprint(t);
  stk_dataset_close(t);
  unlink(p);
  CHECK(stk_dataset_open(&s, root, NULL, &t, err, sizeof(err)) == STK_OK);
  CHECK_EQ_U64(stk_dataset_fingerprint(t), fp1);
  stk_dataset_close(t);
  /* escapes are refused: '..' by validation, a symlink by realpath */
  snprintf(s.dataset, sizeof(s.dataset), "../x");
  CHECK(stk_dataset_open(&s, root, NULL, &t, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  snprintf(p, sizeof(p), "%s/escape", root);
  CHECK(symlink("/usr/share", p) == 0);
  snprintf(s.dataset, sizeof(s.dataset), "escape");
  CHECK(stk_dataset_open(&s, root, NULL, &t, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  snprintf(s.dataset, sizeof(s.dataset), "missing");
  CHECK(stk_dataset_open(&s, root, NULL, &t, err, sizeof(err)) == STK_NOT_FOUND);
}

/* Labels: ImageFolder sample i of class c; tar sample i has label i % 4. */
static void test_labels(void) {
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_TAR, "ds/shards", STK_PIPELINE_EVAL, STK_DTYPE_UINT8,
          STK_LAYOUT_NCHW, 8, 32);
  stk_build_info info;
  size_t len;
  uint8_t *buf = build(&s, 0, 1, 2, &info, NULL, &len);
  if (!buf) return;
  stk_batch_layout L;
  stk_batch_layout_of(&s, &L);
  for (int j = 0; j < 8; j++) {
    int64_t lab, idx;
    memcpy(&lab, buf + L.tensors[STK_TENSOR_LABEL].offset + 8 * j, 8);
    memcpy(&idx, buf + L.tensors[STK_TENSOR_INDEX].offset + 8 * j, 8);
    CHECK(lab == idx % 4); /* tar keys are in generation order */
  }
  CHECK_EQ_U64(info.substituted, 0);
  free(buf);
  s.source = STK_SOURCE_IMAGEFOLDER;
  s.num_classes = 0;
  snprintf(s.dataset, sizeof(s.dataset), "ds/imagefolder");
  buf = build(&s, 0, 1, 2, &info, NULL, &len);
  if (!buf) return;
  for (int j = 0; j < 8; j++) {
    int64_t lab, idx;
    memcpy(&lab, buf + L.tensors[STK_TENSOR_LABEL].offset + 8 * j, 8);
    memcpy(&idx, buf + L.tensors[STK_TENSOR_INDEX].offset + 8 * j, 8);
    CHECK(lab == idx / 10); /* 10 files per class, classes sorted */
  }
  free(buf);
}

/* Same address -> same bytes, whichever I/O path and builder. */
static void test_determinism(void) {
  for (int src = 0; src < 2; src++) {
    stk_job_spec s;
    tu_spec(&s, src ? STK_SOURCE_TAR : STK_SOURCE_IMAGEFOLDER,
            src ? "ds/shards" : "ds/imagefolder", STK_PIPELINE_TRAIN, STK_DTYPE_FLOAT32,
            STK_LAYOUT_NCHW, 8, 48);
    s.brightness = s.contrast = s.saturation = 0.4f;
    s.flip_p = 0.5f;
    size_t len;
    int m1, m2;
    uint8_t *a = build(&s, 1, 2, 3, NULL, &m1, &len);
    uint8_t *b = build(&s, 2, 2, 3, NULL, &m2, &len);
    uint8_t *c = build(&s, 0, 2, 3, NULL, NULL, &len);
    CHECK(a && c);
    CHECK(m1 == 1);
    if (a && c) CHECK(memcmp(a, c, len) == 0);
    if (b) {
      CHECK(m2 == 2);
      CHECK(memcmp(a, b, len) == 0);
    } else {
      fprintf(stderr, "note: io_uring path not exercised (unavailable)\n");
    }
    /* another epoch gives other bytes */
    uint8_t *d = build(&s, 0, 3, 3, NULL, NULL, &len);
    if (a && d) CHECK(memcmp(a, d, len) != 0);
    /* the reference helper agrees */
    uint8_t *r = malloc(len);
    char err[256];
    CHECK(stk_build_reference(&s, root, 2, 0, 3, r, len, err, sizeof(err)) == STK_OK);
    if (a) CHECK(memcmp(a, r, len) == 0);
    free(a), free(b), free(c), free(d), free(r);
  }
}

/* uint8 NHWC, uint8 NCHW, float32 NCHW and bfloat16 NCHW of one address
 * hold the same image: float = (u8/255 - mean)/std exactly as computed. */
static void test_dtypes(void) {
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_IMAGEFOLDER, "ds/imagefolder", STK_PIPELINE_TRAIN,
          STK_DTYPE_UINT8, STK_LAYOUT_NHWC, 4, 40);
  s.flip_p = 0.5f;
  size_t len;
  uint8_t *hwc = build(&s, 0, 0, 1, NULL, NULL, &len);
  s.layout = STK_LAYOUT_NCHW;
  uint8_t *chw = build(&s, 0, 0, 1, NULL, NULL, &len);
  s.dtype = STK_DTYPE_FLOAT32;
  uint8_t *f32 = build(&s, 0, 0, 1, NULL, NULL, &len);
  s.dtype = STK_DTYPE_BFLOAT16;
  uint8_t *bf = build(&s, 0, 0, 1, NULL, NULL, &len);
  if (!hwc || !chw || !f32 || !bf) {
    CHECK(0);
    return;
  }
  stk_batch_layout Lu, Lf, Lb;
  s.dtype = STK_DTYPE_UINT8;
  stk_batch_layout_of(&s, &Lu);
  s.dtype = STK_DTYPE_FLOAT32;
  stk_batch_layout_of(&s, &Lf);
  s.dtype = STK_DTYPE_BFLOAT16;
  stk_batch_layout_of(&s, &Lb);
  const uint8_t *u1 = hwc + Lu.tensors[0].offset, *u2 = chw + Lu.tensors[0].offset;
  const float *f = (const float *)(f32 + Lf.tensors[0].offset);
  const uint16_t *h = (const uint16_t *)(bf + Lb.tensors[0].offset);
  int bad = 0;
  for (int n = 0; n < 4; n++)
    for (int c = 0; c < 3; c++)
      for (int y = 0; y < 40; y++)
        for (int x = 0; x < 40; x++) {
          size_t i = (((size_t)n * 3 + c) * 40 + y) * 40 + x;
          uint8_t v = u1[(((size_t)n * 40 + y) * 40 + x) * 3 + c];
          if (u2[i] != v) bad++;
          float want = v * (1.f / (255.f * s.std[c])) + (-s.mean[c] / s.std[c]);
          if (f[i] != want) bad++;
          if (fabs((double)want - (double)v / 255 / s.std[c] + s.mean[c] / s.std[c]) >
              1e-5)
            bad++;
          uint32_t bits = (uint32_t)h[i] << 16;
          float hb;
          memcpy(&hb, &bits, 4);
          if (fabsf(hb - want) > fabsf(want) / 128 + 1e-6f) bad++;
        }
  CHECK(bad == 0);
  free(hwc), free(chw), free(f32), free(bf);
}

/* The log hook and counters stay quiet on a clean dataset; padding works. */
static void test_padding(void) {
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_TAR, "ds/shards", STK_PIPELINE_EVAL, STK_DTYPE_UINT8,
          STK_LAYOUT_NHWC, 16, 24);
  s.drop_last = 0; /* 40 samples, 3 steps, the last padded */
  size_t len;
  stk_build_info info;
  uint8_t *a = build(&s, 0, 0, 2, &info, NULL, &len);
  if (!a) {
    CHECK(0);
    return;
  }
  stk_batch_layout L;
  stk_batch_layout_of(&s, &L);
  int valid = 0;
  for (int j = 0; j < 16; j++) valid += a[L.tensors[STK_TENSOR_MASK].offset + j];
  CHECK(valid == 8);
  CHECK_EQ_U64(info.substituted, 0);
  free(a);
}

/* Two threads, one builder each, one shared dataset: same bytes. */
typedef struct {
  stk_dataset *ds;
  const stk_job_spec *s;
  uint8_t *buf;
  size_t len;
  int rc;
} thr_arg;
static void *thr_build(void *p) {
  thr_arg *a = p;
  stk_builder *b;
  char err[256];
  a->rc = stk_builder_create(a->ds, a->s, &b, err, sizeof(err));
  if (a->rc) return NULL;
  for (uint64_t st = 0; st < 4 && !a->rc; st++) /* the last one counts */
    a->rc = stk_builder_build(b, 1, 0, st, a->buf, a->len, NULL);
  stk_builder_destroy(b);
  return NULL;
}
static void test_threads(void) {
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_TAR, "ds/shards", STK_PIPELINE_TRAIN, STK_DTYPE_BFLOAT16,
          STK_LAYOUT_NCHW, 8, 32);
  stk_dataset *ds;
  char err[256];
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_OK);
  stk_batch_layout L;
  stk_batch_layout_of(&s, &L);
  thr_arg a[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    a[i] = (thr_arg){ds, &s, malloc(L.total_bytes), L.total_bytes, -1};
    pthread_create(&t[i], NULL, thr_build, &a[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  CHECK(a[0].rc == STK_OK && a[1].rc == STK_OK);
  CHECK(memcmp(a[0].buf, a[1].buf, L.total_bytes) == 0);
  uint8_t *r = malloc(L.total_bytes);
  CHECK(stk_build_reference(&s, root, 1, 0, 3, r, L.total_bytes, err, sizeof(err)) ==
        STK_OK);
  CHECK(memcmp(a[0].buf, r, L.total_bytes) == 0);
  free(r), free(a[0].buf), free(a[1].buf);
  stk_dataset_close(ds);
}

/* In a child, deny io_uring_setup with ENOSYS (seccomp), then: auto mode
 * falls back to pread and builds the same bytes; forced io_uring fails
 * cleanly at builder creation. */
static void test_fallback(void) {
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_IMAGEFOLDER, "ds/imagefolder", STK_PIPELINE_EVAL,
          STK_DTYPE_UINT8, STK_LAYOUT_NHWC, 4, 32);
  size_t len;
  uint8_t *want = build(&s, 1, 0, 1, NULL, NULL, &len);
  pid_t pid = fork();
  if (pid == 0) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(f[0])), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
      _exit(77);
    int mode = 0;
    size_t l2;
    uint8_t *got = build(&s, 0, 0, 1, NULL, &mode, &l2);
    if (!got || mode != 1 || l2 != len || memcmp(got, want, len)) _exit(1);
    stk_limits lim;
    memset(&lim, 0, sizeof(lim));
    lim.io_mode = 2;
    stk_dataset *ds;
    stk_builder *b;
    char err[256];
    if (stk_dataset_open(&s, root, &lim, &ds, err, sizeof(err))) _exit(1);
    int rc = stk_builder_create(ds, &s, &b, err, sizeof(err));
    stk_dataset_close(ds);
    free(got);
    _exit(rc == STK_UNSUPPORTED ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
    fprintf(stderr, "note: seccomp unavailable, fallback not exercised\n");
  else CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  free(want);
}

/* A class directory swapped for a symlink after indexing is not followed:
 * its samples become bad (substituted), nothing is read through it. */
static void test_symlink_swap(void) {
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_IMAGEFOLDER, "ds/imagefolder", STK_PIPELINE_EVAL,
          STK_DTYPE_UINT8, STK_LAYOUT_NHWC, 40, 16);
  s.epochs = 1;
  stk_dataset *ds;
  stk_builder *b;
  char err[256], a[4200], c[4200];
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_OK);
  CHECK(stk_builder_create(ds, &s, &b, err, sizeof(err)) == STK_OK);
  snprintf(a, sizeof(a), "%s/ds/imagefolder/class001", root);
  snprintf(c, sizeof(c), "%s/ds/imagefolder/moved", root);
  CHECK(rename(a, c) == 0);
  CHECK(symlink("moved", a) == 0);
  stk_batch_layout L;
  stk_batch_layout_of(&s, &L);
  uint8_t *buf = malloc(L.total_bytes);
  stk_build_info info;
  CHECK(stk_builder_build(b, 0, 0, 0, buf, L.total_bytes, &info) == STK_OK);
  /* without openat2 (old kernels, gVisor) only the last component is
   * guarded; this check needs RESOLVE_NO_SYMLINKS */
  if (syscall(SYS_openat2, -1, "", NULL, 0) == -1 && errno == ENOSYS) {
    fprintf(stderr, "note: no openat2 here, symlink swap not checked\n");
  } else {
    CHECK_EQ_U64(info.substituted, 10); /* the 10 files of class001 */
    CHECK_EQ_U64(stk_dataset_bad_samples(ds), 10);
  }
  unlink(a);
  rename(c, a);
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
}

int main(void) {
  if (tu_tmpdir(root, sizeof(root), "pipe")) return 77;
  char ds[4200], err[256];
  snprintf(ds, sizeof(ds), "%s/ds", root);
  stk__gen_opts o = {ds, 40, 7, 4, 1, 1, 16, 120, 260};
  if (stk__gen_dataset(&o, err, sizeof(err))) {
    fprintf(stderr, "gen: %s\n", err);
    return 1;
  }
  test_index();
  test_labels();
  test_determinism();
  test_dtypes();
  test_padding();
  test_threads();
  test_fallback();
  test_symlink_swap();
  tu_rmtree(root);
  CHECK_DONE();
}
