// Frozen parameters sharing a unit with trainable ones (Note [Frozen
// parameters] in sharding/sharded_model.h), on a LoRA-like model: each
// LoraLinear holds a frozen base weight and bias beside trainable low-rank
// adapters, a wrapped plain Linear is frozen whole, and the root mixes a frozen
// input shift with a trainable output scale.
//   - trained sharded at world 1-4 (and SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD)
//     it equals the unsharded reference, frozen values bitwise unchanged;
//   - gradient buffers, gradient shards, reduce-scatter bytes (counted by a
//     wrapping communicator) and optimizer state hold trainable elements only,
//     padded to the shard group: exact closed forms;
//   - CPU offload, NVMe offload and bf16 keep the frozen values and (offload)
//     match plain training bitwise;
//   - checkpoints (sharded, full, async) resume bitwise, load at other world
//     sizes with the same values, and load into a model that trains the
//     formerly frozen parameters (their optimizer state starts at zero).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/work.h"
#include "zeroshard/optim/adamw.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/tests/sharding/parity.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using autograd::Variable;
using ::zeroshard::testing::HasSubstr;

constexpr int64_t kIn = 13, kHidden = 29, kOut = 7, kRank = 3;
constexpr uint64_t kSeed = 2024;
constexpr double kLr = 1e-2;
constexpr int kGlobalBatch = 12;  // divisible by every world size 1-4

void Freeze(nn::Module& m, const std::string& name, bool frozen) {
  ASSERT_TRUE(m.FindParameter(name)->var.set_requires_grad(!frozen).ok());
}

// y = x W^T + b + (x A^T) B^T: W [out, in] and b [out] frozen (the base),
// A [rank, in] and B [out, rank] trainable (the adapter).
class LoraLinear : public nn::UnaryModule {
 public:
  LoraLinear(int64_t in, int64_t out, int64_t rank, bool freeze_base) : UnaryModule("LoraLinear") {
    RegisterParameter("weight", {out, in}, nn::InitSpec::Normal(0, 0.3));
    RegisterParameter("bias", {out}, nn::InitSpec::Normal(0, 0.1));
    RegisterParameter("lora_a", {rank, in}, nn::InitSpec::Normal(0, 0.3));
    RegisterParameter("lora_b", {out, rank}, nn::InitSpec::Normal(0, 0.1));
    Freeze(*this, "weight", freeze_base);
    Freeze(*this, "bias", freeze_base);
  }
  absl::StatusOr<Variable> Forward(const Variable& x) override {
    ZS_ASSIGN_OR_RETURN(Variable base, ops::Linear(x, FindParameter("weight")->var, FindParameter("bias")->var));
    ZS_ASSIGN_OR_RETURN(Variable down, ops::Linear(x, FindParameter("lora_a")->var, Variable()));
    ZS_ASSIGN_OR_RETURN(Variable up, ops::Linear(down, FindParameter("lora_b")->var, Variable()));
    return ops::Add(base, up);
  }
};

// x + in_shift -> l0 -> gelu -> mid -> gelu -> l1 -> * out_scale.
class LoraNet : public nn::UnaryModule {
 public:
  explicit LoraNet(bool freeze = true) : UnaryModule("LoraNet") {
    RegisterParameter("in_shift", {kIn}, nn::InitSpec::Normal(0, 0.2));
    RegisterParameter("out_scale", {kOut}, nn::InitSpec::Normal(1, 0.1));
    Freeze(*this, "in_shift", freeze);
    l0_ = RegisterModule("l0", std::make_shared<LoraLinear>(kIn, kHidden, kRank, freeze));
    mid_ = RegisterModule("mid", std::make_shared<nn::Linear>(kHidden, kHidden));
    Freeze(*mid_, "weight", freeze);
    Freeze(*mid_, "bias", freeze);
    l1_ = RegisterModule("l1", std::make_shared<LoraLinear>(kHidden, kOut, kRank, freeze));
  }
  absl::StatusOr<Variable> Forward(const Variable& x) override {
    ZS_ASSIGN_OR_RETURN(Variable h, ops::Add(x, FindParameter("in_shift")->var));
    ZS_ASSIGN_OR_RETURN(h, (*l0_)(h));
    ZS_ASSIGN_OR_RETURN(h, ops::Gelu(h));
    ZS_ASSIGN_OR_RETURN(h, (*mid_)(h));
    ZS_ASSIGN_OR_RETURN(h, ops::Gelu(h));
    ZS_ASSIGN_OR_RETURN(h, (*l1_)(h));
    return ops::Mul(h, FindParameter("out_scale")->var);
  }

