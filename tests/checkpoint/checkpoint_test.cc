// Checkpoints: exact resume (bitwise) in both formats and with async saves;
// re-sharding to other world sizes and strategies; faults (a save killed
// midway, truncation, corruption, missing files, mismatched models); the
// offline converter; retention; PyTorch-compatible names.
#include "zeroshard/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/checkpoint/manifest.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/tests/sharding/parity.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::BlockOptions;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::TinyConfig;
using ::zeroshard::testing::TinyData;

struct RunConfig {
  int world = 2;
  ShardingOptions options = BlockOptions(ShardingStrategy::kFullShard);
  optim::OptimizerKind optimizer = optim::OptimizerKind::kAdamW;
};

struct Outcome {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;
  absl::Status status;
  int64_t resumed_step = -1;
};

// Trains steps [begin, end): optionally loading `load` first (its step must be
// `begin`) and saving to `save` at the end.
Outcome Train(const RunConfig& run, int begin, int end, const std::string& load = "", const std::string& save = "",
              SaveOptions save_options = {}, bool async = false, LoadOptions load_options = {}) {
  Outcome out;
  std::vector<absl::Status> st = RunRanks(run.world, [&](Communicator& comm) -> absl::Status {
    auto gpt = std::make_shared<nn::Gpt>(TinyConfig());
    ShardingOptions o = run.options;
    o.init_seed = 42;
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o));
    optim::OptimizerOptions oo{.kind = run.optimizer, .lr = 1e-2, .weight_decay = 0.1};
    oo.sgd.momentum = 0.9;
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt, optim::ShardedOptimizer::Create(*sharded, oo));
    if (!load.empty()) {
      ZS_ASSIGN_OR_RETURN(LoadResult r, LoadCheckpoint(load, *sharded, &opt, load_options));
      if (comm.rank() == 0) out.resumed_step = r.state.step;
    }
    const TokenData data = TinyData();
    const int per_rank = 12 / comm.size();
    for (int step = begin; step < end; ++step) {
      ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = step, .rank = comm.rank(), .world_size = comm.size(),
                                                  .batch_size = per_rank, .block_size = 8}));
      ZS_ASSIGN_OR_RETURN(nn::GptOutput y, gpt->Forward(b.inputs, b.targets));
      ZS_RETURN_IF_ERROR(autograd::Backward(y.loss));
      ZS_RETURN_IF_ERROR(opt.Step(1e-2));
      ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
      ZS_ASSIGN_OR_RETURN(Tensor l, Tensor::Full({1}, y.loss.value().Item().value(), DType::kF32));
      ZS_RETURN_IF_ERROR(comm.AllReduce(l, ReduceOp::kAvg));
      if (comm.rank() == 0) out.losses.push_back(l.Item().value());
    }
    if (!save.empty()) {
      const TrainingState state{.step = end, .config = "{\"test\": true}"};
      if (async) {
        AsyncCheckpointer saver;
        ZS_RETURN_IF_ERROR(saver.Start(save, *sharded, &opt, state, save_options));
        ZS_RETURN_IF_ERROR(saver.Wait());
        ZS_RETURN_IF_ERROR(comm.Barrier());  // every rank's save finished before anyone loads
      } else {
        ZS_RETURN_IF_ERROR(SaveCheckpoint(save, *sharded, &opt, state, save_options));
      }
    }
    return sharded->SummonFullParams([&]() -> absl::Status {
      if (comm.rank() != 0) return absl::OkStatus();
      for (auto& [n, v] : gpt->NamedParameters()) {
        ZS_ASSIGN_OR_RETURN(out.params[n], v.value().ToVector<float>());
      }
      return absl::OkStatus();
    });
  });
  out.status = absl::OkStatus();
  for (const absl::Status& s : st) {
    if (!s.ok() && out.status.ok()) out.status = s;
  }
  return out;
}

std::string TempDir(const std::string& name) {
  const std::string d = absl::StrCat(::testing::TempDir(), "/ckpt_", ::getpid(), "_", name);
  return d;
}

