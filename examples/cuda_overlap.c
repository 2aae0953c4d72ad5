/* cuda_overlap.c - stoker-cuda-overlap: the GPU check for libstoker's CUDA
 * backend, run by scripts/gpu-check.sh (figures in docs/gpu.md).
 *
 * 1. Baseline: a plain pinned cudaMemcpy of one batch, timed with events
 *    -> H2D GB/s.
 * 2. Compute alone: K "training steps" on the caller's stream (cuBLAS
 *    SGEMM via dlopen; without cuBLAS a device-to-device copy loop).
 * 3. Streaming: the same K steps, each on a batch from stoker in CUDA slots
 *    (the library copies on its own stream; next() orders the caller's
 *    stream after the copy). If copies overlap compute, (3) takes about as
 *    long as (2); fully serial it takes (2) + K x copy time.
 * Also checks every batch's device bytes against its host payload.
 * 4. Conversion on the device: a uint8 job with cfg.convert (float32, then
 *    bfloat16) into CUDA slots, where the 8-bit images cross PCIe and the
 *    conversion kernel makes the floats, against the same job converted on
 *    the CPU (a CPU client): every checked batch must be equal to the byte.
 *    Prints whether the kernel loaded (stk_stats.device_convert) and the
 *    batch rates with the kernel and with STOKER_CUDA_CONVERT=cpu.
 *
 * Batches come from the in-process local source by default (a synthetic
 * job, no daemons), or from a running job with --coordinator.
 * Needs no CUDA headers: the runtime and cuBLAS are loaded with dlopen.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stoker/client.h"

typedef int cuerr;
static struct {
  cuerr (*SetDevice)(int);
  cuerr (*StreamCreate)(void **);
  cuerr (*Malloc)(void **, size_t);
  cuerr (*HostAlloc)(void **, size_t, unsigned);
  cuerr (*Memcpy)(void *, const void *, size_t, int);
  cuerr (*MemcpyAsync)(void *, const void *, size_t, int, void *);
  cuerr (*StreamSynchronize)(void *);
  cuerr (*EventCreate)(void **);
  cuerr (*EventRecord)(void *, void *);
  cuerr (*EventSynchronize)(void *);
  cuerr (*EventElapsedTime)(float *, void *, void *);
  const char *(*GetErrorString)(cuerr);
  cuerr (*Free)(void *);
  cuerr (*FreeHost)(void *);
  cuerr (*EventDestroy)(void *);
  cuerr (*StreamDestroy)(void *);
} cu;
static struct {
  int (*Create)(void **);
  int (*SetStream)(void *, void *);
  int (*Sgemm)(void *, int, int, int, int, int, const float *, const float *, int,
               const float *, int, const float *, float *, int);
} blas;

#define CK(x)                                                                            \
  do {                                                                                   \
    cuerr e_ = (x);                                                                      \
    if (e_) {                                                                            \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cu.GetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int load(void) {
  /* $STOKER_CUDART first, as libstoker does (test_cuda_overlap_emulated) */
  const char *names[] = {getenv("STOKER_CUDART"), "libcudart.so", "libcudart.so.13",
                         "libcudart.so.12", "libcudart.so.11.0"};
  void *h = NULL;
  for (int i = 0; i < 5 && !h; i++)
    if (names[i] && *names[i]) h = dlopen(names[i], RTLD_NOW);
  if (!h) return -1;
