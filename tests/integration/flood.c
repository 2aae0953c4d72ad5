/* flood.c - the hostile load of flood.h: idle TCP connections, silent and
 * stalled Worker.Stream calls, all on one completion queue and one thread.
 * Owns its sockets, channels, calls and thread; frees them in flood_stop.
 */
#include "flood.h"

#include <arpa/inet.h>
#include <errno.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "rpc/rpc.h"
#include "stoker.pb-c.h"

enum { T_STATUS, T_SEND };

typedef struct fcall {
  struct flood *f;
  grpc_call *call;
  grpc_channel *ch;
  int64_t start_ms; /* a stalled call's start (reopen_stalled_ms) */
  int stalled, health, sent, status_done, send_pending, cancelled;
  grpc_status_code status;
  grpc_slice details;
  grpc_metadata_array trail, init;
  grpc_byte_buffer *recv;
  struct {
    int kind;
    struct fcall *c;
  } t_status, t_send;
} fcall;

struct flood {
  flood_config cfg;
  int *fds;
  int nfds;
  grpc_channel **chans;
  int nchans;
  fcall *calls;
  int ncalls;
  grpc_completion_queue *cq;
  pthread_t thread;
  int stop; /* atomic */
  int no_thread;
  pthread_mutex_t mu;
  flood_stats st;
};

static int connect_idle(const char *target) {
  char host[64];
  const char *colon = strrchr(target, ':');
  if (!colon || (size_t)(colon - target) >= sizeof(host)) return -1;
  memcpy(host, target, (size_t)(colon - target));
  host[colon - target] = 0;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)atoi(colon + 1));
  if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* The stalled stream's next request (steps 0, 1, ... of epoch 0). */
static void send_next(fcall *c) {
  flood *f = c->f;
  if (c->sent >= (f->cfg.stalled_requests ? f->cfg.stalled_requests : 8)) return;
  Stoker__V1__BatchRequest q = STOKER__V1__BATCH_REQUEST__INIT;
  q.job_hash = f->cfg.job_hash;
  q.epoch = 0;
  q.rank = 0;
  q.step = f->cfg.steps ? (uint64_t)c->sent % f->cfg.steps : 0;
  grpc_byte_buffer *bb = stk__rpc_pack(&q.base);
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = bb;
  if (grpc_call_start_batch(c->call, &op, 1, &c->t_send, NULL) == GRPC_CALL_OK) {
    c->send_pending = 1;
    c->sent++;
  }
  grpc_byte_buffer_destroy(bb); /* the core holds its own reference */
}

/* A health watch: the request (empty: the server's own status), the
 * half-close, the first answer taken; then it stays until its lease or a
 * refusal ends it. */
static void start_watch(flood *f, fcall *c, grpc_channel *ch) {
  c->f = f;
  c->ch = ch;
  c->health = 1;
  c->t_status.kind = T_STATUS, c->t_status.c = c;
  c->details = grpc_empty_slice();
  grpc_metadata_array_init(&c->trail);
  grpc_metadata_array_init(&c->init);
  grpc_slice m = grpc_slice_from_static_string("/grpc.health.v1.Health/Watch");
  c->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, f->cq, m, NULL,
                                     gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_byte_buffer *req = grpc_raw_byte_buffer_create(NULL, 0);
  grpc_op ops[6];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = req;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->init;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &c->recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &c->trail;
  ops[5].data.recv_status_on_client.status = &c->status;
  ops[5].data.recv_status_on_client.status_details = &c->details;
  grpc_call_error e = grpc_call_start_batch(c->call, ops, 6, &c->t_status, NULL);
  grpc_byte_buffer_destroy(req);
  if (e != GRPC_CALL_OK) {
    c->status_done = 1;
    return;
  }
  pthread_mutex_lock(&f->mu);
  f->st.health_started++;
  pthread_mutex_unlock(&f->mu);
}

