// A user's optimizer plugged into ShardedOptimizer from outside the library
// (optim/shard_rule.h): Lion (Chen et al. 2023, "Symbolic Discovery of
// Optimization Algorithms"), defined here and nowhere else:
//   c = beta1 m + (1 - beta1) g;  p -= lr (sign(c) + wd p);  m = beta2 m + (1 - beta2) g.
//   - one step against values worked by hand (every operation exact);
//   - sharded FULL_SHARD over 1, 2 and 4 in-process ranks equals the rule on
//     each whole parameter of a plain module, bit for bit; padding and
//     frozen parameters untouched;
//   - sharded and full checkpoints with its state resume bit for bit, at the
//     same and at other world sizes, and through the offline converter;
//     mismatched optimizers are refused by name and by slot;
//   - CPU offload, NVMe offload and bf16 gradient shards give the same bits;
//     grad_scale reaches the rule; the step count reaches it and is restored;
//   - bad names and a shard on a device are clear errors.
//
// Note [Exact gradients]. Sharded-versus-unsharded parity of a real model is
// only within bounds (tests/sharding/parity.h, Note [Parity bounds]): another
// world size sums the gradients in another order. To check the optimizer
// bit for bit, ProbeNet's gradients are exact in any order: its loss is
// linear in the parameters, (1/rows) x (sum of a(x_a) w_a + b(x_b) w_b +
// gain * x_z) with w_a, w_b constant powers of two, so a gradient element is
// w (or 1) times the mean over the global batch's 4 rows of an input k/8,
// |k| <= 8 (or of 1, for a bias). With rows and world sizes powers of two,
// every product, partial sum (in any order) and average on the way is an
// integer n, |n| <= 32, times a power of two: at most 6 significant bits,
// exact in f32 and in bf16 (8 bits). Whatever the world size, the rule then
// sees the same gradient, and any difference is the optimizer's.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/virtual_communicator.h"
#include "zeroshard/optim/shard_rule.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/runtime/virtual_device.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using autograd::Variable;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

// ================================================================ the user's rules

