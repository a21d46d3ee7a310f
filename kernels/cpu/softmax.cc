#include "zeroshard/kernels/cpu/softmax.h"

#include <vector>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/cpu/loops.h"
#include "zeroshard/kernels/math/softmax_ops.h"
#include "zeroshard/kernels/rows.h"

namespace zeroshard::cpu {

namespace {

// Three passes over each row, all but the first from cache: the maximum; the
// exponentials (kept in a per-thread f32 scratch row) and their sum; the
// scaled (softmax) or shifted (log-softmax) values.
template <typename T, typename TOut>
void SoftmaxRows(const Tensor& x, const Tensor& out, bool log) {
  const RowLayout lx = RowLayout::Of(x);
  const RowLayout lo = RowLayout::Of(out);
  const T* const xp = static_cast<const T*>(x.raw_data());
  TOut* const op = static_cast<TOut*>(out.raw_data());
  const int64_t rows = lx.rows, cols = lx.cols;
  if (cols == 0) return;
#pragma omp parallel if (rows * cols >= kRowParallelWork && rows > 1)
  {
    std::vector<float> scratch(log ? 0 : cols);
    float* const e = scratch.data();
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = xp + lx.Offset(r);
      TOut* o = op + lo.Offset(r);
      RunWithIsa([&] {
        auto add = [](float a, float b) { return a + b; };
        const float m = LaneReduce<float>(cols, -kInfF, [&](int64_t i) { return ConvertElement<float>(xr[i]); },
                                          [](float a, float b) { return MaxF(a, b); });
        if (log) {
          const float s = LaneReduce<float>(
              cols, 0.0f, [&](int64_t i) { return ExpF(ConvertElement<float>(xr[i]) - m); }, add);
          const float log_s = LogF(s);
          for (int64_t i = 0; i < cols; ++i) {
            o[i] = ConvertElement<TOut>(LogSoftmaxElement(ConvertElement<float>(xr[i]), m, log_s));
          }
        } else {
          for (int64_t i = 0; i < cols; ++i) e[i] = ExpF(ConvertElement<float>(xr[i]) - m);
          const float s = LaneReduce<float>(cols, 0.0f, [&](int64_t i) { return e[i]; }, add);
          const float inv = 1.0f / s;
          for (int64_t i = 0; i < cols; ++i) o[i] = ConvertElement<TOut>(e[i] * inv);
        }
      });
    }
  }
}

template <typename T, typename TOut>
void SoftmaxBackwardRows(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
  const RowLayout ly = RowLayout::Of(y);
  const RowLayout ld = RowLayout::Of(dy);
  const RowLayout lo = RowLayout::Of(dx);
  const T* const yp = static_cast<const T*>(y.raw_data());
  const T* const dp = static_cast<const T*>(dy.raw_data());
  TOut* const op = static_cast<TOut*>(dx.raw_data());
  const int64_t rows = ly.rows, cols = ly.cols;
  if (cols == 0) return;
#pragma omp parallel for schedule(static) if (rows * cols >= kRowParallelWork && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = yp + ly.Offset(r);
    const T* dr = dp + ld.Offset(r);
    TOut* o = op + lo.Offset(r);
    RunWithIsa([&] {
      auto add = [](float a, float b) { return a + b; };
      if (log) {
        const float s = LaneReduce<float>(cols, 0.0f, [&](int64_t i) { return ConvertElement<float>(dr[i]); }, add);
        for (int64_t i = 0; i < cols; ++i) {
          o[i] = ConvertElement<TOut>(
              LogSoftmaxGradElement(ConvertElement<float>(yr[i]), ConvertElement<float>(dr[i]), s));
        }
      } else {
        const float dot = LaneReduce<float>(
            cols, 0.0f,
            [&](int64_t i) { return ConvertElement<float>(dr[i]) * ConvertElement<float>(yr[i]); }, add);
        for (int64_t i = 0; i < cols; ++i) {
          o[i] = ConvertElement<TOut>(
              SoftmaxGradElement(ConvertElement<float>(yr[i]), ConvertElement<float>(dr[i]), dot));
        }
      }
    });
  }
}

}  // namespace

void Softmax(const Tensor& x, const Tensor& out, bool log) {
  DispatchFloatDType(x.dtype(), [&]<typename T>() {
    DispatchFloatDType(out.dtype(), [&]<typename TOut>() { SoftmaxRows<T, TOut>(x, out, log); });
  });
}

void SoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
  ZS_CHECK(y.dtype() == dy.dtype(), "SoftmaxBackward: y is ", DTypeName(y.dtype()), ", dy is ",
           DTypeName(dy.dtype()));
  DispatchFloatDType(y.dtype(), [&]<typename T>() {
    DispatchFloatDType(dx.dtype(), [&]<typename TOut>() { SoftmaxBackwardRows<T, TOut>(y, dy, dx, log); });
  });
}

}  // namespace zeroshard::cpu
