#include "zeroshard/tests/sharding/parity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/optim/adamw.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::testing {

using autograd::Variable;

namespace {
constexpr uint64_t kSeed = 1234;
constexpr double kLr = 1e-2;

}  // namespace

nn::GptConfig TinyConfig() {
  return nn::GptConfig{.vocab_size = 32, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
}

// A learnable stream: a fixed cycle of 11 tokens with one random token in 8.
TokenData TinyData() {
  std::vector<uint16_t> tokens(2000);
  uint32_t s = 7;
  for (size_t i = 0; i < tokens.size(); ++i) {
    s = s * 1103515245u + 12345u;
    tokens[i] = ((s >> 16) % 8 == 0) ? static_cast<uint16_t>((s >> 8) % 32)
                                     : static_cast<uint16_t>((i * 5) % 11);
  }
  return TokenData::FromTokens(tokens, 32);
}


// The reference: one rank, no sharding, one AdamW state per parameter.
Result TrainUnsharded(int steps, int global_batch) {
  Result r;
  auto gpt = std::make_shared<nn::Gpt>(TinyConfig());
  EXPECT_TRUE(gpt->Materialize(kSeed).ok());
  const TokenData data = TinyData();
  auto params = gpt->NamedParameters();
  for (auto& [n, v] : params) r.initial[n] = v.value().ToVector<float>().value();
  r.tokens_per_step = int64_t{global_batch} * TinyConfig().block_size;
  std::vector<optim::AdamWState> states;
  for (auto& [n, v] : params) states.push_back(optim::AdamWState::Create(v.numel()).value());
  for (int step = 0; step < steps; ++step) {
    for (auto& [n, v] : params) v.reset_grad();
    Batch b = data.GetBatch({.step = step, .batch_size = global_batch, .block_size = 8}).value();
    nn::GptOutput out = gpt->Forward(b.inputs, b.targets).value();
    r.losses.push_back(out.loss.value().Item().value());
    EXPECT_TRUE(autograd::Backward(out.loss).ok());
    for (size_t i = 0; i < params.size(); ++i) {
      const Variable& v = params[i].second;
      const double wd = v.dim() >= 2 ? 0.1 : 0.0;
      EXPECT_TRUE(optim::AdamWStep({}, {optim::ParamGroup::Whole(v.numel(), kLr, wd)}, v.value(),
                                   v.grad(), states[i])
                      .ok());
    }
  }
  for (auto& [n, v] : params) r.params[n] = v.value().ToVector<float>().value();
  return r;
}


absl::Status TrainShardedRank(Communicator& comm, const ShardedRun& run, int steps, int global_batch,
                              Result* rank0) {
  Result& r = *rank0;  // written by rank 0 only
  const int per_rank = global_batch / (comm.size() * run.accum);
  std::shared_ptr<nn::CausalLm> gpt;  // shapes only: each rank inits its shard
  if (run.model) {
    gpt = run.model();
  } else {
    nn::GptConfig config = TinyConfig();
    config.activation_checkpointing = run.checkpoint;
    gpt = std::make_shared<nn::Gpt>(config);
  }
  CpuAllocator cpu_device(CpuAllocator::Options{.name = absl::StrCat("rank", comm.rank())});
  Allocator* device = run.device ? run.device(comm.rank()) : &cpu_device;
  const bool on_gpu = device->device().is_cuda();
  ShardingOptions options = run.options;
  options.init_seed = kSeed;
  ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, options, device, run.host));
  ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt,
                      optim::ShardedOptimizer::Create(*sharded, {.lr = kLr, .weight_decay = 0.1}));
  const TokenData data = TinyData();
  for (int step = 0; step < steps; ++step) {
    double loss_sum = 0;
    for (int m = 0; m < run.accum; ++m) {
      ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = step, .micro_step = m, .accum_steps = run.accum,
                                                  .rank = comm.rank(), .world_size = comm.size(),
                                                  .batch_size = per_rank, .block_size = 8}));
      if (on_gpu) {
        ZS_ASSIGN_OR_RETURN(b.inputs, b.inputs.To(device));
        ZS_ASSIGN_OR_RETURN(b.targets, b.targets.To(device));
      }
      ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt->Forward(b.inputs, b.targets));
      ZS_ASSIGN_OR_RETURN(Variable scaled, ops::Scale(out.loss, 1.0 / run.accum));
      loss_sum += out.loss.value().Item().value();
      const bool last = m + 1 == run.accum;
      if (run.no_sync && !last) {
        auto scope = sharded->NoSync();
        ZS_RETURN_IF_ERROR(autograd::Backward(scaled));
      } else {
        ZS_RETURN_IF_ERROR(autograd::Backward(scaled));
      }
    }
    ZS_RETURN_IF_ERROR(opt.Step(kLr));
    ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
    ZS_ASSIGN_OR_RETURN(Tensor l, Tensor::Full({1}, loss_sum / run.accum, DType::kF32,
                                               comm.device().is_cpu() ? nullptr : device));
    ZS_RETURN_IF_ERROR(comm.AllReduce(l, ReduceOp::kAvg));
    if (comm.rank() == 0) r.losses.push_back(l.Item().value());
  }
  ZS_RETURN_IF_ERROR(sharded->SummonFullParams([&]() -> absl::Status {
    if (comm.rank() != 0) return absl::OkStatus();
    for (auto& [n, v] : gpt->NamedParameters()) {
      ZS_ASSIGN_OR_RETURN(r.params[n], v.value().ToVector<float>());
    }
    return absl::OkStatus();
  }));
  return absl::OkStatus();
}

