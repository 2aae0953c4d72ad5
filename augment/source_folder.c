/* source_folder.c - the ImageFolder source: root/<class>/<file>.jpg, class
 * directories sorted by name (byte order, as Python sorts ASCII names),
 * label = class index, files sorted within a class, as torchvision's
 * ImageFolder does. Differences, on purpose: only .jpg/.jpeg files (any
 * case) directly inside a class directory are samples, and symbolic links
 * are skipped (a worker reads only under its dataset root).
 *
 * Owns the index it builds (stk__jds); reads no image bytes at open.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jpegsrc.h"

#define MAX_SAMPLES (1ull << 31)
#define MAX_CLASSES (1u << 20)

typedef struct namelist {
  char **v;
  size_t n, cap;
} namelist;

static int nl_push(namelist *l, const char *s) {
  if (l->n == l->cap) {
    size_t c = l->cap ? l->cap * 2 : 64;
    char **v = realloc(l->v, c * sizeof(*v));
    if (!v) return -1;
    l->v = v, l->cap = c;
  }
  if (!(l->v[l->n] = strdup(s))) return -1;
  l->n++;
  return 0;
}
static void nl_free(namelist *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof(*l));
}
static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_jpeg_name(const char *s) {
  const char *dot = strrchr(s, '.');
  return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

/* Entries of dirfd/sub (sub NULL: dirfd itself) that are directories
 * (want_dir) or regular JPEG files; symlinks never count. Sorted. */
static int list_dir(int dirfd, const char *sub, int want_dir, namelist *out) {
  int fd =
      openat(dirfd, sub ? sub : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -1;
  }
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    unsigned char t = e->d_type;
    if (t == DT_UNKNOWN) {
      struct stat st;
      if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW)) continue;
      t = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
    }
    if (want_dir ? t != DT_DIR : (t != DT_REG || !is_jpeg_name(e->d_name))) continue;
    if (nl_push(out, e->d_name)) {
      rc = -1;
      break;
    }
  }
  closedir(d);
  if (out->n) qsort(out->v, out->n, sizeof(char *), cmp_str);
  return rc;
}

static int folder_open(stk_dataset *ds, char *err, size_t errlen) {
  stk__jds *j = calloc(1, sizeof(*j));
  if (!j) return STK_NO_MEMORY;
  j->kind = STK_SOURCE_IMAGEFOLDER;
  int rc = stk__jds_open_dir(ds, j, err, errlen);
  namelist classes = {0}, files = {0};
  if (rc) goto out;
  if (list_dir(j->dirfd, NULL, 1, &classes)) {
    snprintf(err, errlen, "cannot list %s: %s", j->dir, strerror(errno));
    rc = STK_IO;
    goto out;
  }
  if (classes.n == 0 || classes.n > MAX_CLASSES) {
    snprintf(err, errlen, "%s: %zu class directories (need 1..%u)", j->dir, classes.n,
             MAX_CLASSES);
    rc = classes.n ? STK_LIMIT : STK_NOT_FOUND;
    goto out;
  }
  size_t cap = 0;
  for (size_t c = 0; c < classes.n; c++) {
    namelist fl = {0};
    if (list_dir(j->dirfd, classes.v[c], 0, &fl)) {
      snprintf(err, errlen, "cannot list %s/%s: %s", j->dir, classes.v[c],
               strerror(errno));
      nl_free(&fl);
      rc = STK_IO;
      goto out;
    }
    for (size_t i = 0; i < fl.n; i++) {
      char path[4096];
      int k = snprintf(path, sizeof(path), "%s/%s", classes.v[c], fl.v[i]);
      if (k < 0 || (size_t)k >= sizeof(path) || nl_push(&files, path)) {
        nl_free(&fl);
        snprintf(err, errlen, "out of memory or path too long");
        rc = STK_NO_MEMORY;
        goto out;
      }
      if (files.n > cap) {
        size_t nc = cap ? cap * 2 : 1024;
        int64_t *lab = realloc(j->label, nc * sizeof(int64_t));
        if (!lab) {
          nl_free(&fl);
          rc = STK_NO_MEMORY;
          goto out;
        }
        j->label = lab, cap = nc;
      }
      j->label[files.n - 1] = (int64_t)c;
    }
    nl_free(&fl);
    if (files.n > MAX_SAMPLES) {
      snprintf(err, errlen, "more than %llu samples", MAX_SAMPLES);
      rc = STK_LIMIT;
      goto out;
    }
  }
  if (files.n == 0) {
    snprintf(err, errlen, "%s: no .jpg files in class directories", j->dir);
    rc = STK_NOT_FOUND;
    goto out;
  }
  j->n = files.n;
  j->nfiles = (uint32_t)files.n;
  j->files = files.v;
  files.v = NULL, files.n = 0;
  j->nclasses = (uint32_t)classes.n;
  j->file_of = malloc(j->n * sizeof(uint32_t));
  j->off = calloc(j->n, sizeof(uint64_t));
  j->size = calloc(j->n, sizeof(uint64_t));
  j->bad = calloc(j->n, 1);
  if (!j->file_of || !j->off || !j->size || !j->bad) {
    rc = STK_NO_MEMORY;
    goto out;
  }
  for (uint64_t i = 0; i < j->n; i++) j->file_of[i] = (uint32_t)i;
  ds->n = j->n;
  ds->impl = j;
  stk__jds_finish(ds, j);
out:
  nl_free(&classes);
  nl_free(&files);
  if (rc) {
    stk__jds_free(j);
    ds->impl = NULL;
  }
  return rc;
}

const stk__source_ops stk__imagefolder_source =
    STK__JPEG_SOURCE_OPS("imagefolder", folder_open);
