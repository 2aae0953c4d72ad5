/* source_folder.c - the ImageFolder source, as torchvision's
 * datasets.ImageFolder finds its samples: the classes are the sub-folders
 * of the dataset directory sorted by name (byte order: Python's sorted()
 * of the names for UTF-8 names), label = class index; the samples of a
 * class are the files under its folder, at any depth, whose extension
 * (any case) is one torchvision accepts for images and stoker decodes
 * (.jpg, .jpeg, .png), in the order of torchvision's make_dataset:
 * directories sorted by their path, files sorted by name within each.
 *
 * Differences, on purpose: symbolic links are never followed (a worker
 * reads only under its dataset root, and samples are opened without
 * following links), folders deeper than MAX_DEPTH below a class folder
 * are not walked, and files that are not samples are counted and a few
 * named (stk_dataset_skipped_files): other image formats torchvision reads
 * (.bmp, .ppm, .pgm, .tif, .tiff, .webp), other extensions, links, files
 * outside any class folder, non-regular files.
 *
 * Owns the index it builds (stk__jds) and hands the class names and the
 * skipped-file report to the dataset; reads no image bytes at open.
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

#include "imgsrc.h"

#define MAX_SAMPLES (1ull << 31)
#define MAX_CLASSES (1u << 20)
#define MAX_DEPTH   32 /* folders below a class folder that are walked */

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

/* make_dataset's order of two sample paths: by directory path (Python's
 * sorted() of os.walk's (root, dirs, files) tuples compares roots as
 * strings), then by file name. A flat class folder sorts by name. */
static int cmp_sample(const void *a, const void *b) {
  const char *x = *(char *const *)a, *y = *(char *const *)b;
  const char *sx = strrchr(x, '/'), *sy = strrchr(y, '/');
  size_t lx = sx ? (size_t)(sx - x) : 0, ly = sy ? (size_t)(sy - y) : 0;
  int c = memcmp(x, y, lx < ly ? lx : ly);
  if (c) return c;
  if (lx != ly) return lx < ly ? -1 : 1;
  return strcmp(sx ? sx + 1 : x, sy ? sy + 1 : y);
}

/* What a file's name makes it: a sample, or why it is skipped. */
static const char *file_kind(const char *name) {
  static const char *const take[] = {".jpg", ".jpeg", ".png"};
  static const char *const other[] = {".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp"};
  const char *dot = strrchr(name, '.');
  if (dot) {
    for (size_t i = 0; i < sizeof(take) / sizeof(take[0]); i++)
      if (!strcasecmp(dot, take[i])) return NULL;
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
      if (!strcasecmp(dot, other[i])) return "an image format stoker does not decode";
  }
  return "not an image extension (.jpg, .jpeg, .png)";
}

/* The skipped-file report: a count, and the first few paths in byte
 * order (so every worker names the same ones). */
typedef struct skipped {
  uint64_t n;
  char *ex[STK_SKIPPED_EXAMPLES];
  int nex;
} skipped;

static void skip_note(skipped *sk, const char *path, const char *why) {
  sk->n++;
  char line[4200];
  snprintf(line, sizeof(line), "%s: %s", path, why);
  int at = sk->nex;
  while (at > 0 && strcmp(sk->ex[at - 1], line) > 0) at--;
  if (at >= STK_SKIPPED_EXAMPLES) return;
  char *dup = strdup(line);
  if (!dup) return; /* the report is best effort; the count is exact */
  if (sk->nex == STK_SKIPPED_EXAMPLES) free(sk->ex[--sk->nex]);
  memmove(&sk->ex[at + 1], &sk->ex[at], (size_t)(sk->nex - at) * sizeof(char *));
  sk->ex[at] = dup;
  sk->nex++;
}

static unsigned char entry_type(int fd, struct dirent *e) {
  if (e->d_type != DT_UNKNOWN) return e->d_type;
  struct stat st;
  if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW)) return DT_UNKNOWN;
  return S_ISDIR(st.st_mode)   ? DT_DIR
         : S_ISREG(st.st_mode) ? DT_REG
         : S_ISLNK(st.st_mode) ? DT_LNK
                               : DT_UNKNOWN;
}

static int join_path(char *out, size_t len, const char *dir, const char *name) {
  int k = *dir ? snprintf(out, len, "%s/%s", dir, name) : snprintf(out, len, "%s", name);
  return k < 0 || (size_t)k >= len ? -1 : 0;
}

/* The dataset directory's entries: class folders into classes (sorted);
 * the rest is skipped. 0, or -1 with errno. */
