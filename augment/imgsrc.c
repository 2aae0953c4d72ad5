/* imgsrc.c - what the image file sources, ImageFolder and tar, share
 * (JPEG and PNG files): resolving the dataset directory under the data
 * root, the per-builder read path (batched reads, the image's header,
 * then the job's image pipeline, which ops_chain.c runs for every
 * pipeline: train, eval or a chain) and the deterministic substitution
 * of bad samples.
 *
 * Bad versus transient: a sample is bad (substituted, reported) only when
 * its own bytes or metadata are wrong: undecodable, not a JPEG, over a
 * limit, empty, cut short, gone from the index's place, out-of-range
 * label; or the user's code (a python or plugin op) failed on it, which
 * the hook hears as "sample index N: python op ..." so that the caller
 * can apply the job's bad_samples policy. An error that says nothing about the file
 * (stk__errno_transient: out of descriptors, I/O error, out of memory, ...) is retried
 * once with a single descriptor (older shard descriptors closed to make room), then fails
 * the whole batch with STK_UNAVAILABLE and marks nothing: substituting would make the
 * batch differ from the reference for a reason that goes away.
 *
 * Open files per builder are bounded: ImageFolder reads a batch in windows
 * of FD_WINDOW files (each window's files open at once, closed before the
 * next window); tar keeps at most SHARD_FDS shard descriptors open (least
 * recently used closed first), so a builder holds at most
 * max(FD_WINDOW, SHARD_FDS) = 32 descriptors besides its io_uring ring.
 *
 * Owns the per-builder state (I/O ring, decoder, pipeline runner, file buffers),
 * all allocated at builder creation or grown on demand, so a steady state
 * allocates nothing per sample. Never prints: bad samples go to the
 * dataset's log hook, once each.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core_internal.h"
#include "decode.h"
#include "io.h"
#include "imgsrc.h"
#include "ops.h" /* stk__grow */
#include "ops_chain.h"
#include "augment/prof.h"

#define SLOT_MAX_BYTES (4u << 20)            /* larger files are read one at a time */
#define FD_WINDOW      STK_BUILDER_MAX_FILES /* ImageFolder: files open at once */
#define SHARD_FDS      STK_BUILDER_MAX_FILES /* tar: shard descriptors kept open */

/* Results of the per-sample steps below. */
enum { RES_OK = 0, RES_BAD = -1, RES_AGAIN = -2 };

int stk__errno_transient(int e) {
  switch (e) {
    case EMFILE:    /* this process is out of descriptors */
    case ENFILE:    /* the system is */
    case EIO:       /* the device or the network file system failed this time */
    case EAGAIN:    /* (EWOULDBLOCK) */
    case ENOMEM:    /* the kernel could not allocate */
    case EINTR:     /* a signal: io.c retries it, here for completeness */
    case ENOBUFS:   /* out of kernel buffers */
    case ETIMEDOUT: /* a network file system timed out */
    case ESTALE:    /* NFS handle gone stale: a reopen works */
      return 1;
  }
  return 0;
}

static int errno_result(int e) { return stk__errno_transient(e) ? RES_AGAIN : RES_BAD; }

int stk__jds_open_dir(stk_dataset *ds, stk__jds *j, char *err, size_t errlen) {
  char root[PATH_MAX], dir[PATH_MAX], joined[PATH_MAX + STK_PATH_MAX + 2];
  j->dirfd = -1;
  if (!realpath(ds->root, root)) {
    snprintf(err, errlen, "data root %s: %s", ds->root, strerror(errno));
    return errno == ENOENT ? STK_NOT_FOUND : STK_IO;
  }
  snprintf(joined, sizeof(joined), "%s/%s", root, ds->spec.dataset);
  if (!realpath(joined, dir)) {
    snprintf(err, errlen, "dataset %s: %s", joined, strerror(errno));
    return errno == ENOENT ? STK_NOT_FOUND : STK_IO;
  }
  size_t rl = strlen(root);
  if (strncmp(dir, root, rl) != 0 ||
      (dir[rl] != '/' && dir[rl] != 0 && strcmp(root, "/") != 0)) {
    snprintf(err, errlen, "dataset %s resolves outside the data root", ds->spec.dataset);
    return STK_INVALID_ARGUMENT;
  }
  j->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (j->dirfd < 0) {
    snprintf(err, errlen, "dataset %s: %s", dir, strerror(errno));
    return STK_IO;
  }
  snprintf(j->dir, sizeof(j->dir), "%s", dir);
  return STK_OK;
}

