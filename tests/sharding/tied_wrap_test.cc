// Tied parameters under every wrap policy (Note [Tied parameters] in
// sharding/sharded_model.h): GPT's lm_head.weight is
// transformer.wte.weight, and policies that put wte and lm_head in different
// units (by size, by type, a callable wrapping the embedding alone) leave the
// tie in their lowest common ancestor's unit, the root. Each trains like the
// unsharded GPT (ExpectMatches), at world 1 and 2, FULL_SHARD and
// SHARD_GRAD_OP (and HYBRID_SHARD, prefetch, activation checkpointing).
// A model whose tie's common ancestor is a non-root unit (freed after forward
// under FULL_SHARD) trains like its unsharded self too, and a module tree
// whose ancestor never runs gives an error naming the units.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/optim/adamw.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/tests/sharding/parity.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using autograd::Variable;
using ::zeroshard::testing::ExpectLossesMatch;
using ::zeroshard::testing::ExpectMatches;
using ::zeroshard::testing::ExpectParamsMatch;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::Result;
using ::zeroshard::testing::TinyConfig;
using ::zeroshard::testing::TrainSharded;
using ::zeroshard::testing::TrainUnsharded;

constexpr int kSteps = 4;
constexpr int kGlobalBatch = 12;

const Result& Reference() {
  static const Result* r = new Result(TrainUnsharded(kSteps, kGlobalBatch));
  return *r;
}

ShardingOptions WithWrap(ShardingStrategy s, WrapPolicy wrap) {
  ShardingOptions o;
  o.strategy = s;
  o.wrap = std::move(wrap);
  return o;
}

WrapPolicy EmbeddingAlone() {
  WrapPolicy p;
  p.kind = WrapPolicy::Kind::kCustom;
  p.custom = [](const nn::Module&, const std::string& name, int64_t) { return name == "transformer.wte"; };
  return p;
}

