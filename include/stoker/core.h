/* stoker/core.h - the determinism core of stoker (built from core/).
 *
 * What fixes the bytes of a batch before any pixel is read: the job spec
 * (defaults, the canonical text, its parser and hash, validation), the
 * epoch permutation, the rank/step addressing, the per-sample
 * counter-based RNG and the batch layout. Pure computation: no files, no
 * network, no allocation. The worker, the coordinator and the client
 * library all link it; stoker/augment.h includes it.
 *
 * The rule it implements (docs/architecture.md, "Determinism"):
 *   batch(epoch, rank, step) is a pure function of (job spec, address).
 */
#ifndef STOKER_CORE_H
#define STOKER_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Job spec ---------------------------------------------------------- */

typedef enum stk_source_kind {
  STK_SOURCE_SYNTHETIC = 1,   /* procedurally generated images, no files */
  STK_SOURCE_IMAGEFOLDER = 2, /* root/<class>/<file>.jpg, torchvision order */
  STK_SOURCE_TAR = 3,         /* WebDataset-style shards: <key>.jpg + <key>.cls */
  STK_SOURCE_MEGATRON = 4     /* Megatron-LM/NeMo indexed token data: PREFIX.bin/.idx */
} stk_source_kind;

typedef enum stk_pipeline_kind {
  STK_PIPELINE_RAW = 1,   /* synthetic only: the sample image as generated */
  STK_PIPELINE_TRAIN = 2, /* RandomResizedCrop + flip + jitter + normalize */
  STK_PIPELINE_EVAL = 3,  /* Resize(shorter side) + CenterCrop + normalize */
  STK_PIPELINE_CHAIN = 4  /* the op chain in stk_job_spec.chain (docs/pipelines.md) */
} stk_pipeline_kind;

/* The one table of tensor element types: X(NAME, number, "text",
 * bytes per element, use). The enum below, stk_dtype_name and
 * stk_dtype_from_name, the job keys dtype and token_dtype, the op chain's
 * to(...) and the Python binding all come from it. Numbers are part of
 * the ABI: rows are only ever appended. The text is what job files, op
 * chains and logs write (and torch's dtype of the same name). use: IMAGE,
 * an image tensor's type (job key dtype, to(...)); TOKEN, a token job's
 * (token_dtype). */
#define STK_DTYPE_MAP(X)               \
  X(UINT8, 1, "uint8", 1, IMAGE)       \
  X(FLOAT32, 2, "float32", 4, IMAGE)   \
  X(BFLOAT16, 3, "bfloat16", 2, IMAGE) \
  X(INT64, 4, "int64", 8, TOKEN)       \
  X(INT32, 5, "int32", 4, TOKEN)

typedef enum stk_dtype {
#define STK__DTYPE_ENUM(name, num, text, size, use) STK_DTYPE_##name = num,
  STK_DTYPE_MAP(STK__DTYPE_ENUM)
#undef STK__DTYPE_ENUM
} stk_dtype;

/* The text of an stk_dtype ("uint8", "float32", "bfloat16", "int64",
 * "int32": STK_DTYPE_MAP's), static storage; NULL for a number that is
 * no dtype. Pure; thread-safe. */
STK_EXPORT const char *stk_dtype_name(int dtype);
/* The stk_dtype whose text is name (exactly, as stk_dtype_name writes
 * it); 0 for NULL or a name that is no dtype. Pure; thread-safe. */
STK_EXPORT int stk_dtype_from_name(const char *name);

typedef enum stk_layout { STK_LAYOUT_NHWC = 1, STK_LAYOUT_NCHW = 2 } stk_layout;

#define STK_NAME_MAX 64
#define STK_PATH_MAX 512

/* A job: everything that fixes the bytes of every batch. Plain value; fill
 * with stk_job_spec_defaults() then override. Strings are NUL-terminated in
 * place. The reserved tail keeps the size stable as fields are added. */
