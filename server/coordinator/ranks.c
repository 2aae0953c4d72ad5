/* ranks.c - the client ranks' calls: Coordinator.Join (one process per
 * rank: the rank's holder), WatchWorkers (the live list whenever it
 * changes, each watch ended after its lease; a watch's re-announcement
 * teaches a restarted coordinator the rank's join, finish and end of the
 * job), and Finish (a rank done, rank 0 ending the job, or any rank
 * aborting it). Owns the rank tables and holders, the watches and the
 * watch list in C, under C.mu. Joins, re-announcements and finishes are
 * journaled (persist_after: answered from the journal's writer thread
 * once on disk) before they are answered. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "coordinator.h"
#include "daemon_log.h"
#include "stoker/version.h"

/* How long a rank's holder counts as alive after its last watch ended at
 * the end of its lease (the client opens the next one at once) or after
 * its join (its first watch follows it). A watch that its client closed
 * (the process closed its loader, crashed or lost its connection) frees
 * the rank at once. */
#define HOLDER_GRACE_MS 5000

/* The holder of rank r is alive: an open watch, or seen within the grace. */
static int holder_live_locked(uint32_t r, int64_t now) {
  const struct crank *k = &C.ranks[r];
  return k->holder &&
         (k->holder_watches > 0 || now - k->holder_seen_ms < HOLDER_GRACE_MS);
}

/* Another live process holds rank r (client ids compared; a client without
 * an id, e.g. a stock one, is never refused). */
static int holder_busy_locked(uint32_t r, const char *client_id, int64_t now) {
  const struct crank *k = &C.ranks[r];
  return client_id && *client_id && k->holder && *k->holder &&
         strcmp(k->holder, client_id) != 0 && holder_live_locked(r, now);
}

/* client_id (from peer) holds rank r now; what it replaced, for the log:
 * 0 nobody, 1 the same client, 2 another one (gone). */
static int holder_take_locked(uint32_t r, const char *client_id, const char *peer,
                              int64_t now, char *old, size_t oldlen) {
  struct crank *k = &C.ranks[r];
  int was = !k->holder ? 0 : !strcmp(k->holder, client_id ? client_id : "") ? 1 : 2;
  snprintf(old, oldlen, "%s", k->holder ? k->holder : "");
  if (was != 1) {
    char *h = strdup(client_id ? client_id : "");
    if (!h) return was;
    free(k->holder);
    k->holder = h;
    k->holder_since_ms = now;
    k->holder_watches = 0;
    k->holder_gen++;
  }
  snprintf(k->holder_peer, sizeof(k->holder_peer), "%s", peer);
  k->holder_seen_ms = now;
  return was;
}

/* A reply that waits for the journal (a held call: stk__rpc_call_hold). */
typedef struct held_reply {
  stk__rpc_call *call;
  grpc_byte_buffer *bb; /* the reply, sent then the status OK */
  /* Finish's log line, said once the finish is on disk (bb NULL: built
   * here) */
  uint32_t rank, nf, world;
  int ends_job;
  int aborted;       /* a Finish{abort_job}: answered without the log line */
  journal_waiter jw; /* its place in the journal's queue */
} held_reply;

/* persist_after's callback: send the reply, end the call OK, release it.
 * On the journal's writer thread. */
static void held_reply_send(void *arg) {
  held_reply *h = arg;
  if (stk__rpc_call_send(h->call, h->bb) == 0)
    stk__rpc_call_finish(h->call, GRPC_STATUS_OK, "");
  stk__rpc_call_release(h->call);
  free(h);
}