void stk__jds_free(stk__jds *j) {
  if (!j) return;
  if (j->dirfd >= 0) close(j->dirfd);
  for (uint32_t i = 0; i < j->nfiles; i++) free(j->files[i]);
  free(j->files);
  for (uint64_t i = 0; j->keys && i < j->n; i++) free(j->keys[i]);
  free(j->file_of);
  free(j->off);
  free(j->size);
  free(j->label);
  free(j->keys);
  free((void *)j->bad);
  free(j);
}

void stk__img_close(stk_dataset *ds) { stk__jds_free(ds->impl); }

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
  return h;
}

void stk__jds_finish(stk_dataset *ds, stk__jds *j) {
  uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)j->kind;
  h = hash_bytes(h, &ds->n, sizeof(ds->n));
  for (uint32_t f = 0; f < j->nfiles; f++)
    h = hash_bytes(h, j->files[f], strlen(j->files[f]) + 1);
  for (uint64_t i = 0; i < ds->n; i++) {
    h = hash_bytes(h, &j->file_of[i], sizeof(j->file_of[i]));
    h = hash_bytes(h, &j->off[i], sizeof(j->off[i]));
    h = hash_bytes(h, &j->size[i], sizeof(j->size[i]));
    h = hash_bytes(h, &j->label[i], sizeof(j->label[i]));
  }
  /* a copy `stoker-dataset prepare` made says so in .stoker-prepared: its
   * restart-interval bound goes into the hash, so the fingerprint names a
   * prepared dataset as one (a regular file only; anything else is not
   * the mark) */
  int fd = stk__open_beneath(j->dirfd, ".stoker-prepared");
  if (fd >= 0) {
    struct stat st;
    char rec[256];
    ssize_t r =
        fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, rec, sizeof(rec) - 1) : -1;
    close(fd);
    unsigned interval = 0;
    if (r > 0) {
      rec[r] = 0;
      if (sscanf(rec, "restart-interval-max %u", &interval) != 1) interval = 0;
      h = hash_bytes(h, "prepared", 8);
      h = hash_bytes(h, &interval, sizeof(interval));
    }
  }
  ds->fingerprint = stk__mix64(h);
}

/* Open dirfd/rel for reading without leaving dirfd and without following
 * any symbolic link on the way (openat2 RESOLVE_BENEATH|NO_SYMLINKS);
 * where openat2 is missing (old kernels, gVisor, seccomp), openat with
 * O_NOFOLLOW on the last component (the index holds no symlinked
 * directories: the scans skip them). */
int stk__open_beneath(int dirfd, const char *rel) {
  static _Atomic int no_openat2;
#ifdef SYS_openat2
  if (!atomic_load(&no_openat2)) {
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
    long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM && errno != EINVAL)) return (int)fd;
    atomic_store(&no_openat2, 1);
  }
#endif
  return openat(dirfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
}

/* ---- per-builder pipeline --------------------------------------------- */

typedef struct jpipe {
  stk__io io;
  stk__decoder *dec;
  uint32_t nslots;
  uint8_t **slot; /* per batch slot file buffer, up to SLOT_MAX_BYTES */
  size_t *slotcap;
  stk__io_req *reqs; /* per window: the queued reads */
  uint32_t *reqslot; /* per queued read: its batch slot */
  int *fds;          /* per slot: fd to close after the read, or -1 */
  int *state;        /* per slot: 0 read done, 1 deferred (big), 2 bad,
                        3 deferred (out of descriptors in the window) */
  uint8_t *big;      /* one-at-a-time buffer (big files, substitutes) */
  size_t bigcap;
  /* tar: the open shard descriptors, least recently used closed first */
  int32_t *shard_slot; /* per shard: index into lru_*, or -1 */
  uint32_t lru_n;
  uint32_t lru_file[SHARD_FDS];
  int lru_fd[SHARD_FDS];
  uint64_t lru_tick[SHARD_FDS], tick;
  uint64_t window_tick;        /* shards used since this tick serve queued reads */
  unsigned open_fds, peak_fds; /* descriptors this builder holds (not the ring) */
  stk__chain_run *chain;       /* the image pipeline: the job's chain */
  stk__chain_run *vchain[3];   /* views 1..3 with chains of their own, else NULL */
  char why[2800];              /* a user-code error carries a traceback (2 KiB at most) */
  int last_user;               /* the last process_view failed in the user's code */
} jpipe;