typedef struct stk_job_spec {
  char name[STK_NAME_MAX];          /* job id, free text ([A-Za-z0-9._-]) */
  int32_t source;                   /* stk_source_kind */
  char dataset[STK_PATH_MAX];       /* path relative to the worker's data root */
  uint64_t num_samples;             /* synthetic: N; files: 0 = from the index */
  int32_t pipeline;                 /* stk_pipeline_kind */
  uint32_t height, width, channels; /* output image shape (channels = 3) */
  int32_t dtype;                    /* stk_dtype of the image tensor */
  int32_t layout;                   /* stk_layout of the image tensor */
  uint32_t batch_size;              /* per rank, B */
  uint32_t world_size;              /* consumer ranks, W */
  uint64_t seed;
  uint32_t epochs;                        /* epochs the job delivers */
  int32_t drop_last;                      /* 1: floor(N/(W*B)) steps; 0: pad + mask */
  uint32_t num_classes;                   /* labels are in [0, num_classes) (synthetic
                                             draws them; tar .cls labels are checked) */
  uint32_t synthetic_cost_us;             /* synthetic: CPU time burnt per sample */
  uint32_t resize;                        /* eval: shorter side before the center crop */
  float scale_min, scale_max;             /* RandomResizedCrop area fraction */
  float ratio_min, ratio_max;             /* RandomResizedCrop aspect ratio */
  float flip_p;                           /* horizontal flip probability */
  float brightness, contrast, saturation; /* ColorJitter strengths, 0 = off */
  float mean[3], std[3];                  /* Normalize, on the 0..1 scale */
  /* source = megatron (token jobs); other jobs leave them at their
   * defaults. Ordered so that the struct has no padding before reserved. */
  uint32_t seq_len;           /* tokens per sample (a window of seq_len + 1) */
  int32_t token_dtype;        /* STK_DTYPE_INT32 or STK_DTYPE_INT64 */
  int32_t eod_mask_loss;      /* 1: loss_mask is 0 where the input token is eod */
  int64_t eod_token;          /* end-of-document token id; -1 = none */
  int32_t reset_position_ids; /* 1: position_ids restart after each eod token */
  int32_t loss_mask;          /* 1: the batch carries a loss_mask tensor */
  int32_t position_ids;       /* 1: the batch carries a position_ids tensor */
  /* pipeline = chain: the chain's canonical text ("decode | resize(256) |
   * ..."), without its closing normalize/to (they set mean, std, dtype and
   * layout); "" for the named pipelines. Set through stk_job_spec_set. */
  char plugin[64]; /* plugin libraries the chain uses: "name[,name...]" */
  char chain[960];
  uint32_t views; /* image jobs: views per sample, 1..4 (image0.. when > 1) */
  /* views > 1 and pipeline = chain: view v (1..3) with a chain of its own
   * (job key "viewV") finds its canonical text at chain + view_chain[v-1]
   * (after view 0's, which is the pipeline's, and its NUL) and makes
   * view_height[v-1] x view_width[v-1] images; view_chain[v-1] = 0: view v
   * runs the pipeline's chain at height x width. Every view shares the
   * pipeline's normalize and to (mean, std, dtype, layout). Set through
   * stk_job_spec_set(spec, "view1", ...), which packs the texts. */
  uint16_t view_chain[3];
  uint16_t pad0; /* 0 */
  uint32_t view_height[3], view_width[3];
  /* 1: job key shuffle = false: epoch e visits the samples in index order
   * (P_e the identity); 0 (the default): the keyed permutation P_e. */
  int32_t in_order;
  /* Job key bad_samples, canonical: "" (the default: a user-code error
   * fails the job, corrupt files are substituted without limit), "fail",
   * "substitute", "substitute(N)" or "substitute(P%)". Read it through
   * stk_job_bad_samples_over. */
  char bad_samples[32];
  uint8_t reserved[156];
} stk_job_spec;

/* Fill *spec with the defaults (synthetic with num_samples 0, which the
 * caller must set for synthetic jobs; raw 3x224x224
 * uint8 NCHW, B=32, W=1, seed 0, 1 epoch, drop_last, ImageNet mean/std).
 * Thread-safe. */
STK_EXPORT void stk_job_spec_defaults(stk_job_spec *spec);

/* Set one field from text, as in a job file line "key = value".
 * Returns STK_OK, or STK_INVALID_ARGUMENT with a message in err (which may
 * be NULL) for an unknown key or a bad value. Thread-safe. */
STK_EXPORT int stk_job_spec_set(stk_job_spec *spec, const char *key, const char *value,
                                char *err, size_t errlen);

