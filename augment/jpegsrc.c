/* jpegsrc.c - what ImageFolder and tar sources share: resolving the
 * dataset directory under the data root, the per-builder pipeline (batched
 * reads, ROI decode, crop/resize, store into the batch buffer) and the
 * deterministic substitution of bad samples.
 *
 * Owns the per-builder state (I/O ring, decoder, scratch, file buffers),
 * all allocated at builder creation or grown on demand, so a steady state
 * allocates nothing per sample. Never prints: bad samples go to the
 * dataset's log hook, once each.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jpegsrc.h"

#define SLOT_MAX_BYTES (4u << 20) /* larger files are read one at a time */

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

void stk__jpeg_close(stk_dataset *ds) { stk__jds_free(ds->impl); }

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
  stk__scratch sc;
  uint32_t nslots;
  uint8_t **slot; /* per batch slot file buffer, up to SLOT_MAX_BYTES */
  size_t *slotcap;
  stk__io_req *reqs;
  int *fds;     /* per slot: fd to close after the read, or -1 */
  int *state;   /* per slot: 0 read queued, 1 deferred, 2 bad */
  uint8_t *big; /* one-at-a-time buffer (big files, substitutes) */
  size_t bigcap;
  int *shard_fd; /* tar: per shard, opened on first use */
  char why[200];
} jpipe;

static int grow_buf(uint8_t **p, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 1 << 16;
  while (c < need) c *= 2;
  uint8_t *q = realloc(*p, c);
  if (!q) return -1;
  *p = q, *cap = c;
  return 0;
}

int stk__jpeg_builder_init(stk_builder *b, char *err, size_t errlen) {
  stk__jds *j = b->ds->impl;
  jpipe *jp = calloc(1, sizeof(*jp));
  if (!jp) return STK_NO_MEMORY;
  b->impl = jp;
  uint32_t B = b->spec.batch_size;
  jp->nslots = B;
  jp->slot = calloc(B, sizeof(*jp->slot));
  jp->slotcap = calloc(B, sizeof(*jp->slotcap));
  jp->reqs = calloc(B, sizeof(*jp->reqs));
  jp->fds = malloc(B * sizeof(int));
  jp->state = calloc(B, sizeof(int));
  if (j->kind == STK_SOURCE_TAR) {
    jp->shard_fd = malloc((j->nfiles ? j->nfiles : 1) * sizeof(int));
    if (jp->shard_fd)
      for (uint32_t i = 0; i < j->nfiles; i++) jp->shard_fd[i] = -1;
  }
  if (!jp->slot || !jp->slotcap || !jp->reqs || !jp->fds || !jp->state ||
      (j->kind == STK_SOURCE_TAR && !jp->shard_fd)) {
    stk__jpeg_builder_free(b);
    return STK_NO_MEMORY;
  }
  for (uint32_t i = 0; i < B; i++) jp->fds[i] = -1;
  int rc = stk__io_init(&jp->io, b->ds->limits.io_mode, B < 32 ? B : 32, err, errlen);
  if (rc) {
    stk__jpeg_builder_free(b);
    return rc;
  }
  b->io_mode = jp->io.mode;
  rc = stk__decoder_create(&jp->dec, &b->ds->limits);
  if (rc) {
    snprintf(err, errlen, "out of memory");
    stk__jpeg_builder_free(b);
    return rc;
  }
  return STK_OK;
}

void stk__jpeg_builder_free(stk_builder *b) {
  jpipe *jp = b->impl;
  if (!jp) return;
  stk__jds *j = b->ds->impl;
  stk__io_free(&jp->io);
  stk__decoder_destroy(jp->dec);
  stk__scratch_free(&jp->sc);
  for (uint32_t i = 0; jp->slot && i < jp->nslots; i++) free(jp->slot[i]);
  for (uint32_t i = 0; jp->fds && i < jp->nslots; i++)
    if (jp->fds[i] >= 0) close(jp->fds[i]);
  if (jp->shard_fd)
    for (uint32_t i = 0; i < j->nfiles; i++)
      if (jp->shard_fd[i] >= 0) close(jp->shard_fd[i]);
  free(jp->slot), free(jp->slotcap), free(jp->reqs), free(jp->fds);
  free(jp->state), free(jp->big), free(jp->shard_fd);
  free(jp);
  b->impl = NULL;
}

