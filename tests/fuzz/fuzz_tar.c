/* fuzz_tar.c - libFuzzer target for the tar source (augment/source_tar.c):
 * the member-header scanner and the .stoker-index cache loader. The first
 * byte picks the part:
 *   even: the rest is a tar shard: written as ds/a.tar, indexed with
 *         stk_tar_index, then opened as a job's dataset (through the
 *         cache the index just wrote);
 *   odd:  the rest is the body of a cache file (after the header lines,
 *         which are made to match a small valid shard, so the loader reads
 *         on): "samples N" and sample lines; then the dataset is opened.
 * Files go to a private temp directory, removed at exit. Any input must
 * end with a status, never a crash, a leak or a read outside the shard.
 *
 * Built as a libFuzzer binary with clang and STOKER_FUZZ=ON; always built
 * as a replay program (replay_main.c) that ctest runs over corpus/tar/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stoker/augment.h"
#include "stoker/core.h"
#include "stoker/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[256], ds_dir[300], shard[320], cache[320];

static void cleanup(void) {
  char tmp[400];
  unlink(shard);
  unlink(cache);
  snprintf(tmp, sizeof(tmp), "%s/.stoker-index.tmp.%ld", ds_dir, (long)getpid());
  unlink(tmp);
  rmdir(ds_dir);
  rmdir(root);
}

static int setup(void) {
  if (root[0]) return 0;
  const char *t = getenv("TMPDIR");
  snprintf(root, sizeof(root), "%s/stoker-fuzz-tar-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(root)) return root[0] = 0, -1;
  snprintf(ds_dir, sizeof(ds_dir), "%s/ds", root);
  snprintf(shard, sizeof(shard), "%s/a.tar", ds_dir);
  snprintf(cache, sizeof(cache), "%s/.stoker-index", ds_dir);
  if (mkdir(ds_dir, 0700)) return -1;
  atexit(cleanup);
  return 0;
}

static int write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = n ? fwrite(p, 1, n, f) : 0;
  return fclose(f) || w != n ? -1 : 0;
}

/* One ustar member header for name with size bytes. */
static void ustar(unsigned char *h, const char *name, size_t size) {
  memset(h, 0, 512);
  snprintf((char *)h, 100, "%s", name);
  memcpy(h + 100, "0000644", 7);
  snprintf((char *)h + 124, 12, "%011zo", size);
  memcpy(h + 136, "00000000000", 11);
  h[156] = '0';
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);
}

/* A shard of two samples (k0, k1: a few bytes of "jpg" and a label). */
static size_t valid_shard(unsigned char *t) {
  size_t o = 0;
  for (int k = 0; k < 2; k++) {
    char n[16];
    snprintf(n, sizeof(n), "k%d.jpg", k);
    ustar(t + o, n, 4);
    memcpy(t + o + 512, "\xff\xd8\xff\xd9", 4);
    o += 1024;
    snprintf(n, sizeof(n), "k%d.cls", k);
    ustar(t + o, n, 2);
    memcpy(t + o + 512, k ? "1\n" : "0\n", 2);
    o += 1024;
  }
  memset(t + o, 0, 1024);
  return o + 1024;
}

static void open_dataset(void) {
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  spec.source = STK_SOURCE_TAR;
  snprintf(spec.dataset, sizeof(spec.dataset), "ds");
  spec.num_classes = 1000;
  stk_dataset *ds = NULL;
  char err[512];
  if (stk_dataset_open(&spec, root, NULL, &ds, err, sizeof(err)) == STK_OK) {
    (void)stk_dataset_size(ds);
    (void)stk_dataset_fingerprint(ds);
    stk_dataset_close(ds);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > (1u << 20) || setup()) return 0;
  char err[512];
  unlink(cache);
  if (!(data[0] & 1)) {
    if (write_file(shard, data + 1, size - 1)) return 0;
    stk_tar_index(ds_dir, err, sizeof(err));
    open_dataset();
    return 0;
  }
  static unsigned char t[4096 + 1024];
  size_t n = valid_shard(t);
  if (write_file(shard, t, n)) return 0;
  struct stat st;
  if (stat(shard, &st)) return 0;
  char head[256];
  int h = snprintf(
      head, sizeof(head), "stoker-tar-index 1\nshards 1\n%lld %lld %lld a.tar\n",
      (long long)st.st_size, (long long)st.st_mtim.tv_sec, (long long)st.st_mtim.tv_nsec);
  char *body = malloc((size_t)h + size);
  if (!body) return 0;
  memcpy(body, head, (size_t)h);
  memcpy(body + h, data + 1, size - 1);
  int rc = write_file(cache, body, (size_t)h + size - 1);
  free(body);
  if (!rc) open_dataset();
  return 0;
}
