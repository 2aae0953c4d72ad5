/* prepare.c - `stoker-dataset prepare`: a lossless transcode of an
 * ImageFolder or tar-shard dataset into the same layout with JPEG restart markers every
 * few MCUs, so the worker can cut the part of the entropy-coded data a
 * crop needs (augment/decode.c) instead of Huffman-decoding the whole
 * image above and beside it.
 *
 * Each JPEG goes through libjpeg-turbo's transcoding API
 * (jpeg_read_coefficients / jpeg_write_coefficients): the DCT coefficients
 * are kept as they are (no pixel changes), progressive files become
 * sequential ones, Huffman tables are optimized, APPn/COM markers are
 * copied. The restart interval is the largest N in [2, max_interval]
 * that divides the MCUs per row, else 1 (a row no longer than
 * max_interval: the row). Every output is decoded and compared with its input's pixels
 * before it is renamed into place; files that are not JPEG, or that libjpeg cannot
 * transcode, are copied unchanged. In `*.tar` shards the .jpg/.jpeg members are
 * transcoded the same way, members kept in order with their headers (but for the size).
 * An output that exists and decodes to its input's pixels is kept (the run resumes). Not
 * a library: errors go to stderr.
 *
 * Files it writes (each output's temporary, the .stoker-prepared marker)
 * are created O_EXCL | O_NOFOLLOW under a fresh name and renamed into
 * place, so a link planted in the destination is replaced, never written
 * through. Tar members are streamed in TAR_CHUNK pieces; only JPEG members
 * up to TAR_INMEM_MAX bytes (the ones it transcodes) are held in memory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jerror.h>
#include <jpeglib.h>

#include "prepare.h"

typedef struct jerr {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
} jerr;

static void on_error(j_common_ptr c) { longjmp(((jerr *)c->err)->jb, 1); }
static void on_message(j_common_ptr c, int level) {
  /* a warning means corrupt data: refuse to transcode such a file */
  if (level < 0 && c->err->msg_code != JWRN_EXTRANEOUS_DATA)
    longjmp(((jerr *)c->err)->jb, 1);
}

static int read_file(const char *path, uint8_t **data, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  struct stat st;
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
    fclose(f);
    return -1;
  }
  *len = (size_t)st.st_size;
  *data = malloc(*len ? *len : 1);
  int ok = *data && fread(*data, 1, *len, f) == *len;
  fclose(f);
  if (!ok) free(*data), *data = NULL;
  return ok ? 0 : -1;
}

/* Decode data fully (libjpeg defaults, native color space) into *px
 * (malloc'd). 0, or -1 when it does not decode cleanly. */
static int decode_px(const uint8_t *data, size_t len, uint8_t **px, size_t *n) {
  struct jpeg_decompress_struct c;
  jerr e;
  *px = NULL;
  c.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = on_error, e.pub.emit_message = on_message;
  if (setjmp(e.jb)) {
    jpeg_destroy_decompress(&c);
    free(*px), *px = NULL;
    return -1;
  }
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, data, (unsigned long)len);
  jpeg_read_header(&c, TRUE);
  c.out_color_space = c.jpeg_color_space; /* no color conversion: compare as stored */
  jpeg_start_decompress(&c);
  size_t stride = (size_t)c.output_width * (size_t)c.output_components;
  *n = stride * c.output_height;
  *px = malloc(*n ? *n : 1);
  if (!*px) longjmp(e.jb, 1);
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = *px + (size_t)c.output_scanline * stride;
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  return 0;
}

static int same_pixels(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
  uint8_t *pa, *pb;
  size_t na, nb;
  if (decode_px(a, alen, &pa, &na)) return 0;
  if (decode_px(b, blen, &pb, &nb)) {
    free(pa);
    return 0;
  }
  int same = na == nb && memcmp(pa, pb, na) == 0;
  free(pa), free(pb);
  return same;
}

