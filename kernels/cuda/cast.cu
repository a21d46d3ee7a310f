// Casts between the float dtypes: a grid-stride loop, four elements per thread
// per step (one 128-bit load for f32 input when aligned).
#include "zeroshard/kernels/cuda/cast_launch.h"
#include "zeroshard/kernels/cuda/common.cuh"

namespace zeroshard::cuda {

namespace {

template <typename TIn, typename TOut>
__global__ void CastKernel(const TIn* __restrict__ x, TOut* __restrict__ y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t n4 = n / 4;
  if (std::is_same_v<TIn, float> && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    for (int64_t j = first; j < n4; j += stride) {
      const float4 v = reinterpret_cast<const float4*>(x)[j];
      y[4 * j + 0] = FromFloat<TOut>(v.x);
      y[4 * j + 1] = FromFloat<TOut>(v.y);
      y[4 * j + 2] = FromFloat<TOut>(v.z);
      y[4 * j + 3] = FromFloat<TOut>(v.w);
    }
  } else {
    for (int64_t j = first; j < n4; j += stride) {
#pragma unroll
      for (int k = 0; k < 4; ++k) y[4 * j + k] = FromFloat<TOut>(ToFloat(x[4 * j + k]));
    }
  }
  for (int64_t i = 4 * n4 + first; i < n; i += stride) y[i] = FromFloat<TOut>(ToFloat(x[i]));
}

template <typename T>
__global__ void FillKernel(T* __restrict__ y, int64_t n, T value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    y[i] = value;
  }
}

}  // namespace

int LaunchCast(int in_dtype, int out_dtype, const void* x, void* y, int64_t n, void* stream) {
  if (n == 0) return 0;
  return DispatchFloatPair(in_dtype, out_dtype, [&]<typename TIn, typename TOut>() {
    constexpr int kThreads = 256;
    Launch(CastKernel<TIn, TOut>, GridFor((n + 3) / 4, kThreads), kThreads, 0, AsStream(stream),
           static_cast<const TIn*>(x), static_cast<TOut*>(y), n);
    return Launched();
  });
}

int LaunchFill(int dtype, void* y, int64_t n, float value, void* stream) {
  if (n == 0) return 0;
  return DispatchFloat(dtype, [&]<typename T>() {
    constexpr int kThreads = 256;
    Launch(FillKernel<T>, GridFor(n, kThreads), kThreads, 0, AsStream(stream), static_cast<T*>(y),
           n, FromFloat<T>(value));
    return Launched();
  });
}

}  // namespace zeroshard::cuda
