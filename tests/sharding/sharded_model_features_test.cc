// ShardedModel features beyond training parity: deferred per-shard init equals
// the unsharded init bit for bit, gradient-norm clipping equals the unsharded
// norm, summon_full_params with write-back, frozen parameters, memory bounds
// (16 bytes per parameter / N of sharded state; at most limit_all_gathers
// gathered units), printing, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/tests/sharding/parity.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::BlockOptions;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::TinyConfig;
using ::zeroshard::testing::TinyData;

void ExpectAllOk(const std::vector<absl::Status>& st) {
  for (size_t i = 0; i < st.size(); ++i) EXPECT_TRUE(st[i].ok()) << "rank " << i << ": " << st[i];
}

TEST(ShardedFeatures, DeferredShardInitEqualsUnshardedInitBitwise) {
  auto ref = std::make_shared<nn::Gpt>(TinyConfig());
  ASSERT_TRUE(ref->Materialize(77).ok());
  std::map<std::string, std::vector<float>> want;
  for (auto& [n, v] : ref->NamedParameters()) want[n] = v.value().ToVector<float>().value();
  ExpectAllOk(RunRanks(3, [&](Communicator& comm) -> absl::Status {
    auto gpt = std::make_shared<nn::Gpt>(TinyConfig());  // never materialised whole
    ShardingOptions o = BlockOptions(ShardingStrategy::kFullShard);
    o.init_seed = 77;
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o));
    return sharded->SummonFullParams([&]() -> absl::Status {
      for (auto& [n, v] : gpt->NamedParameters()) {
        ZS_ASSIGN_OR_RETURN(std::vector<float> got, v.value().ToVector<float>());
        EXPECT_EQ(got, want[n]) << n << " on rank " << comm.rank();
      }
      return absl::OkStatus();
    });
  }));
}

TEST(ShardedFeatures, ClipGradNormEqualsTheUnshardedNorm) {
  const TokenData data = TinyData();
  // Unsharded gradient norms (2 and inf) for the first batch of 12 rows.
  auto ref = std::make_shared<nn::Gpt>(TinyConfig());
  ASSERT_TRUE(ref->Materialize(5).ok());
  Batch b = data.GetBatch({.batch_size = 12, .block_size = 8}).value();
  nn::GptOutput out = ref->Forward(b.inputs, b.targets).value();
  ASSERT_TRUE(autograd::Backward(out.loss).ok());
  double ss = 0, mx = 0;
  for (auto& [n, v] : ref->NamedParameters()) {
    const std::vector<float> grad = v.grad().ToVector<float>().value();
    for (float g : grad) {
      ss += double(g) * g;
      mx = std::max(mx, std::fabs(double(g)));
    }
  }
  for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kNoShard,
                             ShardingStrategy::kHybridShard}) {
    ExpectAllOk(RunRanks(4, [&](Communicator& comm) -> absl::Status {
      auto gpt = std::make_shared<nn::Gpt>(TinyConfig());
      ShardingOptions o = BlockOptions(s);
      o.init_seed = 5;
      o.hybrid_shard_size = 2;
      ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o));
      ZS_ASSIGN_OR_RETURN(Batch mine, data.GetBatch({.rank = comm.rank(), .world_size = 4, .batch_size = 3,
                                                     .block_size = 8}));
      ZS_ASSIGN_OR_RETURN(nn::GptOutput o2, gpt->Forward(mine.inputs, mine.targets));
      ZS_RETURN_IF_ERROR(autograd::Backward(o2.loss));
      ZS_ASSIGN_OR_RETURN(double inf_norm, sharded->ClipGradNorm(1e9, INFINITY));
      ZS_ASSIGN_OR_RETURN(double norm, sharded->ClipGradNorm(0.5 * std::sqrt(ss)));
      EXPECT_NEAR(norm, std::sqrt(ss), 1e-5 * std::sqrt(ss)) << ShardingStrategyName(s);
      EXPECT_NEAR(inf_norm, mx, 1e-5 * mx) << ShardingStrategyName(s);
      // After clipping to half the norm, the norm is half.
      ZS_ASSIGN_OR_RETURN(double clipped, sharded->ClipGradNorm(1e9));
      EXPECT_NEAR(clipped, 0.5 * std::sqrt(ss), 1e-4 * std::sqrt(ss));
      return absl::OkStatus();
    }));
  }
}