unsigned stk__prepare_interval(unsigned mcus_per_row, unsigned max_interval) {
  if (mcus_per_row <= max_interval) return mcus_per_row;
  for (unsigned d = max_interval; d >= 2; d--)
    if (mcus_per_row % d == 0) return d;
  /* No divisor in [2, max_interval] (a prime row, or 35 = 5 x 7 under 4):
   * every MCU. A whole row would make the worker Huffman-decode the full
   * width of every row a crop touches; on ~500x375 photos a third of the
   * files are such rows (29 or 31 MCUs), and markers at every MCU cost them
   * about 10% more bytes. */
  return 1;
}

int stk__prepare_jpeg(const uint8_t *in, size_t inlen, unsigned max_interval,
                      uint8_t **out, size_t *outlen) {
  struct jpeg_decompress_struct s;
  struct jpeg_compress_struct d;
  jerr es, ed;
  unsigned char *buf = NULL;
  unsigned long blen = 0;
  *out = NULL, *outlen = 0;
  s.err = jpeg_std_error(&es.pub);
  es.pub.error_exit = on_error, es.pub.emit_message = on_message;
  d.err = jpeg_std_error(&ed.pub);
  ed.pub.error_exit = on_error;
  int have_d = 0;
  if (setjmp(es.jb) || setjmp(ed.jb)) {
    if (have_d) jpeg_destroy_compress(&d);
    jpeg_destroy_decompress(&s);
    free(buf);
    return -1;
  }
  jpeg_create_decompress(&s);
  jpeg_mem_src(&s, in, (unsigned long)inlen);
  for (int m = 0; m < 16; m++) jpeg_save_markers(&s, JPEG_APP0 + m, 0xFFFF);
  jpeg_save_markers(&s, JPEG_COM, 0xFFFF);
  jpeg_read_header(&s, TRUE);
  jvirt_barray_ptr *coef = jpeg_read_coefficients(&s);
  jpeg_create_compress(&d);
  have_d = 1;
  jpeg_copy_critical_parameters(&s, &d);
  d.optimize_coding = TRUE;
  unsigned mcus;
  if (s.num_components == 1) mcus = (unsigned)((s.image_width + 7) / 8);
  else {
    int maxh = 1;
    for (int i = 0; i < s.num_components; i++)
      if (s.comp_info[i].h_samp_factor > maxh) maxh = s.comp_info[i].h_samp_factor;
    unsigned mw = 8u * (unsigned)maxh;
    mcus = (unsigned)((s.image_width + mw - 1) / mw);
  }
  d.restart_interval = stk__prepare_interval(mcus, max_interval);
  jpeg_mem_dest(&d, &buf, &blen);
  jpeg_write_coefficients(&d, coef);
  /* the APPn and COM markers, but for the JFIF/Adobe ones libjpeg writes */
  for (jpeg_saved_marker_ptr m = s.marker_list; m; m = m->next) {
    if (d.write_JFIF_header && m->marker == JPEG_APP0 && m->data_length >= 5 &&
        !memcmp(m->data, "JFIF", 5))
      continue;
    if (d.write_Adobe_marker && m->marker == JPEG_APP0 + 14 && m->data_length >= 5 &&
        !memcmp(m->data, "Adobe", 5))
      continue;
    jpeg_write_marker(&d, m->marker, m->data, m->data_length);
  }
  jpeg_finish_compress(&d);
  jpeg_destroy_compress(&d);
  jpeg_finish_decompress(&s);
  jpeg_destroy_decompress(&s);
  *out = buf, *outlen = blen;
  return 0;
}

/* ---- the directory walk and the workers ------------------------------- */

typedef struct job {
  const char *src, *dst;
  unsigned interval;
  char **rel; /* files relative to src */
  size_t n, cap;
  _Atomic size_t next, done, transcoded, kept, copied, failed;
  _Atomic uint64_t bytes_in, bytes_out;
} job;

