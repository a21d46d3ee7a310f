// The main job's loop trains: a small GPT on the bundled corpus for a few
// steps over 2 in-process ranks lowers the loss, and the same run is bitwise
// repeatable.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"

#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/train/trainer.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

TrainOptions Small() {
  TrainOptions o;
  o.model = nn::GptConfig{.vocab_size = 256, .block_size = 32, .n_layer = 2, .n_head = 2, .n_embd = 32};
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
  o.sharding.wrap = WrapPolicy::ByType({"Block"});
  return o;
}

TrainSummary Train(const TrainOptions& o, int world) {
  TrainSummary s;
  std::vector<absl::Status> st = RunRanks(world, [&](Communicator& comm) { return RunTraining(o, comm, &s); });
  for (const absl::Status& x : st) EXPECT_TRUE(x.ok()) << x;
  return s;
}

// comm_bytes_per_step (Note [Bytes sent], collectives/communicator.h) in
// closed form from the sharding plan. FULL_SHARD at world W, fp32: a unit's
// all-gather sends (W-1)/W of its padded flat bytes, its reduce-scatter the
// same; every Block is gathered in forward and again in backward, the root
// (embeddings, tied head, final LayerNorm) once, as it stays gathered until
// the end of backward; then the step's loss average is one f32 all-reduce,
// 2 (W-1)/W * 4 bytes rounded down. Gradient clipping off (its norm is one
// more all-reduce). W = 3 pads the flat parameters, so the padded sizes count.
TEST(TrainGpt, CommBytesPerStepIsTheShardingPlansClosedForm) {
  TrainOptions o = Small();
  o.steps = 3;
  o.sample_tokens = 0;
  o.grad_clip = 0;
  o.sharding.strategy = ShardingStrategy::kFullShard;
  for (int world : {2, 3}) {
    int64_t want = 0;
    std::vector<absl::Status> st = RunRanks(world, [&](Communicator& comm) -> absl::Status {
      ZS_ASSIGN_OR_RETURN(std::shared_ptr<nn::CausalLm> model, MakeJobModel(o, comm.rank()));
      ZS_ASSIGN_OR_RETURN(std::unique_ptr<ShardedModel> sharded,
                          ShardedModel::Create(model, comm, JobShardingOptions(o, *model)));
      int64_t bytes = 0;
      for (ShardedUnit* u : sharded->units()) {
        const int64_t padded = u->flat.padded_numel() * 4;  // fp32
        const int64_t gather = (world - 1) * padded / world;
        bytes += (u->is_root ? 1 : 2) * gather + gather;  // all-gathers + reduce-scatter
      }
      bytes += 2 * (world - 1) * 4 / world;  // the loss average
      if (comm.rank() == 0) want = bytes;
      return absl::OkStatus();
    });
    for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;
    const TrainSummary s = Train(o, world);
    EXPECT_GT(want, 0);
    EXPECT_EQ(s.comm_bytes_per_step, want) << "world " << world;
  }
}

TEST(TrainGpt, LossFallsAndRunsRepeat) {
  const TrainSummary a = Train(Small(), 2);
  ASSERT_EQ(a.losses.size(), 12u);
  EXPECT_LT(a.losses.back(), a.losses.front() - 0.5);
  EXPECT_GT(a.unigram_entropy, 3.0);
  EXPECT_GT(a.peak_bytes, 0);
  const TrainSummary b = Train(Small(), 2);
  EXPECT_EQ(a.losses, b.losses);
}

