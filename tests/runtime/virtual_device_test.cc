// The virtual device (runtime/virtual_device.h): the GPU's clock rules (a
// launch after the host's issue and the stream's previous work, events,
// waits, synchronisation), the CPU's synchronous rules, the caching
// allocator's accounting without bytes, what reading a virtual tensor on
// the host gives, and the host side CPU offload uses (Note [Virtual host]).
// Times are sums of binary fractions (1/4, 1/8, ...) of a second, so every
// clock below is exact.
#include "zeroshard/runtime/virtual_device.h"

#include <gtest/gtest.h>

#include <vector>

#include "zeroshard/runtime/stream.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {
namespace {

// Launches cost the host 1/8 s; an op 1/4 s per 1e9 FLOPs; a host copy 1/2 s;
// a host kernel 1/2 s per 4000 bytes.
class FractionCost final : public VirtualCostModel {
 public:
  double OpSeconds(const OpCost& c) const override { return 0.25 * c.flops / 1e9; }
  double LaunchSeconds() const override { return 0.125; }
  double HostCopySeconds(int64_t) const override { return 0.5; }
  double HostOpSeconds(const OpCost& c) const override { return c.bytes / 8000; }
};

OpCost Op(double gflops) { return OpCost{.op = "Op", .flops = gflops * 1e9}; }

TEST(VirtualDevice, ParsesAndPrints) {
  EXPECT_EQ(Device::Virtual(3).ToString(), "virtual:3");
  absl::StatusOr<Device> d = ParseDevice("virtual:3");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, Device::Virtual(3));
  EXPECT_TRUE(d->is_accelerator());
  EXPECT_FALSE(ParseDevice("virtual:-1").ok());
}

TEST(VirtualDevice, LaunchesFollowTheGpusRules) {
  FractionCost cost;
  auto dev = VirtualDevice::Create(11, {.cost = &cost});
  ASSERT_TRUE(dev.ok()) << dev.status();
  VirtualDevice& d = **dev;
  // Two launches: the host pays 1/8 each and runs ahead; the stream runs them back to back.
  d.Launch(VirtualDevice::kCompute, Op(4));  // [0.125, 1.125]
  d.Launch(VirtualDevice::kCompute, Op(4));  // [1.125, 2.125]
  EXPECT_EQ(d.host_time(), 0.25);
  EXPECT_EQ(d.stream_time(VirtualDevice::kCompute), 2.125);
  // A second stream waits for an event recorded on compute, then runs its own work.
  absl::StatusOr<Stream> side = Stream::Create(d.device());
  ASSERT_TRUE(side.ok()) << side.status();
  absl::StatusOr<Event> e = Event::Create(d.device());
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(e->Record(Stream::Default(d.device())).ok());
  absl::StatusOr<bool> done = e->Query();
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(*done);  // the host (0.25) is behind the recorded point (2.125)
  ASSERT_TRUE(e->Block(*side).ok());
  const int s = VirtualStreamIndex(side->native_handle());
  EXPECT_EQ(d.stream_time(s), 2.125);
  // The host waits for the event: its clock jumps; the event is then complete.
  ASSERT_TRUE(e->Synchronize().ok());
  EXPECT_EQ(d.host_time(), 2.125);
  done = e->Query();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  // Enqueued work waits for `after` and is busy only from `not_before`: the
  // wait for the late peers is a "peers" span of its own, then the transfer.
  EXPECT_EQ(d.Enqueue(s, "Collective", "comm", 0.5, /*after=*/2.5, 0, /*not_before=*/3.0), 3.5);
  EXPECT_EQ(d.Now(), 3.5);
  const std::vector<VirtualSpan> spans = d.spans();
  ASSERT_EQ(spans.size(), 4u);
  EXPECT_EQ(spans[2].category, "peers");
  EXPECT_EQ(spans[2].start, 2.5);  // from issue
  EXPECT_EQ(spans[2].end, 3.0);    // to the last peer's arrival
  EXPECT_EQ(spans[3].category, "comm");
  EXPECT_EQ(spans[3].start, 3.0);
  EXPECT_EQ(spans[3].end, 3.5);
  // Settle: every clock to the latest, the spans gone.
  d.Settle();
  EXPECT_EQ(d.host_time(), 3.5);
  EXPECT_EQ(d.stream_time(VirtualDevice::kCompute), 3.5);
  EXPECT_TRUE(d.spans().empty());
}

TEST(VirtualDevice, SynchronousDevicesMakeTheHostWait) {
  FractionCost cost;
  auto dev = VirtualDevice::Create(12, {.cost = &cost, .synchronous = true});
  ASSERT_TRUE(dev.ok()) << dev.status();
  VirtualDevice& d = **dev;
  d.Launch(VirtualDevice::kCompute, Op(4));  // the host waits: [0.125, 1.125]
  d.Launch(VirtualDevice::kCompute, Op(4));  // [1.25, 2.25]
  EXPECT_EQ(d.host_time(), 2.25);
  EXPECT_EQ(d.stream_time(VirtualDevice::kCompute), 2.25);
  // A wait of the compute stream is a wait of the host.
  d.StreamWait(VirtualDevice::kCompute, 3.0);
  EXPECT_EQ(d.host_time(), 3.0);
}

