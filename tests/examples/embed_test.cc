// The embedding example (examples/embed/spiral.cc): a user's own Module
// trained through TrainStep / ValStep learns its task, and the sharded run
// equals the single-rank run of the same global batch (the example is also a
// parity test of OptimWrapper's accumulation, clipping and schedule).
#include <gtest/gtest.h>

#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/examples/embed/spiral.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

absl::StatusOr<example::SpiralResult> Train(int world, const example::SpiralOptions& o) {
  std::vector<example::SpiralResult> results(world);
  std::vector<absl::Status> statuses = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    absl::StatusOr<example::SpiralResult> r = example::RunSpiral(o, comm);
    if (!r.ok()) return r.status();
    results[comm.rank()] = *std::move(r);
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(results[r].losses, results[0].losses) << "rank " << r;
    EXPECT_EQ(results[r].val_accuracy, results[0].val_accuracy) << "rank " << r;
  }
  return results[0];
}

TEST(Embed, LearnsTheSpiralsOverFourRanks) {
  example::SpiralOptions o;
  o.batch_size = 32;
  o.steps = 300;
  ZS_ASSERT_OK_AND_ASSIGN(example::SpiralResult r, Train(4, o));
  EXPECT_LT(r.losses.back(), 0.1 * r.losses.front());
  EXPECT_GT(r.val_accuracy, 0.9);  // chance is 1/3
}

TEST(Embed, ShardedEqualsOneRankForEveryStrategyAndAccumulation) {
  for (ShardingStrategy strategy : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
                                    ShardingStrategy::kShardOptimizer, ShardingStrategy::kNoShard}) {
    for (int64_t accumulation : {1, 2}) {
      example::SpiralOptions o;
      o.steps = 20;
      o.accumulation = accumulation;
      o.batch_size = 16;
      example::SpiralOptions one = o;
      one.batch_size = 32;
      one.sharding.strategy = ShardingStrategy::kNoShard;
      o.sharding.strategy = strategy;
      ZS_ASSERT_OK_AND_ASSIGN(example::SpiralResult a, Train(1, one));
      ZS_ASSERT_OK_AND_ASSIGN(example::SpiralResult b, Train(2, o));
      ASSERT_EQ(a.losses.size(), b.losses.size());
      for (size_t i = 0; i < a.losses.size(); ++i) {
        EXPECT_NEAR(b.losses[i], a.losses[i], 1e-5 * std::abs(a.losses[i]))
            << ShardingStrategyName(strategy) << " accumulation " << accumulation << " step " << i;
      }
      EXPECT_NEAR(b.val_loss, a.val_loss, 1e-4 * a.val_loss);
    }
  }
}

}  // namespace
}  // namespace zeroshard