void ranks_join(stk__rpc_call *call, const ProtobufCMessage *req) {
  const Stoker__V1__JoinRequest *q = (const Stoker__V1__JoinRequest *)req;
  char msg[800];
  int code = 0;
  int64_t now = stk__now_ms();
  /* A new rank's reply waits for the journal: its place is taken before
   * anything changes, so running out of memory refuses the call (the
   * client retries) instead of writing on this serving thread. */
  held_reply *h = NULL;
  if (persist_enabled() && !(h = malloc(sizeof(*h)))) {
    stk__rpc_call_finish(call, GRPC_STATUS_UNAVAILABLE, "out of memory: retry");
    return;
  }
  pthread_mutex_lock(&C.mu);
  state_touch_locked();
  if (q->protocol_version != STK_PROTOCOL_VERSION) {
    code = GRPC_STATUS_FAILED_PRECONDITION;
    snprintf(msg, sizeof(msg), "client speaks protocol %u, this coordinator %u",
             q->protocol_version, STK_PROTOCOL_VERSION);
  } else if (q->world_size != C.spec.world_size) {
    code = GRPC_STATUS_INVALID_ARGUMENT;
    snprintf(msg, sizeof(msg), "world_size %u differs from the job's %u", q->world_size,
             C.spec.world_size);
  } else if (q->rank >= C.spec.world_size) {
    code = GRPC_STATUS_INVALID_ARGUMENT;
    snprintf(msg, sizeof(msg), "rank %u is outside the job's world_size %u", q->rank,
             C.spec.world_size);
  } else if (q->client_id && strlen(q->client_id) >= MAX_STR) {
    code = GRPC_STATUS_INVALID_ARGUMENT;
    snprintf(msg, sizeof(msg), "client_id of %zu bytes (at most %d)",
             strlen(q->client_id), MAX_STR - 1);
  } else if (C.shutting_down) {
    code = GRPC_STATUS_FAILED_PRECONDITION;
    snprintf(msg, sizeof(msg), "the job is over (%.300s)", C.shutdown_reason);
  } else if (workers_none_can_serve_locked(msg, sizeof(msg))) {
    code = GRPC_STATUS_FAILED_PRECONDITION;
  } else if (!C.resolved) {
    code = GRPC_STATUS_UNAVAILABLE;
    char lf[900];
    snprintf(msg, sizeof(msg),
             "waiting for a worker (the dataset size is not known yet)%.330s",
             workers_last_failure_locked(lf, sizeof(lf)));
  } else if (C.spec.source == STK_SOURCE_IMAGEFOLDER && !C.have_classes && !C.workers) {
    /* after a restart the journal knows the dataset but not its classes:
     * the first worker back tells them (one that does not say answers
     * without them) */
    code = GRPC_STATUS_UNAVAILABLE;
    snprintf(msg, sizeof(msg),
             "waiting for a worker (the dataset's classes are not known yet)");
  } else if (q->expect_job_hash && q->expect_job_hash != C.hash) {
    code = GRPC_STATUS_FAILED_PRECONDITION;
    snprintf(msg, sizeof(msg),
             "resume state is from job %016" PRIx64
             ", this coordinator runs job %016" PRIx64 " (%s)",
             q->expect_job_hash, C.hash, C.spec.name);
  } else if (C.finished[q->rank]) {
    /* A finished rank is never served again in this job: its samples
     * were delivered (FAILED_PRECONDITION: final, no retry). */
    code = GRPC_STATUS_FAILED_PRECONDITION;
    snprintf(msg, sizeof(msg),
             "rank %u has finished in job %s (%u/%u ranks finished): a finished rank is "
             "not served again; run the job again under another name (or a new "
             "coordinator) to read its data again",
             q->rank, C.spec.name, C.nfinished, C.spec.world_size);
  } else if (holder_busy_locked(q->rank, q->client_id, now)) {
    /* FAILED_PRECONDITION: refused at once, no retry. A holder that
     * crashed frees the rank as its watch closes, so its replacement is
     * not refused. The client id is HOST:PID:rankR. */
    const struct crank *r = &C.ranks[q->rank];
    char esc[300];
    code = GRPC_STATUS_FAILED_PRECONDITION;
    snprintf(
        msg, sizeof(msg),
        "rank %u is held by client %s (host:pid:rank; from %s, joined %.0f s ago), a "
        "live process: one process per rank; stop that process or join as another "
        "rank",
        q->rank, stk__escape(esc, sizeof(esc), r->holder), r->holder_peer,
        (double)(now - r->holder_since_ms) / 1000.0);
  }
  if (code) {
    pthread_mutex_unlock(&C.mu);
    free(h);
    LOG_WARN("join from %s rejected: %s", stk__rpc_call_peer(call), msg);
    stk__rpc_call_finish(call, (grpc_status_code)code, msg);
    return;
  }
  int newly = !C.joined[q->rank];
  if (newly) C.joined[q->rank] = 1, C.njoined++;
  char old[MAX_STR], esc_old[300];
  int was = holder_take_locked(q->rank, q->client_id, stk__rpc_call_peer(call), now, old,
                               sizeof(old));
  /* The published list and the job, from their shared encodings: no
   * per-join protobuf building (publish.c). */
  uint64_t version = 0;
  grpc_byte_buffer *bb = publish_join_reply_locked(&version);
  pthread_mutex_unlock(&C.mu);
  if (was == 2)
    LOG_INFO("rank %u rejoined by client %s from %s, replacing client %s (gone)", q->rank,
             q->client_id ? q->client_id : "", stk__rpc_call_peer(call),
             stk__escape(esc_old, sizeof(esc_old), old));
  else
    LOG_INFO("rank %u %s (client %s from %s; list version %" PRIu64 ")", q->rank,
             was == 1 ? "rejoined" : "joined", q->client_id ? q->client_id : "",
             stk__rpc_call_peer(call), version);
  if (!bb) {
    free(h);
    stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  /* A new rank is on disk before it is answered: the reply waits for the
   * journal's next group commit, without holding this serving thread. */
  if (newly && h) {
    h->call = call, h->bb = bb;
    stk__rpc_call_hold(call);
    persist_after(&h->jw, held_reply_send, h);
    return;
  }
  free(h);
  if (stk__rpc_call_send(call, bb) == 0) stk__rpc_call_finish(call, GRPC_STATUS_OK, "");
}

/* WatchWorkers: after its one request (a re-announcement: checked, and
 * journaled when it taught the coordinator something), a WorkerList
 * whenever the live list changed (sent from watch_pump_locked: the main
 * loop's tick, a finished send, the watch's start), the last one with
 * shutting_down. A watch keeps the job from its idle timeout only within
 * its lease (--watch-lease-s) and while no send waits on its peer; at the
 * end of the lease (seen within one tick of the main loop) the call ends
 * OK and a live client opens a new one, so a watcher on a dead host cannot
 * hold a job open for longer than lease + idle timeout. */
typedef struct watcher {
  stk__rpc_call *call;
  uint32_t rank;
  int holds;         /* counted in C.ranks[rank].holder_watches ... */
  uint64_t gen;      /* ... while its holder_gen is this */
  uint64_t known;    /* the published version it has */
  int deltas;        /* it takes deltas (WatchRequest.takes_deltas) */
  int64_t lease_end; /* set when started */
  int started, sending, over;
  /* Its re-announcement taught the coordinator something: the watch
   * starts once that is on disk (persist_after). closed: the call ended
   * meanwhile, so the journal's callback frees the watcher. */
  int journaling, closed;
  journal_waiter jw; /* its place in the journal's queue (journaling) */
  /* From its request, kept for the start: the rank's holder (client_id,
   * "" when none or too long to be one) and, for the log, what the
   * re-announcement said. */
  uint32_t req_rank;
  char client_id[MAX_STR];
  int req_finished, req_end_job;
  uint32_t nfinished;
  struct watcher *next;
} watcher;

/* Open watches that keep the job from its idle timeout now. Under C.mu. */
int ranks_watch_holds_locked(int64_t now) {
  int n = 0;
  for (const watcher *wt = C.watch_list; wt; wt = wt->next)
    n += wt->started && !wt->over && !wt->sending && now < wt->lease_end;
  return n;
}

/* Send wt the list if it changed and no send is in flight; end it once
 * its lease is over. Under C.mu. */
static void watch_pump_locked(watcher *wt) {
  if (!wt->started || wt->sending || wt->over) return;
  /* Shared encodings (publish.c): the deltas since what it knows, the
   * whole list, or once the job ends the last list; buffers over the same
   * slices, nothing encoded here. */
  grpc_byte_buffer *out[PUB_HISTORY];
  uint64_t version = 0;
  int n = publish_messages_locked(wt->known, wt->deltas, C.shutting_down, out,
                                  PUB_HISTORY, &version);
  if (n == 0) {
    if (!C.shutting_down && stk__now_ms() >= wt->lease_end) {
      wt->over = 1;
      state_touch_locked(); /* the idle clock runs from the end of the hold */
      stk__rpc_call_finish(wt->call, GRPC_STATUS_OK, "watch lease over: watch again");
    }
    return; /* (shutting down: the last list is not encoded yet) */
  }
  if (n < 0 || stk__rpc_call_sendv(wt->call, out, (size_t)n)) {
    wt->over = 1;
    stk__rpc_call_abort(wt->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  /* A send may wait on a peer that stopped reading: no hold meanwhile. */
  wt->sending = 1;
  state_touch_locked();
  wt->known = version;
  if (C.shutting_down) {
    wt->over = 1;
    stk__rpc_call_finish(wt->call, GRPC_STATUS_OK, "");
  }
}

/* Every watcher: from the main loop (list changes anywhere show within
 * one tick, and so do the ends of leases). */
void ranks_watch_pump_all(void) {
  pthread_mutex_lock(&C.mu);
  for (watcher *wt = C.watch_list; wt; wt = wt->next) watch_pump_locked(wt);
  pthread_mutex_unlock(&C.mu);
}

static int watch_open(stk__rpc_call *call) {
  watcher *wt = calloc(1, sizeof(*wt));
  if (!wt) {
    stk__rpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  wt->call = call;
  stk__rpc_call_set_data(call, wt);
  pthread_mutex_lock(&C.mu);
  wt->next = C.watch_list;
  C.watch_list = wt;
  pthread_mutex_unlock(&C.mu);
  return 0;
}

/* A watch's re-announcement (WatchRequest with job_hash): check it and
 * take what the coordinator did not know (after a restart: the rank joined,
 * finished, rank 0 ended the job). 0 (*changed set when the state moved),
 * or a gRPC status with msg. Under C.mu. */
static int reannounce_locked(const Stoker__V1__WatchRequest *q, int *changed, char *msg,
                             size_t len) {
  *changed = 0;
  if (!q->job_hash) return 0; /* an old or stock client: a plain watch */
  if (q->rank >= C.spec.world_size) {
    snprintf(msg, len, "rank %u is outside the job's world_size %u", q->rank,
             C.spec.world_size);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (q->client_id && strlen(q->client_id) >= MAX_STR) {
    snprintf(msg, len, "client_id of %zu bytes (at most %d)", strlen(q->client_id),
             MAX_STR - 1);
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (q->end_job && q->rank != 0) {
    snprintf(msg, len, "only rank 0 may end the whole job (end_job)");
    return GRPC_STATUS_INVALID_ARGUMENT;
  }
  if (C.shutting_down) return 0; /* the watch gets the last list at once */
  if (!C.resolved) {
    char lf[900];
    snprintf(msg, len, "waiting for a worker (the dataset size is not known yet)%.330s",
             workers_last_failure_locked(lf, sizeof(lf)));
    return GRPC_STATUS_UNAVAILABLE;
  }
  if (q->job_hash != C.hash) {
    snprintf(msg, len,
             "this client is in job %016" PRIx64 ", this coordinator runs job %016" PRIx64
             " (%s)",
             q->job_hash, C.hash, C.spec.name);
    return GRPC_STATUS_FAILED_PRECONDITION;
  }
  if (!C.joined[q->rank]) /* it joined an earlier coordinator */
    C.joined[q->rank] = 1, C.njoined++, *changed = 1, C.seen_earlier = 1;
  if (q->finished && !C.finished[q->rank]) {
    C.finished[q->rank] = 1, C.nfinished++, *changed = 1;
    if (C.nfinished == C.spec.world_size)
      state_request_shutdown_locked(EXIT_OK, "every rank finished");
  }
  if (q->end_job && !C.shutdown_req) {
    state_request_shutdown_locked(EXIT_OK, "rank 0 ended the job");
    *changed = 1;
  }
  return 0;
}

/* Start a watch whose request was taken: learn the rank's holder from it
 * (a restarted coordinator), start its lease and send it what it needs.
 * Under C.mu, the call not closed. */
static void watch_start_locked(watcher *wt) {
  stk__rpc_call *call = wt->call;
  int64_t now = stk__now_ms();
  LOG_DEBUG("watch from %s (rank %u) opened, lease %lld s", stk__rpc_call_peer(call),
            wt->req_rank, opt.watch_lease_s);
  if (wt->req_rank < C.spec.world_size && wt->client_id[0]) {
    struct crank *k = &C.ranks[wt->req_rank];
    char old[MAX_STR];
    /* A restarted coordinator learns the holder from its watch. */
    if (!k->holder || !holder_live_locked(wt->req_rank, now))
      holder_take_locked(wt->req_rank, wt->client_id, stk__rpc_call_peer(call), now, old,
                         sizeof(old));
    if (!strcmp(k->holder ? k->holder : "", wt->client_id)) {
      wt->rank = wt->req_rank, wt->holds = 1, wt->gen = k->holder_gen;
      k->holder_watches++;
      k->holder_seen_ms = now;
    }
  }
  wt->started = 1;
  wt->lease_end = now + opt.watch_lease_s * 1000;
  C.watchers++;
  state_touch_locked();
  watch_pump_locked(wt);
}

/* persist_after's callback for a watch whose re-announcement was
 * journaled: start it, unless its call ended meanwhile (then free it). */
static void watch_journaled(void *arg) {
  watcher *wt = arg;
  pthread_mutex_lock(&C.mu);
  wt->journaling = 0;
  if (wt->closed) {
    pthread_mutex_unlock(&C.mu);
    free(wt);
    return;
  }
  LOG_INFO(
      "rank %u re-announced itself on its watch (client %s from %s)%s%s (%u/%u "
      "finished)",
      wt->req_rank, wt->client_id, stk__rpc_call_peer(wt->call),
      wt->req_finished ? ": finished" : "", wt->req_end_job ? ", ends the job" : "",
      wt->nfinished, C.spec.world_size);
  if (!wt->over) watch_start_locked(wt);
  pthread_mutex_unlock(&C.mu);
}

static void watch_message(stk__rpc_call *call, const ProtobufCMessage *m) {
  watcher *wt = stk__rpc_call_data(call);
  const Stoker__V1__WatchRequest *q = (const Stoker__V1__WatchRequest *)m;
  char msg[400];
  int changed = 0;
  pthread_mutex_lock(&C.mu);
  if (wt->started || wt->over || wt->journaling) {
    pthread_mutex_unlock(&C.mu);
    return; /* one request per watch; more are ignored */
  }
  if (!q) {
    wt->over = 1;
    pthread_mutex_unlock(&C.mu);
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "request is not a stoker.v1.WatchRequest");
    return;
  }
  state_touch_locked();
  int code = reannounce_locked(q, &changed, msg, sizeof(msg));
  if (code) {
    wt->over = 1;
    pthread_mutex_unlock(&C.mu);
    LOG_WARN("watch from %s (rank %u) refused: %s", stk__rpc_call_peer(call), q->rank,
             msg);
    stk__rpc_call_finish(call, (grpc_status_code)code, msg);
    return;
  }
  /* What the start needs (the request is freed when this returns). */
  wt->req_rank = q->rank;
  snprintf(wt->client_id, sizeof(wt->client_id), "%s",
           q->client_id && strlen(q->client_id) < MAX_STR ? q->client_id : "");
  wt->known = q->known_version;
  wt->deltas = q->takes_deltas;
  wt->req_finished = q->finished, wt->req_end_job = q->end_job;
  wt->nfinished = C.nfinished;
  if (!changed) {
    watch_start_locked(wt);
    pthread_mutex_unlock(&C.mu);
    return;
  }
  /* On disk before the watch answers: it starts from the journal's
   * callback, after the next group commit (thousands of ranks
   * re-announcing themselves to a restarted coordinator share a few
   * writes, and no serving thread waits on the disk). Not started
   * meanwhile, so the main loop's pump leaves it alone. */
  wt->journaling = 1;
  pthread_mutex_unlock(&C.mu);
  persist_after(&wt->jw, watch_journaled, wt);
}

static void watch_half_close(stk__rpc_call *call) {
  watcher *wt = stk__rpc_call_data(call);
  pthread_mutex_lock(&C.mu);
  int none = !wt->started && !wt->over && !wt->journaling;
  if (none) wt->over = 1;
  pthread_mutex_unlock(&C.mu);
  if (none) stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "no request");
}

static void watch_drained(stk__rpc_call *call) {
  watcher *wt = stk__rpc_call_data(call);
  pthread_mutex_lock(&C.mu);
  wt->sending = 0;
  watch_pump_locked(wt);
  pthread_mutex_unlock(&C.mu);
}

static void watch_closed(stk__rpc_call *call) {
  watcher *wt = stk__rpc_call_data(call);
  pthread_mutex_lock(&C.mu);
  for (watcher **pp = &C.watch_list; *pp; pp = &(*pp)->next)
    if (*pp == wt) {
      *pp = wt->next;
      break;
    }
  if (wt->started) {
    C.watchers--;
    state_touch_locked();
  }
  if (wt->holds && C.ranks[wt->rank].holder_gen == wt->gen) {
    struct crank *k = &C.ranks[wt->rank];
    if (k->holder_watches > 0) k->holder_watches--;
    /* Ended by its lease (over): the client watches again at once, the
     * grace covers the gap. Closed by the client (its process closed the
     * loader or died, its connection dropped): the rank is free now. */
    k->holder_seen_ms = wt->over ? stk__now_ms() : stk__now_ms() - HOLDER_GRACE_MS;
    if (!wt->over && k->holder_watches == 0) {
      char esc[300];
      LOG_INFO("rank %u released: the watch of client %s closed", wt->rank,
               stk__escape(esc, sizeof(esc), k->holder ? k->holder : ""));
    }
  }
  int keep = wt->journaling; /* the journal's callback frees it */
  if (keep) wt->closed = 1;
  pthread_mutex_unlock(&C.mu);
  if (!keep) free(wt);
}

const stk__rpc_stream_ops watch_ops = {watch_open, watch_message, watch_half_close,
                                       watch_drained, watch_closed};

/* Finish{abort_job}: end the job as failed, unless it is already ending. */
static void abort_job_locked(uint32_t rank, const char *reason, const char *peer) {
  char esc[256 * 4 + 8]; /* untrusted: escaped, bounded */
  stk__escape(esc, sizeof(esc), reason ? reason : "");
  if (C.shutdown_req) {
    LOG_WARN(
        "rank %u asks to abort the job (%s) from %s: ignored, the job is already "
        "ending (%s)",
        rank, *esc ? esc : "no reason given", peer, C.shutdown_reason);
    return;
  }
  char why[sizeof(C.shutdown_reason)];
  snprintf(why, sizeof(why), "rank %u aborted the job: %.300s", rank,
           *esc ? esc : "no reason given");
  LOG_ERROR("%s (from %s)", why, peer);
  C.failed = 1;
  state_request_shutdown_locked(EXIT_ABORTED, why);
}

/* Log a finish and answer it (nf of world ranks finished). */
static void finish_answer(stk__rpc_call *call, uint32_t rank, uint32_t nf, uint32_t world,
                          int ends_job) {
  LOG_INFO("rank %u finished%s (%u/%u)", rank, ends_job ? " and ends the job" : "", nf,
           world);
  Stoker__V1__FinishResponse resp = STOKER__V1__FINISH_RESPONSE__INIT;
  resp.ranks_finished = nf;
  resp.world_size = world;
  stk__rpc_call_reply(call, &resp.base);
}

/* persist_after's callback for a held Finish. */
static void finish_done(void *arg) {
  held_reply *h = arg;
  if (h->aborted) {
    Stoker__V1__FinishResponse resp = STOKER__V1__FINISH_RESPONSE__INIT;
    resp.ranks_finished = h->nf;
    resp.world_size = h->world;
    stk__rpc_call_reply(h->call, &resp.base);
  } else {
    finish_answer(h->call, h->rank, h->nf, h->world, h->ends_job);
  }
  stk__rpc_call_release(h->call);
  free(h);
}

void ranks_finish(stk__rpc_call *call, const ProtobufCMessage *req) {
  const Stoker__V1__FinishRequest *q = (const Stoker__V1__FinishRequest *)req;
  char msg[300];
  /* Its place in the journal's queue, taken before anything changes:
   * out of memory refuses the call (the client retries) instead of
   * writing on this serving thread. */
  held_reply *h = malloc(sizeof(*h));
  if (!h) {
    stk__rpc_call_finish(call, GRPC_STATUS_UNAVAILABLE, "out of memory: retry");
    return;
  }
  pthread_mutex_lock(&C.mu);
  state_touch_locked();
  uint32_t W = C.spec.world_size;
  if (q->rank >= W) {
    pthread_mutex_unlock(&C.mu);
    free(h);
    snprintf(msg, sizeof(msg), "rank %u is outside the job's world_size %u", q->rank, W);
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, msg);
    return;
  }
  if (q->shutdown_job && q->rank != 0) {
    pthread_mutex_unlock(&C.mu);
    free(h);
    stk__rpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "only rank 0 may end the whole job (shutdown_job)");
    return;
  }
  if (q->job_hash && C.resolved && q->job_hash != C.hash) {
    snprintf(msg, sizeof(msg),
             "finish for job %016" PRIx64 ", this coordinator runs job %016" PRIx64,
             q->job_hash, C.hash);
    pthread_mutex_unlock(&C.mu);
    free(h);
    LOG_WARN("finish from %s refused: %s", stk__rpc_call_peer(call), msg);
    stk__rpc_call_finish(call, GRPC_STATUS_FAILED_PRECONDITION, msg);
    return;
  }
  if (q->abort_job) {
    abort_job_locked(q->rank, q->reason, stk__rpc_call_peer(call));
    uint32_t nf = C.nfinished;
    pthread_mutex_unlock(&C.mu);
    /* The end is on disk before anyone hears of it: answered from the
     * journal's next group commit, not on this serving thread. */
    h->call = call, h->bb = NULL, h->aborted = 1;
    h->rank = q->rank, h->nf = nf, h->world = W, h->ends_job = 1;
    stk__rpc_call_hold(call);
    persist_after(&h->jw, finish_done, h);
    return;
  }
  /* A client's Finish (it carries the job hash) for a rank that never
   * joined here: it joined an earlier coordinator. */
  if (!C.joined[q->rank] && q->job_hash) C.seen_earlier = 1;
  if (!C.finished[q->rank]) C.finished[q->rank] = 1, C.nfinished++;
  uint32_t nf = C.nfinished;
  if (q->shutdown_job) state_request_shutdown_locked(EXIT_OK, "rank 0 ended the job");
  else if (nf == W) state_request_shutdown_locked(EXIT_OK, "every rank finished");
  pthread_mutex_unlock(&C.mu);
  /* An answered Finish survives a restart: on disk first. The answer
   * waits for the journal's next group commit (thousands of ranks
   * finishing together share a few writes), without holding this serving
   * thread; without --state-dir it goes at once. */
  h->call = call, h->bb = NULL, h->aborted = 0;
  h->rank = q->rank, h->nf = nf, h->world = W, h->ends_job = q->shutdown_job;
  stk__rpc_call_hold(call);
  persist_after(&h->jw, finish_done, h);
}
