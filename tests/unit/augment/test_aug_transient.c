/* test_aug_transient.c - only genuinely bad samples are substituted
 * (augment/imgsrc.c), on real files:
 *  - the errno classification (stk__errno_transient), value by value;
 *  - open descriptors per builder stay bounded (ImageFolder read windows,
 *    tar shard LRU) with batches larger than the bound and more shards
 *    than it: the peak is printed and checked;
 *  - under a small `ulimit -n` (setrlimit in a forked child) every batch
 *    still equals the reference built without the limit;
 *  - with the descriptors exhausted (the child dups until EMFILE) a build
 *    fails STK_UNAVAILABLE with a clear message, marks no sample bad and
 *    substitutes nothing; with only 4 free (less than a read window) every
 *    batch still equals the reference (one file at a time); and the same
 *    build succeeds, equal to the reference, once descriptors are free;
 *  - tar .cls labels outside the job's num_classes are bad samples
 *    (reported, substituted), and a job whose num_classes fits no label
 *    is refused at open;
 *  - a symbolic link planted where the tar index temp file goes is
 *    refused, and nothing is written through it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "badlog.h"
#include "check.h"
#include "gen.h"
#include "imgsrc.h"
#include "stoker/augment.h"
#include "util.h"

enum { NSAMPLES = 240, BATCH = 80, PER_SHARD = 3, NCLASSES = 10, SIZE = 32 };

static char root[4096];
static badlog blog; /* what the datasets report (tests/badlog.h) */

/* One past the highest descriptor open in this process (RLIMIT_NOFILE
 * bounds descriptor numbers, not their count). */
static int fd_top(void) {
  int top = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return 64;
  struct dirent *e;
  while ((e = readdir(d))) {
    int fd = atoi(e->d_name);
    if (fd + 1 > top) top = fd + 1;
  }
  closedir(d);
  return top;
}

static void check_classification(void) {
  static const int transient[] = {EMFILE, ENFILE, EIO,     EAGAIN,    EWOULDBLOCK,
                                  ENOMEM, EINTR,  ENOBUFS, ETIMEDOUT, ESTALE};
  static const int bad[] = {ENOENT, EACCES, EPERM, ELOOP, EISDIR, ENOTDIR,
                            EINVAL, EFBIG,  ENXIO, EXDEV, 0};
  for (size_t i = 0; i < sizeof(transient) / sizeof(transient[0]); i++) {
    if (!stk__errno_transient(transient[i]))
      fprintf(stderr, "errno %d (%s) should be transient\n", transient[i],
              strerror(transient[i]));
    CHECK(stk__errno_transient(transient[i]));
  }
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    if (stk__errno_transient(bad[i]))
      fprintf(stderr, "errno %d (%s) should mean a bad sample\n", bad[i],
              strerror(bad[i]));
    CHECK(!stk__errno_transient(bad[i]));
  }
}

typedef struct setup {
  stk_job_spec spec;
  stk_dataset *ds;
  size_t bytes;
  uint64_t steps;
  unsigned char *ref; /* steps * bytes: epoch 0, rank 0 */
} setup;

