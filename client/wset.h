/* wset.h - the working set's arithmetic: which workers a rank streams from.
 * Pure functions of their arguments (no client, no lock, no allocation),
 * shared by client_workers.c and the unit test tests/unit/client/test_client_wset.c.
 *
 * Rendezvous (highest-random-weight) hashing, weighted by cores: worker w's
 * score for rank r of job j is
 *     score = -cores / ln(u),   u = mix(id_hash(w) ^ mix(j ^ mix(r))) in (0, 1)
 * where id_hash is 64-bit FNV-1a of the worker id and mix the splitmix64
 * finalizer; u takes the hash's top 53 bits (plus a half, so it is never 0
 * or 1). The rank's k highest scores are its set. A worker of c cores is
 * the top of a rank's list with probability c / (sum of cores): the
 * "-w / ln(u)" form is the exponential-race (weighted) rendezvous hash, so
 * its share of ranks is proportional to its cores, and a worker that joins
 * or leaves changes only the sets it enters or leaves.
 *
 * Coverage: rank r also takes every worker whose mix(id_hash ^ j) mod
 * world_size == r, so each worker is in at least one rank's set whatever k
 * and however many workers there are (each worker's rank depends on its id
 * alone: stable when others come or go).
 */
#ifndef STOKER_CLIENT_WSET_H
#define STOKER_CLIENT_WSET_H

#include <stdint.h>

#define STK__WSET_DEFAULT 8u    /* working_set 0 */
#define STK__WSET_MAX_CAP 1024u /* working_set and working_set_max at most */

/* 64-bit FNV-1a of the NUL-terminated id. */
uint64_t stk__wset_id_hash(const char *id);
/* The splitmix64 finalizer: a bijection of 64-bit values with good
 * avalanche. */
uint64_t stk__wset_mix(uint64_t x);
/* Worker (id_hash, cores; 0 counts as 1)'s weighted HRW score for rank of
 * the job job_hash: > 0, higher first. */
double stk__wset_score(uint64_t job_hash, uint32_t rank, uint64_t id_hash,
                       uint32_t cores);
/* 1 if rank covers the worker id_hash in a job of world ranks (>= 1). */
int stk__wset_covers(uint64_t job_hash, uint32_t rank, uint32_t world, uint64_t id_hash);
/* The indices of the t highest of score[0..n) (ties: the lower index), in
 * descending order of score, into top[0..min(t, n)); returns that count.
 * O(n log t), no allocation. */
uint32_t stk__wset_top(const double *score, uint32_t n, uint32_t t, uint32_t *top);

#endif