static void fd_opened(jpipe *jp) {
  if (++jp->open_fds > jp->peak_fds) jp->peak_fds = jp->open_fds;
}
static void fd_close(jpipe *jp, int fd) {
  close(fd);
  jp->open_fds--;
}

int stk__img_builder_init(stk_builder *b, char *err, size_t errlen) {
  stk__jds *j = b->ds->impl;
  jpipe *jp = calloc(1, sizeof(*jp));
  if (!jp) return STK_NO_MEMORY;
  b->impl = jp;
  uint32_t B = b->spec.batch_size;
  jp->nslots = B;
  jp->slot = calloc(B, sizeof(*jp->slot));
  jp->slotcap = calloc(B, sizeof(*jp->slotcap));
  jp->reqs = calloc(FD_WINDOW, sizeof(*jp->reqs));
  jp->reqslot = calloc(FD_WINDOW, sizeof(*jp->reqslot));
  jp->fds = malloc(B * sizeof(int));
  jp->state = calloc(B, sizeof(int));
  if (j->kind == STK_SOURCE_TAR) {
    jp->shard_slot = malloc((j->nfiles ? j->nfiles : 1) * sizeof(int32_t));
    if (jp->shard_slot)
      for (uint32_t i = 0; i < j->nfiles; i++) jp->shard_slot[i] = -1;
  }
  if (!jp->slot || !jp->slotcap || !jp->reqs || !jp->reqslot || !jp->fds || !jp->state ||
      (j->kind == STK_SOURCE_TAR && !jp->shard_slot)) {
    stk__img_builder_free(b);
    return STK_NO_MEMORY;
  }
  for (uint32_t i = 0; i < B; i++) jp->fds[i] = -1;
  jp->window_tick = UINT64_MAX;
  int rc = stk__io_init(&jp->io, b->ds->limits.io_mode, FD_WINDOW, err, errlen);
  if (rc) {
    stk__img_builder_free(b);
    return rc;
  }
  b->io_mode = jp->io.mode;
  if ((rc = stk__chain_run_create(&jp->chain, b->ds, &b->spec, err, errlen))) {
    stk__img_builder_free(b);
    return rc;
  }
  /* a view with a chain of its own: a runner for it, made from the job as
   * if that chain were the pipeline (same normalize, dtype, layout) */
  for (uint32_t v = 1; v < b->spec.views && v <= 3; v++) {
    if (!b->spec.view_chain[v - 1]) continue;
    stk_job_spec *vs = malloc(sizeof(*vs));
    if (!vs) rc = STK_NO_MEMORY;
    else {
      *vs = b->spec;
      snprintf(vs->chain, sizeof(vs->chain), "%s", stk__view_chain(&b->spec, v));
      stk__view_hw(&b->spec, v, &vs->height, &vs->width);
      rc = stk__chain_run_create(&jp->vchain[v - 1], b->ds, vs, err, errlen);
      free(vs);
    }
    if (rc) {
      stk__img_builder_free(b);
      return rc;
    }
  }
  rc = stk__decoder_create(&jp->dec, &b->ds->limits);
  if (rc) {
    snprintf(err, errlen, "out of memory");
    stk__img_builder_free(b);
    return rc;
  }
  b->batch_op = stk__chain_run_batch_op(jp->chain); /* batch.c runs it */
  return STK_OK;
}

void stk__img_builder_free(stk_builder *b) {
  jpipe *jp = b->impl;
  if (!jp) return;
  stk__io_free(&jp->io);
  stk__decoder_destroy(jp->dec);
  stk__chain_run_free(jp->chain);
  for (int v = 0; v < 3; v++) stk__chain_run_free(jp->vchain[v]);
  for (uint32_t i = 0; jp->slot && i < jp->nslots; i++) free(jp->slot[i]);
  for (uint32_t i = 0; jp->fds && i < jp->nslots; i++)
    if (jp->fds[i] >= 0) close(jp->fds[i]);
  for (uint32_t i = 0; i < jp->lru_n; i++) close(jp->lru_fd[i]);
  free(jp->slot), free(jp->slotcap), free(jp->reqs), free(jp->reqslot), free(jp->fds);
  free(jp->state), free(jp->big), free(jp->shard_slot);
  free(jp);
  b->impl = NULL;
}

