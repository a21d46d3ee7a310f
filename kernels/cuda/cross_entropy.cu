// Fused cross-entropy: one block per row; the forward reads the row once (an
// online max/sum per thread, merged with shuffles), the backward writes
// (softmax - onehot) * dloss from the saved logsumexp. Rows are walked in
// 16-byte vectors (ForEachPack, common.cuh: 4 f32 or 8 bf16/f16 per access,
// the last cols % kN elements one by one) when the logits' (and dlogits')
// base and stride allow it, element by element otherwise.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/cross_entropy_launch.h"
#include "zeroshard/kernels/math/softmax_ops.h"

namespace zeroshard::cuda {

namespace {

// Threads per row: a warp for short rows, up to 1024 (8 elements each) for
// vocabulary-sized ones.
int CrossEntropyRowThreads(int64_t cols) { return RowThreads(cols, 1024, 8); }

template <typename T, typename I, int kN>
__global__ void ForwardRows(const T* x, int64_t xs, const I* targets, int64_t ignore_index,
                            float* losses, float* lse, int64_t cols) {
  __shared__ MaxSum scratch[kWarp];
  const int64_t r = blockIdx.x;
  const T* xr = x + r * xs;
  MaxSum s{-kInfF, 0.0f};
  ForEachPack<kN>(cols, [&](int64_t i, auto width) {
    constexpr int kW = decltype(width)::value;
    const Pack<T, kW> p = LoadPack<kW>(xr + i);
    float v[kW];
#pragma unroll
    for (int k = 0; k < kW; ++k) v[k] = ToFloat(p.v[k]);
    AccumulateMaxSum(s, v);
  });
  s = BlockMaxSum(s, scratch);
  if (threadIdx.x == 0) {
    const float log_s = LogF(s.sum);
    const int64_t t = static_cast<int64_t>(targets[r]);
    // lse - x[t] as log(s) - (x[t] - max), as the CPU kernel.
    losses[r] = t == ignore_index ? 0.0f : log_s - (ToFloat(xr[t]) - s.max);
    lse[r] = s.max + log_s;
  }
}

template <typename T, typename TOut, typename I, int kN>
__global__ void BackwardRows(const T* x, int64_t xs, const I* targets, int64_t ignore_index,
                             const float* lse, const float* dloss, int64_t gs, TOut* d,
                             int64_t ds, int64_t cols) {
  const int64_t r = blockIdx.x;
  const T* xr = x + r * xs;
  TOut* dr = d + r * ds;
  const int64_t t = static_cast<int64_t>(targets[r]);
  if (t == ignore_index) {
    ForEachPack<kN>(cols, [&](int64_t i, auto width) {
      constexpr int kW = decltype(width)::value;
      Pack<TOut, kW> q;
#pragma unroll
      for (int k = 0; k < kW; ++k) q.v[k] = FromFloat<TOut>(0.0f);
      StorePack<kW>(dr + i, q);
    });
    return;
  }
  const float s = lse[r], g = dloss[r * gs];
  // Each thread reads and writes only its own elements: dlogits may be logits.
  ForEachPack<kN>(cols, [&](int64_t i, auto width) {
    constexpr int kW = decltype(width)::value;
    const Pack<T, kW> p = LoadPack<kW>(xr + i);
    Pack<TOut, kW> q;
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      q.v[k] = FromFloat<TOut>(
          CrossEntropyGradElement(ToFloat(p.v[k]), s, i + k == t ? 1.0f : 0.0f, g));
    }
    StorePack<kW>(dr + i, q);
  });
}

}  // namespace

int LaunchCrossEntropyForward(int x_dtype, const void* logits, int64_t x_stride, int t_dtype,
                              const void* targets, int64_t ignore_index, float* losses, float* lse,
                              int64_t rows, int64_t cols, void* stream) {
  if (rows == 0) return 0;
  if (rows > 0x7fffffff || cols == 0) return InvalidValue();
  return DispatchFloat(x_dtype, [&]<typename T>() {
    return DispatchIndex(t_dtype, [&]<typename I>() {
      const bool vec = VectorRows(logits, x_stride, sizeof(T));
      auto launch = [&](auto kernel) {
        Launch(kernel, static_cast<int>(rows), CrossEntropyRowThreads(cols), 0, AsStream(stream),
               static_cast<const T*>(logits), x_stride, static_cast<const I*>(targets),
               ignore_index, losses, lse, cols);
      };
      if (vec) {
        launch(ForwardRows<T, I, VecElems<T>()>);
      } else {
        launch(ForwardRows<T, I, 1>);
      }
      return Launched();
    });
  });
}

int LaunchCrossEntropyBackward(int x_dtype, int out_dtype, const void* logits, int64_t x_stride,
                               int t_dtype, const void* targets, int64_t ignore_index,
                               const float* lse, const float* dloss, int64_t dloss_stride,
                               void* dlogits, int64_t out_stride, int64_t rows, int64_t cols,
                               void* stream) {
  if (rows == 0 || cols == 0) return 0;
  if (rows > 0x7fffffff) return InvalidValue();
  return DispatchFloatPair(x_dtype, out_dtype, [&]<typename T, typename TOut>() {
    return DispatchIndex(t_dtype, [&]<typename I>() {
      const bool vec = VectorRows(logits, x_stride, sizeof(T)) &&
                       VectorRows(dlogits, out_stride, sizeof(TOut));
      auto launch = [&](auto kernel) {
        Launch(kernel, static_cast<int>(rows), CrossEntropyRowThreads(cols), 0, AsStream(stream),
               static_cast<const T*>(logits), x_stride, static_cast<const I*>(targets),
               ignore_index, lse, dloss, dloss_stride, static_cast<TOut*>(dlogits), out_stride,
               cols);
      };
      if (vec) {
        launch(BackwardRows<T, TOut, I, VecElems<T, TOut>()>);
      } else {
        launch(BackwardRows<T, TOut, I, 1>);
      }
      return Launched();
    });
  });
}

}  // namespace zeroshard::cuda
