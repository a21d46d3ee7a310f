// The fused Adam/AdamW step: a grid-stride loop, every byte read and written
// once, optim/adamw_math.h per element.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/optim/adamw_math.h"
#include "zeroshard/optim/cuda/adamw_launch.h"

namespace zeroshard::optim::cuda {

namespace {

using ::zeroshard::cuda::AsStream;
using ::zeroshard::cuda::DispatchFloat;
using ::zeroshard::cuda::FromFloat;
using ::zeroshard::cuda::GridFor;
using ::zeroshard::cuda::Launched;
using ::zeroshard::cuda::ToFloat;

template <typename G, typename C, bool kDecoupled, bool kCopy>
__global__ void AdamStepKernel(AdamScalars s, float* __restrict__ param, const G* __restrict__ grad,
                               float* __restrict__ m, float* __restrict__ v, C* __restrict__ copy,
                               int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float p = param[i], mi = m[i], vi = v[i];
    const float g = ToFloat(grad[i]);
    if (kDecoupled) {
      AdamWUpdate(p, g, mi, vi, s);
    } else {
      AdamUpdate(p, g, mi, vi, s);
    }
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (kCopy) copy[i] = FromFloat<C>(p);
  }
}

}  // namespace

int LaunchAdamStep(bool decoupled, const AdamScalars& scalars, float* param, const void* grad,
                   int grad_dtype, float* exp_avg, float* exp_avg_sq, void* param_copy,
                   int copy_dtype, int64_t n, void* stream) {
  if (n == 0) return 0;
  constexpr int kThreads = 256;
  const int grid = GridFor(n, kThreads);
  const bool copy = param_copy != nullptr;
  return DispatchFloat(grad_dtype, [&]<typename G>() {
    return DispatchFloat(copy ? copy_dtype : 0, [&]<typename C>() {
      auto launch = [&]<bool kDecoupled, bool kCopy>() {
        ::zeroshard::cuda::Launch(AdamStepKernel<G, C, kDecoupled, kCopy>, grid, kThreads, 0,
                                  AsStream(stream), scalars, param, static_cast<const G*>(grad),
                                  exp_avg, exp_avg_sq, static_cast<C*>(param_copy), n);
        return Launched();
      };
      if (decoupled) {
        return copy ? launch.template operator()<true, true>() : launch.template operator()<true, false>();
      }
      return copy ? launch.template operator()<false, true>() : launch.template operator()<false, false>();
    });
  });
}

}  // namespace zeroshard::optim::cuda
