/* journal.c - the coordinator's state journal (see journal.h): format and
 * strict parse of the state text, and the state directory (lock, read,
 * atomic replace).
 *
 * Why a whole-file rewrite (temp file, fsync, rename, fsync the directory)
 * and not an append-only log: the state is tiny (a flag per rank, a few
 * numbers, the registered worker ids) and changes rarely (a join, a
 * finish, a registration, the end), so writing it whole costs no more than
 * an append, and every file on disk is one self-contained snapshot with its
 * own checksum: no replay, no compaction, no half-written last record to
 * guess about. rename() is atomic, so a crash at any point leaves the old
 * snapshot or the new one.
 *
 * Owns only what it allocates. Must not log, exit, or trust the file: a
 * damaged or foreign file is an error message, never a crash.
 */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/error.h"

#define MAGIC      "stoker-coordinator-state"
#define STATE_FILE "state"
#define LOCK_FILE  "lock"

/* ---- Formatting --------------------------------------------------------- */

typedef struct buf {
  char *p;
  size_t len, cap;
  int oom;
} buf;

static void buf_add(buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void buf_printf(buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void buf_printf(buf *b, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n > 0) buf_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A string as lowercase hex, or "-" when empty. */
static void buf_hex(buf *b, const char *s) {
  static const char digits[] = "0123456789abcdef";
  if (!s || !*s) {
    buf_add(b, "-", 1);
    return;
  }
  for (; *s; s++) {
    char h[2] = {digits[(unsigned char)*s >> 4], digits[(unsigned char)*s & 15]};
    buf_add(b, h, 2);
  }
}

static void buf_ranks(buf *b, const char *key, const uint8_t *flags, uint32_t n) {
  buf_add(b, key, strlen(key));
  for (uint32_t r = 0; flags && r < n; r++)
    if (flags[r]) buf_printf(b, " %" PRIu32, r);
  buf_add(b, "\n", 1);
}

int stk__journal_format(const stk__journal *j, char **out, size_t *len) {
  buf b = {0};
  buf_printf(&b, MAGIC " %d\n", STK_JOURNAL_VERSION);
  buf_printf(&b, "job_hash %016" PRIx64 "\n", j->job_hash);
  buf_add(&b, "job_name ", 9);
  buf_hex(&b, j->job_name);
  buf_printf(&b, "\nworld_size %" PRIu32 "\n", j->world_size);
  buf_printf(&b, "num_samples %" PRIu64 "\n", j->num_samples);
  if (j->have_fp) buf_printf(&b, "fingerprint %016" PRIx64 "\n", j->fingerprint);
  else buf_add(&b, "fingerprint -\n", 14);
  buf_ranks(&b, "joined", j->joined, j->world_size);
  buf_ranks(&b, "finished", j->finished, j->world_size);
  if (j->ended) {
    buf_printf(&b, "end %d %d ", j->exit_code, j->failed ? 1 : 0);
    buf_hex(&b, j->reason);
    buf_add(&b, "\n", 1);
  } else {
    buf_add(&b, "end -\n", 6);
  }
  for (size_t i = 0; i < j->nworkers; i++) {
    buf_add(&b, "worker ", 7);
    buf_hex(&b, j->worker_ids[i]);
    buf_add(&b, "\n", 1);
  }
  uint32_t crc = b.oom ? 0 : stk_crc32c(0, b.p, b.len);
  buf_printf(&b, "crc32c %08" PRIx32 "\n", crc);
  if (b.oom) {
    free(b.p);
    return -1;
  }
  *out = b.p;
  *len = b.len;
  return 0;
}

/* ---- Parsing ------------------------------------------------------------ */

typedef struct cursor {
  const char *base, *p, *end;
  int line; /* number of the line last taken, 1-based */
  char *err;
  size_t errlen;
} cursor;

static int bad(cursor *c, const char *what) {
  return stk__errf(c->err, c->errlen, -1, "line %d: %s", c->line, what);
}

/* The next line (without its '\n'); every line must end in '\n'. */
static int next_line(cursor *c, const char **line, size_t *n) {
  c->line++;
  if (c->p >= c->end) return bad(c, "the file ends early (truncated?)");
  const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
  if (!nl) return bad(c, "the last line has no end (truncated?)");
  *line = c->p;
  *n = (size_t)(nl - c->p);
  c->p = nl + 1;
  return 0;
}

/* Take the next line, which must be "key value" (or just "key" when
 * allow_empty): *val points at the value (length *vn, may be 0). */
static int take(cursor *c, const char *key, int allow_empty, const char **val,
                size_t *vn) {
  const char *l = NULL;
  size_t n = 0, k = strlen(key);
  if (next_line(c, &l, &n)) return -1;
  char msg[80];
  snprintf(msg, sizeof(msg), "expected '%s'", key);
  if (n < k || memcmp(l, key, k) != 0) return bad(c, msg);
  if (n == k && allow_empty) {
    *val = l + n, *vn = 0;
    return 0;
  }
  if (n <= k + 1 || l[k] != ' ') return bad(c, msg);
  *val = l + k + 1;
  *vn = n - k - 1;
  return 0;
}

static int parse_dec(const char *s, size_t n, uint64_t max, uint64_t *out) {
  if (!n || n > 20) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  if (v > max) return -1;
  *out = v;
  return 0;
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return -1; /* uppercase too: the writer never uses it */
}

static int parse_hex64(const char *s, size_t n, uint64_t *out) {
  if (n != 16) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    int d = hexval(s[i]);
    if (d < 0) return -1;
    v = v << 4 | (uint64_t)d;
  }
  *out = v;
  return 0;
}

static int parse_hex32(const char *s, size_t n, uint32_t *out) {
  uint64_t v = 0;
  if (n != 8) return -1;
  for (size_t i = 0; i < n; i++) {
    int d = hexval(s[i]);
    if (d < 0) return -1;
    v = v << 4 | (uint64_t)d;
  }
  *out = (uint32_t)v;
  return 0;
}

/* A hex-encoded string ("-" = empty) of at most max bytes; *out malloc'ed. */
static int parse_hexstr(const char *s, size_t n, size_t max, char **out) {
  if (n == 1 && s[0] == '-') return (*out = strdup("")) ? 0 : -1;
  if (!n || n % 2 || n / 2 > max) return -1;
  char *r = malloc(n / 2 + 1);
  if (!r) return -1;
  for (size_t i = 0; i < n; i += 2) {
    int hi = hexval(s[i]), lo = hexval(s[i + 1]);
    if (hi < 0 || lo < 0 || (hi | lo) == 0) { /* no NUL inside a C string */
      free(r);
      return -1;
    }
    r[i / 2] = (char)(hi << 4 | lo);
  }
  r[n / 2] = 0;
  *out = r;
  return 0;
}

static int parse_ranks(cursor *c, const char *key, uint32_t w, uint8_t *flags) {
  const char *v;
  size_t n;
  if (take(c, key, 1, &v, &n)) return -1;
  const char *p = v, *end = v + n;
  while (p < end) {
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    size_t k = sp ? (size_t)(sp - p) : (size_t)(end - p);
    uint64_t r;
    if (parse_dec(p, k, UINT32_MAX, &r)) return bad(c, "a rank is not a number");
    if (r >= w) return bad(c, "a rank is not below world_size");
    flags[r] = 1;
    p += k;
    if (sp) {
      p++;
      if (p >= end) return bad(c, "a space ends the rank list");
    }
  }
  return 0;
}

static int parse_end(cursor *c, stk__journal *j) {
  const char *v;
  size_t n;
  if (take(c, "end", 0, &v, &n)) return -1;
  if (n == 1 && v[0] == '-') return 0;
  const char *sp1 = memchr(v, ' ', n);
  const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(v + n - sp1 - 1)) : NULL;
  uint64_t code, failed;
  if (!sp1 || !sp2 || parse_dec(v, (size_t)(sp1 - v), 255, &code) ||
      parse_dec(sp1 + 1, (size_t)(sp2 - sp1 - 1), 1, &failed) ||
      parse_hexstr(sp2 + 1, (size_t)(v + n - sp2 - 1), 4096, &j->reason))
    return bad(c, "expected 'end -' or 'end CODE FAILED REASON'");
  j->ended = 1;
  j->exit_code = (int)code;
  j->failed = (int)failed;
  return 0;
}

