// Activation checkpointing: gradients equal the un-checkpointed run bit for
// bit, dropout replays its stream, the recompute re-runs module hooks, and
// parameters inside the checkpoint get their gradients.
#include "zeroshard/autograd/checkpoint.h"

#include <gtest/gtest.h>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::autograd {
namespace {

using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::ToDoubles;

struct RunResult {
  std::vector<double> dx, dw, db, y;
  uint64_t offset_after;
  int forward_calls;
};

RunResult RunModel(bool checkpoint) {
  auto fc = std::make_shared<nn::Linear>(8, 8, true, nn::InitSpec::Normal(0, 0.3f));
  EXPECT_TRUE(fc->Materialize(11).ok());
  int calls = 0;
  fc->AddPreForwardHook([&](nn::Module&) {
    ++calls;
    return absl::OkStatus();
  });
  PhiloxGenerator gen{.seed = 99};
  Variable x(RandomTensor({4, 8}, DType::kF32, -1, 1, 5), true);
  // block(x) = gelu(fc(dropout(x))) + x
  auto block = [&](const std::vector<Variable>& in) -> absl::StatusOr<std::vector<Variable>> {
    ZS_ASSIGN_OR_RETURN(Variable d, ops::Dropout(in[0], 0.2, gen, true));
    ZS_ASSIGN_OR_RETURN(Variable h, (*fc)(d));
    ZS_ASSIGN_OR_RETURN(Variable a, ops::Gelu(h));
    ZS_ASSIGN_OR_RETURN(Variable r, ops::Add(a, in[0]));
    return std::vector<Variable>{r};
  };
  absl::StatusOr<std::vector<Variable>> y =
      checkpoint ? Checkpoint(block, {x}, {.generators = {&gen}}) : block({x});
  EXPECT_TRUE(y.ok()) << y.status();
  absl::StatusOr<Variable> sq = ops::Square((*y)[0]);
  absl::StatusOr<Variable> loss = ops::SumAll(*sq);
  EXPECT_TRUE(Backward(*loss).ok());
  return RunResult{ToDoubles(x.grad()), ToDoubles(fc->weight().grad()), ToDoubles(fc->bias().grad()),
             ToDoubles((*y)[0].value()), gen.offset, calls};
}

TEST(Checkpoint, GradientsAreBitIdenticalToTheNormalRun) {
  const RunResult plain = RunModel(false);
  const RunResult ckpt = RunModel(true);
  EXPECT_EQ(ckpt.y, plain.y);
  EXPECT_EQ(ckpt.dx, plain.dx);
  EXPECT_EQ(ckpt.dw, plain.dw);
  EXPECT_EQ(ckpt.db, plain.db);
  // The generator ends where the plain run left it (the replay is undone).
  EXPECT_EQ(ckpt.offset_after, plain.offset_after);
  // The module ran twice: forward and recompute (its hooks see both).
  EXPECT_EQ(plain.forward_calls, 1);
  EXPECT_EQ(ckpt.forward_calls, 2);
}

TEST(Checkpoint, CallbacksWaitForTheOuterPass) {
  auto fc = std::make_shared<nn::Linear>(2, 2, false, nn::InitSpec::Normal(0, 1));
  ASSERT_TRUE(fc->Materialize(1).ok());
  std::vector<std::string> log;
  fc->weight().AddPostAccumulateGradHook([&](const Variable&) {
    log.push_back("weight grad");
    return QueueCallback([&] {
      log.push_back("callback");
      return absl::OkStatus();
    });
  });
  Variable x(RandomTensor({3, 2}, DType::kF32, -1, 1, 2), true);
  ZS_ASSERT_OK_AND_ASSIGN(std::vector<Variable> y,
                          Checkpoint([&](const std::vector<Variable>& in)
                                         -> absl::StatusOr<std::vector<Variable>> {
                            ZS_ASSIGN_OR_RETURN(Variable h, (*fc)(in[0]));
                            return std::vector<Variable>{h};
                          },
                          {x}));
  ZS_ASSERT_OK_AND_ASSIGN(Variable xs, ops::SumAll(x));  // x also feeds the loss directly
  ZS_ASSERT_OK_AND_ASSIGN(Variable ys, ops::SumAll(y[0]));
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::Add(ys, xs));
  x.AddPostAccumulateGradHook([&](const Variable&) {
    log.push_back("x grad");
    return absl::OkStatus();
  });
  ZS_ASSERT_OK(Backward(loss));
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.back(), "callback");
}

}  // namespace
}  // namespace zeroshard::autograd
