/* backend_cuda.c - the CUDA device backend, with the CUDA runtime loaded by
 * dlopen at run time (libcudart.so, .13, .12, .11; or $STOKER_CUDART) and
 * our own minimal prototypes, so the library builds without CUDA headers and
 * runs on machines without a GPU (asking for CUDA there is STK_UNSUPPORTED,
 * never a crash).
 *
 * Per slot: a device buffer (cudaMalloc), an event `ready` recorded on the
 * backend's own non-blocking stream after the slot's host->device copy, and
 * an event `released` recorded on the caller's stream (cfg.cuda_stream) by
 * stk_batch_release. Host payload buffers are pinned (cudaHostAlloc) so the
 * copies are truly asynchronous. The copy thread, before refilling a slot,
 * waits on the host for the slot's previous copy (its host buffers are
 * about to be overwritten) and makes the copy stream wait for `released`
 * (the caller's kernels may still read the device buffer).
 * next() makes cfg.cuda_stream wait for `ready`.
 *
 * UNVERIFIED ON HARDWARE: written and built without a GPU (see docs/gpu.md).
 * Owns: the stream, events, device and pinned buffers of one client. The
 * dlopen handle is process-wide and never closed.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "internal.h"

typedef int cuerr;
typedef void *custream;
typedef void *cuevent;

#define CUDA_FNS(X)                                            \
  X(cudaGetDeviceCount, cuerr, (int *))                        \
  X(cudaSetDevice, cuerr, (int))                               \
  X(cudaGetErrorString, const char *, (cuerr))                 \
  X(cudaHostAlloc, cuerr, (void **, size_t, unsigned))         \
  X(cudaFreeHost, cuerr, (void *))                             \
  X(cudaMalloc, cuerr, (void **, size_t))                      \
  X(cudaFree, cuerr, (void *))                                 \
  X(cudaStreamCreateWithFlags, cuerr, (custream *, unsigned))  \
  X(cudaStreamDestroy, cuerr, (custream))                      \
  X(cudaStreamSynchronize, cuerr, (custream))                  \
  X(cudaStreamWaitEvent, cuerr, (custream, cuevent, unsigned)) \
  X(cudaEventCreateWithFlags, cuerr, (cuevent *, unsigned))    \
  X(cudaEventDestroy, cuerr, (cuevent))                        \
  X(cudaEventRecord, cuerr, (cuevent, custream))               \
  X(cudaEventSynchronize, cuerr, (cuevent))                    \
  X(cudaMemcpyAsync, cuerr, (void *, const void *, size_t, int, custream))

typedef struct cudart {
#define X(name, ret, args) ret(*name) args;
  CUDA_FNS(X)
#undef X
} cudart;

static cudart rt;
static int rt_status = -1; /* -1 unloaded, 0 ok, else stk_status */
static char rt_msg[512];
static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

enum {
  HOST_ALLOC_PORTABLE = 1,
  STREAM_NON_BLOCKING = 1,
  EVENT_DISABLE_TIMING = 2,
  MEMCPY_H2D = 1
};

static void rt_load(void) {
  /* $STOKER_CUDART, when set, is the only candidate. */
  const char *env = getenv("STOKER_CUDART");
  const char *defaults[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                            "libcudart.so.11.0", "libcudart.so.11"};
  const char *only[] = {env, NULL, NULL, NULL, NULL};
  const char **names = env && *env ? only : defaults;
  void *h = NULL;
  char tried[256] = "";
  for (size_t i = 0; i < 5 && !h; i++) {
    if (!names[i] || !*names[i]) continue;
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      size_t l = strlen(tried);
      snprintf(tried + l, sizeof(tried) - l, "%s%s", l ? ", " : "", names[i]);
    }
  }
  if (!h) {
    snprintf(rt_msg, sizeof(rt_msg),
             "CUDA runtime not found: tried %s (install the CUDA runtime or set "
             "STOKER_CUDART to its path)",
             tried);
    rt_status = STK_UNSUPPORTED;
    return;
  }
