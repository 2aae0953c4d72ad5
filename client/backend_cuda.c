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
 * Conversion on the device: a client whose images arrive as 8-bit values
 * to become floats (cfg.convert, or a float job's wire_u8 form) copies the
 * 8-bit images to a per-slot device buffer and runs convert_kernel.cu's
 * gather there (a quarter of the PCIe bytes of float32). The kernel's PTX
 * is embedded (stk__convert_ptx, built by clang) and loaded through the
 * CUDA driver (libcuda.so.1, or $STOKER_CUDA_DRIVER), dlopen'ed too, into
 * the runtime's primary context. Without it the CPU converts (convert.c).
 *
 * Checked on a GPU by scripts/gpu-check.sh (docs/gpu.md).
 * Owns: the stream, events, device and pinned buffers, module and table of
 * one client. The dlopen handles are process-wide and never closed.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "convert_kernel.h"
#include "client_internal.h"

typedef int cuerr;
typedef void *custream;
typedef void *cuevent;

#define CUDA_FNS(X)                                                        \
  X(cudaGetDeviceCount, cuerr, (int *))                                    \
  X(cudaSetDevice, cuerr, (int))                                           \
  X(cudaGetErrorString, const char *, (cuerr))                             \
  X(cudaHostAlloc, cuerr, (void **, size_t, unsigned))                     \
  X(cudaFreeHost, cuerr, (void *))                                         \
  X(cudaMalloc, cuerr, (void **, size_t))                                  \
  X(cudaFree, cuerr, (void *))                                             \
  X(cudaStreamCreateWithFlags, cuerr, (custream *, unsigned))              \
  X(cudaStreamDestroy, cuerr, (custream))                                  \
  X(cudaStreamSynchronize, cuerr, (custream))                              \
  X(cudaStreamWaitEvent, cuerr, (custream, cuevent, unsigned))             \
  X(cudaEventCreateWithFlags, cuerr, (cuevent *, unsigned))                \
  X(cudaEventDestroy, cuerr, (cuevent))                                    \
  X(cudaEventRecord, cuerr, (cuevent, custream))                           \
  X(cudaEventSynchronize, cuerr, (cuevent))                                \
  X(cudaMemcpyAsync, cuerr, (void *, const void *, size_t, int, custream)) \
  X(cudaMemset, cuerr, (void *, int, size_t))

/* The driver calls that load and launch the conversion kernel. */
#define CU_FNS(X)                                                                  \
  X(cuInit, cuerr, (unsigned))                                                     \
  X(cuGetErrorString, cuerr, (cuerr, const char **))                               \
  X(cuModuleLoadData, cuerr, (void **, const void *))                              \
  X(cuModuleGetFunction, cuerr, (void **, void *, const char *))                   \
  X(cuModuleUnload, cuerr, (void *))                                               \
  X(cuLaunchKernel, cuerr,                                                         \
    (void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
     custream, void **, void **))

typedef struct cudart {
#define X(name, ret, args) ret(*name) args;
  CUDA_FNS(X)
#undef X
} cudart;

typedef struct cudrv {
#define X(name, ret, args) ret(*name) args;
  CU_FNS(X)
#undef X
} cudrv;

extern const char stk__convert_ptx[]; /* convert_kernel_ptx.c, "" if not built */

static cudart rt;
static cudrv drv;
static int drv_status = -1; /* -1 unloaded, 0 ok, 1 failed (drv_msg) */
static char drv_msg[256];
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
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

/* The driver, for the kernel: $STOKER_CUDA_DRIVER, else libcuda.so.1. */
static void drv_load(void) {
  const char *env = getenv("STOKER_CUDA_DRIVER");
  const char *name = env && *env ? env : "libcuda.so.1";
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(drv_msg, sizeof(drv_msg), "CUDA driver %s not loadable", name);
    drv_status = 1;
    return;
  }
#define X(fn, ret, args)                                                      \
  drv.fn = (ret(*) args)dlsym(h, #fn);                                        \
  if (!drv.fn) {                                                              \
    snprintf(drv_msg, sizeof(drv_msg), "CUDA driver %s lacks %s", name, #fn); \
    drv_status = 1;                                                           \
    return;                                                                   \
  }
  CU_FNS(X)
#undef X
  cuerr e = drv.cuInit(0);
  if (e) {
    snprintf(drv_msg, sizeof(drv_msg), "cuInit: error %d", e);
    drv_status = 1;
    return;
  }
  drv_status = 0;
}

struct stk__cuda {
  int device;
  custream stream;
  char msg[256];
  /* the conversion kernel (kernel = 1 when in use) */
  int kernel;
  void *module, *fn;
  void *table; /* device: [4][256] output values */
  uint32_t esz;
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

/* The layout a kernel conversion reads: the 8-bit form that arrives. */
static const stk_batch_layout *kernel_in(const stk_client *c) {
  return c->job.wire_u8 ? &c->job.wire : &c->job.layout;
}

/* The kernel cannot be used (why): an error when it is needed
 * (STOKER_CUDA_CONVERT=gpu), else the CPU converts and stk__cuda_error
 * says why. */
static int kernel_fail(stk_client *c, int need, const char *why, char *err,
                       size_t errlen) {
  if (need)
    return stk__errf(err, errlen, STK_UNSUPPORTED,
                     "STOKER_CUDA_CONVERT=gpu, but the conversion kernel cannot be "
                     "used: %s",
                     why);
  snprintf(c->cuda->msg, sizeof(c->cuda->msg), "conversion on the CPU: %.200s", why);
  return STK_OK;
}

int stk__cuda_kernel_init(stk_client *c, char *err, size_t errlen) {
  struct stk__cuda *k = c->cuda;
  int convert = c->job.wire_u8 ? stk__wire_convert(&c->job.spec) : c->cfg.convert;
  if (convert == STK_CONVERT_NONE) return STK_OK; /* nothing to convert */
  const char *mode = getenv("STOKER_CUDA_CONVERT");
  if (mode && !strcmp(mode, "cpu")) return STK_OK;
  int need = mode && !strcmp(mode, "gpu");
  if (!stk__convert_ptx[0])
    return kernel_fail(c, need, "libstoker was built without the kernel's PTX (no clang)",
                       err, errlen);
  pthread_once(&drv_once, drv_load);
  if (drv_status) return kernel_fail(c, need, drv_msg, err, errlen);
  char why[200];
  const char *es = NULL;
  /* the runtime's primary context, current on this thread */
  cuerr e = rt.cudaSetDevice(k->device);
  if (!e) e = rt.cudaFree(NULL);
  if (e) {
    snprintf(why, sizeof(why), "cudaSetDevice: %s", rt.cudaGetErrorString(e));
    return kernel_fail(c, need, why, err, errlen);
  }
  e = drv.cuModuleLoadData(&k->module, stk__convert_ptx);
  if (!e) e = drv.cuModuleGetFunction(&k->fn, k->module, STK__GATHER_ENTRY);
  if (e) {
    drv.cuGetErrorString(e, &es);
    snprintf(why, sizeof(why), "loading its PTX: %s", es ? es : "unknown error");
    if (k->module) drv.cuModuleUnload(k->module);
    k->module = k->fn = NULL;
    return kernel_fail(c, need, why, err, errlen);
  }
  unsigned char table[4 * 256 * 4];
  k->esz = convert == STK_CONVERT_FLOAT32 ? 4 : 2;
  stk__convert_table(&c->job.spec, convert, table);
  e = rt.cudaMalloc(&k->table, sizeof(table));
  if (!e) e = rt.cudaMemcpyAsync(k->table, table, sizeof(table), MEMCPY_H2D, k->stream);
  if (!e) e = rt.cudaStreamSynchronize(k->stream); /* table is on this stack */
  if (e) {
    snprintf(why, sizeof(why), "its table: %s", rt.cudaGetErrorString(e));
    return kernel_fail(c, need, why, err, errlen);
  }
  k->kernel = 1;
  return STK_OK;
}

int stk__cuda_kernel(const stk_client *c) { return c->cuda && c->cuda->kernel; }

int stk__cuda_slot_init(stk_client *c, stk_batch *s, char *err, size_t errlen) {
  rt.cudaSetDevice(c->cuda->device);
  cuerr e = rt.cudaMalloc(&s->dev, (size_t)c->job.out.total_bytes);
  /* zero once: the padding between tensors, which the kernel path never
   * writes (a plain copy writes the payload's zeros) */
  if (!e) e = rt.cudaMemset(s->dev, 0, (size_t)c->job.out.total_bytes);
  if (!e && c->cuda->kernel)
    e = rt.cudaMalloc(&s->dev_in, (size_t)kernel_in(c)->total_bytes);
  if (!e) e = rt.cudaEventCreateWithFlags(&s->ev_ready, EVENT_DISABLE_TIMING);
  if (!e) e = rt.cudaEventCreateWithFlags(&s->ev_released, EVENT_DISABLE_TIMING);
  if (e) {
    return stk__errf(err, errlen, STK_NO_MEMORY, "CUDA slot allocation (%llu bytes): %s",
                     (unsigned long long)c->job.out.total_bytes,
                     rt.cudaGetErrorString(e));
  }
  return STK_OK;
}

void stk__cuda_slot_free(stk_client *c, stk_batch *s) {
  if (!c->cuda) return;
  rt.cudaSetDevice(c->cuda->device);
  if (s->ready_recorded) rt.cudaEventSynchronize(s->ev_ready);
  if (s->dev) rt.cudaFree(s->dev);
  if (s->dev_in) rt.cudaFree(s->dev_in);
  if (s->ev_ready) rt.cudaEventDestroy(s->ev_ready);
  if (s->ev_released) rt.cudaEventDestroy(s->ev_released);
  s->dev = s->dev_in = s->ev_ready = s->ev_released = NULL;
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

int stk__cuda_fill_convert(stk_client *c, stk_batch *s, const stk_batch_layout *in,
                           const unsigned char *src, const stk_batch_layout *out,
                           int out_nhwc) {
  struct stk__cuda *k = c->cuda;
  custream st = k->stream;
  const stk_job_spec *sp = &c->job.spec;
  int r = STK_OK;
  if (s->released_recorded)
    r = cerr(c, rt.cudaStreamWaitEvent(st, s->ev_released, 0), "cudaStreamWaitEvent");
  uint32_t nimg = stk__image_tensors(sp);
  for (uint32_t t = 0; !r && t < in->ntensors && t < out->ntensors; t++) {
    const stk_tensor_desc *ti = &in->tensors[t], *to = &out->tensors[t];
    if (t >= nimg) { /* label, mask, index: as they came */
      r = cerr(c,
               rt.cudaMemcpyAsync((unsigned char *)s->dev + to->offset, src + ti->offset,
                                  (size_t)ti->nbytes, MEMCPY_H2D, st),
               "cudaMemcpyAsync");
      continue;
    }
    unsigned char *din = (unsigned char *)s->dev_in + ti->offset;
    uint32_t vh, vw; /* the view's own size */
    stk__image_hw(ti, sp->layout, &vh, &vw);
    r = cerr(
        c, rt.cudaMemcpyAsync(din, src + ti->offset, (size_t)ti->nbytes, MEMCPY_H2D, st),
        "cudaMemcpyAsync");
    if (r) break;
    stk__gather_args a = {din,
                          (unsigned char *)s->dev + to->offset,
                          k->table,
                          (unsigned long long)vh * vw,
                          sp->batch_size,
                          sp->channels,
                          (sp->layout == STK_LAYOUT_NHWC ? STK__GATHER_IN_NHWC : 0u) |
                              (out_nhwc ? STK__GATHER_OUT_NHWC : 0u),
                          k->esz};
    uint64_t blocks = (a.hw + STK__GATHER_BLOCK - 1) / STK__GATHER_BLOCK;
    unsigned gx = blocks > 4096 ? 4096u : (unsigned)blocks;
    unsigned gy = a.batch > 65535 ? 65535u : a.batch;
    void *params[] = {&a};
    cuerr e = drv.cuLaunchKernel(k->fn, gx, gy, 1, STK__GATHER_BLOCK, 1, 1, 0, st, params,
                                 NULL);
    if (e) {
      const char *es = NULL;
      drv.cuGetErrorString(e, &es);
      snprintf(k->msg, sizeof(k->msg), "cuLaunchKernel: %s", es ? es : "unknown error");
      r = STK_INTERNAL;
    }
  }
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

void stk__cuda_sync(stk_client *c) {
  rt.cudaSetDevice(c->cuda->device);
  rt.cudaStreamSynchronize(c->cuda->stream);
}

void stk__cuda_close(stk_client *c) {
  if (!c->cuda) return;
  rt.cudaSetDevice(c->cuda->device);
  rt.cudaStreamSynchronize(c->cuda->stream);
  if (c->cuda->table) rt.cudaFree(c->cuda->table);
  if (c->cuda->module) drv.cuModuleUnload(c->cuda->module);
  rt.cudaStreamDestroy(c->cuda->stream);
  free(c->cuda);
  c->cuda = NULL;
}
