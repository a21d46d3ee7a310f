// The main job's loop, a GPT's and a Llama's, on GPUs (backend nccl: one
// in-process rank per device, NCCL for the model, the in-process communicator
// for the run's numbers) against the same run on CPU ranks: per-step losses
// and the final validation loss. Skips without a CUDA device; on the simulated
// device (`make sim-test`) it runs on the CPU simulator.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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
  o.save = "/nonexistent/model.safetensors";
  o.init_from = "/nonexistent.safetensors";
  std::vector<absl::Status> st = RunRanks(1, [&](Communicator& local) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                        NcclCommunicator::Create(local, Device::Cuda(0)));
    return RunTraining(o, *nccl, nullptr, &local);
  });
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].code(), absl::StatusCode::kUnimplemented) << st[0];
  EXPECT_NE(st[0].message().find("init_from, save"), std::string::npos) << st[0];
}

// ---------------------------------------------------------------- checkpoints

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Every file of checkpoint folder `dir`, by name.
std::map<std::string, std::string> FilesOf(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    out[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

// Save at step 3, resume from it to step 6: the resumed steps' losses and the
// final checkpoint's bytes (every parameter and AdamW moment, the schedule,
// the RNG offsets) equal the uninterrupted run's, for sharded and full
// checkpoints, written synchronously and in the background. The GPU path
// copies shards to the host to write them and reads them into device memory.
TEST(TrainGptOnGpus, CheckpointAndResumeAreBitwise) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  const int world = Gpus() >= 2 ? 2 : 1;
  for (const char* type : {"sharded", "full"}) {
    for (bool async : {false, true}) {
      SCOPED_TRACE(::testing::Message() << world << " GPU(s), " << type << (async ? ", async" : ""));
      TrainOptions o = Small();
      o.eval_every = 0;
      o.sample_tokens = 0;
      o.save_every = 3;
      o.state_dict_type = type;
      o.async_save = async;
      const std::string whole_dir = FreshDir("uninterrupted"), cut_dir = FreshDir("interrupted");
      o.work_dir = whole_dir;
      const TrainSummary whole = TrainOnGpus(o, world);
      o.work_dir = cut_dir;
      o.steps = 3;
      (void)TrainOnGpus(o, world);
      o.steps = 6;
      o.resume = "auto";
      const TrainSummary resumed = TrainOnGpus(o, world);
      EXPECT_EQ(resumed.start_step, 3);
      ASSERT_EQ(whole.losses.size(), 6u);
      ASSERT_EQ(resumed.losses.size(), 3u);
      for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], whole.losses[3 + i]) << "step " << 3 + i;
      const auto a = FilesOf(whole_dir + "/step-000006");
      const auto b = FilesOf(cut_dir + "/step-000006");
      ASSERT_FALSE(a.empty());
      ASSERT_EQ(a.size(), b.size());
      for (const auto& [name, bytes] : a) {
        ASSERT_TRUE(b.count(name)) << name;
        EXPECT_TRUE(bytes == b.at(name)) << name << " differs";
      }
    }
  }
}

// A checkpoint a GPU run wrote loads in a CPU run at another world size, and
// the other way round: 2 GPUs and 2 CPU ranks each save at step 3; one CPU
// rank and one GPU resume from each and take step 3. The four losses are of
// one batch on parameters that agree within the GPU-vs-CPU bound of
// ExpectGpuRunMatchesCpu (fp32 sums in another order), so they agree within
// it too; a checkpoint read wrongly (a shard misplaced, the optimizer state
// or the schedule lost) moves them by far more.
TEST(TrainGptOnGpus, CheckpointsMoveBetweenGpuAndCpuRuns) {
  if (Gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  TrainOptions o = Small();
  o.eval_every = 0;
  o.sample_tokens = 0;
  o.save_every = 3;
  o.steps = 3;
  const std::string by_gpus = FreshDir("written_by_gpus"), by_cpus = FreshDir("written_by_cpus");
  o.work_dir = by_gpus;
  (void)TrainOnGpus(o, 2);
  o.work_dir = by_cpus;
  (void)TrainOnCpu(o, 2);
  o.resume = "auto";
  o.steps = 4;
  o.save_every = 0;
  std::vector<double> losses;
  for (const std::string& dir : {by_gpus, by_cpus}) {
    for (bool gpu : {false, true}) {
      o.work_dir = dir;
      const TrainSummary r = gpu ? TrainOnGpus(o, 1) : TrainOnCpu(o, 1);
      EXPECT_EQ(r.start_step, 3) << dir;
      ASSERT_EQ(r.losses.size(), 1u) << dir;
      losses.push_back(r.losses[0]);
    }
  }
  for (size_t i = 1; i < losses.size(); ++i) {
    EXPECT_NEAR(losses[i], losses[0], 1e-4 * std::fabs(losses[0])) << "run " << i;
  }
}

}  // namespace
}  // namespace zeroshard