void stk__img_builder_fds(const stk_builder *b, unsigned *now, unsigned *peak) {
  const jpipe *jp = b ? b->impl : NULL;
  *now = jp ? jp->open_fds : 0;
  *peak = jp ? jp->peak_fds : 0;
}

/* The sample's path for a message, into buf (len >= 4); a path too long
 * for it ends in "..." rather than being cut silently. */
static void sample_path(const stk__jds *j, uint64_t i, char *buf, size_t len) {
  int n;
  if (j->kind == STK_SOURCE_TAR)
    n = snprintf(buf, len, "%s/%s:%s", j->dir, j->files[j->file_of[i]], j->keys[i]);
  else n = snprintf(buf, len, "%s/%s", j->dir, j->files[j->file_of[i]]);
  if (n >= 0 && (size_t)n >= len) memcpy(buf + len - 4, "...", 4);
}

static void report_bad(stk_dataset *ds, uint64_t i, const char *why) {
  stk__jds *j = ds->impl;
  if (atomic_exchange(&j->bad[i], 1)) return;
  atomic_fetch_add(&j->nbad, 1);
  if (ds->log_fn) {
    char path[4096 + 600];
    sample_path(j, i, path, sizeof(path));
    ds->log_fn(ds->log_ud, path, why);
  }
}

int64_t stk__img_label(const stk_builder *b, uint64_t i) {
  const stk__jds *j = b->ds->impl;
  return j->label[i];
}

uint64_t stk__img_bad_samples(const stk_dataset *ds) {
  stk__jds *j = ds->impl;
  return atomic_load(&j->nbad);
}

/* Close the least recently used shard descriptor that no queued read of
 * the current window uses (tick before window_tick). 0, or -1 if none. */
static int shard_evict(jpipe *jp) {
  int32_t s = -1;
  for (uint32_t k = 0; k < jp->lru_n; k++)
    if (jp->lru_tick[k] < jp->window_tick && (s < 0 || jp->lru_tick[k] < jp->lru_tick[s]))
      s = (int32_t)k;
  if (s < 0) return -1;
  jp->shard_slot[jp->lru_file[s]] = -1;
  fd_close(jp, jp->lru_fd[s]);
  jp->lru_n--;
  jp->lru_fd[s] = jp->lru_fd[jp->lru_n];
  jp->lru_file[s] = jp->lru_file[jp->lru_n];
  jp->lru_tick[s] = jp->lru_tick[jp->lru_n];
  if ((uint32_t)s != jp->lru_n) jp->shard_slot[jp->lru_file[s]] = s;
  return 0;
}

/* The descriptor of shard f, opened on first use; past SHARD_FDS open
 * shards the least recently used one is closed. Callers within one read
 * window touch at most FD_WINDOW <= SHARD_FDS shards, so a descriptor
 * queued for a read is never the one closed. Out of descriptors
 * (EMFILE/ENFILE), older shards are closed to make room. -1 with errno on
 * failure. */
static int shard_fd(jpipe *jp, const stk__jds *j, uint32_t f) {
  int32_t s = jp->shard_slot[f];
  if (s >= 0) {
    jp->lru_tick[s] = ++jp->tick;
    return jp->lru_fd[s];
  }
  /* At the cap one shard is always older than the window (which touches
   * fewer than SHARD_FDS shards before this one). */
  if (jp->lru_n == SHARD_FDS && shard_evict(jp)) {
    errno = EMFILE; /* cannot happen (see above); never overrun lru_* */
    return -1;
  }
  int fd;
  while ((fd = stk__open_beneath(j->dirfd, j->files[f])) < 0 &&
         (errno == EMFILE || errno == ENFILE) && shard_evict(jp) == 0) {}
  if (fd < 0) return -1;
  fd_opened(jp);
  s = (int32_t)jp->lru_n++;
  jp->lru_file[s] = f, jp->lru_fd[s] = fd, jp->lru_tick[s] = ++jp->tick;
  jp->shard_slot[f] = s;
  return fd;
}

