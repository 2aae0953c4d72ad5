/* stream.c - the remote workers' streams: each served worker is a runner,
 * a state machine on a small fixed pool of io threads that share one
 * completion queue per client (client_internal.h, "Stream life"), so the
 * client's threads do not grow with the number of workers. A runner opens
 * its Worker.Stream, reconnects, receives its batches (frames checked
 * against the job's layout, chunks copied once into the claimed buffer
 * after bounds checks, crc32c verified while copying) and sends the
 * scheduler's requests (queued, one send in flight).
 *
 * One receive is in flight per stream, so a stream's messages are handled
 * one at a time, in order, by whichever io thread gets the event. Timers
 * (reconnect backoff, the silence cut, a runner's end) are a scan of the
 * runners that one io thread runs at most every SCAN_MS; the io threads
 * wake at least that often.
 *
 * When the stream breaks its requests go back to the queue (requests.c: a
 * hedge in flight elsewhere takes over instead); the runner then retries
 * the worker with backoff (100 ms doubling to 2 s) while it is still
 * wanted (listed, not dropped, in this rank's working set: client_workers.c). A
 * worker that stops answering without breaking its connection is cut
 * after 30 s of silence (1 s once the coordinator no longer lists it); one
 * that only left the working set is closed once it holds no request.
 *
 * Dropping a worker (client_workers.c keeps the record): a stream that ends with
 * a final status (INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION: it
 * disagrees with us about the job or protocol; UNAUTHENTICATED,
 * PERMISSION_DENIED: our token), a malformed message, or
 * STK__CRC_STREAK_MAX batches in a row whose crc32c does not match
 * (requests.c). Every other status re-issues and retries.
 *
 * Owns: c->io (the queue, the io threads, the runners) and the stream
 * part of each remote worker entry (channel, run, alive, probing, cap,
 * failures). Must not: hold c->mu while opening or closing a channel,
 * taking events or copying a payload.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <grpc/support/time.h>

#include "common/thread.h"
#include "common/cpulimit.h"
#include "common/clock.h"
#include "client_internal.h"
#include "stoker.pb-c.h"
#include "rpc/wire.h"

/* One batch being received on a stream (the receiver's own, no lock). */
typedef struct rx {
  int active;
  int u8;             /* the batch came in the wire_u8 form */
  unsigned char *dst; /* the copy's buffer, NULL = dropping a duplicate */
  uint64_t seq;
  uint32_t substituted;
  uint64_t total, got;
  uint32_t crc;     /* from the header */
  uint32_t crc_acc; /* of the chunks so far, in offset order */
} rx;

/* 0 when h describes exactly layout L, else -1 with why. */
static int header_is(const Stoker__V1__BatchHeader *h, const stk_batch_layout *L,
                     char *why, size_t n) {
  if (h->total_bytes != L->total_bytes) {
    snprintf(why, n, "batch of %llu bytes, the job's layout has %llu",
             (unsigned long long)h->total_bytes, (unsigned long long)L->total_bytes);
    return -1;
  }
  if (h->n_tensors != L->ntensors) {
    snprintf(why, n, "batch with %zu tensors, want %u", h->n_tensors, L->ntensors);
    return -1;
  }
  for (size_t i = 0; i < h->n_tensors; i++) {
    const stk_tensor_desc *d = &L->tensors[i];
    if (!h->tensors[i] || h->tensors[i]->offset != d->offset ||
        h->tensors[i]->nbytes != d->nbytes) {
      snprintf(why, n, "tensor %zu at a different offset/size than the layout", i);
      return -1;
    }
  }
  return 0;
}

/* The form of a batch from its header: 0 the job's layout, 1 the wire_u8
 * one (only when this client asked for it), -1 neither (why says). */
static int check_header(stk_client *c, const Stoker__V1__BatchHeader *h, char *why,
                        size_t n) {
  if (c->job.wire_u8 && h->total_bytes == c->job.wire.total_bytes)
    return header_is(h, &c->job.wire, why, n) ? -1 : 1;
  return header_is(h, &c->job.layout, why, n) ? -1 : 0;
}

