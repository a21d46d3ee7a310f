// A sharded GPT training on GPUs through NCCL (one in-process rank per GPU:
// world 1 on one GPU, and world 2 when two are visible) against the unsharded
// CPU run of tests/sharding/parity.h: the same losses and final
// parameters. Covers FULL_SHARD, SHARD_GRAD_OP and SHARD_OPTIMIZER, forward and backward
// prefetch under limit_all_gathers = 1 (the free-event rate limiter),
// HYBRID_SHARD on two GPUs, bf16 gathered parameters (NCCL all-gathers even at
// world 1) and CPU offload of parameters, gradients and optimizer state
// through the copy stream. Skips without a device.
//
// Tolerances (fp32): the kernels are the CPU's per-element math; GEMMs,
// attention and reductions sum in another order, a few ulp per op, and Adam
// normalises every update, so after 3 steps the losses agree to 1e-4 relative
// and the parameters to 2e-4 + 1e-4 relative. The attention key bias is the
// exception (see parity.cc): its true gradient is exactly 0, its computed one
// rounding noise whose sign depends on the summation order, and Adam turns it
// into steps of up to lr; it is checked against 3 lr per step. bf16 runs are
// compared with the same sharded run on the CPU (same rounding points) within
// 2e-2 relative on the losses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/nn/llama.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/nccl_communicator.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/cuda/pinned_host_allocator.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/tests/sharding/parity.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using testing::BlockOptions;
using testing::Result;
using testing::ShardedRun;

constexpr int kSteps = 3;
constexpr int kGlobalBatch = 8;
constexpr double kLr = 1e-2;  // parity.cc's

int VisibleGpus() {
  absl::StatusOr<int> n = cuda::CudaDeviceCount();
  return n.ok() ? *n : 0;
}

// The run on `world` GPUs, one NCCL rank per thread over an in-process bootstrap.
Result TrainOnGpus(ShardedRun run, int world, bool pinned_host = false) {
  run.world = world;
  Result r;
  std::vector<absl::Status> statuses = RunRanks(world, [&](Communicator& local) -> absl::Status {
    const int rank = local.rank();
    ZS_ASSIGN_OR_RETURN(auto nccl, NcclCommunicator::Create(local, Device::Cuda(rank)));
    CudaAllocator gpu(rank);
    PinnedHostAllocator pinned;
    ShardedRun mine = run;
    mine.device = [&gpu](int) -> Allocator* { return &gpu; };
    if (pinned_host) mine.host = &pinned;
    return testing::TrainShardedRank(*nccl, mine, kSteps, kGlobalBatch, &r);
  });
  for (size_t i = 0; i < statuses.size(); ++i) {
    EXPECT_TRUE(statuses[i].ok()) << "rank " << i << ": " << statuses[i];
  }
  return r;
}

void ExpectMatchesCpu(const Result& got, const Result& want, double loss_rtol, double atol,
                      double rtol, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], loss_rtol * std::fabs(want.losses[i])) << "step " << i;
  }
  const int64_t C = testing::TinyConfig().n_embd;
  ASSERT_EQ(got.params.size(), want.params.size());
  for (const auto& [name, w] : want.params) {
    const std::vector<float>& g = got.params.at(name);
    ASSERT_EQ(g.size(), w.size()) << name;
    const bool attn_bias = name.find("c_attn.bias") != std::string::npos;
    int bad = 0;
    for (size_t i = 0; i < w.size() && bad < 3; ++i) {
      const bool key_bias = attn_bias && static_cast<int64_t>(i) >= C && static_cast<int64_t>(i) < 2 * C;
      const double tol = key_bias ? 3 * kLr * kSteps : atol + rtol * std::fabs(w[i]);
      if (!(std::fabs(g[i] - w[i]) <= tol)) {
        ADD_FAILURE() << name << "[" << i << "] gpu " << g[i] << " vs cpu " << w[i];
        ++bad;
      }
    }
  }
}

