// Sharded ResNet training equals unsharded training, BatchNorm buffers
// included: a tiny torchvision-layout ResNet trained a few steps with every
// strategy at world sizes 1-4 gives the losses, final parameters and every
// rank's running statistics of an unsharded reference on the same global
// batch; AverageBuffers() gives the mean of the ranks' statistics;
// sync_module_states broadcasts rank 0's buffers; under bf16 mixed precision
// BatchNorm runs in fp32 (units of its own, fp32 statistics); buffers move to
// the rank's allocator.
//
// The reference (Note [Data-parallel BatchNorm]): data-parallel ranks
// normalise with the statistics of their own B images and update their own
// running statistics. So the reference runs the R per-rank sub-batches of a
// step one after the other through one unsharded model, with R sets of
// buffers swapped in and out (set r is rank r's), backpropagating loss_r / R
// each time: the accumulated gradient is the mean the reduce-scatter computes.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/resnet.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/data/shapes_data.h"
#include "zeroshard/optim/adamw.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using autograd::Variable;
using Values = std::map<std::string, std::vector<float>>;

constexpr uint64_t kSeed = 4321;
constexpr double kLr = 1e-2, kWeightDecay = 0.1;
constexpr int kSteps = 3;
constexpr int kGlobalBatch = 12;  // divisible by 1, 2, 3, 4

nn::ResNetConfig TinyResNet() {
  // 16x16 images: conv1 7x7/2 -> 8, max-pool -> 4, layer1 4x4, layer2 2x2 (downsample).
  return nn::ResNetConfig{.widths = {4, 6}, .depths = {1, 1}, .num_classes = 10, .stem = nn::ResNetStem::kImageNet};
}

const ShapesData& Data() {
  static const ShapesData* d = new ShapesData(ShapesData::Create({.image_size = 16, .train_size = 64, .val_size = 0}).value());
  return *d;
}

struct Result {
  std::vector<double> losses;
  Values params;
  std::vector<Values> buffers;  // per rank (the reference: per buffer set)
  Values averaged;              // float buffers averaged over ranks
};

Values FloatBuffers(nn::Module& m) {
  Values v;
  for (auto& [name, t] : m.NamedBuffers()) {
    if (IsFloatingPoint(t.dtype())) v[name] = t.ToVector<float>().value();
  }
  return v;
}

