/* fairsched.c - the worker's fair scheduler (see fairsched.h).
 *
 * One mutex guards everything: the free-buffer list, every stream's queue
 * and done list. Builders pick the next stream after the last one served
 * (by stream id, wrapping) that has a queued request: round-robin across
 * streams. A finished batch is announced with the stream's ready hook,
 * called without the lock while the builder still counts as building on
 * the stream, so a closed stream is freed only once no builder (and no
 * drain) holds it. Owns the builders, their threads and the buffers. Must
 * not call into gRPC (streams.c does that, outside this lock).
 */
#include "common/thread.h"
#include "fairsched.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "augment/batch.h"
#include "common/clock.h"
#include "common/error.h"
#include "daemon_log.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
/* ThreadSanitizer builds only (scripts/tsan.sh): gRPC, built without TSan,
 * carries a chunk's slice from the sending thread to whichever thread drops
 * it last, and its own locks order the two; TSan cannot see them, so say
 * it: each reference handed to gRPC is released, and the unref acquires. */
#define BUF_HANDOVER(b) __tsan_release(b)
#define BUF_TAKEOVER(b) __tsan_acquire(b)
#else
#define BUF_HANDOVER(b) ((void)0)
#define BUF_TAKEOVER(b) ((void)0)
#endif

struct fairsched_buf {
  sched *owner;
  uint8_t *data;
  int refs; /* atomic */
  struct fairsched_buf *next_free;
  /* Under owner->mu: the stream the buffer was taken for, until it is
   * free again (NULL once that stream closed). */
  struct fairsched_stream *stream;
};

typedef struct req {
  uint64_t epoch, step, offset;
  uint32_t rank;
  int u8; /* the image as 8-bit values (fairsched_stream_push) */
} req;

struct fairsched_stream {
  sched *s;
  uint64_t id;
  req *q; /* ring of cap requests */
  uint32_t cap, head, len;
  uint32_t outstanding; /* queued + building + built-not-yet-sending: a
                           batch stops counting when its sender takes it, so
                           a client that has received a whole batch may send
                           its next credit at once without racing the send's
                           completion */
  uint32_t building;
  uint32_t owned;      /* buffers taken for it and not free again: building,
                          built, being sent, or still referenced by gRPC */
  uint64_t sent_bytes; /* of its batches that went out whole */
  int proven;          /* sent_bytes >= SCHED_PROVEN_BYTES: more than the socket and
                          HTTP/2 windows hold, so its client reads */
  fairsched_done *done, *done_tail;
  int dead, half_closed;
  int closed; /* fairsched_stream_close ran: unlinked, freed when unpinned */
  int pins;   /* fairsched_drain is calling ready() */
  const fairsched_stream_hooks *hooks;
  void *arg;
  struct fairsched_stream *next;
};

typedef struct builder {
  sched *s;
  stk_builder *b;  /* the job's spec */
  stk_builder *b8; /* its uint8-image twin (s->spec8), made on first use */
  pthread_t thread;
} builder;

struct sched {
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* a request or a buffer appeared, or stop */
  pthread_cond_t buf_cv;  /* a buffer came back (for destroy) */
  stk_job_spec spec;
  stk_batch_layout layout;
  int wire_u8;        /* stk_image_wire_spec(spec): u8 requests honoured */
  stk_job_spec spec8; /* spec with a uint8 image */
  stk_batch_layout layout8;
  stk_dataset *ds;
  builder *builders;
  int nbuilders;
  fairsched_buf *bufs, *free_bufs;
  int nbufs, nfree;
  fairsched_stream *streams;
  uint64_t next_id, last_served;
  int stop, draining;
  uint32_t queued;
  fairsched_stats st;
  uint64_t bytes_sent;
  uint32_t fault_every; /* fairsched_set_fault_transient; 0 = off */
  uint64_t fault_count;
};

void fairsched_set_fault_transient(sched *s, uint32_t every) {
  pthread_mutex_lock(&s->mu);
  s->fault_every = every;
  pthread_mutex_unlock(&s->mu);
}

