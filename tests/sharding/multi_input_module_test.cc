// A user's module with two inputs, sharded with no hook call of its own
// (Note [Module forward] in autograd/nn/module.h): CrossBlock(x, context) =
// x + fc2(gelu(fc3(context) + fc1(x))), each block its own FULL_SHARD unit over
// 4 in-process ranks, inside a root that takes (x, context, labels) Tensors and
// returns a struct of Variables. Losses and final parameters equal the
// unsharded single-rank run's within Note [Parity bounds] (tests/sharding/parity.h),
// with fc3 trainable and with fc3 frozen (each block then a trainable unit and
// a frozen part, whose early free needs both inputs watched: recording only x,
// this run reads freed memory and crashes). Also what happens when the
// contract is broken: a block's Forward called without its hooks.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/layers.h"
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

constexpr int64_t kContext = 5, kWidth = 16, kHidden = 24, kClasses = 4, kBlocks = 3;
constexpr int kGlobalBatch = 12;  // rows per step, split evenly over 1 or 4 ranks
constexpr int kSteps = 5;
constexpr uint64_t kSeed = 77;
constexpr double kLr = 1e-2;

// out = x + fc2(gelu(fc3(context) + fc1(x))). fc3 runs before fc1, so backward
// runs fc1's node (the last trainable gradients) before fc3's. In the first
// block x is the data (no gradient): with fc3 frozen, only the watch on
// `context` then keeps fc3's bytes until fc3's backward has read them.
class CrossBlock : public nn::ForwardModule<Variable(Variable, Variable)> {
 public:
  explicit CrossBlock(bool freeze_context) : ForwardModule("CrossBlock") {
    fc1_ = RegisterModule("fc1", std::make_shared<nn::Linear>(kWidth, kHidden));
    fc2_ = RegisterModule("fc2", std::make_shared<nn::Linear>(kHidden, kWidth));
    fc3_ = RegisterModule("fc3", std::make_shared<nn::Linear>(kWidth, kHidden));
    for (const char* name : {"weight", "bias"}) {
      ZS_CHECK(fc3_->FindParameter(name)->var.set_requires_grad(!freeze_context).ok(), name);
    }
  }
  // Breaks the contract on purpose (a test of what then happens): Forward without operator()'s hooks.
  absl::StatusOr<Variable> ForwardWithoutHooks(const Variable& x, const Variable& context) {
    return Forward(x, context);
  }

 protected:
  absl::StatusOr<Variable> Forward(const Variable& x, const Variable& context) override {
    ZS_ASSIGN_OR_RETURN(Variable c, (*fc3_)(context));
    ZS_ASSIGN_OR_RETURN(Variable h, (*fc1_)(x));
    ZS_ASSIGN_OR_RETURN(h, ops::Add(h, c));
    ZS_ASSIGN_OR_RETURN(h, ops::Gelu(h));
    ZS_ASSIGN_OR_RETURN(h, (*fc2_)(h));
    return ops::Add(x, h);
  }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_, fc3_;
};

struct CrossNetOutput {
  Variable logits;  // [N, kClasses]
  Variable loss;    // mean cross-entropy over the N rows
  template <typename F>
  void ForEachVariable(F&& f) {
    f(logits);
    f(loss);
  }
};

// x [N, kWidth], context [N, kContext], labels [N] i32 -> the blocks on x and
// ctx(context), head, cross-entropy.
class CrossNet : public nn::ForwardModule<CrossNetOutput(Tensor, Tensor, Tensor)> {
 public:
  bool bypass_block_hooks = false;  // call the blocks' Forward directly (ForwardCalledWithoutItsHooks...)
  explicit CrossNet(bool freeze_context) : ForwardModule("CrossNet") {
    ctx_ = RegisterModule("ctx", std::make_shared<nn::Linear>(kContext, kWidth));
    blocks_ = RegisterModule("blocks", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < kBlocks; ++i) blocks_->Append(std::make_shared<CrossBlock>(freeze_context));
    head_ = RegisterModule("head", std::make_shared<nn::Linear>(kWidth, kClasses));
  }

 protected:
  absl::StatusOr<CrossNetOutput> Forward(const Tensor& x, const Tensor& context, const Tensor& labels) override {
    Variable h(x);
    ZS_ASSIGN_OR_RETURN(Variable c, (*ctx_)(Variable(context)));
    for (size_t i = 0; i < blocks_->size(); ++i) {
      auto& block = *static_cast<CrossBlock*>((*blocks_)[i].get());
      if (bypass_block_hooks) {
        ZS_ASSIGN_OR_RETURN(h, block.ForwardWithoutHooks(h, c));
      } else {
        ZS_ASSIGN_OR_RETURN(h, block(h, c));
      }
    }
    CrossNetOutput out;
    ZS_ASSIGN_OR_RETURN(out.logits, (*head_)(h));
    ZS_ASSIGN_OR_RETURN(out.loss, ops::CrossEntropy(out.logits, labels));
    return out;
  }

