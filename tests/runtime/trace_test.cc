// TraceRecorder: the layout it writes (a process per rank, named rows, args,
// otherData) and the serialized form that carries one process's spans to
// another (Serialize / Merge), shifted by a clock offset.
#include "zeroshard/runtime/trace.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "zeroshard/tests/testing.h"

namespace zeroshard::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(TraceRecorderTest, WritesAProcessPerRankWithNamedRowsAndArgs) {
  TraceRecorder trace;
  trace.NameProcess(1, "rank 1");
  trace.NameProcess(1, "ignored: the first name wins");
  trace.NameRow({1, TraceRow::kCompute}, "compute");
  trace.AddSpan("forward \"h.0\"", "compute", {1, TraceRow::kCompute}, 10, 30.5);
  trace.AddSpan("all-gather h.0", "comm", {1, 3}, 12, 20, R"("op": "AllGather", "seq": 7)");
  trace.SetOtherData("clock_alignment", R"({"method": "one clock"})");
  EXPECT_EQ(trace.size(), 2u);
  EXPECT_EQ(trace.TotalUs("compute"), 20.5);
  EXPECT_EQ(trace.TotalUs("comm", 1), 8);
  EXPECT_EQ(trace.TotalUs("comm", 0), 0);
  const std::string path = ::testing::TempDir() + "/trace_test.json";
  ZS_ASSERT_OK(trace.WriteJson(path));
  const std::string json = ReadFile(path);
  EXPECT_NE(json.find(R"({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "rank 1"}})"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"({"name": "thread_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "compute"}})"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"({"name": "forward \"h.0\"", "cat": "compute", "ph": "X", "ts": 10.000, "dur": 20.500, )"
                      R"("pid": 1, "tid": 0})"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("pid": 1, "tid": 3, "args": {"op": "AllGather", "seq": 7}})"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("otherData": {"clock_alignment": {"method": "one clock"}})"), std::string::npos) << json;
  EXPECT_EQ(json.find("ignored"), std::string::npos);
}

TEST(TraceRecorderTest, MergesAnotherRecordersSpansShifted) {
  TraceRecorder remote;
  remote.NameProcess(1, "rank 1");
  remote.NameRow({1, 2}, "shard group (2 ranks)");
  remote.AddSpan("all-gather h.0", "comm", {1, 2}, 100, 150, R"("seq": 3)");
  remote.AddSpan("step 2", "step", {1, TraceRow::kCompute}, 90, 400);
  TraceRecorder local;
  local.AddSpan("step 2", "step", {0, TraceRow::kCompute}, 5, 300);
  // Shifting by -37.25 (exact in binary) moves every start by exactly that.
  ZS_ASSERT_OK(local.Merge(remote.Serialize(-37.25)));
  const std::vector<TraceRecorder::Span> spans = local.spans();
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[1].name, "all-gather h.0");
  EXPECT_EQ(spans[1].category, "comm");
  EXPECT_EQ(spans[1].row, (TraceRow{1, 2}));
  EXPECT_EQ(spans[1].start_us, 100 - 37.25);
  EXPECT_EQ(spans[1].dur_us, 50);
  EXPECT_EQ(spans[1].args, R"("seq": 3)");
  EXPECT_EQ(spans[2].start_us, 90 - 37.25);
  EXPECT_EQ(spans[2].dur_us, 310);
  const std::string path = ::testing::TempDir() + "/trace_merged.json";
  ZS_ASSERT_OK(local.WriteJson(path));
  EXPECT_NE(ReadFile(path).find(R"j("tid": 2, "args": {"name": "shard group (2 ranks)"}})j"), std::string::npos);
}

TEST(TraceRecorderTest, RefusesMalformedSerializedBytes) {
  TraceRecorder remote;
  remote.AddSpan("x", "compute", {1, 0}, 0, 1);
  const std::string bytes = remote.Serialize();
  TraceRecorder local;
  EXPECT_THAT(local.Merge("not a trace"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("expected a serialized trace starting with")));
  EXPECT_THAT(local.Merge(bytes.substr(0, bytes.size() - 3)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("'S' record at byte 8")));
  EXPECT_THAT(local.Merge(bytes + "Z"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("expected a record tag (P, R, O or S)")));
  EXPECT_EQ(local.size(), 0u);  // nothing of a malformed input is added
}

TEST(TraceRecorderTest, ScopedSpanRecordsNothingWithoutARecorder) {
  { ScopedSpan off(nullptr, "step 0", "step", {0, TraceRow::kCompute}); }
  TraceRecorder trace;
  { ScopedSpan on(&trace, "step 0", "step", {2, TraceRow::kCompute}); }
  ASSERT_EQ(trace.size(), 1u);
  EXPECT_EQ(trace.spans()[0].row, (TraceRow{2, TraceRow::kCompute}));
  EXPECT_GE(trace.spans()[0].dur_us, 0);
}

}  // namespace
}  // namespace zeroshard::testing