void fairsched_buf_ref(fairsched_buf *b) {
  __atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
  BUF_HANDOVER(b);
}

void fairsched_buf_unref(void *p) {
  fairsched_buf *b = p;
  BUF_TAKEOVER(b);
  if (__atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  sched *s = b->owner;
  pthread_mutex_lock(&s->mu);
  if (b->stream) b->stream->owned--;
  b->stream = NULL;
  b->next_free = s->free_bufs;
  s->free_bufs = b;
  s->nfree++;
  pthread_cond_broadcast(&s->work_cv);
  pthread_cond_broadcast(&s->buf_cv);
  pthread_mutex_unlock(&s->mu);
}

/* The stream to serve next, round-robin by id; NULL if none has work.
 * Counting every buffer a stream owns (building, built, being sent, or
 * still referenced by gRPC): a proven reader may own at most its share of
 * the pool (the pool over the readers that have work; at least 2), so a
 * client that stops reading cannot starve the others. A stream on
 * probation (less than SCHED_PROVEN_BYTES went out whole: its client may
 * never read) owns at most its share of what probation may hold: all of
 * them together at most half the pool (one buffer while a proven reader
 * waits), so streams that ask and never read pin at most half of the
 * buffers, until fairsched_reap (while others wait) or --send-stall-s ends
 * them, and proven readers keep the other half. */
static fairsched_stream *pick(sched *s) {
  fairsched_stream *after = NULL, *first = NULL;
  uint32_t nreaders = 0, probation_held = 0, least_owned = UINT32_MAX, nprobation = 0;
  for (fairsched_stream *st = s->streams; st; st = st->next) {
    if (!st->proven) {
      probation_held += st->owned;
      if ((st->len || st->owned) && !st->dead) nprobation++;
    } else if (st->len || st->owned) nreaders++;
    if (st->proven && st->len && !st->dead && st->owned < least_owned)
      least_owned = st->owned;
  }
  uint32_t cap = nreaders ? ((uint32_t)s->nbufs + nreaders - 1) / nreaders : 1;
  if (cap < 2) cap = 2;
  /* While a proven reader with requests is below its share, probation
   * gets one buffer in all instead of half the pool: streams that ask and
   * never read then cost proven clients one buffer, not half of them. */
  uint32_t probation_cap = least_owned < cap ? 1
                           : s->nbufs / 2    ? (uint32_t)s->nbufs / 2
                                             : 1;
  /* A stream on probation: its share of that (at least one), so a new
   * client alone on a worker keeps several builders busy from its first
   * batch, and many streams on probation get one each. */
  uint32_t pshare = nprobation ? probation_cap / nprobation : 1;
  if (pshare < 1) pshare = 1;
  fairsched_stream *ahead = NULL; /* on probation, the most sent */
  for (fairsched_stream *st = s->streams; st; st = st->next) {
    if (!st->len || st->dead || st->owned >= cap) continue;
    if (!st->proven && (st->owned >= pshare || probation_held >= probation_cap)) continue;
    if (st->id > s->last_served && (!after || st->id < after->id)) after = st;
    if (!first || st->id < first->id) first = st;
    if (!st->proven && (!ahead || st->sent_bytes > ahead->sent_bytes)) ahead = st;
  }
  fairsched_stream *next = after ? after : first;
  /* A turn of probation goes to the stream nearest its end: a client that
   * reads leaves probation at once instead of queueing behind streams
   * that take a batch and stop. A stream that has sent nothing yet keeps
   * its round-robin turn, so a new client's first batch waits for at most
   * one batch of each other stream, never for a leader's whole queue. */
  if (next && !next->proven && next->sent_bytes > 0 &&
      ahead->sent_bytes > next->sent_bytes)
    next = ahead;
  return next;
}

/* A closed stream nobody holds any more: the caller frees it. */
static int unpinned_locked(fairsched_stream *st) {
  return st->closed && st->building == 0 && st->pins == 0;
}

/* Free a closed, unpinned stream (no lock held) and tell its owner. */
static void stream_free(fairsched_stream *st) {
  fairsched_done *d = st->done;
  while (d) {
    fairsched_done *next = d->next;
    fairsched_buf_unref(d->buf);
    free(d);
    d = next;
  }
  const fairsched_stream_hooks *h = st->hooks;
  void *arg = st->arg;
  free(st->q);
  free(st);
  if (h->released) h->released(arg);
}

/* Count one successful build of dt ns in the histogram. Under s->mu. */
static void fairsched_hist_add(fairsched_stats *st, uint64_t dt) {
  static const double le[SCHED_HIST_BOUNDS] = SCHED_HIST_LE;
  size_t i = 0;
  while (i < SCHED_HIST_BOUNDS && (double)dt > le[i] * 1e9) i++;
  st->build_hist[i]++;
  st->build_ns_sum += dt;
}

static void *builder_main(void *arg) {
  builder *bd = arg;
  stk__thread_name("stk-build");
  sched *s = bd->s;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    fairsched_stream *st = NULL;
    while (!s->stop && (!s->free_bufs || !(st = pick(s))))
      pthread_cond_wait(&s->work_cv, &s->mu);
    if (s->stop) break;
    req r = st->q[st->head];
    st->head = (st->head + 1) % st->cap;
    st->len--;
    s->queued--;
    st->building++;
    s->last_served = st->id;
    /* Under the lock, as the "queued" line: the log shows the build order. */
    LOG_DEBUG("stream %llu: building epoch %llu rank %u step %llu",
              (unsigned long long)st->id, (unsigned long long)r.epoch, r.rank,
              (unsigned long long)r.step);
    fairsched_buf *buf = s->free_bufs;
    s->free_bufs = buf->next_free;
    s->nfree--;
    buf->stream = st;
    st->owned++;
    __atomic_store_n(&buf->refs, 1, __ATOMIC_RELAXED); /* atomic, as every access */
    int inject = s->fault_every && ++s->fault_count % s->fault_every == 0;
    pthread_mutex_unlock(&s->mu);

    /* The 8-bit form: its own builder, made on first use; without one
     * (out of memory) the job's form is built, which clients accept too. */
    if (r.u8 && !bd->b8) {
      char berr[256];
      if (stk_builder_create(s->ds, &s->spec8, &bd->b8, berr, sizeof berr))
        LOG_WARN("cannot make the uint8-image builder (%s): sending the job's dtype",
                 berr);
    }
    int u8 = r.u8 && bd->b8;
    stk_builder *bb = u8 ? bd->b8 : bd->b;
    uint64_t nbytes = u8 ? s->layout8.total_bytes : s->layout.total_bytes;

    uint32_t B = s->spec.batch_size;
    fairsched_done *d = calloc(1, sizeof(*d) + B * sizeof(uint64_t));
    stk__batch_facts f;
    memset(&f, 0, sizeof(f));
    const stk_build_info *info = &f.info;
    uint64_t t0 = (uint64_t)stk__now_ns();
    static const char injected[] = "injected transient error (--fault-transient-every)";
    int rc = inject ? STK_UNAVAILABLE
                    : stk__batch_assemble(bb, r.epoch, r.offset, r.rank, r.step,
                                          buf->data, nbytes, &f);
    /* A transient error (out of descriptors, EIO, out of memory: never a
     * bad sample) gets a bounded retry here; after that the stream ends
     * UNAVAILABLE and the client asks again (streams.c). */
    int retries = 0;
    for (; rc == STK_UNAVAILABLE && retries < SCHED_TRANSIENT_RETRIES; retries++) {
      LOG_LIMITED(STK_LOG_WARN, 20, "%s (retry %d of %d)",
                  inject ? injected : stk_builder_error(bb), retries + 1,
                  SCHED_TRANSIENT_RETRIES);
      stk__sleep_ms(10 << (3 * retries)); /* 10 ms, 80 ms */
      rc = inject ? STK_UNAVAILABLE
                  : stk__batch_assemble(bb, r.epoch, r.offset, r.rank, r.step, buf->data,
                                        nbytes, &f);
    }
    uint64_t dt = (uint64_t)stk__now_ns() - t0;
    /* The job's own op failed on a sample of this batch and its policy
     * fails the job at the first such error (bad_samples' default, or
     * fail: no budget for them): the batch is not sent, the stream ends
     * with the error (streams.c), so the rank fails at this step however
     * short the job (the coordinator's abort follows with the heartbeat).
     * Another worker would build the same bytes: asking elsewhere cannot
     * help. A budget (substitute(N), substitute(P%)) is the job's, summed
     * by the coordinator over every worker. */
    int user_fail = !rc && info->user_code &&
                    stk_job_bad_samples_budget(&s->spec, 1, s->spec.num_samples) == 0;
    if (user_fail) rc = STK_USER_CODE;
    if (d) {
      d->buf = buf;
      d->data = buf->data;
      d->epoch = r.epoch, d->step = r.step, d->rank = r.rank, d->offset = r.offset;
      d->substituted = info->substituted;
      d->u8 = u8;
      d->total_bytes = nbytes;
      if (!rc) { /* the assembler's header facts */
        d->crc32c = f.crc32c;
        memcpy(d->indices, f.indices, B * sizeof(uint64_t));
      }
      d->status = rc;
      if (user_fail)
        snprintf(d->err, sizeof(d->err),
                 "the job failed: a python or plugin op failed on a sample of batch "
                 "(epoch %llu, rank %u, step %llu) (bad_samples = fail is the default; "
                 "bad_samples = substitute(N) or substitute(P%%) replaces such samples "
                 "within a budget): %s",
                 (unsigned long long)r.epoch, r.rank, (unsigned long long)r.step,
                 stk_builder_error(bb));
      else if (rc)
        snprintf(d->err, sizeof(d->err),
                 "building batch (epoch %llu, rank %u, "
                 "step %llu) failed: %s",
                 (unsigned long long)r.epoch, r.rank, (unsigned long long)r.step,
                 inject ? injected : stk_builder_error(bb));
    }
    if (rc == STK_UNAVAILABLE)
      LOG_LIMITED(STK_LOG_WARN, 20, "%s", d ? d->err : stk_builder_error(bb));
    else if (user_fail) /* bad_samples.c logged the error with its traceback */
      LOG_LIMITED(STK_LOG_ERROR, 20,
                  "batch (epoch %llu, rank %u, step %llu) not sent: a sample's op "
                  "failed and the job's bad_samples policy fails the job",
                  (unsigned long long)r.epoch, r.rank, (unsigned long long)r.step);
    else if (rc) LOG_LIMITED(STK_LOG_ERROR, 20, "%s", d ? d->err : stk_builder_error(bb));

    int drop = 0;
    pthread_mutex_lock(&s->mu);
    s->st.busy_ns += dt;
    s->st.transient_retries += (uint64_t)retries;
    if (rc == STK_UNAVAILABLE) s->st.transient_errors++;
    else if (rc) s->st.build_errors++;
    else {
      s->st.batches_built++, s->st.samples_substituted += info->substituted;
      fairsched_hist_add(&s->st, dt);
    }
    s->st.samples_reread += info->reread;
    if (d && !st->dead) {
      if (st->done_tail) st->done_tail->next = d;
      else st->done = d;
      st->done_tail = d;
    } else {
      drop = 1;
      if (!d) st->dead = 1; /* out of memory: end the stream, never lose a batch */
    }
    int notify = !st->closed;
    pthread_mutex_unlock(&s->mu);
    if (drop) {
      free(d);
      fairsched_buf_unref(buf);
    }
    if (notify) st->hooks->ready(st->arg);
    pthread_mutex_lock(&s->mu);
    st->building--;
    if (unpinned_locked(st)) {
      pthread_mutex_unlock(&s->mu);
      stream_free(st);
      pthread_mutex_lock(&s->mu);
    }
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int fairsched_create(const stk_job_spec *spec, stk_dataset *ds, int threads, int nbuffers,
                     sched **out, char *err, size_t errlen) {
  *out = NULL;
  sched *s = calloc(1, sizeof(*s));
  if (!s) return stk__errf(err, errlen, -1, "out of memory");
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work_cv, NULL);
  pthread_cond_init(&s->buf_cv, NULL);
  s->spec = *spec;
  s->ds = ds;
  if (stk_batch_layout_of(spec, &s->layout)) {
    snprintf(err, errlen, "invalid job spec (no batch layout)");
    goto fail;
  }
  s->wire_u8 = stk_image_wire_spec(spec, &s->spec8) &&
               stk_batch_layout_of(&s->spec8, &s->layout8) == STK_OK;
  if (threads < 1) threads = 1;
  if (nbuffers < threads) nbuffers = threads;
  s->bufs = calloc((size_t)nbuffers, sizeof(fairsched_buf));
  s->builders = calloc((size_t)threads, sizeof(builder));
  if (!s->bufs || !s->builders) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  s->nbufs = nbuffers;
  for (int i = 0; i < nbuffers; i++) {
    fairsched_buf *b = &s->bufs[i];
    b->owner = s;
    /* 64-byte aligned: the layout's tensors are. */
    if (posix_memalign((void **)&b->data, 64, s->layout.total_bytes)) {
      b->data = NULL;
      snprintf(err, errlen, "cannot allocate %d batch buffers of %llu bytes", nbuffers,
               (unsigned long long)s->layout.total_bytes);
      goto fail;
    }
    /* Touched now, every page: the free list hands out the buffer freed
     * last, so the deepest one is first used when a slow client holds the
     * others, possibly an hour in, and the worker's RSS would rise by a
     * batch then. Resident from the start, RSS stays flat. */
    memset(b->data, 0, s->layout.total_bytes);
    b->next_free = s->free_bufs;
    s->free_bufs = b;
    s->nfree++;
  }
  for (int i = 0; i < threads; i++) {
    builder *bd = &s->builders[i];
    bd->s = s;
    if (stk_builder_create(ds, spec, &bd->b, err, errlen)) goto fail;
    if (pthread_create(&bd->thread, NULL, builder_main, bd)) {
      stk_builder_destroy(bd->b);
      bd->b = NULL;
      snprintf(err, errlen, "cannot start a builder thread");
      goto fail;
    }
    s->nbuilders++;
  }
  *out = s;
  return 0;
fail:
  fairsched_destroy(s, 0);
  return -1;
}

void fairsched_destroy(sched *s, int wait_ms) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
  if (s->builders) {
    for (int i = 0; i < s->nbuilders; i++) {
      pthread_join(s->builders[i].thread, NULL);
      stk_builder_destroy(s->builders[i].b);
      stk_builder_destroy(s->builders[i].b8);
    }
  }
  /* gRPC may still hold chunk slices for a moment after the calls end. */
  pthread_mutex_lock(&s->mu);
  int64_t until = stk__now_ms() + wait_ms;
  int held = 0;
  while (s->nfree < s->nbufs && s->bufs && s->bufs[0].data)
    if (stk__cond_wait_until(&s->buf_cv, &s->mu, until)) break;
  held = s->nfree < s->nbufs;
  pthread_mutex_unlock(&s->mu);
  if (held && s->bufs && s->bufs[0].data) {
    /* Leak rather than free memory gRPC may still read. */
    LOG_WARN("%d batch buffers still referenced at exit", s->nbufs - s->nfree);
  } else if (s->bufs) {
    for (int i = 0; i < s->nbufs; i++) free(s->bufs[i].data);
    free(s->bufs);
  }
  free(s->builders);
  pthread_cond_destroy(&s->work_cv);
  pthread_cond_destroy(&s->buf_cv);
  pthread_mutex_destroy(&s->mu);
  if (!held) free(s);
}