static int parse_body(cursor *c, stk__journal *j) {
  const char *v;
  size_t n;
  uint64_t x;
  if (next_line(c, &v, &n)) return -1;
  size_t ml = strlen(MAGIC);
  if (n < ml + 2 || memcmp(v, MAGIC " ", ml + 1) != 0)
    return bad(c, "not a stoker-coordinator state file");
  if (parse_dec(v + ml + 1, n - ml - 1, UINT32_MAX, &x))
    return bad(c, "the format version is not a number");
  if (x != STK_JOURNAL_VERSION) {
    char msg[160];
    snprintf(msg, sizeof(msg),
             "format version %" PRIu64 ", this stoker-coordinator reads version %d only",
             x, STK_JOURNAL_VERSION);
    return bad(c, msg);
  }
  if (take(c, "job_hash", 0, &v, &n)) return -1;
  if (parse_hex64(v, n, &j->job_hash)) return bad(c, "job_hash is not 16 hex digits");
  if (take(c, "job_name", 0, &v, &n)) return -1;
  if (parse_hexstr(v, n, 4096, &j->job_name)) return bad(c, "a bad job_name");
  if (take(c, "world_size", 0, &v, &n)) return -1;
  if (parse_dec(v, n, 65536, &x) || x == 0) return bad(c, "world_size not in 1..65536");
  j->world_size = (uint32_t)x;
  if (take(c, "num_samples", 0, &v, &n)) return -1;
  if (parse_dec(v, n, UINT64_MAX, &j->num_samples)) return bad(c, "a bad num_samples");
  if (take(c, "fingerprint", 0, &v, &n)) return -1;
  if (!(n == 1 && v[0] == '-')) {
    if (parse_hex64(v, n, &j->fingerprint)) return bad(c, "a bad fingerprint");
    j->have_fp = 1;
  }
  j->joined = calloc(j->world_size, 1);
  j->finished = calloc(j->world_size, 1);
  if (!j->joined || !j->finished) return bad(c, "out of memory");
  if (parse_ranks(c, "joined", j->world_size, j->joined) ||
      parse_ranks(c, "finished", j->world_size, j->finished) || parse_end(c, j))
    return -1;
  /* worker lines, then the checksum of everything before it */
  size_t cap = 0;
  for (;;) {
    const char *line_start = c->p;
    if (next_line(c, &v, &n)) return -1;
    if (n >= 7 && !memcmp(v, "crc32c ", 7)) {
      uint32_t want;
      if (parse_hex32(v + 7, n - 7, &want)) return bad(c, "a bad crc32c");
      if (c->p != c->end) {
        c->line++;
        return bad(c, "something follows the crc32c line");
      }
      if (stk_crc32c(0, c->base, (size_t)(line_start - c->base)) != want)
        return bad(c, "the checksum does not match: the file is damaged");
      return 0;
    }
    if (n < 7 || memcmp(v, "worker ", 7) != 0)
      return bad(c, "expected 'worker' or 'crc32c'");
    if (j->nworkers >= STK_JOURNAL_MAX_WORKERS) return bad(c, "too many worker lines");
    char *id = NULL;
    if (parse_hexstr(v + 7, n - 7, 255, &id) || !*id) {
      free(id);
      return bad(c, "a bad worker id");
    }
    if (j->nworkers == cap) {
      cap = cap ? cap * 2 : 8;
      char **w = realloc(j->worker_ids, cap * sizeof(*w));
      if (!w) {
        free(id);
        return bad(c, "out of memory");
      }
      j->worker_ids = w;
    }
    j->worker_ids[j->nworkers++] = id;
  }
}

