/* source_tar.c - WebDataset-style tar shards: every *.tar file of the
 * dataset directory (sorted by name) holds samples as consecutive members
 * <key>.jpg (or .jpeg) and <key>.cls (the label as decimal text), where
 * the key is the member path up to the first '.' of its file name.
 *
 * The index (shard, offset, size, label of every sample) is built once by
 * reading the member headers, and cached beside the shards in
 * .stoker-index (rebuilt when a shard's size or mtime changes), so that a
 * sample is one read. Plain ustar and GNU long names are understood; pax
 * headers are skipped (their overrides are ignored). A sample without a
 * .cls member is left out; a shard cut short or damaged keeps the samples
 * before the damage.
 *
 * Owns the index; never writes anything but the cache file, and that
 * through a temp file created O_EXCL|O_NOFOLLOW (write_cache). A .cls
 * label outside the job's num_classes makes its sample bad (imgsrc.c);
 * a job whose num_classes fits no label is refused at open.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "imgsrc.h"

#define MAX_SAMPLES (1ull << 31)
#define MAX_SHARDS  (1u << 20)
#define INDEX_NAME  ".stoker-index"

typedef struct shard {
  char *name;
  uint64_t size;
  int64_t mtime_s, mtime_ns;
} shard;

typedef struct builder_t {
  stk__jds *j;
  uint64_t cap;
} builder_t;

static int push_sample(builder_t *t, uint32_t f, uint64_t off, uint64_t size,
                       int64_t label, const char *key) {
  stk__jds *j = t->j;
  if (j->n >= MAX_SAMPLES) return -1;
  if (j->n == t->cap) {
    uint64_t c = t->cap ? t->cap * 2 : 1024;
    uint32_t *fo = realloc(j->file_of, c * sizeof(*fo));
    if (fo) j->file_of = fo;
    uint64_t *o = realloc(j->off, c * sizeof(*o));
    if (o) j->off = o;
    uint64_t *s = realloc(j->size, c * sizeof(*s));
    if (s) j->size = s;
    int64_t *l = realloc(j->label, c * sizeof(*l));
    if (l) j->label = l;
    char **k = realloc(j->keys, c * sizeof(*k));
    if (k) j->keys = k;
    if (!fo || !o || !s || !l || !k) return -1;
    t->cap = c;
  }
  char *kd = strdup(key);
  if (!kd) return -1;
  j->file_of[j->n] = f, j->off[j->n] = off, j->size[j->n] = size;
  j->label[j->n] = label, j->keys[j->n] = kd;
  j->n++;
  return 0;
}

static int cmp_shard(const void *a, const void *b) {
  return strcmp(((const shard *)a)->name, ((const shard *)b)->name);
}

static void free_shards(shard *s, size_t n) {
  for (size_t i = 0; i < n; i++) free(s[i].name);
  free(s);
}

/* The *.tar regular files of dirfd, sorted, with size and mtime. */
static int list_shards(int dirfd, shard **out, size_t *nout) {
  *out = NULL, *nout = 0;
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -1;
  }
  shard *v = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d))) {
    size_t L = strlen(e->d_name);
    if (L < 5 || strcmp(e->d_name + L - 4, ".tar")) continue;
    struct stat st;
    if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
      continue;
    if (n == cap) {
      size_t c = cap ? cap * 2 : 16;
      shard *nv = c <= MAX_SHARDS ? realloc(v, c * sizeof(*v)) : NULL;
      if (!nv) {
        rc = -1;
        break;
      }
      v = nv, cap = c;
    }
    v[n].name = strdup(e->d_name);
    if (!v[n].name) {
      rc = -1;
      break;
    }
    v[n].size = (uint64_t)st.st_size;
    v[n].mtime_s = st.st_mtim.tv_sec;
    v[n].mtime_ns = st.st_mtim.tv_nsec;
    n++;
  }
  closedir(d);
  if (rc) {
    free_shards(v, n);
    return -1;
  }
  if (n) qsort(v, n, sizeof(*v), cmp_shard);
  *out = v, *nout = n;
  return 0;
}