/* A payload chunk m of the batch in x: bounds-checked, copied once into
 * x->dst (crc32c taken while copying); the last one completes the copy
 * (under mu). 0, or -1 with why: a protocol error. */
static int on_chunk(stk_client *c, stk__worker *w, rx *x, grpc_byte_buffer *bb,
                    const stk__wire_msg *m, char *why, size_t n) {
  if (!x->active) {
    snprintf(why, n, "payload chunk without a batch header");
    return -1;
  }
  if (m->offset != x->got || m->len > x->total - x->got) {
    snprintf(why, n, "chunk [%llu, +%llu) out of order or past the batch end %llu",
             (unsigned long long)m->offset, (unsigned long long)m->len,
             (unsigned long long)x->total);
    return -1;
  }
  if (x->dst && m->len) {
    /* x->dst was this copy's buffer when its header came; a buffer being
     * written never changes hands (client_internal.h), so no lock is needed. */
    unsigned char *dst = x->dst + m->offset;
    if (c->cfg.verify_crc) x->crc_acc = stk__wire_copy_chunk_crc(bb, m, dst, x->crc_acc);
    else stk__wire_copy_chunk(bb, m, dst);
  }
  x->got += m->len;
  if (x->got == x->total) {
    x->active = 0;
    pthread_mutex_lock(&c->mu);
    stk__pool_bytes(c, x->total);
    if (x->dst) {
      /* Chunks arrive in offset order (checked above), so the running
       * checksum is the payload's: no second pass over the batch. */
      int ok = !c->cfg.verify_crc || x->crc_acc == x->crc;
      stk__req_complete(c, w, x->seq, x->total, ok, x->substituted, x->u8);
    }
    pthread_mutex_unlock(&c->mu);
  }
  return 0;
}

/* One BatchResponse from w: a header (checked against the job, claims
 * the batch's buffer) with perhaps a first chunk, or a chunk. 0, or -1
 * with why: a protocol error (the caller drops w). */
static int on_message(stk_client *c, stk__worker *w, rx *x, grpc_byte_buffer *bb,
                      char *why, size_t n) {
  stk__wire_msg m;
  snprintf(why, n, "malformed BatchResponse");
  if (stk__wire_decode_ex(bb, STK_MAX_CHUNK_MSG, &m, why, n)) return -1;
  int rc = 0, form = 0;
  pthread_mutex_lock(&c->mu);
  w->last_msg_ns = stk__now_ns();
  w->probing = 0;
  pthread_mutex_unlock(&c->mu);
  if (m.msg && m.msg->header) {
    const Stoker__V1__BatchHeader *h = m.msg->header;
    if (x->active) {
      snprintf(why, n, "a batch header before the previous batch was complete");
      rc = -1;
    } else if ((form = check_header(c, h, why, n)) < 0) {
      rc = -1;
    } else if (h->rank == c->cfg.rank && h->epoch < c->job.spec.epochs &&
               h->sample_offset != stk__epoch_offset(c, h->epoch)) {
      /* Our rank's batch at another sample offset than this epoch's: a
       * worker that predates elastic resume ignored the request's
       * sample_offset (BatchRequest field 5) and built another batch. */
      snprintf(why, n,
               "batch of epoch %llu at sample offset %llu, asked for offset %llu "
               "(a worker older than elastic resume ignores it)",
               (unsigned long long)h->epoch, (unsigned long long)h->sample_offset,
               (unsigned long long)stk__epoch_offset(c, h->epoch));
      rc = -1;
    } else {
      pthread_mutex_lock(&c->mu);
      x->dst = NULL;
      uint64_t seq;
      if (h->rank == c->cfg.rank &&
          !stk__addr_seq(c, h->epoch, h->step, h->sample_offset, &seq)) {
        x->seq = seq;
        x->dst = stk__req_claim(c, w, x->seq);
      } else {
        stk__pool_duplicate(c);
      }
      pthread_mutex_unlock(&c->mu);
      x->substituted = h->substituted;
      x->u8 = form;
      x->active = 1;
      x->got = 0;
      x->total = h->total_bytes;
      x->crc = h->crc32c;
      x->crc_acc = 0;
      if (m.msg->chunk.len) {
        stk__wire_msg cm = m;
        cm.is_chunk = 1;
        cm.offset = m.msg->chunk_offset;
        cm.len = m.msg->chunk.len;
        rc = on_chunk(c, w, x, bb, &cm, why, n);
      } else if (x->total == 0) {
        rc = -1;
        snprintf(why, n, "empty batch");
      }
    }
  } else if (m.is_chunk) {
    rc = on_chunk(c, w, x, bb, &m, why, n);
  } else {
    snprintf(why, n, "BatchResponse with neither header nor chunk");
    rc = -1;
  }
  stk__wire_msg_free(&m);
  return rc;
}