 private:
  std::shared_ptr<nn::Linear> ctx_, head_;
  std::shared_ptr<nn::ModuleList> blocks_;
};

struct CrossBatch {
  Tensor x, context, labels;
};

// Rows [first, first + rows) of step `step`'s global batch, a fixed function
// of (step, row): the label is which quarter of a turn the first two inputs point to.
CrossBatch MakeBatch(int step, int first, int rows) {
  std::vector<float> x, context;
  std::vector<int32_t> labels;
  for (int r = first; r < first + rows; ++r) {
    const double row = step * kGlobalBatch + r;
    for (int j = 0; j < kWidth; ++j) x.push_back(static_cast<float>(std::sin(0.37 * row + 0.91 * j)));
    for (int k = 0; k < kContext; ++k) context.push_back(static_cast<float>(std::cos(0.21 * row + 1.3 * k)));
    const double angle = std::atan2(x[x.size() - kWidth + 1], x[x.size() - kWidth]) + M_PI;  // [0, 2 pi]
    labels.push_back(static_cast<int32_t>(std::min<double>(kClasses - 1, std::floor(angle / (2 * M_PI) * kClasses))));
  }
  return {Tensor::FromVector(x, {rows, kWidth}).value(), Tensor::FromVector(context, {rows, kContext}).value(),
          Tensor::FromVector(labels, {rows}, DType::kI32).value()};
}

using testing::ParamValues;

struct Result {
  std::vector<double> losses;  // global mean loss per step
  ParamValues params, initial;
};

// One rank, no sharding, one AdamW state per parameter (decay on 2-D weights,
// as ShardedOptimizer's default groups).
Result TrainUnsharded(bool freeze_context) {
  Result r;
  CrossNet net(freeze_context);
  EXPECT_TRUE(net.Materialize(kSeed).ok());
  auto params = net.NamedParameters();
  std::vector<optim::AdamWState> states;
  for (auto& [n, v] : params) {
    r.initial[n] = v.value().ToVector<float>().value();
    states.push_back(optim::AdamWState::Create(v.numel()).value());
  }
  for (int step = 0; step < kSteps; ++step) {
    for (auto& [n, v] : params) v.reset_grad();
    const CrossBatch b = MakeBatch(step, 0, kGlobalBatch);
    CrossNetOutput out = net(b.x, b.context, b.labels).value();
    r.losses.push_back(out.loss.value().Item().value());
    EXPECT_TRUE(autograd::Backward(out.loss).ok());
    for (size_t i = 0; i < params.size(); ++i) {
      const Variable& v = params[i].second;
      if (!v.requires_grad()) continue;
      const double wd = v.dim() >= 2 ? 0.1 : 0.0;
      EXPECT_TRUE(
          optim::AdamWStep({}, {optim::ParamGroup::Whole(v.numel(), kLr, wd)}, v.value(), v.grad(), states[i]).ok());
    }
  }
  for (auto& [n, v] : params) r.params[n] = v.value().ToVector<float>().value();
  return r;
}

// FULL_SHARD over `world` in-process ranks, each CrossBlock its own unit; rank 0 fills the result.
Result TrainSharded(int world, bool freeze_context) {
  Result r;
  const int per_rank = kGlobalBatch / world;
  std::vector<absl::Status> statuses = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    auto net = std::make_shared<CrossNet>(freeze_context);  // shapes only: each rank inits its shard
    ShardingOptions options;
    options.strategy = ShardingStrategy::kFullShard;
    options.wrap = WrapPolicy::ByType({"CrossBlock"});
    options.init_seed = kSeed;
    CpuAllocator device(CpuAllocator::Options{.name = absl::StrCat("rank", comm.rank())});
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(net, comm, options, &device));
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt,
                        optim::ShardedOptimizer::Create(*sharded, {.lr = kLr, .weight_decay = 0.1}));
    for (int step = 0; step < kSteps; ++step) {
      const CrossBatch b = MakeBatch(step, comm.rank() * per_rank, per_rank);
      ZS_ASSIGN_OR_RETURN(CrossNetOutput out, (*net)(b.x, b.context, b.labels));
      ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));
      ZS_RETURN_IF_ERROR(opt.Step(kLr));
      ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
      ZS_ASSIGN_OR_RETURN(Tensor loss, Tensor::Full({1}, out.loss.value().Item().value(), DType::kF32));
      ZS_RETURN_IF_ERROR(comm.AllReduce(loss, ReduceOp::kAvg));
      if (comm.rank() == 0) r.losses.push_back(loss.Item().value());
    }
    // Every block is a unit of its own, and its hooks ran on every forward and
    // backward: gathered once for each (FULL_SHARD frees it after both). Both
    // inputs of each block were recorded and watched, none is still pending.
    int blocks = 0;
    for (ShardedUnit* u : sharded->units()) {
      if (u->is_root || u->owner != nullptr) continue;
      ++blocks;
      EXPECT_EQ(u->name, absl::StrCat("blocks.", blocks - 1));
      EXPECT_EQ(u->gathers, 2 * kSteps) << u->name;
      EXPECT_EQ(u->state, ShardedUnit::State::kSharded) << u->name;
      EXPECT_EQ(u->frozen_part != nullptr, freeze_context) << u->name;
      EXPECT_FALSE(u->inputs_untracked) << u->name;
      EXPECT_EQ(*u->inputs_pending, 0) << u->name;
    }
    EXPECT_EQ(blocks, kBlocks);
    return sharded->SummonFullParams([&]() -> absl::Status {
      if (comm.rank() != 0) return absl::OkStatus();
      for (auto& [n, v] : net->NamedParameters()) {
        ZS_ASSIGN_OR_RETURN(r.params[n], v.value().ToVector<float>());
      }
      return absl::OkStatus();
    });
  });
  for (size_t i = 0; i < statuses.size(); ++i) EXPECT_TRUE(statuses[i].ok()) << "rank " << i << ": " << statuses[i];
  return r;
}

