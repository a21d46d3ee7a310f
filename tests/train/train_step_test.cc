// TrainStep (train/train_step.h) on a model whose gradients are exact: a
// bias-free Linear(2 -> 1) with loss = the mean of its outputs, so the
// gradient of a micro-batch is the mean of its input rows, whatever the
// weights. With small dyadic inputs, a power-of-two lr and plain SGD every
// sum, mean and product below is exact in f32, so the expected weights are
// the closed form w - lr * g with its single rounding, and different orders
// of summation (sharded accumulation, no_sync, one rank) give the same bits.
#include "zeroshard/train/train_step.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <memory>
#include <mutex>
#include <vector>

#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using autograd::Variable;

constexpr int64_t kRows = 2;  // rows per micro-batch
constexpr double kLr = 0.125;

// Row b of global micro-batch k (k = micro_step * world + rank): (k + b, 1 - b / 2).
std::vector<float> MicroBatch(int64_t k) {
  std::vector<float> x;
  for (int64_t b = 0; b < kRows; ++b) {
    x.push_back(static_cast<float>(k + b));
    x.push_back(1.0f - 0.5f * static_cast<float>(b));
  }
  return x;
}

// The mean over micro-batches 0 .. n-1 of their mean rows: the step's gradient.
std::vector<double> MeanGradient(int64_t n) {
  std::vector<double> g(2, 0.0);
  for (int64_t k = 0; k < n; ++k) {
    const std::vector<float> x = MicroBatch(k);
    for (int64_t b = 0; b < kRows; ++b) {
      for (int j = 0; j < 2; ++j) g[j] += x[2 * b + j] / static_cast<double>(kRows * n);
    }
  }
  return g;
}

optim::OptimWrapperOptions Sgd() {
  optim::OptimWrapperOptions o;
  o.optimizer = {.kind = optim::OptimizerKind::kSgd, .weight_decay = 0.0, .sgd = {.momentum = 0.0}};
  o.lr = {.kind = optim::LrScheduleKind::kConstant, .lr = kLr};
  return o;
}

struct Trained {
  std::vector<float> w0, w;          // weights before the first step and after the last
  std::vector<StepResult> results;   // rank 0's
  std::vector<std::vector<float>> after;  // weights after each step
};

absl::StatusOr<std::vector<float>> Weights(ShardedModel& sharded, nn::Linear& net) {
  std::vector<float> w;
  ZS_RETURN_IF_ERROR(sharded.SummonFullParams([&]() -> absl::Status {
    ZS_ASSIGN_OR_RETURN(w, net.weight().value().ToVector<float>());
    return absl::OkStatus();
  }, /*writeback=*/false, /*rank0_only=*/false));
  return w;
}

// `steps` TrainStep runs of the Linear over `world` ranks; every rank must
// report the same results.
absl::StatusOr<Trained> Train(int world, const optim::OptimWrapperOptions& options, int steps,
                          ShardingStrategy strategy = ShardingStrategy::kFullShard) {
  std::vector<Trained> runs(world);
  std::vector<absl::Status> statuses = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    auto net = std::make_shared<nn::Linear>(2, 1, /*bias=*/false);
    ZS_ASSIGN_OR_RETURN(auto sharded,
                        ShardedModel::Create(net, comm, ShardingOptions{.strategy = strategy, .init_seed = 7}));
    ZS_ASSIGN_OR_RETURN(TrainStep step, TrainStep::Create(*sharded, options));
    Trained& run = runs[comm.rank()];
    ZS_ASSIGN_OR_RETURN(run.w0, Weights(*sharded, *net));
    for (int s = 0; s < steps; ++s) {
      ZS_ASSIGN_OR_RETURN(StepResult r, step.Run([&](int64_t m) -> absl::StatusOr<Variable> {
        const int64_t k = (s * options.accumulative_counts + m) * comm.size() + comm.rank();
        ZS_ASSIGN_OR_RETURN(Tensor x, Tensor::FromVector(MicroBatch(k), {kRows, 2}));
        ZS_ASSIGN_OR_RETURN(Variable y, (*net)(Variable(x)));
        return ops::MeanAll(y);
      }));
      run.results.push_back(r);
      ZS_ASSIGN_OR_RETURN(std::vector<float> w, Weights(*sharded, *net));
      run.after.push_back(w);
    }
    run.w = run.after.empty() ? run.w0 : run.after.back();
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) ZS_RETURN_IF_ERROR(s);
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(runs[r].w, runs[0].w) << "rank " << r;
    for (size_t i = 0; i < runs[0].results.size(); ++i) {
      EXPECT_EQ(runs[r].results[i].loss, runs[0].results[i].loss) << "rank " << r << " step " << i;
      EXPECT_EQ(runs[r].results[i].skipped, runs[0].results[i].skipped) << "rank " << r << " step " << i;
    }
  }
  return runs[0];
}