static void start_call(flood *f, fcall *c, grpc_channel *ch, int stalled) {
  c->f = f;
  c->ch = ch;
  c->start_ms = stk__now_ms();
  c->stalled = stalled;
  c->t_status.kind = T_STATUS, c->t_status.c = c;
  c->t_send.kind = T_SEND, c->t_send.c = c;
  c->details = grpc_empty_slice();
  grpc_metadata_array_init(&c->trail);
  grpc_metadata_array_init(&c->init);
  grpc_slice m = grpc_slice_from_static_string("/stoker.v1.Worker/Stream");
  c->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, f->cq, m, NULL,
                                     gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  /* A silent call also waits for a message: gRPC delivers the status only
   * once the messages before it were taken, and a silent call gets none.
   * A stalled call never reads, so its status shows only when it is
   * cancelled (the test reads the worker's counters instead). */
  grpc_op ops[4];
  size_t n = 0;
  memset(ops, 0, sizeof(ops));
  ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (!stalled) {
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &c->init;
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &c->recv;
  }
  ops[n].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[n].data.recv_status_on_client.trailing_metadata = &c->trail;
  ops[n].data.recv_status_on_client.status = &c->status;
  ops[n++].data.recv_status_on_client.status_details = &c->details;
  if (grpc_call_start_batch(c->call, ops, n, &c->t_status, NULL) != GRPC_CALL_OK) {
    c->status_done = 1;
    return;
  }
  pthread_mutex_lock(&f->mu);
  f->st.calls_started++;
  pthread_mutex_unlock(&f->mu);
  if (stalled) send_next(c);
}

static void call_free(fcall *c) {
  grpc_call_unref(c->call);
  grpc_slice_unref(c->details);
  grpc_metadata_array_destroy(&c->trail);
  grpc_metadata_array_destroy(&c->init);
  if (c->recv) grpc_byte_buffer_destroy(c->recv);
  c->call = NULL;
}

/* cfg.reopen_stalled_ms: a stalled call that ended and has no operation
 * left is replaced by a new one on its connection. Flood thread only. */
static void maybe_reopen(flood *f, fcall *c) {
  if (!f->cfg.reopen_stalled_ms || !c->stalled ||
      __atomic_load_n(&f->stop, __ATOMIC_ACQUIRE))
    return;
  pthread_mutex_lock(&f->mu);
  int over = c->status_done && !c->send_pending;
  if (over) f->st.stalled_reopened++;
  pthread_mutex_unlock(&f->mu);
  if (!over) return;
  grpc_channel *ch = c->ch;
  call_free(c);
  pthread_mutex_lock(&f->mu);
  memset(c, 0, sizeof(*c));
  pthread_mutex_unlock(&f->mu);
  start_call(f, c, ch, 1);
}

static void on_event(flood *f, int kind, fcall *c, int success) {
  pthread_mutex_lock(&f->mu);
  if (kind == T_SEND) {
    c->send_pending = 0;
    if (success) f->st.requests_sent++;
    pthread_mutex_unlock(&f->mu);
    if (success && !__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) send_next(c);
    maybe_reopen(f, c);
    return;
  }
  c->status_done = 1;
  if (c->health) {
    f->st.health_ended++;
    if (c->status == GRPC_STATUS_RESOURCE_EXHAUSTED) f->st.health_exhausted++;
    pthread_mutex_unlock(&f->mu);
    return;
  }
  f->st.calls_ended++;
  if (c->stalled) f->st.stalled_ended++;
  else if (c->status == GRPC_STATUS_DEADLINE_EXCEEDED) f->st.ended_deadline++;
  else if (c->status == GRPC_STATUS_RESOURCE_EXHAUSTED) f->st.ended_exhausted++;
  else f->st.ended_other++;
  pthread_mutex_unlock(&f->mu);
  maybe_reopen(f, c);
}

static int pending_ops(flood *f) {
  int n = 0;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->ncalls; i++)
    n += !f->calls[i].status_done + f->calls[i].send_pending;
  pthread_mutex_unlock(&f->mu);
  return n;
}

/* Cancel every call. On the flood thread (or with none running), so no
 * stalled call is replaced behind the loop's back. */
static void cancel_all(flood *f) {
  for (int i = 0; i < f->ncalls; i++)
    if (f->calls[i].call) grpc_call_cancel(f->calls[i].call, NULL);
}

/* A stalled call never reads, so gRPC never shows it the worker's cancel;
 * with reopen_stalled_ms the flood cancels it itself that long after its
 * start (then maybe_reopen replaces it). */
static void expire_stalled(flood *f) {
  int64_t now = stk__now_ms();
  for (int i = 0; i < f->ncalls; i++) {
    fcall *c = &f->calls[i];
    if (c->stalled && c->call && !c->cancelled &&
        now - c->start_ms >= f->cfg.reopen_stalled_ms) {
      c->cancelled = 1;
      grpc_call_cancel(c->call, NULL);
    }
  }
}

static void *flood_main(void *arg) {
  flood *f = arg;
  int cancelled = 0;
  for (;;) {
    int stop = __atomic_load_n(&f->stop, __ATOMIC_ACQUIRE);
    if (stop && !cancelled) cancel_all(f), cancelled = 1;
    if (stop && pending_ops(f) == 0) break;
    if (!stop && f->cfg.reopen_stalled_ms) expire_stalled(f);
    grpc_event ev =
        grpc_completion_queue_next(f->cq,
                                   gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                gpr_time_from_millis(20, GPR_TIMESPAN)),
                                   NULL);
    if (ev.type != GRPC_OP_COMPLETE) continue;
    struct {
      int kind;
      fcall *c;
    } *t = ev.tag;
    on_event(f, t->kind, t->c, ev.success);
  }
  return NULL;
}

