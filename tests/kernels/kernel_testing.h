// Helpers for kernel tests: deterministic random inputs, values in double, and
// an element-wise comparison with `|got - want| <= atol + rtol * |want|`.
#ifndef ZEROSHARD_TESTS_KERNELS_KERNEL_TESTING_H_
#define ZEROSHARD_TESTS_KERNELS_KERNEL_TESTING_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "zeroshard/runtime/tensor.h"

namespace zeroshard::testing {

// Uniform values in [lo, hi), a function of (seed, index) only.
inline std::vector<float> RandomValues(int64_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (int64_t i = 0; i < n; ++i) {
    s ^= s >> 33;
    s *= 0xff51afd7ed558ccdull;
    s ^= s >> 29;
    s += 0x9E3779B97F4A7C15ull;
    const double u = static_cast<double>(s >> 11) * (1.0 / 9007199254740992.0);
    v[i] = static_cast<float>(lo + (hi - lo) * u);
  }
  return v;
}

inline Tensor RandomTensor(absl::Span<const int64_t> shape, DType dtype, float lo, float hi,
                           uint64_t seed) {
  return Tensor::FromVector(RandomValues(NumElements(shape), lo, hi, seed), shape, dtype).value();
}

// Values (converted exactly to double) in row-major order.
inline std::vector<double> ToDoubles(const Tensor& t) { return t.ToVector<double>().value(); }

// Relative tolerance that covers one rounding into `dtype`.
inline double RoundingRtol(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return 1.0 / 128;   // 8 bits of mantissa: half ulp is 2^-8
    case DType::kF16: return 1.0 / 1024;   // 11 bits
    default: return 0;
  }
}

inline void ExpectClose(const std::vector<double>& got, const std::vector<double>& want,
                        double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      ADD_FAILURE() << what << ": element " << i << " got " << g << ", want " << w
                    << " (atol " << atol << ", rtol " << rtol << ")";
      if (++reported >= 5) return;
    }
  }
}

inline void ExpectClose(const Tensor& got, const std::vector<double>& want, double atol,
                        double rtol, const std::string& what) {
  ExpectClose(ToDoubles(got), want, atol, rtol, what);
}

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_KERNELS_KERNEL_TESTING_H_
