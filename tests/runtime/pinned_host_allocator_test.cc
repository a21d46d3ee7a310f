// Pinned host memory: a GPU test that skips without a device, and a check that
// a machine without one refuses cleanly (Status, not a crash).
#include "zeroshard/runtime/cuda/pinned_host_allocator.h"

#include <gtest/gtest.h>

#include "zeroshard/runtime/tensor.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasCudaDevice;

TEST(PinnedHostAllocator, WithoutADeviceAllocateIsRefused) {
  if (HasCudaDevice()) GTEST_SKIP() << "a CUDA device is present";
  PinnedHostAllocator pinned;
  EXPECT_EQ(Tensor::Empty({16}, DType::kF32, &pinned).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(pinned.last_failure().ok());
  EXPECT_EQ(pinned.stats().num_failed_allocs, 1);
  EXPECT_EQ(pinned.stats().bytes_in_use, 0);
}

TEST(PinnedHostAllocator, HostTensorsInPinnedMemory) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  PinnedHostAllocator pinned(/*capacity_bytes=*/1 << 20);
  {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::Full({1000}, 1.5, DType::kF32, &pinned));
    EXPECT_TRUE(x.device().is_cpu());
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y, x.Clone());
    ZS_ASSERT_OK_AND_ASSIGN(std::vector<float> v, y.ToVector<float>());
    EXPECT_EQ(v[999], 1.5f);
    EXPECT_EQ(pinned.stats().bytes_in_use, 8000);  // x and its clone (same allocator)
    EXPECT_EQ(Tensor::Empty({1 << 20}, DType::kF32, &pinned).status().code(),
              absl::StatusCode::kResourceExhausted);  // the capacity
  }
  EXPECT_EQ(pinned.stats().bytes_in_use, 0);
}

}  // namespace
}  // namespace zeroshard
