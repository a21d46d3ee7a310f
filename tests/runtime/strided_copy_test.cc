// Device copies of any layout (runtime/cuda/strided_copy.h): the dimension
// collapsing on the CPU, always; on a GPU, Tensor::CopyFrom / Contiguous /
// Fill / To between strided, transposed, broadcast and narrowed CUDA tensors of
// every dtype, bit for bit against the same copies on the CPU.
#include "zeroshard/runtime/cuda/strided_copy.h"

#include <gtest/gtest.h>

#include <vector>

#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

cuda::StridedCopyArgs Args(std::vector<int64_t> sizes, std::vector<int64_t> dst,
                           std::vector<int64_t> src) {
  cuda::StridedCopyArgs a;
  a.ndim = static_cast<int>(sizes.size());
  a.numel = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    a.sizes[d] = sizes[d];
    a.dst_strides[d] = dst[d];
    a.src_strides[d] = src[d];
    a.numel *= sizes[d];
  }
  return a;
}

std::vector<int64_t> Sizes(const cuda::StridedCopyArgs& a) {
  return std::vector<int64_t>(a.sizes, a.sizes + a.ndim);
}

TEST(StridedCopyDims, ContiguousCopyIsOneDim) {
  cuda::StridedCopyArgs a = Args({2, 3, 4}, {12, 4, 1}, {12, 4, 1});
  cuda::CollapseDims(a);
  EXPECT_EQ(Sizes(a), (std::vector<int64_t>{24}));
  EXPECT_EQ(a.dst_strides[0], 1);
  EXPECT_EQ(a.src_strides[0], 1);
  EXPECT_EQ(a.numel, 24);
}

TEST(StridedCopyDims, TransposeKeepsTwoDims) {
  // dst [3, 4] contiguous <- src = a [4, 3] contiguous, transposed.
  cuda::StridedCopyArgs a = Args({3, 4}, {4, 1}, {1, 3});
  cuda::CollapseDims(a);
  EXPECT_EQ(Sizes(a), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(a.src_strides[0], 1);
  EXPECT_EQ(a.src_strides[1], 3);
}

TEST(StridedCopyDims, SizeOneDimsDropAndBroadcastsMerge) {
  // [1, 5, 1, 2, 3] <- a [3] row broadcast over [5, 2].
  cuda::StridedCopyArgs a = Args({1, 5, 1, 2, 3}, {30, 6, 6, 3, 1}, {0, 0, 0, 0, 1});
  cuda::CollapseDims(a);
  EXPECT_EQ(Sizes(a), (std::vector<int64_t>{10, 3}));
  EXPECT_EQ(a.src_strides[0], 0);
  EXPECT_EQ(a.dst_strides[0], 3);
}

TEST(StridedCopyDims, ScalarIsOneElement) {
  cuda::StridedCopyArgs a = Args({1, 1}, {1, 1}, {0, 0});
  cuda::CollapseDims(a);
  EXPECT_EQ(a.ndim, 1);
  EXPECT_EQ(a.sizes[0], 1);
}

TEST(StridedCopyDims, SupportedPairs) {
  EXPECT_TRUE(cuda::StridedCopySupported(0, 1));   // f32 <- bf16
  EXPECT_TRUE(cuda::StridedCopySupported(2, 0));   // f16 <- f32
  EXPECT_TRUE(cuda::StridedCopySupported(4, 4));   // i64 <- i64
  EXPECT_FALSE(cuda::StridedCopySupported(0, 3));  // f32 <- i32: through the host
}

// ---------------------------------------------------------------- on a GPU

Tensor Iota(std::vector<int64_t> shape, DType dtype) {
  std::vector<float> v(NumElements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000) * 0.37f - 50.0f;
  return Tensor::FromVector(v, shape, dtype).value();
}

void ExpectSame(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.ToVector<double>().value(), want.ToVector<double>().value()) << what;
}

