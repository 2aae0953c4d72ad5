/* ring.c - reorder and device slots: the receive-buffer pool's memory, the
 * ring of `slots` device slots, and the copy thread.
 *
 * The copy thread waits until the request holding the next step in order
 * (c->ring.next_copy) is DONE and a slot is FREE, then moves the batch into the
 * slot: the payload buffer is swapped with the slot's (no copy for the CPU
 * backend without conversion), converted if cfg.convert asks or the batch
 * came with 8-bit images for a float job (wire_u8), and for CUDA copied to
 * device memory on the backend's stream. The conversion runs on the CPU,
 * or for CUDA on the device when its kernel loaded (backend_cuda.c). Steps thus
 * reach slots strictly in order while the caller holds earlier slots; a
 * held slot is never touched (its state is HELD until release).
 *
 * Owns: c->ring (slots and their states, the copy thread); the memory of
 * c->pool (reqs[].buf, hedges[].buf and slots[].payload are one pool whose
 * pointers move between them; the states are requests.c's), converted
 * buffers. Must not: hold c->mu while copying or converting.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/thread.h"
#include "common/cpulimit.h"
#include "common/error.h"
#include "client_internal.h"

/* Host memory for a payload from the backend (pinned for CUDA). Ordinary
 * host memory is touched here, every page, so a rank's RSS reaches its
 * bound at open: the pool's buffers move between requests, hedges and
 * slots, and a buffer first used an hour in (a hedge's, when hedging
 * first fires) would otherwise raise RSS by a batch then, for good.
 * (Pinned memory is resident once allocated.) */
static void *alloc_host(stk_client *c, size_t n) {
  if (c->cuda) return stk__cuda_host_alloc(c, n);
  void *p = stk__host_alloc(c, n);
  if (p) memset(p, 0, n);
  return p;
}
/* Free what alloc_host returned (NULL-safe). */
static void free_host(stk_client *c, void *p) {
  if (!p) return;
  if (c->cuda) stk__cuda_host_free(c, p);
  else stk__host_free(c, p);
}

/* Hedge slots (sched.c, requests.c): a quarter of prefetch, at least 2 and at most 8
 * (never more than prefetch); none for a local client, which has one
 * worker, or with $STOKER_HEDGE=0. */
static uint32_t hedge_slots(const stk_client *c) {
  const char *env = getenv("STOKER_HEDGE");
  if (c->local || (env && !strcmp(env, "0"))) return 0;
  uint32_t n = c->cfg.prefetch / 4;
  if (n < 2) n = 2;
  if (n > 8) n = 8;
  return n < c->cfg.prefetch ? n : c->cfg.prefetch;
}

int stk__ring_init(stk_client *c, char *err, size_t errlen) {
  size_t tb = (size_t)c->job.layout.total_bytes;
  uint32_t nh = hedge_slots(c);
  uint64_t need = (uint64_t)(c->cfg.prefetch + c->cfg.slots + nh) * tb;
  if (need > (64ull << 30)) {
    return stk__errf(
        err, errlen, STK_LIMIT,
        "prefetch + slots + hedge buffers would need %llu MiB (limit 64 GiB)",
        (unsigned long long)(need >> 20));
  }
  uint32_t nreqs = c->cfg.prefetch;
  stk__req *reqs = calloc(nreqs, sizeof(stk__req));
  c->ring.nslots = c->cfg.slots;
  c->ring.slots = calloc(c->ring.nslots, sizeof(stk_batch));
  c->ring.next_copy = c->plan.start;
  stk__hedge *hedges = nh ? calloc(nh, sizeof(stk__hedge)) : NULL;
  int ok = reqs && c->ring.slots && (!nh || hedges);
  for (uint32_t i = 0; reqs && i < nreqs; i++) {
    reqs[i].worker = -1;
    reqs[i].avoid = -1;
    reqs[i].hedge = -1;
    if (ok && !(reqs[i].buf = alloc_host(c, tb))) ok = 0;
  }
  for (uint32_t i = 0; hedges && i < nh; i++) {
    hedges[i].req = -1;
    hedges[i].worker = -1;
    if (ok && !(hedges[i].buf = alloc_host(c, tb))) ok = 0;
  }
  /* The join has started the worker threads already, and one whose stream
   * ends walks the pool (stk__req_requeue_worker) under c->mu: publish the pool under
   * c->mu, whole (a reader saw nreqs set and reqs still NULL before; found
   * by TSan). After a failure, stk__ring_free frees what is there. */
  pthread_mutex_lock(&c->mu);
  c->pool.reqs = reqs;
  c->pool.nreqs = reqs ? nreqs : 0;
  c->pool.hedges = hedges;
  c->pool.nhedges = hedges ? nh : 0;
  pthread_mutex_unlock(&c->mu);
  if (!ok) goto nomem;
  /* host buffers for converted batches, unless the device converts (then
   * stk__batch_host_payload makes one when asked) */
  int conv =
      (c->cfg.convert != STK_CONVERT_NONE || c->job.wire_u8) && !stk__cuda_kernel(c);
  for (uint32_t i = 0; i < c->ring.nslots; i++) {
    stk_batch *s = &c->ring.slots[i];
    s->c = c;
    s->idx = (int)i;
    if (!(s->payload = alloc_host(c, tb))) goto nomem;
    if (conv && !(s->conv = alloc_host(c, (size_t)c->job.out.total_bytes))) goto nomem;
    if (c->cuda) {
      int st = stk__cuda_slot_init(c, s, err, errlen);
      if (st) return st;
    }
  }
  return STK_OK;
nomem:
  return stk__errf(err, errlen, STK_NO_MEMORY,
                   "cannot allocate %u receive buffers + %u slots + %u hedge buffers "
                   "of %zu bytes",
                   c->cfg.prefetch, c->cfg.slots, nh, tb);
}

