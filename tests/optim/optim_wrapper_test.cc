// OptimWrapper's contract pieces that training runs do not reach: parse_losses
// (SumLosses), MeanOverRanks, and the option errors. Accumulation, clipping,
// loss scaling and skipped steps are exercised through TrainStep by
// //tests/train:train_step_test (closed forms) and end to end by
// //tests/examples:embed_test and //tests/train:train_gpt_test.
#include "zeroshard/optim/optim_wrapper.h"

#include <gtest/gtest.h>

#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::optim {
namespace {

autograd::Variable Scalar(double v) {
  return autograd::Variable(*Tensor::Full({}, v, DType::kF32), /*requires_grad=*/true);
}

TEST(OptimWrapper, SumLossesAddsEveryEntryNamedLoss) {
  ZS_ASSERT_OK_AND_ASSIGN(autograd::Variable total,
                          SumLosses({{"loss_ce", Scalar(1.5)}, {"accuracy", Scalar(7)}, {"aux_loss", Scalar(0.25)}}));
  EXPECT_EQ(total.value().Item().value(), 1.75);
  const absl::Status none = SumLosses({{"accuracy", Scalar(1)}, {"top5", Scalar(2)}}).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.message().find("found: [accuracy, top5]"), std::string::npos) << none;
}

TEST(OptimWrapper, MeanOverRanksAveragesEachName) {
  std::vector<absl::Status> st = RunRanks(3, [](Communicator& comm) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(LogVars logs, MeanOverRanks(comm, {{"a", comm.rank() * 1.0}, {"b", 6.0 * comm.rank()}}));
    EXPECT_EQ(logs.size(), 2u);
    EXPECT_EQ(logs[0].first, "a");
    EXPECT_DOUBLE_EQ(logs[0].second, 1.0);
    EXPECT_DOUBLE_EQ(logs[1].second, 6.0);
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
}

TEST(OptimWrapper, BadOptionsAreErrors) {
  std::vector<absl::Status> st = RunRanks(1, [](Communicator& comm) -> absl::Status {
    auto model = std::make_shared<nn::Linear>(3, 2);
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(model, comm, ShardingOptions{}));
    const absl::Status a = OptimWrapper::Create(*sharded, {.accumulative_counts = 0}).status();
    EXPECT_NE(a.message().find("accumulative_counts must be >= 1, found 0"), std::string::npos) << a;
    const absl::Status c = OptimWrapper::Create(*sharded, {.clip_grad_max_norm = -1}).status();
    EXPECT_NE(c.message().find("clip_grad_max_norm"), std::string::npos) << c;
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace zeroshard::optim