std::vector<double> Concat(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> c = a;
  c.insert(c.end(), b.begin(), b.end());
  return c;
}

TEST(Checkpoint, ExactResumeIsBitwiseInBothFormatsAndAsync) {
  const RunConfig run;
  const Outcome straight = Train(run, 0, 6);
  ASSERT_TRUE(straight.status.ok()) << straight.status;
  for (StateDictType type : {StateDictType::kSharded, StateDictType::kFull}) {
    for (bool async : {false, true}) {
      const std::string dir = TempDir(absl::StrCat("resume_", StateDictTypeName(type), async));
      const Outcome first = Train(run, 0, 3, "", dir, {.type = type, .file = {.fsync = false}}, async);
      ASSERT_TRUE(first.status.ok()) << first.status;
      const Outcome second = Train(run, 3, 6, dir);
      ASSERT_TRUE(second.status.ok()) << second.status;
      EXPECT_EQ(second.resumed_step, 3);
      EXPECT_EQ(Concat(first.losses, second.losses), straight.losses) << StateDictTypeName(type) << " async " << async;
      EXPECT_EQ(second.params, straight.params) << StateDictTypeName(type) << " async " << async;
    }
  }
}

// NVMe offload: optimizer state and master shards in swap files, one buffer
// each (every unit is read back from disk). Saves stream them unit by unit.
RunConfig NvmeRun(const std::string& nvme_dir) {
  RunConfig run;
  ::mkdir(nvme_dir.c_str(), 0755);
  OffloadPolicy& off = run.options.offload;
  off.nvme_optimizer = off.nvme_params = true;
  off.optimizer_nvme = {.path = nvme_dir, .buffer_count = 1};
  off.param_nvme = {.path = nvme_dir, .buffer_count = 1};
  off.aio.block_size = 8192;
  return run;
}

TEST(Checkpoint, NvmeOffloadedStateSavesAndLoadsInBothFormatsAndAcrossOffloads) {
  const RunConfig plain;
  const RunConfig nvme = NvmeRun(TempDir("nvme_swap"));
  const Outcome straight = Train(plain, 0, 6);
  ASSERT_TRUE(straight.status.ok()) << straight.status;
  for (StateDictType type : {StateDictType::kSharded, StateDictType::kFull}) {
    for (bool async : {false, true}) {
      SCOPED_TRACE(absl::StrCat(StateDictTypeName(type), async ? ", async" : ""));
      const std::string dir = TempDir(absl::StrCat("nvme_", StateDictTypeName(type), async));
      const Outcome first = Train(nvme, 0, 3, "", dir, {.type = type, .file = {.fsync = false}}, async);
      ASSERT_TRUE(first.status.ok()) << first.status;
      // Into an NVMe-offloaded run and into a plain one: both continue exactly.
      for (const RunConfig* into : {&nvme, &plain}) {
        const Outcome second = Train(*into, 3, 6, dir);
        ASSERT_TRUE(second.status.ok()) << second.status;
        EXPECT_EQ(Concat(first.losses, second.losses), straight.losses);
        EXPECT_EQ(second.params, straight.params);
      }
    }
  }
  // A plain run's checkpoint into an NVMe-offloaded run.
  const std::string dir = TempDir("plain_into_nvme");
  const Outcome first = Train(plain, 0, 3, "", dir, {.file = {.fsync = false}});
  const Outcome second = Train(nvme, 3, 6, dir);
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_EQ(Concat(first.losses, second.losses), straight.losses);
  EXPECT_EQ(second.params, straight.params);
}

TEST(Checkpoint, SgdMomentumStateResumesExactly) {
  RunConfig run;
  run.optimizer = optim::OptimizerKind::kSgd;
  const Outcome straight = Train(run, 0, 4);
  const std::string dir = TempDir("sgd");
  ASSERT_TRUE(Train(run, 0, 2, "", dir, {.file = {.fsync = false}}).status.ok());
  const Outcome resumed = Train(run, 2, 4, dir);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status;
  EXPECT_EQ(resumed.params, straight.params);
}