void ExpectMatches(const Result& got, const Result& want, bool freeze_context) {
  const std::string what = freeze_context ? "fc3 frozen" : "all trainable";
  SCOPED_TRACE(what);
  // The loss is a mean of kGlobalBatch per-row cross-entropies (Note [Parity bounds]).
  testing::ExpectLossesMatch(got.losses, want.losses, kGlobalBatch, what);
  EXPECT_LT(want.losses.back(), want.losses.front()) << "the reference did not learn";
  ParamValues got_trained, want_trained;
  ASSERT_EQ(got.params.size(), want.params.size());
  for (const auto& [name, w] : want.params) {
    ASSERT_TRUE(got.params.count(name)) << name;
    const std::vector<float>& g = got.params.at(name);
    if (freeze_context && name.find(".fc3.") != std::string::npos) {
      // Frozen: bitwise the initial values, in both runs.
      EXPECT_EQ(g, want.initial.at(name)) << name;
      EXPECT_EQ(w, want.initial.at(name)) << name;
      continue;
    }
    EXPECT_NE(w, want.initial.at(name)) << name << " did not train";
    got_trained[name] = g;
    want_trained[name] = w;
  }
  // No element of this model has an exactly zero true gradient.
  testing::ExpectParamsMatch(got_trained, want_trained, {.lr = kLr, .steps = kSteps}, nullptr, nullptr, what);
}

TEST(MultiInputModule, TwoInputBlocksShardedOverFourRanksMatchUnsharded) {
  const Result want = TrainUnsharded(/*freeze_context=*/false);
  ASSERT_EQ(want.params.size(), 2u * 2 + 3u * 2 * kBlocks);  // ctx, head; fc1-3 per block
  ExpectMatches(TrainSharded(4, /*freeze_context=*/false), want, false);
}

TEST(MultiInputModule, FrozenContextProjectionWaitsForTheContextGradient) {
  const Result want = TrainUnsharded(/*freeze_context=*/true);
  ExpectMatches(TrainSharded(4, /*freeze_context=*/true), want, true);
}

// Note [Module forward]: a block's Forward called directly (not through
// operator()) runs no hook. After a first step through operator(), sharded
// over 4 ranks the blocks' parameters have no value (freed after that step's
// backward): the first op names the missing operand. On 1 rank the gathered
// buffer is the shard itself, so the parameters keep their values and the
// forward computes, but its outputs carry no pre-backward hook: backward stops
// at the first gradient that lands in a block.
TEST(MultiInputModule, ForwardCalledWithoutItsHooksIsAClearError) {
  for (int world : {4, 1}) {
    SCOPED_TRACE(absl::StrCat("world ", world));
    std::vector<absl::Status> statuses = RunRanks(world, [&](Communicator& comm) -> absl::Status {
      auto net = std::make_shared<CrossNet>(/*freeze_context=*/false);
      ShardingOptions options;
      options.wrap = WrapPolicy::ByType({"CrossBlock"});
      options.init_seed = kSeed;
      ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(net, comm, options));
      const CrossBatch b = MakeBatch(0, comm.rank() * 2, 2);
      ZS_ASSIGN_OR_RETURN(CrossNetOutput first, (*net)(b.x, b.context, b.labels));
      ZS_RETURN_IF_ERROR(autograd::Backward(first.loss));
      ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
      net->bypass_block_hooks = true;
      ZS_ASSIGN_OR_RETURN(CrossNetOutput out, (*net)(b.x, b.context, b.labels));
      return autograd::Backward(out.loss);
    });
    for (const absl::Status& s : statuses) {
      if (world > 1) {
        EXPECT_THAT(s, testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                         testing::HasSubstr("Linear: operand \"weight\" has no value")));
      } else {
        EXPECT_THAT(s, testing::StatusIs(absl::StatusCode::kInternal,
                                         testing::HasSubstr("landed before the unit's backward started")));
      }
    }
  }
}

}  // namespace
}  // namespace zeroshard