Result TrainSharded(const ShardedRun& run, int steps, int global_batch) {
  Result r;
  std::vector<absl::Status> statuses =
      RunRanks(run.world, [&](Communicator& comm) { return TrainShardedRank(comm, run, steps, global_batch, &r); });
  for (size_t i = 0; i < statuses.size(); ++i) EXPECT_TRUE(statuses[i].ok()) << "rank " << i << ": " << statuses[i];
  return r;
}

double AdamEnvelope(const AdamSteps& adam) {
  double sum = 0;
  for (int t = 1; t <= adam.steps; ++t) {
    double series = 0;  // sum_{j<t} (b1^2/b2)^j
    for (int j = 0; j < t; ++j) series += std::pow(adam.beta1 * adam.beta1 / adam.beta2, j);
    sum += (1 - adam.beta1) / (1 - std::pow(adam.beta1, t)) *
           std::sqrt((1 - std::pow(adam.beta2, t)) / (1 - adam.beta2)) * std::sqrt(series);
  }
  return adam.lr * sum;
}

ZeroGradient GptKeyBias(int64_t n_embd) {
  return [n_embd](const std::string& name, int64_t i) {
    const std::string suffix = "attn.c_attn.bias";
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
           i >= n_embd && i < 2 * n_embd;
  };
}

void ExpectParamsMatch(const ParamValues& got, const ParamValues& want, const AdamSteps& adam,
                       const ZeroGradient& zero_gradient, const ParamValues* initial,
                       const std::string& what) {
  SCOPED_TRACE(what);
  constexpr double kU = 0x1p-24;  // float32 unit roundoff
  const double envelope = AdamEnvelope(adam);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_TRUE(it != got.end()) << name << " is missing";
    const std::vector<float>& g = it->second;
    ASSERT_EQ(g.size(), w.size()) << name;
    int bad = 0;
    for (size_t i = 0; i < w.size() && bad < 3; ++i) {
      const double rounding = 2 * kU * adam.steps * std::max(std::fabs(w[i]), std::fabs(g[i]));
      if (zero_gradient && zero_gradient(name, static_cast<int64_t>(i))) {
        ASSERT_TRUE(initial != nullptr && initial->count(name)) << name << ": zero-gradient elements need w_0";
        const double w0 = initial->at(name)[i];
        for (const auto& [run, v] : {std::pair<const char*, double>{"got", g[i]}, {"want", w[i]}}) {
          if (!(std::fabs(v - w0) <= envelope + rounding)) {
            ADD_FAILURE() << name << "[" << i << "] (zero true gradient) " << run << " moved " << v - w0
                          << " from " << w0 << ", more than Adam's envelope " << envelope;
            ++bad;
          }
        }
        continue;
      }
      const double tol = envelope / 1024 + rounding;
      if (!(std::fabs(g[i] - w[i]) <= tol)) {
        ADD_FAILURE() << name << "[" << i << "] " << g[i] << " vs " << w[i] << ": differ by "
                      << std::fabs(g[i] - w[i]) << " = " << std::fabs(g[i] - w[i]) / envelope
                      << " of Adam's envelope " << envelope << " (bound 1/1024 of it)";
        ++bad;
      }
    }
  }
}

void ExpectLossesMatch(const std::vector<double>& got, const std::vector<double>& want, int64_t tokens,
                       const std::string& what) {
  SCOPED_TRACE(what);
  constexpr double kU = 0x1p-24;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 2 * tokens * kU * std::fabs(want[i])) << "step " << i;
  }
}

void ExpectMatches(const Result& got, const Result& want, const std::string& what) {
  const nn::GptConfig c = TinyConfig();
  const int steps = static_cast<int>(want.losses.size());
  ASSERT_GT(want.tokens_per_step, 0) << "want is not a TrainUnsharded reference";
  ExpectLossesMatch(got.losses, want.losses, want.tokens_per_step, what);
  ExpectParamsMatch(got.params, want.params, {.lr = kLr, .steps = steps}, GptKeyBias(c.n_embd),
                    want.initial.empty() ? nullptr : &want.initial, what);
}


ShardingOptions BlockOptions(ShardingStrategy s, BackwardPrefetch bp, bool forward_prefetch) {
  ShardingOptions o;
  o.strategy = s;
  o.wrap = WrapPolicy::ByType({"Block"});
  o.backward_prefetch = bp;
  o.forward_prefetch = forward_prefetch;
  return o;
}

}  // namespace zeroshard::testing
