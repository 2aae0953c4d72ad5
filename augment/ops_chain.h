/* ops_chain.h - what ops_chain.c offers the JPEG sources: the image
 * pipeline, the runner of a job's op chain (train and eval are canonical
 * chains) on one image. Private to augment/ (and its tests).
 */
#ifndef STOKER_AUGMENT_OPS_CHAIN_H
#define STOKER_AUGMENT_OPS_CHAIN_H

#include <stddef.h>
#include <stdint.h>

#include "decode.h"
#include "stoker/augment.h"

typedef struct stk__chain_run stk__chain_run;
/* The per-builder runner of spec's image pipeline: its op chain (spec's
 * chain text, or for train and eval the canonical chain each is), buffers,
 * a state of each plugin op (created from ds's loaded plugins; ds may
 * be NULL for a chain without plugin ops), and the python ops' process
 * (ops_python.h: started on first use, with ds's Python path, else
 * $STOKER_PYTHON_PATH). Owned by the caller, freed
 * with stk__chain_run_free (NULL is fine); one per thread. STK_OK,
 * STK_NO_MEMORY, or STK_INVALID_ARGUMENT (bad chain text, a plugin
 * refused its arguments) with err. */
int stk__chain_run_create(stk__chain_run **out, const stk_dataset *ds,
                          const stk_job_spec *spec, char *err, size_t errlen);
void stk__chain_run_free(stk__chain_run *r);
/* The chain's batch op (mixup, cutmix, mixup_cutmix: its last op), which
 * the builder runs on the whole batch (ops_mix.h), or NULL. */
const struct stk__op *stk__chain_run_batch_op(const stk__chain_run *r);
/* Run the chain on the image whose header dec has read (W x H), drawing
 * from rng, and write the sample at out in the job's dtype and layout.
 * STK_OK; STK_NO_MEMORY or STK_UNAVAILABLE (transient: a python op's
 * process crashed or hung, ask again); STK_CORRUPT or STK_LIMIT (the
 * decoder's: the sample is bad); STK_USER_CODE (a plugin or python op
 * failed on the sample: why starts "plugin op " or "python op " and may
 * carry a traceback after a line break); why says what. */
int stk__chain_run_sample(stk__chain_run *r, stk__decoder *dec, uint32_t W, uint32_t H,
                          stk_rng *rng, void *out, char *why, size_t whylen);

#endif
