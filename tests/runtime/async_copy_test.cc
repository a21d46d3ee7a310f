// CopyAsync: argument checks and host copies on the CPU; on a GPU, H2D and D2H
// through pinned memory on a stream, ordered by an event.
#include "zeroshard/runtime/cuda/async_copy.h"

#include <gtest/gtest.h>

#include <vector>

#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/cuda/pinned_host_allocator.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasCudaDevice;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

TEST(CopyAsync, ChecksArgumentsAndCopiesOnTheHost) {
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a, Tensor::Full({2, 3}, 1.5, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor b, Tensor::Zeros({2, 3}, DType::kF32));
  ZS_ASSERT_OK(CopyAsync(b, a, Stream::Cpu()));
  EXPECT_EQ(b.ToVector<float>().value()[5], 1.5f);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor h, Tensor::Zeros({2, 3}, DType::kBF16));
  EXPECT_THAT(CopyAsync(h, a, Stream::Cpu()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("differ in dtype or shape")));
  EXPECT_THAT(CopyAsync(b.Transpose(0, 1).value(), a.View({3, 2}).value(), Stream::Cpu()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be contiguous")));
  EXPECT_THAT(CopyAsync(a, a, Stream::Cpu()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlap")));
  // A CUDA-labelled tensor with the host stream: refused before any CUDA call.
  std::vector<float> mem(6);
  const Tensor g = Tensor::Wrap(mem.data(), {2, 3}, DType::kF32, Device::Cuda(0));
  EXPECT_THAT(CopyAsync(g, a, Stream::Cpu()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a tensor on cuda:0 copied on a stream of cpu")));
}

TEST(CopyAsync, RoundTripThroughPinnedMemoryOnAGpu) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator gpu(0);
  PinnedHostAllocator pinned;
  ZS_ASSERT_OK_AND_ASSIGN(Stream copy, Stream::Create(Device::Cuda(0)));
  ZS_ASSERT_OK_AND_ASSIGN(Event done, Event::Create(Device::Cuda(0)));
  const int64_t n = (1 << 24) + 3;
  ZS_ASSERT_OK_AND_ASSIGN(Tensor src, Tensor::Full({n}, 2.25, DType::kF32, &pinned));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dev, Tensor::Empty({n}, DType::kF32, &gpu));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dev2, Tensor::Empty({n}, DType::kF32, &gpu));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor back, Tensor::Zeros({n}, DType::kF32, &pinned));
  ZS_ASSERT_OK(CopyAsync(dev, src, copy));    // H2D
  ZS_ASSERT_OK(CopyAsync(dev2, dev, copy));   // D2D
  ZS_ASSERT_OK(CopyAsync(back, dev2, copy));  // D2H
  ZS_ASSERT_OK(done.Record(copy));
  ZS_ASSERT_OK(done.Synchronize());
  const float* p = static_cast<const float*>(back.raw_data());
  EXPECT_EQ(p[0], 2.25f);
  EXPECT_EQ(p[n - 1], 2.25f);
}

}  // namespace
}  // namespace zeroshard