// Note [Resharding is exact]: a reshard moves numbers between shards and never
// computes with them, so it is checked bitwise, not within a tolerance. Two
// independent paths give the same state: LoadCheckpoint's re-sharding (read at
// another world size, strategy or wrap policy, then written out full at once)
// and the offline converter (ConvertShardedToFull). Continuing from either at
// the same target configuration is then the same computation, so losses and
// parameters are compared with ==. What is NOT compared here is a continuation
// at world 3 against one at world 4: those differ by float rounding (another
// batch split, another reduction order, and Eigen's GEMM rounds differently on
// AVX2 and AVX-512), which is the sharded-parity tests' subject
// (tests/sharding/parity.h, bounds derived there).

// Every tensor of a full checkpoint's model and optimizer files, by "file:name",
// as dtype, shape and raw bytes.
struct StoredTensor {
  DType dtype;
  Shape shape;
  std::string bytes;
  bool operator==(const StoredTensor& o) const { return dtype == o.dtype && shape == o.shape && bytes == o.bytes; }
};
std::map<std::string, StoredTensor> ReadFullState(const std::string& dir) {
  std::map<std::string, StoredTensor> out;
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    auto f = SafetensorsFile::Open(absl::StrCat(dir, "/", file));
    EXPECT_TRUE(f.ok()) << f.status();
    if (!f.ok()) continue;
    for (const SafetensorsEntry& e : f->entries()) {
      auto t = f->Read(e.name);
      EXPECT_TRUE(t.ok()) << t.status();
      if (!t.ok()) continue;
      out[absl::StrCat(file, ":", e.name)] =
          StoredTensor{t->dtype(), t->shape(), std::string(static_cast<const char*>(t->raw_data()), t->nbytes())};
    }
  }
  return out;
}

// Bitwise equality of two full checkpoints' tensors, naming the first few that differ.
void ExpectSameFullState(const std::string& got_dir, const std::string& want_dir, const std::string& what) {
  SCOPED_TRACE(what);
  const std::map<std::string, StoredTensor> got = ReadFullState(got_dir), want = ReadFullState(want_dir);
  ASSERT_FALSE(want.empty());
  std::vector<std::string> differ;
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end() || !(it->second == w)) differ.push_back(name);
  }
  for (const auto& [name, g] : got) {
    if (!want.count(name)) differ.push_back(absl::StrCat(name, " (unexpected)"));
  }
  EXPECT_TRUE(differ.empty()) << differ.size() << " of " << want.size() << " tensors differ, e.g. " << differ[0];
  // Adam's bias correction counts steps: the count travels in the manifest.
  auto manifest = [](const std::string& dir) {
    std::ifstream f(dir + "/checkpoint.json");
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    absl::StatusOr<CheckpointManifest> m = ParseCheckpointManifest(text, dir);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? m->optimizer_step : int64_t{-1};
  };
  EXPECT_EQ(manifest(got_dir), manifest(want_dir));
}

// Loads `from` into `into` and writes it out full at once (no step taken), then
// checks that state against `reference` (a full checkpoint of the same step)
// bitwise; then continues steps [3, 6) from `from` and from `reference` at
// `into` and checks the two continuations are the same.
void ExpectExactReshard(const std::string& from, const std::string& reference, const RunConfig& into,
                        const std::string& what) {
  SCOPED_TRACE(what);
  const std::string out = TempDir(absl::StrCat("reshard_out_", std::hash<std::string>()(what)));
  std::system(absl::StrCat("rm -rf ", out).c_str());
  const Outcome loaded = Train(into, 3, 3, from, out, {.type = StateDictType::kFull, .file = {.fsync = false}});
  ASSERT_TRUE(loaded.status.ok()) << loaded.status;
  EXPECT_EQ(loaded.resumed_step, 3);
  ExpectSameFullState(out, reference, "state right after the load");
  const Outcome resharded = Train(into, 3, 6, from);
  const Outcome via_full = Train(into, 3, 6, reference);
  ASSERT_TRUE(resharded.status.ok()) << resharded.status;
  ASSERT_TRUE(via_full.status.ok()) << via_full.status;
  EXPECT_EQ(resharded.losses, via_full.losses);
  EXPECT_EQ(resharded.params, via_full.params);
}