 private:
  std::shared_ptr<LoraLinear> l0_, l1_;
  std::shared_ptr<nn::Linear> mid_;
};

// The units LoraNet becomes (wrapping LoraLinear and Linear), in units()
// order, with their trainable and frozen element counts.
struct UnitCounts {
  std::string name;
  int64_t trainable, frozen;
};
const std::vector<UnitCounts>& ExpectedUnits() {
  static const std::vector<UnitCounts> units = {
      {"l0[frozen]", 0, kHidden * kIn + kHidden},              // 406
      {"l0", kRank * kIn + kHidden * kRank, 0},                 // 126
      {"mid", 0, kHidden * kHidden + kHidden},                  // 870
      {"l1[frozen]", 0, kOut * kHidden + kOut},                 // 210
      {"l1", kRank * kHidden + kOut * kRank, 0},                // 108
      {"<root>[frozen]", 0, kIn},                               // 13
      {"<root>", kOut, 0},                                      // 7
  };
  return units;
}
int64_t Padded(int64_t n, int64_t s) { return (n + s - 1) / s * s; }

ShardingOptions LoraOptions(ShardingStrategy s) {
  ShardingOptions o;
  o.strategy = s;
  o.wrap = WrapPolicy::ByType({"LoraLinear", "Linear"});
  o.backward_prefetch = BackwardPrefetch::kBackwardPre;
  o.forward_prefetch = true;
  o.init_seed = kSeed;
  return o;
}

// Rows [first, first + rows) of step `step`'s global batch: inputs [rows, kIn], targets [rows, kOut].
std::pair<Tensor, Tensor> LoraBatch(int step, int first, int rows) {
  std::vector<float> x, t;
  for (int r = first; r < first + rows; ++r) {
    const double row = step * kGlobalBatch + r;
    for (int j = 0; j < kIn; ++j) x.push_back(static_cast<float>(std::sin(0.37 * row + 0.91 * j)));
    for (int k = 0; k < kOut; ++k) t.push_back(static_cast<float>(0.5 * std::cos(0.053 * row + 0.7 * k)));
  }
  return {Tensor::FromVector(x, {rows, kIn}).value(), Tensor::FromVector(t, {rows, kOut}).value()};
}

absl::StatusOr<Variable> Loss(nn::UnaryModule& net, int step, int first, int rows) {
  auto [x, t] = LoraBatch(step, first, rows);
  ZS_ASSIGN_OR_RETURN(Variable y, net(Variable(x, false)));
  ZS_ASSIGN_OR_RETURN(Variable d, ops::Sub(y, Variable(t, false)));
  ZS_ASSIGN_OR_RETURN(Variable sq, ops::Square(d));
  return ops::MeanAll(sq);
}

struct Result {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;
  std::map<std::string, std::vector<float>> initial;  // reference only
};

Result TrainReference(int steps) {
  Result r;
  auto net = std::make_shared<LoraNet>();
  EXPECT_TRUE(net->Materialize(kSeed).ok());
  auto params = net->NamedParameters();
  for (auto& [n, v] : params) r.initial[n] = v.value().ToVector<float>().value();
  std::vector<optim::AdamWState> states;
  for (auto& [n, v] : params) states.push_back(optim::AdamWState::Create(v.numel()).value());
  for (int step = 0; step < steps; ++step) {
    for (auto& [n, v] : params) v.reset_grad();
    Variable loss = Loss(*net, step, 0, kGlobalBatch).value();
    r.losses.push_back(loss.value().Item().value());
    EXPECT_TRUE(autograd::Backward(loss).ok());
    for (size_t i = 0; i < params.size(); ++i) {
      const Variable& v = params[i].second;
      if (!v.requires_grad()) continue;
      const double wd = v.dim() >= 2 ? 0.1 : 0.0;
      EXPECT_TRUE(optim::AdamWStep({}, {optim::ParamGroup::Whole(v.numel(), kLr, wd)}, v.value(), v.grad(), states[i])
                      .ok());
    }
  }
  for (auto& [n, v] : params) r.params[n] = v.value().ToVector<float>().value();
  return r;
}