TEST(CudaStridedCopy, LayoutsAndDtypesMatchTheCpu) {
  if (!::zeroshard::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator gpu(0);
  for (DType src_t : kAllDTypes) {  // i8 included: the same-size bit copy of 1-byte elements
    const Tensor x = Iota({3, 5, 7, 2}, src_t);
    const Tensor xd = x.To(&gpu).value();
    // Transposes and permutes made contiguous.
    ExpectSame(xd.Permute({2, 0, 3, 1}).value().Contiguous().value(),
               x.Permute({2, 0, 3, 1}).value().Contiguous().value(), "permute");
    ExpectSame(xd.Transpose(1, 2).value().Reshape({3, -1}).value(),
               x.Transpose(1, 2).value().Reshape({3, -1}).value(), "transpose + reshape");
    // A narrowed source and a narrowed destination.
    ZS_ASSERT_OK_AND_ASSIGN(Tensor dst, Tensor::Zeros({3, 9, 7, 2}, src_t, &gpu));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor cpu_dst, Tensor::Zeros({3, 9, 7, 2}, src_t));
    ZS_ASSERT_OK(dst.Narrow(1, 2, 5).value().CopyFrom(xd));
    ZS_ASSERT_OK(cpu_dst.Narrow(1, 2, 5).value().CopyFrom(x));
    ExpectSame(dst, cpu_dst, "narrowed destination");
    // Broadcast source: a row over many.
    ZS_ASSERT_OK_AND_ASSIGN(Tensor wide, Tensor::Empty({4, 3, 5, 7, 2}, src_t, &gpu));
    ZS_ASSERT_OK(wide.CopyFrom(xd));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor wide_cpu, Tensor::Empty({4, 3, 5, 7, 2}, src_t));
    ZS_ASSERT_OK(wide_cpu.CopyFrom(x));
    ExpectSame(wide, wide_cpu, "broadcast");
    // Host -> strided device destination, strided device source -> host.
    ZS_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::Zeros({2, 7, 5, 3}, src_t, &gpu));
    ZS_ASSERT_OK(t.Permute({3, 2, 1, 0}).value().Narrow(3, 0, 2).value().CopyFrom(x.Narrow(3, 0, 2).value()));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor t_cpu, Tensor::Zeros({2, 7, 5, 3}, src_t));
    ZS_ASSERT_OK(t_cpu.Permute({3, 2, 1, 0}).value().Narrow(3, 0, 2).value().CopyFrom(x.Narrow(3, 0, 2).value()));
    ExpectSame(t, t_cpu, "host to strided device");
    ExpectSame(xd.Transpose(0, 3).value().To(DefaultCpuAllocator()).value(),
               x.Transpose(0, 3).value().Contiguous().value(), "strided device to host");
    // Fill.
    ZS_ASSERT_OK(xd.Narrow(2, 1, 3).value().Fill(2.5));
    Tensor xc = x.Clone().value();
    ZS_ASSERT_OK(xc.Narrow(2, 1, 3).value().Fill(2.5));
    ExpectSame(xd, xc, "fill");
    // Float conversions on the device, strided.
    if (IsFloatingPoint(src_t)) {
      for (DType dst_t : kFloatDTypes) {
        ZS_ASSERT_OK_AND_ASSIGN(Tensor conv, Tensor::Empty({7, 3, 2, 5}, dst_t, &gpu));
        ZS_ASSERT_OK(conv.CopyFrom(xd.Permute({2, 0, 3, 1}).value()));
        ZS_ASSERT_OK_AND_ASSIGN(Tensor conv_cpu, Tensor::Empty({7, 3, 2, 5}, dst_t));
        // From xc: the device tensor was filled above.
        ZS_ASSERT_OK(conv_cpu.CopyFrom(xc.Permute({2, 0, 3, 1}).value()));
        ExpectSame(conv, conv_cpu, "convert");
      }
    }
  }
  // Overlapping source and destination (a shifted view of one buffer).
  const Tensor y = Iota({100}, DType::kF32);
  const Tensor yd = y.To(&gpu).value();
  ZS_ASSERT_OK(yd.Narrow(0, 10, 50).value().CopyFrom(yd.Narrow(0, 0, 50).value()));
  ZS_ASSERT_OK(y.Narrow(0, 10, 50).value().CopyFrom(y.Narrow(0, 0, 50).value()));
  ExpectSame(yd, y, "overlap");
}

}  // namespace
}  // namespace zeroshard
