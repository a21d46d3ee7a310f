// RMSNorm forward and backward over rows: one block per row (forward) or per
// block of rows (backward, with the partial weight gradients), fp32 sums with
// shuffles, the per-element math of kernels/math/rmsnorm_ops.h.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/rmsnorm_launch.h"
#include "zeroshard/kernels/math/rmsnorm_ops.h"

namespace zeroshard::cuda {

namespace {

// Threads per row: a warp for short rows, up to 512 (4 elements each) for long ones.
int RmsNormRowThreads(int64_t cols) { return RowThreads(cols, 512, 4); }

template <typename T, typename TOut>
__global__ void ForwardRows(const T* x, int64_t xs, F32Param w, float eps, TOut* out, int64_t os,
                            float* rstd, int64_t cols) {
  __shared__ float scratch[kWarp];
  const T* xr = x + blockIdx.x * xs;
  TOut* o = out + blockIdx.x * os;
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = ToFloat(xr[i]);
    acc += v * v;
  }
  const float rs = RmsNormRstd(BlockSum(acc, scratch) * (1.0f / static_cast<float>(cols)), eps);
  // Each thread rewrites only the elements it read: out may be x.
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    o[i] = FromFloat<TOut>(RmsNormElement(ToFloat(xr[i]), rs, ParamAt(w, i)));
  }
  if (threadIdx.x == 0 && rstd != nullptr) rstd[blockIdx.x] = rs;
}

template <typename T, typename TOut>
__global__ void BackwardRows(const T* dy, int64_t ds, const T* x, int64_t xs, const float* rstd,
                             F32Param w, TOut* dx, int64_t os, float* partials, int64_t rows,
                             int64_t cols, int64_t per_block) {
  __shared__ float scratch[kWarp];
  const float inv_cols = 1.0f / static_cast<float>(cols);
  // This block's partial dweight [cols]: each column owned by one thread,
  // which adds the rows in order.
  float* pw = partials != nullptr ? partials + blockIdx.x * cols : nullptr;
  if (pw != nullptr) {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) pw[i] = 0.0f;
  }
  const int64_t r0 = blockIdx.x * per_block;
  const int64_t r1 = r0 + per_block < rows ? r0 + per_block : rows;
  for (int64_t r = r0; r < r1; ++r) {
    const T* dr = dy + r * ds;
    const T* xr = x + r * xs;
    const float rs = rstd[r];
    float mean_gx = 0.0f;
    if (dx != nullptr) {
      float agx = 0.0f;
      for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        agx += ToFloat(dr[i]) * ParamAt(w, i) * (ToFloat(xr[i]) * rs);
      }
      mean_gx = BlockSum(agx, scratch) * inv_cols;
    }
    TOut* o = dx != nullptr ? dx + r * os : nullptr;
    // Reads dy[i] and x[i] before writing dx[i] (dx may be dy or x), and only
    // the elements this thread read in the sum above.
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      const float d = ToFloat(dr[i]);
      const float xhat = ToFloat(xr[i]) * rs;
      if (pw != nullptr) pw[i] += d * xhat;
      if (o != nullptr) {
        o[i] = FromFloat<TOut>(RmsNormGradInput(d * ParamAt(w, i), xhat, rs, mean_gx));
      }
    }
  }
}

template <typename G>
__global__ void ParamGrad(const float* partials, int64_t blocks, int64_t cols, G* grad, int64_t gs,
                          bool accumulate) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float acc = 0.0f;
  for (int64_t k = 0; k < blocks; ++k) acc += partials[k * cols + c];
  G* dst = grad + c * gs;
  *dst = FromFloat<G>(accumulate ? ToFloat(*dst) + acc : acc);
}

}  // namespace

int LaunchRmsNormForward(int x_dtype, int out_dtype, const void* x, int64_t x_stride, int w_dtype,
                         const void* weight, float eps, void* out, int64_t out_stride, float* rstd,
                         int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return 0;
  if (rows > 0x7fffffff || !IsFloatCode(w_dtype)) return InvalidValue();
  const F32Param w{weight, w_dtype, 1.0f};
  return DispatchFloatPair(x_dtype, out_dtype, [&]<typename T, typename TOut>() {
    Launch(ForwardRows<T, TOut>, static_cast<int>(rows), RmsNormRowThreads(cols), 0, AsStream(stream),
           static_cast<const T*>(x), x_stride, w, eps, static_cast<TOut*>(out), out_stride, rstd,
           cols);
    return Launched();
  });
}

int LaunchRmsNormBackward(int in_dtype, int dx_dtype, const void* dy, int64_t dy_stride,
                          const void* x, int64_t x_stride, const float* rstd, int w_dtype,
                          const void* weight, void* dx, int64_t dx_stride, float* partials,
                          int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return 0;
  if (!IsFloatCode(w_dtype)) return InvalidValue();
  const F32Param w{weight, w_dtype, 1.0f};
  const int64_t per = RmsNormRowsPerBlock(rows);
  const int64_t blocks = RmsNormBackwardBlocks(rows);
  return DispatchFloatPair(in_dtype, dx != nullptr ? dx_dtype : kF32, [&]<typename T, typename TOut>() {
    Launch(BackwardRows<T, TOut>, static_cast<int>(blocks), RmsNormRowThreads(cols), 0, AsStream(stream),
           static_cast<const T*>(dy), dy_stride, static_cast<const T*>(x), x_stride, rstd, w,
           static_cast<TOut*>(dx), dx_stride, partials, rows, cols, per);
    return Launched();
  });
}

int LaunchRmsNormParamGrad(const float* partials, int64_t blocks, int64_t cols, int dw_dtype,
                           void* dweight, int64_t dw_stride, bool accumulate, void* stream) {
  if (cols == 0 || dweight == nullptr) return 0;
  constexpr int kThreads = 256;
  return DispatchFloat(dw_dtype, [&]<typename G>() {
    Launch(ParamGrad<G>, GridFor(cols, kThreads, 0x7fffffff), kThreads, 0, AsStream(stream), partials,
           blocks, cols, static_cast<G*>(dweight), dw_stride, accumulate);
    return Launched();
  });
}

}  // namespace zeroshard::cuda