TEST(ShardedFeatures, SummonFullParamsWritesBack) {
  ExpectAllOk(RunRanks(2, [&](Communicator& comm) -> absl::Status {
    auto gpt = std::make_shared<nn::Gpt>(TinyConfig());
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, BlockOptions(ShardingStrategy::kFullShard)));
    ZS_RETURN_IF_ERROR(sharded->SummonFullParams([&]() -> absl::Status {
      for (auto& [n, v] : gpt->NamedParameters()) ZS_RETURN_IF_ERROR(v.value().Fill(0.25));
      return absl::OkStatus();
    }, /*writeback=*/true));
    // Outside the scope the parameters are gone (sharded) ...
    EXPECT_FALSE(gpt->NamedParameters()[0].second.defined());
    // ... and the shards hold the written values.
    for (ShardedUnit* u : sharded->units()) {
      ZS_ASSIGN_OR_RETURN(std::vector<float> shard, u->shard.ToVector<float>());
      const int64_t real = std::min(u->flat.shard_numel(), u->flat.numel() - u->flat.shard_offset());
      for (int64_t i = 0; i < real; ++i) EXPECT_EQ(shard[i], 0.25f);
    }
    return absl::OkStatus();
  }));
}

TEST(ShardedFeatures, FrozenParametersShareUnitsAndNeverChange) {
  // With activation checkpointing too: the recompute inside backward reads
  // the frozen parts (Note [Frozen parameters]).
  for (bool checkpointing : {false, true}) {
  SCOPED_TRACE(checkpointing ? "activation checkpointing" : "");
  ExpectAllOk(RunRanks(2, [&](Communicator& comm) -> absl::Status {
    nn::GptConfig config = TinyConfig();
    config.activation_checkpointing = checkpointing;
    auto gpt = std::make_shared<nn::Gpt>(config);
    ZS_RETURN_IF_ERROR(gpt->Materialize(9));
    // Freeze every LayerNorm and the first block's attention (a LoRA-like mix).
    std::map<std::string, std::vector<float>> frozen;
    for (auto& [n, v] : gpt->NamedParameters()) {
      if (n.find("ln_") != std::string::npos || n.find("h.0.attn") != std::string::npos) {
        ZS_RETURN_IF_ERROR(v.set_requires_grad(false));
        ZS_ASSIGN_OR_RETURN(frozen[n], v.value().ToVector<float>());
      }
    }
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, BlockOptions(ShardingStrategy::kFullShard)));
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt,
                        optim::ShardedOptimizer::Create(*sharded, {.lr = 1e-2, .weight_decay = 0.1}));
    const TokenData data = TinyData();
    double first = 0, last = 0;
    for (int step = 0; step < 6; ++step) {
      ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = step, .rank = comm.rank(), .world_size = 2,
                                                  .batch_size = 6, .block_size = 8}));
      ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt->Forward(b.inputs, b.targets));
      (step == 0 ? first : last) = out.loss.value().Item().value();
      ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));
      ZS_RETURN_IF_ERROR(opt.Step(1e-2));
      ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
    }
    EXPECT_LT(last, first);
    return sharded->SummonFullParams([&]() -> absl::Status {
      for (auto& [n, v] : gpt->NamedParameters()) {
        auto it = frozen.find(n);
        if (it == frozen.end()) continue;
        ZS_ASSIGN_OR_RETURN(std::vector<float> now, v.value().ToVector<float>());
        EXPECT_EQ(now, it->second) << n;
      }
      return absl::OkStatus();
    });
  }));
  }
}