/* Parse job text onto *spec: one "key = value" per line (spaces and tabs
 * around key and value ignored), '#' starts a comment, blank lines are
 * skipped, a line holds at most 1023 bytes. Fields named are set (a key
 * named twice takes its last value); the others keep their current value,
 * so start from stk_job_spec_defaults() to read a whole job. The canonical
 * text (stk_job_spec_format) parses back to the spec it came from. Returns
 * STK_OK, or STK_INVALID_ARGUMENT with "job line N: why" in err (which may be
 * NULL), naming the key for an unknown key or a bad value; *spec may then
 * hold the lines before N. Thread-safe; does not allocate. */
STK_EXPORT int stk_job_spec_parse(stk_job_spec *spec, const char *text, char *err,
                                  size_t errlen);

/* Parse a job file (at most 1 MiB) with stk_job_spec_parse's grammar.
 * Fields not named keep their current value. Returns STK_OK, STK_IO if the
 * file cannot be read, STK_NO_MEMORY, STK_INVALID_ARGUMENT (err says
 * file:line why). */
STK_EXPORT int stk_job_spec_load(stk_job_spec *spec, const char *path, char *err,
                                 size_t errlen);

/* The value of `key` in job text (stk_job_spec_parse's grammar; the last
 * line naming it wins), as written, without checking it: for showing a
 * job, possibly from another stoker version. Copies it into value (len
 * bytes, NUL-terminated; "" when absent). Returns STK_OK, STK_NOT_FOUND,
 * STK_LIMIT (value truncated) or STK_INVALID_ARGUMENT (text or key NULL).
 * Lines that do not parse are skipped. Thread-safe. */
STK_EXPORT int stk_job_text_get(const char *text, const char *key, char *value,
                                size_t len);

/* The job keys, in the order of the canonical text: key i's name, the
 * kind of value it takes ("str", "uint32", "uint64", "float", "3 floats",
 * "bool", "enum", "token", "enum or chain", "chain") and a one-line help.
 * The strings are static (not to be freed); any out-pointer may be NULL.
 * Returns STK_OK, or STK_NOT_FOUND when i is past the last key. What
 * `stoker-coordinator --help-job-keys` prints. Thread-safe. */
STK_EXPORT int stk_job_key(size_t i, const char **name, const char **type,
                           const char **help);

/* Check a spec for consistency (non-zero sizes, known enums, limits such as
 * a batch of at most 2 GiB). STK_OK or STK_INVALID_ARGUMENT with a message. */
STK_EXPORT int stk_job_spec_validate(const stk_job_spec *spec, char *err, size_t errlen);

/* The job's bad_samples policy applied to the distinct bad samples found
 * so far: user of them where the user's code failed (a python or plugin
 * op raised), total = every bad sample (user included; corrupt files are
 * the rest), num_samples the dataset's size (for a percentage budget).
 * 1: the job must fail now; 0: substitute and go on. The default ("")
 * fails at the first user-code error and substitutes corrupt files
 * without limit; "fail" fails at any bad sample; "substitute" never
 * fails; "substitute(N)" fails once total > N; "substitute(P%)" once
 * total > floor(P% of num_samples). Pure; thread-safe. */
STK_EXPORT int stk_job_bad_samples_over(const stk_job_spec *spec, uint64_t user,
                                        uint64_t total, uint64_t num_samples);
/* The budget of a substitute(N) or substitute(P%) policy in samples
 * (UINT64_MAX: no budget; 0 for "fail"; for the default, 0 for user-code
 * errors and UINT64_MAX for corrupt files: pass user = 1 or 0). Pure. */
STK_EXPORT uint64_t stk_job_bad_samples_budget(const stk_job_spec *spec, int user,
                                               uint64_t num_samples);

/* Write the canonical text form ("key = value\n" for every field, fixed
 * order) into buf. Returns the length it needs (excluding the NUL), like
 * snprintf; output is truncated if len is too small. */
STK_EXPORT size_t stk_job_spec_format(const stk_job_spec *spec, char *buf, size_t len);

/* 64-bit hash of the canonical text form: two specs that build the same
 * bytes have the same hash. num_samples is included as resolved. */
STK_EXPORT uint64_t stk_job_spec_hash(const stk_job_spec *spec);

/* ---- Determinism: permutation, addressing, RNG ------------------------- */

/* Keyed bijection over [0, n): a balanced Feistel network with cycle
 * walking. O(1) memory for any n. Plain value, safe to copy. */
typedef struct stk_perm {
  uint64_t n;
  uint32_t half_bits;
  uint64_t keys[6];
} stk_perm;