static int open_setup(setup *S, int source, const char *dir) {
  memset(S, 0, sizeof(*S));
  tu_spec(&S->spec, source, dir, STK_PIPELINE_TRAIN, STK_DTYPE_UINT8, STK_LAYOUT_NHWC,
          BATCH, SIZE);
  S->spec.num_classes = NCLASSES;
  char err[512] = "";
  int rc = stk_dataset_open(&S->spec, root, NULL, &S->ds, err, sizeof(err));
  if (rc) {
    fprintf(stderr, "open %s: %s\n", dir, err);
    return -1;
  }
  stk_dataset_set_log(S->ds, badlog_fn, &blog);
  stk_batch_layout L;
  stk_job_spec r = S->spec;
  r.num_samples = stk_dataset_size(S->ds);
  CHECK(stk_batch_layout_of(&r, &L) == STK_OK);
  S->bytes = L.total_bytes;
  S->steps = stk_steps_per_epoch(&r, r.num_samples);
  S->ref = malloc(S->steps * S->bytes);
  stk_builder *b;
  CHECK(S->ref && stk_builder_create(S->ds, &S->spec, &b, err, sizeof(err)) == STK_OK);
  for (uint64_t s = 0; s < S->steps; s++)
    CHECK(stk_builder_build(b, 0, 0, s, S->ref + s * S->bytes, S->bytes, NULL) == STK_OK);
  unsigned now, peak;
  stk__img_builder_fds(b, &now, &peak);
  printf(
      "%s: batch %d, %llu steps: peak open descriptors per builder %u (bound %d; "
      "unbounded it was one per batch slot or shard touched, up to %d)\n",
      dir, BATCH, (unsigned long long)S->steps, peak, 32, BATCH);
  CHECK(peak <= 32);
  CHECK(peak >= 2); /* it did open files */
  stk_builder_destroy(b);
  return 0;
}

static void close_setup(setup *S) {
  stk_dataset_close(S->ds);
  free(S->ref);
}

/* In a child: a small RLIMIT_NOFILE, every batch equal to the reference;
 * then descriptors exhausted: STK_UNAVAILABLE, nothing bad or substituted;
 * then freed: equal again. Exit status = failures. */
static int child_small_ulimit(setup *S) {
  check_failures = 0; /* count this child's own */
  int base = fd_top();
  struct rlimit rl = {(rlim_t)base + 48, (rlim_t)base + 48};
  if (setrlimit(RLIMIT_NOFILE, &rl)) {
    perror("setrlimit");
    return 1;
  }
  printf("  child: highest descriptor %d, ulimit -n %d\n", base - 1, base + 48);
  char err[256];
  stk_builder *b;
  unsigned char *buf = malloc(S->bytes);
  CHECK(buf && stk_builder_create(S->ds, &S->spec, &b, err, sizeof(err)) == STK_OK);
  uint64_t bad0 = stk_dataset_bad_samples(S->ds);
  for (uint64_t s = 0; s < S->steps; s++) {
    stk_build_info info;
    CHECK(stk_builder_build(b, 0, 0, s, buf, S->bytes, &info) == STK_OK);
    CHECK(info.substituted == 0);
    CHECK(!memcmp(buf, S->ref + s * S->bytes, S->bytes));
  }
  /* exhaust: dup until EMFILE */
  stk_builder_destroy(b); /* drop the shard descriptors it keeps */
  CHECK(stk_builder_create(S->ds, &S->spec, &b, err, sizeof(err)) == STK_OK);
  int dummies[4096], nd = 0;
  while (nd < 4096) {
    int fd = dup(0);
    if (fd < 0) break;
    dummies[nd++] = fd;
  }
  CHECK(errno == EMFILE);
  stk_build_info info;
  memset(buf, 0, S->bytes);
  int rc = stk_builder_build(b, 0, 0, 1, buf, S->bytes, &info);
  printf("  child: out of descriptors: status %d (%s): %s\n", rc, stk_strerror(rc),
         stk_builder_error(b));
  CHECK(rc == STK_UNAVAILABLE);
  CHECK(strstr(stk_builder_error(b), "transient") != NULL);
  CHECK(strstr(stk_builder_error(b), "Too many open files") != NULL);
  CHECK_EQ_U64(stk_dataset_bad_samples(S->ds), bad0); /* nothing marked bad */
  CHECK(badlog_count(&blog) == 0);
  /* a few descriptors free: fewer than a read window; the builder degrades
   * to one file at a time and every batch is still the reference */
  enum { FREE = 4 };
  for (int i = 0; i < FREE && nd > 0; i++) close(dummies[--nd]);
  int same = 0;
  for (uint64_t s = 0; s < S->steps; s++) {
    rc = stk_builder_build(b, 0, 0, s, buf, S->bytes, &info);
    CHECK(rc == STK_OK && info.substituted == 0);
    same += rc == STK_OK && !memcmp(buf, S->ref + s * S->bytes, S->bytes);
  }
  printf("  child: %d descriptors free: %d of %llu batches equal to the reference\n",
         FREE, same, (unsigned long long)S->steps);
  CHECK(same == (int)S->steps);
  CHECK_EQ_U64(stk_dataset_bad_samples(S->ds), bad0);
  /* re-asked once descriptors are free again: the reference */
  for (int i = 0; i < nd; i++) close(dummies[i]);
  rc = stk_builder_build(b, 0, 0, 1, buf, S->bytes, &info);
  CHECK(rc == STK_OK && info.substituted == 0);
  CHECK(!memcmp(buf, S->ref + 1 * S->bytes, S->bytes));
  printf(
      "  child: re-asked with descriptors free: status %d, equal to the reference: %s\n",
      rc, !memcmp(buf, S->ref + S->bytes, S->bytes) ? "yes" : "NO");
  stk_builder_destroy(b);
  free(buf);
  return check_failures;
}