Result TrainReference(int world) {
  Result r;
  auto net = std::make_shared<nn::ResNet>(TinyResNet());
  EXPECT_TRUE(net->Materialize(kSeed).ok());
  std::vector<nn::NamedTensors> sets(world);
  for (int k = 0; k < world; ++k) {
    for (auto& [name, t] : net->NamedBuffers()) sets[k].emplace_back(name, t.Clone().value());
  }
  auto params = net->NamedParameters();
  std::vector<optim::AdamWState> states;
  for (auto& [n, v] : params) states.push_back(optim::AdamWState::Create(v.numel()).value());
  for (int step = 0; step < kSteps; ++step) {
    for (auto& [n, v] : params) v.reset_grad();
    double loss_sum = 0;
    for (int k = 0; k < world; ++k) {
      EXPECT_TRUE(net->LoadStateDict(sets[k], /*strict=*/false).ok());
      ImageBatch b = Data().TrainBatch({.step = step, .rank = k, .world_size = world,
                                        .batch_size = kGlobalBatch / world}).value();
      Variable logits = (*net)(Variable(b.images)).value();
      Variable loss = ops::CrossEntropy(logits, b.labels).value();
      loss_sum += loss.value().Item().value();
      EXPECT_TRUE(autograd::Backward(ops::Scale(loss, 1.0 / world).value()).ok());
      const nn::NamedTensors now = net->NamedBuffers();  // same order as the set
      for (size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(sets[k][i].second.CopyFrom(now[i].second).ok());
    }
    r.losses.push_back(loss_sum / world);
    for (size_t i = 0; i < params.size(); ++i) {
      const Variable& v = params[i].second;
      const double wd = v.dim() >= 2 ? kWeightDecay : 0.0;
      EXPECT_TRUE(optim::AdamWStep({}, {optim::ParamGroup::Whole(v.numel(), kLr, wd)}, v.value(), v.grad(), states[i]).ok());
    }
  }
  for (auto& [n, v] : params) r.params[n] = v.value().ToVector<float>().value();
  for (int k = 0; k < world; ++k) {
    Values b;
    for (auto& [name, t] : sets[k]) {
      if (IsFloatingPoint(t.dtype())) b[name] = t.ToVector<float>().value();
    }
    r.buffers.push_back(b);
  }
  for (const auto& [name, v] : r.buffers[0]) {
    std::vector<float> mean(v.size(), 0.0f);
    for (size_t i = 0; i < v.size(); ++i) {
      double s = 0;
      for (int k = 0; k < world; ++k) s += r.buffers[k].at(name)[i];
      mean[i] = static_cast<float>(s / world);
    }
    r.averaged[name] = mean;
  }
  return r;
}

ShardingOptions BlockOptions(ShardingStrategy s, int hybrid = 0) {
  ShardingOptions o;
  o.strategy = s;
  o.hybrid_shard_size = hybrid;
  o.wrap = WrapPolicy::ByType({"BasicBlock"});
  o.init_seed = kSeed;
  return o;
}

Result TrainSharded(int world, const ShardingOptions& options) {
  Result r;
  r.buffers.resize(world);
  std::vector<absl::Status> statuses = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    // The allocator outlives the model: the model's buffers move onto it.
    CpuAllocator device(CpuAllocator::Options{.name = absl::StrCat("rank", comm.rank())});
    auto net = std::make_shared<nn::ResNet>(TinyResNet());  // shapes only: each rank inits its shard
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(net, comm, options, &device));
    for (auto& [name, t] : net->NamedBuffers()) {  // moved to the rank's device
      if (t.allocator() != &device) return absl::InternalError(absl::StrCat(name, " is not on the rank's allocator"));
    }
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt,
                        optim::ShardedOptimizer::Create(*sharded, {.lr = kLr, .weight_decay = kWeightDecay}));
    for (int step = 0; step < kSteps; ++step) {
      ZS_ASSIGN_OR_RETURN(ImageBatch b, Data().TrainBatch({.step = step, .rank = comm.rank(), .world_size = comm.size(),
                                                           .batch_size = kGlobalBatch / comm.size()}));
      ZS_ASSIGN_OR_RETURN(Variable logits, (*net)(Variable(b.images)));
      ZS_ASSIGN_OR_RETURN(Variable loss, ops::CrossEntropy(logits, b.labels));
      ZS_RETURN_IF_ERROR(autograd::Backward(loss));
      ZS_RETURN_IF_ERROR(opt.Step(kLr));
      ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
      ZS_ASSIGN_OR_RETURN(Tensor l, Tensor::Full({1}, loss.value().Item().value(), DType::kF32));
      ZS_RETURN_IF_ERROR(comm.AllReduce(l, ReduceOp::kAvg));
      if (comm.rank() == 0) r.losses.push_back(l.Item().value());
    }
    r.buffers[comm.rank()] = FloatBuffers(*net);
    ZS_RETURN_IF_ERROR(sharded->SummonFullParams([&]() -> absl::Status {
      if (comm.rank() != 0) return absl::OkStatus();
      for (auto& [n, v] : net->NamedParameters()) {
        ZS_ASSIGN_OR_RETURN(r.params[n], v.value().ToVector<float>());
      }
      return absl::OkStatus();
    }));
    ZS_RETURN_IF_ERROR(sharded->AverageBuffers());
    if (comm.rank() == 0) r.averaged = FloatBuffers(*net);
    return absl::OkStatus();
  });
  for (size_t i = 0; i < statuses.size(); ++i) EXPECT_TRUE(statuses[i].ok()) << "rank " << i << ": " << statuses[i];
  return r;
}

void ExpectValues(const Values& got, const Values& want, double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << what << ": " << name;
    const std::vector<float>& g = got.at(name);
    ASSERT_EQ(g.size(), w.size()) << what << ": " << name;
    int bad = 0;
    for (size_t i = 0; i < w.size() && bad < 3; ++i) {
      if (!(std::fabs(g[i] - w[i]) <= atol + 1e-5 * std::fabs(w[i]))) {
        ADD_FAILURE() << what << ": " << name << "[" << i << "] " << g[i] << " vs " << w[i];
        ++bad;
      }
    }
  }
}

void ExpectMatches(const Result& got, const Result& want, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::fabs(want.losses[i])) << "step " << i;
  }
  ExpectValues(got.params, want.params, 5e-5, "parameters");
  ASSERT_EQ(got.buffers.size(), want.buffers.size());
  for (size_t k = 0; k < want.buffers.size(); ++k) {
    ExpectValues(got.buffers[k], want.buffers[k], 1e-5, absl::StrCat("rank ", k, " buffers"));
  }
  ExpectValues(got.averaged, want.averaged, 1e-5, "averaged buffers");
}

TEST(ResNetSharded, EveryStrategyAndWorldSizeMatchesUnsharded) {
  for (int world : {1, 2, 3, 4}) {
    const Result want = TrainReference(world);
    for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
                               ShardingStrategy::kNoShard}) {
      ExpectMatches(TrainSharded(world, BlockOptions(s)), want,
                    absl::StrCat(ShardingStrategyName(s), " world ", world));
    }
    if (world % 2 == 0) {
      ExpectMatches(TrainSharded(world, BlockOptions(ShardingStrategy::kHybridShard, 2)), want,
                    absl::StrCat("HYBRID_SHARD groups of 2, world ", world));
    }
  }
}