#define SYM(f, n) *(void **)&cu.f = dlsym(h, n)
  SYM(SetDevice, "cudaSetDevice");
  SYM(StreamCreate, "cudaStreamCreate");
  SYM(Malloc, "cudaMalloc");
  SYM(HostAlloc, "cudaHostAlloc");
  SYM(Memcpy, "cudaMemcpy");
  SYM(MemcpyAsync, "cudaMemcpyAsync");
  SYM(StreamSynchronize, "cudaStreamSynchronize");
  SYM(EventCreate, "cudaEventCreate");
  SYM(EventRecord, "cudaEventRecord");
  SYM(EventSynchronize, "cudaEventSynchronize");
  SYM(EventElapsedTime, "cudaEventElapsedTime");
  SYM(GetErrorString, "cudaGetErrorString");
  SYM(Free, "cudaFree");
  SYM(FreeHost, "cudaFreeHost");
  SYM(EventDestroy, "cudaEventDestroy");
  SYM(StreamDestroy, "cudaStreamDestroy");
  const char *bn[] = {"libcublas.so", "libcublas.so.13", "libcublas.so.12",
                      "libcublas.so.11"};
  void *b = NULL;
  for (int i = 0; i < 4 && !b; i++) b = dlopen(bn[i], RTLD_NOW);
  if (b) {
    *(void **)&blas.Create = dlsym(b, "cublasCreate_v2");
    *(void **)&blas.SetStream = dlsym(b, "cublasSetStream_v2");
    *(void **)&blas.Sgemm = dlsym(b, "cublasSgemm_v2");
  }
  return 0;
}

/* One stand-in training step on `stream`. */
static void *handle;
static float *A, *B, *C;
static int N = 2048;
static void step(void *stream, void *scratch, size_t scratch_len, int reps) {
  if (blas.Sgemm) {
    float one = 1.f, zero = 0.f;
    blas.SetStream(handle, stream);
    for (int r = 0; r < reps; r++)
      blas.Sgemm(handle, 0, 0, N, N, N, &one, A, N, B, N, &zero, C, N);
  } else {
    for (int r = 0; r < reps * 8; r++)
      CK(cu.MemcpyAsync(scratch, (char *)scratch + scratch_len / 2, scratch_len / 2, 3,
                        stream));
  }
}

/* One local client of the 8-bit job, converted to `convert`: on the CPU
 * backend (dev 0), or CUDA slots with conversion on the device (dev 1) or
 * on the CPU before the copy (dev 2). */
static stk_client *open_convert(int dev, int convert, void *stream) {
  if (dev == 2) setenv("STOKER_CUDA_CONVERT", "cpu", 1);
  else unsetenv("STOKER_CUDA_CONVERT");
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.world_size = 1;
  cfg.device = dev ? STK_DEVICE_CUDA : STK_DEVICE_CPU;
  cfg.cuda_stream = stream;
  cfg.convert = convert;
  cfg.slots = 3;
  cfg.prefetch = 8;
  const char *job =
      "source = synthetic\nnum_samples = 100000\nheight = 224\nwidth = 224\n"
      "batch_size = 32\nworld_size = 1\nepochs = 1\ndtype = uint8\n";
  stk_client *c = NULL;
  char err[512];
  int st = stk_client_open_local(&cfg, job, NULL, &c, err, sizeof(err));
  unsetenv("STOKER_CUDA_CONVERT");
  if (st) fprintf(stderr, "open (convert): %s: %s\n", stk_strerror(st), err);
  return st ? NULL : c;
}

