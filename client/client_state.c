/* client_state.c - the client's position in the job: the resume state (its byte
 * format, versions 1 and 2, saving and parsing), the elastic resume rule
 * (a state saved with another world size continues the epoch at the same
 * global sample position), and the map between the client's linear
 * sequence numbers and batch addresses (epoch, step, sample offset).
 *
 * Owns: c->plan, set once at open (stk__plan_init). The map functions only
 * read fields fixed at open, so any thread may call them without c->mu;
 * save_state and position read c->api.next_deliver under c->mu. Must not
 * block.
 *
 * The plan: every epoch has spe steps at sample offset 0, except epoch
 * seg_epoch, which has seg_steps steps at sample offset seg_offset (an
 * epoch resumed with another world size; without one, seg_epoch = 0,
 * seg_offset = 0 and seg_steps = spe, so seq = epoch * spe + step as
 * before). Sequence numbers run over the epochs in order.
 */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "client_internal.h"

/* ---- the byte format: little-endian ----------------------------------
 *
 *   0  u32 magic "STKS"       16 u32 rank           32 u64 step
 *   4  u32 version (1 or 2)   20 u32 world_size     40 u64 position (v2)
 *   8  u64 job hash           24 u64 epoch
 *
 * position (version 2): the samples of `epoch`, in epoch order, that the
 * whole job had consumed before this rank's next step: sample_offset +
 * step * world_size * batch_size. Version 1 (40 bytes) has no position;
 * it is step * world_size * batch_size (version 1 never had an offset). */

/* Little-endian stores and loads of the state's fields. */
static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

int stk__state_parse(const void *buf, size_t len, stk__resume *rs, char *err,
                     size_t errlen) {
  const unsigned char *p = buf;
  memset(rs, 0, sizeof(*rs));
  if (len < STK__STATE_SIZE_V1 || get32(p) != STK__STATE_MAGIC)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "resume_state is not a stoker state (bad size or magic)");
  rs->version = get32(p + 4);
  if (rs->version != 1 && rs->version != STK__STATE_VERSION)
    return stk__errf(
        err, errlen, STK_UNSUPPORTED,
        "resume_state has an unknown version %u (this library reads 1 and 2)",
        rs->version);
  if (rs->version == 2 && len < STK__STATE_SIZE)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "resume_state of version 2 is cut short (%zu of %u bytes)", len,
                     STK__STATE_SIZE);
  rs->job_hash = get64(p + 8);
  rs->rank = get32(p + 16);
  rs->world = get32(p + 20);
  rs->epoch = get64(p + 24);
  rs->step = get64(p + 32);
  if (rs->version >= 2) rs->position = get64(p + 40);
  if (rs->world == 0 || rs->rank >= rs->world)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "resume_state names rank %u of world size %u", rs->rank, rs->world);
  return STK_OK;
}

int stk__state_check_rank(const stk_client_config *cfg, const stk__resume *rs, char *err,
                          size_t errlen) {
  /* Same world: the state continues this rank's own stream, as it always
   * did. Another world: there is no old rank to match, any rank's state
   * names the position (see client.h, elastic resume). */
  if (rs->world == cfg->world_size && rs->rank != cfg->rank)
    return stk__errf(err, errlen, STK_MISMATCH,
                     "resume_state was saved by rank %u, this is rank %u (same world "
                     "size %u: each rank resumes from its own state)",
                     rs->rank, cfg->rank, rs->world);
  return STK_OK;
}

/* ---- the plan ------------------------------------------------------- */

/* Sequence number of step 0 of epoch e (e <= epochs). */
static uint64_t epoch_base(const stk_client *c, uint64_t e) {
  if (e <= c->plan.seg_epoch) return e * c->plan.spe;
  return c->plan.seg_epoch * c->plan.spe + c->plan.seg_steps +
         (e - c->plan.seg_epoch - 1) * c->plan.spe;
}

void stk__seq_addr(const stk_client *c, uint64_t seq, stk__addr *a) {
  uint64_t seg0 = c->plan.seg_epoch * c->plan.spe;
  if (seq < seg0) {
    a->epoch = seq / c->plan.spe, a->step = seq % c->plan.spe, a->offset = 0;
  } else if (seq - seg0 < c->plan.seg_steps) {
    a->epoch = c->plan.seg_epoch, a->step = seq - seg0, a->offset = c->plan.seg_offset;
  } else {
    uint64_t t = seq - seg0 - c->plan.seg_steps;
    a->epoch = c->plan.seg_epoch + 1 + t / c->plan.spe, a->step = t % c->plan.spe,
    a->offset = 0;
  }
}

uint64_t stk__epoch_offset(const stk_client *c, uint64_t epoch) {
  return epoch == c->plan.seg_epoch ? c->plan.seg_offset : 0;
}

int stk__addr_seq(const stk_client *c, uint64_t epoch, uint64_t step, uint64_t offset,
                  uint64_t *seq) {
  if (epoch >= c->job.spec.epochs || offset != stk__epoch_offset(c, epoch)) return -1;
  uint64_t steps = epoch == c->plan.seg_epoch ? c->plan.seg_steps : c->plan.spe;
  if (step >= steps) return -1;
  *seq = epoch_base(c, epoch) + step;
  return 0;
}

int stk__seq_epoch_start(const stk_client *c, uint64_t seq) {
  stk__addr a;
  stk__seq_addr(c, seq, &a);
  return a.step == 0;
}

/* The job hash the state's job would have: this job with the state's
 * world size (everything else, batch_size and num_samples included, must
 * be the same job). */
