// Device casts (bit for bit the CPU's rounding, including NaN, Inf, subnormal
// and overflow values) and the whole-buffer sums (SumAll, SumOfSquares)
// against the CPU. Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/kernels/reduce.h"
#include "zeroshard/tests/kernels/cuda_testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::kExact;
using ::zeroshard::testing::OnGpu;
using ::zeroshard::testing::RandomTensor;

TEST(CudaCast, EveryFloatPairMatchesCpuBitwise) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  std::vector<float> v = testing::RandomValues(100003, -70000, 70000, 5);
  const float special[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), 65504.0f, 65520.0f, 1e-8f,
                           3e-5f, 5.9604645e-8f, 3.4e38f, 1.17549435e-38f};
  for (size_t i = 0; i < std::size(special); ++i) v[i] = special[i];
  ZS_ASSERT_OK_AND_ASSIGN(Tensor base, Tensor::FromVector(v, {static_cast<int64_t>(v.size())}));
  for (DType from : kFloatDTypes) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor x, base.To(from));
    const Tensor xd = OnGpu(x, &gpu);
    for (DType to : kFloatDTypes) {
      if (to == from) continue;
      ZS_ASSERT_OK_AND_ASSIGN(Tensor y, Tensor::Empty(x.shape(), to));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor yd, Tensor::Empty(x.shape(), to, &gpu));
      ZS_ASSERT_OK(Cast(x, y));
      ZS_ASSERT_OK(Cast(xd, yd));
      ExpectClose(yd, y, kExact, std::string("Cast ") + std::string(DTypeName(from)) + " -> " + std::string(DTypeName(to)));
    }
  }
}

TEST(CudaReduce, SumAllAndSumOfSquaresMatchCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : {1, 31, 65536, 65537, 1000003, 1 << 25}) {
      const Tensor x = RandomTensor({n}, dtype, -1, 1, n);
      const Tensor xd = OnGpu(x, &gpu);
      ZS_ASSERT_OK_AND_ASSIGN(double s, SumAll(x));
      ZS_ASSERT_OK_AND_ASSIGN(double sd, SumAll(xd));
      ZS_ASSERT_OK_AND_ASSIGN(double q, SumOfSquares(x));
      ZS_ASSERT_OK_AND_ASSIGN(double qd, SumOfSquares(xd));
      // fp32 slices in another order than the CPU's: relative to the sum of |x|.
      EXPECT_NEAR(sd, s, 1e-5 * static_cast<double>(n)) << std::string(DTypeName(dtype)) << " n=" << n;
      EXPECT_NEAR(qd, q, 1e-5 * q + 1e-6) << std::string(DTypeName(dtype)) << " n=" << n;
      // Deterministic: the same bits run to run.
      ZS_ASSERT_OK_AND_ASSIGN(double again, SumOfSquares(xd));
      EXPECT_EQ(again, qd);
    }
  }
}

TEST(CudaReduce, AxisSumMeanMaxMatchCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  // On the simulated device (a CPU running every GPU thread) the GPT-sized
  // shape shrinks: along its last axis it is 6.3 million one-warp blocks.
  const int64_t tall = testing::ShrinkGpuTests() ? 64 : 8192;
  for (DType dtype : kFloatDTypes) {
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{1, 1, 1}, {3, 5, 7}, {tall, 768, 1}, {2, 4096, 33}}) {
      std::vector<float> v = testing::RandomValues(NumElements(shape), -2, 2, 9);
      v[v.size() / 2] = std::numeric_limits<float>::quiet_NaN();  // Max propagates it
      ZS_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::FromVector(v, shape, dtype));
      const Tensor xd = OnGpu(x, &gpu);
      for (int64_t dim = 0; dim < 3; ++dim) {
        for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kMean, ReduceKind::kMax}) {
          ZS_ASSERT_OK_AND_ASSIGN(Tensor want, Reduce(kind, x, dim));
          ZS_ASSERT_OK_AND_ASSIGN(Tensor got, Reduce(kind, xd, dim));
          const testing::Tol tol = kind == ReduceKind::kMax ? kExact : testing::GpuTol(dtype);
          ExpectClose(got, want, {tol.atol * shape[dim], tol.rtol},
                      "Reduce kind " + std::to_string(static_cast<int>(kind)) + " dim " +
                          std::to_string(dim) + " " + std::string(DTypeName(dtype)));
        }
      }
    }
  }
}

// ArgMax has no CUDA kernel: it goes through the host and must agree exactly.
TEST(CudaReduce, ArgMaxThroughTheHostMatchesCpu) {
  ZS_SKIP_WITHOUT_CUDA();
  CudaAllocator gpu(0);
  const Tensor x = RandomTensor({7, 33, 5}, DType::kBF16, -3, 3, 99);
  for (int64_t dim : {0, 1, 2}) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, ArgMax(x, dim));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor got, ArgMax(OnGpu(x, &gpu), dim));
    EXPECT_TRUE(got.device().is_cuda());
    ExpectClose(got, want, kExact, "ArgMax dim " + std::to_string(dim));
  }
}

}  // namespace
}  // namespace zeroshard
