// Traces of collectives: each communicator's spans as the backend ran them
// (Note [Communication spans], collectives/communicator.h), and the merged
// trace of a multi-process run (Note [Merged traces], trace_merge.h): the
// clock offset estimator on synthetic clocks with known skews, and spans of
// ranks with separate recorders merged on rank 0.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/work.h"
#include "zeroshard/collectives/trace_merge.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/trace.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::testing {
namespace {

// ================================================================ communication spans

// The spans of `row` in `category`, in start order.
std::vector<TraceRecorder::Span> SpansOn(const TraceRecorder& trace, TraceRow row,
                                         const std::string& category = "comm") {
  std::vector<TraceRecorder::Span> out;
  for (const TraceRecorder::Span& s : trace.spans()) {
    if (s.row == row && s.category == category) out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.start_us < b.start_us; });
  return out;
}

TEST(CommunicationSpansTest, LieBetweenIssueAndObservedCompletionOnARowPerCommunicator) {
  TraceRecorder trace;  // one clock for both in-process ranks
  struct Observed {
    double issue_us = 0, done_us = 0;
    TraceRow world, sub;
  };
  std::vector<Observed> seen(2);
  std::vector<absl::Status> st = RunRanks(2, [&](Communicator& comm) -> absl::Status {
    // Split before tracing starts: the group is traced with its parent.
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.Split(/*color=*/0, comm.rank()));
    comm.set_trace(&trace, comm.rank());
    Observed& o = seen[comm.rank()];
    ZS_ASSIGN_OR_RETURN(Tensor in, Tensor::Full({64}, comm.rank(), DType::kF32));
    ZS_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({128}, DType::kF32));
    o.issue_us = trace.NowUs();
    ZS_ASSIGN_OR_RETURN(auto work, comm.AllGatherAsync(in, out, CollectiveOptions{.trace_label = "all-gather u1"}));
    ZS_RETURN_IF_ERROR(work->Wait());
    o.done_us = trace.NowUs();
    ZS_RETURN_IF_ERROR(sub->AllReduce(in));  // no label: named by its op
    o.world = comm.trace_row();
    o.sub = sub->trace_row();
    comm.set_trace(nullptr, comm.rank());
    return sub->Barrier();  // not traced any more
  });
  for (const absl::Status& s : st) ZS_ASSERT_OK(s);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    const Observed& o = seen[r];
    EXPECT_EQ(o.world, (TraceRow{r, TraceRow::kFirstStream}));
    EXPECT_EQ(o.sub, (TraceRow{r, TraceRow::kFirstStream + 1}));
    const std::vector<TraceRecorder::Span> world = SpansOn(trace, o.world);
    ASSERT_EQ(world.size(), 1u);
    EXPECT_EQ(world[0].name, "all-gather u1");
    EXPECT_EQ(world[0].category, "comm");
    // The backend started after the issue and was done before Wait returned.
    EXPECT_GE(world[0].start_us, o.issue_us);
    EXPECT_LE(world[0].start_us + world[0].dur_us, o.done_us);
    // Split was seq 1; 64 f32 per rank: the ring sends (2-1) * 256 bytes.
    const std::string args = R"("op": "AllGather", "seq": 2, "dtype": "f32", "count": 64, "bytes": 256, )";
    EXPECT_EQ(world[0].args.substr(0, args.size()), args);
    // The in-process backend marks when both ranks had arrived: the comm span
    // starts there, and the wait before it, if any, is a "peers" span that
    // ends where the transfer starts (Note [Communication spans]).
    EXPECT_NE(world[0].args.find("\"peers_arrived_us\": "), std::string::npos) << world[0].args;
    const std::vector<TraceRecorder::Span> waited = SpansOn(trace, o.world, "peers");
    ASSERT_LE(waited.size(), 1u);
    for (const TraceRecorder::Span& w : waited) {
      EXPECT_EQ(w.name, "wait for peers: all-gather u1");
      EXPECT_GE(w.start_us, o.issue_us);
      EXPECT_DOUBLE_EQ(w.start_us + w.dur_us, world[0].start_us);  // (a - b) + b: within an ulp
    }
    const std::vector<TraceRecorder::Span> sub = SpansOn(trace, o.sub);
    ASSERT_EQ(sub.size(), 1u);  // the barrier after set_trace(nullptr) is not there
    EXPECT_EQ(sub[0].name, "AllReduce");
    EXPECT_GE(sub[0].start_us, world[0].start_us + world[0].dur_us);
  }
  const std::string path = ::testing::TempDir() + "/comm_spans.json";
  ZS_ASSERT_OK(trace.WriteJson(path));
  std::FILE* f = std::fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[4096];
  const std::string json(buf, std::fread(buf, 1, sizeof buf, f));
  std::fclose(f);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(json.find(absl::StrCat(R"({"name": "thread_name", "ph": "M", "pid": )", r,
                                     R"j(, "tid": 2, "args": {"name": "world (2 ranks)"}})j")),
              std::string::npos)
        << json;
    EXPECT_NE(json.find(absl::StrCat(R"({"name": "thread_name", "ph": "M", "pid": )", r,
                                     R"j(, "tid": 3, "args": {"name": "group of 2 ranks (split #1 of row 2, color 0)"}})j")),
              std::string::npos)
        << json;
  }
}

// A one-rank backend that reports its marks at scripted times on the trace's
// clock: MarkRunning at 100 us, MarkPeersArrived at 150 us saying the last peer
// arrived `ago` before, MarkDone at 170 us.
class ScriptedCommunicator final : public Communicator {
 public:
  ScriptedCommunicator(double* clock_us, absl::Duration ago)
      : Communicator(0, 1, Device::Cpu(), CommunicatorOptions{}), clock_us_(clock_us), ago_(ago) {}
  absl::string_view backend() const override { return "scripted"; }

 protected:
  absl::StatusOr<std::shared_ptr<Work>> Launch(CollectiveCall call) override {
    *clock_us_ = 100;
    MarkRunning(call.desc);
    *clock_us_ = 150;
    MarkPeersArrived(call.desc, ago_);
    *clock_us_ = 170;
    return std::shared_ptr<Work>(HostWork::Done(MarkDone(call.desc, absl::OkStatus())));
  }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(const CollectiveDesc&) override {
    return absl::UnimplementedError("scripted: no split");
  }

 private:
  double* clock_us_;
  absl::Duration ago_;
};

// Note [Communication spans]: a backend that learns of the last arrival late
// (its thread was not running then) says how long ago it was; the transfer
// starts there, never before the rank's own start.
TEST(CommunicationSpansTest, PeersArrivedAgoMovesTheTransfersStartBack) {
  for (const auto& [ago_us, peers_end_us] : {std::pair{0.0, 150.0}, {20.0, 130.0}, {80.0, 100.0}}) {
    SCOPED_TRACE(absl::StrCat("ago ", ago_us, " us"));
    double clock_us = 0;
    TraceRecorder trace;
    trace.set_clock([&clock_us] { return clock_us; });
    ScriptedCommunicator comm(&clock_us, absl::Microseconds(ago_us));
    comm.set_trace(&trace, 0);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor in, Tensor::Full({4}, 1, DType::kF32));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Zeros({4}, DType::kF32));
    ZS_ASSERT_OK(comm.AllGather(in, out));
    const std::vector<TraceRecorder::Span> transfer = SpansOn(trace, comm.trace_row());
    ASSERT_EQ(transfer.size(), 1u);
    // Times are small integers: exact in double.
    EXPECT_EQ(transfer[0].start_us, peers_end_us);
    EXPECT_EQ(transfer[0].start_us + transfer[0].dur_us, 170.0);
    const std::vector<TraceRecorder::Span> peers = SpansOn(trace, comm.trace_row(), "peers");
    if (peers_end_us == 100.0) {
      EXPECT_TRUE(peers.empty());  // clamped to the start: no wait for peers at all
    } else {
      ASSERT_EQ(peers.size(), 1u);
      EXPECT_EQ(peers[0].start_us, 100.0);
      EXPECT_EQ(peers[0].start_us + peers[0].dur_us, peers_end_us);
    }
  }
}