TEST(CudaShardedModel, Fp32StepsMatchTheUnshardedCpuRun) {
  if (!::zeroshard::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  const Result want = testing::TrainUnsharded(kSteps, kGlobalBatch);
  std::vector<int> worlds = {1};
  if (VisibleGpus() >= 2) worlds.push_back(2);
  for (int world : worlds) {
    struct Config {
      std::string name;
      ShardingOptions options;
    };
    std::vector<Config> configs = {
        {"FULL_SHARD", BlockOptions(ShardingStrategy::kFullShard)},
        {"SHARD_GRAD_OP", BlockOptions(ShardingStrategy::kShardGradOp)},
        {"SHARD_OPTIMIZER", BlockOptions(ShardingStrategy::kShardOptimizer)},
        {"FULL_SHARD prefetch limit 1",
         BlockOptions(ShardingStrategy::kFullShard, BackwardPrefetch::kBackwardPost, true)},
    };
    configs.back().options.limit_all_gathers = 1;
    if (world == 2) {
      Config hybrid{"HYBRID_SHARD", BlockOptions(ShardingStrategy::kHybridShard)};
      hybrid.options.hybrid_shard_size = 1;
      configs.push_back(hybrid);
    }
    for (const Config& c : configs) {
      ShardedRun run;
      run.options = c.options;
      const std::string what = absl::StrCat(c.name, " on ", world, " GPU(s)");
      std::printf("%s\n", what.c_str());
      ExpectMatchesCpu(TrainOnGpus(run, world), want, 1e-4, 2e-4, 1e-4, what);
    }
  }
}

TEST(CudaShardedModel, OffloadThroughTheCopyStream) {
  if (!::zeroshard::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  const Result want = testing::TrainUnsharded(kSteps, kGlobalBatch);
  ShardedRun run;
  run.options = BlockOptions(ShardingStrategy::kFullShard);
  run.options.offload.params = true;
  run.options.offload.grads = true;
  run.options.offload.optimizer = true;
  ExpectMatchesCpu(TrainOnGpus(run, 1, /*pinned_host=*/true), want, 1e-4, 2e-4, 1e-4,
                   "FULL_SHARD, offload to pinned host memory");
}

TEST(CudaShardedModel, Bf16GathersMatchTheSameRunOnTheCpu) {
  if (!::zeroshard::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  ShardedRun run;
  run.options = BlockOptions(ShardingStrategy::kFullShard, BackwardPrefetch::kBackwardPre, true);
  run.options.mixed_precision.param_dtype = DType::kBF16;
  run.options.limit_all_gathers = 2;
  const Result want = testing::TrainSharded(run, kSteps, kGlobalBatch);  // CPU, world 1
  // bf16 compute rounds differently (cuBLASLt, possibly cuDNN attention):
  // the losses track, the parameters within a few Adam steps of each other.
  ExpectMatchesCpu(TrainOnGpus(run, 1), want, 2e-2, 3 * kLr * kSteps, 0,
                   "FULL_SHARD bf16 params on 1 GPU");
}

// The ZeRO++ hooks on GPUs (quantize/dequantize kernels, NCCL all-gather of
// i8 bytes, the all-to-all of grouped sends and receives) against the same
// hooked run on the CPU. The kernels share the CPU's per-element math, but the
// GEMMs sum in another order, so a gathered value may differ by an ulp and,
// where it sits at a rounding tie of its block, quantize one step (1/127 of
// the block's largest) apart: the losses are held to the bf16 test's 2e-2,
// not the fp32 1e-4.
TEST(CudaShardedModel, CommHooksMatchTheSameHookOnTheCpu) {
  if (!::zeroshard::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  if (VisibleGpus() < 2) GTEST_SKIP() << "the hooks communicate only between 2 or more GPUs";
  for (const char* hook : {"qwz", "qgz", "hpz", "zeropp"}) {
    ShardedRun run;
    run.options = BlockOptions(ShardingStrategy::kFullShard);
    run.options.comm_hook = {.name = hook, .block_size = 64, .group_size = 1};
    run.world = 2;
    const Result want = testing::TrainSharded(run, kSteps, kGlobalBatch);  // CPU, world 2
    ExpectMatchesCpu(TrainOnGpus(run, 2), want, 2e-2, 3 * kLr * kSteps, 0, absl::StrCat(hook, " on 2 GPUs"));
  }
}

// A sharded Llama (grouped-query attention, 4 query heads on 2 kv heads,
// untied) on the GPU against the same sharded run on the CPU (world 1, the
// same units and rounding points): RMSNorm, rotary embeddings (tables built
// on the rank's device), SiluGate and grouped attention between the gathers.
// fp32 within the GPT's fp32 bounds (above: the same kinds of sums in another
// order), and bf16 gathered parameters within the GPT's bf16 ones.
std::shared_ptr<nn::CausalLm> TinyLlama() {
  nn::LlamaConfig c;
  c.vocab_size = 32;  // TinyData's tokens
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;  // a multiple of 8: bf16 attention may take cuDNN's path on a GPU
  c.max_position_embeddings = 8;  // TinyData's sequences
  c.rms_norm_eps = 1e-5;
  return std::make_shared<nn::Llama>(c);
}

TEST(CudaShardedModel, LlamaMatchesTheSameShardedRunOnTheCpu) {
  if (!::zeroshard::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  for (const DType param_dtype : {DType::kF32, DType::kBF16}) {
    ShardedRun run;
    run.model = TinyLlama;
    run.options = BlockOptions(ShardingStrategy::kFullShard, BackwardPrefetch::kBackwardPre, true);
    run.options.wrap = WrapPolicy::ByType({"LlamaDecoderLayer"});
    run.options.mixed_precision.param_dtype = param_dtype;
    const Result want = testing::TrainSharded(run, kSteps, kGlobalBatch);  // CPU, world 1
    const std::string what = absl::StrCat("Llama FULL_SHARD ", DTypeName(param_dtype), " params on 1 GPU");
    std::printf("%s\n", what.c_str());
    if (param_dtype == DType::kF32) {
      ExpectMatchesCpu(TrainOnGpus(run, 1), want, 1e-4, 2e-4, 1e-4, what);
    } else {
      ExpectMatchesCpu(TrainOnGpus(run, 1), want, 2e-2, 3 * kLr * kSteps, 0, what);
    }
  }
}

}  // namespace
}  // namespace zeroshard
