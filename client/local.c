/* local.c - the in-process worker of stk_client_open_local: builds the
 * requests the scheduler assigns to it with a stk_builder on this
 * client's dataset, instead of a stream.
 *
 * A transient build error (STK_UNAVAILABLE: out of descriptors, EIO, out
 * of memory) sends the request back to the queue after a backoff (20 ms
 * doubling to 1.28 s), like a remote worker's UNAVAILABLE; any other
 * build error is fatal. $STOKER_FAULT_CRC_EVERY=N makes every Nth batch
 * count as a crc32c mismatch (tests).
 *
 * Owns: the local worker entry's thread and its builder. Must not: hold
 * c->mu while building.
 */
#include <stdio.h>
#include <string.h>

#include "common/thread.h"
#include "common/clock.h"
#include "client_internal.h"

void *stk__local_main(void *arg) {
  stk__worker *w = arg;
  stk__thread_name("stk-local");
  stk_client *c = w->c;
  stk_builder *b = NULL;
  uint64_t fault_count = 0; /* local batches built, for $STOKER_FAULT_CRC_EVERY */
  char err[256] = "";
  if (stk_builder_create(c->job.dataset, &c->job.spec, &b, err, sizeof(err)) != STK_OK) {
    char msg[300];
    snprintf(msg, sizeof(msg), "local builder: %s", err);
    pthread_mutex_lock(&c->mu);
    stk__set_fatal(c, STK_INTERNAL, msg);
    w->thread_exited = 1;
    pthread_mutex_unlock(&c->mu);
    return NULL;
  }
  pthread_mutex_lock(&c->mu);
  while (!c->stopping && !c->errs.fatal) {
    stk__req *r = stk__req_local_take(c, w);
    if (!r) {
      pthread_cond_wait(&c->cv_local, &c->mu);
      continue;
    }
    uint64_t seq = r->seq;
    unsigned char *buf = r->buf; /* a local client has no hedges: stays r's */
    pthread_mutex_unlock(&c->mu);
    stk_build_info info;
    memset(&info, 0, sizeof(info));
    stk__addr a;
    stk__seq_addr(c, seq, &a);
    int st = stk_builder_build_at(b, a.epoch, a.offset, c->cfg.rank, a.step, buf,
                                  c->job.layout.total_bytes, &info);
    pthread_mutex_lock(&c->mu);
    if (st == STK_UNAVAILABLE) {
      /* Transient (out of descriptors, EIO, out of memory): nothing was
       * substituted; ask again after a backoff, as a remote worker's
       * UNAVAILABLE would have us do. */
      stk__req_local_retry(c, w, r);
      w->failures++;
      pthread_cond_broadcast(&c->cv_sched);
      int backoff = 10 << (w->failures < 7 ? w->failures : 7); /* to 1.28 s */
      int64_t until = stk__now_ns() + (int64_t)backoff * 1000000;
      for (int64_t now = stk__now_ns(); !c->stopping && !c->errs.fatal && now < until;
           now = stk__now_ns())
        stk__cond_wait_ms(&c->cv_local, &c->mu, (until - now) / 1000000 + 1);
      continue;
    }
    w->failures = 0;
    if (st) {
      char msg[300];
      snprintf(msg, sizeof(msg), "local builder: %s", stk_builder_error(b));
      stk__set_fatal(c, st, msg);
      break;
    }
    stk__pool_bytes(c, c->job.layout.total_bytes);
    /* Fault injection for tests ($STOKER_FAULT_CRC_EVERY=N): every Nth
     * local batch counts as a crc32c mismatch and takes the re-request
     * path a corrupted network batch takes (a local worker is never
     * dropped for it: it is the only one). */
    int crc_ok = 1;
    if (c->fault_crc_every && ++fault_count % c->fault_crc_every == 0) crc_ok = 0;
    stk__req_complete(c, w, seq, c->job.layout.total_bytes, crc_ok, info.substituted, 0);
  }
  w->thread_exited = 1;
  pthread_mutex_unlock(&c->mu);
  stk_builder_destroy(b);
  return NULL;
}