TEST(TrainGpt, Bf16AndFp16TrackFp32) {
  const TrainSummary f32 = Train(Small(), 2);
  for (DType d : {DType::kBF16, DType::kF16}) {
    TrainOptions o = Small();
    o.sharding.mixed_precision.param_dtype = d;
    const TrainSummary low = Train(o, 2);
    ASSERT_EQ(low.losses.size(), f32.losses.size());
    for (size_t i = 0; i < f32.losses.size(); ++i) {
      EXPECT_NEAR(low.losses[i], f32.losses[i], 0.03 * f32.losses[i]) << DTypeName(d) << " step " << i;
    }
    if (d == DType::kF16) {
      EXPECT_EQ(low.final_loss_scale, 65536.0);  // no overflow: the scale holds
    }
  }
  // --keep_layernorm_fp32: bf16 blocks, LayerNorms f32 units of their own.
  TrainOptions ln = Small();
  ln.sharding.mixed_precision.param_dtype = DType::kBF16;
  ln.sharding.mixed_precision.reduce_dtype = DType::kBF16;
  ln.sharding.mixed_precision.fp32_module_types = {"BatchNorm2d", "LayerNorm"};
  const TrainSummary kept = Train(ln, 2);
  ASSERT_EQ(kept.losses.size(), f32.losses.size());
  for (size_t i = 0; i < f32.losses.size(); ++i) {
    EXPECT_NEAR(kept.losses[i], f32.losses[i], 0.03 * f32.losses[i]) << "LayerNorm fp32 step " << i;
  }
  // --keep_low_precision_grads: 16-bit gradient shards through clipping, the
  // optimizer and (f16) loss scaling, with accumulation, under ZeRO-1 and ZeRO-3.
  for (DType d : {DType::kBF16, DType::kF16}) {
    for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardOptimizer}) {
      TrainOptions low = Small();
      low.grad_accum_steps = 2;
      low.sharding.strategy = s;
      low.sharding.mixed_precision.param_dtype = d;
      low.sharding.mixed_precision.reduce_dtype = d;
      low.sharding.mixed_precision.keep_low_precision_grads = true;
      const TrainSummary got = Train(low, 2);
      ASSERT_EQ(got.losses.size(), f32.losses.size());
      EXPECT_LT(got.losses.back(), got.losses.front() - 0.5);
      EXPECT_EQ(got.skipped_steps, 0);
      if (d == DType::kF16) { EXPECT_EQ(got.final_loss_scale, 65536.0); }
      for (size_t i = 0; i < 4; ++i) {  // twice the fp32 run's global batch (accumulation): a loose bound
        EXPECT_NEAR(got.losses[i], f32.losses[i], 0.05 * f32.losses[i])
            << "low-precision grads " << DTypeName(d) << " " << ShardingStrategyName(s) << " step " << i;
      }
      std::printf("keep_low_precision_grads %s %s: first %.4f last %.4f (fp32 run %.4f -> %.4f)\n",
                  std::string(DTypeName(d)).c_str(),
                  std::string(ShardingStrategyName(s)).c_str(), got.losses.front(), got.losses.back(),
                  f32.losses.front(), f32.losses.back());
    }
  }
}

TEST(TrainGpt, ZeroStagesTrainAlike) {
  // ZeRO-1 (SHARD_OPTIMIZER), ZeRO-2 (SHARD_GRAD_OP) and ZeRO-3 (FULL_SHARD)
  // compute the same updates, with gradient clipping and accumulation on.
  TrainOptions base = Small();
  base.grad_accum_steps = 2;
  base.steps = 6;
  const TrainSummary full = Train(base, 2);
  for (ShardingStrategy s : {ShardingStrategy::kShardGradOp, ShardingStrategy::kShardOptimizer}) {
    for (bool no_sync : {false, true}) {
      TrainOptions o = base;
      o.sharding.strategy = s;
      o.no_sync = no_sync;
      const TrainSummary got = Train(o, 2);
      ASSERT_EQ(got.losses.size(), full.losses.size());
      // The same updates, reduced in another grouping (reduce-scatter or
      // all-reduce, accumulated sharded or not): the losses agree to the
      // rounding of a mean over N = 2 ranks x 2 micro-batches x 4 x 32 tokens,
      // 2 N u relative (tests/sharding/parity.h, Note [Parity bounds]).
      const double n = 2 * 2 * 4 * 32;
      for (size_t i = 0; i < full.losses.size(); ++i) {
        EXPECT_NEAR(got.losses[i], full.losses[i], 2 * n * 0x1p-24 * full.losses[i])
            << ShardingStrategyName(s) << " no_sync " << no_sync << " step " << i;
      }
    }
  }
  // fp16 with dynamic loss scaling (overflow check, unscaling) under ZeRO-1.
  TrainOptions f16 = base;
  f16.sharding.strategy = ShardingStrategy::kShardOptimizer;
  f16.sharding.mixed_precision.param_dtype = DType::kF16;
  f16.loss_scaling = true;
  const TrainSummary low = Train(f16, 2);
  ASSERT_EQ(low.losses.size(), full.losses.size());
  for (size_t i = 0; i < full.losses.size(); ++i) EXPECT_NEAR(low.losses[i], full.losses[i], 0.03 * full.losses[i]);
  EXPECT_EQ(low.final_loss_scale, 65536.0);
}

