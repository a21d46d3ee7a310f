#include "zeroshard/runtime/stream.h"

#include <gtest/gtest.h>

#include <thread>

#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasCudaDevice;

TEST(Stream, CpuEventsCompleteWhenRecordedAndTime) {
  Stream s = Stream::Cpu();
  ZS_ASSERT_OK(s.Synchronize());
  ZS_ASSERT_OK_AND_ASSIGN(Event start, Event::Create(Device::Cpu(), true));
  ZS_ASSERT_OK_AND_ASSIGN(Event end, Event::Create(Device::Cpu(), true));
  ZS_ASSERT_OK(start.Record(s));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ZS_ASSERT_OK(end.Record(s));
  EXPECT_TRUE(end.Query().value());
  ZS_ASSERT_OK(end.Block(s));
  ZS_ASSERT_OK_AND_ASSIGN(float ms, Event::ElapsedMs(start, end));
  EXPECT_GE(ms, 19.0f);
  EXPECT_LT(ms, 2000.0f);
}

TEST(Stream, CudaStreamRoundTrip) {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  ZS_ASSERT_OK_AND_ASSIGN(Stream s, Stream::Create(Device::Cuda(0)));
  ZS_ASSERT_OK_AND_ASSIGN(Event e, Event::Create(Device::Cuda(0), true));
  CudaAllocator gpu(0);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::Full({1000}, 2.5, DType::kBF16, &gpu));
  ZS_ASSERT_OK(e.Record(s));
  ZS_ASSERT_OK(e.Synchronize());
  EXPECT_TRUE(e.Query().value());
  ZS_ASSERT_OK_AND_ASSIGN(std::vector<float> v, x.ToVector<float>());
  EXPECT_EQ(v[999], 2.5f);
  EXPECT_EQ(gpu.stats().bytes_in_use, 2000);
}

TEST(Stream, WithoutADeviceCudaCallsFailCleanly) {
  if (HasCudaDevice()) GTEST_SKIP() << "a CUDA device is present";
  CudaAllocator gpu(0);
  absl::StatusOr<Tensor> t = Tensor::Empty({4}, DType::kF32, &gpu);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
  EXPECT_FALSE(Stream::Create(Device::Cuda(0)).ok());
}

}  // namespace
}  // namespace zeroshard
