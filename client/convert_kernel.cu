/* convert_kernel.cu - the CUDA backend's conversion kernel (body in
 * convert_kernel.h). Compiled at build time by clang's NVPTX back end to
 * PTX for sm_52 (PTX ISA 4.1, which every driver since CUDA 7 can JIT for
 * its GPU): no CUDA toolkit, headers or nvcc are needed, and the PTX is
 * embedded in libstoker as a string that backend_cuda.c hands to the
 * driver (cuModuleLoadData). See client/CMakeLists.txt and docs/gpu.md. */
#include <__clang_cuda_builtin_vars.h>

#include "convert_kernel.h"

extern "C" __attribute__((global)) void stk_u8_gather(stk__gather_args a) {
  stk__gather_thread(a, blockIdx.x, blockIdx.y, gridDim.x, gridDim.y, blockDim.x,
                     threadIdx.x);
}