static int list_classes(int dirfd, namelist *classes, skipped *sk) {
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
    unsigned char t = entry_type(fd, e);
    if (t == DT_DIR) {
      if (nl_push(classes, e->d_name)) {
        rc = -1, errno = ENOMEM;
        break;
      }
    } else if (e->d_name[0] != '.') {
      skip_note(sk, e->d_name,
                t == DT_LNK ? "a symbolic link (not followed)" : "not in a class folder");
    }
  }
  closedir(d);
  if (classes->n) qsort(classes->v, classes->n, sizeof(char *), cmp_str);
  return rc;
}

/* Every sample file under class folder cls (paths "cls/sub/file") into
 * out, walking sub-folders up to MAX_DEPTH deep; the rest is skipped.
 * Unsorted. 0, or -1 with errno (a folder that cannot be listed). */
static int walk_class(int dirfd, const char *cls, namelist *out, skipped *sk) {
  namelist dirs = {0};
  int rc = 0;
  if (nl_push(&dirs, cls)) return errno = ENOMEM, -1;
  size_t depth0 = 0;
  for (const char *p = cls; *p; p++) depth0 += *p == '/';
  for (size_t i = 0; i < dirs.n && !rc; i++) {
    int fd = openat(dirfd, dirs.v[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
      if (fd >= 0) close(fd);
      rc = -1;
      break;
    }
    size_t depth = 0;
    for (const char *p = dirs.v[i]; *p; p++) depth += *p == '/';
    depth -= depth0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      if (join_path(path, sizeof(path), dirs.v[i], e->d_name)) {
        skip_note(sk, dirs.v[i], "a path in it is over 4095 bytes");
        continue;
      }
      unsigned char t = entry_type(fd, e);
      const char *why = NULL;
      if (t == DT_DIR) {
        if (depth >= MAX_DEPTH) why = "a folder deeper than 32 levels (not walked)";
        else if (nl_push(&dirs, path)) rc = -1, errno = ENOMEM;
      } else if (t == DT_LNK) {
        why = "a symbolic link (not followed)";
      } else if (t != DT_REG) {
        why = "not a regular file";
      } else if (!(why = file_kind(e->d_name))) {
        if (nl_push(out, path)) rc = -1, errno = ENOMEM;
      }
      if (why) skip_note(sk, path, why);
      if (rc) break;
    }
    closedir(d);
  }
  nl_free(&dirs);
  return rc;
}

static int folder_open(stk_dataset *ds, char *err, size_t errlen) {
  stk__jds *j = calloc(1, sizeof(*j));
  if (!j) return STK_NO_MEMORY;
  j->kind = STK_SOURCE_IMAGEFOLDER;
  int rc = stk__jds_open_dir(ds, j, err, errlen);
  namelist classes = {0}, files = {0};
  skipped sk = {0};
  if (rc) goto out;
  if (list_classes(j->dirfd, &classes, &sk)) {
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
  if (ds->spec.num_classes && ds->spec.num_classes != classes.n) {
    snprintf(err, errlen,
             "the job says num_classes = %u but %s has %zu class folders (%s%s%s): "
             "leave num_classes out (an imagefolder job takes the folder count) or "
             "set it to %zu",
             ds->spec.num_classes, j->dir, classes.n, classes.v[0],
             classes.n > 1 ? " .. " : "", classes.n > 1 ? classes.v[classes.n - 1] : "",
             classes.n);
    rc = STK_INVALID_ARGUMENT;
    goto out;
  }
  size_t cap = 0;
  for (size_t c = 0; c < classes.n; c++) {
    namelist fl = {0};
    if (walk_class(j->dirfd, classes.v[c], &fl, &sk)) {
      snprintf(err, errlen, "cannot list %s/%s: %s", j->dir, classes.v[c],
               strerror(errno));
      nl_free(&fl);
      rc = STK_IO;
      goto out;
    }
    if (fl.n) qsort(fl.v, fl.n, sizeof(char *), cmp_sample);
    for (size_t i = 0; i < fl.n; i++) {
      if (nl_push(&files, fl.v[i])) {
        nl_free(&fl);
        snprintf(err, errlen, "out of memory");
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
    snprintf(err, errlen,
             "%s: no .jpg, .jpeg or .png files in its class folders (%llu other files "
             "skipped)",
             j->dir, (unsigned long long)sk.n);
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
  ds->classes = classes.v; /* label order; stk_dataset_close frees them */
  ds->nclasses = (uint32_t)classes.n;
  memset(&classes, 0, sizeof(classes));
  ds->nskipped = sk.n;
  for (int i = 0; i < sk.nex; i++) ds->skipped[i] = sk.ex[i];
  sk.nex = 0;
  stk__jds_finish(ds, j);
out:
  for (int i = 0; i < sk.nex; i++) free(sk.ex[i]);
  nl_free(&classes);
  nl_free(&files);
  if (rc) {
    stk__jds_free(j);
    ds->impl = NULL;
  }
  return rc;
}

const stk__source_ops stk__imagefolder_source =
    STK__IMG_SOURCE_OPS("imagefolder", folder_open);