TEST(ShardedFeatures, ShardedStateIs16BytesPerParameterOverNAndGathersAreLimited) {
  const int world = 4;
  std::mutex mu;
  std::map<ShardingStrategy, int64_t> peaks;
  for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kNoShard}) {
    ExpectAllOk(RunRanks(world, [&](Communicator& comm) -> absl::Status {
      nn::GptConfig c = TinyConfig();
      c.n_layer = 4;
      auto gpt = std::make_shared<nn::Gpt>(c);
      CpuAllocator device(CpuAllocator::Options{.name = absl::StrCat("rank", comm.rank())});
      ShardingOptions o = BlockOptions(s, BackwardPrefetch::kBackwardPre, /*forward_prefetch=*/true);
      o.limit_all_gathers = 2;
      ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o, &device));
      ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt, optim::ShardedOptimizer::Create(*sharded, {.lr = 1e-3}));
      int64_t shard_numel = 0;
      for (ShardedUnit* u : sharded->units()) shard_numel += u->flat.shard_numel();
      // fp32 params + grads + Adam moments: 16 bytes per element of this rank's shards.
      EXPECT_EQ(device.stats().bytes_in_use, 16 * shard_numel);
      if (s == ShardingStrategy::kFullShard) {
        EXPECT_LE(shard_numel, gpt->NumParameters() / world + 5 * world);  // padding only
      }
      // Count gathered non-root units whenever a block starts forward.
      int max_gathered = 0;
      for (auto& [name, m] : gpt->NamedModules()) {
        if (m->type_name() != "Block") continue;
        m->AddPreForwardHook([&](nn::Module&) {
          int n = 0;
          for (ShardedUnit* u : sharded->units()) n += !u->is_root && u->state != ShardedUnit::State::kSharded;
          max_gathered = std::max(max_gathered, n);
          return absl::OkStatus();
        });
      }
      const TokenData data = TinyData();
      device.ResetPeak();
      for (int step = 0; step < 3; ++step) {
        ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = step, .rank = comm.rank(), .world_size = world,
                                                    .batch_size = 2, .block_size = 8}, &device));
        ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt->Forward(b.inputs, b.targets));
        ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));
        ZS_RETURN_IF_ERROR(opt.Step(1e-3));
        ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
      }

      // After a step, only the sharded state remains.
      EXPECT_EQ(device.stats().bytes_in_use, 16 * shard_numel);
      if (s == ShardingStrategy::kFullShard) { EXPECT_LE(max_gathered, o.limit_all_gathers); }
      std::lock_guard<std::mutex> lock(mu);
      peaks[s] = std::max(peaks[s], device.stats().peak_bytes_in_use);
      return absl::OkStatus();
    }));
  }
  EXPECT_LT(peaks[ShardingStrategy::kFullShard], peaks[ShardingStrategy::kNoShard]);
}

