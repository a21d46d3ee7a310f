// Module trees: names, tying, deferred and slice-wise initialisation, state
// dicts (strict and not), train/eval, apply order, forward hooks; modules of
// any forward signature (Note [Module forward]) and what hooks see of them.
#include "zeroshard/autograd/nn/module.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/layers.h"
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

// ---------------------------------------------------------------- any forward signature

Variable Constant(std::vector<float> values, Shape shape, bool requires_grad = false) {
  return Variable(Tensor::FromVector(values, shape).value(), requires_grad);
}

// (x, context, factor, mask) -> (x + context, (x + context) * factor * mask):
// two Variables, an int and a Tensor in; a tuple of two Variables out.
class Mixer : public ForwardModule<std::tuple<Variable, Variable>(Variable, Variable, int, Tensor)> {
 public:
  Mixer() : ForwardModule("Mixer") {}
  std::vector<std::string>* log = nullptr;

 protected:
  absl::StatusOr<std::tuple<Variable, Variable>> Forward(const Variable& x, const Variable& context, const int& factor,
                                                         const Tensor& mask) override {
    log->push_back("forward factor " + std::to_string(factor));
    ZS_ASSIGN_OR_RETURN(Variable sum, ops::Add(x, context));
    ZS_ASSIGN_OR_RETURN(Variable scaled, ops::Scale(sum, factor));
    ZS_ASSIGN_OR_RETURN(scaled, ops::Mul(scaled, Variable(mask)));
    return std::make_tuple(sum, scaled);
  }
};

TEST(ForwardModule, HooksSeeEveryVariableInputAndOutputAndOtherArgumentsPassThrough) {
  Mixer m;
  std::vector<std::string> log;
  m.log = &log;
  Variable x = Constant({1, 2, 3}, {3}, true), context = Constant({10, 20, 30}, {3}, true);
  const Tensor mask = Tensor::FromVector(std::vector<float>{1, 0, 1}, {3}).value();
  auto expect_inputs = [&](const std::string& when) {
    const std::vector<Variable>* in = m.forward_inputs();
    ASSERT_NE(in, nullptr) << when;
    ASSERT_EQ(in->size(), 2u) << when;
    EXPECT_TRUE((*in)[0].SameAs(x)) << when;
    EXPECT_TRUE((*in)[1].SameAs(context)) << when;
  };
  m.AddPreForwardHook([&](Module& self) {
    EXPECT_EQ(&self, &m);
    expect_inputs("pre");
    log.push_back("pre");
    return absl::OkStatus();
  });
  m.AddPostForwardHook([&](Module&, std::vector<Variable>& out) {
    expect_inputs("post");
    log.push_back("post " + std::to_string(out.size()) + " outputs");
    return absl::OkStatus();
  });
  EXPECT_EQ(m.forward_inputs(), nullptr);
  ZS_ASSERT_OK_AND_ASSIGN(auto out, m(x, context, 3, mask));
  EXPECT_EQ(m.forward_inputs(), nullptr);  // cleared: no graph kept alive
  EXPECT_THAT(log, ElementsAre("pre", "forward factor 3", "post 2 outputs"));
  EXPECT_THAT(ToDoubles(std::get<0>(out).value()), ElementsAre(11, 22, 33));
  EXPECT_THAT(ToDoubles(std::get<1>(out).value()), ElementsAre(33, 0, 99));
}

// A struct result opts in with ForEachVariable; an undefined member is no output.
struct Heads {
  Variable logits;
  Variable loss;  // undefined without targets
  template <typename F>
  void ForEachVariable(F&& f) {
    f(logits);
    f(loss);
  }
};

class TwoHeads : public ForwardModule<Heads(Variable, std::optional<Variable>)> {
 public:
  TwoHeads() : ForwardModule("TwoHeads") {}

 protected:
  absl::StatusOr<Heads> Forward(const Variable& x, const std::optional<Variable>& target) override {
    Heads h;
    ZS_ASSIGN_OR_RETURN(h.logits, ops::Scale(x, 2.0));
    if (target.has_value()) {
      ZS_ASSIGN_OR_RETURN(Variable d, ops::Sub(h.logits, *target));
      ZS_ASSIGN_OR_RETURN(h.loss, ops::SumAll(d));
    }
    return h;
  }
};