/* Open (folder) or find (tar) the bytes of sample i: fd, offset, size.
 * The fd is the caller's to close (fd_close) when *owned. RES_OK, RES_BAD
 * (the sample itself is bad) or RES_AGAIN (transient), with jp->why. */
static int locate(stk_builder *b, uint64_t i, int *fd, uint64_t *off, uint64_t *size,
                  int *owned) {
  stk__jds *j = b->ds->impl;
  jpipe *jp = b->impl;
  const stk_limits *L = &b->ds->limits;
  uint32_t f = j->file_of[i];
  *owned = 0;
  if (j->kind == STK_SOURCE_TAR) {
    /* An out-of-range label is a bad sample, not a dataset error: the
     * .cls member is part of the sample like its .jpg, and one damaged
     * member among millions must not stop a job (DESIGN: bad samples are
     * never fatal). A job whose num_classes fits no label at all is
     * refused at open (tar_open), so this never walks a whole epoch. */
    if (j->label[i] < 0 || (uint64_t)j->label[i] >= b->ds->spec.num_classes) {
      snprintf(jp->why, sizeof(jp->why), "label %lld outside the job's num_classes %u",
               (long long)j->label[i], b->ds->spec.num_classes);
      return RES_BAD;
    }
    *fd = shard_fd(jp, j, f);
    if (*fd < 0) {
      int e = errno;
      snprintf(jp->why, sizeof(jp->why), "open: %s", strerror(e));
      return errno_result(e);
    }
    *off = j->off[i];
    *size = j->size[i];
  } else {
    int d = stk__open_beneath(j->dirfd, j->files[f]);
    if (d < 0) {
      int e = errno;
      snprintf(jp->why, sizeof(jp->why), "open: %s", strerror(e));
      return errno_result(e);
    }
    fd_opened(jp);
    struct stat st;
    if (fstat(d, &st) != 0) {
      int e = errno;
      snprintf(jp->why, sizeof(jp->why), "fstat: %s", strerror(e));
      fd_close(jp, d);
      return errno_result(e);
    }
    if (!S_ISREG(st.st_mode)) {
      snprintf(jp->why, sizeof(jp->why), "not a regular file");
      fd_close(jp, d);
      return RES_BAD;
    }
    *fd = d, *owned = 1, *off = 0, *size = (uint64_t)st.st_size;
  }
  if (*size == 0 || *size > L->max_file_bytes) {
    snprintf(jp->why, sizeof(jp->why), *size ? "file over the size limit" : "empty file");
    if (*owned) fd_close(jp, *fd);
    *owned = 0;
    return RES_BAD;
  }
  return RES_OK;
}

/* The result of a finished read of len bytes: RES_OK, RES_BAD (the file is
 * shorter than the index says) or RES_AGAIN, with jp->why. */
static int read_result(jpipe *jp, ssize_t res, size_t len) {
  if (res == (ssize_t)len) return RES_OK;
  snprintf(jp->why, sizeof(jp->why), "read: %s",
           res < 0 ? strerror((int)-res) : "short read");
  return res < 0 ? errno_result((int)-res) : RES_BAD;
}

/* Decode view `view` of sample idx from data through the view's image
 * pipeline (its own chain, or the job's) and write it at out: RES_OK,
 * RES_BAD (the data is bad) or RES_AGAIN (out of memory). */
static int process_view(stk_builder *b, uint64_t epoch, uint64_t idx, const uint8_t *data,
                        size_t len, void *out, uint32_t view) {
  jpipe *jp = b->impl;
  uint32_t W, H;
  uint64_t t = stk__prof_start();
  int rc = stk__decoder_header(jp->dec, data, len, &W, &H, jp->why, sizeof(jp->why));
  stk__prof_lap(STK__PROF_DECODE, &t);
  if (rc) return rc == STK_NO_MEMORY ? RES_AGAIN : RES_BAD;
  stk_rng r;
  stk__rng_seed(&r, b->spec.seed, view, epoch, idx);
  stk__chain_run *run =
      view >= 1 && view <= 3 && jp->vchain[view - 1] ? jp->vchain[view - 1] : jp->chain;
  rc = stk__chain_run_sample(run, jp->dec, W, H, &r, out, jp->why, sizeof(jp->why));
  jp->last_user = rc == STK_USER_CODE;
  if (rc == STK_USER_CODE) { /* name the sample's index (the hook's contract) */
    char pre[48];
    int k = snprintf(pre, sizeof(pre), "sample index %llu: ", (unsigned long long)idx);
    size_t n = strnlen(jp->why, sizeof(jp->why) - 1);
    if (n + (size_t)k >= sizeof(jp->why)) n = sizeof(jp->why) - 1 - (size_t)k;
    memmove(jp->why + k, jp->why, n);
    memcpy(jp->why, pre, (size_t)k);
    jp->why[n + (size_t)k] = 0;
  }
  return rc == STK_OK                                   ? RES_OK
         : rc == STK_NO_MEMORY || rc == STK_UNAVAILABLE ? RES_AGAIN
                                                        : RES_BAD;
}