TEST(TrainGpt, SizeWrapPolicyWithTiedEmbeddingsTrainsLikeBlocks) {
  // --auto_wrap=size:3000 splits transformer.wte from lm_head (tied): the
  // matrix lives in the root's unit (Note [Tied parameters]) and the run
  // computes what wrapping by block does. Only the grad-norm clipping's
  // partial sums group differently, so the losses agree to the rounding of a
  // mean over the step's N = 2 ranks x 4 x 32 tokens, 2 N u relative.
  TrainOptions blocks = Small();
  blocks.steps = 6;
  TrainOptions by_size = blocks;
  by_size.sharding.wrap = WrapPolicy::BySize(3000);
  const TrainSummary a = Train(blocks, 2), b = Train(by_size, 2);
  ASSERT_EQ(b.losses.size(), a.losses.size());
  const double n = 2 * 4 * 32;
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_NEAR(b.losses[i], a.losses[i], 2 * n * 0x1p-24 * a.losses[i]) << "step " << i;
  }
}

TEST(TrainGpt, ForcedOverflowSkipsTheStepEverywhereAndHalvesTheScale) {
  TrainOptions o = Small();
  o.sharding.mixed_precision.param_dtype = DType::kF16;
  o.loss_scaler.hysteresis = 1;
  o.inject_inf_at_step = 3;  // rank 0 only
  const TrainSummary s = Train(o, 2);
  EXPECT_EQ(s.skipped_steps, 1);
  EXPECT_EQ(s.final_loss_scale, 32768.0);
  // The skipped step changed nothing, so step 4 sees the parameters of step 3.
  ASSERT_EQ(s.losses.size(), 12u);
  TrainOptions clean = Small();
  clean.sharding.mixed_precision.param_dtype = DType::kF16;
  const TrainSummary c = Train(clean, 2);
  EXPECT_EQ(s.losses[3], c.losses[3]);
  EXPECT_TRUE(std::isfinite(s.losses.back()));
  EXPECT_LT(s.losses.back(), s.losses.front());
}

TEST(TrainGpt, ResumeContinuesBitwiseInBothFormatsAndAsync) {
  const TrainSummary straight = Train(Small(), 2);
  for (const std::string type : {"sharded", "full"}) {
    for (bool async : {false, true}) {
      TrainOptions first = Small();
      first.work_dir = ::testing::TempDir() + "/train_resume_" + type + (async ? "_async" : "");
      std::system(("rm -rf " + first.work_dir).c_str());
      first.steps = 6;
      first.save_every = 3;
      first.state_dict_type = type;
      first.async_save = async;
      first.keep_last = 1;
      const TrainSummary a = Train(first, 2);
      TrainOptions second = Small();  // the same run, told to go to step 12
      second.work_dir = first.work_dir;
      second.resume = "auto";
      const TrainSummary b = Train(second, 2);
      EXPECT_EQ(b.start_step, 6);
      std::vector<double> joined = a.losses;
      joined.insert(joined.end(), b.losses.begin(), b.losses.end());
      // Small() fixes the schedule (decay over 12 steps) whatever `steps` is,
      // so 6 + 6 steps are the straight 12, bit for bit.
      EXPECT_EQ(joined, straight.losses) << type << (async ? " async" : "");
    }
  }
}