// Lion, with its betas as parameters: the paper's 0.9 / 0.99 for training,
// binary fractions for the hand-worked step.
class Lion final : public optim::ShardOptimizerRule {
 public:
  explicit Lion(float beta1 = 0.9f, float beta2 = 0.99f, std::string slot = "exp_avg")
      : beta1_(beta1), beta2_(beta2), slot_(std::move(slot)) {}
  std::string name() const override { return "lion"; }
  std::vector<std::string> state_slots() const override { return {slot_}; }
  absl::Status Step(const optim::ShardStepArgs& a) const override {
    absl::Span<float> m = a.state[0];
    for (const optim::ParamGroup& g : a.groups) {
      const float lr = static_cast<float>(g.lr), wd = static_cast<float>(g.weight_decay);
      for (const optim::FlatRange& r : g.ranges) {
        for (int64_t i = r.offset; i < r.offset + r.numel; ++i) {
          const float c = beta1_ * m[i] + (1 - beta1_) * a.grad[i];
          const float sign = static_cast<float>((c > 0) - (c < 0));
          a.param[i] = a.param[i] - lr * (sign + wd * a.param[i]);
          m[i] = beta2_ * m[i] + (1 - beta2_) * a.grad[i];
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  float beta1_, beta2_;
  std::string slot_;
};

// Writes the step it is given into its state, in its ranges only: what the
// optimizer counted (and a checkpoint restored), and that padding stays 0.
class StepProbe final : public optim::ShardOptimizerRule {
 public:
  std::string name() const override { return "step_probe"; }
  std::vector<std::string> state_slots() const override { return {"last_step"}; }
  absl::Status Step(const optim::ShardStepArgs& a) const override {
    for (const optim::ParamGroup& g : a.groups) {
      for (const optim::FlatRange& r : g.ranges) {
        for (int64_t i = r.offset; i < r.offset + r.numel; ++i) a.state[0][i] = static_cast<float>(a.step);
      }
    }
    return absl::OkStatus();
  }
};

// Names and slots as a test sets them.
class Named final : public optim::ShardOptimizerRule {
 public:
  Named(std::string name, std::vector<std::string> slots) : name_(std::move(name)), slots_(std::move(slots)) {}
  std::string name() const override { return name_; }
  std::vector<std::string> state_slots() const override { return slots_; }
  absl::Status Step(const optim::ShardStepArgs&) const override { return absl::InvalidArgumentError("diverged"); }

 private:
  std::string name_;
  std::vector<std::string> slots_;
};

// ================================================================ one step by hand

// lr 1/4, betas 3/4 and 1/2, weight decay 1/2 and 0: every product and sum
// below is a short binary fraction, so each result is exact and compared with ==.
TEST(CustomRule, LionStepEqualsTheHandWorkedValues) {
  const Lion lion(0.75f, 0.5f);
  //                      group 0 (wd 1/2)   out  group 1 (wd 0)  out  out
  std::vector<float> p = {1, -2, 0.5f,          7,   4, -1,         8,   9};
  std::vector<float> g = {0.5f, 1, 0,           3,   -1, -2,        5,   6};
  std::vector<float> m = {0, -1, 0,             9,   2, 0.5f,       10,  11};
  const std::vector<optim::ParamGroup> groups = {{.ranges = {{0, 3}}, .lr = 0.25, .weight_decay = 0.5},
                                                 {.ranges = {{4, 2}}, .lr = 0.25, .weight_decay = 0.0}};
  optim::ShardStepArgs args{.param = absl::MakeSpan(p), .grad = g, .state = {absl::MakeSpan(m)},
                            .groups = groups, .step = 1};
  ZS_ASSERT_OK(lion.Step(args));
  // e0: c = 3/4*0 + 1/4*1/2 = 1/8 > 0; p = 1 - 1/4*(1 + 1/2*1) = 5/8; m = 1/2*0 + 1/2*1/2 = 1/4.
  // e1: c = -3/4 + 1/4 = -1/2 < 0; p = -2 - 1/4*(-1 + 1/2*-2) = -3/2; m = -1/2 + 1/2 = 0.
  // e2: c = 0 (sign 0): only the decay, p = 1/2 - 1/4*(0 + 1/4) = 7/16; m = 0.
  // e4: c = 3/2 - 1/4 = 5/4 > 0; p = 4 - 1/4*1 = 15/4; m = 1 - 1/2 = 1/2.
  // e5: c = 3/8 - 1/2 = -1/8 < 0; p = -1 + 1/4 = -3/4; m = 1/4 - 1 = -3/4.
  // e3, e6, e7 are in no group: untouched, state too.
  EXPECT_EQ(p, (std::vector<float>{0.625f, -1.5f, 0.4375f, 7, 3.75f, -0.75f, 8, 9}));
  EXPECT_EQ(m, (std::vector<float>{0.25f, 0, 0, 9, 0.5f, -0.75f, 10, 11}));
}

// ================================================================ the model

constexpr uint64_t kSeed = 77;
constexpr int kGlobalRows = 4;  // a power of two, as every world size here (Note [Exact gradients])
constexpr int kIn = 16;         // x = [x_a (6) | x_b (5) | x_z (5)]
constexpr double kLr = 1.0 / 128;
constexpr double kWeightDecay = 0.1;

// Sum of a(x_a) w_a + b(x_b) w_b + gain * x_z over all elements, w_a and w_b
// constant powers of two per output: linear in every trainable parameter.
// a: Linear(6, 3), 21 elements (padded to 24 at world 4); b: Linear(5, 2)
// with a frozen weight, so b's trainable unit is its bias alone (2 elements:
// at world 4 ranks 2 and 3 hold only padding); gain: [5] at the root (padded
// to 8).
class ProbeNet : public nn::UnaryModule {
 public:
  ProbeNet() : UnaryModule("ProbeNet") {
    a_ = RegisterModule("a", std::make_shared<nn::Linear>(6, 3));
    b_ = RegisterModule("b", std::make_shared<nn::Linear>(5, 2, true, nn::InitSpec::Normal(0, 0.5),
                                                          nn::InitSpec::Normal(0, 0.5)));
    RegisterParameter("gain", {5}, nn::InitSpec::Normal(1, 0.25));
    EXPECT_TRUE(b_->FindParameter("weight")->var.set_requires_grad(false).ok());
  }
  absl::StatusOr<Variable> Forward(const Variable& x) override {
    ZS_ASSIGN_OR_RETURN(Variable xa, ops::Narrow(x, 1, 0, 6));
    ZS_ASSIGN_OR_RETURN(Variable xb, ops::Narrow(x, 1, 6, 5));
    ZS_ASSIGN_OR_RETURN(Variable xz, ops::Narrow(x, 1, 11, 5));
    ZS_ASSIGN_OR_RETURN(Variable ya, (*a_)(xa));
    ZS_ASSIGN_OR_RETURN(Variable yb, (*b_)(xb));
    ZS_ASSIGN_OR_RETURN(Variable yz, ops::Mul(xz, FindParameter("gain")->var));
    // Each output weighted by its own power of two, so that the rows of a's
    // weight (and b's two biases) get different gradients.
    ZS_ASSIGN_OR_RETURN(Tensor wa, Tensor::FromVector(std::vector<float>{1, -2, 0.5f}, {3}));
    ZS_ASSIGN_OR_RETURN(Tensor wb, Tensor::FromVector(std::vector<float>{-1, 0.25f}, {2}));
    ZS_ASSIGN_OR_RETURN(ya, ops::Mul(ya, Variable(wa, false)));
    ZS_ASSIGN_OR_RETURN(yb, ops::Mul(yb, Variable(wb, false)));
    ZS_ASSIGN_OR_RETURN(Variable sa, ops::SumAll(ya));
    ZS_ASSIGN_OR_RETURN(Variable sb, ops::SumAll(yb));
    ZS_ASSIGN_OR_RETURN(Variable sz, ops::SumAll(yz));
    ZS_ASSIGN_OR_RETURN(Variable s, ops::Add(sa, sb));
    return ops::Add(s, sz);
  }

 private:
  std::shared_ptr<nn::Linear> a_, b_;
};

// Rows [first, first + rows) of step `step`'s global batch: inputs k/8, |k| <= 8 (zeros included).
Tensor Inputs(int step, int first, int rows) {
  std::vector<float> x;
  for (int r = first; r < first + rows; ++r) {
    for (int j = 0; j < kIn; ++j) {
      uint32_t h = static_cast<uint32_t>((step * kGlobalRows + r) * kIn + j) * 2654435761u;
      h ^= h >> 15;
      x.push_back(static_cast<float>(static_cast<int>(h % 17) - 8) / 8);
    }
  }
  return Tensor::FromVector(x, {rows, kIn}).value();
}

absl::StatusOr<Variable> Loss(ProbeNet& net, int step, int first, int rows) {
  ZS_ASSIGN_OR_RETURN(Variable s, net(Variable(Inputs(step, first, rows), false)));
  return ops::Scale(s, 1.0 / rows);  // 1/rows: a power of two
}

using Values = std::map<std::string, std::vector<float>>;

// The rule on each whole parameter of a plain module: what every sharded run must equal.
Values TrainReference(const optim::ShardOptimizerRule& rule, int steps) {
  auto net = std::make_shared<ProbeNet>();
  EXPECT_TRUE(net->Materialize(kSeed).ok());
  auto params = net->NamedParameters();
  std::map<std::string, std::vector<float>> state;
  for (int step = 0; step < steps; ++step) {
    for (auto& [n, v] : params) v.reset_grad();
    EXPECT_TRUE(autograd::Backward(Loss(*net, step, 0, kGlobalRows).value()).ok());
    for (auto& [n, v] : params) {
      if (!v.requires_grad()) continue;
      std::vector<float>& m = state[n];
      m.resize(v.numel());
      const std::vector<optim::ParamGroup> groups = {
          optim::ParamGroup::Whole(v.numel(), kLr, v.dim() >= 2 ? kWeightDecay : 0.0)};
      std::vector<float> grad = v.grad().ToVector<float>().value();
      EXPECT_TRUE(rule.Step({.param = absl::MakeSpan(v.value().data<float>(), v.numel()),
                             .grad = grad,
                             .state = {absl::MakeSpan(m)},
                             .groups = groups,
                             .step = step + 1})
                      .ok());
    }
  }
  Values out;
  for (auto& [n, v] : params) out[n] = v.value().ToVector<float>().value();
  return out;
}

// ================================================================ sharded runs

struct RuleRun {
  int world = 4;
  std::shared_ptr<const optim::ShardOptimizerRule> rule = std::make_shared<Lion>();
  ShardingOptions options;
  double grad_scale = 1.0;
  std::string load, save;  // load before training (then train from `begin`), save after
  StateDictType save_type = StateDictType::kSharded;
  optim::OptimizerKind kind = optim::OptimizerKind::kAdamW;  // with rule == nullptr

  RuleRun() {
    options.wrap = WrapPolicy::ByType({"Linear"});
    options.init_seed = kSeed;
  }
};

struct Outcome {
  Values params;             // gathered on rank 0
  Values state;              // "<unit> rank <r>.<slot>": every rank's state shards
  int64_t loaded_step = -1;  // the optimizer's step count after the load
  absl::Status status;       // the first failing rank's
};

Outcome Train(const RuleRun& run, int begin, int end) {
  Outcome out;
  std::mutex mu;  // guards out.state
  std::vector<absl::Status> st = RunRanks(run.world, [&](Communicator& comm) -> absl::Status {
    auto net = std::make_shared<ProbeNet>();  // shapes only: each rank inits its shard
    CpuAllocator device(CpuAllocator::Options{.name = absl::StrCat("device", comm.rank())});
    CpuAllocator host(CpuAllocator::Options{.name = absl::StrCat("host", comm.rank())});
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(net, comm, run.options, &device, &host));
    optim::OptimizerOptions oo{.kind = run.kind, .lr = kLr, .weight_decay = kWeightDecay, .rule = run.rule};
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt, optim::ShardedOptimizer::Create(*sharded, oo));
    if (!run.load.empty()) {
      ZS_ASSIGN_OR_RETURN(LoadResult r, LoadCheckpoint(run.load, *sharded, &opt));
      if (r.state.step != begin) return absl::InternalError(absl::StrCat("resumed at ", r.state.step));
      if (comm.rank() == 0) out.loaded_step = opt.step_count();
    }
    const int rows = kGlobalRows / comm.size();
    for (int step = begin; step < end; ++step) {
      ZS_ASSIGN_OR_RETURN(Variable loss, Loss(*net, step, comm.rank() * rows, rows));
      ZS_RETURN_IF_ERROR(autograd::Backward(loss));
      ZS_RETURN_IF_ERROR(opt.Step(kLr, run.grad_scale));
      ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
    }
    if (!run.save.empty()) {
      ZS_RETURN_IF_ERROR(SaveCheckpoint(run.save, *sharded, &opt, TrainingState{.step = end},
                                        {.type = run.save_type, .file = {.fsync = false}}));
    }
    const std::vector<std::string> slots = opt.state_slots();
    std::vector<ShardedUnit*> units = sharded->units();
    for (size_t i = 0; i < units.size(); ++i) {
      ZS_RETURN_IF_ERROR(opt.WithUnitState(i, /*write=*/false, [&](const std::vector<Tensor>& t) -> absl::Status {
        for (size_t k = 0; k < t.size(); ++k) {
          ZS_ASSIGN_OR_RETURN(std::vector<float> v, t[k].ToVector<float>());
          std::lock_guard<std::mutex> lock(mu);
          out.state[absl::StrCat(units[i]->name, " rank ", comm.rank(), ".", slots[k])] = v;
        }
        return absl::OkStatus();
      }));
    }
    return sharded->SummonFullParams([&]() -> absl::Status {
      if (comm.rank() != 0) return absl::OkStatus();
      for (auto& [n, v] : net->NamedParameters()) {
        ZS_ASSIGN_OR_RETURN(out.params[n], v.value().ToVector<float>());
      }
      return absl::OkStatus();
    });
  });
  for (const absl::Status& s : st) {
    if (!s.ok() && out.status.ok()) out.status = s;
  }
  return out;
}

std::string TempDir(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/custom_rule_", ::getpid(), "_", name);
}

constexpr int kSteps = 6;

TEST(CustomRule, ShardedOverAnyWorldSizeEqualsTheRuleOnWholeParametersBitwise) {
  const Values want = TrainReference(Lion(), kSteps);
  auto initial = std::make_shared<ProbeNet>();
  ASSERT_TRUE(initial->Materialize(kSeed).ok());
  for (auto& [n, v] : initial->NamedParameters()) {
    // Every trainable parameter moved; the frozen weight is bit for bit its init.
    if (v.requires_grad()) {
      EXPECT_NE(want.at(n), v.value().ToVector<float>().value()) << n;
    } else {
      EXPECT_EQ(want.at(n), v.value().ToVector<float>().value()) << n;
    }
  }
  for (int world : {1, 2, 4}) {
    for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp}) {
      const std::string what = absl::StrCat(ShardingStrategyName(s), " world ", world);
      RuleRun run;
      run.world = world;
      run.options.strategy = s;
      const Outcome got = Train(run, 0, kSteps);
      ASSERT_TRUE(got.status.ok()) << what << ": " << got.status;
      EXPECT_EQ(got.params, want) << what;
      // Padding holds no state: at world 4, b's bias is elements 0 and 1 of
      // a 4-element buffer, so ranks 2 and 3 hold padding only, and gain's 5
      // elements leave rank 2 one padding element and rank 3 two.
      if (world == 4 && s == ShardingStrategy::kFullShard) {
        EXPECT_EQ(got.state.at("b rank 2.exp_avg"), std::vector<float>{0});
        EXPECT_EQ(got.state.at("b rank 3.exp_avg"), std::vector<float>{0});
        EXPECT_EQ(got.state.at("<root> rank 2.exp_avg")[1], 0.0f);
        EXPECT_EQ(got.state.at("<root> rank 3.exp_avg"), (std::vector<float>{0, 0}));
        EXPECT_NE(got.state.at("b rank 0.exp_avg"), std::vector<float>{0});
        EXPECT_EQ(got.state.count("b[frozen] rank 0.exp_avg"), 0u);  // a frozen unit has no state
      }
    }
  }
}

