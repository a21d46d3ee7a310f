// The Llama in the main job: a sharded Llama loaded from a Hugging Face
// folder computes the golden logits under every strategy; the job trains it
// (loss falls, runs repeat, sharded tracks unsharded); `--init_from=HF_DIR`
// and `--save=DIR` move Hugging Face folders in and out unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/autograd/nn/llama.h"
#include "zeroshard/checkpoint/hf_folder.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"
#include "zeroshard/train/trainer.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ToDoubles;

constexpr char kHfDir[] = "tests/testdata/llama_hf_gqa";
constexpr char kGolden[] = "tests/testdata/llama_golden_gqa.safetensors";

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// ---------------------------------------------------------------- sharded parity

struct ShardedCase {
  ShardingStrategy strategy;
  int world;
};

// Every rank loads the folder's weights into its shards (LoadHfWeights reads
// only its own byte ranges) and runs the golden batch: logits and loss as
// the float64 reference (tolerances of tests/autograd/llama_golden_test.cc:
// the sharded forward runs the same kernels on the same gathered values).
TEST(LlamaSharded, EveryStrategyComputesTheGoldenLogitsFromAHuggingFaceFolder) {
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile golden, SafetensorsFile::Open(kGolden));
  ZS_ASSERT_OK_AND_ASSIGN(nn::LlamaConfig config, nn::LlamaConfig::FromHfJson(ReadText(std::string(kHfDir) + "/config.json")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ids, golden.Read("input_ids"));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor targets, golden.Read("targets"));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want_logits, golden.Read("logits"));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want_loss, golden.Read("loss"));
  const std::vector<double> want = ToDoubles(want_logits);
  const double total_bytes = 25920;  // the folder's index: metadata.total_size
  for (const ShardedCase& c : {ShardedCase{ShardingStrategy::kFullShard, 1}, ShardedCase{ShardingStrategy::kFullShard, 4},
                               ShardedCase{ShardingStrategy::kShardGradOp, 2}, ShardedCase{ShardingStrategy::kNoShard, 2},
                               ShardedCase{ShardingStrategy::kHybridShard, 4}}) {
    SCOPED_TRACE(absl::StrCat(ShardingStrategyName(c.strategy), " on ", c.world, " ranks"));
    std::vector<absl::Status> st = RunRanks(c.world, [&](Communicator& comm) -> absl::Status {
      auto llama = std::make_shared<nn::Llama>(config);
      ShardingOptions o;
      o.strategy = c.strategy;
      if (c.strategy == ShardingStrategy::kHybridShard) o.hybrid_shard_size = 2;
      o.wrap = WrapPolicy::ByType({"LlamaDecoderLayer"});
      o.init_seed = 5;
      ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(llama, comm, o));
      ZS_ASSIGN_OR_RETURN(HfLoadResult r, LoadHfWeights(kHfDir, *sharded));
      if (c.strategy == ShardingStrategy::kFullShard && c.world == 4) {
        // Streaming: a rank reads about its quarter (pieces round up to whole
        // elements and each file read is one entry's range), never the whole.
        EXPECT_LT(r.bytes_read, total_bytes / 2) << "rank " << comm.rank();
      }
      autograd::NoGradGuard no_grad;
      ZS_ASSIGN_OR_RETURN(nn::LmOutput out, llama->Forward(ids, targets));
      ::zeroshard::testing::ExpectClose(out.logits.value(), want, 1e-5, 1e-5, "logits");
      ZS_ASSIGN_OR_RETURN(double loss, out.loss.value().Item());
      EXPECT_NEAR(loss, want_loss.Item().value(), 1e-5);
      return absl::OkStatus();
    });
    for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
  }
}

// ---------------------------------------------------------------- the job

