// The job's --trace over 2 in-process ranks, both ways the ranks can record:
// into one shared recorder (examples/train_gpt does this; one clock) and each
// into its own (clocks aligned and spans merged on rank 0, as MPI processes
// do). Both write one file with the same layout (tests/train/trace_checks.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/runtime/trace.h"
#include "zeroshard/tests/testing.h"
#include "zeroshard/tests/train/trace_checks.h"
#include "zeroshard/train/trainer.h"

namespace zeroshard::testing {
namespace {

TrainOptions Tiny(const std::string& trace) { return TinyTracedJob(trace); }

TEST(TraceGpt, SharedRecorderWritesAProcessPerRank) {
  const std::string path = ::testing::TempDir() + "/shared.json";
  TrainOptions o = Tiny(path);
  TraceRecorder trace;
  o.shared_trace = &trace;
  TrainSummary s;
  for (const absl::Status& st : RunRanks(2, [&](Communicator& comm) { return RunTraining(o, comm, &s); })) {
    ZS_ASSERT_OK(st);
  }
  ZS_EXPECT_OK(CheckMergedJobTrace(path, /*world=*/2, /*steps=*/2));
}

TEST(TraceGpt, RecordersOfTheirOwnAreMergedIntoTheSameLayout) {
  const std::string path = ::testing::TempDir() + "/merged.json";
  const TrainOptions o = Tiny(path);
  TrainSummary s;
  for (const absl::Status& st : RunRanks(2, [&](Communicator& comm) { return RunTraining(o, comm, &s); })) {
    ZS_ASSERT_OK(st);
  }
  ZS_EXPECT_OK(CheckMergedJobTrace(path, /*world=*/2, /*steps=*/2));
}

}  // namespace
}  // namespace zeroshard::testing