TEST(Checkpoint, ReshardsToOtherWorldSizesAndStrategiesExactly) {
  RunConfig four;
  four.world = 4;
  const std::string sharded4 = TempDir("sharded4"), reference = TempDir("sharded4_as_full");
  ASSERT_TRUE(Train(four, 0, 3, "", sharded4, {.type = StateDictType::kSharded, .file = {.fsync = false}}).status.ok());
  ZS_ASSERT_OK(ConvertShardedToFull(sharded4, reference, {.fsync = false}));
  RunConfig two;
  two.world = 2;
  ExpectExactReshard(sharded4, reference, two, "sharded 4 -> 2");
  RunConfig three;
  three.world = 3;
  ExpectExactReshard(sharded4, reference, three, "sharded 4 -> 3");
  RunConfig no_shard;
  no_shard.world = 2;
  no_shard.options = BlockOptions(ShardingStrategy::kNoShard);
  ExpectExactReshard(sharded4, reference, no_shard, "sharded 4 FULL_SHARD -> 2 NO_SHARD");
  RunConfig whole;  // a different wrap policy: one unit
  whole.world = 3;
  whole.options.wrap = WrapPolicy::None();
  ExpectExactReshard(sharded4, reference, whole, "sharded 4 by blocks -> 3 in one unit");
  // Full at 2, resumed at 3: the full checkpoint is its own reference.
  const std::string full2 = TempDir("full2");
  ASSERT_TRUE(Train(two, 0, 3, "", full2, {.type = StateDictType::kFull, .file = {.fsync = false}}).status.ok());
  ExpectExactReshard(full2, full2, three, "full 2 -> 3");
}

TEST(Checkpoint, ShardOptimizerResumesExactlyAndReshardsFromAndToOtherStrategies) {
  // ZeRO-1 (SHARD_OPTIMIZER) keeps the optimizer state and master weights in
  // the same slices as FULL_SHARD, so its checkpoints are the same layout.
  RunConfig zero1;
  zero1.world = 2;
  zero1.options = BlockOptions(ShardingStrategy::kShardOptimizer);
  const Outcome straight = Train(zero1, 0, 6);
  ASSERT_TRUE(straight.status.ok()) << straight.status;
  for (StateDictType type : {StateDictType::kSharded, StateDictType::kFull}) {
    const std::string dir = TempDir(absl::StrCat("zero1_", StateDictTypeName(type)));
    const Outcome first = Train(zero1, 0, 3, "", dir, {.type = type, .file = {.fsync = false}});
    ASSERT_TRUE(first.status.ok()) << first.status;
    const Outcome second = Train(zero1, 3, 6, dir);
    ASSERT_TRUE(second.status.ok()) << second.status;
    EXPECT_EQ(Concat(first.losses, second.losses), straight.losses) << StateDictTypeName(type);
    EXPECT_EQ(second.params, straight.params) << StateDictTypeName(type);
  }
  // FULL_SHARD at 4 -> SHARD_OPTIMIZER at 3 (Note [Resharding is exact]).
  RunConfig four;
  four.world = 4;
  const std::string sharded4 = TempDir("zero1_from_full4"), reference4 = TempDir("zero1_from_full4_as_full");
  ASSERT_TRUE(Train(four, 0, 3, "", sharded4, {.type = StateDictType::kSharded, .file = {.fsync = false}}).status.ok());
  ZS_ASSERT_OK(ConvertShardedToFull(sharded4, reference4, {.fsync = false}));
  RunConfig zero1_three = zero1;
  zero1_three.world = 3;
  ExpectExactReshard(sharded4, reference4, zero1_three, "sharded 4 FULL_SHARD -> 3 SHARD_OPTIMIZER");
  // SHARD_OPTIMIZER at 2 -> FULL_SHARD at 3 and SHARD_GRAD_OP at 4.
  const std::string zero1_dir = TempDir("zero1_to_others"), reference2 = TempDir("zero1_to_others_as_full");
  ASSERT_TRUE(Train(zero1, 0, 3, "", zero1_dir, {.type = StateDictType::kSharded, .file = {.fsync = false}}).status.ok());
  ZS_ASSERT_OK(ConvertShardedToFull(zero1_dir, reference2, {.fsync = false}));
  RunConfig full3;
  full3.world = 3;
  ExpectExactReshard(zero1_dir, reference2, full3, "sharded 2 SHARD_OPTIMIZER -> 3 FULL_SHARD");
  RunConfig grad_op4;
  grad_op4.world = 4;
  grad_op4.options = BlockOptions(ShardingStrategy::kShardGradOp);
  ExpectExactReshard(zero1_dir, reference2, grad_op4, "sharded 2 SHARD_OPTIMIZER -> 4 SHARD_GRAD_OP");
}

