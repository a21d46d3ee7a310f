// Helpers of the GPU tests (tests/kernels/cuda_*_test.cc): every CUDA kernel is
// compared with its CPU twin on the same inputs. Each test starts with
//
//   ZS_SKIP_WITHOUT_CUDA();
//   CudaAllocator gpu(0);
//   const Tensor xd = OnGpu(x, &gpu);
//   ExpectClose(gpu_result, ToDoubles(cpu_result), GpuTol(dtype), "what");
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|): the per-element math is the
// same code (kernels/math/*.h, compiled without FMA contraction), so the only
// differences are the order of row sums (f32: a few ulp of the sum) and, for
// 16-bit outputs, the rounding that such a difference can flip (one ulp of the
// output type). Kernels without sums (casts, gathers, dropout, AdamW) are
// compared bit for bit.
#ifndef ZEROSHARD_TESTS_KERNELS_CUDA_TESTING_H_
#define ZEROSHARD_TESTS_KERNELS_CUDA_TESTING_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

#define ZS_SKIP_WITHOUT_CUDA()                                                          \
  do {                                                                                  \
    if (!::zeroshard::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";       \
  } while (0)

namespace zeroshard::testing {

struct Tol {
  double atol;
  double rtol;
};

// GPU against CPU for results with row sums, by output dtype.
inline Tol GpuTol(DType out) {
  switch (out) {
    case DType::kBF16: return {1e-3, 1.0 / 64};
    case DType::kF16: return {1e-4, 1.0 / 256};
    default: return {1e-5, 1e-4};
  }
}

inline constexpr Tol kExact{0, 0};

// Rows x cols shapes: single elements, odd sizes around warp and block
// multiples, GPT-2 widths and a vocabulary-sized row.
inline const std::vector<std::pair<int64_t, int64_t>>& GpuRowShapes() {
  static const auto* shapes = new std::vector<std::pair<int64_t, int64_t>>{
      {1, 1}, {3, 7}, {17, 33}, {5, 257}, {64, 1000}, {1024, 768}, {4, 50257}};
  return *shapes;
}

inline Tensor OnGpu(const Tensor& t, Allocator* gpu) { return t.To(gpu).value(); }

inline void ExpectClose(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  ExpectClose(ToDoubles(got), ToDoubles(want), tol.atol, tol.rtol, what);
}

// The same values bit for bit (through doubles: exact for every float dtype,
// the sign of zero included), for results that must not change with the path
// that computed them.
inline void ExpectSameBits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<double> g = ToDoubles(got), w = ToDoubles(want);
  ASSERT_EQ(g.size(), w.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::memcmp(&g[i], &w[i], sizeof(double)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", want the bits of " << w[i];
      if (++reported >= 5) return;
    }
  }
}

inline std::string Describe(const std::string& op, DType dtype, int64_t rows, int64_t cols) {
  return op + " " + std::string(DTypeName(dtype)) + " [" + std::to_string(rows) + ", " +
         std::to_string(cols) + "]";
}

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_KERNELS_CUDA_TESTING_H_
