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
 * (fake_cudart_live) so leaks are visible.
 *
 * It stands in for the driver too ($STOKER_CUDA_DRIVER): it loads only PTX
 * text that defines the conversion kernel's entry, and a cuLaunchKernel of
 * it is queued like a copy and then runs the kernel's own body
 * (convert_kernel.h) for every thread of the launch grid, after checking
 * that every byte it reads or writes lies in a device block. That tests
 * the launch (grid, argument block, pointers, table, ordering), not the
 * PTX: the PTX is checked by ptxas where it is installed (test_cuda_ptx)
 * and on a GPU (docs/gpu.md). One device, coarse locking. Test code only.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client/convert_kernel.h"

typedef struct op {
  int kind; /* 0 copy, 1 record, 2 kernel */
  void *dst;
  const void *src;
  size_t n;
  struct ev *ev;
  stk__gather_args args; /* kind 2 */
  unsigned grid[2], block;
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
static long live_dev, live_host, live_streams, live_events, live_modules, bad_copies;
static long launches;

long fake_cudart_live(void) {
  return live_dev + live_host + live_streams + live_events + live_modules;
}
long fake_cuda_launches(void) { return launches; }
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
  if (o->kind == 0) {
    memcpy(o->dst, o->src, o->n);
  } else if (o->kind == 2) {
    for (unsigned by = 0; by < o->grid[1]; by++)
      for (unsigned bx = 0; bx < o->grid[0]; bx++)
        for (unsigned tx = 0; tx < o->block; tx++)
          stk__gather_thread(o->args, bx, by, o->grid[0], o->grid[1], o->block, tx);
  } else {
    o->ev->done_seq = o->ev->seq;
  }
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
  /* host to device, device to host, device to device */
  if (kind == 1   ? !in_dev(dst, n)
      : kind == 2 ? !in_dev(src, n)
      : kind == 3 ? !in_dev(dst, n) || !in_dev(src, n)
                  : 1)
    bad_copies++;
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

int cudaMemset(void *p, int v, size_t n) {
  pthread_mutex_lock(&mu);
  if (!in_dev(p, n)) bad_copies++;
  else memset(p, v, n);
  pthread_mutex_unlock(&mu);
  return 0;
}

/* ---- the driver ------------------------------------------------------ */

static int fake_module;

int cuInit(unsigned f) { return f ? 1 : 0; }
int cuGetErrorString(int e, const char **s) {
  *s = e ? "fake driver error" : "no error";
  return 0;
}
int cuModuleLoadData(void **m, const void *image) {
  const char *t = image;
  if (strncmp(t, "//", 2) && strncmp(t, ".version", 8)) return 200; /* not PTX text */
  if (!strstr(t, ".entry " STK__GATHER_ENTRY "(")) return 200;
  pthread_mutex_lock(&mu);
  live_modules++;
  pthread_mutex_unlock(&mu);
  *m = &fake_module;
  return 0;
}
int cuModuleGetFunction(void **f, void *m, const char *name) {
  if (m != &fake_module || strcmp(name, STK__GATHER_ENTRY)) return 500;
  static int fake_fn;
  *f = &fake_fn;
  return 0;
}
int cuModuleUnload(void *m) {
  if (m != &fake_module) return 400;
  pthread_mutex_lock(&mu);
  live_modules--;
  pthread_mutex_unlock(&mu);
  return 0;
}
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shmem, void *s, void **params,
                   void **extra) {
  if (!f || !gx || !gy || gz != 1 || !bx || by != 1 || bz != 1 || shmem || extra || !s)
    return 1;
  op *o = calloc(1, sizeof(*o));
  o->kind = 2;
  memcpy(&o->args, params[0], sizeof(o->args)); /* copied at launch, as CUDA does */
  o->grid[0] = gx, o->grid[1] = gy, o->block = bx;
  const stk__gather_args *a = &o->args;
  size_t n = (size_t)a->batch * a->channels * a->hw;
  pthread_mutex_lock(&mu);
  if (a->channels < 1 || a->channels > 4 || (a->esz != 2 && a->esz != 4) ||
      !in_dev(a->in, n) || !in_dev(a->out, n * a->esz) ||
      !in_dev(a->table, 4 * 256 * (size_t)a->esz)) {
    bad_copies++;
    free(o);
    pthread_mutex_unlock(&mu);
    return 1;
  }
  launches++;
  push(s, o);
  pthread_mutex_unlock(&mu);
  return 0;
}

/* ---- what examples/cuda_overlap.c calls besides ---------------------- */

int cudaStreamCreate(void **s) { return cudaStreamCreateWithFlags(s, 0); }
int cudaEventCreate(void **e) { return cudaEventCreateWithFlags(e, 0); }
int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
  return cudaMemcpyAsync(dst, src, n, kind, NULL);
}
int cudaEventElapsedTime(float *ms, void *a, void *b) {
  pthread_mutex_lock(&mu);
  flush_event(a);
  flush_event(b);
  pthread_mutex_unlock(&mu);
  *ms = 0.001f; /* no clock here: a stand-in figure */
  return 0;
}