// Bytes each rank's collectives moved, over the communicator and its splits.
struct CollectiveBytes {
  std::atomic<int64_t> all_gather{0};      // output bytes
  std::atomic<int64_t> reduce_scatter{0};  // input bytes (the flat gradient)
  std::atomic<int64_t> gradient_all_reduce{0};  // input bytes of all-reduces of more than one element
};

// Counts the bytes of every collective, then runs it on `inner` (inline).
class CountingCommunicator final : public Communicator {
 public:
  CountingCommunicator(std::unique_ptr<Communicator> inner, CollectiveBytes* bytes)
      : Communicator(inner->rank(), inner->size(), inner->device(), inner->options()),
        inner_(std::move(inner)), bytes_(bytes) {}
  absl::string_view backend() const override { return "counting"; }

 protected:
  absl::StatusOr<std::shared_ptr<Work>> Launch(CollectiveCall call) override {
    absl::Status s = absl::InternalError("unexpected collective");
    switch (call.desc.op) {
      case CollectiveOp::kAllGather:
        bytes_->all_gather += call.output.numel() * static_cast<int64_t>(DTypeSize(call.output.dtype()));
        s = inner_->AllGather(call.input, call.output);
        break;
      case CollectiveOp::kReduceScatter:
        bytes_->reduce_scatter += call.input.numel() * static_cast<int64_t>(DTypeSize(call.input.dtype()));
        s = inner_->ReduceScatter(call.input, call.output, call.desc.reduce_op);
        break;
      case CollectiveOp::kAllReduce:
        // Losses, norms and overflow flags are one element; gradients are more.
        if (call.input.numel() > 1) {
          bytes_->gradient_all_reduce += call.input.numel() * static_cast<int64_t>(DTypeSize(call.input.dtype()));
        }
        s = inner_->AllReduce(call.input, call.output, call.desc.reduce_op);
        break;
      case CollectiveOp::kAllToAll: s = inner_->AllToAll(call.input, call.output); break;
      case CollectiveOp::kBroadcast: s = inner_->Broadcast(call.output, call.desc.root); break;
      case CollectiveOp::kBarrier: s = inner_->Barrier(); break;
      case CollectiveOp::kSplit: break;
    }
    return std::shared_ptr<Work>(HostWork::Done(s));
  }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(const CollectiveDesc& desc) override {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, inner_->Split(desc.color, desc.key));
    if (sub == nullptr) return std::unique_ptr<Communicator>();
    return std::unique_ptr<Communicator>(new CountingCommunicator(std::move(sub), bytes_));
  }

 private:
  std::unique_ptr<Communicator> inner_;
  CollectiveBytes* bytes_;
};

struct LoraRun {
  int world = 2;
  ShardingOptions options = LoraOptions(ShardingStrategy::kFullShard);
  bool freeze = true;
  // Checkpoints: load `load` before training (its step must be `begin`), save to `save` after.
  std::string load, save;
  SaveOptions save_options;
  bool async_save = false;
};

struct Outcome {
  Result result;
  std::map<std::string, std::vector<float>> loaded;  // parameters right after the load
  std::vector<int64_t> reduce_scatter_bytes, all_gather_bytes, gradient_all_reduce_bytes;  // per rank
  std::map<std::string, std::vector<float>> frozen_masters;     // "<unit> rank <r>": f32 master shard
  // Frozen units or parts after l0 in the forward ("mid", "l1[frozen]") still
  // gathered when l0's backward starts, over every step and rank.
  int gathered_late = 0;
  int64_t device_bytes = -1;  // rank 0's device bytes in use after training
  absl::Status status;
};

absl::Status GatherParams(ShardedModel& sharded, nn::Module& net, Communicator& comm,
                          std::map<std::string, std::vector<float>>* out) {
  return sharded.SummonFullParams([&]() -> absl::Status {
    if (comm.rank() != 0) return absl::OkStatus();
    for (auto& [n, v] : net.NamedParameters()) {
      ZS_ASSIGN_OR_RETURN((*out)[n], v.value().ToVector<float>());
    }
    return absl::OkStatus();
  });
}