/* The name of a gRPC status that drops a worker, for the message. */
static const char *grpc_code_name(int code) {
  switch (code) {
    case GRPC_STATUS_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case GRPC_STATUS_OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case GRPC_STATUS_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case GRPC_STATUS_UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case GRPC_STATUS_PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    default:
      return "status";
  }
}

/* After a stream ended with code: drop w when the worker refused us for
 * good; learn a smaller outstanding cap from RESOURCE_EXHAUSTED. Under mu. */
static void stream_ended(stk_client *c, stk__worker *w, int code, const char *det,
                         uint32_t had) {
  int final, fst = stk__rpc_status(code, &final);
  if (code == GRPC_STATUS_RESOURCE_EXHAUSTED) {
    /* The worker allows fewer outstanding requests than we sent: ask for
     * at most half as many from now on. */
    w->cap = had > 2 ? had / 2 : 1;
  }
  /* Our requests are built from the job the coordinator gave us: a worker
   * that finds one invalid or out of range disagrees with us about the
   * protocol, not about the caller's arguments. */
  if (code == GRPC_STATUS_INVALID_ARGUMENT || code == GRPC_STATUS_OUT_OF_RANGE)
    fst = STK_PROTOCOL;
  /* One worker address that serves no Worker.Stream (its port taken by
   * another process after the worker died) is a dead worker: retried while
   * listed, never a reason to drop it for good. */
  if (code == GRPC_STATUS_UNIMPLEMENTED) final = 0;
  /* A worker that refuses its ticket has a newer one (its coordinator
   * restarted and our list is behind), or the ticket expired (the list
   * carries a fresh one from half-way through its life): retried while
   * listed, and the next list's ticket reopens the channel; after an
   * expiry, not before that ticket comes. */
  if (code == GRPC_STATUS_UNAUTHENTICATED && w->ticket[0]) {
    final = 0;
    if (strstr(det, "ticket expired")) w->ticket_expired = 1;
  }
  if (!final) return;
  char why[256];
  snprintf(why, sizeof(why), "it refused the stream (gRPC %s %d): %.150s",
           grpc_code_name(code), code, det);
  stk__worker_drop(c, w, fst, why);
}

/* ---- the runners: one state machine per served worker ------------------ */

/* A runner's states. BACKOFF: no call (waiting until retry_ns, or just
 * started); CONNECTING and EXITING: the scanning io thread opens or
 * closes the channel outside c->mu (nobody else touches the runner then;
 * the call itself is started under c->mu); OPEN: the call takes requests; CLOSING: its
 * receives ended (requests re-queued), the call's last events are still
 * to come. */
enum { RUN_BACKOFF, RUN_CONNECTING, RUN_OPEN, RUN_CLOSING, RUN_EXITING };

/* One request waiting to be sent (the request r, or the hedge h). */
typedef struct sendq_ent {
  uint64_t seq;
  stk__req *r;
  stk__hedge *h;
} sendq_ent;

/* A remote worker's runner (w->run). Under c->mu, except x (the batch
 * being received: only the io thread handling the stream's one receive
 * touches it) and, while CONNECTING or EXITING, what the scanning thread
 * uses outside the lock (bearer, w->ch). */
