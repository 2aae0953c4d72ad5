/* imgsrc.h - what imgsrc.c offers the two image file sources (JPEG and
 * PNG files), ImageFolder (source_folder.c) and tar shards (source_tar.c): the file index
 * they fill, the dataset directory resolved under the data root, and the builder (batched
 * reads, the image pipeline, substitution of bad samples) that both plug into the source
 * table. Private to augment/ (and its tests).
 */
#ifndef STOKER_AUGMENT_IMGSRC_H
#define STOKER_AUGMENT_IMGSRC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "augment_internal.h"

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
/* Close j->dirfd and free j with its index (NULL is fine). */
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

/* The source ops of ImageFolder and tar (STK__IMG_SOURCE_OPS), as
 * stk__source_ops documents them: a builder's state (I/O ring, decoder,
 * the image pipeline's runner, file buffers; STK_OK, STK_NO_MEMORY, or the
 * pipeline's or the I/O setup's error with err), freeing it (b->impl may
 * be NULL), building a batch, closing the index, counting bad samples.
 * One builder per thread; bad-sample marks are atomic. */
int stk__img_builder_init(stk_builder *b, char *err, size_t errlen);
/* Descriptors an image builder holds now and at most so far (shards, files
 * of the current read window; not the io_uring ring). For tests. */
void stk__img_builder_fds(const stk_builder *b, unsigned *now, unsigned *peak);
void stk__img_builder_free(stk_builder *b);
int stk__img_build(stk_builder *b, uint64_t epoch, unsigned char *buf,
                   stk_build_info *info);
void stk__img_close(stk_dataset *ds);
uint64_t stk__img_bad_samples(const stk_dataset *ds);
/* Sample i's label, from the index (batch.c writes it for the sample
 * that filled each slot). */
int64_t stk__img_label(const stk_builder *b, uint64_t i);

/* The ops table of an image file source: its own open, the rest shared. Each
 * source file defines its table with it (stk__imagefolder_source in
 * source_folder.c, stk__tar_source in source_tar.c). */
#define STK__IMG_SOURCE_OPS(name, open_fn)                                           \
  {                                                                                  \
    (name), (open_fn), stk__img_close, stk__img_builder_init, stk__img_builder_free, \
        stk__img_build, stk__img_bad_samples, stk__img_label                         \
  }

#endif