TEST(ForwardModule, PostForwardHooksMayReplaceOutputsAndTheResultCarriesTheReplacements) {
  TwoHeads m;
  Variable x = Constant({1, 2}, {2}, true), target = Constant({0, 1}, {2});
  Variable replacement = Constant({7}, {});
  std::vector<size_t> seen;
  m.AddPostForwardHook([&](Module&, std::vector<Variable>& out) {
    seen.push_back(out.size());
    EXPECT_EQ(m.forward_inputs()->size(), out.size() == 2 ? 2u : 1u);  // an empty optional is no input
    if (out.size() == 2) out[1] = replacement;
    return absl::OkStatus();
  });
  ZS_ASSERT_OK_AND_ASSIGN(Heads with, m(x, target));
  EXPECT_TRUE(with.loss.SameAs(replacement));
  EXPECT_THAT(ToDoubles(with.logits.value()), ElementsAre(2, 4));
  ZS_ASSERT_OK_AND_ASSIGN(Heads without, m(x, std::nullopt));
  EXPECT_FALSE(without.loss.defined());
  EXPECT_THAT(seen, ElementsAre(2u, 1u));
}

TEST(ForwardModule, AHookThatAddsOrRemovesOutputsIsAnError) {
  TwoHeads m;
  m.AddPostForwardHook([&](Module&, std::vector<Variable>& out) {
    out.push_back(out[0]);
    return absl::OkStatus();
  });
  EXPECT_THAT(m(Constant({1}, {1}), std::nullopt).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("TwoHeads: a post-forward hook changed the number of forward outputs from 1 to 2")));
  EXPECT_EQ(m.forward_inputs(), nullptr);  // restored on the error path too
}

TEST(ForwardModule, ForEachVariableFindsVariablesInContainersInOrder) {
  static_assert(!module_internal::HoldsVariables<Tensor>());
  static_assert(!module_internal::HoldsVariables<std::vector<float>>());
  static_assert(!module_internal::HoldsVariables<std::string>());
  static_assert(!module_internal::HoldsVariables<std::tuple<int, Tensor, bool>>());
  static_assert(module_internal::HoldsVariables<std::map<std::string, std::optional<Variable>>>());
  static_assert(module_internal::HoldsVariables<const Heads>());
  Variable a = Constant({1}, {1}), b = Constant({2}, {1}), c = Constant({3}, {1}), d = Constant({4}, {1});
  const std::tuple<int, std::vector<std::pair<std::string, Variable>>, std::optional<Variable>, std::optional<Variable>,
                   std::map<int, Variable>, Tensor>
      value{5, {{"a", a}, {"b", b}}, std::nullopt, c, {{1, d}}, Tensor()};
  std::vector<Variable> found;
  ForEachVariable(value, [&](const Variable& v) { found.push_back(v); });  // const: read only
  ASSERT_EQ(found.size(), 4u);
  EXPECT_TRUE(found[0].SameAs(a) && found[1].SameAs(b) && found[2].SameAs(c) && found[3].SameAs(d));
  Heads heads{a, b};
  ForEachVariable(heads, [&](Variable& v) { v = d; });  // non-const: written through
  EXPECT_TRUE(heads.logits.SameAs(d) && heads.loss.SameAs(d));
}

// What the sharding runtime does to a unit's parameters outside its gather:
// they keep their Variable but lose their value (sharding/hooks.cc ReshardOne).
void DropValues(Module& m) {
  for (auto& [name, slot] : m.NamedParameterSlots()) ASSERT_TRUE(slot->var.set_value(Tensor()).ok());
}

TEST(ForwardModule, AParameterWithoutAValueIsAnErrorNamingItNotAnAbsentOperand) {
  // A norm whose weight is gone used to normalise without its affine part.
  LayerNorm ln(3);
  ZS_ASSERT_OK(ln.Materialize(1));
  DropValues(ln);
  EXPECT_THAT(ln(Constant({1, 2, 3}, {1, 3})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LayerNorm: operand \"weight\" has no value; expected a materialised parameter")));
  // A Linear called through Forward, so no pre-forward hook gathers it.
  Linear fc(3, 2);
  ZS_ASSERT_OK(fc.Materialize(1));
  DropValues(fc);
  EXPECT_THAT(fc.Forward(Constant({1, 2, 3}, {1, 3})).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("call its module through operator(), not Forward")));
  // Through operator(), a pre-forward hook that gives the values back (the gather) makes it work.
  Tensor w = Tensor::Zeros({2, 3}, DType::kF32).value(), b = Tensor::Full({2}, 0.5, DType::kF32).value();
  fc.AddPreForwardHook([&](Module&) -> absl::Status {
    ZS_RETURN_IF_ERROR(fc.weight().set_value(w));
    return fc.bias().set_value(b);
  });
  ZS_ASSERT_OK_AND_ASSIGN(Variable y, fc(Constant({1, 2, 3}, {1, 3})));
  EXPECT_THAT(ToDoubles(y.value()), ElementsAre(0.5, 0.5));
}

}  // namespace
}  // namespace zeroshard::nn