// w0 + (-lr) * g in f32, g exact: the single rounding SGD makes.
std::vector<float> SgdClosedForm(const std::vector<float>& w0, const std::vector<double>& g, double lr) {
  std::vector<float> w(w0.size());
  for (size_t j = 0; j < w0.size(); ++j) w[j] = w0[j] + static_cast<float>(-lr) * static_cast<float>(g[j]);
  return w;
}

TEST(TrainStep, AccumulationShardedNoSyncAndOneRankAreTheClosedForm) {
  // 4 micro-batches per step: 2 ranks x 2 micro-steps, or 1 rank x 4.
  optim::OptimWrapperOptions sharded = Sgd();
  sharded.accumulative_counts = 2;
  optim::OptimWrapperOptions no_sync = sharded;
  no_sync.no_sync = true;
  optim::OptimWrapperOptions one = Sgd();
  one.accumulative_counts = 4;
  ZS_ASSERT_OK_AND_ASSIGN(Trained a, Train(2, sharded, 1));
  ZS_ASSERT_OK_AND_ASSIGN(Trained b, Train(2, no_sync, 1));
  ZS_ASSERT_OK_AND_ASSIGN(Trained c, Train(1, one, 1));
  ASSERT_EQ(a.w0, c.w0);  // the same initialisation whatever the world
  const std::vector<float> want = SgdClosedForm(a.w0, MeanGradient(4), kLr);
  EXPECT_EQ(a.w, want);
  EXPECT_EQ(b.w, want);
  EXPECT_EQ(c.w, want);
  for (const Trained* r : {&a, &b, &c}) {
    EXPECT_FALSE(r->results[0].skipped);
    EXPECT_EQ(r->results[0].lr, kLr);
    EXPECT_EQ(r->results[0].grad_norm, 0.0);  // no clipping: not computed
    EXPECT_EQ(r->results[0].loss_scale, 0.0);
    EXPECT_EQ(r->results[0].step, 0);
  }
  EXPECT_NE(a.w, a.w0);
}

TEST(TrainStep, MeanLossIsOverMicroBatchesAndRanks) {
  // One step at w0: micro-batch k's loss is mean_b(x_kb . w0); the result
  // is the mean over the 4 micro-batches (to f32 rounding of each loss).
  optim::OptimWrapperOptions o = Sgd();
  o.accumulative_counts = 2;
  ZS_ASSERT_OK_AND_ASSIGN(Trained r, Train(2, o, 1));
  double want = 0, scale = 0;
  for (int64_t k = 0; k < 4; ++k) {
    const std::vector<float> x = MicroBatch(k);
    for (int64_t b = 0; b < kRows; ++b) {
      const double p0 = x[2 * b] * static_cast<double>(r.w0[0]), p1 = x[2 * b + 1] * static_cast<double>(r.w0[1]);
      want += (p0 + p1) / (kRows * 4);
      scale += (std::abs(p0) + std::abs(p1)) / (kRows * 4);
    }
  }
  // Each of the f32 roundings (products, sums, the division, the loss, the
  // mean over micro-batches, the f32 average over ranks) is within half an
  // ulp of a value at most `scale` (the mean of |x_j w_j| sums) in magnitude;
  // 16 of them bound the error.
  EXPECT_NEAR(r.results[0].loss, want, 16 * FLT_EPSILON * scale);
}

