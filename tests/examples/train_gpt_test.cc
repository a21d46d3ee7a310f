// The main job's loop trains: a small GPT on the bundled corpus for a few
// steps over 2 in-process ranks lowers the loss, and the same run is bitwise
// repeatable.
#include <gtest/gtest.h>

#include "collectives/local_communicator.h"
#include "examples/trainer.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

TrainOptions Small() {
  TrainOptions o;
  o.model = nn::GptConfig{.vocab_size = 256, .block_size = 32, .n_layer = 2, .n_head = 2, .n_embd = 32};
  o.data = "data/tinyshakespeare.txt";
  o.batch_size = 4;
  o.steps = 12;
  o.lr.lr = 3e-3;
  o.lr.warmup_steps = 2;
  o.lr.decay_steps = 12;
  o.log_every = 4;
  o.eval_every = 0;
  o.eval_iters = 2;
  o.sample_tokens = 20;
  o.sharding.wrap = WrapPolicy::ByType({"Block"});
  return o;
}

TrainSummary Train(const TrainOptions& o, int world) {
  TrainSummary s;
  std::vector<absl::Status> st = RunRanks(world, [&](Communicator& comm) { return RunTraining(o, comm, &s); });
  for (const absl::Status& x : st) EXPECT_TRUE(x.ok()) << x;
  return s;
}

TEST(TrainGpt, LossFallsAndRunsRepeat) {
  const TrainSummary a = Train(Small(), 2);
  ASSERT_EQ(a.losses.size(), 12u);
  EXPECT_LT(a.losses.back(), a.losses.front() - 0.5);
  EXPECT_GT(a.unigram_entropy, 3.0);
  EXPECT_GT(a.peak_bytes, 0);
  const TrainSummary b = Train(Small(), 2);
  EXPECT_EQ(a.losses, b.losses);
}

TEST(TrainGpt, BadOptionsAreStatusErrors) {
  TrainOptions o = Small();
  o.data = "data/no_such_file.txt";
  std::vector<absl::Status> st = RunRanks(1, [&](Communicator& comm) { return RunTraining(o, comm); });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kNotFound);
  o = Small();
  o.model.vocab_size = 100;  // the corpus has bytes above 99
  st = RunRanks(1, [&](Communicator& comm) { return RunTraining(o, comm); });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zeroshard
