// Softmax and log-softmax over rows, forward and backward: one block per row,
// an online max/sum per thread merged across the block with shuffles
// (MergeMaxSum of kernels/math/softmax_ops.h), then one pass writing the row.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/softmax_launch.h"
#include "zeroshard/kernels/math/softmax_ops.h"

namespace zeroshard::cuda {

namespace {

// Threads per row: a warp for short rows, up to 512 (4 elements each) for long ones.
int SoftmaxRowThreads(int64_t cols) { return RowThreads(cols, 512, 4); }

template <typename T, typename TOut, bool kLog>
__global__ void SoftmaxRows(const T* x, int64_t xs, TOut* out, int64_t os, int64_t cols) {
  __shared__ MaxSum scratch[kWarp];
  const T* xr = x + blockIdx.x * xs;
  TOut* o = out + blockIdx.x * os;
  MaxSum s{-kInfF, 0.0f};
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) AccumulateMaxSum(s, ToFloat(xr[i]));
  s = BlockMaxSum(s, scratch);
  if (kLog) {
    const float log_s = LogF(s.sum);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      o[i] = FromFloat<TOut>(LogSoftmaxElement(ToFloat(xr[i]), s.max, log_s));
    }
  } else {
    const float inv = 1.0f / s.sum;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      o[i] = FromFloat<TOut>(SoftmaxElement(ToFloat(xr[i]), s.max, inv));
    }
  }
}

template <typename T, typename TOut, bool kLog>
__global__ void SoftmaxBackwardRows(const T* y, int64_t ys, const T* dy, int64_t ds, TOut* dx,
                                    int64_t os, int64_t cols) {
  __shared__ float scratch[kWarp];
  const T* yr = y + blockIdx.x * ys;
  const T* dr = dy + blockIdx.x * ds;
  TOut* o = dx + blockIdx.x * os;
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    acc += kLog ? ToFloat(dr[i]) : ToFloat(dr[i]) * ToFloat(yr[i]);
  }
  const float total = BlockSum(acc, scratch);
  // Each thread rewrites only the elements it read: dx may be y or dy.
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float yv = ToFloat(yr[i]), dv = ToFloat(dr[i]);
    o[i] = FromFloat<TOut>(kLog ? LogSoftmaxGradElement(yv, dv, total)
                                : SoftmaxGradElement(yv, dv, total));
  }
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
    if (log) {
      Launch(SoftmaxRows<T, TOut, true>, static_cast<int>(rows), threads, 0, AsStream(stream), xp,
             x_stride, op, out_stride, cols);
    } else {
      Launch(SoftmaxRows<T, TOut, false>, static_cast<int>(rows), threads, 0, AsStream(stream), xp,
             x_stride, op, out_stride, cols);
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
    if (log) {
      Launch(SoftmaxBackwardRows<T, TOut, true>, static_cast<int>(rows), threads, 0,
             AsStream(stream), yp, y_stride, dp, dy_stride, op, dx_stride, cols);
    } else {
      Launch(SoftmaxBackwardRows<T, TOut, false>, static_cast<int>(rows), threads, 0,
             AsStream(stream), yp, y_stride, dp, dy_stride, op, dx_stride, cols);
    }
    return Launched();
  });
}

}  // namespace zeroshard::cuda