void fairsched_stats_get(sched *s, fairsched_stats *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->st;
  out->queued_requests = s->queued;
  out->free_buffers = (uint32_t)s->nfree;
  out->nbuffers = (uint32_t)s->nbufs;
  uint32_t n = 0;
  for (fairsched_stream *st = s->streams; st; st = st->next) n++;
  out->active_streams = n;
  pthread_mutex_unlock(&s->mu);
}

uint64_t fairsched_bytes_sent(sched *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t b = s->bytes_sent;
  pthread_mutex_unlock(&s->mu);
  return b;
}

void fairsched_drain(sched *s) {
  pthread_mutex_lock(&s->mu);
  s->draining = 1;
  size_t n = 0;
  for (fairsched_stream *st = s->streams; st; st = st->next) n++;
  fairsched_stream **v = calloc(n ? n : 1, sizeof(*v));
  n = 0;
  for (fairsched_stream *st = s->streams; v && st; st = st->next) st->pins++, v[n++] = st;
  pthread_mutex_unlock(&s->mu);
  /* Each owner polls and ends its stream once everything asked was sent
   * (without the list, out of memory, streams end at their next batch). */
  for (size_t i = 0; i < n; i++) v[i]->hooks->ready(v[i]->arg);
  for (size_t i = 0; i < n; i++) {
    pthread_mutex_lock(&s->mu);
    v[i]->pins--;
    int gone = unpinned_locked(v[i]);
    pthread_mutex_unlock(&s->mu);
    if (gone) stream_free(v[i]);
  }
  free(v);
}

