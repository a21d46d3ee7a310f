// Module trees: names, tying, deferred and slice-wise initialisation, state
// dicts (strict and not), train/eval, apply order, forward hooks.
#include "zeroshard/autograd/nn/module.h"

#include <gtest/gtest.h>

#include <cmath>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::nn {
namespace {

using ::testing::ElementsAre;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::ToDoubles;

// Two linears, the second's weight tied to a third parameter-holding child.
class TwoLayer : public UnaryModule {
 public:
  TwoLayer() : UnaryModule("TwoLayer") {
    a = RegisterModule("a", std::make_shared<Linear>(4, 3, true, InitSpec::Normal(0, 0.02f)));
    b = RegisterModule("b", std::make_shared<Linear>(3, 3, false, InitSpec::Normal(0, 0.02f)));
    RegisterBuffer("steps", Tensor::Zeros({1}, DType::kI64).value());
  }
  absl::StatusOr<Variable> Forward(const Variable& x) override {
    ZS_ASSIGN_OR_RETURN(Variable h, (*a)(x));
    return (*b)(h);
  }
  std::shared_ptr<Linear> a, b;
};

TEST(Module, NamesOrderAndCounts) {
  TwoLayer m;
  std::vector<std::string> names;
  for (auto& [n, v] : m.NamedParameters()) names.push_back(n);
  EXPECT_THAT(names, ElementsAre("a.weight", "a.bias", "b.weight"));
  EXPECT_EQ(m.NumParameters(), 12 + 3 + 9);
  std::vector<std::string> modules;
  for (auto& [n, mod] : m.NamedModules()) modules.push_back(n + ":" + mod->type_name());
  EXPECT_THAT(modules, ElementsAre(":TwoLayer", "a:Linear", "b:Linear"));
  EXPECT_FALSE(m.is_materialized());
}

TEST(Module, TiedParameterIsOneVariableCountedOnceSavedUnderBothNames) {
  TwoLayer m;
  ZS_ASSERT_OK(m.b->TieParameter("weight", *m.b->FindParameter("weight")));  // self-tie is a no-op
  // Tie b.weight [3,3] to a fresh 3x3 parameter of a third module.
  auto c = m.RegisterModule("c", std::make_shared<Linear>(3, 3, false, InitSpec::Normal(0, 1)));
  ZS_ASSERT_OK(c->TieParameter("weight", *m.b->FindParameter("weight")));
  EXPECT_EQ(m.NumParameters(), 12 + 3 + 9);
  EXPECT_EQ(m.NamedParameters().size(), 3u);
  ZS_ASSERT_OK(m.Materialize(7));
  EXPECT_TRUE(c->weight().SameAs(m.b->weight()));
  NamedTensors sd = m.StateDict();
  std::vector<std::string> keys;
  for (auto& [k, t] : sd) keys.push_back(k);
  // PyTorch's order: a module's own parameters and buffers, then its children.
  EXPECT_THAT(keys, ElementsAre("steps", "a.weight", "a.bias", "b.weight", "c.weight"));
  EXPECT_THAT(m.a->TieParameter("weight", *m.b->FindParameter("weight")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is [3, 4] f32 but the target")));
}

TEST(Module, InitIsAFunctionOfSeedNameAndIndex) {
  TwoLayer m1, m2;
  ZS_ASSERT_OK(m1.Materialize(1234));
  ZS_ASSERT_OK(m2.Materialize(1234));
  EXPECT_EQ(ToDoubles(m1.a->weight().value()), ToDoubles(m2.a->weight().value()));
  TwoLayer m3;
  ZS_ASSERT_OK(m3.Materialize(1235));
  EXPECT_NE(ToDoubles(m1.a->weight().value()), ToDoubles(m3.a->weight().value()));
  EXPECT_NE(ToDoubles(m1.a->weight().value())[0], ToDoubles(m1.b->weight().value())[0]);
  // Any slice initialised alone equals the same slice of the whole.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor shard, Tensor::Empty({5}, DType::kF32));
  ZS_ASSERT_OK(FillInit(InitSpec::Normal(0, 0.02f), 1234, "a.weight", 6, shard));
  const std::vector<double> whole = ToDoubles(m1.a->weight().value());
  EXPECT_EQ(ToDoubles(shard), std::vector<double>(whole.begin() + 6, whole.begin() + 11));
  EXPECT_EQ(ToDoubles(m1.a->bias().value()), std::vector<double>(3, 0.0));
}

TEST(Module, NormalInitHasTheRequestedMoments) {
  ZS_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::Empty({200000}, DType::kF32));
  ZS_ASSERT_OK(FillInit(InitSpec::Normal(0.5f, 0.02f), 1, "w", 0, t));
  double mean = 0, var = 0;
  const std::vector<double> v = ToDoubles(t);
  for (double x : v) mean += x;
  mean /= v.size();
  for (double x : v) var += (x - mean) * (x - mean);
  var /= v.size();
  EXPECT_NEAR(mean, 0.5, 4 * 0.02 / std::sqrt(200000.0));
  EXPECT_NEAR(std::sqrt(var), 0.02, 0.02 * 0.01);
}

TEST(Module, LoadStateDictStrictAndNot) {
  TwoLayer src, dst;
  ZS_ASSERT_OK(src.Materialize(3));
  NamedTensors sd = src.StateDict();
  ZS_ASSERT_OK_AND_ASSIGN(LoadStateDictResult r, dst.LoadStateDict(sd));
  EXPECT_TRUE(r.missing_keys.empty());
  EXPECT_EQ(ToDoubles(dst.a->weight().value()), ToDoubles(src.a->weight().value()));
  NamedTensors partial;
  for (auto& [k, t] : sd) {
    if (k == "a.weight" || k == "a.bias") partial.emplace_back(k, t);
  }
  partial.emplace_back("extra.weight", Tensor::Zeros({1}, DType::kF32).value());
  EXPECT_THAT(dst.LoadStateDict(partial),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("missing keys [steps, b.weight], unexpected keys [extra.weight]")));
  ZS_ASSERT_OK_AND_ASSIGN(LoadStateDictResult loose, dst.LoadStateDict(partial, /*strict=*/false));
  EXPECT_THAT(loose.missing_keys, ElementsAre("steps", "b.weight"));
  EXPECT_THAT(loose.unexpected_keys, ElementsAre("extra.weight"));
  NamedTensors wrong = sd;
  for (auto& [k, t] : wrong) {
    if (k == "a.weight") t = Tensor::Zeros({4, 3}, DType::kF32).value();
  }
  EXPECT_THAT(dst.LoadStateDict(wrong),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.weight: expected [3, 4], found [4, 3]")));
}

TEST(Module, TrainEvalAndApplyOrder) {
  TwoLayer m;
  m.Eval();
  EXPECT_FALSE(m.a->is_training());
  m.Train();
  EXPECT_TRUE(m.b->is_training());
  std::vector<std::string> order;
  m.Apply([&](Module& mod) { order.push_back(mod.type_name()); });
  EXPECT_THAT(order, ElementsAre("Linear", "Linear", "TwoLayer"));
}

TEST(Module, ForwardHooksWrapForwardAndSeeOutputs) {
  TwoLayer m;
  ZS_ASSERT_OK(m.Materialize(5));
  std::vector<std::string> log;
  m.a->AddPreForwardHook([&](Module&) {
    log.push_back("pre a");
    return absl::OkStatus();
  });
  const int h = m.a->AddPostForwardHook([&](Module&, std::vector<Variable>& out) {
    log.push_back("post a " + ShapeToString(out[0].shape()));
    // A pre-backward hook on the unit's output, as the sharding runtime registers.
    out[0].AddGradHook([&](const Tensor& g) -> absl::StatusOr<Tensor> {
      log.push_back("backward reaches a");
      return g;
    });
    return absl::OkStatus();
  });
  Variable x(Tensor::Full({2, 4}, 1.0, DType::kF32).value());
  ZS_ASSERT_OK_AND_ASSIGN(Variable y, m(x));
  ZS_ASSERT_OK_AND_ASSIGN(Variable loss, ops::SumAll(y));
  ZS_ASSERT_OK(autograd::Backward(loss));
  EXPECT_THAT(log, ElementsAre("pre a", "post a [2, 3]", "backward reaches a"));
  m.a->RemoveHook(h);
  log.clear();
  ZS_ASSERT_OK_AND_ASSIGN(Variable y2, m(x));
  EXPECT_THAT(log, ElementsAre("pre a"));
}

}  // namespace
}  // namespace zeroshard::nn