TEST(CustomRule, GradScaleAndTheStepCountReachTheRule) {
  // Halving every gradient halves c and m exactly (a power of two), so
  // sign(c) and the parameters are unchanged and the state is exactly half.
  RuleRun plain, half;
  half.grad_scale = 0.5;
  const Outcome a = Train(plain, 0, 3), b = Train(half, 0, 3);
  ASSERT_TRUE(a.status.ok() && b.status.ok()) << a.status << b.status;
  EXPECT_EQ(b.params, a.params);
  ASSERT_EQ(b.state.size(), a.state.size());
  for (const auto& [key, m] : a.state) {
    std::vector<float> halved = m;
    for (float& x : halved) x /= 2;
    EXPECT_EQ(b.state.at(key), halved) << key;
  }
  // The 1-based step, restored by a checkpoint: 3 steps, save, 2 more.
  RuleRun probe;
  probe.rule = std::make_shared<StepProbe>();
  probe.save = TempDir("probe");
  ASSERT_TRUE(Train(probe, 0, 3).status.ok());
  RuleRun resumed = probe;
  resumed.save.clear();
  resumed.load = probe.save;
  const Outcome r = Train(resumed, 3, 5);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.loaded_step, 3);
  EXPECT_EQ(r.state.at("a rank 0.last_step"), std::vector<float>(6, 5.0f));
  EXPECT_EQ(r.state.at("<root> rank 3.last_step"), (std::vector<float>{0, 0}));  // padding
}