void stk__ring_free_transfer(stk_client *c) {
  /* copies still queued on the device read the pinned buffers: let them
   * finish before any buffer goes */
  if (c->cuda) stk__cuda_sync(c);
  if (c->pool.reqs) {
    for (uint32_t i = 0; i < c->pool.nreqs; i++) free_host(c, c->pool.reqs[i].buf);
    free(c->pool.reqs);
    c->pool.reqs = NULL;
  }
  if (c->pool.hedges) {
    for (uint32_t i = 0; i < c->pool.nhedges; i++) free_host(c, c->pool.hedges[i].buf);
    free(c->pool.hedges);
    c->pool.hedges = NULL;
  }
}

void stk__ring_free(stk_client *c) {
  stk__ring_free_transfer(c);
  if (c->ring.slots) {
    for (uint32_t i = 0; i < c->ring.nslots; i++) {
      stk_batch *s = &c->ring.slots[i];
      free_host(c, s->payload);
      free_host(c, s->conv);
      if (c->cuda) stk__cuda_slot_free(c, s);
    }
    free(c->ring.slots);
    c->ring.slots = NULL;
  }
}

/* The host tensors of slot s: converted (cfg.convert, or a float image
 * that came as 8-bit values) or as received. */
static unsigned char *host_data(const stk_client *c, const stk_batch *s) {
  return c->cfg.convert != STK_CONVERT_NONE || s->u8 ? s->conv : s->payload;
}

/* A float job's batch that came with 8-bit images (src, wire layout)
 * rebuilt on the host into dst (the job's layout). */
static void rebuild_u8(const stk_client *c, const unsigned char *src,
                       unsigned char *dst) {
  stk__convert_batch(&c->job.spec, stk__wire_convert(&c->job.spec), &c->job.wire, src,
                     &c->job.layout, dst, c->job.spec.layout == STK_LAYOUT_NHWC);
}

const unsigned char *stk__batch_host_payload(stk_batch *b) {
  stk_client *c = b->c;
  if (!b->u8) return b->payload;
  if (b->conv_stale) { /* converted on the device only: rebuild it here */
    if (!b->conv && !(b->conv = alloc_host(c, (size_t)c->job.out.total_bytes)))
      return NULL;
    rebuild_u8(c, b->payload, b->conv);
    b->conv_stale = 0;
  }
  return b->conv;
}

/* s's tensor descriptors (c->job.out) over its host or device data. */
static void set_tensors(stk_client *c, stk_batch *s) {
  unsigned char *base = c->cuda ? (unsigned char *)s->dev : host_data(c, s);
  for (uint32_t i = 0; i < c->job.out.ntensors; i++) {
    const stk_tensor_desc *d = &c->job.out.tensors[i];
    stk_tensor *t = &s->tensors[i];
    memset(t, 0, sizeof(*t));
    t->name = d->name;
    t->dtype = d->dtype;
    t->ndim = d->ndim;
    for (uint32_t k = 0; k < d->ndim && k < STK_MAX_DIMS; k++)
      t->shape[k] = (int64_t)d->shape[k];
    t->data = base + d->offset;
    t->nbytes = d->nbytes;
    t->device = c->cuda ? STK_DEVICE_CUDA : STK_DEVICE_CPU;
  }
}