TEST(VirtualDevice, MemoryIsTheCachingAllocatorsAndReadsAreZeros) {
  FractionCost cost;
  auto dev = VirtualDevice::Create(13, {.cost = &cost});
  ASSERT_TRUE(dev.ok()) << dev.status();
  VirtualDevice& d = **dev;
  {
    // 1000 f32 = 4000 bytes, rounded to 512: 4096 allocated, a 2 MiB small-pool segment reserved.
    absl::StatusOr<Tensor> t = Tensor::Full({1000}, 3.0, DType::kF32, d.allocator());
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->device(), d.device());
    EXPECT_EQ(d.memory().allocated_bytes, 4096);
    EXPECT_EQ(d.memory().reserved_bytes, 2 << 20);
    EXPECT_EQ(d.allocator()->stats().bytes_in_use, 4000);
    // No bytes exist: the host reads zeros, and the read is a synchronising copy.
    absl::StatusOr<std::vector<float>> v = t->ToVector<float>();
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ((*v)[0], 0.0f);
    EXPECT_GE(d.host_time(), d.stream_time(VirtualDevice::kCompute));
  }
  EXPECT_EQ(d.memory().allocated_bytes, 0);
  EXPECT_EQ(d.memory().peak_allocated_bytes, 4096);
  EXPECT_EQ(d.memory().reserved_bytes, 2 << 20);  // cached, as the real allocator keeps it
}

TEST(VirtualDevice, AnIndexIsTakenOnceAndAGoneDeviceIsAnError) {
  FractionCost cost;
  auto a = VirtualDevice::Create(14, {.cost = &cost});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(VirtualDevice::Create(14, {.cost = &cost}).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(VirtualDevice::Create(15, {}).status().code(), absl::StatusCode::kInvalidArgument);
  a->reset();
  EXPECT_EQ(VirtualDevice::Find(14), nullptr);
  const absl::Status s = ChargeVirtual(Device::Virtual(14), Op(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("virtual:14"), std::string::npos) << s;
}

// Note [Virtual host]: host memory counted exactly and never held, host
// kernels on the host clock, transfers to the device on the device's clock.
TEST(VirtualDevice, TheHostSideCountsBytesAndRunsOnTheHostClock) {
  FractionCost cost;
  auto dev = VirtualDevice::Create(21, {.cost = &cost, .host_index = 22});
  ASSERT_TRUE(dev.ok()) << dev.status();
  VirtualDevice& d = **dev;
  const Device host = Device::Virtual(22);
  EXPECT_EQ(VirtualDevice::Find(22), &d);
  EXPECT_TRUE(d.IsHostSide(host));
  EXPECT_TRUE(IsHostMemory(host));
  EXPECT_TRUE(IsHostMemory(Device::Cpu()));
  EXPECT_FALSE(IsHostMemory(d.device()));
  EXPECT_TRUE(IsHostSideOf(host, d.device()));
  EXPECT_FALSE(IsHostSideOf(d.device(), host));
  EXPECT_EQ(VirtualDevice::Create(22, {.cost = &cost}).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(VirtualDevice::Create(23, {.cost = &cost, .host_index = 23}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.stream_name(d.host_stream()), "host");
  {
    // 1000 f32 on the host: 4000 bytes counted, no rounding, nothing on the device.
    absl::StatusOr<Tensor> h = Tensor::Empty({1000}, DType::kF32, d.host_allocator());
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->device(), host);
    EXPECT_EQ(d.host_allocator()->stats().bytes_in_use, 4000);
    EXPECT_EQ(d.memory().allocated_bytes, 0);
    // A fill is a host kernel: 4000 bytes written, 1/2 s of the host's clock, none of the device's.
    ASSERT_TRUE(h->Fill(1.0).ok());
    EXPECT_EQ(d.host_time(), 0.5);
    EXPECT_EQ(d.stream_time(VirtualDevice::kCompute), 0);
    const std::vector<VirtualSpan> spans = d.spans();
    ASSERT_EQ(spans.size(), 1u);
    EXPECT_EQ(spans[0].stream, d.host_stream());
    EXPECT_EQ(spans[0].category, "host");
    EXPECT_EQ(spans[0].end, 0.5);
    // To the device: a synchronous transfer (launch 1/8, copy 1/2 on compute after the host's 1/2).
    absl::StatusOr<Tensor> t = Tensor::Empty({1000}, DType::kF32, d.allocator());
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE(t->CopyFrom(*h).ok());
    EXPECT_EQ(d.stream_time(VirtualDevice::kCompute), 1.125);
    EXPECT_EQ(d.host_time(), 1.125);
    // The host reads its own memory: zeros, a host pass over the bytes (1/2 s).
    absl::StatusOr<std::vector<float>> v = h->ToVector<float>();
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ((*v)[999], 0.0f);
    EXPECT_EQ(d.host_time(), 1.625);
  }
  EXPECT_EQ(d.host_allocator()->stats().bytes_in_use, 0);
  EXPECT_EQ(d.host_allocator()->stats().peak_bytes_in_use, 4000);
  // A device without a host side has no host allocator, and nothing is a host of it.
  auto plain = VirtualDevice::Create(24, {.cost = &cost});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->host_allocator(), nullptr);
  EXPECT_FALSE(IsHostSideOf(host, (*plain)->device()));
  dev->reset();
  EXPECT_EQ(VirtualDevice::Find(22), nullptr);
  EXPECT_FALSE(IsHostMemory(host));
}

}  // namespace
}  // namespace zeroshard
