// DeviceSchedule on the CPU: the free-event queue's bookkeeping (CPU events
// complete when recorded, so the limiter never has to block: it only drops
// completed marks), and the host forms of Await and Copy. The GPU paths run in
// cuda_sharded_model_test.
#include "zeroshard/sharding/device_schedule.h"

#include <gtest/gtest.h>

#include "zeroshard/collectives/work.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

TEST(FreeEventQueue, CompletedFreesAreDroppedWithoutWaiting) {
  FreeEventQueue q(/*max_pending=*/2);
  const Stream host = Stream::Cpu();
  ZS_ASSERT_OK(q.Enqueue(host));
  ZS_ASSERT_OK(q.Enqueue(host));
  ZS_ASSERT_OK(q.Enqueue(host));
  EXPECT_EQ(q.pending(), 3);
  ZS_ASSERT_OK(q.WaitIfNeeded());
  EXPECT_EQ(q.pending(), 0);  // every CPU event has completed
  EXPECT_EQ(q.waits(), 0);
}

TEST(FreeEventQueue, NoLimitRecordsNothing) {
  FreeEventQueue q(0);
  ZS_ASSERT_OK(q.Enqueue(Stream::Cpu()));
  EXPECT_EQ(q.pending(), 0);
  ZS_ASSERT_OK(q.WaitIfNeeded());
}

TEST(DeviceSchedule, HostFormsOnTheCpu) {
  ZS_ASSERT_OK_AND_ASSIGN(auto s, DeviceSchedule::Create(Device::Cpu(), /*limit_all_gathers=*/2));
  EXPECT_FALSE(s->on_gpu());
  EXPECT_TRUE(s->compute().device().is_cpu());
  EXPECT_EQ(s->Collective().stream, &s->compute());
  // The limiter is off on the CPU (gathers there are bounded by the unit count alone).
  ZS_ASSERT_OK(s->AfterFree());
  EXPECT_EQ(s->frees().pending(), 0);
  // Await waits for host work and passes its status on.
  auto ok = HostWork::Done(absl::OkStatus());
  ZS_EXPECT_OK(s->Await(*ok));
  auto failed = HostWork::Done(absl::InternalError("peer gone"));
  EXPECT_EQ(s->Await(*failed).code(), absl::StatusCode::kInternal);
  // Copy converts dtypes on the host.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor src, Tensor::FromVector(std::vector<float>{1.5f, -2.0f, 3.25f}, {3}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor dst, Tensor::Empty({3}, DType::kBF16));
  ZS_ASSERT_OK(s->Copy(dst, src));
  EXPECT_EQ(dst.ToVector<float>().value(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
}

}  // namespace
}  // namespace zeroshard