/* The copy thread: the next step in order, from its DONE request into a
 * FREE slot (swapped, converted, copied to the device), then READY. */
static void *copy_main(void *arg) {
  stk_client *c = arg;
  stk__thread_name("stk-copy");
  pthread_mutex_lock(&c->mu);
  while (!c->stopping && !c->errs.fatal) {
    /* this thread's CPU so far: part of the receive path (stk_stats) */
    stk__recv_cpu_note(c, STK__CPU_COPY);
    stk__req *r = NULL;
    stk_batch *s = NULL;
    if (c->ring.next_copy < c->plan.total) {
      r = stk__req_done(c, c->ring.next_copy);
      for (uint32_t i = 0; i < c->ring.nslots && r && !s; i++)
        if (c->ring.slots[i].state == SLOT_FREE) s = &c->ring.slots[i];
    }
    if (!r || !s) {
      pthread_cond_wait(&c->cv_copy, &c->mu);
      continue;
    }
    s->state = SLOT_FILLING;
    pthread_mutex_unlock(&c->mu);

    int st = STK_OK;
    if (c->cuda) st = stk__cuda_before_fill(c, s);
    unsigned char *tmp = s->payload; /* swap: the batch moves, no copy */
    s->payload = r->buf;
    r->buf = tmp;
    /* cfg.convert: the uint8 job's image to float; r->u8: the float job's
     * image came as 8-bit values, rebuilt to the job's dtype */
    s->u8 = r->u8;
    s->conv_stale = 0;
    if (!st && stk__cuda_kernel(c) && (r->u8 || c->cfg.convert != STK_CONVERT_NONE)) {
      /* on the device: the 8-bit images cross PCIe */
      if (r->u8)
        st = stk__cuda_fill_convert(c, s, &c->job.wire, s->payload, &c->job.layout,
                                    c->job.spec.layout == STK_LAYOUT_NHWC);
      else st = stk__cuda_fill_convert(c, s, &c->job.layout, s->payload, &c->job.out, 0);
      s->conv_stale = 1;
    } else if (!st && r->u8) rebuild_u8(c, s->payload, s->conv);
    else if (!st && c->cfg.convert != STK_CONVERT_NONE)
      stk__convert_batch(&c->job.spec, c->cfg.convert, &c->job.layout, s->payload,
                         &c->job.out, s->conv, 0);
    if (!st && c->cuda && !s->conv_stale)
      st = stk__cuda_fill(c, s, host_data(c, s), (size_t)c->job.out.total_bytes);
    set_tensors(c, s);

    pthread_mutex_lock(&c->mu);
    if (st) {
      char msg[256];
      snprintf(msg, sizeof(msg), "CUDA copy failed: %s", stk__cuda_error(c));
      stk__set_fatal(c, st, msg);
      s->state = SLOT_FREE;
      break;
    }
    s->seq = r->seq;
    s->state = SLOT_READY;
    stk__req_recycle(c, r);
    c->ring.next_copy++;
    pthread_cond_broadcast(&c->cv_next);
    pthread_cond_broadcast(&c->cv_sched);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

int stk__copy_start(stk_client *c) {
  if (pthread_create(&c->ring.thread, NULL, copy_main, c)) return -1;
  c->ring.started = 1;
  return 0;
}

void stk__copy_stop(stk_client *c) {
  if (c->ring.started) pthread_join(c->ring.thread, NULL);
}

/* ---- the caller's side of the slots (client.c, under mu) -------------- */

stk_batch *stk__slot_take(stk_client *c, uint64_t seq) {
  for (uint32_t i = 0; i < c->ring.nslots; i++) {
    stk_batch *s = &c->ring.slots[i];
    if (s->state == SLOT_READY && s->seq == seq) {
      s->state = SLOT_HELD;
      return s;
    }
  }
  return NULL;
}

int stk__slot_give_back(stk_client *c, stk_batch *b) {
  if (b->state != SLOT_HELD) return 0;
  b->state = SLOT_FREE;
  pthread_cond_broadcast(&c->cv_copy);
  return 1;
}