// ================================================================ clock offsets

// Rank 0's clock reads true time s; this rank's reads s - theta. A sample sent
// at true time s reaches rank 0 after a, comes back after b more:
//   t_send = s - theta, t_root = s + a, t_recv = s + a + b - theta
// so the midpoint estimate is theta + (a - b) / 2 and its bound (a + b) / 2.
ClockSample Synthetic(double theta, double s, double a, double b) {
  return ClockSample{.t_send_us = s - theta, .t_root_us = s + a, .t_recv_us = s + a + b - theta};
}

TEST(ClockOffsetTest, TakesTheShortestRoundTripsMidpoint) {
  const double theta = 1234.5;
  const std::vector<ClockSample> samples = {Synthetic(theta, 0, 40, 60),      // round trip 100
                                            Synthetic(theta, 1000, 3, 9),     // 12: the one used
                                            Synthetic(theta, 2000, 20, 2)};   // 22
  ZS_ASSERT_OK_AND_ASSIGN(ClockOffset o, EstimateClockOffset(samples));
  // theta + (3 - 9) / 2 and (3 + 9) / 2; halves of small integers: exact in double.
  EXPECT_EQ(o.offset_us, 1231.5);
  EXPECT_EQ(o.bound_us, 6);
  EXPECT_EQ(o.rounds, 3);
  EXPECT_LE(std::abs(o.offset_us - theta), o.bound_us);
}

