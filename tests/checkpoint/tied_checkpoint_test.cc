// Tied parameters in files (Note [Tied parameters in files] in
// checkpoint/checkpoint.h), on GPT's lm_head.weight = transformer.wte.weight:
//   - Module::LoadStateDict (the job's --init_from) finds the tie under either
//     name; both present must be equal, else an error naming both;
//   - full checkpoints write every name by default, once with
//     write_tied_once, the tie in the metadata either way; both load back
//     bitwise, at another world size and wrap policy;
//   - a full file whose two names disagree is refused, naming both;
//   - sharded checkpoints and the converter keep the tie.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/tests/sharding/parity.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::TinyConfig;

constexpr char kWte[] = "transformer.wte.weight";
constexpr char kHead[] = "lm_head.weight";

std::string TempDir(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/tied_", ::getpid(), "_", name);
}

std::map<std::string, std::vector<float>> Values(nn::Module& m) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [n, t] : m.StateDict()) out[n] = t.ToVector<float>().value();
  return out;
}

// ================================================================ state dicts (--init_from)

TEST(TiedStateDict, EitherNameLoadsTheTieAndBothMustAgree) {
  auto src = std::make_shared<nn::Gpt>(TinyConfig());
  ASSERT_TRUE(src->Materialize(5).ok());
  const nn::NamedTensors full = src->StateDict();
  for (const char* dropped : {kHead, kWte}) {
    nn::NamedTensors state;
    for (const auto& [n, t] : full) {
      if (n != dropped) state.emplace_back(n, t);
    }
    nn::Gpt dst(TinyConfig());
    absl::StatusOr<nn::LoadStateDictResult> r = dst.LoadStateDict(state, /*strict=*/true);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->missing_keys.empty());
    EXPECT_EQ(Values(dst), Values(*src)) << "without " << dropped;
  }
  // Neither name: both are missing.
  nn::NamedTensors none;
  for (const auto& [n, t] : full) {
    if (n != kHead && n != kWte) none.emplace_back(n, t);
  }
  nn::Gpt dst(TinyConfig());
  absl::StatusOr<nn::LoadStateDictResult> r = dst.LoadStateDict(none, /*strict=*/false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->missing_keys, (std::vector<std::string>{kWte, kHead}));
  // Both, different: an error naming both and the element.
  nn::NamedTensors bad;
  for (const auto& [n, t] : full) {
    if (n != kHead) {
      bad.emplace_back(n, t);
      continue;
    }
    Tensor c = t.Contiguous().value();
    Tensor copy = Tensor::Empty(c.shape(), c.dtype()).value();
    ASSERT_TRUE(copy.CopyFrom(c).ok());
    ASSERT_TRUE(copy.Narrow(0, 3, 1).value().Fill(0.25).ok());
    bad.emplace_back(n, copy);
  }
  r = dst.LoadStateDict(bad, /*strict=*/true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("tied parameter names \"transformer.wte.weight\" and \"lm_head.weight\" are both present with "
                        "different values (element 48: "));
}

// ================================================================ checkpoints

struct Saved {
  std::map<std::string, std::vector<float>> values;  // the model's, by every name
};

// Trains nothing: a model initialised from `seed`, saved to `dir`.
Saved SaveGpt(const std::string& dir, int world, const ShardingOptions& options, const SaveOptions& so) {
  Saved saved;
  std::vector<absl::Status> st = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    auto gpt = std::make_shared<nn::Gpt>(TinyConfig());
    ShardingOptions o = options;
    o.init_seed = 99;
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o));
    ZS_RETURN_IF_ERROR(sharded->SummonFullParams([&]() -> absl::Status {
      if (comm.rank() == 0) saved.values = Values(*gpt);
      return absl::OkStatus();
    }));
    return SaveCheckpoint(dir, *sharded, nullptr, TrainingState{.step = 1}, so);
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
  return saved;
}

absl::StatusOr<std::map<std::string, std::vector<float>>> LoadGpt(const std::string& dir, int world,
                                                                  const ShardingOptions& options,
                                                                  const LoadOptions& lo = {}) {
  std::map<std::string, std::vector<float>> got;
  std::vector<absl::Status> st = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    auto gpt = std::make_shared<nn::Gpt>(TinyConfig());
    ShardingOptions o = options;
    o.init_seed = 1;  // other values than the saved ones
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o));
    ZS_RETURN_IF_ERROR(LoadCheckpoint(dir, *sharded, nullptr, lo).status());
    return sharded->SummonFullParams([&]() -> absl::Status {
      if (comm.rank() == 0) got = Values(*gpt);
      return absl::OkStatus();
    });
  });
  for (const absl::Status& s : st) ZS_RETURN_IF_ERROR(s);
  return got;
}