struct stk__runner {
  stk__worker *w;
  int state;
  uint32_t pos;                                   /* index in c->io->runs */
  stk__rpc_astream *s;                            /* OPEN, CLOSING */
  int recv_pending, send_pending, status_pending; /* events still to come */
  int got_any;                                    /* a message came on this call */
  uint32_t had;                      /* w->outstanding when its receives ended */
  int code;                          /* the call's final status (after STATUS) */
  char det[200];                     /* and its details */
  int64_t retry_ns;                  /* BACKOFF: (re)open from then */
  int reopen;                        /* CONNECTING: a new ticket, a new channel */
  char bearer[STK_MAX_TICKET_BYTES]; /* CONNECTING: the ticket to use */
  struct stk__runner *next_work;     /* the scan's list */
  sendq_ent *q;                      /* ring of qcap, qlen waiting from qhead */
  uint32_t qhead, qlen, qcap;
  rx x;
};

/* The io threads serve every runner of the client from one queue; they
 * wake at least every SCAN_MS (or when a backoff's retry is due) to run
 * the timers (scan): an idle client wakes a few times a second, since
 * every wake costs a rank CPU time (512 ranks share a 2-core host in
 * tests/scale). IO_THREADS_MAX:
 * the pool's size, min(2, online CPUs): enough to keep receiving while
 * one thread copies a chunk, and fixed however many workers are served. */
#define IO_THREADS_MAX 2
_Static_assert(STK__CPU_IO0 + IO_THREADS_MAX <= STK__CPU_COPY,
               "a CPU slot per io thread");
#define SCAN_MS 500

struct stk__io {
  grpc_completion_queue *cq;
  pthread_t threads[IO_THREADS_MAX];
  int nthreads;
  stk__runner **runs; /* nruns of cap, under c->mu */
  uint32_t nruns, cap;
  int64_t next_scan_ns;  /* under c->mu; 0: scan at once */
  int scanning;          /* a thread runs the scan (under c->mu) */
  stk__rpc_waker *waker; /* wakes an io thread for scan_soon (NULL: none) */
  int kicked;            /* a wake is on its way (under c->mu) */
  int started;           /* io threads that took their index (under c->mu) */
};

static gpr_timespec deadline_ms(int ms) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* Under mu: r's backoff after a call (or a failed open) ends: from 100 ms,
 * doubling per call without a message, to 2 s. */
static void backoff_start(stk__runner *r, int got_any) {
  stk__worker *w = r->w;
  w->failures = got_any ? 0 : w->failures + 1;
  int backoff = 100 << (w->failures < 5 ? w->failures : 5);
  if (backoff > 2000) backoff = 2000;
  r->retry_ns = stk__now_ns() + (int64_t)backoff * 1000000;
  r->state = RUN_BACKOFF;
  /* the scan comes when the retry is due, not at its next period */
  stk__io *io = w->c->io;
  if (io->next_scan_ns > r->retry_ns) io->next_scan_ns = r->retry_ns;
}

/* Under mu: r's receives are over (the stream ended, broke or was cut):
 * its requests go back to the queue and the call is cancelled; the
 * runner waits for the call's last events (CLOSING). */
static void rx_over(stk_client *c, stk__runner *r) {
  stk__worker *w = r->w;
  r->had = w->outstanding;
  w->alive = 0;
  stk__req_requeue_worker(c, w);
  r->qhead = r->qlen = 0; /* requeued: none of them is sent */
  r->state = RUN_CLOSING;
  stk__rpc_astream_cancel(r->s);
}

/* Under mu: once a CLOSING call has no event left to come, judge its
 * status (drop, cap) and back off before the next one, or, when the
 * worker is no longer wanted (or stopping, fatal), end: EXITING, and 1
 * (the caller finishes with runner_leave once it has let go of mu). */