TEST(CustomRule, CheckpointsResumeBitwiseAtAnyWorldSize) {
  const Outcome straight = Train(RuleRun(), 0, kSteps);
  ASSERT_TRUE(straight.status.ok()) << straight.status;
  for (StateDictType type : {StateDictType::kSharded, StateDictType::kFull}) {
    RuleRun first;
    first.save = TempDir(absl::StrCat("resume_", StateDictTypeName(type)));
    first.save_type = type;
    ASSERT_TRUE(Train(first, 0, 3).status.ok());
    for (int world : {4, 2, 1}) {
      const std::string what = absl::StrCat(StateDictTypeName(type), " saved at 4, resumed at ", world);
      RuleRun second;
      second.world = world;
      second.load = first.save;
      const Outcome got = Train(second, 3, kSteps);
      ASSERT_TRUE(got.status.ok()) << what << ": " << got.status;
      EXPECT_EQ(got.loaded_step, 3) << what;
      EXPECT_EQ(got.params, straight.params) << what;
      if (world == 4) { EXPECT_EQ(got.state, straight.state) << what; }
    }
    if (type == StateDictType::kSharded) {
      // The offline converter finds the rule's slots in the manifest.
      const std::string converted = TempDir("converted");
      ZS_ASSERT_OK(ConvertShardedToFull(first.save, converted, {.fsync = false}));
      RuleRun from_converted;
      from_converted.world = 2;
      from_converted.load = converted;
      const Outcome got = Train(from_converted, 3, kSteps);
      ASSERT_TRUE(got.status.ok()) << got.status;
      EXPECT_EQ(got.params, straight.params);
    }
  }
  // Into another optimizer: refused by name, and by slots under the same name.
  RuleRun save;
  save.save = TempDir("mismatch");
  ASSERT_TRUE(Train(save, 0, 1).status.ok());
  RuleRun adamw;
  adamw.rule = nullptr;
  adamw.load = save.save;
  EXPECT_THAT(Train(adamw, 1, 1).status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("holds optimizer state of \"lion\" but the optimizer is adamw")));
  RuleRun renamed;
  renamed.rule = std::make_shared<Lion>(0.9f, 0.99f, "momentum");
  renamed.load = save.save;
  EXPECT_THAT(Train(renamed, 1, 1).status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("holds optimizer state slots [exp_avg] of \"lion\" but the optimizer keeps [momentum]")));
}