TEST(Checkpoint, FullCheckpointHasPyTorchNamesAndTheConverterMatchesIt) {
  const RunConfig run;
  const std::string sharded = TempDir("conv_sharded"), full = TempDir("conv_full"), converted = TempDir("conv_out");
  ASSERT_TRUE(Train(run, 0, 2, "", sharded, {.type = StateDictType::kSharded, .file = {.fsync = false}}).status.ok());
  ASSERT_TRUE(Train(run, 0, 2, "", full, {.type = StateDictType::kFull, .file = {.fsync = false}}).status.ok());
  ZS_ASSERT_OK(ConvertShardedToFull(sharded, converted, {.fsync = false}));
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile direct, SafetensorsFile::Open(full + "/model.safetensors"));
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile conv, SafetensorsFile::Open(converted + "/model.safetensors"));
  EXPECT_TRUE(direct.Contains("transformer.wte.weight"));
  EXPECT_TRUE(direct.Contains("lm_head.weight"));  // the tied weight under both names
  EXPECT_TRUE(direct.Contains("transformer.h.1.mlp.c_proj.bias"));
  for (const SafetensorsEntry& e : direct.entries()) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor a, direct.Read(e.name));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor b, conv.Read(e.name));
    EXPECT_EQ(a.ToVector<float>().value(), b.ToVector<float>().value()) << e.name;
  }
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile opt, SafetensorsFile::Open(converted + "/optimizer.safetensors"));
  EXPECT_TRUE(opt.Contains("transformer.h.0.attn.c_attn.weight.exp_avg"));
  // The converted checkpoint resumes like the original.
  const Outcome a = Train(run, 2, 4, full), b = Train(run, 2, 4, converted);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.params, b.params);
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousCheckpointLoadable) {
  const RunConfig run;
  const std::string dir = TempDir("killed");
  ASSERT_TRUE(Train(run, 0, 2, "", dir, {.file = {.fsync = false}}).status.ok());
  const Outcome reference = Train(run, 2, 3, dir);
  for (StateDictType type : {StateDictType::kSharded, StateDictType::kFull}) {
    // The same directory, a save that dies after 1000 bytes of some file.
    const Outcome failed = Train(run, 0, 3, "", dir, {.type = type, .file = {.fsync = false, .fail_after_bytes = 1000}});
    // The hook is a full disk (Note [Full disk] in checkpoint/atomic_file.h);
    // every rank fails, and the first failing rank is named.
    EXPECT_THAT(failed.status, StatusIs(absl::StatusCode::kResourceExhausted,
                                        ::testing::AllOf(HasSubstr("rank 0: "), HasSubstr(".safetensors.tmp."),
                                              HasSubstr("No space left on device (injected: fail_after_bytes)"))));
    const Outcome again = Train(run, 2, 3, dir);
    ASSERT_TRUE(again.status.ok()) << again.status;
    EXPECT_EQ(again.params, reference.params);
    struct stat st;
    EXPECT_NE(::stat((dir + ".tmp").c_str(), &st), 0) << "the temporary directory was left behind";
  }
}