// Checks every unit's buffers against the closed forms: trainable elements
// only, padded to the shard group size S.
absl::Status CheckUnits(ShardedModel& sharded, optim::ShardedOptimizer& opt, int steps, bool counted) {
  std::vector<ShardedUnit*> units = sharded.units();
  const std::vector<UnitCounts>& want = ExpectedUnits();
  EXPECT_EQ(units.size(), want.size());
  if (units.size() != want.size()) return absl::OkStatus();
  const int64_t s = sharded.shard_group().size();
  for (size_t i = 0; i < units.size(); ++i) {
    const ShardedUnit& u = *units[i];
    SCOPED_TRACE(absl::StrCat("unit ", u.name, " S=", s));
    EXPECT_EQ(u.name, want[i].name);
    EXPECT_EQ(u.flat.numel(), want[i].trainable + want[i].frozen);
    EXPECT_EQ(u.flat.padded_numel(), Padded(u.flat.numel(), s));
    EXPECT_EQ(u.frozen(), want[i].trainable == 0);
    EXPECT_FALSE(u.full_grad.defined());  // outside backward
    // The optimizer state, resident (swapped in with NVMe offload).
    std::vector<int64_t> state_numel;
    ZS_RETURN_IF_ERROR(opt.WithUnitState(i, /*write=*/false, [&](const std::vector<Tensor>& slots) {
      for (const Tensor& t : slots) state_numel.push_back(t.numel());
      return absl::OkStatus();
    }));
    if (u.frozen()) {
      EXPECT_FALSE(u.grad_shard.defined());
      EXPECT_FALSE(opt.adam_states()[i].exp_avg.defined());
      EXPECT_TRUE(state_numel.empty());
      EXPECT_EQ(u.reduce_scatter_numel, 0);
    } else {
      const int64_t padded = Padded(want[i].trainable, s);
      EXPECT_EQ(u.flat.padded_numel(), padded);
      EXPECT_EQ(u.grad_shard.numel(), padded / s);
      EXPECT_EQ(state_numel, (std::vector<int64_t>{padded / s, padded / s}));  // exp_avg, exp_avg_sq
      if (counted) { EXPECT_EQ(u.reduce_scatter_numel, steps * padded); }
    }
    if (u.owner != nullptr) {
      EXPECT_EQ(u.owner->frozen_part, &u);
      EXPECT_EQ(u.gathers, u.owner->gathers);  // gathered together
    }
  }
  return absl::OkStatus();
}