TEST(ShardedFeatures, ShardOptimizerKeepsTheWholeGradientOnEveryRank) {
  // Note [Replicated gradients], in closed form: after a step a rank holds its
  // f32 master shard and Adam moments (12 bytes per shard element) and, under
  // SHARD_OPTIMIZER (ZeRO-1), the whole f32 gradient (4 bytes per padded
  // element of every unit) where SHARD_GRAD_OP (ZeRO-2) holds its shard of it
  // (4 bytes per shard element). The plan says the same before any step.
  const int world = 4;
  std::mutex mu;
  std::map<ShardingStrategy, int64_t> after_step;
  for (ShardingStrategy s : {ShardingStrategy::kShardGradOp, ShardingStrategy::kShardOptimizer}) {
    ExpectAllOk(RunRanks(world, [&](Communicator& comm) -> absl::Status {
      nn::GptConfig c = TinyConfig();
      c.n_layer = 4;
      auto gpt = std::make_shared<nn::Gpt>(c);
      CpuAllocator device(CpuAllocator::Options{.name = absl::StrCat("rank", comm.rank())});
      ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, BlockOptions(s), &device));
      ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt, optim::ShardedOptimizer::Create(*sharded, {.lr = 1e-3}));
      int64_t shard_numel = 0, padded_numel = 0;
      for (ShardedUnit* u : sharded->units()) {
        shard_numel += u->flat.shard_numel();
        padded_numel += u->flat.padded_numel();
      }
      EXPECT_EQ(padded_numel, world * shard_numel);
      const bool zero1 = s == ShardingStrategy::kShardOptimizer;
      const int64_t want = 12 * shard_numel + 4 * (zero1 ? padded_numel : shard_numel);
      EXPECT_EQ(device.stats().bytes_in_use, want);
      const MemoryPlan plan = sharded->Plan();
      EXPECT_EQ(plan.sharded_params, 4 * shard_numel);
      EXPECT_EQ(plan.optimizer_state, 8 * shard_numel);
      EXPECT_EQ(plan.sharded_grads, zero1 ? 0 : 4 * shard_numel);
      EXPECT_EQ(plan.replicated_grads, zero1 ? 4 * padded_numel : 0);
      EXPECT_EQ(plan.total() - plan.gathered_peak, want);
      if (zero1) {
        EXPECT_THAT(sharded->ToString(), HasSubstr("replicated grads"));
      }
      const TokenData data = TinyData();
      for (int step = 0; step < 2; ++step) {
        ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = step, .rank = comm.rank(), .world_size = world,
                                                    .batch_size = 2, .block_size = 8}, &device));
        ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt->Forward(b.inputs, b.targets));
        ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));
        if (zero1) {
          // Every rank holds the same whole gradient; the shard is its own slice of it.
          for (ShardedUnit* u : sharded->units()) {
            ZS_ASSIGN_OR_RETURN(Tensor copy, u->replicated_grad.Contiguous());
            ZS_ASSIGN_OR_RETURN(Tensor c2, copy.Clone());
            ZS_RETURN_IF_ERROR(comm.AllReduce(c2, ReduceOp::kMax));
            ZS_ASSIGN_OR_RETURN(std::vector<float> mine, copy.ToVector<float>());
            ZS_ASSIGN_OR_RETURN(std::vector<float> most, c2.ToVector<float>());
            EXPECT_EQ(mine, most) << u->name;
            ZS_ASSIGN_OR_RETURN(Tensor slice, u->replicated_grad.Narrow(0, u->flat.shard_offset(),
                                                                        u->flat.shard_numel()));
            EXPECT_TRUE(IsSameView(slice, u->grad_shard)) << u->name;
          }
        }
        ZS_RETURN_IF_ERROR(opt.Step(1e-3));
        ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
      }
      EXPECT_EQ(device.stats().bytes_in_use, want);
      if (comm.rank() == 0) {
        std::printf("%s: %lld shard / %lld padded elements per rank, %lld bytes after a step\n",
                    std::string(ShardingStrategyName(s)).c_str(), static_cast<long long>(shard_numel),
                    static_cast<long long>(padded_numel), static_cast<long long>(want));
        std::lock_guard<std::mutex> lock(mu);
        after_step[s] = device.stats().bytes_in_use;
      }
      return absl::OkStatus();
    }));
  }
  // The difference is (N-1)/N of a whole f32 gradient.
  EXPECT_GT(after_step[ShardingStrategy::kShardOptimizer], after_step[ShardingStrategy::kShardGradOp]);
}

