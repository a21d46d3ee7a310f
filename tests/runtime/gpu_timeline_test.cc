// GpuTimeline (Note [GPU spans] in runtime/gpu_timeline.h): spans from CUDA
// events on the host clock, one host synchronisation per Resolve, a pool of
// events, NVTX ranges. Skips without a CUDA device; runs on the simulated one
// in `make sim-test`, where an event's time is the host clock at its record
// (tools/cuda/sim/fake_cudart.cc), so each GPU span also lies inside its launch.
#include "zeroshard/runtime/gpu_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/cuda/nvtx.h"
#include "zeroshard/runtime/stream.h"
#include "zeroshard/runtime/trace.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

bool OnSimulator() {
  absl::StatusOr<std::string> name = cuda::CudaDeviceName(0);
  return name.ok() && absl::StrContains(*name, "cuda_sim");
}

// The span's "clock_error_us" argument (-1 when absent).
double ClockError(const TraceRecorder::Span& s) {
  const std::string key = "\"clock_error_us\": ";
  const size_t at = s.args.find(key);
  double v = -1;
  if (at == std::string::npos) return v;
  const std::string rest = s.args.substr(at + key.size());
  if (!absl::SimpleAtod(rest.substr(0, rest.find_first_of(",}")), &v)) return -1;
  return v;
}

// Device memory to copy between, so that a span has work in it.
struct Buffers {
  void* a = nullptr;
  void* b = nullptr;
  size_t bytes = size_t{4} << 20;
  Buffers() {
    a = cuda::CudaMalloc(0, bytes).value();
    b = cuda::CudaMalloc(0, bytes).value();
  }
  ~Buffers() {
    (void)cuda::CudaFree(0, a);
    (void)cuda::CudaFree(0, b);
  }
};

struct Launch {
  std::string name;
  double host_start, host_end;
};

// `n` spans on `stream`, each one copy, with the host times around each.
std::vector<Launch> Copies(GpuTimeline& gpu, const Stream& stream, Buffers& buf, int n, TraceRow row,
                           const std::string& prefix) {
  std::vector<Launch> launches;
  for (int i = 0; i < n; ++i) {
    Launch l{.name = absl::StrCat(prefix, " ", i)};
    l.host_start = gpu.trace()->NowUs();
    GpuMark m = gpu.Begin(stream.native_handle(), l.name);
    EXPECT_TRUE(cuda::CudaMemcpy(buf.b, buf.a, buf.bytes, cuda::CopyKind::kDeviceToDevice, stream.native_handle()).ok());
    gpu.End(m, stream.native_handle(), l.name, "gpu op", row);
    l.host_end = gpu.trace()->NowUs();
    launches.push_back(l);
  }
  return launches;
}

TEST(GpuTimelineTest, SpansLandOnTheHostClockInStreamOrderAfterTheirLaunch) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  TraceRecorder trace;
  GpuTimeline gpu(Device::Cuda(0), &trace, /*pid=*/3, {});
  ASSERT_TRUE(gpu.records_events());
  ZS_ASSERT_OK_AND_ASSIGN(Stream stream, Stream::Create(Device::Cuda(0)));
  Buffers buf;
  const TraceRow row = TraceRow{3, TraceRow::kCompute}.Gpu();
  EXPECT_EQ(row.tid, 1000);
  const std::vector<Launch> launches = Copies(gpu, stream, buf, 5, row, "copy");
  ZS_ASSERT_OK(stream.Synchronize());  // the test's, so that every event has completed
  ZS_ASSERT_OK(gpu.Resolve());
  const std::vector<TraceRecorder::Span> spans = trace.spans();
  ASSERT_EQ(spans.size(), launches.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    const TraceRecorder::Span& s = spans[i];
    SCOPED_TRACE(s.name);
    EXPECT_EQ(s.name, launches[i].name);
    EXPECT_EQ(s.category, "gpu op");
    EXPECT_EQ(s.row, row);
    const double err = ClockError(s);
    // Half the reference's round trip plus the timer's 0.5 us: positive, and
    // far below a second on any machine.
    EXPECT_GE(err, 0.5);
    EXPECT_LT(err, 1e6);
    EXPECT_GE(s.dur_us, 0);
    // The device cannot start what the host has not launched.
    EXPECT_GE(s.start_us, launches[i].host_start - err);
    // The simulator runs the copy at its launch: the span ends before the launch returns.
    if (OnSimulator()) { EXPECT_LE(s.start_us + s.dur_us, launches[i].host_end + err); }
    // One stream: in launch order, without overlap (within the two spans' bounds).
    if (i > 0) {
      EXPECT_GE(s.start_us, spans[i - 1].start_us + spans[i - 1].dur_us - err - ClockError(spans[i - 1]));
    }
  }
  EXPECT_EQ(gpu.stats().spans, 5);
  EXPECT_EQ(gpu.stats().pending, 0);
}