ShardingOptions Wrap(WrapPolicy w) {
  ShardingOptions o;
  o.wrap = std::move(w);
  return o;
}

std::map<std::string, std::string> TiedOf(const std::string& file) {
  SafetensorsFile f = SafetensorsFile::Open(file).value();
  auto it = f.metadata().find(std::string(kTiedParametersKey));
  if (it == f.metadata().end()) return {};
  return nlohmann::json::parse(it->second).get<std::map<std::string, std::string>>();
}

TEST(TiedCheckpoint, FullWritesEveryNameOrOnceAndRecordsTheTie) {
  const std::map<std::string, std::string> tie = {{kHead, kWte}};
  for (bool once : {false, true}) {
    SCOPED_TRACE(once ? "write_tied_once" : "every name");
    const std::string dir = TempDir(once ? "full_once" : "full_both");
    const Saved saved = SaveGpt(dir, 2, Wrap(WrapPolicy::ByType({"Block"})),
                                {.type = StateDictType::kFull, .write_tied_once = once});
    SafetensorsFile f = SafetensorsFile::Open(dir + "/model.safetensors").value();
    EXPECT_TRUE(f.Contains(kWte));
    EXPECT_EQ(f.Contains(kHead), !once);
    EXPECT_EQ(TiedOf(dir + "/model.safetensors"), tie);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    // Loads back bitwise, at another world size and a policy that splits the tie.
    for (int world : {1, 3}) {
      absl::StatusOr<std::map<std::string, std::vector<float>>> got = LoadGpt(dir, world, Wrap(WrapPolicy::BySize(500)));
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, saved.values) << "world " << world;
    }
  }
}

TEST(TiedCheckpoint, FullFileWhoseNamesDisagreeIsRefused) {
  const std::string dir = TempDir("full_disagree");
  SaveGpt(dir, 1, Wrap(WrapPolicy::None()), {.type = StateDictType::kFull});
  // Rewrite the model file with lm_head.weight changed (same size; checksums off).
  const std::string path = dir + "/model.safetensors";
  SafetensorsFile f = SafetensorsFile::Open(path).value();
  SafetensorsTensors tensors;
  for (const SafetensorsEntry& e : f.entries()) {
    const std::string& name = e.name;
    Tensor t = f.Read(name).value();
    if (name == kHead) { ASSERT_TRUE(t.Narrow(0, 31, 1).value().Fill(1.5).ok()); }
    tensors.emplace_back(name, t);
  }
  const std::map<std::string, std::string> metadata = f.metadata();
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
  absl::StatusOr<std::map<std::string, std::vector<float>>> got =
      LoadGpt(dir, 2, Wrap(WrapPolicy::BySize(500)), {.verify_checksums = false});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr("tied parameter names \"transformer.wte.weight\" and \"lm_head.weight\" are both present with "
                        "different values"));
}

TEST(TiedCheckpoint, ShardedAndConvertedKeepTheTie) {
  const std::string dir = TempDir("sharded");
  const Saved saved = SaveGpt(dir, 2, Wrap(WrapPolicy::BySize(128)), {.type = StateDictType::kSharded});
  absl::StatusOr<std::map<std::string, std::vector<float>>> got = LoadGpt(dir, 3, Wrap(WrapPolicy::ByType({"Block"})));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, saved.values);
  const std::string full = TempDir("converted");
  ASSERT_TRUE(ConvertShardedToFull(dir, full).ok());
  SafetensorsFile f = SafetensorsFile::Open(full + "/model.safetensors").value();
  EXPECT_TRUE(f.Contains(kWte));
  EXPECT_TRUE(f.Contains(kHead));
  EXPECT_EQ(TiedOf(full + "/model.safetensors"), (std::map<std::string, std::string>{{kHead, kWte}}));
  got = LoadGpt(full, 1, Wrap(WrapPolicy::None()));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, saved.values);
}

}  // namespace
}  // namespace zeroshard