TEST(ClockOffsetTest, ErrorStaysWithinTheBoundForAnySplitOfTheRoundTrip) {
  // |(a - b) / 2| <= (a + b) / 2 for a, b >= 0: whatever the asymmetry of the
  // two directions, the true offset lies within the bound. Skews from -1 s to
  // +1 s, one-way delays 0..997 us, quarter microseconds (exact in double).
  for (int i = 0; i < 200; ++i) {
    const double theta = (i * 7919 % 2000001 - 1000000) + 0.25;
    const double a = i * 37 % 998, b = i * 53 % 997 + 0.5;
    ZS_ASSERT_OK_AND_ASSIGN(ClockOffset o, EstimateClockOffset({Synthetic(theta, 1e6 + i, a, b)}));
    EXPECT_EQ(o.offset_us, theta + (a - b) / 2) << i;
    EXPECT_EQ(o.bound_us, (a + b) / 2) << i;
    EXPECT_LE(std::abs(o.offset_us - theta), o.bound_us) << i;
  }
}

TEST(ClockOffsetTest, RefusesNoSamplesAndTimeGoingBackwards) {
  EXPECT_THAT(EstimateClockOffset({}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("found none")));
  EXPECT_THAT(EstimateClockOffset({ClockSample{.t_send_us = 10, .t_root_us = 5, .t_recv_us = 9}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sample 0 was received at 9.000 us, before it was sent at 10.000 us")));
}

// Each rank's recorder reads one steady clock plus a skew of its own, so the
// true offset to rank 0 is skew[0] - skew[r]. Note [Merged traces]: the
// protocol's causality puts it within the bound, however the threads are
// scheduled (the bound is what a loaded machine widens, not the error).
const std::vector<double> kSkewUs = {0, -5000.25, 250000.5};

TEST(ClockOffsetTest, MeasuredOffsetsOfSkewedClocksAreWithinTheirBounds) {
  TraceRecorder base;
  std::vector<ClockOffset> offsets(kSkewUs.size());
  std::vector<absl::Status> st = RunRanks(static_cast<int>(kSkewUs.size()), [&](Communicator& comm) -> absl::Status {
    TraceRecorder clock;
    const double skew = kSkewUs[comm.rank()];
    clock.set_clock([&base, skew] { return base.NowUs() + skew; });
    ZS_ASSIGN_OR_RETURN(offsets[comm.rank()], MeasureClockOffset(comm, clock, /*rounds=*/5));
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) ZS_ASSERT_OK(s);
  EXPECT_EQ(offsets[0].offset_us, 0);
  EXPECT_EQ(offsets[0].bound_us, 0);
  for (size_t r = 1; r < kSkewUs.size(); ++r) {
    const double truth = kSkewUs[0] - kSkewUs[r];
    EXPECT_EQ(offsets[r].rounds, 5);
    EXPECT_GE(offsets[r].bound_us, 0);
    // + 1e-6: the clock values are sums of doubles near 3e5 us (rounding ~1e-10).
    EXPECT_LE(std::abs(offsets[r].offset_us - truth), offsets[r].bound_us + 1e-6)
        << "rank " << r << ": estimated " << offsets[r].offset_us << ", true " << truth;
  }
  EXPECT_THAT(RunRanks(1, [&](Communicator& comm) { return MeasureClockOffset(comm, base, 0).status(); })[0],
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected rounds >= 1, found 0")));
}

TEST(GatherTraceTest, RankZeroGetsEveryRanksSpansOnItsClock) {
  TraceRecorder base;
  const int world = static_cast<int>(kSkewUs.size());
  std::vector<double> local_start(world);
  std::vector<ClockOffset> offsets(world);
  std::string written;
  std::vector<absl::Status> st = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    TraceRecorder trace;
    const double skew = kSkewUs[r];
    trace.set_clock([&base, skew] { return base.NowUs() + skew; });
    ZS_ASSIGN_OR_RETURN(offsets[r], MeasureClockOffset(comm, trace));
    trace.NameProcess(r, absl::StrCat("rank ", r));
    local_start[r] = trace.NowUs();
    trace.AddSpan(absl::StrCat("mark ", r), "compute", {r, TraceRow::kCompute}, local_start[r], local_start[r] + 10);
    ZS_RETURN_IF_ERROR(GatherTrace(comm, trace, offsets[r]));
    if (r != 0) {
      if (trace.size() != 1) return absl::InternalError("GatherTrace changed a rank other than 0");
      return absl::OkStatus();
    }
    if (trace.size() != static_cast<size_t>(world)) {
      return absl::InternalError(absl::StrCat("rank 0 has ", trace.size(), " spans, expected ", world));
    }
    for (const TraceRecorder::Span& s : trace.spans()) {
      const int from = s.row.pid;
      if (s.name != absl::StrCat("mark ", from)) return absl::InternalError("a span moved to another process");
      // Shifted by its rank's estimate; within the bound of rank 0's clock.
      const double truth = local_start[from] - kSkewUs[from] + kSkewUs[0];
      if (std::abs(s.start_us - (local_start[from] + offsets[from].offset_us)) > 1e-6 ||
          std::abs(s.start_us - truth) > offsets[from].bound_us + 1e-6) {
        return absl::InternalError(absl::StrFormat("rank %d's span at %.3f, local %.3f, offset %.3f +- %.3f", from,
                                                   s.start_us, local_start[from], offsets[from].offset_us,
                                                   offsets[from].bound_us));
      }
    }
    const std::string path = ::testing::TempDir() + "/gathered.json";
    ZS_RETURN_IF_ERROR(trace.WriteJson(path));
    std::FILE* f = std::fopen(path.c_str(), "r");
    char buf[8192];
    written.assign(buf, std::fread(buf, 1, sizeof buf, f));
    std::fclose(f);
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) ZS_ASSERT_OK(s);
  for (int r = 0; r < world; ++r) {
    EXPECT_NE(written.find(absl::StrCat(R"({"name": "process_name", "ph": "M", "pid": )", r,
                                        R"(, "args": {"name": "rank )", r, R"("}})")),
              std::string::npos)
        << written;
  }
  EXPECT_NE(written.find(R"("clock_alignment": {"method": "barrier and broadcast)"), std::string::npos) << written;
  EXPECT_NE(written.find(R"("offset_us": [0.000, )"), std::string::npos) << written;
}

}  // namespace
}  // namespace zeroshard::testing