static int add_rel(job *j, const char *rel) {
  if (j->n == j->cap) {
    size_t cap = j->cap ? j->cap * 2 : 1024;
    char **p = realloc(j->rel, cap * sizeof(*p));
    if (!p) return -1;
    j->rel = p, j->cap = cap;
  }
  return (j->rel[j->n++] = strdup(rel)) ? 0 : -1;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file under src/rel (hidden entries skipped). */
static int walk(job *j, const char *rel) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%s", j->src, rel);
  DIR *dir = opendir(path);
  if (!dir) {
    fprintf(stderr, "stoker-dataset prepare: %s: %s\n", path, strerror(errno));
    return -1;
  }
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(dir))) {
    if (e->d_name[0] == '.') continue;
    char sub[PATH_MAX], full[PATH_MAX + 300];
    snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", e->d_name);
    snprintf(full, sizeof(full), "%s/%s", j->src, sub);
    struct stat st;
    if (lstat(full, &st)) continue;
    if (S_ISDIR(st.st_mode)) rc = walk(j, sub);
    else if (S_ISREG(st.st_mode)) rc = add_rel(j, sub);
  }
  closedir(dir);
  return rc;
}

static int mkdirs_for(const char *path) {
  char p[PATH_MAX + 300];
  snprintf(p, sizeof(p), "%s", path);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      if (mkdir(p, 0755) && errno != EEXIST) return -1;
      *s = '/';
    }
  return 0;
}

/* A new file beside path to write it through: tmp gets its name (tmplen
 * bytes), created O_EXCL | O_NOFOLLOW (nothing that exists there, a
 * planted link included, is opened or followed; a taken name is skipped
 * for the next). The stream, or NULL with errno. */
static FILE *create_tmp(const char *path, char *tmp, size_t tmplen) {
  static _Atomic unsigned long seq;
  for (int tries = 0; tries < 100; tries++) {
    snprintf(tmp, tmplen, "%s.tmp%ld.%lu", path, (long)getpid(),
             atomic_fetch_add(&seq, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
      int e = errno;
      close(fd), unlink(tmp);
      errno = e;
    }
    return f;
  }
  errno = EEXIST;
  return NULL;
}

/* Close f (from create_tmp's tmp) and, when ok, rename tmp to path (a link
 * at path is replaced, not followed); else, or on an error, remove tmp.
 * 0 or -1. */
static int finish_tmp(FILE *f, const char *tmp, const char *path, int ok) {
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path)) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

static int write_file(const char *path, const uint8_t *data, size_t len) {
  char tmp[PATH_MAX + 360];
  FILE *f = create_tmp(path, tmp, sizeof(tmp));
  if (!f) return -1;
  return finish_tmp(f, tmp, path, fwrite(data, 1, len, f) == len);
}

static int is_jpeg(const uint8_t *p, size_t n) {
  return n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF;
}

/* ---- tar shards --------------------------------------------------------- */

static int tar_name(const char *rel) {
  size_t n = strlen(rel);
  return n > 4 && !strcmp(rel + n - 4, ".tar");
}

/* Tar members are copied and compared in pieces of this size; a JPEG
 * member up to TAR_INMEM_MAX bytes is read whole to be transcoded, a
 * larger one is copied as it is. */
#define TAR_CHUNK     ((size_t)1 << 20)
#define TAR_INMEM_MAX ((size_t)64 << 20)

/* Read one 512-byte header from f, its data's size into *len: 1 with a
 * member (f at its data), 0 at the end (zero block or EOF), -1 on a
 * damaged or unsupported header. */
static int tar_head(FILE *f, uint8_t h[512], size_t *len) {
  size_t got = fread(h, 1, 512, f);
  if (got == 0) return 0;
  if (got != 512) return -1;
  int zero = 1;
  for (int i = 0; i < 512 && zero; i++) zero = h[i] == 0;
  if (zero) return 0;
  if (h[124] & 0x80) return -1; /* base-256 sizes: not written by tar for < 8 GiB */
  char oct[13];
  memcpy(oct, h + 124, 12);
  oct[12] = 0;
  char *end;
  unsigned long long sz = strtoull(oct, &end, 8);
  if (end == oct || sz > (1ull << 33)) return -1;
  *len = (size_t)sz;
  return 1;
}

