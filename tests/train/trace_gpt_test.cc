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

TrainOptions Tiny(const std::string& trace) {
  TrainOptions o;
  o.model = nn::GptConfig{.vocab_size = 256, .block_size = 32, .n_layer = 2, .n_head = 2, .n_embd = 32};
  o.data = "data/tinyshakespeare.txt";
  o.batch_size = 4;
  o.steps = 4;
  o.eval_every = 0;
  o.eval_iters = 1;
  o.sample_tokens = 0;
  o.sharding.wrap = WrapPolicy::ByType({"Block"});
  o.trace = trace;
  o.trace_from = 1;
  o.trace_steps = 2;
  return o;
}

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
