#include "zeroshard/examples/embed/spiral.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/collectives/objects.h"
#include "zeroshard/kernels/reduce.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/train/loop.h"
#include "zeroshard/train/train_step.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::example {
namespace {

using autograd::Variable;

// ---- The user's model: nothing here knows about sharding.
class ResBlock : public nn::UnaryModule {
 public:
  explicit ResBlock(int64_t width) : UnaryModule("ResBlock") {
    fc1_ = RegisterModule("fc1", std::make_shared<nn::Linear>(width, 2 * width));
    fc2_ = RegisterModule("fc2", std::make_shared<nn::Linear>(2 * width, width));
  }
  absl::StatusOr<Variable> Forward(const Variable& x) override {
    ZS_ASSIGN_OR_RETURN(Variable h, (*fc1_)(x));
    ZS_ASSIGN_OR_RETURN(h, ops::Gelu(h));
    ZS_ASSIGN_OR_RETURN(h, (*fc2_)(h));
    return ops::Add(x, h);
  }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

class SpiralNet : public nn::UnaryModule {
 public:
  SpiralNet(int64_t width, int64_t blocks) : UnaryModule("SpiralNet") {
    stem_ = RegisterModule("stem", std::make_shared<nn::Linear>(2, width));
    for (int64_t i = 0; i < blocks; ++i) {
      blocks_.push_back(RegisterModule(absl::StrCat("block", i), std::make_shared<ResBlock>(width)));
    }
    head_ = RegisterModule("head", std::make_shared<nn::Linear>(width, 3));
  }
  absl::StatusOr<Variable> Forward(const Variable& x) override {  // x [N, 2] -> logits [N, 3]
    ZS_ASSIGN_OR_RETURN(Variable h, (*stem_)(x));
    for (auto& b : blocks_) {
      ZS_ASSIGN_OR_RETURN(h, (*b)(h));
    }
    return (*head_)(h);
  }

 private:
  std::shared_ptr<nn::Linear> stem_, head_;
  std::vector<std::shared_ptr<ResBlock>> blocks_;
};

// ---- The data: three interleaved spirals, a fixed function of (seed, index).
struct Points {
  std::vector<float> xy;       // [n, 2]
  std::vector<int32_t> label;  // [n]
};

Points MakeSpirals(int64_t per_class, uint64_t seed) {
  Points p;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.f, 0.08f);
  for (int64_t i = 0; i < per_class; ++i) {
    for (int c = 0; c < 3; ++c) {
      const float r = static_cast<float>(i + 1) / static_cast<float>(per_class);
      const float t = 4.f * r + 2.0944f * static_cast<float>(c);  // 1.25 turns, classes 120 degrees apart
      p.xy.push_back(r * std::cos(t) + noise(rng) * r);
      p.xy.push_back(r * std::sin(t) + noise(rng) * r);
      p.label.push_back(c);
    }
  }
  return p;
}

// Rows [first, first + n) of `p` (wrapping around) as tensors.
absl::StatusOr<std::pair<Tensor, Tensor>> Rows(const Points& p, int64_t first, int64_t n) {
  const int64_t total = static_cast<int64_t>(p.label.size());
  std::vector<float> xy;
  std::vector<int32_t> label;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = (first + i) % total;
    xy.insert(xy.end(), {p.xy[2 * g], p.xy[2 * g + 1]});
    label.push_back(p.label[g]);
  }
  ZS_ASSIGN_OR_RETURN(Tensor x, Tensor::FromVector(xy, {n, 2}));
  ZS_ASSIGN_OR_RETURN(Tensor y, Tensor::FromVector(label, {n}, DType::kI32));
  return std::make_pair(x, y);
}

}  // namespace