static size_t tar_padded(size_t len) { return (len + 511) / 512 * 512; }

/* A member's data of len bytes (and its padding) from f, malloc'd into
 * *data. 0, or -1 (short read, no memory; *data NULL). */
static int tar_read(FILE *f, size_t len, uint8_t **data) {
  size_t padded = tar_padded(len);
  *data = malloc(padded ? padded : 1);
  if (!*data || fread(*data, 1, padded, f) != padded) {
    free(*data), *data = NULL;
    return -1;
  }
  return 0;
}

/* A regular member whose name ends in .jpg/.jpeg (any case). */
static int tar_jpeg_member(const uint8_t h[512]) {
  char name[101];
  memcpy(name, h, 100);
  name[100] = 0;
  size_t n = strlen(name);
  if (h[156] != '0' && h[156] != 0) return 0;
  return (n > 4 && !strcasecmp(name + n - 4, ".jpg")) ||
         (n > 5 && !strcasecmp(name + n - 5, ".jpeg"));
}

/* Whether the member whose header is h (data len bytes) is read whole:
 * a JPEG member no larger than TAR_INMEM_MAX. */
static int tar_whole(const uint8_t h[512], size_t len) {
  return tar_jpeg_member(h) && len <= TAR_INMEM_MAX;
}

/* Write header h with size len (checksum recomputed). */
static int tar_put_head(FILE *f, uint8_t h[512], size_t len) {
  snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)len);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);
  h[155] = ' ';
  return fwrite(h, 1, 512, f) == 512 ? 0 : -1;
}

/* Write header h with size len and data, padded. */
static int tar_put(FILE *f, uint8_t h[512], const uint8_t *data, size_t len) {
  static const uint8_t zero[512];
  size_t pad = tar_padded(len) - len;
  return tar_put_head(f, h, len) == 0 && fwrite(data, 1, len, f) == len &&
                 fwrite(zero, 1, pad, f) == pad
             ? 0
             : -1;
}

/* Copy n bytes from in to out through buf (TAR_CHUNK bytes). 0 or -1. */
static int tar_copy(FILE *in, FILE *out, size_t n, uint8_t *buf) {
  while (n) {
    size_t k = n < TAR_CHUNK ? n : TAR_CHUNK;
    if (fread(buf, 1, k, in) != k || fwrite(buf, 1, k, out) != k) return -1;
    n -= k;
  }
  return 0;
}

/* Whether the next n bytes of a and b are equal (buffers of TAR_CHUNK). */
static int tar_same(FILE *a, FILE *b, size_t n, uint8_t *ba, uint8_t *bb) {
  while (n) {
    size_t k = n < TAR_CHUNK ? n : TAR_CHUNK;
    if (fread(ba, 1, k, a) != k || fread(bb, 1, k, b) != k || memcmp(ba, bb, k)) return 0;
    n -= k;
  }
  return 1;
}

/* dst (if it exists) holds src's members in order, each JPEG member
 * decoding to the same pixels and the rest identical (compared in
 * pieces). */
static int tar_verify(const char *sp, const char *dp) {
  FILE *a = fopen(sp, "rb"), *b = fopen(dp, "rb");
  uint8_t *ba = malloc(TAR_CHUNK), *bb = malloc(TAR_CHUNK);
  int ok = a && b && ba && bb;
  while (ok) {
    uint8_t ha[512], hb[512], *da = NULL, *db = NULL;
    size_t la = 0, lb = 0;
    int ra = tar_head(a, ha, &la), rb = tar_head(b, hb, &lb);
    ok = ra == rb && ra >= 0;
    if (ok && ra == 1) {
      ok = !memcmp(ha, hb, 100) && ha[156] == hb[156];
      if (ok && tar_whole(ha, la) && tar_whole(hb, lb)) {
        ok = tar_read(a, la, &da) == 0 && tar_read(b, lb, &db) == 0;
        if (ok && is_jpeg(da, la))
          ok = same_pixels(da, la, db, lb) || (la == lb && !memcmp(da, db, la));
        else if (ok) ok = la == lb && !memcmp(da, db, la);
      } else if (ok) {
        ok = la == lb && tar_same(a, b, tar_padded(la), ba, bb);
      }
    }
    free(da), free(db);
    if (ra != 1) break;
  }
  free(ba), free(bb);
  if (a) fclose(a);
  if (b) fclose(b);
  return ok;
}

