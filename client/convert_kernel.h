/* convert_kernel.h - the on-device image conversion: its argument block and
 * the work of one thread, shared by convert_kernel.cu (compiled to PTX by
 * clang's NVPTX back end, see client/CMakeLists.txt) and by host code that
 * runs the same body over a launch grid (tests/unit/client/fake_cudart.c),
 * so the emulated test checks the kernel's own indexing.
 *
 * The kernel is a gather: out = table[c][in], where table holds, per
 * channel, the 256 output values (float32 or bfloat16 bits) that
 * stk__convert_batch makes on the CPU from the same byte. No arithmetic on
 * the device, so its output equals the CPU rebuild to the bit.
 *
 * One thread per pixel of one image; it writes that pixel's channels.
 * blockIdx.y walks the images, blockIdx.x x blockDim.x + threadIdx.x the
 * pixels, both with a grid stride, so any grid covers any batch. Plain C
 * and CUDA: fixed-size fields only, the same layout on x86-64 and nvptx64.
 */
#ifndef STK_CONVERT_KERNEL_H
#define STK_CONVERT_KERNEL_H

#ifdef __CUDA__
#define STK__KFN __attribute__((device)) static inline
#else
#define STK__KFN static inline
#endif

/* The kernel's only parameter, passed by value (48 bytes). */
typedef struct stk__gather_args {
  const unsigned char *in; /* one uint8 image tensor: B images of C x HW */
  void *out;               /* its converted tensor, esz bytes per value */
  const void *table;       /* [4][256] output values, esz bytes each */
  unsigned long long hw;   /* H x W */
  unsigned int batch;      /* B */
  unsigned int channels;   /* C, 1..4 */
  unsigned int flags;      /* STK__GATHER_IN_NHWC | STK__GATHER_OUT_NHWC */
  unsigned int esz;        /* 4 (float32) or 2 (bfloat16) */
} stk__gather_args;

enum { STK__GATHER_IN_NHWC = 1, STK__GATHER_OUT_NHWC = 2 };

/* The kernel's entry point in the PTX, and its block size. */
#define STK__GATHER_ENTRY "stk_u8_gather"
#define STK__GATHER_BLOCK 256u

/* The work of thread tx of block (bx, by) in a grid of gx x gy blocks of
 * bdx threads. */
STK__KFN void stk__gather_thread(stk__gather_args a, unsigned int bx, unsigned int by,
                                 unsigned int gx, unsigned int gy, unsigned int bdx,
                                 unsigned int tx) {
  unsigned long long C = a.channels;
  for (unsigned long long b = by; b < a.batch; b += gy) {
    unsigned long long base = b * C * a.hw;
    for (unsigned long long p = (unsigned long long)bx * bdx + tx; p < a.hw;
         p += (unsigned long long)gx * bdx) {
      for (unsigned long long c = 0; c < C; c++) {
        unsigned long long ii =
            base + ((a.flags & STK__GATHER_IN_NHWC) ? p * C + c : c * a.hw + p);
        unsigned long long oi =
            base + ((a.flags & STK__GATHER_OUT_NHWC) ? p * C + c : c * a.hw + p);
        unsigned int v = a.in[ii];
        if (a.esz == 4) ((float *)a.out)[oi] = ((const float *)a.table)[c * 256 + v];
        else
          ((unsigned short *)a.out)[oi] = ((const unsigned short *)a.table)[c * 256 + v];
      }
    }
  }
}

#endif