TEST(ShardedFeatures, KeepLowPrecisionGradsHalvesTheGradientBytes) {
  // bf16 parameters and reduction. The gradient shards are f32 (4 bytes per
  // shard element) or, with keep_low_precision_grads, bf16 (2 bytes); under
  // SHARD_OPTIMIZER the whole replicated gradient likewise (4 or 2 bytes per
  // padded element). Master weights and Adam moments stay f32 (12 bytes per
  // shard element). Clipping sees the same norm within bf16 rounding.
  const int world = 4;
  std::mutex mu;
  std::map<std::pair<ShardingStrategy, bool>, double> norms;
  for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardOptimizer}) {
    for (bool keep_low : {false, true}) {
      ExpectAllOk(RunRanks(world, [&](Communicator& comm) -> absl::Status {
        nn::GptConfig c = TinyConfig();
        c.n_layer = 4;
        auto gpt = std::make_shared<nn::Gpt>(c);
        CpuAllocator device(CpuAllocator::Options{.name = absl::StrCat("rank", comm.rank())});
        ShardingOptions o = BlockOptions(s);
        o.init_seed = 5;
        o.mixed_precision.param_dtype = DType::kBF16;
        o.mixed_precision.reduce_dtype = DType::kBF16;
        o.mixed_precision.keep_low_precision_grads = keep_low;
        ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o, &device));
        ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt, optim::ShardedOptimizer::Create(*sharded, {.lr = 1e-3}));
        int64_t shard_numel = 0, padded_numel = 0;
        for (ShardedUnit* u : sharded->units()) {
          shard_numel += u->flat.shard_numel();
          padded_numel += u->flat.padded_numel();
          EXPECT_EQ(u->grad_shard.dtype(), keep_low ? DType::kBF16 : DType::kF32) << u->name;
        }
        const bool zero1 = s == ShardingStrategy::kShardOptimizer;
        const int64_t grad_item = keep_low ? 2 : 4;
        const int64_t grad_bytes = grad_item * (zero1 ? padded_numel : shard_numel);
        const int64_t want = 12 * shard_numel + grad_bytes;
        EXPECT_EQ(device.stats().bytes_in_use, want);
        const MemoryPlan plan = sharded->Plan();
        EXPECT_EQ(zero1 ? plan.replicated_grads : plan.sharded_grads, grad_bytes);
        EXPECT_EQ(plan.total() - plan.gathered_peak, want);
        const TokenData data = TinyData();
        for (int step = 0; step < 2; ++step) {
          ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = step, .rank = comm.rank(), .world_size = world,
                                                      .batch_size = 2, .block_size = 8}, &device));
          ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt->Forward(b.inputs, b.targets));
          ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));
          ZS_ASSIGN_OR_RETURN(double norm, sharded->ClipGradNorm(0.5));
          ZS_ASSIGN_OR_RETURN(double after, sharded->ClipGradNorm(1e9));  // measures only
          EXPECT_NEAR(after, std::min(norm, 0.5), 0.01 * std::min(norm, 0.5));
          if (step == 0 && comm.rank() == 0) {
            std::lock_guard<std::mutex> lock(mu);
            norms[{s, keep_low}] = norm;
          }
          ZS_RETURN_IF_ERROR(opt.Step(1e-3));
          ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
        }
        EXPECT_EQ(device.stats().bytes_in_use, want);
        if (comm.rank() == 0) {
          std::printf("%s keep_low_precision_grads %d: %lld shard / %lld padded elements, %lld bytes after a step\n",
                      std::string(ShardingStrategyName(s)).c_str(), keep_low, static_cast<long long>(shard_numel),
                      static_cast<long long>(padded_numel), static_cast<long long>(want));
        }
        return absl::OkStatus();
      }));
    }
  }
  for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardOptimizer}) {
    const double f32 = norms[{s, false}], low = norms[{s, true}];
    EXPECT_GT(f32, 0.0);
    EXPECT_NEAR(low, f32, 0.01 * f32) << ShardingStrategyName(s);
  }
}