TEST(CustomRule, CpuAndNvmeOffloadAndLowPrecisionGradientsGiveTheSameBits) {
  const Outcome none = Train(RuleRun(), 0, kSteps);
  ASSERT_TRUE(none.status.ok()) << none.status;
  RuleRun host;
  host.options.offload = {.params = true, .grads = true, .optimizer = true};
  // NVMe: the state in the optimizer's swap file (one slot-sized part per
  // unit region), master shards in the parameters'; one buffer reads every
  // unit back from disk, two overlap reads and writes.
  const std::string dir = TempDir("nvme");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
  std::vector<std::pair<std::string, RuleRun>> runs = {{"host offload", host}};
  for (int buffers : {1, 2}) {
    RuleRun nvme;
    OffloadPolicy& off = nvme.options.offload;
    off.nvme_optimizer = off.nvme_params = true;
    off.optimizer_nvme = {.path = dir, .buffer_count = buffers};
    off.param_nvme = {.path = dir, .buffer_count = buffers};
    off.aio.block_size = 8192;
    runs.emplace_back(absl::StrCat("nvme, ", buffers, " buffers"), nvme);
  }
  // bf16 reduction with bf16 gradient shards: the optimizer widens them for
  // the rule; the gradients are exact in bf16 too (Note [Exact gradients]).
  RuleRun bf16;
  bf16.options.mixed_precision.reduce_dtype = DType::kBF16;
  bf16.options.mixed_precision.keep_low_precision_grads = true;
  runs.emplace_back("bf16 gradient shards", bf16);
  for (const auto& [what, run] : runs) {
    const Outcome got = Train(run, 0, kSteps);
    ASSERT_TRUE(got.status.ok()) << what << ": " << got.status;
    EXPECT_EQ(got.params, none.params) << what;
    EXPECT_EQ(got.state, none.state) << what;
  }
}