Outcome TrainLora(const LoraRun& run, int begin, int end) {
  Outcome out;
  std::mutex mu;  // guards out.frozen_masters
  out.reduce_scatter_bytes.assign(run.world, 0);
  out.all_gather_bytes.assign(run.world, 0);
  out.gradient_all_reduce_bytes.assign(run.world, 0);
  std::vector<absl::Status> st = RunRanks(run.world, [&](Communicator& world) -> absl::Status {
    CollectiveBytes bytes;
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> copy, world.Split(0, world.rank()));
    CountingCommunicator comm(std::move(copy), &bytes);
    auto net = std::make_shared<LoraNet>(run.freeze);  // shapes only: each rank inits its shard
    CpuAllocator device(CpuAllocator::Options{.name = absl::StrCat("rank", comm.rank())});
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(net, comm, run.options, &device));
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt,
                        optim::ShardedOptimizer::Create(*sharded, {.lr = kLr, .weight_decay = 0.1}));
    // When the gradient of l0's output is ready, the backward of mid and l1 is
    // over: their frozen bytes should be gone already.
    std::vector<ShardedUnit*> later;
    for (ShardedUnit* u : sharded->units()) {
      if (u->name == "mid" || u->name == "l1[frozen]") later.push_back(u);
    }
    for (auto& [name, m] : net->NamedModules()) {
      if (name != "l0") continue;
      m->AddPostForwardHook([&](nn::Module&, std::vector<Variable>& outs) -> absl::Status {
        if (autograd::InBackward() || !autograd::GradMode::IsEnabled()) return absl::OkStatus();
        outs[0].AddGradHook([&](const Tensor& g) -> absl::StatusOr<Tensor> {
          int n = 0;
          for (ShardedUnit* u : later) n += u->state != ShardedUnit::State::kSharded;
          std::lock_guard<std::mutex> lock(mu);
          out.gathered_late += n;
          return g;
        });
        return absl::OkStatus();
      });
    }
    if (!run.load.empty()) {
      ZS_ASSIGN_OR_RETURN(LoadResult r, LoadCheckpoint(run.load, *sharded, &opt));
      EXPECT_EQ(r.state.step, begin);
      ZS_RETURN_IF_ERROR(GatherParams(*sharded, *net, comm, &out.loaded));
    }
    const int64_t rs_before = bytes.reduce_scatter, ar_before = bytes.gradient_all_reduce;
    const int rows = kGlobalBatch / comm.size();
    for (int step = begin; step < end; ++step) {
      ZS_ASSIGN_OR_RETURN(Variable loss, Loss(*net, step, comm.rank() * rows, rows));
      ZS_RETURN_IF_ERROR(autograd::Backward(loss));
      ZS_RETURN_IF_ERROR(opt.Step(kLr));
      ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
      ZS_ASSIGN_OR_RETURN(Tensor l, Tensor::Full({1}, loss.value().Item().value(), DType::kF32));
      ZS_RETURN_IF_ERROR(comm.AllReduce(l, ReduceOp::kAvg));
      if (comm.rank() == 0) out.result.losses.push_back(l.Item().value());
    }
    out.reduce_scatter_bytes[comm.rank()] = bytes.reduce_scatter - rs_before;
    out.all_gather_bytes[comm.rank()] = bytes.all_gather;
    out.gradient_all_reduce_bytes[comm.rank()] = bytes.gradient_all_reduce - ar_before;
    if (run.freeze) {
      ZS_RETURN_IF_ERROR(CheckUnits(*sharded, opt, end - begin, /*counted=*/run.load.empty()));
      // Sharded state: 16 bytes per trainable element (f32 master, gradient,
      // two moments), 4 per frozen one (its master only).
      const MemoryPlan plan = sharded->Plan();
      int64_t trainable = 0, frozen = 0;
      for (ShardedUnit* u : sharded->units()) (u->frozen() ? frozen : trainable) += u->flat.shard_numel();
      if (!run.options.offload.any() && !run.options.ReplicatesGradients()) {
        EXPECT_EQ(plan.sharded_params, 4 * (trainable + frozen));
        EXPECT_EQ(plan.sharded_grads, 4 * trainable);
        EXPECT_EQ(plan.optimizer_state, 8 * trainable);
        EXPECT_EQ(device.stats().bytes_in_use, 16 * trainable + 4 * frozen);
        if (comm.rank() == 0) out.device_bytes = device.stats().bytes_in_use;
      }
      // The frozen master shards, for bitwise comparisons across runs.
      for (ShardedUnit* u : sharded->units()) {
        if (!u->frozen()) continue;
        ZS_RETURN_IF_ERROR(sharded->WithShard(*u, /*write=*/false, [&](const Tensor& shard) -> absl::Status {
          ZS_ASSIGN_OR_RETURN(std::vector<float> v, shard.ToVector<float>());
          std::lock_guard<std::mutex> lock(mu);
          out.frozen_masters[absl::StrCat(u->name, " rank ", comm.rank())] = v;
          return absl::OkStatus();
        }));
      }
      if (comm.rank() == 0) {
        const std::string text = sharded->ToString();
        EXPECT_THAT(text, HasSubstr("unit 0 \"l0[frozen]\" (LoraLinear), frozen part of unit 1"));
        EXPECT_THAT(text, HasSubstr("unit 2 \"mid\" (Linear), frozen (no gradient, no optimizer state)"));
        EXPECT_THAT(text, HasSubstr("unit 1 \"l0\" (LoraLinear), frozen parameters in unit 0"));
      }
    }
    if (!run.save.empty()) {
      const TrainingState state{.step = end};
      if (run.async_save) {
        AsyncCheckpointer saver;
        ZS_RETURN_IF_ERROR(saver.Start(run.save, *sharded, &opt, state, run.save_options));
        ZS_RETURN_IF_ERROR(saver.Wait());
        ZS_RETURN_IF_ERROR(comm.Barrier());
      } else {
        ZS_RETURN_IF_ERROR(SaveCheckpoint(run.save, *sharded, &opt, state, run.save_options));
      }
    }
    return GatherParams(*sharded, *net, comm, &out.result.params);
  });
  for (size_t i = 0; i < st.size(); ++i) {
    EXPECT_TRUE(st[i].ok()) << "rank " << i << ": " << st[i];
    if (!st[i].ok() && out.status.ok()) out.status = st[i];
  }
  return out;
}

// The loss is a mean of kGlobalBatch x kOut squared errors.
constexpr int64_t kLossTerms = kGlobalBatch * kOut;

