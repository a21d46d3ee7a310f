// The CUDA elementwise kernels against their CPU twins. Skips without a device;
// in a CPU-only or device-less run, checks that a CUDA launch fails cleanly.
#include <gtest/gtest.h>

#include <cmath>

#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

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
      for (double p : {2.0, 0.5, -1.0, 3.0}) {
        const Tensor xp = Unary(UnaryOp::kAbs, x).value();  // powers of non-negative bases
        ZS_ASSERT_OK_AND_ASSIGN(Tensor cpu_p, Tensor::EmptyLike(xp));
        ZS_ASSERT_OK(PowScalar(xp, p, cpu_p));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor gpu_p, Tensor::EmptyLike(xp.To(&gpu).value()));
        ZS_ASSERT_OK(PowScalar(xp.To(&gpu).value(), p, gpu_p));
        // powf may differ by an ulp between CUDA and glibc: one rounding of the dtype.
        ExpectClose(gpu_p, ToDoubles(cpu_p), 1e-6, 2 * ::zeroshard::testing::RoundingRtol(dtype) + 1e-6,
                    "PowScalar " + std::to_string(p));
      }
      ZS_ASSERT_OK_AND_ASSIGN(Tensor cpu_g, Binary(BinaryOp::kGeluBackward, x, y));
      ZS_ASSERT_OK_AND_ASSIGN(Tensor gpu_g, Binary(BinaryOp::kGeluBackward, xd, yd));
      ExpectClose(gpu_g, ToDoubles(cpu_g), 1e-6, 1e-6, "GeluBackward");
    }
  }
}

// Broadcast and strided operands, strided and in-place outputs, mixed dtypes:
// materialised on the device (strided copies) around the same kernels.
TEST(CudaElementwise, BroadcastAndStridedOperandsMatchCpu) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator gpu(0);
  for (DType dtype : kFloatDTypes) {
    const Tensor a = RandomTensor({4, 7, 33}, dtype, -2, 2, 1);
    const Tensor row = RandomTensor({33}, dtype, -2, 2, 2);      // GPT's bias
    const Tensor col = RandomTensor({4, 1, 1}, DType::kF32, -2, 2, 3);
    const Tensor ad = a.To(&gpu).value(), rowd = row.To(&gpu).value(), cold = col.To(&gpu).value();
    for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kMul, BinaryOp::kSub}) {
      ExpectClose(Binary(op, ad, rowd).value(), ToDoubles(Binary(op, a, row).value()), 1e-6, 1e-6,
                  std::string(BinaryOpName(op)) + " row broadcast");
      ExpectClose(Binary(op, cold, ad).value(), ToDoubles(Binary(op, col, a).value()), 1e-6, 1e-6,
                  std::string(BinaryOpName(op)) + " column broadcast, mixed dtypes");
    }
    // Transposed input, strided output, in place.
    const Tensor at = a.Transpose(0, 2).value(), adt = ad.Transpose(0, 2).value();
    ExpectClose(Unary(UnaryOp::kGelu, adt).value(), ToDoubles(Unary(UnaryOp::kGelu, at).value()),
                1e-6, 1e-6, "Gelu of a transposed view");
    ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Zeros({4, 7, 66}, dtype, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor out_cpu, Tensor::Zeros({4, 7, 66}, dtype));
    ZS_ASSERT_OK(Affine(ad, 2.0, 1.0, out.Narrow(2, 33, 33).value()));
    ZS_ASSERT_OK(Affine(a, 2.0, 1.0, out_cpu.Narrow(2, 33, 33).value()));
    ExpectClose(out, ToDoubles(out_cpu), 1e-6, 1e-6, "Affine into a narrowed output");
    ZS_ASSERT_OK(Add(ad, rowd, ad));
    ZS_ASSERT_OK(Add(a, row, a));
    ExpectClose(ad, ToDoubles(a), 1e-6, 1e-6, "in-place Add of a broadcast bias");
  }
}

