// Softmax and log-softmax over rows, forward and backward: one block per row,
// an online max/sum per thread merged across the block with shuffles
// (MergeMaxSum of kernels/math/softmax_ops.h), then one pass writing the row.
// Rows are walked in 16-byte vectors (ForEachPack, common.cuh: 4 f32 or 8
// bf16/f16 per access, the last cols % kN elements one by one) when every row
// operand's base and stride allow it, element by element otherwise.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/softmax_launch.h"
#include "zeroshard/kernels/math/softmax_ops.h"

namespace zeroshard::cuda {

namespace {

// Threads per row: a warp for short rows, up to 512 (4 elements each) for long ones.
int SoftmaxRowThreads(int64_t cols) { return RowThreads(cols, 512, 4); }

template <typename T, typename TOut, bool kLog, int kN>
__global__ void SoftmaxRows(const T* x, int64_t xs, TOut* out, int64_t os, int64_t cols) {
  __shared__ MaxSum scratch[kWarp];
  const T* xr = x + blockIdx.x * xs;
  TOut* o = out + blockIdx.x * os;
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
  const float log_s = kLog ? LogF(s.sum) : 0.0f;
  const float inv = kLog ? 0.0f : 1.0f / s.sum;
  ForEachPack<kN>(cols, [&](int64_t i, auto width) {
    constexpr int kW = decltype(width)::value;
    const Pack<T, kW> p = LoadPack<kW>(xr + i);
    Pack<TOut, kW> q;
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      const float v = ToFloat(p.v[k]);
      q.v[k] = FromFloat<TOut>(kLog ? LogSoftmaxElement(v, s.max, log_s)
                                    : SoftmaxElement(v, s.max, inv));
    }
    StorePack<kW>(o + i, q);
  });
}

template <typename T, typename TOut, bool kLog, int kN>
__global__ void SoftmaxBackwardRows(const T* y, int64_t ys, const T* dy, int64_t ds, TOut* dx,
                                    int64_t os, int64_t cols) {
  __shared__ float scratch[kWarp];
  const T* yr = y + blockIdx.x * ys;
  const T* dr = dy + blockIdx.x * ds;
  TOut* o = dx + blockIdx.x * os;
  float acc = 0.0f;
  ForEachPack<kN>(cols, [&](int64_t i, auto width) {
    constexpr int kW = decltype(width)::value;
    const Pack<T, kW> d = LoadPack<kW>(dr + i);
    if constexpr (kLog) {
#pragma unroll
      for (int k = 0; k < kW; ++k) acc += ToFloat(d.v[k]);
    } else {
      const Pack<T, kW> p = LoadPack<kW>(yr + i);
#pragma unroll
      for (int k = 0; k < kW; ++k) acc += ToFloat(d.v[k]) * ToFloat(p.v[k]);
    }
  });
  const float total = BlockSum(acc, scratch);
  // Each thread rewrites only the elements it read: dx may be y or dy.
  ForEachPack<kN>(cols, [&](int64_t i, auto width) {
    constexpr int kW = decltype(width)::value;
    const Pack<T, kW> p = LoadPack<kW>(yr + i), d = LoadPack<kW>(dr + i);
    Pack<TOut, kW> q;
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      const float yv = ToFloat(p.v[k]), dv = ToFloat(d.v[k]);
      q.v[k] = FromFloat<TOut>(kLog ? LogSoftmaxGradElement(yv, dv, total)
                                    : SoftmaxGradElement(yv, dv, total));
    }
    StorePack<kW>(o + i, q);
  });
}

}  // namespace

int LaunchSoftmax(bool log, int x_dtype, int out_dtype, const void* x, int64_t x_stride, void* out,
                  int64_t out_stride, int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return 0;
  if (rows > 0x7fffffff) return InvalidValue();
  const int threads = SoftmaxRowThreads(cols);
  return DispatchFloatPair(x_dtype, out_dtype, [&]<typename T, typename TOut>() {
    const T* xp = static_cast<const T*>(x);
    TOut* op = static_cast<TOut*>(out);
    const bool vec =
        VectorRows(x, x_stride, sizeof(T)) && VectorRows(out, out_stride, sizeof(TOut));
    auto launch = [&](auto kernel) {
      Launch(kernel, static_cast<int>(rows), threads, 0, AsStream(stream), xp, x_stride, op,
             out_stride, cols);
    };
    constexpr int kV = VecElems<T, TOut>();
    if (log) {
      vec ? launch(SoftmaxRows<T, TOut, true, kV>) : launch(SoftmaxRows<T, TOut, true, 1>);
    } else {
      vec ? launch(SoftmaxRows<T, TOut, false, kV>) : launch(SoftmaxRows<T, TOut, false, 1>);
    }
    return Launched();
  });
}

int LaunchSoftmaxBackward(bool log, int in_dtype, int dx_dtype, const void* y, int64_t y_stride,
                          const void* dy, int64_t dy_stride, void* dx, int64_t dx_stride,
                          int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return 0;
  if (rows > 0x7fffffff) return InvalidValue();
  const int threads = SoftmaxRowThreads(cols);
  return DispatchFloatPair(in_dtype, dx_dtype, [&]<typename T, typename TOut>() {
    const T* yp = static_cast<const T*>(y);
    const T* dp = static_cast<const T*>(dy);
    TOut* op = static_cast<TOut*>(dx);
    const bool vec = VectorRows(y, y_stride, sizeof(T)) && VectorRows(dy, dy_stride, sizeof(T)) &&
                     VectorRows(dx, dx_stride, sizeof(TOut));
    auto launch = [&](auto kernel) {
      Launch(kernel, static_cast<int>(rows), threads, 0, AsStream(stream), yp, y_stride, dp,
             dy_stride, op, dx_stride, cols);
    };
    constexpr int kV = VecElems<T, TOut>();
    if (log) {
      vec ? launch(SoftmaxBackwardRows<T, TOut, true, kV>)
          : launch(SoftmaxBackwardRows<T, TOut, true, 1>);
    } else {
      vec ? launch(SoftmaxBackwardRows<T, TOut, false, kV>)
          : launch(SoftmaxBackwardRows<T, TOut, false, 1>);
    }
    return Launched();
  });
}

}  // namespace zeroshard::cuda
