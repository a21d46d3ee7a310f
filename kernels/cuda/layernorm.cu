// LayerNorm forward and backward over rows: one block per row (forward) or per
// block of rows (backward, with the partial parameter gradients), fp32 sums
// with shuffles, the per-element math of kernels/math/layernorm_ops.h.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/layernorm_launch.h"
#include "zeroshard/kernels/math/layernorm_ops.h"

namespace zeroshard::cuda {

namespace {

// Threads per row: a warp for short rows, up to 512 (4 elements each) for long ones.
int LayerNormRowThreads(int64_t cols) { return RowThreads(cols, 512, 4); }

__device__ __forceinline__ float W(const float* w, int64_t i) { return w != nullptr ? w[i] : 1.0f; }
__device__ __forceinline__ float B(const float* b, int64_t i) { return b != nullptr ? b[i] : 0.0f; }

// Two passes as the CPU kernel: the mean, then the variance around it.
template <typename T, typename TOut>
__global__ void ForwardRows(const T* x, int64_t xs, const float* w, const float* b, float eps,
                            TOut* out, int64_t os, float* mean, float* rstd, int64_t cols) {
  __shared__ float scratch[kWarp];
  const T* xr = x + blockIdx.x * xs;
  TOut* o = out + blockIdx.x * os;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) acc += ToFloat(xr[i]);
  const float m = BlockSum(acc, scratch) * inv_cols;
  acc = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float d = ToFloat(xr[i]) - m;
    acc += d * d;
  }
  const float var = BlockSum(acc, scratch) * inv_cols;
  const float rs = LayerNormRstd(var, eps);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    o[i] = FromFloat<TOut>(LayerNormElement(ToFloat(xr[i]), m, rs, W(w, i), B(b, i)));
  }
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[blockIdx.x] = m;
    if (rstd != nullptr) rstd[blockIdx.x] = rs;
  }
}

template <typename T, typename TOut>
__global__ void BackwardRows(const T* dy, int64_t ds, const T* x, int64_t xs, const float* mean,
                             const float* rstd, const float* w, TOut* dx, int64_t os,
                             float* partials, int64_t rows, int64_t cols, int64_t per_block) {
  __shared__ float scratch[kWarp];
  const float inv_cols = 1.0f / static_cast<float>(cols);
  // This block's partial sums [2, cols]: each column is owned by one thread,
  // which adds the rows in order.
  float* pw = partials != nullptr ? partials + blockIdx.x * 2 * cols : nullptr;
  float* pb = pw != nullptr ? pw + cols : nullptr;
  if (pw != nullptr) {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) pw[i] = pb[i] = 0.0f;
  }
  const int64_t r0 = blockIdx.x * per_block;
  const int64_t r1 = r0 + per_block < rows ? r0 + per_block : rows;
  for (int64_t r = r0; r < r1; ++r) {
    const T* dr = dy + r * ds;
    const T* xr = x + r * xs;
    const float m = mean[r], rs = rstd[r];
    float mean_g = 0.0f, mean_gx = 0.0f;
    if (dx != nullptr) {
      float ag = 0.0f, agx = 0.0f;
      for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        const float g = ToFloat(dr[i]) * W(w, i);
        ag += g;
        agx += g * ((ToFloat(xr[i]) - m) * rs);
      }
      mean_g = BlockSum(ag, scratch) * inv_cols;
      mean_gx = BlockSum(agx, scratch) * inv_cols;
    }
    TOut* o = dx != nullptr ? dx + r * os : nullptr;
    // Reads dy[i] and x[i] before writing dx[i] (dx may be dy or x), and only
    // the elements this thread read in the sums above.
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      const float d = ToFloat(dr[i]);
      const float xhat = (ToFloat(xr[i]) - m) * rs;
      if (pw != nullptr) {
        pw[i] += d * xhat;
        pb[i] += d;
      }
      if (o != nullptr) {
        o[i] = FromFloat<TOut>(LayerNormGradInput(d * W(w, i), xhat, rs, mean_g, mean_gx));
      }
    }
    if (dx != nullptr) __syncthreads();  // the next row's sums reuse scratch
  }
}

template <typename G>
__global__ void ParamGrad(const float* partials, int64_t blocks, int64_t cols, int64_t offset,
                          G* grad, int64_t gs, bool accumulate) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float acc = 0.0f;
  for (int64_t k = 0; k < blocks; ++k) acc += partials[k * 2 * cols + offset + c];
  G* dst = grad + c * gs;
  *dst = FromFloat<G>(accumulate ? ToFloat(*dst) + acc : acc);
}

}  // namespace

int LaunchLayerNormForward(int x_dtype, int out_dtype, const void* x, int64_t x_stride,
                           const float* weight, const float* bias, float eps, void* out,
                           int64_t out_stride, float* mean, float* rstd, int64_t rows,
                           int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return 0;
  if (rows > 0x7fffffff) return InvalidValue();
  return DispatchFloatPair(x_dtype, out_dtype, [&]<typename T, typename TOut>() {
    Launch(ForwardRows<T, TOut>, static_cast<int>(rows), LayerNormRowThreads(cols), 0, AsStream(stream),
           static_cast<const T*>(x), x_stride, weight, bias, eps, static_cast<TOut*>(out),
           out_stride, mean, rstd, cols);
    return Launched();
  });
}

int LaunchLayerNormBackward(int in_dtype, int dx_dtype, const void* dy, int64_t dy_stride,
                            const void* x, int64_t x_stride, const float* mean, const float* rstd,
                            const float* weight, void* dx, int64_t dx_stride, float* partials,
                            int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return 0;
  const int64_t per = LayerNormRowsPerBlock(rows);
  const int64_t blocks = LayerNormBackwardBlocks(rows);
  return DispatchFloatPair(
      in_dtype, dx != nullptr ? dx_dtype : kF32, [&]<typename T, typename TOut>() {
        Launch(BackwardRows<T, TOut>, static_cast<int>(blocks), LayerNormRowThreads(cols), 0,
               AsStream(stream), static_cast<const T*>(dy), dy_stride, static_cast<const T*>(x),
               x_stride, mean, rstd, weight, static_cast<TOut*>(dx), dx_stride, partials, rows,
               cols, per);
        return Launched();
      });
}

int LaunchLayerNormParamGrads(const float* partials, int64_t blocks, int64_t cols, int dw_dtype,
                              void* dweight, int64_t dw_stride, int db_dtype, void* dbias,
                              int64_t db_stride, bool accumulate, void* stream) {
  if (cols == 0) return 0;
  constexpr int kThreads = 256;
  const int grid = GridFor(cols, kThreads, 0x7fffffff);
  auto launch = [&](int dtype, void* grad, int64_t stride, int64_t offset) {
    if (grad == nullptr) return 0;
    return DispatchFloat(dtype, [&]<typename G>() {
      Launch(ParamGrad<G>, grid, kThreads, 0, AsStream(stream), partials, blocks, cols, offset,
             static_cast<G*>(grad), stride, accumulate);
      return Launched();
    });
  };
  if (const int rc = launch(dw_dtype, dweight, dw_stride, 0); rc != 0) return rc;
  return launch(db_dtype, dbias, db_stride, cols);
}

}  // namespace zeroshard::cuda
