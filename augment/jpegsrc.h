/* jpegsrc.h - what the JPEG file sources share inside augment/: the I/O
 * layer (io.c), the ROI decoder (decode.c), the resampling and output ops
 * (ops.c), the common file index and the per-builder pipeline (jpegsrc.c)
 * that ImageFolder (source_folder.c) and tar shards (source_tar.c) plug
 * into. Nothing outside augment/ (and its tests) may include it.
 */
#ifndef STOKER_AUGMENT_JPEGSRC_H
#define STOKER_AUGMENT_JPEGSRC_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#include "internal.h"

/* ---- io.c: batched reads, io_uring or pread ---------------------------- */

enum { STK__IO_PREAD = 1, STK__IO_URING = 2 };

typedef struct stk__io {
  int mode;     /* STK__IO_PREAD or STK__IO_URING, as in use */
  int fallback; /* 1: auto mode wanted io_uring and could not */
  unsigned depth;
  struct io_uring *ring; /* NULL in pread mode */
  uint64_t uring_reads, pread_reads, errors;
} stk__io;

typedef struct stk__io_req {
  int fd;
  uint64_t off;
  size_t len;
  void *buf;
  ssize_t res; /* out: bytes read (short at EOF) or -errno */
} stk__io_req;

/* mode: 0 auto, 1 pread, 2 io_uring (STK_UNSUPPORTED if unavailable). */
int stk__io_init(stk__io *io, int mode, unsigned depth, char *err, size_t errlen);
void stk__io_free(stk__io *io);
/* Read every request; never fails as a whole, each request has its res. */
void stk__io_read(stk__io *io, stk__io_req *reqs, size_t n);

/* ---- decode.c: libjpeg-turbo with region-of-interest decoding ---------- */

typedef struct stk__decoder stk__decoder;

/* The decoded part of an image: RGB rows, and where they sit. */
typedef struct stk__roi {
  const uint8_t *px; /* w*h*3 bytes, row stride w*3 */
  uint32_t w, h;
  double x0, y0; /* origin of px in decoded (scaled) pixel coordinates */
  double sx, sy; /* decoded pixels per original pixel (DCT scaling) */
  int scale_num; /* the scale_num/8 used */
} stk__roi;

int stk__decoder_create(stk__decoder **out, const stk_limits *lim);
void stk__decoder_destroy(stk__decoder *d);
/* Read the header of data[0..len): fills *w, *h. Checks size, dimension
 * and pixel limits. STK_OK, STK_CORRUPT or STK_LIMIT with why filled. The
 * decoder stays positioned for stk__decoder_roi or is reset on failure. */
int stk__decoder_header(stk__decoder *d, const uint8_t *data, size_t len, uint32_t *w,
                        uint32_t *h, char *why, size_t whylen);
/* Decode the box [bx0,bx1)x[by0,by1) (original pixels) plus `margin`
 * decoded pixels around it, at the smallest DCT scale that keeps the box
 * at least ow x oh (scale_max caps it; 8 = full size). Only the rows and
 * columns the box needs are decoded. fast: SIMD-friendly scales only, the
 * fast integer IDCT and merged upsampling (the train pipeline); else the
 * libjpeg defaults PIL uses (exact IDCT, fancy upsampling). The result
 * stays valid until the next call on d. Always leaves the decoder
 * reusable. */
int stk__decoder_roi(stk__decoder *d, double bx0, double by0, double bx1, double by1,
                     uint32_t ow, uint32_t oh, int margin, int scale_max, int fast,
                     stk__roi *roi, char *why, size_t whylen);
/* Decode the whole image at full size (the benchmark's reference). */
int stk__decoder_full(stk__decoder *d, stk__roi *roi, char *why, size_t whylen);

/* ---- ops.c: crop-box sampling, resampling, color, output --------------- */

typedef struct stk__box {
  int32_t x, y, w, h;
} stk__box;

/* torchvision RandomResizedCrop.get_params with draws from r. */
stk__box stk__rrc_box(uint32_t W, uint32_t H, double scale_min, double scale_max,
                      double ratio_min, double ratio_max, stk_rng *r);

/* Grow the malloc'ed buffer *p of *cap bytes to at least need (doubling,
 * contents kept): 0, or -1 out of memory (*p untouched). The one buffer
 * rule of augment/: buffers only grow, so a steady state allocates
 * nothing. */
int stk__grow(void **p, size_t *cap, size_t need);

/* Scratch that resampling keeps between samples (no allocation per sample
 * in steady state: buffers only grow). */
typedef struct stk__scratch {
  int32_t *xb, *yb; /* per output column/row: first tap, tap count */
  float *xw, *yw;   /* weights, ksize per output */
  float *tmp;       /* horizontal pass */
  float *img;       /* oh*ow*3 resampled image, 0..255 */
  uint8_t *img8;    /* the same in 8-bit levels (stk__resample's out8) */
  size_t xcap, ycap, tcap, icap, i8cap;
} stk__scratch;
void stk__scratch_free(stk__scratch *s);

/* Antialiased bilinear (triangle) resampling in PIL's manner of the box
 * [bx0,bx1)x[by0,by1) of src (sw x sh RGB, coordinates in src pixels)
 * into s->img (oh x ow x 3 floats, 0..255), or, with out8, each row
 * rounded to 8-bit levels (stk__q8) into out8 (oh x ow x 3 bytes) while it
 * is in cache, s->img then holding one row. Taps outside src are dropped;
 * an output pixel with no tap is 0. 0, or -1 out of memory. */
int stk__resample(stk__scratch *s, const uint8_t *src, uint32_t sw, uint32_t sh,
                  double bx0, double by0, double bx1, double by1, uint32_t ow,
                  uint32_t oh, uint8_t *out8);

