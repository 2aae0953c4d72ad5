/* ops_chain.h - what ops_chain.c offers the JPEG sources: the runner of
 * a job's op chain on one decoded image. Private to augment/.
 */
#ifndef STOKER_AUGMENT_OPS_CHAIN_H
#define STOKER_AUGMENT_OPS_CHAIN_H

#include <stddef.h>
#include <stdint.h>

#include "decode.h"
#include "stoker/augment.h"

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

#endif