static int maybe_finish(stk_client *c, stk__runner *r) {
  if (r->state != RUN_CLOSING || r->recv_pending || r->send_pending || r->status_pending)
    return 0;
  stk__worker *w = r->w;
  if (!w->dropped && !c->stopping) {
    stk__workers_stream_end(c, w, r->code, r->det);
    stream_ended(c, w, r->code, r->det, r->had);
  }
  stk__rpc_astream_destroy(r->s);
  r->s = NULL;
  backoff_start(r, r->got_any);
  if (!c->stopping && !c->errs.fatal && stk__worker_wanted(c, w)) return 0;
  r->state = RUN_EXITING;
  return 1;
}

/* Under mu: send the queued requests, one in flight at a time. A copy
 * taken back meanwhile (the other copy won, the request was re-queued) is
 * not sent and no longer counts against w. */
static void send_next(stk_client *c, stk__runner *r) {
  stk__worker *w = r->w;
  while (r->state == RUN_OPEN && !r->send_pending && r->qlen) {
    sendq_ent e = r->q[r->qhead];
    r->qhead = (r->qhead + 1) % r->qcap;
    r->qlen--;
    if (!stk__req_still_issued(w, e.seq, e.r, e.h)) {
      stk__req_unsent(w, e.seq);
      continue;
    }
    Stoker__V1__BatchRequest req = STOKER__V1__BATCH_REQUEST__INIT;
    req.job_hash = c->job.hash;
    stk__addr a;
    stk__seq_addr(c, e.seq, &a);
    req.epoch = a.epoch;
    req.rank = c->cfg.rank;
    req.step = a.step;
    req.sample_offset = a.offset;
    req.image_uint8 = c->job.wire_u8;
    if (stk__rpc_astream_send_msg(r->s, &req.base)) {
      stk__rpc_astream_cancel(r->s); /* its receive ends, and re-queues */
      return;
    }
    r->send_pending = 1;
  }
}

void stk__stream_send(stk_client *c, stk__worker *w, uint64_t seq, stk__req *req,
                      stk__hedge *h) {
  stk__runner *r = w->run;
  if (!r || r->state != RUN_OPEN) return; /* its requests were re-queued */
  if (r->qlen == r->qcap) {
    uint32_t ncap = r->qcap ? 2 * r->qcap : 16;
    sendq_ent *nq = malloc(ncap * sizeof(*nq));
    if (!nq) {
      stk__rpc_astream_cancel(r->s); /* re-queued when its receive ends */
      return;
    }
    for (uint32_t i = 0; i < r->qlen; i++) nq[i] = r->q[(r->qhead + i) % r->qcap];
    free(r->q);
    r->q = nq;
    r->qcap = ncap;
    r->qhead = 0;
  }
  r->q[(r->qhead + r->qlen) % r->qcap] = (sendq_ent){seq, req, h};
  r->qlen++;
  send_next(c, r);
}

/* Under mu: r is gone: its worker entry says so (departed once unlisted),
 * and the scheduler is told. */
static void runner_exit(stk_client *c, stk__runner *r) {
  stk__io *io = c->io;
  stk__worker *w = r->w;
  w->alive = 0;
  w->left_ns = stk__now_ns();
  w->thread_exited = 1;
  w->run = NULL;
  io->runs[r->pos] = io->runs[--io->nruns];
  io->runs[r->pos]->pos = r->pos;
  free(r->q);
  free(r);
  pthread_cond_broadcast(&c->cv_sched);
}

/* Not under mu: r (EXITING, no call) closes its channel and ends, unless
 * its worker is wanted again by then (listed anew): then it goes on. */
static void runner_leave(stk_client *c, stk__runner *r) {
  stk__rpc_channel_close(r->w->ch);
  r->w->ch = NULL;
  pthread_mutex_lock(&c->mu);
  if (!c->stopping && !c->errs.fatal && stk__worker_wanted(c, r->w)) {
    r->state = RUN_BACKOFF;
    r->retry_ns = stk__now_ns();
  } else {
    runner_exit(c, r);
  }
  pthread_mutex_unlock(&c->mu);
}

