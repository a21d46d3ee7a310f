#include "zeroshard/kernels/cpu/layernorm.h"

#include <algorithm>
#include <vector>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/cpu/loops.h"
#include "zeroshard/kernels/cpu/row_blocks.h"
#include "zeroshard/kernels/math/layernorm_ops.h"
#include "zeroshard/kernels/rows.h"

namespace zeroshard::cpu {

namespace {

inline float Add(float a, float b) { return a + b; }

// Per row: the mean, then the variance around it (two passes, the second from
// cache, more accurate than E[x^2] - mean^2), then the normalised output.
template <typename T, typename TOut>
void ForwardRows(const Tensor& x, const float* w, const float* b, float eps, const Tensor& out,
                 float* mean, float* rstd) {
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
    float m = 0, rs = 0;
    RunWithIsa([&] {
      m = LaneReduce<float>(cols, 0.0f, [&](int64_t i) { return ConvertElement<float>(xr[i]); }, Add) *
          inv_cols;
      const float var = LaneReduce<float>(cols, 0.0f,
                                          [&](int64_t i) {
                                            const float d = ConvertElement<float>(xr[i]) - m;
                                            return d * d;
                                          },
                                          Add) *
                        inv_cols;
      rs = LayerNormRstd(var, eps);
      for (int64_t i = 0; i < cols; ++i) {
        o[i] = ConvertElement<TOut>(LayerNormElement(ConvertElement<float>(xr[i]), m, rs, w[i], b[i]));
      }
    });
    if (mean != nullptr) mean[r] = m;
    if (rstd != nullptr) rstd[r] = rs;
  }
}

template <typename T, typename TOut>
void BackwardRows(const Tensor& dy, const Tensor& x, const float* mean, const float* rstd,
                  const float* w, const Tensor& dx, float* partial) {
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
    // This block's partial dweight and dbias (2 * cols floats), or none.
    float* pw = partial != nullptr ? partial + k * 2 * cols : nullptr;
    float* pb = pw != nullptr ? pw + cols : nullptr;
    if (pw != nullptr) std::fill(pw, pw + 2 * cols, 0.0f);
    const int64_t r_end = std::min(rows, (k + 1) * per_block);
    for (int64_t r = k * per_block; r < r_end; ++r) {
      const T* dr = dp + ld.Offset(r);
      const T* xr = xp + lx.Offset(r);
      const float m = mean[r], rs = rstd[r];
      RunWithIsa([&] {
        if (pw != nullptr) {
          for (int64_t i = 0; i < cols; ++i) {
            const float d = ConvertElement<float>(dr[i]);
            pw[i] += d * ((ConvertElement<float>(xr[i]) - m) * rs);
            pb[i] += d;
          }
        }
        if (want_dx) {
          const float mean_g =
              LaneReduce<float>(cols, 0.0f, [&](int64_t i) { return ConvertElement<float>(dr[i]) * w[i]; }, Add) *
              inv_cols;
          const float mean_gx = LaneReduce<float>(cols, 0.0f,
                                                  [&](int64_t i) {
                                                    const float xhat = (ConvertElement<float>(xr[i]) - m) * rs;
                                                    return ConvertElement<float>(dr[i]) * w[i] * xhat;
                                                  },
                                                  Add) *
                                inv_cols;
          TOut* o = op + lo.Offset(r);
          // Reads dy[i] and x[i] before writing dx[i]: dx may be dy or x.
          for (int64_t i = 0; i < cols; ++i) {
            const float xhat = (ConvertElement<float>(xr[i]) - m) * rs;
            o[i] = ConvertElement<TOut>(
                LayerNormGradInput(ConvertElement<float>(dr[i]) * w[i], xhat, rs, mean_g, mean_gx));
          }
        }
      });
    }
  }
}

}  // namespace

void LayerNormForward(const Tensor& x, const float* weight, const float* bias, float eps,
                      const Tensor& out, float* mean, float* rstd) {
  DispatchFloatDType(x.dtype(), [&]<typename T>() {
    DispatchFloatDType(out.dtype(), [&]<typename TOut>() {
      ForwardRows<T, TOut>(x, weight, bias, eps, out, mean, rstd);
    });
  });
}

void LayerNormBackward(const Tensor& dy, const Tensor& x, const float* mean, const float* rstd,
                       const float* weight, const Tensor& dx, const Tensor& dweight,
                       const Tensor& dbias, bool accumulate) {
  ZS_CHECK(dy.dtype() == x.dtype(), "LayerNormBackward: dy is ", DTypeName(dy.dtype()), ", x is ",
           DTypeName(x.dtype()));
  const int64_t rows = RowLayout::Of(x).rows, cols = x.size(-1);
  const int64_t per_block = ParamGradRowsPerBlock(rows);
  const int64_t blocks = (rows + per_block - 1) / per_block;
  const bool want_params = dweight.defined() || dbias.defined();
  std::vector<float> partial(want_params ? blocks * 2 * cols : 0);
  float* const pp = want_params ? partial.data() : nullptr;
  DispatchFloatDType(x.dtype(), [&]<typename T>() {
    DispatchFloatDType(dx.defined() ? dx.dtype() : DType::kF32, [&]<typename TOut>() {
      BackwardRows<T, TOut>(dy, x, mean, rstd, weight, dx, pp);
    });
  });
  if (want_params) {
    StoreParamGradSum(pp, blocks, 2 * cols, 0, cols, dweight, accumulate);
    StoreParamGradSum(pp, blocks, 2 * cols, cols, cols, dbias, accumulate);
  }
}

}  // namespace zeroshard::cpu