TrainOptions SmallLlama() {
  TrainOptions o;
  o.model_type = "llama";
  o.model = nn::GptConfig{.vocab_size = 256, .block_size = 32, .n_layer = 2, .n_head = 4, .n_embd = 32};
  o.llama.num_key_value_heads = 2;
  o.llama.intermediate_size = 64;
  o.data = "data/tinyshakespeare.txt";
  o.batch_size = 4;
  o.steps = 12;
  o.lr.lr = 3e-3;
  o.lr.warmup_steps = 2;
  o.lr.decay_steps = 12;
  o.log_every = 4;
  o.eval_every = 0;
  o.eval_iters = 2;
  o.sample_tokens = 20;
  o.sharding.wrap = WrapPolicy::ByType({"Block"});  // the job's default: a Llama takes its decoder layers
  return o;
}

TrainSummary Train(const TrainOptions& o, int world) {
  TrainSummary s;
  std::vector<absl::Status> st = RunRanks(world, [&](Communicator& comm) { return RunTraining(o, comm, &s); });
  for (const absl::Status& x : st) EXPECT_TRUE(x.ok()) << x;
  return s;
}

TEST(TrainLlama, LossFallsRunsRepeatAndShardedTracksUnsharded) {
  const TrainSummary a = Train(SmallLlama(), 2);
  ASSERT_EQ(a.losses.size(), 12u);
  // From about ln 256 = 5.55 (N(0, 0.02) weights give near-uniform logits)
  // towards the bytes' unigram entropy (~3.3): 12 steps of a warm-up and
  // cosine schedule take it down by more than half a nat (as the GPT test asks).
  EXPECT_NEAR(a.losses.front(), std::log(256.0), 0.1);
  EXPECT_LT(a.losses.back(), a.losses.front() - 0.5);
  const TrainSummary b = Train(SmallLlama(), 2);
  EXPECT_EQ(a.losses, b.losses);
  // One rank with 8 rows sees the same global batch as 2 ranks of 4 (the
  // loader splits a global batch by rank), so the runs differ only in the
  // order of the gradient sums: float32 roundings (~1e-7 relative) grown
  // through 12 Adam steps stay far below 1e-3 of the loss.
  TrainOptions one = SmallLlama();
  one.batch_size = 8;
  const TrainSummary c = Train(one, 1);
  ASSERT_EQ(c.losses.size(), a.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_NEAR(c.losses[i], a.losses[i], 1e-3 * a.losses[i]) << i;
}

TEST(TrainLlama, ActivationCheckpointingAndBf16) {
  const TrainSummary f32 = Train(SmallLlama(), 2);
  TrainOptions ac = SmallLlama();
  ac.model.activation_checkpointing = true;
  const TrainSummary same = Train(ac, 2);
  EXPECT_EQ(same.losses, f32.losses);  // recomputation runs the same kernels on the same values
  TrainOptions bf16 = SmallLlama();
  bf16.sharding.mixed_precision.param_dtype = DType::kBF16;
  const TrainSummary low = Train(bf16, 2);
  ASSERT_EQ(low.losses.size(), f32.losses.size());
  // bf16 weights and activations (8 bits of mantissa, 2^-9 relative per
  // rounding) move a loss of ~5 by a few hundredths at most (the GPT test's bound).
  for (size_t i = 0; i < f32.losses.size(); ++i) EXPECT_NEAR(low.losses[i], f32.losses[i], 0.03 * f32.losses[i]) << i;
}

// Checkpoints of a Llama run: 6 steps saving every 3, then a resume to step
// 12, bit for bit the straight 12 (SmallLlama fixes the schedule), in both
// formats; the same losses with CPU offload of parameters, gradients and
// optimizer state, and with NVMe offload, which change where the bytes live,
// not the arithmetic.
TEST(TrainLlama, ResumeContinuesBitwiseAndOffloadChangesNothing) {
  const TrainSummary straight = Train(SmallLlama(), 2);
  TrainOptions offload = SmallLlama();
  offload.sharding.offload = {.params = true, .grads = true, .optimizer = true};
  EXPECT_EQ(Train(offload, 2).losses, straight.losses);
  // NVMe offload (ZeRO-Infinity) of the optimizer state and master shards: the
  // same host arithmetic, the bytes through swap files.
  TrainOptions nvme = SmallLlama();
  OffloadPolicy& off = nvme.sharding.offload;
  off.nvme_optimizer = off.nvme_params = true;
  const std::string swap = TempDir("llama_nvme_swap");
  off.optimizer_nvme = {.path = swap, .buffer_count = 2};
  off.param_nvme = {.path = swap, .buffer_count = 2};
  EXPECT_EQ(Train(nvme, 2).losses, straight.losses);
  for (const std::string type : {"sharded", "full"}) {
    TrainOptions first = SmallLlama();
    first.work_dir = TempDir("llama_resume_" + type);
    first.steps = 6;
    first.save_every = 3;
    first.state_dict_type = type;
    first.keep_last = 1;
    const TrainSummary a = Train(first, 2);
    TrainOptions second = SmallLlama();
    second.work_dir = first.work_dir;
    second.resume = "auto";
    second.batch_size = 2;                    // 4 ranks x 2 rows: the same global batches as 2 x 4
    const TrainSummary b = Train(second, 4);  // resumed at another world size
    EXPECT_EQ(b.start_step, 6);
    ASSERT_EQ(a.losses.size() + b.losses.size(), straight.losses.size());
    for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], straight.losses[i]) << type << " " << i;
    // 4 ranks reduce the gradients in another order than 2: float32 roundings
    // (~1e-7 relative) through 6 Adam steps, far below 1e-4 of the loss.
    for (size_t i = 0; i < b.losses.size(); ++i) {
      EXPECT_NEAR(b.losses[i], straight.losses[6 + i], 1e-4 * straight.losses[6 + i]) << type << " " << i;
    }
  }
}