// Against the unsharded reference with tests/sharding/parity.h's
// Note [Parity bounds] (this model has no zero-gradient elements); frozen
// parameters bitwise at their initial values. `steps`: AdamW steps taken from
// the reference's initial values.
void ExpectMatchesReference(const Result& got, const Result& want, const std::string& what, int steps) {
  SCOPED_TRACE(what);
  testing::ExpectLossesMatch(got.losses, want.losses, kLossTerms, what);
  ASSERT_EQ(got.params.size(), want.params.size());
  testing::ParamValues got_trained, want_trained;
  for (const auto& [name, w] : want.params) {
    const std::vector<float>& g = got.params.at(name);
    ASSERT_EQ(g.size(), w.size()) << name;
    if (want.initial.count(name) && name.find("lora") == std::string::npos && name != "out_scale") {
      // Frozen: bitwise the initial values.
      EXPECT_EQ(g, want.initial.at(name)) << name;
      EXPECT_EQ(w, want.initial.at(name)) << name;
      continue;
    }
    EXPECT_NE(g, want.initial.at(name)) << name << " did not train";
    got_trained[name] = g;
    want_trained[name] = w;
  }
  testing::ExpectParamsMatch(got_trained, want_trained, {.lr = kLr, .steps = steps}, nullptr, nullptr, what);
}

// Reduce-scatter bytes per rank per step: 4 bytes (f32) per trainable
// element, padded to the shard group size S, of every unit.
int64_t ReduceScatterBytesPerStep(int64_t s) {
  int64_t n = 0;
  for (const UnitCounts& u : ExpectedUnits()) n += u.trainable == 0 ? 0 : Padded(u.trainable, s);
  return 4 * n;
}

constexpr int kSteps = 5;

TEST(FrozenParameters, LoraMatchesUnshardedWithTrainableOnlyGradientsAndState) {
  const Result want = TrainReference(kSteps);
  struct Case {
    int world;
    ShardingStrategy strategy;
    int64_t s;  // shard group size
  };
  for (const Case& c : {Case{1, ShardingStrategy::kFullShard, 1}, Case{2, ShardingStrategy::kFullShard, 2},
                        Case{3, ShardingStrategy::kFullShard, 3}, Case{4, ShardingStrategy::kFullShard, 4},
                        Case{2, ShardingStrategy::kShardGradOp, 2}, Case{2, ShardingStrategy::kNoShard, 1},
                        Case{4, ShardingStrategy::kHybridShard, 2}, Case{3, ShardingStrategy::kShardOptimizer, 3}}) {
    const std::string what = absl::StrCat(ShardingStrategyName(c.strategy), " world ", c.world);
    LoraRun run;
    run.world = c.world;
    run.options = LoraOptions(c.strategy);
    run.options.hybrid_shard_size = 2;
    const Outcome got = TrainLora(run, 0, kSteps);
    ASSERT_TRUE(got.status.ok()) << what << ": " << got.status;
    ExpectMatchesReference(got.result, want, what, kSteps);
    for (int r = 0; r < c.world; ++r) {
      if (c.world == 1) {
        // Note [Gradients that land in their shard]: one rank reduces nothing.
        EXPECT_EQ(got.reduce_scatter_bytes[r], 0) << what << " rank " << r;
        EXPECT_EQ(got.gradient_all_reduce_bytes[r], 0) << what << " rank " << r;
      } else if (c.strategy == ShardingStrategy::kShardOptimizer) {
        // ZeRO-1 all-reduces the same trainable-only flat gradient instead.
        EXPECT_EQ(got.reduce_scatter_bytes[r], 0) << what << " rank " << r;
        EXPECT_EQ(got.gradient_all_reduce_bytes[r], kSteps * ReduceScatterBytesPerStep(c.s)) << what << " rank " << r;
      } else {
        EXPECT_EQ(got.reduce_scatter_bytes[r], kSteps * ReduceScatterBytesPerStep(c.s)) << what << " rank " << r;
      }
    }
    // Frozen bytes go once their unit's backward is over, not at the end of
    // backward (at S = 1 the gathered buffer is the shard itself).
    if (c.s > 1) { EXPECT_EQ(got.gathered_late, 0) << what; }
    if (c.world == 4 && c.strategy == ShardingStrategy::kFullShard) {
      // Rank 0 at S = 4 holds 16 bytes for each of its 32 + 27 + 2 = 61
      // trainable shard elements and 4 for each of its 102 + 218 + 53 + 4 =
      // 377 frozen ones: 976 + 1508 = 2484 bytes (16 x 436 = 6976 with the
      // frozen elements in gradients and optimizer state).
      EXPECT_EQ(got.device_bytes, 2484);
    }
  }
  // The figures, in closed form: trainable 126 + 108 + 7 = 241 elements,
  // frozen 406 + 870 + 210 + 13 = 1499. Per step and rank the reduce-scatters
  // move 4 x (126 + 108 + 7) = 964 bytes at S = 1, 4 x (126 + 108 + 8) = 968
  // at S = 2, 4 x (126 + 108 + 9) = 972 at S = 3, 4 x (128 + 108 + 8) = 976 at
  // S = 4; with the frozen elements in the flat gradient they would be 4 x
  // 1740 = 6960 bytes at S = 1.
  EXPECT_EQ(ReduceScatterBytesPerStep(1), 964);
  EXPECT_EQ(ReduceScatterBytesPerStep(2), 968);
  EXPECT_EQ(ReduceScatterBytesPerStep(3), 972);
  EXPECT_EQ(ReduceScatterBytesPerStep(4), 976);
}

