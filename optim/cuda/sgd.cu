// The fused SGD step: a grid-stride loop, every byte read and written once,
// optim/sgd_math.h per element.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/optim/cuda/sgd_launch.h"
#include "zeroshard/optim/sgd_math.h"

namespace zeroshard::optim::cuda {

namespace {

using ::zeroshard::cuda::AsStream;
using ::zeroshard::cuda::DispatchFloat;
using ::zeroshard::cuda::FromFloat;
using ::zeroshard::cuda::GridFor;
using ::zeroshard::cuda::Launched;
using ::zeroshard::cuda::ToFloat;

template <typename G, typename C, bool kMomentum, bool kCopy>
__global__ void SgdStepKernel(SgdScalars s, float* __restrict__ param, const G* __restrict__ grad,
                              float* __restrict__ buf, C* __restrict__ copy, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float p = param[i];
    const float g = ToFloat(grad[i]);
    if (kMomentum) {
      float b = buf[i];
      SgdMomentumUpdate(p, g, b, s);
      buf[i] = b;
    } else {
      SgdUpdate(p, g, s);
    }
    param[i] = p;
    if (kCopy) copy[i] = FromFloat<C>(p);
  }
}

}  // namespace

int LaunchSgdStep(const SgdScalars& scalars, float* param, const void* grad, int grad_dtype,
                  float* momentum_buffer, void* param_copy, int copy_dtype, int64_t n, void* stream) {
  if (n == 0) return 0;
  constexpr int kThreads = 256;
  const int grid = GridFor(n, kThreads);
  const bool momentum = momentum_buffer != nullptr, copy = param_copy != nullptr;
  return DispatchFloat(grad_dtype, [&]<typename G>() {
    return DispatchFloat(copy ? copy_dtype : 0, [&]<typename C>() {
      auto launch = [&]<bool kMomentum, bool kCopy>() {
        ::zeroshard::cuda::Launch(SgdStepKernel<G, C, kMomentum, kCopy>, grid, kThreads, 0, AsStream(stream),
                                  scalars, param, static_cast<const G*>(grad), momentum_buffer,
                                  static_cast<C*>(param_copy), n);
        return Launched();
      };
      if (momentum) {
        return copy ? launch.template operator()<true, true>() : launch.template operator()<true, false>();
      }
      return copy ? launch.template operator()<false, true>() : launch.template operator()<false, false>();
    });
  });
}

}  // namespace zeroshard::optim::cuda