/* Permutation of epoch `epoch` of a job with seed `seed` over n items. */
STK_EXPORT void stk_perm_init(stk_perm *p, uint64_t n, uint64_t seed, uint64_t epoch);
/* The sample order P_e of epoch `epoch` of a job over n samples:
 * stk_perm_init's keyed permutation, or the identity (P_e[i] = i) when the
 * job says shuffle = false (spec->in_order). Thread-safe. */
STK_EXPORT void stk_job_perm_init(stk_perm *p, const stk_job_spec *spec, uint64_t n,
                                  uint64_t epoch);
/* P(i) for i < n. Thread-safe (p is read only). */
STK_EXPORT uint64_t stk_perm_apply(const stk_perm *p, uint64_t i);

/* Steps each rank gets per epoch: floor(N/(W*B)) with drop_last, else
 * ceil(N/(W*B)). Equals stk_epoch_steps(spec, n, 0). */
STK_EXPORT uint64_t stk_steps_per_epoch(const stk_job_spec *spec, uint64_t n);

/* The samples of batch (epoch, rank, step): indices[j] = P_e[(s*W+r)*B + j]
 * (P_e as stk_job_perm_init gives it)
 * and mask[j] = 1; a slot past the end of the epoch (padding, only without
 * drop_last) gets the sample P_e[pos mod N] and mask[j] = 0. Both arrays
 * hold batch_size entries. Returns STK_INVALID_ARGUMENT for an address out
 * of range (epoch >= epochs, rank >= W, step >= steps per epoch). Equals
 * stk_batch_samples_at with offset 0. */
STK_EXPORT int stk_batch_samples(const stk_job_spec *spec, uint64_t n, uint64_t epoch,
                                 uint32_t rank, uint64_t step, uint64_t *indices,
                                 uint8_t *mask);

/* ---- Elastic resume: an epoch that starts at a sample offset ----------
 *
 * A job resumed with another world size W' continues its epoch at the
 * global sample position g the saved state names (the samples the whole
 * job consumed in epoch order: step * W * B for lockstep ranks). In W''s
 * addressing g is (offset, step) = (g mod W'B, g div W'B): that epoch's
 * step s of rank r holds P_e[offset + (s*W' + r)*B + j], so the steps from
 * `step` on deliver exactly P_e[g ..] once each, and every worker can
 * still build any batch from its address (epoch, rank, step, offset). The
 * offset is 0 in every other epoch and in every job that never changes
 * world size (then these calls equal the ones above). */

/* Steps per rank of an epoch whose step 0 starts at position `offset`:
 * R = N - offset samples left, floor(R/(W*B)) with drop_last, else
 * ceil(R/(W*B)); 0 when offset >= N. Thread-safe. */
STK_EXPORT uint64_t stk_epoch_steps(const stk_job_spec *spec, uint64_t n,
                                    uint64_t offset);

/* Where the global sample position `position` (< n) of an epoch lies in
 * this spec's world: *offset = position mod (W*B), *step = position div
 * (W*B). *step may equal stk_epoch_steps(spec, n, *offset) (drop_last
 * only): the epoch has no full step left and resumes at the next one.
 * STK_INVALID_ARGUMENT when position >= n or W*B is 0. Thread-safe. */
STK_EXPORT int stk_resume_point(const stk_job_spec *spec, uint64_t n, uint64_t position,
                                uint64_t *offset, uint64_t *step);

/* stk_batch_samples for an epoch that starts at `offset` (< W*B, the form
 * stk_resume_point gives, so an address names one batch only):
 * indices[j] = P_e[offset + (s*W+r)*B + j], past N padded as above.
 * STK_INVALID_ARGUMENT for an address out of range (offset >= W*B or
 * step >= stk_epoch_steps(spec, n, offset), or as above). Thread-safe. */
STK_EXPORT int stk_batch_samples_at(const stk_job_spec *spec, uint64_t n, uint64_t epoch,
                                    uint64_t offset, uint32_t rank, uint64_t step,
                                    uint64_t *indices, uint8_t *mask);

/* Counter-based generator (Philox4x32-10) keyed by (seed, epoch, index):
 * the only source of randomness for a sample. Plain value. */
typedef struct stk_rng {
  uint32_t key[2];
  uint32_t ctr[4];
  uint32_t out[4];
  uint32_t used; /* words of out[] consumed */
} stk_rng;