// The units a policy makes of the tiny GPT (world 2), and where the tie went.
struct Layout {
  std::vector<std::string> units;
  std::vector<TiedPlacement> ties;
  std::string printed;
};
Layout LayoutOf(const nn::GptConfig& config, const WrapPolicy& wrap) {
  Layout l;
  std::vector<absl::Status> st = RunRanks(2, [&](Communicator& comm) -> absl::Status {
    auto gpt = std::make_shared<nn::Gpt>(config);
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, WithWrap(ShardingStrategy::kFullShard, wrap)));
    if (comm.rank() == 0) {
      for (ShardedUnit* u : sharded->units()) l.units.push_back(u->name);
      l.ties = sharded->ties();
      l.printed = sharded->ToString();
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
  return l;
}

bool Has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST(TiedWrap, PoliciesThatSplitTheTieLeaveItInTheRoot) {
  // Tiny GPT sizes: wte and lm_head 512 (one matrix), wpe 128, c_attn 816,
  // attn.c_proj 272, c_fc 1088, mlp.c_proj 1040, LayerNorms 32, Block 3280.
  // size:128 is the main job's size:3000 shape (every Linear, wte, wpe and
  // lm_head wrapped; the containers transformer and h never are).
  for (int64_t size : {30, 128, 500}) {
    SCOPED_TRACE(absl::StrCat("size ", size));
    const Layout l = LayoutOf(TinyConfig(), WrapPolicy::BySize(size));
    ASSERT_EQ(l.ties.size(), 1u);
    const TiedPlacement& t = l.ties[0];
    EXPECT_EQ(t.names, (std::vector<std::string>{"transformer.wte.weight", "lm_head.weight"}));
    EXPECT_EQ(t.units, (std::vector<std::string>{"transformer.wte", "lm_head"}));
    EXPECT_EQ(t.ancestor, "");
    EXPECT_EQ(t.holder, "<root>");
    EXPECT_EQ(t.emptied, (std::vector<std::string>{"transformer.wte", "lm_head"}));
    EXPECT_FALSE(Has(l.units, "transformer.wte"));
    EXPECT_FALSE(Has(l.units, "lm_head"));
    EXPECT_FALSE(Has(l.units, "transformer"));
    EXPECT_FALSE(Has(l.units, "transformer.h"));
    EXPECT_TRUE(Has(l.units, "transformer.h.0.mlp.c_fc"));
    EXPECT_EQ(Has(l.units, "transformer.wpe"), size <= 128);
    EXPECT_THAT(l.printed, HasSubstr("tied transformer.wte.weight = lm_head.weight (modules transformer.wte, lm_head): "
                                     "the policy put its modules in units transformer.wte, lm_head; it lives in unit "
                                     "\"<root>\", of their lowest common ancestor <root>"));
  }
  // Blocks only: both users in the root already.
  const Layout blocks = LayoutOf(TinyConfig(), WrapPolicy::BySize(3000));
  EXPECT_EQ(blocks.units, (std::vector<std::string>{"transformer.h.0", "transformer.h.1", "<root>"}));
  ASSERT_EQ(blocks.ties.size(), 1u);
  EXPECT_EQ(blocks.ties[0].units, (std::vector<std::string>{"<root>"}));
  EXPECT_TRUE(blocks.ties[0].emptied.empty());
  EXPECT_THAT(blocks.printed, HasSubstr("in unit \"<root>\", with every module that uses it"));
  // The embedding alone: wte would hold only the tie, so it is no unit.
  const Layout alone = LayoutOf(TinyConfig(), EmbeddingAlone());
  EXPECT_EQ(alone.units, (std::vector<std::string>{"<root>"}));
  // By type: Embedding and Block; wpe stays a unit, wte does not.
  const Layout typed = LayoutOf(TinyConfig(), WrapPolicy::ByType({"Embedding", "Block"}));
  EXPECT_EQ(typed.units, (std::vector<std::string>{"transformer.wpe", "transformer.h.0", "transformer.h.1", "<root>"}));
  EXPECT_EQ(typed.ties[0].emptied, (std::vector<std::string>{"transformer.wte"}));
}

TEST(TiedWrap, MainJobModelAtSize3000) {
  // examples/configs/default.json's model: wte and lm_head 32768 elements
  // each, so size:3000 wraps both (the failure of issue 18).
  const nn::GptConfig main_job{.vocab_size = 256, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
  const Layout l = LayoutOf(main_job, WrapPolicy::BySize(3000));
  ASSERT_EQ(l.ties.size(), 1u);
  EXPECT_EQ(l.ties[0].holder, "<root>");
  EXPECT_EQ(l.ties[0].units, (std::vector<std::string>{"transformer.wte", "lm_head"}));
  EXPECT_FALSE(Has(l.units, "lm_head"));
  EXPECT_TRUE(Has(l.units, "transformer.wpe"));
  EXPECT_TRUE(Has(l.units, "transformer.h.3.attn.c_attn"));
  EXPECT_FALSE(Has(l.units, "transformer"));
}

TEST(TiedWrap, EverySplittingPolicyTrainsLikeUnsharded) {
  const std::vector<std::pair<std::string, WrapPolicy>> policies = {
      {"size 30", WrapPolicy::BySize(30)},
      {"size 128 (main job shape)", WrapPolicy::BySize(128)},
      {"size 500", WrapPolicy::BySize(500)},
      {"size 3000", WrapPolicy::BySize(3000)},
      {"type Embedding+Linear", WrapPolicy::ByType({"Embedding", "Linear"})},
      {"type Embedding+Block", WrapPolicy::ByType({"Embedding", "Block"})},
      {"callable: embedding alone", EmbeddingAlone()},
  };
  for (const auto& [what, wrap] : policies) {
    for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp}) {
      for (int world : {1, 2}) {
        ExpectMatches(TrainSharded({.world = world, .options = WithWrap(s, wrap)}, kSteps, kGlobalBatch), Reference(),
                      absl::StrCat(what, ", ", ShardingStrategyName(s), ", world ", world));
      }
    }
  }
}

TEST(TiedWrap, OtherStrategiesPrefetchAndCheckpointing) {
  ShardingOptions o = WithWrap(ShardingStrategy::kFullShard, WrapPolicy::BySize(128));
  o.forward_prefetch = true;
  o.backward_prefetch = BackwardPrefetch::kBackwardPost;
  o.limit_all_gathers = 1;
  ExpectMatches(TrainSharded({.world = 2, .options = o}, kSteps, kGlobalBatch), Reference(), "post prefetch, limit 1");
  ExpectMatches(TrainSharded({.world = 2, .options = WithWrap(ShardingStrategy::kFullShard, WrapPolicy::BySize(500)),
                              .checkpoint = true},
                             kSteps, kGlobalBatch),
                Reference(), "activation checkpointing");
  ExpectMatches(TrainSharded({.world = 2, .options = WithWrap(ShardingStrategy::kNoShard, WrapPolicy::BySize(500))},
                             kSteps, kGlobalBatch),
                Reference(), "NO_SHARD");
  ShardingOptions hybrid = WithWrap(ShardingStrategy::kHybridShard, EmbeddingAlone());
  hybrid.hybrid_shard_size = 2;
  ExpectMatches(TrainSharded({.world = 4, .options = hybrid}, kSteps, kGlobalBatch), Reference(), "HYBRID 2x2");
  ExpectMatches(TrainSharded({.world = 2, .options = WithWrap(ShardingStrategy::kShardOptimizer, WrapPolicy::BySize(30))},
                             kSteps, kGlobalBatch),
                Reference(), "SHARD_OPTIMIZER");
}