/* One event of r's call, on an io thread (not under mu). */
static void on_event(stk_client *c, const stk__rpc_aevent *e) {
  stk__runner *r = e->user;
  stk__worker *w = r->w;
  if (e->kind == STK__RPC_AS_RECV) {
    /* r->s stays while a receive is in flight: no lock to read it. */
    grpc_byte_buffer *bb = e->ok ? stk__rpc_astream_recv_take(e->s) : NULL;
    char why[200] = "";
    int bad = bb ? on_message(c, w, &r->x, bb, why, sizeof(why)) : 0;
    if (bb) grpc_byte_buffer_destroy(bb);
    pthread_mutex_lock(&c->mu);
    r->recv_pending = 0;
    if (bb) {
      r->got_any = 1;
      if (bad) {
        char msg[256];
        snprintf(msg, sizeof(msg), "protocol error: %.200s", why);
        stk__worker_drop(c, w, STK_PROTOCOL, msg);
      }
      if (w->dropped) stk__rpc_astream_cancel(r->s);
      /* The next message, one at a time: a stream's batches are handled
       * in order by one thread at a time. */
      if (stk__rpc_astream_recv(r->s) == 0) r->recv_pending = 1;
      else rx_over(c, r);
    } else {
      rx_over(c, r);
    }
  } else {
    pthread_mutex_lock(&c->mu);
    if (e->kind == STK__RPC_AS_SEND) {
      r->send_pending = 0;
      if (!e->ok && r->state == RUN_OPEN) stk__rpc_astream_cancel(r->s);
      send_next(c, r);
    } else {
      r->status_pending = 0;
      /* A worker that ends a stream "the job failed: ..." (ABORTED) built
       * a batch on which the job's own op failed, and the job's
       * bad_samples policy fails the job: any worker would build the same
       * bytes, so the job has failed for this rank, now. */
      char full[4096];
      r->code = stk__rpc_astream_status(e->s, full, sizeof(full));
      snprintf(r->det, sizeof(r->det), "%.199s", full);
      if (r->code == GRPC_STATUS_ABORTED && !strncmp(full, "the job failed: ", 16))
        stk__coord_job_ended_locked(c, 1, full + 16);
    }
  }
  int leave = maybe_finish(c, r);
  pthread_mutex_unlock(&c->mu);
  if (leave) runner_leave(c, r);
}

/* The timers, at most every SCAN_MS by one io thread (or at once when
 * scan_soon asks): cut silent or unwanted streams, open the ones whose
 * backoff is over, end the runners of workers no longer wanted.
 * O(runners) under mu; opening and closing channels happen outside it.
 * 1 if another pass was asked for meanwhile. */