TEST(TrainStep, ClipScalesTheGradientToMaxNorm) {
  // One micro-batch of rows (3/4, 1): g = (0.75, 1), |g| = 1.25 exactly.
  optim::OptimWrapperOptions o = Sgd();
  o.clip_grad_max_norm = 0.5;
  std::vector<float> w0, w;
  double norm = 0;
  std::vector<absl::Status> statuses = RunRanks(1, [&](Communicator& comm) -> absl::Status {
    auto net = std::make_shared<nn::Linear>(2, 1, /*bias=*/false);
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(net, comm, ShardingOptions{.init_seed = 7}));
    ZS_ASSIGN_OR_RETURN(TrainStep step, TrainStep::Create(*sharded, o));
    ZS_ASSIGN_OR_RETURN(w0, Weights(*sharded, *net));
    ZS_ASSIGN_OR_RETURN(StepResult r, step.Run([&](int64_t) -> absl::StatusOr<Variable> {
      ZS_ASSIGN_OR_RETURN(Tensor x, Tensor::FromVector(std::vector<float>{0.75f, 1.0f, 0.75f, 1.0f}, {2, 2}));
      ZS_ASSIGN_OR_RETURN(Variable y, (*net)(Variable(x)));
      return ops::MeanAll(y);
    }));
    norm = r.grad_norm;
    ZS_ASSIGN_OR_RETURN(w, Weights(*sharded, *net));
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) ZS_ASSERT_OK(s);
  EXPECT_EQ(norm, 1.25);  // reported before clipping; 0.5625 + 1 and its root are exact
  // PyTorch's clip_grad_norm_: g * max_norm / (norm + 1e-6), then w - lr * g.
  const double coef = 0.5 / (1.25 + 1e-6);
  const double g[2] = {0.75 * coef, 1.0 * coef};
  for (int j = 0; j < 2; ++j) {
    // Two f32 roundings (the clipped gradient, the update) of values at most
    // |w| + lr |g|: half an ulp each.
    const double want = w0[j] - kLr * g[j];
    EXPECT_NEAR(w[j], want, FLT_EPSILON * (std::abs(w0[j]) + kLr * std::abs(g[j]))) << j;
  }
  EXPECT_NEAR(std::hypot(w[0] - w0[0], w[1] - w0[1]), kLr * 0.5, 1e-6);
}

TEST(TrainStep, InjectedInfSkipsTheStepOnEveryRankAndHalvesTheScale) {
  optim::OptimWrapperOptions o = Sgd();
  o.lr = {.kind = optim::LrScheduleKind::kConstant, .lr = 4 * kLr, .warmup_steps = 3};  // lr differs per step
  o.loss_scaling = true;
  o.loss_scaler = {.initial_scale_power = 4, .hysteresis = 1};
  o.inject_inf_at_step = 1;  // rank 0's gradients become inf; rank 1's stay finite
  ZS_ASSERT_OK_AND_ASSIGN(Trained r, Train(2, o, 3));
  ASSERT_EQ(r.results.size(), 3u);
  EXPECT_FALSE(r.results[0].skipped);
  EXPECT_TRUE(r.results[1].skipped);
  EXPECT_FALSE(r.results[2].skipped);
  EXPECT_EQ(r.results[0].loss_scale, 16.0);
  EXPECT_EQ(r.results[1].loss_scale, 8.0);
  EXPECT_EQ(r.results[2].loss_scale, 8.0);
  EXPECT_EQ(r.results[1].step, 1);
  EXPECT_EQ(r.results[2].step, 2);
  // The skipped step changed no weight and did not advance the schedule.
  EXPECT_EQ(r.after[1], r.after[0]);
  EXPECT_EQ(r.results[2].lr, r.results[1].lr);
  EXPECT_NE(r.results[1].lr, r.results[0].lr);
  EXPECT_NE(r.after[2], r.after[1]);
}

TEST(TrainStep, PowerOfTwoLossScalingChangesNoBit) {
  // Scaling the loss by 2^k and the gradients back by 2^-k is exact.
  optim::OptimWrapperOptions plain = Sgd();
  plain.accumulative_counts = 2;
  optim::OptimWrapperOptions scaled = plain;
  scaled.loss_scaling = true;
  ZS_ASSERT_OK_AND_ASSIGN(Trained a, Train(2, plain, 2));
  ZS_ASSERT_OK_AND_ASSIGN(Trained b, Train(2, scaled, 2));
  EXPECT_EQ(a.after, b.after);
  EXPECT_EQ(b.results[1].loss_scale, 65536.0);
}

}  // namespace
}  // namespace zeroshard
