/* stoker/augment.h - libstoker-augment: dataset sources and the batch
 * builder of stoker.
 *
 * Everything that decides the bytes of a batch lives behind this header:
 * the determinism core (stoker/core.h, included here: job spec, epoch
 * permutation, rank/step addressing, per-sample RNG, batch layout), the
 * dataset sources and the batch builder. It is pure computation plus
 * local file reads: no network. Both the worker (to serve batches) and
 * the client library (to build the reference batch of any address
 * in-process) link it.
 *
 * The rule it implements (docs/architecture.md, "Determinism"):
 *   batch(epoch, rank, step) is a pure function of (job spec, address).
 */
#ifndef STOKER_AUGMENT_H
#define STOKER_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/core.h"
#include "stoker/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CRC-32C (Castagnoli) of buf, continuing from crc (start with 0). Uses
 * SSE4.2 when the CPU has it. Thread-safe. */
STK_EXPORT uint32_t stk_crc32c(uint32_t crc, const void *buf, size_t len);

/* ---- Datasets and the batch builder ------------------------------------ */

/* Limits that protect a worker from hostile files. 0 = default. */
typedef struct stk_limits {
  uint64_t max_file_bytes;    /* default 64 MiB */
  uint64_t max_pixels;        /* default 100 Mpx (width * height) */
  uint32_t max_dimension;     /* default 32768 per side */
  uint32_t max_scans;         /* progressive scans, default 500 */
  uint64_t max_decoder_bytes; /* libjpeg memory cap, default 512 MiB */
  int32_t io_mode;            /* 0 auto (io_uring, else pread), 1 pread, 2 io_uring */
  int32_t reserved0;
  /* Where plugin ops live (a job's `plugin = name` loads DIR/name.so,
   * stoker/op.h); NULL: $STOKER_PLUGIN_DIR; neither: jobs that name a
   * plugin are refused. Only read during stk_dataset_open. */
  const char *plugin_dir;
  /* Where python ops' modules live (directories joined by ':'; a chain's
   * `python(module:function)` imports module from them only); NULL:
   * $STOKER_PYTHON_PATH; neither: jobs with a python op are refused. Only
   * read during stk_dataset_open. */
  const char *python_path;
  uint8_t reserved[48];
} stk_limits;

typedef struct stk_dataset stk_dataset;

/* Open the dataset a spec names. Files are looked up under data_root only
 * (a dataset path that escapes it is STK_INVALID_ARGUMENT); synthetic needs
 * no root (NULL is fine). On success *out owns the index (sample paths,
 * offsets, labels); close with stk_dataset_close. Errors: STK_IO,
 * STK_NOT_FOUND, STK_INVALID_ARGUMENT, STK_CORRUPT (bad tar), message in
 * err. A dataset is read-only after open and may be shared by threads. */
STK_EXPORT int stk_dataset_open(const stk_job_spec *spec, const char *data_root,
                                const stk_limits *limits, stk_dataset **out, char *err,
                                size_t errlen);
STK_EXPORT uint64_t stk_dataset_size(const stk_dataset *ds);
/* Hash of the index (sample count, names, sizes, labels, and for a copy
 * made by `stoker-dataset prepare` its .stoker-prepared record): workers
 * of one job must agree on it. */
STK_EXPORT uint64_t stk_dataset_fingerprint(const stk_dataset *ds);
/* ImageFolder: the number of classes (class folders) and the name of
 * class i (label i), valid until stk_dataset_close; 0 and NULL for other
 * sources and for i out of range. Thread-safe. */
STK_EXPORT uint32_t stk_dataset_num_classes(const stk_dataset *ds);
STK_EXPORT const char *stk_dataset_class_name(const stk_dataset *ds, uint32_t i);
/* ImageFolder: the files under the dataset directory that are not samples
 * (an image format stoker does not decode, another extension, a symbolic
 * link, a file outside any class folder, ...), found at open; and the
 * first few of them (i < 8, in byte order) as "path: why", NULL past the
 * last. 0 / NULL for other sources. Thread-safe. */
STK_EXPORT uint64_t stk_dataset_skipped_files(const stk_dataset *ds);
STK_EXPORT const char *stk_dataset_skipped_file(const stk_dataset *ds, uint32_t i);
/* Accepts NULL. The dataset must outlive its builders. */
STK_EXPORT void stk_dataset_close(stk_dataset *ds);

/* Called once per bad sample (the first time any builder of the dataset
 * finds it unreadable or undecodable) with the sample's path (for tar:
 * "shard.tar:key") and a short reason. It runs on the builder's thread,
 * possibly on several threads at once for different samples, so it must
 * be thread-safe; it must not call back into the builder. The library
 * itself never prints. When the user's code failed on the sample (a
 * python or plugin op raised: not the file's fault) why reads
 * "sample index N: python op MOD:FN raised TYPE: MESSAGE" (or "...:
 * plugin op NAME failed: ..."), and a Python traceback may follow after a
 * line break; the sample is substituted all the same, and the caller
 * applies the job's bad_samples policy (stk_job_bad_samples_over). */