/* Transcode the JPEG members of tar sp into dp (via a temp file):
 * members in the same order, headers kept but for their size; the other
 * members (and JPEG ones over TAR_INMEM_MAX) copied in pieces. 0 or -1. */
static int tar_prepare(job *j, const char *sp, const char *dp) {
  char tmp[PATH_MAX + 360];
  FILE *in = fopen(sp, "rb"), *out = create_tmp(dp, tmp, sizeof(tmp));
  uint8_t *buf = malloc(TAR_CHUNK);
  int rc = in && out && buf ? 0 : -1;
  while (rc == 0) {
    uint8_t h[512], *d = NULL, *t = NULL;
    size_t len = 0, tlen = 0;
    int r = tar_head(in, h, &len);
    if (r < 0) rc = -1;
    if (r != 1) break;
    if (!tar_whole(h, len)) {
      rc = tar_put_head(out, h, len) || tar_copy(in, out, tar_padded(len), buf) ? -1 : 0;
      continue;
    }
    if (tar_read(in, len, &d)) {
      rc = -1;
      break;
    }
    const uint8_t *w = d;
    size_t wlen = len;
    if (is_jpeg(d, len) && stk__prepare_jpeg(d, len, j->interval, &t, &tlen) == 0 &&
        same_pixels(d, len, t, tlen))
      w = t, wlen = tlen;
    rc = tar_put(out, h, w, wlen);
    free(d), free(t);
  }
  free(buf);
  static const uint8_t zero[1024];
  if (rc == 0 && fwrite(zero, 1, sizeof(zero), out) != sizeof(zero)) rc = -1;
  if (in) fclose(in);
  if (out) return finish_tmp(out, tmp, dp, rc == 0);
  return -1;
}

static void one_tar(job *j, const char *rel) {
  char sp[PATH_MAX + 300], dp[PATH_MAX + 300];
  snprintf(sp, sizeof(sp), "%s/%s", j->src, rel);
  snprintf(dp, sizeof(dp), "%s/%s", j->dst, rel);
  struct stat st;
  if (stat(sp, &st) == 0) atomic_fetch_add(&j->bytes_in, (uint64_t)st.st_size);
  if (access(dp, F_OK) == 0 && tar_verify(sp, dp)) {
    atomic_fetch_add(&j->kept, 1);
  } else if (mkdirs_for(dp) || tar_prepare(j, sp, dp)) {
    fprintf(stderr, "\nstoker-dataset prepare: %s: cannot transcode into %s\n", sp, dp);
    atomic_fetch_add(&j->failed, 1);
    return;
  } else {
    atomic_fetch_add(&j->transcoded, 1);
  }
  if (stat(dp, &st) == 0) atomic_fetch_add(&j->bytes_out, (uint64_t)st.st_size);
}