static int scan_pass(stk_client *c) {
  stk__io *io = c->io;
  pthread_mutex_lock(&c->mu);
  int64_t now = stk__now_ns();
  if (io->scanning || now < io->next_scan_ns) {
    pthread_mutex_unlock(&c->mu);
    return 0;
  }
  io->scanning = 1;
  io->kicked = 0;
  io->next_scan_ns = now + (int64_t)SCAN_MS * 1000000;
  int stop = c->stopping || c->errs.fatal;
  stk__runner *work = NULL;
  for (uint32_t i = 0; i < io->nruns; i++) {
    stk__runner *r = io->runs[i];
    stk__worker *w = r->w;
    if (r->state == RUN_OPEN) {
      /* Silence: a worker holding our requests that sends nothing for 30 s
       * is cut, one the coordinator no longer lists after 1 s. One that
       * only left this rank's working set (listed, alive) is closed once
       * it has delivered what it holds: nothing is asked twice. */
      int64_t idle = (now - w->last_msg_ns) / 1000000;
      if (stop || w->dropped ||
          (!stk__worker_wanted(c, w) &&
           (w->outstanding == 0 || (!w->listed && idle > 1000))) ||
          (w->outstanding > 0 && idle > 30000))
        stk__rpc_astream_cancel(r->s);
    } else if (r->state == RUN_BACKOFF) {
      if (stop || !stk__worker_wanted(c, w)) {
        r->state = RUN_EXITING;
      } else if (now >= r->retry_ns && !(w->ticket_expired && !w->ticket_new)) {
        /* Its stream ticket when listed with one (the worker never sees
         * our token), else our token (an older coordinator or worker). A
         * new ticket (a restarted coordinator) means a new channel. */
        r->state = RUN_CONNECTING;
        r->reopen = w->ticket_new;
        w->ticket_new = 0;
        w->ticket_expired = 0;
        memcpy(r->bearer, w->ticket, sizeof(r->bearer));
      } else {
        continue;
      }
      r->next_work = work;
      work = r;
    }
  }
  pthread_mutex_unlock(&c->mu);
  for (stk__runner *r = work; r; r = r->next_work) {
    stk__worker *w = r->w;
    if (r->state == RUN_EXITING || r->reopen) {
      stk__rpc_channel_close(w->ch);
      w->ch = NULL;
    }
    if (r->state == RUN_CONNECTING) {
      if (!w->ch &&
          stk__rpc_channel_open(w->address, STK_MAX_CHUNK_MSG,
                                r->bearer[0] ? r->bearer : c->token, c->tls, &w->ch))
        w->ch = NULL;
      explicit_bzero(r->bearer, sizeof(r->bearer));
    }
  }
  pthread_mutex_lock(&c->mu);
  now = stk__now_ns();
  stop = c->stopping || c->errs.fatal;
  for (stk__runner *r = work, *next; r; r = next) {
    next = r->next_work;
    stk__worker *w = r->w;
    if (r->state == RUN_EXITING) {
      if (!stop && stk__worker_wanted(c, w)) { /* listed again meanwhile: go on */
        r->state = RUN_BACKOFF;
        r->retry_ns = now;
      } else {
        runner_exit(c, r);
      }
      continue;
    }
    /* The call is started under mu (it never blocks), so that none of its
     * events can be handled before the runner knows it is OPEN. */
    if (!w->ch ||
        stk__rpc_astream_open(w->ch, io->cq, "/stoker.v1.Worker/Stream", r, &r->s)) {
      r->s = NULL; /* no channel or no call: try again later */
      backoff_start(r, 0);
      continue;
    }
    r->state = RUN_OPEN;
    r->status_pending = 1;
    r->got_any = 0;
    memset(&r->x, 0, sizeof(r->x));
    w->alive = 1;
    w->probing = 1;
    w->stream_batches = 0;
    w->last_msg_ns = now;
    pthread_cond_broadcast(&c->cv_sched);
    if (stk__rpc_astream_recv(r->s) == 0) r->recv_pending = 1;
    else rx_over(c, r);
    if (stop || w->dropped) stk__rpc_astream_cancel(r->s);
    /* (its STATUS is still to come: maybe_finish has nothing to do yet) */
  }
  io->scanning = 0;
  int again = io->next_scan_ns == 0; /* asked for meanwhile (a new runner) */
  pthread_mutex_unlock(&c->mu);
  return again;
}

/* The scan, again at once while one is asked for during a pass. */
static void scan(stk_client *c) {
  while (scan_pass(c)) {}
}

/* Under mu: have the timers run now (a new runner is due): the next scan
 * is due at once and an io thread is woken for it, unless a wake is on
 * its way already. */
static void scan_soon(stk__io *io) {
  io->next_scan_ns = 0;
  if (io->waker && !io->kicked && !stk__rpc_waker_kick(io->waker)) io->kicked = 1;
}

