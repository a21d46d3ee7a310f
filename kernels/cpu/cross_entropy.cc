#include "zeroshard/kernels/cpu/cross_entropy.h"

#include <algorithm>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/cpu/loops.h"
#include "zeroshard/kernels/math/softmax_ops.h"
#include "zeroshard/kernels/rows.h"

namespace zeroshard::cpu {

namespace {

// One pass over a row from memory: per block of kBlock logits (in L1), the
// block maximum, then exp(x - running max) added into kLanes lane sums, which
// are rescaled when the running maximum grows (MaxSum merging, one exp per
// element). The lanes are combined in lane order at the end.
constexpr int64_t kBlock = 512;

template <typename T>
MaxSum RowMaxSum(const T* x, int64_t cols) {
  float m = -kInfF;
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = 0.0f;
  for (int64_t b0 = 0; b0 < cols; b0 += kBlock) {
    const T* xb = x + b0;
    const int64_t len = std::min(kBlock, cols - b0);
    const float bm = LaneReduce<float>(len, -kInfF, [&](int64_t i) { return ConvertElement<float>(xb[i]); },
                                       [](float a, float b) { return MaxF(a, b); });
    if (bm > m) {
      const float f = RescaleFactor(m, bm);
      for (int j = 0; j < kLanes; ++j) acc[j] *= f;
      m = bm;
    }
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) acc[j] += ExpF(ConvertElement<float>(xb[i + j]) - m);
    }
    for (int j = 0; i < len; ++i, ++j) acc[j] += ExpF(ConvertElement<float>(xb[i]) - m);
  }
  float s = acc[0];
  for (int j = 1; j < kLanes; ++j) s += acc[j];
  return MaxSum{m, s};
}

template <typename T>
void ForwardRows(const Tensor& logits, const int64_t* targets, int64_t ignore_index, float* losses,
                 float* lse) {
  const RowLayout l = RowLayout::Of(logits);
  const T* const base = static_cast<const T*>(logits.raw_data());
  const int64_t rows = l.rows, cols = l.cols;
#pragma omp parallel for schedule(static) if (rows * cols >= kRowParallelWork && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = base + l.Offset(r);
    MaxSum ms{};
    RunWithIsa([&] { ms = RowMaxSum(x, cols); });
    const float log_s = LogF(ms.sum);
    const int64_t t = targets[r];
    // lse - x[t] as log(s) - (x[t] - max): no rounding of max + log(s) first.
    losses[r] = t == ignore_index ? 0.0f : log_s - (ConvertElement<float>(x[t]) - ms.max);
    lse[r] = ms.max + log_s;
  }
}

template <typename T, typename TOut>
void BackwardRows(const Tensor& logits, const int64_t* targets, int64_t ignore_index,
                  const float* lse, const float* dloss, const Tensor& dlogits) {
  const RowLayout l = RowLayout::Of(logits);
  const RowLayout lo = RowLayout::Of(dlogits);
  const T* const base = static_cast<const T*>(logits.raw_data());
  TOut* const obase = static_cast<TOut*>(dlogits.raw_data());
  const int64_t rows = l.rows, cols = l.cols;
#pragma omp parallel for schedule(static) if (rows * cols >= kRowParallelWork && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = base + l.Offset(r);
    TOut* d = obase + lo.Offset(r);
    const int64_t t = targets[r];
    if (t == ignore_index) {
      const TOut zero = ConvertElement<TOut>(0.0f);
      RunWithIsa([&] {
        for (int64_t i = 0; i < cols; ++i) d[i] = zero;
      });
      continue;
    }
    const float s = lse[r], g = dloss[r];
    const float xt = ConvertElement<float>(x[t]);  // read before d (maybe x itself) is written
    RunWithIsa([&] {
      for (int64_t i = 0; i < cols; ++i) {
        d[i] = ConvertElement<TOut>(CrossEntropyGradElement(ConvertElement<float>(x[i]), s, 0.0f, g));
      }
    });
    d[t] = ConvertElement<TOut>(CrossEntropyGradElement(xt, s, 1.0f, g));
  }
}

}  // namespace

void CrossEntropyForward(const Tensor& logits, const int64_t* targets, int64_t ignore_index,
                         float* losses, float* lse) {
  DispatchFloatDType(logits.dtype(),
                     [&]<typename T>() { ForwardRows<T>(logits, targets, ignore_index, losses, lse); });
}

void CrossEntropyBackward(const Tensor& logits, const int64_t* targets, int64_t ignore_index,
                          const float* lse, const float* dloss, const Tensor& dlogits) {
  DispatchFloatDType(logits.dtype(), [&]<typename T>() {
    DispatchFloatDType(dlogits.dtype(), [&]<typename TOut>() {
      BackwardRows<T, TOut>(logits, targets, ignore_index, lse, dloss, dlogits);
    });
  });
}

}  // namespace zeroshard::cpu
