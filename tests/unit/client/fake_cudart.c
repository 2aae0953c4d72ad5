/* fake_cudart.c - a host-memory stand-in for the handful of CUDA runtime
 * calls libstoker's CUDA backend makes, loaded through $STOKER_CUDART so
 * the backend's protocol can be tested on machines without a GPU.
 *
 * It is deliberately lazy: cudaMemcpyAsync and cudaEventRecord on a stream
 * are queued and run only when something must wait for them
 * (cudaEventSynchronize, cudaStreamWaitEvent, cudaStreamSynchronize). So a
 * missing wait in the backend (reusing a pinned buffer before its copy ran,
 * reading a slot before its copy) shows up as wrong bytes. It also checks
 * that copies stay inside cudaMalloc'd blocks and counts live allocations
 * (fake_cudart_live) so leaks are visible. Not a CUDA emulator: no kernels,
 * one device, coarse locking. Test code only.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct op {
  int kind; /* 0 copy, 1 record */
  void *dst;
  const void *src;
  size_t n;
  struct ev *ev;
  struct op *next;
} op;
typedef struct stream {
  op *head, *tail;
} stream;
typedef struct ev {
  stream *s;
  unsigned long seq, done_seq;
} ev;
typedef struct blk {
  char *p;
  size_t n;
  struct blk *next;
} blk;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static blk *dev_blocks;
static long live_dev, live_host, live_streams, live_events, bad_copies;

long fake_cudart_live(void) { return live_dev + live_host + live_streams + live_events; }
long fake_cudart_bad_copies(void) { return bad_copies; }

static int in_dev(const void *p, size_t n) {
  for (blk *b = dev_blocks; b; b = b->next)
    if ((const char *)p >= b->p && (const char *)p + n <= b->p + b->n) return 1;
  return 0;
}

static void run_one(stream *s) {
  op *o = s->head;
  s->head = o->next;
  if (!s->head) s->tail = NULL;
  if (o->kind == 0) memcpy(o->dst, o->src, o->n);
  else o->ev->done_seq = o->ev->seq;
  free(o);
}
/* run s's queue until e's latest record has run */
static void flush_event(ev *e) {
  if (!e || !e->s) return;
  while (e->done_seq != e->seq && e->s->head) run_one(e->s);
}
static void flush_all(stream *s) {
  while (s && s->head) run_one(s);
}
static void push(stream *s, op *o) {
  o->next = NULL;
  if (s->tail) s->tail->next = o;
  else s->head = o;
  s->tail = o;
}

int cudaGetDeviceCount(int *n) {
  *n = 1;
  return 0;
}
int cudaSetDevice(int d) { return d == 0 ? 0 : 101; }
const char *cudaGetErrorString(int e) { return e ? "fake cudart error" : "no error"; }
int cudaHostAlloc(void **p, size_t n, unsigned f) {
  (void)f;
  *p = malloc(n);
  pthread_mutex_lock(&mu);
  live_host++;
  pthread_mutex_unlock(&mu);
  return *p ? 0 : 2;
}
int cudaFreeHost(void *p) {
  pthread_mutex_lock(&mu);
  live_host--;
  pthread_mutex_unlock(&mu);
  free(p);
  return 0;
}
int cudaMalloc(void **p, size_t n) {
  blk *b = malloc(sizeof(*b));
  b->p = malloc(n);
  b->n = n;
  pthread_mutex_lock(&mu);
  b->next = dev_blocks;
  dev_blocks = b;
  live_dev++;
  pthread_mutex_unlock(&mu);
  *p = b->p;
  return 0;
}
int cudaFree(void *p) {
  pthread_mutex_lock(&mu);
  for (blk **b = &dev_blocks; *b; b = &(*b)->next)
    if ((*b)->p == p) {
      blk *x = *b;
      *b = x->next;
      free(x->p);
      free(x);
      live_dev--;
      break;
    }
  pthread_mutex_unlock(&mu);
  return 0;
}
int cudaStreamCreateWithFlags(void **s, unsigned f) {
  (void)f;
  *s = calloc(1, sizeof(stream));
  pthread_mutex_lock(&mu);
  live_streams++;
  pthread_mutex_unlock(&mu);
  return 0;
}
int cudaStreamDestroy(void *s) {
  pthread_mutex_lock(&mu);
  flush_all(s);
  live_streams--;
  pthread_mutex_unlock(&mu);
  free(s);
  return 0;
}
int cudaStreamSynchronize(void *s) {
  pthread_mutex_lock(&mu);
  flush_all(s);
  pthread_mutex_unlock(&mu);
  return 0;
}
int cudaStreamWaitEvent(void *s, void *e, unsigned f) {
  (void)s, (void)f;
  pthread_mutex_lock(&mu);
  flush_event(e); /* the waiting stream's later work sees e's work done */
  pthread_mutex_unlock(&mu);
  return 0;
}
int cudaEventCreateWithFlags(void **e, unsigned f) {
  (void)f;
  *e = calloc(1, sizeof(ev));
  pthread_mutex_lock(&mu);
  live_events++;
  pthread_mutex_unlock(&mu);
  return 0;
}
int cudaEventDestroy(void *e) {
  pthread_mutex_lock(&mu);
  flush_event(e);
  live_events--;
  pthread_mutex_unlock(&mu);
  free(e);
  return 0;
}
int cudaEventRecord(void *e, void *s) {
  ev *x = e;
  pthread_mutex_lock(&mu);
  x->seq++;
  if (!s) { /* the legacy default stream: nothing queued in this fake */
    x->s = NULL;
    x->done_seq = x->seq;
  } else {
    op *o = calloc(1, sizeof(*o));
    o->kind = 1;
    o->ev = x;
    x->s = s;
    push(s, o);
  }
  pthread_mutex_unlock(&mu);
  return 0;
}
int cudaEventSynchronize(void *e) {
  pthread_mutex_lock(&mu);
  flush_event(e);
  pthread_mutex_unlock(&mu);
  return 0;
}
int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *s) {
  pthread_mutex_lock(&mu);
  if (kind != 1 || !in_dev(dst, n)) bad_copies++;
  op *o = calloc(1, sizeof(*o));
  o->dst = dst, o->src = src, o->n = n;
  if (s) push(s, o);
  else {
    memcpy(dst, src, n);
    free(o);
  }
  pthread_mutex_unlock(&mu);
  return 0;
}
