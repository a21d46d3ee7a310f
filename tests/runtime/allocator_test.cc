#include "zeroshard/runtime/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "zeroshard/runtime/tensor.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

TEST(Allocator, AccountsCurrentPeakAndCounts) {
  CpuAllocator a(CpuAllocator::Options{.name = "test"});
  ZS_ASSERT_OK_AND_ASSIGN(void* p, a.Allocate(1000));
  ZS_ASSERT_OK_AND_ASSIGN(void* q, a.Allocate(24));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % Allocator::kAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % Allocator::kAlignment, 0u);
  EXPECT_EQ(a.stats().bytes_in_use, 1024);
  a.Deallocate(p, 1000);
  EXPECT_EQ(a.stats().bytes_in_use, 24);
  EXPECT_EQ(a.stats().peak_bytes_in_use, 1024);
  EXPECT_EQ(a.stats().num_allocs, 2);
  EXPECT_EQ(a.stats().num_frees, 1);
  EXPECT_EQ(a.stats().live_allocations(), 1);
  a.ResetPeak();
  EXPECT_EQ(a.stats().peak_bytes_in_use, 24);
  a.Deallocate(q, 24);
  EXPECT_EQ(a.stats().bytes_in_use, 0);
}

TEST(Allocator, ZeroBytesIsNullAndFree) {
  CpuAllocator a;
  ZS_ASSERT_OK_AND_ASSIGN(void* p, a.Allocate(0));
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(a.stats().num_allocs, 0);
}

TEST(Allocator, CapacityGivesResourceExhaustedNotACrash) {
  CpuAllocator a(CpuAllocator::Options{.name = "budget", .capacity_bytes = 1 << 20});
  ZS_ASSERT_OK_AND_ASSIGN(void* p, a.Allocate(700 << 10));
  EXPECT_THAT(a.Allocate(400 << 10),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("cpu allocator 'budget': out of memory: requested 400.00 KiB "
                                 "with 700.00 KiB in use of a capacity of 1.00 MiB")));
  EXPECT_EQ(a.stats().num_failed_allocs, 1);
  EXPECT_EQ(a.stats().bytes_in_use, 700 << 10);  // the failure reserved nothing
  ZS_ASSERT_OK_AND_ASSIGN(void* q, a.Allocate(300 << 10));  // exactly up to the limit
  a.Deallocate(q, 300 << 10);
  a.Deallocate(p, 700 << 10);
  a.SetCapacity(0);
  ZS_ASSERT_OK_AND_ASSIGN(void* big, a.Allocate(8 << 20));
  a.Deallocate(big, 8 << 20);
}

TEST(Allocator, TensorsAllocateFromTheirAllocatorAndGiveBack) {
  CpuAllocator a(CpuAllocator::Options{.name = "rank0", .capacity_bytes = 4096});
  {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::Zeros({16, 16}, DType::kF32, &a));  // 1 KiB
    EXPECT_EQ(t.allocator(), &a);
    EXPECT_EQ(a.stats().bytes_in_use, 1024);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor view, t.Narrow(0, 2, 3));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor copy, view.Clone());  // same allocator as the source
    EXPECT_EQ(a.stats().bytes_in_use, 1024 + 3 * 16 * 4);
    EXPECT_THAT(Tensor::Empty({64, 64}, DType::kF32, &a),
                StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("out of memory")));
  }
  EXPECT_EQ(a.stats().bytes_in_use, 0);
  EXPECT_EQ(a.stats().live_allocations(), 0);
}

TEST(Allocator, ConcurrentAllocationsNeverExceedCapacity) {
  CpuAllocator a(CpuAllocator::Options{.capacity_bytes = 64 * 1024});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        absl::StatusOr<void*> p = a.Allocate(4096);
        if (p.ok()) a.Deallocate(*p, 4096);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(a.stats().peak_bytes_in_use, 64 * 1024);
  EXPECT_EQ(a.stats().bytes_in_use, 0);
}

TEST(Allocator, FormatBytes) {
  EXPECT_EQ(FormatBytes(12), "12 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 30), "3.00 GiB");
}

}  // namespace
}  // namespace zeroshard

namespace zeroshard {
namespace {

TEST(Storage, ReleaseAndReallocateKeepViewsValid) {
  CpuAllocator a(CpuAllocator::Options{.name = "gathered"});
  ZS_ASSERT_OK_AND_ASSIGN(Tensor full, Tensor::Zeros({100}, DType::kF32, &a));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor view, full.Narrow(0, 10, 5));  // e.g. saved by autograd
  EXPECT_EQ(a.stats().bytes_in_use, 400);
  ZS_ASSERT_OK(full.storage()->Release());
  EXPECT_EQ(a.stats().bytes_in_use, 0);
  EXPECT_TRUE(view.storage()->is_released());
  ZS_ASSERT_OK(full.storage()->Reallocate());
  ZS_ASSERT_OK(full.Fill(3.0));
  EXPECT_EQ(view.ToVector<float>().value(), std::vector<float>(5, 3.0f));  // the view sees new bytes
  EXPECT_EQ(a.stats().bytes_in_use, 400);
  ZS_ASSERT_OK(full.storage()->Release());  // destroying a released storage frees nothing twice
}

}  // namespace
}  // namespace zeroshard