// ================================================================ a tie below the root

constexpr int64_t kIn = 5, kWidth = 12, kOut = 3;
constexpr uint64_t kSeed = 77;
constexpr double kLr = 1e-2;

// x -> a -> gelu -> b, with b.weight tied to a.weight ([kWidth, kWidth]).
class TiedPair : public nn::UnaryModule {
 public:
  TiedPair() : UnaryModule("TiedPair") {
    a_ = RegisterModule("a", std::make_shared<nn::Linear>(kWidth, kWidth));
    b_ = RegisterModule("b", std::make_shared<nn::Linear>(kWidth, kWidth));
    ZS_CHECK(b_->TieParameter("weight", *a_->FindParameter("weight")).ok(), "tie");
  }
  absl::StatusOr<Variable> Forward(const Variable& x) override {
    ZS_ASSIGN_OR_RETURN(Variable h, (*a_)(x));
    ZS_ASSIGN_OR_RETURN(h, ops::Gelu(h));
    return (*b_)(h);
  }

 private:
  std::shared_ptr<nn::Linear> a_, b_;
};

class PairNet : public nn::UnaryModule {
 public:
  PairNet() : UnaryModule("PairNet") {
    in_ = RegisterModule("in", std::make_shared<nn::Linear>(kIn, kWidth));
    p0_ = RegisterModule("p0", std::make_shared<TiedPair>());
    p1_ = RegisterModule("p1", std::make_shared<TiedPair>());
    out_ = RegisterModule("out", std::make_shared<nn::Linear>(kWidth, kOut));
  }
  absl::StatusOr<Variable> Forward(const Variable& x) override {
    ZS_ASSIGN_OR_RETURN(Variable h, (*in_)(x));
    ZS_ASSIGN_OR_RETURN(h, (*p0_)(h));
    ZS_ASSIGN_OR_RETURN(h, ops::Gelu(h));
    ZS_ASSIGN_OR_RETURN(h, (*p1_)(h));
    return (*out_)(h);
  }

 private:
  std::shared_ptr<nn::Linear> in_, out_;
  std::shared_ptr<TiedPair> p0_, p1_;
};

Variable Inputs(int step, int first, int rows) {
  std::vector<float> x;
  for (int r = first; r < first + rows; ++r) {
    for (int j = 0; j < kIn; ++j) x.push_back(static_cast<float>(std::sin(0.37 * (step * 8 + r) + 0.91 * j)));
  }
  return Variable(Tensor::FromVector(x, {rows, kIn}).value());
}

// Loss: mean of squared outputs against cos targets, over the rank's rows of an 8-row batch.
absl::StatusOr<Variable> PairLoss(PairNet& net, int step, int first, int rows) {
  ZS_ASSIGN_OR_RETURN(Variable y, net(Inputs(step, first, rows)));
  std::vector<float> t;
  for (int r = first; r < first + rows; ++r) {
    for (int k = 0; k < kOut; ++k) t.push_back(static_cast<float>(0.5 * std::cos(0.1 * (step * 8 + r) + k)));
  }
  ZS_ASSIGN_OR_RETURN(Tensor target, Tensor::FromVector(t, {rows, kOut}));
  ZS_ASSIGN_OR_RETURN(Variable d, ops::Sub(y, Variable(target)));
  ZS_ASSIGN_OR_RETURN(Variable sq, ops::Mul(d, d));
  return ops::MeanAll(sq);
}