static void run_child(setup *S) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int f = child_small_ulimit(S);
    fflush(stdout);
    _exit(f ? 1 : 0);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static int write_tar(const char *path, const int *labels, int n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  uint8_t rgb[16 * 16 * 3], *jpg;
  size_t len;
  int rc = 0;
  for (int i = 0; i < n && !rc; i++) {
    stk__gen_image(rgb, 16, 16, (uint32_t)i, (uint64_t)i);
    if (stk__encode_jpeg(rgb, 16, 16, STK__GEN_RGB, 90, 0, &jpg, &len)) return -1;
    char name[64], cls[32];
    snprintf(name, sizeof(name), "s%03d.jpg", i);
    rc |= stk__tar_member(f, name, jpg, len);
    free(jpg);
    snprintf(name, sizeof(name), "s%03d.cls", i);
    int cl = snprintf(cls, sizeof(cls), "%d", labels[i]);
    rc |= stk__tar_member(f, name, cls, (size_t)cl);
  }
  rc |= stk__tar_end(f);
  return fclose(f) || rc ? -1 : 0;
}

static void check_labels(void) {
  char dir[4300], p[4400];
  /* 1. labels 0..9, num_classes 5: half the samples are bad */
  snprintf(dir, sizeof(dir), "%s/labels", root);
  CHECK(mkdir(dir, 0755) == 0);
  int labels[40];
  for (int i = 0; i < 40; i++) labels[i] = i % 10;
  snprintf(p, sizeof(p), "%s/a.tar", dir);
  CHECK(write_tar(p, labels, 40) == 0);
  stk_job_spec s;
  tu_spec(&s, STK_SOURCE_TAR, "labels", STK_PIPELINE_EVAL, STK_DTYPE_UINT8,
          STK_LAYOUT_NHWC, 8, 16);
  s.num_classes = 5;
  stk_dataset *ds;
  char err[512] = "";
  CHECK(stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err)) == STK_OK);
  badlog_clear(&blog);
  stk_dataset_set_log(ds, badlog_fn, &blog);
  stk_builder *b;
  CHECK(stk_builder_create(ds, &s, &b, err, sizeof(err)) == STK_OK);
  stk_batch_layout L;
  stk_job_spec r = s;
  r.num_samples = 40;
  CHECK(stk_batch_layout_of(&r, &L) == STK_OK);
  unsigned char *buf = malloc(L.total_bytes);
  uint32_t subst = 0;
  for (uint64_t st = 0; st < stk_steps_per_epoch(&r, 40); st++) {
    stk_build_info info;
    CHECK(stk_builder_build(b, 0, 0, st, buf, L.total_bytes, &info) == STK_OK);
    subst += info.substituted;
    for (uint32_t k = 0; k < 8; k++) {
      int64_t lab;
      memcpy(&lab, buf + L.tensors[STK_TENSOR_LABEL].offset + 8 * k, 8);
      CHECK(lab >= 0 && lab < 5);
    }
  }
  printf(
      "labels 0..9 with num_classes 5: %u of 40 slots substituted, %llu bad samples "
      "(last reason: %s)\n",
      subst, (unsigned long long)stk_dataset_bad_samples(ds), blog.why);
  CHECK(subst == 20);
  CHECK_EQ_U64(stk_dataset_bad_samples(ds), 20);
  CHECK(strstr(blog.why, "num_classes 5") != NULL);
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  /* 2. no label fits: refused at open with a clear message */
  s.num_classes = 1;
  for (int i = 0; i < 40; i++) labels[i] = 3 + i % 2;
  snprintf(dir, sizeof(dir), "%s/labels2", root);
  CHECK(mkdir(dir, 0755) == 0);
  snprintf(p, sizeof(p), "%s/a.tar", dir);
  CHECK(write_tar(p, labels, 40) == 0);
  snprintf(s.dataset, sizeof(s.dataset), "labels2");
  int rc = stk_dataset_open(&s, root, NULL, &ds, err, sizeof(err));
  printf("labels 3..4 with num_classes 1: status %d: %s\n", rc, err);
  CHECK(rc == STK_INVALID_ARGUMENT && strstr(err, "num_classes 1") != NULL);
}