/* Every view of sample idx into slot k of each image tensor of the batch
 * buf (each view's tensor has its own sample size). RES_OK, or the first
 * view's failure: a sample is bad or not as a whole. */
static int process(stk_builder *b, uint64_t epoch, uint64_t idx, const uint8_t *data,
                   size_t len, unsigned char *buf, uint32_t k) {
  uint32_t views = b->spec.views > 1 ? b->spec.views : 1;
  const stk_tensor_desc *t = b->layout.tensors;
  for (uint32_t v = 0; v < views; v++) {
    unsigned char *out = buf + t[v].offset + t[v].nbytes / b->spec.batch_size * k;
    int r = process_view(b, epoch, idx, data, len, out, v);
    if (r != RES_OK) return r;
  }
  return RES_OK;
}

/* Read and process one sample with the one-at-a-time buffer: RES_OK, RES_BAD
 * or RES_AGAIN. */
static int one(stk_builder *b, uint64_t epoch, uint64_t idx, unsigned char *buf,
               uint32_t k, uint64_t *bytes) {
  jpipe *jp = b->impl;
  int fd, owned;
  uint64_t off, size;
  uint64_t t = stk__prof_start();
  int rc = locate(b, idx, &fd, &off, &size, &owned);
  if (rc) return rc;
  if (stk__grow((void **)&jp->big, &jp->bigcap, size)) {
    if (owned) fd_close(jp, fd);
    snprintf(jp->why, sizeof(jp->why), "out of memory for a %llu-byte file",
             (unsigned long long)size);
    return RES_AGAIN;
  }
  stk__io_req r = {fd, off, size, jp->big, 0};
  stk__io_read(&jp->io, &r, 1);
  if (owned) fd_close(jp, fd);
  stk__prof_lap(STK__PROF_READ, &t);
  if ((rc = read_result(jp, r.res, size))) return rc;
  *bytes += size;
  return process(b, epoch, idx, jp->big, size, buf, k);
}

/* Read the files of slots [k0, k1) in one batched read: every slot ends in
 * state 0 (read queued in jp->reqs, in slot order), 1 (read later, alone,
 * by one(): too big for a slot buffer, or the window ran out of
 * descriptors: state 3) or 2 (bad, reported). Every descriptor the window opened is
 * closed on return. Out of descriptors or memory part-way, the rest of the
 * window is deferred to one(), which needs one descriptor at a time: a
 * builder degrades under descriptor pressure instead of failing. */
static void read_window(stk_builder *b, uint32_t k0, uint32_t k1) {
  jpipe *jp = b->impl;
  size_t nreq = 0;
  uint64_t t = stk__prof_start();
  jp->window_tick = jp->tick + 1;
  for (uint32_t k = k0; k < k1; k++) {
    uint64_t idx = b->indices[k];
    int fd, owned;
    uint64_t off, size;
    jp->state[k] = 2;
    int r = locate(b, idx, &fd, &off, &size, &owned);
    if (r == RES_AGAIN) {
      for (uint32_t m = k; m < k1; m++) jp->state[m] = 3;
      break;
    }
    if (r) {
      report_bad(b->ds, idx, jp->why);
      continue;
    }
    if (size > SLOT_MAX_BYTES ||
        stk__grow((void **)&jp->slot[k], &jp->slotcap[k], size)) {
      if (owned) fd_close(jp, fd);
      jp->state[k] = 1;
      continue;
    }
    jp->fds[k] = owned ? fd : -1;
    jp->reqslot[nreq] = k;
    jp->reqs[nreq++] = (stk__io_req){fd, off, size, jp->slot[k], 0};
    jp->state[k] = 0;
  }
  stk__io_read(&jp->io, jp->reqs, nreq);
  for (size_t q = 0; q < nreq; q++) {
    uint32_t k = jp->reqslot[q];
    if (jp->fds[k] >= 0) fd_close(jp, jp->fds[k]);
    jp->fds[k] = -1;
  }
  jp->window_tick = UINT64_MAX; /* no read queued: every shard may be closed */
  stk__prof_lap(STK__PROF_READ, &t);
}