TEST(GpuTimelineTest, ResolveSynchronisesOnceAndTheNextStepReusesTheEvents) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  TraceRecorder trace;
  GpuTimeline gpu(Device::Cuda(0), &trace, 0, {});
  ZS_ASSERT_OK_AND_ASSIGN(Stream stream, Stream::Create(Device::Cuda(0)));
  Buffers buf;
  const TraceRow row = TraceRow{0, TraceRow::kCompute}.Gpu();
  // Nothing pending: nothing to wait for.
  int64_t before = cuda::ThreadCudaCallCounts().host_syncs;
  ZS_ASSERT_OK(gpu.Resolve());
  EXPECT_EQ(cuda::ThreadCudaCallCounts().host_syncs, before);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    Copies(gpu, stream, buf, 4, row, "copy");
    ZS_ASSERT_OK(stream.Synchronize());
    before = cuda::ThreadCudaCallCounts().host_syncs;
    ZS_ASSERT_OK(gpu.Resolve());
    // The reference event's one wait (counted where the build counts: with CUDA).
    EXPECT_EQ(cuda::ThreadCudaCallCounts().host_syncs - before, cuda::BuiltWithCuda() ? 1 : 0);
    // 4 spans of 2 events and the reference: created in the first step, reused after.
    EXPECT_EQ(gpu.stats().events_created, 9);
    EXPECT_EQ(gpu.stats().resolves, step + 1);
  }
  EXPECT_EQ(trace.size(), 12u);
}

TEST(GpuTimelineTest, StreamsKeepTheirRowsAndDroppedMarksReturnTheirEvents) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  TraceRecorder trace;
  GpuTimeline gpu(Device::Cuda(0), &trace, 1, {});
  ZS_ASSERT_OK_AND_ASSIGN(Stream comm, Stream::Create(Device::Cuda(0)));
  ZS_ASSERT_OK_AND_ASSIGN(Stream other, Stream::Create(Device::Cuda(0)));
  Buffers buf;
  const TraceRow a{1, TraceRow::kGpuOffset + 2}, b{1, TraceRow::kGpuOffset + 3};
  Copies(gpu, comm, buf, 2, a, "all-gather");
  Copies(gpu, other, buf, 3, b, "reduce-scatter");
  GpuMark dropped = gpu.Begin(comm.native_handle(), "never ended");
  gpu.Drop(dropped);
  EXPECT_EQ(dropped.event, nullptr);
  ZS_ASSERT_OK(comm.Synchronize());
  ZS_ASSERT_OK(other.Synchronize());
  ZS_ASSERT_OK(gpu.Flush());
  int on_a = 0, on_b = 0;
  for (const TraceRecorder::Span& s : trace.spans()) {
    if (s.row == a) {
      ++on_a;
      EXPECT_TRUE(absl::StartsWith(s.name, "all-gather")) << s.name;
    }
    if (s.row == b) {
      ++on_b;
      EXPECT_TRUE(absl::StartsWith(s.name, "reduce-scatter")) << s.name;
    }
  }
  EXPECT_EQ(on_a, 2);
  EXPECT_EQ(on_b, 3);
  // 5 spans (10 events) and the dropped start, reused as the reference: 11.
  EXPECT_EQ(gpu.stats().events_created, 11);
}

TEST(GpuTimelineTest, WithoutEventsOnlyRangesAreKept) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  TraceRecorder keeps_nothing(TraceRecorder::DiscardSpans{});
  GpuTimeline gpu(Device::Cuda(0), &keeps_nothing, 0, {.events = false, .nvtx = true});
  EXPECT_FALSE(gpu.records_events());
  nvtx::ClearRecordedRanges();
  GpuMark outer = gpu.Begin(nullptr, "step 7");
  GpuMark inner = gpu.Begin(nullptr, "MatMul");
  EXPECT_EQ(outer.event, nullptr);
  gpu.End(inner, nullptr, "MatMul", "gpu op", TraceRow{0, 1000});
  const int64_t before = cuda::ThreadCudaCallCounts().host_syncs;
  ZS_ASSERT_OK(gpu.Resolve());
  EXPECT_EQ(cuda::ThreadCudaCallCounts().host_syncs, before);
  EXPECT_EQ(keeps_nothing.size(), 0u);
  EXPECT_EQ(gpu.stats().events_created, 0);
  if (!OnSimulator()) {
    SUCCEED() << "NVTX ranges are the profiler's here";
    return;
  }
  // The simulator's stand-in kept the ranges: "step 7" still open, "MatMul" closed.
  std::vector<nvtx::RecordedRange> r = nvtx::RecordedRanges();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].name, "step 7");
  EXPECT_FALSE(r[0].ended);
  EXPECT_EQ(r[1].name, "MatMul");
  EXPECT_TRUE(r[1].ended);
  gpu.Drop(outer);
  EXPECT_TRUE(nvtx::RecordedRanges()[0].ended);
  // Ranges off: none opened.
  GpuTimeline quiet(Device::Cuda(0), &keeps_nothing, 0, {.events = false, .nvtx = false});
  GpuMark m = quiet.Begin(nullptr, "unseen");
  quiet.Drop(m);
  EXPECT_EQ(nvtx::RecordedRanges().size(), 2u);
}

TEST(GpuTimelineTest, OnTheCpuNothingIsRecorded) {
  TraceRecorder trace;
  GpuTimeline gpu(Device::Cpu(), &trace, 0, {.events = true, .nvtx = false});
  EXPECT_FALSE(gpu.records_events());
  GpuMark m = gpu.Begin(nullptr, "op");
  EXPECT_EQ(m.event, nullptr);
  gpu.End(m, nullptr, "op", "gpu op", TraceRow{0, 1000});
  ZS_EXPECT_OK(gpu.Resolve());
  ZS_EXPECT_OK(gpu.Flush());
  EXPECT_EQ(trace.size(), 0u);
}

}  // namespace
}  // namespace zeroshard