typedef void (*stk_bad_sample_fn)(void *ud, const char *path, const char *why);

/* Install the bad-sample hook (fn NULL = silent, the default). Call it
 * after open and before builders run; not synchronized with them. */
STK_EXPORT void stk_dataset_set_log(stk_dataset *ds, stk_bad_sample_fn fn, void *ud);
/* Distinct bad samples found so far by all builders of ds (each also
 * counts in stk_build_info.substituted of every batch that replaced it).
 * Thread-safe. */
STK_EXPORT uint64_t stk_dataset_bad_samples(const stk_dataset *ds);

/* Per-thread batch builder: owns decode state, scratch buffers and an I/O
 * ring. Not thread-safe: one builder per thread. */
typedef struct stk_builder stk_builder;

/* Files a JPEG builder holds open at most (a read window of ImageFolder
 * files, or tar shard descriptors kept for reuse), besides its io_uring
 * ring. Out of descriptors, a builder reads one file at a time instead. */
#define STK_BUILDER_MAX_FILES 32

typedef struct stk_build_info {
  uint32_t substituted; /* samples replaced because they were bad */
  uint32_t reread;      /* samples read again, alone, after a transient error
                           (out of descriptors, EIO): the batch is still exact */
  uint64_t bytes_read;  /* file bytes read for this batch */
  uint32_t user_code;   /* of substituted: replaced because the job's own code
                           (a python or plugin op) failed on them; then
                           stk_builder_error gives the first one (its path,
                           the op's error and traceback) */
  uint32_t pad0;
  uint64_t reserved[5];
} stk_build_info;

/* spec must be the one the dataset was opened with (its num_samples may be
 * 0: the dataset's size is used). The builder keeps a pointer to ds. */
STK_EXPORT int stk_builder_create(stk_dataset *ds, const stk_job_spec *spec,
                                  stk_builder **out, char *err, size_t errlen);
/* Build batch (epoch, rank, step) into buf (len >= layout.total_bytes),
 * every tensor at its layout offset. Bad samples are substituted, never
 * fatal. Returns STK_OK, or STK_INVALID_ARGUMENT for an address out of
 * range or a short buffer, or STK_IO when no sample in the whole epoch is
 * readable, or STK_UNAVAILABLE when a transient error (out of file
 * descriptors, I/O error, out of memory) kept a sample from being read:
 * the batch is not built, nothing is substituted or counted bad, and the
 * same call may succeed later (stk_builder_error says which sample). */
STK_EXPORT int stk_builder_build(stk_builder *b, uint64_t epoch, uint32_t rank,
                                 uint64_t step, void *buf, size_t len,
                                 stk_build_info *info);
/* stk_builder_build for batch (epoch, rank, step) of an epoch that starts
 * at sample offset `offset` (< W*B; an epoch resumed with another world
 * size, see stk_batch_samples_at); offset 0 is stk_builder_build. A sample
 * is built the same (pixels, RNG, substitution) at whatever address its
 * epoch position lands. Errors as stk_builder_build. */
STK_EXPORT int stk_builder_build_at(stk_builder *b, uint64_t epoch, uint64_t offset,
                                    uint32_t rank, uint64_t step, void *buf, size_t len,
                                    stk_build_info *info);
/* The read path this builder uses: 1 pread, 2 io_uring (0 for sources
 * that read no files). With io_mode 0 (auto), 1 means io_uring was not
 * available (seccomp, gVisor, kernel.io_uring_disabled). */
STK_EXPORT int stk_builder_io_mode(const stk_builder *b);

/* Build the tar index cache of a shard directory (dir/.stoker-index,
 * written atomically) so workers need not scan the shards. Returns STK_OK,
 * STK_IO, STK_CORRUPT (message in err). Thread-safe. */
STK_EXPORT int stk_tar_index(const char *dir, char *err, size_t errlen);

/* Last error text of this builder ("" if none). */
STK_EXPORT const char *stk_builder_error(const stk_builder *b);
/* Accepts NULL. */
STK_EXPORT void stk_builder_destroy(stk_builder *b);

/* Convenience for tests and clients: open the dataset, build one batch,
 * close. Slow (opens the dataset each call); for the reference check. */
STK_EXPORT int stk_build_reference(const stk_job_spec *spec, const char *data_root,
                                   uint64_t epoch, uint32_t rank, uint64_t step,
                                   void *buf, size_t len, char *err, size_t errlen);
/* stk_build_reference at a sample offset (stk_builder_build_at). */
STK_EXPORT int stk_build_reference_at(const stk_job_spec *spec, const char *data_root,
                                      uint64_t epoch, uint64_t offset, uint32_t rank,
                                      uint64_t step, void *buf, size_t len, char *err,
                                      size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