fairsched_stream *fairsched_stream_open(sched *s, const fairsched_stream_hooks *hooks,
                                        void *arg) {
  fairsched_stream *st = calloc(1, sizeof(*st));
  if (!st) return NULL;
  st->s = s;
  st->hooks = hooks;
  st->arg = arg;
  pthread_mutex_lock(&s->mu);
  if (s->draining) {
    pthread_mutex_unlock(&s->mu);
    free(st);
    return NULL;
  }
  st->id = ++s->next_id;
  st->next = s->streams;
  s->streams = st;
  pthread_mutex_unlock(&s->mu);
  return st;
}

int fairsched_stream_push(fairsched_stream *st, uint64_t epoch, uint32_t rank,
                          uint64_t step, uint64_t offset, int image_u8,
                          uint32_t max_outstanding) {
  sched *s = st->s;
  int rc = 0;
  pthread_mutex_lock(&s->mu);
  if (st->outstanding >= max_outstanding) {
    rc = -1;
  } else {
    if (st->len == st->cap) {
      uint32_t ncap = st->cap ? st->cap * 2 : 8;
      req *nq = malloc(ncap * sizeof(req));
      if (!nq) {
        rc = -1;
        goto out;
      }
      for (uint32_t i = 0; i < st->len; i++) nq[i] = st->q[(st->head + i) % st->cap];
      free(st->q);
      st->q = nq;
      st->cap = ncap;
      st->head = 0;
    }
    st->q[(st->head + st->len) % st->cap] =
        (req){epoch, step, offset, rank, image_u8 && s->wire_u8};
    st->len++;
    st->outstanding++;
    s->queued++;
    LOG_DEBUG("stream %llu: queued epoch %llu rank %u step %llu",
              (unsigned long long)st->id, (unsigned long long)epoch, rank,
              (unsigned long long)step);
    pthread_cond_broadcast(&s->work_cv);
  }
out:
  pthread_mutex_unlock(&s->mu);
  return rc;
}