STK_EXPORT void stk_rng_init(stk_rng *r, uint64_t seed, uint64_t epoch, uint64_t index);
STK_EXPORT uint32_t stk_rng_u32(stk_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
STK_EXPORT double stk_rng_uniform(stk_rng *r);

/* ---- Batch layout ------------------------------------------------------ */

#define STK_MAX_TENSORS 8
#define STK_MAX_DIMS    4

/* Tensor ids of an image job with one view, in payload order (with
 * views > 1 the images are image0..image{V-1} and the rest shift: find
 * tensors by name, stk_batch_layout_find). */
enum {
  STK_TENSOR_IMAGE = 0,
  STK_TENSOR_LABEL = 1,
  STK_TENSOR_MASK = 2,
  STK_TENSOR_INDEX = 3,
  STK_TENSOR_TARGET = 4 /* only when the chain ends in a batch op */
};

typedef struct stk_tensor_desc {
  char name[16]; /* "image", "label", "mask", "index", "target", ... */
  int32_t dtype; /* stk_dtype */
  uint32_t ndim;
  uint64_t shape[STK_MAX_DIMS];
  uint64_t offset; /* byte offset in the payload, 64-byte aligned */
  uint64_t nbytes;
} stk_tensor_desc;

/* Where each tensor sits in a batch payload. Every batch of a job has the
 * same layout (static shapes). */
typedef struct stk_batch_layout {
  uint32_t ntensors;
  stk_tensor_desc tensors[STK_MAX_TENSORS];
  uint64_t total_bytes; /* payload size, a multiple of 64 */
} stk_batch_layout;

/* Image jobs, always these four in this order: image: [B,H,W,C] or
 * [B,C,H,W] of the spec's dtype; label: int64 [B]; mask: uint8 [B] (1 =
 * real sample, 0 = padding); index: int64 [B] (ids STK_TENSOR_*). With
 * views = V > 1 the image is V tensors image0 .. image{V-1} (the same
 * sample under independent random draws; image0 is the one-view job's
 * image; a view with a chain of its own has that chain's height and
 * width), then label, mask, index. A chain that ends in a batch op
 * (mixup, cutmix, mixup_cutmix) adds a fifth, target: float32 [B,
 * num_classes], the soft targets of the mixed images (label keeps each
 * row's own class).
 *
 * Token jobs (source = megatron), in this order: tokens [B, seq_len] and
 * labels [B, seq_len] of token_dtype; then loss_mask float32 [B, seq_len]
 * if the job asks for it; then position_ids [B, seq_len] of token_dtype if
 * asked; then index int64 [B] if fewer than four tensors are taken.
 * Look tensors up by name (stk_batch_layout_find), not by STK_TENSOR_*.
 *
 * Returns STK_INVALID_ARGUMENT for an invalid spec. */
STK_EXPORT int stk_batch_layout_of(const stk_job_spec *spec, stk_batch_layout *layout);

/* Position of the tensor called name in layout, or -1 if it has none.
 * Thread-safe. */
STK_EXPORT int stk_batch_layout_find(const stk_batch_layout *layout, const char *name);

/* ---- uint8 on the wire for float image jobs --------------------------
 *
 * An image job's float32/bfloat16 image holds, at every element, a
 * function of one 8-bit value v (the pixel after resampling, jitter and
 * flip) and its channel c: table[c][v] below (bfloat16: that float rounded
 * to nearest even). So a worker may send the 8-bit image and the client
 * rebuild the float one exactly, moving 4x (2x) fewer bytes. */

/* 1 when spec's image tensor can travel as uint8 and be rebuilt exactly
 * (an image source, imagefolder or tar, whose dtype is float32 or
 * bfloat16, with no random_erasing in its chain): then *wire (may be NULL)
 * is spec with a uint8 image, the job workers build for that form. 0
 * otherwise. Thread-safe. */
STK_EXPORT int stk_image_wire_spec(const stk_job_spec *spec, stk_job_spec *wire);

/* The normalize map of channel c (c < 3): float(v) = v * a[c] + b[c] with
 * a[c] = 1 / (255 std[c]) and b[c] = -mean[c] / std[c], the product
 * rounded to float before the sum (never fused). Thread-safe. */
STK_EXPORT void stk_normalize_coeffs(const stk_job_spec *spec, float a[3], float b[3]);

/* table[c][v]: that map at every 8-bit value v, the same numbers the
 * pipeline writes. Thread-safe. */
STK_EXPORT void stk_normalize_table(const stk_job_spec *spec, float table[3][256]);

#ifdef __cplusplus
}
#endif
#endif