TEST(CustomRule, BadRulesAndShardsOnADeviceAreClearErrors) {
  auto create = [](std::shared_ptr<const optim::ShardOptimizerRule> rule) {
    std::vector<absl::Status> st = RunRanks(1, [&](Communicator& comm) -> absl::Status {
      RuleRun run;
      ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(std::make_shared<ProbeNet>(), comm, run.options));
      return optim::ShardedOptimizer::Create(*sharded, {.rule = rule}).status();
    });
    return st[0];
  };
  EXPECT_THAT(create(std::make_shared<Named>("my lion", std::vector<std::string>{"m"})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("optimizer rule name \"my lion\"")));
  EXPECT_THAT(create(std::make_shared<Named>("AdamW", std::vector<std::string>{"m"})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a built-in optimizer's")));
  EXPECT_THAT(create(std::make_shared<Named>("lion", std::vector<std::string>{"param"})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("state slot \"param\"")));
  EXPECT_THAT(create(std::make_shared<Named>("lion", std::vector<std::string>{"m", "v", "m"})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("state slot \"m\" appears twice in [m, v, m]")));
  // A rule's failure stops the step, named with the rule and the unit.
  std::vector<absl::Status> st = RunRanks(1, [&](Communicator& comm) -> absl::Status {
    RuleRun run;
    auto net = std::make_shared<ProbeNet>();
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(net, comm, run.options));
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt,
                        optim::ShardedOptimizer::Create(*sharded, {.rule = std::make_shared<Named>("probe", std::vector<std::string>{})}));
    ZS_RETURN_IF_ERROR(autograd::Backward(Loss(*net, 0, 0, kGlobalRows).value()));
    return opt.Step(kLr);
  });
  EXPECT_THAT(st[0], StatusIs(absl::StatusCode::kInvalidArgument,
                              HasSubstr("optimizer rule \"probe\", unit 0 'a', step 1: diverged")));

  // Master shards on a device (a virtual one here; a GPU alike): FailedPrecondition.
  class NoCost final : public VirtualCostModel {
   public:
    double OpSeconds(const OpCost&) const override { return 0; }
    double LaunchSeconds() const override { return 0; }
    double HostCopySeconds(int64_t) const override { return 0; }
  } cost;
  class NoNetwork final : public VirtualNetwork {
   public:
    double CollectiveSeconds(CollectiveOp, int64_t, const VirtualGroup&) const override { return 0; }
    double BytesSent(CollectiveOp, int64_t, const VirtualGroup&) const override { return 0; }
  } network;
  ZS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<VirtualDevice> device, VirtualDevice::Create(5, {.cost = &cost}));
  VirtualCommunicator::Options co{.network = &network};
  co.splits = {{.size = 1, .stride = 1}, {.size = 1, .stride = 1}};
  ZS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<VirtualCommunicator> world,
                          VirtualCommunicator::Create(0, 1, device->device(), co));
  RuleRun run;
  ZS_ASSERT_OK_AND_ASSIGN(auto sharded,
                          ShardedModel::Create(std::make_shared<ProbeNet>(), *world, run.options, device->allocator()));
  EXPECT_THAT(optim::ShardedOptimizer::Create(*sharded, {.rule = std::make_shared<Lion>()}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("optimizer rule \"lion\" steps shards in host memory, but the master shards and "
                                 "optimizer state of this model are on virtual:5")));
}

}  // namespace
}  // namespace zeroshard
