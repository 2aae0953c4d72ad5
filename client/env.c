/* env.c - client defaults from the environment: fills the fields of an
 * stk_client_config that the caller left "not given" (coordinator NULL or
 * "", rank STK_RANK_FROM_ENV, world_size 0, cuda_device
 * STK_CUDA_DEVICE_FROM_ENV, token NULL or "", working_set 0,
 * no_worker_timeout_ms 0) from the
 * variables a launcher sets
 * (stoker-launch, torchrun, mpirun, srun). Precedence is written in
 * include/stoker/client.h beside stk_client_config_from_env.
 *
 * Owns nothing; reads the environment only (getenv), never writes it. Must
 * not: print, abort, or touch a field the caller gave explicitly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "stoker/client.h"

/* One launcher's pair of variables; the first family with either variable
 * set is the one used, so rank and world size never come from two
 * launchers. */
typedef struct env_family {
  const char *rank, *size, *local;
} env_family;

static const env_family families[] = {
    {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};
#define NFAMILIES (sizeof(families) / sizeof(families[0]))

/* A plain decimal in [0, max]: no sign, no spaces, no trailing text. */
static int env_number(const char *var, uint64_t max, uint32_t *out, char *err,
                      size_t errlen) {
  const char *s = getenv(var);
  if (!s) return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "%s is not set", var);
  if (!*s)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "%s is set but empty (want a number)", var);
  uint64_t v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9' || p - s >= 10)
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                       "%s='%.40s' is not a non-negative decimal number", var, s);
    v = v * 10 + (uint64_t)(*p - '0');
  }
  if (v > max)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "%s='%.40s' is out of range", var,
                     s);
  *out = (uint32_t)v;
  return STK_OK;
}

static const env_family *env_pick(void) {
  for (size_t i = 0; i < NFAMILIES; i++)
    if (getenv(families[i].rank) || getenv(families[i].size)) return &families[i];
  return NULL;
}

int stk_client_config_from_env(stk_client_config *cfg, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!cfg) {
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "cfg is NULL");
  }
  if (!cfg->coordinator || !*cfg->coordinator) {
    const char *co = getenv("STOKER_COORDINATOR");
    if (co && !*co)
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                       "%s is set but empty (want host:port)", "STOKER_COORDINATOR");
    if (co) cfg->coordinator = co;
  }
  static const char *const tls_vars[3] = {"STOKER_TLS_CA", "STOKER_TLS_CERT",
                                          "STOKER_TLS_KEY"};
  const char **tls_fields[3] = {&cfg->tls_ca, &cfg->tls_cert, &cfg->tls_key};
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(tls_vars[i]);
    if ((!*tls_fields[i] || !**tls_fields[i]) && v && *v) *tls_fields[i] = v;
  }

  if (!cfg->token || !*cfg->token) {
    const char *tok = getenv("STOKER_TOKEN");
    if (tok && *tok) cfg->token = tok;
  }

  if (!cfg->working_set && getenv("STOKER_WORKING_SET")) {
    uint32_t k = 0;
    int st = env_number("STOKER_WORKING_SET", 1024, &k, err, errlen);
    if (st) return st;
    if (k == 0)
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                       "STOKER_WORKING_SET=0: the working set must be >= 1");
    cfg->working_set = k;
  }

  if (!cfg->no_worker_timeout_ms && getenv("STOKER_NO_WORKER_TIMEOUT_MS")) {
    uint32_t ms = 0;
    int st = env_number("STOKER_NO_WORKER_TIMEOUT_MS", UINT32_MAX, &ms, err, errlen);
    if (st) return st;
    if (ms == 0)
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                       "STOKER_NO_WORKER_TIMEOUT_MS=0: the limit must be >= 1 ms");
    cfg->no_worker_timeout_ms = ms;
  }

  int want_rank = cfg->rank == STK_RANK_FROM_ENV, want_size = cfg->world_size == 0;
  const env_family *f = (want_rank || want_size) ? env_pick() : NULL;
  uint32_t rank = want_rank ? 0 : cfg->rank, size = want_size ? 1 : cfg->world_size;
  const char *rank_from = want_rank ? "default, no RANK set" : "cfg.rank";
  const char *size_from = want_size ? "default, no WORLD_SIZE set" : "cfg.world_size";
  if (f) {
    if (want_size) {
      if (!getenv(f->size))
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                         "%s is not set but %s is: set both, or give world_size", f->size,
                         f->rank);
      int st = env_number(f->size, UINT32_MAX, &size, err, errlen);
      if (st) return st;
      if (size == 0)
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                         "%s=0: the world size must be >= 1", f->size);
      size_from = f->size;
    }
    if (want_rank) {
      if (!getenv(f->rank))
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                         "%s is not set but %s is: set both, or give rank", f->rank,
                         f->size);
      int st = env_number(f->rank, UINT32_MAX - 1, &rank, err, errlen);
      if (st) return st;
      rank_from = f->rank;
    }
  }
  if ((want_rank || want_size) && rank >= size) {
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "rank %u (%s) must be < world size %u (%s)", rank, rank_from, size,
                     size_from);
  }
  cfg->rank = rank;
  cfg->world_size = size;

  /* The CUDA ordinal: only read for a CUDA client, so a stray LOCAL_RANK
   * never fails a CPU one. Same family as the rank when there is one. */
  if (cfg->cuda_device == STK_CUDA_DEVICE_FROM_ENV) {
    uint32_t dev = 0;
    if (cfg->device == STK_DEVICE_CUDA) {
      const env_family *lf = f ? f : env_pick();
      const char *var = NULL;
      if (getenv("LOCAL_RANK")) var = "LOCAL_RANK";
      else if (lf && getenv(lf->local)) var = lf->local;
      if (var) {
        int st = env_number(var, INT32_MAX, &dev, err, errlen);
        if (st) return st;
      }
    }
    cfg->cuda_device = (int32_t)dev;
  }
  return STK_OK;
}