static int parse_octal(const unsigned char *p, size_t len, uint64_t *out) {
  uint64_t v = 0;
  size_t i = 0;
  if (p[0] & 0x80) { /* GNU base-256 */
    for (i = 1; i < len; i++) {
      if (v >> 55) return -1;
      v = (v << 8) | p[i];
    }
    *out = v;
    return 0;
  }
  while (i < len && (p[i] == ' ' || p[i] == 0)) i++;
  for (; i < len && p[i] >= '0' && p[i] <= '7'; i++) {
    if (v >> 60) return -1;
    v = v * 8 + (uint64_t)(p[i] - '0');
  }
  *out = v;
  return 0;
}

static int full_pread(int fd, void *buf, size_t len, uint64_t off) {
  size_t done = 0;
  while (done < len) {
    ssize_t k = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    done += (size_t)k;
  }
  return 0;
}

/* Scan one shard's member headers into the index. */
static int scan_shard(builder_t *t, uint32_t f, const shard *sh, int fd, char *err,
                      size_t errlen) {
  unsigned char h[512];
  char name[4096], key[4096] = "", longname[4096];
  int have_long = 0;
  uint64_t off = 0, jpg_off = 0, jpg_size = 0;
  int have_jpg = 0, have_cls = 0;
  int64_t label = 0;
  for (;;) {
    if (off + 512 > sh->size) break;
    if (full_pread(fd, h, 512, off)) {
      snprintf(err, errlen, "%s: read error at %" PRIu64, sh->name, off);
      return STK_IO;
    }
    int zero = 1;
    for (int i = 0; i < 512 && zero; i++) zero = h[i] == 0;
    if (zero) break;
    uint64_t size;
    if (parse_octal(h + 124, 12, &size) || size > sh->size - off - 512)
      break; /* a cut or damaged shard: keep the samples before the damage */
    char type = (char)h[156];
    uint64_t data = off + 512;
    off = data + ((size + 511) & ~(uint64_t)511);
    if (type == 'L') { /* GNU long name: the next member's name */
      size_t k = size < sizeof(longname) - 1 ? (size_t)size : sizeof(longname) - 1;
      if (full_pread(fd, longname, k, data)) return STK_IO;
      longname[k] = 0;
      have_long = 1;
      continue;
    }
    if (type != '0' && type != 0) {
      have_long = 0;
      continue; /* directories, pax headers, links: not samples */
    }
    if (have_long) {
      snprintf(name, sizeof(name), "%s", longname);
      have_long = 0;
    } else if (!memcmp(h + 257, "ustar", 5) && h[345]) {
      snprintf(name, sizeof(name), "%.155s/%.100s", (const char *)h + 345,
               (const char *)h);
    } else {
      snprintf(name, sizeof(name), "%.100s", (const char *)h);
    }
    char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    char *dot = strchr(base, '.');
    if (!dot) continue;
    *dot = 0;
    const char *ext = dot + 1;
    if (strcmp(name, key) != 0) {
      if (have_jpg && have_cls && push_sample(t, f, jpg_off, jpg_size, label, key)) {
        snprintf(err, errlen, "out of memory or too many samples");
        return STK_NO_MEMORY;
      }
      snprintf(key, sizeof(key), "%s", name);
      have_jpg = have_cls = 0;
    }
    if (!strcmp(ext, "jpg") || !strcmp(ext, "jpeg")) {
      have_jpg = 1, jpg_off = data, jpg_size = size;
    } else if (!strcmp(ext, "cls")) {
      char txt[32];
      size_t k = size < sizeof(txt) - 1 ? (size_t)size : sizeof(txt) - 1;
      if (full_pread(fd, txt, k, data)) return STK_IO;
      txt[k] = 0;
      char *end;
      errno = 0;
      long long v = strtoll(txt, &end, 10);
      if (end != txt && !errno && v >= 0) have_cls = 1, label = v;
    }
  }
  if (have_jpg && have_cls && push_sample(t, f, jpg_off, jpg_size, label, key)) {
    snprintf(err, errlen, "out of memory or too many samples");
    return STK_NO_MEMORY;
  }
  return STK_OK;
}

/* Write the index to a temp file beside the shards, then rename it over
 * INDEX_NAME. The temp file is created with O_EXCL|O_NOFOLLOW: anything
 * planted under its name (a symbolic link pointing elsewhere, to redirect
 * the write) is refused and nothing is written through it; only a stale
 * regular file of an earlier process with our pid is replaced. renameat
 * replaces a link at INDEX_NAME itself, never its target. 0, or -1 with
 * err. */