// keep_last holds during the run, not only at its end: a thread watches the
// work dir while 8 steps save after every step with keep_last 2. At any
// moment it may hold the 2 kept checkpoints and the one being written
// (step-<n>.tmp, or step-<n> complete before the older ones are removed).
// Async saves were pruned only after the last step, so the watcher saw up to
// 8 then.
TEST(TrainGpt, KeepLastHoldsThroughoutTheRun) {
  for (bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "sync");
    TrainOptions o = Small();
    o.work_dir = ::testing::TempDir() + (async ? "/train_keep_last_async" : "/train_keep_last");
    std::filesystem::remove_all(o.work_dir);
    std::filesystem::create_directories(o.work_dir);
    // What a save killed midway by an earlier run left: removed at the start.
    std::filesystem::create_directories(o.work_dir + "/step-000099.tmp");
    o.steps = 8;
    o.save_every = 1;
    o.keep_last = 2;
    o.async_save = async;
    auto checkpoints = [&](bool complete_only) {
      std::vector<std::string> names;
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(o.work_dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("step-", 0) != 0) continue;
        if (complete_only && !std::filesystem::exists(e.path() / "checkpoint.json", ec)) continue;
        names.push_back(name);
      }
      std::sort(names.begin(), names.end());
      return names;
    };
    std::atomic<bool> done{false};
    size_t most = 0;
    std::vector<std::string> at_most;
    int polls = 0;
    std::thread watcher([&] {
      while (!done.load()) {
        const std::vector<std::string> now = checkpoints(false);
        if (now.size() > most) {
          most = now.size();
          at_most = now;
        }
        ++polls;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    const TrainSummary s = Train(o, 2);
    done = true;
    watcher.join();
    EXPECT_GT(polls, 10);  // it did watch the run
    EXPECT_LE(most, 3u) << absl::StrJoin(at_most, " ");
    EXPECT_EQ(s.last_checkpoint, o.work_dir + "/step-000008");
    EXPECT_EQ(checkpoints(false), (std::vector<std::string>{"step-000007", "step-000008"}));
  }
}

TEST(TrainGpt, NvmeOffloadEqualsHostOffloadAndResumesFromItsCheckpoints) {
  TrainOptions host = Small();
  host.sharding.offload = {.params = true, .grads = true, .optimizer = true};
  const TrainSummary straight = Train(host, 2);
  const std::string nvme_dir = ::testing::TempDir() + "/train_nvme_swap";
  std::system(("rm -rf " + nvme_dir + " && mkdir -p " + nvme_dir).c_str());
  TrainOptions nvme = Small();
  OffloadPolicy& off = nvme.sharding.offload;
  off.nvme_optimizer = off.nvme_params = true;
  off.optimizer_nvme = {.path = nvme_dir, .buffer_count = 2};
  off.param_nvme = {.path = nvme_dir, .buffer_count = 2};
  EXPECT_EQ(Train(nvme, 2).losses, straight.losses);
  // Checkpoints of an NVMe-offloaded run, and a resume into one.
  TrainOptions first = nvme;
  first.work_dir = ::testing::TempDir() + "/train_nvme_resume";
  std::system(("rm -rf " + first.work_dir).c_str());
  first.steps = 6;
  first.save_every = 3;
  const TrainSummary a = Train(first, 2);
  TrainOptions second = nvme;
  second.work_dir = first.work_dir;
  second.resume = "auto";
  const TrainSummary b = Train(second, 2);
  EXPECT_EQ(b.start_step, 6);
  std::vector<double> joined = a.losses;
  joined.insert(joined.end(), b.losses.begin(), b.losses.end());
  EXPECT_EQ(joined, straight.losses);
}

// data.tokenizer "gpt2": the text is encoded with GPT-2's BPE (exact against
// golden ids in //tests/data:gpt2_bpe_test) and the sample is decoded to text.
// The first loss is that of near-uniform logits over the padded vocabulary V:
// ln_f leaves unit-variance features of n_embd = 32, the tied lm_head's weights
// are N(0, 0.02^2), so each logit has std s = 0.02 sqrt(32) = 0.113 and the
// expected loss is ln V + s^2/2 = ln V + 0.0064, give or take the mean of the
// targets' logits over 2 ranks x 4 x 32 tokens (std s / 16 = 0.007). 0.1 is
// ten times that.
TEST(TrainGpt, Gpt2TokenizerEncodesTheTextAndDecodesTheSample) {
  TrainOptions o = Small();
  o.tokenizer = "gpt2";
  o.model.vocab_size = 50304;  // 50257 padded to a multiple of 64, as nanoGPT does
  o.steps = 2;
  o.eval_iters = 1;
  o.sample_tokens = 8;
  o.log_file = ::testing::TempDir() + "/gpt2_tokenizer.log";
  const TrainSummary s = Train(o, 2);
  ASSERT_EQ(s.losses.size(), 2u);
  EXPECT_NEAR(s.losses[0], std::log(50304.0), 0.1);
  std::ifstream in(o.log_file);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = log.find("sample (temperature");
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_GT(log.size(), log.find('\n', at) + 1) << "an empty sample";

  o.model.vocab_size = 50000;  // narrower than the tokenizer's 50257 ids
  std::vector<absl::Status> st = RunRanks(1, [&](Communicator& comm) { return RunTraining(o, comm); });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st[0].message().find("expected model.vocab_size >= 50257"), std::string::npos) << st[0];
}

TEST(TrainGpt, BadOptionsAreStatusErrors) {
  TrainOptions o = Small();
  o.data = "data/no_such_file.txt";
  std::vector<absl::Status> st = RunRanks(1, [&](Communicator& comm) { return RunTraining(o, comm); });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kNotFound);
  o = Small();
  o.model.vocab_size = 100;  // the corpus has bytes above 99
  st = RunRanks(1, [&](Communicator& comm) { return RunTraining(o, comm); });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zeroshard