std::string TempDir(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/frozen_", ::getpid(), "_", name);
}

TEST(FrozenParameters, OffloadAndMixedPrecisionKeepFrozenValues) {
  const Result want = TrainReference(kSteps);
  LoraRun plain;
  const Outcome base = TrainLora(plain, 0, kSteps);
  ASSERT_TRUE(base.status.ok()) << base.status;
  // CPU offload of parameters, gradients and optimizer state: bitwise equal.
  LoraRun cpu = plain;
  cpu.options.offload.params = cpu.options.offload.grads = cpu.options.offload.optimizer = true;
  const Outcome offloaded = TrainLora(cpu, 0, kSteps);
  ASSERT_TRUE(offloaded.status.ok()) << offloaded.status;
  EXPECT_EQ(offloaded.result.losses, base.result.losses);
  EXPECT_EQ(offloaded.result.params, base.result.params);
  // NVMe offload of master shards (frozen parts too) and optimizer state: bitwise equal.
  LoraRun nvme = plain;
  const std::string swap = TempDir("nvme");
  ::mkdir(swap.c_str(), 0755);
  OffloadPolicy& off = nvme.options.offload;
  off.nvme_optimizer = off.nvme_params = true;
  off.optimizer_nvme = {.path = swap, .buffer_count = 1};
  off.param_nvme = {.path = swap, .buffer_count = 1};
  off.aio.block_size = 8192;
  const Outcome swapped = TrainLora(nvme, 0, kSteps);
  ASSERT_TRUE(swapped.status.ok()) << swapped.status;
  EXPECT_EQ(swapped.result.losses, base.result.losses);
  EXPECT_EQ(swapped.result.params, base.result.params);
  // bf16 parameters and reduction: frozen master values still bitwise unchanged.
  LoraRun bf16 = plain;
  bf16.options.mixed_precision.param_dtype = DType::kBF16;
  bf16.options.mixed_precision.reduce_dtype = DType::kBF16;
  const Outcome low = TrainLora(bf16, 0, kSteps);
  ASSERT_TRUE(low.status.ok()) << low.status;
  for (const auto& [name, v] : want.initial) {
    if (name.find("lora") != std::string::npos || name == "out_scale") {
      EXPECT_NE(low.result.params.at(name), v) << name;
    }
  }
  EXPECT_EQ(base.frozen_masters.size(), 4u * plain.world);
  EXPECT_EQ(low.frozen_masters, base.frozen_masters);
  EXPECT_EQ(offloaded.frozen_masters, base.frozen_masters);
  EXPECT_EQ(swapped.frozen_masters, base.frozen_masters);
  // bf16 halves the reduce-scatter bytes (trainable only, padded to S = 2).
  EXPECT_EQ(low.reduce_scatter_bytes[0], kSteps * ReduceScatterBytesPerStep(2) / 2);
}