static int write_cache(const stk__jds *j, const shard *sh, size_t nsh, char *err,
                       size_t errlen) {
  char tmp[64];
  snprintf(tmp, sizeof(tmp), INDEX_NAME ".tmp.%ld", (long)getpid());
  int fd = -1;
  for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
    fd =
        openat(j->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0 && errno == EEXIST && attempt == 0 &&
        fstatat(j->dirfd, tmp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        unlinkat(j->dirfd, tmp, 0) == 0)
      continue;
    if (fd < 0) {
      int e = errno;
      int link =
          fstatat(j->dirfd, tmp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
      snprintf(
          err, errlen, "cannot create %s/%s: %s", j->dir, tmp,
          link ? "a symbolic link is there; refusing to write through it" : strerror(e));
      return -1;
    }
  }
  FILE *f = fdopen(fd, "w");
  if (!f) {
    snprintf(err, errlen, "out of memory");
    close(fd);
    unlinkat(j->dirfd, tmp, 0);
    return -1;
  }
  fprintf(f, "stoker-tar-index 1\nshards %zu\n", nsh);
  for (size_t i = 0; i < nsh; i++)
    fprintf(f, "%" PRIu64 " %" PRId64 " %" PRId64 " %s\n", sh[i].size, sh[i].mtime_s,
            sh[i].mtime_ns, sh[i].name);
  fprintf(f, "samples %" PRIu64 "\n", j->n);
  for (uint64_t i = 0; i < j->n; i++)
    fprintf(f, "%u %" PRIu64 " %" PRIu64 " %" PRId64 " %s\n", j->file_of[i], j->off[i],
            j->size[i], j->label[i], j->keys[i]);
  int bad = ferror(f);
  if (fclose(f) || bad || renameat(j->dirfd, tmp, j->dirfd, INDEX_NAME)) {
    snprintf(err, errlen, "cannot write %s/%s: %s", j->dir, INDEX_NAME, strerror(errno));
    unlinkat(j->dirfd, tmp, 0);
    return -1;
  }
  return 0;
}

/* Load the cache if it matches the shards exactly; 0 on success. */
static int load_cache(builder_t *t, const shard *sh, size_t nsh) {
  stk__jds *j = t->j;
  int fd = openat(j->dirfd, INDEX_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return -1;
  }
  char line[8192];
  size_t ns;
  uint64_t nsamp;
  int rc = -1;
  if (!fgets(line, sizeof(line), f) || strcmp(line, "stoker-tar-index 1\n")) goto out;
  if (!fgets(line, sizeof(line), f) || sscanf(line, "shards %zu", &ns) != 1 || ns != nsh)
    goto out;
  for (size_t i = 0; i < ns; i++) {
    uint64_t size;
    int64_t ms, mn;
    int pos = 0;
    if (!fgets(line, sizeof(line), f)) goto out;
    line[strcspn(line, "\n")] = 0;
    if (sscanf(line, "%" SCNu64 " %" SCNd64 " %" SCNd64 " %n", &size, &ms, &mn, &pos) !=
            3 ||
        size != sh[i].size || ms != sh[i].mtime_s || mn != sh[i].mtime_ns ||
        strcmp(line + pos, sh[i].name))
      goto out;
  }
  if (!fgets(line, sizeof(line), f) || sscanf(line, "samples %" SCNu64, &nsamp) != 1 ||
      nsamp > MAX_SAMPLES)
    goto out;
  for (uint64_t i = 0; i < nsamp; i++) {
    unsigned sid;
    uint64_t off, size;
    int64_t label;
    int pos = 0;
    if (!fgets(line, sizeof(line), f)) goto out;
    line[strcspn(line, "\n")] = 0;
    if (sscanf(line, "%u %" SCNu64 " %" SCNu64 " %" SCNd64 " %n", &sid, &off, &size,
               &label, &pos) != 4 ||
        sid >= nsh || off > sh[sid].size || size > sh[sid].size - off || label < 0 ||
        push_sample(t, sid, off, size, label, line + pos))
      goto out;
  }
  rc = 0;
out:
  fclose(f);
  return rc;
}

static void reset_samples(stk__jds *j) {
  for (uint64_t i = 0; j->keys && i < j->n; i++) free(j->keys[i]);
  j->n = 0;
}

/* Scan j->dir's shards into j (from the index cache when use_cache and it
 * is current; else writing the cache): STK_OK, or an error with err. */
static int tar_scan(stk__jds *j, int use_cache, char *err, size_t errlen) {
  shard *sh;
  size_t nsh;
  builder_t t = {j, 0};
  if (list_shards(j->dirfd, &sh, &nsh)) {
    snprintf(err, errlen, "cannot list %s: %s", j->dir, strerror(errno));
    return STK_IO;
  }
  int rc = STK_OK;
  if (nsh == 0) {
    snprintf(err, errlen, "%s: no .tar shards", j->dir);
    rc = STK_NOT_FOUND;
    goto out;
  }
  if (use_cache && load_cache(&t, sh, nsh) == 0) goto done;
  reset_samples(j);
  for (size_t i = 0; i < nsh && rc == STK_OK; i++) {
    int fd = openat(j->dirfd, sh[i].name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      snprintf(err, errlen, "%s/%s: %s", j->dir, sh[i].name, strerror(errno));
      rc = STK_IO;
      break;
    }
    rc = scan_shard(&t, (uint32_t)i, &sh[i], fd, err, errlen);
    close(fd);
  }
  if (rc) goto out;
  {
    char werr[256]; /* best effort: a read-only root is fine */
    write_cache(j, sh, nsh, werr, sizeof(werr));
  }
done:
  if (j->n == 0) {
    snprintf(err, errlen, "%s: no samples (.jpg with .cls) in the shards", j->dir);
    rc = STK_NOT_FOUND;
    goto out;
  }
  j->nfiles = (uint32_t)nsh;
  j->files = malloc(nsh * sizeof(char *));
  if (!j->files) {
    rc = STK_NO_MEMORY;
    goto out;
  }
  for (size_t i = 0; i < nsh; i++) j->files[i] = sh[i].name, sh[i].name = NULL;
out:
  free_shards(sh, nsh);
  return rc;
}

static int tar_open(stk_dataset *ds, char *err, size_t errlen) {
  stk__jds *j = calloc(1, sizeof(*j));
  if (!j) return STK_NO_MEMORY;
  j->kind = STK_SOURCE_TAR;
  int rc = stk__jds_open_dir(ds, j, err, errlen);
  if (!rc) rc = tar_scan(j, 1, err, errlen);
  if (!rc && !(j->bad = calloc(j->n, 1))) rc = STK_NO_MEMORY;
  if (!rc) {
    /* Labels are checked against the job's num_classes: one out of range
     * is a bad sample (imgsrc.c, locate), but a job that fits no label at
     * all is misconfigured, and says so here rather than walking a whole
     * epoch for a decodable sample at the first batch. */
    uint64_t fit = 0;
    int64_t top = 0;
    for (uint64_t i = 0; i < j->n; i++) {
      if (j->label[i] >= 0 && (uint64_t)j->label[i] < ds->spec.num_classes) fit++;
      if (j->label[i] > top) top = j->label[i];
    }
    if (!fit) {
      snprintf(err, errlen,
               "%s: no .cls label is below the job's num_classes %u (largest label "
               "%lld): set num_classes to the dataset's class count",
               j->dir, ds->spec.num_classes, (long long)top);
      rc = STK_INVALID_ARGUMENT;
    }
  }
  if (rc) {
    stk__jds_free(j);
    return rc;
  }
  ds->n = j->n;
  ds->impl = j;
  stk__jds_finish(ds, j);
  return STK_OK;
}

int stk_tar_index(const char *dir, char *err, size_t errlen) {
  stk__jds *j = calloc(1, sizeof(*j));
  if (!j) return STK_NO_MEMORY;
  j->kind = STK_SOURCE_TAR;
  snprintf(j->dir, sizeof(j->dir), "%s", dir);
  j->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int rc;
  if (j->dirfd < 0) {
    snprintf(err, errlen, "%s: %s", dir, strerror(errno));
    rc = STK_IO;
  } else {
    rc = tar_scan(j, 0, err, errlen);
    if (!rc) {
      shard *sh;
      size_t nsh;
      /* scan wrote the cache best-effort; here failing to write is an error */
      if (list_shards(j->dirfd, &sh, &nsh) == 0) {
        if (write_cache(j, sh, nsh, err, errlen)) rc = STK_IO;
        free_shards(sh, nsh);
      }
    }
  }
  stk__jds_free(j);
  return rc;
}

const stk__source_ops stk__tar_source = STK__IMG_SOURCE_OPS("tar", tar_open);