TEST(ResNetSharded, RanksKeepTheirOwnStatisticsUntilAveraged) {
  const Result r = TrainSharded(2, BlockOptions(ShardingStrategy::kFullShard));
  // Different images per rank: different running means.
  EXPECT_NE(r.buffers[0].at("bn1.running_mean"), r.buffers[1].at("bn1.running_mean"));
  for (size_t i = 0; i < r.averaged.at("bn1.running_mean").size(); ++i) {
    EXPECT_NEAR(r.averaged.at("bn1.running_mean")[i],
                0.5 * (r.buffers[0].at("bn1.running_mean")[i] + r.buffers[1].at("bn1.running_mean")[i]), 1e-6);
  }
}

TEST(ResNetSharded, SyncModuleStatesBroadcastsBuffers) {
  std::vector<Values> got(3);
  std::vector<absl::Status> statuses = RunRanks(3, [&](Communicator& comm) -> absl::Status {
    auto net = std::make_shared<nn::ResNet>(TinyResNet());
    ZS_RETURN_IF_ERROR(net->Materialize(kSeed + comm.rank()));  // different weights per rank
    for (auto& [name, t] : net->NamedBuffers()) {
      ZS_RETURN_IF_ERROR(t.Fill(IsFloatingPoint(t.dtype()) ? 0.5 + comm.rank() : comm.rank()));
    }
    ShardingOptions o = BlockOptions(ShardingStrategy::kNoShard);
    o.sync_module_states = true;
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(net, comm, o));
    got[comm.rank()] = FloatBuffers(*net);
    for (auto& [name, t] : net->NamedBuffers()) {
      if (t.dtype() == DType::kI64 && t.Item().value() != 0) {
        return absl::InternalError(absl::StrCat(name, " not broadcast: ", t.Item().value()));
      }
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) ZS_EXPECT_OK(s);
  for (int k = 0; k < 3; ++k) {
    for (const auto& [name, v] : got[k]) {
      for (float x : v) ASSERT_EQ(x, 0.5f) << "rank " << k << " " << name;
    }
  }
}

TEST(ResNetSharded, Bf16KeepsBatchNormInFp32) {
  ShardingOptions o = BlockOptions(ShardingStrategy::kFullShard);
  o.mixed_precision.param_dtype = DType::kBF16;
  o.mixed_precision.reduce_dtype = DType::kBF16;
  std::mutex mu;
  std::map<std::string, DType> seen;  // parameter dtypes inside forward
  std::vector<absl::Status> statuses = RunRanks(2, [&](Communicator& comm) -> absl::Status {
    auto net = std::make_shared<nn::ResNet>(TinyResNet());
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(net, comm, o));
    for (ShardedUnit* u : sharded->units()) {
      const bool bn = u->module->type_name() == "BatchNorm2d";
      if ((u->param_dtype == DType::kF32) != bn || (u->reduce_dtype == DType::kF32) != bn) {
        return absl::InternalError(absl::StrCat("unit ", u->name, " gathers ", DTypeName(u->param_dtype),
                                                " and reduces ", DTypeName(u->reduce_dtype)));
      }
    }
    // What the layers see inside forward (hooks run after the unit's gather).
    for (auto& [name, m] : net->NamedModules()) {
      if (name != "layer1.0.bn1" && name != "layer1.0.conv1") continue;
      nn::Module* mod = m;
      m->AddPreForwardHook([&, mod, name](nn::Module&) {
        std::lock_guard<std::mutex> lock(mu);
        seen[name + ".weight"] = mod->FindParameter("weight")->var.dtype();
        return absl::OkStatus();
      });
    }
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt, optim::ShardedOptimizer::Create(*sharded, {.lr = kLr}));
    for (int step = 0; step < kSteps; ++step) {
      ZS_ASSIGN_OR_RETURN(ImageBatch b, Data().TrainBatch({.step = step, .rank = comm.rank(), .world_size = 2,
                                                           .batch_size = kGlobalBatch / 2}));
      ZS_ASSIGN_OR_RETURN(Variable logits, (*net)(Variable(b.images)));
      ZS_ASSIGN_OR_RETURN(Variable loss, ops::CrossEntropy(logits, b.labels));
      if (!std::isfinite(loss.value().Item().value())) return absl::InternalError("non-finite loss");
      ZS_RETURN_IF_ERROR(autograd::Backward(loss));
      ZS_RETURN_IF_ERROR(opt.Step(kLr));
      ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
    }
    for (auto& [name, t] : net->NamedBuffers()) {
      if (name.find("running") != std::string::npos && t.dtype() != DType::kF32) {
        return absl::InternalError(absl::StrCat(name, " is ", DTypeName(t.dtype())));
      }
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) ZS_EXPECT_OK(s);
  EXPECT_EQ(seen.at("layer1.0.bn1.weight"), DType::kF32);
  EXPECT_EQ(seen.at("layer1.0.conv1.weight"), DType::kBF16);
}

}  // namespace
}  // namespace zeroshard