/* Round a resampled value (>= 0) to the nearest 8-bit level, as the PIL
 * image torchvision resizes would hold it. */
static inline float stk__q8(float v) {
  v = (float)(int)(v + 0.5f);
  return v > 255 ? 255 : v;
}

/* stk__q8 of n values (each >= 0) into u. */
void stk__quant8(uint8_t *restrict u, const float *restrict q, size_t n);

typedef struct stk__post {
  int flip;                      /* mirror horizontally */
  float bright, contrast, satur; /* factors, 1 = unchanged */
  int dtype, layout;
  const float (*norm)[256]; /* stk_normalize_table of the job (float dtypes) */
} stk__post;
/* Whether p changes brightness, contrast or saturation (then the store
 * works on the float image; else it may take stk__resample's 8 bits). */
static inline int stk__post_jitter(const stk__post *p) {
  return p->bright != 1 || p->contrast != 1 || p->satur != 1;
}
/* Quantize s->img to 8 bits (or take img8, the 8-bit levels stk__resample
 * made: only without jitter), apply flip and jitter, write one sample
 * (oh x ow x 3) in p's dtype/layout at out (normalized unless uint8). */
void stk__post_store(stk__scratch *s, uint32_t ow, uint32_t oh, const stk__post *p,
                     const uint8_t *img8, void *out);
uint16_t stk__bf16(float f);

/* ---- ops_chain.c: op chains (pipeline = chain) ------------------------ */

typedef struct stk__chain_run stk__chain_run;
/* The per-builder runner of spec's chain: buffers, and a state of each
 * plugin op (created from ds's loaded plugins). STK_OK, STK_NO_MEMORY or
 * STK_INVALID_ARGUMENT (a plugin refused its arguments) with err. */
int stk__chain_run_create(stk__chain_run **out, const stk_dataset *ds,
                          const stk_job_spec *spec, char *err, size_t errlen);
void stk__chain_run_free(stk__chain_run *r);
/* Run the chain on the image whose header dec has read (W x H), drawing
 * from rng, and write the sample at out in the job's dtype and layout.
 * STK_OK; STK_NO_MEMORY (transient); STK_CORRUPT, STK_LIMIT (the decoder's)
 * or STK_CORRUPT from a plugin op (the sample is bad); why says what. */
int stk__chain_run_sample(stk__chain_run *r, stk__decoder *dec, uint32_t W, uint32_t H,
                          stk_rng *rng, void *out, char *why, size_t whylen);

/* ---- jpegsrc.c: the file index shared by ImageFolder and tar ----------- */

typedef struct stk__jds {
  int kind;             /* STK_SOURCE_IMAGEFOLDER or STK_SOURCE_TAR */
  int dirfd;            /* the dataset directory, resolved under the root */
  char dir[4096];       /* its real path, for messages */
  uint64_t n;           /* samples */
  uint32_t nfiles;      /* folder: one per sample; tar: one per shard */
  char **files;         /* paths relative to dirfd */
  uint32_t *file_of;    /* per sample */
  uint64_t *off, *size; /* per sample: member offset/size (tar), 0 (folder) */
  int64_t *label;
  char **keys; /* tar: member key per sample, NULL for folder */
  uint32_t nclasses;
  _Atomic unsigned char *bad; /* per sample: reported once */
  _Atomic uint64_t nbad;
} stk__jds;

/* Resolve spec->dataset under ds->root (realpath, no escape, symlinks
 * included) into j->dir and open j->dirfd. */
int stk__jds_open_dir(stk_dataset *ds, stk__jds *j, char *err, size_t errlen);
void stk__jds_free(stk__jds *j);
/* Open dirfd/rel read-only, never leaving dirfd nor following symlinks. */
int stk__open_beneath(int dirfd, const char *rel);
/* Fill ds->n and ds->fingerprint from a filled index. */
void stk__jds_finish(stk_dataset *ds, stk__jds *j);

/* 1 when errno value e is transient: it says nothing about the file
 * (EMFILE, ENFILE, EIO, EAGAIN, ENOMEM, EINTR, ENOBUFS, ETIMEDOUT,
 * ESTALE), so the batch fails (STK_UNAVAILABLE, ask again) instead of the
 * sample being substituted; 0 for the rest (ENOENT, EACCES, ELOOP, ...:
 * the sample is bad). Thread-safe. */
int stk__errno_transient(int e);

int stk__jpeg_builder_init(stk_builder *b, char *err, size_t errlen);
/* Descriptors a JPEG builder holds now and at most so far (shards, files
 * of the current read window; not the io_uring ring). For tests. */
void stk__jpeg_builder_fds(const stk_builder *b, unsigned *now, unsigned *peak);
void stk__jpeg_builder_free(stk_builder *b);
int stk__jpeg_build(stk_builder *b, uint64_t epoch, unsigned char *buf,
                    stk_build_info *info);
void stk__jpeg_close(stk_dataset *ds);
uint64_t stk__jpeg_bad_samples(const stk_dataset *ds);

/* The ops table of a JPEG source: its own open, the rest shared. Each
 * source file defines its table with it (stk__imagefolder_source in
 * source_folder.c, stk__tar_source in source_tar.c). */
#define STK__JPEG_SOURCE_OPS(name, open_fn)                                             \
  {                                                                                     \
    (name), (open_fn), stk__jpeg_close, stk__jpeg_builder_init, stk__jpeg_builder_free, \
        stk__jpeg_build, stk__jpeg_bad_samples                                          \
  }

/* Tar index (source_tar.c): scan dir's shards, write the cache. */
int stk__tar_scan(stk__jds *j, int write_cache, char *err, size_t errlen);

#endif
