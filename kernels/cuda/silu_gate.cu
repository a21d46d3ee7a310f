// The SwiGLU gate on CUDA: grid-stride loops over contiguous operands, loads
// widened to f32, the per-element math of kernels/math/silu_gate_ops.h.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/silu_gate_launch.h"
#include "zeroshard/kernels/math/silu_gate_ops.h"

namespace zeroshard::cuda {

namespace {

constexpr int kThreads = 256;

template <typename T, typename TOut>
__global__ void ForwardKernel(const T* gate, const T* up, TOut* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = FromFloat<TOut>(SiluGateElement(ToFloat(gate[i]), ToFloat(up[i])));
  }
}

// Reads dy, gate and up at i before writing i: an output may be an input.
template <typename T, typename TOut>
__global__ void BackwardKernel(const T* dy, const T* gate, const T* up, TOut* dgate, TOut* dup,
                               int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float d = ToFloat(dy[i]), g = ToFloat(gate[i]), u = ToFloat(up[i]);
    if (dgate != nullptr) dgate[i] = FromFloat<TOut>(SiluGateGradGate(d, g, u));
    if (dup != nullptr) dup[i] = FromFloat<TOut>(SiluGateGradUp(d, g));
  }
}

}  // namespace

int LaunchSiluGateForward(int in_dtype, int out_dtype, const void* gate, const void* up, void* out,
                          int64_t n, void* stream) {
  if (n == 0) return 0;
  return DispatchFloatPair(in_dtype, out_dtype, [&]<typename T, typename TOut>() {
    Launch(ForwardKernel<T, TOut>, GridFor(n, kThreads), kThreads, 0, AsStream(stream),
           static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<TOut*>(out), n);
    return Launched();
  });
}

int LaunchSiluGateBackward(int in_dtype, int out_dtype, const void* dy, const void* gate,
                           const void* up, void* dgate, void* dup, int64_t n, void* stream) {
  if (n == 0 || (dgate == nullptr && dup == nullptr)) return 0;
  return DispatchFloatPair(in_dtype, out_dtype, [&]<typename T, typename TOut>() {
    Launch(BackwardKernel<T, TOut>, GridFor(n, kThreads), kThreads, 0, AsStream(stream),
           static_cast<const T*>(dy), static_cast<const T*>(gate), static_cast<const T*>(up),
           static_cast<TOut*>(dgate), static_cast<TOut*>(dup), n);
    return Launched();
  });
}

}  // namespace zeroshard::cuda