// Deferred, shard-only initialisation: a Llama whose f32 weights alone are
// more than a rank's device budget is built sharded from the start (each rank
// initialises only its shard; nothing ever holds the whole model) and trains
// under FULL_SHARD with CPU offload and per-layer activation checkpointing,
// where the device holds only a layer or two gathered at a time (and a couple
// of units' unsharded gradients: Note [Unsharded gradients are freed as their
// reductions finish]; before it, backward held every unit's, 7.7 MiB here).
// The same model replicated (NO_SHARD) cannot be built within the budget.
TEST(TrainLlama, AModelLargerThanARanksMemoryIsBuiltSharded) {
  TrainOptions o = SmallLlama();
  o.model.n_layer = 8;
  o.model.n_embd = 128;
  o.model.n_head = 4;
  o.llama.intermediate_size = 352;
  o.batch_size = 2;
  o.model.activation_checkpointing = true;
  o.steps = 3;
  o.sample_tokens = 0;
  ZS_ASSERT_OK_AND_ASSIGN(nn::LlamaConfig config, LlamaConfigFor(o));
  const int64_t full_bytes = 4 * nn::Llama(config).NumParameters();
  o.device_memory_limit = full_bytes * 3 / 4;
  o.sharding.offload = {.params = true, .grads = true, .optimizer = true};
  o.sharding.limit_all_gathers = 1;
  const TrainSummary s = Train(o, 4);
  ASSERT_EQ(s.losses.size(), 3u);
  EXPECT_LT(s.peak_bytes, o.device_memory_limit);
  // Replicated (NO_SHARD, no offload), every rank holds the whole model: the
  // budget refuses it with a clear ResourceExhausted.
  TrainOptions replicated = o;
  replicated.sharding.strategy = ShardingStrategy::kNoShard;
  replicated.sharding.offload = {};
  std::vector<absl::Status> st = RunRanks(2, [&](Communicator& comm) { return RunTraining(replicated, comm); });
  EXPECT_THAT(st[0], testing::StatusIs(absl::StatusCode::kResourceExhausted, ::testing::_));
}

// A token file of ids below the folder's vocabulary (32): nanoGPT's raw
// uint16. Each id follows from the one before (t -> 7 t + 3 mod 32, a cycle of
// all 32), so there is something to learn: the loss can fall from ~ln 32 to 0.
std::string WriteTokens(const std::string& dir) {
  std::vector<uint16_t> tokens(4096);
  uint16_t t = 0;
  for (uint16_t& x : tokens) {
    x = t;
    t = static_cast<uint16_t>((7 * t + 3) % 32);
  }
  const std::string path = dir + "/tokens.bin";
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(uint16_t));
  return path;
}