/* The batch fails as a whole: nothing was substituted for this error. */
static int fail_transient(stk_builder *b, uint64_t epoch, uint64_t idx) {
  jpipe *jp = b->impl;
  char path[4096 + 600];
  sample_path(b->ds->impl, idx, path, sizeof(path));
  snprintf(b->err, sizeof(b->err),
           "transient error on sample %llu of epoch %llu (%.100s: %.60s): batch not "
           "built, ask again",
           (unsigned long long)idx, (unsigned long long)epoch, path, jp->why);
  return STK_UNAVAILABLE;
}

int stk__img_build(stk_builder *b, uint64_t epoch, unsigned char *buf,
                   stk_build_info *info) {
  stk__jds *j = b->ds->impl;
  jpipe *jp = b->impl;
  const stk_job_spec *s = &b->spec;
  uint64_t n = b->ds->n;
  uint32_t B = s->batch_size;
  stk_perm perm;
  stk_job_perm_init(&perm, s, n, epoch);
  int user_saved = 0; /* b->err holds this batch's first user-code error */

  for (uint32_t k0 = 0; k0 < B; k0 += FD_WINDOW) {
    uint32_t k1 = B - k0 < FD_WINDOW ? B : k0 + FD_WINDOW;
    /* 1. one batched read of the window's files (small files) */
    read_window(b, k0, k1);
    /* 2. decode each slot; substitute bad ones from later epoch positions */
    size_t q = 0;
    for (uint32_t k = k0; k < k1; k++) {
      uint64_t idx = b->indices[k], got = idx;
      int r = RES_BAD;
      jp->last_user = 0;
      if (jp->state[k] == 0) {
        stk__io_req *rq = &jp->reqs[q++];
        r = read_result(jp, rq->res, rq->len);
        if (r == RES_OK) {
          info->bytes_read += rq->len;
          r = process(b, epoch, idx, jp->slot[k], rq->len, buf, k);
        }
        if (r == RES_AGAIN) { /* once more, alone */
          info->reread++;
          r = one(b, epoch, idx, buf, k, &info->bytes_read);
        }
        if (r == RES_BAD) report_bad(b->ds, idx, jp->why);
      } else if (jp->state[k] == 1 || jp->state[k] == 3) {
        info->reread += jp->state[k] == 3;
        r = one(b, epoch, idx, buf, k, &info->bytes_read);
        if (r == RES_BAD) report_bad(b->ds, idx, jp->why);
      }
      if (r == RES_AGAIN) return fail_transient(b, epoch, idx);
      int user = r == RES_BAD && jp->last_user; /* the user's op failed on it */
      if (user && !user_saved) {
        char path[1024];
        sample_path(j, idx, path, sizeof(path));
        const char *w = jp->why, *c = strchr(w, ':');
        if (!strncmp(w, "sample index ", 13) && c && c[1] == ' ') w = c + 2;
        snprintf(b->err, sizeof(b->err), "%.1000s (index %llu): %.2040s", path,
                 (unsigned long long)idx, w);
        user_saved = 1;
      }
      if (r != RES_OK) {
        uint64_t p = (b->pos0 + k) % n;
        for (uint64_t t = 1; t < n && r != RES_OK; t++) {
          got = stk_perm_apply(&perm, (p + t) % n);
          r = one(b, epoch, got, buf, k, &info->bytes_read);
          if (r == RES_AGAIN) return fail_transient(b, epoch, got);
          if (r == RES_BAD) report_bad(b->ds, got, jp->why);
        }
        if (r != RES_OK) {
          snprintf(b->err, sizeof(b->err),
                   "no sample of epoch %llu can be read or decoded",
                   (unsigned long long)epoch);
          return STK_IO;
        }
        info->substituted++;
        info->user_code += (uint32_t)user;
      }
      b->filled[k] = got; /* batch.c writes its label */
    }
  }
  return STK_OK; /* the batch op, if any, runs next (batch.c) */
}
