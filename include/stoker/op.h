/* stoker/op.h - the C ABI of plugin ops: an image op a user compiles into
 * a shared object and names in a job's op chain (docs/pipelines.md,
 * "Plugin ops"; examples/plugin_cutout.c is a complete one).
 *
 * A plugin is one shared object, <name>.so, in the worker's plugin
 * directory (stoker-worker --plugin-dir DIR, or STOKER_PLUGIN_DIR for
 * libstoker's in-process builds). A job names it (`plugin = name`) and uses
 * its op in the chain under the same name, with arguments of its own:
 *
 *   plugin = cutout
 *   pipeline = decode | random_resized_crop(224) | cutout(size=32) | to(float32)
 *
 * The object exports one function, stoker_op_info (STK_OP_ENTRY), that
 * returns its stk_op_info. A worker checks abi_version against the
 * STK_OP_ABI_VERSION it was built with and the name against the file's,
 * and refuses the job with a clear error when the plugin is missing, of
 * another ABI version, or refuses its arguments.
 *
 * Determinism: an op must be a pure function of (its arguments, the image
 * it is given, the seed it is given): every worker builds every batch
 * byte for byte alike (docs/architecture.md, "Determinism"). The seed is
 * drawn from the sample's own random stream at the op's place in the
 * chain. Ops change the image in place and keep its size.
 *
 * This header includes nothing of stoker and a plugin links nothing of
 * it: the ABI is the structs and the function below.
 */
#ifndef STOKER_OP_H
#define STOKER_OP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raised when a struct or a function's meaning below changes; a worker
 * loads only plugins built with its own version. */
#define STK_OP_ABI_VERSION 1

/* The symbol a plugin exports: const stk_op_info *stoker_op_info(void). */
#define STK_OP_ENTRY "stoker_op_info"

/* One sample's image, 8-bit RGB, interleaved: pixel (x, y) channel c is
 * px[y * stride + x * channels + c]. */
typedef struct stk_op_image {
  uint8_t *px;
  uint32_t width, height;
  uint32_t channels; /* 3 */
  size_t stride;     /* bytes per row, >= width * channels */
} stk_op_image;

typedef struct stk_op_info {
  uint32_t abi_version; /* STK_OP_ABI_VERSION the plugin was built with */
  const char *name;     /* the op's name: equal to the file's name */
  /* Parse args (the text between the op's parentheses, canonical: each
   * argument trimmed, joined by ", "; "" when none) into a state of the
   * op's own (*state may be left NULL). Called once per builder thread,
   * and once when a worker opens the job to check the arguments. Returns
   * 0, or nonzero with a message in err (the job is then refused). */
  int (*create)(const char *args, void **state, char *err, size_t errlen);
  /* Change img in place. seed: 64 random bits of this sample for this op.
   * Called on the thread that created state, never concurrently with
   * itself for one state. Returns 0, or nonzero with a message in err:
   * the sample is then reported bad and replaced like an undecodable
   * one, so an op should fail only on an image it cannot handle. */
  int (*apply)(void *state, stk_op_image *img, uint64_t seed, char *err, size_t errlen);
  /* Free state (may be NULL). */
  void (*destroy)(void *state);
} stk_op_info;

typedef const stk_op_info *(*stk_op_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