TrainOptions FromFolder(const std::string& data) {
  TrainOptions o = SmallLlama();
  o.init_from = kHfDir;
  o.data = data;
  o.model.block_size = 16;  // <= the folder's max_position_embeddings (64)
  o.steps = 3;
  o.sample_tokens = 0;
  return o;
}

// --init_from=HF_DIR takes the sizes and weights from the folder; with lr 0
// AdamW changes nothing (p *= 1 - 0 wd; p -= 0), so --save=DIR must write the
// very tensors it read, in Hugging Face's layout, at another world size.
TEST(TrainLlama, InitFromAndSaveMoveHuggingFaceFoldersUnchanged) {
  const std::string dir = TempDir("llama_hf_round_trip");
  TrainOptions o = FromFolder(WriteTokens(dir));
  o.lr.lr = 0;
  o.lr.min_lr = 0;
  o.optimizer.lr = 0;
  o.save = dir + "/saved";
  o.save_shard_bytes = 8000;  // the 25920 bytes in several files, with an index
  Train(o, 4);
  ZS_ASSERT_OK_AND_ASSIGN(nn::NamedTensors want, ReadHfStateDict(kHfDir));
  ZS_ASSERT_OK_AND_ASSIGN(nn::NamedTensors got, ReadHfStateDict(o.save));
  ASSERT_EQ(got.size(), want.size());
  std::map<std::string, Tensor> by_name(got.begin(), got.end());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(by_name.count(name)) << name;
    ZS_ASSERT_OK_AND_ASSIGN(std::vector<float> a, t.ToVector<float>());
    ZS_ASSERT_OK_AND_ASSIGN(std::vector<float> b, by_name[name].ToVector<float>());
    EXPECT_EQ(a, b) << name;
  }
  EXPECT_TRUE(std::filesystem::exists(o.save + "/model.safetensors.index.json"));
  const nlohmann::json index = nlohmann::json::parse(ReadText(o.save + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 25920);
  ZS_ASSERT_OK_AND_ASSIGN(nn::LlamaConfig a, nn::LlamaConfig::FromHfJson(ReadText(std::string(kHfDir) + "/config.json")));
  ZS_ASSERT_OK_AND_ASSIGN(nn::LlamaConfig b, nn::LlamaConfig::FromHfJson(ReadText(o.save + "/config.json")));
  EXPECT_EQ(a.ToString(), b.ToString());
  // And training from the folder learns the sequence.
  TrainOptions t = FromFolder(o.data);
  t.steps = 12;
  t.lr.lr = t.optimizer.lr = 1e-2;
  const TrainSummary s = Train(t, 2);
  EXPECT_LT(s.losses.back(), s.losses.front() - 0.5);
}

TEST(TrainLlama, BadOptionsAreStatusErrors) {
  const std::string dir = TempDir("llama_bad");
  TrainOptions o = FromFolder(WriteTokens(dir));
  o.model.block_size = 65;
  std::vector<absl::Status> st = RunRanks(1, [&](Communicator& comm) { return RunTraining(o, comm); });
  EXPECT_THAT(st[0], testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                      ::testing::HasSubstr("expected at most the Llama's max_position_embeddings 64, found 65")));
  TrainOptions gqa = SmallLlama();
  gqa.llama.num_key_value_heads = 3;
  st = RunRanks(1, [&](Communicator& comm) { return RunTraining(gqa, comm); });
  EXPECT_THAT(st[0], testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("num_key_value_heads")));
  // Text encoded by a 256-token tokenizer does not fit a 32-token model.
  TrainOptions text = FromFolder("data/tinyshakespeare.txt");
  st = RunRanks(1, [&](Communicator& comm) { return RunTraining(text, comm); });
  EXPECT_THAT(st[0], testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("vocab_size")));
}

}  // namespace
}  // namespace zeroshard