static void one_file(job *j, const char *rel) {
  if (tar_name(rel)) {
    one_tar(j, rel);
    return;
  }
  char sp[PATH_MAX + 300], dp[PATH_MAX + 300];
  snprintf(sp, sizeof(sp), "%s/%s", j->src, rel);
  snprintf(dp, sizeof(dp), "%s/%s", j->dst, rel);
  uint8_t *in = NULL, *old = NULL, *out = NULL;
  size_t inlen, oldlen, outlen;
  if (read_file(sp, &in, &inlen)) {
    fprintf(stderr, "\nstoker-dataset prepare: %s: cannot read\n", sp);
    atomic_fetch_add(&j->failed, 1);
    return;
  }
  atomic_fetch_add(&j->bytes_in, inlen);
  int jpeg = is_jpeg(in, inlen);
  if (read_file(dp, &old, &oldlen) == 0 &&
      (jpeg ? same_pixels(in, inlen, old, oldlen)
            : oldlen == inlen && !memcmp(in, old, inlen))) {
    atomic_fetch_add(&j->kept, 1);
    atomic_fetch_add(&j->bytes_out, oldlen);
    free(in), free(old);
    return;
  }
  free(old);
  const uint8_t *w = in;
  size_t wlen = inlen;
  if (jpeg && stk__prepare_jpeg(in, inlen, j->interval, &out, &outlen) == 0 &&
      same_pixels(in, inlen, out, outlen)) {
    w = out, wlen = outlen;
    atomic_fetch_add(&j->transcoded, 1);
  } else {
    atomic_fetch_add(&j->copied, 1);
  }
  if (mkdirs_for(dp) || write_file(dp, w, wlen)) {
    fprintf(stderr, "\nstoker-dataset prepare: %s: %s\n", dp, strerror(errno));
    atomic_fetch_add(&j->failed, 1);
  } else {
    atomic_fetch_add(&j->bytes_out, wlen);
  }
  free(in), free(out);
}

static void *worker(void *arg) {
  job *j = arg;
  size_t i;
  while ((i = atomic_fetch_add(&j->next, 1)) < j->n) {
    one_file(j, j->rel[i]);
    atomic_fetch_add(&j->done, 1);
  }
  return NULL;
}

static void progress(job *j, int final) {
  fprintf(stderr,
          "\rprepare: %zu/%zu files (%zu transcoded, %zu kept, %zu copied, %zu failed), "
          "%.1f MB -> %.1f MB%s",
          atomic_load(&j->done), j->n, atomic_load(&j->transcoded), atomic_load(&j->kept),
          atomic_load(&j->copied), atomic_load(&j->failed),
          (double)atomic_load(&j->bytes_in) / 1e6,
          (double)atomic_load(&j->bytes_out) / 1e6, final ? "\n" : "");
}

int stk__prepare_dir(const char *src, const char *dst, unsigned interval,
                     unsigned threads) {
  job j;
  memset(&j, 0, sizeof(j));
  j.src = src, j.dst = dst, j.interval = interval ? interval : 8;
  if (mkdir(dst, 0755) && errno != EEXIST) {
    fprintf(stderr, "stoker-dataset prepare: %s: %s\n", dst, strerror(errno));
    return -1;
  }
  int rc = walk(&j, "");
  if (rc == 0) {
    qsort(j.rel, j.n, sizeof(*j.rel), cmp_str);
    if (threads < 1) threads = 1;
    if (threads > 256) threads = 256;
    pthread_t tid[256];
    unsigned started = 0;
    for (; started < threads; started++)
      if (pthread_create(&tid[started], NULL, worker, &j)) break;
    if (started == 0) worker(&j);
    int tty = isatty(2);
    while (started && atomic_load(&j.done) < j.n) {
      if (tty) progress(&j, 0);
      struct timespec ts = {0, 200 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    for (unsigned t = 0; t < started; t++) pthread_join(tid[t], NULL);
    progress(&j, 1);
    rc = atomic_load(&j.failed) ? -1 : 0;
  }
  if (rc == 0) {
    char mark[PATH_MAX], tmp[PATH_MAX + 360];
    snprintf(mark, sizeof(mark), "%s/.stoker-prepared", dst);
    FILE *f = create_tmp(mark, tmp, sizeof(tmp));
    if (!f ||
        finish_tmp(
            f, tmp, mark,
            fprintf(f, "restart-interval-max %u\nfiles %zu\ntranscoded %zu\ncopied %zu\n",
                    j.interval, j.n, atomic_load(&j.transcoded) + atomic_load(&j.kept),
                    atomic_load(&j.copied)) > 0)) {
      fprintf(stderr, "stoker-dataset prepare: %s: %s\n", mark, strerror(errno));
      rc = -1;
    }
  }
  for (size_t i = 0; i < j.n; i++) free(j.rel[i]);
  free(j.rel);
  return rc;
}