TEST(Checkpoint, CorruptionsAreNamedOnEveryRank) {
  const RunConfig run;
  const std::string good = TempDir("good");
  ASSERT_TRUE(Train(run, 0, 1, "", good, {.file = {.fsync = false}}).status.ok());
  auto copy = [&](const std::string& name) {
    const std::string d = TempDir(name);
    std::system(absl::StrCat("rm -rf ", d, " && cp -r ", good, " ", d).c_str());
    return d;
  };
  // Truncated shard file.
  const std::string truncated = copy("truncated");
  ASSERT_EQ(::truncate((truncated + "/rank_1.safetensors").c_str(), 100), 0);
  EXPECT_THAT(Train(run, 1, 2, truncated).status,
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("'rank_1.safetensors' has 100 bytes, expected")));
  // A flipped byte in the data.
  const std::string flipped = copy("flipped");
  {
    std::fstream f(flipped + "/rank_0.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_THAT(Train(run, 1, 2, flipped).status,
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("'rank_0.safetensors' has CRC-32C")));
  // A missing rank file.
  const std::string missing = copy("missing");
  ::unlink((missing + "/rank_1.safetensors").c_str());
  EXPECT_THAT(Train(run, 1, 2, missing).status,
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("file 'rank_1.safetensors' is missing")));
  // No manifest: not a (complete) checkpoint.
  const std::string incomplete = copy("incomplete");
  ::unlink((incomplete + "/checkpoint.json").c_str());
  EXPECT_THAT(Train(run, 1, 2, incomplete).status, StatusIs(absl::StatusCode::kNotFound, HasSubstr("checkpoint.json")));
  // A different model: names and shapes do not match.
  std::vector<absl::Status> st = RunRanks(2, [&](Communicator& comm) -> absl::Status {
    nn::GptConfig c = TinyConfig();
    c.n_layer = 3;
    auto gpt = std::make_shared<nn::Gpt>(c);
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, BlockOptions(ShardingStrategy::kFullShard)));
    EXPECT_THAT(LoadCheckpoint(good, *sharded, nullptr),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing keys [transformer.h.2.ln_1.weight")));
    ZS_ASSIGN_OR_RETURN(LoadResult loose, LoadCheckpoint(good, *sharded, nullptr, {.strict = false}));
    EXPECT_EQ(loose.missing_keys.size(), 12u);
    nn::GptConfig wide = TinyConfig();
    wide.n_embd = 32;
    auto other = std::make_shared<nn::Gpt>(wide);
    ZS_ASSIGN_OR_RETURN(auto sharded2, ShardedModel::Create(other, comm, BlockOptions(ShardingStrategy::kFullShard)));
    absl::StatusOr<LoadResult> wrong = LoadCheckpoint(good, *sharded2, nullptr);
    EXPECT_THAT(wrong, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("in the checkpoint, expected [")));
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
}