fairsched_done *fairsched_stream_poll(fairsched_stream *st, int *why) {
  sched *s = st->s;
  fairsched_done *d = NULL;
  *why = SCHED_END_NONE;
  pthread_mutex_lock(&s->mu);
  if (st->dead) {
    *why = SCHED_END_DEAD;
  } else if (st->done) {
    d = st->done;
    st->outstanding--;
    st->done = d->next;
    if (!st->done) st->done_tail = NULL;
    d->next = NULL;
  } else if (st->outstanding == 0 && st->half_closed) {
    *why = SCHED_END_DONE;
  } else if (st->outstanding == 0 && s->draining) {
    *why = SCHED_END_DRAINED;
  }
  pthread_mutex_unlock(&s->mu);
  return d;
}

void fairsched_stream_sent(fairsched_stream *st, fairsched_done *d, uint64_t bytes) {
  sched *s = st->s;
  pthread_mutex_lock(&s->mu);
  s->bytes_sent += bytes;
  st->sent_bytes += bytes;
  if (st->sent_bytes >= SCHED_PROVEN_BYTES) st->proven = 1;
  pthread_cond_broadcast(&s->work_cv); /* the stream may be under its cap again */
  pthread_mutex_unlock(&s->mu);
  fairsched_buf_unref(d->buf);
  free(d);
}