// HYBRID_SHARD with hybrid_shard_size 0 makes a shard group of each node's
// ranks (Note [Hybrid shard groups]); in-process ranks share one node, so one
// group of every rank, and the explicit size prints its groups by rank.
// (Several nodes: tools/sim_train.sh runs processes as two named nodes.)
TEST(ShardedFeatures, HybridShardGroupsFollowTheNodes) {
  ExpectAllOk(RunRanks(4, [&](Communicator& comm) -> absl::Status {
    ShardingOptions per_node = BlockOptions(ShardingStrategy::kHybridShard);
    EXPECT_EQ(per_node.hybrid_shard_size, 0);
    EXPECT_THAT(per_node.ToString(), HasSubstr("HYBRID_SHARD (a group per node)"));
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(std::make_shared<nn::Gpt>(TinyConfig()), comm, per_node));
    EXPECT_EQ(sharded->options().hybrid_shard_size, 4);
    EXPECT_EQ(sharded->shard_group().size(), 4);
    EXPECT_EQ(sharded->replica_group().size(), 1);
    EXPECT_THAT(sharded->GroupMapping(),
                HasSubstr(absl::StrCat("HYBRID_SHARD: one shard group of all 4 ranks (node ", ThisNodeName(),
                                       ": ranks 0-3)")));
    ShardingOptions pairs = per_node;
    pairs.hybrid_shard_size = 2;
    ZS_ASSIGN_OR_RETURN(auto two, ShardedModel::Create(std::make_shared<nn::Gpt>(TinyConfig()), comm, pairs));
    EXPECT_EQ(two->GroupMapping(),
              "HYBRID_SHARD: 2 shard groups of 2 ranks, each parameter replicated across the groups\n"
              "  shard group 0: ranks 0, 1\n  shard group 1: ranks 2, 3\n"
              "  replica groups: ranks {r, r + 2, ...} for r in 0..1");
    return absl::OkStatus();
  }));
}

TEST(ShardedFeatures, PrintsUnitsAndErrors) {
  ExpectAllOk(RunRanks(2, [&](Communicator& comm) -> absl::Status {
    auto gpt = std::make_shared<nn::Gpt>(TinyConfig());
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, BlockOptions(ShardingStrategy::kFullShard)));
    const std::string text = sharded->ToString();
    EXPECT_THAT(text, HasSubstr("unit 0 \"transformer.h.0\" (Block)"));
    EXPECT_THAT(text, HasSubstr("transformer.wte.weight"));
    EXPECT_THAT(text, HasSubstr("(also lm_head.weight)"));
    EXPECT_THAT(text, HasSubstr("memory plan per rank"));
    ShardingOptions bad = BlockOptions(ShardingStrategy::kHybridShard);
    bad.hybrid_shard_size = 3;
    auto other = std::make_shared<nn::Gpt>(TinyConfig());
    EXPECT_THAT(ShardedModel::Create(other, comm, bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hybrid_shard_size 3 must be 0 (the ranks of a node) or divide the world size 2")));
    ShardingOptions ignored = BlockOptions(ShardingStrategy::kFullShard);
    ignored.ignored_modules = {"transformer.nope"};
    EXPECT_THAT(ShardedModel::Create(other, comm, ignored),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ignored module \"transformer.nope\"")));
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace zeroshard

namespace zeroshard {
namespace {

struct OffloadRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;
  int64_t device_after_create = 0;
  int64_t device_peak = 0;  // rank 0
  absl::Status status;
};

OffloadRun RunWithOffload(const OffloadPolicy& offload, int64_t device_capacity, bool no_sync) {
  OffloadRun out;
  std::mutex mu;
  std::vector<absl::Status> st = RunRanks(2, [&](Communicator& comm) -> absl::Status {
    nn::GptConfig c = TinyConfig();
    c.n_layer = 3;
    auto gpt = std::make_shared<nn::Gpt>(c);
    CpuAllocator device(CpuAllocator::Options{.name = absl::StrCat("device", comm.rank()),
                                              .capacity_bytes = device_capacity});
    CpuAllocator host(CpuAllocator::Options{.name = absl::StrCat("host", comm.rank())});
    ShardingOptions o = BlockOptions(ShardingStrategy::kFullShard);
    o.init_seed = 3;
    o.offload = offload;
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o, &device, &host));
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt,
                        optim::ShardedOptimizer::Create(*sharded, {.lr = 1e-2, .weight_decay = 0.1}));
    if (comm.rank() == 0) out.device_after_create = device.stats().bytes_in_use;
    const TokenData data = TinyData();
    for (int step = 0; step < 4; ++step) {
      double loss = 0;
      for (int m = 0; m < 2; ++m) {  // two micro-steps, both accumulation modes
        ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = step, .micro_step = m, .accum_steps = 2,
                                                    .rank = comm.rank(), .world_size = 2,
                                                    .batch_size = 3, .block_size = 8}, &device));
        ZS_ASSIGN_OR_RETURN(nn::GptOutput y, gpt->Forward(b.inputs, b.targets));
        loss += y.loss.value().Item().value() / 2;
        ZS_ASSIGN_OR_RETURN(autograd::Variable scaled, ops::Scale(y.loss, 0.5));
        if (no_sync && m == 0) {
          auto scope = sharded->NoSync();
          ZS_RETURN_IF_ERROR(autograd::Backward(scaled));
        } else {
          ZS_RETURN_IF_ERROR(autograd::Backward(scaled));
        }
      }
      ZS_RETURN_IF_ERROR(opt.Step(1e-2));
      ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
      if (comm.rank() == 0) out.losses.push_back(loss);
    }
    if (comm.rank() == 0) out.device_peak = device.stats().peak_bytes_in_use;
    return sharded->SummonFullParams([&]() -> absl::Status {
      if (comm.rank() != 0) return absl::OkStatus();
      for (auto& [n, v] : gpt->NamedParameters()) {
        ZS_ASSIGN_OR_RETURN(out.params[n], v.value().ToVector<float>());
      }
      return absl::OkStatus();
    });
  });
  out.status = st[0].ok() ? st[1] : st[0];
  return out;
}