absl::StatusOr<SpiralResult> RunSpiral(const SpiralOptions& o, Communicator& comm) {
  // 1. The user's model, sharded: one unit per ResBlock, the root holds stem and head.
  auto model = std::make_shared<SpiralNet>(o.width, o.blocks);
  ShardingOptions sharding = o.sharding;
  if (sharding.wrap.kind == WrapPolicy::Kind::kNone) sharding.wrap = WrapPolicy::ByType({"ResBlock"});
  ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(model, comm, sharding));
  // 2. The training step: optimizer, schedule, accumulation and clipping.
  ZS_ASSIGN_OR_RETURN(TrainStep train_step, TrainStep::Create(*sharded, {
      .optimizer = {.kind = optim::OptimizerKind::kAdamW, .weight_decay = 0.01},
      .lr = {.kind = optim::LrScheduleKind::kCosine, .lr = o.lr, .min_lr = o.lr / 10,
             .warmup_steps = o.steps / 10, .decay_steps = o.steps},
      .accumulative_counts = static_cast<int>(o.accumulation),
      .clip_grad_max_norm = 1.0}));
  // 3. Rank 0 names the run; every rank learns the name (Lightning's strategy.broadcast).
  std::string run = comm.rank() == 0 ? absl::StrCat("spiral-w", comm.size(), "-", ShardingStrategyName(sharding.strategy)) : "";
  ZS_RETURN_IF_ERROR(BroadcastString(comm, &run, /*root=*/0));

  const Points train = MakeSpirals(o.points, 1), val = MakeSpirals(o.points / 4, 2);
  // 4. The loop (train/loop.h): each step runs the user's forward and loss on
  // each micro-batch, TrainStep does the rest; rank 0's lines go through the
  // writer (here: prefixed with the run's name).
  const int64_t rows_per_step = o.batch_size * comm.size() * o.accumulation;
  LoopOptions loop{.steps = o.steps, .log_every = o.log_every};
  loop.log.to_stdout = false;
  if (o.log_every > 0) {
    loop.log.writer = [&](absl::string_view line) {
      std::printf("%s %.*s", run.c_str(), static_cast<int>(line.size()), line.data());
    };
  }
  auto forward = [&](int64_t step, int64_t m) -> absl::StatusOr<Variable> {
    const int64_t first = step * rows_per_step + (m * comm.size() + comm.rank()) * o.batch_size;
    ZS_ASSIGN_OR_RETURN(auto batch, Rows(train, first, o.batch_size));
    ZS_ASSIGN_OR_RETURN(Variable logits, (*model)(Variable(batch.first)));
    return ops::CrossEntropy(logits, batch.second);
  };
  ZS_ASSIGN_OR_RETURN(LoopResult trained, RunLoop(*sharded, train_step, loop, forward));
  SpiralResult result;
  result.losses = std::move(trained.losses);  // the global mean over micro-batches and ranks, per step
  // 5. Validation: each rank scores a strided part of the set; exact counts are summed.
  const int64_t n_val = static_cast<int64_t>(val.label.size());
  const int64_t mine = (n_val - comm.rank() + comm.size() - 1) / comm.size();
  double correct = 0, loss_sum = 0;
  for (int64_t i = 0; i < mine; ++i) {
    ZS_ASSIGN_OR_RETURN(auto row, Rows(val, comm.rank() + i * comm.size(), 1));
    ZS_ASSIGN_OR_RETURN(optim::Losses out, ValStep(*sharded, [&]() -> absl::StatusOr<optim::Losses> {
      ZS_ASSIGN_OR_RETURN(Variable logits, (*model)(Variable(row.first)));
      ZS_ASSIGN_OR_RETURN(Variable ce, ops::CrossEntropy(logits, row.second));
      return optim::Losses{{"logits", logits}, {"loss", ce}};
    }));
    ZS_ASSIGN_OR_RETURN(Tensor pred, ArgMax(out[0].second.value(), -1));
    ZS_ASSIGN_OR_RETURN(double p, pred.Item());
    ZS_ASSIGN_OR_RETURN(double y, row.second.Item());
    correct += p == y ? 1 : 0;
    ZS_ASSIGN_OR_RETURN(double l, out[1].second.value().Item());
    loss_sum += l;
  }
  // 6. Metrics reduced over ranks (Lightning's strategy.reduce), then a barrier.
  ZS_ASSIGN_OR_RETURN(const double all_correct, ReduceValue(comm, correct, ReduceOp::kSum));
  ZS_ASSIGN_OR_RETURN(const double all_loss, ReduceValue(comm, loss_sum, ReduceOp::kSum));
  result.val_accuracy = all_correct / n_val;
  result.val_loss = all_loss / n_val;
  ZS_RETURN_IF_ERROR(comm.Barrier());
  if (o.log_every > 0 && comm.rank() == 0) {
    std::printf("%s validation: loss %.4f accuracy %.4f (%ld points, chance 0.333)\n", run.c_str(),
                result.val_loss, result.val_accuracy, static_cast<long>(n_val));
  }
  return result;
}

}  // namespace zeroshard::example
