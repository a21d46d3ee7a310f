// Whole-buffer sum and sum of squares: fixed slices per block (fp32, warp
// shuffles), then the partials in double by one block. See reduce_launch.h.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce_launch.h"

namespace zeroshard::cuda {

namespace {

constexpr int kThreads = 512;

template <typename T, bool kSquare>
__global__ void SlicePartials(const T* __restrict__ x, int64_t n, float* __restrict__ partials) {
  __shared__ float scratch[kWarp];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kSumAllSlice;
  const int64_t end = begin + kSumAllSlice < n ? begin + kSumAllSlice : n;
  float acc = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float v = ToFloat(x[i]);
    acc += kSquare ? v * v : v;
  }
  acc = BlockSum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void SumPartials(const float* __restrict__ partials, int64_t count, double* out) {
  __shared__ double scratch[kWarp];
  // Each thread adds a contiguous run of partials in order, then the tree.
  const int64_t per = (count + kThreads - 1) / kThreads;
  const int64_t begin = threadIdx.x * per;
  double acc = 0.0;
  for (int64_t i = begin; i < begin + per && i < count; ++i) acc += partials[i];
  acc = BlockSumD(acc, scratch);
  if (threadIdx.x == 0) *out = acc;
}

}  // namespace

int LaunchSumAll(int dtype, const void* x, int64_t n, bool square, float* partials, double* out,
                 void* stream) {
  const int64_t blocks = SumAllPartials(n);
  if (blocks > 0x7fffffff) return InvalidValue();
  const int rc = DispatchFloat(dtype, [&]<typename T>() {
    const T* xp = static_cast<const T*>(x);
    if (square) {
      SlicePartials<T, true><<<static_cast<int>(blocks), kThreads, 0, AsStream(stream)>>>(xp, n, partials);
    } else {
      SlicePartials<T, false><<<static_cast<int>(blocks), kThreads, 0, AsStream(stream)>>>(xp, n, partials);
    }
    return Launched();
  });
  if (rc != 0) return rc;
  SumPartials<<<1, kThreads, 0, AsStream(stream)>>>(partials, blocks, out);
  return Launched();
}

}  // namespace zeroshard::cuda