// CUDA kernels launch on the calling thread's current device: an op on another
// GPU's tensors is refused by name (runtime/tensor.h CheckSameDevice), not run
// across devices; after cudaSetDevice the same call works.
// Note [Widening add]: f32 + bf16/f16 into f32 (an f32 .grad accumulating a
// 16-bit gradient) in one kernel: the same bits as the CPU, which casts the
// 16-bit operand to f32 (exact) and adds. In place and not, either operand
// order, 16-byte packs with a tail and the unaligned element-by-element path.
TEST(CudaElementwise, WideningAddIsBitwiseTheCastThenAdd) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator gpu(0);
  for (DType narrow : {DType::kBF16, DType::kF16}) {
    for (int64_t n : {1, 7, 33, 257, (1 << 20) + 3}) {
      for (int64_t offset : {0, 1}) {  // 1: base pointers off the 16-byte grid
        SCOPED_TRACE(::testing::Message() << DTypeName(narrow) << " n " << n << " offset " << offset);
        const Tensor acc = RandomTensor({n + offset}, DType::kF32, -4, 4, n).Narrow(0, offset, n).value();
        const Tensor g = RandomTensor({n + offset}, narrow, -4, 4, n + 1).Narrow(0, offset, n).value();
        ZS_ASSERT_OK_AND_ASSIGN(Tensor want, Binary(BinaryOp::kAdd, acc, g));  // CPU: cast g to f32, then add
        const Tensor gd = g.To(&gpu).value();
        ZS_ASSERT_OK_AND_ASSIGN(Tensor out_of_place, Binary(BinaryOp::kAdd, acc.To(&gpu).value(), gd));
        EXPECT_EQ(ToDoubles(out_of_place), ToDoubles(want));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor swapped, Binary(BinaryOp::kAdd, gd, acc.To(&gpu).value()));
        EXPECT_EQ(ToDoubles(swapped), ToDoubles(want));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor buffer, Tensor::Zeros({n + offset}, DType::kF32, &gpu));
        const Tensor in_place = buffer.Narrow(0, offset, n).value();
        ZS_ASSERT_OK(in_place.CopyFrom(acc));
        ZS_ASSERT_OK(Add(in_place, gd, in_place));
        EXPECT_EQ(ToDoubles(in_place), ToDoubles(want));
      }
    }
  }
}

TEST(CudaElementwise, AnOpOnAnotherDevicesTensorsIsAnError) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<int> n = cuda::CudaDeviceCount();
  if (!n.ok() || *n < 2) GTEST_SKIP() << "one CUDA device";
  CudaAllocator second(1);
  ZS_ASSERT_OK(cuda::CudaSetDevice(0));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x, RandomTensor({64}, DType::kF32, -1, 1, 5).To(&second));
  const absl::StatusOr<Tensor> wrong = Unary(UnaryOp::kExp, x);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("tensors on cuda:1 but this thread's current CUDA device is cuda:0"),
            std::string::npos)
      << wrong.status();
  ZS_ASSERT_OK(cuda::CudaSetDevice(1));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor right, Unary(UnaryOp::kExp, x));
  ZS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, right.ToVector<float>());
  ZS_ASSERT_OK_AND_ASSIGN(std::vector<float> in, x.ToVector<float>());
  // CUDA's expf is within 2 ulp (the CUDA C++ Programming Guide's table); 1e-6 relative is 8 ulp of f32.
  for (size_t i = 0; i < in.size(); ++i) EXPECT_NEAR(got[i], std::exp(in[i]), 1e-6 * std::exp(in[i]));
  ZS_ASSERT_OK(cuda::CudaSetDevice(0));
}

TEST(CudaElementwise, BuildKnowsWhetherCudaIsCompiledIn) {
  // Always runs: the launchers link in every build; without a device nothing launches.
  ZS_ASSERT_OK_AND_ASSIGN(int n, cuda::CudaDeviceCount());
  EXPECT_GE(n, 0);
  if (!cuda::BuiltWithCuda()) { EXPECT_EQ(n, 0); }
}

}  // namespace
}  // namespace zeroshard