/* An io thread: the queue's events, and the timers between them. */
static void *io_main(void *arg) {
  stk_client *c = arg;
  stk__thread_name("stk-io");
  stk__io *io = c->io; /* set before the threads start, freed after they end */
  pthread_mutex_lock(&c->mu);
  int self = io->started++;
  pthread_mutex_unlock(&c->mu);
  for (;;) {
    /* Asleep until an event or the next scan is due (a retry's backoff,
     * else the period): an idle client wakes a few times a second. */
    pthread_mutex_lock(&c->mu);
    int64_t wait_ms = (io->next_scan_ns - stk__now_ns()) / 1000000 + 1;
    pthread_mutex_unlock(&c->mu);
    if (wait_ms < 1) wait_ms = 1;
    if (wait_ms > SCAN_MS) wait_ms = SCAN_MS;
    /* The first thread keeps the timers; the others sleep until an event
     * (or the queue's shutdown) wakes them. */
    grpc_event ev = grpc_completion_queue_next(
        io->cq,
        self == 0 ? deadline_ms((int)wait_ms) : gpr_inf_future(GPR_CLOCK_MONOTONIC),
        NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    stk__rpc_aevent e;
    if (!stk__rpc_astream_event(&ev, &e) && e.kind != STK__RPC_AS_WAKE) on_event(c, &e);
    scan(c);
    /* this thread's CPU so far: the receive path's cost (stk_stats) */
    stk__recv_cpu_note(c, STK__CPU_IO0 + self);
  }
  return NULL;
}

/* Under mu: the client's queue and io threads (at the first remote
 * worker). 0, or -1 when neither memory nor a thread could be had. */
static int io_start(stk_client *c) {
  stk__io *io = calloc(1, sizeof(*io));
  if (!io) return -1;
  stk__rpc_init();
  io->cq = grpc_completion_queue_create_for_next(NULL);
  if (stk__rpc_waker_new(io->cq, &io->waker)) io->waker = NULL; /* the tick only */
  c->io = io;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int want = ncpu > 0 && ncpu < IO_THREADS_MAX ? (int)ncpu : IO_THREADS_MAX;
  for (int i = 0; i < want; i++)
    if (!pthread_create(&io->threads[io->nthreads], NULL, io_main, c)) io->nthreads++;
  if (io->nthreads) return 0;
  stk__rpc_waker_free(io->waker);
  grpc_completion_queue_shutdown(io->cq);
  grpc_completion_queue_destroy(io->cq);
  stk__rpc_shutdown();
  free(io);
  c->io = NULL;
  return -1;
}

int stk__stream_start(stk__worker *w) {
  stk_client *c = w->c;
  w->thread_started = 0;
  if (!c->io && io_start(c)) return -1;
  stk__io *io = c->io;
  if (io->nruns == io->cap) {
    uint32_t ncap = io->cap ? 2 * io->cap : 16;
    stk__runner **nr = realloc(io->runs, ncap * sizeof(*nr));
    if (!nr) return -1;
    io->runs = nr;
    io->cap = ncap;
  }
  stk__runner *r = calloc(1, sizeof(*r));
  if (!r) return -1;
  r->w = w;
  r->state = RUN_BACKOFF; /* due at once: the next scan opens it */
  r->pos = io->nruns;
  io->runs[io->nruns++] = r;
  w->run = r;
  scan_soon(io); /* its stream opens now, not at the next tick */
  w->thread_exited = 0;
  w->thread_started = 1;
  return 0;
}

void stk__stream_stop_all(stk_client *c) {
  pthread_mutex_lock(&c->mu);
  stk__io *io = c->io;
  if (!io) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  /* Every call cancelled, every runner's end awaited: the io threads drive
   * them there (a CLOSING call's last events, then the next scan). */
  for (uint32_t i = 0; i < io->nruns; i++)
    if (io->runs[i]->s) stk__rpc_astream_cancel(io->runs[i]->s);
  scan_soon(io);
  while (io->nruns) stk__cond_wait_ms(&c->cv_sched, &c->mu, SCAN_MS);
  pthread_mutex_unlock(&c->mu);
  /* No call is left on the queue: its shutdown ends the threads' loops. */
  grpc_completion_queue_shutdown(io->cq);
  for (int i = 0; i < io->nthreads; i++) pthread_join(io->threads[i], NULL);
  stk__rpc_waker_free(io->waker); /* its kicks' events were drained */
  grpc_completion_queue_destroy(io->cq);
  pthread_mutex_lock(&c->mu);
  c->io = NULL;
  pthread_mutex_unlock(&c->mu);
  free(io->runs);
  free(io);
  stk__rpc_shutdown();
}