static void check_index_symlink(void) {
  char dir[4300], link[4400], victim[4400];
  snprintf(dir, sizeof(dir), "%s/labels", root);
  snprintf(victim, sizeof(victim), "%s/victim.txt", root);
  CHECK(tu_write(victim, "precious\n", 9) == 0);
  snprintf(link, sizeof(link), "%s/.stoker-index.tmp.%ld", dir, (long)getpid());
  CHECK(symlink(victim, link) == 0);
  char err[512] = "";
  int rc = stk_tar_index(dir, err, sizeof(err));
  printf("tar index with a symlink planted at its temp file: status %d: %s\n", rc, err);
  CHECK(rc == STK_IO && strstr(err, "symbolic link") != NULL);
  FILE *f = fopen(victim, "rb");
  char got[64] = "";
  size_t n = f ? fread(got, 1, sizeof(got) - 1, f) : 0;
  if (f) fclose(f);
  got[n] = 0;
  CHECK(!strcmp(got, "precious\n")); /* nothing written through the link */
  struct stat st;
  CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode)); /* left as it was */
  unlink(link);
  /* a stale regular temp file (a crashed run with our pid) is replaced */
  CHECK(tu_write(link, "stale", 5) == 0);
  CHECK(stk_tar_index(dir, err, sizeof(err)) == STK_OK);
  CHECK(lstat(link, &st) != 0);
}

int main(void) {
  badlog_init(&blog);
  check_classification();
  if (tu_tmpdir(root, sizeof(root), "transient")) return 77;
  stk__gen_opts g;
  memset(&g, 0, sizeof(g));
  char out[4200], err[256];
  snprintf(out, sizeof(out), "%s/gen", root);
  g.out = out, g.count = NSAMPLES, g.seed = 7, g.classes = NCLASSES;
  g.imagefolder = 1, g.tar = 1, g.per_shard = PER_SHARD;
  g.min_side = 40, g.max_side = 64;
  if (stk__gen_dataset(&g, err, sizeof(err))) {
    fprintf(stderr, "gen: %s\n", err);
    tu_rmtree(root);
    return 1;
  }
  setup S;
  if (open_setup(&S, STK_SOURCE_IMAGEFOLDER, "gen/imagefolder") == 0) {
    run_child(&S);
    close_setup(&S);
  } else check_failures++;
  if (open_setup(&S, STK_SOURCE_TAR, "gen/shards") == 0) {
    printf("  (%d shards)\n", NSAMPLES / PER_SHARD);
    run_child(&S);
    close_setup(&S);
  } else check_failures++;
  check_labels();
  check_index_symlink();
  badlog_clear(&blog);
  tu_rmtree(root);
  CHECK_DONE();
}