TEST(TiedWrap, TieBelowTheRootLivesInItsAncestorsUnitAndTrains) {
  constexpr int kPairSteps = 3;
  // Unsharded reference.
  Result want;
  {
    PairNet net;
    ASSERT_TRUE(net.Materialize(kSeed).ok());
    auto params = net.NamedParameters();
    std::vector<optim::AdamWState> states;
    for (auto& [n, v] : params) states.push_back(optim::AdamWState::Create(v.numel()).value());
    for (int step = 0; step < kPairSteps; ++step) {
      for (auto& [n, v] : params) v.reset_grad();
      Variable loss = PairLoss(net, step, 0, 8).value();
      want.losses.push_back(loss.value().Item().value());
      ASSERT_TRUE(autograd::Backward(loss).ok());
      for (size_t i = 0; i < params.size(); ++i) {
        const Variable& v = params[i].second;
        const double wd = v.dim() >= 2 ? 0.1 : 0.0;  // as ShardedOptimizer's default groups
        ASSERT_TRUE(optim::AdamWStep({}, {optim::ParamGroup::Whole(v.numel(), kLr, wd)}, v.value(), v.grad(), states[i])
                        .ok());
      }
    }
    for (auto& [n, v] : params) want.params[n] = v.value().ToVector<float>().value();
  }
  for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp}) {
    for (int world : {1, 2}) {
      Result got;
      std::vector<absl::Status> st = RunRanks(world, [&](Communicator& comm) -> absl::Status {
        auto net = std::make_shared<PairNet>();
        ShardingOptions o = WithWrap(s, WrapPolicy::ByType({"TiedPair", "Linear"}));
        o.init_seed = kSeed;
        o.backward_prefetch = BackwardPrefetch::kBackwardPre;
        o.forward_prefetch = true;
        ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(net, comm, o));
        // The tie lives in p0's (p1's) unit; a and b keep their biases as units and borrow it.
        const std::vector<TiedPlacement>& ties = sharded->ties();
        EXPECT_EQ(ties.size(), 2u);
        EXPECT_EQ(ties[0].holder, "p0");
        EXPECT_EQ(ties[0].units, (std::vector<std::string>{"p0.a", "p0.b"}));
        EXPECT_TRUE(ties[0].emptied.empty());
        for (ShardedUnit* u : sharded->units()) {
          if (u->name == "p1.b") {
            EXPECT_EQ(u->tied_holders.size(), 1u);
            EXPECT_EQ(u->tied_holders[0].first, "p1.b.weight");
            EXPECT_EQ(u->tied_holders[0].second->name, "p1");
          }
        }
        ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt,
                            optim::ShardedOptimizer::Create(*sharded, {.lr = kLr, .weight_decay = 0.1}));
        const int rows = 8 / world;
        for (int step = 0; step < kPairSteps; ++step) {
          ZS_ASSIGN_OR_RETURN(Variable loss, PairLoss(*net, step, comm.rank() * rows, rows));
          ZS_RETURN_IF_ERROR(autograd::Backward(loss));
          ZS_RETURN_IF_ERROR(opt.Step(kLr));
          ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
          ZS_ASSIGN_OR_RETURN(Tensor l, Tensor::Full({1}, loss.value().Item().value(), DType::kF32));
          ZS_RETURN_IF_ERROR(comm.AllReduce(l, ReduceOp::kAvg));
          if (comm.rank() == 0) got.losses.push_back(l.Item().value());
        }
        return sharded->SummonFullParams([&]() -> absl::Status {
          if (comm.rank() != 0) return absl::OkStatus();
          for (auto& [n, v] : net->NamedParameters()) {
            ZS_ASSIGN_OR_RETURN(got.params[n], v.value().ToVector<float>());
          }
          return absl::OkStatus();
        });
      });
      for (const absl::Status& x : st) EXPECT_TRUE(x.ok()) << x;
      // Note [Parity bounds] (parity.h): the loss is a mean of 8 x kOut terms;
      // no element of this model has a zero true gradient.
      const std::string what = absl::StrCat("PairNet ", ShardingStrategyName(s), " world ", world);
      ExpectLossesMatch(got.losses, want.losses, 8 * kOut, what);
      ExpectParamsMatch(got.params, want.params, {.lr = kLr, .steps = kPairSteps}, nullptr, nullptr, what);
    }
  }
}

// A container (no forward) as the common ancestor: the tie's unit is never
// gathered by hooks of its own, which the users' pre-forward check reports.
class Holder : public nn::Module {
 public:
  Holder() : Module("Holder") {}
};
class ContainerNet : public nn::UnaryModule {
 public:
  ContainerNet() : UnaryModule("ContainerNet") {
    body_ = RegisterModule("body", std::make_shared<Holder>());
    a_ = body_->RegisterModule("a", std::make_shared<nn::Linear>(kIn, kIn));
    b_ = body_->RegisterModule("b", std::make_shared<nn::Linear>(kIn, kIn));
    ZS_CHECK(b_->TieParameter("weight", *a_->FindParameter("weight")).ok(), "tie");
  }
  absl::StatusOr<Variable> Forward(const Variable& x) override {
    ZS_ASSIGN_OR_RETURN(Variable h, (*a_)(x));
    return (*b_)(h);
  }

 private:
  std::shared_ptr<Holder> body_;
  std::shared_ptr<nn::Linear> a_, b_;
};

TEST(TiedWrap, AnAncestorThatNeverRunsIsAnError) {
  std::vector<absl::Status> st = RunRanks(2, [&](Communicator& comm) -> absl::Status {
    auto net = std::make_shared<ContainerNet>();
    ZS_ASSIGN_OR_RETURN(auto sharded,
                        ShardedModel::Create(net, comm, WithWrap(ShardingStrategy::kFullShard,
                                                                 WrapPolicy::ByType({"Holder", "Linear"}))));
    return net->operator()(Inputs(0, 0, 2)).status();
  });
  for (const absl::Status& s : st) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("unit \"body.a\" runs its forward with tied parameter \"body.a.weight\", which lives in unit "
                          "\"body\""));
  }
}

}  // namespace
}  // namespace zeroshard