TEST(FrozenParameters, CheckpointsResumeBitwiseAndReshard) {
  LoraRun run;
  const Outcome straight = TrainLora(run, 0, 6);
  ASSERT_TRUE(straight.status.ok()) << straight.status;
  for (StateDictType type : {StateDictType::kSharded, StateDictType::kFull}) {
    for (bool async : {false, true}) {
      const std::string what = absl::StrCat(StateDictTypeName(type), async ? " async" : "");
      SCOPED_TRACE(what);
      LoraRun first = run;
      first.save = TempDir(absl::StrCat("resume_", StateDictTypeName(type), async));
      first.save_options = {.type = type, .file = {.fsync = false}};
      first.async_save = async;
      const Outcome a = TrainLora(first, 0, 3);
      ASSERT_TRUE(a.status.ok()) << a.status;
      LoraRun second = run;
      second.load = first.save;
      const Outcome b = TrainLora(second, 3, 6);
      ASSERT_TRUE(b.status.ok()) << b.status;
      EXPECT_EQ(b.loaded, a.result.params);
      std::vector<double> losses = a.result.losses;
      losses.insert(losses.end(), b.result.losses.begin(), b.result.losses.end());
      EXPECT_EQ(losses, straight.result.losses);
      EXPECT_EQ(b.result.params, straight.result.params);
    }
  }
  // Saved at world 4 (sharded and full), loaded at 1, 2 and 3: the same
  // values bit for bit, and training goes on as it does at world 4.
  LoraRun four = run;
  four.world = 4;
  for (StateDictType type : {StateDictType::kSharded, StateDictType::kFull}) {
    LoraRun save4 = four;
    save4.save = TempDir(absl::StrCat("world4_", StateDictTypeName(type)));
    save4.save_options = {.type = type, .file = {.fsync = false}};
    const Outcome a = TrainLora(save4, 0, 3);
    ASSERT_TRUE(a.status.ok()) << a.status;
    LoraRun tail4 = four;
    tail4.load = save4.save;
    const Outcome tail = TrainLora(tail4, 3, 6);
    ASSERT_TRUE(tail.status.ok()) << tail.status;
    if (type == StateDictType::kSharded) {
      // The offline converter writes what a full save would: loading either
      // at world 2 continues bit for bit alike.
      const std::string converted = TempDir("world4_converted");
      ASSERT_TRUE(ConvertShardedToFull(save4.save, converted, {.fsync = false}).ok());
      LoraRun from_sharded = run, from_converted = run;
      from_sharded.load = save4.save;
      from_converted.load = converted;
      const Outcome x = TrainLora(from_sharded, 3, 6), y = TrainLora(from_converted, 3, 6);
      ASSERT_TRUE(x.status.ok() && y.status.ok()) << x.status << y.status;
      EXPECT_EQ(y.loaded, a.result.params);
      EXPECT_EQ(y.result.losses, x.result.losses);
      EXPECT_EQ(y.result.params, x.result.params);
    }
    for (int world : {1, 2, 3}) {
      const std::string what = absl::StrCat(StateDictTypeName(type), " 4 -> ", world);
      LoraRun into = run;
      into.world = world;
      into.load = save4.save;
      const Outcome b = TrainLora(into, 3, 6);
      ASSERT_TRUE(b.status.ok()) << what << ": " << b.status;
      EXPECT_EQ(b.loaded, a.result.params) << what;
      // Steps 4..6 at another world size: Note [Parity bounds], with the
      // envelope of steps 1..6 (it bounds that of 4..6).
      testing::ExpectLossesMatch(b.result.losses, tail.result.losses, kLossTerms, what);
      testing::ExpectParamsMatch(b.result.params, tail.result.params, {.lr = kLr, .steps = 6}, nullptr, nullptr,
                                 what);
    }
  }
  // Into a model that trains every parameter: the formerly frozen ones load
  // their values, and their (unsaved) optimizer state starts at zero.
  for (StateDictType type : {StateDictType::kSharded, StateDictType::kFull}) {
    LoraRun save = run;
    save.save = TempDir(absl::StrCat("unfreeze_", StateDictTypeName(type)));
    save.save_options = {.type = type, .file = {.fsync = false}};
    const Outcome a = TrainLora(save, 0, 3);
    ASSERT_TRUE(a.status.ok()) << a.status;
    LoraRun unfrozen = run;
    unfrozen.freeze = false;
    unfrozen.load = save.save;
    const Outcome b = TrainLora(unfrozen, 3, 4);
    ASSERT_TRUE(b.status.ok()) << b.status;
    EXPECT_EQ(b.loaded, a.result.params);
    EXPECT_NE(b.result.params.at("mid.weight"), a.result.params.at("mid.weight"));
  }
}

}  // namespace
}  // namespace zeroshard