void fairsched_stream_half_close(fairsched_stream *st) {
  pthread_mutex_lock(&st->s->mu);
  st->half_closed = 1;
  pthread_mutex_unlock(&st->s->mu);
}

static void kill_locked(fairsched_stream *st) {
  st->dead = 1;
  st->s->queued -= st->len;
  st->outstanding -= st->len;
  st->len = 0;
}

void fairsched_stream_kill(fairsched_stream *st) {
  pthread_mutex_lock(&st->s->mu);
  kill_locked(st);
  pthread_mutex_unlock(&st->s->mu);
}

void fairsched_stream_close(fairsched_stream *st) {
  sched *s = st->s;
  pthread_mutex_lock(&s->mu);
  kill_locked(st);
  for (fairsched_stream **pp = &s->streams; *pp; pp = &(*pp)->next)
    if (*pp == st) {
      *pp = st->next;
      break;
    }
  st->closed = 1;
  /* Buffers still referenced (by a builder, or by gRPC) stop counting
   * for it: st may be freed before they come back. */
  for (int i = 0; i < s->nbufs; i++)
    if (s->bufs[i].stream == st) s->bufs[i].stream = NULL;
  st->owned = 0;
  /* Batches built but never taken give their buffers back now. */
  fairsched_done *d = st->done;
  st->done = st->done_tail = NULL;
  int gone = unpinned_locked(st);
  pthread_cond_broadcast(&s->work_cv); /* fewer streams: larger buffer shares */
  pthread_mutex_unlock(&s->mu);
  while (d) {
    fairsched_done *next = d->next;
    fairsched_buf_unref(d->buf);
    free(d);
    d = next;
  }
  if (gone) stream_free(st);
}