#define X(name, ret, args)                                            \
  rt.name = (ret(*) args)dlsym(h, #name);                             \
  if (!rt.name) {                                                     \
    snprintf(rt_msg, sizeof(rt_msg), "CUDA runtime lacks %s", #name); \
    rt_status = STK_UNSUPPORTED;                                      \
    return;                                                           \
  }
  CUDA_FNS(X)
#undef X
  int n = 0;
  cuerr e = rt.cudaGetDeviceCount(&n);
  if (e != 0 || n <= 0) {
    snprintf(rt_msg, sizeof(rt_msg), "no CUDA device: %s",
             e ? rt.cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
    rt_status = STK_UNSUPPORTED;
    return;
  }
  rt_status = 0;
}

struct stk__cuda {
  int device;
  custream stream;
  char msg[256];
};

static int cerr(stk_client *c, cuerr e, const char *what) {
  if (e == 0) return STK_OK;
  snprintf(c->cuda->msg, sizeof(c->cuda->msg), "%s: %s", what, rt.cudaGetErrorString(e));
  return STK_INTERNAL;
}

const char *stk__cuda_error(stk_client *c) {
  return c->cuda ? c->cuda->msg : "CUDA not in use";
}

int stk__cuda_open(stk_client *c, char *err, size_t errlen) {
  pthread_once(&rt_once, rt_load);
  if (rt_status) {
    return stk__errf(err, errlen, rt_status, "%s", rt_msg);
  }
  int n = 0;
  rt.cudaGetDeviceCount(&n);
  if (c->cfg.cuda_device < 0 || c->cfg.cuda_device >= n) {
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "cfg.cuda_device %d out of range (%d devices)", c->cfg.cuda_device,
                     n);
  }
  c->cuda = calloc(1, sizeof(*c->cuda));
  if (!c->cuda) return STK_NO_MEMORY;
  c->cuda->device = c->cfg.cuda_device;
  cuerr e = rt.cudaSetDevice(c->cuda->device);
  if (!e) e = rt.cudaStreamCreateWithFlags(&c->cuda->stream, STREAM_NON_BLOCKING);
  if (e) {
    stk__errf(err, errlen, 0, "CUDA init on device %d: %s", c->cuda->device,
              rt.cudaGetErrorString(e));
    free(c->cuda);
    c->cuda = NULL;
    return STK_UNSUPPORTED;
  }
  return STK_OK;
}

void *stk__cuda_host_alloc(stk_client *c, size_t n) {
  void *p = NULL;
  rt.cudaSetDevice(c->cuda->device);
  if (rt.cudaHostAlloc(&p, n ? n : 64, HOST_ALLOC_PORTABLE) != 0) return NULL;
  return p;
}

void stk__cuda_host_free(stk_client *c, void *p) {
  (void)c;
  if (p) rt.cudaFreeHost(p);
}

int stk__cuda_slot_init(stk_client *c, stk_batch *s, char *err, size_t errlen) {
  rt.cudaSetDevice(c->cuda->device);
  cuerr e = rt.cudaMalloc(&s->dev, (size_t)c->out.total_bytes);
  if (!e) e = rt.cudaEventCreateWithFlags(&s->ev_ready, EVENT_DISABLE_TIMING);
  if (!e) e = rt.cudaEventCreateWithFlags(&s->ev_released, EVENT_DISABLE_TIMING);
  if (e) {
    return stk__errf(err, errlen, STK_NO_MEMORY, "CUDA slot allocation (%llu bytes): %s",
                     (unsigned long long)c->out.total_bytes, rt.cudaGetErrorString(e));
  }
  return STK_OK;
}

void stk__cuda_slot_free(stk_client *c, stk_batch *s) {
  if (!c->cuda) return;
  rt.cudaSetDevice(c->cuda->device);
  if (s->ready_recorded) rt.cudaEventSynchronize(s->ev_ready);
  if (s->dev) rt.cudaFree(s->dev);
  if (s->ev_ready) rt.cudaEventDestroy(s->ev_ready);
  if (s->ev_released) rt.cudaEventDestroy(s->ev_released);
  s->dev = s->ev_ready = s->ev_released = NULL;
}

int stk__cuda_before_fill(stk_client *c, stk_batch *s) {
  rt.cudaSetDevice(c->cuda->device);
  /* The slot's host buffers fed its previous copy: let that finish. */
  if (s->ready_recorded) {
    int st = cerr(c, rt.cudaEventSynchronize(s->ev_ready), "cudaEventSynchronize");
    if (st) return st;
  }
  return STK_OK;
}

int stk__cuda_fill(stk_client *c, stk_batch *s, const void *src, size_t n) {
  custream st = c->cuda->stream;
  int r = STK_OK;
  /* The caller's kernels queued before release may still read s->dev. */
  if (s->released_recorded)
    r = cerr(c, rt.cudaStreamWaitEvent(st, s->ev_released, 0), "cudaStreamWaitEvent");
  if (!r)
    r = cerr(c, rt.cudaMemcpyAsync(s->dev, src, n, MEMCPY_H2D, st), "cudaMemcpyAsync");
  if (!r) r = cerr(c, rt.cudaEventRecord(s->ev_ready, st), "cudaEventRecord");
  if (!r) s->ready_recorded = 1;
  return r;
}

int stk__cuda_on_next(stk_client *c, stk_batch *s) {
  rt.cudaSetDevice(c->cuda->device);
  return cerr(c, rt.cudaStreamWaitEvent((custream)c->cfg.cuda_stream, s->ev_ready, 0),
              "cudaStreamWaitEvent(cfg.cuda_stream)");
}

void stk__cuda_on_release(stk_client *c, stk_batch *s) {
  rt.cudaSetDevice(c->cuda->device);
  if (rt.cudaEventRecord(s->ev_released, (custream)c->cfg.cuda_stream) == 0)
    s->released_recorded = 1;
}

void stk__cuda_close(stk_client *c) {
  if (!c->cuda) return;
  rt.cudaSetDevice(c->cuda->device);
  rt.cudaStreamSynchronize(c->cuda->stream);
  rt.cudaStreamDestroy(c->cuda->stream);
  free(c->cuda);
  c->cuda = NULL;
}
