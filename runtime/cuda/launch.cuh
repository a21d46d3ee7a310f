// Kernel launches of the .cu files, spelled once so the same source builds
// under nvcc and under the host compiler's simulator (tools/cuda/sim/cuda_sim.h).
//
//   Launch(SoftmaxRows<T, TOut, true>, rows, threads, 0, stream, x, x_stride, out, ...);
//   return Launched();   // cudaGetLastError(), as after kernel<<<...>>>(...)
//
// Dynamic shared memory is declared with
//   ZS_DYNAMIC_SHARED(float, smem);   // float smem[] of the launch's bytes
#ifndef ZEROSHARD_RUNTIME_CUDA_LAUNCH_CUH_
#define ZEROSHARD_RUNTIME_CUDA_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#if defined(ZEROSHARD_CUDA_SIM)
#define ZS_DYNAMIC_SHARED(type, name) \
  type* name = static_cast<type*>(::zs_cuda_sim::DynamicShared())
#else
#define ZS_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

namespace zeroshard::cuda {

// kernel<<<grid, block, shared_bytes, stream>>>(args...).
template <typename... Params, typename... Args>
void Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
            cudaStream_t stream, Args&&... args) {
#if defined(ZEROSHARD_CUDA_SIM)
  (void)stream;  // the simulator runs the launch to completion here
  ::zs_cuda_sim::Launch(kernel, grid, block, shared_bytes, std::forward<Args>(args)...);
#else
  // clang-format off
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
  // clang-format on
#endif
}

}  // namespace zeroshard::cuda

#endif  // ZEROSHARD_RUNTIME_CUDA_LAUNCH_CUH_