static void sample_path(const stk__jds *j, uint64_t i, char *buf, size_t len) {
  if (j->kind == STK_SOURCE_TAR)
    snprintf(buf, len, "%s/%s:%s", j->dir, j->files[j->file_of[i]], j->keys[i]);
  else snprintf(buf, len, "%s/%s", j->dir, j->files[j->file_of[i]]);
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

uint64_t stk__jpeg_bad_samples(const stk_dataset *ds) {
  stk__jds *j = ds->impl;
  return atomic_load(&j->nbad);
}

/* Open (folder) or find (tar) the bytes of sample i: fd, offset, size.
 * The fd is the caller's to close when *owned. */
static int locate(stk_builder *b, uint64_t i, int *fd, uint64_t *off, uint64_t *size,
                  int *owned) {
  stk__jds *j = b->ds->impl;
  jpipe *jp = b->impl;
  const stk_limits *L = &b->ds->limits;
  uint32_t f = j->file_of[i];
  *owned = 0;
  if (j->kind == STK_SOURCE_TAR) {
    if (jp->shard_fd[f] < 0) {
      jp->shard_fd[f] = stk__open_beneath(j->dirfd, j->files[f]);
      if (jp->shard_fd[f] < 0) {
        snprintf(jp->why, sizeof(jp->why), "open: %s", strerror(errno));
        return -1;
      }
    }
    *fd = jp->shard_fd[f];
    *off = j->off[i];
    *size = j->size[i];
  } else {
    int d = stk__open_beneath(j->dirfd, j->files[f]);
    if (d < 0) {
      snprintf(jp->why, sizeof(jp->why), "open: %s", strerror(errno));
      return -1;
    }
    struct stat st;
    if (fstat(d, &st) != 0 || !S_ISREG(st.st_mode)) {
      snprintf(jp->why, sizeof(jp->why), "not a regular file");
      close(d);
      return -1;
    }
    *fd = d, *owned = 1, *off = 0, *size = (uint64_t)st.st_size;
  }
  if (*size == 0 || *size > L->max_file_bytes) {
    snprintf(jp->why, sizeof(jp->why), *size ? "file over the size limit" : "empty file");
    if (*owned) close(*fd);
    *owned = 0;
    return -1;
  }
  return 0;
}

/* Decode sample idx from data and write it at out. */
static int process(stk_builder *b, uint64_t epoch, uint64_t idx, const uint8_t *data,
                   size_t len, void *out) {
  jpipe *jp = b->impl;
  const stk_job_spec *s = &b->spec;
  uint32_t W, H, ow = s->width, oh = s->height;
  if (stk__decoder_header(jp->dec, data, len, &W, &H, jp->why, sizeof(jp->why)))
    return -1;
  stk__post post;
  memset(&post, 0, sizeof(post));
  post.bright = post.contrast = post.satur = 1;
  post.dtype = s->dtype, post.layout = s->layout;
  memcpy(post.mean, s->mean, sizeof(post.mean));
  memcpy(post.std, s->std, sizeof(post.std));
  double bx0, by0, bx1, by1;
  int margin;
  if (s->pipeline == STK_PIPELINE_TRAIN) {
    stk_rng r;
    stk_rng_init(&r, s->seed, epoch, idx);
    stk__box box =
        stk__rrc_box(W, H, s->scale_min, s->scale_max, s->ratio_min, s->ratio_max, &r);
    bx0 = box.x, by0 = box.y, bx1 = box.x + box.w, by1 = box.y + box.h;
    margin = 0; /* torchvision crops, then resizes the crop alone */
    post.flip = stk_rng_uniform(&r) < s->flip_p;
    double u1 = stk_rng_uniform(&r), u2 = stk_rng_uniform(&r), u3 = stk_rng_uniform(&r);
#define JIT(v, u) \
  ((v) > 0 ? (float)(fmax(0, 1 - (v)) + (u) * (1 + (v)-fmax(0, 1 - (v)))) : 1.f)
    post.bright = JIT(s->brightness, u1);
    post.contrast = JIT(s->contrast, u2);
    post.satur = JIT(s->saturation, u3);
#undef JIT
  } else {
    /* torchvision Resize(resize) (shorter side) then CenterCrop(h, w) */
    uint32_t sh = W <= H ? W : H, lg = W <= H ? H : W;
    uint32_t nshort = s->resize, nlong = (uint32_t)((double)s->resize * lg / sh);
    uint32_t nw = W <= H ? nshort : nlong, nh = W <= H ? nlong : nshort;
    double top = nearbyint(((double)nh - oh) / 2.0);
    double left = nearbyint(((double)nw - ow) / 2.0);
    double fx = (double)W / nw, fy = (double)H / nh;
    bx0 = left * fx, bx1 = (left + ow) * fx;
    by0 = top * fy, by1 = (top + oh) * fy;
    double sup = fmax(fx, fy);
    margin = (int)ceil(sup < 1 ? 1 : sup) + 1;
  }
  stk__roi roi;
  /* eval keeps at least twice the output size before resampling: DCT
   * scaling only takes the large factors off, the antialiased filter does
   * the rest, as close to PIL's full-size resize as 0.2/255 on average */
  uint32_t k = s->pipeline == STK_PIPELINE_TRAIN ? 1 : 2;
  if (stk__decoder_roi(jp->dec, bx0, by0, bx1, by1, ow * k, oh * k, margin, 8,
                       s->pipeline == STK_PIPELINE_TRAIN, &roi, jp->why, sizeof(jp->why)))
    return -1;
  double ox = roi.x0, oy = roi.y0;
  if (stk__resample(&jp->sc, roi.px, roi.w, roi.h, bx0 * roi.sx - ox, by0 * roi.sy - oy,
                    bx1 * roi.sx - ox, by1 * roi.sy - oy, ow, oh)) {
    snprintf(jp->why, sizeof(jp->why), "out of memory");
    return -1;
  }
  stk__post_store(&jp->sc, ow, oh, &post, out);
  return 0;
}

/* Read and process one sample with the one-at-a-time buffer. */
static int one(stk_builder *b, uint64_t epoch, uint64_t idx, void *out, uint64_t *bytes) {
  jpipe *jp = b->impl;
  int fd, owned;
  uint64_t off, size;
  if (locate(b, idx, &fd, &off, &size, &owned)) return -1;
  if (grow_buf(&jp->big, &jp->bigcap, size)) {
    if (owned) close(fd);
    snprintf(jp->why, sizeof(jp->why), "out of memory");
    return -1;
  }
  stk__io_req r = {fd, off, size, jp->big, 0};
  stk__io_read(&jp->io, &r, 1);
  if (owned) close(fd);
  if (r.res != (ssize_t)size) {
    snprintf(jp->why, sizeof(jp->why), "read: %s",
             r.res < 0 ? strerror((int)-r.res) : "short read");
    return -1;
  }
  *bytes += size;
  return process(b, epoch, idx, jp->big, size, out);
}

int stk__jpeg_build(stk_builder *b, uint64_t epoch, unsigned char *buf,
                    stk_build_info *info) {
  stk__jds *j = b->ds->impl;
  jpipe *jp = b->impl;
  const stk_job_spec *s = &b->spec;
  uint64_t n = b->ds->n;
  uint32_t B = s->batch_size;
  const stk_tensor_desc *ti = &b->layout.tensors[STK_TENSOR_IMAGE];
  const stk_tensor_desc *tl = &b->layout.tensors[STK_TENSOR_LABEL];
  size_t per = ti->nbytes / B;
  stk_perm perm;
  stk_perm_init(&perm, n, s->seed, epoch);

  /* 1. one batched read of every slot's file (small files) */
  size_t nreq = 0;
  for (uint32_t k = 0; k < B; k++) {
    uint64_t idx = b->indices[k];
    int fd, owned;
    uint64_t off, size;
    jp->state[k] = 2;
    if (locate(b, idx, &fd, &off, &size, &owned)) {
      report_bad(b->ds, idx, jp->why);
      continue;
    }
    if (size > SLOT_MAX_BYTES || grow_buf(&jp->slot[k], &jp->slotcap[k], size)) {
      if (owned) close(fd);
      jp->state[k] = 1;
      continue;
    }
    jp->fds[k] = owned ? fd : -1;
    jp->reqs[nreq++] = (stk__io_req){fd, off, size, jp->slot[k], 0};
    jp->state[k] = 0;
  }
  stk__io_read(&jp->io, jp->reqs, nreq);

  /* 2. decode each slot; substitute bad ones from later epoch positions */
  size_t q = 0;
  for (uint32_t k = 0; k < B; k++) {
    uint64_t idx = b->indices[k], got = idx;
    unsigned char *out = buf + ti->offset + per * k;
    int ok = 0;
    if (jp->state[k] == 0) {
      stk__io_req *r = &jp->reqs[q++];
      if (jp->fds[k] >= 0) close(jp->fds[k]);
      jp->fds[k] = -1;
      if (r->res != (ssize_t)r->len)
        snprintf(jp->why, sizeof(jp->why), "read: %s",
                 r->res < 0 ? strerror((int)-r->res) : "short read");
      else {
        info->bytes_read += r->len;
        ok = process(b, epoch, idx, jp->slot[k], r->len, out) == 0;
      }
      if (!ok) report_bad(b->ds, idx, jp->why);
    } else if (jp->state[k] == 1) {
      ok = one(b, epoch, idx, out, &info->bytes_read) == 0;
      if (!ok) report_bad(b->ds, idx, jp->why);
    }
    if (!ok) {
      uint64_t p = (b->pos0 + k) % n;
      for (uint64_t t = 1; t < n && !ok; t++) {
        got = stk_perm_apply(&perm, (p + t) % n);
        ok = one(b, epoch, got, out, &info->bytes_read) == 0;
        if (!ok) report_bad(b->ds, got, jp->why);
      }
      if (!ok) {
        snprintf(b->err, sizeof(b->err), "no sample of epoch %llu can be read or decoded",
                 (unsigned long long)epoch);
        for (uint32_t m = k + 1; m < B; m++)
          if (jp->fds[m] >= 0) close(jp->fds[m]), jp->fds[m] = -1;
        return STK_IO;
      }
      info->substituted++;
    }
    int64_t label = j->label[got];
    memcpy(buf + tl->offset + 8ull * k, &label, 8);
  }
  return STK_OK;
}