static uint64_t hash_with_world(const stk_client *c, uint32_t world) {
  stk_job_spec s = c->job.spec;
  s.world_size = world;
  return stk_job_spec_hash(&s);
}

int stk__plan_init(stk_client *c, const stk__resume *rs, char *err, size_t errlen) {
  uint64_t n = c->job.spec.num_samples;
  c->plan.nsamples = n;
  c->plan.spe = stk_steps_per_epoch(&c->job.spec, n);
  c->plan.seg_epoch = 0, c->plan.seg_offset = 0, c->plan.seg_steps = c->plan.spe;
  c->plan.total = c->plan.spe * c->job.spec.epochs;
  c->plan.start = 0;
  if (c->plan.spe == 0)
    return stk__errf(
        err, errlen, STK_INVALID_ARGUMENT,
        "the job has no steps per epoch (fewer samples than world_size x batch_size)");
  if (!rs) return STK_OK;
  int elastic = rs->world != c->job.spec.world_size;
  if (!elastic && rs->job_hash != c->job.hash)
    return stk__errf(err, errlen, STK_MISMATCH,
                     "resume_state belongs to another job (job hash differs)");
  if (elastic && rs->job_hash != hash_with_world(c, rs->world))
    return stk__errf(err, errlen, STK_MISMATCH,
                     "resume_state belongs to another job: saved with world_size %u, "
                     "this job has %u, and the jobs differ in more than world_size "
                     "(batch_size, num_samples, seed, pipeline, name...): only "
                     "world_size may change on resume",
                     rs->world, c->job.spec.world_size);
  if (rs->epoch > c->job.spec.epochs ||
      (rs->epoch == c->job.spec.epochs && rs->step != 0))
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "resume_state points past the end of the job");
  if (rs->epoch == c->job.spec.epochs) {
    c->plan.start = c->plan.total;
    return STK_OK;
  }
  /* The state's position in its own world: offset + step * W * B. */
  uint64_t old_per = (uint64_t)rs->world * c->job.spec.batch_size;
  uint64_t pos = rs->version >= 2 ? rs->position : rs->step * old_per;
  stk_job_spec old = c->job.spec;
  old.world_size = rs->world;
  if (pos >= n || pos / old_per != rs->step ||
      rs->step >= stk_epoch_steps(&old, n, pos % old_per))
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "resume_state points past the end of its epoch (step %llu, sample "
                     "position %llu of %llu)",
                     (unsigned long long)rs->step, (unsigned long long)pos,
                     (unsigned long long)n);
  uint64_t off = 0, step = 0;
  stk_resume_point(&c->job.spec, n, pos, &off, &step);
  c->plan.seg_epoch = rs->epoch;
  c->plan.seg_offset = off;
  c->plan.seg_steps = stk_epoch_steps(&c->job.spec, n, off);
  c->plan.total = epoch_base(c, c->job.spec.epochs);
  /* step == seg_steps (drop_last): fewer than W*B samples were left in
   * the epoch; they are dropped as the epoch's remainder always is, and
   * the stream starts with the next epoch. */
  c->plan.start = epoch_base(c, rs->epoch) + step;
  return STK_OK;
}

/* ---- save ----------------------------------------------------------- */

/* Write a state positioned at address a; *len is known to be large enough. */
static void write_state(const stk_client *c, const stk__addr *a, void *buf, size_t *len) {
  uint64_t per = (uint64_t)c->job.spec.world_size * c->job.spec.batch_size;
  unsigned char *p = buf;
  put32(p, STK__STATE_MAGIC);
  put32(p + 4, STK__STATE_VERSION);
  put64(p + 8, c->job.hash);
  put32(p + 16, c->cfg.rank);
  put32(p + 20, c->cfg.world_size);
  put64(p + 24, a->epoch);
  put64(p + 32, a->step);
  put64(p + 40, a->epoch < c->job.spec.epochs ? a->offset + a->step * per : 0);
  *len = STK__STATE_SIZE;
}

int stk_client_save_state(stk_client *c, void *buf, size_t *len) {
  if (!c || !len) return STK_INVALID_ARGUMENT;
  if (!buf || *len < STK__STATE_SIZE) {
    *len = STK__STATE_SIZE;
    return STK_LIMIT;
  }
  pthread_mutex_lock(&c->mu);
  uint64_t seq = c->api.next_deliver;
  pthread_mutex_unlock(&c->mu);
  stk__addr a;
  stk__seq_addr(c, seq, &a);
  write_state(c, &a, buf, len);
  return STK_OK;
}

int stk_client_position(stk_client *c, uint64_t *epoch, uint64_t *step) {
  if (!c || !epoch || !step) return STK_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->mu);
  uint64_t seq = c->api.next_deliver;
  pthread_mutex_unlock(&c->mu);
  stk__addr a;
  stk__seq_addr(c, seq, &a);
  *epoch = a.epoch;
  *step = a.step;
  return STK_OK;
}

int stk_client_state_at(const stk_client *c, uint64_t epoch, void *buf, size_t *len) {
  if (!c || !len) return STK_INVALID_ARGUMENT;
  if (!buf || *len < STK__STATE_SIZE) {
    *len = STK__STATE_SIZE;
    return STK_LIMIT;
  }
  if (epoch > c->job.spec.epochs) return STK_INVALID_ARGUMENT;
  stk__addr a;
  memset(&a, 0, sizeof(a));
  a.epoch = epoch; /* step 0, sample offset 0: the epoch from its start */
  write_state(c, &a, buf, len);
  return STK_OK;
}