/* Phase 4: returns the number of mismatching batches (-1: could not run). */
static int check_convert(void *stream, int steps) {
  int bad = 0;
  for (int convert = STK_CONVERT_FLOAT32; convert <= STK_CONVERT_BFLOAT16; convert++) {
    const char *name = convert == STK_CONVERT_FLOAT32 ? "float32" : "bfloat16";
    stk_client *cpu = open_convert(0, convert, NULL);
    stk_client *gpu = open_convert(1, convert, stream);
    if (!cpu || !gpu) {
      stk_client_close(cpu);
      stk_client_close(gpu);
      return -1;
    }
    stk_stats s;
    stk_client_stats(gpu, &s);
    printf("convert %s: conversion kernel %s\n", name,
           s.device_convert ? "loaded (8-bit images cross PCIe)"
                            : "NOT loaded: converting on the CPU (run with "
                              "STOKER_CUDA_CONVERT=gpu to see why)");
    size_t len = 0;
    unsigned char *host = NULL;
    int n = 0, wrong = 0;
    for (int i = 0; i < steps; i++) {
      stk_batch *a = NULL, *b = NULL;
      if (stk_client_next(cpu, &a) || stk_client_next(gpu, &b)) break;
      stk_tensor ta, tb;
      stk_batch_tensor(a, STK_TENSOR_IMAGE, &ta);
      stk_batch_tensor(b, STK_TENSOR_IMAGE, &tb);
      if (!host) host = malloc(len = (size_t)tb.nbytes);
      if (i % 10 == 0) { /* ordered after the slot's copy and kernel on stream */
        CK(cu.MemcpyAsync(host, tb.data, len, 2, stream));
        CK(cu.StreamSynchronize(stream));
        if (ta.nbytes != tb.nbytes || memcmp(host, ta.data, len)) wrong++;
        n++;
      }
      stk_batch_release(a);
      stk_batch_release(b);
    }
    printf("convert %s: %d batches checked against the CPU converter: %s\n", name, n,
           wrong ? "MISMATCH" : "identical");
    bad += wrong + (n == 0);
    stk_client_close(cpu);
    stk_client_close(gpu);
    free(host);
    /* rates: the kernel against CPU conversion before the copy */
    for (int dev = 1; dev <= 2; dev++) {
      stk_client *c = open_convert(dev, convert, stream);
      if (!c) return -1;
      double t0 = now_s();
      int got = 0;
      for (; got < steps; got++) {
        stk_batch *b = NULL;
        if (stk_client_next(c, &b)) break;
        stk_batch_release(b);
      }
      CK(cu.StreamSynchronize(stream));
      double dt = now_s() - t0;
      printf("convert %s, %s: %d batches in %.2f s, %.1f batches/s\n", name,
             dev == 1 ? "on the device" : "on the CPU (STOKER_CUDA_CONVERT=cpu)", got, dt,
             got / dt);
      stk_client_close(c);
    }
  }
  return bad;
}