TEST(ShardedFeatures, CpuOffloadIsBitwiseIdenticalAndMovesTheStateOffTheDevice) {
  for (bool no_sync : {false, true}) {
    const OffloadRun base = RunWithOffload({}, 0, no_sync);
    ASSERT_TRUE(base.status.ok()) << base.status;
    const OffloadRun off = RunWithOffload({.params = true, .grads = true, .optimizer = true}, 0, no_sync);
    ASSERT_TRUE(off.status.ok()) << off.status;
    EXPECT_EQ(off.losses, base.losses) << "no_sync " << no_sync;
    EXPECT_EQ(off.params, base.params) << "no_sync " << no_sync;
    // 16 bytes per shard element stay on the device without offload, none with it.
    EXPECT_GT(base.device_after_create, 0);
    EXPECT_EQ(off.device_after_create, 0);
  }
}

TEST(ShardedFeatures, OverBudgetFailsClearlyWithoutOffloadAndTrainsWithIt) {
  // A device budget that holds a step's transient buffers but not the
  // sharded optimizer state as well.
  const OffloadRun measure = RunWithOffload({.optimizer = true}, 0, false);
  ASSERT_TRUE(measure.status.ok());
  const OffloadRun unlimited = RunWithOffload({}, 0, false);
  // Without offload the peak is higher by the sharded state (16 bytes per shard element).
  ASSERT_GT(unlimited.device_peak, measure.device_peak + 1024);
  const int64_t budget = measure.device_peak + 512;
  const OffloadRun plain = RunWithOffload({}, budget, false);
  EXPECT_EQ(plain.status.code(), absl::StatusCode::kResourceExhausted) << plain.status;
  EXPECT_THAT(std::string(plain.status.message()), HasSubstr("out of memory"));
  const OffloadRun off = RunWithOffload({.optimizer = true}, budget, false);
  EXPECT_TRUE(off.status.ok()) << off.status;
  EXPECT_EQ(off.losses, measure.losses);
}

}  // namespace
}  // namespace zeroshard