int fairsched_reap(sched *s, int64_t now_ms, int stall_ms) {
  int wait_ms = stall_ms / 8 > SCHED_SUSPECT_MS ? stall_ms / 8 : SCHED_SUSPECT_MS;
  pthread_mutex_lock(&s->mu);
  /* Someone waits: a stream with requests and no buffer at all. */
  int waiting = 0;
  for (fairsched_stream *st = s->streams; st && !waiting; st = st->next)
    waiting = st->len && !st->owned && !st->dead;
  fairsched_stream *v[64];
  size_t n = 0;
  for (fairsched_stream *st = s->streams; waiting && st && n < sizeof(v) / sizeof(v[0]);
       st = st->next)
    if (!st->proven && st->owned && !st->dead && !st->closed) st->pins++, v[n++] = st;
  pthread_mutex_unlock(&s->mu);
  int ended = 0;
  for (size_t i = 0; i < n; i++) {
    int e = v[i]->hooks->stalled && v[i]->hooks->stalled(v[i]->arg, now_ms, wait_ms);
    pthread_mutex_lock(&s->mu);
    if (e) kill_locked(v[i]), s->st.send_stalled++, ended++;
    v[i]->pins--;
    int gone = unpinned_locked(v[i]);
    pthread_mutex_unlock(&s->mu);
    if (gone) stream_free(v[i]);
  }
  return ended;
}
