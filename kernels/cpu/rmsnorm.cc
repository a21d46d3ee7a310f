#include "zeroshard/kernels/cpu/rmsnorm.h"

#include <algorithm>
#include <vector>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/cpu/loops.h"
#include "zeroshard/kernels/cpu/row_blocks.h"
#include "zeroshard/kernels/math/rmsnorm_ops.h"
#include "zeroshard/kernels/rows.h"

namespace zeroshard::cpu {

namespace {

inline float Add(float a, float b) { return a + b; }

// Per row: the mean of squares (a lane reduction, fixed order), then the output.
template <typename T, typename TOut>
void ForwardRows(const Tensor& x, const float* w, float eps, const Tensor& out, float* rstd) {
  const RowLayout lx = RowLayout::Of(x);
  const RowLayout lo = RowLayout::Of(out);
  const T* const xp = static_cast<const T*>(x.raw_data());
  TOut* const op = static_cast<TOut*>(out.raw_data());
  const int64_t rows = lx.rows, cols = lx.cols;
  const float inv_cols = 1.0f / static_cast<float>(cols);
#pragma omp parallel for schedule(static) if (rows * cols >= kRowParallelWork && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = xp + lx.Offset(r);
    TOut* o = op + lo.Offset(r);
    float rs = 0;
    RunWithIsa([&] {
      const float ms = LaneReduce<float>(cols, 0.0f,
                                         [&](int64_t i) {
                                           const float v = ConvertElement<float>(xr[i]);
                                           return v * v;
                                         },
                                         Add) *
                       inv_cols;
      rs = RmsNormRstd(ms, eps);
      // Reads x[i] before writing out[i]: out may be x.
      for (int64_t i = 0; i < cols; ++i) {
        o[i] = ConvertElement<TOut>(RmsNormElement(ConvertElement<float>(xr[i]), rs, w[i]));
      }
    });
    if (rstd != nullptr) rstd[r] = rs;
  }
}

// dx per row, and per fixed block of rows the partial dweight (cols floats).
template <typename T, typename TOut>
void BackwardRows(const Tensor& dy, const Tensor& x, const float* rstd, const float* w,
                  const Tensor& dx, float* partial) {
  const RowLayout ld = RowLayout::Of(dy);
  const RowLayout lx = RowLayout::Of(x);
  const bool want_dx = dx.defined();
  const RowLayout lo = want_dx ? RowLayout::Of(dx) : RowLayout();
  const T* const dp = static_cast<const T*>(dy.raw_data());
  const T* const xp = static_cast<const T*>(x.raw_data());
  TOut* const op = want_dx ? static_cast<TOut*>(dx.raw_data()) : nullptr;
  const int64_t rows = lx.rows, cols = lx.cols;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const int64_t per_block = ParamGradRowsPerBlock(rows);
  const int64_t blocks = (rows + per_block - 1) / per_block;
#pragma omp parallel for schedule(static) if (rows * cols >= kRowParallelWork && blocks > 1)
  for (int64_t k = 0; k < blocks; ++k) {
    float* pw = partial != nullptr ? partial + k * cols : nullptr;
    if (pw != nullptr) std::fill(pw, pw + cols, 0.0f);
    const int64_t r_end = std::min(rows, (k + 1) * per_block);
    for (int64_t r = k * per_block; r < r_end; ++r) {
      const T* dr = dp + ld.Offset(r);
      const T* xr = xp + lx.Offset(r);
      const float rs = rstd[r];
      RunWithIsa([&] {
        if (pw != nullptr) {
          for (int64_t i = 0; i < cols; ++i) {
            pw[i] += ConvertElement<float>(dr[i]) * (ConvertElement<float>(xr[i]) * rs);
          }
        }
        if (want_dx) {
          const float mean_gx = LaneReduce<float>(cols, 0.0f,
                                                  [&](int64_t i) {
                                                    const float xhat = ConvertElement<float>(xr[i]) * rs;
                                                    return ConvertElement<float>(dr[i]) * w[i] * xhat;
                                                  },
                                                  Add) *
                                inv_cols;
          TOut* o = op + lo.Offset(r);
          // Reads dy[i] and x[i] before writing dx[i]: dx may be dy or x.
          for (int64_t i = 0; i < cols; ++i) {
            const float xhat = ConvertElement<float>(xr[i]) * rs;
            o[i] = ConvertElement<TOut>(RmsNormGradInput(ConvertElement<float>(dr[i]) * w[i], xhat, rs, mean_gx));
          }
        }
      });
    }
  }
}

}  // namespace

void RmsNormForward(const Tensor& x, const float* weight, float eps, const Tensor& out, float* rstd) {
  DispatchFloatDType(x.dtype(), [&]<typename T>() {
    DispatchFloatDType(out.dtype(), [&]<typename TOut>() { ForwardRows<T, TOut>(x, weight, eps, out, rstd); });
  });
}

void RmsNormBackward(const Tensor& dy, const Tensor& x, const float* rstd, const float* weight,
                     const Tensor& dx, const Tensor& dweight, bool accumulate) {
  ZS_CHECK(dy.dtype() == x.dtype(), "RmsNormBackward: dy is ", DTypeName(dy.dtype()), ", x is ",
           DTypeName(x.dtype()));
  const int64_t rows = RowLayout::Of(x).rows, cols = x.size(-1);
  const int64_t per_block = ParamGradRowsPerBlock(rows);
  const int64_t blocks = (rows + per_block - 1) / per_block;
  std::vector<float> partial(dweight.defined() ? blocks * cols : 0);
  float* const pp = dweight.defined() ? partial.data() : nullptr;
  DispatchFloatDType(x.dtype(), [&]<typename T>() {
    DispatchFloatDType(dx.defined() ? dx.dtype() : DType::kF32, [&]<typename TOut>() {
      BackwardRows<T, TOut>(dy, x, rstd, weight, dx, pp);
    });
  });
  if (dweight.defined()) StoreParamGradSum(pp, blocks, cols, 0, cols, dweight, accumulate);
}

}  // namespace zeroshard::cpu