int main(int argc, char **argv) {
  const char *coord = NULL;
  int steps = 200, reps = 4;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--coordinator") && i + 1 < argc) coord = argv[++i];
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else {
      printf(
          "usage: stoker-cuda-overlap [--coordinator HOST:PORT] [--steps N] [--reps R]\n"
          "  R = matmuls (2048^3) per stand-in training step\n");
      return strcmp(argv[i], "--help") ? 2 : 0;
    }
  }
  if (load()) {
    printf("SKIP: no CUDA runtime\n");
    return 77;
  }
  if (cu.SetDevice(0)) {
    printf("SKIP: no CUDA device\n");
    return 77;
  }
  void *stream, *e0, *e1;
  CK(cu.StreamCreate(&stream));
  CK(cu.EventCreate(&e0));
  CK(cu.EventCreate(&e1));
  size_t mat = (size_t)N * N * sizeof(float);
  CK(cu.Malloc((void **)&A, mat));
  CK(cu.Malloc((void **)&B, mat));
  CK(cu.Malloc((void **)&C, mat));
  if (blas.Create && blas.Create(&handle) != 0) blas.Sgemm = NULL;
  printf("step stand-in: %s\n",
         blas.Sgemm ? "cuBLAS SGEMM 2048^3" : "device memcpy loop");

  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.world_size = 1;
  cfg.device = STK_DEVICE_CUDA;
  cfg.cuda_stream = stream;
  cfg.slots = 3;
  cfg.prefetch = 8;
  stk_client *c = NULL;
  char err[512];
  int st;
  if (coord) {
    cfg.coordinator = coord;
    st = stk_client_open(&cfg, &c, err, sizeof(err));
  } else {
    const char *job =
        "source = synthetic\nnum_samples = 100000\nheight = 224\n"
        "width = 224\nbatch_size = 32\nworld_size = 1\nepochs = 1\n";
    st = stk_client_open_local(&cfg, job, NULL, &c, err, sizeof(err));
  }
  if (st) {
    fprintf(stderr, "open: %s: %s\n", stk_strerror(st), err);
    return 1;
  }
  size_t len = (size_t)stk_client_payload_bytes(c);
  void *pinned, *dev, *scratch;
  CK(cu.HostAlloc(&pinned, len, 0));
  CK(cu.Malloc(&dev, len));
  CK(cu.Malloc(&scratch, 64 << 20));
  memset(pinned, 1, len);

  /* 1. baseline pinned H2D */
  CK(cu.Memcpy(dev, pinned, len, 1));
  CK(cu.EventRecord(e0, stream));
  for (int i = 0; i < 20; i++) CK(cu.MemcpyAsync(dev, pinned, len, 1, stream));
  CK(cu.EventRecord(e1, stream));
  CK(cu.EventSynchronize(e1));
  float ms;
  CK(cu.EventElapsedTime(&ms, e0, e1));
  double copy_ms = ms / 20;
  printf("baseline: pinned cudaMemcpy of %zu bytes: %.3f ms, %.2f GB/s\n", len, copy_ms,
         len / (copy_ms / 1e3) / 1e9);

  /* 2. compute alone */
  step(stream, scratch, 64 << 20, reps);
  CK(cu.StreamSynchronize(stream));
  CK(cu.EventRecord(e0, stream));
  for (int i = 0; i < steps; i++) step(stream, scratch, 64 << 20, reps);
  CK(cu.EventRecord(e1, stream));
  CK(cu.EventSynchronize(e1));
  CK(cu.EventElapsedTime(&ms, e0, e1));
  double compute_ms = ms;
  printf("compute alone: %d steps in %.1f ms (%.3f ms/step)\n", steps, compute_ms,
         compute_ms / steps);

  /* 3. streaming batches into CUDA slots while computing */
  unsigned char *check = malloc(len);
  int bad = 0, got = 0;
  double t0 = now_s();
  CK(cu.EventRecord(e0, stream));
  for (int i = 0; i < steps; i++) {
    stk_batch *b = NULL;
    st = stk_client_next(c, &b);
    if (st) {
      fprintf(stderr, "next: %s: %s\n", stk_strerror(st), stk_client_error(c));
      break;
    }
    stk_tensor t;
    stk_batch_tensor(b, STK_TENSOR_IMAGE, &t);
    step(stream, scratch, 64 << 20, reps);
    if (i % 50 == 0) { /* device bytes == host payload (ordered on stream) */
      CK(cu.MemcpyAsync(check, t.data, (size_t)t.nbytes, 2, stream));
      CK(cu.StreamSynchronize(stream));
      size_t pl;
      const unsigned char *p = stk_batch_payload(b, &pl);
      if (memcmp(check, p, (size_t)t.nbytes)) bad++;
    }
    stk_batch_release(b);
    got++;
  }
  CK(cu.EventRecord(e1, stream));
  CK(cu.EventSynchronize(e1));
  CK(cu.EventElapsedTime(&ms, e0, e1));
  double wall = now_s() - t0;
  stk_stats s;
  stk_client_stats(c, &s);
  double serial = compute_ms + got * copy_ms;
  double overlap = got ? (serial - ms) / (got * copy_ms) : 0;
  printf(
      "streamed: %d steps in %.1f ms GPU (%.1f ms wall): %.2f GB/s of batches, "
      "stall %.1f%%\n",
      got, ms, wall * 1e3, got * (double)len / (wall) / 1e9, 100 * s.stall_fraction);
  printf(
      "overlap: serial would be %.1f ms; hidden copy fraction %.2f (1 = fully "
      "overlapped, 0 = serial)\n",
      serial, overlap);
  printf("device bytes checked: %s\n", bad ? "MISMATCH" : "ok");
  stk_client_close(c);
  free(check);
  /* 4. conversion on the device against the CPU converter */
  int conv_bad = check_convert(stream, steps < 100 ? steps : 100);
  cu.FreeHost(pinned);
  cu.Free(dev), cu.Free(scratch), cu.Free(A), cu.Free(B), cu.Free(C);
  cu.EventDestroy(e0), cu.EventDestroy(e1);
  cu.StreamDestroy(stream);
  return bad || got != steps || conv_bad ? 1 : 0;
}