int stk__journal_parse(const char *text, size_t len, stk__journal *j, char *err,
                       size_t errlen) {
  memset(j, 0, sizeof(*j));
  cursor c = {text, text, text + len, 0, err, errlen};
  if (len > STK_JOURNAL_MAX_BYTES)
    return stk__errf(err, errlen, -1, "larger than %u bytes", STK_JOURNAL_MAX_BYTES);
  return parse_body(&c, j);
}

void stk__journal_free(stk__journal *j) {
  if (!j) return;
  free(j->job_name);
  free(j->joined);
  free(j->finished);
  free(j->reason);
  for (size_t i = 0; i < j->nworkers; i++) free(j->worker_ids[i]);
  free(j->worker_ids);
  memset(j, 0, sizeof(*j));
}

/* ---- The state directory ------------------------------------------------ */

struct stk__state_dir {
  char *path;
  int dirfd, lockfd;
};

const char *stk__state_dir_path(const stk__state_dir *d) { return d ? d->path : ""; }

void stk__state_dir_close(stk__state_dir *d) {
  if (!d) return;
  if (d->lockfd >= 0) close(d->lockfd); /* releases the flock */
  if (d->dirfd >= 0) close(d->dirfd);
  free(d->path);
  free(d);
}

int stk__state_dir_open(const char *path, stk__state_dir **out, char *err,
                        size_t errlen) {
  *out = NULL;
  if (!path || !*path) return stk__errf(err, errlen, -1, "empty state dir path");
  if (mkdir(path, 0700) != 0 && errno != EEXIST)
    return stk__errf(err, errlen, -1, "cannot create state dir %s: %s", path,
                     strerror(errno));
  stk__state_dir *d = calloc(1, sizeof(*d));
  if (!d || !(d->path = strdup(path))) {
    free(d);
    return stk__errf(err, errlen, -1, "out of memory");
  }
  d->lockfd = -1;
  /* The directory itself, not a symbolic link to one; then it must be ours
   * and writable by nobody else (others could plant or swap the journal). */
  d->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (d->dirfd < 0) {
    int e = errno;
    struct stat ls; /* O_NOFOLLOW on a link says ELOOP, or ENOTDIR with O_DIRECTORY */
    int link =
        e == ELOOP || (e == ENOTDIR && lstat(path, &ls) == 0 && S_ISLNK(ls.st_mode));
    stk__errf(err, errlen, -1, "cannot open state dir %s: %s", path,
              link ? "it is a symbolic link (give the directory itself)" : strerror(e));
    goto fail;
  }
  struct stat st;
  if (fstat(d->dirfd, &st) != 0) {
    stk__errf(err, errlen, -1, "cannot stat state dir %s: %s", path, strerror(errno));
    goto fail;
  }
  if (st.st_uid != geteuid() || (st.st_mode & 022)) {
    stk__errf(
        err, errlen, -1,
        "state dir %s %s (mode %04o, owner uid %u): it must belong to this user "
        "(uid %u) and be writable by nobody else (chmod 700 it)",
        path,
        st.st_uid != geteuid() ? "belongs to another user" : "is writable by others",
        (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, (unsigned)geteuid());
    goto fail;
  }
  d->lockfd =
      openat(d->dirfd, LOCK_FILE, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (d->lockfd < 0) {
    stk__errf(err, errlen, -1, "cannot open %s/" LOCK_FILE ": %s", path,
              errno == ELOOP ? "it is a symbolic link" : strerror(errno));
    goto fail;
  }
  if (flock(d->lockfd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      stk__errf(err, errlen, -1,
                "state dir %s is in use by another running stoker-coordinator "
                "(its " LOCK_FILE " file is locked)",
                path);
    else
      stk__errf(err, errlen, -1, "cannot lock %s/" LOCK_FILE ": %s", path,
                strerror(errno));
    goto fail;
  }
  *out = d;
  return 0;
fail:
  stk__state_dir_close(d);
  return -1;
}

int stk__state_dir_read(stk__state_dir *d, char **text, size_t *len, char *err,
                        size_t errlen) {
  *text = NULL;
  *len = 0;
  int fd = openat(d->dirfd, STATE_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    return stk__errf(
        err, errlen, -1, "cannot open %s/" STATE_FILE ": %s", d->path,
        errno == ELOOP ? "it is a symbolic link (refused)" : strerror(errno));
  }
  struct stat st;
  char *t = NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    stk__errf(err, errlen, -1, "%s/" STATE_FILE " is not a regular file", d->path);
    goto fail;
  }
  if ((uint64_t)st.st_size > STK_JOURNAL_MAX_BYTES) {
    stk__errf(err, errlen, -1, "%s/" STATE_FILE " has %lld bytes (at most %u)", d->path,
              (long long)st.st_size, STK_JOURNAL_MAX_BYTES);
    goto fail;
  }
  /* Read to the end (one byte past the limit at most), not trusting st_size. */
  size_t cap = (size_t)st.st_size + 1, n = 0;
  if (!(t = malloc(cap + 1))) {
    stk__errf(err, errlen, -1, "out of memory");
    goto fail;
  }
  for (;;) {
    if (n == cap) {
      if (cap > STK_JOURNAL_MAX_BYTES) {
        stk__errf(err, errlen, -1, "%s/" STATE_FILE " is larger than %u bytes", d->path,
                  STK_JOURNAL_MAX_BYTES);
        goto fail;
      }
      char *g = realloc(t, cap * 2 + 1);
      if (!g) {
        stk__errf(err, errlen, -1, "out of memory");
        goto fail;
      }
      t = g, cap *= 2;
    }
    ssize_t r = read(fd, t + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      stk__errf(err, errlen, -1, "cannot read %s/" STATE_FILE ": %s", d->path,
                strerror(errno));
      goto fail;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  t[n] = 0;
  *text = t;
  *len = n;
  return 1;
fail:
  free(t);
  close(fd);
  return -1;
}

/* Create the temp file exclusively, never through a symbolic link; a
 * stale regular file of an earlier process with our pid is replaced. */
static int create_tmp(stk__state_dir *d, const char *name, char *err, size_t errlen) {
  for (int attempt = 0; attempt < 2; attempt++) {
    int fd = openat(d->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0600);
    if (fd >= 0) return fd;
    int e = errno;
    struct stat st;
    if (e == EEXIST && attempt == 0 &&
        fstatat(d->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        unlinkat(d->dirfd, name, 0) == 0)
      continue;
    int link =
        fstatat(d->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
    return stk__errf(err, errlen, -1,
                     "cannot create %s/%s: %s; refusing to write through an existing "
                     "file or symbolic link",
                     d->path, name,
                     link ? "a symbolic link is there"
                          : (e == EEXIST ? "something else is there" : strerror(e)));
  }
  return -1;
}

int stk__state_dir_write(stk__state_dir *d, const char *text, size_t len, char *err,
                         size_t errlen) {
  char tmp[64];
  snprintf(tmp, sizeof(tmp), STATE_FILE ".tmp.%d", (int)getpid());
  int fd = create_tmp(d, tmp, err, errlen);
  if (fd < 0) return -1;
  size_t off = 0;
  errno = 0;
  while (off < len) {
    ssize_t w = write(fd, text + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += (size_t)w;
  }
  int ok = off == len && fsync(fd) == 0;
  int e = errno;
  ok = close(fd) == 0 && ok;
  if (!ok) {
    unlinkat(d->dirfd, tmp, 0);
    return stk__errf(err, errlen, -1, "cannot write %s/%s: %s", d->path, tmp,
                     strerror(e ? e : EIO));
  }
  /* renameat replaces a symbolic link named "state" itself, never its target */
  if (renameat(d->dirfd, tmp, d->dirfd, STATE_FILE) != 0) {
    e = errno;
    unlinkat(d->dirfd, tmp, 0);
    return stk__errf(err, errlen, -1, "cannot rename %s/%s to " STATE_FILE ": %s",
                     d->path, tmp, strerror(e));
  }
  if (fsync(d->dirfd) != 0)
    return stk__errf(err, errlen, -1, "cannot fsync state dir %s: %s", d->path,
                     strerror(errno));
  return 0;
}