TEST(Checkpoint, RetentionAndLatest) {
  const std::string work = TempDir("work");
  std::system(absl::StrCat("rm -rf ", work).c_str());
  const RunConfig run;
  for (int step : {1, 2, 3, 4}) {
    ASSERT_TRUE(Train(run, step - 1, step, step == 1 ? "" : CheckpointDir(work, step - 1), CheckpointDir(work, step),
                      {.file = {.fsync = false}})
                    .status.ok());
  }
  ::mkdir(CheckpointDir(work, 9).c_str(), 0755);  // incomplete: no manifest
  ZS_ASSERT_OK_AND_ASSIGN(std::string latest, LatestCheckpoint(work));
  EXPECT_EQ(latest, CheckpointDir(work, 4));
  ZS_ASSERT_OK(KeepLastCheckpoints(work, 2));
  struct stat st;
  EXPECT_NE(::stat(CheckpointDir(work, 2).c_str(), &st), 0);
  EXPECT_EQ(::stat(CheckpointDir(work, 3).c_str(), &st), 0);
  EXPECT_EQ(::stat(CheckpointDir(work, 4).c_str(), &st), 0);
  EXPECT_EQ(::stat(CheckpointDir(work, 9).c_str(), &st), 0);  // never deleted: not complete
  EXPECT_THAT(LatestCheckpoint(TempDir("empty_work")), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no complete checkpoint")));
}

// What a save killed midway leaves (issue 26): its step-<n>.tmp directory, a
// checkpoint moved aside (<dir>.old.<pid>) and an atomic file not yet renamed
// (<name>.tmp.<pid>.<suffix>) of a process that is gone. Those go; a complete
// checkpoint, an incomplete one without the .tmp suffix, and anything of a live
// process (this one: an async save in flight) stay.
TEST(Checkpoint, OrphansOfAKilledSaveAreRemoved) {
  const std::string work = TempDir("orphans");
  std::system(absl::StrCat("rm -rf ", work).c_str());
  ZS_ASSERT_OK_AND_ASSIGN(std::vector<std::string> none, RemoveOrphanedSaves(work));  // no dir yet
  EXPECT_TRUE(none.empty());
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // a pid of a process that is gone
  const std::string dead = std::to_string(child), live = std::to_string(::getpid());
  auto make_dir = [&](const std::string& name, bool with_file) {
    ::mkdir(work.c_str(), 0755);
    ASSERT_EQ(::mkdir((work + "/" + name).c_str(), 0755), 0) << name;
    if (with_file) std::ofstream(work + "/" + name + "/checkpoint.json") << "{}";
  };
  make_dir("step-000004", true);                   // complete: kept
  make_dir("step-000009", false);                  // incomplete, not ours to judge: kept
  make_dir("step-000005.tmp", true);               // a save never renamed into place
  make_dir("step-000003.old." + dead, true);       // moved aside by a dead process
  make_dir("step-000006.old." + live, true);       // moved aside by a live one: kept
  std::ofstream(work + "/model.safetensors.tmp." + dead + ".AbC123") << "partial";
  std::ofstream(work + "/model.safetensors.tmp." + live + ".XyZ789") << "being written";
  std::ofstream(work + "/notes.tmp") << "not a save's";  // no pid: kept
  ZS_ASSERT_OK_AND_ASSIGN(std::vector<std::string> removed, RemoveOrphanedSaves(work));
  EXPECT_EQ(removed, (std::vector<std::string>{work + "/model.safetensors.tmp." + dead + ".AbC123",
                                              work + "/step-000003.old." + dead, work + "/step-000005.tmp"}));
  struct stat st;
  for (const std::string& kept : std::vector<std::string>{"step-000004", "step-000009",
                                                           "model.safetensors.tmp." + live + ".XyZ789",
                                                           "step-000006.old." + live, "notes.tmp"}) {
    EXPECT_EQ(::stat((work + "/" + kept).c_str(), &st), 0) << kept;
  }
  for (const std::string& path : removed) EXPECT_NE(::stat(path.c_str(), &st), 0) << path;
  ZS_ASSERT_OK_AND_ASSIGN(std::string latest, LatestCheckpoint(work));
  EXPECT_EQ(latest, work + "/step-000004");
}

TEST(Checkpoint, ModelOnlyLoadAndReviseKeys) {
  const RunConfig run;
  const std::string dir = TempDir("model_only");
  ASSERT_TRUE(Train(run, 0, 2, "", dir, {.type = StateDictType::kFull, .file = {.fsync = false}}).status.ok());
  // Loading with a prefix rule that maps nothing away still works; a rule
  // that renames everything makes every key unexpected.
  const Outcome ok = Train(run, 2, 3, dir, "", {}, false, {.load_optimizer = false});
  ASSERT_TRUE(ok.status.ok()) << ok.status;
  const Outcome renamed = Train(run, 2, 3, dir, "", {}, false, {.revise_keys = {{"^transformer\\.", "model."}}});
  EXPECT_THAT(renamed.status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unexpected keys [model.")));
}

}  // namespace
}  // namespace zeroshard