int flood_start(const flood_config *cfg, flood **out, char *err, size_t errlen) {
  *out = NULL;
  flood *f = calloc(1, sizeof(*f));
  if (!f) return snprintf(err, errlen, "out of memory"), -1;
  f->cfg = *cfg;
  pthread_mutex_init(&f->mu, NULL);
  f->fds = calloc((size_t)cfg->idle_conns + 1, sizeof(int));
  for (int i = 0; i < cfg->idle_conns; i++) {
    int fd = connect_idle(cfg->target);
    if (fd < 0) {
      snprintf(err, errlen, "idle connection %d: %s", i, strerror(errno));
      break;
    }
    if (i < cfg->idle_http2) {
      /* the client preface and an empty SETTINGS frame (RFC 9113 3.4) */
      static const char preface[] =
          "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
          "\0\0\0\4\0\0\0\0\0";
      if (write(fd, preface, sizeof(preface) - 1) != (ssize_t)sizeof(preface) - 1) {
        snprintf(err, errlen, "idle connection %d: cannot write the preface", i);
        close(fd);
        break;
      }
    }
    f->fds[f->nfds++] = fd;
  }
  f->st.conns_open = f->nfds;
  int per = cfg->streams_per_channel > 0 ? cfg->streams_per_channel : 50;
  int nsilent_ch = (cfg->silent_streams + per - 1) / per;
  int nhealth_ch = (cfg->health_watches + per - 1) / per;
  f->nchans = nsilent_ch + cfg->stalled_streams + nhealth_ch;
  f->chans = calloc((size_t)f->nchans + 1, sizeof(*f->chans));
  f->ncalls = cfg->silent_streams + cfg->stalled_streams + cfg->health_watches;
  f->calls = calloc((size_t)f->ncalls + 1, sizeof(fcall));
  f->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_arg a[2];
  a[0].type = GRPC_ARG_INTEGER;
  a[0].key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL; /* one connection per channel */
  a[0].value.integer = 1;
  a[1].type = GRPC_ARG_INTEGER;
  a[1].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  a[1].value.integer = 64 << 20;
  grpc_channel_args args = {2, a};
  grpc_channel_credentials *creds = grpc_insecure_credentials_create();
  for (int i = 0; i < f->nchans; i++) {
    /* distinct args keep gRPC from sharing one connection between them */
    f->chans[i] = grpc_channel_create(cfg->target, creds, &args);
  }
  grpc_channel_credentials_release(creds);
  for (int i = 0; i < cfg->silent_streams; i++)
    start_call(f, &f->calls[i], f->chans[i / per], 0);
  for (int i = 0; i < cfg->stalled_streams; i++)
    start_call(f, &f->calls[cfg->silent_streams + i], f->chans[nsilent_ch + i], 1);
  for (int i = 0; i < cfg->health_watches; i++)
    start_watch(f, &f->calls[cfg->silent_streams + cfg->stalled_streams + i],
                f->chans[nsilent_ch + cfg->stalled_streams + i / per]);
  if (pthread_create(&f->thread, NULL, flood_main, f)) {
    snprintf(err, errlen, "cannot start a thread");
    __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
    flood_main(f); /* drain here, then free */
    f->no_thread = 1;
    flood_stop(f);
    return -1;
  }
  *out = f;
  return 0;
}

void flood_stats_get(flood *f, flood_stats *out) {
  pthread_mutex_lock(&f->mu);
  *out = f->st;
  pthread_mutex_unlock(&f->mu);
}

void flood_stop(flood *f) {
  if (!f) return;
  __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE); /* the thread cancels the calls */
  if (!f->no_thread) pthread_join(f->thread, NULL);
  for (int i = 0; i < f->ncalls; i++) {
    if (f->calls[i].call) call_free(&f->calls[i]);
  }
  for (int i = 0; i < f->nchans; i++) grpc_channel_destroy(f->chans[i]);
  grpc_completion_queue_shutdown(f->cq);
  while (
      grpc_completion_queue_next(f->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
      GRPC_QUEUE_SHUTDOWN) {}
  grpc_completion_queue_destroy(f->cq);
  for (int i = 0; i < f->nfds; i++) close(f->fds[i]);
  free(f->fds);
  free(f->chans);
  free(f->calls);
  pthread_mutex_destroy(&f->mu);
  free(f);
}
