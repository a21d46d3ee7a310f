// The main job's loop, a GPT's and a Llama's, on GPUs (backend nccl: one
// in-process rank per device, NCCL for the model, the in-process communicator
// for the run's numbers) against the same run on CPU ranks: per-step losses
// and the final validation loss. Skips without a CUDA device; on the simulated
// device (`make sim-test`) it runs on the CPU simulator.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/nccl_communicator.h"
#include "zeroshard/train/trainer.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

TrainOptions Small() {
  TrainOptions o;
  o.model = nn::GptConfig{.vocab_size = 256, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32};
  o.data = "data/tinyshakespeare.txt";
  o.batch_size = 2;
  o.steps = 6;
  o.lr.lr = 3e-3;
  o.lr.warmup_steps = 2;
  o.lr.decay_steps = 6;
  o.log_every = 3;
  o.eval_every = 3;
  o.eval_iters = 2;
  o.sample_tokens = 8;
  o.sharding.wrap = WrapPolicy::ByType({"Block"});
  return o;
}

int Gpus() {
  absl::StatusOr<int> n = cuda::CudaDeviceCount();
  return n.ok() ? *n : 0;
}

TrainSummary TrainOnCpu(const TrainOptions& o, int world) {
  TrainSummary s;
  std::vector<absl::Status> st =
      RunRanks(world, [&](Communicator& comm) { return RunTraining(o, comm, &s); });
  for (const absl::Status& x : st) EXPECT_TRUE(x.ok()) << x;
  return s;
}

TrainSummary TrainOnGpus(const TrainOptions& o, int world) {
  TrainSummary s;
  std::vector<absl::Status> st = RunRanks(world, [&](Communicator& local) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                        NcclCommunicator::Create(local, Device::Cuda(local.rank())));
    return RunTraining(o, *nccl, &s, &local);
  });
  for (size_t r = 0; r < st.size(); ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  return s;
}

// The run of `o` on `world` GPUs against the same run on CPU ranks.
void ExpectGpuRunMatchesCpu(const TrainOptions& o, int world) {
  const TrainSummary want = TrainOnCpu(o, world);
  const TrainSummary got = TrainOnGpus(o, world);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    // fp32 sums in another order (cuBLASLt, the kernels' reductions).
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-4 * std::fabs(want.losses[i])) << "step " << i;
  }
  EXPECT_NEAR(got.final_val_loss, want.final_val_loss, 1e-4 * std::fabs(want.final_val_loss));
  EXPECT_LT(got.losses.back(), got.losses.front());
  EXPECT_GT(got.peak_bytes, 0);
  // The caching allocator is warm after two steps: the steps after them (and
  // the validation between them) take no cudaMalloc. Host synchronisations
  // are counted (printed in the run's summary), not yet bounded.
  EXPECT_EQ(got.cuda_mallocs_per_step, 0.0);
  EXPECT_GE(got.host_syncs_per_step, 0.0);
  EXPECT_EQ(want.cuda_mallocs_per_step, -1.0);  // not measured on CPU ranks
}

std::vector<int> Worlds() {
  std::vector<int> worlds = {1};
  if (Gpus() >= 2) worlds.push_back(2);
  return worlds;
}

TEST(TrainGptOnGpus, LossesMatchTheCpuRun) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  for (int world : Worlds()) {
    for (ShardingStrategy strategy : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp}) {
      SCOPED_TRACE(::testing::Message() << world << " GPU(s), " << ShardingStrategyName(strategy));
      TrainOptions o = Small();
      o.sharding.strategy = strategy;
      ExpectGpuRunMatchesCpu(o, world);
    }
  }
}

// The job's Llama (model_type "llama": RMSNorm, rotary tables built on the
// device by the first step, grouped-query attention, SwiGLU; the decoder
// layer the unit), with the GPT's bounds: the same kinds of fp32 sums.
TEST(TrainGptOnGpus, LlamaLossesMatchTheCpuRun) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  for (int world : Worlds()) {
    SCOPED_TRACE(::testing::Message() << world << " GPU(s), FULL_SHARD");
    TrainOptions o = Small();
    o.model_type = "llama";
    o.model.n_head = 4;  // head_dim 8, on 2 kv heads
    o.llama.num_key_value_heads = 2;
    o.llama.intermediate_size = 64;
    o.sharding.wrap = WrapPolicy::ByType({"LlamaDecoderLayer"});
    ExpectGpuRunMatchesCpu(o, world);
  }
}

TEST(TrainGptOnGpus, UnsupportedOptionsAreNamed) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  TrainOptions o = Small();
  o.save_every = 2;
  o.init_from = "/nonexistent.safetensors";
  std::vector<absl::Status> st = RunRanks(1, [&](Communicator& local) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                        NcclCommunicator::Create(local, Device::Cuda(0)));
    return RunTraining(o, *nccl, nullptr, &local);
  });
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].code(), absl::StatusCode::kUnimplemented) << st[0];
  EXPECT_NE(st[0].message().find("checkpoint.save_every, init_from"), std::string::npos) << st[0];
}

}  // namespace
}  // namespace zeroshard
